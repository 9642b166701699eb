//! This replica's status writes that the Application watch has not shown yet.
//!
//! A reconcile runs on the controller's cached copy of the Application. A trigger that arrives
//! between a status write and that write's watch event (a managed object or a Pod changing,
//! a Repository fetch) starts a reconcile on the copy from before the write: it sees the
//! status the write replaced, so it creates the Revision again (refused, 409), repeats the
//! rollout's reads, and has its own status write refused as computed from a stale copy. The
//! object the write returned is kept until the watch shows a newer copy, and a reconcile of the
//! copy it replaced runs on it instead.
//!
//! Both readers of a reconcile's copy go through [`Written::latest`]: the reconcile itself
//! (`application/mod.rs`, before anything is read from the copy) and the queue's classification
//! (`run.rs`, deciding whether the reconcile finishes an attempt).
//!
//! Contract ([`Written::latest`]): the written copy replaces the cached one only when the
//! cached one's resourceVersion is exactly the one the write was computed from (compared for
//! equality only, as the API allows); any other copy is newer than the write or the write's own
//! echo, and is used as it is. An entry lives until the next watch event of its Application
//! ([`Written::observed`]), so at most one per Application with a write in flight.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use crate::api::application::Application;

/// A status write: the resourceVersion it was computed from, and the object it returned.
struct Write {
    before: String,
    after: Arc<Application>,
}

/// The status writes of this replica not yet shown by the watch.
#[derive(Default)]
pub(crate) struct Written {
    writes: Mutex<HashMap<ObjectRef<Application>, Write>>,
    /// The resourceVersion of each Application's last quiet status write: its watch event
    /// triggers no reconcile (nothing changed that the reconcile had not just seen).
    quiet: Mutex<HashMap<ObjectRef<Application>, String>>,
}

impl Written {
    /// A status write of the copy at resourceVersion `before` returned `after`; `quiet`: its
    /// watch event is to trigger no reconcile.
    pub(crate) fn record(&self, before: Option<String>, after: Application, quiet: bool) {
        let key = ObjectRef::from_obj(&after);
        if let Some(rv) = after.resource_version().filter(|_| quiet) {
            self.quiet.lock().expect("quiet writes lock").insert(key.clone(), rv);
        }
        let Some(before) = before else { return };
        self.writes.lock().expect("written lock").insert(key, Write { before, after: Arc::new(after) });
    }

    /// The copy to reconcile: what the last status write returned when `app` is the copy that
    /// write was computed from, else `app` (and the write is forgotten: the cache has moved
    /// past it, even if its event came before the write was recorded).
    pub(crate) fn latest(&self, app: Arc<Application>) -> Arc<Application> {
        let key = ObjectRef::from_obj(&*app);
        let mut written = self.writes.lock().expect("written lock");
        let Some(w) = written.get(&key) else { return app };
        if app.resource_version().as_deref() == Some(w.before.as_str()) {
            return w.after.clone();
        }
        written.remove(&key);
        app
    }

    /// The watch shows `app`'s copy at `rv`: a write computed from another copy is shown (or
    /// overtaken) and forgotten. Returns whether it is our own quiet write coming back.
    pub(crate) fn observed(&self, app: &ObjectRef<Application>, rv: Option<&str>) -> bool {
        {
            let mut written = self.writes.lock().expect("written lock");
            if written.get(app).is_some_and(|w| Some(w.before.as_str()) != rv) {
                written.remove(app);
            }
        }
        let mut quiet = self.quiet.lock().expect("quiet writes lock");
        let ours = quiet.get(app).is_some_and(|q| Some(q.as_str()) == rv);
        if ours {
            quiet.remove(app);
        }
        ours
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.writes.lock().expect("written lock").len()
    }
}

/// An Application `team/web` at resourceVersion `rv` with `status`, for the tests of the copies
/// a reconcile runs on (here and in `run.rs`).
#[cfg(test)]
pub(crate) fn test_app(rv: &str, status: serde_json::Value) -> Application {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "web", "namespace": "team", "resourceVersion": rv},
        "spec": {"source": {"repository": "platform", "path": "web"}, "serviceAccountName": "deployer",
                 "destination": {"namespace": "team"}},
        "status": status,
    }))
    .unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(rv: &str, desired: Option<&str>) -> Application {
        test_app(rv, serde_json::json!({"desiredRevision": desired}))
    }

    fn desired(a: &Application) -> Option<&str> {
        a.status.as_ref()?.desired_revision.as_deref()
    }

    #[test]
    fn only_the_copy_a_write_was_computed_from_is_replaced() {
        // (cached copy's resourceVersion, events seen since the write, desired revision used)
        let cases: &[(&str, &[&str], Option<&str>)] = &[
            // The copy the write was computed from, the write not shown yet: the written one.
            ("10", &[], Some("web-1")),
            // The write's own echo: as it is.
            ("11", &[], Some("cached")),
            // A newer copy (someone wrote after us): as it is.
            ("12", &[], Some("cached")),
            // The watch showed the write: forgotten, so even the old copy is used as it is
            // (a relist can only show newer ones).
            ("10", &["11"], Some("cached")),
            // An event of the very copy the write was computed from: still not shown.
            ("10", &["10"], Some("web-1")),
        ];
        for (cached, events, want) in cases {
            let written = Written::default();
            written.record(Some("10".into()), app("11", Some("web-1")), false);
            for rv in *events {
                let _ = written.observed(&ObjectRef::from_obj(&app(rv, None)), Some(rv));
            }
            let got = written.latest(Arc::new(app(cached, Some("cached"))));
            assert_eq!(desired(&got), *want, "cached {cached}, events {events:?}");
        }
    }

    #[test]
    fn a_write_of_a_copy_without_resource_version_is_not_kept() {
        let written = Written::default();
        written.record(None, app("11", Some("web-1")), false);
        assert_eq!(written.len(), 0);
    }

    #[test]
    fn entries_end_with_the_next_event_or_a_newer_copy() {
        let written = Written::default();
        written.record(Some("10".into()), app("11", Some("web-1")), false);
        let _ = written.observed(&ObjectRef::from_obj(&app("11", None)), Some("11"));
        assert_eq!(written.len(), 0);
        // The write's event came before the write was recorded: the next reconcile's copy,
        // newer than the one it was computed from, ends it.
        written.record(Some("10".into()), app("11", Some("web-1")), false);
        written.latest(Arc::new(app("11", Some("web-1"))));
        assert_eq!(written.len(), 0);
    }

    #[test]
    fn a_quiet_write_coming_back_is_ours_once() {
        let written = Written::default();
        let key = ObjectRef::from_obj(&app("11", None));
        written.record(Some("10".into()), app("11", Some("web-1")), true);
        assert!(!written.observed(&key, Some("10")), "an older copy is not the write");
        assert!(written.observed(&key, Some("11")), "the write's own event");
        assert!(!written.observed(&key, Some("11")), "only once");
        written.record(Some("11".into()), app("12", Some("web-1")), false);
        assert!(!written.observed(&key, Some("12")), "a write that is not quiet triggers a reconcile");
    }
}
