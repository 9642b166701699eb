//! `coordination.k8s.io/v1` Leases with fencing that does not trust clocks.
//!
//! - **Acquire / renew**: a replace conditioned on the Lease's `resourceVersion`, so two
//!   replicas can never both win the same transition.
//! - **Expiry of someone else's Lease** is judged the way client-go's leader election does it:
//!   by how long *this* process has seen the Lease's `resourceVersion` unchanged, on its own
//!   monotonic clock. Wall-clock skew between replicas does not make a Lease look expired early.
//! - **Our own validity** ([`Held::valid_until`]) runs from the moment the renewing request was
//!   *sent*, for the Lease duration minus a margin: the holder stops acting before any other
//!   replica may take over, whatever their clocks say (only clock *rates* matter).
//! - **Epoch**: `leaseTransitions` increments on every change of holder; a holder records it
//!   with the writes it makes, so a write from an older epoch can be told apart.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;
use kube::runtime::{WatchStreamExt, watcher};

/// The label giving a Lease's role: `member`, `shard` or `leader`.
pub const ROLE_LABEL: &str = "sync.kuvryn.io/lease-role";

/// The annotation on every Lease a replica writes: its shard count (`--shards`). A Lease is
/// this replica's own only if it names this identity *and* this count ([`crate::count`]).
pub const SHARDS_ANNOTATION: &str = "sync.kuvryn.io/shards";

/// Histogram: time between the sends of two successful renewals of a Lease this replica held
/// throughout. Labels: `role` ([`ROLE_LABEL`]'s values).
pub const RENEWAL_GAP_SECONDS: &str = "ksync_lease_renewal_gap_seconds";

/// Counter: renewals answered after the fence limit: the validity of the renewal before, less
/// [`Timing::fence_spare`], had already run out, so the holder's writes stopped in between. A
/// held Lease whose renewals fail past that limit, or that is lost without a renewal, counts
/// once when the failure or the loss is seen (`Renewed::late`). Labels: `role`.
pub const RENEWALS_LATE_TOTAL: &str = "ksync_lease_renewals_late_total";

/// A Lease this process holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    /// The Lease's name.
    pub name: String,
    /// `leaseTransitions` when we took it: the fencing epoch.
    pub epoch: i32,
    /// Until when (local monotonic clock) we may act on it.
    pub valid_until: Instant,
}

impl Held {
    /// Whether we may still act, with `spare` to spare.
    pub fn valid(&self, spare: Duration) -> bool {
        Instant::now() + spare < self.valid_until
    }
}

/// Timing of the Leases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// `leaseDurationSeconds`.
    pub duration: Duration,
    /// How much earlier than the duration a holder stops acting.
    pub margin: Duration,
}

impl Timing {
    /// The duration with a third of it as margin.
    pub fn new(duration: Duration) -> Timing {
        Timing { duration, margin: duration / 3 }
    }

    /// How often to renew: a third of the duration.
    pub fn renew_every(&self) -> Duration {
        self.duration / 3
    }

    /// How long a holder may act on a write of its Lease, from when the write was sent.
    pub fn valid_for(&self) -> Duration {
        self.duration.saturating_sub(self.margin)
    }

    /// Whether a renewal answered at `answered` came after the fence limit of the one before it,
    /// sent at `before`: that one's validity less [`Timing::fence_spare`] had run out, so every
    /// write fenced by the Lease stopped in between.
    pub fn late(&self, before: Instant, answered: Instant) -> bool {
        answered > before + self.valid_for().saturating_sub(self.fence_spare())
    }

    /// How much of a held Lease's validity a write must have to spare to be sent (the fence of a
    /// shard's and of the leader's writes): a tenth of the duration, enough for a request in
    /// flight, while a renewal delayed by a busy machine does not stop the work between two
    /// renewals.
    pub fn fence_spare(&self) -> Duration {
        self.duration / 10
    }

    /// How long one Lease request may take: a third of the duration. An answer later than that
    /// would leave the holder almost no validity, and a request the server never answers must
    /// not hold up the renewals queued behind it.
    pub fn request_timeout(&self) -> Duration {
        (self.duration / 3).max(Duration::from_millis(100))
    }
}

/// A Lease request the API server did not answer within [`Timing::request_timeout`].
#[derive(Debug)]
pub struct TimedOut {
    /// What was asked.
    pub what: &'static str,
    /// What it was about: `Lease <name>` or `Leases labelled <selector>`.
    pub subject: String,
    /// How long it was given.
    pub after: Duration,
}

impl std::fmt::Display for TimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "no answer from the API server within {:?} to the {} of {}", self.after, self.what, self.subject)
    }
}

impl std::error::Error for TimedOut {}

/// Acquires, renews and releases Leases in one namespace as one identity.
pub struct Leases {
    api: Api<Lease>,
    identity: String,
    timing: Timing,
    /// The shard count written on every Lease ([`SHARDS_ANNOTATION`]); `None` writes none.
    shards: Option<u32>,
    /// Foreign Leases: name → (resourceVersion, when we first saw that version, its duration).
    observed: Mutex<HashMap<String, (String, Instant, Duration)>>,
    /// The Leases we hold as we last wrote them: a renewal replaces from this copy (one request,
    /// conditioned on its `resourceVersion`) and reads the Lease only when that copy is stale.
    written: Mutex<HashMap<String, Lease>>,
    /// The last successful write of each Lease we hold (what [`RENEWAL_GAP_SECONDS`] measures
    /// from).
    renewed: Mutex<HashMap<String, Renewed>>,
}

/// The last successful write of a Lease we hold.
#[derive(Clone, Copy, Debug)]
struct Renewed {
    /// When it was sent.
    sent: Instant,
    /// Whether the gap since has been counted late already (a failed renewal saw it).
    counted: bool,
}

impl Renewed {
    /// Whether the gap since this write, seen at `now`, is to be counted late now: past the
    /// fence limit ([`Timing::late`]) and not counted yet. Contract: one gap counts at most once,
    /// however many failed renewals see it before one succeeds or the Lease is lost.
    fn late(&mut self, timing: Timing, now: Instant) -> bool {
        let count = !self.counted && timing.late(self.sent, now);
        self.counted |= count;
        count
    }
}

/// Why a Lease operation failed (other than losing a race, which is `Ok(None)`).
pub type Result<T> = std::result::Result<T, kube::Error>;

fn now_micro() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

impl Leases {
    /// Leases in `api`'s namespace, held as `identity`.
    pub fn new(api: Api<Lease>, identity: impl Into<String>, timing: Timing) -> Leases {
        Leases {
            api,
            identity: identity.into(),
            timing,
            shards: None,
            observed: Mutex::new(HashMap::new()),
            written: Mutex::new(HashMap::new()),
            renewed: Mutex::new(HashMap::new()),
        }
    }

    /// Write `shards` on every Lease, and count as our own only Leases that carry it.
    pub fn with_shards(mut self, shards: u32) -> Leases {
        self.shards = Some(shards);
        self
    }

    /// The shard count these Leases carry.
    pub fn shards(&self) -> Option<u32> {
        self.shards
    }

    /// Whether `lease` is ours: our identity, written under our count (an earlier process of
    /// this identity with another `--shards` is another replica).
    fn ours(&self, lease: &Lease) -> bool {
        let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref());
        holder == Some(self.identity.as_str()) && (self.shards.is_none() || shards_of(lease) == self.shards)
    }

    /// Put our count on `meta`.
    fn stamp(&self, meta: &mut ObjectMeta) {
        if let Some(n) = self.shards {
            meta.annotations.get_or_insert_with(Default::default).insert(SHARDS_ANNOTATION.to_string(), n.to_string());
        }
    }

    /// Our identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The timing.
    pub fn timing(&self) -> Timing {
        self.timing
    }

    fn spec(&self, transitions: i32, acquired: Option<MicroTime>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(i32::try_from(self.timing.duration.as_secs().max(1)).unwrap_or(i32::MAX)),
            acquire_time: Some(acquired.unwrap_or_else(now_micro)),
            renew_time: Some(now_micro()),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    /// Whether a Lease held by someone else may be taken: released (no holder), or unchanged
    /// for a whole duration as this process observed it.
    fn takeable(&self, lease: &Lease) -> bool {
        let spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref().is_none_or(str::is_empty) {
            return true;
        }
        let duration = spec
            .lease_duration_seconds
            .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0)))
            .unwrap_or(self.timing.duration);
        self.observe(lease, duration) >= duration
    }

    /// Note `lease`'s `resourceVersion` (and `duration`) as seen now; how long this process has
    /// seen it unchanged.
    fn observe(&self, lease: &Lease, duration: Duration) -> Duration {
        let rv = lease.metadata.resource_version.clone().unwrap_or_default();
        let name = lease.metadata.name.clone().unwrap_or_default();
        let mut observed = self.observed.lock().expect("observed lock");
        let entry = observed.entry(name).or_insert_with(|| (rv.clone(), Instant::now(), duration));
        if entry.0 != rv {
            *entry = (rv, Instant::now(), duration);
        }
        entry.1.elapsed()
    }

    /// The earliest moment still to come at which a foreign Lease named as `names` selects,
    /// observed held, becomes takeable ([`Leases::takeable`]) unless its holder renews it first:
    /// when to look again to take over a dead holder's Lease at once instead of at the next
    /// renewal round, up to a third of the duration later. Contract: only moments after now
    /// (a passed one was looked at, or its Lease was released), so each observation wakes a
    /// caller at most once.
    pub fn takeable_at(&self, names: impl Fn(&str) -> bool) -> Option<Instant> {
        let now = Instant::now();
        let observed = self.observed.lock().expect("observed lock");
        observed
            .iter()
            .filter(|(name, _)| names(name))
            .map(|(_, (_, seen, duration))| *seen + *duration)
            .filter(|at| *at > now)
            .min()
    }

    /// `request`, failing with [`TimedOut`] if the server has not answered within
    /// [`Timing::request_timeout`].
    async fn bounded<T>(
        &self,
        what: &'static str,
        subject: impl FnOnce() -> String,
        request: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let after = self.timing.request_timeout();
        match tokio::time::timeout(after, request).await {
            Ok(answer) => answer,
            Err(_) => Err(kube::Error::Service(Box::new(TimedOut { what, subject: subject(), after }))),
        }
    }

    /// The Leases selected by `labels`, within [`Timing::request_timeout`].
    async fn list(&self, labels: &str) -> Result<kube::core::ObjectList<Lease>> {
        let params = kube::api::ListParams::default().labels(labels);
        self.bounded("list", || format!("Leases labelled {labels}"), self.api.list(&params)).await
    }

    /// Acquire or renew `name` (created labelled [`ROLE_LABEL`]`=role`). `Ok(None)`: someone
    /// else holds it (or won a race).
    pub async fn acquire(&self, name: &str, role: &str) -> Result<Option<Held>> {
        let result = self.try_acquire(name, role).await;
        match &result {
            Ok(Some(_)) => {}
            Ok(None) => self.note_failed(name, role, true),
            Err(_) => self.note_failed(name, role, false),
        }
        result
    }

    async fn try_acquire(&self, name: &str, role: &str) -> Result<Option<Held>> {
        let sent = Instant::now();
        let held = |lease: &Lease| Held {
            name: name.to_string(),
            epoch: lease.spec.as_ref().and_then(|s| s.lease_transitions).unwrap_or(0),
            valid_until: sent + self.timing.valid_for(),
        };
        if let Some(renewed) = self.renew_written(name).await? {
            self.note_renewed(name, role, sent, true);
            return Ok(Some(held(&renewed)));
        }
        let Some(current) = self.bounded("read", || format!("Lease {name}"), self.api.get_opt(name)).await? else {
            let mut lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name.to_string()),
                    labels: Some(
                        [
                            (ROLE_LABEL.to_string(), role.to_string()),
                            ("app.kubernetes.io/managed-by".to_string(), "kuvryn-sync".to_string()),
                        ]
                        .into(),
                    ),
                    ..Default::default()
                },
                spec: Some(self.spec(0, None)),
            };
            self.stamp(&mut lease.metadata);
            return match self
                .bounded("create", || format!("Lease {name}"), self.api.create(&PostParams::default(), &lease))
                .await
            {
                Ok(created) => {
                    self.note_renewed(name, role, sent, false);
                    Ok(Some(self.remember(created, held)))
                }
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(None),
                Err(e) => Err(e),
            };
        };
        let spec = current.spec.clone().unwrap_or_default();
        let ours = self.ours(&current);
        if !ours && !self.takeable(&current) {
            return Ok(None);
        }
        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!ours);
        let acquired = if ours { spec.acquire_time.clone() } else { None };
        let mut next = current.clone();
        next.spec = Some(self.spec(transitions, acquired));
        self.stamp(&mut next.metadata);
        match self
            .bounded("write", || format!("Lease {name}"), self.api.replace(name, &PostParams::default(), &next))
            .await
        {
            Ok(replaced) => {
                self.observed.lock().expect("observed lock").remove(name);
                self.note_renewed(name, role, sent, ours);
                Ok(Some(self.remember(replaced, held)))
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A write of `name` sent at `sent` succeeded. `renewal`: we held it already (else it was
    /// just created or taken over, and there is no gap to measure).
    fn note_renewed(&self, name: &str, role: &str, sent: Instant, renewal: bool) {
        let before =
            self.renewed.lock().expect("renewed lock").insert(name.to_string(), Renewed { sent, counted: false });
        let Some(mut before) = before.filter(|_| renewal) else { return };
        let role = role.to_string();
        metrics::histogram!(RENEWAL_GAP_SECONDS, "role" => role.clone())
            .record(sent.duration_since(before.sent).as_secs_f64());
        if before.late(self.timing, Instant::now()) {
            metrics::counter!(RENEWALS_LATE_TOTAL, "role" => role).increment(1);
        }
    }

    /// An acquire of `name` failed (`lost`: someone else holds it now, or won the race to
    /// write it: a 409 on a Lease we held counts as a loss). A Lease we held whose last
    /// successful write is past the fence limit counts late once; a lost one is no longer ours,
    /// and its next write is a takeover, not a renewal.
    fn note_failed(&self, name: &str, role: &str, lost: bool) {
        let mut renewed = self.renewed.lock().expect("renewed lock");
        let Some(r) = renewed.get_mut(name) else { return };
        if r.late(self.timing, Instant::now()) {
            metrics::counter!(RENEWALS_LATE_TOTAL, "role" => role.to_string()).increment(1);
        }
        if lost {
            renewed.remove(name);
        }
    }

    /// Keep `lease` as the copy the next renewal writes from; answer what `held` makes of it.
    fn remember(&self, lease: Lease, held: impl Fn(&Lease) -> Held) -> Held {
        let h = held(&lease);
        if let Some(name) = lease.metadata.name.clone() {
            self.written.lock().expect("written lock").insert(name, lease);
        }
        h
    }

    /// Renew `name` from the copy we last wrote, in one request. `Ok(None)` when there is no
    /// copy or it is stale (someone else wrote the Lease since, or it is gone): the caller reads
    /// the Lease and decides afresh. A request without an answer keeps the copy: if it was
    /// written after all, the next renewal finds it stale and reads.
    async fn renew_written(&self, name: &str) -> Result<Option<Lease>> {
        let Some(mut next) = self.written.lock().expect("written lock").get(name).cloned() else {
            return Ok(None);
        };
        let spec = next.spec.clone().unwrap_or_default();
        next.spec = Some(self.spec(spec.lease_transitions.unwrap_or(0), spec.acquire_time));
        self.stamp(&mut next.metadata);
        match self
            .bounded("write", || format!("Lease {name}"), self.api.replace(name, &PostParams::default(), &next))
            .await
        {
            Ok(replaced) => {
                self.written.lock().expect("written lock").insert(name.to_string(), replaced.clone());
                Ok(Some(replaced))
            }
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {
                self.written.lock().expect("written lock").remove(name);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Release `name` if we hold it (graceful hand-over: no one has to wait for expiry).
    pub async fn release(&self, name: &str) -> Result<()> {
        self.written.lock().expect("written lock").remove(name);
        self.renewed.lock().expect("renewed lock").remove(name);
        let Some(current) = self.bounded("read", || format!("Lease {name}"), self.api.get_opt(name)).await? else {
            return Ok(());
        };
        if !self.ours(&current) {
            return Ok(());
        }
        let spec = current.spec.clone().unwrap_or_default();
        let mut next = current.clone();
        next.spec = Some(LeaseSpec { holder_identity: None, acquire_time: None, renew_time: None, ..spec });
        match self
            .bounded("release", || format!("Lease {name}"), self.api.replace(name, &PostParams::default(), &next))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The holder of each Lease selected by `labels` that has one: Lease name → holder (live or
    /// not: the caller decides with the member Leases). Every Lease held by another replica is
    /// observed on the way, so the whole Lease duration a takeover waits runs from the first
    /// list that saw its last renewal, not from when this replica first wanted it (a replica
    /// assigned a dead one's shards after the membership Lease expired would otherwise wait
    /// a second duration).
    pub async fn holders(&self, labels: &str) -> Result<std::collections::BTreeMap<String, String>> {
        let list = self.list(labels).await?;
        for l in &list.items {
            self.observe_foreign(l);
        }
        Ok(list
            .items
            .into_iter()
            .filter_map(|l| {
                let holder = l.spec?.holder_identity.filter(|h| !h.is_empty())?;
                Some((l.metadata.name?, holder))
            })
            .collect())
    }

    /// Observe every Lease selected by `labels` that someone else holds as its changes
    /// arrive, for as long as this runs (it never ends). The whole duration a takeover waits
    /// then runs from when the holder's last renewal reached the server, give or take the
    /// watch's delivery, not from the next round's list, up to a third of the duration later.
    /// Contract: an observation is never earlier than the write it saw (an event arrives after
    /// its write), so the wait is never shorter than a duration after the holder's last renewal.
    pub async fn follow(&self, labels: &str) {
        let config = watcher::Config::default().labels(labels);
        let mut events = std::pin::pin!(watcher(self.api.clone(), config).default_backoff());
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l)) => self.observe_foreign(&l),
                Ok(_) => {}
                // Retried with backoff; meanwhile the rounds' lists still observe every Lease,
                // up to a third of the duration late. Said, so a missing `watch` permission shows.
                Err(e) => tracing::warn!(error = %e, "watching Leases; takeovers wait for the rounds' lists"),
            }
        }
        std::future::pending::<()>().await;
    }

    /// Observe `lease` ([`Leases::takeable`]) if someone else holds it.
    fn observe_foreign(&self, lease: &Lease) {
        let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref()).unwrap_or_default();
        if !holder.is_empty() && !self.ours(lease) {
            self.takeable(lease);
        }
    }

    /// Every Lease selected by `labels`, as this round sees it ([`Seen`]). Each one held by
    /// someone else is observed on the way, as in [`Leases::holders`].
    pub async fn census(&self, labels: &str) -> Result<Vec<Seen>> {
        let list = self.list(labels).await?;
        let now = jiff::Timestamp::now();
        Ok(list
            .items
            .iter()
            .map(|l| {
                let spec = l.spec.clone().unwrap_or_default();
                let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
                let ours = self.ours(l);
                let live = holder.is_some() && (ours || !self.takeable(l));
                let duration = jiff::SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(15)));
                let renewed =
                    spec.renew_time.as_ref().and_then(|t| t.0.checked_add(duration).ok()).is_some_and(|end| end > now);
                Seen {
                    name: l.metadata.name.clone().unwrap_or_default(),
                    role: l.metadata.labels.as_ref().and_then(|m| m.get(ROLE_LABEL)).cloned().unwrap_or_default(),
                    holder,
                    shards: shards_of(l),
                    acquired: spec.acquire_time.map(|t| t.0),
                    ours,
                    live,
                    renewed,
                }
            })
            .collect())
    }

    /// The holders of the Leases selected by `labels` that are live: renewed within their
    /// duration (wall clock: used only to pick members, never for fencing).
    pub async fn live_holders(&self, labels: &str) -> Result<Vec<String>> {
        let list = self.list(labels).await?;
        let now = jiff::Timestamp::now();
        let mut out: Vec<String> = list
            .items
            .into_iter()
            .filter_map(|l| {
                let spec = l.spec?;
                let holder = spec.holder_identity.filter(|h| !h.is_empty())?;
                let renewed = spec.renew_time?.0;
                let duration = jiff::SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(15)));
                (renewed.checked_add(duration).ok()? > now).then_some(holder)
            })
            .collect();
        out.sort();
        out.dedup();
        Ok(out)
    }
}

/// The shard count `lease` carries ([`SHARDS_ANNOTATION`]).
pub fn shards_of(lease: &Lease) -> Option<u32> {
    lease.metadata.annotations.as_ref()?.get(SHARDS_ANNOTATION)?.parse().ok()
}

/// One Lease as [`Leases::census`] saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// Its name.
    pub name: String,
    /// Its [`ROLE_LABEL`].
    pub role: String,
    /// Its holder, if held.
    pub holder: Option<String>,
    /// The count it carries ([`SHARDS_ANNOTATION`]).
    pub shards: Option<u32>,
    /// Its `acquireTime`.
    pub acquired: Option<jiff::Timestamp>,
    /// Held by us under our count.
    pub ours: bool,
    /// Held, and (unless ours) not seen unchanged for a whole duration on this process's
    /// monotonic clock: the judgement a takeover uses.
    pub live: bool,
    /// Renewed within its duration by the wall clock (how members are picked, never fencing).
    pub renewed: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_renewal_is_late_once_the_fence_of_the_one_before_has_closed() {
        // 15 s Leases: valid for 10 s from each send, writes stop 1.5 s before: 8.5 s.
        let timing = Timing::new(Duration::from_secs(15));
        assert_eq!(timing.valid_for(), Duration::from_secs(10));
        assert_eq!(timing.fence_spare(), Duration::from_millis(1500));
        let before = Instant::now();
        // (answered this long after the renewal before was sent, late)
        let cases = [(0, false), (5_000, false), (8_500, false), (8_501, true), (10_000, true), (60_000, true)];
        for (ms, late) in cases {
            assert_eq!(timing.late(before, before + Duration::from_millis(ms)), late, "{ms} ms");
        }
    }

    #[test]
    fn a_gap_past_the_fence_limit_counts_once_however_many_failures_see_it() {
        let timing = Timing::new(Duration::from_secs(15));
        let sent = Instant::now();
        // (what, ms after the write each failure or success is seen, counts at each)
        let cases: &[(&str, &[u64], &[bool])] = &[
            ("failures within the limit", &[3_000, 8_000], &[false, false]),
            ("a failure past the limit, then the renewal", &[3_000, 9_000, 9_500], &[false, true, false]),
            ("failures past the limit, then the loss", &[9_000, 12_000, 30_000], &[true, false, false]),
            ("the first look is past the limit", &[20_000], &[true]),
        ];
        for (what, seen, want) in cases {
            let mut r = Renewed { sent, counted: false };
            let got: Vec<bool> = seen.iter().map(|ms| r.late(timing, sent + Duration::from_millis(*ms))).collect();
            assert_eq!(got, *want, "{what}");
        }
    }

    #[tokio::test]
    async fn a_dead_holders_lease_is_looked_at_again_when_it_becomes_takeable() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
        let client = kube::Client::try_from(config).expect("client");
        let leases = Leases::new(Api::namespaced(client, "ns"), "me", Timing::new(Duration::from_secs(15)));
        let lease = |name: &str, rv: &str, seconds: i32| Lease {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                resource_version: Some(rv.to_string()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some("other".to_string()),
                lease_duration_seconds: Some(seconds),
                ..Default::default()
            }),
        };
        let all = |_: &str| true;
        assert_eq!(leases.takeable_at(all), None, "nothing observed");
        let before = Instant::now();
        assert!(!leases.takeable(&lease("a", "1", 15)));
        let a = leases.takeable_at(all).expect("a observed");
        assert!(a >= before + Duration::from_secs(15) && a <= Instant::now() + Duration::from_secs(15));
        assert!(!leases.takeable(&lease("a", "1", 15)));
        assert_eq!(leases.takeable_at(all), Some(a), "seen unchanged: the same moment");
        assert!(!leases.takeable(&lease("b", "7", 5)));
        let b = leases.takeable_at(all).expect("b observed");
        assert!(b < a, "the earliest of several");
        assert_eq!(leases.takeable_at(|n| n == "a"), Some(a), "only the Leases selected");
        assert!(!leases.takeable(&lease("a", "2", 15)));
        assert!(leases.takeable_at(|n| n == "a") > Some(a), "renewed: later");
        // A moment passed is not returned, so it wakes nobody twice.
        assert!(leases.takeable(&lease("c", "1", 0)));
        assert_eq!(leases.takeable_at(|n| n == "c"), None);
    }
}
