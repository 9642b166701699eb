//! Shard ownership for one replica: a membership Lease, the shard Leases assigned to it from the
//! live member set ([`crate::assign::owned_by`]), and the work started and stopped with them.
//!
//! Every `renew_every` (a third of the Lease duration) the coordinator:
//! 1. renews its membership Lease `<prefix>-member-<identity>` and lists the live members;
//! 2. acquires or renews the Leases of its shards; work starts for newly acquired ones;
//! 3. stops at once the work of a shard whose Lease it lost or could not renew in time;
//! 4. publishes the [`Ownership`] every reconcile checks before it writes ([`Fence`]);
//! 5. stops the work of shards no longer assigned to it and **waits for it to drain**, then
//!    releases their Leases so the new owner need not wait for expiry. The renewals come first,
//!    and the drain is bounded (half of `renew_every` for all of them together): a shard whose
//!    work has not drained by then keeps its Lease unrenewed until it expires, so the next round,
//!    and the renewal of every shard kept, is never held up by a slow reconcile.
//!
//! On shutdown it drains every shard and releases all its Leases.

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

    /// The shards owned now.
    pub fn shards(&self) -> BTreeSet<u32> {
        self.rx.borrow().shards.iter().filter(|(_, h)| h.valid(self.spare)).map(|(s, _)| *s).collect()
    }
}

/// Starts and stops the work of one shard.
pub trait Workers {
    /// Start the work of `shard`.
    fn start(&mut self, shard: u32) -> impl Future<Output = ()> + Send;
    /// Stop the work of `shard` and wait until it has drained (no write in flight).
    fn stop(&mut self, shard: u32) -> impl Future<Output = ()> + Send;
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

    /// One round (see the module documentation). Errors are logged; the round goes on.
    pub async fn round<W: Workers>(&self, workers: &mut W, owned: &mut BTreeMap<u32, Held>) {
        let me = self.leases.identity().to_string();
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
        // What is no longer ours stops being ours at once (the fence closes); it is drained and
        // released below, after the renewals.
        let mut leaving: Vec<u32> = Vec::new();
        if let Some(mine) = &mine {
            leaving = owned.keys().filter(|k| !mine.contains(k)).copied().collect();
            for k in &leaving {
                owned.remove(k);
            }
            self.publish(owned);
        }
        // Acquire or renew ours.
        let wanted: Vec<u32> = match &mine {
            Some(m) => m.iter().copied().collect(),
            None => owned.keys().copied().collect(),
        };
        for k in wanted {
            match self.leases.acquire(&Self::shard_lease(&self.prefix, k), "shard").await {
                Ok(Some(held)) => {
                    let new = !owned.contains_key(&k);
                    owned.insert(k, held);
                    if new {
                        self.publish(owned);
                        tracing::info!(shard = k, "shard acquired");
                        workers.start(k).await;
                    }
                }
                Ok(None) => {
                    if owned.remove(&k).is_some() {
                        tracing::warn!(shard = k, "shard Lease lost");
                        self.publish(owned);
                        workers.stop(k).await;
                    }
                }
                Err(e) => tracing::warn!(shard = k, error = %e, "renewing a shard Lease"),
            }
        }
        // A Lease we could not renew in time: stop at once.
        let expired: Vec<u32> = owned.iter().filter(|(_, h)| !h.valid(Duration::ZERO)).map(|(k, _)| *k).collect();
        for k in expired {
            owned.remove(&k);
            tracing::warn!(shard = k, "shard Lease expired before it was renewed");
            self.publish(owned);
            workers.stop(k).await;
        }
        self.publish(owned);
        // Hand over: drain, then release; a shard not drained in time is left to expire.
        let deadline = tokio::time::Instant::now() + self.leases.timing().renew_every() / 2;
        for k in leaving {
            if tokio::time::timeout_at(deadline, workers.stop(k)).await.is_err() {
                tracing::warn!(shard = k, "shard work not drained in time: its Lease is left to expire");
                continue;
            }
            if let Err(e) = self.leases.release(&Self::shard_lease(&self.prefix, k)).await {
                tracing::warn!(shard = k, error = %e, "releasing a shard Lease");
            }
            tracing::info!(shard = k, "shard handed over");
        }
    }

    /// Run rounds until `shutdown`, then drain every shard and release every Lease.
    pub async fn run<W: Workers>(self, mut workers: W, shutdown: impl Future<Output = ()>) {
        let mut owned = BTreeMap::new();
        let every = self.leases.timing().renew_every();
        tokio::pin!(shutdown);
        loop {
            self.round(&mut workers, &mut owned).await;
            tokio::select! {
                _ = &mut shutdown => break,
                _ = tokio::time::sleep(every) => {}
            }
        }
        let all: Vec<u32> = owned.keys().copied().collect();
        owned.clear();
        self.publish(&owned);
        for k in all {
            workers.stop(k).await;
            if let Err(e) = self.leases.release(&Self::shard_lease(&self.prefix, k)).await {
                tracing::warn!(shard = k, error = %e, "releasing a shard Lease");
            }
        }
        if let Err(e) = self.leases.release(&self.member_lease()).await {
            tracing::warn!(error = %e, "releasing the membership Lease");
        }
    }
}
