//! `ksync sync NAME`: approve the plan the controller computed last, after showing it.
//!
//! The approval is three annotations on the Application: `approved-plan` (the digest shown),
//! `approved-by` (who this client is, from a SelfSubjectReview) and `approved-at` (now). With
//! the admission webhook, the last two are recorded from the authenticated request instead.
//! The controller applies the plan only while that digest is still its current plan.

use std::io::{BufRead, IsTerminal, Write};

use jiff::Timestamp;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use kuvryn_sync::api::application::Application;
use kuvryn_sync::api::names;
use kuvryn_sync::api::revision::Revision;
use kuvryn_sync::command::{Error, Result};
use kuvryn_sync::read;
use kuvryn_sync::read::connect::{Cluster, Request};

use super::{Context, output};
use crate::view::sync::{Offer, offer};

/// Flags of `ksync sync`.
#[derive(Clone, Debug, clap::Args)]
pub struct SyncArgs {
    /// The Application.
    pub name: String,
    /// Approve without asking (required when stdin is not a terminal).
    #[arg(short = 'y', long)]
    pub yes: bool,
}

/// Show the plan, ask, and approve its digest.
pub async fn run(cluster: &Cluster, args: &SyncArgs, ctx: Context) -> Result<()> {
    let app = read::get::<Application>(cluster, &args.name).await?.typed;
    let Some(rev_name) = app.status.as_ref().and_then(|s| s.desired_revision.clone()) else {
        return Err(Error::Unavailable(format!(
            "Application \"{}\" in namespace \"{}\" has no desired Revision yet",
            args.name, cluster.namespace
        )));
    };
    let rev = read::get::<Revision>(cluster, &rev_name).await?.typed;
    let (digest, shown) = match offer(&app, &rev, ctx.palette).map_err(Error::Unavailable)? {
        Offer::Nothing(why) => return output::print(&format!("{why}\n")),
        Offer::Approve { digest, shown } => (digest, shown),
    };
    output::print(&shown)?;
    if !args.yes && !confirm(&format!("Approve plan {digest} of Revision {rev_name}? [y/N] "))? {
        return output::print("Not approved.\n");
    }
    let user = whoami(cluster).await;
    let mut annotations = serde_json::Map::new();
    annotations.insert(names::annotations::APPROVED_PLAN.into(), json!(digest));
    annotations.insert(
        names::annotations::APPROVED_AT.into(),
        json!(kuvryn_sync::decisions::approval::client_time(Timestamp::now())),
    );
    annotations.insert(names::annotations::APPROVED_BY.into(), json!(user));
    let api: Api<Application> = Api::namespaced(cluster.client.clone(), &cluster.namespace);
    let patch = json!({"metadata": {"annotations": annotations}});
    api.patch(&args.name, &PatchParams::default(), &Patch::Merge(&patch)).await.map_err(|e| {
        cluster.error(e, Request::Get { kind: "Application", name: &args.name, namespace: &cluster.namespace })
    })?;
    output::print(&format!(
        "Approved plan {digest} of Revision {rev_name}. It is applied while it is still the current plan; follow it with: ksync app {}\n",
        args.name
    ))
}

/// Ask on the terminal; without one, refuse (an unattended approval needs `--yes`).
fn confirm(question: &str) -> Result<bool> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(Error::Unavailable("stdin is not a terminal: pass --yes to approve without asking".into()));
    }
    let mut err = std::io::stderr();
    let _ = write!(err, "{question}");
    let _ = err.flush();
    let mut line = String::new();
    stdin.lock().read_line(&mut line).map_err(|e| Error::Io { path: "stdin".into(), source: e })?;
    Ok(matches!(line.trim(), "y" | "Y" | "yes" | "Yes"))
}

/// Who the cluster says this client is; `unknown` when it cannot say (an API server without
/// SelfSubjectReview, or no permission to create one).
pub(super) async fn whoami(cluster: &Cluster) -> String {
    let api: Api<SelfSubjectReview> = Api::all(cluster.client.clone());
    let review = SelfSubjectReview::default();
    match api.create(&PostParams::default(), &review).await {
        Ok(r) => r
            .status
            .and_then(|s| s.user_info)
            .and_then(|u| u.username)
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| kuvryn_sync::decisions::approval::UNKNOWN_USER.into()),
        Err(e) => {
            tracing::debug!(error = %e, "SelfSubjectReview");
            kuvryn_sync::decisions::approval::UNKNOWN_USER.into()
        }
    }
}
