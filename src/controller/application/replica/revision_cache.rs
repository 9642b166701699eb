//! The desired Revision of each Application as this replica last read or wrote it (packed JSON,
//! [`Packed`]), used instead of a `GET` while a metadata-only watch of Revisions shows it
//! unchanged: an idle resync reads no Revision, and a new Application's reconciles after its
//! create do not read it again.
//!
//! The watch is one per replica, of every Revision labelled `app.kubernetes.io/managed-by`
//! (metadata only), started by the first reconcile. Of each Revision it keeps only a 64-bit hash
//! of its namespace and name and one of its resourceVersion (16 bytes of data: about 3 MB at
//! 100,000 Revisions), under keys random to the process.
//!
//! Contract ([`Revisions::get`]): a kept copy is used only when the watch has listed and is not
//! listing again, and shows that Revision at exactly the kept copy's resourceVersion (compared
//! for equality only, as the API allows). Anything else (never seen, another resourceVersion,
//! deleted, a re-list in progress) reads it from the API. Keeping only what this replica read or
//! wrote, and forgetting an Application's copy whenever this replica writes one of its Revisions
//! another way ([`Revisions::forget`]) or a shard starts ([`Revisions::clear`]), leaves the watch's
//! lag as the only window, and in it the only other writer, a replica that lost the shard, is
//! fenced. A copy is dropped when the watch shows its Revision deleted, or its Application is
//! finalized, so copies do not outlive their Applications.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex, OnceLock};

use futures_util::StreamExt;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, watcher};
use kube::{Client, ResourceExt};

use crate::api::names;
use crate::api::revision::Revision;
use crate::packed::Packed;

/// What the watch has shown, and the copies kept.
#[derive(Default)]
struct State {
    /// Hash of (namespace, name) → hash of the resourceVersion last shown.
    seen: HashMap<u64, u64>,
    /// The keys a list in progress has shown (a re-list drops the rest); `Some` while listing.
    listing: Option<HashMap<u64, u64>>,
    /// Whether a list has completed.
    listed: bool,
    /// (namespace, Application) → the copy of its desired Revision last read or written.
    kept: HashMap<(String, String), Kept>,
}

/// A kept copy of a Revision: its name, the hash of its resourceVersion, and the Revision as
/// packed JSON ([`Packed`]: about a third of the memory of the parsed Revision, measured).
struct Kept {
    name: String,
    version: u64,
    copy: Packed,
}

/// The replica's Revision watch and kept copies.
pub(crate) struct Revisions {
    state: Arc<Mutex<State>>,
    hasher: RandomState,
    task: OnceLock<tokio::task::JoinHandle<()>>,
}

impl Default for Revisions {
    fn default() -> Self {
        Revisions { state: Default::default(), hasher: RandomState::new(), task: OnceLock::new() }
    }
}

impl Drop for Revisions {
    fn drop(&mut self) {
        if let Some(t) = self.task.get() {
            t.abort();
        }
    }
}

/// `event` with its object mapped by `f`.
fn map<A, B>(event: watcher::Event<A>, f: impl Fn(A) -> B) -> watcher::Event<B> {
    use watcher::Event::*;
    match event {
        Init => Init,
        InitApply(a) => InitApply(f(a)),
        InitDone => InitDone,
        Apply(a) => Apply(f(a)),
        Delete(a) => Delete(f(a)),
    }
}

impl State {
    /// Revision `name` of Application `ns/app` is deleted: its copy, if kept, is dropped (its
    /// Application deleted, or history retention), so kept copies do not outlive them.
    fn deleted(&mut self, ns: &str, app: &str, name: &str) {
        let key = (ns.to_string(), app.to_string());
        if self.kept.get(&key).is_some_and(|k| k.name == name) {
            self.kept.remove(&key);
        }
    }

    /// Apply one watch event.
    fn apply(&mut self, event: watcher::Event<(u64, u64)>) {
        match event {
            watcher::Event::Init => self.listing = Some(HashMap::new()),
            watcher::Event::InitApply((key, rv)) => {
                if let Some(l) = self.listing.as_mut() {
                    l.insert(key, rv);
                }
            }
            watcher::Event::InitDone => {
                if let Some(l) = self.listing.take() {
                    self.seen = l;
                }
                self.listed = true;
            }
            watcher::Event::Apply((key, rv)) => {
                self.seen.insert(key, rv);
            }
            watcher::Event::Delete((key, _)) => {
                self.seen.remove(&key);
            }
        }
    }
}

impl Revisions {
    fn key(&self, ns: &str, name: &str) -> u64 {
        self.hasher.hash_one((ns, name))
    }

    fn version(&self, rv: &str) -> u64 {
        self.hasher.hash_one(rv)
    }

    /// Start the watch (once).
    fn start(&self, client: &Client) {
        self.task.get_or_init(|| {
            let state = self.state.clone();
            let hasher = self.hasher.clone();
            let client = client.clone();
            let selector = format!("{}={}", names::labels::MANAGED_BY, names::labels::MANAGED_BY_VALUE);
            tokio::spawn(async move {
                let api = Api::<PartialObjectMeta<Revision>>::all(client);
                let stream = watcher(api, watcher::Config::default().labels(&selector)).default_backoff();
                let mut stream = std::pin::pin!(stream);
                while let Some(event) = stream.next().await {
                    let event = match event {
                        Ok(e) => {
                            if let watcher::Event::Delete(r) = &e {
                                let app = r.labels().get(names::labels::APPLICATION).cloned().unwrap_or_default();
                                let ns = r.namespace().unwrap_or_default();
                                state.lock().expect("revisions lock").deleted(&ns, &app, &r.name_any());
                            }
                            map(e, |r| {
                                let key = hasher
                                    .hash_one((r.namespace().unwrap_or_default().as_str(), r.name_any().as_str()));
                                (key, hasher.hash_one(r.resource_version().unwrap_or_default().as_str()))
                            })
                        }
                        Err(e) => {
                            tracing::debug!(error = %e, "watching Revisions");
                            continue;
                        }
                    };
                    state.lock().expect("revisions lock").apply(event);
                }
            })
        });
    }

    /// The kept copy of Revision `rev` of Application `ns/app`, when the watch (started on first
    /// use) shows it unchanged since (see the module's contract).
    pub(crate) fn get(&self, client: &Client, ns: &str, app: &str, rev: &str) -> Option<Revision> {
        self.start(client);
        self.lookup(ns, app, rev)
    }

    fn lookup(&self, ns: &str, app: &str, rev: &str) -> Option<Revision> {
        let state = self.state.lock().expect("revisions lock");
        if !state.listed || state.listing.is_some() {
            return None;
        }
        let kept = state.kept.get(&(ns.to_string(), app.to_string()))?;
        if kept.name != rev || state.seen.get(&self.key(ns, rev)) != Some(&kept.version) {
            return None;
        }
        let copy = kept.copy.clone();
        drop(state);
        copy.parse()
    }

    /// Keep `r`, as just read or written, as the copy of its Application's desired Revision,
    /// without `metadata.managedFields` (nothing reads them; they are most of a copy's memory).
    pub(crate) fn keep(&self, r: &Revision) {
        let (Some(ns), Some(rv)) = (r.namespace(), r.resource_version()) else { return };
        let key = (ns, r.spec.application.clone());
        let mut copy = r.clone();
        copy.metadata.managed_fields = None;
        let Some(copy) = Packed::of(&copy) else { return };
        let kept = Kept { name: r.name_any(), version: self.version(&rv), copy };
        self.state.lock().expect("revisions lock").kept.insert(key, kept);
    }

    /// Forget the copy kept for Application `ns/app` (one of its Revisions is written another way).
    pub(crate) fn forget(&self, ns: &str, app: &str) {
        self.state.lock().expect("revisions lock").kept.remove(&(ns.to_string(), app.to_string()));
    }

    /// Forget every copy kept (a shard starts: its Applications may have been written by
    /// another replica since).
    pub(crate) fn clear(&self) {
        self.state.lock().expect("revisions lock").kept.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn revision(name: &str, rv: &str) -> Revision {
        serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Revision",
            "metadata": {"name": name, "namespace": "team", "resourceVersion": rv},
            "spec": {"application": "web", "source": {"repository": "platform", "url": "https://git.example/p",
                     "commit": "0123456789abcdef0123456789abcdef01234567", "path": "web"},
                     "serviceAccountName": "deployer"},
        }))
        .unwrap()
    }

    /// A watch event of Revision (name, resourceVersion) in namespace `team`.
    type Shown = watcher::Event<(&'static str, &'static str)>;

    fn shown(r: &Revisions, events: Vec<Shown>) {
        let mut state = r.state.lock().unwrap();
        for e in events {
            state.apply(map(e, |(name, rv)| (r.key("team", name), r.version(rv))));
        }
    }

    #[test]
    fn a_kept_copy_is_used_only_while_the_watch_shows_it_unchanged() {
        use watcher::Event::*;
        let cases: Vec<(&str, Vec<Shown>, bool)> = vec![
            ("listed at the kept version", vec![Init, InitApply(("web-1", "5")), InitDone], true),
            ("not listed yet", vec![Apply(("web-1", "5"))], false),
            ("listed, then changed", vec![Init, InitApply(("web-1", "5")), InitDone, Apply(("web-1", "6"))], false),
            (
                "changed, then back to the kept version's echo",
                vec![Init, InitApply(("web-1", "4")), InitDone, Apply(("web-1", "5"))],
                true,
            ),
            ("deleted", vec![Init, InitApply(("web-1", "5")), InitDone, Delete(("web-1", "5"))], false),
            ("a re-list in progress", vec![Init, InitApply(("web-1", "5")), InitDone, Init], false),
            (
                "a re-list that no longer shows it",
                vec![Init, InitApply(("web-1", "5")), InitDone, Init, InitDone],
                false,
            ),
            ("never shown", vec![Init, InitApply(("web-2", "5")), InitDone], false),
        ];
        for (name, events, want) in cases {
            let r = Revisions::default();
            r.keep(&revision("web-1", "5"));
            shown(&r, events);
            assert_eq!(r.lookup("team", "web", "web-1").is_some(), want, "{name}");
        }
    }

    #[test]
    fn only_the_desired_revision_kept_and_what_is_forgotten_is_read_again() {
        use watcher::Event::*;
        let r = Revisions::default();
        shown(&r, vec![Init, InitApply(("web-1", "5")), InitApply(("web-2", "7")), InitDone]);
        r.keep(&revision("web-1", "5"));
        assert!(r.lookup("team", "web", "web-1").is_some());
        assert!(r.lookup("team", "web", "web-2").is_none(), "another Revision than the one kept");
        r.keep(&revision("web-2", "7"));
        assert!(r.lookup("team", "web", "web-1").is_none(), "one copy per Application");
        assert!(r.lookup("team", "web", "web-2").is_some());
        r.forget("team", "web");
        assert!(r.lookup("team", "web", "web-2").is_none(), "forgotten");
        r.keep(&revision("web-2", "7"));
        r.clear();
        assert!(r.lookup("team", "web", "web-2").is_none(), "cleared");
        r.keep(&revision("web-2", "7"));
        r.state.lock().unwrap().deleted("team", "web", "web-1");
        assert_eq!(r.state.lock().unwrap().kept.len(), 1, "another Revision of the Application deleted");
        r.state.lock().unwrap().deleted("team", "web", "web-2");
        assert!(r.state.lock().unwrap().kept.is_empty(), "the copy does not outlive its Revision");
    }

    #[test]
    fn a_kept_copy_is_the_revision_without_its_managed_fields() {
        use watcher::Event::*;
        let r = Revisions::default();
        shown(&r, vec![Init, InitApply(("web-1", "5")), InitDone]);
        let mut read = revision("web-1", "5");
        read.metadata.managed_fields =
            Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry::default()]);
        r.keep(&read);
        let copy = r.lookup("team", "web", "web-1").expect("kept");
        assert!(copy.metadata.managed_fields.is_none());
        read.metadata.managed_fields = None;
        assert_eq!(serde_json::to_value(&copy).unwrap(), serde_json::to_value(&read).unwrap(), "all else kept");
    }
}
