//! Discovery documents: legacy (`APIVersions`, `APIGroupList`, `APIGroup`, `APIResourceList`)
//! and aggregated (`apidiscovery.k8s.io/v2` `APIGroupDiscoveryList`) as kubectl, helm and
//! kube-rs request them.

use std::sync::Arc;

use axum::body::Body;
use http::Response;
use serde_json::{Value, json};

use crate::errors::ApiError;
use crate::http::Encoding;
use crate::server::{Req, respond};
use crate::state::State;

const AGG: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// What the Accept header asks of a discovery root.
enum Want {
    Aggregated,
    Plain(Encoding),
}

fn want(req: &Req) -> Result<Want, ApiError> {
    for m in &req.accept {
        match (m.param("as"), m.param("g"), m.param("v")) {
            (Some("APIGroupDiscoveryList"), Some("apidiscovery.k8s.io"), Some("v2")) => return Ok(Want::Aggregated),
            (Some(_), _, _) => continue,
            (None, _, _) => {
                if let Some(e) = Encoding::of(m) {
                    return Ok(Want::Plain(e));
                }
            }
        }
    }
    Err(ApiError::status(
        406,
        "NotAcceptable",
        "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf",
        None,
    ))
}

/// `GET /api`.
pub fn api_root(state: &Arc<State>, req: &Req) -> Result<Response<Body>, ApiError> {
    match want(req)? {
        Want::Aggregated => Ok(aggregated(state, true)),
        Want::Plain(enc) => Ok(respond(
            200,
            &json!({"kind": "APIVersions", "versions": ["v1"],
                    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}]}),
            enc,
            &[],
        )),
    }
}

fn group_entry(name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> =
        versions.iter().map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v})).collect();
    json!({"name": name, "versions": vs, "preferredVersion": vs[0]})
}

/// `GET /apis`.
pub fn apis_root(state: &Arc<State>, req: &Req) -> Result<Response<Body>, ApiError> {
    match want(req)? {
        Want::Aggregated => Ok(aggregated(state, false)),
        Want::Plain(enc) => {
            let groups: Vec<Value> = state.registry.groups().iter().map(|(g, vs)| group_entry(g, vs)).collect();
            Ok(respond(200, &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}), enc, &[]))
        }
    }
}

/// `GET /apis/<group>`.
pub fn group(state: &Arc<State>, req: &Req, group: &str) -> Result<Response<Body>, ApiError> {
    let enc = plain(req)?;
    let (_, vs) = state.registry.groups().into_iter().find(|(g, _)| g == group).ok_or(ApiError::PageNotFound)?;
    let mut e = group_entry(group, &vs);
    e["kind"] = json!("APIGroup");
    e["apiVersion"] = json!("v1");
    Ok(respond(200, &e, enc, &[]))
}

fn plain(req: &Req) -> Result<Encoding, ApiError> {
    match want(req)? {
        Want::Plain(e) => Ok(e),
        Want::Aggregated => Ok(Encoding::Json),
    }
}

/// `GET /api/v1` or `/apis/<group>/<version>`.
pub fn group_version(state: &Arc<State>, req: &Req, group: &str, version: &str) -> Result<Response<Body>, ApiError> {
    let enc = plain(req)?;
    let gv = state.registry.group_version(group, version).ok_or_else(crate::server::not_found_status)?;
    let resources: Vec<Value> = gv.resources.iter().flat_map(|r| r.legacy_entries()).collect();
    let gvs = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    let mut body = json!({"kind": "APIResourceList", "groupVersion": gvs, "resources": resources});
    if !group.is_empty() {
        body["apiVersion"] = json!("v1");
    }
    Ok(respond(200, &body, enc, &[]))
}

fn aggregated(state: &Arc<State>, core: bool) -> Response<Body> {
    let mut items: Vec<Value> = Vec::new();
    for gv in state.registry.group_versions() {
        if gv.group.is_empty() != core {
            continue;
        }
        let version = json!({
            "version": gv.version,
            "resources": gv.resources.iter().map(|r| r.aggregated_entry()).collect::<Vec<_>>(),
            "freshness": "Current",
        });
        match items.iter_mut().find(|i| i["metadata"]["name"].as_str().unwrap_or("") == gv.group) {
            Some(item) => item["versions"].as_array_mut().expect("versions").push(version),
            None => {
                let metadata = if core { json!({}) } else { json!({"name": gv.group}) };
                items.push(json!({"metadata": metadata, "versions": [version]}));
            }
        }
    }
    let body = json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items});
    let mut resp = respond(200, &body, Encoding::Json, &[]);
    resp.headers_mut().insert("Content-Type", http::HeaderValue::from_static(AGG));
    resp
}

/// `GET /openapi/v3`: the group versions with an OpenAPI v3 document, as client-go's
/// OpenAPI v3 root expects.
pub fn openapi_root(state: &Arc<State>) -> Value {
    let mut paths = serde_json::Map::new();
    for gv in state.registry.group_versions() {
        let key = if gv.group.is_empty() {
            format!("api/{}", gv.version)
        } else {
            format!("apis/{}/{}", gv.group, gv.version)
        };
        paths.insert(key.clone(), json!({"serverRelativeURL": format!("/openapi/v3/{key}")}));
    }
    json!({"paths": paths})
}

/// `GET /openapi/v3/<group version>`: a minimal OpenAPI v3 document listing, for each resource,
/// its operations with their `x-kubernetes-group-version-kind` and the query parameters the
/// server supports. That is what kubectl reads to decide that validation (`fieldValidation`)
/// and dry-run happen on the server. It carries no schemas.
pub fn openapi_group_version(state: &Arc<State>, key: &str) -> Option<Value> {
    let (group, version) = match key.split('/').collect::<Vec<_>>().as_slice() {
        ["api", v] => (String::new(), v.to_string()),
        ["apis", g, v] => (g.to_string(), v.to_string()),
        _ => return None,
    };
    let gv = state.registry.group_version(&group, &version)?;
    let prefix = if group.is_empty() { format!("/api/{version}") } else { format!("/apis/{group}/{version}") };
    let params: Vec<Value> = ["fieldValidation", "fieldManager", "dryRun", "force"]
        .iter()
        .map(|p| json!({"name": p, "in": "query", "schema": {"type": "string", "uniqueItems": true}}))
        .collect();
    let mut paths = serde_json::Map::new();
    for r in &gv.resources {
        let gvk = json!({"group": r.group, "version": r.version, "kind": r.kind});
        let op = json!({"x-kubernetes-group-version-kind": gvk, "parameters": params, "responses": {"200": {"description": "OK"}}});
        let item = if r.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", r.resource)
        } else {
            format!("{prefix}/{}/{{name}}", r.resource)
        };
        let collection = if r.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}", r.resource)
        } else {
            format!("{prefix}/{}", r.resource)
        };
        paths.insert(item, json!({"get": op, "put": op, "patch": op, "delete": op}));
        paths.insert(collection, json!({"get": op, "post": op}));
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.36.2"},
        "paths": paths,
        "components": {"schemas": {}},
    }))
}
