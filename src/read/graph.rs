//! The resource graph of an Application, read live as the user: what `ksync graph` prints and
//! the dashboard draws.
//!
//! The managed resources are those of the plan of the desired Revision, else of the last healthy
//! one (as `ksync app` shows them). They and the objects around them are read with the user's
//! credentials, within the same bounds as the controller's ([`crate::gather`]), linked
//! ([`crate::graph::build`]) and walked for the diagnosis from the resources that are not
//! Healthy. Drawn by [`crate::view::graph`].

use std::collections::{BTreeMap, HashMap};

use super::connect::Cluster;
use super::healthchecks::Checks;
use super::live::{self, Live, managed};
use crate::api::application::{Application, Diagnosis, ResourceRef};
use crate::api::common::HealthStatus;
use crate::api::revision::{PlanEntry, Revision};
use crate::command::Result;
use crate::gather::{self, Budget};
use crate::graph;
use crate::health;
use crate::health::cel::Rules;
use crate::view::graph::GraphView;

/// What the graph of an Application is made of, read live as the user: what
/// [`GraphData::view`] hands to the views of `ksync graph` and of the dashboard (`ksync ui`).
pub struct GraphData {
    /// `namespace/name` of the Application.
    pub application: String,
    /// The managed resources and the objects around them, linked.
    pub graph: graph::Graph,
    /// The diagnosis walked from the resources that are not Healthy, if any.
    pub diagnosis: Option<Diagnosis>,
    /// The read budget was reached: some objects are left out.
    pub truncated: bool,
    /// The verdicts of the HealthChecks on the managed resources that have one.
    pub assessed: BTreeMap<ResourceRef, health::Assessment>,
}

impl GraphData {
    /// The view of it.
    pub fn view(&self) -> GraphView<'_> {
        GraphView {
            application: &self.application,
            graph: &self.graph,
            diagnosis: self.diagnosis.as_ref(),
            truncated: self.truncated,
            assessed: &self.assessed,
        }
    }
}

/// Read the Application `name` of the cluster's namespace, its managed resources and the
/// objects around them; link them and walk the diagnosis.
pub async fn read(cluster: &Cluster, name: &str) -> Result<GraphData> {
    let app = super::get::<Application>(cluster, name).await?.typed;
    let status = app.status.clone().unwrap_or_default();
    let mut revisions = Vec::new();
    for rev in [&status.desired_revision, &status.last_healthy_revision].into_iter().flatten() {
        if let Some(r) = super::get_opt::<Revision>(cluster, rev).await? {
            revisions.push(r.typed);
        }
    }
    let entries: Vec<PlanEntry> = revisions
        .iter()
        .find_map(|r| r.status.as_ref().and_then(|s| s.plan.as_ref()))
        .map(|p| managed(&p.entries).cloned().collect())
        .unwrap_or_default();
    let lives = live::read_live(cluster, &entries).await;
    let checks = Checks::read(cluster, live::namespaces(&entries, &cluster.namespace)).await;
    // Judging and linking are as large as the Application (thousands of objects, a tenant's
    // expressions): on the tenant pool, the HealthChecks within one budget, never on the
    // caller's runtime (the manager's, serving the dashboard).
    let namespace = cluster.namespace.clone();
    let (objects, healths, assessed) =
        crate::offload::tenant(move || judge(&entries, lives, &checks, &namespace)).await;
    let gathered = gather::gather(&cluster.client, objects, Budget::default()).await;
    let (g, diagnosis) = crate::offload::tenant(move || {
        let g = graph::build(&gathered.observed);
        let diagnosis = graph::diagnose::diagnose(&g, &graph::diagnose::starts(&healths));
        (g, diagnosis)
    })
    .await;
    Ok(GraphData {
        application: format!("{}/{name}", cluster.namespace),
        graph: g,
        diagnosis,
        truncated: gathered.truncated,
        assessed,
    })
}

/// The managed resources found live, the health of each, and the verdicts of the HealthChecks
/// among them (each HealthCheck compiled once; its expressions charged to one
/// [`health::cel::Budget`], as a reconcile's are).
#[allow(clippy::type_complexity)] // reason: three results of one pass, each used once
fn judge(
    entries: &[PlanEntry],
    lives: Vec<Live>,
    checks: &Checks,
    namespace: &str,
) -> (
    BTreeMap<ResourceRef, serde_json::Value>,
    Vec<(ResourceRef, HealthStatus)>,
    BTreeMap<ResourceRef, health::Assessment>,
) {
    let mut budget = health::cel::Budget::per_reconcile();
    let mut compiled: HashMap<(String, String, String), Option<Rules>> = HashMap::new();
    let mut objects = BTreeMap::new();
    let mut healths = Vec::new();
    let mut assessed = BTreeMap::new();
    for (e, live) in entries.iter().zip(lives) {
        let r = ResourceRef {
            group: e.resource.group.clone(),
            kind: e.resource.kind.clone(),
            namespace: e.resource.namespace.clone().filter(|ns| !ns.is_empty()),
            name: e.resource.name.clone(),
        };
        if let Live::Found(obj) = live {
            let ns = r.namespace.as_deref().unwrap_or(namespace);
            let check = compiled
                .entry((ns.to_string(), r.group.clone(), r.kind.clone()))
                .or_insert_with(|| checks.rules(ns, &r.group, &r.kind));
            let status = match check {
                Some(c) => {
                    let a = health::assess_within(c, &obj, &mut budget);
                    let status = a.status;
                    assessed.insert(r.clone(), a);
                    status
                }
                None => health::assess(&obj).status,
            };
            healths.push((r.clone(), status));
            objects.insert(r, obj);
        }
    }
    (objects, healths, assessed)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    // See: issue 44, item 3. The dashboard's graph of an Application of many objects under a
    // costly HealthCheck is judged within the per-reconcile budget: the rest is Unknown, and
    // the graph still has every object.
    #[test]
    fn the_graph_judges_healthchecks_within_the_budget() {
        let data: serde_json::Map<String, serde_json::Value> =
            (0..250).map(|k| (format!("key-{k:03}"), json!("value"))).collect();
        // More than the cost units allow (about 500,000 each, 394 fit), whatever the CPU time.
        let n = 500;
        let entries: Vec<PlanEntry> = (0..n)
            .map(|i| {
                serde_json::from_value(json!({"group": "", "kind": "ConfigMap", "namespace": "a",
                    "name": format!("cm-{i:03}"), "version": "v1", "action": "Unchanged"}))
                .unwrap()
            })
            .collect();
        let lives: Vec<Live> = (0..n)
            .map(|i| {
                Live::Found(json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("cm-{i:03}"), "namespace": "a"}, "data": data}))
            })
            .collect();
        let hc: crate::api::healthcheck::HealthCheck = serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "HealthCheck",
            "metadata": {"name": "configmaps", "namespace": "a"},
            "spec": {"target": {"apiVersion": "v1", "kind": "ConfigMap"},
                     "current": "data.all(k, data.exists(j, j == k))"}}))
        .unwrap();
        let (objects, healths, assessed) = judge(&entries, lives, &Checks::of([hc]), "a");
        assert_eq!((objects.len(), healths.len(), assessed.len()), (n, n, n));
        let evaluated = assessed.values().filter(|a| a.status == HealthStatus::Healthy).count();
        assert!(evaluated > 0 && evaluated < n, "{evaluated} of {n} evaluated");
        let over = assessed.values().filter(|a| a.status == HealthStatus::Unknown).count();
        assert_eq!(evaluated + over, n);
        let left_out = assessed.values().find(|a| a.status == HealthStatus::Unknown).unwrap();
        assert_eq!(left_out.message, "HealthCheck configmaps: not evaluated: over the per-reconcile budget");
    }
}
