//! The node controllers of kube-controller-manager, and the apiserver's Node admission:
//!
//! - admission (`TaintNodesByCondition`): every new Node gets the
//!   `node.kubernetes.io/not-ready:NoSchedule` taint, whatever its status says ([`admit_create`]);
//! - node lifecycle, health: the controller remembers, per Node, when it last saw the kubelet's
//!   Lease in `kube-node-lease` renewed (a newer `renewTime`) or the Ready condition's
//!   `lastHeartbeatTime` change (the *probe time*, by the simulation's clock: timestamps in the
//!   objects are only compared with each other, never with now, as the real controller does).
//!   When the probe time is older than the grace period (50 s; 60 s for a Node that never posted
//!   a Ready condition), the Ready, MemoryPressure, DiskPressure and PIDPressure conditions become
//!   `Unknown` (reason `NodeStatusUnknown`, message `Kubelet stopped posting node status.`;
//!   missing ones are added with `NodeStatusNeverUpdated`), written through `nodes/status`. When
//!   Ready leaves `True`, the Node gets a `NodeNotReady` Event and each of its Pods gets
//!   `Ready=False` (through `pods/status`) and a Warning `NodeNotReady` Event (`MarkPodsNotReady`);
//! - node lifecycle, taints: the NoSchedule taints follow the Node's conditions (`not-ready` for
//!   `Ready=False`, `unreachable` for `Ready=Unknown`, the pressure taints, `unschedulable`); the
//!   NoExecute taints `not-ready` / `unreachable` follow Ready too, except in the "master
//!   disruption" mode the real controller enters when every zone (`topology.kubernetes.io/region`
//!   and `zone` labels) has no Ready Node: then it removes them all and taints nothing, and when
//!   it leaves that mode every Node's probe time restarts. So a lone Node never gets NoExecute
//!   taints; a stopped Node among Ready ones does. The `beta.kubernetes.io/os|arch` labels mirror
//!   `kubernetes.io/os|arch`;
//! - ttl: the `node.alpha.kubernetes.io/ttl` annotation from the cluster size (`"0"` up to 100
//!   Nodes).
//!
//! The label, annotation and taint writes go into one merge patch, so kube-controller-manager has
//! a single Update entry in the Node's managedFields, as on a real cluster. The Pods of a
//! NoExecute-tainted Node are evicted by [`crate::kcm::taint_eviction`]. Not emulated: the
//! NoExecute tainting rate limit (0.1 Node/s per zone, partial-disruption rates). A Node's Lease
//! is collected through its ownerReference by the garbage collector.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, OnceLock};

use jiff::{SignedDuration, Timestamp};
use serde_json::{Map, Value, json};

use crate::client::{Client, path};

/// The Event source of the node lifecycle controller.
pub const COMPONENT: &str = "node-controller";
/// How long a Node may go without a Lease renewal or heartbeat before it is `Unknown`
/// (`--node-monitor-grace-period`).
pub const GRACE_PERIOD: SignedDuration = SignedDuration::from_secs(50);
/// The same for a Node that never posted a Ready condition (`--node-startup-grace-period`).
pub const STARTUP_GRACE_PERIOD: SignedDuration = SignedDuration::from_secs(60);
/// Reason and message of a condition the controller set to Unknown.
pub const STATUS_UNKNOWN: (&str, &str) = ("NodeStatusUnknown", "Kubelet stopped posting node status.");
/// Reason and message of a condition the kubelet never posted.
pub const STATUS_NEVER_UPDATED: (&str, &str) = ("NodeStatusNeverUpdated", "Kubelet never posted node status.");
/// The conditions set to Unknown (NetworkUnavailable is left alone, as by the real controller).
const UNKNOWN_CONDITIONS: [&str; 4] = ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];

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

/// What the lifecycle controller remembers of one Node (`nodeHealthData`).
#[derive(Clone, Debug, PartialEq)]
pub struct Health {
    /// When the controller last heard from the kubelet (Lease renewed or heartbeat changed).
    pub probe: Timestamp,
    /// When the controller last saw the Ready condition change.
    pub ready_transition: Timestamp,
    /// The Ready condition as last saved.
    pub saved_ready: Option<Value>,
    /// The Lease's renewTime as last saved.
    pub lease: Option<Timestamp>,
}

/// Per-cluster memory of the lifecycle controller: Node health and whether it is in the master
/// disruption mode (every zone without a Ready Node).
#[derive(Default)]
struct Memory {
    health: HashMap<String, Health>,
    all_disrupted: Option<bool>,
}

/// The controller's memory, by cluster (`State::token_key`, unique per server).
fn memory() -> &'static Mutex<HashMap<String, Memory>> {
    static MEMORY: OnceLock<Mutex<HashMap<String, Memory>>> = OnceLock::new();
    MEMORY.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Forget what the controller remembers of a cluster (when it stops).
pub fn forget(scope: &str) {
    memory().lock().unwrap_or_else(|p| p.into_inner()).remove(scope);
}

fn ts(v: &Value) -> Option<Timestamp> {
    v.as_str().and_then(|s| s.parse().ok())
}

fn condition<'a>(node: &'a Value, ctype: &str) -> Option<&'a Value> {
    node["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == ctype)
}

/// The outcome of [`try_update_health`]: the Ready condition seen at the start of the pass
/// (a fake Unknown one when the Node has none), the Ready condition after it, and the Node
/// with its conditions set to Unknown when they must be written.
#[derive(Debug)]
pub struct HealthVerdict {
    /// Ready as observed.
    pub observed_ready: Value,
    /// Ready after this pass (None: the Node has no Ready condition).
    pub current_ready: Option<Value>,
    /// The Node to write through `nodes/status`, if its conditions change.
    pub update: Option<Value>,
}

/// `tryUpdateNodeHealth`, pure: update the remembered health from the Node and its Lease's
/// renewTime, and decide whether its conditions become Unknown.
pub fn try_update_health(
    saved: Option<Health>,
    node: &Value,
    lease: Option<Timestamp>,
    now: Timestamp,
) -> (Health, HealthVerdict) {
    let created = ts(&node["metadata"]["creationTimestamp"]).unwrap_or(now);
    let current = condition(node, "Ready").cloned();
    let (observed_ready, grace) = match &current {
        Some(c) => (c.clone(), GRACE_PERIOD),
        None => (
            json!({"type": "Ready", "status": "Unknown", "lastHeartbeatTime": node["metadata"]["creationTimestamp"],
                   "lastTransitionTime": node["metadata"]["creationTimestamp"]}),
            STARTUP_GRACE_PERIOD,
        ),
    };
    let fresh = |probe| Health { probe, ready_transition: probe, saved_ready: current.clone(), lease: None };
    let mut health = match saved {
        None if current.is_none() => fresh(created),
        None => fresh(now),
        Some(h) => match (&h.saved_ready, &current) {
            (None, None) => h,
            (None, Some(_)) | (Some(_), None) => Health { lease: h.lease, ..fresh(now) },
            (Some(s), Some(c)) if s["lastHeartbeatTime"] != c["lastHeartbeatTime"] => {
                let ready_transition =
                    if s["lastTransitionTime"] != c["lastTransitionTime"] { now } else { h.ready_transition };
                Health { probe: now, ready_transition, saved_ready: current.clone(), lease: h.lease }
            }
            _ => h,
        },
    };
    if let Some(renewed) = lease
        && health.lease.is_none_or(|l| l < renewed)
    {
        health.lease = Some(renewed);
        health.probe = now;
    }
    let mut verdict = HealthVerdict { observed_ready, current_ready: current, update: None };
    if now > health.probe + grace {
        let mut updated = node.clone();
        let stamp = json!(now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
        if !updated["status"]["conditions"].is_array() {
            updated["status"]["conditions"] = json!([]);
        }
        let conditions = updated["status"]["conditions"].as_array_mut().expect("array");
        for ctype in UNKNOWN_CONDITIONS {
            match conditions.iter_mut().find(|c| c["type"] == ctype) {
                None => conditions.push(json!({
                    "type": ctype, "status": "Unknown", "reason": STATUS_NEVER_UPDATED.0,
                    "message": STATUS_NEVER_UPDATED.1, "lastHeartbeatTime": node["metadata"]["creationTimestamp"],
                    "lastTransitionTime": stamp,
                })),
                Some(c) if c["status"] != "Unknown" => {
                    c["status"] = json!("Unknown");
                    c["reason"] = json!(STATUS_UNKNOWN.0);
                    c["message"] = json!(STATUS_UNKNOWN.1);
                    c["lastTransitionTime"] = stamp.clone();
                }
                Some(_) => {}
            }
        }
        let ready = condition(&updated, "Ready").cloned();
        if ready.as_ref() != Some(&verdict.observed_ready) {
            health.saved_ready = ready.clone();
            health.ready_transition = now;
            health.lease = lease.or(health.lease);
            verdict.current_ready = ready;
            verdict.update = Some(updated);
        }
    }
    (health, verdict)
}

/// The zone of a Node (`region:\0:zone`, as the real controller keys it).
fn zone(node: &Value) -> String {
    let l = &node["metadata"]["labels"];
    let get = |k: &str| l[k].as_str().unwrap_or_default().to_string();
    format!("{}:\u{0}:{}", get("topology.kubernetes.io/region"), get("topology.kubernetes.io/zone"))
}

/// Whether every zone is fully disrupted (has Nodes, none of them Ready).
pub fn all_zones_disrupted<'a>(nodes: impl Iterator<Item = (String, Option<&'a Value>)>) -> bool {
    let mut zones: BTreeMap<String, bool> = BTreeMap::new();
    for (z, ready) in nodes {
        let r = ready.is_some_and(|c| c["status"] == "True");
        *zones.entry(z).or_insert(false) |= r;
    }
    !zones.is_empty() && zones.values().all(|ready| !ready)
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

/// The NoExecute taint the Node should carry from its Ready condition, when tainting is on.
fn wanted_no_execute(node: &Value) -> Option<&'static str> {
    match condition(node, "Ready").map(|c| c["status"].as_str().unwrap_or_default()) {
        Some("False") => Some(NOT_READY),
        Some("Unknown") => Some(UNREACHABLE),
        _ => None,
    }
}

/// The patch bringing one Node to what the controllers want, if anything differs.
/// `no_execute`: whether NoExecute taints are applied (off in the master disruption mode, where
/// they are removed); `now`: the time stamped on new taints.
fn node_patch(node: &Value, ttl: u64, no_execute: bool, now: &str) -> Option<Value> {
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
    let wanted_ne = if no_execute { wanted_no_execute(node) } else { None };
    let is_ours_ne = |t: &Value| t["effect"] == "NoExecute" && (t["key"] == NOT_READY || t["key"] == UNREACHABLE);
    let mut taints: Vec<Value> = current
        .iter()
        .filter(|t| !is_ours(t) || t["key"].as_str().is_some_and(|k| wanted.contains(&k)))
        .filter(|t| !is_ours_ne(t) || t["key"].as_str() == wanted_ne)
        .cloned()
        .collect();
    for key in &wanted {
        if !taints.iter().any(|t| t["key"] == *key && t["effect"] == "NoSchedule") {
            taints.push(json!({"key": key, "effect": "NoSchedule", "timeAdded": now}));
        }
    }
    if let Some(key) = wanted_ne
        && !taints.iter().any(|t| t["key"] == key && t["effect"] == "NoExecute")
    {
        taints.push(json!({"key": key, "effect": "NoExecute", "timeAdded": now}));
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

/// One reconcile pass over every Node: health, then Pods of Nodes that stopped being Ready,
/// the disruption mode, and the labels/annotation/taints patch.
pub async fn reconcile(client: Client) {
    let state = client.state().clone();
    let (mut nodes, leases): (Vec<Value>, HashMap<String, Timestamp>) = {
        let txn = state.store.lock();
        let leases = txn
            .all("coordination.k8s.io/leases")
            .into_iter()
            .filter(|l| l["metadata"]["namespace"] == "kube-node-lease")
            .filter_map(|l| Some((l["metadata"]["name"].as_str()?.to_string(), ts(&l["spec"]["renewTime"])?)))
            .collect();
        (txn.all("/nodes").into_iter().cloned().collect(), leases)
    };
    nodes.retain(|n| !n["metadata"]["deletionTimestamp"].is_string());
    let ttl = ttl_for(nodes.len());
    let now = state.clock.now();
    let scope = state.token_key.clone();

    // Health, with the memory of earlier passes.
    let mut verdicts = Vec::new();
    {
        let mut all = memory().lock().unwrap_or_else(|p| p.into_inner());
        let mem = all.entry(scope.clone()).or_default();
        mem.health.retain(|name, _| nodes.iter().any(|n| n["metadata"]["name"] == name.as_str()));
        for node in &nodes {
            let name = node["metadata"]["name"].as_str().unwrap_or_default().to_string();
            let (health, verdict) = try_update_health(mem.health.remove(&name), node, leases.get(&name).copied(), now);
            mem.health.insert(name, health);
            verdicts.push(verdict);
        }
    }
    for (node, verdict) in nodes.iter_mut().zip(&verdicts) {
        let Some(name) = node["metadata"]["name"].as_str().map(String::from) else { continue };
        if let Some(updated) = &verdict.update {
            match client.update(&path("v1", "nodes", "", &name, "status"), updated).await {
                Ok(n) => *node = n,
                Err(_) => continue,
            }
        }
        let was_ready = verdict.observed_ready["status"] == "True";
        let is_ready = verdict.current_ready.as_ref().is_some_and(|c| c["status"] == "True");
        if was_ready && verdict.current_ready.is_some() && !is_ready {
            let reference = json!({"kind": "Node", "apiVersion": "v1", "metadata": {"name": name, "uid": name}});
            let msg = format!("Node {name} status is now: NodeNotReady");
            client.event(&reference, "Normal", "NodeNotReady", &msg, COMPONENT).await;
            mark_pods_not_ready(&client, &name).await;
        }
    }

    // Master disruption mode: every zone without a Ready Node.
    let all_disrupted = all_zones_disrupted(nodes.iter().map(|n| (zone(n), condition(n, "Ready"))));
    let tainting = {
        let mut all = memory().lock().unwrap_or_else(|p| p.into_inner());
        let mem = all.entry(scope).or_default();
        if mem.all_disrupted == Some(true) && !all_disrupted {
            // Leaving the mode: every Node's probe time restarts.
            for h in mem.health.values_mut() {
                h.probe = now;
                h.ready_transition = now;
            }
        }
        mem.all_disrupted = Some(all_disrupted);
        !all_disrupted
    };

    let stamp = state.clock.rfc3339();
    for node in &nodes {
        let Some(name) = node["metadata"]["name"].as_str() else { continue };
        if let Some(patch) = node_patch(node, ttl, tainting, &stamp) {
            let _ = client.merge_patch(&path("v1", "nodes", "", name, ""), &patch).await;
        }
    }
}

/// `MarkPodsNotReady`: the Ready condition of every Pod on the Node becomes False (through
/// `pods/status`, read afresh and retried on a conflict), with a Warning `NodeNotReady` Event.
/// The Pods are those bound to the Node now (only their names are read here).
async fn mark_pods_not_ready(client: &Client, node: &str) {
    let now = client.state().clock.rfc3339();
    let pods: Vec<(String, String)> = {
        let txn = client.state().store.lock();
        txn.all("/pods")
            .into_iter()
            .filter(|p| p["spec"]["nodeName"] == node)
            .map(|p| {
                let m = &p["metadata"];
                (
                    m["namespace"].as_str().unwrap_or_default().to_string(),
                    m["name"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    };
    for (ns, name) in &pods {
        let (ns, name) = (ns.as_str(), name.as_str());
        let status_path = path("v1", "pods", ns, name, "status");
        for _attempt in 0..3 {
            let Ok(mut updated) = client.get(&path("v1", "pods", ns, name, "")).await else { break };
            let Some(conditions) = updated["status"]["conditions"].as_array_mut() else { break };
            let Some(ready) = conditions.iter_mut().find(|c| c["type"] == "Ready") else { break };
            if ready["status"] == "False" {
                break;
            }
            ready["status"] = json!("False");
            ready["lastTransitionTime"] = json!(now);
            match client.update(&status_path, &updated).await {
                Ok(mut written) => {
                    written["kind"] = json!("Pod");
                    written["apiVersion"] = json!("v1");
                    client.event(&written, "Warning", "NodeNotReady", "Node is not ready", COMPONENT).await;
                    break;
                }
                Err(e) if e.code() == 409 => continue,
                Err(_) => break,
            }
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
        let p = node_patch(&n, 0, true, "2026-01-01T00:00:00Z").expect("patch");
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
        assert!(node_patch(&done, 0, true, "2026-01-01T00:00:00Z").is_none());
    }

    #[test]
    fn not_ready_node_keeps_the_taint() {
        let mut n = json!({"metadata": {"name": "n", "annotations": {TTL_ANNOTATION: "0"}},
                           "spec": {}, "status": {"conditions": [{"type": "Ready", "status": "False"}]}});
        admit_create(&mut n);
        // Alone, the Node is in the master disruption mode: no NoExecute taint.
        assert!(node_patch(&n, 0, false, "2026-01-01T00:00:00Z").is_none());
        // Among Ready Nodes it gets `not-ready:NoExecute` as well.
        let p = node_patch(&n, 0, true, "2026-01-01T00:00:00Z").expect("patch");
        assert_eq!(
            p["spec"]["taints"][1],
            json!({"key": NOT_READY, "effect": "NoExecute", "timeAdded": "2026-01-01T00:00:00Z"})
        );
    }

    fn ready_node(heartbeat: &str) -> Value {
        json!({"metadata": {"name": "n", "creationTimestamp": "2026-01-01T00:00:00Z"}, "spec": {},
               "status": {"conditions": [
                   {"type": "MemoryPressure", "status": "False", "lastHeartbeatTime": heartbeat, "lastTransitionTime": "2026-01-01T00:00:00Z"},
                   {"type": "Ready", "status": "True", "lastHeartbeatTime": heartbeat, "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    #[test]
    fn a_node_is_unknown_once_neither_lease_nor_heartbeat_moved_for_the_grace_period() {
        let node = ready_node("2026-01-01T00:00:00Z");
        let lease = Some(at(-1000));
        // First sight: probe = now, whatever the (old) timestamps in the objects say.
        let (h, v) = try_update_health(None, &node, lease, at(0));
        assert!(v.update.is_none());
        // The same Lease and heartbeat 50 s later: still within the grace period.
        let (h, v) = try_update_health(Some(h), &node, lease, at(50));
        assert!(v.update.is_none());
        // A renewed Lease resets the probe time.
        let (h, v) = try_update_health(Some(h), &node, Some(at(-999)), at(51));
        assert!(v.update.is_none());
        assert_eq!(h.probe, at(51));
        let (h, v) = try_update_health(Some(h), &node, Some(at(-999)), at(102));
        let updated = v.update.expect("Unknown after 51 s");
        let ready = condition(&updated, "Ready").unwrap();
        assert_eq!(ready["status"], "Unknown");
        assert_eq!(ready["reason"], "NodeStatusUnknown");
        assert_eq!(ready["message"], "Kubelet stopped posting node status.");
        assert_eq!(ready["lastHeartbeatTime"], "2026-01-01T00:00:00Z", "the heartbeat is kept");
        assert_eq!(condition(&updated, "MemoryPressure").unwrap()["status"], "Unknown");
        let disk = condition(&updated, "DiskPressure").unwrap();
        assert_eq!(
            (disk["reason"].as_str(), disk["status"].as_str()),
            (Some("NodeStatusNeverUpdated"), Some("Unknown"))
        );
        assert_eq!(v.observed_ready["status"], "True");
        // Written: the next pass over the Unknown Node changes nothing.
        let (h, v) = try_update_health(Some(h), &updated, Some(at(-999)), at(103));
        assert!(v.update.is_none());
        // The kubelet is back: a new heartbeat with Ready=True.
        let (_, v) = try_update_health(Some(h), &ready_node("2026-01-01T00:10:00Z"), Some(at(-900)), at(200));
        assert!(v.update.is_none());
        assert_eq!(v.current_ready.unwrap()["status"], "True");
    }

    #[test]
    fn master_disruption_needs_every_zone_without_a_ready_node() {
        let t = json!({"status": "True"});
        let u = json!({"status": "Unknown"});
        assert!(all_zones_disrupted([("a".to_string(), Some(&u))].into_iter()));
        assert!(!all_zones_disrupted([("a".to_string(), Some(&u)), ("a".to_string(), Some(&t))].into_iter()));
        assert!(!all_zones_disrupted([("a".to_string(), Some(&u)), ("b".to_string(), Some(&t))].into_iter()));
        assert!(!all_zones_disrupted(std::iter::empty()));
    }

    #[test]
    fn no_execute_taints_follow_ready_when_tainting() {
        let mut n = json!({"metadata": {"name": "n", "annotations": {TTL_ANNOTATION: "0"}},
                           "spec": {}, "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}});
        let p = node_patch(&n, 0, true, "T").expect("patch");
        assert_eq!(
            p["spec"]["taints"],
            json!([{"key": UNREACHABLE, "effect": "NoSchedule", "timeAdded": "T"},
                                               {"key": UNREACHABLE, "effect": "NoExecute", "timeAdded": "T"}])
        );
        n["spec"] = p["spec"].clone();
        assert!(node_patch(&n, 0, true, "T").is_none());
        // Master disruption mode: the NoExecute taint goes.
        let p = node_patch(&n, 0, false, "T").expect("patch");
        assert_eq!(p["spec"]["taints"], json!([{"key": UNREACHABLE, "effect": "NoSchedule", "timeAdded": "T"}]));
    }
}
