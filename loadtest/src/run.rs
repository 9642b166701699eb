//! One load-test run.
//!
//! # Phases
//! 0. **Calibration** (`run/floor.rs`): the server's Server-Side Apply rate for objects like
//!    the fleet's at 1, 2, 4, ... concurrent writers until it stops improving, in a scratch
//!    namespace removed after; each converging phase is then given as a ratio to it
//!    ([`crate::floor`]).
//! 1. **Set-up**: a real `git daemon` with one repository holding a directory per Application
//!    (a ConfigMap each, a one-replica Deployment for every n-th); the server
//!    ([`crate::server`]: the `simcluster` binary, a fresh realkube with `simcluster nodes`, or
//!    the cluster of `--kubeconfig`, in namespaces the run creates and removes); the
//!    CRDs; namespaces `team-NN`, each with a `deployer` ServiceAccount allowed everything in
//!    it and a Repository `platform`; one ServiceAccount kubeconfig per replica (TokenRequest).
//! 2. **Replicas**: R `ksync-controller run` processes with `--shards`, `--lease-namespace`,
//!    `--replica-id` and `--lease-duration`, until every shard Lease is held and the split is
//!    even.
//! 3. **Convergence**: the Applications are created (half with `selfHeal`); the clock runs until
//!    every one is Synced, Healthy and Ready. Then a quiet period measures idle CPU.
//! 4. **Drift**: one at a time, a managed ConfigMap's edited key is changed by hand (merge patch,
//!    field manager `kubectl-edit`). Without selfHeal: time to the Application's `Drifted`, then
//!    the edit is undone and the time to `Synced` taken. With selfHeal: time to the ConfigMap
//!    holding Git's value again.
//! 5. **Takeover**: the replica holding most shards (the leader with `--kill-leader`) is SIGKILLed; right after, every Application
//!    of its shards gets a new `sync.kuvryn.io/reconcile-requested-at`; the clock runs from
//!    the kill until each one's `status.lastHandledReconcileAt` echoes it (only a survivor can
//!    write it). The target is lease duration + 5 s.
//!
//! Memory and CPU of every process are read from `/proc` after convergence, after the edits and
//! at the end; the load average at the start of every phase.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kuvryn_sync::api::Repository;
use kuvryn_sync::api::application::{Application, SyncState};
use kuvryn_sync::api::names;
use serde_json::json;

use crate::fleet::{self, AppDef, GIT_VALUE, LEASE_PREFIX, Process, REPOSITORY, SYSTEM};
use crate::observe::{self, AppSeen, Journal, key};
use crate::procfs;
use crate::report::{Convergence, Drift, EditSample, Machine, PhaseUsage, Report, Settings, Takeover, Writes};
use crate::server::Server;
use crate::stats::Summary;
use crate::{Args, Error, Result};
use testkit::{Cluster, GitServer, WorkTree};

/// The admission webhook configuration a run installs.
const WEBHOOK_CONFIGURATION: &str = "kuvryn-sync-loadtest";

/// Progress, on stderr.
macro_rules! say {
    ($($t:tt)*) => { eprintln!("loadtest: {}", format!($($t)*)) };
}

mod chaos;
mod floor;
mod idle;
mod monorepo;
mod scale_out;

pub use monorepo::belongs_to;

/// Everything a run holds on to; the processes die with it.
struct Fleet {
    args: Args,
    apps: Vec<AppDef>,
    client: kube::Client,
    /// The server's own process when the run started one: simcluster, or `simcluster nodes`
    /// beside realkube (it outlives the runtime, so the watches end first).
    server_process: Option<(String, u32)>,
    /// `simcluster`, `realkube` or `kubeconfig`.
    server_kind: &'static str,
    /// This run's id: the value of the label on the namespaces it owns.
    run_id: String,
    /// The cluster's own writes in the fleet's namespaces.
    cluster_writes: Arc<observe::ClusterWrites>,
    replicas: Vec<Process>,
    report: Report,
    app_seen: Arc<Journal<AppSeen>>,
    cm_seen: Arc<Journal<Option<String>>>,
    lease_seen: Arc<Journal<Option<String>>>,
    /// The shard Leases' holders and `renewTime`s.
    renewal_seen: Arc<Journal<Option<(String, jiff::Timestamp)>>>,
    started: Instant,
    /// When each phase started (wall clock, to place audit events).
    phases: Vec<(String, jiff::Timestamp)>,
    /// The repository's work tree (the monorepo commit pushes from it).
    work_tree: WorkTree,
    /// Each replica's kubeconfig (its ServiceAccount's token), by index.
    kubeconfigs: Vec<PathBuf>,
    /// Where logs, kubeconfigs and Git caches go.
    dir: PathBuf,
    /// The `ksync-controller` binary.
    controller_bin: PathBuf,
    /// Each replica's webhook port on loopback, by index (none: no webhook installed).
    webhook_ports: Vec<u16>,
    /// Every shard, member and leader Lease version seen: (name, resourceVersion) to holder.
    lease_versions: chaos::LeaseVersions,
}

/// Run the load test described by `args` (see the module documentation).
pub fn run(args: &Args) -> Result<Report> {
    let controller_bin = fleet::binary(
        args.controller_bin.as_deref(),
        "ksync-controller",
        "cargo build --release --bin ksync-controller",
    )?;
    let sim_bin = fleet::binary(
        args.simcluster_bin.as_deref(),
        "simcluster",
        "cargo build --release -p simcluster --bin simcluster",
    )?;
    refuse_unsupported(args)?;
    let temp = testkit::temp_dir("loadtest");
    let dir: PathBuf = match &args.logs {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            d.clone()
        }
        None => temp.path().to_path_buf(),
    };
    let started = Instant::now();
    let mut apps = fleet::plan(args.apps, &fleet::namespaces(args.namespaces), args.deployment_every, args.objects);
    let chaos = !args.chaos_duration.is_zero();
    for app in &mut apps {
        app.prune = chaos;
    }

    // The Git side is blocking work: before the runtime.
    let git = GitServer::start();
    fleet::adopt(git.pid());
    let url = git.create_repo(REPOSITORY);
    let wt = WorkTree::clone(&url);
    // The Applications are created through the API, none from Git (a Repository without the
    // file is a ConfigFailure and publishes no commit).
    wt.write(".ksync.yaml", "applications: []\n");
    for app in &apps {
        let files = if chaos { crate::chaos::files(app, crate::chaos::Content::default()) } else { app.files() };
        for (path, yaml) in files {
            wt.write(&path, &yaml);
        }
    }
    let commit = wt.commit_and_push(&format!("{} applications", apps.len()));
    say!("git: {} directories pushed to {url}", apps.len());

    // One Pod per Deployment (every `deployment_every`-th Application has one).
    let pods = args.apps.checked_div(args.deployment_every).unwrap_or(0);
    let sim = Server::start(args.cluster, args.kubeconfig.as_deref(), &sim_bin, &dir, pods)?;
    match &sim.process {
        Some(p) => say!("{}: {}, pid {}, log {}", sim.kind, p.name, p.pid(), p.log.display()),
        None => say!("{}: {}", sim.kind, sim.kubeconfig.display()),
    }
    let cluster = Cluster::External { kubeconfig: sim.kubeconfig.clone() };
    let run_id = jiff::Timestamp::now().as_millisecond().to_string();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    // Interrupted, no destructor runs: kill the children here.
    let terminate = {
        let _entered = runtime.enter();
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|source| Error::Start { what: "the SIGTERM handler".into(), source })?
    };
    runtime.spawn(async move {
        let mut terminate = terminate;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate.recv() => {}
        }
        say!("interrupted: stopping the replicas, the server and git daemon");
        fleet::kill_children();
        crate::server::stop_on_interrupt();
        crate::server::cleanup_on_interrupt().await;
        std::process::exit(130);
    });
    let result = runtime.block_on(async {
        let client = cluster.client().await;
        let server_info = crate::server::info(&client, sim.kind).await;
        say!("server: {} {} ({})", server_info.kind, server_info.version, server_info.platform);
        let bindings: Vec<String> = (0..args.replicas).map(|i| format!("ksync-ksync-{i}")).collect();
        if !sim.is_fresh() {
            let mut ours = fleet::namespaces(args.namespaces);
            ours.extend([SYSTEM.to_string(), floor::NAMESPACE.to_string()]);
            let taken = crate::server::taken(&client, &ours).await?;
            if !taken.is_empty() {
                return Err(Error::Cluster(format!(
                    "namespaces {taken:?} exist on this cluster: the load test uses only namespaces it creates \
                     (an earlier run's carry the label {}: delete those)",
                    crate::server::OWNER_LABEL
                )));
            }
            crate::server::clean_up_on_interrupt(client.clone(), run_id.clone(), bindings.clone());
        }
        let mut fleet = Fleet {
            args: args.clone(),
            report: Report::default(),
            // Replaced once the CRDs are installed.
            app_seen: observe::Journal::empty(),
            cm_seen: observe::configmaps(&client),
            lease_seen: observe::shard_leases(&client, SYSTEM),
            renewal_seen: observe::shard_renewals(&client, SYSTEM),
            lease_versions: chaos::lease_versions(&client, SYSTEM),
            cluster_writes: observe::cluster_writes(&client, "team-"),
            client,
            apps,
            server_process: sim.process.as_ref().map(|p| (p.name.clone(), p.pid())),
            server_kind: sim.kind,
            run_id: run_id.clone(),
            replicas: Vec::new(),
            started,
            phases: Vec::new(),
            work_tree: wt,
            kubeconfigs: Vec::new(),
            dir: PathBuf::new(),
            controller_bin: PathBuf::new(),
            webhook_ports: Vec::new(),
        };
        fleet.describe();
        fleet.report.server = server_info;
        let phases = async {
            if !fleet.args.calibration_step.is_zero() {
                fleet.calibrate().await?;
            }
            fleet.set_up(&cluster, &url, &dir, &controller_bin).await?;
            fleet.repositories_resolved(&commit).await?;
            if fleet.args.scale_out {
                fleet.scale_out().await?;
            } else {
                fleet.converge().await?;
            }
            fleet.drift().await?;
            fleet.snapshot("after the edits");
            if !fleet.args.idle.is_zero() {
                fleet.idle().await?;
            }
            if fleet.args.monorepo_commit {
                fleet.monorepo().await?;
            }
            if !fleet.args.chaos_duration.is_zero() {
                fleet.chaos().await?;
                fleet.snapshot("after the chaos");
            }
            if !fleet.args.no_takeover {
                fleet.takeover().await?;
                fleet.snapshot("at the end");
            }
            Ok::<_, Error>(())
        }
        .await;
        // A phase that failed or timed out ends the run, and the report is still written.
        if let Err(e) = &phases {
            say!("stopped early: {e}");
            fleet.report.failure = Some(e.to_string());
            fleet.snapshot("when it stopped");
        }
        fleet.ownership();
        fleet.api_writes().await;
        if !sim.is_fresh() {
            // Someone's cluster: leave nothing of the run's behind (the CRDs stay: others may
            // use them).
            fleet.replicas.clear();
            say!("removing this run's namespaces (label {}={run_id})", crate::server::OWNER_LABEL);
            let left = crate::server::remove_owned(&fleet.client, &run_id, &bindings, Duration::from_secs(300)).await;
            if left > 0 {
                say!("{left} namespaces still terminating");
            }
        }
        Ok::<_, Error>(fleet.report)
    });
    // The replicas died with the fleet; the watches die with the runtime; then the servers.
    drop(runtime);
    drop(sim);
    drop(git);
    if args.logs.is_some() {
        say!("logs kept in {}", dir.display());
    }
    result
}

/// Refuse, before starting anything, a run that needs what only simcluster has on another
/// cluster: rather than doing less than asked.
fn refuse_unsupported(args: &Args) -> Result<()> {
    if args.kubeconfig.is_none() && args.cluster == crate::server::ClusterKind::Simcluster {
        return Ok(());
    }
    let needs = [
        (
            !args.chaos_duration.is_zero(),
            "--chaos-duration (the chaos run) needs simcluster's fault injection and audit log",
        ),
        (
            !args.idle.is_zero(),
            "--idle needs simcluster's count of the replicas' requests by resource and its audit log",
        ),
        (args.monorepo_commit, "--monorepo-commit needs simcluster's audit log (writes by object)"),
    ];
    match needs.iter().find(|(asked, _)| *asked) {
        Some((_, why)) => Err(Error::Cluster(format!("{why}: run it with --cluster simcluster"))),
        None => Ok(()),
    }
}

/// The verbs of `ksync_api_requests_total` that write (`dry_run` apart: nothing stored).
const WRITE_VERBS: &[&str] = &["create", "update", "patch", "delete"];

/// The key of the total in [`Report::requests_per_app`].
pub const ALL: &str = "all";

/// Requests per Application between two counts, by `verb resource`, and their total as
/// [`ALL`].
fn requests_per_app(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
    apps: usize,
) -> BTreeMap<String, f64> {
    #[allow(clippy::cast_precision_loss)]
    let apps = apps.max(1) as f64;
    #[allow(clippy::cast_precision_loss)]
    let mut out: BTreeMap<String, f64> = grown(before, after).into_iter().map(|(k, d)| (k, d as f64 / apps)).collect();
    let all = out.values().sum();
    out.insert(ALL.to_string(), all);
    out
}

/// What grew from `before` to `after`, by how much (counts that did not grow are left out).
fn grown(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(what, n)| (what.clone(), n.saturating_sub(before.get(what).copied().unwrap_or(0))))
        .filter(|(_, d)| *d > 0)
        .collect()
}

/// An audited write as the report counts it: `verb resource`, with ` (dry run)` after the verb.
fn write_kind(e: &simcluster::faults::AuditEvent) -> String {
    format!("{}{} {}", e.verb, if e.dry_run { " (dry run)" } else { "" }, e.resource)
}

impl Fleet {
    fn describe(&mut self) {
        let (cores, memory_gib) = procfs::machine();
        let a = &self.args;
        self.report.machine = Machine { cores, memory_gib };
        self.report.settings = Settings {
            apps: a.apps,
            replicas: a.replicas,
            shards: a.shards,
            namespaces: a.namespaces.max(1),
            deployments: self.apps.iter().filter(|d| d.deployment).count(),
            objects: a.objects,
            edits: a.edits,
            lease_duration_s: a.lease_duration.as_secs_f64(),
            command: std::env::args().collect::<Vec<_>>().join(" "),
            scenario: a.scenario,
            drift_resync_s: a.drift_resync_interval.map_or(300.0, |d| d.as_secs_f64()),
        };
    }

    fn phase(&mut self, name: &str) {
        let load = procfs::load_average().unwrap_or_default();
        say!(
            "== {name} (load average {:.2} {:.2} {:.2}, {:.0} s in)",
            load[0],
            load[1],
            load[2],
            self.started.elapsed().as_secs_f64()
        );
        self.report.load.push((name.to_string(), load));
        self.phases.push((name.to_string(), jiff::Timestamp::now()));
    }

    /// Memory and CPU of every live process now.
    fn usage(&mut self) -> BTreeMap<String, procfs::Usage> {
        let mut out = BTreeMap::new();
        for p in &mut self.replicas {
            if let Some(u) = p.usage() {
                out.insert(p.name.clone(), u);
            }
        }
        if let Some((name, pid)) = &self.server_process
            && let Some(u) = procfs::usage(*pid)
        {
            out.insert(name.clone(), u);
        }
        out
    }

    fn snapshot(&mut self, phase: &str) {
        let processes = self.usage();
        let metrics: BTreeMap<String, BTreeMap<String, f64>> = self
            .replicas
            .iter_mut()
            .filter_map(|p| p.running().then_some(&*p))
            .filter_map(|p| Some((p.name.clone(), crate::metrics::scrape(p.metrics_port?)?)))
            .collect();
        for (name, u) in &processes {
            say!("{phase}: {name} RSS {} KiB, peak {} KiB, {:.1} CPU s", u.rss_kib, u.hwm_kib, u.cpu_s);
        }
        self.report.usage.push(PhaseUsage { phase: phase.to_string(), processes, metrics });
    }

    fn replica_names(&self) -> Vec<String> {
        (0..self.args.replicas).map(|i| format!("ksync-{i}")).collect()
    }

    fn shard_lease_key(k: u32) -> String {
        key(SYSTEM, &sharding::coordinator::Coordinator::shard_lease(LEASE_PREFIX, k))
    }

    /// The holder of every shard Lease, as last seen.
    fn holders(&self) -> BTreeMap<u32, Option<String>> {
        (0..self.args.shards).map(|k| (k, self.lease_seen.current(&Self::shard_lease_key(k)).flatten())).collect()
    }

    async fn set_up(
        &mut self,
        cluster: &Cluster,
        url: &str,
        dir: &std::path::Path,
        bin: &std::path::Path,
    ) -> Result<()> {
        self.phase("set-up");
        testkit::install_crds(&self.client).await;
        crate::server::own_namespace(&self.client, SYSTEM, &self.run_id).await;
        for ns in fleet::namespaces(self.args.namespaces) {
            crate::server::own_namespace(&self.client, &ns, &self.run_id).await;
            testkit::deployer_namespace(&self.client, &ns).await;
            let repo: Repository =
                serde_json::from_value(json!({"apiVersion": names::API_VERSION, "kind": "Repository",
                "metadata": {"name": REPOSITORY, "namespace": ns},
                "spec": {"url": url, "ref": {"branch": "main"}, "interval": self.args.repository_interval}}))
                .expect("a Repository");
            Api::<Repository>::namespaced(self.client.clone(), &ns).create(&PostParams::default(), &repo).await?;
        }
        self.app_seen = observe::applications(&self.client);
        let wait = Duration::from_secs(60);
        for (what, ok) in [
            ("Applications", self.app_seen.wait_synced(wait).await),
            ("ConfigMaps", self.cm_seen.wait_synced(wait).await),
            ("Leases", self.lease_seen.wait_synced(wait).await),
        ] {
            if !ok {
                return Err(Error::Timeout(wait, format!("the watch of {what} to list")));
            }
        }

        self.phase("replicas");
        for name in self.replica_names() {
            let config = testkit::service_account_kubeconfig(cluster, &self.client, dir, SYSTEM, &name).await;
            self.kubeconfigs.push(config);
        }
        self.dir = dir.to_path_buf();
        self.controller_bin = bin.to_path_buf();
        // A scale-out run starts with one replica; the others join later.
        let initial = if self.args.scale_out { 1 } else { self.args.replicas };
        if !self.args.no_webhook && self.args.kubeconfig.is_none() {
            self.webhook_ports = (0..self.args.replicas).map(|_| testkit::free_port()).collect();
        }
        self.report.setup_s = self.start_replicas(initial).await?;
        if !self.webhook_ports.is_empty() {
            self.report.webhook_s = Some(self.install_webhook().await?);
        }
        Ok(())
    }

    /// Install the admission webhook's configuration (as the chart does), reaching the first
    /// replica's webhook, and wait until it labels a new Application (a dry-run create) with
    /// its shard; the seconds that took.
    async fn install_webhook(&mut self) -> Result<f64> {
        let start = Instant::now();
        let url = format!("https://127.0.0.1:{}", self.webhook_ports[0]);
        let yaml = testkit::run(std::process::Command::new(&self.controller_bin).args([
            "webhook-configuration",
            "--name",
            WEBHOOK_CONFIGURATION,
            "--url",
            &url,
        ]));
        let config: serde_json::Value = kuvryn_sync::yaml::from_str(&yaml).map_err(|e| {
            Error::Cluster(format!("the webhook configuration the controller printed does not parse: {e}"))
        })?;
        testkit::apply_as(&self.client, "loadtest", &config).await;
        let probe = AppDef {
            namespace: fleet::namespaces(self.args.namespaces)[0].clone(),
            name: "webhook-probe".into(),
            self_heal: false,
            deployment: false,
            three: false,
            prune: false,
        };
        let probe: Application = serde_json::from_value(probe.object()).expect("an Application");
        let apps: Api<Application> = Api::namespaced(self.client.clone(), &probe.metadata.namespace.clone().unwrap());
        let dry_run = PostParams { dry_run: true, ..Default::default() };
        let wait = Duration::from_secs(120);
        loop {
            let labelled = apps.create(&dry_run, &probe).await.ok().and_then(|a| a.metadata.labels);
            if labelled.is_some_and(|l| l.contains_key(names::labels::SHARD)) {
                break;
            }
            if start.elapsed() > wait {
                return Err(Error::Timeout(wait, "the admission webhook to label a new Application".into()));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let took = start.elapsed().as_secs_f64();
        say!("the admission webhook labels new Applications after {took:.1} s");
        Ok(took)
    }

    /// Start the replicas up to the `upto`-th, then wait until the running ones hold every shard,
    /// split evenly; the seconds that took.
    async fn start_replicas(&mut self, upto: usize) -> Result<f64> {
        let names: Vec<String> = self.replica_names().into_iter().take(upto).collect();
        let start = Instant::now();
        let mut started = Vec::new();
        for i in self.replicas.len()..names.len() {
            let p = self.spawn_replica(i)?;
            say!("{}: pid {}, log {}", p.name, p.pid(), p.log.display());
            started.push(p);
        }
        self.replicas.extend(started);
        // Every shard held, every replica holding floor or ceil of its share.
        let shards = self.args.shards;
        let deadline = start + Duration::from_secs(120).max(self.args.lease_duration * 8);
        let split = self
            .lease_seen
            .until(deadline, |j| {
                let mut per: BTreeMap<String, u32> = names.iter().map(|n| (n.clone(), 0)).collect();
                for k in 0..shards {
                    *per.get_mut(&j.current(&Self::shard_lease_key(k)).flatten()?)? += 1;
                }
                let (lo, hi) = (per.values().min()?, per.values().max()?);
                (hi - lo <= 1).then_some(per)
            })
            .await
            .ok_or_else(|| Error::Timeout(deadline - start, "the replicas to split the shards".into()))?;
        let took = start.elapsed().as_secs_f64();
        say!("shards split {split:?} after {took:.1} s");
        Ok(took)
    }

    /// Start the `i`-th replica as its ServiceAccount.
    fn spawn_replica(&self, i: usize) -> Result<Process> {
        let tools = testkit::repo_root().join("tools/bin");
        let tools = tools.join("helm").is_file().then_some(tools);
        let mut extra = self.args.controller_arg.clone();
        if let Some(d) = self.args.drift_resync_interval {
            extra.push(format!("--drift-resync-interval={}ms", d.as_millis()));
        }
        if let Some(qps) = self.args.kube_api_qps {
            extra.push(format!("--kube-api-qps={qps}"));
        }
        if let Some(port) = self.webhook_ports.get(i) {
            extra.extend([
                format!("--webhook-bind-address=127.0.0.1:{port}"),
                format!("--webhook-namespace={SYSTEM}"),
                format!("--webhook-configuration-name={WEBHOOK_CONFIGURATION}"),
                "--webhook-cert-host=127.0.0.1".to_string(),
                "--webhook-check-interval=1s".to_string(),
            ]);
        }
        let mut log_filter = self.args.controller_log.clone();
        if self.args.takeover_unrequested {
            log_filter.push_str(",kube_runtime::controller=debug");
        }
        let options = fleet::ReplicaOptions {
            bin: &self.controller_bin,
            shards: self.args.shards,
            lease_duration: self.args.lease_duration,
            concurrency: self.args.concurrent_applications,
            log_filter: &log_filter,
            extra: &extra,
            tools: tools.as_deref(),
        };
        fleet::start_replica(&options, &format!("ksync-{i}"), &self.kubeconfigs[i], &self.dir)
    }

    /// Wait until every namespace's Repository has resolved `commit` (the leader's Repository
    /// controller fetches it), so convergence measures Applications, not the first fetch.
    async fn repositories_resolved(&mut self, commit: &str) -> Result<()> {
        let start = Instant::now();
        let repos: Api<Repository> = Api::all(self.client.clone());
        let want = fleet::namespaces(self.args.namespaces).len();
        let wait = Duration::from_secs(120);
        let resolved = |list: &[Repository]| {
            list.iter()
                .filter(|r| r.status.as_ref().and_then(|s| s.revision.as_ref()).is_some_and(|v| v.commit == commit))
                .count()
        };
        loop {
            let list = repos.list(&Default::default()).await?.items;
            if resolved(&list) == want {
                break;
            }
            if start.elapsed() > wait {
                return Err(Error::Timeout(wait, format!("the Repositories to resolve {commit}")));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.report.repositories_s = start.elapsed().as_secs_f64();
        say!("{want} Repositories resolved {commit} after {:.1} s", self.report.repositories_s);
        Ok(())
    }

    async fn converge(&mut self) -> Result<()> {
        self.phase("convergence");
        let requests_before = self.replica_requests().await;
        let writes_before = self.controller_writes();
        let cpu_before = self.replica_cpu_s();
        let first = Instant::now();
        self.report.convergence.started_at_s = first.duration_since(self.started).as_secs_f64();
        let created: HashMap<String, Instant> = futures_util::stream::iter(self.apps.clone())
            .map(|def| {
                let api: Api<Application> = Api::namespaced(self.client.clone(), &def.namespace);
                async move {
                    let app: Application = serde_json::from_value(def.object()).expect("an Application");
                    api.create(&PostParams::default(), &app).await?;
                    Ok::<_, Error>((key(&def.namespace, &def.name), Instant::now()))
                }
            })
            .buffer_unordered(self.args.create_concurrency.max(1))
            .try_collect()
            .await?;
        let create_s = first.elapsed().as_secs_f64();
        say!("{} Applications created in {create_s:.1} s", created.len());
        let keys: Vec<String> = self.apps.iter().map(|d| key(&d.namespace, &d.name)).collect();
        let deadline = first + self.args.timeout;
        let nudge_after = self.args.nudge_after;
        let total = keys.len();
        let (mut unaided, mut nudged) = (None, BTreeSet::new());
        let (mut best, mut progress_at, mut last_said) = (0, Instant::now(), Instant::now());
        let done = loop {
            let outcome = self
                .app_seen
                .until(deadline, |j| {
                    let latest = j.latest();
                    let waiting: Vec<&String> =
                        keys.iter().filter(|k| !latest.get(*k).is_some_and(|(_, s)| s.converged())).collect();
                    let ready = total - waiting.len();
                    if ready > best {
                        (best, progress_at) = (ready, Instant::now());
                    }
                    if last_said.elapsed() > Duration::from_secs(10) {
                        last_said = Instant::now();
                        let some: Vec<String> = waiting
                            .iter()
                            .take(3)
                            .map(|k| format!("{k} {:?}", latest.get(*k).map(|(_, s)| s)))
                            .collect();
                        say!(
                            "{ready}/{total} converged after {:.0} s; waiting for {some:?}",
                            first.elapsed().as_secs_f64()
                        );
                    }
                    if waiting.is_empty() {
                        return Some(Ok(Instant::now()));
                    }
                    let stalled = !nudge_after.is_zero() && progress_at.elapsed() >= nudge_after;
                    stalled.then(|| Err(waiting.into_iter().cloned().collect::<Vec<String>>()))
                })
                .await;
            match outcome {
                Some(Ok(at)) => break Some(at),
                None => break None,
                Some(Err(waiting)) => {
                    unaided.get_or_insert(best);
                    say!(
                        "no progress for {nudge_after:?} at {best}/{total}: asking the {} waiting for a reconcile",
                        waiting.len()
                    );
                    let token = format!("loadtest-nudge-{}", jiff::Timestamp::now());
                    let defs = self.apps.iter().filter(|d| waiting.contains(&key(&d.namespace, &d.name)));
                    self.request_reconcile(defs, &token).await?;
                    nudged.extend(waiting);
                    progress_at = Instant::now();
                }
            }
        };
        let Some(done) = done else {
            let latest = self.app_seen.latest();
            let waiting: Vec<&String> =
                keys.iter().filter(|k| !latest.get(*k).is_some_and(|(_, s)| s.converged())).collect();
            for k in &waiting {
                let seen = match latest.get(*k) {
                    Some((_, s)) => format!(
                        "sync {:?}, health {:?}, ready {}, shard {}",
                        s.sync,
                        s.health,
                        s.ready,
                        if s.shard.is_some() { "labelled" } else { "none" }
                    ),
                    None => "no status".to_string(),
                };
                *self.report.not_converged.entry(seen).or_default() += 1;
            }
            let stuck: Vec<String> =
                waiting.iter().take(5).map(|k| format!("{k}: {:?}", latest.get(*k).map(|(_, s)| s))).collect();
            return Err(Error::Timeout(
                self.args.timeout,
                format!("{} of {total} Applications to converge; e.g. {stuck:?}", waiting.len()),
            ));
        };
        let per_app: Vec<Duration> = keys
            .iter()
            .filter_map(|k| {
                let at = self.app_seen.first_since(k, created[k], AppSeen::converged)?;
                Some(at.saturating_duration_since(created[k]))
            })
            .collect();
        let split = |deployment: bool| {
            let times: Vec<Duration> = self
                .apps
                .iter()
                .filter(|d| d.deployment == deployment)
                .filter_map(|d| {
                    let k = key(&d.namespace, &d.name);
                    let at = self.app_seen.first_since(&k, created[&k], AppSeen::converged)?;
                    Some(at.saturating_duration_since(created[&k]))
                })
                .collect();
            Summary::of(&times)
        };
        let (with_deployment, configmap_only) = (split(true), split(false));
        self.report.convergence = Convergence {
            with_deployment,
            configmap_only,
            started_at_s: self.report.convergence.started_at_s,
            create_s,
            all_ready_s: done.duration_since(first).as_secs_f64(),
            per_app: Summary::of(&per_app),
            unaided: unaided.unwrap_or(total),
            nudged: nudged.len(),
        };
        say!("all {total} converged {:.1} s after the first create", self.report.convergence.all_ready_s);
        self.against_floor("convergence", &self.apps.clone(), self.report.convergence.all_ready_s);
        let writes = self.writes(&writes_before, first, done, total);
        self.report.writes.insert("convergence".into(), writes);
        if let (Some(before), Some(after)) = (requests_before, self.replica_requests().await) {
            self.report.requests_per_app = requests_per_app(&before, &after, total);
            say!("API requests per new Application: {:.1}", self.report.requests_per_app.get(ALL).unwrap_or(&0.0));
        }
        self.report.convergence_cpu_s = self.replica_cpu_s() - cpu_before;
        self.report.ready = self.ready_curve(&created, first);
        self.snapshot("after convergence");

        // Idle: what the processes burn while nothing changes.
        let before = self.usage();
        let t = Instant::now();
        tokio::time::sleep(self.args.settle).await;
        let after = self.usage();
        for (name, b) in &before {
            if let Some(a) = after.get(name) {
                self.report.idle_cpu.insert(name.clone(), procfs::cpu_share(b, a, t.elapsed()));
            }
        }
        say!("idle CPU: {:?}", self.report.idle_cpu);
        Ok(())
    }

    /// Set `sync.kuvryn.io/reconcile-requested-at: token` on every Application of `defs`.
    async fn request_reconcile(&self, defs: impl Iterator<Item = &AppDef>, token: &str) -> Result<()> {
        let patch = json!({"metadata": {"annotations": {names::annotations::RECONCILE_REQUESTED_AT: token}}});
        futures_util::stream::iter(defs.cloned().collect::<Vec<_>>())
            .map(|def| {
                let api: Api<Application> = Api::namespaced(self.client.clone(), &def.namespace);
                let patch = patch.clone();
                async move { api.patch(&def.name, &PatchParams::default(), &Patch::Merge(patch)).await.map(|_| ()) }
            })
            .buffer_unordered(16)
            .try_collect::<()>()
            .await?;
        Ok(())
    }

    /// Shard ownership over the run: Lease renewal gaps from the watch, fence stops and stale
    /// status writes from the replicas' logs.
    fn ownership(&mut self) {
        let d = self.args.lease_duration;
        // Valid until the renewal's send + 2/3 of the duration; the fence wants a tenth of it
        // to spare (`ksync-controller run`).
        let limit = (d * 2 / 3).saturating_sub(d / 10).as_secs_f64();
        let mut gaps = Vec::new();
        for (lease, seen) in self.lease_seen.history() {
            if !lease.contains("-shard-") {
                continue;
            }
            for pair in seen.windows(2) {
                if pair[0].1.is_some() && pair[0].1 == pair[1].1 {
                    gaps.push(pair[1].0.duration_since(pair[0].0).as_secs_f64());
                }
            }
        }
        let o = &mut self.report.ownership;
        o.fence_limit_s = limit;
        o.longest_renewal_gap_s = gaps.iter().copied().fold(0.0, f64::max);
        o.gaps_over_limit = gaps.iter().filter(|g| **g > limit).count();
        let sent: Vec<f64> = self
            .renewal_seen
            .history()
            .into_values()
            .flat_map(|seen| observe::renew_time_gaps(&seen.into_iter().map(|(_, v)| v).collect::<Vec<_>>()))
            .collect();
        o.longest_renew_time_gap_s = sent.iter().copied().fold(0.0, f64::max);
        o.renew_time_gaps_over_limit = sent.iter().filter(|g| **g > limit).count();
        for p in &self.replicas {
            // A replica the chaos run restarted left its earlier logs as `<log>.<n>`.
            let earlier = (1..).map(|n| p.log.with_extension(format!("log.{n}"))).take_while(|l| l.exists());
            let log: String = std::iter::once(p.log.clone())
                .chain(earlier)
                .map(|l| std::fs::read_to_string(l).unwrap_or_default())
                .collect();
            o.fence_stops.insert(p.name.clone(), log.matches("no longer owns the Application's shard").count());
            o.stale_status_writes.insert(p.name.clone(), log.matches("status computed from a stale copy").count());
        }
    }

    /// CPU seconds of the replicas running now.
    fn replica_cpu_s(&mut self) -> f64 {
        self.replicas.iter_mut().filter_map(Process::usage).map(|u| u.cpu_s).sum()
    }

    /// When each Application first converged after its create, seconds after `first`, by the
    /// replica holding its shard now.
    fn ready_curve(&self, created: &HashMap<String, Instant>, first: Instant) -> BTreeMap<String, Vec<f64>> {
        let holders = self.holders();
        let mut out: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for def in &self.apps {
            let k = key(&def.namespace, &def.name);
            let Some(at) = created.get(&k).and_then(|c| self.app_seen.first_since(&k, *c, AppSeen::converged)) else {
                continue;
            };
            let owner = holders.get(&def.shard(self.args.shards)).cloned().flatten().unwrap_or_else(|| "none".into());
            out.entry(owner).or_default().push(at.saturating_duration_since(first).as_secs_f64());
        }
        out
    }

    /// The phase `phase` that converged `apps` in `took_s` against the floor rate.
    fn against_floor(&mut self, phase: &str, apps: &[AppDef], took_s: f64) {
        let Some(per_s) = self.report.floor.as_ref().map(|f| f.per_s) else { return };
        let needed = apps.iter().map(|a| a.files().len()).sum();
        if let Some(r) = crate::floor::ratio(took_s, needed, per_s) {
            say!(
                "{phase}: {took_s:.1} s for {needed} applies at {per_s:.0}/s ({:.1} s): ratio {:.2}",
                r.floor_s,
                r.ratio
            );
            self.report.floor_ratio.insert(phase.to_string(), r);
        }
    }

    /// The running replicas' write requests so far (their `/metrics`), by verb.
    fn controller_writes(&mut self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for p in self.replicas.iter_mut().filter_map(|p| p.running().then_some(&*p)) {
            let Some(m) = p.metrics_port.and_then(crate::metrics::scrape) else { continue };
            for verb in WRITE_VERBS {
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let n = m.get(&format!("ksync_api_requests_total{{{verb}}}")).copied().unwrap_or(0.0) as u64;
                *out.entry((*verb).to_string()).or_default() += n;
            }
        }
        out
    }

    /// The controller's writes since `before` and the cluster's own from `from` to `to`, for
    /// `apps` Applications.
    fn writes(&mut self, before: &BTreeMap<String, u64>, from: Instant, to: Instant, apps: usize) -> Writes {
        let controller = grown(before, &self.controller_writes());
        let cluster = self.cluster_writes.between(from, to);
        let (c, k) = (controller.values().sum::<u64>(), cluster.values().sum::<u64>());
        #[allow(clippy::cast_precision_loss)]
        let per = |n: u64| n as f64 / apps.max(1) as f64;
        say!("writes: controller {c} ({:.1} per Application), cluster's own {k} ({:.1})", per(c), per(k));
        Writes {
            controller_per_app: per(c),
            cluster_per_app: per(k),
            controller_total: c,
            cluster_total: k,
            controller,
            cluster,
        }
    }

    /// The replicas' requests (reads too) by `verb resource` (with ` (dry run)`): simcluster's
    /// count; on another server, the replicas' own count by verb (`ksync_api_requests_total`),
    /// as `verb *`. `None` when it cannot be read.
    async fn replica_requests(&mut self) -> Option<BTreeMap<String, u64>> {
        if self.server_kind != "simcluster" {
            let mut out = BTreeMap::new();
            for p in self.replicas.iter_mut().filter_map(|p| p.running().then_some(&*p)) {
                let Some(m) = p.metrics_port.and_then(crate::metrics::scrape) else { continue };
                for (k, v) in m {
                    if let Some(verb) = k.strip_prefix("ksync_api_requests_total{").and_then(|v| v.strip_suffix('}')) {
                        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                        let n = v as u64;
                        *out.entry(format!("{verb} *")).or_default() += n;
                    }
                }
            }
            return Some(out);
        }
        let request = http::Request::get("/simcluster/v1/requests").body(Vec::new()).expect("a request");
        let text = self.client.request_text(request).await.map_err(|e| say!("reading request counts: {e}")).ok()?;
        let counts: Vec<simcluster::faults::RequestCount> =
            serde_json::from_str(&text).map_err(|e| say!("reading request counts: {e}")).ok()?;
        let mut out = BTreeMap::new();
        let replica = format!("system:serviceaccount:{SYSTEM}:");
        for c in counts.iter().filter(|c| c.client.starts_with(&replica)) {
            let what = format!("{} {}{}", c.verb, c.resource, if c.dry_run { " (dry run)" } else { "" });
            *out.entry(what).or_default() += c.count;
        }
        Some(out)
    }

    /// simcluster's audit log (every write, dry runs included); `None` when it cannot be read.
    async fn audit(&self) -> Option<Vec<simcluster::faults::AuditEvent>> {
        let request = http::Request::get("/simcluster/v1/audit").body(Vec::new()).expect("a request");
        match self.client.request_text(request).await.map(|t| serde_json::from_str(&t)) {
            Ok(Ok(events)) => Some(events),
            Ok(Err(e)) => {
                say!("reading the audit log: {e}");
                None
            }
            Err(e) => {
                say!("reading the audit log: {e}");
                None
            }
        }
    }

    /// The sum over the running replicas of one series of their `/metrics` (as
    /// `metrics::parse` names it).
    fn replica_metric(&mut self, series: &str) -> f64 {
        self.replicas
            .iter_mut()
            .filter_map(|p| p.running().then_some(&*p))
            .filter_map(|p| crate::metrics::scrape(p.metrics_port?))
            .map(|m| m.get(series).copied().unwrap_or(0.0))
            .sum()
    }

    /// simcluster's audit log counted by phase and by `verb resource`.
    async fn api_writes(&mut self) {
        // Another server's audit log is not the load test's to read (the cluster's own writes
        // are counted from watches instead: `Report::writes`).
        if self.server_kind != "simcluster" {
            return;
        }
        let Some(events) = self.audit().await else { return };
        for e in events {
            let Ok(at) = e.time.parse::<jiff::Timestamp>() else { continue };
            let Some((phase, _)) = self.phases.iter().rev().find(|(_, start)| *start <= at) else { continue };
            let what = write_kind(&e);
            *self.report.api_writes.entry(phase.clone()).or_default().entry(what).or_default() += 1;
        }
    }

    /// Merge-patch the edited key of `def`'s ConfigMap to `value` as `kubectl-edit` would.
    async fn edit(&self, def: &AppDef, value: &str) -> Result<()> {
        let cms: Api<ConfigMap> = Api::namespaced(self.client.clone(), &def.namespace);
        let params = PatchParams { field_manager: Some("kubectl-edit".into()), ..Default::default() };
        cms.patch(&def.name, &params, &Patch::Merge(json!({"data": {observe::EDITED_KEY: value}}))).await?;
        Ok(())
    }

    async fn drift(&mut self) -> Result<()> {
        self.phase("drift");
        let sample = fleet::edit_sample(&self.apps, self.args.edits);
        let timeout = self.args.edit_timeout;
        let mut drift = Drift::default();
        let (mut detected, mut cleared, mut repaired) = (Vec::new(), Vec::new(), Vec::new());
        for (n, i) in sample.iter().enumerate() {
            let def = self.apps[*i].clone();
            let k = key(&def.namespace, &def.name);
            // Start from a converged Application (the previous edit may still be settling).
            let settled =
                self.app_seen.until(Instant::now() + timeout, |j| j.current(&k).filter(AppSeen::converged)).await;
            if settled.is_none() {
                say!("{k}: not converged before its edit ({:?}); skipped", self.app_seen.current(&k));
                drift.missed += 1;
                continue;
            }
            let owner = self
                .lease_seen
                .current(&Self::shard_lease_key(def.shard(self.args.shards)))
                .flatten()
                .unwrap_or_else(|| "none".into());
            *drift.per_replica.entry(owner).or_default() += 1;
            let before = Instant::now();
            self.edit(&def, &format!("edited-{n}")).await?;
            let sent = Instant::now();
            let deadline = sent + timeout;
            if def.self_heal {
                let at = self
                    .cm_seen
                    .until(deadline, |j| j.first_since(&k, before, |v| v.as_deref() == Some(GIT_VALUE)))
                    .await;
                match at {
                    Some(at) => repaired.push(self.sample(&mut drift, &def, sent, at)),
                    None => {
                        say!("{k}: not repaired within {timeout:?}");
                        drift.missed += 1;
                    }
                }
                if self.app_seen.first_since(&k, before, |s| s.sync == Some(SyncState::Drifted)).is_some() {
                    drift.repaired_showing_drifted += 1;
                }
            } else {
                let at = self
                    .app_seen
                    .until(deadline, |j| j.first_since(&k, before, |s| s.sync == Some(SyncState::Drifted)))
                    .await;
                match at {
                    Some(at) => detected.push(self.sample(&mut drift, &def, sent, at)),
                    None => {
                        say!("{k}: no Drifted within {timeout:?}");
                        drift.missed += 1;
                    }
                }
                let undo = Instant::now();
                self.edit(&def, GIT_VALUE).await?;
                let undone = Instant::now();
                let at = self
                    .app_seen
                    .until(undone + timeout, |j| j.first_since(&k, undo, |s| s.sync == Some(SyncState::Synced)))
                    .await;
                if let Some(at) = at {
                    cleared.push(at.saturating_duration_since(undone));
                }
            }
            if (n + 1) % 20 == 0 {
                say!(
                    "{} edits: detected {}, repaired {}",
                    n + 1,
                    Summary::of(&detected).cell_ms(),
                    Summary::of(&repaired).cell_ms()
                );
            }
        }
        drift.detected = Summary::of(&detected);
        drift.cleared = Summary::of(&cleared);
        drift.repaired = Summary::of(&repaired);
        say!(
            "drift detected {}, repaired {}, missed {}",
            drift.detected.cell_ms(),
            drift.repaired.cell_ms(),
            drift.missed
        );
        self.report.drift = drift;
        Ok(())
    }

    /// Record one edit's latency (from `sent` to `at`) with when it happened.
    fn sample(&self, drift: &mut Drift, def: &AppDef, sent: Instant, at: Instant) -> Duration {
        let latency = at.saturating_duration_since(sent);
        let at_s = sent.duration_since(self.started).as_secs_f64();
        if latency > Duration::from_secs(1) {
            say!("{}/{}: {:.0} ms (edit at {at_s:.0} s)", def.namespace, def.name, latency.as_secs_f64() * 1e3);
        }
        drift.samples.push(EditSample {
            at_s,
            application: key(&def.namespace, &def.name),
            self_heal: def.self_heal,
            latency_ms: latency.as_secs_f64() * 1e3,
        });
        latency
    }

    async fn takeover(&mut self) -> Result<()> {
        self.phase("takeover");
        let before = self.holders();
        let mut count: BTreeMap<String, usize> = BTreeMap::new();
        for h in before.values().flatten() {
            *count.entry(h.clone()).or_default() += 1;
        }
        let names = self.replica_names();
        let leader = Api::<Lease>::namespaced(self.client.clone(), SYSTEM)
            .get_opt(&format!("{LEASE_PREFIX}-leader"))
            .await?
            .and_then(|l| l.spec?.holder_identity);
        let victim = if self.args.kill_leader {
            leader.clone().filter(|l| names.contains(l))
        } else {
            names.iter().max_by_key(|n| (count.get(*n).copied().unwrap_or(0), std::cmp::Reverse(*n))).cloned()
        };
        let Some(victim) = victim else { return Ok(()) };
        let shards: BTreeSet<u32> =
            before.iter().filter(|(_, h)| h.as_deref() == Some(victim.as_str())).map(|(k, _)| *k).collect();
        let apps: Vec<AppDef> =
            self.apps.iter().filter(|d| shards.contains(&d.shard(self.args.shards))).cloned().collect();
        say!("killing {victim} (shards {shards:?}, {} Applications; leader {leader:?})", apps.len());

        let (killed, killed_at) = (Instant::now(), jiff::Timestamp::now());
        if let Some(p) = self.replicas.iter_mut().find(|p| p.name == victim) {
            p.kill();
        }
        let token = format!("takeover-{}", jiff::Timestamp::now());
        let requested = !self.args.takeover_unrequested;
        if requested {
            self.request_reconcile(apps.iter(), &token).await?;
            say!("{} Applications annotated {:.1} s after the kill", apps.len(), killed.elapsed().as_secs_f64());
        }

        let deadline = killed + Duration::from_secs(120).max(self.args.lease_duration * 8);
        let lease_keys: Vec<String> = shards.iter().map(|k| Self::shard_lease_key(*k)).collect();
        let leases_at = self
            .lease_seen
            .until(deadline, |j| {
                lease_keys
                    .iter()
                    .map(|lk| j.first_since(lk, killed, |h| h.as_ref().is_some_and(|h| *h != victim)))
                    .collect::<Option<Vec<Instant>>>()
                    .and_then(|v| v.into_iter().max())
            })
            .await;
        let keys: Vec<String> = apps.iter().map(|d| key(&d.namespace, &d.name)).collect();
        let times: Vec<Duration> = if requested {
            let handled = |s: &AppSeen| s.handled.as_deref() == Some(token.as_str());
            let mut last_said = Instant::now();
            let all = self
                .app_seen
                .until(deadline, |j| {
                    let times: Vec<Option<Instant>> = keys.iter().map(|k| j.first_since(k, killed, handled)).collect();
                    if last_said.elapsed() > Duration::from_secs(5) {
                        last_said = Instant::now();
                        let n = times.iter().flatten().count();
                        say!("{n}/{} reconciled after {:.0} s", keys.len(), killed.elapsed().as_secs_f64());
                    }
                    times.into_iter().collect::<Option<Vec<Instant>>>()
                })
                .await;
            match all {
                Some(t) => t.into_iter().map(|at| at.saturating_duration_since(killed)).collect(),
                None => keys
                    .iter()
                    .filter_map(|k| self.app_seen.first_since(k, killed, handled))
                    .map(|at| at.saturating_duration_since(killed))
                    .collect(),
            }
        } else {
            self.reconciled_in_logs(&victim, &apps, killed_at, deadline).await
        };
        let after = self.holders();
        let takeover = Takeover {
            victim_was_leader: leader.as_deref() == Some(victim.as_str()),
            shards: shards.iter().copied().collect(),
            apps: apps.len(),
            leases_s: leases_at.map(|at| at.saturating_duration_since(killed).as_secs_f64()),
            missed: apps.len() - times.len(),
            reconciled: Summary::of(&times),
            target_s: self.args.lease_duration.as_secs_f64() + 5.0,
            shards_moved: before.iter().filter(|(k, h)| after.get(k) != Some(h)).count(),
            requested,
            victim,
        };
        say!(
            "takeover: leases {:?} s, reconciled {} ({} missed), {} shards moved",
            takeover.leases_s,
            takeover.reconciled.cell_s(),
            takeover.missed,
            takeover.shards_moved
        );
        self.report.takeover = Some(takeover);
        Ok(())
    }

    /// From `killed_at` until each of `apps` was first reconciled by a replica other than
    /// `victim`, from their logs (the Application controller logs `reconciled` once a reconcile
    /// returns, inside `kube_runtime::controller`'s span that names the object), read every
    /// second until all are there or `deadline`.
    async fn reconciled_in_logs(
        &self,
        victim: &str,
        apps: &[AppDef],
        killed_at: jiff::Timestamp,
        deadline: Instant,
    ) -> Vec<Duration> {
        let wanted: HashMap<String, usize> =
            apps.iter().enumerate().map(|(i, d)| (format!("/{}.{}", d.name, d.namespace), i)).collect();
        let mut first: Vec<Option<Duration>> = vec![None; apps.len()];
        let mut last_said = Instant::now();
        let survivors: Vec<_> = self.replicas.iter().filter(|p| p.name != victim).collect();
        let mut read = vec![0; survivors.len()];
        loop {
            for (p, offset) in survivors.iter().zip(&mut read) {
                let log = new_lines(&p.log, offset);
                for line in log.lines().filter(|l| l.contains("reconciled")) {
                    let Some((at, i)) = reconciled_line(&without_colours(line), &wanted) else { continue };
                    let Ok(since) = Duration::try_from(at.duration_since(killed_at)) else { continue };
                    if first[i].is_none_or(|f| since < f) {
                        first[i] = Some(since);
                    }
                }
            }
            let n = first.iter().flatten().count();
            if n == apps.len() || Instant::now() >= deadline {
                return first.into_iter().flatten().collect();
            }
            if last_said.elapsed() > Duration::from_secs(5) {
                last_said = Instant::now();
                say!("{n}/{} reconciled by a survivor (logs)", apps.len());
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// The complete lines written to `path` since byte `offset`, which moves past them: the logs
/// grow to megabytes while the takeover they measure runs, and are not read again from the
/// start every second. A line still being written is left for the next call.
fn new_lines(path: &std::path::Path, offset: &mut u64) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else { return String::new() };
    let mut bytes = Vec::new();
    if f.seek(SeekFrom::Start(*offset)).is_err() || f.read_to_end(&mut bytes).is_err() {
        return String::new();
    }
    let Some(end) = bytes.iter().rposition(|b| *b == b'\n') else { return String::new() };
    bytes.truncate(end + 1);
    *offset += bytes.len() as u64;
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `line` without terminal colour sequences.
fn without_colours(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A replica's log line of a reconcile that returned: when, and which of `wanted` (by
/// `/<name>.<namespace>`, the tail of kube's object reference) it was for.
fn reconciled_line(line: &str, wanted: &HashMap<String, usize>) -> Option<(jiff::Timestamp, usize)> {
    if !line.contains("reconciled result=") {
        return None;
    }
    let at: jiff::Timestamp = line.split_whitespace().next()?.parse().ok()?;
    let r = line.split("object.ref=").nth(1)?;
    let r = r.split(|c: char| c.is_whitespace() || c == '}' || c == ',').next()?;
    let tail = &r[r.find('/')?..];
    Some((at, *wanted.get(tail)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_is_read_once_and_a_line_only_when_complete() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ksync.log");
        let mut f = std::fs::File::create(&path).unwrap();
        let mut offset = 0;
        assert_eq!(new_lines(&dir.path().join("absent.log"), &mut offset), "");
        write!(f, "one\ntw").unwrap();
        assert_eq!(new_lines(&path, &mut offset), "one\n");
        assert_eq!(new_lines(&path, &mut offset), "", "a line being written waits");
        write!(f, "o\nthree\n").unwrap();
        assert_eq!(new_lines(&path, &mut offset), "two\nthree\n");
        assert_eq!(new_lines(&path, &mut offset), "");
        assert_eq!(offset, std::fs::metadata(&path).unwrap().len());
    }

    #[test]
    fn a_reconcile_is_found_in_a_replica_log_line() {
        let wanted: HashMap<String, usize> = [("/app-7.team-1".to_string(), 3)].into();
        // As a replica logs it (kube_runtime's span, the Application controller's event).
        let line = "\x1b[2m2026-12-06T17:30:01.5Z\x1b[0m \x1b[34mDEBUG\x1b[0m reconciling object{\x1b[3mobject.ref\x1b[0m\x1b[2m=\x1b[0mApplication.v1alpha1.sync.kuvryn.io/app-7.team-1 \x1b[3mobject.reason\x1b[0m\x1b[2m=\x1b[0mobject updated}:reconcile{\x1b[3mapplication\x1b[0m\x1b[2m=\x1b[0mapp-7}: \x1b[2mkuvryn_sync::controller::application::run\x1b[0m\x1b[2m:\x1b[0m reconciled \x1b[3mresult\x1b[0m\x1b[2m=\x1b[0m\"ok\"";
        let plain = without_colours(line);
        let (at, i) = reconciled_line(&plain, &wanted).expect("found");
        assert_eq!((at.to_string().as_str(), i), ("2026-12-06T17:30:01.5Z", 3));
        let other = plain.replace("app-7.team-1", "app-70.team-1");
        assert!(reconciled_line(&other, &wanted).is_none());
        // The span alone (a reconcile starting, or any other event in it) is no reconcile done.
        let started = plain.replace("reconciled result=", "planning");
        assert!(reconciled_line(&started, &wanted).is_none());
    }

    #[test]
    fn requests_per_application_count_only_what_grew() {
        let before: BTreeMap<String, u64> = [("get revisions".into(), 10), ("update leases".into(), 5)].into();
        let after: BTreeMap<String, u64> =
            [("get revisions".into(), 30), ("update leases".into(), 5), ("patch configmaps".into(), 10)].into();
        assert_eq!(grown(&before, &after), [("get revisions".into(), 20), ("patch configmaps".into(), 10)].into());
        let per = requests_per_app(&before, &after, 10);
        assert_eq!((per["get revisions"], per["patch configmaps"], per[ALL]), (2.0, 1.0, 3.0));
        assert!(!per.contains_key("update leases"));
    }
}
