//! Our own applies coming back through the metadata watches. A rollout applies a ConfigMap; the
//! ConfigMap watch then reports it at the resourceVersion the apply answered. That event says
//! nothing the rollout did not know, and a reconcile for it would plan again (a read and a
//! server-side dry-run per object) for nothing. Any other version of the object (someone
//! else's edit, a controller's status update) still triggers a reconcile.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::watch::managed::WATCHED_BY_DEFAULT;

/// Object identity (`group/kind/namespace/name`) → the resourceVersion our last apply of it
/// answered, for the kinds every shard watches. An entry goes with the first watch event of
/// its object, ours or not, so there is at most one per object applied.
#[derive(Default)]
pub struct Echoes(Mutex<HashMap<String, String>>);

impl Echoes {
    /// Note that an apply of `id` (of `group`/`kind`) answered `resource_version`.
    pub fn applied(&self, group: &str, kind: &str, id: String, resource_version: Option<&str>) {
        let Some(rv) = resource_version.filter(|rv| !rv.is_empty()) else { return };
        if !WATCHED_BY_DEFAULT.contains(&(group, kind)) {
            return;
        }
        self.0.lock().expect("echoes lock").insert(id, rv.to_string());
    }

    /// Whether a watch event of `id` at `resource_version` is our own apply coming back (so it
    /// triggers nothing). Either way the object's entry is gone afterwards.
    pub fn is_echo(&self, id: &str, resource_version: Option<&str>) -> bool {
        let mut echoes = self.0.lock().expect("echoes lock");
        match echoes.remove(id) {
            Some(rv) => resource_version == Some(rv.as_str()),
            None => false,
        }
    }

    /// Objects applied whose watch event has not come yet.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.0.lock().expect("echoes lock").len()
    }

    /// Whether no apply is waiting for its watch event.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_version_applied_is_an_echo() {
        let echoes = Echoes::default();
        let id = "/ConfigMap/ns/a".to_string();
        // (what was applied, the event's version, is it an echo)
        let cases: &[(Option<&str>, Option<&str>, bool)] = &[
            (Some("10"), Some("10"), true),
            (Some("10"), Some("11"), false),
            (Some("10"), None, false),
            (None, Some("10"), false),
            (Some(""), Some(""), false),
        ];
        for (applied, event, echo) in cases {
            echoes.applied("", "ConfigMap", id.clone(), *applied);
            assert_eq!(echoes.is_echo(&id, *event), *echo, "applied {applied:?}, event {event:?}");
            assert!(echoes.is_empty(), "the first event takes the entry");
        }
        // The next event of the same object, even at the same version, is no echo any more.
        echoes.applied("", "ConfigMap", id.clone(), Some("12"));
        assert!(echoes.is_echo(&id, Some("12")));
        assert!(!echoes.is_echo(&id, Some("12")));
    }

    #[test]
    fn kinds_no_shard_watches_are_not_kept() {
        let echoes = Echoes::default();
        echoes.applied("example.com", "Widget", "example.com/Widget/ns/a".into(), Some("1"));
        echoes.applied("apps", "Deployment", "apps/Deployment/ns/a".into(), Some("1"));
        assert_eq!(echoes.len(), 1);
    }
}
