//! `ksync apps`: one row per Application.

use jiff::Timestamp;
use kube::ResourceExt;

use super::{
    Cell, NONE, Palette, Table, Tone, age_of, health_name, health_tone, ready_cell, ready_message, short_commit,
};
use crate::api::application::{Application, SyncState};
use crate::api::common::HealthStatus;

/// Which columns to print.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Columns {
    /// Add NAMESPACE first (`-A`).
    pub namespace: bool,
    /// `-o wide`: add READY, REPOSITORY, PATH and LAST HEALTHY before MESSAGE.
    pub wide: bool,
}

/// The name of a sync state.
pub fn sync_name(s: SyncState) -> &'static str {
    match s {
        SyncState::Synced => "Synced",
        SyncState::OutOfSync => "OutOfSync",
        SyncState::Drifted => "Drifted",
        SyncState::Unknown => "Unknown",
    }
}

/// The colour of a sync state.
pub fn sync_tone(s: SyncState) -> Tone {
    match s {
        SyncState::Synced => Tone::Good,
        SyncState::OutOfSync | SyncState::Drifted => Tone::Warn,
        SyncState::Unknown => Tone::Dim,
    }
}

/// The Application's sync state (Unknown before the first status).
pub fn sync_of(app: &Application) -> SyncState {
    app.status.as_ref().and_then(|s| s.sync.as_ref()).map_or(SyncState::Unknown, |s| s.status)
}

/// The Application's health (Unknown before the first status).
pub fn health_of(app: &Application) -> HealthStatus {
    app.status.as_ref().and_then(|s| s.health.as_ref()).map_or(HealthStatus::Unknown, |h| h.status)
}

/// The table: NAMESPACE (with `-A`), NAME, SYNC, HEALTH, REVISION, COMMIT, AGE, [wide: READY,
/// REPOSITORY, PATH, LAST HEALTHY,] MESSAGE, sorted by namespace and name. REVISION is the
/// Revision sync was compared against (else the desired one); MESSAGE is the `Ready` condition's
/// message, else the health message. Empty when there are no Applications.
pub fn table(apps: &[Application], columns: Columns, now: Timestamp, palette: Palette) -> String {
    if apps.is_empty() {
        return String::new();
    }
    let mut header = Vec::new();
    if columns.namespace {
        header.push("NAMESPACE");
    }
    header.extend(["NAME", "SYNC", "HEALTH", "REVISION", "COMMIT", "AGE"]);
    if columns.wide {
        header.extend(["READY", "REPOSITORY", "PATH", "LAST HEALTHY"]);
    }
    header.push("MESSAGE");
    let mut t = Table::new(header);
    let mut sorted: Vec<&Application> = apps.iter().collect();
    sorted.sort_by_key(|a| (a.namespace(), a.name_any()));
    for app in sorted {
        let status = app.status.clone().unwrap_or_default();
        let sync = sync_of(app);
        let health = health_of(app);
        let revision = status.sync.as_ref().and_then(|s| s.revision.clone()).or(status.desired_revision.clone());
        let commit = status.sync.as_ref().and_then(|s| s.commit.clone()).unwrap_or_default();
        let mut message = ready_message(&status.conditions);
        if message.is_empty() {
            message = status.health.as_ref().and_then(|h| h.message.clone()).unwrap_or_default();
        }
        let mut row = Vec::new();
        if columns.namespace {
            row.push(Cell::plain(app.namespace().unwrap_or_default()));
        }
        row.extend([
            Cell::plain(app.name_any()),
            Cell::new(sync_name(sync), sync_tone(sync)),
            Cell::new(health_name(health), health_tone(health)),
            Cell::plain(revision.unwrap_or_default()),
            Cell::plain(short_commit(&commit)),
            Cell::plain(age_of(app.metadata.creation_timestamp.as_ref(), now)),
        ]);
        if columns.wide {
            row.extend([
                ready_cell(&status.conditions),
                Cell::plain(app.spec.source.repository.clone()),
                Cell::plain(app.spec.source.path.clone()),
                Cell::plain(status.last_healthy_revision.clone().unwrap_or_default()),
            ]);
        }
        row.push(if message.is_empty() { Cell::new(NONE, Tone::Plain) } else { Cell::plain(message) });
        t.row(row);
    }
    t.render(palette, "")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn app(ns: &str, name: &str, status: serde_json::Value) -> Application {
        serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": "2026-03-01T11:00:00Z"},
            "spec": {"source": {"repository": "platform", "path": name}, "serviceAccountName": "deployer",
                     "destination": {"namespace": ns}},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn rows_are_sorted_and_missing_status_reads_unknown() {
        let now: Timestamp = "2026-03-01T12:00:00Z".parse().unwrap();
        let apps = vec![
            app("b", "zeta", json!({})),
            app(
                "a",
                "web",
                json!({
                    "sync": {"status": "Synced", "revision": "web-1", "commit": "0123456789abcdef0123"},
                    "health": {"status": "Healthy"},
                    "conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded", "message": "deployed",
                                    "lastTransitionTime": "2026-03-01T11:30:00Z"}],
                }),
            ),
        ];
        let out = table(&apps, Columns { namespace: true, wide: false }, now, Palette::PLAIN);
        assert_eq!(
            out,
            "NAMESPACE   NAME   SYNC      HEALTH    REVISION   COMMIT         AGE   MESSAGE\n\
             a           web    Synced    Healthy   web-1      0123456789ab   1h    deployed\n\
             b           zeta   Unknown   Unknown   -          -              1h    -\n"
        );
        assert_eq!(table(&[], Columns::default(), now, Palette::PLAIN), "");
    }
}
