//! Shard ownership for one replica: a membership Lease, the shard Leases assigned to it from the
//! live member set ([`crate::assign::owned_by`]), and the work started and stopped with them.
//!
//! Rounds start every `renew_every` (a third of the Lease duration), counted from the start of
//! the previous round, however long it took. Each round:
//! 1. releases the Leases of handed-over shards whose work has drained since the last round;
//! 2. renews its membership Lease `<prefix>-member-<identity>` and lists the live members;
//! 3. closes the fence at once on shards no longer assigned to it and starts draining their work;
//! 4. acquires or renews the Leases of its shards; work starts for newly acquired ones;
//! 5. closes the fence at once on a shard whose Lease it lost or could not renew in time, and
//!    starts draining its work;
//! 6. publishes the [`Ownership`] every reconcile checks before it writes ([`Fence`]).
//!
//! # Guarantees
//!
//! - **No drain delays a renewal.** Work is drained in the background ([`Workers::stop`]
//!   returns a future the coordinator does not await in a round): a slow reconcile of a shard
//!   being handed over never holds up the renewal of the shards kept.
//! - **One worker per shard.** A shard whose previous work has not finished draining is neither
//!   acquired nor started again until it has: two controllers for one shard never run at once
//!   in one process.
//! - A handed-over shard's Lease is released only once its work has drained (the new owner then
//!   need not wait for expiry); if that takes longer than the Lease lasts, it expires instead.
//!
//! On shutdown it drains every shard (including those still draining) and releases all its
//! Leases.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;

use crate::lease::{Held, Leases, ROLE_LABEL};

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

/// What a coordinator keeps between rounds.
#[derive(Default)]
pub struct State {
    owned: BTreeMap<u32, Held>,
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
}

impl Coordinator {
    /// A coordinator naming its Leases `<prefix>-member-<identity>` and `<prefix>-shard-<k>`.
    pub fn new(leases: Leases, prefix: impl Into<String>, shards: u32) -> (Coordinator, watch::Receiver<Ownership>) {
        let (tx, rx) = watch::channel(Ownership::default());
        (Coordinator { leases, prefix: prefix.into(), shards: shards.max(1), tx }, rx)
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
        let member = self.leases.acquire(&self.member_lease(), "member").await;
        let members = match self.leases.live_holders(&format!("{ROLE_LABEL}=member")).await {
            Ok(mut m) => {
                if matches!(member, Ok(Some(_))) && !m.contains(&me) {
                    m.push(me.clone());
                    m.sort();
                }
                Some(m)
            }
            Err(e) => {
                tracing::warn!(error = %e, "listing members");
                None
            }
        };
        // Where the shards are now, so only what must move moves (`assign_sticky`).
        let current = match self.leases.holders(&format!("{ROLE_LABEL}=shard")).await {
            Ok(h) => Some(
                h.into_iter()
                    .filter_map(|(lease, holder)| Some((self.shard_of_lease(&lease)?, holder)))
                    .collect::<BTreeMap<u32, String>>(),
            ),
            Err(e) => {
                tracing::warn!(error = %e, "listing shard Leases");
                None
            }
        };
        let mine: Option<BTreeSet<u32>> = members.zip(current).map(|(m, current)| {
            crate::assign::assign_sticky(self.shards, &m, &current)
                .into_iter()
                .filter(|(_, owner)| *owner == me)
                .map(|(shard, _)| shard)
                .collect()
        });
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
        for k in wanted {
            match self.leases.acquire(&Self::shard_lease(&self.prefix, k), "shard").await {
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
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                _ = tick.tick() => self.round(&mut workers, &mut state).await,
            }
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
    }
}
