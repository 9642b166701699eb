//! Helpers the replicaset and deployment controllers share (kube-controller-manager's
//! `controller_utils.go`, `pod_util` and label-selector helpers): selectors, controller
//! references, Pod readiness and availability, timestamps, and a small failure backoff.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::errors::ApiError;

/// `metav1.LabelSelectorAsSelector` applied to `labels`: a missing (null) selector selects
/// nothing, an empty one everything; `matchLabels` and `matchExpressions` are ANDed.
pub fn selector_matches(sel: &Value, labels: &Value) -> bool {
    if !sel.is_object() {
        return false;
    }
    let label = |k: &str| labels.get(k).and_then(Value::as_str);
    if let Some(m) = sel["matchLabels"].as_object()
        && m.iter().any(|(k, v)| label(k) != v.as_str())
    {
        return false;
    }
    for e in sel["matchExpressions"].as_array().into_iter().flatten() {
        let key = e["key"].as_str().unwrap_or_default();
        let values: Vec<&str> = e["values"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        let v = label(key);
        let ok = match e["operator"].as_str().unwrap_or_default() {
            "In" => v.is_some_and(|v| values.contains(&v)),
            "NotIn" => v.is_none_or(|v| !values.contains(&v)),
            "Exists" => v.is_some(),
            "DoesNotExist" => v.is_none(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
}

/// Whether a selector is empty (selects everything).
pub fn selector_is_empty(sel: &Value) -> bool {
    sel.is_object()
        && sel["matchLabels"].as_object().is_none_or(|m| m.is_empty())
        && sel["matchExpressions"].as_array().is_none_or(|a| a.is_empty())
}

/// The controller ownerReference of an object.
pub fn controller_of(obj: &Value) -> Option<&Value> {
    obj["metadata"]["ownerReferences"].as_array()?.iter().find(|r| r["controller"] == json!(true))
}

/// Whether `obj` is controlled by the object with `uid`.
pub fn controlled_by(obj: &Value, uid: &Value) -> bool {
    controller_of(obj).is_some_and(|r| &r["uid"] == uid)
}

/// A controller ownerReference to `owner` (`metav1.NewControllerRef`).
pub fn controller_ref(owner: &Value, api_version: &str, kind: &str) -> Value {
    json!({
        "apiVersion": api_version, "kind": kind, "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true,
    })
}

/// The strategic merge patch that adopts `obj` (ownerReferences merge by uid).
pub fn adopt_patch(obj: &Value, owner_ref: &Value) -> Value {
    json!({"metadata": {"ownerReferences": [owner_ref], "uid": obj["metadata"]["uid"]}})
}

/// The strategic merge patch that releases `obj` from the owner with `owner_uid`.
pub fn release_patch(obj: &Value, owner_uid: &Value) -> Value {
    json!({"metadata": {"ownerReferences": [{"$patch": "delete", "uid": owner_uid}], "uid": obj["metadata"]["uid"]}})
}

/// Whether an object is being deleted.
pub fn deleting(obj: &Value) -> bool {
    obj["metadata"]["deletionTimestamp"].is_string()
}

/// Name, namespace and uid.
pub fn name(obj: &Value) -> &str {
    obj["metadata"]["name"].as_str().unwrap_or_default()
}

/// The namespace of an object.
pub fn namespace(obj: &Value) -> &str {
    obj["metadata"]["namespace"].as_str().unwrap_or_default()
}

/// An integer field, or `default`.
pub fn int(v: &Value, default: i64) -> i64 {
    v.as_i64().unwrap_or(default)
}

fn terminal(pod: &Value) -> bool {
    matches!(pod["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
}

/// `controller.IsPodActive`: not finished and not being deleted.
pub fn pod_active(pod: &Value) -> bool {
    !terminal(pod) && !deleting(pod)
}

/// `controller.IsPodTerminating`: not finished but being deleted.
pub fn pod_terminating(pod: &Value) -> bool {
    !terminal(pod) && deleting(pod)
}

fn ready_condition(pod: &Value) -> Option<&Value> {
    pod["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == "Ready")
}

/// `podutil.IsPodReady`.
pub fn pod_ready(pod: &Value) -> bool {
    ready_condition(pod).is_some_and(|c| c["status"] == "True")
}

/// When a ready Pod became Ready.
pub fn pod_ready_time(pod: &Value) -> Option<jiff::Timestamp> {
    if !pod_ready(pod) {
        return None;
    }
    ready_condition(pod).and_then(|c| parse_time(&c["lastTransitionTime"]))
}

/// `podutil.IsPodAvailable`: Ready for at least `min_ready` seconds.
pub fn pod_available(pod: &Value, min_ready: i64, now: jiff::Timestamp) -> bool {
    if !pod_ready(pod) {
        return false;
    }
    if min_ready <= 0 {
        return true;
    }
    match pod_ready_time(pod) {
        Some(t) => t.as_second() + min_ready < now.as_second(),
        None => false,
    }
}

/// An RFC 3339 timestamp.
pub fn parse_time(v: &Value) -> Option<jiff::Timestamp> {
    v.as_str()?.parse().ok()
}

/// The message of an API error, as Go's `err.Error()` of a StatusError.
pub fn error_message(e: &ApiError) -> String {
    match e {
        ApiError::Status { message, .. } => message.clone(),
        ApiError::PageNotFound => "the server could not find the requested resource".into(),
    }
}

/// Whether an error is a 404.
pub fn not_found(e: &ApiError) -> bool {
    e.code() == 404
}

/// Exponential backoff after failures that record Events, so a persistent failure neither
/// floods Events nor spins the controllers (each Event write wakes them again).
pub struct Backoff {
    until: Mutex<HashMap<String, (Instant, Duration)>>,
}

impl Backoff {
    /// An empty backoff table.
    pub fn new() -> Backoff {
        Backoff { until: Mutex::new(HashMap::new()) }
    }

    /// Whether `key` may be worked on now.
    pub fn ready(&self, key: &str) -> bool {
        let map = self.until.lock().unwrap_or_else(|e| e.into_inner());
        map.get(key).is_none_or(|(t, _)| Instant::now() >= *t)
    }

    /// A failure: wait 1 s, doubling up to 30 s.
    pub fn failed(&self, key: &str) {
        let mut map = self.until.lock().unwrap_or_else(|e| e.into_inner());
        let delay = map.get(key).map(|(_, d)| (*d * 2).min(Duration::from_secs(30))).unwrap_or(Duration::from_secs(1));
        map.insert(key.to_string(), (Instant::now() + delay, delay));
    }

    /// A success: forget past failures.
    pub fn succeeded(&self, key: &str) {
        let mut map = self.until.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(key);
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors() {
        let labels = json!({"app": "web", "tier": "fe"});
        assert!(selector_matches(&json!({}), &labels));
        assert!(!selector_matches(&Value::Null, &labels));
        assert!(selector_matches(&json!({"matchLabels": {"app": "web"}}), &labels));
        assert!(!selector_matches(&json!({"matchLabels": {"app": "db"}}), &labels));
        let e = json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe", "be"]}, {"key": "x", "operator": "DoesNotExist"}]});
        assert!(selector_matches(&e, &labels));
        let e = json!({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["fe"]}]});
        assert!(!selector_matches(&e, &labels));
        assert!(selector_is_empty(&json!({"matchLabels": {}})));
    }

    #[test]
    fn availability() {
        let now: jiff::Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        let pod = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:30Z"}]}});
        assert!(pod_available(&pod, 0, now));
        assert!(pod_available(&pod, 10, now));
        assert!(!pod_available(&pod, 30, now));
        assert!(pod_active(&pod));
    }
}
