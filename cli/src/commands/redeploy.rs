//! `ksync redeploy NAME`: a forced redeploy without a change in Git.
//!
//! Writes the Application's `sync.kuvryn.io/redeploy-requested-at` (the current time, RFC 3339,
//! UTC) and `sync.kuvryn.io/reconcile-requested-at` (the same value: a Revision whose attempts
//! all failed, or that waits to retry, starts an attempt now instead of staying paused). The
//! controller then puts the time in the pod templates of the Application's Deployments,
//! StatefulSets and DaemonSets (`kubectl.kubernetes.io/restartedAt`, as `kubectl rollout
//! restart` does): a new desired state, rolled out as a new attempt on the same Revision.
//! It prints what it asked for and what happens next; it does not wait.

use jiff::{Timestamp, Unit};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use kuvryn_sync::api::application::Application;
use kuvryn_sync::api::names;
use kuvryn_sync::api::revision::{PlanAction, Revision};
use kuvryn_sync::command::Result;
use kuvryn_sync::read;
use kuvryn_sync::read::connect::{Cluster, Request};

use super::{Context, output};

/// The field manager of the annotation write.
const FIELD_MANAGER: &str = "ksync";

/// Flags of `ksync redeploy`.
#[derive(Clone, Debug, clap::Args)]
pub struct RedeployArgs {
    /// The Application.
    pub name: String,
}

/// Request the redeploy and say what follows.
pub async fn run(cluster: &Cluster, args: &RedeployArgs, _ctx: Context) -> Result<()> {
    let name = args.name.as_str();
    let ns = cluster.namespace.as_str();
    // Fails with a clear "not found" before anything is written.
    let app = read::get::<Application>(cluster, name).await?.typed;
    // The real clock (not KSYNC_NOW, which only fixes ages): two requests are two values.
    let at = Timestamp::now().round(Unit::Millisecond).unwrap_or_else(|_| Timestamp::now()).to_string();
    let patch = json!({"metadata": {"annotations": {
        names::annotations::REDEPLOY_REQUESTED_AT: at,
        names::annotations::RECONCILE_REQUESTED_AT: at,
    }}});
    let api: Api<Application> = Api::namespaced(cluster.client.clone(), ns);
    let params = PatchParams { field_manager: Some(FIELD_MANAGER.to_string()), ..Default::default() };
    api.patch(name, &params, &Patch::Merge(&patch))
        .await
        .map_err(|e| cluster.error(e, Request::Get { kind: "Application", name, namespace: ns }))?;

    let revision = match app.status.as_ref().and_then(|s| s.desired_revision.clone()) {
        Some(r) => read::get_opt::<Revision>(cluster, &r).await?.map(|o| o.typed),
        None => None,
    };
    output::print(&message(&app, ns, &at, revision.as_ref()))
}

/// What `ksync redeploy` prints: the request, and what the controller does with it.
pub fn message(app: &Application, ns: &str, at: &str, revision: Option<&Revision>) -> String {
    let name = app.metadata.name.as_deref().unwrap_or_default();
    let mut out = format!(
        "Redeploy of Application \"{name}\" in namespace \"{ns}\" requested at {at} ({}).\n",
        names::annotations::REDEPLOY_REQUESTED_AT
    );
    let workloads: Vec<String> = revision
        .and_then(|r| r.status.as_ref())
        .and_then(|s| s.plan.as_ref())
        .map(|p| {
            p.entries
                .iter()
                .filter(|e| {
                    e.hook.is_none()
                        && e.action != PlanAction::Delete
                        && e.resource.group == "apps"
                        && kuvryn_sync::plan::redeploy::WORKLOAD_KINDS.contains(&e.resource.kind.as_str())
                })
                .map(|e| {
                    kuvryn_sync::api::display::object(
                        &e.resource.kind,
                        e.resource.namespace.as_deref(),
                        &e.resource.name,
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let what = if workloads.is_empty() {
        "its Deployments, StatefulSets and DaemonSets".to_string()
    } else {
        workloads.join(", ")
    };
    let attempt = match revision.and_then(|r| r.metadata.name.as_deref()) {
        Some(r) => format!("a new attempt on Revision {r}"),
        None => "a new attempt".to_string(),
    };
    if app.spec.suspend {
        out.push_str(&format!(
            "spec.suspend is true: nothing restarts until the Application is resumed; then {attempt} restarts {what}.\n"
        ));
    } else if !app.spec.sync.automatic {
        out.push_str(&format!(
            "spec.sync.automatic is false: the plan that restarts {what} waits for approval (see it with: ksync plan {name}).\n"
        ));
    } else {
        out.push_str(&format!(
            "The controller restarts {what} with {attempt} (follow it with: ksync history {name}).\n"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn app(automatic: bool, suspend: bool) -> Application {
        serde_json::from_value(json!({
            "apiVersion": names::API_VERSION, "kind": "Application",
            "metadata": {"name": "web", "namespace": "team-a"},
            "spec": {"source": {"repository": "platform", "path": "web"}, "serviceAccountName": "deployer",
                     "destination": {"namespace": "team-a"}, "sync": {"automatic": automatic}, "suspend": suspend},
        }))
        .unwrap()
    }

    fn revision() -> Revision {
        let entry = |kind: &str, name: &str, group: &str, hook: Option<&str>| {
            json!({"group": group, "kind": kind, "namespace": "team-a", "name": name,
                   "version": "v1", "action": "Unchanged", "hook": hook})
        };
        serde_json::from_value(json!({
            "apiVersion": names::API_VERSION, "kind": "Revision",
            "metadata": {"name": "web-0a0b0c0d0e", "namespace": "team-a"},
            "spec": {"application": "web", "serviceAccountName": "deployer",
                     "source": {"repository": "platform", "url": "https://git.example.invalid/p.git",
                                "ref": "branch/main", "commit": "2c26b46b68ffc68ff99b453c1d30413413422d70", "path": "web"},
                     "render": {"type": "Yaml"}},
            "status": {"phase": "Healthy", "plan": {"digest": "sha256:00", "summary": {"create": 0, "update": 0, "unchanged": 4, "delete": 0},
                "entries": [entry("Deployment", "web", "apps", None), entry("StatefulSet", "db", "apps", None),
                            entry("ConfigMap", "settings", "", None), entry("Job", "migrate", "batch", Some("PreSync"))]}},
        }))
        .unwrap()
    }

    #[test]
    fn it_says_what_restarts_and_when() {
        let at = "2026-12-02T15:04:05.123Z";
        let rev = revision();
        assert_eq!(
            message(&app(true, false), "team-a", at, Some(&rev)),
            "Redeploy of Application \"web\" in namespace \"team-a\" requested at 2026-12-02T15:04:05.123Z (sync.kuvryn.io/redeploy-requested-at).\n\
             The controller restarts Deployment team-a/web, StatefulSet team-a/db with a new attempt on Revision web-0a0b0c0d0e (follow it with: ksync history web).\n"
        );
        let manual = message(&app(false, false), "team-a", at, Some(&rev));
        assert!(manual.contains("spec.sync.automatic is false: the plan that restarts Deployment team-a/web, StatefulSet team-a/db waits for approval"), "{manual}");
        let suspended = message(&app(true, true), "team-a", at, None);
        assert!(suspended.contains("spec.suspend is true: nothing restarts until the Application is resumed; then a new attempt restarts its Deployments, StatefulSets and DaemonSets."), "{suspended}");
    }
}
