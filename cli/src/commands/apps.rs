//! `ksync apps` (and `ksync app list`): list Applications, or watch them.

use std::collections::BTreeMap;

use futures_util::StreamExt;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::ApiResource;
use kube::runtime::{WatchStreamExt, watcher};

use kuvryn_sync::api::application::Application;
use kuvryn_sync::command::Result;
use kuvryn_sync::read::connect::Cluster;
use kuvryn_sync::read::{self, Object};
use kuvryn_sync::view::apps::{Columns, table};

use super::output::{self, ListFormat};
use super::{Context, list_output, print_table};

/// What the errors call Applications.
const WHAT: &str = "sync.kuvryn.io/v1alpha1 applications";

/// Flags of `ksync apps` and `ksync app list`.
#[derive(Clone, Debug, Default, PartialEq, Eq, clap::Args)]
pub struct ListArgs {
    /// List the Applications of every namespace (adds a NAMESPACE column).
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Only Applications whose labels match this selector (`sync.kuvryn.io/repository=platform`).
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    pub selector: Option<String>,
    /// Keep running and redraw the list whenever an Application changes.
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// Output format: wide (more columns), json or yaml (the objects).
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<ListFormat>,
}

/// List (or watch) and print.
pub async fn run(cluster: &Cluster, args: &ListArgs, ctx: Context) -> Result<()> {
    if args.watch {
        return watch(cluster, args, ctx).await;
    }
    let mut params = ListParams::default();
    if let Some(s) = &args.selector {
        params = params.labels(s);
    }
    let apps = read::list::<Application>(cluster, args.all_namespaces, &params).await?;
    let (wide, format) = list_output(args.output);
    if let Some(format) = format {
        return output::print(&output::render(&output::list(&read::raw(&apps)), format)?);
    }
    let columns = Columns { namespace: args.all_namespaces, wide };
    let namespace = (!args.all_namespaces).then_some(cluster.namespace.as_str());
    print_table(&table(&read::typed(&apps), columns, ctx.now(), ctx.palette), "Applications", namespace)
}

/// Watch with a kube watcher. Tables are redrawn (the screen cleared first on a terminal,
/// separated by a blank line otherwise) whenever what they show changes; with `-o json|yaml`
/// every changed Application is printed. An error before the first listing ends the command;
/// later ones are retried with backoff, each reported on stderr.
async fn watch(cluster: &Cluster, args: &ListArgs, ctx: Context) -> Result<()> {
    let mut config = watcher::Config::default();
    if let Some(s) = &args.selector {
        config = config.labels(s);
    }
    let (wide, format) = list_output(args.output);
    let columns = Columns { namespace: args.all_namespaces, wide };
    let namespace = (!args.all_namespaces).then_some(cluster.namespace.as_str());
    let clear = ctx.terminal;
    let ar = ApiResource::erase::<Application>(&());
    let api: Api<DynamicObject> = if args.all_namespaces {
        Api::all_with(cluster.client.clone(), &ar)
    } else {
        Api::namespaced_with(cluster.client.clone(), &cluster.namespace, &ar)
    };
    let mut stream = watcher(api, config).default_backoff().boxed();
    let mut store: BTreeMap<(String, String), Object<Application>> = BTreeMap::new();
    let mut pending: BTreeMap<(String, String), Object<Application>> = BTreeMap::new();
    let mut listed = false;
    let mut last = None::<String>;
    let key = |a: &Object<Application>| (a.typed.namespace().unwrap_or_default(), a.typed.name_any());
    let decode = |o: DynamicObject| read::decode_dynamic::<Application>(o, &ar);
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(e) => e,
            Err(e) if !listed => return Err(cluster.watch_error(e, WHAT)),
            Err(e) => {
                eprintln!(
                    "warning: {}; retrying",
                    kuvryn_sync::view::one_line(&cluster.watch_error(e, WHAT).to_string())
                );
                continue;
            }
        };
        let mut changed = Vec::new();
        match event {
            watcher::Event::Init => pending.clear(),
            watcher::Event::InitApply(a) => {
                let a = decode(a)?;
                pending.insert(key(&a), a);
            }
            watcher::Event::InitDone => {
                listed = true;
                store = std::mem::take(&mut pending);
                changed.extend(store.values().cloned());
            }
            watcher::Event::Apply(a) => {
                let a = decode(a)?;
                store.insert(key(&a), a.clone());
                changed.push(a);
            }
            watcher::Event::Delete(a) => {
                let a = decode(a)?;
                store.remove(&key(&a));
                changed.push(a);
            }
        }
        if !listed {
            continue;
        }
        if let Some(format) = format {
            for a in &changed {
                let mut s = output::render(&a.raw, format)?;
                if format == output::Format::Yaml {
                    s = format!("---\n{s}");
                }
                output::print(&s)?;
            }
            continue;
        }
        let items: Vec<Application> = store.values().map(|o| o.typed.clone()).collect();
        let mut view = table(&items, columns, ctx.now(), ctx.palette);
        if view.is_empty() {
            view = kuvryn_sync::view::nothing_found("Applications", namespace);
        }
        if last.as_ref() == Some(&view) {
            continue;
        }
        let frame = match (&last, clear) {
            (_, true) => format!("\u{1b}[H\u{1b}[2J{view}"),
            (Some(_), false) => format!("\n{view}"),
            (None, false) => view.clone(),
        };
        output::print(&frame)?;
        last = Some(view);
    }
    Ok(())
}
