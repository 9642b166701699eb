//! `ksync rollback NAME [--revision REV | --to COMMIT]`: ask the controller to roll back.
//!
//! Writes the request annotations on the Application: `rollback-to` (the commit),
//! `rollback-kind: manual`, `rollback-target-revision` (the Revision chosen; not with `--to`),
//! and what the admission webhook records from the authenticated request (who, when, and the
//! target hash); with the webhook, its record replaces this client's. An existing
//! `rollback-from` is kept, so a second rollback while one is pending keeps the first one's
//! source.

use jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use kuvryn_sync::api::application::Application;
use kuvryn_sync::api::names::annotations as a;
use kuvryn_sync::api::revision::Revision;
use kuvryn_sync::command::{Error, Result};
use kuvryn_sync::decisions::rollback::is_commit;
use kuvryn_sync::read;
use kuvryn_sync::read::connect::{Cluster, Request};

use super::{Context, output};

/// Flags of `ksync rollback`.
#[derive(Clone, Debug, clap::Args)]
pub struct RollbackArgs {
    /// The Application.
    pub name: String,
    /// Roll back to this Revision of the Application (default: its last healthy Revision before
    /// the desired one).
    #[arg(long, value_name = "REVISION", conflicts_with = "to")]
    pub revision: Option<String>,
    /// Roll back to this commit (a manual-sync Application then waits for `ksync sync`).
    #[arg(long, value_name = "COMMIT")]
    pub to: Option<String>,
}

/// Write the request.
pub async fn run(cluster: &Cluster, args: &RollbackArgs, _ctx: Context) -> Result<()> {
    let app = read::get::<Application>(cluster, &args.name).await?.typed;
    let status = app.status.clone().unwrap_or_default();
    let (to, chosen) = match (&args.revision, &args.to) {
        (_, Some(commit)) => {
            if !is_commit(commit) {
                return Err(Error::Unavailable(format!("--to {commit:?}: not a commit (7 to 40 hex digits)")));
            }
            (commit.to_ascii_lowercase(), None)
        }
        (Some(r), None) => (commit_of(cluster, &args.name, r).await?.0, Some(r.clone())),
        (None, None) => {
            let previous = match status.desired_revision.as_deref() {
                Some(d) if status.last_healthy_revision.as_deref() != Some(d) => status.last_healthy_revision.clone(),
                Some(d) => {
                    read::get::<Revision>(cluster, d).await?.typed.status.and_then(|s| s.previous_healthy_revision)
                }
                None => None,
            };
            let Some(previous) = previous else {
                return Err(Error::Unavailable(format!(
                    "Application \"{}\" has no previous healthy Revision to roll back to: name one with --revision or --to",
                    args.name
                )));
            };
            (commit_of(cluster, &args.name, &previous).await?.0, Some(previous))
        }
    };
    let mut annotations = serde_json::Map::new();
    annotations.insert(a::ROLLBACK_TO.into(), json!(to));
    annotations.insert(a::ROLLBACK_KIND.into(), json!(a::ROLLBACK_KIND_MANUAL));
    annotations.insert(a::ROLLBACK_TARGET_REVISION.into(), chosen.as_ref().map_or(Value::Null, |c| json!(c)));
    annotations.insert(a::ROLLBACK_REQUESTED_BY.into(), json!(super::sync::whoami(cluster).await));
    annotations.insert(
        a::ROLLBACK_REQUESTED_AT.into(),
        json!(kuvryn_sync::decisions::approval::client_time(Timestamp::now())),
    );
    let hash = match &chosen {
        Some(r) => commit_of(cluster, &args.name, r).await?.1.map(|deployed| {
            kuvryn_sync::plan::target_hash::rollback_target_hash(&deployed, &app.spec.sync, &app.spec.strategy)
        }),
        None => None,
    };
    annotations.insert(a::ROLLBACK_TARGET_HASH.into(), hash.as_ref().map_or(Value::Null, |h| json!(h)));
    let api: Api<Application> = Api::namespaced(cluster.client.clone(), &cluster.namespace);
    let patch = json!({"metadata": {"annotations": annotations}});
    api.patch(&args.name, &PatchParams::default(), &Patch::Merge(&patch)).await.map_err(|e| {
        cluster.error(e, Request::Get { kind: "Application", name: &args.name, namespace: &cluster.namespace })
    })?;
    let what = match &chosen {
        Some(r) => format!("Revision {r} (commit {})", &to[..to.len().min(12)]),
        None => format!("commit {to}"),
    };
    let mut out = format!("Requested a rollback of {} to {what}.", args.name);
    if !app.spec.sync.automatic {
        if chosen.is_some() && hash.is_some() {
            out.push_str(" The request approves it (spec.sync.automatic is false).");
        } else {
            out.push_str(" It waits for ksync sync (spec.sync.automatic is false, and no deployed state of a chosen Revision binds the request).");
        }
    }
    out.push_str(&format!(" Follow it with: ksync app {}\n", args.name));
    output::print(&out)
}

/// The commit of Revision `name` of Application `app`, and its deployed desired state.
async fn commit_of(cluster: &Cluster, app: &str, name: &str) -> Result<(String, Option<String>)> {
    let rev = read::get::<Revision>(cluster, name).await?.typed;
    if rev.spec.application != app {
        return Err(Error::Unavailable(format!(
            "Revision \"{}\" belongs to Application \"{}\", not \"{app}\"",
            rev.name_any(),
            rev.spec.application
        )));
    }
    Ok((rev.spec.source.commit.clone(), rev.status.and_then(|s| s.deployed_desired_state_hash)))
}
