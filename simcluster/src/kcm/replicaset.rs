//! The replicaset controller (see the module documentation of [`crate::kcm`]), as
//! kube-controller-manager's `replica_set.go`: it claims the Pods its selector matches (adopting
//! orphans, releasing those it no longer selects), creates Pods from the template
//! (`generateName: <rs>-`, a controller ownerReference) or deletes the surplus (unassigned,
//! pending, not-ready and most recently ready Pods first), recording `SuccessfulCreate` /
//! `SuccessfulDelete` Events, and writes the status counts (`replicas`, `fullyLabeledReplicas`,
//! `readyReplicas`, `availableReplicas`, `terminatingReplicas`, `observedGeneration`).

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::LazyLock;

use serde_json::{Value, json};

use crate::client::{Client, path};

#[path = "replicaset_util.rs"]
pub mod util;

use util::{
    Backoff, controlled_by, controller_of, controller_ref, deleting, error_message, int, name, namespace, not_found,
    pod_active, pod_available, pod_ready, pod_ready_time, pod_terminating, selector_matches,
};

const COMPONENT: &str = "replicaset-controller";

/// Pods created or deleted per sync at most (`--replicaset-burst-replicas`... `BurstReplicas`).
const BURST_REPLICAS: i64 = 500;

static BACKOFF: LazyLock<Backoff> = LazyLock::new(Backoff::new);

/// One reconcile pass over every object this controller owns.
pub async fn reconcile(client: Client) {
    let Ok(rss) = client.list(&path("apps/v1", "replicasets", "", "", ""), "").await else { return };
    if rss.is_empty() {
        return;
    }
    // List items carry no kind/apiVersion; Events need them.
    let rss: Vec<Value> = rss
        .into_iter()
        .map(|mut rs| {
            rs["kind"] = json!("ReplicaSet");
            rs["apiVersion"] = json!("apps/v1");
            rs
        })
        .collect();
    let Ok(pods) = client.list(&path("v1", "pods", "", "", ""), "").await else { return };
    let mut pods_by_ns: HashMap<String, Vec<Value>> = HashMap::new();
    for p in pods {
        pods_by_ns.entry(namespace(&p).to_string()).or_default().push(p);
    }
    // Grouped once: looking a namespace's ReplicaSets up per ReplicaSet made a pass quadratic
    // (10,000 ReplicaSets: 10^8 comparisons).
    let mut rss_by_ns: HashMap<&str, Vec<&Value>> = HashMap::new();
    for rs in &rss {
        rss_by_ns.entry(namespace(rs)).or_default().push(rs);
    }
    for rs in &rss {
        let key = rs["metadata"]["uid"].as_str().unwrap_or_default().to_string();
        if !BACKOFF.ready(&key) {
            continue;
        }
        let ns = namespace(rs);
        let empty = Vec::new();
        let pods = pods_by_ns.get(ns).unwrap_or(&empty);
        let siblings = rss_by_ns.get(ns).map(Vec::as_slice).unwrap_or_default();
        if sync(&client, rs, pods, siblings).await {
            BACKOFF.succeeded(&key);
        } else {
            BACKOFF.failed(&key);
        }
    }
}

/// Sync one ReplicaSet; false when creating or deleting Pods failed.
async fn sync(client: &Client, rs: &Value, pods: &[Value], siblings: &[&Value]) -> bool {
    let sel = &rs["spec"]["selector"];
    let uid = &rs["metadata"]["uid"];
    let ns = namespace(rs);
    let matches = |p: &Value| selector_matches(sel, &p["metadata"]["labels"]);
    let mut active: Vec<Value> = Vec::new();
    let mut terminating = 0i64;
    for p in pods {
        if controlled_by(p, uid) {
            if matches(p) {
                if pod_active(p) {
                    active.push(p.clone());
                } else if pod_terminating(p) {
                    terminating += 1;
                }
            } else if pod_active(p) && !deleting(rs) {
                let patch = util::release_patch(p, uid);
                let _ = client.strategic_patch(&path("v1", "pods", ns, name(p), ""), &patch).await;
            }
        } else if controller_of(p).is_none() && pod_active(p) && !deleting(rs) && matches(p) {
            let patch = util::adopt_patch(p, &controller_ref(rs, "apps/v1", "ReplicaSet"));
            if let Ok(adopted) = client.strategic_patch(&path("v1", "pods", ns, name(p), ""), &patch).await {
                active.push(adopted);
            }
        }
    }
    let mut failure = None;
    if !deleting(rs) {
        failure = manage_replicas(client, rs, &active, siblings, pods).await;
    }
    update_status(client, rs, &active, terminating, failure.as_ref()).await;
    failure.is_none()
}

/// Create or delete Pods towards `spec.replicas`; the failure (reason, message), if any.
async fn manage_replicas(
    client: &Client,
    rs: &Value,
    active: &[Value],
    siblings: &[&Value],
    pods: &[Value],
) -> Option<(&'static str, String)> {
    let want = int(&rs["spec"]["replicas"], 1);
    let diff = active.len() as i64 - want;
    let ns = namespace(rs);
    if diff < 0 {
        let n = (-diff).min(BURST_REPLICAS);
        let pod = pod_from_template(rs);
        for _ in 0..n {
            match client.create(&path("v1", "pods", ns, "", ""), &pod).await {
                Ok(created) => {
                    let msg = format!("Created pod: {}", name(&created));
                    client.event(rs, "Normal", "SuccessfulCreate", &msg, COMPONENT).await;
                }
                Err(e) => {
                    let msg = format!("Error creating: {}", error_message(&e));
                    client.event(rs, "Warning", "FailedCreate", &msg, COMPONENT).await;
                    return Some(("FailedCreate", error_message(&e)));
                }
            }
        }
    } else if diff > 0 {
        let n = diff.min(BURST_REPLICAS) as usize;
        let related = related_pods(rs, siblings, pods);
        for p in pods_to_delete(active, &related, n) {
            match client.delete(&path("v1", "pods", ns, name(&p), ""), None, None).await {
                Ok(_) => {
                    let msg = format!("Deleted pod: {}", name(&p));
                    client.event(rs, "Normal", "SuccessfulDelete", &msg, COMPONENT).await;
                }
                Err(e) if not_found(&e) => {}
                Err(e) => {
                    let msg = format!("Error deleting: {}", error_message(&e));
                    client.event(rs, "Warning", "FailedDelete", &msg, COMPONENT).await;
                    return Some(("FailedDelete", error_message(&e)));
                }
            }
        }
    }
    None
}

/// `controller.GetPodFromTemplate`: labels, annotations and finalizers of the template,
/// `generateName: <rs>-`, the controller ownerReference and the template's spec.
fn pod_from_template(rs: &Value) -> Value {
    let t = &rs["spec"]["template"];
    let mut meta = json!({"generateName": format!("{}-", name(rs))});
    for k in ["labels", "annotations"] {
        if t["metadata"][k].as_object().is_some_and(|m| !m.is_empty()) {
            meta[k] = t["metadata"][k].clone();
        }
    }
    if t["metadata"]["finalizers"].as_array().is_some_and(|a| !a.is_empty()) {
        meta["finalizers"] = t["metadata"]["finalizers"].clone();
    }
    meta["ownerReferences"] = json!([controller_ref(rs, "apps/v1", "ReplicaSet")]);
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": t["spec"].clone()})
}

/// The Pods of every ReplicaSet with the same controller (a Deployment's ReplicaSets), for
/// ranking Pods by co-located siblings.
fn related_pods(rs: &Value, siblings: &[&Value], pods: &[Value]) -> Vec<Value> {
    let Some(owner) = controller_of(rs).map(|r| r["uid"].clone()) else { return vec![] };
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for other in siblings.iter().filter(|o| controlled_by(o, &owner)) {
        for p in pods.iter().filter(|p| selector_matches(&other["spec"]["selector"], &p["metadata"]["labels"])) {
            if seen.insert(p["metadata"]["uid"].to_string()) {
                out.push(p.clone());
            }
        }
    }
    out
}

fn phase_ordinal(pod: &Value) -> i32 {
    match pod["status"]["phase"].as_str() {
        Some("Unknown") => 1,
        Some("Running") => 2,
        _ => 0,
    }
}

fn deletion_cost(pod: &Value) -> i64 {
    pod["metadata"]["annotations"]["controller.kubernetes.io/pod-deletion-cost"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn max_restarts(pod: &Value) -> i64 {
    pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| int(&c["restartCount"], 0))
        .max()
        .unwrap_or(0)
}

/// `ActivePodsWithRanks.Less` with LogarithmicScaleDown: ages compared in log2 buckets.
fn less(a: &Value, b: &Value, rank_a: usize, rank_b: usize, now: jiff::Timestamp) -> bool {
    let node = |p: &Value| p["spec"]["nodeName"].as_str().unwrap_or_default().to_string();
    let (na, nb) = (node(a), node(b));
    if na != nb && (na.is_empty() || nb.is_empty()) {
        return na.is_empty();
    }
    if phase_ordinal(a) != phase_ordinal(b) {
        return phase_ordinal(a) < phase_ordinal(b);
    }
    if pod_ready(a) != pod_ready(b) {
        return !pod_ready(a);
    }
    if deletion_cost(a) != deletion_cost(b) {
        return deletion_cost(a) < deletion_cost(b);
    }
    if rank_a != rank_b {
        return rank_a > rank_b;
    }
    let log_less = |ta: Option<jiff::Timestamp>, tb: Option<jiff::Timestamp>| -> Option<bool> {
        if ta == tb {
            return None;
        }
        // afterOrZero: a zero time is "after" everything.
        let after_or_zero = || match (ta, tb) {
            (None, _) => true,
            (_, None) => false,
            (Some(x), Some(y)) => x > y,
        };
        let (Some(x), Some(y)) = (ta, tb) else { return Some(after_or_zero()) };
        let da = now.as_nanosecond() - x.as_nanosecond();
        let db = now.as_nanosecond() - y.as_nanosecond();
        if da < 0 || db < 0 {
            return Some(after_or_zero());
        }
        let bucket = |d: i128| if d == 0 { i64::MIN } else { (d as f64).log2() as i64 };
        Some(bucket(da) < bucket(db))
    };
    if pod_ready(a)
        && pod_ready(b)
        && let Some(r) = log_less(pod_ready_time(a), pod_ready_time(b))
    {
        return r;
    }
    if max_restarts(a) != max_restarts(b) {
        return max_restarts(a) > max_restarts(b);
    }
    let created = |p: &Value| util::parse_time(&p["metadata"]["creationTimestamp"]);
    if let Some(r) = log_less(created(a), created(b)) {
        return r;
    }
    let uid = |p: &Value| p["metadata"]["uid"].as_str().unwrap_or_default().to_string();
    uid(a) < uid(b)
}

/// `getPodsToDelete`: the first `n` Pods in deletion order.
fn pods_to_delete(active: &[Value], related: &[Value], n: usize) -> Vec<Value> {
    if n >= active.len() {
        return active.to_vec();
    }
    let mut on_node: HashMap<String, usize> = HashMap::new();
    for p in related.iter().filter(|p| pod_active(p)) {
        *on_node.entry(p["spec"]["nodeName"].as_str().unwrap_or_default().to_string()).or_default() += 1;
    }
    let rank = |p: &Value| on_node.get(p["spec"]["nodeName"].as_str().unwrap_or_default()).copied().unwrap_or(0);
    let now = jiff::Timestamp::now();
    let mut ranked: Vec<(&Value, usize)> = active.iter().map(|p| (p, rank(p))).collect();
    ranked.sort_by(|(a, ra), (b, rb)| {
        if less(a, b, *ra, *rb, now) {
            Ordering::Less
        } else if less(b, a, *rb, *ra, now) {
            Ordering::Greater
        } else {
            Ordering::Equal
        }
    });
    ranked.into_iter().take(n).map(|(p, _)| p.clone()).collect()
}

/// Write the status counts when they changed (`calculateStatus` + `updateReplicaSetStatus`).
async fn update_status(
    client: &Client,
    rs: &Value,
    active: &[Value],
    terminating: i64,
    failure: Option<&(&'static str, String)>,
) {
    let now = jiff::Timestamp::now();
    let min_ready = int(&rs["spec"]["minReadySeconds"], 0);
    let template_labels = json!({"matchLabels": rs["spec"]["template"]["metadata"]["labels"].clone()});
    let labeled = active.iter().filter(|p| selector_matches(&template_labels, &p["metadata"]["labels"])).count();
    let ready = active.iter().filter(|p| pod_ready(p)).count();
    let available = active.iter().filter(|p| pod_available(p, min_ready, now)).count();

    let old = &rs["status"];
    let mut conditions: Vec<Value> = old["conditions"].as_array().cloned().unwrap_or_default();
    let has_failure = conditions.iter().any(|c| c["type"] == "ReplicaFailure");
    match failure {
        Some((reason, message)) if !has_failure => conditions.push(json!({
            "type": "ReplicaFailure", "status": "True", "lastTransitionTime": crate::api::now(),
            "reason": reason, "message": message,
        })),
        None if has_failure => conditions.retain(|c| c["type"] != "ReplicaFailure"),
        _ => {}
    }

    let mut status = serde_json::Map::new();
    status.insert("replicas".into(), json!(active.len()));
    for (k, v) in [("fullyLabeledReplicas", labeled), ("readyReplicas", ready), ("availableReplicas", available)] {
        if v > 0 {
            status.insert(k.into(), json!(v));
        }
    }
    status.insert("terminatingReplicas".into(), json!(terminating));
    let generation = int(&rs["metadata"]["generation"], 0);
    if generation > 0 {
        status.insert("observedGeneration".into(), json!(generation));
    }
    if !conditions.is_empty() {
        status.insert("conditions".into(), json!(conditions));
    }
    let status = Value::Object(status);
    if &status == old {
        return;
    }
    let mut new = rs.clone();
    new["status"] = status;
    let _ = client.update(&path("apps/v1", "replicasets", namespace(rs), name(rs), "status"), &new).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, node: &str, ready_at: Option<&str>) -> Value {
        let mut p = json!({"metadata": {"uid": uid, "creationTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"nodeName": node}, "status": {"phase": "Running"}});
        if let Some(t) = ready_at {
            p["status"]["conditions"] = json!([{"type": "Ready", "status": "True", "lastTransitionTime": t}]);
        }
        p
    }

    #[test]
    fn most_recently_ready_goes_first() {
        let old = pod("a", "n", Some("2000-01-01T00:00:02Z"));
        let new = pod("b", "n", Some("2026-01-01T00:00:02Z"));
        let got = pods_to_delete(&[old.clone(), new.clone()], &[old.clone(), new.clone()], 1);
        assert_eq!(got[0]["metadata"]["uid"], "b");
        let unready = pod("c", "n", None);
        let got = pods_to_delete(&[old.clone(), unready], &[], 1);
        assert_eq!(got[0]["metadata"]["uid"], "c");
        let unbound = pod("d", "", Some("2026-01-01T00:00:02Z"));
        let got = pods_to_delete(&[new, unbound], &[], 1);
        assert_eq!(got[0]["metadata"]["uid"], "d");
    }
}
