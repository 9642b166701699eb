//! `ksync app NAME` (also `ksync app get NAME`), and `ksync app list`.

use std::collections::BTreeMap;

use futures_util::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiResource, Scope};

use super::connect::{Cluster, Request};
use super::output::{self, Format};
use super::{Context, apps, read};
use crate::api::application::Application;
use crate::api::revision::{PlanEntry, Revision};
use crate::cli::Result;
use crate::cli::view::app::{Detail, Live, ResourceHealth, managed, render, resource_health};
use crate::cli::view::{kind_of, phase_of};

/// Managed resources read at once.
const CONCURRENCY: usize = 8;

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
            let checks = super::healthchecks::Checks::read(cluster, namespaces(&entries, &cluster.namespace)).await;
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

/// The namespaces whose HealthChecks apply to `entries`: theirs, and `own` (the Application's,
/// for cluster-scoped objects).
pub(super) fn namespaces(entries: &[PlanEntry], own: &str) -> Vec<String> {
    let mut out: Vec<String> = entries.iter().filter_map(|e| e.resource.namespace.clone()).collect();
    out.push(own.to_string());
    out.sort();
    out.dedup();
    out
}

/// A kind resolved by discovery: its resource and whether it is namespaced, or why not.
type Resolved = Result<(ApiResource, bool), String>;

/// Read each resource of `entries` (in order), as the user: found, missing, or unreadable with
/// the reason. Kinds are resolved by discovery, once each.
pub(super) async fn read_live(cluster: &Cluster, entries: &[PlanEntry]) -> Vec<Live> {
    let mut kinds: BTreeMap<(String, String, String), Resolved> = BTreeMap::new();
    for e in entries {
        let key = (e.resource.group.clone(), e.version.clone(), e.resource.kind.clone());
        if kinds.contains_key(&key) {
            continue;
        }
        let gvk = GroupVersionKind::gvk(&key.0, &key.1, &key.2);
        let found = match kube::discovery::pinned_kind(&cluster.client, &gvk).await {
            Ok((ar, caps)) => Ok((ar, caps.scope == Scope::Namespaced)),
            Err(kube::Error::Api(s)) if s.code == 404 => Err("kind not served".to_string()),
            Err(kube::Error::Discovery(_)) => Err("kind not served".to_string()),
            Err(e) => Err(cluster.error(e, Request::List { what: "API discovery" }).to_string()),
        };
        kinds.insert(key, found);
    }
    // Each read owns what it needs, and they are collected before being driven: no closure
    // borrowing `entries` is part of the future, so it is `Send` for any lifetime and the
    // dashboard can await it on its request task.
    let reads: Vec<_> = entries
        .iter()
        .map(|e| {
            let key = (e.resource.group.clone(), e.version.clone(), e.resource.kind.clone());
            let kind = kinds.get(&key).cloned();
            let cluster = cluster.clone();
            let what = kind_of(&e.resource.group, &e.resource.kind);
            let (namespace, name) = (e.resource.namespace.clone(), e.resource.name.clone());
            async move {
                let (ar, namespaced) = match kind {
                    Some(Ok(k)) => k,
                    Some(Err(why)) => return Live::Unreadable(why),
                    None => return Live::Unreadable("kind not resolved".into()),
                };
                let api: Api<DynamicObject> = match (namespaced, namespace.as_deref()) {
                    (true, Some(ns)) => Api::namespaced_with(cluster.client.clone(), ns, &ar),
                    (true, None) => return Live::Unreadable("no namespace recorded".into()),
                    (false, _) => Api::all_with(cluster.client.clone(), &ar),
                };
                match api.get_opt(&name).await {
                    Ok(Some(obj)) => match serde_json::to_value(obj) {
                        Ok(v) => Live::Found(v),
                        Err(err) => Live::Unreadable(err.to_string()),
                    },
                    Ok(None) => Live::Missing,
                    Err(kube::Error::Api(s)) if s.code == 403 => Live::Unreadable("forbidden".into()),
                    Err(err) => {
                        let namespace = namespace.as_deref().unwrap_or_default();
                        let request = Request::Get { kind: &what, name: &name, namespace };
                        Live::Unreadable(cluster.error(err, request).to_string())
                    }
                }
            }
        })
        .collect();
    futures_util::stream::iter(reads).buffered(CONCURRENCY).collect().await
}
