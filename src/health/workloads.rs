//! Dedicated rules for Deployments, StatefulSets, DaemonSets (`apps`) and Jobs (`batch`), after
//! kubectl's rollout status, kstatus and Argo CD. Deletion is checked before.

use serde_json::Value;

use super::kstatus::unobserved;
use super::{Assessment, condition, flag, int, text};

/// `spec.replicas`, 1 when unset (the controllers' default).
fn desired_replicas(obj: &Value) -> i64 {
    int(obj, &["spec", "replicas"]).unwrap_or(1)
}

/// A `status` count, 0 when unset.
fn count(obj: &Value, field: &str) -> i64 {
    int(obj, &["status", field]).unwrap_or(0)
}

fn on_delete(obj: &Value) -> bool {
    text(obj, &["spec", "updateStrategy", "type"]) == Some("OnDelete")
}

/// Deployment (`apps`).
pub(super) fn deployment(obj: &Value) -> Assessment {
    if flag(obj, &["spec", "paused"]) {
        return Assessment::healthy();
    }
    if let Some(progressing) = unobserved(obj, "Deployment", true) {
        return progressing;
    }
    if let Some(c) = condition(obj, "Progressing")
        && c.is_false()
        && c.reason == "ProgressDeadlineExceeded"
    {
        let mut message = "progress deadline exceeded".to_string();
        if !c.message.is_empty() {
            message.push_str(": ");
            message.push_str(c.message);
        }
        return Assessment::degraded(message);
    }
    let desired = desired_replicas(obj);
    let (replicas, updated, available) =
        (count(obj, "replicas"), count(obj, "updatedReplicas"), count(obj, "availableReplicas"));
    if updated < desired {
        return Assessment::progressing(format!("{updated} of {desired} replicas updated"));
    }
    if replicas > updated {
        return Assessment::progressing(format!("{} old replicas pending termination", replicas - updated));
    }
    if available < updated {
        return Assessment::progressing(format!("{available} of {updated} updated replicas available"));
    }
    Assessment::healthy()
}

/// StatefulSet (`apps`).
pub(super) fn stateful_set(obj: &Value) -> Assessment {
    if let Some(progressing) = unobserved(obj, "StatefulSet", true) {
        return progressing;
    }
    if on_delete(obj) {
        return Assessment::healthy();
    }
    let desired = desired_replicas(obj);
    let (replicas, ready, updated) =
        (count(obj, "replicas"), count(obj, "readyReplicas"), count(obj, "updatedReplicas"));
    if ready < desired {
        return Assessment::progressing(format!("{ready} of {desired} replicas ready"));
    }
    if replicas > desired {
        return Assessment::progressing(format!("{} extra replicas pending termination", replicas - desired));
    }
    let partition = int(obj, &["spec", "updateStrategy", "rollingUpdate", "partition"]).unwrap_or(0);
    if partition > 0 {
        let target = (desired - partition).max(0);
        if updated < target {
            return Assessment::progressing(format!("{updated} of {target} replicas updated (partition {partition})"));
        }
        return Assessment::healthy();
    }
    let current = text(obj, &["status", "currentRevision"]).unwrap_or("");
    let update = text(obj, &["status", "updateRevision"]).unwrap_or("");
    if current != update {
        return Assessment::progressing(format!("{updated} of {desired} replicas updated to revision {update}"));
    }
    Assessment::healthy()
}

/// DaemonSet (`apps`).
pub(super) fn daemon_set(obj: &Value) -> Assessment {
    if let Some(progressing) = unobserved(obj, "DaemonSet", true) {
        return progressing;
    }
    if on_delete(obj) {
        return Assessment::healthy();
    }
    let desired = count(obj, "desiredNumberScheduled");
    let (updated, available) = (count(obj, "updatedNumberScheduled"), count(obj, "numberAvailable"));
    if updated < desired {
        return Assessment::progressing(format!("{updated} of {desired} scheduled Pods updated"));
    }
    if available < desired {
        return Assessment::progressing(format!("{available} of {desired} scheduled Pods available"));
    }
    Assessment::healthy()
}

/// Job (`batch`).
pub(super) fn job(obj: &Value) -> Assessment {
    for failure in ["Failed", "FailureTarget"] {
        if let Some(c) = condition(obj, failure).filter(|c| c.is_true()) {
            return Assessment::degraded(c.describe("failed"));
        }
    }
    for success in ["Complete", "SuccessCriteriaMet"] {
        if condition(obj, success).is_some_and(|c| c.is_true()) {
            return Assessment::healthy();
        }
    }
    if flag(obj, &["spec", "suspend"]) {
        return Assessment::healthy();
    }
    let succeeded = count(obj, "succeeded");
    let mut message = match int(obj, &["spec", "completions"]) {
        Some(completions) => format!("{succeeded} of {completions} completions"),
        None => format!("{succeeded} completions"),
    };
    for (field, label) in [("active", "active"), ("failed", "failed")] {
        let n = count(obj, field);
        if n > 0 {
            message.push_str(&format!(", {n} {label}"));
        }
    }
    Assessment::progressing(message)
}
