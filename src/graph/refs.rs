//! What one live object points at: the named references of its spec (Routes, Scales, Binds,
//! Mounts, Uses, RunsAs) and the reads that find the objects it owns, selects or publishes
//! endpoints for ([`Want`]). Pure.

use serde_json::{Map, Value};

use super::Edge;
use crate::api::application::ResourceRef;

/// A named reference from one object to another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    /// The edge.
    pub edge: Edge,
    /// The object referenced.
    pub to: ResourceRef,
    /// `apiVersion` to read it with.
    pub api_version: String,
    /// Declared `optional: true`: its absence is no fault.
    pub optional: bool,
}

/// A read that finds the objects around one object.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Want {
    /// One object by name.
    Get {
        /// The object.
        resource: ResourceRef,
        /// `apiVersion` to read it with.
        api_version: String,
    },
    /// The objects of a kind in a namespace matching a label selector.
    List {
        /// API group.
        group: String,
        /// `apiVersion`.
        api_version: String,
        /// Kind.
        kind: String,
        /// Namespace.
        namespace: String,
        /// Label selector (never empty: an empty one would select everything).
        selector: String,
    },
}

/// Whether `kind` of `group` is a workload with a Pod template (`spec.template`).
pub fn has_pod_template(group: &str, kind: &str) -> bool {
    matches!((group, kind), ("apps", "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet") | ("batch", "Job"))
}

/// The Pod spec of a Pod or a workload's template.
pub fn pod_spec<'a>(resource: &ResourceRef, obj: &'a Value) -> Option<&'a Value> {
    match (resource.group.as_str(), resource.kind.as_str()) {
        ("", "Pod") => obj.get("spec"),
        (g, k) if has_pod_template(g, k) => obj.pointer("/spec/template/spec"),
        _ => None,
    }
}

/// The named references of `obj` (identified by `resource`), in the order its spec lists them,
/// without duplicates.
pub fn references(resource: &ResourceRef, obj: &Value) -> Vec<Reference> {
    let ns = resource.namespace.clone();
    let mut out: Vec<Reference> = Vec::new();
    let mut push =
        |edge: Edge, api_version: &str, kind: &str, namespace: Option<String>, name: &str, optional: bool| {
            if name.is_empty() {
                return;
            }
            let (group, _) = split_api_version(api_version);
            let to =
                ResourceRef { group: group.to_string(), kind: kind.to_string(), namespace, name: name.to_string() };
            match out.iter_mut().find(|r| r.edge == edge && r.to == to) {
                // Referenced twice: optional only if every reference is.
                Some(r) => r.optional &= optional,
                None => out.push(Reference { edge, to, api_version: api_version.to_string(), optional }),
            }
        };
    if let Some(spec) = pod_spec(resource, obj) {
        pod_references(spec, &mut |edge, kind, name, optional| push(edge, "v1", kind, ns.clone(), name, optional));
    }
    match (resource.group.as_str(), resource.kind.as_str()) {
        ("networking.k8s.io", "Ingress") => {
            let mut services: Vec<&str> = Vec::new();
            services.extend(obj.pointer("/spec/defaultBackend/service/name").and_then(Value::as_str));
            for rule in array(obj.pointer("/spec/rules")) {
                for path in array(rule.pointer("/http/paths")) {
                    services.extend(path.pointer("/backend/service/name").and_then(Value::as_str));
                }
            }
            for s in services {
                push(Edge::Routes, "v1", "Service", ns.clone(), s, false);
            }
        }
        ("autoscaling", "HorizontalPodAutoscaler") => {
            let target = &obj["spec"]["scaleTargetRef"];
            if let (Some(kind), Some(name)) = (target["kind"].as_str(), target["name"].as_str()) {
                let api_version = target["apiVersion"].as_str().unwrap_or("v1");
                push(Edge::Scales, api_version, kind, ns.clone(), name, false);
            }
        }
        ("", "PersistentVolumeClaim") => {
            if let Some(volume) = obj.pointer("/spec/volumeName").and_then(Value::as_str) {
                push(Edge::Binds, "v1", "PersistentVolume", None, volume, false);
            }
        }
        _ => {}
    }
    out
}

/// The ConfigMaps, Secrets, claims and ServiceAccount a Pod spec uses, as
/// `(edge, kind, name, optional)`.
fn pod_references(spec: &Value, f: &mut dyn FnMut(Edge, &str, &str, bool)) {
    let optional = |v: &Value| v["optional"].as_bool().unwrap_or(false);
    for volume in array(spec.get("volumes")) {
        if let Some(c) = volume.get("configMap") {
            f(Edge::Uses, "ConfigMap", c["name"].as_str().unwrap_or(""), optional(c));
        }
        if let Some(s) = volume.get("secret") {
            f(Edge::Uses, "Secret", s["secretName"].as_str().unwrap_or(""), optional(s));
        }
        for source in array(volume.pointer("/projected/sources")) {
            if let Some(c) = source.get("configMap") {
                f(Edge::Uses, "ConfigMap", c["name"].as_str().unwrap_or(""), optional(c));
            }
            if let Some(s) = source.get("secret") {
                f(Edge::Uses, "Secret", s["name"].as_str().unwrap_or(""), optional(s));
            }
        }
        if let Some(claim) = volume.pointer("/persistentVolumeClaim/claimName").and_then(Value::as_str) {
            f(Edge::Mounts, "PersistentVolumeClaim", claim, false);
        }
    }
    for list in ["initContainers", "containers"] {
        for container in array(spec.get(list)) {
            for from in array(container.get("envFrom")) {
                if let Some(c) = from.get("configMapRef") {
                    f(Edge::Uses, "ConfigMap", c["name"].as_str().unwrap_or(""), optional(c));
                }
                if let Some(s) = from.get("secretRef") {
                    f(Edge::Uses, "Secret", s["name"].as_str().unwrap_or(""), optional(s));
                }
            }
            for env in array(container.get("env")) {
                if let Some(c) = env.pointer("/valueFrom/configMapKeyRef") {
                    f(Edge::Uses, "ConfigMap", c["name"].as_str().unwrap_or(""), optional(c));
                }
                if let Some(s) = env.pointer("/valueFrom/secretKeyRef") {
                    f(Edge::Uses, "Secret", s["name"].as_str().unwrap_or(""), optional(s));
                }
            }
        }
    }
    for secret in array(spec.get("imagePullSecrets")) {
        f(Edge::Uses, "Secret", secret["name"].as_str().unwrap_or(""), false);
    }
    let account = spec["serviceAccountName"].as_str().or_else(|| spec["serviceAccount"].as_str());
    f(Edge::RunsAs, "ServiceAccount", account.filter(|a| !a.is_empty()).unwrap_or("default"), false);
}

/// The reads that find what `obj` owns, selects or publishes endpoints for, and the objects it
/// names.
pub fn wants(resource: &ResourceRef, obj: &Value) -> Vec<Want> {
    let ns = resource.namespace.clone().unwrap_or_default();
    let list = |group: &str, api_version: &str, kind: &str, selector: String| Want::List {
        group: group.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        namespace: ns.clone(),
        selector,
    };
    let mut out: Vec<Want> = references(resource, obj)
        .into_iter()
        .map(|r| Want::Get { resource: r.to, api_version: r.api_version })
        .collect();
    let selected = obj.pointer("/spec/selector").and_then(selector_string);
    match (resource.group.as_str(), resource.kind.as_str()) {
        ("apps", "Deployment") => out.extend(selected.map(|s| list("apps", "apps/v1", "ReplicaSet", s))),
        ("apps", "StatefulSet" | "DaemonSet" | "ReplicaSet") | ("batch", "Job") | ("policy", "PodDisruptionBudget") => {
            out.extend(selected.map(|s| list("", "v1", "Pod", s)));
        }
        ("", "Service") => {
            let labels = obj.pointer("/spec/selector").and_then(Value::as_object).and_then(equality_string);
            out.extend(labels.map(|s| list("", "v1", "Pod", s)));
            out.push(list(
                "discovery.k8s.io",
                "discovery.k8s.io/v1",
                "EndpointSlice",
                format!("kubernetes.io/service-name={}", resource.name),
            ));
        }
        _ => {}
    }
    out
}

/// A `LabelSelector` (matchLabels, matchExpressions) as a selector string; `None` when it is
/// empty (it would select everything) or malformed.
pub fn selector_string(selector: &Value) -> Option<String> {
    let mut terms: Vec<String> = Vec::new();
    if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
        terms.extend(equality_string(labels));
    }
    for e in array(selector.get("matchExpressions")) {
        let key = e["key"].as_str()?;
        let values: Vec<&str> = array(e.get("values")).iter().filter_map(|v| v.as_str()).collect();
        terms.push(match e["operator"].as_str()? {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            _ => return None,
        });
    }
    (!terms.is_empty()).then(|| terms.join(","))
}

/// `k=v,...` of a label map, in key order; `None` when empty.
fn equality_string(labels: &Map<String, Value>) -> Option<String> {
    let terms: Vec<String> = labels.iter().filter_map(|(k, v)| v.as_str().map(|v| format!("{k}={v}"))).collect();
    (!terms.is_empty()).then(|| terms.join(","))
}

/// Whether `labels` satisfy the `LabelSelector` `selector` (an empty selector matches nothing
/// here: no edge is drawn from a selector that selects everything).
pub fn selector_matches(selector: &Value, labels: &Value) -> bool {
    let get = |k: &str| labels.get(k).and_then(Value::as_str);
    let mut any = false;
    if let Some(m) = selector.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in m {
            any = true;
            if get(k) != v.as_str() {
                return false;
            }
        }
    }
    for e in array(selector.get("matchExpressions")) {
        any = true;
        let Some(key) = e["key"].as_str() else { return false };
        let values: Vec<&str> = array(e.get("values")).iter().filter_map(|v| v.as_str()).collect();
        let ok = match e["operator"].as_str() {
            Some("In") => get(key).is_some_and(|v| values.contains(&v)),
            Some("NotIn") => get(key).is_none_or(|v| !values.contains(&v)),
            Some("Exists") => get(key).is_some(),
            Some("DoesNotExist") => get(key).is_none(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    any
}

/// Whether every pair of the label map `selector` (a Service's `spec.selector`) is in `labels`;
/// false for an empty map.
pub fn map_matches(selector: &Map<String, Value>, labels: &Value) -> bool {
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k).and_then(Value::as_str) == v.as_str())
}

/// `(group, version)` of an `apiVersion`.
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    api_version.rsplit_once('/').unwrap_or(("", api_version))
}

fn array(v: Option<&Value>) -> &[Value] {
    v.and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}
