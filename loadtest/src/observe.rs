//! What the cluster says, as it says it: watches on Applications, managed ConfigMaps and the
//! shard Leases, each event stamped with the instant it arrived. Latencies are measured against
//! these stamps, never by polling.

use std::collections::{HashMap, VecDeque};
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Resource, ResourceExt};
use kuvryn_sync::api::application::{Application, SyncState};
use kuvryn_sync::api::common::HealthStatus;
use kuvryn_sync::api::conditions;
use kuvryn_sync::api::names;
use tokio::sync::watch;

/// Observations kept per object (older ones are dropped).
const KEPT: usize = 512;

/// `namespace/name`.
pub fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// Timestamped observations of objects, by `namespace/name`, with a signal on every change.
pub struct Journal<T> {
    seen: Mutex<HashMap<String, VecDeque<(Instant, T)>>>,
    changed: watch::Sender<u64>,
    synced: watch::Sender<bool>,
}

impl<T: Clone> Journal<T> {
    /// A journal no watch writes to.
    pub fn empty() -> Arc<Journal<T>> {
        Arc::new(Journal { seen: Mutex::default(), changed: watch::channel(0).0, synced: watch::channel(false).0 })
    }

    fn record(&self, key: String, at: Instant, value: T) {
        let mut seen = self.seen.lock().expect("journal lock");
        let list = seen.entry(key).or_default();
        list.push_back((at, value));
        while list.len() > KEPT {
            list.pop_front();
        }
        drop(seen);
        self.changed.send_modify(|n| *n += 1);
    }

    /// The latest observation of every object.
    pub fn latest(&self) -> HashMap<String, (Instant, T)> {
        let seen = self.seen.lock().expect("journal lock");
        seen.iter().filter_map(|(k, v)| Some((k.clone(), v.back()?.clone()))).collect()
    }

    /// Every kept observation of every object, oldest first.
    pub fn history(&self) -> HashMap<String, Vec<(Instant, T)>> {
        let seen = self.seen.lock().expect("journal lock");
        seen.iter().map(|(k, v)| (k.clone(), v.iter().cloned().collect())).collect()
    }

    /// The latest observation of `key`.
    pub fn current(&self, key: &str) -> Option<T> {
        self.seen.lock().expect("journal lock").get(key)?.back().map(|(_, v)| v.clone())
    }

    /// The first observation of `key` at or after `since` that satisfies `pred`.
    pub fn first_since(&self, key: &str, since: Instant, pred: impl Fn(&T) -> bool) -> Option<Instant> {
        let seen = self.seen.lock().expect("journal lock");
        seen.get(key)?.iter().find(|(at, v)| *at >= since && pred(v)).map(|(at, _)| *at)
    }

    /// Wait until `check` returns `Some` (it is asked again after every recorded observation,
    /// and at least every few seconds), or `None` once `deadline` passes.
    pub async fn until<R>(&self, deadline: Instant, mut check: impl FnMut(&Self) -> Option<R>) -> Option<R> {
        let mut rx = self.changed.subscribe();
        loop {
            rx.borrow_and_update();
            if let Some(r) = check(self) {
                return Some(r);
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            let _ = tokio::time::timeout(left.min(Duration::from_secs(5)), rx.changed()).await;
        }
    }

    /// Wait until the watch has listed every existing object.
    pub async fn wait_synced(&self, timeout: Duration) -> bool {
        let mut rx = self.synced.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|s| *s)).await.is_ok_and(|r| r.is_ok())
    }
}

/// Record every event of `api` (filtered by `config`) as `summarize` says, from a task of its
/// own, until the runtime stops.
fn follow<K, T>(api: Api<K>, config: watcher::Config, summarize: fn(&K) -> T) -> Arc<Journal<T>>
where
    K: Resource + Clone + serde::de::DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Clone + Eq + std::hash::Hash,
    T: Clone + Send + 'static,
{
    let journal = Journal::empty();
    let j = journal.clone();
    tokio::spawn(async move {
        let mut events = watcher(api, config).default_backoff().boxed();
        while let Some(event) = events.next().await {
            let at = Instant::now();
            match event {
                Ok(Event::Apply(obj) | Event::InitApply(obj)) => {
                    j.record(key(&obj.namespace().unwrap_or_default(), &obj.name_any()), at, summarize(&obj));
                }
                Ok(Event::InitDone) => {
                    j.synced.send_replace(true);
                }
                Ok(Event::Delete(_) | Event::Init) => {}
                Err(e) => eprintln!("loadtest: watch error (retrying): {e}"),
            }
        }
    });
    journal
}

/// What the load test reads off an Application's status.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AppSeen {
    /// `status.sync.status`.
    pub sync: Option<SyncState>,
    /// `status.health.status`.
    pub health: Option<HealthStatus>,
    /// `Ready=True`.
    pub ready: bool,
    /// `status.lastHandledReconcileAt`.
    pub handled: Option<String>,
    /// The `sync.kuvryn.io/shard` label.
    pub shard: Option<String>,
    /// `status.sync.commit`.
    pub commit: Option<String>,
}

impl AppSeen {
    /// Synced, Healthy and Ready: converged.
    pub fn converged(&self) -> bool {
        self.ready && self.sync == Some(SyncState::Synced) && self.health == Some(HealthStatus::Healthy)
    }
}

/// What the load test reads off `app`.
pub fn app_seen(app: &Application) -> AppSeen {
    let status = app.status.as_ref();
    AppSeen {
        sync: status.and_then(|s| s.sync.as_ref()).map(|s| s.status),
        health: status.and_then(|s| s.health.as_ref()).map(|h| h.status),
        ready: status.is_some_and(|s| conditions::is_true(&s.conditions, names::conditions::READY)),
        handled: status.and_then(|s| s.last_handled_reconcile_at.clone()),
        shard: app.labels().get(names::labels::SHARD).cloned(),
        commit: status.and_then(|s| s.sync.as_ref()).and_then(|s| s.commit.clone()),
    }
}

/// Every Application in the cluster.
pub fn applications(client: &kube::Client) -> Arc<Journal<AppSeen>> {
    follow(Api::<Application>::all(client.clone()), watcher::Config::default(), app_seen)
}

/// The data key the load test edits in each managed ConfigMap.
pub const EDITED_KEY: &str = "value";

fn edited_value(cm: &ConfigMap) -> Option<String> {
    cm.data.as_ref()?.get(EDITED_KEY).cloned()
}

/// Every ConfigMap Kuvryn Sync manages: the value of [`EDITED_KEY`].
pub fn configmaps(client: &kube::Client) -> Arc<Journal<Option<String>>> {
    let managed = format!("{}={}", names::labels::MANAGED_BY, names::labels::MANAGED_BY_VALUE);
    follow(Api::<ConfigMap>::all(client.clone()), watcher::Config::default().labels(&managed), edited_value)
}

fn holder(lease: &Lease) -> Option<String> {
    lease.spec.as_ref()?.holder_identity.clone().filter(|h| !h.is_empty())
}

/// The shard Leases in `namespace`: their holder.
pub fn shard_leases(client: &kube::Client, namespace: &str) -> Arc<Journal<Option<String>>> {
    let shards = format!("{}=shard", sharding::lease::ROLE_LABEL);
    follow(Api::<Lease>::namespaced(client.clone(), namespace), watcher::Config::default().labels(&shards), holder)
}

/// A shard Lease's holder and `renewTime` (the holder's clock when it sent the renewal).
fn renewal(lease: &Lease) -> Option<(String, jiff::Timestamp)> {
    Some((holder(lease)?, lease.spec.as_ref()?.renew_time.as_ref()?.0))
}

/// The shard Leases in `namespace`: their holder and `renewTime`.
pub fn shard_renewals(client: &kube::Client, namespace: &str) -> Arc<Journal<Option<(String, jiff::Timestamp)>>> {
    let shards = format!("{}=shard", sharding::lease::ROLE_LABEL);
    follow(Api::<Lease>::namespaced(client.clone(), namespace), watcher::Config::default().labels(&shards), renewal)
}

/// The gaps, in seconds, between consecutive renewals of one Lease by the same holder, from
/// their `renewTime`s (`seen`: what a journal of [`renewal`]s holds for one Lease, in order).
pub fn renew_time_gaps(seen: &[Option<(String, jiff::Timestamp)>]) -> Vec<f64> {
    let mut gaps = Vec::new();
    for pair in seen.windows(2) {
        if let (Some((a, at)), Some((b, bt))) = (&pair[0], &pair[1])
            && a == b
            && bt > at
        {
            gaps.push(bt.duration_since(*at).as_secs_f64());
        }
    }
    gaps
}

/// The writes the cluster's own controllers (and kubelets) make in the fleet's namespaces, as
/// their watch events show them: every stored change of a ReplicaSet, Pod, EndpointSlice or
/// Endpoints object, and every change of a Deployment that left its generation as it was (a
/// status write: the Deployment controller's; Kuvryn Sync's applies change the spec). Each
/// event is one write that changed something; a write that changed nothing shows no event.
pub struct ClusterWrites {
    seen: Mutex<Vec<(Instant, &'static str)>>,
}

impl ClusterWrites {
    /// The writes between `from` and `to`, by resource.
    pub fn between(&self, from: Instant, to: Instant) -> std::collections::BTreeMap<String, u64> {
        let mut out = std::collections::BTreeMap::new();
        for (_, what) in self.seen.lock().expect("lock").iter().filter(|(at, _)| *at >= from && *at <= to) {
            *out.entry((*what).to_string()).or_default() += 1;
        }
        out
    }
}

/// Count the cluster's own writes in namespaces whose name starts with `prefix`.
pub fn cluster_writes(client: &kube::Client, prefix: &'static str) -> Arc<ClusterWrites> {
    use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
    use k8s_openapi::api::core::v1::{Endpoints, Pod};
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let counter = Arc::new(ClusterWrites { seen: Mutex::default() });
    count(Api::<ReplicaSet>::all(client.clone()), prefix, "replicasets", counter.clone(), |_| true);
    count(Api::<Pod>::all(client.clone()), prefix, "pods", counter.clone(), |_| true);
    count(Api::<EndpointSlice>::all(client.clone()), prefix, "endpointslices", counter.clone(), |_| true);
    #[allow(deprecated)]
    count(Api::<Endpoints>::all(client.clone()), prefix, "endpoints", counter.clone(), |_| true);
    let generations: Mutex<HashMap<String, Option<i64>>> = Mutex::default();
    count(
        Api::<Deployment>::all(client.clone()),
        prefix,
        "deployments/status",
        counter.clone(),
        move |d: &Deployment| {
            let k = key(&d.namespace().unwrap_or_default(), &d.name_any());
            let previous = generations.lock().expect("lock").insert(k, d.metadata.generation);
            previous.is_some_and(|g| g == d.metadata.generation)
        },
    );
    counter
}

/// Count every change of `api`'s objects after the first list, in namespaces starting with
/// `prefix`, that `mine` says is the cluster's, as `what`. `mine` also sees the first list.
fn count<K>(
    api: Api<K>,
    prefix: &'static str,
    what: &'static str,
    counter: Arc<ClusterWrites>,
    mine: impl Fn(&K) -> bool + Send + 'static,
) where
    K: Resource + Clone + serde::de::DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Clone + Eq + std::hash::Hash,
{
    tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default()).default_backoff().boxed();
        let mut listed = false;
        while let Some(event) = events.next().await {
            let at = Instant::now();
            let obj = match event {
                Ok(Event::InitDone) => {
                    listed = true;
                    continue;
                }
                Ok(Event::InitApply(obj)) => {
                    mine(&obj);
                    continue;
                }
                Ok(Event::Apply(obj) | Event::Delete(obj)) => obj,
                Ok(Event::Init) | Err(_) => continue,
            };
            if listed && obj.namespace().is_some_and(|n| n.starts_with(prefix)) && mine(&obj) {
                counter.seen.lock().expect("lock").push((at, what));
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renew_time_gaps_are_between_renewals_by_the_same_holder() {
        let at = |s: &str| -> jiff::Timestamp { format!("2026-12-06T12:00:{s}Z").parse().unwrap() };
        let by = |h: &str, s: &str| Some((h.to_string(), at(s)));
        let seen = vec![
            by("a", "00"),
            by("a", "03"),
            // The same renewal seen again (a resync, another field's write): no gap.
            by("a", "03"),
            by("a", "12.5"),
            // Released, then taken by another holder: its first renewal is no gap of a's.
            None,
            by("b", "20"),
            by("b", "22"),
        ];
        assert_eq!(renew_time_gaps(&seen), vec![3.0, 9.5, 2.0]);
    }
}
