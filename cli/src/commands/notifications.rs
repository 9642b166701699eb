//! `ksync notifications`: list Notifications, their routes and their last delivery.

use kube::api::ListParams;

use kuvryn_sync::api::notification::Notification;
use kuvryn_sync::command::Result;
use kuvryn_sync::read;
use kuvryn_sync::read::connect::Cluster;

use super::output::{self, ListFormat};
use super::{Context, list_output, print_table};
use crate::view::notifications::{Columns, table};

/// Flags of `ksync notifications`.
#[derive(Clone, Debug, Default, PartialEq, Eq, clap::Args)]
pub struct ListArgs {
    /// List the Notifications of every namespace (adds a NAMESPACE column).
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Only Notifications whose labels match this selector.
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    pub selector: Option<String>,
    /// Output format: wide (more columns), json or yaml (the objects).
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<ListFormat>,
}

/// List and print.
pub async fn run(cluster: &Cluster, args: &ListArgs, ctx: Context) -> Result<()> {
    let mut params = ListParams::default();
    if let Some(s) = &args.selector {
        params = params.labels(s);
    }
    let found = read::list::<Notification>(cluster, args.all_namespaces, &params).await?;
    let (wide, format) = list_output(args.output);
    if let Some(format) = format {
        return output::print(&output::render(&output::list(&read::raw(&found)), format)?);
    }
    let items = read::typed(&found);
    let columns = Columns { namespace: args.all_namespaces, wide };
    let namespace = (!args.all_namespaces).then_some(cluster.namespace.as_str());
    print_table(&table(&items, columns, ctx.now(), ctx.palette), "Notifications", namespace)
}
