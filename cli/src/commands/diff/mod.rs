//! `ksync diff`: what deploying a branch, tag, commit or local checkout would change, before it
//! is merged. Each Application is previewed read-only ([`preview`]) and printed by
//! [`crate::view::diff`]. Exit status: 0 when nothing would change, 1 when something
//! would, 2 on any error (as `diff` and `kubectl diff`).

pub mod preview;

use std::path::PathBuf;

use kube::ResourceExt;
use serde_json::json;

use super::{Context, output};
use crate::view::diff::{self as view, Outcome};
use kuvryn_sync::api::application::Application;
use kuvryn_sync::command::{Error, Result};
use kuvryn_sync::read;
use kuvryn_sync::read::connect::{Cluster, Request};
use kuvryn_sync::view::one_line;

/// `-o`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DiffFormat {
    /// The previews as JSON: each entry with its diff as text.
    Json,
}

/// Flags of `ksync diff`.
#[derive(Clone, Debug, clap::Args)]
pub struct DiffArgs {
    /// The Application (or --all).
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub name: Option<String>,
    /// Every Application of the namespace (of one Repository with --repository): a summary
    /// table, then each preview.
    #[arg(long)]
    pub all: bool,
    /// With --all: only the Applications of this Repository.
    #[arg(long, requires = "all", value_name = "REPOSITORY")]
    pub repository: Option<String>,
    /// The branch, tag or commit to preview (default: the one the Application deploys).
    #[arg(long, value_name = "BRANCH|TAG|COMMIT", conflicts_with = "path")]
    pub revision: Option<String>,
    /// A local checkout of the Repository to render instead of a commit (not pushed yet); the
    /// Application's spec.source.path is taken inside it.
    #[arg(long, value_name = "DIR", value_hint = clap::ValueHint::DirPath)]
    pub path: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<DiffFormat>,
    /// The tools to render with.
    #[command(flatten)]
    pub tools: super::dev::tools::ToolArgs,
}

/// Preview, print, and exit with 0, 1 or 2 ([`Error::Exit`]).
pub async fn run(cluster: &Cluster, args: &DiffArgs, ctx: Context) -> Result<()> {
    match outcomes(cluster, args).await {
        Ok(outcomes) => {
            print(args, &outcomes, ctx)?;
            let failed = outcomes.iter().any(|o| matches!(o, Outcome::Failed { .. }));
            let changes = outcomes.iter().any(|o| matches!(o, Outcome::Preview(p) if p.changes()));
            match (failed, changes) {
                (true, _) => Err(Error::Exit(2)),
                (false, true) => Err(Error::Exit(1)),
                (false, false) => Ok(()),
            }
        }
        Err(e) => {
            eprintln!("error: {}", one_line(&e.to_string()));
            Err(Error::Exit(2))
        }
    }
}

/// The Applications asked for, each previewed.
async fn outcomes(cluster: &Cluster, args: &DiffArgs) -> Result<Vec<Outcome>> {
    let apps: Vec<Application> = match &args.name {
        Some(name) => vec![read::get::<Application>(cluster, name).await?.typed],
        None => {
            let api = kube::Api::<Application>::namespaced(cluster.client.clone(), &cluster.namespace);
            let mut all = api
                .list(&Default::default())
                .await
                .map_err(|e| cluster.error(e, Request::List { what: "Applications" }))?
                .items;
            all.retain(|a| args.repository.as_ref().is_none_or(|r| &a.spec.source.repository == r));
            all.sort_by_key(|a| a.name_any());
            all
        }
    };
    if apps.is_empty() {
        return Err(Error::Unavailable(match &args.repository {
            Some(r) => format!("no Application of Repository {r:?} in namespace {:?}", cluster.namespace),
            None => format!("no Application in namespace {:?}", cluster.namespace),
        }));
    }
    let mut say = |s: &str| eprintln!("{s}");
    let found = super::dev::tools::find(args.tools.helm.clone(), args.tools.kubectl.clone(), &mut say).await;
    // Plain YAML needs neither tool: a render that does reports that it is missing.
    let tools = found.map(|t| kuvryn_sync::render::Tools { helm: t.helm, kubectl: t.kubectl }).unwrap_or_default();
    let shared = preview::Shared::new(cluster, tools).await.map_err(Error::Unavailable)?;
    let ask = preview::Ask { revision: args.revision.as_deref(), local: args.path.as_deref() };
    let mut out = Vec::with_capacity(apps.len());
    for app in &apps {
        let application = format!("{}/{}", app.namespace().unwrap_or_default(), app.name_any());
        out.push(match preview::preview(cluster, &shared, app, ask).await {
            Ok(p) => Outcome::Preview(p),
            Err(message) => Outcome::Failed { application, message },
        });
    }
    Ok(out)
}

fn print(args: &DiffArgs, outcomes: &[Outcome], ctx: Context) -> Result<()> {
    if args.output == Some(DiffFormat::Json) {
        let value = if args.all {
            json!({"applications": outcomes.iter().map(view::json).collect::<Vec<_>>()})
        } else {
            outcomes.first().map(view::json).unwrap_or_default()
        };
        let text = serde_json::to_string_pretty(&value).map_err(|e| Error::Output(e.to_string()))?;
        return output::print(&format!("{text}\n"));
    }
    let mut text = String::new();
    if args.all {
        text.push_str(&view::summary_table(outcomes, ctx.palette));
    }
    for o in outcomes {
        if args.all {
            text.push('\n');
        }
        match o {
            Outcome::Preview(p) => text.push_str(&view::render(p, ctx.palette)),
            Outcome::Failed { application, message } => {
                if args.all {
                    text.push_str(&format!("Application:  {application}\nerror: {}\n", one_line(message)));
                } else {
                    eprintln!("error: {}", one_line(message));
                }
            }
        }
    }
    output::print(&text)
}
