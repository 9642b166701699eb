//! A thread of its own for Lease renewals: a current-thread tokio runtime on a dedicated OS
//! thread, and the kube clients whose requests it carries.
//!
//! Renewals must not wait for the fleet's work anywhere in the replica. A separate
//! [`kube::Client`] is not enough on its own: a client's requests go through a tower `Buffer`
//! whose worker task, like the hyper connection tasks it opens, runs on the runtime that was
//! current when the client was built; and the renewal loop itself is a task. On the main
//! runtime all three queue behind reconciles (CPU-bound renders, large applies): in a
//! 10,000-Application load test 83 renewals came later than the fence limit. Here the loop, the
//! client's worker and its connections all run on this thread, which does nothing else.
//!
//! # Guarantees
//! - [`LeaseThread::client`] builds a client with its own connection pool, driven by this
//!   thread: a replica whose main runtime is saturated still sends and reads renewals.
//! - [`LeaseThread::spawn`] runs a future (the coordinator's rounds) on this thread.
//! - Dropping it stops the runtime (what is still running is abandoned after a second) and
//!   joins the thread.
//!
//! # Caveats
//! What the spawned future spawns itself runs here too: work started for a shard must be
//! spawned on the main runtime by its [`crate::coordinator::Workers`], or it competes with the
//! renewals.

use std::future::Future;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::task::JoinHandle;

/// A current-thread runtime on an OS thread of its own.
pub struct LeaseThread {
    handle: Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LeaseThread {
    /// Start the thread, named `name`.
    pub fn start(name: &str) -> std::io::Result<LeaseThread> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new().name(name.to_string()).spawn(move || {
            runtime.block_on(async move {
                let _ = stopped.await;
            });
            runtime.shutdown_timeout(Duration::from_secs(1));
        })?;
        Ok(LeaseThread { handle, stop: Some(stop), thread: Some(thread) })
    }

    /// The runtime's handle.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// A client for `config` whose request queue and connections are driven by this thread
    /// (not a clone of another client: its own pool). No budget, no layers: a renewal waits for
    /// nothing but the API server.
    pub fn client(&self, config: kube::Config) -> Result<kube::Client, kube::Error> {
        // kube spawns the client's buffer worker on the current runtime: make it this one.
        let _here = self.handle.enter();
        kube::Client::try_from(config)
    }

    /// Run `future` on this thread.
    pub fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(future)
    }
}

impl Drop for LeaseThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spawned_work_runs_on_the_thread_while_the_caller_is_blocked() {
        let own = LeaseThread::start("leases-test").unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        own.spawn(async move {
            tx.send(std::thread::current().name().map(str::to_string)).unwrap();
        });
        // The caller blocks (no runtime of its own at all): the task runs regardless.
        let name = rx.recv_timeout(Duration::from_secs(60)).expect("the task ran");
        assert_eq!(name.as_deref(), Some("leases-test"));
        drop(own);
    }
}
