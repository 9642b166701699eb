//! Shard ownership for one replica: a membership Lease, the shard Leases assigned to it from the
//! live member set ([`crate::assign::owned_by`]), and the work started and stopped with them.
//!
//! Rounds start every `renew_every` (a third of the Lease duration), counted from the start of
//! the previous round, however long it took. Each round:
//! 1. releases the Leases of handed-over shards whose work has drained since the last round;
//! 2. lists every Lease of the installation and decides with [`crate::count::decide`] whether
//!    it may take part with its shard count; if not, it holds no shard (and, unless it joined
//!    before the other count's members, no membership Lease either) and the round ends there;
//! 3. renews its membership Lease `<prefix>-member-<identity>`; the live members are those of
//!    its count whose membership Lease was renewed within its duration. In the first round after
//!    it joined it takes no shard: shards are taken only after a list that saw its membership;
//! 4. closes the fence at once on shards no longer assigned to it and starts draining their work;
//! 5. acquires or renews the Leases of its shards, all at once; work starts for newly acquired
//!    ones;
//! 6. closes the fence at once on a shard whose Lease it lost or could not renew in time, and
//!    starts draining its work;
//! 7. publishes the [`Ownership`] every reconcile checks before it writes ([`Fence`]).
//!
//! # Guarantees
//!
//! - **Nothing else on the replica delays a renewal** when the coordinator runs on a
//!   [`crate::thread::LeaseThread`] with a client built there (as the manager does): its rounds,
//!   request queue and connections do not wait for a runtime busy with reconciles.
//! - **No drain delays a renewal.** Work is drained in the background ([`Workers::stop`]
//!   returns a future the coordinator does not await in a round): a slow reconcile of a shard
//!   being handed over never holds up the renewal of the shards kept.
//! - **One worker per shard.** A shard whose previous work has not finished draining is neither
//!   acquired nor started again until it has: two controllers for one shard never run at once
//!   in one process.
//! - **One shard count.** Two replicas with different shard counts never both own shards: see
//!   [`crate::count::decide`]. [`Coordinator::status`] says whether this one takes part.
//! - A handed-over shard's Lease is released only once its work has drained (the new owner then
//!   need not wait for expiry); if that takes longer than the Lease lasts, it expires instead.
//!
//! On shutdown it drains every shard (including those still draining) and releases all its
//! Leases.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;

use crate::count::{Live, Verdict, decide};
use crate::lease::{Held, Leases, ROLE_LABEL, Seen};

/// The shards this replica owns, with their Leases.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ownership {
    /// Shard → the Lease held for it.
    pub shards: BTreeMap<u32, Held>,
}

/// A read-only view of this replica's ownership: what a reconcile checks before it writes.
#[derive(Clone, Debug)]
pub struct Fence {
    rx: watch::Receiver<Ownership>,
    spare: Duration,
}

impl Fence {
    /// A fence over `rx`, requiring `spare` time left on a Lease.
    pub fn new(rx: watch::Receiver<Ownership>, spare: Duration) -> Fence {
        Fence { rx, spare }
    }

    /// Whether this replica may write for `shard` now, and the epoch of its Lease.
    pub fn owns(&self, shard: u32) -> Option<i32> {
        self.rx.borrow().shards.get(&shard).filter(|h| h.valid(self.spare)).map(|h| h.epoch)
    }

    /// Until when this replica may write for `shard` (its Lease's validity less the spare time),
    /// `None` when it may not now.
    pub fn until(&self, shard: u32) -> Option<std::time::Instant> {
        self.rx.borrow().shards.get(&shard).filter(|h| h.valid(self.spare)).map(|h| h.valid_until - self.spare)
    }

    /// Wait until this replica may write for `shard`; at once when it may. Ownership changes
    /// with each round's renewals, so a Lease late to renew is waited for, not polled. Never
    /// completes once the coordinator is gone: callers bound the wait.
    pub async fn owned(&self, shard: u32) {
        let mut rx = self.rx.clone();
        loop {
            if rx.borrow_and_update().shards.get(&shard).is_some_and(|h| h.valid(self.spare)) {
                return;
            }
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// The shards owned now.
    pub fn shards(&self) -> BTreeSet<u32> {
        self.rx.borrow().shards.iter().filter(|(_, h)| h.valid(self.spare)).map(|(s, _)| *s).collect()
    }
}

/// Starts and stops the work of one shard.
pub trait Workers {
    /// Start the work of `shard`.
    fn start(&mut self, shard: u32) -> impl Future<Output = ()> + Send;
    /// Stop the work of `shard`: it takes no new work at once, and the returned future
    /// completes when what was in flight has drained (no write in flight). The future does not
    /// borrow the workers: the coordinator awaits it in the background.
    fn stop(&mut self, shard: u32) -> impl Future<Output = ()> + Send + 'static;
}

/// A shard whose work is draining.
struct Drain {
    task: tokio::task::JoinHandle<()>,
    /// Release its Lease once drained (a hand-over; not when the Lease was lost or expired).
    release: bool,
}

/// Whether this replica takes part in shard ownership ([`Coordinator::status`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Status {
    /// No round has decided yet, or it has joined and not yet confirmed (one round).
    #[default]
    Starting,
    /// Every live Lease carries this replica's shard count: it takes part.
    TakingPart,
    /// A live replica uses another shard count: this one holds no shard and must not lead. The
    /// text says both counts and what to do.
    Waiting(String),
}

/// What a coordinator keeps between rounds.
#[derive(Default)]
pub struct State {
    owned: BTreeMap<u32, Held>,
    /// The membership Lease, while held.
    member: Option<Held>,
    draining: BTreeMap<u32, Drain>,
}

impl State {
    /// The shards whose work is still draining.
    pub fn draining(&self) -> BTreeSet<u32> {
        self.draining.keys().copied().collect()
    }
}

/// The coordinator of one replica.
pub struct Coordinator {
    leases: Leases,
    prefix: String,
    shards: u32,
    tx: watch::Sender<Ownership>,
    status: watch::Sender<Status>,
}

impl Coordinator {
    /// A coordinator naming its Leases `<prefix>-member-<identity>` and `<prefix>-shard-<k>`,
    /// each carrying `shards` ([`crate::lease::SHARDS_ANNOTATION`]).
    pub fn new(leases: Leases, prefix: impl Into<String>, shards: u32) -> (Coordinator, watch::Receiver<Ownership>) {
        let shards = shards.max(1);
        let (tx, rx) = watch::channel(Ownership::default());
        let (status, _) = watch::channel(Status::Starting);
        (Coordinator { leases: leases.with_shards(shards), prefix: prefix.into(), shards, tx, status }, rx)
    }

    /// Whether this replica takes part: `/readyz` and leader election follow it.
    pub fn status(&self) -> watch::Receiver<Status> {
        self.status.subscribe()
    }

    /// The name of shard `k`'s Lease.
    pub fn shard_lease(prefix: &str, k: u32) -> String {
        format!("{prefix}-shard-{k}")
    }

    /// The shard a Lease named by [`Coordinator::shard_lease`] is for.
    fn shard_of_lease(&self, lease: &str) -> Option<u32> {
        lease.strip_prefix(&format!("{}-shard-", self.prefix))?.parse().ok().filter(|k| *k < self.shards)
    }

    fn member_lease(&self) -> String {
        format!("{}-member-{}", self.prefix, self.leases.identity())
    }

    fn publish(&self, owned: &BTreeMap<u32, Held>) {
        self.tx.send_if_modified(|o| {
            if o.shards == *owned {
                false
            } else {
                o.shards = owned.clone();
                true
            }
        });
    }

    /// Stop `shard`'s work and drain it in the background.
    fn drain<W: Workers>(workers: &mut W, state: &mut State, shard: u32, release: bool) {
        let task = tokio::spawn(workers.stop(shard));
        state.draining.insert(shard, Drain { task, release });
    }

    /// Whether `name` is one of this installation's Leases: `<prefix>-leader`,
    /// `<prefix>-member-*` or `<prefix>-shard-<k>` for any `k` (those of another count too).
    fn is_ours_name(&self, name: &str) -> bool {
        let Some(rest) = name.strip_prefix(&self.prefix).and_then(|r| r.strip_prefix('-')) else { return false };
        rest == "leader"
            || rest.starts_with("member-")
            || rest.strip_prefix("shard-").is_some_and(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()))
    }

    fn set_status(&self, status: Status) {
        let changed = self.status.send_if_modified(|s| {
            if *s == status {
                false
            } else {
                *s = status.clone();
                true
            }
        });
        if !changed {
            return;
        }
        match &status {
            Status::Waiting(why) => tracing::error!(shards = self.shards, "{why}"),
            Status::TakingPart => tracing::info!(shards = self.shards, "taking part in shard ownership"),
            Status::Starting => {}
        }
    }

    /// Drain every shard this replica owns (the fence closes at once).
    fn drain_all<W: Workers>(&self, workers: &mut W, state: &mut State) {
        let all: Vec<u32> = state.owned.keys().copied().collect();
        state.owned.clear();
        self.publish(&state.owned);
        for k in all {
            Self::drain(workers, state, k, true);
        }
    }

    /// One round (see the module documentation). Errors are logged; the round goes on.
    pub async fn round<W: Workers>(&self, workers: &mut W, state: &mut State) {
        let me = self.leases.identity().to_string();
        // Drained since the last round: hand-overs release their Leases.
        let drained: Vec<u32> = state.draining.iter().filter(|(_, d)| d.task.is_finished()).map(|(k, _)| *k).collect();
        for k in drained {
            let Some(d) = state.draining.remove(&k) else { continue };
            if d.release {
                if let Err(e) = self.leases.release(&Self::shard_lease(&self.prefix, k)).await {
                    tracing::warn!(shard = k, error = %e, "releasing a shard Lease");
                }
                tracing::info!(shard = k, "shard handed over");
            }
        }
        // Every Lease of this installation, and whether they all carry our shard count.
        let census = match self.leases.census(ROLE_LABEL).await {
            Ok(c) => Some(c.into_iter().filter(|l| self.is_ours_name(&l.name)).collect::<Vec<Seen>>()),
            Err(e) => {
                tracing::warn!(error = %e, "listing the Leases");
                None
            }
        };
        let member_lease = self.member_lease();
        let was_member = state.member.as_ref().is_some_and(|h| h.valid(Duration::ZERO));
        let verdict = census.as_ref().map(|c| {
            let joined = c.iter().find(|l| l.ours && l.name == member_lease).and_then(|l| l.acquired);
            let live: Vec<Live> = c
                .iter()
                .filter(|l| l.live && !l.ours)
                .map(|l| Live {
                    lease: l.name.clone(),
                    holder: l.holder.clone().unwrap_or_default(),
                    shards: l.shards,
                    joined: if l.role == "member" { l.acquired } else { None },
                })
                .collect();
            decide(self.shards, joined.filter(|_| was_member), &me, &live)
        });
        let waiting = match &verdict {
            Some(v @ Verdict::Wait { withdraw, .. }) => {
                self.set_status(Status::Waiting(v.explain().unwrap_or_default()));
                Some(*withdraw)
            }
            Some(Verdict::TakePart) => None,
            // The list failed: go on as the last verdict said.
            None => matches!(*self.status.borrow(), Status::Waiting(_)).then_some(false),
        };
        if let Some(withdraw) = waiting {
            // Another count is live: no shard, and (unless this replica joined first) no
            // membership either, so the replicas running never see it.
            self.drain_all(workers, state);
            if withdraw {
                if state.member.take().is_some()
                    && let Err(e) = self.leases.release(&member_lease).await
                {
                    tracing::warn!(error = %e, "releasing the membership Lease");
                }
            } else if was_member {
                match self.leases.acquire(&member_lease, "member").await {
                    Ok(held) => state.member = held,
                    Err(e) => tracing::warn!(error = %e, "renewing the membership Lease"),
                }
            }
            return;
        }
        match self.leases.acquire(&member_lease, "member").await {
            Ok(held) => state.member = held,
            Err(e) => tracing::warn!(error = %e, "renewing the membership Lease"),
        }
        let member = state.member.as_ref().is_some_and(|h| h.valid(Duration::ZERO));
        // Shards are taken only after a list of the Leases that ran after this replica's
        // membership Lease was written (see `count::decide`): the first round after joining
        // only announces it.
        let announced = was_member && member;
        if announced && census.is_some() {
            self.set_status(Status::TakingPart);
        }
        let mine: Option<BTreeSet<u32>> = match &census {
            Some(_) if !announced => Some(BTreeSet::new()),
            Some(c) => {
                let mut members: Vec<String> = c
                    .iter()
                    .filter(|l| l.role == "member" && l.renewed && l.shards == Some(self.shards))
                    .filter_map(|l| l.holder.clone())
                    .collect();
                members.push(me.clone());
                members.sort();
                members.dedup();
                // Where the shards are now, so only what must move moves (`assign_sticky`).
                let current: BTreeMap<u32, String> = c
                    .iter()
                    .filter(|l| l.role == "shard")
                    .filter_map(|l| Some((self.shard_of_lease(&l.name)?, l.holder.clone()?)))
                    .collect();
                Some(
                    crate::assign::assign_sticky(self.shards, &members, &current)
                        .into_iter()
                        .filter(|(_, owner)| *owner == me)
                        .map(|(shard, _)| shard)
                        .collect(),
                )
            }
            None => None,
        };
        // What is no longer ours stops being ours at once (the fence closes) and drains in the
        // background; its Lease is released once it has drained.
        if let Some(mine) = &mine {
            let leaving: Vec<u32> = state.owned.keys().filter(|k| !mine.contains(k)).copied().collect();
            for k in &leaving {
                state.owned.remove(k);
            }
            self.publish(&state.owned);
            for k in leaving {
                Self::drain(workers, state, k, true);
            }
        }
        // Acquire or renew ours; a shard still draining from before waits until it has drained.
        let wanted: Vec<u32> = match &mine {
            Some(m) => m.iter().copied().filter(|k| !state.draining.contains_key(k)).collect(),
            None => state.owned.keys().copied().collect(),
        };
        // All at once: a round then takes one request's time, not one per shard, however slow
        // the server answers. Each renewal's validity still runs from when it was sent.
        let names: Vec<String> = wanted.iter().map(|k| Self::shard_lease(&self.prefix, *k)).collect();
        let answers = futures_util::future::join_all(names.iter().map(|name| self.leases.acquire(name, "shard"))).await;
        for (k, answer) in wanted.into_iter().zip(answers) {
            match answer {
                Ok(Some(held)) => {
                    let new = !state.owned.contains_key(&k);
                    state.owned.insert(k, held);
                    if new {
                        self.publish(&state.owned);
                        tracing::info!(shard = k, "shard acquired");
                        workers.start(k).await;
                    }
                }
                Ok(None) => {
                    if state.owned.remove(&k).is_some() {
                        tracing::warn!(shard = k, "shard Lease lost");
                        self.publish(&state.owned);
                        Self::drain(workers, state, k, false);
                    }
                }
                Err(e) => tracing::warn!(shard = k, error = %e, "renewing a shard Lease"),
            }
        }
        // A Lease we could not renew in time: stop at once.
        let expired: Vec<u32> = state.owned.iter().filter(|(_, h)| !h.valid(Duration::ZERO)).map(|(k, _)| *k).collect();
        for k in expired {
            state.owned.remove(&k);
            tracing::warn!(shard = k, "shard Lease expired before it was renewed");
            self.publish(&state.owned);
            Self::drain(workers, state, k, false);
        }
        self.publish(&state.owned);
    }

    /// Run rounds until `shutdown`, then drain every shard and release every Lease.
    pub async fn run<W: Workers>(self, mut workers: W, shutdown: impl Future<Output = ()>) {
        let mut state = State::default();
        // Rounds start at a fixed pace: a slow round delays the next one only by its overrun.
        let mut tick = tokio::time::interval(self.leases.timing().renew_every());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        let rounds = async {
            loop {
                // A dead holder's Leases are taken when they become takeable, not up to a renewal
                // period later: a takeover's shards move that much sooner.
                let takeable = self.leases.takeable_at(|name| {
                    self.shard_of_lease(name).is_some() || name.starts_with(&format!("{}-member-", self.prefix))
                });
                tokio::select! {
                    _ = &mut shutdown => break,
                    _ = tick.tick() => self.round(&mut workers, &mut state).await,
                    _ = wake_at(takeable) => {
                        tracing::debug!("a Lease of another replica became takeable");
                        self.round(&mut workers, &mut state).await;
                    }
                }
            }
        };
        // Meanwhile, during rounds too, another replica's renewals are observed as they reach
        // the server: a dead one's Leases become takeable a whole duration after its last
        // renewal, not after the round that listed it.
        tokio::select! {
            () = rounds => {}
            () = self.leases.follow(ROLE_LABEL) => {}
        }
        let all: Vec<u32> = state.owned.keys().copied().collect();
        state.owned.clear();
        self.publish(&state.owned);
        for k in all {
            Self::drain(&mut workers, &mut state, k, true);
        }
        for (k, d) in std::mem::take(&mut state.draining) {
            let _ = d.task.await;
            if let Err(e) = self.leases.release(&Self::shard_lease(&self.prefix, k)).await {
                tracing::warn!(shard = k, error = %e, "releasing a shard Lease");
            }
        }
        if let Err(e) = self.leases.release(&self.member_lease()).await {
            tracing::warn!(error = %e, "releasing the membership Lease");
        }
        self.set_status(Status::Starting);
    }
}

/// Sleeps until `at`, or forever when `None`.
pub(crate) async fn wake_at(at: Option<std::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod fence_tests {
    use super::*;

    fn held(valid_for: Duration) -> Held {
        Held { name: "ksync-shard-3".into(), epoch: 2, valid_until: std::time::Instant::now() + valid_for }
    }

    #[tokio::test]
    async fn a_fenced_shard_is_waited_for_until_its_lease_is_renewed() {
        let spare = Duration::from_secs(1);
        let (tx, rx) = watch::channel(Ownership::default());
        let fence = Fence::new(rx, spare);
        let wait = |f: Fence| tokio::spawn(async move { f.owned(3).await });
        let waiting = wait(fence.clone());
        // Another shard, and shard 3 with less than the spare time left: still fenced.
        tx.send_replace(Ownership { shards: [(4, held(Duration::from_secs(60)))].into() });
        tx.send_replace(Ownership { shards: [(3, held(Duration::from_millis(500)))].into() });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "not owned yet");
        // Renewed.
        tx.send_replace(Ownership { shards: [(3, held(Duration::from_secs(60)))].into() });
        tokio::time::timeout(Duration::from_secs(10), waiting).await.expect("owned after the renewal").unwrap();
        // Owned: at once.
        tokio::time::timeout(Duration::from_secs(10), wait(fence.clone())).await.expect("at once").unwrap();
        // The coordinator gone: the wait never completes (its caller bounds it).
        tx.send_replace(Ownership::default());
        drop(tx);
        assert!(tokio::time::timeout(Duration::from_millis(100), fence.owned(3)).await.is_err());
    }
}
