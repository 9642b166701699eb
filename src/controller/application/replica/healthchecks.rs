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
    pub(crate) events: tokio::sync::broadcast::Sender<Changed>,
    compiled: Mutex<Compiled>,
    task: tokio::task::JoinHandle<()>,
}

impl HealthChecks {
    pub(crate) fn start(client: Client) -> HealthChecks {
        let (store, writer) = reflector::store();
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
                    Ok(watcher::Event::Init | watcher::Event::InitDone) => continue,
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
        HealthChecks { store, events, compiled: Mutex::new(HashMap::new()), task }
    }

    /// Wait, up to [`FIRST_LIST`], for the first list of HealthChecks.
    pub(crate) async fn ready(&self) {
        if tokio::time::timeout(FIRST_LIST, self.store.wait_until_ready()).await.is_err() {
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
