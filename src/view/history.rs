//! `ksync history NAME`: an Application's Revisions, newest first.

use jiff::Timestamp;
use kube::ResourceExt;

use super::{Cell, NONE, Palette, Table, Tone, age, attempts_of, phase_name, phase_of, phase_tone, short_commit};
use crate::api::application::Application;
use crate::api::conditions;
use crate::api::names;
use crate::api::revision::Revision;

/// When the controller created the Revision: its `sync.kuvryn.io/created-at` annotation (to the
/// nanosecond), else its `creationTimestamp`.
pub fn created_at(r: &Revision) -> Option<Timestamp> {
    r.annotations()
        .get(names::annotations::CREATED_AT)
        .and_then(|v| v.parse::<Timestamp>().ok())
        .or_else(|| r.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// History order: newest first by [`created_at`] (ties, and Revisions without a time, by name).
pub fn newest_first(a: &Revision, b: &Revision) -> std::cmp::Ordering {
    created_at(b).cmp(&created_at(a)).then_with(|| a.name_any().cmp(&b.name_any()))
}

/// What the Application says about a Revision: desired, last healthy, held by a rollback.
fn note(r: &Revision, app: Option<&Application>) -> String {
    let name = r.name_any();
    let status = app.and_then(|a| a.status.as_ref());
    let mut notes = Vec::new();
    if status.and_then(|s| s.desired_revision.as_deref()) == Some(name.as_str()) {
        notes.push("desired".to_string());
    }
    if status.and_then(|s| s.last_healthy_revision.as_deref()) == Some(name.as_str()) {
        notes.push("last healthy".to_string());
    }
    if let Some(c) = r
        .status
        .as_ref()
        .and_then(|s| conditions::get(&s.conditions, names::conditions::ROLLED_BACK))
        .filter(|c| c.status == "True")
    {
        notes.push(format!("held ({})", c.reason));
    }
    notes.join(", ")
}

/// The table: REVISION, COMMIT, PHASE, ATTEMPTS, AGE (since [`created_at`]), APPROVED BY, NOTE
/// (desired, last healthy, held), FAILURE (reason and message), newest first. Empty when there
/// are no Revisions.
pub fn table(revs: &[Revision], app: Option<&Application>, now: Timestamp, palette: Palette) -> String {
    if revs.is_empty() {
        return String::new();
    }
    let mut sorted = revs.to_vec();
    sorted.sort_by(newest_first);
    let mut t = Table::new(["REVISION", "COMMIT", "PHASE", "ATTEMPTS", "AGE", "APPROVED BY", "NOTE", "FAILURE"]);
    for r in &sorted {
        let status = r.status.clone().unwrap_or_default();
        let phase = phase_of(r);
        let failure = status.failure.as_ref().map(|f| format!("{}: {}", f.reason, f.message)).unwrap_or_default();
        t.row(vec![
            Cell::plain(r.name_any()),
            Cell::plain(short_commit(&r.spec.source.commit)),
            Cell::new(phase_name(phase), phase_tone(phase)),
            Cell::plain(attempts_of(r).to_string()),
            Cell::plain(created_at(r).map_or_else(|| NONE.to_string(), |t| age(t, now))),
            Cell::plain(status.approval.as_ref().map(|a| a.user.clone()).unwrap_or_default()),
            Cell::plain(note(r, app)),
            if failure.is_empty() { Cell::plain("") } else { Cell::new(failure, Tone::Bad) },
        ]);
    }
    t.render(palette, "")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rev(name: &str, created_at: Option<&str>, created: &str) -> Revision {
        let mut annotations = serde_json::Map::new();
        if let Some(c) = created_at {
            annotations.insert(names::annotations::CREATED_AT.into(), json!(c));
        }
        serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Revision",
            "metadata": {"name": name, "namespace": "a", "annotations": annotations, "creationTimestamp": created},
            "spec": {"application": "web", "serviceAccountName": "deployer",
                     "source": {"repository": "r", "url": "https://x.invalid/r.git", "commit": "0123456789abcdef", "path": "."}},
        }))
        .unwrap()
    }

    /// A manually approved Revision and one held by a rollback (`status.approval`, a `RolledBack`
    /// condition): APPROVED BY and "held (reason)".
    #[test]
    fn approved_by_and_held() {
        let mut approved = rev("web-2", None, "2026-03-01T11:00:00Z");
        approved.status = Some(
            serde_json::from_value(json!({"phase": "Healthy", "approval":
                {"user": "alice@example.com", "time": "2026-03-01T11:00:00Z", "planDigest": "sha256:00", "source": "ManualSync"}}))
            .unwrap(),
        );
        let mut held = rev("web-1", None, "2026-03-01T10:00:00Z");
        held.status = Some(
            serde_json::from_value(json!({"phase": "Failed", "conditions": [{"type": "RolledBack", "status": "True",
                "reason": "ManualRollback", "message": "rolled back", "lastTransitionTime": "2026-03-01T10:30:00Z"}]}))
            .unwrap(),
        );
        let out = table(&[held, approved], None, "2026-03-01T12:00:00Z".parse().unwrap(), Palette { enabled: false });
        let line = |name: &str| out.lines().find(|l| l.starts_with(name)).unwrap().to_string();
        assert!(line("web-2").contains("alice@example.com"), "{out}");
        assert!(line("web-1").contains("held (ManualRollback)"), "{out}");
    }

    #[test]
    fn newest_first_by_the_nanosecond_annotation() {
        // Two Revisions created in the same second: only the annotation orders them.
        let mut revs = [
            rev("b-first", Some("2026-03-01T12:00:00.000000100Z"), "2026-03-01T12:00:00Z"),
            rev("a-second", Some("2026-03-01T12:00:00.000000200Z"), "2026-03-01T12:00:00Z"),
            rev("c-old", None, "2026-02-01T00:00:00Z"),
        ];
        revs.sort_by(newest_first);
        assert_eq!(revs.iter().map(|r| r.name_any()).collect::<Vec<_>>(), vec!["a-second", "b-first", "c-old"]);
    }
}
