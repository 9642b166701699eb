//! `ksync dev`: the one-command local quickstart.
//!
//! # Expected flow
//!
//! 1. Find `helm` and `kubectl` ([`tools`]; installs the pinned ones with
//!    `scripts/install-tools` when the source checkout has none yet).
//! 2. Start simcluster in this process, with its kubelet simulation, on `127.0.0.1:--port`, and
//!    write a kubeconfig (its context in the namespace `quickstart`) and `env.sh`.
//! 3. Start a real `git daemon` on the next port, serving `<state>/git/quickstart.git` with
//!    pushes enabled; write the shipped example ([`example`]) into the working copy
//!    `<state>/repo`, commit and push it (a working copy from an earlier run is kept).
//! 4. Install the CRDs, the namespaces, the service account `deployer` with a Role, and the Helm
//!    values ConfigMap ([`setup`]).
//! 5. Start `--replicas` manager processes sharing the shards through Leases ([`replicas`]).
//! 6. Create the Repository, then follow it live ([`live`], [`screen`]): one line per
//!    discovery, plan, apply and health change, the Applications table under them on a
//!    terminal, and once everything is Synced and Healthy, what to try next.
//! 7. On Ctrl-C (SIGINT), SIGTERM or SIGHUP: stop the replicas (SIGTERM; they release their Leases),
//!    the Git server and the API server, wait for each, and exit 0. The state directory is kept.
//!
//! # Guarantees
//!
//! - Everything listens on 127.0.0.1 only.
//! - Every child is started with kill-on-drop, so an error or an interrupt during start-up
//!   leaves no process behind; a clean stop waits for each child to exit.
//! - Every child gets SIGTERM from the kernel if `ksync dev` dies anyway (SIGKILL, a crash):
//!   see [`process`].
//!
//! # Caveats
//!
//! - The cluster lives in memory: each start begins with an empty cluster (the Git repository
//!   and its history are what is kept).
//! - A second Ctrl-C while stopping kills the replicas at once instead of waiting.

pub mod emulator;
pub mod example;
pub mod git;
pub mod live;
pub mod process;
pub mod replicas;
pub mod screen;
pub mod setup;
pub mod tools;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use tokio::signal::unix::{Signal, SignalKind, signal};

use self::example::NAMESPACE;
use self::replicas::Replica;
use self::screen::Screen;
use super::Context;
use crate::view::dev::{Line, Setup, converged_line, log_line, next_steps};
use kuvryn_sync::command::{Error, Result};
use kuvryn_sync::view::{Palette, Tone};

/// Flags of `ksync dev`.
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub struct DevArgs {
    /// Folder for the kubeconfig, the example repository (working copy and served bare
    /// repository), the replicas' logs and Git caches. Kept when stopped.
    #[arg(long, default_value = ".ksync-dev", value_name = "DIR", value_hint = clap::ValueHint::DirPath)]
    pub state_dir: PathBuf,
    /// Port of the API server on 127.0.0.1; the Git server takes the next one and the replicas'
    /// metrics the ones after. 0 picks free ports.
    #[arg(long, default_value_t = 6550)]
    pub port: u16,
    /// Manager replicas to run (they split the Applications by shard).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=8))]
    pub replicas: u16,
    /// Start over from the shipped example, discarding the repository of an earlier run.
    #[arg(long)]
    pub fresh: bool,
    /// The tools to render with.
    #[command(flatten)]
    pub tools: tools::ToolArgs,
}

/// An I/O error on `path`.
pub fn io_error(path: &Path, source: std::io::Error) -> Error {
    Error::Io { path: path.display().to_string(), source }
}

/// Width of the subject column of log lines.
const SUBJECT_WIDTH: usize = 10;

/// SIGINT (Ctrl-C), SIGTERM and SIGHUP (the terminal closed), as one stream.
struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

impl Signals {
    fn new() -> Result<Signals> {
        let install = |kind| signal(kind).map_err(|e| Error::Startup(format!("installing a signal handler: {e}")));
        Ok(Signals {
            interrupt: install(SignalKind::interrupt())?,
            terminate: install(SignalKind::terminate())?,
            hangup: install(SignalKind::hangup())?,
        })
    }

    async fn next(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
            _ = self.hangup.recv() => {}
        }
    }
}

/// Everything running once start-up is done.
struct Running {
    sim: Box<dyn emulator::Server>,
    daemon: git::Daemon,
    replicas: Vec<Replica>,
    client: kube::Client,
    setup: Setup,
}

/// The printer: log lines with the time since start.
struct Out {
    screen: Screen,
    palette: Palette,
}

impl Out {
    fn line(&mut self, subject: &str, text: &str, tone: Tone) {
        let line = Line { subject: subject.to_string(), text: text.to_string(), tone };
        let text = log_line(self.screen.elapsed(), &line, SUBJECT_WIDTH, self.palette);
        self.screen.log(&text);
    }

    fn text(&mut self, text: &str) {
        self.screen.log(text.trim_end_matches('\n'));
    }
}

/// Run `ksync dev` (see the module documentation).
pub fn run(args: DevArgs, ctx: Context, emulator: &dyn emulator::Emulator) -> Result<()> {
    let started = Instant::now();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Startup(format!("starting the runtime: {e}")))?;
    let result = runtime.block_on(async move {
        let mut out = Out { screen: Screen::new(ctx.terminal, started), palette: ctx.palette };
        let mut signals = Signals::new()?;
        let running = tokio::select! {
            r = start(&args, &mut out, emulator) => r?,
            () = signals.next() => {
                // Dropping the half-started pieces kills their processes.
                out.text("Interrupted during start-up: stopped.");
                return Ok(());
            }
        };
        follow(running, &mut out, &mut signals).await
    });
    // Ends every task still running on the emulator's runtime, and its sockets.
    runtime.shutdown_timeout(Duration::from_secs(5));
    result
}

/// Absolute `path` (created).
fn state_dir(path: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(path).map_err(|e| io_error(path, e))?;
    std::fs::canonicalize(path).map_err(|e| io_error(path, e))
}

/// Ports: (API server, Git server, first replica's metrics), from `--port`.
fn ports(port: u16, replicas: u16) -> Result<(u16, u16, u16)> {
    if port == 0 {
        return Ok((0, 0, 0));
    }
    match port.checked_add(2 + replicas) {
        Some(_) => Ok((port, port + 1, port + 2)),
        None => Err(Error::Startup(format!("--port {port} leaves no room for the Git server and {replicas} replicas"))),
    }
}

/// `env.sh` and `bin/` in the state directory: the quickstart's kubeconfig, and its `ksync`,
/// `kubectl` and `helm` first on PATH.
fn write_env(state: &Path, kubeconfig: &Path, exe: &Path, tools: &tools::Tools) -> Result<PathBuf> {
    let bin = state.join("bin");
    std::fs::create_dir_all(&bin).map_err(|e| io_error(&bin, e))?;
    for (name, target) in [("ksync", exe), ("kubectl", tools.kubectl.as_path()), ("helm", tools.helm.as_path())] {
        let link = bin.join(name);
        let _ = std::fs::remove_file(&link);
        let target = std::fs::canonicalize(target).unwrap_or_else(|_| target.to_path_buf());
        std::os::unix::fs::symlink(&target, &link).map_err(|e| io_error(&link, e))?;
    }
    let quote = |p: &Path| format!("'{}'", p.display().to_string().replace('\'', r"'\''"));
    let script = format!(
        "# Source this file (`source {}`): kubectl, helm and ksync of the quickstart, pointed at its cluster.\nexport KUBECONFIG={}\nexport PATH={}:\"$PATH\"\n",
        state.join("env.sh").display(),
        quote(kubeconfig),
        quote(&bin)
    );
    let path = state.join("env.sh");
    std::fs::write(&path, script).map_err(|e| io_error(&path, e))?;
    Ok(path)
}

/// Steps 1 to 6 of the module documentation, up to the Repository's creation.
async fn start(args: &DevArgs, out: &mut Out, emulator: &dyn emulator::Emulator) -> Result<Running> {
    let state = state_dir(&args.state_dir)?;
    out.text(&format!("Kuvryn Sync quickstart: everything runs on 127.0.0.1; state in {}", state.display()));
    let (api_port, git_port, metrics_port) = ports(args.port, args.replicas)?;
    git::git(&state, &["--version"]).await?;
    let tools =
        tools::find(args.tools.helm.clone(), args.tools.kubectl.clone(), &mut |s| out.line("tools", s, Tone::Plain))
            .await?;
    out.line("tools", &format!("helm {}, kubectl {}", tools.helm.display(), tools.kubectl.display()), Tone::Plain);

    let emulator::Started { url, admin_token: token, nodes, server: sim } =
        emulator.start(api_port).await.map_err(|e| {
            Error::Startup(format!(
                "starting the API server on 127.0.0.1:{api_port}: {e} (another ksync dev? --port 0 picks free ports)"
            ))
        })?;
    let kubeconfig = state.join("kubeconfig");
    std::fs::write(&kubeconfig, setup::kubeconfig(&url, &token)).map_err(|e| io_error(&kubeconfig, e))?;
    out.line(
        "cluster",
        &format!("API server (simcluster, {nodes} simulated Nodes) at {}; kubeconfig {}", url, kubeconfig.display()),
        Tone::Plain,
    );
    let exe = std::env::current_exe().map_err(|e| Error::Startup(format!("locating this binary: {e}")))?;
    let env_script = write_env(&state, &kubeconfig, &exe, &tools)?;

    let logs = state.join("logs");
    std::fs::create_dir_all(&logs).map_err(|e| io_error(&logs, e))?;
    let paths = git::Paths { base: state.join("git"), work: state.join("repo") };
    std::fs::create_dir_all(&paths.base).map_err(|e| io_error(&paths.base, e))?;
    let daemon = git::Daemon::start(&exe, &paths.base, git_port, &logs.join("git-daemon.log")).await?;
    let url = daemon.url(git::REPOSITORY);
    let (commit, origin) = git::prepare(&paths, &url, args.fresh).await?;
    let how = match origin {
        git::Origin::Fresh => "the shipped example, committed",
        git::Origin::Reused => "kept from the last run (--fresh starts over)",
    };
    out.line("git", &format!("Git server at {url}"), Tone::Plain);
    out.line(
        "git",
        &format!("working copy {} ({how}; main at {})", paths.work.display(), kuvryn_sync::view::short_commit(&commit)),
        Tone::Plain,
    );

    let kube_config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig).map_err(|e| Error::Kubeconfig(e.to_string()))?,
        &Default::default(),
    )
    .await
    .map_err(|e| Error::Kubeconfig(e.to_string()))?;
    let client = kube::Client::try_from(kube_config).map_err(|e| Error::Kubeconfig(e.to_string()))?;
    setup::bootstrap(&client).await?;
    out.line(
        "cluster",
        &format!(
            "CRDs installed; namespace {NAMESPACE}: service account {sa} (a Role allowing everything there), ConfigMap {cm}",
            sa = example::SERVICE_ACCOUNT,
            cm = example::VALUES_CONFIGMAP
        ),
        Tone::Plain,
    );

    let settings = replicas::Settings {
        exe: &exe,
        kubeconfig: &kubeconfig,
        tools: &tools,
        cache_dir: &state.join("cache"),
        log_dir: &logs,
    };
    let mut running_replicas = Vec::new();
    for i in 0..usize::from(args.replicas) {
        let port = if metrics_port == 0 { 0 } else { metrics_port + u16::try_from(i).unwrap_or(0) };
        let r = replicas::start(&settings, i, port)?;
        out.line(
            "replica",
            &format!(
                "{} started: pid {}, metrics http://{}/metrics, log {}",
                r.name,
                r.pid,
                r.metrics,
                r.log.display()
            ),
            Tone::Plain,
        );
        running_replicas.push(r);
    }
    out.line(
        "replica",
        &format!(
            "{} shards, shared through Leases in {} (lease duration {})",
            replicas::SHARDS,
            replicas::LEASE_NAMESPACE,
            replicas::LEASE_DURATION
        ),
        Tone::Plain,
    );

    setup::create_repository(&client, &url).await?;
    out.line(
        "repository",
        &format!("Repository {} created: {url}, branch main, checked every {}", setup::REPOSITORY, setup::INTERVAL),
        Tone::Plain,
    );
    out.text("Following the Applications live (Ctrl-C stops everything):");

    let setup = Setup {
        state_dir: state.display().to_string(),
        env_script: env_script.display().to_string(),
        kubeconfig: kubeconfig.display().to_string(),
        repo_dir: paths.work.display().to_string(),
        repo_url: url,
        interval: setup::INTERVAL.to_string(),
        namespace: NAMESPACE.to_string(),
        replicas: running_replicas
            .iter()
            .map(|r| {
                (r.name.clone(), r.pid, Some(format!("http://{}/metrics", r.metrics)), r.log.display().to_string())
            })
            .collect(),
        lease_namespace: replicas::LEASE_NAMESPACE.to_string(),
    };
    Ok(Running { sim, daemon, replicas: running_replicas, client, setup })
}

/// The block under the log on a terminal: the Applications table.
fn block(world: &crate::view::dev::World, palette: Palette) -> String {
    let apps: Vec<_> = world.apps.values().cloned().collect();
    let table = kuvryn_sync::view::apps::table(&apps, Default::default(), jiff::Timestamp::now(), palette);
    if table.is_empty() {
        return "Waiting for the Repository to declare Applications... (Ctrl-C stops everything)\n".to_string();
    }
    format!("{table}(Ctrl-C stops everything)\n")
}

/// Step 6 and 7: follow until a signal, then stop everything.
async fn follow(mut running: Running, out: &mut Out, signals: &mut Signals) -> Result<()> {
    let mut live = live::Live::new(setup::REPOSITORY);
    let mut events = live::events(&running.client, NAMESPACE);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut last_error = None::<String>;
    let mut daemon_down = false;
    loop {
        tokio::select! {
            () = signals.next() => break,
            Some(event) = events.next() => {
                let update = live.on_event(event);
                for l in &update.lines {
                    out.line(&l.subject, &l.text, l.tone);
                }
                if let Some(e) = update.error
                    && last_error.as_ref() != Some(&e)
                {
                    out.line("watch", &format!("{e}; retrying"), Tone::Warn);
                    last_error = Some(e);
                }
                if let Some(c) = update.converged {
                    announce(out, &running.setup, &live.world, &c);
                }
                out.screen.set_block(&block(&live.world, out.palette));
            }
            _ = tick.tick() => {
                for i in 0..running.replicas.len() {
                    let r = &mut running.replicas[i];
                    if r.exited.is_some() {
                        continue;
                    }
                    if let Ok(Some(status)) = r.child.try_wait() {
                        r.exited = Some(status);
                        let (name, log) = (r.name.clone(), r.log.display().to_string());
                        let left = running.replicas.iter().filter(|r| r.exited.is_none()).count();
                        let then = if left == 0 {
                            "no replica is left: nothing is reconciled until ksync dev starts again".to_string()
                        } else {
                            let others = if left == 1 { "the other replica".to_string() } else { format!("the {left} others") };
                            format!("its shards move to {others}")
                        };
                        out.line("replica", &format!("{name} exited ({status}); {then}. Log: {log}"), Tone::Bad);
                    }
                }
                if !daemon_down && let Some(status) = running.daemon.exited() {
                    daemon_down = true;
                    out.line("git", &format!("the Git server exited ({status})"), Tone::Bad);
                }
                out.screen.set_block(&block(&live.world, out.palette));
            }
        }
    }
    drop(events);
    stop(running, out, signals).await;
    Ok(())
}

/// Everything is Synced and Healthy: say so, show the table, and the first time, what to try.
fn announce(out: &mut Out, setup: &Setup, world: &crate::view::dev::World, c: &live::Converged) {
    let elapsed = out.screen.elapsed();
    let text = if c.again {
        format!(
            "All {} Applications are Synced and Healthy again at commit {}",
            c.count,
            kuvryn_sync::view::short_commit(&c.commit)
        )
    } else {
        converged_line(&c.commit, c.count, elapsed)
    };
    out.line("ready", &text, Tone::Good);
    if !out.screen.is_terminal() {
        // Off a terminal there is no live table: print it once here.
        let apps: Vec<_> = world.apps.values().cloned().collect();
        out.text(&kuvryn_sync::view::apps::table(&apps, Default::default(), jiff::Timestamp::now(), Palette::PLAIN));
    }
    if c.first {
        let steps = next_steps(setup);
        let path = Path::new(&setup.state_dir).join("next-steps.txt");
        let saved = match std::fs::write(&path, &steps) {
            Ok(()) => format!("(also in {})", path.display()),
            Err(e) => format!("(could not save them to {}: {e})", path.display()),
        };
        out.text(&format!("\n{steps}{saved}\n"));
    }
}

/// Step 7: replicas, then the Git server, then the API server; a second signal kills the
/// replicas at once.
async fn stop(mut running: Running, out: &mut Out, signals: &mut Signals) {
    out.screen.clear_block();
    let n = running.replicas.iter().filter(|r| r.exited.is_none()).count();
    out.text(&format!(
        "Stopping: {n} replica{} (SIGTERM: they release their Leases), the Git server, the API server (Ctrl-C again to kill at once)",
        if n == 1 { "" } else { "s" }
    ));
    tokio::select! {
        () = replicas::stop_all(&mut running.replicas, Duration::from_secs(20)) => {}
        () = signals.next() => {
            for r in &mut running.replicas {
                let _ = r.child.kill().await;
            }
        }
    }
    running.daemon.stop(Duration::from_secs(5)).await;
    drop(running.client);
    running.sim.stop();
    out.text(&format!(
        "Stopped: nothing is left running. State kept in {dir}: `ksync dev` again reuses its repository, --fresh starts over, `rm -rf {dir}` deletes it.",
        dir = running.setup.state_dir
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_follow_the_api_servers() {
        assert_eq!(ports(6550, 2).unwrap(), (6550, 6551, 6552));
        assert_eq!(ports(0, 2).unwrap(), (0, 0, 0));
        assert!(ports(65534, 2).is_err());
    }
}
