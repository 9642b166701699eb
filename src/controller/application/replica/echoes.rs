//! Our own applies coming back through the metadata watches. A rollout applies a ConfigMap; the
//! ConfigMap watch then reports it at the resourceVersion the apply answered. That event says
//! nothing the rollout did not know, and a reconcile for it would plan again (a read and a
//! server-side dry-run per object) for nothing. Any other version of the object (someone
//! else's edit, a controller's status update) still triggers a reconcile.
//!
//! An apply's event can come before the apply's answer is handled: a wave's objects are applied
//! one after the other and their answers noted together, and a watch event may overtake even one
//! answer. So the objects of a wave are noted as being sent before the first request
//! ([`Echoes::sending`]); an event of one of them meanwhile is held, and once the answers are in
//! it is dropped if it is the version an apply answered, and otherwise triggers its Application
//! then ([`Echoes::triggers`]).
//!
//! A rollout's first look after its apply waits for the workloads' controllers through the
//! watch ([`Echoes::looking`]): their events are held meanwhile, and those at or before the
//! version the look took in say nothing the reconcile did not see. Without this, every status
//! write a controller made during the look triggered a reconcile after it, which found nothing
//! to do.
//!
//! Contract: an event that is not the version our apply answered, nor a version at or before
//! one a first look took in, always triggers its Application, at once or when the wave's answers
//! are in (the look ended); an event that is triggers nothing.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::runtime::reflector::ObjectRef;
use tokio::sync::broadcast;

use crate::api::application::Application;
use crate::watch::managed::WATCHED_BY_DEFAULT;

/// What is known of one object's apply.
#[derive(Debug)]
enum Entry {
    /// Its apply is being sent: the versions its watch has shown meanwhile, each with the
    /// Application it names.
    Sending(Vec<(Option<String>, ObjectRef<Application>)>),
    /// Its apply answered this resourceVersion; the watch has not shown it yet.
    Applied(String),
}

/// Object identity (`group/kind/namespace/name`) → what is known of our last apply of it, for the
/// kinds every shard watches. An entry goes with the first watch event of its object after its
/// apply was answered, ours or not, so there is at most one per object applied.
pub struct Echoes {
    entries: Mutex<HashMap<String, Entry>>,
    triggers: broadcast::Sender<ObjectRef<Application>>,
}

impl Default for Echoes {
    fn default() -> Self {
        Echoes { entries: Mutex::default(), triggers: broadcast::channel(1024).0 }
    }
}

/// Whether `group`/`kind` is a kind every shard watches (only their events can be echoes).
fn watched(group: &str, kind: &str) -> bool {
    WATCHED_BY_DEFAULT.contains(&(group, kind))
}

impl Echoes {
    /// The Applications to reconcile for events held while their objects' applies were sent.
    pub fn triggers(&self) -> broadcast::Receiver<ObjectRef<Application>> {
        self.triggers.subscribe()
    }

    /// The applies of `ids` (`(group, kind, identity)`) are about to be sent: events of them are
    /// held until [`Echoes::applied`] or the end of the returned guard decides about them. An
    /// object already being sent keeps the events it holds; an answer still waiting for its
    /// event is forgotten, since this apply will answer another version.
    pub fn sending<'a>(&'a self, ids: impl IntoIterator<Item = (&'a str, &'a str, String)>) -> Sending<'a> {
        let mut entries = self.entries.lock().expect("echoes lock");
        let ids: Vec<String> = ids
            .into_iter()
            .filter(|(g, k, _)| watched(g, k))
            .map(|(_, _, id)| {
                let entry = entries.entry(id.clone()).or_insert_with(|| Entry::Sending(Vec::new()));
                if matches!(entry, Entry::Applied(_)) {
                    *entry = Entry::Sending(Vec::new());
                }
                id
            })
            .collect();
        Sending { echoes: self, ids }
    }

    /// Note that an apply of `id` (of `group`/`kind`) answered `resource_version`. Events held
    /// meanwhile at any other version trigger their Application now.
    pub fn applied(&self, group: &str, kind: &str, id: String, resource_version: Option<&str>) {
        if !watched(group, kind) {
            return;
        }
        let rv = resource_version.filter(|rv| !rv.is_empty());
        let mut entries = self.entries.lock().expect("echoes lock");
        let held = match entries.remove(&id) {
            Some(Entry::Sending(held)) => held,
            _ => Vec::new(),
        };
        let mut echoed = false;
        for (seen, app) in held {
            if rv.is_some() && seen.as_deref() == rv {
                echoed = true;
            } else {
                drop(self.triggers.send(app));
            }
        }
        if let Some(rv) = rv.filter(|_| !echoed) {
            entries.insert(id, Entry::Applied(rv.to_string()));
        }
    }

    /// Whether a watch event of `id` at `resource_version`, naming `app`, is to trigger no
    /// reconcile now: our own apply coming back, or an event held while the apply is sent. An
    /// event that names no Application still takes the entry of an answered apply, so that none
    /// lingers; while the apply is sent it has nothing to hold.
    pub fn is_echo(&self, id: &str, resource_version: Option<&str>, app: Option<&ObjectRef<Application>>) -> bool {
        let mut entries = self.entries.lock().expect("echoes lock");
        match entries.get_mut(id) {
            Some(Entry::Sending(held)) => {
                if let Some(app) = app {
                    held.push((resource_version.map(str::to_string), app.clone()));
                }
                true
            }
            Some(Entry::Applied(rv)) => {
                let echo = resource_version == Some(rv.as_str());
                entries.remove(id);
                echo
            }
            None => false,
        }
    }

    /// A first look waits for the controllers of `ids` (`(group, kind, identity)`, applied by
    /// this reconcile): their events are held until the returned guard ends, and then those at
    /// or before the version [`Looking::took`] names are dropped (and our apply's own, still to
    /// come or held), the others trigger.
    pub fn looking<'a>(&'a self, ids: impl IntoIterator<Item = (&'a str, &'a str, String)>) -> Looking<'a> {
        let mut entries = self.entries.lock().expect("echoes lock");
        let ids = ids
            .into_iter()
            .filter(|(g, k, _)| watched(g, k))
            .map(|(_, _, id)| {
                let echo = match entries.remove(&id) {
                    Some(Entry::Applied(rv)) => Some(rv),
                    Some(Entry::Sending(held)) => {
                        entries.insert(id.clone(), Entry::Sending(held));
                        return (id, None);
                    }
                    None => None,
                };
                entries.insert(id.clone(), Entry::Sending(Vec::new()));
                (id, echo)
            })
            .collect();
        Looking { echoes: self, ids, took: HashMap::new() }
    }

    /// Objects applied whose watch event has not come yet, or being sent.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.lock().expect("echoes lock").len()
    }

    /// Whether no apply is waiting for its watch event.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Applies being sent ([`Echoes::sending`]). Dropped, every object whose apply did not answer
/// (not applied after all, or failed) gives up its held events: each triggers its Application.
pub struct Sending<'a> {
    echoes: &'a Echoes,
    ids: Vec<String>,
}

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        let mut entries = self.echoes.entries.lock().expect("echoes lock");
        for id in &self.ids {
            if !matches!(entries.get(id), Some(Entry::Sending(_))) {
                continue;
            }
            if let Some(Entry::Sending(held)) = entries.remove(id) {
                for (_, app) in held {
                    drop(self.echoes.triggers.send(app));
                }
            }
        }
    }
}

/// A first look's held events ([`Echoes::looking`]).
pub struct Looking<'a> {
    echoes: &'a Echoes,
    /// Each object, with the version our apply answered when its event had not come yet.
    ids: Vec<(String, Option<String>)>,
    /// Identity → the version the look took in.
    took: HashMap<String, String>,
}

impl Looking<'_> {
    /// The look took object `id` in at `resource_version`.
    pub fn took(&mut self, id: &str, resource_version: &str) {
        self.took.insert(id.to_string(), resource_version.to_string());
    }
}

impl Drop for Looking<'_> {
    fn drop(&mut self) {
        let mut entries = self.echoes.entries.lock().expect("echoes lock");
        for (id, echo) in &self.ids {
            let Some(Entry::Sending(held)) = entries.remove(id) else { continue };
            let took = self.took.get(id);
            // An object's events pass here in its order. The version taken in was in the store
            // before the look ended, so held events after it are newer; if it is not held, its
            // event is still to come and every held one is older.
            let upto = match took {
                Some(rv) => {
                    held.iter().rposition(|(seen, _)| seen.as_deref() == Some(rv.as_str())).or(Some(usize::MAX))
                }
                None => None,
            };
            let mut echoed = false;
            for (i, (seen, app)) in held.into_iter().enumerate() {
                if upto.is_some_and(|u| u == usize::MAX || i <= u) {
                    continue;
                }
                if echo.is_some() && seen == *echo {
                    echoed = true;
                    continue;
                }
                drop(self.echoes.triggers.send(app));
            }
            // A version still to come that says nothing new.
            let later = match (took, upto) {
                (Some(rv), Some(usize::MAX)) => Some(rv.clone()),
                (None, _) => echo.clone().filter(|_| !echoed),
                _ => None,
            };
            if let Some(rv) = later {
                entries.insert(id.clone(), Entry::Applied(rv));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(name: &str) -> ObjectRef<Application> {
        ObjectRef::new(name).within("team")
    }

    #[test]
    fn only_the_version_applied_is_an_echo() {
        let echoes = Echoes::default();
        let id = "/ConfigMap/ns/a".to_string();
        let web = app("web");
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
            assert_eq!(echoes.is_echo(&id, *event, Some(&web)), *echo, "applied {applied:?}, event {event:?}");
            assert!(echoes.is_empty(), "the first event takes the entry");
        }
        // The next event of the same object, even at the same version, is no echo any more.
        echoes.applied("", "ConfigMap", id.clone(), Some("12"));
        assert!(echoes.is_echo(&id, Some("12"), Some(&web)));
        assert!(!echoes.is_echo(&id, Some("12"), Some(&web)));
        // An event that names no Application (its annotation removed) takes the entry too.
        echoes.applied("", "ConfigMap", id.clone(), Some("13"));
        assert!(!echoes.is_echo(&id, Some("14"), None));
        assert!(echoes.is_empty(), "an event without an owner takes the entry");
    }

    #[test]
    fn events_while_the_apply_is_sent_trigger_only_if_they_are_not_its_answer() {
        let cm = "/ConfigMap/ns/a".to_string();
        // (the events' versions while sending, what the apply answered (None: no answer), the
        // triggers, an entry left for a later event)
        type Case = (&'static [&'static str], Option<&'static str>, usize, bool);
        let cases: &[Case] = &[
            // The apply's own event came before its answer was handled.
            (&["10"], Some("10"), 0, false),
            // Someone else's version only: it triggers, and the echo is still to come.
            (&["9"], Some("10"), 1, true),
            // An earlier version, then our own.
            (&["9", "10"], Some("10"), 1, false),
            // Nothing seen: the echo is still to come.
            (&[], Some("10"), 0, true),
            // The apply failed or was not sent: whatever was seen triggers.
            (&["10"], None, 1, false),
            (&[], None, 0, false),
        ];
        for (seen, answered, triggered, left) in cases {
            let echoes = Echoes::default();
            let mut rx = echoes.triggers();
            {
                let _sending = echoes.sending([("", "ConfigMap", cm.clone())]);
                for rv in *seen {
                    assert!(echoes.is_echo(&cm, Some(rv), Some(&app("web"))), "held while sending");
                }
                if let Some(rv) = answered {
                    echoes.applied("", "ConfigMap", cm.clone(), Some(rv));
                }
            }
            let mut got = 0;
            while let Ok(r) = rx.try_recv() {
                assert_eq!(r, app("web"));
                got += 1;
            }
            assert_eq!(got, *triggered, "seen {seen:?}, answered {answered:?}");
            assert_eq!(echoes.len(), usize::from(*left), "seen {seen:?}, answered {answered:?}");
        }
    }

    #[test]
    fn sending_keeps_what_is_held_and_forgets_an_answer_still_waiting() {
        let cm = "/ConfigMap/ns/a".to_string();
        // (an answer waiting for its event, a second guard of the same object, the version seen
        // after the first guard, triggers once the guards end without an answer)
        type Case = (Option<&'static str>, bool, &'static str, usize);
        let cases: &[Case] = &[
            // Held by the first guard: a second one keeps it, and it triggers.
            (None, true, "9", 1),
            // The answer "10" still waiting is no echo of the new apply: held, and it triggers.
            (Some("10"), false, "10", 1),
            (Some("10"), true, "10", 1),
        ];
        for (waiting, twice, seen, triggered) in cases {
            let echoes = Echoes::default();
            let mut rx = echoes.triggers();
            if let Some(rv) = waiting {
                echoes.applied("", "ConfigMap", cm.clone(), Some(rv));
            }
            let first = echoes.sending([("", "ConfigMap", cm.clone())]);
            assert!(echoes.is_echo(&cm, Some(seen), Some(&app("web"))), "held while sending");
            let second = twice.then(|| echoes.sending([("", "ConfigMap", cm.clone())]));
            drop(second);
            drop(first);
            let mut got = 0;
            while rx.try_recv().is_ok() {
                got += 1;
            }
            assert_eq!(got, *triggered, "waiting {waiting:?}, twice {twice}");
            assert!(echoes.is_empty());
        }
    }

    #[test]
    fn a_first_look_drops_the_events_up_to_the_version_it_took_in() {
        let d = "apps/Deployment/ns/web".to_string();
        // (our apply's answer still to come, the events' versions during the look, the version
        // taken in, the triggers once it ends, the version still to come that triggers nothing)
        type Case = (Option<&'static str>, &'static [&'static str], Option<&'static str>, usize, Option<&'static str>);
        let cases: &[Case] = &[
            // The controller's writes up to the version taken in: nothing new.
            (None, &["11", "12"], Some("12"), 0, None),
            // A write after it: newer than what the reconcile saw.
            (None, &["11", "12", "13"], Some("12"), 1, None),
            // The version taken in has not come through yet: all held are older, and it is
            // dropped when it comes.
            (None, &["11"], Some("12"), 0, Some("12")),
            // Our apply's answer among them.
            (Some("10"), &["10", "11"], Some("11"), 0, None),
            // The look ran out: the controller's writes trigger, our apply's answer does not.
            (Some("10"), &["10", "11"], None, 1, None),
            (Some("10"), &[], None, 0, Some("10")),
            (None, &["11"], None, 1, None),
        ];
        for (answered, seen, took, triggered, left) in cases {
            let echoes = Echoes::default();
            let mut rx = echoes.triggers();
            if let Some(rv) = answered {
                echoes.applied("apps", "Deployment", d.clone(), Some(rv));
            }
            {
                let mut looking = echoes.looking([("apps", "Deployment", d.clone())]);
                for rv in *seen {
                    assert!(echoes.is_echo(&d, Some(rv), Some(&app("web"))), "held while looking");
                }
                if let Some(rv) = took {
                    looking.took(&d, rv);
                }
            }
            let mut got = 0;
            while rx.try_recv().is_ok() {
                got += 1;
            }
            let what = format!("answered {answered:?}, seen {seen:?}, took {took:?}");
            assert_eq!(got, *triggered, "{what}");
            match left {
                Some(rv) => {
                    assert!(echoes.is_echo(&d, Some(rv), Some(&app("web"))), "{what}: {rv} still to come");
                    assert!(echoes.is_empty());
                }
                None => assert!(echoes.is_empty(), "{what}"),
            }
        }
    }

    #[test]
    fn kinds_no_shard_watches_are_not_kept() {
        let echoes = Echoes::default();
        echoes.applied("example.com", "Widget", "example.com/Widget/ns/a".into(), Some("1"));
        echoes.applied("apps", "Deployment", "apps/Deployment/ns/a".into(), Some("1"));
        assert_eq!(echoes.len(), 1);
        let sending = echoes.sending([("example.com", "Widget", "example.com/Widget/ns/b".to_string())]);
        assert_eq!(echoes.len(), 1);
        drop(sending);
    }
}
