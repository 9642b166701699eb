//! Dedicated rules for Pods (core), after Argo CD's: the phase, then the containers, then
//! scheduling and readiness. Deletion is checked before.

use serde_json::Value;

use super::{Assessment, condition, int, text};

/// Waiting reasons that mean the container cannot start without someone fixing something.
const STUCK: [&str; 7] = [
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "ErrImagePull",
    "CreateContainerConfigError",
    "CreateContainerError",
    "InvalidImageName",
    "RunContainerError",
];

/// One entry of `status.initContainerStatuses` or `status.containerStatuses`.
struct Container<'a> {
    /// "init container" or "container".
    what: &'static str,
    status: &'a Value,
}

impl Container<'_> {
    fn name(&self) -> &str {
        text(self.status, &["name"]).unwrap_or("")
    }

    fn label(&self) -> String {
        format!("{} {}", self.what, self.name())
    }

    fn waiting_reason(&self) -> Option<&str> {
        text(self.status, &["state", "waiting", "reason"]).filter(|r| !r.is_empty())
    }

    /// The container's previous termination, if any.
    fn last_terminated(&self) -> Option<&Value> {
        super::at(self.status, &["lastState", "terminated"]).filter(|t| t.is_object())
    }
}

/// Init containers first, then the others, each in the order the kubelet lists them.
fn containers(obj: &Value) -> Vec<Container<'_>> {
    let mut out = Vec::new();
    for (field, what) in [("initContainerStatuses", "init container"), ("containerStatuses", "container")] {
        if let Some(list) = super::at(obj, &["status", field]).and_then(Value::as_array) {
            out.extend(list.iter().map(|status| Container { what, status }));
        }
    }
    out
}

/// Pod (core).
pub(super) fn pod(obj: &Value) -> Assessment {
    let phase = text(obj, &["status", "phase"]).unwrap_or("");
    match phase {
        "Succeeded" => return Assessment::healthy(),
        "Failed" => return Assessment::degraded(failed(obj)),
        _ => {}
    }
    let containers = containers(obj);
    for c in &containers {
        if let Some(reason) = c.waiting_reason().filter(|r| STUCK.contains(r)) {
            return Assessment::degraded(stuck(c, reason));
        }
    }
    for c in &containers {
        let restarts = int(c.status, &["restartCount"]).unwrap_or(0);
        if restarts > 0 && c.last_terminated().and_then(|t| text(t, &["reason"])) == Some("OOMKilled") {
            let plural = if restarts == 1 { "" } else { "s" };
            return Assessment::degraded(format!("{} was OOMKilled ({restarts} restart{plural})", c.label()));
        }
    }
    let scheduled = condition(obj, "PodScheduled");
    if let Some(c) = scheduled.filter(|c| c.is_false() && c.reason == "Unschedulable") {
        return Assessment::progressing(if c.message.is_empty() {
            "unschedulable".to_string()
        } else {
            format!("unschedulable: {}", c.message)
        });
    }
    match phase {
        "Running" => {
            let ready = condition(obj, "Ready");
            if ready.is_some_and(|c| c.is_true()) {
                return Assessment::healthy();
            }
            let unready = containers
                .iter()
                .find(|c| c.what == "container" && c.status.get("ready").and_then(Value::as_bool) == Some(false));
            Assessment::progressing(match (unready, ready) {
                (Some(c), _) => format!("{} is not ready", c.label()),
                (None, Some(ready)) => ready.describe_as("Ready"),
                (None, None) => "not ready".to_string(),
            })
        }
        "Pending" | "" => {
            if let Some((c, reason)) = containers.iter().find_map(|c| c.waiting_reason().map(|r| (c, r))) {
                return Assessment::progressing(format!("{} is waiting ({reason})", c.label()));
            }
            match scheduled {
                Some(c) if c.is_true() => Assessment::progressing("Pending"),
                Some(c) => Assessment::progressing(c.describe("waiting to be scheduled")),
                None => Assessment::progressing("waiting to be scheduled"),
            }
        }
        other => {
            let message = text(obj, &["status", "message"]).unwrap_or("");
            Assessment::progressing(if message.is_empty() {
                format!("phase is {other}")
            } else {
                format!("phase is {other}: {message}")
            })
        }
    }
}

/// "container X is in Reason", with the last exit code for a crash loop and the waiting message
/// for the others.
fn stuck(c: &Container<'_>, reason: &str) -> String {
    let mut message = format!("{} is in {reason}", c.label());
    if reason == "CrashLoopBackOff" {
        if let Some(last) = c.last_terminated() {
            let mut details = Vec::new();
            if text(last, &["reason"]) == Some("OOMKilled") {
                details.push("OOMKilled".to_string());
            }
            if let Some(code) = int(last, &["exitCode"]) {
                details.push(format!("exit code {code}"));
            }
            if !details.is_empty() {
                message.push_str(&format!(" ({})", details.join(", ")));
            }
        }
    } else if let Some(detail) = text(c.status, &["state", "waiting", "message"]).filter(|m| !m.is_empty()) {
        message.push_str(": ");
        message.push_str(detail);
    }
    message
}

/// Why a Failed Pod failed: its own reason and message, else the first container that failed.
fn failed(obj: &Value) -> String {
    let reason = text(obj, &["status", "reason"]).unwrap_or("");
    let message = text(obj, &["status", "message"]).unwrap_or("");
    if !reason.is_empty() || !message.is_empty() {
        return super::Condition { status: "", reason, message }.describe("failed");
    }
    for c in containers(obj) {
        let Some(terminated) = super::at(c.status, &["state", "terminated"]) else { continue };
        if text(terminated, &["reason"]) == Some("OOMKilled") {
            return format!("failed: {} was OOMKilled", c.label());
        }
        if let Some(code) = int(terminated, &["exitCode"]).filter(|code| *code != 0) {
            return format!("failed: {} exited with code {code}", c.label());
        }
    }
    "failed".to_string()
}
