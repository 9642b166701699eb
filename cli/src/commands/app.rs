//! `ksync app NAME` (also `ksync app get NAME`), and `ksync app list`.

use kuvryn_sync::api::application::Application;
use kuvryn_sync::api::revision::{PlanEntry, Revision};
use kuvryn_sync::command::Result;
use kuvryn_sync::read;
use kuvryn_sync::read::connect::Cluster;
use kuvryn_sync::read::healthchecks::Checks;
use kuvryn_sync::read::live::{managed, namespaces, read_live};
use kuvryn_sync::view::phase_of;

use super::output::{self, Format};
use super::{Context, apps};
use crate::view::app::{Detail, ResourceHealth, render, resource_health};

/// `ksync app`: a name, or a subcommand. An Application called `list` or `get` is shown with
/// `ksync app get list`.
#[derive(Clone, Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, arg_required_else_help = true)]
pub struct AppArgs {
    /// `list` or `get`.
    #[command(subcommand)]
    pub command: Option<AppCommand>,
    /// The Application to show (same as `ksync app get NAME`).
    pub name: Option<String>,
    /// Output format: json or yaml (the Application object).
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<Format>,
}

/// `ksync app` subcommands.
#[derive(Clone, Debug, clap::Subcommand)]
pub enum AppCommand {
    /// List Applications (same as `ksync apps`).
    List(apps::ListArgs),
    /// Show one Application: source, sync, health, Revisions, diagnosis, conditions, resources.
    Get(GetArgs),
}

/// Flags of `ksync app get`.
#[derive(Clone, Debug, clap::Args)]
pub struct GetArgs {
    /// The Application.
    pub name: String,
    /// Output format: json or yaml (the Application object).
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<Format>,
}

/// What `ksync app ...` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// List.
    List(apps::ListArgs),
    /// Show one, in an optional machine-readable format.
    Get(String, Option<Format>),
}

impl AppArgs {
    /// What was asked for (clap guarantees a name or a subcommand).
    pub fn target(self) -> Target {
        match (self.command, self.name) {
            (Some(AppCommand::List(l)), _) => Target::List(l),
            (Some(AppCommand::Get(g)), _) => Target::Get(g.name, g.output),
            (None, name) => Target::Get(name.unwrap_or_default(), self.output),
        }
    }
}

/// Run `ksync app ...`.
pub async fn run(cluster: &Cluster, args: AppArgs, ctx: Context) -> Result<()> {
    match args.target() {
        Target::List(l) => apps::run(cluster, &l, ctx).await,
        Target::Get(name, format) => get(cluster, &name, format, ctx).await,
    }
}

async fn revision_opt(cluster: &Cluster, name: &str) -> Result<Option<Revision>> {
    Ok(read::get_opt::<Revision>(cluster, name).await?.map(|r| r.typed))
}

async fn get(cluster: &Cluster, name: &str, format: Option<Format>, ctx: Context) -> Result<()> {
    let app = read::get::<Application>(cluster, name).await?;
    if let Some(format) = format {
        return output::print(&output::render(&app.raw, format)?);
    }
    let app = app.typed;
    let status = app.status.clone().unwrap_or_default();
    let desired = match &status.desired_revision {
        Some(n) => revision_opt(cluster, n).await?,
        None => None,
    };
    let last_healthy = match &status.last_healthy_revision {
        Some(n) if Some(n) == status.desired_revision.as_ref() => desired.clone(),
        Some(n) => revision_opt(cluster, n).await?,
        None => None,
    };
    // The managed resources are those of the plan of the desired Revision, else of the last
    // healthy one.
    let with_plan = [desired.as_ref(), last_healthy.as_ref()]
        .into_iter()
        .flatten()
        .find(|r| r.status.as_ref().is_some_and(|s| s.plan.is_some()));
    let resources = match with_plan {
        Some(rev) => {
            let entries =
                rev.status.as_ref().and_then(|s| s.plan.as_ref()).map(|p| p.entries.clone()).unwrap_or_default();
            let entries: Vec<PlanEntry> = managed(&entries).cloned().collect();
            let phase = phase_of(rev);
            let lives = read_live(cluster, &entries).await;
            let checks = Checks::read(cluster, namespaces(&entries, &cluster.namespace)).await;
            let health: Vec<ResourceHealth> = entries
                .iter()
                .zip(&lives)
                .map(|(e, live)| {
                    let ns = e.resource.namespace.as_deref().filter(|n| !n.is_empty()).unwrap_or(&cluster.namespace);
                    let rules = checks.rules(ns, &e.resource.group, &e.resource.kind);
                    resource_health(e, live, phase, rules.as_ref())
                })
                .collect();
            Some((kube::ResourceExt::name_any(rev), health))
        }
        None => None,
    };
    let detail = Detail {
        app: &app,
        desired: desired.as_ref(),
        last_healthy: last_healthy.as_ref(),
        resources: resources.as_ref().map(|(n, h)| (n.as_str(), h.as_slice())),
    };
    output::print(&render(detail, ctx.now(), ctx.palette))
}
