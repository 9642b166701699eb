//! `ksync graph NAME`: the resource graph of an Application, read live as the user.
//!
//! The managed resources are those of the plan of the desired Revision, else of the last healthy
//! one (as `ksync app` shows them). They and the objects around them are read with the user's
//! credentials, within the same bounds as the controller's ([`crate::gather`]), linked
//! ([`crate::graph::build`]) and walked for the diagnosis from the resources that are not
//! Healthy. Printed by [`crate::cli::view::graph`].

use std::collections::BTreeMap;

use super::connect::Cluster;
use super::healthchecks::Checks;
use super::{Context, app, output, read};
use crate::api::application::{Application, Diagnosis, ResourceRef};
use crate::api::revision::{PlanEntry, Revision};
use crate::cli::Result;
use crate::cli::view::app::{Live, managed};
use crate::cli::view::graph::{self as view, GraphView};
use crate::gather::{self, Budget};
use crate::graph;
use crate::health;
use crate::health::cel::Rules;

/// `-o`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum GraphFormat {
    /// A tree under each managed resource, the diagnosis path marked.
    #[default]
    Tree,
    /// Graphviz `dot` (render with `dot -Tsvg`).
    Dot,
    /// The nodes, edges and diagnosis as JSON.
    Json,
}

/// Flags of `ksync graph`.
#[derive(Clone, Debug, clap::Args)]
pub struct GraphArgs {
    /// The Application.
    pub name: String,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = GraphFormat::Tree)]
    pub output: GraphFormat,
}

/// What the graph of an Application is made of, read live as the user: what
/// [`GraphData::view`] hands to the views of `ksync graph` and of the dashboard (`ksync ui`).
pub struct GraphData {
    /// `namespace/name` of the Application.
    pub application: String,
    /// The managed resources and the objects around them, linked.
    pub graph: graph::Graph,
    /// The diagnosis walked from the resources that are not Healthy, if any.
    pub diagnosis: Option<Diagnosis>,
    /// The read budget was reached: some objects are left out.
    pub truncated: bool,
    /// The HealthCheck rules of the managed resources that have one.
    pub rules: Vec<(ResourceRef, Rules)>,
}

impl GraphData {
    /// The view of it.
    pub fn view(&self) -> GraphView<'_> {
        GraphView {
            application: &self.application,
            graph: &self.graph,
            diagnosis: self.diagnosis.as_ref(),
            truncated: self.truncated,
            rules: &self.rules,
        }
    }
}

/// Read the Application `name` of the cluster's namespace, its managed resources and the
/// objects around them; link them and walk the diagnosis.
pub async fn read(cluster: &Cluster, name: &str) -> Result<GraphData> {
    let app = read::get::<Application>(cluster, name).await?.typed;
    let status = app.status.clone().unwrap_or_default();
    let mut revisions = Vec::new();
    for rev in [&status.desired_revision, &status.last_healthy_revision].into_iter().flatten() {
        if let Some(r) = read::get_opt::<Revision>(cluster, rev).await? {
            revisions.push(r.typed);
        }
    }
    let entries: Vec<PlanEntry> = revisions
        .iter()
        .find_map(|r| r.status.as_ref().and_then(|s| s.plan.as_ref()))
        .map(|p| managed(&p.entries).cloned().collect())
        .unwrap_or_default();
    let lives = app::read_live(cluster, &entries).await;
    let checks = Checks::read(cluster, app::namespaces(&entries, &cluster.namespace)).await;
    let mut rules = Vec::new();
    let mut objects = BTreeMap::new();
    let mut healths = Vec::new();
    for (e, live) in entries.iter().zip(lives) {
        let r = ResourceRef {
            group: e.resource.group.clone(),
            kind: e.resource.kind.clone(),
            namespace: e.resource.namespace.clone().filter(|ns| !ns.is_empty()),
            name: e.resource.name.clone(),
        };
        if let Live::Found(obj) = live {
            let ns = r.namespace.as_deref().unwrap_or(&cluster.namespace);
            let check = checks.rules(ns, &r.group, &r.kind);
            let status = match &check {
                Some(c) => health::assess_with(c, &obj).status,
                None => health::assess(&obj).status,
            };
            if let Some(c) = check {
                rules.push((r.clone(), c));
            }
            healths.push((r.clone(), status));
            objects.insert(r, obj);
        }
    }
    let gathered = gather::gather(&cluster.client, objects, Budget::default()).await;
    let g = graph::build(&gathered.observed);
    let starts = graph::diagnose::starts(&healths);
    let diagnosis = graph::diagnose::diagnose(&g, &starts);
    Ok(GraphData {
        application: format!("{}/{name}", cluster.namespace),
        graph: g,
        diagnosis,
        truncated: gathered.truncated,
        rules,
    })
}

/// Read, link, walk and print.
pub async fn run(cluster: &Cluster, args: &GraphArgs, ctx: Context) -> Result<()> {
    let data = read(cluster, &args.name).await?;
    let v = data.view();
    match args.output {
        GraphFormat::Tree => output::print(&view::tree(&v, ctx.palette)),
        GraphFormat::Dot => output::print(&view::dot(&v)),
        GraphFormat::Json => {
            let text = serde_json::to_string_pretty(&view::json(&v)).unwrap_or_default();
            output::print(&format!("{text}\n"))
        }
    }
}
