//! `ksync plan NAME`: the stored plan of the Application's desired Revision.

use kube::ResourceExt;

use kuvryn_sync::api::application::Application;
use kuvryn_sync::api::revision::Revision;
use kuvryn_sync::command::{Error, Result};
use kuvryn_sync::read;
use kuvryn_sync::read::connect::Cluster;
use kuvryn_sync::view::plan::render;

use super::Context;
use super::output::{self, Format};

/// Flags of `ksync plan`.
#[derive(Clone, Debug, clap::Args)]
pub struct PlanArgs {
    /// The Application.
    pub name: String,
    /// Show the plan of this Revision of the Application instead of the desired one.
    #[arg(long, value_name = "REVISION")]
    pub revision: Option<String>,
    /// Output format: json or yaml (the Revision object; its plan is `.status.plan`).
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<Format>,
}

/// Read the Application and the Revision (`status.desiredRevision`, or `--revision`), print its
/// plan.
pub async fn run(cluster: &Cluster, args: &PlanArgs, ctx: Context) -> Result<()> {
    let app = read::get::<Application>(cluster, &args.name).await?.typed;
    let ns = cluster.namespace.as_str();
    let rev_name = match (&args.revision, app.status.as_ref().and_then(|s| s.desired_revision.clone())) {
        (Some(r), _) => r.clone(),
        (None, Some(r)) => r,
        (None, None) => {
            return Err(Error::Unavailable(format!(
                "Application \"{}\" in namespace \"{ns}\" has no desired Revision yet",
                args.name
            )));
        }
    };
    let object = read::get::<Revision>(cluster, &rev_name).await?;
    let rev = &object.typed;
    if rev.spec.application != args.name {
        return Err(Error::Unavailable(format!(
            "Revision \"{}\" belongs to Application \"{}\", not \"{}\"",
            rev.name_any(),
            rev.spec.application,
            args.name
        )));
    }
    match args.output {
        Some(format) => output::print(&output::render(&object.raw, format)?),
        None => output::print(&render(rev, ctx.palette)),
    }
}
