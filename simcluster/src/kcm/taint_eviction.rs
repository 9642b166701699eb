//! The taint-eviction-controller of kube-controller-manager: Pods on a Node with NoExecute
//! taints are deleted unless they tolerate every one of them.
//!
//! Expected flow, per bound Pod not already being deleted, on every pass (woken by Node and Pod
//! changes, and once a second for the clock): the NoExecute taints of its Node are matched
//! against its tolerations ([`eviction_time`]). A taint no toleration matches: the Pod goes now.
//! All tolerated: it goes once the shortest matching `tolerationSeconds` has passed since the
//! taint's `timeAdded` (by the simulation's clock; a toleration without `tolerationSeconds`
//! tolerates forever). Every Pod gets the DefaultTolerationSeconds admission's 300 s tolerations
//! of `not-ready` and `unreachable`, so the Pods of a Node marked `Unknown` go 5 minutes after
//! the node controller tainted it. Eviction: a Normal `TaintManagerEviction` Event (`Marking for
//! deletion Pod ns/name`), the `DisruptionTarget` condition (`DeletionByTaintManager`, `Taint
//! manager: deleting due to NoExecute taint`) through `pods/status`, then a graceful deletion:
//! on a Node whose kubelet is gone the Pod stays Terminating, as on a real cluster, while its
//! controller replaces it.
//!
//! Caveat: the real controller starts the toleration period when it first sees the taint; the
//! taint's `timeAdded` (written by the node controller at that moment) stands for it here.

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use crate::client::{Client, path};

/// The Event source.
pub const COMPONENT: &str = "taint-eviction-controller";

/// `Toleration.ToleratesTaint`.
fn tolerates(toleration: &Value, taint: &Value) -> bool {
    let effect = toleration["effect"].as_str().unwrap_or_default();
    if !effect.is_empty() && toleration["effect"] != taint["effect"] {
        return false;
    }
    let key = toleration["key"].as_str().unwrap_or_default();
    if !key.is_empty() && toleration["key"] != taint["key"] {
        return false;
    }
    match toleration["operator"].as_str().unwrap_or("Equal") {
        "Exists" => true,
        "" | "Equal" => toleration["value"].as_str().unwrap_or_default() == taint["value"].as_str().unwrap_or_default(),
        _ => false,
    }
}

/// When a Pod must be evicted from a Node with `taints`: `None` never; `Some(t)` at `t`.
pub fn eviction_time(pod: &Value, taints: &[Value], now: Timestamp) -> Option<Timestamp> {
    let tolerations = pod["spec"]["tolerations"].as_array().cloned().unwrap_or_default();
    let mut due: Option<Timestamp> = None;
    for taint in taints.iter().filter(|t| t["effect"] == "NoExecute") {
        let used: Vec<&Value> = tolerations.iter().filter(|t| tolerates(t, taint)).collect();
        if used.is_empty() {
            return Some(now);
        }
        let added = taint["timeAdded"].as_str().and_then(|s| s.parse().ok()).unwrap_or(now);
        // getMinTolerationTime: the shortest finite period; none finite: forever.
        let finite = used.iter().filter_map(|t| t["tolerationSeconds"].as_i64()).min();
        if let Some(secs) = finite {
            let at = added + SignedDuration::from_secs(secs.max(0));
            due = Some(due.map_or(at, |d: Timestamp| d.min(at)));
        }
    }
    due
}

/// One pass over the Pods of NoExecute-tainted Nodes.
pub async fn reconcile(client: Client) {
    let (nodes, pods): (Vec<(String, Vec<Value>)>, Vec<Value>) = {
        let txn = client.state().store.lock();
        let nodes: Vec<(String, Vec<Value>)> = txn
            .all("/nodes")
            .into_iter()
            .filter_map(|n| {
                let taints: Vec<Value> =
                    n["spec"]["taints"].as_array()?.iter().filter(|t| t["effect"] == "NoExecute").cloned().collect();
                (!taints.is_empty()).then(|| (n["metadata"]["name"].as_str().unwrap_or_default().to_string(), taints))
            })
            .collect();
        if nodes.is_empty() {
            return;
        }
        let pods = txn
            .all("/pods")
            .into_iter()
            .filter(|p| !p["metadata"]["deletionTimestamp"].is_string())
            .filter(|p| nodes.iter().any(|(n, _)| p["spec"]["nodeName"] == n.as_str()))
            .cloned()
            .collect();
        (nodes, pods)
    };
    let now = client.state().clock.now();
    for pod in pods {
        let Some((_, taints)) = nodes.iter().find(|(n, _)| pod["spec"]["nodeName"] == n.as_str()) else { continue };
        if eviction_time(&pod, taints, now).is_none_or(|t| t > now) {
            continue;
        }
        evict(&client, pod).await;
    }
}

/// `addConditionAndDeletePod`, with the Event first.
async fn evict(client: &Client, mut pod: Value) {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
    let name = pod["metadata"]["name"].as_str().unwrap_or_default().to_string();
    pod["kind"] = json!("Pod");
    pod["apiVersion"] = json!("v1");
    let reference = json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"name": name, "namespace": ns}});
    client
        .event(
            &reference,
            "Normal",
            "TaintManagerEviction",
            &format!("Marking for deletion Pod {ns}/{name}"),
            COMPONENT,
        )
        .await;
    let condition = json!({"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
                           "message": "Taint manager: deleting due to NoExecute taint",
                           "lastProbeTime": null, "lastTransitionTime": client.state().clock.rfc3339()});
    let has = pod["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter().any(|c| c["type"] == "DisruptionTarget" && c["reason"] == "DeletionByTaintManager")
    });
    if !has {
        let mut conditions = pod["status"]["conditions"].as_array().cloned().unwrap_or_default();
        conditions.retain(|c| c["type"] != "DisruptionTarget");
        conditions.push(condition);
        let patch = json!({"status": {"conditions": conditions}});
        if client.merge_patch(&path("v1", "pods", &ns, &name, "status"), &patch).await.is_err() {
            return;
        }
    }
    let _ = client.delete(&path("v1", "pods", &ns, &name, ""), None, None).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    #[test]
    fn tolerations_decide_when_a_pod_goes() {
        let added = at(0).strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
        let taints = [json!({"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": added})];
        let default = json!({"spec": {"tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]}});
        assert_eq!(eviction_time(&default, &taints, at(10)), Some(at(300)));
        let none = json!({"spec": {}});
        assert_eq!(eviction_time(&none, &taints, at(10)), Some(at(10)));
        let forever = json!({"spec": {"tolerations": [{"operator": "Exists"}]}});
        assert_eq!(eviction_time(&forever, &taints, at(10)), None);
        let schedule_only = [json!({"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"})];
        assert_eq!(eviction_time(&none, &schedule_only, at(10)), None);
    }
}
