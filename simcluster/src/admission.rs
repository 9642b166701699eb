//! The per-kind hooks of the request pipeline: authorization, defaulting, validation, managed
//! fields, patch application, what a delete returns, and the reactions to writes (CRD
//! registration, garbage collection, namespace lifecycle).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::errors::{ApiError, Cause};
use crate::registry::ResourceType;
use crate::server::{Req, Target};
use crate::state::State;

/// Check the user may do `verb` on the target.
pub fn authorize(_state: &Arc<State>, req: &Req, _t: &Target, _verb: &str) -> Result<(), ApiError> {
    if req.user.is_admin() {
        return Ok(());
    }
    Ok(())
}

/// POST to a subresource (`pods/binding`, `serviceaccounts/token`, ...).
pub fn subresource_create(_state: &Arc<State>, _req: &Req, _t: &Target) -> Result<crate::api::Output, ApiError> {
    Err(ApiError::method_not_allowed("the server does not allow this method on the requested resource"))
}

/// An object as clients see it (conversions between API versions sharing storage).
pub fn present(_state: &Arc<State>, _rt: &ResourceType, obj: Value) -> Value {
    obj
}

/// Field selectors a resource supports beyond metadata.name and metadata.namespace.
pub fn extra_field_selectors(_state: &State, rt: &ResourceType) -> Vec<String> {
    let f: &[&str] = match (rt.group.as_str(), rt.resource.as_str()) {
        ("", "pods") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("events.k8s.io", "events") => &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reason",
            "reportingController",
            "type",
        ],
        ("", "secrets") => &["type"],
        ("", "namespaces") => &["status.phase"],
        ("", "nodes") => &["spec.unschedulable"],
        ("", "replicationcontrollers") => &["status.replicas"],
        ("apps", "replicasets") => &["status.replicas"],
        ("batch", "jobs") => &["status.successful"],
        ("certificates.k8s.io", "certificatesigningrequests") => &["spec.signerName"],
        _ => &[],
    };
    f.iter().map(|s| s.to_string()).collect()
}

fn name_causes(rt: &ResourceType, obj: &Value) -> Vec<Cause> {
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let gen_name = obj["metadata"]["generateName"].as_str().unwrap_or_default();
    if name.is_empty() {
        if gen_name.is_empty() {
            return vec![Cause::new(
                "FieldValueRequired",
                "Required value: name or generateName is required",
                "metadata.name",
            )];
        }
        return vec![];
    }
    let errs = if matches!(rt.resource.as_str(), "namespaces" | "services" | "serviceaccounts" | "nodes") {
        if rt.resource == "nodes" || rt.resource == "serviceaccounts" {
            crate::names::dns1123_subdomain_errors(name)
        } else {
            crate::names::dns1123_label_errors(name)
        }
    } else {
        crate::names::dns1123_subdomain_errors(name)
    };
    errs.into_iter()
        .map(|e| Cause::new("FieldValueInvalid", format!("Invalid value: \"{name}\": {e}"), "metadata.name"))
        .collect()
}

/// Defaulting and pruning before a create; returns `Warning` messages.
pub fn prepare_create(
    _state: &Arc<State>,
    _req: &Req,
    rt: &ResourceType,
    obj: &mut Value,
) -> Result<Vec<String>, ApiError> {
    if rt.subresource("status").is_some()
        && rt.custom
        && let Some(m) = obj.as_object_mut()
    {
        m.remove("status");
    }
    Ok(vec![])
}

/// Validation of a new object.
pub fn validate_create(_state: &Arc<State>, rt: &ResourceType, obj: &Value) -> Result<(), ApiError> {
    let causes = name_causes(rt, obj);
    if !causes.is_empty() {
        let name = obj["metadata"]["name"].as_str().unwrap_or_default();
        return Err(ApiError::invalid(&rt.group, &rt.kind, name, &causes));
    }
    Ok(())
}

/// Kind-specific fields set at creation after identity is assigned.
pub fn after_defaults_create(_state: &Arc<State>, rt: &ResourceType, obj: &mut Value) {
    if rt.group.is_empty() && rt.resource == "namespaces" {
        let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
        obj["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
        obj["spec"] = json!({"finalizers": ["kubernetes"]});
        obj["status"] = json!({"phase": "Active"});
    }
}

/// Defaulting before an update; returns `Warning` messages.
pub fn prepare_update(
    _state: &Arc<State>,
    _req: &Req,
    rt: &ResourceType,
    new: &mut Value,
    old: &Value,
) -> Result<Vec<String>, ApiError> {
    if rt.group.is_empty() && rt.resource == "namespaces" {
        let name = old["metadata"]["name"].as_str().unwrap_or_default().to_string();
        new["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
        if new.get("spec").is_none() {
            new["spec"] = old["spec"].clone();
        }
        if new.get("status").is_none() {
            new["status"] = old["status"].clone();
        }
    }
    Ok(vec![])
}

/// Validation of an update.
pub fn validate_update(_state: &Arc<State>, rt: &ResourceType, new: &Value, old: &Value) -> Result<(), ApiError> {
    if rt.group.is_empty() && rt.resource == "configmaps" && old["immutable"] == json!(true) {
        let name = new["metadata"]["name"].as_str().unwrap_or_default();
        let mut causes = Vec::new();
        for f in ["data", "binaryData"] {
            if new.get(f) != old.get(f) {
                causes.push(Cause::new(
                    "FieldValueForbidden",
                    "Forbidden: field is immutable when `immutable` is set",
                    f,
                ));
            }
        }
        if new["immutable"] != json!(true) {
            causes.push(Cause::new(
                "FieldValueForbidden",
                "Forbidden: field is immutable when `immutable` is set",
                "immutable",
            ));
        }
        if !causes.is_empty() {
            return Err(ApiError::invalid(&rt.group, &rt.kind, name, &causes));
        }
    }
    Ok(())
}

/// Record an Update operation's managed fields.
pub fn update_fields(_old: Option<&Value>, _new: &mut Value, _rt: &ResourceType, _manager: &str, _sub: Option<&str>) {}

/// Server-side apply of `config` over `live` (or over the new object `obj` on create).
pub fn apply_fields(
    _old: Option<&Value>,
    obj: Value,
    config: &Value,
    _rt: &ResourceType,
    _manager: &str,
    _sub: Option<&str>,
    _force: bool,
) -> Result<Value, ApiError> {
    let mut out = obj;
    merge(&mut out, config);
    Ok(out)
}

fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

/// Patch types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchKind {
    /// RFC 6902.
    Json,
    /// RFC 7386.
    Merge,
    /// Strategic merge patch.
    Strategic,
    /// Server-side apply.
    Apply,
}

/// Apply a non-apply patch.
pub fn patch_object(_rt: &ResourceType, old: &Value, body: &[u8], kind: PatchKind) -> Result<Value, ApiError> {
    let patch: Value =
        serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    match kind {
        PatchKind::Merge | PatchKind::Strategic => {
            let mut out = old.clone();
            merge(&mut out, &patch);
            Ok(out)
        }
        _ => Err(ApiError::status(415, "UnsupportedMediaType", "unsupported patch type", None)),
    }
}

/// Checks of an applied configuration before it is merged.
pub fn check_applied(rt: &ResourceType, name: &str, config: &Value) -> Result<(), ApiError> {
    let _ = (rt, name, config);
    Ok(())
}

/// Whether PUT creates a missing object.
pub fn allow_create_on_update(_rt: &ResourceType) -> bool {
    false
}

/// Default deletion propagation.
pub fn default_propagation(_rt: &ResourceType) -> &'static str {
    "Background"
}

/// The grace period a delete starts, if the kind deletes gracefully.
pub fn graceful_delete(_rt: &ResourceType, _obj: &Value, _grace: Option<i64>) -> Option<i64> {
    None
}

/// The body of a completed delete.
pub fn delete_response(rt: &ResourceType, last: Value, status: Value) -> Value {
    if rt.group.is_empty() && rt.resource == "namespaces" {
        return crate::api::with_type(rt, last);
    }
    status
}

/// React to a stored write.
pub fn after_write(state: &Arc<State>, rt: &ResourceType, obj: &Value) {
    crate::controllers::notify(state, rt, obj);
}

/// React to a removal.
pub fn after_delete(state: &Arc<State>, rt: &ResourceType, obj: &Value) {
    crate::controllers::notify(state, rt, obj);
}

/// Table of custom resources from their CRD's printer columns.
pub fn custom_table(
    _state: &Arc<State>,
    _rt: &ResourceType,
    _objects: &[Value],
    _include: crate::negotiate::IncludeObject,
    _list_meta: Value,
) -> Option<Value> {
    None
}
