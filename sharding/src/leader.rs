//! Leader election for singleton work (labelling Applications with their shard, the Repository
//! controller): whoever holds the Lease `<name>` runs the work; it stops the work as soon as it
//! cannot renew in time, and releases the Lease on shutdown so another replica takes over at once.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;

use crate::lease::{Held, Leases, ROLE_LABEL};
use crate::thread::LeaseThread;

/// Run `work` while this replica holds the Lease `name`, until `shutdown`. `work` receives a
/// channel that turns `true` when it must stop; it is awaited before the Lease is released.
pub async fn run_elected<F, Fut>(leases: &Leases, name: &str, work: F, shutdown: impl Future<Output = ()>)
where
    F: FnMut(watch::Receiver<bool>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    run_elected_when(leases, name, watch::channel(true).1, work, shutdown).await;
}

/// [`run_elected`], taking part in the election only while `allowed` is `true` (a replica whose
/// shard count differs from the live replicas' must not lead: the leader labels Applications
/// with their shard). When it turns `false` the work stops and the Lease is released.
pub async fn run_elected_when<F, Fut>(
    leases: &Leases,
    name: &str,
    allowed: watch::Receiver<bool>,
    work: F,
    shutdown: impl Future<Output = ()>,
) where
    F: FnMut(watch::Receiver<bool>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    run_elected_fenced(leases, name, allowed, work, shutdown, &watch::channel(None).0).await;
}

/// The leader's fence: until when the leader may write, from the Lease it holds.
///
/// # Contract
/// [`LeaderFence::until`] is `None` whenever this replica does not hold the leader Lease with
/// `spare` to spare: before its first acquisition, once a renewal came too late, after it gave
/// the Lease up, and after shutdown. A write sent before that instant must complete by it (the
/// client abandons it otherwise), so a deposed leader lands nothing once another may lead.
#[derive(Clone, Debug)]
pub struct LeaderFence {
    rx: watch::Receiver<Option<Held>>,
    spare: Duration,
}

impl LeaderFence {
    /// A fence over the term published by [`run_elected_fenced`], requiring `spare` time left.
    pub fn new(rx: watch::Receiver<Option<Held>>, spare: Duration) -> LeaderFence {
        LeaderFence { rx, spare }
    }

    /// Until when the leader may write, `None` when it may not now.
    pub fn until(&self) -> Option<std::time::Instant> {
        self.rx.borrow().as_ref().filter(|h| h.valid(self.spare)).map(|h| h.valid_until - self.spare)
    }
}

/// [`run_elected_when`], publishing the Lease held on `term` (what a [`LeaderFence`] reads):
/// each renewal's, `None` when not leading.
pub async fn run_elected_fenced<F, Fut>(
    leases: &Leases,
    name: &str,
    allowed: watch::Receiver<bool>,
    mut work: F,
    shutdown: impl Future<Output = ()>,
    term: &watch::Sender<Option<Held>>,
) where
    F: FnMut(watch::Receiver<bool>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let every = leases.timing().renew_every();
    let mut running: Option<(watch::Sender<bool>, tokio::task::JoinHandle<()>)> = None;
    let mut held: Option<Held> = None;
    tokio::pin!(shutdown);
    let rounds = async {
        loop {
            // Not allowed to lead: stop the work first, then release the Lease.
            let mut give_up = false;
            if !*allowed.borrow() {
                give_up = held.take().is_some();
            } else {
                match leases.acquire(name, "leader").await {
                    Ok(Some(h)) => held = Some(h),
                    Ok(None) => held = None,
                    Err(e) => tracing::warn!(lease = name, error = %e, "renewing the leader Lease"),
                }
            }
            let leading = held.as_ref().is_some_and(|h| h.valid(Duration::ZERO));
            term.send_replace(held.clone().filter(|_| leading));
            if leading && running.is_none() {
                tracing::info!(lease = name, "leading");
                let (tx, rx) = watch::channel(false);
                running = Some((tx, tokio::spawn(work(rx))));
            } else if !leading && let Some((tx, task)) = running.take() {
                tracing::warn!(lease = name, "lost the leader Lease; stopping");
                let _ = tx.send(true);
                let _ = task.await;
            }
            if give_up {
                term.send_replace(None);
            }
            if give_up && let Err(e) = leases.release(name).await {
                tracing::warn!(lease = name, error = %e, "releasing the leader Lease");
            }
            // A dead leader's Lease is taken when it becomes takeable, not up to `every` later.
            let takeable = if leading { None } else { leases.takeable_at(|n| n == name) };
            tokio::select! {
                _ = &mut shutdown => break,
                _ = tokio::time::sleep(every) => {}
                _ = crate::coordinator::wake_at(takeable) => {}
            }
        }
    };
    // Meanwhile the holder's renewals are observed as they reach the server, so a dead
    // leader's Lease becomes takeable a whole duration after its last renewal.
    let leaders = format!("{ROLE_LABEL}=leader");
    tokio::select! {
        () = rounds => {}
        () = leases.follow(&leaders) => {}
    }
    if let Some((tx, task)) = running.take() {
        let _ = tx.send(true);
        let _ = task.await;
    }
    term.send_replace(None);
    if let Err(e) = leases.release(name).await {
        tracing::warn!(lease = name, error = %e, "releasing the leader Lease");
    }
}

/// [`run_elected_fenced`] run on `thread` (the Lease thread, with `leases` on a client built
/// there), so that the leader Lease is renewed, and its term published to the
/// [`LeaderFence`], however busy the caller's runtime is. `work` is spawned on the runtime this
/// is called from: the singleton work never runs on the Lease thread.
pub fn spawn_elected_fenced<F, Fut>(
    thread: &LeaseThread,
    leases: Leases,
    name: String,
    allowed: watch::Receiver<bool>,
    mut work: F,
    shutdown: impl Future<Output = ()> + Send + 'static,
    term: watch::Sender<Option<Held>>,
) -> tokio::task::JoinHandle<()>
where
    F: FnMut(watch::Receiver<bool>) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let main = tokio::runtime::Handle::current();
    thread.spawn(async move {
        let on_main = move |rx| {
            let task = main.spawn(work(rx));
            async move {
                let _ = task.await;
            }
        };
        run_elected_fenced(&leases, &name, allowed, on_main, shutdown, &term).await;
    })
}
