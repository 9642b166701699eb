//! The statefulset controller (see the module documentation of [`crate::kcm`]), as
//! kube-controller-manager's: a ControllerRevision per template (named `<set>-<hash>`, labelled
//! `controller.kubernetes.io/hash`), Pods `<set>-<ordinal>` with the `pod-name`, `pod-index` and
//! `controller-revision-hash` labels and `hostname`/`subdomain`, created in order and one at a
//! time under `OrderedReady` (each waits for its predecessors to be Running and Ready), scaled
//! down from the highest ordinal, rolled by deleting the highest outdated Pod first; Events
//! `SuccessfulCreate`/`SuccessfulDelete` (`Create Pod db-0 in StatefulSet db successful`) and the
//! status counts with `currentRevision`/`updateRevision`.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

#[path = "statefulset_util.rs"]
pub(crate) mod util;

use crate::client::{Client, path};
use crate::errors::ApiError;
use util::*;

const COMPONENT: &str = "statefulset-controller";
const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";
const REVISION_LABEL: &str = "controller-revision-hash";
const HASH_LABEL: &str = "controller.kubernetes.io/hash";

/// One reconcile pass over every object this controller owns.
pub async fn reconcile(client: Client) {
    let Ok(sets) = client.list("/apis/apps/v1/statefulsets", "").await else { return };
    for set in sets {
        let set = with_kind(set, "apps/v1", "StatefulSet");
        if let Err(e) = sync(&client, &set).await {
            tracing::debug!("statefulset {}/{}: {e:?}", ns_of(&set), name_of(&set));
        }
    }
}

/// The ordinal of a Pod named `<set>-<ordinal>`.
fn ordinal_of(set_name: &str, pod: &Value) -> Option<i64> {
    let rest = name_of(pod).strip_prefix(set_name)?.strip_prefix('-')?;
    if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_digit()) || (rest.len() > 1 && rest.starts_with('0')) {
        return None;
    }
    rest.parse().ok()
}

fn pod_revision(pod: &Value) -> &str {
    pod["metadata"]["labels"][REVISION_LABEL].as_str().unwrap_or_default()
}

/// A new Pod for `ordinal` from the template of `revision`.
fn new_pod(set: &Value, revision: &Value, ordinal: i64) -> Value {
    let template = revision_template(revision);
    let name = format!("{}-{ordinal}", name_of(set));
    let mut pod = pod_from_template(&template, set, "StatefulSet");
    pod["metadata"]["name"] = json!(name);
    let labels = &mut pod["metadata"]["labels"];
    labels[POD_NAME_LABEL] = json!(name);
    labels[POD_INDEX_LABEL] = json!(ordinal.to_string());
    labels[REVISION_LABEL] = json!(name_of(revision));
    if !pod["spec"].is_object() {
        pod["spec"] = json!({});
    }
    pod["spec"]["hostname"] = json!(name);
    if let Some(service) = set["spec"]["serviceName"].as_str().filter(|s| !s.is_empty()) {
        pod["spec"]["subdomain"] = json!(service);
    }
    add_claim_volumes(set, ordinal, &mut pod);
    pod
}

/// `volumeClaimTemplates`: the Pod mounts claim `<template>-<set>-<ordinal>`.
fn add_claim_volumes(set: &Value, ordinal: i64, pod: &mut Value) {
    let Some(templates) = set["spec"]["volumeClaimTemplates"].as_array() else { return };
    for t in templates {
        let claim = name_of(t);
        let volume = json!({"name": claim, "persistentVolumeClaim": {"claimName": format!("{claim}-{}-{ordinal}", name_of(set))}});
        if !pod["spec"]["volumes"].is_array() {
            pod["spec"]["volumes"] = json!([]);
        }
        if let Some(vs) = pod["spec"]["volumes"].as_array_mut() {
            vs.retain(|v| v["name"].as_str() != Some(claim));
            vs.push(volume);
        }
    }
}

/// Create the missing claims of `volumeClaimTemplates` for `ordinal`.
async fn create_claims(client: &Client, set: &Value, ordinal: i64) -> Result<(), ApiError> {
    let Some(templates) = set["spec"]["volumeClaimTemplates"].as_array() else { return Ok(()) };
    let ns = ns_of(set);
    for t in templates {
        let name = format!("{}-{}-{ordinal}", name_of(t), name_of(set));
        let p = path("v1", "persistentvolumeclaims", ns, &name, "");
        if client.get(&p).await.is_ok() {
            continue;
        }
        let mut labels = t["metadata"]["labels"].as_object().cloned().unwrap_or_default();
        if let Some(sel) = set["spec"]["selector"]["matchLabels"].as_object() {
            for (k, v) in sel {
                labels.insert(k.clone(), v.clone());
            }
        }
        let mut meta = Map::new();
        meta.insert("name".into(), json!(name));
        meta.insert("namespace".into(), json!(ns));
        meta.insert("labels".into(), Value::Object(labels));
        if let Some(a) = t["metadata"].get("annotations").filter(|a| a.is_object()) {
            meta.insert("annotations".into(), a.clone());
        }
        let claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": t["spec"]});
        match client.create(&path("v1", "persistentvolumeclaims", ns, "", ""), &claim).await {
            Ok(_) | Err(ApiError::Status { code: 409, .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

async fn create_pod(client: &Client, set: &Value, revision: &Value, ordinal: i64) -> Result<(), ApiError> {
    create_claims(client, set, ordinal).await?;
    let pod = new_pod(set, revision, ordinal);
    let name = name_of(&pod).to_string();
    let result = client.create(&path("v1", "pods", ns_of(set), "", ""), &pod).await;
    match &result {
        Ok(_) => {
            let msg = format!("Create Pod {name} in StatefulSet {} successful", name_of(set));
            client.event(set, "Normal", "SuccessfulCreate", &msg, COMPONENT).await;
        }
        Err(ApiError::Status { code: 409, .. }) => {}
        Err(ApiError::Status { message, .. }) => {
            let msg = format!("Create Pod {name} in StatefulSet {} failed error: {message}", name_of(set));
            client.event(set, "Warning", "FailedCreate", &msg, COMPONENT).await;
        }
        Err(_) => {}
    }
    result.map(|_| ())
}

async fn delete_pod(client: &Client, set: &Value, pod: &Value) -> Result<(), ApiError> {
    let name = name_of(pod).to_string();
    let result = client.delete(&path("v1", "pods", ns_of(pod), &name, ""), None, None).await;
    match &result {
        Ok(_) => {
            let msg = format!("Delete Pod {name} in StatefulSet {} successful", name_of(set));
            client.event(set, "Normal", "SuccessfulDelete", &msg, COMPONENT).await;
        }
        Err(ApiError::Status { code: 404, .. }) => return Ok(()),
        Err(ApiError::Status { message, .. }) => {
            let msg = format!("Delete Pod {name} in StatefulSet {} failed error: {message}", name_of(set));
            client.event(set, "Warning", "FailedDelete", &msg, COMPONENT).await;
        }
        Err(_) => {}
    }
    result.map(|_| ())
}

async fn sync(client: &Client, set: &Value) -> Result<(), ApiError> {
    if is_terminating(set) {
        return Ok(());
    }
    let ns = ns_of(set).to_string();
    let set_name = name_of(set).to_string();

    // Revisions.
    let revisions = owned_revisions(client, set).await?;
    let collision = set["status"]["collisionCount"].as_i64().unwrap_or(0);
    let data = revision_data(set);
    let template_labels = set["spec"]["template"]["metadata"]["labels"].clone();
    let (update_rev, collision) = ensure_revision(client, set, "StatefulSet", &revisions, collision, |c| {
        let hash = hash_of(&data, c);
        let mut labels = template_labels.as_object().cloned().unwrap_or_default();
        labels.insert(HASH_LABEL.into(), json!(hash));
        WantedRevision { name: format!("{set_name}-{hash}"), labels: Value::Object(labels), data: data.clone() }
    })
    .await?;
    let status_current = set["status"]["currentRevision"].as_str().unwrap_or_default();
    let current_rev = revisions
        .iter()
        .find(|r| !status_current.is_empty() && name_of(r) == status_current && name_of(r) != name_of(&update_rev))
        .cloned()
        .unwrap_or_else(|| update_rev.clone());

    // Pods.
    let pods = owned_pods(client, set).await?;
    let replicas = set["spec"]["replicas"].as_i64().unwrap_or(1).max(0);
    let start = set["spec"]["ordinals"]["start"].as_i64().unwrap_or(0).max(0);
    let end = start + replicas;
    let monotonic = set["spec"]["podManagementPolicy"].as_str() != Some("Parallel");
    let rolling = set["spec"]["updateStrategy"]["type"].as_str().unwrap_or("RollingUpdate") == "RollingUpdate";
    let partition = set["spec"]["updateStrategy"]["rollingUpdate"]["partition"].as_i64().unwrap_or(0);

    let mut members: BTreeMap<i64, Value> = BTreeMap::new();
    let mut condemned: Vec<(i64, Value)> = Vec::new();
    for p in pods {
        let Some(ord) = ordinal_of(&set_name, &p) else { continue };
        if (start..end).contains(&ord) {
            members.insert(ord, p);
        } else {
            condemned.push((ord, p));
        }
    }
    condemned.sort_by_key(|(o, _)| *o);
    let first_unhealthy = members
        .values()
        .chain(condemned.iter().map(|(_, p)| p))
        .find(|p| !is_running_and_ready(p) || is_terminating(p))
        .map(|p| name_of(p).to_string());

    let mut done = false;
    for ord in start..end {
        match members.get(&ord) {
            None => {
                // Partitioned rolling updates keep the old revision below the partition.
                let rev = if rolling && ord < partition { &current_rev } else { &update_rev };
                create_pod(client, set, rev, ord).await?;
                if monotonic {
                    done = true;
                    break;
                }
            }
            Some(pod) => {
                if is_finished(pod) && !is_terminating(pod) {
                    delete_pod(client, set, pod).await?;
                    if monotonic {
                        done = true;
                        break;
                    }
                    continue;
                }
                if monotonic && (is_terminating(pod) || !is_running_and_ready(pod)) {
                    done = true;
                    break;
                }
            }
        }
    }
    if !done {
        for (_, pod) in condemned.iter().rev() {
            if is_terminating(pod) {
                if monotonic {
                    done = true;
                    break;
                }
                continue;
            }
            if monotonic && !is_running_and_ready(pod) && first_unhealthy.as_deref() != Some(name_of(pod)) {
                done = true;
                break;
            }
            delete_pod(client, set, pod).await?;
            if monotonic {
                done = true;
                break;
            }
        }
    }
    if !done && rolling {
        for ord in (start.max(start + partition)..end).rev() {
            let Some(pod) = members.get(&ord) else { break };
            if pod_revision(pod) != name_of(&update_rev) && !is_terminating(pod) {
                delete_pod(client, set, pod).await?;
                break;
            }
            if !is_running_and_ready(pod) || is_terminating(pod) {
                break;
            }
        }
    }

    // Status, from the Pods as they are now.
    let pods = owned_pods(client, set).await?;
    let pods: Vec<Value> = pods.into_iter().filter(|p| ordinal_of(&set_name, p).is_some()).collect();
    let min_ready = set["spec"]["minReadySeconds"].as_i64().unwrap_or(0);
    let (mut created, mut ready, mut available, mut current, mut updated) = (0, 0, 0, 0, 0);
    for p in &pods {
        if !phase(p).is_empty() {
            created += 1;
        }
        if is_running_and_ready(p) {
            ready += 1;
            if is_available(p, min_ready) {
                available += 1;
            }
        }
        if !phase(p).is_empty() && !is_terminating(p) {
            if pod_revision(p) == name_of(&current_rev) {
                current += 1;
            }
            if pod_revision(p) == name_of(&update_rev) {
                updated += 1;
            }
        }
    }
    let mut current_name = name_of(&current_rev).to_string();
    if rolling && updated == created && ready == created {
        current = updated;
        current_name = name_of(&update_rev).to_string();
    }
    let mut status = Map::new();
    let mut put = |k: &str, v: i64, omit_zero: bool| {
        if v != 0 || !omit_zero {
            status.insert(k.into(), json!(v));
        }
    };
    put("observedGeneration", set["metadata"]["generation"].as_i64().unwrap_or(0), true);
    put("replicas", created, false);
    put("readyReplicas", ready, true);
    put("currentReplicas", current, true);
    put("updatedReplicas", updated, true);
    status.insert("currentRevision".into(), json!(current_name));
    status.insert("updateRevision".into(), json!(name_of(&update_rev)));
    status.insert("collisionCount".into(), json!(collision));
    if let Some(c) = set["status"].get("conditions").filter(|c| c.as_array().is_some_and(|a| !a.is_empty())) {
        status.insert("conditions".into(), c.clone());
    }
    status.insert("availableReplicas".into(), json!(available));
    let status = Value::Object(status);

    // History beyond the limit.
    let mut live: Vec<String> = pods.iter().map(|p| pod_revision(p).to_string()).collect();
    live.push(current_name.clone());
    live.push(name_of(&update_rev).to_string());
    let revisions = owned_revisions(client, set).await?;
    truncate_history(client, set, &revisions, &live).await;

    if set["status"] != status {
        let mut body = set.clone();
        body["status"] = status;
        client.update(&path("apps/v1", "statefulsets", &ns, &set_name, "status"), &body).await?;
    }
    Ok(())
}
