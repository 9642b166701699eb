//! kube-controller-manager's `deployment/util`: fenceposts (maxSurge/maxUnavailable), replica
//! counts over ReplicaSets, the ReplicaSet annotations, conditions, the pod-template-hash and
//! the progress checks.

use serde_json::{Value, json};

use super::super::replicaset::util::{int, parse_time};

/// `deployment.kubernetes.io/revision`.
pub const REVISION: &str = "deployment.kubernetes.io/revision";
/// `deployment.kubernetes.io/revision-history`.
pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
/// `deployment.kubernetes.io/desired-replicas`.
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
/// `deployment.kubernetes.io/max-replicas`.
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
/// The label that tells a Deployment's ReplicaSets apart.
pub const HASH_LABEL: &str = "pod-template-hash";

const SKIP_COPY: &[&str] = &[
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    REVISION_HISTORY,
    DESIRED_REPLICAS,
    MAX_REPLICAS,
    "deprecated.deployment.rollback.to",
];

/// Longest revision-history annotation kept.
const MAX_REV_HISTORY_CHARS: usize = 2000;

/// `spec.replicas` (defaulted to 1).
pub fn replicas(obj: &Value) -> i64 {
    int(&obj["spec"]["replicas"], 1)
}

/// `intstr.GetScaledValueFromIntOrPercent`.
pub fn scaled_value(v: &Value, total: i64, round_up: bool) -> Option<i64> {
    match v {
        Value::Null => Some(0),
        Value::Number(n) => n.as_i64(),
        Value::String(s) => {
            let p: f64 = s.strip_suffix('%')?.parse::<i64>().ok()? as f64;
            let x = p * total as f64 / 100.0;
            Some(if round_up { x.ceil() } else { x.floor() } as i64)
        }
        _ => None,
    }
}

fn is_rolling(d: &Value) -> bool {
    d["spec"]["strategy"]["type"] == "RollingUpdate"
}

/// `ResolveFenceposts`: (surge, unavailable); both 0 resolve to unavailable 1.
pub fn fenceposts(d: &Value) -> (i64, i64) {
    let ru = &d["spec"]["strategy"]["rollingUpdate"];
    let desired = replicas(d);
    let surge = scaled_value(&ru["maxSurge"], desired, true).unwrap_or(0);
    let mut unavailable = scaled_value(&ru["maxUnavailable"], desired, false).unwrap_or(0);
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    (surge, unavailable)
}

/// `MaxUnavailable`.
pub fn max_unavailable(d: &Value) -> i64 {
    if !is_rolling(d) || replicas(d) == 0 {
        return 0;
    }
    fenceposts(d).1.min(replicas(d))
}

/// `MaxSurge`.
pub fn max_surge(d: &Value) -> i64 {
    if !is_rolling(d) {
        return 0;
    }
    fenceposts(d).0
}

/// Sum of `spec.replicas`.
pub fn spec_count(rss: &[&Value]) -> i64 {
    rss.iter().map(|r| replicas(r)).sum()
}

/// Sum of a status count.
pub fn status_count(rss: &[&Value], field: &str) -> i64 {
    rss.iter().map(|r| int(&r["status"][field], 0)).sum()
}

/// Sum of `status.terminatingReplicas`, None when some ReplicaSet has not reported it.
pub fn terminating_count(rss: &[&Value]) -> Option<i64> {
    let mut n = 0;
    for r in rss {
        n += r["status"]["terminatingReplicas"].as_i64()?;
    }
    Some(n)
}

/// An annotation.
pub fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj["metadata"]["annotations"][key].as_str()
}

fn set_annotation(obj: &mut Value, key: &str, value: &str) {
    if !obj["metadata"]["annotations"].is_object() {
        obj["metadata"]["annotations"] = json!({});
    }
    obj["metadata"]["annotations"][key] = json!(value);
}

/// The revision of a ReplicaSet (0 when missing or malformed).
pub fn revision(rs: &Value) -> i64 {
    annotation(rs, REVISION).and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// `SetDeploymentRevision`: whether it changed.
pub fn set_deployment_revision(d: &mut Value, rev: &str) -> bool {
    if annotation(d, REVISION) == Some(rev) {
        return false;
    }
    set_annotation(d, REVISION, rev);
    true
}

/// `ReplicasAnnotationsNeedUpdate`.
pub fn replicas_annotations_need_update(rs: &Value, desired: i64, max: i64) -> bool {
    annotation(rs, DESIRED_REPLICAS) != Some(desired.to_string().as_str())
        || annotation(rs, MAX_REPLICAS) != Some(max.to_string().as_str())
}

/// `SetReplicasAnnotations`: whether they changed.
pub fn set_replicas_annotations(rs: &mut Value, desired: i64, max: i64) -> bool {
    let mut changed = false;
    for (k, v) in [(DESIRED_REPLICAS, desired), (MAX_REPLICAS, max)] {
        let v = v.to_string();
        if annotation(rs, k) != Some(v.as_str()) {
            set_annotation(rs, k, &v);
            changed = true;
        }
    }
    changed
}

/// `SetNewReplicaSetAnnotations`: the Deployment's own annotations, the revision (and its
/// history when an older ReplicaSet becomes new again), and for a ReplicaSet about to be
/// created the replica annotations. Whether anything changed.
pub fn set_new_rs_annotations(d: &Value, rs: &mut Value, new_revision: i64, exists: bool) -> bool {
    let mut changed = false;
    if let Some(m) = d["metadata"]["annotations"].as_object() {
        for (k, v) in m {
            if SKIP_COPY.contains(&k.as_str()) || annotation(rs, k) == v.as_str() {
                continue;
            }
            set_annotation(rs, k, v.as_str().unwrap_or_default());
            changed = true;
        }
    }
    if !rs["metadata"]["annotations"].is_object() {
        rs["metadata"]["annotations"] = json!({});
    }
    let old = annotation(rs, REVISION).map(str::to_string);
    let old_rev = match &old {
        None => 0,
        Some(s) => match s.parse::<i64>() {
            Ok(n) => n,
            Err(_) => return false,
        },
    };
    if old_rev < new_revision {
        set_annotation(rs, REVISION, &new_revision.to_string());
        changed = true;
        if let Some(old) = old {
            let history = annotation(rs, REVISION_HISTORY).unwrap_or_default().to_string();
            if history.is_empty() {
                set_annotation(rs, REVISION_HISTORY, &old);
            } else {
                let mut revs: Vec<&str> = history.split(',').collect();
                let mut total = history.len() + old.len() + 1;
                let mut start = 0;
                while total > MAX_REV_HISTORY_CHARS && start < revs.len() {
                    total -= revs[start].len() + 1;
                    start += 1;
                }
                if total <= MAX_REV_HISTORY_CHARS {
                    revs = revs.split_off(start);
                    revs.push(&old);
                    let joined = revs.join(",");
                    set_annotation(rs, REVISION_HISTORY, &joined);
                }
            }
        }
    }
    if !exists && set_replicas_annotations(rs, replicas(d), replicas(d) + max_surge(d)) {
        changed = true;
    }
    changed
}

/// A template compared as `EqualIgnoreHash` does: without the hash label, with empty values
/// (Go's nil and empty maps and slices) left out.
pub fn template_key(t: &Value) -> Value {
    let mut t = t.clone();
    if let Some(l) = t["metadata"]["labels"].as_object_mut() {
        l.remove(HASH_LABEL);
    }
    prune(&t).unwrap_or(Value::Null)
}

fn prune(v: &Value) -> Option<Value> {
    match v {
        Value::Null => None,
        Value::Object(m) => {
            let m: serde_json::Map<String, Value> =
                m.iter().filter_map(|(k, v)| prune(v).map(|v| (k.clone(), v))).collect();
            if m.is_empty() { None } else { Some(Value::Object(m)) }
        }
        Value::Array(a) => {
            if a.is_empty() {
                None
            } else {
                Some(Value::Array(a.iter().map(|v| prune(v).unwrap_or(Value::Null)).collect()))
            }
        }
        v => Some(v.clone()),
    }
}

fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for k in keys {
                out.push_str(&serde_json::to_string(k).unwrap_or_default());
                out.push(':');
                canonical(&m[k], out);
                out.push(',');
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for v in a {
                canonical(v, out);
                out.push(',');
            }
            out.push(']');
        }
        v => out.push_str(&v.to_string()),
    }
}

/// `controller.ComputeHash`: FNV-32a of the template (and the collision count), its decimal
/// digits encoded with the generateName alphabet.
pub fn compute_hash(template: &Value, collision_count: Option<i64>) -> String {
    let mut s = String::new();
    canonical(template, &mut s);
    let mut bytes = s.into_bytes();
    if let Some(c) = collision_count {
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&(c as u32).to_le_bytes());
        bytes.extend_from_slice(&b);
    }
    let mut h: u32 = 0x811c9dc5;
    for b in bytes {
        h ^= b as u32;
        h = h.wrapping_mul(0x01000193);
    }
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    h.to_string().bytes().map(|b| ALPHABET[b as usize % ALPHABET.len()] as char).collect()
}

/// A condition with both times now.
pub fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Value {
    let now = crate::api::now();
    json!({"type": type_, "status": status, "lastUpdateTime": now, "lastTransitionTime": now, "reason": reason, "message": message})
}

/// A condition of a status.
pub fn get_condition<'a>(status: &'a Value, type_: &str) -> Option<&'a Value> {
    status["conditions"].as_array()?.iter().find(|c| c["type"] == type_)
}

/// `RemoveDeploymentCondition`.
pub fn remove_condition(status: &mut Value, type_: &str) {
    if let Some(a) = status["conditions"].as_array_mut() {
        a.retain(|c| c["type"] != type_);
        if a.is_empty()
            && let Some(m) = status.as_object_mut()
        {
            m.remove("conditions");
        }
    }
}

/// `SetDeploymentCondition`: nothing when status and reason are unchanged; the transition time
/// kept when the status is; the condition moves to the end.
pub fn set_condition(status: &mut Value, mut cond: Value) {
    if let Some(cur) = get_condition(status, cond["type"].as_str().unwrap_or_default()) {
        if cur["status"] == cond["status"] && cur["reason"] == cond["reason"] {
            return;
        }
        if cur["status"] == cond["status"] {
            cond["lastTransitionTime"] = cur["lastTransitionTime"].clone();
        }
    }
    let type_ = cond["type"].as_str().unwrap_or_default().to_string();
    let mut conds: Vec<Value> = status["conditions"].as_array().cloned().unwrap_or_default();
    conds.retain(|c| c["type"] != type_.as_str());
    conds.push(cond);
    if !status.is_object() {
        *status = json!({});
    }
    status["conditions"] = json!(conds);
}

/// `HasProgressDeadline`.
pub fn has_progress_deadline(d: &Value) -> bool {
    d["spec"]["progressDeadlineSeconds"].as_i64().is_some_and(|s| s != i32::MAX as i64)
}

/// `DeploymentComplete`.
pub fn deployment_complete(d: &Value, status: &Value) -> bool {
    let want = replicas(d);
    int(&status["updatedReplicas"], 0) == want
        && int(&status["replicas"], 0) == want
        && int(&status["availableReplicas"], 0) == want
        && int(&status["observedGeneration"], 0) >= int(&d["metadata"]["generation"], 0)
}

/// `DeploymentProgressing`: more updated, ready or available replicas, or fewer old ones.
pub fn deployment_progressing(d: &Value, new: &Value) -> bool {
    let old = &d["status"];
    let f = |s: &Value, k: &str| int(&s[k], 0);
    let old_old = f(old, "replicas") - f(old, "updatedReplicas");
    let new_old = f(new, "replicas") - f(new, "updatedReplicas");
    f(new, "updatedReplicas") > f(old, "updatedReplicas")
        || new_old < old_old
        || f(new, "readyReplicas") > f(old, "readyReplicas")
        || f(new, "availableReplicas") > f(old, "availableReplicas")
}

/// `DeploymentTimedOut`: no progress within `progressDeadlineSeconds` of the Progressing
/// condition's last update.
pub fn deployment_timed_out(d: &Value, new: &Value) -> bool {
    if !has_progress_deadline(d) {
        return false;
    }
    let Some(c) = get_condition(new, "Progressing") else { return false };
    match c["reason"].as_str() {
        Some("NewReplicaSetAvailable") => return false,
        Some("ProgressDeadlineExceeded") => return true,
        _ => {}
    }
    let Some(from) = parse_time(&c["lastUpdateTime"]) else { return false };
    let deadline = int(&d["spec"]["progressDeadlineSeconds"], 600);
    from.as_nanosecond() + i128::from(deadline) * 1_000_000_000 < jiff::Timestamp::now().as_nanosecond()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fenceposts_round_surge_up_and_unavailable_down() {
        let d = json!({"spec": {"replicas": 2, "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}}});
        assert_eq!(fenceposts(&d), (1, 0));
        assert_eq!(max_surge(&d), 1);
        assert_eq!(max_unavailable(&d), 0);
        let d = json!({"spec": {"replicas": 10, "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": "25%"}}}});
        assert_eq!(fenceposts(&d), (0, 2));
        let d = json!({"spec": {"replicas": 3, "strategy": {"type": "Recreate"}}});
        assert_eq!((max_surge(&d), max_unavailable(&d)), (0, 0));
    }

    #[test]
    fn conditions_move_to_the_end_on_change() {
        let mut s = json!({});
        set_condition(&mut s, condition("Progressing", "Unknown", "DeploymentPaused", "Deployment is paused"));
        set_condition(&mut s, condition("Available", "False", "MinimumReplicasUnavailable", "m"));
        assert_eq!(s["conditions"][0]["type"], "Progressing");
        set_condition(&mut s, condition("Progressing", "Unknown", "DeploymentResumed", "Deployment is resumed"));
        assert_eq!(s["conditions"][0]["type"], "Available");
        assert_eq!(s["conditions"][1]["reason"], "DeploymentResumed");
    }

    #[test]
    fn hash_is_stable_and_ignores_key_order() {
        let a = json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "a", "image": "x"}]}});
        let b = json!({"spec": {"containers": [{"image": "x", "name": "a"}]}, "metadata": {"labels": {"app": "web"}}});
        assert_eq!(compute_hash(&a, None), compute_hash(&b, None));
        assert_ne!(compute_hash(&a, None), compute_hash(&a, Some(1)));
        assert!(compute_hash(&a, None).chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)));
    }

    #[test]
    fn revision_history() {
        let d = json!({"metadata": {"annotations": {"note": "x"}}, "spec": {"replicas": 1}});
        let mut rs = json!({"metadata": {"annotations": {REVISION: "1"}}});
        assert!(set_new_rs_annotations(&d, &mut rs, 3, true));
        assert_eq!(annotation(&rs, REVISION), Some("3"));
        assert_eq!(annotation(&rs, REVISION_HISTORY), Some("1"));
        assert_eq!(annotation(&rs, "note"), Some("x"));
        assert!(!set_new_rs_annotations(&d, &mut rs, 3, true));
    }
}
