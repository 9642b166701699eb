//! A rollout's first look after it applied workloads. A Deployment, StatefulSet or DaemonSet is
//! Progressing until its controller has observed the generation applied, which it does within a
//! second or so of the apply. That first status write is awaited from the shard's watch (which
//! keeps these kinds' status), with the reconcile's slot given back meanwhile
//! ([`crate::controller::queue::away`]): a rollout whose workloads are Available as soon as they
//! are observed (no Pods to wait for, or none to replace) then completes in the reconcile that
//! applied it, with one write of each status and one Event instead of two of each.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use super::Rollout;
use crate::controller::application::replica::unchanged::GENERATION_COVERS_SPEC;
use crate::plan::Entry;
use crate::watch::managed::Cached;

/// The longest a rollout's first look waits for its workloads' controllers. Past it, the
/// rollout is recorded Progressing and looked at again as the workloads change.
pub(super) const FIRST_LOOK: Duration = Duration::from_secs(10);

/// What the shard's watch shows of a workload this reconcile applied.
#[derive(Debug, PartialEq)]
pub(super) enum Seen {
    /// Its controller has observed the generation applied: the applied object with the
    /// watched metadata (but for `managedFields`, which the watch does not keep) and status.
    Observed(Value),
    /// Not yet observed at that generation.
    NotYet,
    /// Its spec changed since (a later generation): the next look reads it.
    Moved,
}

/// What `cached` (the watch's copy of the object; `None` while the watch does not show it)
/// says of `applied` (the object as this reconcile's apply returned it).
///
/// Contract: [`Seen::Observed`] only when the watched copy is at the applied `generation`
/// (the API server moves it on any change to these kinds' spec, so the spec is the one
/// applied), carries a `resourceVersion` and a status whose `observedGeneration` has reached
/// that generation.
pub(super) fn seen(applied: &Value, cached: Option<&Cached>) -> Seen {
    // A create reaches the watch a little after its answer.
    let Some(cached) = cached else { return Seen::NotYet };
    let (Some(generation), Some(watched)) = (applied["metadata"]["generation"].as_i64(), cached.meta.generation) else {
        return Seen::Moved;
    };
    match watched.cmp(&generation) {
        std::cmp::Ordering::Less => return Seen::NotYet,
        std::cmp::Ordering::Greater => return Seen::Moved,
        std::cmp::Ordering::Equal => {}
    }
    if cached.meta.resource_version.as_deref().is_none_or(str::is_empty) {
        return Seen::NotYet;
    }
    let Some(status) = cached.status.as_deref().and_then(|s| serde_json::from_str::<Value>(s).ok()) else {
        return Seen::NotYet;
    };
    if status["observedGeneration"].as_i64().is_none_or(|o| o < generation) {
        return Seen::NotYet;
    }
    let mut now = applied.clone();
    let Ok(mut metadata) = serde_json::to_value(&cached.meta) else { return Seen::NotYet };
    if let Some(fields) = applied["metadata"].get("managedFields") {
        metadata["managedFields"] = fields.clone();
    }
    now["metadata"] = metadata;
    now["status"] = status;
    Seen::Observed(now)
}

/// Whether `live` (as the apply returned it) is a workload its controller has not observed yet.
fn unobserved(e: &Entry, live: &Value) -> bool {
    GENERATION_COVERS_SPEC.contains(&(e.group.as_str(), e.kind.as_str()))
        && live["status"]["observedGeneration"].as_i64() < live["metadata"]["generation"].as_i64()
}

impl Rollout<'_> {
    /// Once after an apply: wait up to [`FIRST_LOOK`] until the shard's watch shows every
    /// workload of `entries` that `live` has unobserved observed at the generation applied
    /// ([`seen`]), its slot given back meanwhile, and put the watched copies in `live`. `true`
    /// when they were all observed (`live` changed: look at the health again).
    pub(super) async fn first_look(&mut self, entries: &[&Entry], live: &mut BTreeMap<String, Value>) -> bool {
        if !std::mem::take(&mut self.applied) {
            return false;
        }
        let waited: Vec<(String, &Entry)> = entries
            .iter()
            .map(|e| (e.identity(), *e))
            .filter(|(id, e)| live.get(id).is_some_and(|l| unobserved(e, l)))
            .collect();
        let shard = self.ctx.fence.is_some().then(|| super::super::replica::shard_of(self.ctx, self.ns, self.name));
        let inventory = &self.ctx.inventory;
        if waited.is_empty() || !waited.iter().all(|(_, e)| inventory.watching(shard, &e.group, &e.kind)) {
            return false;
        }
        let look = |live: &BTreeMap<String, Value>| -> Option<Option<Vec<(String, Value)>>> {
            let mut observed = Vec::new();
            for (id, e) in &waited {
                let cached = inventory.cached(shard, &e.group, &e.kind, &e.namespace, &e.name);
                match seen(live.get(id)?, cached.as_ref()) {
                    Seen::Observed(o) => observed.push((id.clone(), o)),
                    Seen::NotYet => return Some(None),
                    Seen::Moved => return None,
                }
            }
            Some(Some(observed))
        };
        // Their controllers' writes seen here trigger no reconcile after this one.
        let ctx = self.ctx;
        let mut looking =
            ctx.echoes.looking(waited.iter().map(|(id, e)| (e.group.as_str(), e.kind.as_str(), id.clone())));
        let mut changes: Vec<_> =
            waited.iter().map(|(_, e)| inventory.changes_of(shard, &e.group, &e.kind, &e.namespace, &e.name)).collect();
        let wait = async {
            loop {
                for c in &mut changes {
                    c.seen();
                }
                match look(live) {
                    Some(Some(observed)) => return Some(observed),
                    None => return None,
                    Some(None) => {}
                }
                let next = changes.iter_mut().map(|c| Box::pin(c.changed()));
                if futures_util::future::select_all(next).await.0.is_err() {
                    return None;
                }
            }
        };
        let timed = crate::controller::queue::away(tokio::time::timeout(FIRST_LOOK, wait)).await;
        self.now = jiff::Timestamp::now();
        let Ok(Some(observed)) = timed else { return false };
        for (id, o) in &observed {
            if let Some(rv) = o["metadata"]["resourceVersion"].as_str() {
                looking.took(id, rv);
            }
        }
        drop(looking);
        live.extend(observed);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde_json::json;

    fn applied() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "namespace": "ns", "generation": 2, "resourceVersion": "10",
                            "managedFields": [{"manager": "kuvryn-sync"}]},
               "spec": {"replicas": 0}, "status": {"observedGeneration": 1}})
    }

    fn cached(generation: Option<i64>, rv: Option<&str>, status: Option<&str>) -> Cached {
        let meta = ObjectMeta {
            name: Some("web".into()),
            namespace: Some("ns".into()),
            generation,
            resource_version: rv.map(str::to_string),
            annotations: Some([("deployment.kubernetes.io/revision".to_string(), "2".to_string())].into()),
            ..Default::default()
        };
        Cached { meta, status: status.map(Box::from) }
    }

    #[test]
    fn a_workload_is_observed_only_at_the_generation_applied() {
        let observed = r#"{"observedGeneration":2,"availableReplicas":0}"#;
        let cases: Vec<(&str, Option<Cached>, &str)> = vec![
            ("not in the watch yet", None, "not yet"),
            (
                "the watch has not seen the apply yet",
                Some(cached(Some(1), Some("9"), Some(r#"{"observedGeneration":1}"#))),
                "not yet",
            ),
            (
                "applied, not observed",
                Some(cached(Some(2), Some("10"), Some(r#"{"observedGeneration":1}"#))),
                "not yet",
            ),
            ("applied, no status", Some(cached(Some(2), Some("10"), None)), "not yet"),
            ("observed", Some(cached(Some(2), Some("11"), Some(observed))), "observed"),
            ("observed, no resourceVersion", Some(cached(Some(2), None, Some(observed))), "not yet"),
            (
                "edited since: a later spec",
                Some(cached(Some(3), Some("12"), Some(r#"{"observedGeneration":3}"#))),
                "moved",
            ),
            ("no generation", Some(cached(None, Some("11"), Some(observed))), "moved"),
        ];
        for (what, c, want) in cases {
            let got = match seen(&applied(), c.as_ref()) {
                Seen::Observed(_) => "observed",
                Seen::NotYet => "not yet",
                Seen::Moved => "moved",
            };
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn an_observed_workload_keeps_its_spec_and_managed_fields_and_takes_the_watched_rest() {
        let c = cached(Some(2), Some("11"), Some(r#"{"observedGeneration":2,"availableReplicas":0}"#));
        let Seen::Observed(o) = seen(&applied(), Some(&c)) else { panic!("observed") };
        assert_eq!(o["spec"], json!({"replicas": 0}));
        assert_eq!(o["status"], json!({"observedGeneration": 2, "availableReplicas": 0}));
        assert_eq!(o["metadata"]["resourceVersion"], "11");
        assert_eq!(o["metadata"]["annotations"]["deployment.kubernetes.io/revision"], "2");
        assert_eq!(o["metadata"]["managedFields"], json!([{"manager": "kuvryn-sync"}]));
        assert_eq!(crate::health::assess(&o).status, crate::api::common::HealthStatus::Healthy);
    }
}
