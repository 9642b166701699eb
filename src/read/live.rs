//! The managed resources of an Application read live, as the user: which plan entries name
//! them, and what reading each gave. `ksync app`, `ksync graph` and the dashboard show them.

use std::collections::BTreeMap;

use futures_util::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiResource, Scope};
use serde_json::Value;

use super::connect::{Cluster, Request};
use crate::api::display::qualified_kind;
use crate::api::revision::{PlanAction, PlanEntry};

/// Managed resources read at once.
const CONCURRENCY: usize = 8;

/// What reading one managed resource gave.
#[derive(Clone, Debug, PartialEq)]
pub enum Live {
    /// The live object.
    Found(Value),
    /// It does not exist.
    Missing,
    /// It could not be read (forbidden, kind not served): why.
    Unreadable(String),
}

/// The plan entries that name managed resources: every one but those being pruned and sync
/// hooks (not managed: created each rollout, never pruned).
pub fn managed(entries: &[PlanEntry]) -> impl Iterator<Item = &PlanEntry> {
    entries.iter().filter(|e| e.action != PlanAction::Delete && e.action != PlanAction::Skip && e.hook.is_none())
}

/// The namespaces whose HealthChecks apply to `entries`: theirs, and `own` (the Application's,
/// for cluster-scoped objects).
pub fn namespaces(entries: &[PlanEntry], own: &str) -> Vec<String> {
    let mut out: Vec<String> = entries.iter().filter_map(|e| e.resource.namespace.clone()).collect();
    out.push(own.to_string());
    out.sort();
    out.dedup();
    out
}

/// A kind resolved by discovery: its resource and whether it is namespaced, or why not.
type Resolved = Result<(ApiResource, bool), String>;

/// Read each resource of `entries` (in order), as the user: found, missing, or unreadable with
/// the reason. Kinds are resolved by discovery, once each.
pub async fn read_live(cluster: &Cluster, entries: &[PlanEntry]) -> Vec<Live> {
    let mut kinds: BTreeMap<(String, String, String), Resolved> = BTreeMap::new();
    for e in entries {
        let key = (e.resource.group.clone(), e.version.clone(), e.resource.kind.clone());
        if kinds.contains_key(&key) {
            continue;
        }
        let gvk = GroupVersionKind::gvk(&key.0, &key.1, &key.2);
        let found = match kube::discovery::pinned_kind(&cluster.client, &gvk).await {
            Ok((ar, caps)) => Ok((ar, caps.scope == Scope::Namespaced)),
            Err(kube::Error::Api(s)) if s.code == 404 => Err("kind not served".to_string()),
            Err(kube::Error::Discovery(_)) => Err("kind not served".to_string()),
            Err(e) => Err(cluster.error(e, Request::List { what: "API discovery" }).to_string()),
        };
        kinds.insert(key, found);
    }
    // Each read owns what it needs, and they are collected before being driven: no closure
    // borrowing `entries` is part of the future, so it is `Send` for any lifetime and the
    // dashboard can await it on its request task.
    let reads: Vec<_> = entries
        .iter()
        .map(|e| {
            let key = (e.resource.group.clone(), e.version.clone(), e.resource.kind.clone());
            let kind = kinds.get(&key).cloned();
            let cluster = cluster.clone();
            let what = qualified_kind(&e.resource.group, &e.resource.kind);
            let (namespace, name) = (e.resource.namespace.clone(), e.resource.name.clone());
            async move {
                let (ar, namespaced) = match kind {
                    Some(Ok(k)) => k,
                    Some(Err(why)) => return Live::Unreadable(why),
                    None => return Live::Unreadable("kind not resolved".into()),
                };
                let api: Api<DynamicObject> = match (namespaced, namespace.as_deref()) {
                    (true, Some(ns)) => Api::namespaced_with(cluster.client.clone(), ns, &ar),
                    (true, None) => return Live::Unreadable("no namespace recorded".into()),
                    (false, _) => Api::all_with(cluster.client.clone(), &ar),
                };
                match api.get_opt(&name).await {
                    Ok(Some(obj)) => match serde_json::to_value(obj) {
                        Ok(v) => Live::Found(v),
                        Err(err) => Live::Unreadable(err.to_string()),
                    },
                    Ok(None) => Live::Missing,
                    Err(kube::Error::Api(s)) if s.code == 403 => Live::Unreadable("forbidden".into()),
                    Err(err) => {
                        let namespace = namespace.as_deref().unwrap_or_default();
                        let request = Request::Get { kind: &what, name: &name, namespace };
                        Live::Unreadable(cluster.error(err, request).to_string())
                    }
                }
            }
        })
        .collect();
    futures_util::stream::iter(reads).buffered(CONCURRENCY).collect().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pruned_entries_are_not_managed_resources() {
        let entries: Vec<PlanEntry> = serde_json::from_value(serde_json::json!([
            {"kind": "Pruned", "name": "x", "version": "v1", "action": "Delete"},
            {"kind": "Kept", "name": "x", "version": "v1", "action": "Unchanged"},
        ]))
        .unwrap();
        assert_eq!(managed(&entries).map(|e| e.resource.kind.as_str()).collect::<Vec<_>>(), vec!["Kept"]);
    }
}
