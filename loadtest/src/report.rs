//! The figures of one run, as data (printed as JSON with `--json`) and as a Markdown table.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use crate::procfs::Usage;
use crate::stats::Summary;

/// Everything one run measured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    /// What was run.
    pub settings: Settings,
    /// The API server it ran on: kind (`simcluster`, `realkube`, `kubeconfig`) and version.
    pub server: crate::server::ServerInfo,
    /// The server's Server-Side Apply rate for objects like the fleet's, measured before it.
    pub floor: Option<crate::floor::Floor>,
    /// Each converging phase against the floor: time ÷ (applies needed ÷ floor rate).
    pub floor_ratio: BTreeMap<String, crate::floor::Ratio>,
    /// Each converging phase's writes: the controller's and the cluster's own.
    pub writes: BTreeMap<String, Writes>,
    /// Where: CPU cores and memory.
    pub machine: Machine,
    /// The load average (1, 5, 15 minutes) at the start of each phase: other work on the machine
    /// shows here.
    pub load: Vec<(String, [f64; 3])>,
    /// From the replicas' start until they held every shard, split evenly.
    pub setup_s: f64,
    /// Then until the admission webhook labelled a new Application with its shard (`None`: not
    /// installed).
    pub webhook_s: Option<f64>,
    /// Then until every Repository had resolved the pushed commit.
    pub repositories_s: f64,
    /// Creating the Applications and waiting until all are Synced, Healthy and Ready.
    pub convergence: Convergence,
    /// Share of one core each process used while nothing changed.
    pub idle_cpu: BTreeMap<String, f64>,
    /// Hand edits.
    pub drift: Drift,
    /// Memory and CPU of each process, by phase.
    pub usage: Vec<PhaseUsage>,
    /// SIGKILL of one replica.
    pub takeover: Option<Takeover>,
    /// Shard ownership over the whole run.
    pub ownership: Ownership,
    /// The replicas' API requests (reads too, as simcluster counted them) from the first
    /// create until every Application converged, per Application, by `verb resource` (` (dry
    /// run)` apart), and in all under `all`. Lease renewals and watches of the period are in it.
    pub requests_per_app: BTreeMap<String, f64>,
    /// simcluster's audit log: writes (dry runs included) by phase, then by `verb resource`.
    pub api_writes: BTreeMap<String, BTreeMap<String, usize>>,
    /// When each Application first converged (seconds after the first create), by the replica
    /// holding its shard at the end of convergence: the plot's data.
    pub ready: BTreeMap<String, Vec<f64>>,
    /// CPU seconds the replicas used from the first create until every Application converged.
    pub convergence_cpu_s: f64,
    /// The quiet window (`--idle`), when run.
    pub idle: Option<Idle>,
    /// The monorepo commit (`--monorepo-commit`), when run.
    pub monorepo: Option<Monorepo>,
    /// One replica against all of them (`--scale-out`), when run.
    pub scale_out: Option<ScaleOut>,
    /// The chaos run (`--chaos-duration`), when run.
    pub chaos: Option<Chaos>,
    /// Why the run stopped early (a phase timed out or failed); the figures before it stand.
    pub failure: Option<String>,
    /// At a convergence timeout: the Applications not converged, counted by what was last seen
    /// of them (sync, health, Ready, shard).
    pub not_converged: BTreeMap<String, usize>,
}

/// The writes of a phase, by who made them.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Writes {
    /// The replicas' write requests (their `ksync_api_requests_total`: create, update, patch,
    /// delete, impersonated ones included; dry runs apart), by verb.
    pub controller: BTreeMap<String, u64>,
    /// Their sum.
    pub controller_total: u64,
    /// Per Application.
    pub controller_per_app: f64,
    /// The cluster's own controllers' and kubelets' stored writes in the fleet's namespaces, by
    /// resource, from watch events (`observe::cluster_writes`).
    pub cluster: BTreeMap<String, u64>,
    /// Their sum.
    pub cluster_total: u64,
    /// Per Application.
    pub cluster_per_app: f64,
}

/// The run's parameters.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Settings {
    /// Applications.
    pub apps: usize,
    /// Replicas.
    pub replicas: usize,
    /// Shards.
    pub shards: u32,
    /// Namespaces.
    pub namespaces: usize,
    /// Applications that also run a Deployment with a Pod.
    pub deployments: usize,
    /// What each Application deploys.
    pub objects: crate::fleet::Objects,
    /// Edits timed.
    pub edits: usize,
    /// Lease duration, seconds.
    pub lease_duration_s: f64,
    /// The command line.
    pub command: String,
    /// `--scenario`, when given.
    pub scenario: Option<crate::scenario::Scenario>,
    /// `--drift-resync-interval` of the replicas, seconds (the controller's 300 when not given).
    pub drift_resync_s: f64,
}

/// A quiet window with nothing changing.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Idle {
    /// Its length, seconds.
    pub window_s: f64,
    /// The replicas' requests per Application per drift resync interval, Leases apart.
    pub requests_per_app_per_resync: f64,
    /// Those requests by `verb resource`, in all over the window.
    pub requests: BTreeMap<String, u64>,
    /// Lease requests (renewals, their reads) over the window: the replicas' heartbeat.
    pub lease_requests: u64,
    /// The controllers' writes other than Leases (simcluster's audit log), over the window.
    pub writes: BTreeMap<String, usize>,
    /// Those writes per hour.
    pub writes_per_hour: f64,
}

/// One commit changing one Application's path in a repository of many.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Monorepo {
    /// Applications in the repository.
    pub apps: usize,
    /// From the push until every Application desired the new commit and had converged.
    pub settled_s: f64,
    /// Renders the replicas ran for it (render cache misses).
    pub renders: f64,
    /// Writes by `verb resource` (simcluster's audit log) from the push until settled.
    pub writes: BTreeMap<String, usize>,
    /// Writes of the Applications the commit did not touch, per Application (Leases apart).
    pub unaffected_writes_per_app: f64,
    /// Server-side dry runs of their objects.
    pub unaffected_dry_runs: usize,
}

/// The same work on one replica, then on all of them (`--scale-out`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct ScaleOut {
    /// `--kube-api-qps` of every replica (`None`: the controller's default).
    pub budget_qps: Option<f64>,
    /// Half the Applications, on one replica.
    pub one: Batch,
    /// The other half, on all the replicas.
    pub many: Batch,
    /// From starting the other replicas until they held their shards and had reconciled the
    /// Applications that moved to them, seconds.
    pub joined_s: f64,
    /// Applications per second on all the replicas over on one.
    pub ratio: f64,
}

/// Applications created at once and converged on a given number of replicas.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Batch {
    /// Replicas running.
    pub replicas: usize,
    /// Applications created.
    pub apps: usize,
    /// Creating them (the API calls alone), seconds.
    pub create_s: f64,
    /// From the first create until every one was Synced, Healthy and Ready, seconds.
    pub all_ready_s: f64,
    /// Throughput: Applications over `all_ready_s`.
    pub per_s: f64,
    /// When each converged, seconds after the first create.
    pub ready: Summary,
    /// The replicas' requests per Application (simcluster's count, reads too).
    pub requests_per_app: f64,
    /// Those requests by `verb resource`.
    pub requests: BTreeMap<String, u64>,
    /// The replicas' CPU per Application, milliseconds.
    pub cpu_ms_per_app: f64,
}

/// Commits, SIGKILLs and API faults for a while, and what was lost (`--chaos-duration`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Chaos {
    /// How long commits, kills and faults went on, seconds.
    pub duration_s: f64,
    /// `--chaos-seed`.
    pub seed: u64,
    /// Each SIGKILL: seconds into the chaos, the replica, whether it led.
    pub kills: Vec<(f64, String, bool)>,
    /// Faults injected, by kind.
    pub faults: BTreeMap<String, usize>,
    /// Commits pushed during the chaos.
    pub commits: usize,
    /// Application changes they made (an Application changed by a commit).
    pub changes: usize,
    /// Changes whose Application was first seen converged at a later commit than theirs.
    pub superseded: usize,
    /// Changes never seen deployed (goal 0), and some of them as `Application (count)`.
    pub never_deployed: usize,
    /// Some of the changes never deployed.
    pub never_deployed_examples: Vec<String>,
    /// Applications not Synced, Healthy and Ready at Git's last commit 2 Lease durations after
    /// the last fault (goal 0).
    pub not_converged_after_two_leases: usize,
    /// From the last fault until every Application converged at the last commit, seconds (`None`:
    /// not within `--timeout`).
    pub converged_after_s: Option<f64>,
    /// Push to deployed, over every deployed change (p50 / p90 / p99 / max).
    pub commit_to_deployed: Summary,
    /// Objects Git declares that are missing or differ at the end, and deletes of declared
    /// objects before the push that removed them (goal 0).
    pub wrongly_pruned_or_missing: usize,
    /// Some of them.
    pub wrongly_pruned_or_missing_examples: Vec<String>,
    /// Objects removed from Git still there at the end (goal 0).
    pub not_pruned: usize,
    /// Writes by a replica to an object of a shard whose Lease it did not hold then (goal 0).
    pub unheld_shard_writes: usize,
    /// Writes of leader-only work by a replica not holding the leader Lease then (goal 0).
    pub unheld_leader_writes: usize,
    /// Some of both (half of each kind at most).
    pub unheld_examples: Vec<String>,
    /// Replica writes checked against shard Leases / against the leader Lease.
    pub checked_writes: (usize, usize),
    /// Replica writes that are neither (not checked), by `verb resource`.
    pub unattributed_writes: BTreeMap<String, usize>,
    /// Lease writes whose holder the load test's watch did not see (taken as a renewal by the
    /// writer).
    pub lease_writes_unseen: usize,
    /// Whether simcluster's audit log had dropped its oldest events (the check then starts a
    /// Lease duration after its first one).
    pub audit_truncated: bool,
}

impl Chaos {
    /// The five counts whose goal is 0.
    pub fn losses(&self) -> usize {
        self.never_deployed
            + self.wrongly_pruned_or_missing
            + self.not_pruned
            + self.unheld_shard_writes
            + self.unheld_leader_writes
            + self.not_converged_after_two_leases
    }
}

/// The machine.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Machine {
    /// CPU cores.
    pub cores: usize,
    /// Memory, GiB.
    pub memory_gib: f64,
}

/// Convergence of the fleet.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Convergence {
    /// When the first create was sent, seconds from the start of the run.
    pub started_at_s: f64,
    /// Creating every Application (the API calls alone).
    pub create_s: f64,
    /// From the first create until every Application was Synced, Healthy and Ready.
    pub all_ready_s: f64,
    /// Per Application, from its create to its first Synced+Healthy+Ready status.
    pub per_app: Summary,
    /// Applications converged when progress first stalled for `--nudge-after` (all of them
    /// when it never did).
    pub unaided: usize,
    /// Applications asked for a reconcile because they stalled.
    pub nudged: usize,
    /// `per_app` of the Applications with a Deployment only.
    pub with_deployment: Summary,
    /// `per_app` of the Applications with a ConfigMap only.
    pub configmap_only: Summary,
}

/// What the replicas' logs and Leases say about shard ownership.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Ownership {
    /// Longest time between two renewals of one shard Lease by the same holder, seconds (a
    /// replica's fence fails once it exceeds `fence_limit_s`).
    pub longest_renewal_gap_s: f64,
    /// The fence's limit for that gap: 2/3 of the lease duration (the Lease's validity after a
    /// renewal is sent) minus the fence's spare, a tenth of it.
    pub fence_limit_s: f64,
    /// Renewal gaps over the limit.
    pub gaps_over_limit: usize,
    /// The same gaps from the Leases' `renewTime`s (when each holder sent its renewal, by its
    /// clock) rather than from when the load test's watch saw them: a watch that lags behind a
    /// busy server shows gaps the replicas did not make.
    pub longest_renew_time_gap_s: f64,
    /// Of those, over the limit.
    pub renew_time_gaps_over_limit: usize,
    /// By replica: reconciles that stopped because the fence said the shard was not owned
    /// (`this replica no longer owns the Application's shard` in its log, at debug level; a
    /// reconcile refused at its start is not logged).
    pub fence_stops: BTreeMap<String, usize>,
    /// By replica: status writes refused as computed from a stale copy (409).
    pub stale_status_writes: BTreeMap<String, usize>,
}

/// Drift detection and repair.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Drift {
    /// Without selfHeal: from the edit's response to the Application's `Drifted`.
    pub detected: Summary,
    /// Without selfHeal: from undoing the edit to the Application's `Synced`.
    pub cleared: Summary,
    /// With selfHeal: from the edit's response to the ConfigMap holding Git's value again.
    pub repaired: Summary,
    /// With selfHeal: edits whose Application showed `Drifted` on the way.
    pub repaired_showing_drifted: usize,
    /// Edits not detected or repaired within `--edit-timeout`.
    pub missed: usize,
    /// Edits by the replica owning the Application's shard at the time.
    pub per_replica: BTreeMap<String, usize>,
    /// Every edit seen: when, which, how long.
    pub samples: Vec<EditSample>,
}

/// One timed edit.
#[derive(Clone, Debug, Default, Serialize)]
pub struct EditSample {
    /// When the edit's response came, seconds from the start of the run.
    pub at_s: f64,
    /// `namespace/name`.
    pub application: String,
    /// Repaired (selfHeal) rather than reported.
    pub self_heal: bool,
    /// Edit to `Drifted` (reported) or to the ConfigMap restored (repaired), milliseconds.
    pub latency_ms: f64,
}

/// Memory and CPU of every process at the end of a phase.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PhaseUsage {
    /// The phase.
    pub phase: String,
    /// By process name.
    pub processes: BTreeMap<String, Usage>,
    /// By replica: its `/metrics` (cumulative since it started; see `metrics::KEPT`).
    pub metrics: BTreeMap<String, BTreeMap<String, f64>>,
}

/// How the survivors took over a killed replica's shards.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Takeover {
    /// The replica killed (the one holding most shards, or the leader with `--kill-leader`).
    pub victim: String,
    /// Whether it also held the leader Lease.
    pub victim_was_leader: bool,
    /// Its shards.
    pub shards: Vec<u32>,
    /// Their Applications.
    pub apps: usize,
    /// From the kill until a survivor held the last of those shards' Leases (`None`: not before
    /// the deadline).
    pub leases_s: Option<f64>,
    /// From the kill until each of those Applications had been reconciled by a survivor (its
    /// `status.lastHandledReconcileAt` echoing the annotation set right after the kill).
    pub reconciled: Summary,
    /// The target: lease duration + 5 s.
    pub target_s: f64,
    /// Applications not reconciled before the deadline.
    pub missed: usize,
    /// Shards whose holder changed in all (the victim's, and any the new split moved between
    /// survivors).
    pub shards_moved: usize,
    /// Whether a reconcile of each moved Application was asked for right after the kill (and
    /// `reconciled` is when its status echoed the request); without, `reconciled` is its first
    /// reconcile on a survivor, from their logs (`--takeover-unrequested`).
    pub requested: bool,
}

/// One row of the goals table: what, the goal, the figure, and whether it is met (`None`: no
/// goal to judge against).
#[derive(Clone, Debug, Serialize)]
pub struct Goal {
    /// The measure.
    pub measure: String,
    /// Its goal.
    pub goal: String,
    /// What this run measured.
    pub measured: String,
    /// Met or not.
    pub met: Option<bool>,
}

/// The six most frequent of `counts`, as `what n, what n, ...` (ties by name).
fn most_frequent<N: Ord + std::fmt::Display>(counts: &BTreeMap<String, N>) -> String {
    let mut top: Vec<(&String, &N)> = counts.iter().collect();
    top.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    top.iter().take(6).map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ")
}

fn mib(kib: u64) -> String {
    #[allow(clippy::cast_precision_loss)]
    let m = kib as f64 / 1024.0;
    format!("{m:.0} MiB")
}

impl Report {
    /// Issue 23's goals this run measured, each with its figure.
    pub fn goals(&self) -> Vec<Goal> {
        let mut out = Vec::new();
        let mut row = |measure: &str, goal: &str, measured: String, met: Option<bool>| {
            out.push(Goal { measure: measure.into(), goal: goal.into(), measured, met });
        };
        let s = &self.settings;
        let c = &self.convergence;
        if c.per_app.count > 0 {
            row(
                &format!("cold sync: {} Applications, first create to all Synced/Healthy/Ready", s.apps),
                "≤ 120 s at 10,000 × 3 objects",
                format!("{:.1} s", c.all_ready_s),
                (s.apps >= 10_000 && s.objects == crate::fleet::Objects::Three).then_some(c.all_ready_s <= 120.0),
            );
        }
        if let Some(all) = self.requests_per_app.get(crate::run::ALL) {
            row("API requests per new Application, all kinds", "≤ 6", format!("{all:.1}"), Some(*all <= 6.0));
        }
        let d = &self.drift;
        if d.detected.count > 0 {
            row(
                "drift: hand edit to `Drifted`, p99",
                "≤ 1 s",
                format!("{:.0} ms ({} edits)", d.detected.p99 * 1e3, d.detected.count),
                Some(d.detected.p99 <= 1.0 && d.missed == 0),
            );
        }
        if d.repaired.count > 0 {
            row(
                "drift: hand edit repaired (selfHeal), p99",
                "≤ 1 s",
                format!("{:.0} ms ({} edits)", d.repaired.p99 * 1e3, d.repaired.count),
                Some(d.repaired.p99 <= 1.0 && d.missed == 0),
            );
        }
        if let Some(i) = &self.idle {
            row(
                "idle: API requests per Application per drift resync",
                "≤ 1",
                format!("{:.2}", i.requests_per_app_per_resync),
                Some(i.requests_per_app_per_resync <= 1.0),
            );
            row(
                "idle: writes per hour (Leases apart)",
                "0",
                format!("{:.0}", i.writes_per_hour),
                Some(i.writes_per_hour == 0.0),
            );
        }
        if let Some(p) = self.usage.iter().find(|p| p.phase == "after convergence") {
            let rss = p.processes.iter().filter(|(n, _)| n.starts_with("ksync-")).map(|(_, u)| u.rss_kib).max();
            if let Some(rss) = rss {
                row(
                    &format!("memory per replica after convergence, largest ({} Applications)", s.apps),
                    "≤ 150 MiB at 10,000",
                    mib(rss),
                    (s.apps >= 10_000).then_some(rss <= 150 * 1024),
                );
            }
        }
        if c.per_app.count > 0 && self.convergence_cpu_s > 0.0 {
            #[allow(clippy::cast_precision_loss)]
            let ms = self.convergence_cpu_s * 1e3 / c.per_app.count as f64;
            row("replica CPU per Application synced", "≤ 10 ms", format!("{ms:.1} ms"), Some(ms <= 10.0));
        }
        if let Some(m) = &self.monorepo {
            row("monorepo commit: renders", "1", format!("{:.0}", m.renders), Some(m.renders <= 1.0));
            row(
                "monorepo commit: writes per unaffected Application (and their dry runs)",
                "≤ 2, no dry runs",
                format!("{:.2} ({})", m.unaffected_writes_per_app, m.unaffected_dry_runs),
                Some(m.unaffected_writes_per_app <= 2.0 && m.unaffected_dry_runs == 0),
            );
        }
        if let Some(o) = &self.scale_out {
            row(
                &format!("scale-out: throughput on {} replicas over 1, same per-replica budget", o.many.replicas),
                "≥ 2.7 with 3",
                format!("{:.2} ({:.1} against {:.1} Applications per second)", o.ratio, o.many.per_s, o.one.per_s),
                (o.many.replicas == 3).then_some(o.ratio >= 2.7),
            );
        }
        if let Some(c) = &self.chaos {
            let zero = |n: usize| (n.to_string(), Some(n == 0));
            let rows = [
                ("chaos: commits never deployed", zero(c.never_deployed)),
                ("chaos: objects wrongly pruned or missing", zero(c.wrongly_pruned_or_missing)),
                ("chaos: objects removed from Git not pruned", zero(c.not_pruned)),
                ("chaos: writes to a shard not held then", zero(c.unheld_shard_writes)),
                ("chaos: leader-only writes while not leader", zero(c.unheld_leader_writes)),
                (
                    "chaos: Applications not converged 2 Lease durations after the last fault",
                    zero(c.not_converged_after_two_leases),
                ),
            ];
            for (measure, (measured, met)) in rows {
                row(measure, "0", measured, met);
            }
            row(
                "chaos: commit to deployed, worst",
                "",
                format!(
                    "{:.1} s ({} changes, p50 {:.1} s)",
                    c.commit_to_deployed.max, c.commit_to_deployed.count, c.commit_to_deployed.p50
                ),
                None,
            );
        }
        if let Some(t) = &self.takeover {
            row(
                "SIGKILL: every moved Application reconciled, max",
                &format!("≤ lease + 5 s = {:.0} s", t.target_s),
                format!("{:.1} s ({} Applications, {} missed)", t.reconciled.max, t.apps, t.missed),
                Some(t.missed == 0 && t.reconciled.max <= t.target_s),
            );
        }
        out
    }

    /// The calibration, each converging phase against it, and who wrote what.
    fn floor_table(&self) -> String {
        let mut out = String::new();
        let Some(f) = &self.floor else {
            let _ = writeln!(out, "No calibration (`--calibration-step 0s`): no floor, no ratios.\n");
            return out;
        };
        let steps: Vec<String> = f.steps.iter().map(|s| format!("{} → {:.0}/s", s.concurrency, s.per_s)).collect();
        let _ = writeln!(
            out,
            "Floor: **{:.0} Server-Side Applies per second** ({} writers; {} in a scratch namespace; writers → rate: {})\n",
            f.per_s,
            f.concurrency,
            f.kinds.join(", "),
            steps.join(", ")
        );
        let _ = writeln!(
            out,
            "Ratio = time to converge ÷ (applies the phase needs ÷ floor rate); the applies needed are the \
             objects Git declares for the phase's Applications, so 1 is the server taking nothing but those \
             at its best rate.\n"
        );
        if !self.floor_ratio.is_empty() || !self.writes.is_empty() {
            let _ = writeln!(
                out,
                "| Phase | Took | Applies needed | At the floor | Ratio | Controller writes (per App.) | Cluster's own writes (per App.) |\n|---|---|---|---|---|---|---|"
            );
            let phases: std::collections::BTreeSet<&String> =
                self.floor_ratio.keys().chain(self.writes.keys()).collect();
            for phase in phases {
                let r = self.floor_ratio.get(phase);
                let w = self.writes.get(phase);
                let list = |m: &BTreeMap<String, u64>| {
                    m.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ")
                };
                let _ = writeln!(
                    out,
                    "| {phase} | {} | {} | {} | {} | {} | {} |",
                    r.map_or("—".into(), |r| format!("{:.1} s", r.took_s)),
                    r.map_or("—".into(), |r| r.writes_needed.to_string()),
                    r.map_or("—".into(), |r| format!("{:.1} s", r.floor_s)),
                    r.map_or("—".into(), |r| format!("**{:.2}**", r.ratio)),
                    w.map_or("—".into(), |w| format!(
                        "{} ({:.1}): {}",
                        w.controller_total,
                        w.controller_per_app,
                        list(&w.controller)
                    )),
                    w.map_or("—".into(), |w| format!(
                        "{} ({:.1}): {}",
                        w.cluster_total,
                        w.cluster_per_app,
                        list(&w.cluster)
                    )),
                );
            }
            let _ = writeln!(out);
        }
        out
    }

    /// Write `report.md`, `report.json` and `ready.svg` to `dir`.
    pub fn write(&self, dir: &std::path::Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("report.md"), self.table())?;
        std::fs::write(dir.join("report.json"), serde_json::to_string_pretty(self).map_err(std::io::Error::other)?)?;
        let s = &self.settings;
        let title = format!("{} Applications on {} replicas: Ready over time", s.apps, s.replicas);
        std::fs::write(
            dir.join("ready.svg"),
            crate::plot::ready_svg(&title, &self.ready).map_err(std::io::Error::other)?,
        )
    }

    /// The report as Markdown.
    pub fn table(&self) -> String {
        let s = &self.settings;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "\n## Load test: {} Applications ({}), {} replicas, {} shards, {} namespaces, {} Deployments with a Pod, lease {:.0} s\n",
            s.apps,
            match s.objects {
                crate::fleet::Objects::Configmap => "a ConfigMap each",
                crate::fleet::Objects::Three => "a ConfigMap, a Service and a Deployment each",
            },
            s.replicas,
            s.shards,
            s.namespaces,
            s.deployments,
            s.lease_duration_s
        );
        let _ = writeln!(out, "`{}` on {} cores, {:.0} GiB\n", s.command, self.machine.cores, self.machine.memory_gib);
        let v = &self.server;
        let _ = writeln!(out, "Server: **{}**, {} ({})\n", v.kind, v.version, v.platform);
        out.push_str(&self.floor_table());
        if let Some(failure) = &self.failure {
            let _ = writeln!(out, "**The run stopped early**: {failure}\n");
            if !self.not_converged.is_empty() {
                let _ = writeln!(out, "| Not converged, last seen as | Applications |\n|---|---|");
                for (seen, n) in &self.not_converged {
                    let _ = writeln!(out, "| {seen} | {n} |");
                }
                let _ = writeln!(out);
            }
        }
        let goals = self.goals();
        if !goals.is_empty() {
            let _ = writeln!(out, "| Goal | Target | Measured | |\n|---|---|---|---|");
            for g in &goals {
                let verdict = match g.met {
                    Some(true) => "met",
                    Some(false) => "missed",
                    None => "",
                };
                let _ = writeln!(out, "| {} | {} | {} | {verdict} |", g.measure, g.goal, g.measured);
            }
            let _ = writeln!(out);
        }
        let _ = writeln!(out, "| What | Figure |\n|---|---|");
        let c = &self.convergence;
        let _ = writeln!(out, "| replicas started until every shard held, split evenly | {:.1} s |", self.setup_s);
        let webhook = match self.webhook_s {
            Some(s) => format!("served {s:.1} s after (new Applications labelled with their shard at admission)"),
            None => "not installed (`--no-webhook` or `--kubeconfig`): the leader labels each new Application".into(),
        };
        let _ = writeln!(out, "| the admission webhook | {webhook} |");
        let _ = writeln!(out, "| then every Repository resolved the commit | {:.1} s |", self.repositories_s);
        // A scale-out run converges in two batches, reported on their own rows.
        if self.scale_out.is_none() {
            let _ = writeln!(out, "| creating {} Applications (API calls) | {:.1} s |", s.apps, c.create_s);
            let _ = writeln!(out, "| first create until all Synced, Healthy, Ready | {:.1} s |", c.all_ready_s);
            let _ =
                writeln!(out, "| per Application, create to Ready (p50 / p90 / p99 / max) | {} |", c.per_app.cell_s());
            let _ = writeln!(
                out,
                "| … with a Deployment ({}) / a ConfigMap only ({}) | {} / {} |",
                c.with_deployment.count,
                c.configmap_only.count,
                c.with_deployment.cell_s(),
                c.configmap_only.cell_s()
            );
        }
        if let Some(all) = self.requests_per_app.get(crate::run::ALL) {
            let mut each: Vec<(&String, &f64)> =
                self.requests_per_app.iter().filter(|(k, _)| *k != crate::run::ALL).collect();
            each.sort_by(|a, b| b.1.total_cmp(a.1).then(a.0.cmp(b.0)));
            let each: Vec<String> = each.iter().map(|(k, n)| format!("{k} {n:.2}")).collect();
            let _ = writeln!(
                out,
                "| API requests per new Application, replicas, all kinds (goal ≤ 6) | {all:.1} ({}) |",
                each.join(", ")
            );
        }
        if c.nudged > 0 {
            let _ = writeln!(
                out,
                "| converged before progress stalled / stalled ones asked for a reconcile | {} / {} |",
                c.unaided, c.nudged
            );
        }
        let d = &self.drift;
        let _ = writeln!(
            out,
            "| drift detected, edit to `Drifted`, no selfHeal ({} edits; p50 / p90 / p99 / max) | {} |",
            d.detected.count,
            d.detected.cell_ms()
        );
        let _ = writeln!(
            out,
            "| drift repaired, edit to ConfigMap restored, selfHeal ({} edits; {} showed `Drifted`) | {} |",
            d.repaired.count,
            d.repaired_showing_drifted,
            d.repaired.cell_ms()
        );
        let _ = writeln!(out, "| edit undone to `Synced`, no selfHeal | {} |", d.cleared.cell_ms());
        let _ = writeln!(out, "| edits missed (not seen within the edit timeout) | {} |", d.missed);
        let per: Vec<String> = d.per_replica.iter().map(|(r, n)| format!("{r}: {n}")).collect();
        let _ = writeln!(out, "| edits per owning replica | {} |", per.join(", "));
        for p in &self.usage {
            let mut cells: Vec<String> = Vec::new();
            for (name, u) in &p.processes {
                cells.push(format!("{name} {} ({} peak), {:.0} CPU s", mib(u.rss_kib), mib(u.hwm_kib), u.cpu_s));
            }
            let _ = writeln!(out, "| RSS {} | {} |", p.phase, cells.join("; "));
            let cells = per_replica(&p.metrics, |get| {
                format!(
                    "{:.0} ({:.0} s waiting for the budget), {:.0} ({:.0} s)",
                    get("ksync_api_requests_total"),
                    get("ksync_api_throttle_seconds_sum"),
                    get("ksync_reconciles_total"),
                    get("ksync_reconcile_duration_seconds_sum")
                )
            });
            if !cells.is_empty() {
                let _ = writeln!(
                    out,
                    "| API requests and reconciles (total time) so far, {} | {} |",
                    p.phase,
                    cells.join("; ")
                );
            }
        }
        let idle: Vec<String> = self.idle_cpu.iter().map(|(n, v)| format!("{n} {:.0}%", v * 100.0)).collect();
        let _ = writeln!(out, "| CPU while idle (share of one core) | {} |", idle.join(", "));
        if let Some(t) = &self.takeover {
            let _ = writeln!(
                out,
                "| SIGKILL {}{} ({} shards, {} Applications): a survivor holds its last shard Lease | {} |",
                t.victim,
                if t.victim_was_leader { ", the leader" } else { "" },
                t.shards.len(),
                t.apps,
                t.leases_s.map_or("not within the deadline".to_string(), |s| format!("{s:.1} s"))
            );
            let verdict = if t.missed == 0 && t.reconciled.max <= t.target_s { "met" } else { "missed" };
            let _ = writeln!(
                out,
                "| kill to each of its Applications reconciled by a survivor ({}; p50 / p90 / p99 / max; target {:.0} s: {verdict}) | {} |",
                if t.requested { "a reconcile requested" } else { "none requested, its first reconcile in the logs" },
                t.target_s,
                t.reconciled.cell_s()
            );
            let _ = writeln!(out, "| shards that changed holder after the kill | {} |", t.shards_moved);
            if t.missed > 0 {
                let _ = writeln!(out, "| Applications not reconciled before the deadline | {} |", t.missed);
            }
        }
        if let Some(i) = &self.idle {
            let top = most_frequent(&i.requests);
            let _ = writeln!(
                out,
                "| idle {:.0} s (resync every {:.0} s): replica requests, Leases apart / Lease requests / other writes | {} ({}) / {} / {} |",
                i.window_s,
                s.drift_resync_s,
                i.requests.values().sum::<u64>(),
                top,
                i.lease_requests,
                i.writes.values().sum::<usize>()
            );
        }
        if let Some(o) = &self.scale_out {
            let budget =
                o.budget_qps.map_or("the default budget".to_string(), |q| format!("{q} requests per second each"));
            for b in [&o.one, &o.many] {
                let top = most_frequent(&b.requests);
                let _ = writeln!(
                    out,
                    "| scale-out, {} Applications on {} replica(s), {budget}: first create to all Ready / per second / each (p50 / p90 / p99 / max) / requests each / CPU each | {:.1} s / {:.1} / {} / {:.1} ({top}) / {:.1} ms |",
                    b.apps,
                    b.replicas,
                    b.all_ready_s,
                    b.per_s,
                    b.ready.cell_s(),
                    b.requests_per_app,
                    b.cpu_ms_per_app
                );
            }
            let _ = writeln!(
                out,
                "| scale-out: the others started until the shards split and moved Applications reconciled / throughput ratio | {:.1} s / {:.2} |",
                o.joined_s, o.ratio
            );
        }
        if let Some(m) = &self.monorepo {
            let top = most_frequent(&m.writes);
            let _ = writeln!(
                out,
                "| monorepo commit ({} Applications): push to all settled / writes | {:.1} s / {} ({}) |",
                m.apps,
                m.settled_s,
                m.writes.values().sum::<usize>(),
                top
            );
        }
        if let Some(c) = &self.chaos {
            let kills: Vec<String> = c
                .kills
                .iter()
                .map(|(at, who, led)| format!("{at:.0} s {who}{}", if *led { " (leader)" } else { "" }))
                .collect();
            let faults: Vec<String> = c.faults.iter().map(|(k, n)| format!("{k} {n}")).collect();
            let _ = writeln!(
                out,
                "| chaos {:.0} s (seed {}): SIGKILLs / faults | {} / {} |",
                c.duration_s,
                c.seed,
                kills.join(", "),
                faults.join(", ")
            );
            let _ = writeln!(
                out,
                "| chaos: commits / Application changes / deployed at a later commit / never deployed | {} / {} / {} / {} |",
                c.commits, c.changes, c.superseded, c.never_deployed
            );
            let _ = writeln!(
                out,
                "| chaos: commit to deployed (p50 / p90 / p99 / max) | {} |",
                c.commit_to_deployed.cell_s()
            );
            let _ = writeln!(
                out,
                "| chaos: last fault to every Application converged at the last commit | {} |",
                c.converged_after_s.map_or("not within the timeout".to_string(), |s| format!("{s:.1} s"))
            );
            let _ = writeln!(
                out,
                "| chaos: replica writes checked against shard Leases / the leader Lease / not attributed | {} / {} / {} ({}) |",
                c.checked_writes.0,
                c.checked_writes.1,
                c.unattributed_writes.values().sum::<usize>(),
                most_frequent(&c.unattributed_writes)
            );
            let _ = writeln!(
                out,
                "| chaos: Lease writes not seen by the watch (taken as renewals) / audit log truncated | {} / {} |",
                c.lease_writes_unseen, c.audit_truncated
            );
            for e in
                c.never_deployed_examples.iter().chain(&c.wrongly_pruned_or_missing_examples).chain(&c.unheld_examples)
            {
                let _ = writeln!(out, "| chaos: lost | {e} |");
            }
        }
        let o = &self.ownership;
        let _ = writeln!(
            out,
            "| longest shard Lease renewal gap (fence limit {:.1} s; gaps over it) | {:.1} s ({}) |",
            o.fence_limit_s, o.longest_renewal_gap_s, o.gaps_over_limit
        );
        let _ = writeln!(
            out,
            "| the same from the Leases' `renewTime`s (when the holders sent them; gaps over the limit) | {:.1} s ({}) |",
            o.longest_renew_time_gap_s, o.renew_time_gaps_over_limit
        );
        // The replicas' own count, from their last `/metrics` (a replica killed before it is
        // not counted).
        if let Some(last) = self.usage.last().filter(|u| !u.metrics.is_empty()) {
            let cells = per_replica(&last.metrics, |get| {
                format!(
                    "{:.0} of {:.0}",
                    get("ksync_lease_renewals_late_total"),
                    get("ksync_lease_renewal_gap_seconds_count")
                )
            });
            let _ = writeln!(
                out,
                "| Lease renewals late by the replicas' own count (`ksync_lease_renewals_late_total` of the renewals measured), {} | {} |",
                last.phase,
                cells.join("; ")
            );
        }
        let counts =
            |m: &BTreeMap<String, usize>| m.iter().map(|(r, n)| format!("{r}: {n}")).collect::<Vec<_>>().join(", ");
        let _ = writeln!(out, "| reconciles stopped by the shard fence (logged) | {} |", counts(&o.fence_stops));
        let _ = writeln!(out, "| status writes refused as stale (409) | {} |", counts(&o.stale_status_writes));
        for (phase, writes) in &self.api_writes {
            let total: usize = writes.values().sum();
            let top = most_frequent(writes);
            let _ =
                writeln!(out, "| API writes during {phase} (simcluster audit; most frequent) | {total} ({}) |", top);
        }
        let loads: Vec<String> =
            self.load.iter().map(|(p, l)| format!("{p} {:.2}/{:.2}/{:.2}", l[0], l[1], l[2])).collect();
        let _ = writeln!(out, "| load average (1/5/15 min) at each phase | {} |", loads.join("; "));
        out
    }
}

/// One cell per replica, `name` then what `cell` makes of its metrics (a missing series is 0).
fn per_replica(
    metrics: &BTreeMap<String, BTreeMap<String, f64>>,
    cell: impl Fn(&dyn Fn(&str) -> f64) -> String,
) -> Vec<String> {
    metrics.iter().map(|(name, m)| format!("{name} {}", cell(&|k: &str| m.get(k).copied().unwrap_or(0.0)))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_every_figure() {
        let mut r = Report::default();
        r.settings.apps = 20;
        r.usage.push(PhaseUsage {
            phase: "after convergence".into(),
            processes: [("ksync-0".to_string(), Usage { hwm_kib: 2048, rss_kib: 1024, cpu_s: 3.0 })].into(),
            metrics: [(
                "ksync-0".to_string(),
                [
                    ("ksync_api_requests_total".to_string(), 42.0),
                    ("ksync_lease_renewal_gap_seconds_count".to_string(), 30.0),
                    ("ksync_lease_renewals_late_total".to_string(), 1.0),
                ]
                .into(),
            )]
            .into(),
        });
        r.takeover = Some(Takeover { victim: "ksync-0".into(), target_s: 20.0, ..Default::default() });
        r.requests_per_app = [("all".to_string(), 5.5), ("get configmaps".to_string(), 1.0)].into();
        let t = r.table();
        assert!(t.contains("20 Applications"));
        assert!(t.contains("ksync-0 1 MiB (2 MiB peak), 3 CPU s"));
        assert!(t.contains("target 20 s: met"));
        assert!(t.contains("ksync-0 42 (0 s waiting for the budget)"));
        assert!(t.contains("| drift detected"));
        assert!(t.contains("measured), after convergence | ksync-0 1 of 30 |"), "{t}");
        assert!(t.contains("all kinds (goal ≤ 6) | 5.5 (get configmaps 1.00) |"), "{t}");
    }

    #[test]
    fn scale_out_is_judged_with_three_replicas_only() {
        let batch = |replicas, per_s| Batch { replicas, apps: 10, per_s, ..Batch::default() };
        let mut r = Report {
            scale_out: Some(ScaleOut { one: batch(1, 2.0), many: batch(3, 5.6), ratio: 2.8, ..Default::default() }),
            ..Default::default()
        };
        let goal = r.goals().into_iter().find(|g| g.measure.starts_with("scale-out")).expect("a scale-out goal");
        assert_eq!((goal.met, goal.measured.as_str()), (Some(true), "2.80 (5.6 against 2.0 Applications per second)"));
        assert!(r.table().contains("10 Applications on 3 replica(s), the default budget"), "{}", r.table());
        r.scale_out = Some(ScaleOut { one: batch(1, 2.0), many: batch(2, 3.0), ratio: 1.5, ..Default::default() });
        assert_eq!(r.goals().into_iter().find(|g| g.measure.starts_with("scale-out")).unwrap().met, None);
    }
}
