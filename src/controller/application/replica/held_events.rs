//! Lifecycle Events held until the reconcile ends, so that a Revision created, applied and
//! Healthy in one reconcile is told in one Event instead of three (each Event is a write to the
//! API server, and at thousands of Applications they were the largest share of a new
//! Application's requests).
//!
//! Only `NewRevision`, the `Progressing` of an attempt's start and `Succeeded` are held; any
//! other Event of the same Application publishes what is held first, so the order stays the
//! order things happened in.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::reflector::ObjectRef;

use crate::api::application::Application;

/// One held Event: its reason, the Revision it is about, its note.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Held {
    pub(crate) reason: &'static str,
    pub(crate) related: ObjectReference,
    pub(crate) note: String,
}

/// Each Application's held Events (an Application is reconciled by one reconcile at a time).
#[derive(Default)]
pub(crate) struct HeldEvents(Mutex<HashMap<ObjectRef<Application>, Vec<Held>>>);

impl HeldEvents {
    pub(crate) fn hold(&self, app: &Application, held: Held) {
        self.0.lock().expect("held events lock").entry(ObjectRef::from_obj(app)).or_default().push(held);
    }

    /// What `app` holds, merged ([`merged`]), and nothing held after.
    pub(crate) fn take(&self, app: &Application) -> Vec<Held> {
        let held = self.0.lock().expect("held events lock").remove(&ObjectRef::from_obj(app));
        held.map(merged).unwrap_or_default()
    }
}

/// The longest part of a merged note kept, in characters: three fit in an Event's 1,024.
const PART: usize = 330;

/// The Events to publish for `held`, in order: consecutive ones about the same Revision become
/// one, with the reason of the last (the furthest step) and every note, in order.
pub(crate) fn merged(held: Vec<Held>) -> Vec<Held> {
    let mut out: Vec<Held> = Vec::new();
    for h in held {
        match out.last_mut() {
            Some(last) if last.related == h.related => {
                last.reason = h.reason;
                last.note = format!("{}; {}", last.note, part(&h.note));
            }
            _ => out.push(Held { note: part(&h.note), ..h }),
        }
    }
    out
}

fn part(note: &str) -> String {
    if note.chars().count() <= PART {
        return note.to_string();
    }
    let mut cut: String = note.chars().take(PART - 1).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(reason: &'static str, revision: &str, note: &str) -> Held {
        let related = ObjectReference { name: Some(revision.to_string()), ..Default::default() };
        Held { reason, related, note: note.to_string() }
    }

    /// Published as (reason, revision, note).
    type Published<'a> = Vec<(&'a str, &'a str, &'a str)>;

    #[test]
    fn steps_of_one_revision_become_one_event_with_the_last_reason() {
        // (held, published)
        let cases: Vec<(Vec<Held>, Published)> = vec![
            (vec![], vec![]),
            (vec![held("NewRevision", "r1", "a")], vec![("NewRevision", "r1", "a")]),
            // Created, applied and Healthy in one reconcile: one Succeeded.
            (
                vec![held("NewRevision", "r1", "a"), held("Progressing", "r1", "b"), held("Succeeded", "r1", "c")],
                vec![("Succeeded", "r1", "a; b; c")],
            ),
            // Created and applying, waiting for health: one Progressing.
            (vec![held("NewRevision", "r1", "a"), held("Progressing", "r1", "b")], vec![("Progressing", "r1", "a; b")]),
            // Another Revision's steps stay apart, in order.
            (
                vec![held("Succeeded", "r1", "a"), held("NewRevision", "r2", "b"), held("Progressing", "r2", "c")],
                vec![("Succeeded", "r1", "a"), ("Progressing", "r2", "b; c")],
            ),
        ];
        for (input, want) in cases {
            let got: Vec<(String, String, String)> = merged(input.clone())
                .into_iter()
                .map(|h| (h.reason.to_string(), h.related.name.unwrap_or_default(), h.note))
                .collect();
            let want: Vec<(String, String, String)> =
                want.into_iter().map(|(r, n, t)| (r.to_string(), n.to_string(), t.to_string())).collect();
            assert_eq!(got, want, "{input:?}");
        }
    }

    #[test]
    fn a_merged_note_keeps_every_step_within_an_events_length() {
        let long = "x".repeat(2000);
        let out = merged(vec![
            held("NewRevision", "r", &long),
            held("Progressing", "r", &long),
            held("Succeeded", "r", "Healthy"),
        ]);
        assert_eq!(out.len(), 1);
        assert!(out[0].note.chars().count() <= 1024, "{}", out[0].note.len());
        assert!(
            out[0].note.ends_with("; Healthy"),
            "the last step is kept: {}",
            &out[0].note[out[0].note.len() - 40..]
        );
    }
}
