//! `ksync graph NAME`: the resource graph of an Application ([`kuvryn_sync::read::graph`]),
//! printed by [`kuvryn_sync::view::graph`] as a tree, Graphviz `dot` or JSON.

use kuvryn_sync::command::Result;
use kuvryn_sync::read::connect::Cluster;
use kuvryn_sync::read::graph::read;
use kuvryn_sync::view::graph as view;

use super::{Context, output};

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
