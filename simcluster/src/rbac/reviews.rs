//! The review APIs: `authorization.k8s.io` SelfSubjectAccessReview and SubjectAccessReview,
//! `authentication.k8s.io` SelfSubjectReview. Bodies in, response bodies out (the caller adds
//! `managedFields` for the access reviews, as the real server records them on these creates).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::{Attributes, Policy, UserInfo, authorize_non_resource, authorize_reason};
use crate::errors::{ApiError, Cause};

const AUTHZ_GROUP: &str = "authorization.k8s.io";

/// Drops what Go's `omitempty` would drop from a decoded review spec part: empty strings,
/// empty lists and maps, nulls.
fn prune_empty(v: &Value) -> Option<Value> {
    match v {
        Value::Null => None,
        Value::String(s) if s.is_empty() => None,
        Value::Array(a) if a.is_empty() => None,
        Value::Object(m) => {
            let out: Map<String, Value> =
                m.iter().filter_map(|(k, v)| prune_empty(v).map(|v| (k.clone(), v))).collect();
            if out.is_empty() { None } else { Some(Value::Object(out)) }
        }
        other => Some(other.clone()),
    }
}

fn s<'a>(v: Option<&'a Value>, key: &str) -> &'a str {
    v.and_then(|v| v.get(key)).and_then(Value::as_str).unwrap_or("")
}

/// Validates the attribute part of a review spec (`exactly one of ...`), `causes` in order.
fn validate_attributes(spec: &Value, causes: &mut Vec<Cause>) {
    let ra = spec.get("resourceAttributes").filter(|v| !v.is_null());
    let nra = spec.get("nonResourceAttributes").filter(|v| !v.is_null());
    if let (Some(_), Some(n)) = (ra, nra) {
        let shown = serde_json::to_string(&prune_empty(n).unwrap_or(json!({}))).unwrap_or_default();
        causes.push(Cause::new(
            "FieldValueInvalid",
            format!("Invalid value: {shown}: cannot be specified in combination with resourceAttributes"),
            "spec.nonResourceAttributes",
        ));
    }
    if ra.is_none() && nra.is_none() {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified",
            "spec.resourceAttributes",
        ));
    }
}

fn invalid(kind: &str, causes: &[Cause]) -> ApiError {
    let msgs: Vec<String> = causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect();
    let joined = if msgs.len() == 1 { msgs[0].clone() } else { format!("[{}]", msgs.join(", ")) };
    ApiError::status(
        422,
        "Invalid",
        format!("{kind}.{AUTHZ_GROUP} \"\" is invalid: {joined}"),
        Some(
            json!({"group": AUTHZ_GROUP, "kind": kind, "causes": causes.iter().map(Cause::to_json).collect::<Vec<_>>()}),
        ),
    )
}

/// Evaluates the attributes of a (validated) review spec for `user`.
fn evaluate(user: &UserInfo, spec: &Value, policy: &Policy<'_>) -> Value {
    let reason = if let Some(ra) = spec.get("resourceAttributes").filter(|v| !v.is_null()) {
        let attrs = Attributes {
            verb: s(Some(ra), "verb").into(),
            api_group: s(Some(ra), "group").into(),
            resource: s(Some(ra), "resource").into(),
            subresource: s(Some(ra), "subresource").into(),
            namespace: s(Some(ra), "namespace").into(),
            name: s(Some(ra), "name").into(),
        };
        authorize_reason(user, &attrs, policy)
    } else {
        let nra = spec.get("nonResourceAttributes");
        authorize_non_resource(user, s(nra, "verb"), s(nra, "path"), policy)
    };
    match reason {
        Some(r) => json!({"allowed": true, "reason": r}),
        None => json!({"allowed": false}),
    }
}

fn response(kind: &str, body: &Value, spec: Value, status: Value) -> Value {
    let api_version =
        body.get("apiVersion").and_then(Value::as_str).filter(|s| !s.is_empty()).unwrap_or("authorization.k8s.io/v1");
    let metadata = body.get("metadata").filter(|m| m.is_object()).cloned().unwrap_or_else(|| json!({}));
    json!({"kind": kind, "apiVersion": api_version, "metadata": metadata, "spec": spec, "status": status})
}

/// POST `selfsubjectaccessreviews` by `user`: the response body (201), with
/// `status: {allowed: true, reason: "RBAC: allowed by ..."}` or `status: {allowed: false}`
/// (denials carry no reason). The spec is echoed without empty fields; `metadata` is the
/// request's (the caller adds managedFields). A spec with neither or both attribute kinds:
/// 422 `SelfSubjectAccessReview.authorization.k8s.io "" is invalid`.
pub fn self_subject_access_review(user: &UserInfo, body: &Value, policy: &Policy<'_>) -> Result<Value, ApiError> {
    let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
    let mut causes = Vec::new();
    validate_attributes(&spec, &mut causes);
    if !causes.is_empty() {
        return Err(invalid("SelfSubjectAccessReview", &causes));
    }
    let status = evaluate(user, &spec, policy);
    Ok(response("SelfSubjectAccessReview", body, prune_empty(&spec).unwrap_or_else(|| json!({})), status))
}

/// POST `subjectaccessreviews` (the caller checks that the requester may create them): evaluates
/// for the user described by `spec.user`, `spec.groups`, `spec.uid`, `spec.extra` (no group is
/// added). Same response shape as [`self_subject_access_review`]; also 422 when neither user nor
/// groups are given.
pub fn subject_access_review(body: &Value, policy: &Policy<'_>) -> Result<Value, ApiError> {
    let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
    let mut causes = Vec::new();
    validate_attributes(&spec, &mut causes);
    let user = UserInfo {
        name: s(Some(&spec), "user").into(),
        groups: spec
            .get("groups")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect())
            .unwrap_or_default(),
        uid: s(Some(&spec), "uid").into(),
        extra: spec
            .get("extra")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| {
                        let vals = v.as_array().map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect());
                        (k.clone(), vals.unwrap_or_default())
                    })
                    .collect::<BTreeMap<_, _>>()
            })
            .unwrap_or_default(),
    };
    if user.name.is_empty() && user.groups.is_empty() {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "Invalid value: \"\": at least one of user or group must be specified",
            "spec.user",
        ));
    }
    if !causes.is_empty() {
        return Err(invalid("SubjectAccessReview", &causes));
    }
    let status = evaluate(&user, &spec, policy);
    Ok(response("SubjectAccessReview", body, prune_empty(&spec).unwrap_or_else(|| json!({})), status))
}

/// POST `authentication.k8s.io/v1 selfsubjectreviews`: `{kind, apiVersion, metadata:
/// {creationTimestamp: now}, status: {userInfo}}` (`now` in RFC 3339 seconds; no managedFields).
pub fn self_subject_review(user: &UserInfo, body: &Value, now: &str) -> Value {
    let api_version =
        body.get("apiVersion").and_then(Value::as_str).filter(|s| !s.is_empty()).unwrap_or("authentication.k8s.io/v1");
    json!({
        "kind": "SelfSubjectReview",
        "apiVersion": api_version,
        "metadata": {"creationTimestamp": now},
        "status": {"userInfo": user.to_json()},
    })
}
