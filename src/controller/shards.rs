//! The Application controller split by shard: one label-selected controller per shard this
//! replica owns, started and drained as the [`sharding::coordinator::Coordinator`] decides.

use std::collections::HashMap;
use std::sync::Arc;

use super::application::{self, Context};

/// Runs one Application controller per owned shard.
pub struct ShardWorkers {
    ctx: Arc<Context>,
    running: HashMap<u32, (tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>)>,
}

impl ShardWorkers {
    /// Workers sharing `ctx` (whose fence is the coordinator's ownership).
    pub fn new(ctx: Arc<Context>) -> ShardWorkers {
        ShardWorkers { ctx, running: HashMap::new() }
    }
}

impl sharding::coordinator::Workers for ShardWorkers {
    async fn start(&mut self, shard: u32) {
        if self.running.contains_key(&shard) {
            return;
        }
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(application::run_shard(self.ctx.clone(), Some(shard), async move {
            let _ = rx.await;
        }));
        self.running.insert(shard, (tx, task));
    }

    fn stop(&mut self, shard: u32) -> impl std::future::Future<Output = ()> + Send + 'static {
        let running = self.running.remove(&shard);
        async move {
            if let Some((tx, task)) = running {
                let _ = tx.send(());
                // Graceful shutdown: in-flight reconciles finish (each re-checks the fence before
                // it writes), new ones do not start.
                let _ = task.await;
            }
        }
    }
}
