//! `ksync history NAME`: the Application's Revisions, newest first.

use kube::api::ListParams;

use kuvryn_sync::api::application::Application;
use kuvryn_sync::api::names;
use kuvryn_sync::api::revision::Revision;
use kuvryn_sync::command::Result;
use kuvryn_sync::read;
use kuvryn_sync::read::connect::Cluster;
use kuvryn_sync::view::history::{newest_first, table};

use super::Context;
use super::output::{self, Format};

/// Flags of `ksync history`.
#[derive(Clone, Debug, clap::Args)]
pub struct HistoryArgs {
    /// The Application.
    pub name: String,
    /// Output format: json or yaml (a List of the Revisions, newest first).
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<Format>,
}

/// Read the Application and its Revisions (labelled `sync.kuvryn.io/application=NAME`), print
/// them newest first.
pub async fn run(cluster: &Cluster, args: &HistoryArgs, ctx: Context) -> Result<()> {
    let app = read::get::<Application>(cluster, &args.name).await?.typed;
    let params = ListParams::default().labels(&format!("{}={}", names::labels::APPLICATION, args.name));
    let mut revs: Vec<read::Object<Revision>> = read::list::<Revision>(cluster, false, &params)
        .await?
        .into_iter()
        .filter(|r| r.typed.spec.application == args.name)
        .collect();
    // Newest first, as the table orders them.
    revs.sort_by(|a, b| newest_first(&a.typed, &b.typed));
    if let Some(format) = args.output {
        return output::print(&output::render(&output::list(&read::raw(&revs)), format)?);
    }
    let view = table(&read::typed(&revs), Some(&app), ctx.now(), ctx.palette);
    if view.is_empty() {
        eprintln!("No Revisions found for Application \"{}\" in namespace \"{}\".", args.name, cluster.namespace);
        return Ok(());
    }
    output::print(&view)
}
