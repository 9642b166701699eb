//! `spec.dependsOn` across shards and replicas: one watch of every Application per replica,
//! started by the first reconcile of an Application with dependencies, kept only as
//! [`Node`]s (what a dependent needs of each Application, a few hundred bytes) and an index from
//! each dependency to its dependents. A dependency's change re-queues its dependents in every
//! shard of this replica at once (each replica runs this watch, so dependents on other replicas
//! are re-queued by theirs): no polling.
//!
//! What re-queues dependents: a dependency turning ready or not ready, appearing or going,
//! moving to another commit, or its `dependsOn` changing (then everything downstream of it is
//! re-queued, since a cycle may have formed or broken).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures_util::StreamExt;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::{self, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::broadcast;

use crate::api::application::Application;
use crate::decisions::dependencies::{Node, Verdict, verdict};

/// How long a reconcile waits for the watch's first list before it is requeued.
const FIRST_LIST: Duration = Duration::from_secs(10);

/// The Applications of every namespace as dependents see them, and who depends on whom.
#[derive(Default)]
struct State {
    /// Namespace → name → node.
    nodes: HashMap<String, BTreeMap<String, Node>>,
    /// (namespace, dependency) → its dependents.
    dependents: HashMap<(String, String), BTreeSet<String>>,
}

/// Whether a change of `old` into `new` concerns dependents (not every message change: a
/// dependency's progress messages would re-queue its dependents on every status write).
fn concerns_dependents(old: Option<&Node>, new: Option<&Node>) -> bool {
    let key = |n: Option<&Node>| n.map(|n| (n.waiting.is_none(), n.follows.clone(), n.commit.clone()));
    key(old) != key(new)
}

impl State {
    /// Set (`Some`) or remove (`None`) the node `ns/name`; the Applications to re-queue.
    fn update(&mut self, ns: &str, name: &str, node: Option<Node>) -> BTreeSet<String> {
        let old = self.nodes.get(ns).and_then(|m| m.get(name)).cloned();
        if old == node {
            return BTreeSet::new();
        }
        let edges = |n: &Option<Node>| n.as_ref().map(|n| n.depends_on.clone()).unwrap_or_default();
        let (before, after) = (edges(&old), edges(&node));
        let rewired = before != after;
        if rewired {
            for d in &before {
                let key = (ns.to_string(), d.clone());
                if let Some(set) = self.dependents.get_mut(&key) {
                    set.remove(name);
                    if set.is_empty() {
                        self.dependents.remove(&key);
                    }
                }
            }
            for d in &after {
                self.dependents.entry((ns.to_string(), d.clone())).or_default().insert(name.to_string());
            }
        }
        let tell = concerns_dependents(old.as_ref(), node.as_ref());
        match node {
            Some(n) => {
                self.nodes.entry(ns.to_string()).or_default().insert(name.to_string(), n);
            }
            None => {
                if let Some(m) = self.nodes.get_mut(ns) {
                    m.remove(name);
                    if m.is_empty() {
                        self.nodes.remove(ns);
                    }
                }
            }
        }
        let mut out = BTreeSet::new();
        if rewired {
            // Everything downstream: a cycle may have formed or broken.
            let mut queue = vec![name.to_string()];
            while let Some(n) = queue.pop() {
                for d in self.dependents.get(&(ns.to_string(), n)).into_iter().flatten() {
                    if out.insert(d.clone()) {
                        queue.push(d.clone());
                    }
                }
            }
        } else if tell {
            out.extend(self.dependents.get(&(ns.to_string(), name.to_string())).into_iter().flatten().cloned());
        }
        // Its own change re-queues it through its own watch.
        out.remove(name);
        out
    }
}

/// The watch's state: the nodes, and the keys seen by a list in progress (a re-list drops the
/// rest).
#[derive(Default)]
struct Watched {
    state: State,
    listing: Option<HashSet<(String, String)>>,
}

impl Watched {
    /// Apply one watch event; the Applications to re-queue, and whether a list completed.
    fn apply(&mut self, event: watcher::Event<Application>) -> (Vec<ObjectRef<Application>>, bool) {
        let mut changes: Vec<(String, String, Option<Node>)> = Vec::new();
        let mut listed = false;
        match event {
            watcher::Event::Init => self.listing = Some(HashSet::new()),
            watcher::Event::InitApply(a) => {
                let key = (a.namespace().unwrap_or_default(), a.name_any());
                if let Some(l) = self.listing.as_mut() {
                    l.insert(key.clone());
                }
                changes.push((key.0, key.1, Some(Node::of(&a))));
            }
            watcher::Event::InitDone => {
                let seen = self.listing.take().unwrap_or_default();
                for (ns, m) in &self.state.nodes {
                    for name in m.keys().filter(|n| !seen.contains(&(ns.clone(), n.to_string()))) {
                        changes.push((ns.clone(), name.clone(), None));
                    }
                }
                listed = true;
            }
            watcher::Event::Apply(a) => {
                changes.push((a.namespace().unwrap_or_default(), a.name_any(), Some(Node::of(&a))))
            }
            watcher::Event::Delete(a) => changes.push((a.namespace().unwrap_or_default(), a.name_any(), None)),
        }
        let mut requeue = Vec::new();
        for (ns, name, node) in changes {
            requeue.extend(self.state.update(&ns, &name, node).into_iter().map(|d| ObjectRef::new(&d).within(&ns)));
        }
        (requeue, listed)
    }
}

/// The replica's view of every Application's readiness as a dependency.
pub(crate) struct Dependencies {
    watched: Arc<Mutex<Watched>>,
    ready: tokio::sync::watch::Sender<bool>,
    /// Dependents to re-queue; each shard controller takes those of its shard.
    pub(crate) triggers: broadcast::Sender<ObjectRef<Application>>,
    task: OnceLock<tokio::task::JoinHandle<()>>,
}

impl Default for Dependencies {
    fn default() -> Self {
        Dependencies {
            watched: Default::default(),
            ready: tokio::sync::watch::channel(false).0,
            triggers: broadcast::channel(1024).0,
            task: OnceLock::new(),
        }
    }
}

impl Drop for Dependencies {
    fn drop(&mut self) {
        if let Some(t) = self.task.get() {
            t.abort();
        }
    }
}

impl Dependencies {
    /// Start the watch (once).
    fn start(&self, client: &Client) {
        self.task.get_or_init(|| {
            let (watched, ready, triggers) = (self.watched.clone(), self.ready.clone(), self.triggers.clone());
            let client = client.clone();
            tokio::spawn(async move {
                let stream = watcher(Api::<Application>::all(client), watcher::Config::default()).default_backoff();
                let mut stream = std::pin::pin!(stream);
                while let Some(event) = stream.next().await {
                    let event = match event {
                        Ok(e) => e,
                        Err(e) => {
                            tracing::debug!(error = %e, "watching Applications for dependsOn");
                            continue;
                        }
                    };
                    let (requeue, listed) = watched.lock().expect("dependencies lock").apply(event);
                    // Until the first list completes, reconciles wait for it instead.
                    if *ready.borrow() {
                        for r in requeue {
                            // No subscriber (no shard running) is fine.
                            drop(triggers.send(r));
                        }
                    }
                    if listed {
                        ready.send_replace(true);
                    }
                }
            })
        });
    }

    /// What the Application `app` waits for, from this replica's watch (started on first use);
    /// `None` while the watch has not listed the Applications yet. `repository_commit`: the
    /// commit a Repository of `app`'s namespace resolved last, when known.
    pub(crate) async fn verdict(
        &self,
        client: &Client,
        app: &Application,
        repository_commit: impl Fn(&str) -> Option<String>,
    ) -> Option<Verdict> {
        self.start(client);
        let mut ready = self.ready.subscribe();
        if tokio::time::timeout(FIRST_LIST, ready.wait_for(|r| *r)).await.is_err() {
            return None;
        }
        let ns = app.namespace().unwrap_or_default();
        let depends_on: Vec<String> = app.spec.depends_on.iter().map(|d| d.name.clone()).collect();
        let watched = self.watched.lock().expect("dependencies lock");
        let empty = BTreeMap::new();
        let nodes = watched.state.nodes.get(&ns).unwrap_or(&empty);
        Some(verdict(nodes, &app.name_any(), &depends_on, repository_commit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn app(name: &str, deps: &[&str], healthy: bool) -> Application {
        let deps: Vec<_> = deps.iter().map(|d| json!({"name": d})).collect();
        let health = if healthy { "Healthy" } else { "Progressing" };
        serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
            "metadata": {"name": name, "namespace": "ns", "generation": 1},
            "spec": {"source": {"repository": "repo", "path": "p"}, "serviceAccountName": "sa",
                     "destination": {"namespace": "ns"}, "dependsOn": deps},
            "status": {"observedGeneration": 1, "desiredRevision": "r", "lastHealthyRevision": "r",
                       "sync": {"status": "Synced", "commit": "c"}, "health": {"status": health, "message": format!("{name} moving")},
                       "conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded", "message": "",
                                       "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        }))
        .unwrap()
    }

    fn names(v: (Vec<ObjectRef<Application>>, bool)) -> Vec<String> {
        let mut n: Vec<String> = v.0.into_iter().map(|r| r.name).collect();
        n.sort();
        n
    }

    /// Who is re-queued by each change: the dependents of a dependency that turned ready or not,
    /// not on a progress message; everything downstream when edges change.
    #[test]
    fn a_dependency_change_requeues_its_dependents() {
        let mut w = Watched::default();
        assert!(!w.apply(watcher::Event::Init).1);
        w.apply(watcher::Event::InitApply(app("db", &[], false)));
        w.apply(watcher::Event::InitApply(app("web", &["db"], false)));
        w.apply(watcher::Event::InitApply(app("edge", &["web"], false)));
        assert!(w.apply(watcher::Event::InitDone).1, "a list completed");
        // db turns Healthy: web, not edge.
        assert_eq!(names(w.apply(watcher::Event::Apply(app("db", &[], true)))), ["web"]);
        // Only a message changed: nobody.
        let mut again = app("db", &[], true);
        again.status.as_mut().unwrap().health.as_mut().unwrap().message = Some("other".into());
        assert_eq!(names(w.apply(watcher::Event::Apply(again))), Vec::<String>::new());
        // db comes to depend on edge (a cycle db → edge → web → db): everything downstream.
        assert_eq!(names(w.apply(watcher::Event::Apply(app("db", &["edge"], true)))), ["edge", "web"]);
        // Deleted: its dependents.
        assert_eq!(names(w.apply(watcher::Event::Delete(app("edge", &["web"], false)))), ["db", "web"]);
        // A re-list without web drops it and tells its dependents.
        w.apply(watcher::Event::Init);
        w.apply(watcher::Event::InitApply(app("db", &["edge"], true)));
        assert_eq!(names(w.apply(watcher::Event::InitDone)), Vec::<String>::new(), "nobody depends on web now");
        assert!(!w.state.nodes["ns"].contains_key("web"));
        // A dependent created before its dependency: told when the dependency appears.
        w.apply(watcher::Event::Apply(app("late", &["ghost"], false)));
        assert_eq!(names(w.apply(watcher::Event::Apply(app("ghost", &[], false)))), ["late"]);
        assert_eq!(w.state.dependents[&("ns".to_string(), "ghost".to_string())].len(), 1);
    }
}
