//! The load test: many Applications on several real `ksync-controller` replicas, against
//! simcluster and a real `git daemon`, measuring what `docs/performance.md` reports:
//! convergence, drift detection and self-heal latency, memory per replica, and how long the
//! shards of a SIGKILLed replica take to be reconciled elsewhere.
//!
//! Every part is the real one, each in its own process: the `simcluster` binary as the API
//! server (or a fresh realkube, `--cluster realkube`, or any cluster, `--kubeconfig`), `git daemon` serving one repository with a directory per Application, and the
//! replicas as in `tests/sharding.rs` (each its own ServiceAccount, sharded with Leases).
//! Latencies are measured against watch events stamped on arrival, never by polling.
//!
//! `loadtest/README.md` says how to run it; [`run::run`] documents the phases.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

pub mod chaos;
pub mod fleet;
pub mod floor;
pub mod metrics;
pub mod observe;
pub mod plot;
pub mod procfs;
pub mod report;
pub mod run;
pub mod scenario;
pub mod server;
pub mod stats;

/// Load-test failures (the harness's own set-up steps panic with their context instead).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A binary the load test runs is not built.
    #[error("{} is missing: build it with `{build}`", path.display())]
    MissingBinary {
        /// Where it was looked for.
        path: PathBuf,
        /// The command that builds it.
        build: String,
    },
    /// A child process could not be started.
    #[error("starting {what}: {source}")]
    Start {
        /// Which process.
        what: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Something did not happen in time.
    #[error("timed out after {0:?} waiting for {1}")]
    Timeout(Duration, String),
    /// An API request failed.
    #[error("API request failed: {0}")]
    Kube(#[from] kube::Error),
    /// The cluster cannot be had or used as asked.
    #[error("{0}")]
    Cluster(String),
    /// A file or process operation failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// `Result` with the load test's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    // A bare 0, as the flags that take 0 for "none" say.
    if s.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    kuvryn_sync::api::duration::parse(s)
}

/// Kuvryn Sync load test.
#[derive(clap::Parser, Debug, Clone)]
#[command(name = "loadtest", about = "Kuvryn Sync load test: Applications on sharded replicas against simcluster")]
pub struct Args {
    /// A named run (`cold-10k`, `takeover`, `idle`, `monorepo`, `scale-out`, `chaos`): sets the flags of
    /// that measurement; flags given as well win.
    #[arg(long, value_enum)]
    pub scenario: Option<scenario::Scenario>,
    /// The cluster to start for the run: `simcluster` (the emulator) or `realkube` (a fresh
    /// kube-apiserver, kube-controller-manager and etcd from `../shared/realkube`, with
    /// `simcluster nodes` as scheduler and kubelets). Ignored with `--kubeconfig`.
    #[arg(long, value_enum, default_value_t = server::ClusterKind::Simcluster)]
    pub cluster: server::ClusterKind,
    /// Run against the cluster of this kubeconfig (its current context) instead of starting one:
    /// the run creates its namespaces there (labelled `loadtest.kuvryn.io/run`, refusing ones that
    /// exist) and deletes them after.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// How long each step of the calibration runs (the server's Server-Side Apply rate at 1, 2,
    /// 4, ... concurrent writers, until it stops improving); 0: no calibration.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub calibration_step: Duration,
    /// Applications.
    #[arg(long, default_value_t = 1000)]
    pub apps: usize,
    /// `ksync-controller` replicas.
    #[arg(long, default_value_t = 3)]
    pub replicas: usize,
    /// Shards (`--shards` of every replica).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub shards: u32,
    /// Hand edits of managed ConfigMaps to time, one at a time (half on self-healing
    /// Applications).
    #[arg(long, default_value_t = 200)]
    pub edits: usize,
    /// Namespaces the Applications are spread over (each with its Repository and deployer).
    #[arg(long, default_value_t = 10)]
    pub namespaces: usize,
    /// What each Application deploys: `configmap`, or `three` (a ConfigMap, a ClusterIP
    /// Service and a zero-replica Deployment).
    #[arg(long, value_enum, default_value_t = fleet::Objects::Configmap)]
    pub objects: fleet::Objects,
    /// Every n-th Application also runs a one-replica Deployment (0: none).
    #[arg(long, default_value_t = 10)]
    pub deployment_every: usize,
    /// `spec.interval` of the Repositories (the CRD's default is 1m). A fetch that finds the
    /// same commit writes nothing.
    #[arg(long, default_value = "1m")]
    pub repository_interval: String,
    /// `--lease-duration` of every replica.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,
    /// `--kube-api-qps` of every replica: its API budget, requests per second (default: the
    /// controller's, which lifts the budget when the server applies API Priority and Fairness,
    /// as simcluster does).
    #[arg(long)]
    pub kube_api_qps: Option<f64>,
    /// `--concurrent-applications` of every replica (default: the controller's).
    #[arg(long)]
    pub concurrent_applications: Option<u16>,
    /// Applications created at once.
    #[arg(long, default_value_t = 16)]
    pub create_concurrency: usize,
    /// Longest wait for the fleet to converge.
    #[arg(long, default_value = "15m", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Longest wait for one edit to be detected or repaired (a miss is counted, not fatal).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub edit_timeout: Duration,
    /// With no Application converging for this long, ask every waiting one for a reconcile
    /// (`sync.kuvryn.io/reconcile-requested-at`) and go on; the report counts them. 0: never.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub nudge_after: Duration,
    /// Quiet period after convergence over which idle CPU is measured.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub settle: Duration,
    /// The takeover asks for no reconcile: each moved Application counts as handled at its first
    /// reconcile on a survivor after the kill, read from the replicas' logs (their log filter
    /// gets `kube_runtime::controller=debug`). A requested reconcile reads and dry-runs every
    /// object; this measures the takeover a SIGKILL alone costs.
    #[arg(long)]
    pub takeover_unrequested: bool,
    /// The takeover SIGKILLs the leader (the replica holding the leader Lease) instead of the
    /// replica holding most shards: a takeover that also moves the leader's singleton work.
    #[arg(long)]
    pub kill_leader: bool,
    /// `--drift-resync-interval` of every replica (default: the controller's, 5m).
    #[arg(long, value_parser = parse_duration)]
    pub drift_resync_interval: Option<Duration>,
    /// After the edits, a quiet window this long: API requests per Application per drift
    /// resync and writes, with nothing changing (0: none).
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub idle: Duration,
    /// After the edits, one commit changing the first Application's path: renders, and the
    /// writes and dry runs of the Applications it does not touch.
    #[arg(long)]
    pub monorepo_commit: bool,
    /// Instead of converging the whole fleet at once: half the Applications on one replica,
    /// then, once the others have joined and split the shards, the other half on all
    /// `--replicas`, at the same per-replica budget. The report gives the throughput of each
    /// and their ratio.
    #[arg(long)]
    pub scale_out: bool,
    /// After the edits, this long of chaos (0: none): commits every few seconds, a replica
    /// SIGKILLed every 20 to 40 s (every other kill the leader) and started again, and API
    /// faults (429 and 500 bursts, dropped watches, 410 on resume); then what was lost. The
    /// Applications prune.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub chaos_duration: Duration,
    /// The seed of the chaos run's kills, faults and commits.
    #[arg(long, default_value_t = 1)]
    pub chaos_seed: u64,
    /// Skip killing a replica.
    #[arg(long)]
    pub no_takeover: bool,
    /// Install no admission webhook configuration (the chart installs one by default): new
    /// Applications are then labelled with their shard by the leader, a write each. Without
    /// `--kubeconfig` only (the replicas serve it on loopback).
    #[arg(long)]
    pub no_webhook: bool,
    /// An extra argument for every replica's `ksync-controller run` (repeat for more), e.g.
    /// `--controller-arg=--kube-api-qps=0`.
    #[arg(long, allow_hyphen_values = true)]
    pub controller_arg: Vec<String>,
    /// The `ksync-controller` binary (default: next to this one).
    #[arg(long)]
    pub controller_bin: Option<PathBuf>,
    /// The `simcluster` binary (default: next to this one).
    #[arg(long)]
    pub simcluster_bin: Option<PathBuf>,
    /// `RUST_LOG` of the replicas.
    /// (The default's `debug` for the Application controller logs each reconcile the shard
    /// fence stopped, which the report counts.)
    #[arg(long, default_value = "warn,sharding=info,kuvryn_sync::controller::application=debug")]
    pub controller_log: String,
    /// Keep the logs (replicas, simcluster) in this folder instead of a temporary one.
    #[arg(long)]
    pub logs: Option<PathBuf>,
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also write the report to this folder: `report.md`, `report.json` and `ready.svg`
    /// (Applications Ready over time, per replica).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Parse the arguments, run the load test, print the report.
pub fn main() -> ExitCode {
    let args = scenario::parse();
    match run::run(&args) {
        Ok(report) => {
            if let Some(dir) = &args.out
                && let Err(e) = report.write(dir)
            {
                eprintln!("loadtest: writing the report to {}: {e}", dir.display());
                return ExitCode::FAILURE;
            }
            if args.json {
                println!("{}", serde_json::to_string_pretty(&report).expect("report JSON"));
            } else {
                print!("{}", report.table());
            }
            // A run that stopped early wrote its report, and fails.
            if report.failure.is_some() { ExitCode::FAILURE } else { ExitCode::SUCCESS }
        }
        Err(e) => {
            eprintln!("loadtest: {e}");
            ExitCode::FAILURE
        }
    }
}
