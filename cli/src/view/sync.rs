//! `ksync sync NAME`: what an approval would approve, pure.

use kuvryn_sync::api::application::{Application, SyncState};
use kuvryn_sync::api::display;
use kuvryn_sync::api::revision::{Revision, RevisionPhase};
use kuvryn_sync::view::{Palette, phase_of};

/// What `ksync sync` offers to approve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Offer {
    /// Nothing waits for an approval: why.
    Nothing(String),
    /// Approve `digest`, the plan the controller computed last; `shown` is what it does.
    Approve {
        /// The plan digest to write in `sync.kuvryn.io/approved-plan`.
        digest: String,
        /// The plan (as `ksync plan` shows it), or the drifted resources it repairs.
        shown: String,
    },
}

/// The offer for `app`, whose desired Revision is `rev`. `Err` when the controller has not
/// planned the desired Revision yet.
pub fn offer(app: &Application, rev: &Revision, palette: Palette) -> Result<Offer, String> {
    let name = app.metadata.name.clone().unwrap_or_default();
    let rev_name = rev.metadata.name.clone().unwrap_or_default();
    let status = app.status.clone().unwrap_or_default();
    let sync = status.sync.filter(|s| s.revision.as_deref() == Some(rev_name.as_str()));
    let Some((sync, digest)) = sync.and_then(|s| s.plan_digest.clone().map(|d| (s, d))) else {
        return Err(format!(
            "Application \"{name}\" has no plan for Revision \"{rev_name}\" yet: wait for the controller to plan it (ksync app {name})"
        ));
    };
    let stored = rev.status.as_ref().and_then(|s| s.plan.as_ref()).is_some_and(|p| p.digest == digest);
    let plan = |digest: &str| {
        if stored {
            kuvryn_sync::view::plan::render(rev, palette)
        } else {
            format!(
                "Revision {rev_name}: the plan against the live state now is {digest} (its stored plan is an earlier one: ksync plan shows it)\n"
            )
        }
    };
    let waiting = phase_of(rev) == RevisionPhase::AwaitingApproval;
    Ok(match sync.status {
        _ if waiting => Offer::Approve { shown: plan(&digest), digest },
        SyncState::OutOfSync => Offer::Approve { shown: plan(&digest), digest },
        SyncState::Drifted => {
            let mut shown =
                format!("Revision {rev_name} is deployed; the live state drifted from it. Approving repairs:\n");
            for r in &sync.drifted {
                shown.push_str(&format!("  ~ {}\n", display::resource(r)));
            }
            shown.push_str(&format!("Plan digest: {digest}\n"));
            Offer::Approve { digest, shown }
        }
        SyncState::Synced => {
            Offer::Nothing(format!("Application \"{name}\" is Synced to Revision {rev_name}: nothing to approve"))
        }
        SyncState::Unknown => {
            return Err(format!(
                "Application \"{name}\": the sync state of Revision \"{rev_name}\" is not known yet (ksync app {name})"
            ));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn app(sync: serde_json::Value) -> Application {
        serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "web", "namespace": "team-a"},
            "spec": {"source": {"repository": "r", "path": "p"}, "serviceAccountName": "sa", "destination": {"namespace": "team-a"}, "sync": {"automatic": false}},
            "status": {"desiredRevision": "web-1", "sync": sync}
        }))
        .unwrap()
    }

    fn rev(status: serde_json::Value) -> Revision {
        serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Revision",
            "metadata": {"name": "web-1", "namespace": "team-a"},
            "spec": {"application": "web", "source": {"repository": "r", "url": "https://x.invalid/r.git", "commit": "abc", "path": "p"}, "serviceAccountName": "sa"},
            "status": status
        }))
        .unwrap()
    }

    fn plan(digest: &str) -> serde_json::Value {
        json!({"digest": digest, "summary": {"create": 1, "update": 0, "unchanged": 0, "delete": 0},
               "entries": [{"group": "", "version": "v1", "kind": "ConfigMap", "namespace": "team-a", "name": "cfg", "action": "Create"}]})
    }

    const OFF: Palette = Palette { enabled: false };

    #[test]
    fn a_waiting_plan_is_offered_as_ksync_plan_shows_it() {
        let a = app(json!({"status": "OutOfSync", "revision": "web-1", "planDigest": "sha256:1"}));
        let r = rev(json!({"phase": "AwaitingApproval", "plan": plan("sha256:1")}));
        match offer(&a, &r, OFF).unwrap() {
            Offer::Approve { digest, shown } => {
                assert_eq!(digest, "sha256:1");
                assert_eq!(shown, kuvryn_sync::view::plan::render(&r, OFF));
                assert!(shown.contains("ConfigMap team-a/cfg"), "{shown}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn drift_is_offered_as_the_resources_it_repairs() {
        let a = app(json!({"status": "Drifted", "revision": "web-1", "planDigest": "sha256:2",
            "drifted": [{"group": "", "kind": "ConfigMap", "namespace": "team-a", "name": "cfg"}]}));
        let r = rev(json!({"phase": "Healthy", "plan": plan("sha256:1")}));
        let Offer::Approve { digest, shown } = offer(&a, &r, OFF).unwrap() else { panic!() };
        assert_eq!(digest, "sha256:2");
        assert!(shown.contains("~ ConfigMap team-a/cfg") && shown.contains("sha256:2"), "{shown}");
    }

    #[test]
    fn synced_offers_nothing_and_an_unplanned_revision_is_an_error() {
        let a = app(json!({"status": "Synced", "revision": "web-1", "planDigest": "sha256:1"}));
        let r = rev(json!({"phase": "Healthy", "plan": plan("sha256:1")}));
        assert!(matches!(offer(&a, &r, OFF).unwrap(), Offer::Nothing(m) if m.contains("nothing to approve")));
        let other = app(json!({"status": "OutOfSync", "revision": "web-0", "planDigest": "sha256:1"}));
        assert!(offer(&other, &r, OFF).unwrap_err().contains("no plan for Revision \"web-1\""));
        let none = app(json!({"status": "OutOfSync", "revision": "web-1"}));
        assert!(offer(&none, &r, OFF).is_err());
    }
}
