//! The pure health core, no kube client and no I/O, table-tested from `testdata/health/`:
//!
//! - [`assess`]: the health of one live object, with a short message saying why when it is not
//!   Healthy;
//! - [`summarize`]: the health of an Application's or a Revision's managed resources, with counts
//!   and one bounded line naming the first few resources that are not Healthy.
//!
//! Deployments, StatefulSets, DaemonSets (`apps`), Pods (core) and Jobs (`batch`) have dedicated
//! rules, modelled on kstatus (`status.Compute` in sigs.k8s.io/cli-utils) and on Argo CD's health
//! checks (`workloads`, `pod`). Every other kind follows the kstatus conventions most controllers
//! use (`kstatus`), in this order:
//!
//! 1. `metadata.deletionTimestamp` set: Progressing, "being deleted" (this comes first for every
//!    kind, the dedicated ones included);
//! 2. `status.observedGeneration` behind `metadata.generation`: Progressing (the conditions are
//!    about an older spec). An object that does not report `status.observedGeneration` skips this
//!    rule, as in kstatus;
//! 3. a `Stalled` condition that is `True`: Degraded, with the condition's reason and message;
//! 4. a `Reconciling` condition that is `True`: Progressing;
//! 5. a `Ready` condition that is present and not `True`: Progressing;
//! 6. anything else, an object with no `status` included: Healthy.
//!
//! kstatus looks at `Reconciling` and `Stalled` in the order the conditions are listed; here
//! `Stalled` wins whatever the order, so the result does not depend on how a controller sorts its
//! conditions.
//!
//! Choices where the upstream rules differ or leave room (each is tested, and `docs/health.md`
//! explains them to users):
//!
//! - A paused Deployment (`spec.paused`) is Healthy with no message: the pause is declared on
//!   purpose and nothing will move until it is lifted, so waiting on it could only time out (Argo
//!   CD reports it as Suspended, which the enum has no room for). A suspended Job (`spec.suspend`)
//!   is Healthy for the same reason.
//! - The workload controllers always publish `status.observedGeneration`, so for Deployments,
//!   StatefulSets and DaemonSets an absent one counts as 0: a new object is Progressing until its
//!   controller has seen it (Argo CD does the same for StatefulSets).
//! - StatefulSets and DaemonSets with the `OnDelete` update strategy are Healthy as soon as their
//!   controller has observed the current generation, as in Argo CD: Pods are replaced only when
//!   someone deletes them, so no rollout can be waited for.
//! - A StatefulSet with more Pods than `spec.replicas` (scaling down) is Progressing, as in
//!   kstatus (the brief's rules did not say).
//! - A StatefulSet partition of 0 (the value the API server defaults) is no partition: the
//!   revision check applies.
//! - A Job with a `FailureTarget=True` condition (the job controller's step before `Failed`) is
//!   already Degraded.
//! - A HorizontalPodAutoscaler that cannot scale its target (`AbleToScale=False`: the target is
//!   missing or its scale cannot be read) is Degraded, as in Argo CD; one whose metrics cannot
//!   be read (`ScalingActive=False`) follows the kstatus rules.
//! - A Pod that cannot be scheduled (`PodScheduled=False`, reason `Unschedulable`) is Progressing,
//!   not Degraded: it may be scheduled once the cluster scales or other Pods go away. Its message
//!   starts with "unschedulable:" and carries the scheduler's explanation.
//! - A Pod whose container was ever OOMKilled (`lastState.terminated.reason`, with restarts) is
//!   Degraded even while that container is ready again: between two kills the Pod looks fine.
//! - [`summarize`] picks the rules from each [`Observed`]'s group and kind, not from the live
//!   object, whose `apiVersion` and `kind` are absent in list responses.
//! - A value that is not a JSON object is [`HealthStatus::Unknown`]; [`summarize`] counts it as
//!   Progressing (it cannot be called Healthy). Otherwise only HealthCheck rules give Unknown:
//!   invalid rules, an expression that fails or does not give a bool ([`cel`]).
//! - A HealthCheck ([`Observed::check`], [`assess_with`]) replaces the rules of its kind, Pods as
//!   evidence included; deletion still comes first.
//! - Messages are one line (line breaks become spaces) of at most [`MAX_MESSAGE`] bytes; a Healthy
//!   assessment never has one.

mod autoscaler;
pub mod cel;
mod cel_cost;
mod kstatus;
mod pod;
mod workloads;

use std::cmp::Ordering;

use serde_json::Value;

use crate::api::common::HealthStatus;

/// Longest message, in bytes, of an [`Assessment`] and of a [`Summary`].
pub const MAX_MESSAGE: usize = 1024;

/// Most resources a [`Summary`] message names before "and N more".
pub const MAX_NAMED: usize = 5;

/// Longest text, in bytes, of one resource in a [`Summary`] message.
const MAX_ENTRY: usize = 320;

/// The health of one object, with a short human message (empty when Healthy) saying why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assessment {
    /// Healthy, Progressing or Degraded (Unknown only for a value that is not an object).
    pub status: HealthStatus,
    /// Why the object is not Healthy, one line of at most [`MAX_MESSAGE`] bytes; empty when
    /// Healthy.
    pub message: String,
}

impl Assessment {
    fn healthy() -> Self {
        Assessment { status: HealthStatus::Healthy, message: String::new() }
    }

    fn progressing(message: impl Into<String>) -> Self {
        Assessment { status: HealthStatus::Progressing, message: message.into() }
    }

    fn degraded(message: impl Into<String>) -> Self {
        Assessment { status: HealthStatus::Degraded, message: message.into() }
    }

    /// One line, bounded; no message when Healthy.
    fn finish(mut self) -> Self {
        if self.status == HealthStatus::Healthy {
            self.message.clear();
        } else {
            self.message = one_line(&self.message);
            truncate(&mut self.message, MAX_MESSAGE);
        }
        self
    }
}

/// Assess one live object: the group comes from `apiVersion`, the kind from `kind`.
pub fn assess(obj: &Value) -> Assessment {
    let group = text(obj, &["apiVersion"]).and_then(|v| v.rsplit_once('/')).map_or("", |(group, _)| group);
    let kind = text(obj, &["kind"]).unwrap_or("");
    assess_as(group, kind, obj)
}

/// Assess a live object of a known group and kind (list items may lack `apiVersion` and `kind`).
fn assess_as(group: &str, kind: &str, obj: &Value) -> Assessment {
    if !obj.is_object() {
        return Assessment { status: HealthStatus::Unknown, message: "not a Kubernetes object".into() };
    }
    let assessment = kstatus::deletion(obj).unwrap_or_else(|| match (group, kind) {
        ("apps", "Deployment") => workloads::deployment(obj),
        ("apps", "StatefulSet") => workloads::stateful_set(obj),
        ("apps", "DaemonSet") => workloads::daemon_set(obj),
        ("batch", "Job") => workloads::job(obj),
        ("", "Pod") => pod::pod(obj),
        ("autoscaling", "HorizontalPodAutoscaler") => autoscaler::horizontal_pod_autoscaler(obj),
        _ => kstatus::generic(kind, obj),
    });
    assessment.finish()
}

/// Assess a live object with the rules of a HealthCheck for its kind. Deletion still comes
/// first, as for every kind: an object on its way out is Progressing whatever its status says.
/// No budget: for one object, or a few (hooks).
pub fn assess_with(rules: &cel::Rules, obj: &Value) -> Assessment {
    assess_within(rules, obj, &mut cel::Budget::unlimited())
}

/// [`assess_with`], the expressions charged to `budget` ([`cel::Budget`]).
pub fn assess_within(rules: &cel::Rules, obj: &Value, budget: &mut cel::Budget) -> Assessment {
    if !obj.is_object() {
        return Assessment { status: HealthStatus::Unknown, message: "not a Kubernetes object".into() };
    }
    kstatus::deletion(obj).unwrap_or_else(|| cel::assess(rules, obj, budget)).finish()
}

/// One managed resource as seen by the reconciler: its identity and either the live object or
/// None when it is missing (deleted).
#[derive(Clone, Copy, Debug)]
pub struct Observed<'a> {
    /// API group (`""` for core); with `kind`, selects the rules.
    pub group: &'a str,
    /// Kind.
    pub kind: &'a str,
    /// Namespace (`""` for cluster-scoped).
    pub namespace: &'a str,
    /// Name.
    pub name: &'a str,
    /// The live object, or None when it is missing.
    pub live: Option<&'a Value>,
    /// For a workload that is not Healthy: the Pods it selects, as evidence ([`with_pods`]).
    pub pods: &'a [Value],
    /// Whether a failing Pod makes the workload Degraded (after a rollout), or only explains
    /// why it is still Progressing (during one, which waits until its timeout).
    pub pods_degrade: bool,
    /// The HealthCheck rules for this object's kind in its namespace, replacing the built-in and
    /// kstatus rules (deletion still comes first).
    pub check: Option<&'a cel::Rules>,
}

/// Whether `kind` of `group` is a workload whose Pods explain its health.
pub fn is_workload(group: &str, kind: &str) -> bool {
    group == "apps" && matches!(kind, "Deployment" | "StatefulSet" | "DaemonSet")
}

/// Whether a workload's Pods may say why it is not Healthy: not when it wants none
/// (`spec.replicas: 0`), nor when its controller has not observed it yet (no
/// `status.observedGeneration`: it made no Pods for it). Listing them then costs a request and
/// tells nothing.
pub fn pods_may_explain(workload: &Value) -> bool {
    let wants_none = workload["spec"]["replicas"].as_i64() == Some(0);
    let observed = workload["status"]["observedGeneration"].is_i64();
    observed && !wants_none
}

/// A workload's assessment with its Pods as evidence: when it is not Healthy and one of its
/// Pods is Degraded (crash loop, OOMKilled, image pull failure, ...), the message names that
/// Pod and why, and with `degrade` the workload is Degraded: a cause is evident. A workload
/// only on its way (scaling up, no failing Pod) stays Progressing.
pub fn with_pods(assessment: Assessment, pods: &[Value], degrade: bool) -> Assessment {
    if assessment.status == HealthStatus::Healthy {
        return assessment;
    }
    let mut failing: Vec<(String, Assessment)> = pods
        .iter()
        .map(|p| (p["metadata"]["name"].as_str().unwrap_or_default().to_string(), assess_as("", "Pod", p)))
        .filter(|(_, a)| a.status == HealthStatus::Degraded)
        .collect();
    failing.sort_by(|a, b| a.0.cmp(&b.0));
    let Some((name, pod)) = failing.first() else { return assessment };
    let more = if failing.len() > 1 { format!(" (and {} more Pods)", failing.len() - 1) } else { String::new() };
    let message = format!("{}; Pod {name}: {}{more}", assessment.message, pod.message);
    let status = if degrade { HealthStatus::Degraded } else { assessment.status };
    Assessment { status, message }.finish()
}

/// The aggregate health of a set of resources.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// Degraded if any resource is, else Progressing if any is (or is Unknown), else Healthy
    /// (also for no resources).
    pub status: HealthStatus,
    /// Healthy resources.
    pub healthy: i32,
    /// Progressing resources (and the rare Unknown one).
    pub progressing: i32,
    /// Degraded resources, missing ones included.
    pub degraded: i32,
    /// Empty when Healthy; else the first [`MAX_NAMED`] resources that are not Healthy with their
    /// reasons, joined by "; ", then "and N more": at most [`MAX_MESSAGE`] bytes.
    pub message: String,
    /// Every resource that is not Healthy, as `"Kind namespace/name"` (`"Kind name"` when
    /// cluster-scoped) with its assessment: Degraded first, then Progressing, then Unknown, each
    /// by kind, namespace, name and group.
    pub unhealthy: Vec<(String, Assessment)>,
}

/// A resource that is not Healthy, with what sorts it.
struct Entry<'a> {
    observed: &'a Observed<'a>,
    key: String,
    assessment: Assessment,
}

impl Entry<'_> {
    fn rank(&self) -> u8 {
        match self.assessment.status {
            HealthStatus::Degraded => 0,
            HealthStatus::Progressing => 1,
            HealthStatus::Unknown => 2,
            HealthStatus::Healthy => 3,
        }
    }

    fn order(&self, other: &Self) -> Ordering {
        let (a, b) = (self.observed, other.observed);
        (self.rank(), a.kind, a.namespace, a.name, a.group, &self.assessment.message).cmp(&(
            other.rank(),
            b.kind,
            b.namespace,
            b.name,
            b.group,
            &other.assessment.message,
        ))
    }

    /// The text of this resource in the summary message.
    fn text(&self) -> String {
        let mut text = if self.observed.live.is_none() {
            self.assessment.message.clone()
        } else {
            format!("{}: {}", self.key, self.assessment.message)
        };
        truncate(&mut text, MAX_ENTRY);
        text
    }
}

/// Aggregate: Degraded if any resource is Degraded (a missing resource is Degraded, message
/// "<Kind> <ns>/<name> is missing"), else Progressing if any is Progressing, else Healthy (also
/// for an empty list), with counts and a bounded message; see [`Summary`]. No budget for the
/// HealthChecks: for resources without any, or few.
pub fn summarize(resources: &[Observed<'_>]) -> Summary {
    summarize_within(resources, &mut cel::Budget::unlimited())
}

/// [`summarize`], the HealthChecks' expressions charged to `budget`: past it, the rest of the
/// resources with a HealthCheck are Unknown, saying so, and the message starts with
/// [`cel::Budget::note`] ([`cel::Budget`]).
pub fn summarize_within(resources: &[Observed<'_>], budget: &mut cel::Budget) -> Summary {
    let (mut healthy, mut progressing, mut degraded) = (0_i32, 0_i32, 0_i32);
    let mut entries = Vec::new();
    for observed in resources {
        let key = resource_key(observed.kind, observed.namespace, observed.name);
        let assessment = match observed.live {
            Some(live) => match observed.check {
                Some(rules) => assess_within(rules, live, budget),
                None => with_pods(assess_as(observed.group, observed.kind, live), observed.pods, observed.pods_degrade),
            },
            None => Assessment::degraded(format!("{key} is missing")).finish(),
        };
        let count = match assessment.status {
            HealthStatus::Healthy => &mut healthy,
            HealthStatus::Progressing | HealthStatus::Unknown => &mut progressing,
            HealthStatus::Degraded => &mut degraded,
        };
        *count = count.saturating_add(1);
        if assessment.status != HealthStatus::Healthy {
            entries.push(Entry { observed, key, assessment });
        }
    }
    entries.sort_by(|a, b| a.order(b));
    let status = if degraded > 0 {
        HealthStatus::Degraded
    } else if progressing > 0 {
        HealthStatus::Progressing
    } else {
        HealthStatus::Healthy
    };
    Summary {
        status,
        healthy,
        progressing,
        degraded,
        message: match budget.note() {
            Some(note) => {
                let mut message = format!("{note}; {}", summary_message(&entries));
                truncate(&mut message, MAX_MESSAGE);
                message
            }
            None => summary_message(&entries),
        },
        unhealthy: entries.into_iter().map(|e| (e.key, e.assessment)).collect(),
    }
}

/// The first [`MAX_NAMED`] entries that fit in [`MAX_MESSAGE`] bytes, then "and N more".
fn summary_message(entries: &[Entry<'_>]) -> String {
    let more = |rest: usize| if rest == 0 { String::new() } else { format!("; and {rest} more") };
    let mut message = String::new();
    let mut named = 0;
    for (i, entry) in entries.iter().enumerate().take(MAX_NAMED) {
        let text = entry.text();
        let separator = if message.is_empty() { 0 } else { 2 };
        if message.len() + separator + text.len() + more(entries.len() - i - 1).len() > MAX_MESSAGE {
            break;
        }
        if separator > 0 {
            message.push_str("; ");
        }
        message.push_str(&text);
        named += 1;
    }
    let rest = entries.len() - named;
    if named == 0 && rest > 0 {
        // Unreachable with MAX_ENTRY well below MAX_MESSAGE; kept so the bound never depends on it.
        return format!("{rest} resources are not Healthy");
    }
    message.push_str(&more(rest));
    message
}

/// `Kind namespace/name`, or `Kind name` for a cluster-scoped object.
fn resource_key(kind: &str, namespace: &str, name: &str) -> String {
    crate::api::display::object(kind, Some(namespace), name)
}

/// The value at `path`.
fn at<'a>(obj: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(obj, |v, key| v.get(key))
}

/// The integer at `path`.
fn int(obj: &Value, path: &[&str]) -> Option<i64> {
    at(obj, path).and_then(Value::as_i64)
}

/// The string at `path`.
fn text<'a>(obj: &'a Value, path: &[&str]) -> Option<&'a str> {
    at(obj, path).and_then(Value::as_str)
}

/// The boolean at `path`, false when absent.
fn flag(obj: &Value, path: &[&str]) -> bool {
    at(obj, path).and_then(Value::as_bool).unwrap_or(false)
}

/// One entry of `status.conditions`.
#[derive(Clone, Copy, Debug)]
struct Condition<'a> {
    status: &'a str,
    reason: &'a str,
    message: &'a str,
}

impl Condition<'_> {
    fn is_true(&self) -> bool {
        self.status == "True"
    }

    fn is_false(&self) -> bool {
        self.status == "False"
    }

    /// `Type is Status (Reason): message`, leaving out what is empty.
    fn describe_as(&self, kind: &str) -> String {
        let status = if self.status.is_empty() { "not True" } else { self.status };
        self.describe(&format!("{kind} is {status}"))
    }

    /// `what (Reason): message`, leaving out what is empty.
    fn describe(&self, what: &str) -> String {
        let mut s = what.to_string();
        if !self.reason.is_empty() {
            s.push_str(&format!(" ({})", self.reason));
        }
        if !self.message.is_empty() {
            s.push_str(": ");
            s.push_str(self.message);
        }
        s
    }
}

/// The first condition of type `kind` in `status.conditions`.
fn condition<'a>(obj: &'a Value, kind: &str) -> Option<Condition<'a>> {
    let c = at(obj, &["status", "conditions"])?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))?;
    let field = |name| c.get(name).and_then(Value::as_str).unwrap_or("");
    Some(Condition { status: field("status"), reason: field("reason"), message: field("message") })
}

/// `s` on one line: runs of whitespace (line breaks included) become one space.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Cut `s` to at most `max` bytes on a character boundary, ending with "…" when cut.
fn truncate(s: &mut String, max: usize) {
    const ELLIPSIS: &str = "…";
    if s.len() <= max {
        return;
    }
    let mut end = max.saturating_sub(ELLIPSIS.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    s.push_str(ELLIPSIS);
}

#[cfg(test)]
mod tests;
