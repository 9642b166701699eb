//! The HTTP front: routing of Kubernetes API paths, authentication and impersonation, content
//! negotiation, and encoding of responses.

use std::sync::Arc;

use axum::body::Body;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use serde_json::{Value, json};

use crate::api::{self, Output};
use crate::errors::ApiError;
use crate::http::{self as h, Encoding, MediaRange};
use crate::state::State;

/// Parsed request, as the verb handlers see it.
pub struct Req {
    /// Method.
    pub method: Method,
    /// Decoded query.
    pub query: std::collections::BTreeMap<String, String>,
    /// Headers.
    pub headers: HeaderMap,
    /// Body bytes.
    pub body: Bytes,
    /// Accept header, parsed.
    pub accept: Vec<MediaRange>,
    /// The authenticated (or impersonated) user.
    pub user: crate::rbac::UserInfo,
    /// The authenticated user, when it impersonates `user`.
    pub impersonated_by: Option<String>,
}

impl Req {
    /// A query parameter.
    pub fn q(&self, k: &str) -> Option<&str> {
        self.query.get(k).map(String::as_str)
    }

    /// A header as a string.
    pub fn header(&self, k: &str) -> Option<&str> {
        self.headers.get(k).and_then(|v| v.to_str().ok())
    }
}

/// Where a resource path points.
#[derive(Clone, Debug)]
pub struct Target {
    /// The resource.
    pub rt: Arc<crate::registry::ResourceType>,
    /// Namespace ("" for cluster-scoped or all namespaces).
    pub namespace: String,
    /// Object name, if any.
    pub name: Option<String>,
    /// Subresource, if any.
    pub sub: Option<String>,
    /// Legacy `/watch/` path.
    pub legacy_watch: bool,
}

/// Handle one request.
pub async fn handle(state: Arc<State>, req: Request<Body>) -> Response<Body> {
    state.faults.wait_unpaused().await;
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, 64 << 20).await {
        Ok(b) => b,
        Err(e) => return error_response(&ApiError::bad_request(format!("reading body: {e}")), Encoding::Json),
    };
    let accept = h::parse_accept(parts.headers.get(http::header::ACCEPT).and_then(|v| v.to_str().ok()));
    let user = match crate::auth::authenticate(&state, &parts.headers) {
        Ok(u) => u,
        Err(e) => return error_response(&e, Encoding::Json),
    };
    let impersonated_by = parts
        .headers
        .contains_key("Impersonate-User")
        .then(|| crate::auth::authenticate_token(&state, &parts.headers).map(|u| u.name).unwrap_or_default());
    let req = Req {
        method: parts.method.clone(),
        query: h::parse_query(parts.uri.query()),
        headers: parts.headers.clone(),
        body: bytes,
        accept,
        user,
        impersonated_by,
    };
    let path = parts.uri.path().to_string();
    let enc = req.accept.iter().find_map(Encoding::of).unwrap_or(Encoding::Json);
    let mut response = match route(&state, &req, &path).await {
        Ok(out) => out,
        Err(e) => error_response(&e, enc),
    };
    // API Priority and Fairness classifies every authenticated request (after impersonation,
    // before authorization), and names its flow schema and priority level on the answer.
    let request = crate::flowcontrol::Request::of(&req.method, &path, &req.query);
    let (schema, level) = {
        let txn = state.store.lock();
        let schemas = txn.all("flowcontrol.apiserver.k8s.io/flowschemas");
        let levels = txn.all("flowcontrol.apiserver.k8s.io/prioritylevelconfigurations");
        crate::flowcontrol::classify(&req.user, &request, &schemas, &levels)
    };
    let headers = response.headers_mut();
    for (name, uid) in [("X-Kubernetes-PF-FlowSchema-UID", schema), ("X-Kubernetes-PF-PriorityLevel-UID", level)] {
        if let Ok(v) = HeaderValue::from_str(&uid) {
            headers.insert(name, v);
        }
    }
    response
}

/// Encode an error.
pub fn error_response(e: &ApiError, enc: Encoding) -> Response<Body> {
    match e.body() {
        Some(body) => respond(e.code(), &body, enc, &[]),
        None => Response::builder()
            .status(404)
            .header("Content-Type", "text/plain; charset=utf-8")
            .body(Body::from("404 page not found\n"))
            .expect("response"),
    }
}

/// A JSON/YAML response with extra headers.
pub fn respond(code: u16, body: &Value, enc: Encoding, headers: &[(String, String)]) -> Response<Body> {
    let mut b = Response::builder().status(StatusCode::from_u16(code).unwrap_or(StatusCode::OK));
    b = b.header("Content-Type", enc.content_type());
    for (k, v) in headers {
        if let Ok(v) = HeaderValue::from_str(v) {
            b = b.header(k.as_str(), v);
        }
    }
    b.body(Body::from(h::encode(body, enc))).expect("response")
}

fn segments(path: &str) -> Vec<String> {
    path.split('/').filter(|s| !s.is_empty()).map(h::percent_decode).collect()
}

/// Route one parsed request (also used by the in-process [`crate::client::Client`]).
pub async fn route(state: &Arc<State>, req: &Req, path: &str) -> Result<Response<Body>, ApiError> {
    let segs = segments(path);
    let s: Vec<&str> = segs.iter().map(String::as_str).collect();
    match s.as_slice() {
        ["version"] => Ok(plain_json(version())),
        ["healthz"] | ["livez"] | ["readyz"] => Ok(Response::builder()
            .status(200)
            .header("Content-Type", "text/plain; charset=utf-8")
            .body(Body::from("ok"))
            .expect("response")),
        ["simcluster", "v1", rest @ ..] => crate::control::handle(state, req, rest).await,
        ["openapi", "v3"] => Ok(plain_json(crate::discovery::openapi_root(state))),
        ["openapi", "v3", rest @ ..] => crate::discovery::openapi_group_version(state, &rest.join("/"))
            .map(plain_json)
            .ok_or(ApiError::PageNotFound),
        ["api"] => crate::discovery::api_root(state, req),
        ["apis"] => crate::discovery::apis_root(state, req),
        ["api", v] => {
            if *v == "v1" {
                crate::discovery::group_version(state, req, "", v)
            } else {
                Err(not_found_status())
            }
        }
        ["apis", g] => {
            if state.registry.has_group(g) {
                crate::discovery::group(state, req, g)
            } else {
                Err(ApiError::PageNotFound)
            }
        }
        ["apis", g, v] => {
            if !state.registry.has_group(g) {
                Err(ApiError::PageNotFound)
            } else if state.registry.group_version(g, v).is_none() {
                Err(not_found_status())
            } else {
                crate::discovery::group_version(state, req, g, v)
            }
        }
        ["api", "v1", rest @ ..] => resource_path(state, req, "", "v1", rest).await,
        ["apis", g, v, rest @ ..] => {
            if !state.registry.has_group(g) {
                return Err(ApiError::PageNotFound);
            }
            if state.registry.group_version(g, v).is_none() {
                return Err(not_found_status());
            }
            resource_path(state, req, g, v, rest).await
        }
        ["api", _, ..] => Err(not_found_status()),
        _ => Err(ApiError::PageNotFound),
    }
}

/// `404` with a NotFound Status and empty details: unknown resources in a known group.
pub fn not_found_status() -> ApiError {
    ApiError::status(404, "NotFound", "the server could not find the requested resource", Some(json!({})))
}

fn plain_json(v: Value) -> Response<Body> {
    respond(200, &v, Encoding::Json, &[])
}

fn version() -> Value {
    json!({
        "major": "1", "minor": "36", "emulationMajor": "1", "emulationMinor": "36",
        "minCompatibilityMajor": "1", "minCompatibilityMinor": "35",
        "gitVersion": "v1.36.2-simcluster", "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.26.4",
        "compiler": "gc", "platform": "linux/amd64"
    })
}

async fn resource_path(
    state: &Arc<State>,
    req: &Req,
    group: &str,
    version: &str,
    rest: &[&str],
) -> Result<Response<Body>, ApiError> {
    let (legacy_watch, rest) = match rest {
        ["watch", rest @ ..] => (true, rest),
        _ => (false, rest),
    };
    let find = |r: &str| state.registry.find(group, version, r);
    let target = match rest {
        [] => return Err(ApiError::PageNotFound),
        ["namespaces", ns, res, tail @ ..]
            if !(group.is_empty() && matches!(*res, "status" | "finalize") && tail.is_empty()) =>
        {
            let rt = find(res).ok_or_else(not_found_status)?;
            if !rt.namespaced {
                return Err(not_found_status());
            }
            let (name, sub) = match tail {
                [] => (None, None),
                [name] => (Some(name.to_string()), None),
                [name, sub] => (Some(name.to_string()), Some(sub.to_string())),
                _ => return Err(not_found_status()),
            };
            Target { rt, namespace: ns.to_string(), name, sub, legacy_watch }
        }
        [res, tail @ ..] => {
            let rt = find(res).ok_or_else(not_found_status)?;
            let (name, sub) = match tail {
                [] => (None, None),
                [name] => (Some(name.to_string()), None),
                [name, sub] => (Some(name.to_string()), Some(sub.to_string())),
                _ => return Err(not_found_status()),
            };
            if rt.namespaced && name.is_some() {
                // A namespaced resource addressed without its namespace.
                return Err(not_found_status());
            }
            Target { rt, namespace: String::new(), name, sub, legacy_watch }
        }
    };
    if let Some(sub) = &target.sub
        && target.rt.subresource(sub).is_none()
    {
        return Err(not_found_status());
    }
    let Some(warning) = crate::kcm::endpoints::deprecation_warning(&target.rt) else {
        let out = api::dispatch(state, req, &target).await?;
        return Ok(render(state, req, &target, out));
    };
    // A deprecated resource warns on every response, errors included.
    let mut resp = match api::dispatch(state, req, &target).await {
        Ok(out) => render(state, req, &target, out),
        Err(e) => error_response(&e, req.accept.iter().find_map(Encoding::of).unwrap_or(Encoding::Json)),
    };
    if let Ok(v) = HeaderValue::from_str(warning) {
        resp.headers_mut().append("Warning", v);
    }
    Ok(resp)
}

/// Encode a handler's output according to the Accept header.
fn render(state: &Arc<State>, req: &Req, target: &Target, out: Output) -> Response<Body> {
    match out {
        Output::Response(r) => r,
        Output::Value { code, body, headers } => match crate::negotiate::shape(state, req, target, body, false) {
            Ok((body, enc, ct)) => {
                let mut resp = respond(code, &body, enc, &headers);
                if let Some(ct) = ct
                    && let Ok(v) = HeaderValue::from_str(&ct)
                {
                    resp.headers_mut().insert("Content-Type", v);
                }
                resp
            }
            Err(e) => error_response(&e, Encoding::Json),
        },
    }
}
