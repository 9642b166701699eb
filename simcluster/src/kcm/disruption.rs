//! The disruption controller of kube-controller-manager: the status of every
//! PodDisruptionBudget (`policy/v1`).
//!
//! Expected flow, per PDB on every pass (woken by changes to PDBs, Pods and the workloads):
//! select the Pods of its namespace with `spec.selector` (a null selector selects none, an empty
//! one all, as in `policy/v1`); compute the expected Pod count and desired healthy count
//! ([`expected_and_desired`]): an integer `minAvailable` against the number of selected Pods; a
//! percentage `minAvailable` or any `maxUnavailable` against the scale of the Pods' controllers
//! (a ReplicaSet's Deployment, a ReplicaSet, a StatefulSet or a ReplicationController: the sum of
//! their `spec.replicas`, each counted once), percentages rounded up; count the healthy Pods
//! (Ready and not being deleted); then write, through `poddisruptionbudgets/status` and only
//! when something differs, `observedGeneration`, `expectedPods`, `currentHealthy`,
//! `desiredHealthy`, `disruptionsAllowed` (`currentHealthy - desiredHealthy`, at least 0, and 0
//! while no Pod is expected) and the `DisruptionAllowed` condition: `True`/`SufficientPods` or
//! `False`/`InsufficientPods`, with an empty message, as the real controller writes it.
//! `disruptedPods` stays absent: it is empty without the eviction API's entries, and the real
//! server omits an empty map.
//!
//! Errors: a Pod whose controller cannot be found makes the expected count unknown: a Warning
//! `CalculateExpectedPodCountFailed` Event and the fail-safe status (`disruptionsAllowed: 0`,
//! condition `False`/`SyncFailed` with the error). No selected Pod: a Normal `NoPods` Event. Pods
//! without a controller, when the count needs controllers: a Warning `UnmanagedPods` Event.
//! Events repeat at most every 30 s of the simulation's clock.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, OnceLock};

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use crate::client::{Client, path};
use crate::kcm::replicaset::util::{controller_of, pod_ready, selector_matches};

/// The Event source of the disruption controller.
pub const COMPONENT: &str = "controllermanager";
/// The condition type.
pub const DISRUPTION_ALLOWED: &str = "DisruptionAllowed";
/// Condition reasons.
pub const SUFFICIENT_PODS: &str = "SufficientPods";
/// Not enough healthy Pods for a disruption.
pub const INSUFFICIENT_PODS: &str = "InsufficientPods";
/// The expected count could not be computed.
pub const SYNC_FAILED: &str = "SyncFailed";
const EVENT_INTERVAL: SignedDuration = SignedDuration::from_secs(30);

/// The objects one pass reads, by namespace where they are namespaced.
struct World {
    pods: Vec<Value>,
    deployments: Vec<Value>,
    replicasets: Vec<Value>,
    statefulsets: Vec<Value>,
    controllers: Vec<Value>,
}

fn find<'a>(list: &'a [Value], ns: &str, name: &str, uid: &Value) -> Option<&'a Value> {
    list.iter()
        .find(|o| o["metadata"]["namespace"] == ns && o["metadata"]["name"] == name && &o["metadata"]["uid"] == uid)
}

fn replicas(obj: &Value) -> i64 {
    obj["spec"]["replicas"].as_i64().unwrap_or(1)
}

/// The controller of a Pod and its scale (`finders()`: Deployment through its ReplicaSet,
/// ReplicaSet, StatefulSet, ReplicationController). `Err(())` when the Pod has a controller
/// that cannot be found; `Ok(None)` when it has none.
fn controller_scale(world: &World, pod: &Value) -> Result<Option<(String, i64)>, ()> {
    let Some(r) = controller_of(pod) else { return Ok(None) };
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = r["name"].as_str().unwrap_or_default();
    let group = r["apiVersion"].as_str().unwrap_or_default().split('/').next().unwrap_or_default().to_string();
    let uid_of = |o: &Value| o["metadata"]["uid"].as_str().unwrap_or_default().to_string();
    match (r["kind"].as_str().unwrap_or_default(), group.as_str()) {
        ("ReplicaSet", "apps" | "extensions") => {
            let Some(rs) = find(&world.replicasets, ns, name, &r["uid"]) else { return Err(()) };
            match controller_of(rs) {
                Some(d) if d["kind"] == "Deployment" => {
                    let dname = d["name"].as_str().unwrap_or_default();
                    let dep = find(&world.deployments, ns, dname, &d["uid"]).ok_or(())?;
                    Ok(Some((uid_of(dep), replicas(dep))))
                }
                _ => Ok(Some((uid_of(rs), replicas(rs)))),
            }
        }
        ("StatefulSet", "apps") => {
            let s = find(&world.statefulsets, ns, name, &r["uid"]).ok_or(())?;
            Ok(Some((uid_of(s), replicas(s))))
        }
        ("ReplicationController", "v1") => {
            let c = find(&world.controllers, ns, name, &r["uid"]).ok_or(())?;
            Ok(Some((uid_of(c), replicas(c))))
        }
        _ => Err(()),
    }
}

/// `intstr.GetScaledValueFromIntOrPercent(v, total, roundUp=true)`.
fn scaled(v: &Value, total: i64) -> Option<i64> {
    if let Some(i) = v.as_i64() {
        return Some(i);
    }
    let p: i64 = v.as_str()?.strip_suffix('%')?.parse().ok()?;
    Some((p * total + 99).div_euclid(100))
}

/// What [`expected_and_desired`] found.
#[derive(Debug, PartialEq)]
pub struct Expected {
    /// Expected Pods.
    pub expected: i64,
    /// Desired healthy Pods.
    pub desired: i64,
    /// Pods without a controller (when the count needs controllers).
    pub unmanaged: Vec<String>,
}

/// `getExpectedPodCount`: the expected and desired healthy counts of a PDB over `pods`, or the
/// error message when a controller is missing.
fn expected_and_desired(world: &World, pdb: &Value, pods: &[&Value]) -> Result<Expected, String> {
    let spec = &pdb["spec"];
    let expected_scale = || -> Result<(i64, Vec<String>), String> {
        let mut scales: BTreeMap<String, i64> = BTreeMap::new();
        let mut unmanaged = Vec::new();
        for pod in pods {
            let pname = pod["metadata"]["name"].as_str().unwrap_or_default();
            match controller_scale(world, pod) {
                Ok(Some((uid, n))) => {
                    scales.insert(uid, n);
                }
                Ok(None) => unmanaged.push(pname.to_string()),
                Err(()) => return Err(format!("found no controllers for pod {pname:?}")),
            }
        }
        Ok((scales.values().sum(), unmanaged))
    };
    if !spec["maxUnavailable"].is_null() {
        let (expected, unmanaged) = expected_scale()?;
        let max = scaled(&spec["maxUnavailable"], expected).ok_or("invalid maxUnavailable")?;
        return Ok(Expected { expected, desired: (expected - max).max(0), unmanaged });
    }
    match &spec["minAvailable"] {
        Value::Number(n) => {
            Ok(Expected { expected: pods.len() as i64, desired: n.as_i64().unwrap_or(0), unmanaged: vec![] })
        }
        v @ Value::String(_) => {
            let (expected, unmanaged) = expected_scale()?;
            let min = scaled(v, expected).ok_or("invalid minAvailable")?;
            Ok(Expected { expected, desired: min, unmanaged })
        }
        _ => Ok(Expected { expected: 0, desired: 0, unmanaged: vec![] }),
    }
}

/// `apimeta.SetStatusCondition`: the transition time moves only when the status changes.
fn set_condition(conditions: &mut Vec<Value>, mut c: Value, now: &str) {
    match conditions.iter_mut().find(|x| x["type"] == c["type"]) {
        Some(existing) => {
            if existing["status"] != c["status"] {
                existing["status"] = c["status"].clone();
                existing["lastTransitionTime"] = json!(now);
            }
            for k in ["reason", "message", "observedGeneration"] {
                existing[k] = c[k].clone();
            }
        }
        None => {
            c["lastTransitionTime"] = json!(now);
            conditions.push(c);
        }
    }
}

/// The status a PDB should have (pure): from the counts, or the fail-safe one for an error.
pub fn pdb_status(pdb: &Value, counts: Result<(i64, i64, i64), &str>, now: &str) -> Value {
    let generation = pdb["metadata"]["generation"].as_i64().unwrap_or(0);
    let mut status = pdb["status"].as_object().cloned().unwrap_or_default();
    let mut conditions = status.get("conditions").and_then(Value::as_array).cloned().unwrap_or_default();
    match counts {
        Ok((current, desired, expected)) => {
            let allowed = if expected <= 0 { 0 } else { (current - desired).max(0) };
            status.insert("currentHealthy".into(), json!(current));
            status.insert("desiredHealthy".into(), json!(desired));
            status.insert("expectedPods".into(), json!(expected));
            status.insert("disruptionsAllowed".into(), json!(allowed));
            status.insert("observedGeneration".into(), json!(generation));
            status.remove("disruptedPods");
            let (s, reason) = if allowed > 0 { ("True", SUFFICIENT_PODS) } else { ("False", INSUFFICIENT_PODS) };
            let c = json!({"type": DISRUPTION_ALLOWED, "status": s, "reason": reason, "message": "",
                           "observedGeneration": generation});
            set_condition(&mut conditions, c, now);
        }
        Err(message) => {
            status.insert("disruptionsAllowed".into(), json!(0));
            let observed = status.get("observedGeneration").cloned().unwrap_or(json!(0));
            let c = json!({"type": DISRUPTION_ALLOWED, "status": "False", "reason": SYNC_FAILED, "message": message,
                           "observedGeneration": observed});
            set_condition(&mut conditions, c, now);
        }
    }
    status.insert("conditions".into(), Value::Array(conditions));
    Value::Object(status)
}

/// When each Event was last recorded, by cluster, PDB uid and reason.
fn last_events() -> &'static Mutex<HashMap<String, Timestamp>> {
    static LAST: OnceLock<Mutex<HashMap<String, Timestamp>>> = OnceLock::new();
    LAST.get_or_init(Default::default)
}

/// Forget the Event times of a cluster (when it stops).
pub fn forget(scope: &str) {
    last_events().lock().unwrap_or_else(|p| p.into_inner()).retain(|k, _| !k.starts_with(&format!("{scope}/")));
}

async fn throttled_event(client: &Client, pdb: &Value, type_: &str, reason: &str, message: &str) {
    let now = client.state().clock.now();
    let key = format!("{}/{}/{reason}", client.state().token_key, pdb["metadata"]["uid"].as_str().unwrap_or_default());
    {
        let mut last = last_events().lock().unwrap_or_else(|p| p.into_inner());
        if last.get(&key).is_some_and(|t| now < *t + EVENT_INTERVAL) {
            return;
        }
        last.insert(key, now);
    }
    client.event(pdb, type_, reason, message, COMPONENT).await;
}

/// One pass over every PodDisruptionBudget.
pub async fn reconcile(client: Client) {
    let (pdbs, world) = {
        let txn = client.state().store.lock();
        let all = |k: &str| txn.all(k).into_iter().cloned().collect::<Vec<Value>>();
        let pdbs = all("policy/poddisruptionbudgets");
        if pdbs.is_empty() {
            return;
        }
        let world = World {
            pods: all("/pods"),
            deployments: all("apps/deployments"),
            replicasets: all("apps/replicasets"),
            statefulsets: all("apps/statefulsets"),
            controllers: all("/replicationcontrollers"),
        };
        (pdbs, world)
    };
    let now = client.state().clock.rfc3339();
    for mut pdb in pdbs {
        if pdb["metadata"]["deletionTimestamp"].is_string() {
            continue;
        }
        pdb["kind"] = json!("PodDisruptionBudget");
        pdb["apiVersion"] = json!("policy/v1");
        let ns = pdb["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
        let name = pdb["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let pods: Vec<&Value> = world
            .pods
            .iter()
            .filter(|p| p["metadata"]["namespace"] == ns.as_str())
            .filter(|p| selector_matches(&pdb["spec"]["selector"], &p["metadata"]["labels"]))
            .collect();
        if pods.is_empty() {
            throttled_event(&client, &pdb, "Normal", "NoPods", "No matching pods found").await;
        }
        let status = match expected_and_desired(&world, &pdb, &pods) {
            Ok(e) => {
                if !e.unmanaged.is_empty() {
                    let selector = pdb["spec"]["selector"].to_string();
                    let msg = format!(
                        "Pods selected by this PodDisruptionBudget (selector: {selector}) were found to be unmanaged. As a result, the status of the PDB cannot be calculated correctly, which may result in undefined behavior. To account for these pods please set \".spec.minAvailable\" field of the PDB to an integer value."
                    );
                    throttled_event(&client, &pdb, "Warning", "UnmanagedPods", &msg).await;
                }
                let healthy =
                    pods.iter().filter(|p| !p["metadata"]["deletionTimestamp"].is_string() && pod_ready(p)).count()
                        as i64;
                pdb_status(&pdb, Ok((healthy, e.desired, e.expected)), &now)
            }
            Err(message) => {
                let msg = format!("Failed to calculate the number of expected pods: {message}");
                throttled_event(&client, &pdb, "Warning", "CalculateExpectedPodCountFailed", &msg).await;
                pdb_status(&pdb, Err(&message), &now)
            }
        };
        if status == pdb["status"] {
            continue;
        }
        let mut updated = pdb.clone();
        updated["status"] = status;
        let _ = client.update(&path("policy/v1", "poddisruptionbudgets", &ns, &name, "status"), &updated).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, owner: Option<(&str, &str, &str)>) -> Value {
        let mut p = json!({"metadata": {"name": name, "namespace": "ns", "labels": {"app": "a"}}});
        if let Some((kind, oname, uid)) = owner {
            p["metadata"]["ownerReferences"] =
                json!([{"apiVersion": "apps/v1", "kind": kind, "name": oname, "uid": uid, "controller": true}]);
        }
        p
    }

    fn world() -> World {
        World {
            pods: vec![],
            deployments: vec![
                json!({"metadata": {"name": "d", "namespace": "ns", "uid": "d1"}, "spec": {"replicas": 4}}),
            ],
            replicasets: vec![json!({"metadata": {"name": "rs", "namespace": "ns", "uid": "r1",
                                     "ownerReferences": [{"kind": "Deployment", "name": "d", "uid": "d1", "controller": true}]},
                                     "spec": {"replicas": 3}})],
            statefulsets: vec![],
            controllers: vec![],
        }
    }

    #[test]
    fn counts_follow_min_available_and_max_unavailable() {
        let w = world();
        let pods = [pod("p1", Some(("ReplicaSet", "rs", "r1"))), pod("p2", Some(("ReplicaSet", "rs", "r1")))];
        let refs: Vec<&Value> = pods.iter().collect();
        let pdb = |spec: Value| json!({"spec": spec});
        // Integer minAvailable: against the selected Pods.
        let e = expected_and_desired(&w, &pdb(json!({"minAvailable": 1})), &refs).unwrap();
        assert_eq!((e.expected, e.desired), (2, 1));
        // Percentages and maxUnavailable: against the Deployment's scale (4), rounded up.
        let e = expected_and_desired(&w, &pdb(json!({"minAvailable": "50%"})), &refs).unwrap();
        assert_eq!((e.expected, e.desired), (4, 2));
        let e = expected_and_desired(&w, &pdb(json!({"maxUnavailable": "30%"})), &refs).unwrap();
        assert_eq!((e.expected, e.desired), (4, 2));
        let e = expected_and_desired(&w, &pdb(json!({"maxUnavailable": 1})), &refs).unwrap();
        assert_eq!((e.expected, e.desired), (4, 3));
        // A Pod whose controller is missing.
        let lost = [pod("p3", Some(("ReplicaSet", "gone", "x")))];
        let refs: Vec<&Value> = lost.iter().collect();
        let err = expected_and_desired(&w, &pdb(json!({"maxUnavailable": 1})), &refs).unwrap_err();
        assert_eq!(err, "found no controllers for pod \"p3\"");
    }

    #[test]
    fn status_and_condition() {
        let pdb = json!({"metadata": {"generation": 2}, "status": {}});
        let s = pdb_status(&pdb, Ok((3, 2, 3)), "T1");
        assert_eq!(s["disruptionsAllowed"], 1);
        assert_eq!(s["observedGeneration"], 2);
        assert_eq!(
            s["conditions"],
            json!([{"type": "DisruptionAllowed", "status": "True", "reason": "SufficientPods", "message": "",
                    "observedGeneration": 2, "lastTransitionTime": "T1"}])
        );
        let pdb = json!({"metadata": {"generation": 2}, "status": s});
        let s = pdb_status(&pdb, Ok((2, 2, 3)), "T2");
        assert_eq!(s["disruptionsAllowed"], 0);
        assert_eq!(s["conditions"][0]["reason"], "InsufficientPods");
        assert_eq!(s["conditions"][0]["lastTransitionTime"], "T2");
        // Nothing expected: no disruption, whatever is healthy.
        assert_eq!(pdb_status(&pdb, Ok((0, 0, 0)), "T3")["disruptionsAllowed"], 0);
    }
}
