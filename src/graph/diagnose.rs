//! The diagnosis: from each unhealthy managed resource, the walk down the graph's edges to the
//! most specific evidence of why. Pure.
//!
//! Contract (table-tested in `tests.rs`, one case per kind of evidence):
//! - evidence, most specific first (the rank): a container waiting to start (`ImagePullBackOff`,
//!   `ErrImagePull`, `InvalidImageName`, `CrashLoopBackOff` with its last exit code,
//!   `CreateContainerConfigError`, `CreateContainerError`) or OOMKilled; an unschedulable Pod; a
//!   Pending claim; a missing object (`MissingConfigMap`, `MissingSecret`, `MissingService`,
//!   ...); a Service without ready endpoints (`NoReadyEndpoints`); a failed Job (`JobFailed`);
//! - a container configuration error with a missing ConfigMap or Secret behind it is that
//!   missing object (the path goes on to it), and an unschedulable Pod whose claim is Pending or
//!   missing is that claim: the object to fix is named;
//! - a reference declared `optional: true` is never evidence, missing or not;
//! - among the evidence found, the lowest rank wins, then the earliest start (the starts come
//!   Degraded first), then evidence seen on a Pod over evidence only inferred from a spec (a
//!   workload's reference to a missing Secret), then the shortest path, then graph order: the
//!   result is deterministic;
//! - messages are one line, at most [`MAX_MESSAGE`] bytes; the path at most [`MAX_PATH`] steps;
//! - no evidence found: no diagnosis (the health message stays the explanation).

use std::collections::VecDeque;

use serde_json::Value;

use super::{Edge, Graph, describe};
use crate::api::application::{Diagnosis, DiagnosisStep, ResourceRef};
use crate::api::common::HealthStatus;

/// Longest diagnosis message, in bytes (the CRD's bound).
pub const MAX_MESSAGE: usize = 1024;

/// Most steps of a diagnosis path (the CRD's bound).
pub const MAX_PATH: usize = 16;

/// Kinds whose faults are in what they point at (their own health says nothing of it): walked
/// from after the unhealthy resources.
const POINTERS: [(&str, &str); 4] = [
    ("", "Service"),
    ("networking.k8s.io", "Ingress"),
    ("autoscaling", "HorizontalPodAutoscaler"),
    ("policy", "PodDisruptionBudget"),
];

/// Whether the faults of `kind` are in what it points at: a Service without ready endpoints, an
/// Ingress routing to a missing Service. Walked from once something is not Healthy.
pub fn points_elsewhere(group: &str, kind: &str) -> bool {
    POINTERS.contains(&(group, kind))
}

/// Where the walk starts: the managed resources that are not Healthy, Degraded first (each
/// group in the order given), then those that [`points_elsewhere`].
pub fn starts(managed: &[(ResourceRef, HealthStatus)]) -> Vec<ResourceRef> {
    let rank = |h: HealthStatus| match h {
        HealthStatus::Degraded => 0,
        HealthStatus::Progressing | HealthStatus::Unknown => 1,
        HealthStatus::Healthy => 2,
    };
    let mut out: Vec<(u8, &ResourceRef)> = managed
        .iter()
        .filter(|(r, h)| *h != HealthStatus::Healthy || points_elsewhere(&r.group, &r.kind))
        .map(|(r, h)| (rank(*h), r))
        .collect();
    out.sort_by_key(|(rank, _)| *rank);
    out.into_iter().map(|(_, r)| r.clone()).collect()
}

/// Waiting reasons that mean a container cannot start.
const WAITING: [&str; 8] = [
    "ImagePullBackOff",
    "ErrImagePull",
    "ErrImageNeverPull",
    "InvalidImageName",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

/// Evidence found at one node: its rank (lower is more specific), reason, message, and the
/// steps beyond the node it leads to (a missing Secret behind a configuration error).
struct Evidence {
    rank: u8,
    reason: String,
    message: String,
    beyond: Vec<(Edge, usize)>,
    /// Seen on a Pod (a container's state), not only inferred from a spec: of two pieces of
    /// evidence of one rank, the witnessed one wins.
    witnessed: bool,
}

/// What orders evidence: rank, start, not witnessed, path length, node.
type Key = (u8, usize, bool, usize, usize);

/// The diagnosis of `graph`, starting from `starts` (the unhealthy managed resources, Degraded
/// first), if any evidence is found.
pub fn diagnose(graph: &Graph, starts: &[ResourceRef]) -> Option<Diagnosis> {
    let mut best: Option<(Key, Diagnosis)> = None;
    for (order, start) in starts.iter().enumerate() {
        let Some(root) = graph.find(start) else { continue };
        for (node, path) in walk(graph, root) {
            let Some(e) = evidence(graph, node) else { continue };
            let mut steps = path;
            steps.extend(e.beyond);
            let key = (e.rank, order, !e.witnessed, steps.len(), node);
            if best.as_ref().is_some_and(|(k, _)| *k <= key) {
                continue;
            }
            let path = steps
                .iter()
                .take(MAX_PATH)
                .map(|(edge, i)| DiagnosisStep {
                    edge: edge.as_str().to_string(),
                    resource: graph.nodes[*i].resource.clone(),
                    missing: graph.nodes[*i].missing(),
                })
                .collect();
            let diagnosis = Diagnosis { resource: start.clone(), reason: e.reason, message: bounded(&e.message), path };
            best = Some((key, diagnosis));
        }
    }
    best.map(|(_, d)| d)
}

/// Every node reachable from `root` with its shortest path (breadth first, links in order).
fn walk(graph: &Graph, root: usize) -> Vec<(usize, Vec<(Edge, usize)>)> {
    let mut seen = vec![false; graph.nodes.len()];
    let mut out = Vec::new();
    let mut queue = VecDeque::from([(root, Vec::new())]);
    seen[root] = true;
    while let Some((i, path)) = queue.pop_front() {
        for l in graph.out(i) {
            if !seen[l.to] && !l.optional {
                seen[l.to] = true;
                let mut next: Vec<(Edge, usize)> = path.clone();
                next.push((l.edge, l.to));
                queue.push_back((l.to, next));
            }
        }
        out.push((i, path));
    }
    out
}

/// The evidence at node `i`, if any.
fn evidence(graph: &Graph, i: usize) -> Option<Evidence> {
    let node = &graph.nodes[i];
    let r = &node.resource;
    let Some(obj) = &node.live else {
        return Some(missing(graph, i));
    };
    match (r.group.as_str(), r.kind.as_str()) {
        ("", "Pod") => pod(graph, i, obj),
        ("", "PersistentVolumeClaim") => pending_claim(r, obj),
        ("", "Service") => service(graph, i, obj),
        ("batch", "Job") => {
            let failed = conditions(obj).find(|c| c["type"] == "Failed" && c["status"] == "True")?;
            Some(Evidence {
                rank: 5,
                reason: "JobFailed".into(),
                message: format!("{} failed{}", describe(r), because(failed)),
                beyond: Vec::new(),
                witnessed: false,
            })
        }
        _ => None,
    }
}

/// A missing node, reached over a link from a live object.
fn missing(graph: &Graph, i: usize) -> Evidence {
    let r = &graph.nodes[i].resource;
    let user = graph.links.iter().find(|l| l.to == i && !l.optional && graph.nodes[l.from].live.is_some());
    let by = user.map_or(String::new(), |l| {
        let verb = match l.edge {
            Edge::Uses => "used",
            Edge::Mounts => "mounted",
            Edge::RunsAs => "run as",
            Edge::Routes => "routed to",
            Edge::Scales => "scaled",
            Edge::Binds => "bound",
            _ => "referenced",
        };
        format!(", {verb} by {},", describe(&graph.nodes[l.from].resource))
    });
    Evidence {
        rank: 3,
        reason: format!("Missing{}", r.kind),
        message: format!("{}{by} does not exist", describe(r)),
        beyond: Vec::new(),
        witnessed: false,
    }
}

fn pod(graph: &Graph, i: usize, obj: &Value) -> Option<Evidence> {
    let r = &graph.nodes[i].resource;
    for status in containers(obj) {
        let name = status["name"].as_str().unwrap_or("");
        let waiting = &status["state"]["waiting"];
        if let Some(reason) = waiting["reason"].as_str().filter(|w| WAITING.contains(w)) {
            let detail = waiting["message"].as_str().filter(|m| !m.is_empty());
            if matches!(reason, "CreateContainerConfigError" | "CreateContainerError")
                && let Some((edge, to)) = missing_use(graph, i, &[Edge::Uses])
            {
                let mut e = missing(graph, to);
                e.message = format!(
                    "{}: container {name} of {}: {reason}{}",
                    e.message,
                    describe(r),
                    detail.map(|d| format!(": {d}")).unwrap_or_default()
                );
                e.rank = 0;
                e.beyond = vec![(edge, to)];
                e.witnessed = true;
                return Some(e);
            }
            let message = if reason == "CrashLoopBackOff" {
                let last = &status["lastState"]["terminated"];
                let code = last["exitCode"].as_i64().map(|c| format!("last exit code {c}"));
                let why = last["reason"].as_str().map(|w| format!("reason {w}"));
                let restarts = status["restartCount"].as_i64().map(|n| format!("{n} restarts"));
                let facts: Vec<String> = [code, why, restarts].into_iter().flatten().collect();
                format!("container {name} of {} is in CrashLoopBackOff ({})", describe(r), facts.join(", "))
            } else {
                format!(
                    "container {name} of {}: {reason}{}",
                    describe(r),
                    detail.map(|d| format!(": {d}")).unwrap_or_default()
                )
            };
            return Some(Evidence {
                rank: 0,
                reason: reason.to_string(),
                message,
                beyond: Vec::new(),
                witnessed: true,
            });
        }
        let last = &status["lastState"]["terminated"];
        if last["reason"] == "OOMKilled" && status["restartCount"].as_i64().unwrap_or(0) > 0 {
            let code = last["exitCode"].as_i64().unwrap_or(137);
            return Some(Evidence {
                rank: 0,
                reason: "OOMKilled".into(),
                message: format!("container {name} of {} was OOMKilled (exit code {code})", describe(r)),
                beyond: Vec::new(),
                witnessed: true,
            });
        }
    }
    let unschedulable =
        |c: &&Value| c["type"] == "PodScheduled" && c["status"] == "False" && c["reason"] == "Unschedulable";
    if let Some(c) = conditions(obj).find(unschedulable) {
        if let Some(e) = claim_behind(graph, i) {
            return Some(e);
        }
        return Some(Evidence {
            rank: 1,
            reason: "Unschedulable".into(),
            message: format!("{} cannot be scheduled{}", describe(r), because(c)),
            beyond: Vec::new(),
            witnessed: true,
        });
    }
    // A Pod waiting to start (ContainerCreating) on a missing volume source.
    let phase = obj.pointer("/status/phase").and_then(Value::as_str);
    if phase == Some("Pending")
        && let Some((edge, to)) = missing_use(graph, i, &[Edge::Mounts, Edge::Uses])
    {
        let mut e = missing(graph, to);
        e.beyond = vec![(edge, to)];
        e.witnessed = true;
        return Some(e);
    }
    None
}

/// The first non-optional link of `edges` from node `i` to a missing ConfigMap, Secret or claim.
fn missing_use(graph: &Graph, i: usize, edges: &[Edge]) -> Option<(Edge, usize)> {
    graph.out(i).find(|l| edges.contains(&l.edge) && !l.optional && graph.nodes[l.to].missing()).map(|l| (l.edge, l.to))
}

/// An unschedulable Pod's claim that is Pending or missing: the evidence is that claim.
fn claim_behind(graph: &Graph, i: usize) -> Option<Evidence> {
    for l in graph.out(i).filter(|l| l.edge == Edge::Mounts) {
        let claim = &graph.nodes[l.to];
        let found = match &claim.live {
            None => Some(missing(graph, l.to)),
            Some(obj) => pending_claim(&claim.resource, obj),
        };
        if let Some(mut e) = found {
            e.rank = 1;
            e.beyond = vec![(Edge::Mounts, l.to)];
            e.witnessed = true;
            return Some(e);
        }
    }
    None
}

fn pending_claim(r: &ResourceRef, obj: &Value) -> Option<Evidence> {
    if obj.pointer("/status/phase").and_then(Value::as_str) != Some("Pending") {
        return None;
    }
    let class = match obj.pointer("/spec/storageClassName").and_then(Value::as_str) {
        Some("") => " (storageClassName is empty: it binds only to a pre-provisioned volume)".to_string(),
        Some(c) => format!(" (StorageClass {c})"),
        None => " (no StorageClass, and no default StorageClass provisioned it)".to_string(),
    };
    Some(Evidence {
        rank: 2,
        reason: "PendingClaim".into(),
        message: format!("{} is Pending{class}", describe(r)),
        beyond: Vec::new(),
        witnessed: false,
    })
}

/// A Service with a selector whose EndpointSlices list no ready endpoint.
fn service(graph: &Graph, i: usize, obj: &Value) -> Option<Evidence> {
    obj.pointer("/spec/selector").and_then(Value::as_object).filter(|s| !s.is_empty())?;
    let mut slices = graph.out(i).filter(|l| l.edge == Edge::Endpoints).peekable();
    slices.peek()?;
    let ready = slices.any(|l| {
        let slice = graph.nodes[l.to].live.as_ref();
        let endpoints = slice.and_then(|s| s.get("endpoints")).and_then(Value::as_array);
        endpoints.into_iter().flatten().any(|e| e.pointer("/conditions/ready").and_then(Value::as_bool) != Some(false))
    });
    if ready {
        return None;
    }
    let pods = graph.out(i).filter(|l| l.edge == Edge::Selects && graph.nodes[l.to].resource.kind == "Pod").count();
    let selected = match pods {
        0 => "it selects no Pods".to_string(),
        1 => "it selects 1 Pod, not ready".to_string(),
        n => format!("it selects {n} Pods, none ready"),
    };
    Some(Evidence {
        rank: 4,
        reason: "NoReadyEndpoints".into(),
        message: format!("{} has no ready endpoints: {selected}", describe(&graph.nodes[i].resource)),
        beyond: Vec::new(),
        witnessed: false,
    })
}

/// Init containers, then containers, in the kubelet's order.
fn containers(obj: &Value) -> impl Iterator<Item = &Value> {
    ["initContainerStatuses", "containerStatuses"]
        .into_iter()
        .flat_map(|f| obj.pointer(&format!("/status/{f}")).and_then(Value::as_array).into_iter().flatten())
}

fn conditions(obj: &Value) -> impl Iterator<Item = &Value> {
    obj.pointer("/status/conditions").and_then(Value::as_array).into_iter().flatten()
}

/// `: Reason: message` of a condition, leaving out what is empty.
fn because(c: &Value) -> String {
    let mut s = String::new();
    for f in ["reason", "message"] {
        if let Some(v) = c[f].as_str().filter(|v| !v.is_empty()) {
            s.push_str(": ");
            s.push_str(v);
        }
    }
    s
}

/// One line of at most [`MAX_MESSAGE`] bytes.
fn bounded(s: &str) -> String {
    let mut line = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE - '…'.len_utf8();
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        line.truncate(end);
        line.push('…');
    }
    line
}
