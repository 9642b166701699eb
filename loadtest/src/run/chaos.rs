//! The chaos run (`--chaos-duration`): for that long, a commit every 3 to 6 s changing a
//! fiftieth of the Applications (half of those also replace their extra ConfigMap, so the old
//! one must be pruned), a replica SIGKILLed every 20 to 40 s (every other kill the leader) and
//! started again up to a Lease duration later, and an API fault every 3 to 8 s for the
//! replicas' and deployers' requests (a 2 to 5 s burst of 429s or 500s on a quarter of
//! requests, dropped watches, or 410 on resume), all from `--chaos-seed`. Then: Applications not
//! converged at the last commit 2 Lease durations after the last fault, the wait until all
//! are, the objects against Git, and simcluster's audit log against who held which Lease.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Resource, ResourceExt};
use kuvryn_sync::api::Repository;
use kuvryn_sync::api::application::Application;
use kuvryn_sync::api::names;
use serde_json::json;
use simcluster::faults::{FaultAction, FaultRule};

use super::Fleet;
use crate::chaos::{self, Content, Declared, Fault, LeaseWrite, Rng, Scope, Tracker};
use crate::fleet::{LEASE_PREFIX, REPOSITORY, SYSTEM};
use crate::observe::key;
use crate::report::Chaos;
use crate::stats::Summary;
use crate::{Error, Result};

/// Examples of each loss kept in the report.
const EXAMPLES: usize = 10;

/// The share of matching requests a 429 or 500 burst fails.
const BURST_SHARE: f64 = 0.25;

impl Fleet {
    /// Run the chaos, then count what was lost (see the module documentation).
    pub(super) async fn chaos(&mut self) -> Result<()> {
        self.phase("chaos");
        let args = self.args.clone();
        let d = args.lease_duration;
        // One stream each, so each schedule is the seed's whatever the timing of the others.
        let (mut commits, mut faults, mut kills) = (
            Rng::new(args.chaos_seed),
            Rng::new(args.chaos_seed.wrapping_add(1)),
            Rng::new(args.chaos_seed.wrapping_add(2)),
        );
        let mut report = Chaos { seed: args.chaos_seed, ..Chaos::default() };
        let mut content: Vec<Content> = vec![Content::default(); self.apps.len()];
        let mut declared = self.declared_at_start();
        let head = self.work_tree.git(&["rev-parse", "HEAD"]).trim().to_string();
        let tracker = Arc::new(Mutex::new(Tracker::default()));
        tracker.lock().expect("tracker").commit(&head);
        let watch = self.track(tracker.clone());
        let mut head = head;

        let start = Instant::now();
        let end = start + args.chaos_duration;
        let per_commit = (self.apps.len() / 50).max(1);
        let mut next_commit = start + commits.between(Duration::from_secs(3), Duration::from_secs(6));
        let mut next_fault = start + faults.between(Duration::from_secs(3), Duration::from_secs(8));
        let mut next_kill = start + kills.between(Duration::from_secs(20), Duration::from_secs(40));
        let mut burst_end: Option<Instant> = None;
        let mut restarts: Vec<(Instant, usize)> = Vec::new();
        let mut last_fault = start;
        loop {
            let restart_at = restarts.iter().map(|(t, _)| *t).min();
            let next = [Some(next_commit), Some(next_fault), Some(next_kill), burst_end, restart_at]
                .into_iter()
                .flatten()
                .min()
                .expect("a next event");
            if next >= end {
                break;
            }
            tokio::time::sleep_until(next.into()).await;
            let now = Instant::now();
            if burst_end.is_some_and(|t| t <= now) {
                self.control("DELETE", "/simcluster/v1/faults").await?;
                burst_end = None;
                last_fault = Instant::now();
            }
            if let Some(pos) = restarts.iter().position(|(t, _)| *t <= now) {
                let (_, i) = restarts.remove(pos);
                self.restart_replica(i)?;
            }
            if next_commit <= now {
                head = self
                    .chaos_commit(&mut commits, per_commit, &mut content, &mut declared, &tracker, &mut report)
                    .await?;
                next_commit = Instant::now() + commits.between(Duration::from_secs(3), Duration::from_secs(6));
            }
            if next_fault <= now && burst_end.is_none() {
                let fault = Fault::ALL[faults.below(Fault::ALL.len())];
                *report.faults.entry(fault.name().to_string()).or_default() += 1;
                match fault {
                    Fault::TooMany | Fault::ServerError => {
                        let code = if fault == Fault::TooMany { 429 } else { 500 };
                        for user in self.fault_users() {
                            let rule = FaultRule {
                                user: Some(user),
                                action: Some(FaultAction::Status { code }),
                                probability: Some(BURST_SHARE),
                                ..FaultRule::default()
                            };
                            self.control_json("/simcluster/v1/faults", &rule).await?;
                        }
                        burst_end =
                            Some(Instant::now() + faults.between(Duration::from_secs(2), Duration::from_secs(5)));
                    }
                    Fault::DropWatches => self.control("POST", "/simcluster/v1/watches/drop").await?,
                    Fault::Expire => {
                        self.control("POST", "/simcluster/v1/compact").await?;
                        self.control("POST", "/simcluster/v1/watches/drop").await?;
                    }
                }
                last_fault = Instant::now();
                next_fault = Instant::now() + faults.between(Duration::from_secs(3), Duration::from_secs(8));
            } else if next_fault <= now {
                next_fault = burst_end.unwrap_or(now) + Duration::from_millis(500);
            }
            if next_kill <= now {
                if let Some((i, led)) = self.pick_victim(&mut kills, report.kills.len()).await? {
                    let name = self.replicas[i].name.clone();
                    say!("chaos: SIGKILL {name}{}", if led { " (leader)" } else { "" });
                    self.replicas[i].kill();
                    report.kills.push((start.elapsed().as_secs_f64(), name, led));
                    restarts.push((Instant::now() + kills.between(Duration::from_secs(2), d), i));
                    last_fault = Instant::now();
                }
                next_kill = Instant::now() + kills.between(Duration::from_secs(20), Duration::from_secs(40));
            }
        }
        if burst_end.is_some() {
            self.control("DELETE", "/simcluster/v1/faults").await?;
            last_fault = Instant::now();
        }
        for (_, i) in std::mem::take(&mut restarts) {
            self.restart_replica(i)?;
        }
        report.duration_s = start.elapsed().as_secs_f64();
        say!(
            "chaos over after {:.0} s: {} commits, {} kills, faults {:?}",
            report.duration_s,
            report.commits,
            report.kills.len(),
            report.faults
        );

        // Converged at the last commit, 2 Lease durations after the last fault, and at all.
        let keys: Vec<String> = self.apps.iter().map(|a| key(&a.namespace, &a.name)).collect();
        let waiting = |j: &crate::observe::Journal<crate::observe::AppSeen>| -> Vec<String> {
            let latest = j.latest();
            keys.iter()
                .filter(|k| {
                    !latest.get(*k).is_some_and(|(_, s)| s.converged() && s.commit.as_deref() == Some(head.as_str()))
                })
                .cloned()
                .collect()
        };
        let two = last_fault + 2 * d;
        let early = self.app_seen.until(two, |j| waiting(j).is_empty().then(Instant::now)).await;
        report.not_converged_after_two_leases = match early {
            Some(_) => 0,
            None => waiting(&self.app_seen).len(),
        };
        let deadline = last_fault + args.timeout;
        let mut last_said = Instant::now();
        let all = self
            .app_seen
            .until(deadline, |j| {
                let w = waiting(j);
                if last_said.elapsed() > Duration::from_secs(10) {
                    last_said = Instant::now();
                    say!("chaos: {} not converged at {head}, e.g. {:?}", w.len(), w.first().map(|k| j.current(k)));
                }
                w.is_empty().then(Instant::now)
            })
            .await;
        report.converged_after_s = all.map(|at| at.saturating_duration_since(last_fault).as_secs_f64());
        say!(
            "chaos: {} not converged 2 Lease durations after the last fault; all converged after {:?} s",
            report.not_converged_after_two_leases,
            report.converged_after_s
        );
        watch.abort();
        {
            let mut t = tracker.lock().expect("tracker");
            // The tracker's watch may lag the journal's (both resume from the same faults): what
            // the journal saw counts too, so a change deployed is not reported lost because one
            // watch was behind when the run ended.
            for (k, kept) in self.app_seen.history() {
                for (at, s) in kept {
                    t.seen(&k, s.commit.as_deref(), s.converged(), at);
                }
            }
            report.commit_to_deployed = Summary::of(&t.latencies);
            report.superseded = t.superseded;
            let never = t.never_deployed();
            report.never_deployed = never.values().sum();
            report.never_deployed_examples =
                never.iter().take(EXAMPLES).map(|(k, n)| format!("{k}: {n} change(s) never deployed")).collect();
        }

        // The objects against Git, then the audit log.
        let (wrong, not_pruned) = self.check_objects(&content).await?;
        report.not_pruned = not_pruned.len();
        let events = self.audit().await.unwrap_or_default();
        if self.args.logs.is_some() {
            let audit = serde_json::to_vec(&events).expect("JSON");
            std::fs::write(self.dir.join("audit.json"), audit)?;
        }
        report.audit_truncated = events.len() >= simcluster::faults::AUDIT_LIMIT;
        let deletes = chaos::wrong_deletes(&events, &declared);
        report.wrongly_pruned_or_missing = wrong.len() + deletes.len();
        report.wrongly_pruned_or_missing_examples =
            wrong.iter().chain(&deletes).chain(&not_pruned).take(EXAMPLES).cloned().collect();
        self.check_writes(&events, &mut report);
        say!(
            "chaos: never deployed {}, wrongly pruned or missing {}, not pruned {}, writes to a shard not held {}, leader-only writes while not leader {}; worst commit to deployed {:.1} s",
            report.never_deployed,
            report.wrongly_pruned_or_missing,
            report.not_pruned,
            report.unheld_shard_writes,
            report.unheld_leader_writes,
            report.commit_to_deployed.max
        );
        for e in report
            .never_deployed_examples
            .iter()
            .chain(&report.wrongly_pruned_or_missing_examples)
            .chain(&report.unheld_examples)
        {
            say!("chaos: lost: {e}");
        }
        self.report.chaos = Some(report);
        if all.is_none() {
            return Err(Error::Timeout(
                args.timeout,
                format!("every Application to converge at {head} after the chaos"),
            ));
        }
        Ok(())
    }

    /// The users whose requests get the 429 and 500 bursts: the replicas, and the deployers
    /// they impersonate.
    fn fault_users(&self) -> Vec<String> {
        let replicas = self.replica_names().into_iter().map(|n| format!("system:serviceaccount:{SYSTEM}:{n}"));
        let deployers = crate::fleet::namespaces(self.args.namespaces)
            .into_iter()
            .map(|ns| format!("system:serviceaccount:{ns}:{}", crate::fleet::DEPLOYER));
        replicas.chain(deployers).collect()
    }

    /// Every object Git declares at the start, none removed yet.
    fn declared_at_start(&self) -> Declared {
        let mut out = Declared::new();
        for def in &self.apps {
            for (path, yaml) in chaos::files(def, Content::default()) {
                let kind = if path.ends_with("deployment.yaml") {
                    "deployments"
                } else if path.ends_with("service.yaml") {
                    "services"
                } else {
                    "configmaps"
                };
                let name = yaml
                    .lines()
                    .find_map(|l| l.strip_prefix("  name: "))
                    .expect("every manifest names its object")
                    .to_string();
                out.insert((kind.to_string(), def.namespace.clone(), name), None);
            }
        }
        out
    }

    /// Push one commit changing `count` Applications, note it, and ask every Repository to
    /// fetch (as a push webhook would); the commit id.
    async fn chaos_commit(
        &mut self,
        rng: &mut Rng,
        count: usize,
        content: &mut [Content],
        declared: &mut Declared,
        tracker: &Arc<Mutex<Tracker>>,
        report: &mut Chaos,
    ) -> Result<String> {
        let picked = chaos::pick(rng, self.apps.len(), count);
        let mut removed = Vec::new();
        for (i, replace) in &picked {
            let def = &self.apps[*i];
            let old = content[*i];
            content[*i].rev += 1;
            if *replace {
                content[*i].generation += 1;
                removed.push((
                    "configmaps".to_string(),
                    def.namespace.clone(),
                    chaos::extra_name(&def.name, old.generation),
                ));
                declared.insert(
                    (
                        "configmaps".to_string(),
                        def.namespace.clone(),
                        chaos::extra_name(&def.name, content[*i].generation),
                    ),
                    None,
                );
            }
            for (path, yaml) in chaos::files(def, content[*i]) {
                self.work_tree.write(&path, &yaml);
            }
        }
        let wt = &self.work_tree;
        let n = report.commits + 1;
        let commit = tokio::task::block_in_place(|| wt.commit_and_push(&format!("chaos commit {n}")));
        let pushed = Instant::now();
        let pushed_at = jiff::Timestamp::now();
        {
            let mut t = tracker.lock().expect("tracker");
            t.commit(&commit);
            for (i, _) in &picked {
                t.changed(&key(&self.apps[*i].namespace, &self.apps[*i].name), pushed);
            }
        }
        for k in removed {
            declared.insert(k, Some(pushed_at));
        }
        report.commits = n;
        report.changes += picked.len();
        let token = format!("chaos-{n}");
        let patch = json!({"metadata": {"annotations": {names::annotations::RECONCILE_REQUESTED_AT: token}}});
        for ns in crate::fleet::namespaces(self.args.namespaces) {
            Api::<Repository>::namespaced(self.client.clone(), &ns)
                .patch(REPOSITORY, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
        Ok(commit)
    }

    /// Feed `tracker` every Application as it is seen, from a watch of its own (the journal keeps
    /// a bounded history).
    fn track(&self, tracker: Arc<Mutex<Tracker>>) -> tokio::task::JoinHandle<()> {
        let api: Api<Application> = Api::all(self.client.clone());
        tokio::spawn(async move {
            let mut events = watcher(api, watcher::Config::default()).default_backoff().boxed();
            while let Some(event) = events.next().await {
                let at = Instant::now();
                if let Ok(Event::Apply(app) | Event::InitApply(app)) = event {
                    let seen = crate::observe::app_seen(&app);
                    let k = key(&app.namespace().unwrap_or_default(), &app.name_any());
                    tracker.lock().expect("tracker").seen(&k, seen.commit.as_deref(), seen.converged(), at);
                }
            }
        })
    }

    /// The replica to kill: every other kill the leader, otherwise one drawn from those
    /// running; its index and whether it leads.
    async fn pick_victim(&mut self, rng: &mut Rng, kills: usize) -> Result<Option<(usize, bool)>> {
        let leader = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(self.client.clone(), SYSTEM)
            .get_opt(&format!("{LEASE_PREFIX}-leader"))
            .await?
            .and_then(|l| l.spec?.holder_identity);
        let running: Vec<usize> = (0..self.replicas.len()).filter(|i| self.replicas[*i].running()).collect();
        if running.len() < 2 {
            return Ok(None);
        }
        let leading = running.iter().copied().find(|i| leader.as_deref() == Some(self.replicas[*i].name.as_str()));
        let victim = match leading {
            Some(i) if kills.is_multiple_of(2) => i,
            _ => running[rng.below(running.len())],
        };
        Ok(Some((victim, Some(victim) == leading)))
    }

    /// Start replica `i` again (its log so far kept as `<log>.<n>`).
    fn restart_replica(&mut self, i: usize) -> Result<()> {
        let log = self.replicas[i].log.clone();
        let kept = (1..).map(|n| log.with_extension(format!("log.{n}"))).find(|p| !p.exists()).expect("a free name");
        std::fs::rename(&log, &kept)?;
        let p = self.spawn_replica(i)?;
        say!("chaos: {} started again, pid {}", p.name, p.pid());
        self.replicas[i] = p;
        Ok(())
    }

    /// A control request to simcluster with no body.
    async fn control(&self, method: &str, path: &str) -> Result<()> {
        let request = http::Request::builder().method(method).uri(path).body(Vec::new()).expect("a request");
        self.client.request_text(request).await?;
        Ok(())
    }

    /// A control request to simcluster posting `body`.
    async fn control_json(&self, path: &str, body: &impl serde::Serialize) -> Result<()> {
        let request = http::Request::post(path)
            .header("content-type", "application/json")
            .body(serde_json::to_vec(body).expect("JSON"))
            .expect("a request");
        self.client.request_text(request).await?;
        Ok(())
    }

    /// Every Application's objects against what Git holds at the end: (missing or different,
    /// removed from Git but still there).
    async fn check_objects(&self, content: &[Content]) -> Result<(Vec<String>, Vec<String>)> {
        let (mut wrong, mut not_pruned) = (Vec::new(), Vec::new());
        for ns in crate::fleet::namespaces(self.args.namespaces) {
            let cms: HashMap<String, ConfigMap> = Api::<ConfigMap>::namespaced(self.client.clone(), &ns)
                .list(&Default::default())
                .await?
                .items
                .into_iter()
                .map(|c| (c.name_any(), c))
                .collect();
            let deployments: Vec<String> = Api::<Deployment>::namespaced(self.client.clone(), &ns)
                .list(&Default::default())
                .await?
                .items
                .iter()
                .map(ResourceExt::name_any)
                .collect();
            for (def, c) in self.apps.iter().zip(content).filter(|(d, _)| d.namespace == ns) {
                let data = |name: &str| cms.get(name).map(|cm| cm.data.clone().unwrap_or_default());
                let want = chaos::main_data(def, *c);
                match data(&def.name) {
                    None => wrong.push(format!("{ns}/{}: missing", def.name)),
                    Some(have) if have != want => wrong.push(format!("{ns}/{}: {have:?}, Git has {want:?}", def.name)),
                    Some(_) => {}
                }
                let extra = chaos::extra_name(&def.name, c.generation);
                let want: BTreeMap<String, String> = [("generation".to_string(), c.generation.to_string())].into();
                match data(&extra) {
                    None => wrong.push(format!("{ns}/{extra}: missing")),
                    Some(have) if have != want => wrong.push(format!("{ns}/{extra}: {have:?}, Git has {want:?}")),
                    Some(_) => {}
                }
                for g in 0..c.generation {
                    let old = chaos::extra_name(&def.name, g);
                    if cms.contains_key(&old) {
                        not_pruned.push(format!("{ns}/{old}: removed from Git, still there"));
                    }
                }
                let web = format!("{}-web", def.name);
                if (def.deployment || def.three) && !deployments.contains(&web) {
                    wrong.push(format!("{ns}/{web}: Deployment missing"));
                }
            }
        }
        Ok((wrong, not_pruned))
    }

    /// The audit log against the Leases: every write by a replica for a shard's Application
    /// made while it held that shard's Lease, every leader-only write while it held the
    /// leader's.
    fn check_writes(&self, events: &[simcluster::faults::AuditEvent], report: &mut Chaos) {
        let prefix = format!("system:serviceaccount:{SYSTEM}:");
        let versions = self.lease_versions.lock().expect("lease versions").clone();
        let mut lease_writes = Vec::new();
        for e in events.iter().filter(|e| chaos::stored(e) && e.resource == "leases" && e.namespace == SYSTEM) {
            let Some(replica) = chaos::replica_of(e, &prefix) else { continue };
            let Ok(at) = e.time.parse::<jiff::Timestamp>() else { continue };
            if e.verb == "delete" {
                lease_writes.push(LeaseWrite { at, lease: e.name.clone(), holder: None });
                continue;
            }
            let holder = match versions.get(&(e.name.clone(), e.resource_version.clone())) {
                Some(h) => h.clone(),
                None => {
                    report.lease_writes_unseen += 1;
                    Some(replica.to_string())
                }
            };
            lease_writes.push(LeaseWrite { at, lease: e.name.clone(), holder });
        }
        let holdings = chaos::holdings(&lease_writes, self.args.lease_duration);
        let shard_lease: HashMap<u32, String> = (0..self.args.shards)
            .map(|k| (k, sharding::coordinator::Coordinator::shard_lease(LEASE_PREFIX, k)))
            .collect();
        let leader_lease = format!("{LEASE_PREFIX}-leader");
        let mut apps: HashMap<String, Vec<(String, u32)>> = HashMap::new();
        for def in &self.apps {
            apps.entry(def.namespace.clone()).or_default().push((def.name.clone(), def.shard(self.args.shards)));
        }
        // With the oldest events dropped, the first Lease duration has no Lease history.
        let from = events
            .first()
            .filter(|_| report.audit_truncated)
            .and_then(|e| e.time.parse::<jiff::Timestamp>().ok())
            .and_then(|t| t.checked_add(jiff::SignedDuration::try_from(self.args.lease_duration).ok()?).ok());
        for e in events.iter().filter(|e| chaos::stored(e)) {
            let Some(replica) = chaos::replica_of(e, &prefix) else { continue };
            let Ok(at) = e.time.parse::<jiff::Timestamp>() else { continue };
            if from.is_some_and(|f| at < f) {
                continue;
            }
            let (lease, leader) = match chaos::scope(e, &apps) {
                Scope::Lease => continue,
                Scope::Unattributed => {
                    *report.unattributed_writes.entry(super::write_kind(e)).or_default() += 1;
                    continue;
                }
                Scope::Shard(k) => (shard_lease[&k].as_str(), false),
                Scope::Leader => (leader_lease.as_str(), true),
            };
            if leader {
                report.checked_writes.1 += 1;
            } else {
                report.checked_writes.0 += 1;
            }
            if chaos::held(&holdings, lease, replica, at) {
                continue;
            }
            if leader {
                report.unheld_leader_writes += 1;
            } else {
                report.unheld_shard_writes += 1;
            }
            // Examples of both kinds.
            let kind = if leader { "leader-only" } else { "shard" };
            if report.unheld_examples.iter().filter(|e| e.starts_with(kind)).count() < EXAMPLES / 2 {
                let last = holdings
                    .get(lease)
                    .and_then(|l| l.iter().rev().find(|h| h.from <= at))
                    .map(|h| format!("{} held it from {} until {}", h.holder, h.from, h.until));
                report.unheld_examples.push(format!(
                    "{kind} write {} ({lease}: {})",
                    chaos::describe(e, replica),
                    last.unwrap_or_else(|| "never held before".into())
                ));
            }
        }
    }
}

/// Lease (name, resourceVersion) to the holder that version names.
pub type LeaseVersions = Arc<Mutex<HashMap<(String, String), Option<String>>>>;

/// Every Lease write the watch saw in `namespace`: (name, resourceVersion) to the holder it
/// left (`None`: none), for telling renewals from releases in the audit log.
pub fn lease_versions(client: &kube::Client, namespace: &str) -> LeaseVersions {
    let seen = Arc::new(Mutex::new(HashMap::new()));
    let s = seen.clone();
    let api: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(client.clone(), namespace);
    tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default()).default_backoff().boxed();
        while let Some(event) = events.next().await {
            if let Ok(Event::Apply(l) | Event::InitApply(l)) = event {
                let holder = l.spec.as_ref().and_then(|s| s.holder_identity.clone()).filter(|h| !h.is_empty());
                let rv = l.meta().resource_version.clone().unwrap_or_default();
                s.lock().expect("lease versions").insert((l.name_any(), rv), holder);
            }
        }
    });
    seen
}
