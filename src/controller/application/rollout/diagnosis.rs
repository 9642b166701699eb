//! `status.diagnosis`: when a managed resource is not Healthy, the objects around the managed
//! resources are read as the Application's service account ([`crate::gather`]), linked into the
//! resource graph and walked to the evidence ([`crate::graph::diagnose`]).
//!
//! The walk starts from each managed resource that is not Healthy, Degraded first, then from the
//! managed Services, Ingresses, HorizontalPodAutoscalers and PodDisruptionBudgets: their own
//! health says nothing of what they point at (a Service with no ready endpoints, an Ingress
//! routing to a missing Service), and they are only looked at because something is already not
//! Healthy.

use std::collections::BTreeMap;

use serde_json::Value;

use super::super::flow::Planned;
use crate::api::application::{Diagnosis, ResourceRef};
use crate::api::common::HealthStatus;
use crate::gather::{self, Budget};
use crate::graph;
use crate::health;
use crate::plan::Action as PlanAction;
use crate::redact::redact;

/// The managed resources' live objects (hooks, deletions and missing ones left out), by
/// identity, and where the walk starts: the resources `summary` found not Healthy in its order
/// (Degraded first), then the kinds whose faults are elsewhere
/// ([`graph::diagnose::points_elsewhere`]).
pub(super) fn managed(
    planned: &Planned,
    live: &BTreeMap<String, Value>,
    summary: &health::Summary,
) -> (BTreeMap<ResourceRef, Value>, Vec<ResourceRef>) {
    let mut objects = BTreeMap::new();
    let mut starts: Vec<(usize, ResourceRef)> = Vec::new();
    for e in planned.plan.entries.iter().filter(|e| !e.is_hook() && e.action != PlanAction::Delete) {
        let id = e.identity();
        let Some(obj) = live.get(&id) else { continue };
        let r = ResourceRef {
            group: e.group.clone(),
            kind: e.kind.clone(),
            namespace: (!e.namespace.is_empty()).then(|| e.namespace.clone()),
            name: e.name.clone(),
        };
        let key = crate::api::display::object(&e.kind, Some(&e.namespace), &e.name);
        let unhealthy = summary.unhealthy.iter().position(|(k, _)| *k == key);
        let pointer = graph::diagnose::points_elsewhere(&e.group, &e.kind);
        if let Some(order) = unhealthy.or(pointer.then_some(usize::MAX)) {
            starts.push((order, r.clone()));
        }
        objects.insert(r, obj.clone());
    }
    starts.sort();
    (objects, starts.into_iter().map(|(_, r)| r).collect())
}

/// The diagnosis of the Application's managed resources when `summary` is not Healthy, read as
/// `planned.sa`.
pub(super) async fn diagnose(
    planned: &Planned,
    live: &BTreeMap<String, Value>,
    summary: &health::Summary,
) -> Option<Diagnosis> {
    if summary.status == HealthStatus::Healthy {
        return None;
    }
    let (objects, starts) = managed(planned, live, summary);
    if starts.is_empty() {
        return None;
    }
    let gathered = gather::gather(&planned.sa, objects, Budget::default()).await;
    // Linking and walking are as large as the Application (a walk from each resource that is
    // not Healthy): on the tenant pool, not on the runtime that renews the shard Leases.
    let walked =
        crate::offload::tenant(move || graph::diagnose::diagnose(&graph::build(&gathered.observed), &starts)).await;
    let mut d = walked?;
    d.message = redact(&d.message, planned.secrets.iter().map(String::as_str));
    Some(d)
}
