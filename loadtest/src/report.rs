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
    /// Where: CPU cores and memory.
    pub machine: Machine,
    /// The load average (1, 5, 15 minutes) at the start of each phase: other work on the machine
    /// shows here.
    pub load: Vec<(String, [f64; 3])>,
    /// From the replicas' start until they held every shard, split evenly.
    pub setup_s: f64,
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
    /// simcluster's audit log: writes (dry runs included) by phase, then by `verb resource`.
    pub api_writes: BTreeMap<String, BTreeMap<String, usize>>,
    /// Why the run stopped early (a phase timed out or failed); the figures before it stand.
    pub failure: Option<String>,
    /// At a convergence timeout: the Applications not converged, counted by what was last seen
    /// of them (sync, health, Ready, shard).
    pub not_converged: BTreeMap<String, usize>,
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
    /// Applications that also run a Deployment.
    pub deployments: usize,
    /// Edits timed.
    pub edits: usize,
    /// Lease duration, seconds.
    pub lease_duration_s: f64,
    /// The command line.
    pub command: String,
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
    /// The replica killed (the one holding most shards).
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
}

fn mib(kib: u64) -> String {
    #[allow(clippy::cast_precision_loss)]
    let m = kib as f64 / 1024.0;
    format!("{m:.0} MiB")
}

impl Report {
    /// The report as Markdown.
    pub fn table(&self) -> String {
        let s = &self.settings;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "\n## Load test: {} Applications, {} replicas, {} shards, {} namespaces, {} Deployments, lease {:.0} s\n",
            s.apps, s.replicas, s.shards, s.namespaces, s.deployments, s.lease_duration_s
        );
        let _ = writeln!(out, "`{}` on {} cores, {:.0} GiB\n", s.command, self.machine.cores, self.machine.memory_gib);
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
        let _ = writeln!(out, "| What | Figure |\n|---|---|");
        let c = &self.convergence;
        let _ = writeln!(out, "| replicas started until every shard held, split evenly | {:.1} s |", self.setup_s);
        let _ = writeln!(out, "| then every Repository resolved the commit | {:.1} s |", self.repositories_s);
        let _ = writeln!(out, "| creating {} Applications (API calls) | {:.1} s |", s.apps, c.create_s);
        let _ = writeln!(out, "| first create until all Synced, Healthy, Ready | {:.1} s |", c.all_ready_s);
        let _ = writeln!(out, "| per Application, create to Ready (p50 / p90 / p99 / max) | {} |", c.per_app.cell_s());
        let _ = writeln!(
            out,
            "| … with a Deployment ({}) / a ConfigMap only ({}) | {} / {} |",
            c.with_deployment.count,
            c.configmap_only.count,
            c.with_deployment.cell_s(),
            c.configmap_only.cell_s()
        );
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
            let get = |m: &BTreeMap<String, f64>, k: &str| m.get(k).copied().unwrap_or(0.0);
            let cells: Vec<String> = p
                .metrics
                .iter()
                .map(|(name, m)| {
                    format!(
                        "{name} {:.0} ({:.0} s waiting for the budget), {:.0} ({:.0} s)",
                        get(m, "ksync_api_requests_total"),
                        get(m, "ksync_api_throttle_seconds_sum"),
                        get(m, "ksync_reconciles_total"),
                        get(m, "ksync_reconcile_duration_seconds_sum")
                    )
                })
                .collect();
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
                "| kill to each of its Applications reconciled by a survivor (p50 / p90 / p99 / max; target {:.0} s: {verdict}) | {} |",
                t.target_s,
                t.reconciled.cell_s()
            );
            let _ = writeln!(out, "| shards that changed holder after the kill | {} |", t.shards_moved);
            if t.missed > 0 {
                let _ = writeln!(out, "| Applications not reconciled before the deadline | {} |", t.missed);
            }
        }
        let o = &self.ownership;
        let _ = writeln!(
            out,
            "| longest shard Lease renewal gap (fence limit {:.1} s; gaps over it) | {:.1} s ({}) |",
            o.fence_limit_s, o.longest_renewal_gap_s, o.gaps_over_limit
        );
        let counts =
            |m: &BTreeMap<String, usize>| m.iter().map(|(r, n)| format!("{r}: {n}")).collect::<Vec<_>>().join(", ");
        let _ = writeln!(out, "| reconciles stopped by the shard fence (logged) | {} |", counts(&o.fence_stops));
        let _ = writeln!(out, "| status writes refused as stale (409) | {} |", counts(&o.stale_status_writes));
        for (phase, writes) in &self.api_writes {
            let total: usize = writes.values().sum();
            let mut top: Vec<(&String, &usize)> = writes.iter().collect();
            top.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            let top: Vec<String> = top.iter().take(6).map(|(k, n)| format!("{k} {n}")).collect();
            let _ = writeln!(
                out,
                "| API writes during {phase} (simcluster audit; most frequent) | {total} ({}) |",
                top.join(", ")
            );
        }
        let loads: Vec<String> =
            self.load.iter().map(|(p, l)| format!("{p} {:.2}/{:.2}/{:.2}", l[0], l[1], l[2])).collect();
        let _ = writeln!(out, "| load average (1/5/15 min) at each phase | {} |", loads.join("; "));
        out
    }
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
            metrics: [("ksync-0".to_string(), [("ksync_api_requests_total".to_string(), 42.0)].into())].into(),
        });
        r.takeover = Some(Takeover { victim: "ksync-0".into(), target_s: 20.0, ..Default::default() });
        let t = r.table();
        assert!(t.contains("20 Applications"));
        assert!(t.contains("ksync-0 1 MiB (2 MiB peak), 3 CPU s"));
        assert!(t.contains("target 20 s: met"));
        assert!(t.contains("ksync-0 42 (0 s waiting for the budget)"));
        assert!(t.contains("| drift detected"));
    }
}
