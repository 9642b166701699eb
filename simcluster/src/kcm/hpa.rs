//! The horizontal-pod-autoscaler controller of kube-controller-manager, as it behaves on a
//! cluster without a metrics server (there is none here): no metric can be read, so it never
//! scales on metrics, but it reports the target's scale and keeps the target within
//! `minReplicas..maxReplicas`.
//!
//! Expected flow (`reconcileAutoscaler`), per HorizontalPodAutoscaler, when it is new or its
//! generation changed, and otherwise every 15 s of the simulation's clock (the real sync
//! period):
//!
//! 1. Read the target's `scale` subresource (`spec.scaleTargetRef`). Failure: a Warning
//!    `FailedGetScale` Event and `AbleToScale=False`/`FailedGetScale`. Success:
//!    `AbleToScale=True`/`SucceededGetScale`.
//! 2. Target at 0 replicas (with `minReplicas` not 0): `ScalingActive=False`/`ScalingDisabled`.
//!    Above `maxReplicas` or below `minReplicas` (default 1): update the scale to the bound,
//!    Normal `SuccessfulRescale` Event (`New size: N; reason: Current number of replicas below
//!    Spec.MinReplicas`), `AbleToScale=True`/`SucceededRescale`, `lastScaleTime`.
//! 3. Otherwise every metric fails: a Warning Event per metric (`FailedGetResourceMetric` ...,
//!    with the metrics client's message, e.g. `failed to get cpu utilization: unable to get
//!    metrics for resource cpu: unable to fetch metrics from resource metrics API: the server
//!    could not find the requested resource (get pods.metrics.k8s.io)`),
//!    `ScalingActive=False` with that reason, status `currentReplicas` and one empty
//!    `currentMetrics` entry per metric (`{"type": ""}`, as the real controller leaves them),
//!    and a Warning `FailedComputeMetricsReplicas` Event (`invalid metrics (1 invalid out of 1),
//!    first error is: ...`). `desiredReplicas` keeps its value.
//!
//! The status is written through `horizontalpodautoscalers/status` only when it changed;
//! condition transition times move only when a condition's status changes. The Events repeat at
//! each sync and are aggregated (count) by the event client. Messages of Pods, Object and
//! External metrics follow the custom and external metrics clients.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use crate::client::{Client, path};

/// The Event source.
pub const COMPONENT: &str = "horizontal-pod-autoscaler";
/// How often an HPA is synced (`--horizontal-pod-autoscaler-sync-period`).
pub const SYNC_PERIOD: SignedDuration = SignedDuration::from_secs(15);
/// What the resource metrics client says when no metrics server is registered.
const NO_RESOURCE_METRICS: &str = "unable to fetch metrics from resource metrics API: the server could not find the requested resource (get pods.metrics.k8s.io)";
const NO_CUSTOM_METRICS: &str =
    "unable to fetch metrics from custom metrics API: no custom metrics API (custom.metrics.k8s.io) registered";
const NO_EXTERNAL_METRICS: &str = "unable to fetch metrics from external metrics API: the server could not find the requested resource (get external.metrics.k8s.io)";

/// Per metric: the Event and condition reason, the Event message and the wrapped error.
pub fn metric_error(metric: &Value) -> (String, String, String) {
    let t = metric["type"].as_str().unwrap_or_default();
    match t {
        "Resource" | "ContainerResource" => {
            let src = if t == "Resource" { &metric["resource"] } else { &metric["containerResource"] };
            let res = src["name"].as_str().unwrap_or_default();
            let what = if src["target"]["averageUtilization"].is_null() { "usage" } else { "utilization" };
            let msg =
                format!("failed to get {res} {what}: unable to get metrics for resource {res}: {NO_RESOURCE_METRICS}");
            if t == "Resource" {
                (
                    "FailedGetResourceMetric".into(),
                    msg.clone(),
                    format!("failed to get {res} resource metric value: {msg}"),
                )
            } else {
                let container = src["container"].as_str().unwrap_or_default();
                let wrapped = format!("failed to get {container} container metric value: {msg}");
                ("FailedGetContainerResourceMetric".into(), msg, wrapped)
            }
        }
        "Pods" => {
            let name = metric["pods"]["metric"]["name"].as_str().unwrap_or_default();
            let msg = format!("unable to get metric {name}: {NO_CUSTOM_METRICS}");
            ("FailedGetPodsMetric".into(), msg.clone(), format!("failed to get pods metric value: {msg}"))
        }
        "Object" => {
            let name = metric["object"]["metric"]["name"].as_str().unwrap_or_default();
            let msg = format!("unable to get metric {name}: {NO_CUSTOM_METRICS}");
            ("FailedGetObjectMetric".into(), msg.clone(), format!("failed to get object metric value: {msg}"))
        }
        "External" => {
            let name = metric["external"]["metric"]["name"].as_str().unwrap_or_default();
            let msg = format!("unable to get external metric {name}: {NO_EXTERNAL_METRICS}");
            (
                "FailedGetExternalMetric".into(),
                msg.clone(),
                format!("failed to get {name} external metric value: {msg}"),
            )
        }
        other => {
            let msg = format!("unknown metric source type {other:?}");
            ("InvalidMetricSourceType".into(), msg.clone(), msg)
        }
    }
}

/// The metrics of an HPA: `spec.metrics` (autoscaling/v2), the v1 CPU target, or the default
/// (80 % average CPU utilization).
fn metrics(hpa: &Value) -> Vec<Value> {
    if let Some(m) = hpa["spec"]["metrics"].as_array().filter(|m| !m.is_empty()) {
        return m.clone();
    }
    let target = hpa["spec"]["targetCPUUtilizationPercentage"].as_i64().unwrap_or(80);
    vec![
        json!({"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": target}}}),
    ]
}

/// `setCondition`: the transition time moves only when the status changes; order is kept.
fn set_condition(status: &mut Value, ctype: &str, s: &str, reason: &str, message: &str, now: &str) {
    if !status["conditions"].is_array() {
        status["conditions"] = json!([]);
    }
    let list = status["conditions"].as_array_mut().expect("array");
    let i = match list.iter().position(|c| c["type"] == ctype) {
        Some(i) => i,
        None => {
            list.push(json!({"type": ctype}));
            list.len() - 1
        }
    };
    let c = &mut list[i];
    if c["status"] != s {
        c["lastTransitionTime"] = json!(now);
    }
    c["status"] = json!(s);
    c["reason"] = json!(reason);
    c["message"] = json!(message);
}

/// What one sync decided: the new status, the Events, and the replica count to write.
#[derive(Debug, Default)]
pub struct Decision {
    /// The status to write.
    pub status: Value,
    /// Events (type, reason, message), in order.
    pub events: Vec<(String, String, String)>,
    /// The scale to write, with the rescale reason.
    pub rescale: Option<(i64, String)>,
}

/// `reconcileAutoscaler` without I/O: `scale` is the target's Scale, or the error message.
pub fn decide(hpa: &Value, scale: Result<&Value, &str>, now: &str) -> Decision {
    let mut d = Decision { status: hpa["status"].clone(), ..Default::default() };
    if !d.status.is_object() {
        d.status = json!({});
    }
    let scale = match scale {
        Err(e) => {
            d.events.push(("Warning".into(), "FailedGetScale".into(), e.to_string()));
            let msg = format!("the HPA controller was unable to get the target's current scale: {e}");
            set_condition(&mut d.status, "AbleToScale", "False", "FailedGetScale", &msg, now);
            return d;
        }
        Ok(s) => s,
    };
    let msg = "the HPA controller was able to get the target's current scale";
    set_condition(&mut d.status, "AbleToScale", "True", "SucceededGetScale", msg, now);
    let current = scale["spec"]["replicas"].as_i64().unwrap_or(0);
    let min = hpa["spec"]["minReplicas"].as_i64().unwrap_or(1);
    let max = hpa["spec"]["maxReplicas"].as_i64().unwrap_or(i64::MAX);
    let (desired, reason) = if current == 0 && min != 0 {
        let msg = "scaling is disabled since the replica count of the target is zero";
        set_condition(&mut d.status, "ScalingActive", "False", "ScalingDisabled", msg, now);
        (0, None)
    } else if current > max {
        (max, Some("Current number of replicas above Spec.MaxReplicas"))
    } else if current < min {
        (min, Some("Current number of replicas below Spec.MinReplicas"))
    } else {
        // No metrics server: every metric fails.
        let metrics = metrics(hpa);
        let mut first = None;
        for m in &metrics {
            let (reason, message, wrapped) = metric_error(m);
            d.events.push(("Warning".into(), reason.clone(), message.clone()));
            first.get_or_insert((reason, message, wrapped));
        }
        let (reason, message, wrapped) = first.unwrap_or_default();
        let cond = format!("the HPA was unable to compute the replica count: {message}");
        set_condition(&mut d.status, "ScalingActive", "False", &reason, &cond, now);
        d.status["currentReplicas"] = json!(current);
        d.status["currentMetrics"] = Value::Array(metrics.iter().map(|_| json!({"type": ""})).collect());
        if d.status.get("desiredReplicas").is_none() {
            d.status["desiredReplicas"] = json!(0);
        }
        let n = metrics.len();
        let msg = format!("invalid metrics ({n} invalid out of {n}), first error is: {wrapped}");
        d.events.push(("Warning".into(), "FailedComputeMetricsReplicas".into(), msg));
        return d;
    };
    let desired = match reason {
        Some(reason) => {
            let msg = format!("the HPA controller was able to update the target scale to {desired}");
            set_condition(&mut d.status, "AbleToScale", "True", "SucceededRescale", &msg, now);
            d.events.push((
                "Normal".into(),
                "SuccessfulRescale".into(),
                format!("New size: {desired}; reason: {reason}"),
            ));
            d.rescale = Some((desired, reason.to_string()));
            d.status["lastScaleTime"] = json!(now);
            desired
        }
        None => current,
    };
    d.status["currentReplicas"] = json!(current);
    d.status["desiredReplicas"] = json!(desired);
    if let Some(s) = d.status.as_object_mut() {
        s.remove("currentMetrics");
    }
    d
}

/// When each HPA was last synced, and at which generation (by cluster and uid).
fn last_syncs() -> &'static Mutex<HashMap<String, (Timestamp, i64)>> {
    static LAST: OnceLock<Mutex<HashMap<String, (Timestamp, i64)>>> = OnceLock::new();
    LAST.get_or_init(Default::default)
}

/// Forget the sync times of a cluster (when it stops).
pub fn forget(scope: &str) {
    last_syncs().lock().unwrap_or_else(|p| p.into_inner()).retain(|k, _| !k.starts_with(&format!("{scope}/")));
}

/// One pass: sync the HPAs that are due.
pub async fn reconcile(client: Client) {
    let hpas: Vec<Value> = {
        let txn = client.state().store.lock();
        txn.all("autoscaling/horizontalpodautoscalers").into_iter().cloned().collect()
    };
    let now = client.state().clock.now();
    let scope = client.state().token_key.clone();
    {
        let mut last = last_syncs().lock().unwrap_or_else(|p| p.into_inner());
        last.retain(|k, _| {
            k.strip_prefix(&format!("{scope}/")).is_none_or(|uid| hpas.iter().any(|h| h["metadata"]["uid"] == uid))
        });
    }
    for hpa in hpas {
        if hpa["metadata"]["deletionTimestamp"].is_string() {
            continue;
        }
        let key = format!("{scope}/{}", hpa["metadata"]["uid"].as_str().unwrap_or_default());
        let generation = hpa["metadata"]["generation"].as_i64().unwrap_or(0);
        {
            let mut last = last_syncs().lock().unwrap_or_else(|p| p.into_inner());
            if last.get(&key).is_some_and(|(t, g)| *g == generation && now < *t + SYNC_PERIOD) {
                continue;
            }
            last.insert(key, (now, generation));
        }
        sync(&client, hpa).await;
    }
}

async fn sync(client: &Client, mut hpa: Value) {
    let av = hpa["apiVersion"].as_str().unwrap_or("autoscaling/v2").to_string();
    hpa["kind"] = json!("HorizontalPodAutoscaler");
    hpa["apiVersion"] = json!(av);
    let ns = hpa["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
    let name = hpa["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let target = &hpa["spec"]["scaleTargetRef"];
    let (target_av, target_kind) =
        (target["apiVersion"].as_str().unwrap_or_default(), target["kind"].as_str().unwrap_or_default());
    let scale_path = client
        .state()
        .registry
        .find_kind(target_av, target_kind)
        .filter(|rt| rt.subresource("scale").is_some())
        .map(|rt| path(&rt.api_version(), &rt.resource, &ns, target["name"].as_str().unwrap_or_default(), "scale"));
    let scale = match &scale_path {
        None => Err(format!(
            "no matches for kind {target_kind:?} in group {:?}",
            target_av.split('/').next().unwrap_or_default()
        )),
        Some(p) => client
            .get(p)
            .await
            .map_err(|e| e.body().and_then(|b| b["message"].as_str().map(String::from)).unwrap_or_default()),
    };
    let now = client.state().clock.rfc3339();
    let mut decision = decide(&hpa, scale.as_ref().map_err(String::as_str), &now);
    if let (Some((replicas, reason)), Some(p), Ok(scale)) = (decision.rescale.clone(), &scale_path, &scale) {
        let mut s = scale.clone();
        s["spec"]["replicas"] = json!(replicas);
        if let Err(e) = client.update(p, &s).await {
            let err = e.body().and_then(|b| b["message"].as_str().map(String::from)).unwrap_or_default();
            let hpa_now = decide(&hpa, Ok(scale), &now);
            decision = Decision { status: hpa_now.status, events: vec![], rescale: None };
            let msg = format!("the HPA controller was unable to update the target scale: {err}");
            set_condition(&mut decision.status, "AbleToScale", "False", "FailedUpdateScale", &msg, &now);
            decision.events.push((
                "Warning".into(),
                "FailedRescale".into(),
                format!("New size: {replicas}; reason: {reason}; error: {err}"),
            ));
        }
    }
    if decision.status != hpa["status"] {
        let mut updated = hpa.clone();
        updated["status"] = decision.status.clone();
        let _ = client.update(&path(&av, "horizontalpodautoscalers", &ns, &name, "status"), &updated).await;
    }
    for (type_, reason, message) in &decision.events {
        client.event(&hpa, type_, reason, message, COMPONENT).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hpa(min: i64, max: i64) -> Value {
        json!({"metadata": {"name": "web", "namespace": "ns"},
               "spec": {"minReplicas": min, "maxReplicas": max,
                        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                        "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}]},
               "status": {"currentReplicas": 0, "desiredReplicas": 0}})
    }

    fn scale(n: i64) -> Value {
        json!({"spec": {"replicas": n}, "status": {"replicas": n, "selector": "app=web"}})
    }

    #[test]
    fn without_metrics_in_range_nothing_scales() {
        let d = decide(&hpa(1, 5), Ok(&scale(2)), "T");
        assert!(d.rescale.is_none());
        assert_eq!(d.status["currentReplicas"], 2);
        assert_eq!(d.status["desiredReplicas"], 0);
        assert_eq!(d.status["currentMetrics"], json!([{"type": ""}]));
        let c = &d.status["conditions"];
        assert_eq!(c[0]["reason"], "SucceededGetScale");
        assert_eq!(c[1]["type"], "ScalingActive");
        assert_eq!(c[1]["status"], "False");
        assert_eq!(c[1]["reason"], "FailedGetResourceMetric");
        assert_eq!(
            c[1]["message"],
            "the HPA was unable to compute the replica count: failed to get cpu utilization: unable to get metrics for resource cpu: unable to fetch metrics from resource metrics API: the server could not find the requested resource (get pods.metrics.k8s.io)"
        );
        let reasons: Vec<&str> = d.events.iter().map(|e| e.1.as_str()).collect();
        assert_eq!(reasons, ["FailedGetResourceMetric", "FailedComputeMetricsReplicas"]);
        assert!(d.events[1].2.starts_with(
            "invalid metrics (1 invalid out of 1), first error is: failed to get cpu resource metric value: failed to get cpu utilization:"
        ));
    }

    #[test]
    fn out_of_range_targets_are_scaled_into_range() {
        let d = decide(&hpa(3, 5), Ok(&scale(1)), "T");
        assert_eq!(d.rescale, Some((3, "Current number of replicas below Spec.MinReplicas".to_string())));
        assert_eq!(d.status["desiredReplicas"], 3);
        assert_eq!(d.status["lastScaleTime"], "T");
        assert_eq!(d.events[0].2, "New size: 3; reason: Current number of replicas below Spec.MinReplicas");
        let d = decide(&hpa(1, 2), Ok(&scale(4)), "T");
        assert_eq!(d.rescale.map(|r| r.0), Some(2));
        let d = decide(&hpa(1, 2), Ok(&scale(0)), "T");
        assert_eq!(d.status["conditions"][1]["reason"], "ScalingDisabled");
        let d = decide(&hpa(1, 2), Err("deployments.apps \"web\" not found"), "T");
        assert_eq!(d.status["conditions"][0]["reason"], "FailedGetScale");
    }
}
