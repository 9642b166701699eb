//! Reading the managed resources' health as the rollout waits for it: the live objects and
//! their Pods, summarized by the health core ([`crate::health`]) with the HealthChecks that
//! apply, within the reconcile's CEL budget.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::runtime::events::EventType;
use serde_json::Value;

use super::super::flow::Planned;
use super::Rollout;
use crate::api::application::HealthSummary;
use crate::api::common::HealthStatus;
use crate::api::names;
use crate::api::revision::reference as revision_ref;
use crate::health;
use crate::plan::Action as PlanAction;
use crate::text::bounded;

/// A managed resource to judge, owned so that it can go to the tenant pool.
pub(super) struct Resource {
    group: String,
    kind: String,
    namespace: String,
    name: String,
    /// `group/kind/namespace/name`, the key of `live` and of the Pods.
    id: String,
    /// The live object when a HealthCheck judges it (else read from the caller's map).
    live: Option<Value>,
    check: Option<std::sync::Arc<health::cel::Rules>>,
}

/// `resources` as the health core sees them; a live object not carried is looked up in `live`.
pub(super) fn observe<'a>(
    resources: &'a [Resource],
    live: &'a BTreeMap<String, Value>,
    pods: &'a BTreeMap<String, Vec<Value>>,
    pods_degrade: bool,
) -> Vec<health::Observed<'a>> {
    resources
        .iter()
        .map(|r| health::Observed {
            group: &r.group,
            kind: &r.kind,
            namespace: &r.namespace,
            name: &r.name,
            live: r.live.as_ref().or_else(|| live.get(&r.id)),
            pods: pods.get(&r.id).map(Vec::as_slice).unwrap_or_default(),
            pods_degrade,
            check: r.check.as_deref(),
        })
        .collect()
}

impl Rollout<'_> {
    /// Health of the managed resources onto the Application (and the Revision when `deployed`),
    /// with a `HealthDegraded` Event when it turns Degraded.
    #[tracing::instrument(name = "health", skip_all, fields(status = tracing::field::Empty))]
    pub(super) async fn observe_health(
        &mut self,
        planned: &Planned,
        live: &BTreeMap<String, Value>,
        deployed: bool,
    ) -> health::Summary {
        let pods = self.pods_of(planned, live, None).await;
        let summary = self.summarize(planned, live, &pods, deployed, None).await;
        tracing::Span::current().record("status", tracing::field::debug(summary.status));
        if deployed {
            self.record_health(&summary);
        }
        let was = self.old.health.as_ref().map(|h| h.status);
        self.status.health = Some(HealthSummary {
            status: summary.status,
            message: (!summary.message.is_empty()).then(|| bounded(&summary.message, 1024)),
        });
        self.status.diagnosis = super::diagnosis::diagnose(planned, live, &summary).await;
        if summary.status == HealthStatus::Degraded && was != Some(HealthStatus::Degraded) && deployed {
            let related = revision_ref(self.ns, self.rev);
            let message = match &self.status.diagnosis {
                Some(d) => bounded(&format!("{}; root cause: {}: {}", summary.message, d.reason, d.message), 1024),
                None => summary.message.clone(),
            };
            self.events.tell(Some(related.clone()), EventType::Warning, names::events::HEALTH_DEGRADED, &message);
        }
        summary
    }

    /// The Pods of every workload that is not Healthy, as the service account (evidence of why;
    /// a failed list only means no evidence).
    /// `upto`: only the objects of that wave and lower ones.
    pub(super) async fn pods_of(
        &self,
        planned: &Planned,
        live: &BTreeMap<String, Value>,
        upto: Option<i32>,
    ) -> BTreeMap<String, Vec<Value>> {
        let mut out = BTreeMap::new();
        for e in &planned.plan.entries {
            if e.is_hook() || !health::is_workload(&e.group, &e.kind) || upto.is_some_and(|w| e.wave > w) {
                continue;
            }
            let id = e.identity();
            let Some(obj) = live.get(&id) else { continue };
            if health::assess(obj).status == HealthStatus::Healthy || !health::pods_may_explain(obj) {
                continue;
            }
            let Some(labels) = obj["spec"]["selector"]["matchLabels"].as_object().filter(|l| !l.is_empty()) else {
                continue;
            };
            let selector: Vec<String> =
                labels.iter().filter_map(|(k, v)| v.as_str().map(|v| format!("{k}={v}"))).collect();
            let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
                kube::Api::namespaced(planned.sa.clone(), &e.namespace);
            let params = kube::api::ListParams::default().labels(&selector.join(",")).limit(50);
            match pods.list(&params).await {
                Ok(list) => {
                    let values = list.items.into_iter().filter_map(|p| serde_json::to_value(p).ok()).collect();
                    out.insert(id, values);
                }
                Err(err) => tracing::debug!(error = %err, workload = %id, "listing Pods for health evidence"),
            }
        }
        out
    }

    /// The health of the managed resources (up to wave `upto`). Resources of kinds with a
    /// HealthCheck are judged off the runtime, on the tenant pool ([`crate::offload::tenant`]),
    /// charged to this reconcile's [`health::cel::Budget`]: the expressions' work is the
    /// tenant's to size (thousands of objects, quadratic expressions), and on a runtime worker
    /// it held up Lease renewals and every other tenant's reconciles (issue 44, item 3). The
    /// built-in rules cost microseconds an object and run here.
    pub(super) async fn summarize(
        &mut self,
        planned: &Planned,
        live: &BTreeMap<String, Value>,
        pods: &BTreeMap<String, Vec<Value>>,
        pods_degrade: bool,
        upto: Option<i32>,
    ) -> health::Summary {
        let entries: Vec<_> = planned
            .plan
            .entries
            .iter()
            .filter(|e| e.action != PlanAction::Delete && e.warnings.is_empty() && !e.is_hook())
            .filter(|e| upto.is_none_or(|w| e.wave <= w))
            .collect();
        // The HealthCheck for each object's kind in its namespace; for a cluster-scoped object,
        // in the Application's namespace.
        let rules: Vec<_> = entries
            .iter()
            .map(|e| {
                let ns = if e.namespace.is_empty() { self.ns } else { &e.namespace };
                self.ctx.healthchecks().rules_for(ns, &e.group, &e.kind)
            })
            .collect();
        let resources: Vec<Resource> = entries
            .iter()
            .zip(rules)
            .map(|(e, check)| {
                let id = e.identity();
                Resource {
                    group: e.group.clone(),
                    kind: e.kind.clone(),
                    namespace: e.namespace.clone(),
                    name: e.name.clone(),
                    // Copied only for the pool: no HealthCheck, no copy.
                    live: live.get(&id).filter(|_| check.is_some()).cloned(),
                    check,
                    id,
                }
            })
            .collect();
        if resources.iter().all(|r| r.check.is_none()) {
            return health::summarize(&observe(&resources, live, pods, pods_degrade));
        }
        // Only the objects a HealthCheck judges go to the pool (the rest are judged there too,
        // by the built-in rules, from the copies of their Pods: few, workloads only).
        let pods: BTreeMap<String, Vec<Value>> = pods.clone();
        let others: BTreeMap<String, Value> = resources
            .iter()
            .filter(|r| r.check.is_none())
            .filter_map(|r| Some((r.id.clone(), live.get(&r.id)?.clone())))
            .collect();
        let mut budget = std::mem::replace(&mut self.cel, health::cel::Budget::new(0, Duration::ZERO));
        let (summary, budget) = crate::offload::tenant(move || {
            let summary = health::summarize_within(&observe(&resources, &others, &pods, pods_degrade), &mut budget);
            (summary, budget)
        })
        .await;
        if budget.exhausted() && !self.cel.exhausted() {
            tracing::info!(spent = budget.spent(), "HealthChecks over the per-reconcile budget");
        }
        self.cel = budget;
        summary
    }
}
