//! The scheduler simulation (on with the kubelet simulation): binds pending Pods of
//! `schedulerName: default-scheduler` to a Node, or reports them unschedulable as
//! kube-scheduler does.
//!
//! # Expected flow
//!
//! Each pass reads the Nodes, the Pods and the claims from the store, computes every Node's
//! requested resources (non-terminated Pods bound to it), then for each pending Pod (once its
//! `schedule_ms` delay has passed) runs the filters in kube-scheduler's order — PreFilter
//! volume binding (`persistentvolumeclaim "x" not found`, `pod has unbound immediate
//! PersistentVolumeClaims`), then per Node NodeUnschedulable, TaintToleration (NoSchedule and
//! NoExecute), NodeAffinity (nodeSelector and required node affinity), NodeResourcesFit (cpu,
//! memory, any other requested resource, the `pods` count) — and binds it through
//! `pods/binding` to the feasible Node with the most free resources (`Scheduled` Event). A Pod
//! no Node fits gets `PodScheduled=False`, reason `Unschedulable`, with the real aggregated
//! message and a Warning `FailedScheduling` Event, once per distinct message.
//!
//! # Guarantees
//!
//! Passes run on every change of Pods, Nodes, claims or StorageClasses (coalesced) and at least
//! once a second, so a Pod is retried as soon as something could make it fit. Pods of another
//! scheduler are left alone.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::client::{Client, path};
use crate::kcm::kubelet::events::Recorder;
use crate::state::State;

/// The scheduler's name, field manager and Event source.
pub const SCHEDULER: &str = "default-scheduler";

pub use super::quantity::quantity;

fn q(v: &Value) -> f64 {
    match v {
        Value::String(s) => quantity(s).unwrap_or(0.0),
        Value::Number(n) => n.as_f64().unwrap_or(0.0),
        _ => 0.0,
    }
}

/// A Pod's requests: the sum over its containers (requests, else limits), at least the largest
/// init container's, plus its overhead.
pub fn pod_requests(pod: &Value) -> BTreeMap<String, f64> {
    let spec = &pod["spec"];
    let of = |c: &Value| -> BTreeMap<String, f64> {
        let mut r: BTreeMap<String, f64> = BTreeMap::new();
        for (k, v) in c["resources"]["limits"].as_object().into_iter().flatten() {
            r.insert(k.clone(), q(v));
        }
        for (k, v) in c["resources"]["requests"].as_object().into_iter().flatten() {
            r.insert(k.clone(), q(v));
        }
        r
    };
    let mut total: BTreeMap<String, f64> = BTreeMap::new();
    for c in spec["containers"].as_array().into_iter().flatten() {
        for (k, v) in of(c) {
            *total.entry(k).or_default() += v;
        }
    }
    for c in spec["initContainers"].as_array().into_iter().flatten() {
        for (k, v) in of(c) {
            let e = total.entry(k).or_default();
            *e = e.max(v);
        }
    }
    for (k, v) in spec["overhead"].as_object().into_iter().flatten() {
        *total.entry(k.clone()).or_default() += q(v);
    }
    total
}

/// What the scheduler knows of one Node.
#[derive(Clone, Debug)]
pub struct NodeInfo {
    /// Name.
    pub name: String,
    /// The Node object.
    pub node: Value,
    /// Allocatable resources.
    pub allocatable: BTreeMap<String, f64>,
    /// Requests of the non-terminated Pods on it.
    pub requested: BTreeMap<String, f64>,
    /// Number of non-terminated Pods on it.
    pub pods: usize,
}

impl NodeInfo {
    /// A Node with nothing on it yet.
    pub fn new(node: &Value) -> NodeInfo {
        let allocatable = node["status"]["allocatable"]
            .as_object()
            .or_else(|| node["status"]["capacity"].as_object())
            .map(|m| m.iter().map(|(k, v)| (k.clone(), q(v))).collect())
            .unwrap_or_default();
        NodeInfo {
            name: node["metadata"]["name"].as_str().unwrap_or_default().to_string(),
            node: node.clone(),
            allocatable,
            requested: BTreeMap::new(),
            pods: 0,
        }
    }

    /// Count a Pod on this Node.
    pub fn add(&mut self, requests: &BTreeMap<String, f64>) {
        for (k, v) in requests {
            *self.requested.entry(k.clone()).or_default() += v;
        }
        self.pods += 1;
    }
}

/// Why a Node does not fit: the reasons, and whether preemption could help (resource fit).
#[derive(Clone, Debug, PartialEq)]
pub struct Rejection {
    /// Reasons as the plugins word them.
    pub reasons: Vec<String>,
    /// `UnschedulableAndUnresolvable` (preemption is not helpful).
    pub unresolvable: bool,
}

fn tolerates(toleration: &Value, taint: &Value) -> bool {
    let effect = toleration["effect"].as_str().unwrap_or_default();
    if !effect.is_empty() && taint["effect"] != effect {
        return false;
    }
    let key = toleration["key"].as_str().unwrap_or_default();
    if !key.is_empty() && taint["key"] != key {
        return false;
    }
    match toleration["operator"].as_str().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" => {
            !key.is_empty()
                && toleration["value"].as_str().unwrap_or_default() == taint["value"].as_str().unwrap_or_default()
        }
        _ => false,
    }
}

fn requirement_matches(req: &Value, value: Option<&str>) -> bool {
    let values: Vec<&str> = req["values"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    match req["operator"].as_str().unwrap_or_default() {
        "In" => value.is_some_and(|v| values.contains(&v)),
        "NotIn" => value.is_none_or(|v| !values.contains(&v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        op @ ("Gt" | "Lt") => {
            let (Some(v), Some(bound)) =
                (value.and_then(|v| v.parse::<i64>().ok()), values.first().and_then(|b| b.parse::<i64>().ok()))
            else {
                return false;
            };
            if op == "Gt" { v > bound } else { v < bound }
        }
        _ => false,
    }
}

/// nodeSelector and required node affinity.
pub fn affinity_matches(pod: &Value, node: &Value) -> bool {
    let labels = &node["metadata"]["labels"];
    let label = |k: &str| labels[k].as_str();
    for (k, v) in pod["spec"]["nodeSelector"].as_object().into_iter().flatten() {
        if label(k) != v.as_str() {
            return false;
        }
    }
    let required = &pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
    let Some(terms) = required["nodeSelectorTerms"].as_array() else { return true };
    terms.iter().any(|term| {
        let exprs = term["matchExpressions"].as_array().cloned().unwrap_or_default();
        let fields = term["matchFields"].as_array().cloned().unwrap_or_default();
        if exprs.is_empty() && fields.is_empty() {
            return false;
        }
        exprs.iter().all(|r| requirement_matches(r, r["key"].as_str().and_then(label)))
            && fields.iter().all(|r| {
                let v = if r["key"] == "metadata.name" { node["metadata"]["name"].as_str() } else { None };
                requirement_matches(r, v)
            })
    })
}

/// Run the per-Node filters in kube-scheduler's order; `None` when the Pod fits.
pub fn filter(pod: &Value, requests: &BTreeMap<String, f64>, info: &NodeInfo) -> Option<Rejection> {
    let node = &info.node;
    let unresolvable = |r: String| Some(Rejection { reasons: vec![r], unresolvable: true });
    // NodeUnschedulable.
    let tolerations = pod["spec"]["tolerations"].as_array().cloned().unwrap_or_default();
    if node["spec"]["unschedulable"] == true {
        let taint = json!({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"});
        if !tolerations.iter().any(|t| tolerates(t, &taint)) {
            return unresolvable("node(s) were unschedulable".into());
        }
    }
    // TaintToleration.
    for taint in node["spec"]["taints"].as_array().into_iter().flatten() {
        if !matches!(taint["effect"].as_str(), Some("NoSchedule" | "NoExecute")) {
            continue;
        }
        if !tolerations.iter().any(|t| tolerates(t, taint)) {
            return unresolvable(format!(
                "node(s) had untolerated taint {{{}: {}}}",
                taint["key"].as_str().unwrap_or_default(),
                taint["value"].as_str().unwrap_or_default()
            ));
        }
    }
    // NodeAffinity.
    if !affinity_matches(pod, node) {
        return unresolvable("node(s) didn't match Pod's node affinity/selector".into());
    }
    // NodeResourcesFit.
    let mut reasons = Vec::new();
    let max_pods = info.allocatable.get("pods").copied().unwrap_or(110.0);
    if (info.pods + 1) as f64 > max_pods {
        reasons.push("Too many pods".to_string());
    }
    for (res, want) in requests {
        if *want <= 0.0 {
            continue;
        }
        let have = info.allocatable.get(res).copied().unwrap_or(0.0);
        let used = info.requested.get(res).copied().unwrap_or(0.0);
        if used + want > have + 1e-9 {
            reasons.push(format!("Insufficient {res}"));
        }
    }
    if !reasons.is_empty() {
        return Some(Rejection { reasons, unresolvable: false });
    }
    None
}

/// A claim by name, with its StorageClass's `volumeBindingMode` (if it has a known class).
pub type ClaimLookup<'a> = dyn Fn(&str) -> Option<(Value, Option<String>)> + 'a;

/// The PreFilter check of the Pod's claims: `Err(message)` when it cannot be scheduled
/// anywhere.
pub fn prefilter(pod: &Value, claim: &ClaimLookup<'_>) -> Result<(), String> {
    let mut unbound_immediate = false;
    for v in pod["spec"]["volumes"].as_array().into_iter().flatten() {
        let Some(name) = v["persistentVolumeClaim"]["claimName"].as_str() else { continue };
        match claim(name) {
            None => return Err(format!("persistentvolumeclaim \"{name}\" not found")),
            Some((pvc, mode)) => {
                let bound = pvc["spec"]["volumeName"].as_str().is_some_and(|n| !n.is_empty());
                if !bound && mode.as_deref() != Some("WaitForFirstConsumer") {
                    unbound_immediate = true;
                }
            }
        }
    }
    if unbound_immediate {
        return Err("pod has unbound immediate PersistentVolumeClaims".into());
    }
    Ok(())
}

fn histogram(items: impl Iterator<Item = String>) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for i in items {
        *counts.entry(i).or_default() += 1;
    }
    let mut parts: Vec<String> = counts.into_iter().map(|(r, n)| format!("{n} {r}")).collect();
    parts.sort();
    parts.join(", ")
}

/// kube-scheduler's FitError message for `n` Nodes all rejected.
pub fn fit_error(n: usize, rejections: &[Rejection]) -> String {
    let reasons = histogram(rejections.iter().flat_map(|r| r.reasons.iter().cloned()));
    let preemption = histogram(rejections.iter().map(|r| {
        if r.unresolvable {
            "Preemption is not helpful for scheduling".to_string()
        } else {
            "No preemption victims found for incoming pod".to_string()
        }
    }));
    format!("0/{n} nodes are available: {reasons}. preemption: 0/{n} nodes are available: {preemption}.")
}

/// The PreFilter failure message for `n` Nodes.
pub fn prefilter_error(n: usize, message: &str) -> String {
    format!(
        "0/{n} nodes are available: {message}. preemption: 0/{n} nodes are available: {n} Preemption is not helpful for scheduling."
    )
}

/// The Node a Pod goes to, or the unschedulable message.
pub fn choose(pod: &Value, nodes: &[NodeInfo], prefiltered: Result<(), String>) -> Result<usize, String> {
    if nodes.is_empty() {
        return Err("no nodes available to schedule pods".into());
    }
    if let Err(m) = prefiltered {
        return Err(prefilter_error(nodes.len(), &m));
    }
    let requests = pod_requests(pod);
    let mut rejections = Vec::new();
    let mut best: Option<(f64, usize, usize)> = None;
    for (i, info) in nodes.iter().enumerate() {
        match filter(pod, &requests, info) {
            Some(r) => rejections.push(r),
            None => {
                // LeastAllocated over cpu and memory, with the non-zero defaults for scoring.
                let free = |res: &str, default: f64| {
                    let have = info.allocatable.get(res).copied().unwrap_or(0.0);
                    if have <= 0.0 {
                        return 0.0;
                    }
                    let want = requests.get(res).copied().filter(|v| *v > 0.0).unwrap_or(default);
                    ((have - info.requested.get(res).copied().unwrap_or(0.0) - want) / have).max(0.0)
                };
                let score = free("cpu", 0.1) + free("memory", 200.0 * 1024.0 * 1024.0);
                let better = best.is_none_or(|(s, pods, _)| score > s + 1e-9 || (score > s - 1e-9 && info.pods < pods));
                if better {
                    best = Some((score, info.pods, i));
                }
            }
        }
    }
    match best {
        Some((_, _, i)) => Ok(i),
        None => Err(fit_error(nodes.len(), &rejections)),
    }
}

fn terminated(pod: &Value) -> bool {
    matches!(pod["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
}

/// The scheduler's memory between passes.
struct Scheduler {
    client: Client,
    events: Recorder,
    /// When each pending Pod was first seen (clock ms), for `schedule_ms`.
    first_seen: HashMap<String, i64>,
    /// The last unschedulable message reported per Pod uid.
    reported: HashMap<String, String>,
    /// Requests of the Pods seen bound, by uid (a Pod's requests do not change).
    requests: HashMap<String, Arc<BTreeMap<String, f64>>>,
}

impl Scheduler {
    /// One pass; the next time a delayed Pod becomes due.
    async fn pass(&mut self) -> Option<i64> {
        let state = self.client.state().clone();
        let now = state.clock.now().as_millisecond();
        let (mut nodes, pending, claims, classes) = {
            let txn = state.store.lock();
            let all = txn.all("/pods");
            let is_pending = |p: &&Value| {
                p["spec"]["nodeName"].as_str().is_none_or(str::is_empty)
                    && p["spec"]["schedulerName"].as_str().unwrap_or(SCHEDULER) == SCHEDULER
                    && !p["metadata"]["deletionTimestamp"].is_string()
                    && !terminated(p)
            };
            if !all.iter().any(is_pending) {
                self.first_seen.clear();
                for uid in std::mem::take(&mut self.reported).into_keys() {
                    self.events.forget(&uid);
                }
                return None;
            }
            let mut nodes: Vec<NodeInfo> = txn
                .all("/nodes")
                .into_iter()
                .filter(|n| !n["metadata"]["deletionTimestamp"].is_string())
                .map(NodeInfo::new)
                .collect();
            let index: HashMap<String, usize> = nodes.iter().enumerate().map(|(i, n)| (n.name.clone(), i)).collect();
            let mut pending = Vec::new();
            let mut live = HashSet::new();
            for p in all {
                match p["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
                    Some(n) => {
                        if !terminated(p)
                            && let Some(i) = index.get(n)
                        {
                            let uid = p["metadata"]["uid"].as_str().unwrap_or_default();
                            let r = match self.requests.get(uid) {
                                Some(r) => r.clone(),
                                None => {
                                    let r = Arc::new(pod_requests(p));
                                    self.requests.insert(uid.to_string(), r.clone());
                                    r
                                }
                            };
                            live.insert(uid);
                            nodes[*i].add(&r);
                        }
                    }
                    None => {
                        if is_pending(&p) {
                            pending.push(p.clone());
                        }
                    }
                }
            }
            if self.requests.len() > live.len() * 2 + 1024 {
                self.requests.retain(|uid, _| live.contains(uid.as_str()));
            }
            let wants_claims = pending.iter().any(|p| {
                p["spec"]["volumes"].as_array().into_iter().flatten().any(|v| v["persistentVolumeClaim"].is_object())
            });
            let (claims, classes) = if wants_claims {
                let claims: HashMap<(String, String), Value> = txn
                    .all("/persistentvolumeclaims")
                    .into_iter()
                    .map(|c| {
                        let m = &c["metadata"];
                        (
                            (
                                m["namespace"].as_str().unwrap_or_default().to_string(),
                                m["name"].as_str().unwrap_or_default().to_string(),
                            ),
                            c.clone(),
                        )
                    })
                    .collect();
                let classes: HashMap<String, String> = txn
                    .all("storage.k8s.io/storageclasses")
                    .into_iter()
                    .map(|c| {
                        (
                            c["metadata"]["name"].as_str().unwrap_or_default().to_string(),
                            c["volumeBindingMode"].as_str().unwrap_or("Immediate").to_string(),
                        )
                    })
                    .collect();
                (claims, classes)
            } else {
                Default::default()
            };
            (nodes, pending, claims, classes)
        };
        let live: HashSet<String> =
            pending.iter().filter_map(|p| p["metadata"]["uid"].as_str().map(String::from)).collect();
        self.first_seen.retain(|uid, _| live.contains(uid));
        let gone: Vec<String> = self.reported.keys().filter(|uid| !live.contains(*uid)).cloned().collect();
        for uid in gone {
            self.reported.remove(&uid);
            self.events.forget(&uid);
        }
        let mut next: Option<i64> = None;
        for pod in pending {
            let uid = pod["metadata"]["uid"].as_str().unwrap_or_default().to_string();
            let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
            let name = pod["metadata"]["name"].as_str().unwrap_or_default().to_string();
            let delay = crate::kcm::kubelet::sim::timing_for(&state.config.timing, &pod).schedule_ms as i64;
            let seen = *self.first_seen.entry(uid.clone()).or_insert(now);
            if seen + delay > now {
                next = Some(next.map_or(seen + delay, |n: i64| n.min(seen + delay)));
                continue;
            }
            let claim = |c: &str| {
                claims.get(&(ns.clone(), c.to_string())).map(|pvc| {
                    let class = pvc["spec"]["storageClassName"].as_str().unwrap_or_default();
                    (pvc.clone(), classes.get(class).cloned())
                })
            };
            match choose(&pod, &nodes, prefilter(&pod, &claim)) {
                Ok(i) => {
                    let target = nodes[i].name.clone();
                    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                                         "target": {"apiVersion": "v1", "kind": "Node", "name": target}});
                    if self.client.create(&path("v1", "pods", &ns, &name, "binding"), &binding).await.is_ok() {
                        nodes[i].add(&pod_requests(&pod));
                        let message = format!("Successfully assigned {ns}/{name} to {target}");
                        self.events.record(&pod, None, "Normal", "Scheduled", &message, None).await;
                        self.events.forget(&uid);
                    }
                }
                Err(message) => {
                    if self.reported.get(&uid) == Some(&message) {
                        continue;
                    }
                    let patch = json!({"status": {"conditions": [{
                        "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
                        "lastProbeTime": null, "lastTransitionTime": state.clock.rfc3339(),
                    }]}});
                    let _ = self.client.strategic_patch(&path("v1", "pods", &ns, &name, "status"), &patch).await;
                    self.events.record(&pod, None, "Warning", "FailedScheduling", &message, None).await;
                    self.reported.insert(uid, message);
                }
            }
        }
        next
    }
}

/// Run the scheduler until the store closes.
pub async fn run(state: Arc<State>) {
    const KEYS: &[&str] = &["/pods", "/nodes", "/persistentvolumeclaims", "storage.k8s.io/storageclasses"];
    let mut changes = state.store.subscribe();
    let client = Client::new(state.clone(), SCHEDULER);
    let mut s = Scheduler {
        events: Recorder::new(client.clone(), SCHEDULER),
        client,
        first_seen: HashMap::new(),
        reported: HashMap::new(),
        requests: HashMap::new(),
    };
    loop {
        let next = s.pass().await;
        let now = state.clock.now().as_millisecond();
        let wait = next.map_or(1000, |n| (n - now).clamp(0, 1000)) as u64;
        let deadline = tokio::time::sleep(Duration::from_millis(wait));
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                r = changes.recv() => match r {
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                    Ok(c) if !KEYS.contains(&c.key.as_str()) => continue,
                    _ => {
                        // Coalesce a burst of changes into one pass.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        while changes.try_recv().is_ok() {}
                        break;
                    }
                },
                _ = &mut deadline => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, cpu: &str) -> NodeInfo {
        NodeInfo::new(&json!({"metadata": {"name": name, "labels": {"disk": "ssd"}},
                              "status": {"allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"}}}))
    }

    #[test]
    fn quantities() {
        assert_eq!(quantity("500m"), Some(0.5));
        assert_eq!(quantity("1Gi"), Some(1024.0 * 1024.0 * 1024.0));
        assert_eq!(quantity("2"), Some(2.0));
    }

    #[test]
    fn too_large_requests_give_the_fit_error() {
        let pod = json!({"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "8"}}}]}});
        let nodes = vec![node("a", "4"), node("b", "4"), node("c", "4")];
        assert_eq!(
            choose(&pod, &nodes, Ok(())),
            Err("0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.".into())
        );
    }

    #[test]
    fn selector_and_taints_are_unresolvable_and_sorted() {
        let pod = json!({"spec": {"nodeSelector": {"disk": "ssd"}, "containers": []}});
        let mut tainted = node("a", "4");
        tainted.node["spec"]["taints"] = json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]);
        let mut other = node("b", "4");
        other.node["metadata"]["labels"] = json!({});
        let nodes = vec![tainted, other.clone(), other];
        assert_eq!(
            choose(&pod, &nodes, Ok(())),
            Err("0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.".into())
        );
    }

    #[test]
    fn tolerations_match_by_operator() {
        let taint = json!({"key": "k", "value": "v", "effect": "NoSchedule"});
        assert!(tolerates(&json!({"key": "k", "operator": "Equal", "value": "v"}), &taint));
        assert!(tolerates(&json!({"key": "k", "value": "v", "effect": "NoSchedule"}), &taint));
        assert!(!tolerates(&json!({"key": "k", "value": "w"}), &taint));
        assert!(tolerates(&json!({"key": "k", "operator": "Exists"}), &taint));
        assert!(tolerates(&json!({"operator": "Exists"}), &taint));
        assert!(!tolerates(&json!({"operator": "Exists", "effect": "NoExecute"}), &taint));
    }

    #[test]
    fn node_affinity_operators() {
        let n = json!({"metadata": {"name": "n1", "labels": {"zone": "a", "gen": "5"}}});
        let pod = |expr: Value| {
            json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [{"matchExpressions": [expr]}]}}}}})
        };
        assert!(affinity_matches(&pod(json!({"key": "zone", "operator": "In", "values": ["a", "b"]})), &n));
        assert!(!affinity_matches(&pod(json!({"key": "zone", "operator": "NotIn", "values": ["a"]})), &n));
        assert!(affinity_matches(&pod(json!({"key": "x", "operator": "NotIn", "values": ["a"]})), &n));
        assert!(affinity_matches(&pod(json!({"key": "zone", "operator": "Exists"})), &n));
        assert!(affinity_matches(&pod(json!({"key": "x", "operator": "DoesNotExist"})), &n));
        assert!(affinity_matches(&pod(json!({"key": "gen", "operator": "Gt", "values": ["4"]})), &n));
        assert!(!affinity_matches(&pod(json!({"key": "gen", "operator": "Lt", "values": ["4"]})), &n));
    }

    #[test]
    fn missing_and_unbound_claims() {
        let pod = json!({"spec": {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}});
        assert_eq!(prefilter(&pod, &|_| None), Err("persistentvolumeclaim \"data\" not found".into()));
        let unbound = |_: &str| Some((json!({"spec": {}}), None));
        assert_eq!(prefilter(&pod, &unbound), Err("pod has unbound immediate PersistentVolumeClaims".into()));
        let wffc = |_: &str| Some((json!({"spec": {}}), Some("WaitForFirstConsumer".to_string())));
        assert_eq!(prefilter(&pod, &wffc), Ok(()));
    }

    #[test]
    fn least_allocated_spreads() {
        let pod = json!({"spec": {"containers": [{"name": "a"}]}});
        let mut a = node("a", "4");
        a.add(&pod_requests(&json!({"spec": {"containers": [{"resources": {"requests": {"cpu": "1"}}}]}})));
        let nodes = vec![a, node("b", "4")];
        assert_eq!(choose(&pod, &nodes, Ok(())), Ok(1));
    }
}
