//! `spec.dependsOn`, the decisions, pure: whether an Application is Healthy at the revision it
//! wants ([`waiting_on`]), what a dependent waits for ([`verdict`]), and dependency cycles
//! ([`cycle_through`]). The watch that feeds them is `dependency_watch.rs`.
//!
//! # Contract
//! - A dependency is ready only when it exists, is not being deleted nor suspended, its status
//!   is of its current generation, the Revision it wants is the last one that completed Healthy,
//!   its health is Healthy, its `Ready` condition is True, and (when it follows its
//!   Repository's ref) it has picked up the commit its Repository resolved last.
//! - An Application on a dependency cycle never deploys, whatever the state of the others; a
//!   dependency on a cycle is not ready either.
//! - Missing dependencies are reported as `DependencyNotFound`; anything else not ready as
//!   `DependencyNotReady`; only when every dependency is ready, `DependenciesHealthy`.

use std::collections::{BTreeMap, BTreeSet};

use crate::api::application::{Application, ApplicationStatus, SyncState};
use crate::api::common::HealthStatus;
use crate::api::conditions;
use crate::api::names;

/// Longest part of a message quoted from a dependency's status.
const QUOTE: usize = 200;

/// What a dependent needs to know of one Application of its namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Node {
    /// Its `spec.dependsOn`, by name.
    pub depends_on: Vec<String>,
    /// Why it is not Healthy at the revision it wants; `None` when it is (as its status says).
    pub waiting: Option<String>,
    /// Its Repository, when it follows the Repository's ref (no `spec.source.revision`).
    pub follows: Option<String>,
    /// The commit its status is at.
    pub commit: Option<String>,
}

impl Node {
    /// The node of `app`.
    pub fn of(app: &Application) -> Node {
        let st = app.status.as_ref();
        Node {
            depends_on: app.spec.depends_on.iter().map(|d| d.name.clone()).collect(),
            waiting: waiting_on(app),
            follows: app
                .spec
                .source
                .revision
                .as_deref()
                .is_none_or(str::is_empty)
                .then(|| app.spec.source.repository.clone()),
            commit: st.and_then(|s| s.sync.as_ref()).and_then(|s| s.commit.clone()),
        }
    }
}

fn quote(s: &str) -> String {
    let s = s.trim();
    if s.chars().count() <= QUOTE {
        return s.to_string();
    }
    let mut out: String = s.chars().take(QUOTE).collect();
    out.push('…');
    out
}

/// Why `app` is not Healthy at the revision it wants, from its own object; `None` when it is.
pub fn waiting_on(app: &Application) -> Option<String> {
    if app.metadata.deletion_timestamp.is_some() {
        return Some("it is being deleted".into());
    }
    if app.spec.suspend {
        return Some("it is suspended (spec.suspend)".into());
    }
    let Some(st) = app.status.as_ref() else {
        return Some("it has not been reconciled yet".into());
    };
    if st.observed_generation != app.metadata.generation {
        return Some(format!("it has not reconciled generation {} yet", app.metadata.generation.unwrap_or_default()));
    }
    let ready = conditions::get(&st.conditions, names::conditions::READY);
    let why = || match ready {
        Some(c) if !c.message.is_empty() => format!(": {}", quote(&c.message)),
        _ => String::new(),
    };
    let Some(desired) = st.desired_revision.as_deref() else {
        return Some(format!("it has no desired Revision yet{}", why()));
    };
    if st.last_healthy_revision.as_deref() != Some(desired) {
        return Some(format!("its Revision {desired} is not deployed yet{}", why()));
    }
    let health = st.health.as_ref().map(|h| h.status).unwrap_or(HealthStatus::Unknown);
    if health != HealthStatus::Healthy {
        let message = st.health.as_ref().and_then(|h| h.message.as_deref()).map(quote).unwrap_or_default();
        let sep = if message.is_empty() { "" } else { ": " };
        return Some(format!("it is {health:?}{sep}{message}"));
    }
    if st.sync.as_ref().is_some_and(|s| s.status == SyncState::OutOfSync) {
        return Some(format!("its Revision {desired} is OutOfSync{}", why()));
    }
    match ready {
        Some(c) if c.status == "True" => None,
        Some(c) => Some(format!("it is not Ready ({}){}", c.reason, why())),
        None => Some("it is not Ready yet".into()),
    }
}

/// What a dependent waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every dependency is Healthy at the revision it wants (`DependenciesHealthy`).
    Ready(String),
    /// Some dependency does not exist (`DependencyNotFound`); the message also names those
    /// not ready.
    NotFound(String),
    /// Some dependency is not ready (`DependencyNotReady`).
    NotReady(String),
    /// The Application is on a dependency cycle (`DependencyNotReady`): nothing in it deploys
    /// until the cycle is broken.
    Cycle(String),
}

impl Verdict {
    /// Whether the rollout may go on.
    pub fn ready(&self) -> bool {
        matches!(self, Verdict::Ready(_))
    }

    /// The `DependenciesReady` reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Verdict::Ready(_) => names::reasons::DEPENDENCIES_HEALTHY,
            Verdict::NotFound(_) => names::reasons::DEPENDENCY_NOT_FOUND,
            Verdict::NotReady(_) | Verdict::Cycle(_) => names::reasons::DEPENDENCY_NOT_READY,
        }
    }

    /// The `DependenciesReady` message.
    pub fn message(&self) -> &str {
        match self {
            Verdict::Ready(m) | Verdict::NotFound(m) | Verdict::NotReady(m) | Verdict::Cycle(m) => m,
        }
    }
}

/// A cycle of `dependsOn` edges through `start`, as the names along it (`[start, …, start]`), the
/// first found in `dependsOn` order; `None` when `start` is on no cycle. `nodes` is the
/// namespace's Applications; `own` overrides `start`'s edges (its freshest spec).
pub fn cycle_through(nodes: &BTreeMap<String, Node>, start: &str, own: Option<&[String]>) -> Option<Vec<String>> {
    let edges = |n: &str| -> Vec<String> {
        if n == start
            && let Some(own) = own
        {
            return own.to_vec();
        }
        nodes.get(n).map(|n| n.depends_on.clone()).unwrap_or_default()
    };
    // Depth-first, iteratively (a long chain must not overflow the stack).
    let mut seen = BTreeSet::new();
    let mut path: Vec<(String, Vec<String>, usize)> = vec![(start.to_string(), edges(start), 0)];
    while let Some((_, next, i)) = path.last_mut() {
        let Some(n) = next.get(*i).cloned() else {
            path.pop();
            continue;
        };
        *i += 1;
        if n == start {
            let mut cycle: Vec<String> = path.iter().map(|(p, _, _)| p.clone()).collect();
            cycle.push(n);
            return Some(cycle);
        }
        if seen.insert(n.clone()) {
            let e = edges(&n);
            path.push((n, e, 0));
        }
    }
    None
}

/// What the Application `me`, depending on `depends_on`, waits for. `nodes`: the Applications
/// of its namespace; `repository_commit`: the commit a Repository resolved last, when known.
pub fn verdict(
    nodes: &BTreeMap<String, Node>,
    me: &str,
    depends_on: &[String],
    repository_commit: impl Fn(&str) -> Option<String>,
) -> Verdict {
    if let Some(cycle) = cycle_through(nodes, me, Some(depends_on)) {
        return Verdict::Cycle(format!(
            "dependency cycle: {}: nothing in a cycle deploys; remove one of these dependsOn entries",
            cycle.join(" → ")
        ));
    }
    let mut missing = Vec::new();
    let mut waiting = Vec::new();
    for d in depends_on {
        let Some(node) = nodes.get(d) else {
            missing.push(d.clone());
            continue;
        };
        if let Some(cycle) = cycle_through(nodes, d, None) {
            waiting.push(format!("{d} (it is on a dependency cycle: {})", cycle.join(" → ")));
        } else if let Some(why) = &node.waiting {
            waiting.push(format!("{d} ({why})"));
        } else if let Some(repo) = &node.follows
            && let Some(commit) = repository_commit(repo)
            && node.commit.as_deref() != Some(commit.as_str())
        {
            waiting.push(format!("{d} (it has not picked up commit {} of Repository {repo} yet)", short(&commit)));
        }
    }
    let names_of = |v: &[String]| v.join(", ");
    match (missing.is_empty(), waiting.is_empty()) {
        (true, true) => Verdict::Ready(format!(
            "{} Healthy at the revision {}: {}",
            if depends_on.len() == 1 { "the dependency is" } else { "every dependency is" },
            if depends_on.len() == 1 { "it wants" } else { "they want" },
            names_of(depends_on)
        )),
        (false, _) => {
            let mut m = format!(
                "{} {} not exist in this namespace: {}",
                if missing.len() == 1 { "dependency" } else { "dependencies" },
                if missing.len() == 1 { "does" } else { "do" },
                names_of(&missing)
            );
            if !waiting.is_empty() {
                m.push_str(&format!("; waiting for {}", waiting.join("; ")));
            }
            Verdict::NotFound(m)
        }
        (true, false) => Verdict::NotReady(format!("waiting for {}", waiting.join("; "))),
    }
}

fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

/// A rollout that waits for its dependencies: `Ready=False` with the verdict's reason and
/// message (`Stalled` for a cycle, which only a change of `spec.dependsOn` can break; otherwise
/// `Reconciling`, since the dependents are re-queued when their dependencies change).
pub fn report_wait(app: &Application, status: &mut ApplicationStatus, verdict: &Verdict, now: jiff::Timestamp) {
    let generation = app.metadata.generation;
    let message = match verdict {
        Verdict::Cycle(m) => m.clone(),
        v => format!("the rollout waits for spec.dependsOn: {}", v.message()),
    };
    if matches!(verdict, Verdict::Cycle(_)) {
        conditions::mark_stalled(&mut status.conditions, verdict.reason(), &message, generation, now);
    } else {
        conditions::mark_failed(&mut status.conditions, verdict.reason(), &message, generation, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn app(name: &str, status: serde_json::Value) -> Application {
        serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
            "metadata": {"name": name, "namespace": "ns", "generation": 2},
            "spec": {"source": {"repository": "repo", "path": "p"}, "serviceAccountName": "sa",
                     "destination": {"namespace": "ns"}},
            "status": status,
        }))
        .unwrap()
    }

    fn ready_status() -> serde_json::Value {
        json!({"observedGeneration": 2, "desiredRevision": "r2", "lastHealthyRevision": "r2",
               "sync": {"status": "Synced", "revision": "r2", "commit": "c2"},
               "health": {"status": "Healthy"},
               "conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded", "message": "Revision r2 is Healthy",
                               "lastTransitionTime": "2026-01-01T00:00:00Z"}]})
    }

    fn with(mut s: serde_json::Value, path: &str, v: serde_json::Value) -> serde_json::Value {
        *s.pointer_mut(path).unwrap() = v;
        s
    }

    /// The readiness of a dependency, one row per rule of the contract.
    #[test]
    fn a_dependency_is_ready_only_when_healthy_at_the_revision_it_wants() {
        let rows: Vec<(&str, Application, Option<&str>)> = vec![
            ("healthy, deployed, Ready", app("a", ready_status()), None),
            ("no status", app("a", serde_json::Value::Null), Some("it has not been reconciled yet")),
            (
                "an older generation",
                app("a", with(ready_status(), "/observedGeneration", json!(1))),
                Some("it has not reconciled generation 2 yet"),
            ),
            (
                "a new Revision not deployed",
                app("a", with(ready_status(), "/desiredRevision", json!("r3"))),
                Some("its Revision r3 is not deployed yet: Revision r2 is Healthy"),
            ),
            (
                "Degraded after a crash loop",
                app(
                    "a",
                    with(
                        ready_status(),
                        "/health",
                        json!({"status": "Degraded", "message": "Deployment ns/op: CrashLoopBackOff"}),
                    ),
                ),
                Some("it is Degraded: Deployment ns/op: CrashLoopBackOff"),
            ),
            (
                "Progressing",
                app("a", with(ready_status(), "/health", json!({"status": "Progressing"}))),
                Some("it is Progressing"),
            ),
            (
                "Ready False",
                app("a", with(ready_status(), "/conditions/0/status", json!("False"))),
                Some("it is not Ready (Succeeded): Revision r2 is Healthy"),
            ),
            (
                "OutOfSync",
                app("a", with(ready_status(), "/sync/status", json!("OutOfSync"))),
                Some("its Revision r2 is OutOfSync: Revision r2 is Healthy"),
            ),
        ];
        for (what, a, want) in rows {
            assert_eq!(waiting_on(&a).as_deref(), want, "{what}");
        }
        let mut suspended = app("a", ready_status());
        suspended.spec.suspend = true;
        assert_eq!(waiting_on(&suspended).as_deref(), Some("it is suspended (spec.suspend)"));
        let mut deleted = app("a", ready_status());
        deleted.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time("2026-01-01T00:00:00Z".parse().unwrap()));
        assert_eq!(waiting_on(&deleted).as_deref(), Some("it is being deleted"));
    }

    fn node(deps: &[&str], waiting: Option<&str>) -> Node {
        Node {
            depends_on: deps.iter().map(|s| s.to_string()).collect(),
            waiting: waiting.map(str::to_string),
            follows: Some("repo".into()),
            commit: Some("c2".into()),
        }
    }

    fn graph(nodes: &[(&str, Node)]) -> BTreeMap<String, Node> {
        nodes.iter().map(|(n, v)| (n.to_string(), v.clone())).collect()
    }

    fn deps(d: &[&str]) -> Vec<String> {
        d.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn cycles_are_found_through_every_member() {
        let g = graph(&[
            ("a", node(&["b"], None)),
            ("b", node(&["c"], None)),
            ("c", node(&["a"], None)),
            ("d", node(&["a"], None)),
        ]);
        assert_eq!(cycle_through(&g, "a", None), Some(deps(&["a", "b", "c", "a"])));
        assert_eq!(cycle_through(&g, "b", None), Some(deps(&["b", "c", "a", "b"])));
        assert_eq!(cycle_through(&g, "c", None), Some(deps(&["c", "a", "b", "c"])));
        // Depending on a cycle is not being on it.
        assert_eq!(cycle_through(&g, "d", None), None);
        // The freshest spec of the Application decides its own edges.
        assert_eq!(cycle_through(&g, "c", Some(&[])), None);
        // Two-member and diamond shapes.
        let two = graph(&[("a", node(&["b"], None)), ("b", node(&["a"], None))]);
        assert_eq!(cycle_through(&two, "a", None), Some(deps(&["a", "b", "a"])));
        let diamond = graph(&[
            ("a", node(&["b", "c"], None)),
            ("b", node(&["d"], None)),
            ("c", node(&["d"], None)),
            ("d", node(&[], None)),
        ]);
        assert_eq!(cycle_through(&diamond, "a", None), None);
        // A long chain does not overflow the stack.
        let chain: BTreeMap<String, Node> =
            (0..100_000).map(|i| (format!("n{i}"), node(&[&format!("n{}", i + 1)], None))).collect();
        assert_eq!(cycle_through(&chain, "n0", None), None);
    }

    #[test]
    fn the_verdict_names_what_is_waited_for() {
        let none = |_: &str| None;
        let g = graph(&[
            ("db", node(&[], None)),
            ("op", node(&[], Some("it is Degraded: CrashLoopBackOff"))),
            ("x", node(&["y"], None)),
            ("y", node(&["x"], None)),
        ]);
        let rows: Vec<(&str, Vec<String>, Verdict)> = vec![
            (
                "one ready",
                deps(&["db"]),
                Verdict::Ready("the dependency is Healthy at the revision it wants: db".into()),
            ),
            (
                "one not ready",
                deps(&["db", "op"]),
                Verdict::NotReady("waiting for op (it is Degraded: CrashLoopBackOff)".into()),
            ),
            (
                "missing and not ready",
                deps(&["ghost", "op"]),
                Verdict::NotFound(
                    "dependency does not exist in this namespace: ghost; waiting for op (it is Degraded: CrashLoopBackOff)"
                        .into(),
                ),
            ),
            (
                "a dependency on a cycle",
                deps(&["x"]),
                Verdict::NotReady("waiting for x (it is on a dependency cycle: x → y → x)".into()),
            ),
        ];
        for (what, d, want) in rows {
            assert_eq!(verdict(&g, "me", &d, none), want, "{what}");
        }
        // On the cycle itself.
        let v = verdict(&g, "x", &deps(&["y"]), none);
        assert_eq!(
            v,
            Verdict::Cycle(
                "dependency cycle: x → y → x: nothing in a cycle deploys; remove one of these dependsOn entries".into()
            )
        );
        assert_eq!((v.ready(), v.reason()), (false, names::reasons::DEPENDENCY_NOT_READY));
        // Healthy at an older commit than its Repository resolved: not yet.
        let moved = |r: &str| (r == "repo").then(|| "c3c3c3c3c3c3c3c3".to_string());
        assert_eq!(
            verdict(&g, "me", &deps(&["db"]), moved),
            Verdict::NotReady(
                "waiting for db (it has not picked up commit c3c3c3c3c3c3 of Repository repo yet)".into()
            )
        );
    }
}
