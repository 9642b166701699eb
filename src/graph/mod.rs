//! The resource graph of an Application and the diagnosis walked from it. Pure: the live objects
//! come in, read by [`crate::gather`] (the controller, as the Application's service account) or
//! by `ksync graph` (as the user).
//!
//! [`build`] links the objects with the nine edges of the spec:
//!
//! | Edge | From | To |
//! |---|---|---|
//! | Owns | an owner | each object whose `ownerReferences` name it |
//! | Selects | a Service or PodDisruptionBudget | the Pods its selector matches; for a Service also the workloads whose Pod template it matches |
//! | Endpoints | a Service | EndpointSlices labelled `kubernetes.io/service-name` |
//! | Routes | an Ingress | the Services of its rules and default backend |
//! | Scales | a HorizontalPodAutoscaler | its `scaleTargetRef` |
//! | Binds | a PersistentVolumeClaim | the PersistentVolume in `spec.volumeName` |
//! | Mounts | a Pod or workload | the claims its volumes use |
//! | Uses | a Pod or workload | ConfigMaps and Secrets from `envFrom`, env value sources, `configMap`, `secret` and `projected` volumes, and `imagePullSecrets` |
//! | RunsAs | a Pod or workload | its ServiceAccount (`default` when none is named) |
//!
//! Contract (table-tested in `tests.rs`):
//! - deterministic: the same objects give the same nodes and links in the same order, whatever
//!   order they come in (nodes by group, kind, namespace, name; links by source, edge, target);
//! - a referenced object that was read and found not to exist (`absent`) is a missing node; one
//!   that could not be read (forbidden, over the read budget) is left out, never called missing;
//! - kinds without a rule contribute only their `ownerReferences` (Owns from their owner);
//! - an empty selector selects nothing, so it draws no edge;
//! - a Service's EndpointSlices are linked by Endpoints only (not also by Owns).

pub mod diagnose;
pub mod refs;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::Value;

use crate::api::application::ResourceRef;
pub use refs::{Reference, Want, references, wants};

/// The kinds of edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Edge {
    /// An owner to what its `ownerReferences` name.
    Owns,
    /// A Service or PodDisruptionBudget to the Pods (and workloads) it selects.
    Selects,
    /// A Service to its EndpointSlices.
    Endpoints,
    /// An Ingress to its backend Services.
    Routes,
    /// A HorizontalPodAutoscaler to its scale target.
    Scales,
    /// A claim to its PersistentVolume.
    Binds,
    /// A Pod or workload to the claims it mounts.
    Mounts,
    /// A Pod or workload to the ConfigMaps and Secrets it uses.
    Uses,
    /// A Pod or workload to its ServiceAccount.
    RunsAs,
}

impl Edge {
    /// The name the spec gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            Edge::Owns => "Owns",
            Edge::Selects => "Selects",
            Edge::Endpoints => "Endpoints",
            Edge::Routes => "Routes",
            Edge::Scales => "Scales",
            Edge::Binds => "Binds",
            Edge::Mounts => "Mounts",
            Edge::Uses => "Uses",
            Edge::RunsAs => "RunsAs",
        }
    }
}

impl std::fmt::Display for Edge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One object of the graph.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// Its identity.
    pub resource: ResourceRef,
    /// The live object; `None` for a missing node.
    pub live: Option<Value>,
    /// One of the Application's managed resources.
    pub managed: bool,
}

impl Node {
    /// Referenced but does not exist.
    pub fn missing(&self) -> bool {
        self.live.is_none()
    }
}

/// One edge between two nodes (indexes into [`Graph::nodes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Link {
    /// Source.
    pub from: usize,
    /// Edge kind.
    pub edge: Edge,
    /// Target.
    pub to: usize,
    /// Every reference behind it is `optional: true`.
    pub optional: bool,
}

/// The graph.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Graph {
    /// Nodes in resource order.
    pub nodes: Vec<Node>,
    /// Links in (from, edge, to) order.
    pub links: Vec<Link>,
}

impl Graph {
    /// The index of `resource`.
    pub fn find(&self, resource: &ResourceRef) -> Option<usize> {
        self.nodes.binary_search_by(|n| n.resource.cmp(resource)).ok()
    }

    /// The links leaving node `i`, in order.
    pub fn out(&self, i: usize) -> impl Iterator<Item = &Link> {
        let start = self.links.partition_point(|l| l.from < i);
        self.links[start..].iter().take_while(move |l| l.from == i)
    }
}

/// The objects read around an Application.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// Live objects by identity.
    pub objects: BTreeMap<ResourceRef, Value>,
    /// Objects read and found not to exist.
    pub absent: BTreeSet<ResourceRef>,
    /// The Application's managed resources.
    pub managed: BTreeSet<ResourceRef>,
}

/// Link the objects (see the module documentation).
pub fn build(observed: &Observed) -> Graph {
    let mut named: Vec<(ResourceRef, Edge, ResourceRef, bool)> = Vec::new();
    for (r, obj) in &observed.objects {
        for reference in references(r, obj) {
            named.push((r.clone(), reference.edge, reference.to, reference.optional));
        }
    }
    let mut keys: BTreeSet<&ResourceRef> = observed.objects.keys().collect();
    keys.extend(named.iter().map(|(_, _, to, _)| to).filter(|to| observed.absent.contains(*to)));
    let nodes: Vec<Node> = keys
        .into_iter()
        .map(|r| Node {
            resource: r.clone(),
            live: observed.objects.get(r).cloned(),
            managed: observed.managed.contains(r),
        })
        .collect();
    let mut graph = Graph { nodes, links: Vec::new() };
    let mut links: BTreeMap<(usize, Edge, usize), bool> = BTreeMap::new();
    let mut link = |from: usize, edge: Edge, to: usize, optional: bool| {
        if from != to {
            let o = links.entry((from, edge, to)).or_insert(optional);
            *o &= optional;
        }
    };
    for (from, edge, to, optional) in &named {
        if let (Some(f), Some(t)) = (graph.find(from), graph.find(to)) {
            link(f, *edge, t, *optional);
        }
    }
    let mut by_uid: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, n) in graph.nodes.iter().enumerate() {
        if let Some(uid) = n.live.as_ref().and_then(|o| o.pointer("/metadata/uid")).and_then(Value::as_str) {
            by_uid.insert(uid, i);
        }
    }
    for (i, n) in graph.nodes.iter().enumerate() {
        let Some(obj) = &n.live else { continue };
        for owner in obj.pointer("/metadata/ownerReferences").and_then(Value::as_array).into_iter().flatten() {
            let by_id = owner["uid"].as_str().and_then(|u| by_uid.get(u)).copied();
            let by_name = || {
                let (group, _) = refs::split_api_version(owner["apiVersion"].as_str()?);
                let r = ResourceRef {
                    group: group.to_string(),
                    kind: owner["kind"].as_str()?.to_string(),
                    namespace: n.resource.namespace.clone(),
                    name: owner["name"].as_str()?.to_string(),
                };
                graph.find(&r).filter(|o| graph.nodes[*o].live.is_some())
            };
            if let Some(o) = by_id.or_else(by_name) {
                link(o, Edge::Owns, i, false);
            }
        }
    }
    for (i, n) in graph.nodes.iter().enumerate() {
        let Some(obj) = &n.live else { continue };
        let same_ns = |m: &Node| m.resource.namespace == n.resource.namespace && m.live.is_some();
        match (n.resource.group.as_str(), n.resource.kind.as_str()) {
            ("", "Service") => {
                let Some(selector) = obj.pointer("/spec/selector").and_then(Value::as_object) else { continue };
                for (j, m) in graph.nodes.iter().enumerate().filter(|(_, m)| same_ns(m)) {
                    let live = m.live.as_ref().expect("live");
                    let labels = match (m.resource.group.as_str(), m.resource.kind.as_str()) {
                        ("", "Pod") => live.pointer("/metadata/labels"),
                        (g, k) if refs::has_pod_template(g, k) && g == "apps" && k != "ReplicaSet" => {
                            live.pointer("/spec/template/metadata/labels")
                        }
                        _ => None,
                    };
                    if labels.is_some_and(|l| refs::map_matches(selector, l)) {
                        link(i, Edge::Selects, j, false);
                    }
                }
                for (j, m) in graph.nodes.iter().enumerate().filter(|(_, m)| same_ns(m)) {
                    let slice = m.resource.group == "discovery.k8s.io" && m.resource.kind == "EndpointSlice";
                    let service =
                        m.live.as_ref().and_then(|o| o.pointer("/metadata/labels/kubernetes.io~1service-name"));
                    if slice && service.and_then(Value::as_str) == Some(n.resource.name.as_str()) {
                        link(i, Edge::Endpoints, j, false);
                    }
                }
            }
            ("policy", "PodDisruptionBudget") => {
                let Some(selector) = obj.pointer("/spec/selector") else { continue };
                for (j, m) in graph.nodes.iter().enumerate().filter(|(_, m)| same_ns(m)) {
                    let pod = m.resource.group.is_empty() && m.resource.kind == "Pod";
                    let labels = m.live.as_ref().and_then(|o| o.pointer("/metadata/labels"));
                    if pod && labels.is_some_and(|l| refs::selector_matches(selector, l)) {
                        link(i, Edge::Selects, j, false);
                    }
                }
            }
            _ => {}
        }
    }
    // A Service owns its EndpointSlices too: the Endpoints edge says it.
    let endpoints: Vec<(usize, usize)> =
        links.keys().filter(|(_, e, _)| *e == Edge::Endpoints).map(|(f, _, t)| (*f, *t)).collect();
    for (from, to) in endpoints {
        links.remove(&(from, Edge::Owns, to));
    }
    graph.links = links.into_iter().map(|((from, edge, to), optional)| Link { from, edge, to, optional }).collect();
    graph
}

/// `Kind namespace/name`, or `Kind name` when cluster-scoped; the group after the kind
/// (`Deployment.apps`) unless core.
pub fn describe(r: &ResourceRef) -> String {
    let kind = crate::api::display::qualified_kind(&r.group, &r.kind);
    crate::api::display::object(&kind, r.namespace.as_deref(), &r.name)
}
