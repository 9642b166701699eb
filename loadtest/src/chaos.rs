//! The chaos run's pure parts: the seeded schedule, what Git holds for each Application as
//! commits go on, when each commit reached each Application, and the checks of simcluster's
//! audit log (writes made outside a held shard or leadership, deletes of objects still
//! desired). `run/chaos.rs` does the I/O.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use simcluster::faults::AuditEvent;

use crate::fleet::{AppDef, GIT_VALUE};
use crate::run::belongs_to;

/// A small seeded generator (splitmix64): the same seed gives the same kills, faults and
/// commits.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next_u64() % n.max(1) as u64).unwrap_or(0)
    }

    /// A duration between `lo` and `hi`, to the millisecond.
    pub fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let span = u64::try_from(hi.saturating_sub(lo).as_millis()).unwrap_or(u64::MAX);
        lo + Duration::from_millis(self.next_u64() % (span + 1))
    }
}

/// The fault kinds the run injects, each for the replicas' and the deployers' requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// A burst of 429 Too Many Requests (with `Retry-After`) on a share of requests.
    TooMany,
    /// A burst of 500 Internal Server Error on a share of requests.
    ServerError,
    /// Every open watch ends.
    DropWatches,
    /// History compacted, then every open watch ends: resuming gets 410 Expired.
    Expire,
}

impl Fault {
    /// Every kind, in the order the schedule draws from.
    pub const ALL: [Fault; 4] = [Fault::TooMany, Fault::ServerError, Fault::DropWatches, Fault::Expire];

    /// Its name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Fault::TooMany => "429 burst",
            Fault::ServerError => "500 burst",
            Fault::DropWatches => "watches dropped",
            Fault::Expire => "410 on resume",
        }
    }
}

/// What Git holds for one Application in the chaos run: its main ConfigMap's `rev`, and the
/// generation of its extra ConfigMap (`<name>-x<gen>`; a new generation replaces the old one,
/// which prune must delete). A removed object's name is never used again, so any delete of a
/// name before the push that removed it is wrong.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Content {
    /// The main ConfigMap's `rev`.
    pub rev: u32,
    /// The extra ConfigMap's generation.
    pub generation: u32,
}

/// The key of the main ConfigMap that changes with every commit touching the Application.
pub const REV_KEY: &str = "rev";

/// The name of `app`'s extra ConfigMap of generation `generation`.
pub fn extra_name(app: &str, generation: u32) -> String {
    format!("{app}-x{generation}")
}

/// `def`'s files holding `content`: its usual ones (the main ConfigMap with `rev`) and the
/// extra ConfigMap.
pub fn files(def: &AppDef, content: Content) -> Vec<(String, String)> {
    let mut out = def.files();
    if let Some((_, cm)) = out.first_mut() {
        cm.push_str(&format!("  {REV_KEY}: \"{}\"\n", content.rev));
    }
    let extra = extra_name(&def.name, content.generation);
    out.push((
        format!("{}/extra.yaml", def.path()),
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {extra}\ndata:\n  generation: \"{}\"\n",
            content.generation
        ),
    ));
    out
}

/// The data `def`'s main ConfigMap must hold with `content`.
pub fn main_data(def: &AppDef, content: Content) -> BTreeMap<String, String> {
    [
        (crate::observe::EDITED_KEY.to_string(), GIT_VALUE.to_string()),
        ("app".to_string(), def.name.clone()),
        (REV_KEY.to_string(), content.rev.to_string()),
    ]
    .into()
}

/// Which Applications one commit changes: `count` distinct indices of `apps`, and for each
/// whether its extra ConfigMap is replaced too (every other, drawn).
pub fn pick(rng: &mut Rng, apps: usize, count: usize) -> Vec<(usize, bool)> {
    let mut out: Vec<(usize, bool)> = Vec::new();
    while out.len() < count.min(apps) {
        let i = rng.below(apps);
        if !out.iter().any(|(j, _)| *j == i) {
            out.push((i, rng.below(2) == 0));
        }
    }
    out
}

/// When each commit reached each Application: a change (an Application's content changed by
/// commit n, pushed at t) is deployed when the Application is first seen Synced, Healthy and
/// Ready at commit n or a later one (a later commit holds the change or supersedes it).
#[derive(Debug, Default)]
pub struct Tracker {
    /// Commit ids in push order (index 0: the initial commit).
    order: HashMap<String, usize>,
    /// Changes not yet deployed: (commit index, pushed), by Application.
    pending: HashMap<String, Vec<(usize, Instant)>>,
    /// Deployed changes: push to deployed.
    pub latencies: Vec<Duration>,
    /// Deployed changes first seen at a later commit than their own.
    pub superseded: usize,
}

impl Tracker {
    /// Note commit `id`, the next in order.
    pub fn commit(&mut self, id: &str) {
        let n = self.order.len();
        self.order.entry(id.to_string()).or_insert(n);
    }

    /// Note that the last commit changed Application `key`, pushed at `at`.
    pub fn changed(&mut self, key: &str, at: Instant) {
        let n = self.order.len().saturating_sub(1);
        self.pending.entry(key.to_string()).or_default().push((n, at));
    }

    /// Note what was seen of Application `key` at `at`: converged at `commit`, or not.
    pub fn seen(&mut self, key: &str, commit: Option<&str>, converged: bool, at: Instant) {
        let Some(n) = commit.filter(|_| converged).and_then(|c| self.order.get(c).copied()) else { return };
        let Some(pending) = self.pending.get_mut(key) else { return };
        pending.retain(|(want, pushed)| {
            if *want > n {
                return true;
            }
            self.latencies.push(at.saturating_duration_since(*pushed));
            if *want < n {
                self.superseded += 1;
            }
            false
        });
    }

    /// Changes never seen deployed, by Application.
    pub fn never_deployed(&self) -> BTreeMap<String, usize> {
        self.pending.iter().filter(|(_, p)| !p.is_empty()).map(|(k, p)| (k.clone(), p.len())).collect()
    }
}

/// What a replica's write is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// An object of an Application of this shard (its status, Revisions, Events, managed
    /// objects).
    Shard(u32),
    /// Work only the elected leader does: shard labels and orphan reports (field manager
    /// `kuvryn-sync-sharding`), Repositories, HealthChecks, deleting a gone replica's
    /// membership Lease.
    Leader,
    /// A Lease of its own (renewals, acquisitions, releases): not checked.
    Lease,
    /// None of these: counted, not checked.
    Unattributed,
}

/// The field manager of the leader's shard labels and orphan reports.
const LEADER_MANAGER: &str = kuvryn_sync::controller::labeller::MANAGER;

/// The replica a write came from (directly or impersonating a deployer): its name after
/// `prefix` (`system:serviceaccount:<ns>:`).
pub fn replica_of<'a>(e: &'a AuditEvent, prefix: &str) -> Option<&'a str> {
    let who = e.impersonated_by.as_deref().unwrap_or(&e.user);
    who.strip_prefix(prefix)
}

/// What `e` is for, with `apps` the Applications by namespace (name, shard).
pub fn scope(e: &AuditEvent, apps: &HashMap<String, Vec<(String, u32)>>) -> Scope {
    if e.resource == "leases" {
        return if e.verb == "delete" { Scope::Leader } else { Scope::Lease };
    }
    if e.field_manager == LEADER_MANAGER
        || e.resource.starts_with("repositories")
        || e.resource.starts_with("healthchecks")
    {
        return Scope::Leader;
    }
    let owner = apps.get(&e.namespace).and_then(|list| list.iter().find(|(name, _)| belongs_to(&e.name, name)));
    match owner {
        Some((_, shard)) => Scope::Shard(*shard),
        // Events of a Repository (`platform.<id>`).
        None if e.resource == "events" && belongs_to(&e.name, crate::fleet::REPOSITORY) => Scope::Leader,
        None => Scope::Unattributed,
    }
}

/// One write to a Lease that succeeded: when, by whom, and the holder it left (`None`:
/// released).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseWrite {
    /// When simcluster served it.
    pub at: Timestamp,
    /// The Lease.
    pub lease: String,
    /// The holder it wrote.
    pub holder: Option<String>,
}

/// When `holder` held a Lease: from a write naming it until the Lease duration after, or the
/// next write naming someone else (or no one), whichever is first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holding {
    /// The holder.
    pub holder: String,
    /// The write.
    pub from: Timestamp,
    /// The end.
    pub until: Timestamp,
}

/// Every holding of every Lease, from its writes in time order.
pub fn holdings(writes: &[LeaseWrite], duration: Duration) -> HashMap<String, Vec<Holding>> {
    let mut by_lease: HashMap<String, Vec<&LeaseWrite>> = HashMap::new();
    for w in writes {
        by_lease.entry(w.lease.clone()).or_default().push(w);
    }
    let span = jiff::SignedDuration::try_from(duration).unwrap_or(jiff::SignedDuration::ZERO);
    let mut out: HashMap<String, Vec<Holding>> = HashMap::new();
    for (lease, mut list) in by_lease {
        list.sort_by_key(|w| w.at);
        for (i, w) in list.iter().enumerate() {
            let Some(holder) = &w.holder else { continue };
            let expiry = w.at.checked_add(span).unwrap_or(w.at);
            let taken = list[i + 1..].iter().find(|n| n.holder.as_ref() != Some(holder)).map(|n| n.at);
            let until = taken.map_or(expiry, |t| t.min(expiry));
            out.entry(lease.clone()).or_default().push(Holding { holder: holder.clone(), from: w.at, until });
        }
    }
    out
}

/// Whether `who` held `lease` at `at` by `holdings`.
pub fn held(holdings: &HashMap<String, Vec<Holding>>, lease: &str, who: &str, at: Timestamp) -> bool {
    holdings.get(lease).is_some_and(|list| list.iter().any(|h| h.holder == who && h.from <= at && at <= h.until))
}

/// Whether a write succeeded and stored something.
pub fn stored(e: &AuditEvent) -> bool {
    (200..300).contains(&e.code) && !e.dry_run
}

/// `verb resource namespace/name at time by user` of a write, for the report.
pub fn describe(e: &AuditEvent, replica: &str) -> String {
    format!("{} {} {}/{} at {} by {replica} ({})", e.verb, e.resource, e.namespace, e.name, e.time, e.field_manager)
}

/// The objects Git declares for the Applications: `resource namespace/name` to the push that
/// removed it from Git (`None`: still declared).
pub type Declared = HashMap<(String, String, String), Option<Timestamp>>;

/// Deletes (by anyone) of declared objects made before the push that removed them, or of
/// objects still declared.
pub fn wrong_deletes(events: &[AuditEvent], declared: &Declared) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.verb == "delete" && stored(e))
        .filter_map(|e| {
            let removed = declared.get(&(e.resource.clone(), e.namespace.clone(), e.name.clone()))?;
            let at = e.time.parse::<Timestamp>().ok()?;
            let wrong = removed.is_none_or(|r| at < r);
            wrong.then(|| describe(e, replica_or_user(e)))
        })
        .collect()
}

fn replica_or_user(e: &AuditEvent) -> &str {
    e.impersonated_by.as_deref().unwrap_or(&e.user)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(time: &str, verb: &str, resource: &str, ns: &str, name: &str) -> AuditEvent {
        AuditEvent {
            time: time.into(),
            user: "system:serviceaccount:team-00:deployer".into(),
            groups: Vec::new(),
            impersonated_by: Some("system:serviceaccount:kuvryn-system:ksync-1".into()),
            verb: verb.into(),
            group: String::new(),
            resource: resource.into(),
            namespace: ns.into(),
            name: name.into(),
            field_manager: "kuvryn-sync".into(),
            code: 200,
            resource_version: "1".into(),
            dry_run: false,
        }
    }

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn the_schedule_is_the_seeds() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        let one: Vec<u64> = (0..5).map(|_| a.next_u64()).collect();
        let two: Vec<u64> = (0..5).map(|_| b.next_u64()).collect();
        assert_eq!(one, two);
        let mut r = Rng::new(1);
        for _ in 0..100 {
            let d = r.between(Duration::from_secs(20), Duration::from_secs(40));
            assert!(d >= Duration::from_secs(20) && d <= Duration::from_secs(40));
        }
        let p = pick(&mut r, 10, 4);
        assert_eq!(p.len(), 4);
        assert!(p.iter().all(|(i, _)| *i < 10));
        assert_eq!(pick(&mut r, 3, 9).len(), 3, "no more than there are");
    }

    #[test]
    fn a_change_is_deployed_by_its_commit_or_a_later_one() {
        let t0 = Instant::now();
        let mut t = Tracker::default();
        t.commit("c0");
        t.commit("c1");
        t.changed("ns/a", t0);
        t.changed("ns/b", t0);
        t.commit("c2");
        t.changed("ns/b", t0 + Duration::from_secs(1));
        // Not converged, or converged at an older commit: not deployed.
        t.seen("ns/a", Some("c1"), false, t0 + Duration::from_secs(2));
        t.seen("ns/a", Some("c0"), true, t0 + Duration::from_secs(2));
        assert_eq!(t.never_deployed(), [("ns/a".to_string(), 1), ("ns/b".to_string(), 2)].into());
        t.seen("ns/a", Some("c1"), true, t0 + Duration::from_secs(3));
        // b's first change is superseded by its second.
        t.seen("ns/b", Some("c2"), true, t0 + Duration::from_secs(5));
        assert!(t.never_deployed().is_empty());
        assert_eq!(t.superseded, 1);
        let mut l = t.latencies.clone();
        l.sort();
        assert_eq!(l, [3, 4, 5].map(Duration::from_secs));
    }

    #[test]
    fn writes_are_judged_against_who_held_the_lease_then() {
        let d = Duration::from_secs(10);
        let w = |at: &str, holder: Option<&str>| LeaseWrite {
            at: ts(at),
            lease: "s-1".into(),
            holder: holder.map(String::from),
        };
        let h = holdings(
            &[
                w("2026-01-01T00:00:00Z", Some("a")),
                w("2026-01-01T00:00:03Z", Some("a")),
                // a released it, b took it later; then b stopped renewing.
                w("2026-01-01T00:00:05Z", None),
                w("2026-01-01T00:00:07Z", Some("b")),
            ],
            d,
        );
        assert!(held(&h, "s-1", "a", ts("2026-01-01T00:00:04Z")));
        assert!(!held(&h, "s-1", "a", ts("2026-01-01T00:00:06Z")), "released");
        assert!(!held(&h, "s-1", "b", ts("2026-01-01T00:00:06Z")));
        assert!(held(&h, "s-1", "b", ts("2026-01-01T00:00:16Z")));
        assert!(!held(&h, "s-1", "b", ts("2026-01-01T00:00:18Z")), "expired");
        assert!(!held(&h, "s-2", "a", ts("2026-01-01T00:00:01Z")));
    }

    #[test]
    fn writes_are_told_apart_by_what_they_are_for() {
        let apps: HashMap<String, Vec<(String, u32)>> =
            [("team-00".to_string(), vec![("app-0000".to_string(), 3), ("app-0001".to_string(), 5)])].into();
        let s = |resource: &str, name: &str| scope(&event("t", "patch", resource, "team-00", name), &apps);
        assert_eq!(s("configmaps", "app-0001-x2"), Scope::Shard(5));
        assert_eq!(s("applications/status", "app-0000"), Scope::Shard(3));
        assert_eq!(s("revisions", "app-0000-1a2b"), Scope::Shard(3));
        assert_eq!(s("events", "app-0001.18c2"), Scope::Shard(5));
        assert_eq!(s("events", "platform.18c2"), Scope::Leader);
        assert_eq!(s("repositories/status", "platform"), Scope::Leader);
        assert_eq!(s("leases", "kuvryn-sync-shard-1"), Scope::Lease);
        assert_eq!(s("configmaps", "other"), Scope::Unattributed);
        let mut labels = event("t", "patch", "applications", "team-00", "app-0000");
        labels.field_manager = LEADER_MANAGER.into();
        assert_eq!(scope(&labels, &apps), Scope::Leader);
        assert_eq!(replica_of(&labels, "system:serviceaccount:kuvryn-system:"), Some("ksync-1"));
    }

    #[test]
    fn a_delete_is_wrong_before_the_push_that_removed_the_object() {
        let key = |n: &str| ("configmaps".to_string(), "team-00".to_string(), n.to_string());
        let declared: Declared =
            [(key("app-0000"), None), (key("app-0000-x0"), Some(ts("2026-01-01T00:00:10Z")))].into();
        let events = [
            event("2026-01-01T00:00:11Z", "delete", "configmaps", "team-00", "app-0000-x0"),
            event("2026-01-01T00:00:09Z", "delete", "configmaps", "team-00", "app-0000-x0"),
            event("2026-01-01T00:00:12Z", "delete", "configmaps", "team-00", "app-0000"),
            event("2026-01-01T00:00:12Z", "delete", "pods", "team-00", "app-0000-abc"),
        ];
        let wrong = wrong_deletes(&events, &declared);
        assert_eq!(wrong.len(), 2, "{wrong:?}");
        assert!(wrong[0].contains("app-0000-x0 at 2026-01-01T00:00:09Z"), "{wrong:?}");
    }

    #[test]
    fn the_files_hold_the_content() {
        let def = crate::fleet::plan(1, &crate::fleet::namespaces(1), 0, crate::fleet::Objects::Configmap).remove(0);
        let f = files(&def, Content { rev: 4, generation: 2 });
        assert_eq!(f.len(), 2);
        let cm: serde_json::Value = kuvryn_sync::yaml::from_str(&f[0].1).unwrap();
        let want: serde_json::Value = serde_json::to_value(main_data(&def, Content { rev: 4, generation: 2 })).unwrap();
        assert_eq!(cm["data"], want);
        assert!(f[1].1.contains("name: app-0000-x2"), "{}", f[1].1);
    }
}
