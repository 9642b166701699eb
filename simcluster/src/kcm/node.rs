//! The node controllers of kube-controller-manager that matter without a real kubelet, and the
//! apiserver's Node admission:
//!
//! - admission (`TaintNodesByCondition`): every new Node gets the
//!   `node.kubernetes.io/not-ready:NoSchedule` taint, whatever its status says ([`admit_create`]);
//! - node lifecycle: the NoSchedule taints follow the Node's conditions (`not-ready` for
//!   `Ready=False`, `unreachable` for `Ready=Unknown`, the pressure taints, `unschedulable`), and
//!   the `beta.kubernetes.io/os|arch` labels mirror `kubernetes.io/os|arch`;
//! - ttl: the `node.alpha.kubernetes.io/ttl` annotation from the cluster size (`"0"` up to 100
//!   Nodes).
//!
//! All three controller writes go into one merge patch, so kube-controller-manager has a single
//! Update entry in the Node's managedFields, as on a real cluster. Lease-based health
//! monitoring (marking a Node `Unknown` after 50 s without renewal) is not emulated. A Node's
//! Lease in `kube-node-lease` is collected through its ownerReference by the garbage collector.

use serde_json::{Map, Value, json};

use crate::client::{Client, path};

/// The taint every new Node gets from admission.
pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
/// The taint of a Node whose Ready condition is Unknown.
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// The TTL annotation.
pub const TTL_ANNOTATION: &str = "node.alpha.kubernetes.io/ttl";

/// NoSchedule taint keys the lifecycle controller owns: condition type, status that taints, key.
const CONDITION_TAINTS: &[(&str, &str, &str)] = &[
    ("Ready", "False", NOT_READY),
    ("Ready", "Unknown", UNREACHABLE),
    ("MemoryPressure", "True", "node.kubernetes.io/memory-pressure"),
    ("DiskPressure", "True", "node.kubernetes.io/disk-pressure"),
    ("NetworkUnavailable", "True", "node.kubernetes.io/network-unavailable"),
    ("PIDPressure", "True", "node.kubernetes.io/pid-pressure"),
];
const UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// Primary label → beta label the lifecycle controller keeps in sync.
const LABEL_PAIRS: &[(&str, &str)] =
    &[("kubernetes.io/os", "beta.kubernetes.io/os"), ("kubernetes.io/arch", "beta.kubernetes.io/arch")];

/// Node admission on create: add the `node.kubernetes.io/not-ready:NoSchedule` taint unless
/// the Node already carries it. Hooked into `admission::strategy_create`.
pub fn admit_create(obj: &mut Value) {
    let Some(o) = obj.as_object_mut() else { return };
    let spec = o.entry("spec").or_insert_with(|| json!({}));
    let Some(spec) = spec.as_object_mut() else { return };
    let taints = spec.entry("taints").or_insert_with(|| json!([]));
    if !taints.is_array() {
        *taints = json!([]);
    }
    let Some(list) = taints.as_array_mut() else { return };
    if !list.iter().any(|t| t["key"] == NOT_READY && t["effect"] == "NoSchedule") {
        list.push(json!({"key": NOT_READY, "effect": "NoSchedule"}));
    }
}

/// The ttl controller's value for a cluster of `nodes` Nodes (seconds).
fn ttl_for(nodes: usize) -> u64 {
    match nodes {
        0..=100 => 0,
        101..=500 => 15,
        501..=1000 => 30,
        1001..=2000 => 60,
        2001..=10000 => 300,
        _ => 600,
    }
}

/// The NoSchedule taints the Node should carry from its conditions and `spec.unschedulable`.
fn wanted_taint_keys(node: &Value) -> Vec<&'static str> {
    let mut keys = Vec::new();
    let conditions = node["status"]["conditions"].as_array().cloned().unwrap_or_default();
    for (ctype, status, key) in CONDITION_TAINTS {
        if conditions.iter().any(|c| c["type"] == *ctype && c["status"] == *status) {
            keys.push(*key);
        }
    }
    if node["spec"]["unschedulable"].as_bool() == Some(true) {
        keys.push(UNSCHEDULABLE);
    }
    keys
}

fn controlled_key(key: &str) -> bool {
    key == UNSCHEDULABLE || CONDITION_TAINTS.iter().any(|(_, _, k)| *k == key)
}

/// The patch bringing one Node to what the controllers want, if anything differs.
fn node_patch(node: &Value, ttl: u64) -> Option<Value> {
    let mut patch = Map::new();
    let mut meta = Map::new();

    // Labels.
    let labels = node["metadata"]["labels"].as_object().cloned().unwrap_or_default();
    let mut label_patch = Map::new();
    for (primary, secondary) in LABEL_PAIRS {
        let Some(p) = labels.get(*primary).and_then(Value::as_str) else { continue };
        if labels.get(*secondary).and_then(Value::as_str) != Some(p) {
            label_patch.insert((*secondary).into(), json!(p));
        }
    }
    if !label_patch.is_empty() {
        meta.insert("labels".into(), Value::Object(label_patch));
    }

    // TTL annotation.
    let ttl = ttl.to_string();
    if node["metadata"]["annotations"][TTL_ANNOTATION].as_str() != Some(ttl.as_str()) {
        meta.insert("annotations".into(), json!({ TTL_ANNOTATION: ttl }));
    }

    // NoSchedule taints from conditions.
    let current = node["spec"]["taints"].as_array().cloned().unwrap_or_default();
    let wanted = wanted_taint_keys(node);
    let is_ours = |t: &Value| t["effect"] == "NoSchedule" && t["key"].as_str().is_some_and(controlled_key);
    let mut taints: Vec<Value> = current
        .iter()
        .filter(|t| !is_ours(t) || t["key"].as_str().is_some_and(|k| wanted.contains(&k)))
        .cloned()
        .collect();
    for key in &wanted {
        if !taints.iter().any(|t| t["key"] == *key && t["effect"] == "NoSchedule") {
            taints.push(json!({"key": key, "effect": "NoSchedule", "timeAdded": crate::api::now()}));
        }
    }
    if taints != current {
        let v = if taints.is_empty() { Value::Null } else { Value::Array(taints) };
        patch.insert("spec".into(), json!({ "taints": v }));
    }

    if meta.is_empty() && patch.is_empty() {
        return None;
    }
    // Optimistic concurrency: the patch applies only to the version it was computed from.
    meta.insert("resourceVersion".into(), node["metadata"]["resourceVersion"].clone());
    patch.insert("metadata".into(), Value::Object(meta));
    Some(Value::Object(patch))
}

/// One reconcile pass over every Node.
pub async fn reconcile(client: Client) {
    let nodes: Vec<Value> = {
        let txn = client.state().store.lock();
        txn.all("/nodes").into_iter().cloned().collect()
    };
    let ttl = ttl_for(nodes.len());
    for node in &nodes {
        if node["metadata"]["deletionTimestamp"].is_string() {
            continue;
        }
        let Some(name) = node["metadata"]["name"].as_str() else { continue };
        if let Some(patch) = node_patch(node, ttl) {
            let _ = client.merge_patch(&path("v1", "nodes", "", name, ""), &patch).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_adds_the_not_ready_taint_once() {
        let mut n = json!({"metadata": {"name": "n"}, "spec": {}});
        admit_create(&mut n);
        admit_create(&mut n);
        assert_eq!(n["spec"]["taints"], json!([{"key": NOT_READY, "effect": "NoSchedule"}]));
    }

    #[test]
    fn ready_node_loses_the_taint_and_gets_labels_and_ttl() {
        let mut n = json!({"metadata": {"name": "n", "resourceVersion": "5", "labels": {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}},
                           "spec": {}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        admit_create(&mut n);
        let p = node_patch(&n, 0).expect("patch");
        assert_eq!(p["spec"]["taints"], Value::Null);
        assert_eq!(p["metadata"]["labels"]["beta.kubernetes.io/os"], "linux");
        assert_eq!(p["metadata"]["labels"]["beta.kubernetes.io/arch"], "amd64");
        assert_eq!(p["metadata"]["annotations"][TTL_ANNOTATION], "0");
        assert_eq!(p["metadata"]["resourceVersion"], "5");
        // Once applied, nothing is left to do.
        let mut done = n.clone();
        done["spec"] = json!({});
        done["metadata"]["labels"]["beta.kubernetes.io/os"] = json!("linux");
        done["metadata"]["labels"]["beta.kubernetes.io/arch"] = json!("amd64");
        done["metadata"]["annotations"] = json!({TTL_ANNOTATION: "0"});
        assert!(node_patch(&done, 0).is_none());
    }

    #[test]
    fn not_ready_node_keeps_the_taint() {
        let mut n = json!({"metadata": {"name": "n", "annotations": {TTL_ANNOTATION: "0"}},
                           "spec": {}, "status": {"conditions": [{"type": "Ready", "status": "False"}]}});
        admit_create(&mut n);
        assert!(node_patch(&n, 0).is_none());
    }
}
