//! What kube-controller-manager does that every API client relies on: the garbage collector
//! (ownerReferences with background, foreground and orphan propagation; dangling owners) and
//! the namespace controller (a deleted namespace is emptied, then removed).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::api::{controller_delete, strings};
use crate::registry::ResourceType;
use crate::state::State;

/// A write happened: wake the controllers when it can matter to them (an object with owners,
/// one being deleted, a namespace or CRD). Plain writes cost the controllers nothing.
pub fn notify(state: &Arc<State>, rt: &ResourceType, obj: &Value) {
    let meta = &obj["metadata"];
    let relevant = meta["ownerReferences"].as_array().is_some_and(|a| !a.is_empty())
        || meta["deletionTimestamp"].is_string()
        || rt.resource == "namespaces"
        || rt.resource == "customresourcedefinitions";
    if relevant {
        state.kick.notify_one();
    }
}

/// An object was removed: its dependents may need collecting.
pub fn notify_removed(state: &Arc<State>) {
    state.kick.notify_one();
}

/// Run the controllers until the runtime stops.
pub fn start(state: Arc<State>) {
    tokio::spawn(async move {
        let mut took = Duration::ZERO;
        loop {
            tokio::select! {
                _ = state.kick.notified() => {}
                _ = tokio::time::sleep(Duration::from_secs(2)) => {}
            }
            // Let a burst of writes settle into one pass; on a large store (a pass visits every
            // object) wait ten times as long as the last pass took, so that at most about a
            // tenth of a core goes to it however often owned objects are written.
            tokio::time::sleep(Duration::from_millis(20).max(took * 10)).await;
            let started = std::time::Instant::now();
            gc_pass(&state);
            namespace_pass(&state);
            crd_cleanup_pass(&state);
            took = started.elapsed();
        }
    });
}

fn resource_of(state: &State, key: &str) -> Option<Arc<ResourceType>> {
    let (group, resource) = key.split_once('/')?;
    state
        .registry
        .group_versions()
        .into_iter()
        .filter(|gv| gv.group == group)
        .flat_map(|gv| gv.resources)
        .find(|r| r.resource == resource)
}

/// Every object with its resource.
fn everything(state: &State) -> Vec<(Arc<ResourceType>, Value)> {
    let txn = state.store.lock();
    let mut out = Vec::new();
    for key in txn.keys() {
        if let Some(rt) = resource_of(state, &key) {
            for o in txn.all(&key) {
                out.push((rt.clone(), o.clone()));
            }
        }
    }
    out
}

fn gc_pass(state: &Arc<State>) {
    // One look at the store, copying only what will be acted on: dependents whose owners are
    // all gone, owners being deleted in the foreground or with orphaning, and their dependents.
    // (The pass runs after every write of an owned object: it must not copy them all.)
    let (dangling, all) = {
        let txn = state.store.lock();
        let keys: Vec<(String, Arc<ResourceType>)> =
            txn.keys().into_iter().filter_map(|k| Some((k.clone(), resource_of(state, &k)?))).collect();
        let objects: Vec<(&Arc<ResourceType>, Vec<&Value>)> = keys.iter().map(|(k, rt)| (rt, txn.all(k))).collect();
        let mut uids: HashSet<&str> = HashSet::new();
        let mut finalizing: HashSet<&str> = HashSet::new();
        for (_, os) in &objects {
            for o in os {
                let Some(u) = o["metadata"]["uid"].as_str() else { continue };
                uids.insert(u);
                if o["metadata"]["deletionTimestamp"].is_string()
                    && strings(&o["metadata"]["finalizers"]).iter().any(|f| f == "orphan" || f == "foregroundDeletion")
                {
                    finalizing.insert(u);
                }
            }
        }
        let mut dangling = Vec::new();
        let mut interesting = Vec::new();
        for (rt, os) in &objects {
            for o in os {
                let refs = o["metadata"]["ownerReferences"].as_array().map(Vec::as_slice).unwrap_or_default();
                let deleting = o["metadata"]["deletionTimestamp"].is_string();
                let uid = o["metadata"]["uid"].as_str().unwrap_or_default();
                if !refs.is_empty()
                    && !deleting
                    && !refs.iter().any(|r| r["uid"].as_str().is_some_and(|u| uids.contains(u)))
                {
                    dangling.push(((*rt).clone(), (*o).clone()));
                }
                let dependent = refs.iter().any(|r| r["uid"].as_str().is_some_and(|u| finalizing.contains(u)));
                if dependent || (deleting && finalizing.contains(uid)) {
                    interesting.push(((*rt).clone(), (*o).clone()));
                }
            }
        }
        (dangling, interesting)
    };
    // Dependents whose owners are all gone are deleted (background).
    for (rt, o) in &dangling {
        controller_delete(state, rt, o, Some("Background"));
    }
    // Owners being deleted in the foreground or with orphaning.
    for (rt, owner) in &all {
        if !owner["metadata"]["deletionTimestamp"].is_string() {
            continue;
        }
        let finalizers = strings(&owner["metadata"]["finalizers"]);
        let uid = owner["metadata"]["uid"].as_str().unwrap_or_default().to_string();
        let dependents: Vec<&(Arc<ResourceType>, Value)> = all
            .iter()
            .filter(|(_, o)| {
                o["metadata"]["ownerReferences"].as_array().is_some_and(|rs| rs.iter().any(|r| r["uid"] == json!(uid)))
            })
            .collect();
        if finalizers.iter().any(|f| f == "orphan") {
            for (drt, d) in &dependents {
                let mut d = d.clone();
                let refs: Vec<Value> = d["metadata"]["ownerReferences"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|r| r["uid"] != json!(uid))
                    .collect();
                if refs.is_empty() {
                    d["metadata"].as_object_mut().expect("metadata").remove("ownerReferences");
                } else {
                    d["metadata"]["ownerReferences"] = json!(refs);
                }
                controller_update(state, drt, d, "kube-controller-manager", None);
            }
            remove_finalizer(state, rt, owner, "orphan");
        } else if finalizers.iter().any(|f| f == "foregroundDeletion") {
            if dependents.is_empty() {
                remove_finalizer(state, rt, owner, "foregroundDeletion");
            } else {
                for (drt, d) in dependents {
                    if !d["metadata"]["deletionTimestamp"].is_string() {
                        controller_delete(state, drt, d, Some("Foreground"));
                    }
                }
            }
        }
    }
}

/// Store a controller's change to an object (bypassing admission; no managedFields entry).
pub fn controller_write(state: &Arc<State>, rt: &Arc<ResourceType>, mut obj: Value, _manager: &str) {
    let ns = obj["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
    let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let mut txn = state.store.lock();
    let Some(current) = txn.get(&rt.key(), &ns, &name) else { return };
    if current["metadata"]["uid"] != obj["metadata"]["uid"] {
        return;
    }
    if obj["metadata"]["deletionTimestamp"].is_string()
        && strings(&obj["metadata"]["finalizers"]).is_empty()
        && !crate::admission::held_on_delete(rt, &obj)
    {
        let rv = txn.next_rv();
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("finalizers");
        }
        txn.remove(&rt.key(), &ns, &name, obj, rv);
        drop(txn);
        state.kick.notify_one();
        return;
    }
    let rv = txn.next_rv();
    obj["metadata"]["resourceVersion"] = json!(rv.to_string());
    txn.put(&rt.key(), &ns, &name, obj, rv);
    drop(txn);
    state.kick.notify_one();
}

/// Store a controller's change recording its managed fields (as kube-apiserver or
/// kube-controller-manager writes do).
pub fn controller_update(state: &Arc<State>, rt: &Arc<ResourceType>, mut obj: Value, manager: &str, sub: Option<&str>) {
    let ns = obj["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
    let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let old = {
        let txn = state.store.lock();
        match txn.get(&rt.key(), &ns, &name) {
            Some(o) => o.clone(),
            None => return,
        }
    };
    crate::admission::update_fields(state, Some(&old), &mut obj, rt, manager, sub);
    controller_write(state, rt, obj, manager);
}

fn remove_finalizer(state: &Arc<State>, rt: &Arc<ResourceType>, obj: &Value, finalizer: &str) {
    let mut o = obj.clone();
    let rest: Vec<String> = strings(&o["metadata"]["finalizers"]).into_iter().filter(|f| f != finalizer).collect();
    if rest.is_empty() {
        o["metadata"].as_object_mut().expect("metadata").remove("finalizers");
    } else {
        o["metadata"]["finalizers"] = json!(rest);
    }
    controller_write(state, rt, o, "kube-controller-manager");
}

fn namespace_pass(state: &Arc<State>) {
    let Some(ns_rt) = state.registry.find("", "v1", "namespaces") else { return };
    let namespaces: Vec<Value> = {
        let txn = state.store.lock();
        txn.all("/namespaces").into_iter().filter(|n| n["metadata"]["deletionTimestamp"].is_string()).cloned().collect()
    };
    if namespaces.is_empty() {
        return;
    }
    let all = everything(state);
    for ns in namespaces {
        let name = ns["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let content: Vec<&(Arc<ResourceType>, Value)> = all
            .iter()
            .filter(|(rt, o)| rt.namespaced && o["metadata"]["namespace"].as_str() == Some(name.as_str()))
            .collect();
        if content.is_empty() {
            let mut n = ns.clone();
            let fins: Vec<String> =
                strings(&n["spec"]["finalizers"]).into_iter().filter(|f| f != "kubernetes").collect();
            n["spec"]["finalizers"] = json!(fins);
            if fins.is_empty() {
                n["spec"].as_object_mut().expect("spec").remove("finalizers");
            }
            if fins.is_empty() && strings(&n["metadata"]["finalizers"]).is_empty() {
                let mut txn = state.store.lock();
                let rv = txn.next_rv();
                n["metadata"]["resourceVersion"] = json!(rv.to_string());
                txn.remove(&ns_rt.key(), "", &name, n, rv);
            } else {
                controller_write(state, &ns_rt, n, "kube-controller-manager");
            }
            continue;
        }
        let mut remaining: std::collections::BTreeMap<String, usize> = Default::default();
        let mut finalizers: std::collections::BTreeMap<String, usize> = Default::default();
        for (rt, o) in &content {
            if !o["metadata"]["deletionTimestamp"].is_string() {
                controller_delete(state, rt, o, Some("Background"));
            }
            *remaining.entry(format!("{}.{}", rt.resource, rt.group)).or_default() += 1;
            for f in strings(&o["metadata"]["finalizers"]) {
                *finalizers.entry(f).or_default() += 1;
            }
        }
        set_namespace_conditions(state, &ns_rt, &ns, &remaining, &finalizers);
    }
}

fn crd_cleanup_pass(state: &Arc<State>) {
    let Some(crd_rt) = state.registry.find("apiextensions.k8s.io", "v1", "customresourcedefinitions") else { return };
    let deleting: Vec<Value> = {
        let txn = state.store.lock();
        txn.all(&crd_rt.key()).into_iter().filter(|c| c["metadata"]["deletionTimestamp"].is_string()).cloned().collect()
    };
    for crd in deleting {
        let group = crd["spec"]["group"].as_str().unwrap_or_default().to_string();
        let plural = crd["spec"]["names"]["plural"].as_str().unwrap_or_default().to_string();
        let key = format!("{group}/{plural}");
        let objects: Vec<Value> = state.store.lock().all(&key).into_iter().cloned().collect();
        if objects.is_empty() {
            let name = crd["metadata"]["name"].as_str().unwrap_or_default().to_string();
            state.crds.write().expect("crds lock").remove(&name);
            state.registry.remove_custom(&name);
            remove_finalizer(state, &crd_rt, &crd, "customresourcecleanup.apiextensions.k8s.io");
            continue;
        }
        if let Some(rt) = resource_of(state, &key) {
            for o in objects {
                if !o["metadata"]["deletionTimestamp"].is_string() {
                    controller_delete(state, &rt, &o, Some("Background"));
                }
            }
        }
    }
}

/// The namespace controller's progress report on a terminating namespace.
fn set_namespace_conditions(
    state: &Arc<State>,
    rt: &Arc<ResourceType>,
    ns: &Value,
    remaining: &std::collections::BTreeMap<String, usize>,
    finalizers: &std::collections::BTreeMap<String, usize>,
) {
    let cond =
        |t: &str, s: &str, reason: &str, msg: String| json!({"type": t, "status": s, "reason": reason, "message": msg});
    let mut wanted = vec![
        cond(
            "NamespaceDeletionDiscoveryFailure",
            "False",
            "ResourcesDiscovered",
            "All resources successfully discovered".into(),
        ),
        cond(
            "NamespaceDeletionGroupVersionParsingFailure",
            "False",
            "ParsedGroupVersions",
            "All legacy kube types successfully parsed".into(),
        ),
        cond(
            "NamespaceDeletionContentFailure",
            "False",
            "ContentDeleted",
            "All content successfully deleted, may be waiting on finalization".into(),
        ),
    ];
    if remaining.is_empty() {
        wanted.push(cond(
            "NamespaceContentRemaining",
            "False",
            "ContentRemoved",
            "All content successfully removed".into(),
        ));
    } else {
        let parts: Vec<String> = remaining.iter().map(|(r, n)| format!("{r} has {n} resource instances")).collect();
        wanted.push(cond(
            "NamespaceContentRemaining",
            "True",
            "SomeResourcesRemain",
            format!("Some resources are remaining: {}", parts.join(", ")),
        ));
    }
    if finalizers.is_empty() {
        wanted.push(cond(
            "NamespaceFinalizersRemaining",
            "False",
            "ContentHasNoFinalizers",
            "All content-preserving finalizers finished".into(),
        ));
    } else {
        let parts: Vec<String> = finalizers.iter().map(|(f, n)| format!("{f} in {n} resource instances")).collect();
        wanted.push(cond(
            "NamespaceFinalizersRemaining",
            "True",
            "SomeFinalizersRemain",
            format!("Some content in the namespace has finalizers remaining: {}", parts.join(", ")),
        ));
    }
    let existing = ns["status"]["conditions"].as_array().cloned().unwrap_or_default();
    let strip = |c: &Value| {
        let mut c = c.clone();
        if let Some(m) = c.as_object_mut() {
            m.remove("lastTransitionTime");
        }
        c
    };
    if existing.iter().map(strip).collect::<Vec<_>>() == wanted {
        return;
    }
    let now = crate::api::now();
    let conditions: Vec<Value> = wanted
        .into_iter()
        .map(|mut c| {
            let same = existing.iter().find(|e| e["type"] == c["type"]).filter(|e| e["status"] == c["status"]);
            c["lastTransitionTime"] = same.map(|e| e["lastTransitionTime"].clone()).unwrap_or_else(|| json!(now));
            let mut ordered = serde_json::Map::new();
            for k in ["type", "status", "lastTransitionTime", "reason", "message"] {
                ordered.insert(k.into(), c[k].clone());
            }
            Value::Object(ordered)
        })
        .collect();
    let mut n = ns.clone();
    n["status"]["conditions"] = json!(conditions);
    controller_update(state, rt, n, "kube-controller-manager", Some("status"));
}
