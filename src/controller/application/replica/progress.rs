//! What a replica knows about its own reconcile queue: Applications triggered and not yet
//! started (the queue depth), and when each owned Application was last reconciled (stale
//! Applications: a stuck worker, a lost trigger, a shard nobody really serves).
//!
//! Metrics, set every few seconds by [`report`]:
//! - `ksync_applications_owned`: Applications in the shards this replica runs;
//! - `ksync_reconcile_queue_depth`: of those, triggered and waiting for a worker;
//! - `ksync_applications_reconcile_stale`: of those, not reconciled for longer than
//!   `--stale-reconcile-after` (counted from when this replica took the shard for one it has not
//!   reconciled yet);
//! - `ksync_applications{sync,health}`: of those, how many are in each sync state and health
//!   (`status.sync.status`, `status.health.status`; Unknown before the first status), every
//!   combination published, 0 included, so a state nobody is in any more reads 0;
//! - `ksync_shards_owned`: shard controllers this replica runs (1 without sharding);
//! - `ksync_reconcile_queue_seconds`: time from the first trigger to the reconcile's start;
//! - `ksync_reconcile_duration_seconds` and `ksync_reconciles_total{result}`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::runtime::reflector::{ObjectRef, Store};

use crate::api::application::{Application, SyncState};
use crate::api::common::HealthStatus;

/// The figures [`Progress::snapshot`] computes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Applications in the running shard controllers' caches.
    pub owned: usize,
    /// Triggered, not started.
    pub queued: usize,
    /// Not reconciled within the bound.
    pub stale: usize,
    /// Running shard controllers.
    pub shards: usize,
    /// Owned Applications by sync state and health; only the combinations someone is in.
    pub states: BTreeMap<(SyncState, HealthStatus), usize>,
}

impl Snapshot {
    /// Owned Applications in `sync` and `health`.
    pub fn count(&self, sync: SyncState, health: HealthStatus) -> usize {
        self.states.get(&(sync, health)).copied().unwrap_or(0)
    }
}

/// An Application's sync state and health as its status says (Unknown when it says nothing).
fn state_of(app: &Application) -> (SyncState, HealthStatus) {
    let status = app.status.as_ref();
    (
        status.and_then(|s| s.sync.as_ref()).map_or(SyncState::Unknown, |s| s.status),
        status.and_then(|s| s.health.as_ref()).map_or(HealthStatus::Unknown, |h| h.status),
    )
}

#[derive(Default)]
struct Inner {
    /// Running shard controllers (`None`: every shard): the Application cache and start time.
    shards: HashMap<Option<u32>, (Store<Application>, Instant)>,
    /// First trigger not yet served.
    pending: HashMap<ObjectRef<Application>, Instant>,
    /// Last finished reconcile.
    finished: HashMap<ObjectRef<Application>, Instant>,
}

/// Shared by the shard controllers of one replica.
#[derive(Default)]
pub struct Progress {
    inner: Mutex<Inner>,
}

impl Progress {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("progress lock")
    }

    /// A shard controller started with Application cache `store`.
    /// Returns when, which [`Progress::shard_stopped`] takes to tell this controller apart
    /// from a later one of the same shard.
    pub fn shard_started(&self, shard: Option<u32>, store: Store<Application>) -> Instant {
        let at = Instant::now();
        self.lock().shards.insert(shard, (store, at));
        at
    }

    /// The shard controller started at `started` stopped (a later one of the same shard, started
    /// while this one was still draining, stays).
    pub fn shard_stopped(&self, shard: Option<u32>, started: Instant) {
        let mut inner = self.lock();
        if inner.shards.get(&shard).is_some_and(|(_, at)| *at == started) {
            inner.shards.remove(&shard);
        }
    }

    /// Something asked for `app` to be reconciled.
    pub fn triggered(&self, app: &ObjectRef<Application>) {
        self.lock().pending.entry(app.clone()).or_insert_with(Instant::now);
    }

    /// A worker started reconciling `app`.
    pub fn started(&self, app: &ObjectRef<Application>) {
        if let Some(at) = self.lock().pending.remove(app) {
            metrics::histogram!(crate::metric_names::RECONCILE_QUEUE_SECONDS).record(at.elapsed().as_secs_f64());
        }
    }

    /// A reconcile of `app` finished.
    pub fn finished(&self, app: &ObjectRef<Application>) {
        self.lock().finished.insert(app.clone(), Instant::now());
    }

    /// The figures now, forgetting Applications no running shard has any more.
    pub fn snapshot(&self, stale_after: Duration) -> Snapshot {
        let now = Instant::now();
        let mut inner = self.lock();
        let mut owned: HashMap<ObjectRef<Application>, (Instant, (SyncState, HealthStatus))> = HashMap::new();
        for (store, since) in inner.shards.values() {
            for app in store.state() {
                owned.insert(ObjectRef::from_obj(&*app), (*since, state_of(&app)));
            }
        }
        let mut states = BTreeMap::new();
        for (_, state) in owned.values() {
            *states.entry(*state).or_insert(0) += 1;
        }
        inner.pending.retain(|r, _| owned.contains_key(r));
        inner.finished.retain(|r, _| owned.contains_key(r));
        let stale = owned
            .iter()
            .filter(|(r, (since, _))| {
                let last = inner.finished.get(*r).copied().unwrap_or(*since).max(*since);
                now.duration_since(last) > stale_after
            })
            .count();
        Snapshot { owned: owned.len(), queued: inner.pending.len(), stale, shards: inner.shards.len(), states }
    }
}

/// Publish the gauges every few seconds until `shutdown` completes.
pub async fn report(progress: &Progress, stale_after: Duration, shutdown: impl std::future::Future<Output = ()>) {
    let mut shutdown = std::pin::pin!(shutdown);
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            _ = tick.tick() => {
                let s = progress.snapshot(stale_after);
                metrics::gauge!(crate::metric_names::APPLICATIONS_OWNED).set(s.owned as f64);
                metrics::gauge!(crate::metric_names::RECONCILE_QUEUE_DEPTH).set(s.queued as f64);
                metrics::gauge!(crate::metric_names::APPLICATIONS_RECONCILE_STALE).set(s.stale as f64);
                metrics::gauge!(crate::metric_names::SHARDS_OWNED).set(s.shards as f64);
                // Every combination, so one nobody is in any more reads 0 rather than its last count.
                for sync in SyncState::ALL {
                    for health in HealthStatus::ALL {
                        metrics::gauge!(crate::metric_names::APPLICATIONS, crate::metric_names::label::SYNC => sync.as_str(), "health" => health.as_str())
                            .set(s.count(sync, health) as f64);
                    }
                }
                if s.stale > 0 {
                    tracing::warn!(stale = s.stale, owned = s.owned, bound = ?stale_after,
                        "Applications not reconciled within the bound");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;

    use super::*;
    use crate::api::application::{ApplicationStatus, HealthSummary, SyncStatus};

    fn app(name: &str) -> Application {
        let mut a = Application::new(
            name,
            serde_json::from_value(serde_json::json!({
                "source": {"repository": "r", "path": "p"},
                "destination": {"namespace": "d"},
                "serviceAccountName": "sa"
            }))
            .unwrap(),
        );
        a.metadata.namespace = Some("team".into());
        a
    }

    /// `app(name)` with `status.sync.status` and `status.health.status`.
    fn app_in(name: &str, sync: SyncState, health: HealthStatus) -> Application {
        let mut a = app(name);
        a.status = Some(ApplicationStatus {
            sync: Some(SyncStatus { status: sync, ..Default::default() }),
            health: Some(HealthSummary { status: health, message: None }),
            ..Default::default()
        });
        a
    }

    #[test]
    fn state_names_are_the_serialized_ones() {
        for s in SyncState::ALL {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        for h in HealthStatus::ALL {
            assert_eq!(serde_json::to_value(h).unwrap(), h.as_str());
        }
    }

    #[test]
    fn applications_are_counted_by_sync_state_and_health_across_shards() {
        let (one, mut w1) = reflector::store::<Application>();
        let (two, mut w2) = reflector::store::<Application>();
        w1.apply_watcher_event(&Event::Apply(app_in("a", SyncState::Synced, HealthStatus::Healthy)));
        w1.apply_watcher_event(&Event::Apply(app_in("b", SyncState::Synced, HealthStatus::Healthy)));
        w1.apply_watcher_event(&Event::Apply(app_in("c", SyncState::Drifted, HealthStatus::Degraded)));
        // No status yet: Unknown and Unknown.
        w2.apply_watcher_event(&Event::Apply(app("d")));
        let progress = Progress::default();
        let first = progress.shard_started(Some(0), one);
        let second = progress.shard_started(Some(3), two);
        let s = progress.snapshot(Duration::from_secs(60));
        assert_eq!((s.owned, s.shards), (4, 2));
        assert_eq!(s.count(SyncState::Synced, HealthStatus::Healthy), 2);
        assert_eq!(s.count(SyncState::Drifted, HealthStatus::Degraded), 1);
        assert_eq!(s.count(SyncState::Unknown, HealthStatus::Unknown), 1);
        assert_eq!(s.count(SyncState::OutOfSync, HealthStatus::Progressing), 0);
        assert_eq!(s.states.values().sum::<usize>(), s.owned);
        // A repaired Application moves; the combination it left counts 0.
        w1.apply_watcher_event(&Event::Apply(app_in("c", SyncState::Synced, HealthStatus::Healthy)));
        let s = progress.snapshot(Duration::from_secs(60));
        assert_eq!(s.count(SyncState::Synced, HealthStatus::Healthy), 3);
        assert_eq!(s.count(SyncState::Drifted, HealthStatus::Degraded), 0);
        // A stopped shard's Applications are no longer this replica's.
        progress.shard_stopped(Some(0), first);
        let s = progress.snapshot(Duration::from_secs(60));
        assert_eq!((s.owned, s.shards), (1, 1));
        assert_eq!(s.count(SyncState::Synced, HealthStatus::Healthy), 0);
        progress.shard_stopped(Some(3), second);
        assert_eq!(progress.snapshot(Duration::from_secs(60)), Snapshot::default());
    }

    #[test]
    fn queue_and_staleness_follow_triggers_and_reconciles() {
        let (store, mut writer) = reflector::store::<Application>();
        for n in ["a", "b", "c"] {
            writer.apply_watcher_event(&Event::Apply(app(n)));
        }
        let progress = Progress::default();
        let first = progress.shard_started(Some(1), store.clone());
        let a = ObjectRef::from_obj(&app("a"));
        let b = ObjectRef::from_obj(&app("b"));
        let gone = ObjectRef::from_obj(&app("gone"));
        progress.triggered(&a);
        progress.triggered(&a);
        progress.triggered(&b);
        progress.triggered(&gone);
        let s = progress.snapshot(Duration::from_secs(60));
        assert_eq!((s.owned, s.queued, s.stale, s.shards), (3, 2, 0, 1));
        progress.started(&a);
        progress.finished(&a);
        assert_eq!(progress.snapshot(Duration::from_secs(60)).queued, 1);
        // With a zero bound, everything not reconciled this instant is stale.
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(progress.snapshot(Duration::ZERO).stale, 3);
        assert_eq!(progress.snapshot(Duration::from_secs(60)).stale, 0);
        // A controller of the same shard started while the first still drained stays.
        std::thread::sleep(Duration::from_millis(1));
        let second = progress.shard_started(Some(1), store);
        progress.shard_stopped(Some(1), first);
        assert_eq!(progress.snapshot(Duration::from_secs(60)).owned, 3);
        progress.shard_stopped(Some(1), second);
        assert_eq!(progress.snapshot(Duration::ZERO), Snapshot::default());
    }
}
