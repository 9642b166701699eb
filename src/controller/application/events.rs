//! The Events one reconcile tells about its Application, as data: stages tell them
//! ([`Events::tell`], [`Events::lifecycle`]) and the reconcile publishes them in order
//! ([`Events::take`], then `status::publish_events`), before it writes the status and once it
//! ends.
//!
//! Lifecycle Events (`NewRevision`, the `Progressing` of an attempt's start, `Succeeded`) about
//! one Revision are told in one Event, so that a Revision created, applied and Healthy in one
//! reconcile is one Event instead of three (each Event is a write to the API server, and at
//! thousands of Applications they were the largest share of a new Application's requests). Any
//! other Event ends the run of lifecycle Events before it, so the order stays the order things
//! happened in.

use std::sync::Mutex;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::EventType;

/// One Event to publish: its type, reason, the Revision it is about (part of the recorder's
/// aggregation key, so Events about different Revisions are never merged into one series),
/// and its note.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Told {
    pub(super) type_: EventType,
    pub(super) reason: String,
    pub(super) related: Option<ObjectReference>,
    pub(super) note: String,
    /// A lifecycle Event, merged with the lifecycle Events next to it about the same Revision.
    lifecycle: bool,
}

/// The Events a reconcile told and has not published yet, in order.
#[derive(Default)]
pub(super) struct Events(Mutex<Vec<Told>>);

impl Events {
    /// An Event about the Application (`related`: the Revision concerned).
    pub(super) fn tell(&self, related: Option<ObjectReference>, type_: EventType, reason: &str, note: &str) {
        let told = Told { type_, reason: reason.to_string(), related, note: note.to_string(), lifecycle: false };
        self.0.lock().expect("events lock").push(told);
    }

    /// A lifecycle Event about Revision `related`.
    pub(super) fn lifecycle(&self, related: ObjectReference, reason: &str, note: &str) {
        let told = Told {
            type_: EventType::Normal,
            reason: reason.to_string(),
            related: Some(related),
            note: note.to_string(),
            lifecycle: true,
        };
        self.0.lock().expect("events lock").push(told);
    }

    /// What to publish, in order ([`merged`]), and nothing told before kept.
    pub(super) fn take(&self) -> Vec<Told> {
        merged(std::mem::take(&mut *self.0.lock().expect("events lock")))
    }
}

/// The longest part of a merged note kept, in characters: three fit in an Event's 1,024.
const PART: usize = 330;

/// The Events to publish for `told`, in order: consecutive lifecycle Events about the same
/// Revision become one, with the reason of the last (the furthest step) and every note, in order.
fn merged(told: Vec<Told>) -> Vec<Told> {
    let mut out: Vec<Told> = Vec::new();
    for t in told {
        match out.last_mut() {
            Some(last) if t.lifecycle && last.lifecycle && last.related == t.related => {
                last.reason = t.reason;
                last.note = format!("{}; {}", last.note, part(&t.note));
            }
            _ if t.lifecycle => out.push(Told { note: part(&t.note), ..t }),
            _ => out.push(t),
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

    fn held(reason: &'static str, revision: &str, note: &str) -> Told {
        let related = Some(ObjectReference { name: Some(revision.to_string()), ..Default::default() });
        Told { type_: EventType::Normal, reason: reason.to_string(), related, note: note.to_string(), lifecycle: true }
    }

    fn warning(reason: &'static str, revision: &str, note: &str) -> Told {
        let related = Some(ObjectReference { name: Some(revision.to_string()), ..Default::default() });
        Told {
            type_: EventType::Warning,
            reason: reason.to_string(),
            related,
            note: note.to_string(),
            lifecycle: false,
        }
    }

    /// Published as (reason, revision, note).
    type Published<'a> = Vec<(&'a str, &'a str, &'a str)>;

    #[test]
    fn steps_of_one_revision_become_one_event_with_the_last_reason() {
        // (held, published)
        let cases: Vec<(Vec<Told>, Published)> = vec![
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
            // Any other Event ends the run before it, and is never merged.
            (
                vec![
                    held("NewRevision", "r1", "a"),
                    warning("HookFailed", "r1", "b"),
                    warning("HookFailed", "r1", "c"),
                    held("Progressing", "r1", "d"),
                ],
                vec![
                    ("NewRevision", "r1", "a"),
                    ("HookFailed", "r1", "b"),
                    ("HookFailed", "r1", "c"),
                    ("Progressing", "r1", "d"),
                ],
            ),
        ];
        for (input, want) in cases {
            let got: Vec<(String, String, String)> = merged(input.clone())
                .into_iter()
                .map(|h| (h.reason, h.related.and_then(|r| r.name).unwrap_or_default(), h.note))
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
