//! The Application controller split by shard: one label-selected controller per shard this
//! replica owns, started and drained as the [`sharding::coordinator::Coordinator`] decides.
//!
//! # Contract
//! Stopping a shard's work ([`sharding::coordinator::Workers::stop`]) lets its in-flight
//! reconciles finish for at most the drain limit (the Lease duration), then aborts what is
//! left and completes. A drain that never ends must not hold the shard: the coordinator neither
//! renews nor gives away a shard still draining, and every replica's assignment keeps a shard
//! with the live replica its Lease names, so it would be left without an owner for good. One
//! never ends when the shard is stopped before its Applications were first listed (a list
//! refused at start): kube's controller holds its runner until the store is ready and stops
//! polling the watch once shut down (`tests/sharding.rs
//! a_shard_stopped_before_its_first_list_drains_all_the_same`). Aborting is safe: the shard's
//! fence closed when the drain began, so nothing the aborted work still had in flight can land.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::{Context, run_shard};

/// Runs one Application controller per owned shard.
pub struct ShardWorkers {
    ctx: Arc<Context>,
    running: HashMap<u32, (tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>)>,
    drain_limit: Duration,
    /// Where a shard's controller runs: the runtime the workers were made on, not the Lease
    /// thread the coordinator calls [`Workers::start`](sharding::coordinator::Workers::start) from.
    runtime: tokio::runtime::Handle,
}

impl ShardWorkers {
    /// Workers sharing `ctx` (whose fence is the coordinator's ownership); a stopped shard's
    /// work is aborted once it has drained for `drain_limit` (see the module's contract).
    /// Controllers run on the current runtime, wherever the coordinator runs.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn new(ctx: Arc<Context>, drain_limit: Duration) -> ShardWorkers {
        ShardWorkers { ctx, running: HashMap::new(), drain_limit, runtime: tokio::runtime::Handle::current() }
    }
}

/// Stop `task` (told to shut down through `tx`): wait up to `limit` for it to finish, then abort
/// it. Returns whether it finished by itself.
pub async fn drain(
    tx: tokio::sync::oneshot::Sender<()>,
    mut task: tokio::task::JoinHandle<()>,
    limit: Duration,
) -> bool {
    let _ = tx.send(());
    if tokio::time::timeout(limit, &mut task).await.is_ok() {
        return true;
    }
    task.abort();
    let _ = task.await;
    false
}

impl sharding::coordinator::Workers for ShardWorkers {
    async fn start(&mut self, shard: u32) {
        if self.running.contains_key(&shard) {
            return;
        }
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = self.runtime.spawn(run_shard(self.ctx.clone(), Some(shard), async move {
            let _ = rx.await;
        }));
        self.running.insert(shard, (tx, task));
    }

    fn stop(&mut self, shard: u32) -> impl std::future::Future<Output = ()> + Send + 'static {
        let running = self.running.remove(&shard);
        let limit = self.drain_limit;
        async move {
            // Graceful shutdown first: in-flight reconciles finish (each re-checks the fence
            // before it writes), new ones do not start.
            if let Some((tx, task)) = running
                && !drain(tx, task, limit).await
            {
                tracing::warn!(shard, ?limit, "the shard's work did not drain in time: aborted");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn work_that_does_not_drain_is_aborted_at_the_limit() {
        // (work that ends at once when told, work that never ends) -> drained by itself?
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let polite = tokio::spawn(async move {
            let _ = rx.await;
        });
        assert!(drain(tx, polite, Duration::from_secs(60)).await);

        let (tx, _rx) = tokio::sync::oneshot::channel::<()>();
        let dropped = Arc::new(());
        let held = dropped.clone();
        let stuck = tokio::spawn(async move {
            let _held = held;
            std::future::pending::<()>().await;
        });
        assert!(!drain(tx, stuck, Duration::from_millis(50)).await);
        // The aborted work is gone (its state dropped), not left running beside a new start.
        assert_eq!(Arc::strong_count(&dropped), 1);
    }
}
