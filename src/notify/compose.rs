//! The [`Message`] of one Event: its Application, reason and note, and the commit and source URL
//! of the Revision it names. Pure.

use k8s_openapi::api::events::v1::Event;

use super::message::{MAX_MESSAGE, Message};
use crate::api::notification::Severity;
use crate::api::revision::Revision;

/// The message of `event` (about an Application), with `revision` the Revision its `related`
/// names (when it could be read). `sent` is set by the sender.
pub fn message(event: &Event, revision: Option<&Revision>) -> Message {
    let regarding = event.regarding.clone().unwrap_or_default();
    let severity = match event.type_.as_deref() {
        Some("Warning") => Severity::Warning,
        _ => Severity::Normal,
    };
    let at = event
        .event_time
        .as_ref()
        .map(|t| t.0.to_string())
        .or_else(|| event.metadata.creation_timestamp.as_ref().map(|t| t.0.to_string()))
        .unwrap_or_default();
    let note = event.note.clone().unwrap_or_default();
    Message {
        event: event.metadata.uid.clone().unwrap_or_default(),
        namespace: regarding.namespace.unwrap_or_default(),
        application: regarding.name.unwrap_or_default(),
        severity,
        reason: event.reason.clone().unwrap_or_default(),
        message: note.chars().take(MAX_MESSAGE).collect(),
        revision: event.related.as_ref().and_then(|r| r.name.clone()),
        commit: revision.map(|r| r.spec.source.commit.clone()),
        source_url: revision.map(|r| r.spec.source.url.clone()).filter(|u| !u.is_empty()),
        at,
        sent: 0,
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ObjectReference;

    use super::*;

    #[test]
    fn from_an_event_and_its_revision() {
        let mut ev = Event {
            type_: Some("Warning".into()),
            reason: Some("HealthTimeout".into()),
            note: Some("n".repeat(2000)),
            regarding: Some(ObjectReference {
                namespace: Some("team".into()),
                name: Some("web".into()),
                ..Default::default()
            }),
            related: Some(ObjectReference { name: Some("web-1".into()), ..Default::default() }),
            ..Default::default()
        };
        ev.metadata.uid = Some("u".into());
        let mut rev: Revision = serde_json::from_value(serde_json::json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Revision", "metadata": {"name": "web-1"},
            "spec": {"application": "web", "serviceAccountName": "sa",
                     "source": {"repository": "r", "url": "https://git.example.com/r.git", "commit": "abc", "path": "."}}
        }))
        .unwrap();
        let m = message(&ev, Some(&rev));
        assert_eq!((m.namespace.as_str(), m.application.as_str()), ("team", "web"));
        assert_eq!(m.severity, Severity::Warning);
        assert_eq!(m.message.chars().count(), MAX_MESSAGE);
        assert_eq!(m.revision.as_deref(), Some("web-1"));
        assert_eq!(m.commit.as_deref(), Some("abc"));
        assert_eq!(m.source_url.as_deref(), Some("https://git.example.com/r.git"));
        rev.spec.source.url.clear();
        assert_eq!(message(&ev, Some(&rev)).source_url, None);
        assert_eq!(message(&ev, None).commit, None);
    }
}
