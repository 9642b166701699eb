//! HealthChecks as the Application controller reads them: one watch per replica, the rules
//! compiled once per HealthCheck generation, and the changes that re-assess Applications.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, watcher};
use kube::{Client, ResourceExt};

use crate::api::healthcheck::HealthCheck;
use crate::controller::healthcheck::{compile, target, winner};
use crate::health::cel::Rules;

/// How long a shard waits for the first list of HealthChecks before it reconciles: assessing
/// before would apply the built-in rules to kinds that have a HealthCheck.
const FIRST_LIST: Duration = Duration::from_secs(10);

/// Whether the first list of HealthChecks has been stored, for every shard that waits for it
/// at once. Not kube's `Store::wait_until_ready`: in kube-runtime 5.0 only the last of several
/// concurrent waiters is woken (one oneshot receiver, one waker), and the others went on only
/// at their [`FIRST_LIST`] timeout: a replica's shards after the first started 10 s late.
#[derive(Clone, Default)]
struct FirstList(Arc<tokio::sync::watch::Sender<bool>>);

impl FirstList {
    fn done(&self) {
        self.0.send_replace(true);
    }

    /// Whether the list came within `limit`.
    async fn wait(&self, limit: Duration) -> bool {
        let mut rx = self.0.subscribe();
        matches!(tokio::time::timeout(limit, rx.wait_for(|listed| *listed)).await, Ok(Ok(_)))
    }
}

/// A HealthCheck that changed: the namespace and the API group and kind it targets.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Changed {
    pub(crate) namespace: String,
    pub(crate) group: String,
    pub(crate) kind: String,
}

/// Compiled rules by (namespace, name), with the generation and uid they were compiled from.
type Compiled = HashMap<(String, String), (Option<i64>, Option<String>, Arc<Rules>)>;

/// One watch of every HealthCheck per replica.
pub(crate) struct HealthChecks {
    store: Store<HealthCheck>,
    listed: FirstList,
    pub(crate) events: tokio::sync::broadcast::Sender<Changed>,
    compiled: Mutex<Compiled>,
    task: tokio::task::JoinHandle<()>,
}

impl HealthChecks {
    pub(crate) fn start(client: Client) -> HealthChecks {
        let (store, writer) = reflector::store();
        let listed = FirstList::default();
        let lister = listed.clone();
        let (events, _) = tokio::sync::broadcast::channel(1024);
        let tx = events.clone();
        let task = tokio::spawn(async move {
            let stream =
                watcher(Api::<HealthCheck>::all(client), watcher::Config::default()).default_backoff().reflect(writer);
            let mut stream = std::pin::pin!(stream);
            // What each HealthCheck targets and its generation, as last sent.
            let mut seen: HashMap<(String, String), (Changed, Option<i64>)> = HashMap::new();
            while let Some(event) = stream.next().await {
                let (hc, deleted) = match event {
                    Ok(watcher::Event::Apply(hc) | watcher::Event::InitApply(hc)) => (hc, false),
                    Ok(watcher::Event::Delete(hc)) => (hc, true),
                    // The reflector has stored the list before passing its end on.
                    Ok(watcher::Event::InitDone) => {
                        lister.done();
                        continue;
                    }
                    Ok(watcher::Event::Init) => continue,
                    Err(e) => {
                        tracing::debug!(error = %e, "watching HealthChecks");
                        continue;
                    }
                };
                let key = (hc.namespace().unwrap_or_default(), hc.name_any());
                let (group, kind) = target(&hc);
                let now = Changed { namespace: key.0.clone(), group: group.to_string(), kind: kind.to_string() };
                // The kind it targeted before is re-assessed too (a retargeted HealthCheck).
                let before =
                    if deleted { seen.remove(&key) } else { seen.insert(key, (now.clone(), hc.metadata.generation)) };
                if before.as_ref() == Some(&(now.clone(), hc.metadata.generation)) && !deleted {
                    continue;
                }
                for changed in before.map(|(c, _)| c).into_iter().chain([now]) {
                    // No subscriber (no shard running) is fine.
                    drop(tx.send(changed));
                }
            }
        });
        HealthChecks { store, listed, events, compiled: Mutex::new(HashMap::new()), task }
    }

    /// Wait, up to [`FIRST_LIST`], for the first list of HealthChecks.
    pub(crate) async fn ready(&self) {
        if !self.listed.wait(FIRST_LIST).await {
            tracing::warn!("HealthChecks not listed yet; the built-in health rules apply until they are");
        }
    }

    /// The rules for objects of `group`/`kind` in `namespace`, compiled once per generation.
    pub(crate) fn rules_for(&self, namespace: &str, group: &str, kind: &str) -> Option<Arc<Rules>> {
        let all = self.store.state();
        let hc = winner(all.iter().map(|hc| &**hc), namespace, group, kind)?;
        let key = (namespace.to_string(), hc.name_any());
        let stamp = (hc.metadata.generation, hc.metadata.uid.clone());
        let mut compiled = self.compiled.lock().expect("compiled HealthChecks lock");
        if let Some((generation, uid, rules)) = compiled.get(&key)
            && (generation, uid) == (&stamp.0, &stamp.1)
        {
            return Some(rules.clone());
        }
        // Forget HealthChecks that are gone, so the cache stays as large as the store.
        compiled
            .retain(|(ns, name), _| all.iter().any(|h| h.namespace().as_deref() == Some(ns) && &h.name_any() == name));
        let rules = Arc::new(compile(hc));
        compiled.insert(key, (stamp.0, stamp.1, rules.clone()));
        Some(rules)
    }
}

impl Drop for HealthChecks {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every waiter goes on when the list comes, not at its limit. Time is paused: it moves
    /// only when every task waits, so a waiter not woken would return at the limit.
    #[tokio::test(start_paused = true)]
    async fn every_shard_waiting_for_the_first_list_goes_on_when_it_comes() {
        let listed = FirstList::default();
        let start = tokio::time::Instant::now();
        let waiters: Vec<_> = (0..4)
            .map(|_| {
                let listed = listed.clone();
                tokio::spawn(async move { (listed.wait(FIRST_LIST).await, start.elapsed()) })
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(1)).await;
        listed.done();
        for w in waiters {
            assert_eq!(w.await.unwrap(), (true, Duration::from_secs(1)));
        }
        // After the list, at once; without it, not before the limit.
        assert!(listed.wait(FIRST_LIST).await);
        let never = FirstList::default();
        let start = tokio::time::Instant::now();
        assert!(!never.wait(FIRST_LIST).await);
        assert_eq!(start.elapsed(), FIRST_LIST);
    }
}
