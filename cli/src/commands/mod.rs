//! `ksync`: the command-line client.
//!
//! Read commands: `apps` (same as `app list`), `app NAME` (same as `app get NAME`), `plan NAME`,
//! `history NAME`, `repos`, `notifications`, `graph NAME`, and `ui` (the dashboard, a local web
//! server); write commands: `sync NAME` (an approval), `rollback NAME` (a rollback request),
//! `redeploy NAME`, `reconcile repo|app NAME` and `suspend`/`resume app|repo NAME`; plus
//! `completion SHELL` and `version`; and `dev`, the local quickstart ([`dev`]). Each read command
//! reads as the user with the library's [`kuvryn_sync::read`] ([`connect`] finds the cluster like
//! kubectl), hands the objects to the pure views ([`crate::view`], [`kuvryn_sync::view`]), and
//! prints what they return ([`output`]). Errors come back as [`kuvryn_sync::command::Error`] and
//! are printed in one line by [`kuvryn_sync::command::main`] (exit status 1).

pub mod app;
pub mod apps;
pub mod dev;
pub mod diff;
pub mod graph;
pub mod history;
pub mod notifications;
pub mod output;
pub mod plan;
pub mod reconcile;
pub mod redeploy;
pub mod repos;
pub mod rollback;
pub mod suspend;
pub mod sync;
pub mod ui;

use std::io::IsTerminal;

use clap::{CommandFactory, Parser, Subcommand};
use jiff::Timestamp;

use kuvryn_sync::api::names;
use kuvryn_sync::command::{Error, Result};
use kuvryn_sync::read::connect::{self, ClusterArgs};
use kuvryn_sync::telemetry::logging::LogFormat;
use kuvryn_sync::view::Palette;
use output::{Format, ListFormat};

/// Kuvryn Sync command-line client.
#[derive(Parser, Debug)]
#[command(name = "ksync", version, about = "Kuvryn Sync command-line client")]
pub struct Args {
    /// Log line format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true, env = "KSYNC_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// Where to connect.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// When to colour the output: on a terminal unless NO_COLOR is set (auto), always, never.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto, global = true)]
    pub color: ColorChoice,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// `--color`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    /// Colour when stdout is a terminal, `NO_COLOR` is unset or empty, and `TERM` is not `dumb`.
    #[default]
    Auto,
    /// Always colour.
    Always,
    /// Never colour.
    Never,
}

/// Environment variable fixing the time AGE columns count from (RFC 3339), for tests that need
/// stable output. Deliberately not a flag, so it is in neither `--help` nor the completions.
pub const NOW_ENV: &str = "KSYNC_NOW";

/// The fixed "now" of [`NOW_ENV`], if set.
fn fixed_now() -> Result<Option<Timestamp>> {
    match std::env::var(NOW_ENV) {
        Ok(v) if !v.is_empty() => v
            .parse::<Timestamp>()
            .map(Some)
            .map_err(|e| Error::Unavailable(format!("{NOW_ENV}={v:?} is not an RFC 3339 time: {e}"))),
        _ => Ok(None),
    }
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// List Applications: sync, health, Revision, commit, age, message (same as `ksync app list`).
    Apps(apps::ListArgs),
    /// Show one Application (`ksync app NAME`, or `ksync app get NAME`) or list them (`ksync app list`).
    App(app::AppArgs),
    /// Show the stored plan of an Application's desired Revision.
    Plan(plan::PlanArgs),
    /// List an Application's Revisions, newest first.
    History(history::HistoryArgs),
    /// List Repositories: URL, ref, observed commit, Ready.
    Repos(repos::ListArgs),
    /// Approve the plan of an Application: show it (as `ksync plan`), ask, and approve exactly
    /// that plan digest. It deploys a manual-sync Application's desired Revision, or repairs
    /// drift; the controller applies it only while it is still the current plan.
    Sync(sync::SyncArgs),
    /// Print an Application's resource graph: its managed resources and the live objects around
    /// them (owned, selected, used, mounted...), missing ones marked, and the path to the root
    /// cause when something is not Healthy. `-o dot` for Graphviz, `-o json`.
    Graph(graph::GraphArgs),
    /// Preview what deploying a branch, tag, commit or local checkout would change: render,
    /// validate and plan it against the live cluster as the Application's service account, and
    /// print the plan in apply order with a unified diff per changed object (server-managed
    /// fields removed, Secret values masked).
    ///
    /// Read-only: it writes nothing to the cluster (no Revision, no status); its only requests
    /// are reads and server-side dry runs (dryRun=All). Exit status 0 when nothing would
    /// change, 1 when something would, 2 on an error.
    Diff(diff::DiffArgs),
    /// Roll an Application back to an earlier Revision (default: the last healthy one before
    /// the desired one) or commit. When the rollback completes, the commit rolled back from is
    /// held: not deployed again until a new commit or spec change.
    Rollback(rollback::RollbackArgs),
    /// Reconcile a Repository (`repo NAME`: fetch its ref now) or an Application (`app NAME`)
    /// without waiting for its interval; wait until the controller has, and print what it found
    /// (the commit fetched, or the Ready condition). It approves nothing.
    Reconcile(reconcile::ReconcileArgs),
    /// Pause an Application (`app NAME`: no planning, applying, pruning or self-heal) or a
    /// Repository (`repo NAME`: no fetches, no Application changes): sets `spec.suspend`, and
    /// waits until the controller has seen it.
    Suspend(suspend::SuspendArgs),
    /// Undo `ksync suspend` (`app NAME` or `repo NAME`) and reconcile it now.
    Resume(suspend::SuspendArgs),
    /// List Notifications: provider, which Applications and Events they route, Ready, and the
    /// last delivery (`-o wide`: the last failure and its message).
    Notifications(notifications::ListArgs),
    /// Restart the Application's Deployments, StatefulSets and DaemonSets without a change in
    /// Git (as `kubectl rollout restart`), as a new attempt on its Revision.
    Redeploy(redeploy::RedeployArgs),
    /// Serve the dashboard (read-only) on 127.0.0.1:8080: Applications, one Application with
    /// its plan and history, its resource graph, Repositories; read with your kubeconfig and
    /// permissions. See docs/dashboard.md.
    Ui(ui::UiArgs),
    /// Local quickstart: Kuvryn Sync deploying an example repository on this machine.
    ///
    /// Starts a simulated Kubernetes API server, a Git server serving the example repository
    /// (examples/quickstart) and two manager replicas, all on 127.0.0.1; shows the Applications
    /// being discovered, planned, applied and turning Healthy, then what to try next. Ctrl-C
    /// stops everything. See docs/quickstart.md.
    Dev(dev::DevArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completion {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the client version and the API version it speaks.
    Version,
    /// Run the manager in this process, exactly as `ksync-controller` does: how `ksync dev`
    /// starts its replicas, so they always run the code of this binary.
    #[command(hide = true)]
    Controller {
        /// What the manager does.
        #[command(subcommand)]
        command: kuvryn_sync::manager::Command,
    },
    /// Become `COMMAND`, set to receive SIGTERM when process `--parent` dies: how `ksync dev`
    /// starts its children, so none outlives it (see `dev::process`).
    #[command(hide = true)]
    Supervised {
        /// The process whose death ends this one.
        #[arg(long)]
        parent: u32,
        /// The program and its arguments, after `--`.
        #[arg(last = true, required = true)]
        command: Vec<std::ffi::OsString>,
    },
}

/// What every read command needs besides the cluster: the time ages count from and the colours.
#[derive(Clone, Copy, Debug)]
pub struct Context {
    /// A fixed "now" for AGE (`KSYNC_NOW`); None: the current time whenever a view is drawn.
    pub fixed_now: Option<Timestamp>,
    /// Colours for the tables (never used for JSON or YAML).
    pub palette: Palette,
    /// Whether stdout is a terminal (`--watch` then redraws in place).
    pub terminal: bool,
}

impl Context {
    /// The time AGE counts from.
    pub fn now(&self) -> Timestamp {
        self.fixed_now.unwrap_or_else(Timestamp::now)
    }
}

/// Whether to colour, from `--color` and the environment.
pub fn palette(choice: ColorChoice, stdout_is_terminal: bool, env: impl Fn(&str) -> Option<String>) -> Palette {
    let enabled = match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => {
            stdout_is_terminal
                && env("NO_COLOR").is_none_or(|v| v.is_empty())
                && env("TERM").is_none_or(|t| t != "dumb")
        }
    };
    Palette { enabled }
}

/// Parse the process arguments and run; `ksync dev` starts its API server with `emulator`.
pub fn main_with(emulator: &dyn dev::emulator::Emulator) -> std::process::ExitCode {
    kuvryn_sync::command::main(
        |a: &Args| a.log_format,
        default_log_filter,
        |a| matches!(a.command, Command::Controller { .. }),
        |args| run(args, emulator),
    )
}

/// No logs unless RUST_LOG asks: kube-rs logs failed requests as errors, and stderr is for the
/// one-line reason. The manager (`ksync controller`) logs at info, as `ksync-controller` does.
fn default_log_filter(args: &Args) -> &'static str {
    match args.command {
        Command::Controller { .. } => kuvryn_sync::manager::DEFAULT_LOG_FILTER,
        _ => "off",
    }
}

/// Run parsed arguments (`ksync dev` with `emulator` as its API server).
pub fn run(args: Args, emulator: &dyn dev::emulator::Emulator) -> Result<()> {
    let terminal = std::io::stdout().is_terminal();
    let context = Context {
        fixed_now: fixed_now()?,
        palette: palette(args.color, terminal, |k| std::env::var(k).ok()),
        terminal,
    };
    match args.command {
        Command::Controller { command } => {
            kuvryn_sync::manager::run(kuvryn_sync::manager::Args { log_format: args.log_format, command })
        }
        Command::Supervised { parent, command } => dev::process::exec_supervised(parent, &command),
        Command::Dev(dev) => {
            if args.cluster.kubeconfig.is_some() || args.cluster.context.is_some() || args.cluster.namespace.is_some() {
                return Err(Error::Startup(
                    "ksync dev starts its own cluster: --kubeconfig, --context and --namespace do not apply".into(),
                ));
            }
            dev::run(dev, context, emulator)
        }
        Command::Version => {
            output::print(&format!("ksync {} (API {})\n", env!("CARGO_PKG_VERSION"), names::API_VERSION))
        }
        Command::Completion { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Args::command(), "ksync", &mut script);
            output::print(&String::from_utf8_lossy(&script))
        }
        command => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| Error::Startup(format!("starting the runtime: {e}")))?;
            runtime.block_on(async move {
                let cluster = connect::connect(&args.cluster).await?;
                match command {
                    Command::Apps(list) => apps::run(&cluster, &list, context).await,
                    Command::App(a) => app::run(&cluster, a, context).await,
                    Command::Plan(p) => plan::run(&cluster, &p, context).await,
                    Command::History(h) => history::run(&cluster, &h, context).await,
                    Command::Repos(list) => repos::run(&cluster, &list, context).await,
                    Command::Sync(s) => sync::run(&cluster, &s, context).await,
                    Command::Rollback(r) => rollback::run(&cluster, &r, context).await,
                    Command::Graph(g) => graph::run(&cluster, &g, context).await,
                    Command::Diff(d) => diff::run(&cluster, &d, context).await,
                    Command::Redeploy(r) => redeploy::run(&cluster, &r, context).await,
                    Command::Reconcile(r) => reconcile::run(&cluster, &r, context).await,
                    Command::Suspend(s) => suspend::run(&cluster, &s, true, context).await,
                    Command::Resume(s) => suspend::run(&cluster, &s, false, context).await,
                    Command::Notifications(list) => notifications::run(&cluster, &list, context).await,
                    Command::Ui(u) => ui::run(&cluster, &u, context).await,
                    Command::Version
                    | Command::Completion { .. }
                    | Command::Dev(_)
                    | Command::Controller { .. }
                    | Command::Supervised { .. } => unreachable!("handled above"),
                }
            })
        }
    }
}

/// Print `table`, or, when it is empty, kubectl's "No ... found" on stderr.
pub fn print_table(table: &str, kind_plural: &str, namespace: Option<&str>) -> Result<()> {
    if table.is_empty() {
        eprint!("{}", kuvryn_sync::view::nothing_found(kind_plural, namespace));
        return Ok(());
    }
    output::print(table)
}

/// `-o` of a list command, as the formats the views and [`output`] know.
pub fn list_output(o: Option<ListFormat>) -> (bool, Option<Format>) {
    match o {
        None => (false, None),
        Some(ListFormat::Wide) => (true, None),
        Some(ListFormat::Json) => (false, Some(Format::Json)),
        Some(ListFormat::Yaml) => (false, Some(Format::Yaml)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("ksync").chain(args.iter().copied()))
    }

    #[test]
    fn the_clap_definitions_are_consistent() {
        Args::command().debug_assert();
    }

    #[test]
    fn app_takes_a_name_or_a_subcommand() {
        let name_of = |args: &[&str]| match parse(args).unwrap().command {
            Command::App(a) => a.target(),
            other => panic!("{other:?}"),
        };
        assert_eq!(name_of(&["app", "web"]), app::Target::Get("web".into(), None));
        assert_eq!(name_of(&["app", "web", "-o", "json"]), app::Target::Get("web".into(), Some(Format::Json)));
        assert_eq!(name_of(&["app", "get", "web", "-o", "yaml"]), app::Target::Get("web".into(), Some(Format::Yaml)));
        assert!(matches!(name_of(&["app", "list", "-A", "-o", "wide"]), app::Target::List(l) if l.all_namespaces));
        // `ksync apps` is `ksync app list`, flags included.
        assert!(
            matches!(parse(&["apps", "-A", "--watch"]).unwrap().command, Command::Apps(l) if l.all_namespaces && l.watch)
        );
        assert!(parse(&["app"]).is_err(), "a bare `ksync app` asks for a name or subcommand");
        // Global flags go anywhere.
        let a = parse(&["-n", "team-a", "plan", "web", "--kubeconfig", "/tmp/k", "--context", "c"]).unwrap();
        assert_eq!(a.cluster.namespace.as_deref(), Some("team-a"));
        assert_eq!(a.cluster.context.as_deref(), Some("c"));
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        assert!(palette(ColorChoice::Auto, true, env(&[])).enabled);
        assert!(!palette(ColorChoice::Auto, false, env(&[])).enabled);
        assert!(!palette(ColorChoice::Auto, true, env(&[("NO_COLOR", "1")])).enabled);
        assert!(palette(ColorChoice::Auto, true, env(&[("NO_COLOR", "")])).enabled);
        assert!(!palette(ColorChoice::Auto, true, env(&[("TERM", "dumb")])).enabled);
        assert!(palette(ColorChoice::Always, false, env(&[("NO_COLOR", "1")])).enabled);
        assert!(!palette(ColorChoice::Never, true, env(&[])).enabled);
    }
}
