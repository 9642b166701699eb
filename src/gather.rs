//! Reads the live objects around an Application's managed resources for the resource graph
//! ([`crate::graph`]): what they own, select and name, level by level, as whichever identity the
//! client has (the controller: the Application's service account; `ksync graph`: the user).
//!
//! Bounded: at most [`Budget::calls`] requests and [`Budget::objects`] objects, [`DEPTH`] levels
//! below the managed resources, [`LIST_LIMIT`] objects per list. Secrets and ConfigMaps are read
//! as metadata only: their data is never fetched. A read that fails (forbidden, a kind the
//! server does not serve, over the budget) leaves its objects out of the graph; only a 404 naming
//! the object makes it a missing node.

use std::collections::{BTreeMap, BTreeSet};

use futures_util::{StreamExt, stream};
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use crate::api::application::ResourceRef;
use crate::graph::{self, Observed, Want};

/// Levels read below the managed resources (Deployment, ReplicaSet, Pod, ConfigMap).
pub const DEPTH: usize = 4;

/// Most objects one list returns.
pub const LIST_LIMIT: u32 = 50;

/// Requests in flight at once.
const CONCURRENCY: usize = 8;

/// Bounds of one gathering.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// Most API requests.
    pub calls: usize,
    /// Most objects in the graph, managed ones included.
    pub objects: usize,
}

impl Default for Budget {
    fn default() -> Self {
        Budget { calls: 100, objects: 500 }
    }
}

/// What one gathering read.
#[derive(Debug, Default)]
pub struct Gathered {
    /// The objects, the ones found absent, the managed ones.
    pub observed: Observed,
    /// API requests made.
    pub calls: usize,
    /// A bound was reached: some objects around were not read.
    pub truncated: bool,
}

/// Read the objects around `managed` (the managed resources' live objects, by identity).
pub async fn gather(client: &kube::Client, managed: BTreeMap<ResourceRef, Value>, budget: Budget) -> Gathered {
    let mut g = Gathered {
        observed: Observed { managed: managed.keys().cloned().collect(), objects: managed, ..Default::default() },
        ..Default::default()
    };
    let mut asked: BTreeSet<Want> = BTreeSet::new();
    let mut level: Vec<ResourceRef> = g.observed.objects.keys().cloned().collect();
    for _ in 0..DEPTH {
        let mut wants: Vec<(ResourceRef, Want)> = Vec::new();
        for r in &level {
            let Some(obj) = g.observed.objects.get(r) else { continue };
            for w in graph::wants(r, obj) {
                let known = match &w {
                    Want::Get { resource, .. } => {
                        g.observed.objects.contains_key(resource) || g.observed.absent.contains(resource)
                    }
                    Want::List { .. } => false,
                };
                if !known && asked.insert(w.clone()) {
                    wants.push((r.clone(), w));
                }
            }
        }
        if wants.is_empty() {
            break;
        }
        let room = budget.calls.saturating_sub(g.calls);
        if wants.len() > room {
            g.truncated = true;
            wants.truncate(room);
        }
        g.calls += wants.len();
        let results: Vec<(ResourceRef, Want, Read)> = stream::iter(wants)
            .map(|(from, w)| async move {
                let read = read(client, &w).await;
                (from, w, read)
            })
            .buffered(CONCURRENCY)
            .collect()
            .await;
        let mut next = Vec::new();
        for (from, want, read) in results {
            match read {
                Read::Found(objects) => {
                    for (r, obj) in objects {
                        if !belongs(&from, &want, &g.observed.objects, &obj) || g.observed.objects.contains_key(&r) {
                            continue;
                        }
                        if g.observed.objects.len() >= budget.objects {
                            g.truncated = true;
                            break;
                        }
                        g.observed.objects.insert(r.clone(), obj);
                        next.push(r);
                    }
                }
                Read::Absent(r) => {
                    g.observed.absent.insert(r);
                }
                Read::Unknown => {}
            }
        }
        if g.calls >= budget.calls {
            break;
        }
        level = next;
    }
    metrics::histogram!(crate::metric_names::GRAPH_API_CALLS).record(g.calls as f64);
    g
}

/// Whether a listed object belongs in the graph: a Deployment's ReplicaSets only when it owns
/// them and they have Pods or want some (old, scaled-down ones are history, not evidence).
fn belongs(from: &ResourceRef, want: &Want, objects: &BTreeMap<ResourceRef, Value>, obj: &Value) -> bool {
    let Want::List { kind, .. } = want else { return true };
    if kind != "ReplicaSet" {
        return true;
    }
    let owner_uid = objects.get(from).and_then(|o| o.pointer("/metadata/uid")).and_then(Value::as_str);
    let owned = obj
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|refs| refs.iter().any(|r| r["uid"].as_str() == owner_uid && owner_uid.is_some()));
    let count = |p: &str| obj.pointer(p).and_then(Value::as_i64).unwrap_or(0);
    owned && (count("/spec/replicas") > 0 || count("/status/replicas") > 0)
}

enum Read {
    Found(Vec<(ResourceRef, Value)>),
    Absent(ResourceRef),
    Unknown,
}

/// The API resource of `kind` in `api_version`, with the plural of the kinds the graph reads.
fn api_resource(api_version: &str, kind: &str) -> ApiResource {
    let (group, version) = graph::refs::split_api_version(api_version);
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let plural = match kind {
        "Ingress" => Some("ingresses"),
        "EndpointSlice" => Some("endpointslices"),
        "PersistentVolumeClaim" => Some("persistentvolumeclaims"),
        "PersistentVolume" => Some("persistentvolumes"),
        _ => None,
    };
    match plural {
        Some(p) => ApiResource::from_gvk_with_plural(&gvk, p),
        None => ApiResource::from_gvk(&gvk),
    }
}

/// Data never read: existence is all the graph needs of these.
fn metadata_only(group: &str, kind: &str) -> bool {
    group.is_empty() && matches!(kind, "Secret" | "ConfigMap" | "ServiceAccount")
}

async fn read(client: &kube::Client, want: &Want) -> Read {
    match want {
        Want::Get { resource, api_version } => {
            let ar = api_resource(api_version, &resource.kind);
            let api: Api<DynamicObject> = match &resource.namespace {
                Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
                None => Api::all_with(client.clone(), &ar),
            };
            let got = if metadata_only(&resource.group, &resource.kind) {
                api.get_metadata(&resource.name).await.map(|m| json!({"metadata": m.metadata}))
            } else {
                api.get(&resource.name).await.and_then(|o| serde_json::to_value(o).map_err(kube::Error::SerdeError))
            };
            match got {
                Ok(mut obj) => {
                    obj["apiVersion"] = json!(api_version);
                    obj["kind"] = json!(resource.kind);
                    strip(&mut obj);
                    Read::Found(vec![(resource.clone(), obj)])
                }
                // Only a 404 naming the object: a kind the server does not serve is a 404 too.
                Err(kube::Error::Api(s))
                    if s.code == 404 && s.message.ends_with(&format!("\"{}\" not found", resource.name)) =>
                {
                    Read::Absent(resource.clone())
                }
                Err(e) => {
                    tracing::debug!(error = %e, object = %graph::describe(resource), "reading for the resource graph");
                    Read::Unknown
                }
            }
        }
        Want::List { group, api_version, kind, namespace, selector } => {
            let ar = api_resource(api_version, kind);
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ar);
            match api.list(&ListParams::default().labels(selector).limit(LIST_LIMIT)).await {
                Ok(list) => Read::Found(
                    list.items
                        .into_iter()
                        .filter_map(|o| {
                            let name = o.metadata.name.clone()?;
                            let mut obj = serde_json::to_value(o).ok()?;
                            obj["apiVersion"] = json!(api_version);
                            obj["kind"] = json!(kind);
                            strip(&mut obj);
                            let r = ResourceRef {
                                group: group.clone(),
                                kind: kind.clone(),
                                namespace: Some(namespace.clone()),
                                name,
                            };
                            Some((r, obj))
                        })
                        .collect(),
                ),
                Err(e) => {
                    tracing::debug!(error = %e, kind = %kind, namespace = %namespace, "listing for the resource graph");
                    Read::Unknown
                }
            }
        }
    }
}

/// Drop what the graph never looks at and would only cost memory.
fn strip(obj: &mut Value) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
        if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            a.remove("kubectl.kubernetes.io/last-applied-configuration");
        }
    }
}
