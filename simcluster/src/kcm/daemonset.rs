//! The daemonset controller (see the module documentation of [`crate::kcm`]), as
//! kube-controller-manager's: one Pod per eligible Node (node selector, required node affinity
//! and taints against the daemon tolerations), created unbound with a `matchFields
//! metadata.name In [node]` node affinity for the scheduler, the six daemon tolerations and
//! the `controller-revision-hash` / `pod-template-generation` labels; a ControllerRevision
//! `<ds>-<hash>` per template; rolling updates within `maxUnavailable`; Events
//! `SuccessfulCreate` (`Created pod: agent-xxxxx`) / `SuccessfulDelete`; and the status counts.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::statefulset::util::*;
use crate::client::{Client, path};
use crate::errors::ApiError;

const COMPONENT: &str = "daemonset-controller";
const HASH_LABEL: &str = "controller-revision-hash";
const GENERATION_LABEL: &str = "pod-template-generation";
const GENERATION_ANNOTATION: &str = "deprecated.daemonset.template.generation";

/// One reconcile pass over every object this controller owns.
pub async fn reconcile(client: Client) {
    let Ok(sets) = client.list("/apis/apps/v1/daemonsets", "").await else { return };
    if sets.is_empty() {
        return;
    }
    let Ok(nodes) = client.list("/api/v1/nodes", "").await else { return };
    for ds in sets {
        let ds = with_kind(ds, "apps/v1", "DaemonSet");
        if let Err(e) = sync(&client, &ds, &nodes).await {
            tracing::debug!("daemonset {}/{}: {e:?}", ns_of(&ds), name_of(&ds));
        }
    }
}

/// The tolerations every daemon Pod gets (`util.AddOrUpdateDaemonPodTolerations`).
fn daemon_tolerations(spec: &Value) -> Vec<Value> {
    let mut out = vec![
        json!({"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}),
        json!({"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}),
        json!({"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"}),
        json!({"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"}),
        json!({"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"}),
        json!({"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}),
    ];
    if spec["hostNetwork"] == json!(true) {
        out.push(
            json!({"key": "node.kubernetes.io/network-unavailable", "operator": "Exists", "effect": "NoSchedule"}),
        );
    }
    out
}

/// The template's tolerations with the daemon ones added or updated.
fn tolerations(spec: &Value) -> Vec<Value> {
    let mut ts: Vec<Value> = spec["tolerations"].as_array().cloned().unwrap_or_default();
    for t in daemon_tolerations(spec) {
        let same = |e: &Value| {
            e["key"] == t["key"]
                && e["effect"] == t["effect"]
                && e["operator"].as_str().unwrap_or("Equal") == t["operator"].as_str().unwrap_or("Equal")
                && e["value"].as_str().unwrap_or_default() == t["value"].as_str().unwrap_or_default()
        };
        if let Some(i) = ts.iter().position(same) {
            ts[i] = t;
        } else {
            ts.push(t);
        }
    }
    ts
}

fn tolerates(t: &Value, taint: &Value) -> bool {
    let effect = t["effect"].as_str().unwrap_or_default();
    if !effect.is_empty() && Some(effect) != taint["effect"].as_str() {
        return false;
    }
    let key = t["key"].as_str().unwrap_or_default();
    let op = t["operator"].as_str().unwrap_or("Equal");
    if key.is_empty() {
        return op == "Exists";
    }
    if Some(key) != taint["key"].as_str() {
        return false;
    }
    match op {
        "Exists" => true,
        "Equal" | "" => t["value"].as_str().unwrap_or_default() == taint["value"].as_str().unwrap_or_default(),
        _ => false,
    }
}

fn field_requirement_matches(req: &Value, node: &Value) -> bool {
    let value = match req["key"].as_str() {
        Some("metadata.name") => name_of(node),
        _ => return false,
    };
    let values: Vec<&str> = req["values"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    match req["operator"].as_str() {
        Some("In") => values.contains(&value),
        Some("NotIn") => !values.contains(&value),
        _ => false,
    }
}

fn label_requirement_matches(req: &Value, labels: &Value) -> bool {
    let v = labels.get(req["key"].as_str().unwrap_or_default()).and_then(Value::as_str);
    let values: Vec<&str> = req["values"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let num = |s: Option<&str>| s.and_then(|s| s.parse::<i64>().ok());
    match req["operator"].as_str() {
        Some("In") => v.is_some_and(|v| values.contains(&v)),
        Some("NotIn") => v.is_none_or(|v| !values.contains(&v)),
        Some("Exists") => v.is_some(),
        Some("DoesNotExist") => v.is_none(),
        Some("Gt") => matches!((num(v), num(values.first().copied())), (Some(a), Some(b)) if a > b),
        Some("Lt") => matches!((num(v), num(values.first().copied())), (Some(a), Some(b)) if a < b),
        _ => false,
    }
}

/// `nodeSelector` and required node affinity of a pod spec against a Node.
fn fits_node_affinity(spec: &Value, node: &Value) -> bool {
    let labels = &node["metadata"]["labels"];
    if let Some(sel) = spec["nodeSelector"].as_object()
        && !sel.iter().all(|(k, v)| labels.get(k).and_then(Value::as_str).is_some() && labels.get(k) == Some(v))
    {
        return false;
    }
    let Some(terms) =
        spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            .as_array()
    else {
        return true;
    };
    terms.iter().any(|term| {
        let exprs = term["matchExpressions"].as_array().cloned().unwrap_or_default();
        let fields = term["matchFields"].as_array().cloned().unwrap_or_default();
        if exprs.is_empty() && fields.is_empty() {
            return false;
        }
        exprs.iter().all(|r| label_requirement_matches(r, labels))
            && fields.iter().all(|r| field_requirement_matches(r, node))
    })
}

/// `NodeShouldRunDaemonPod`: (should run, should continue running).
fn node_should_run(spec: &Value, node: &Value) -> (bool, bool) {
    if let Some(n) = spec["nodeName"].as_str().filter(|n| !n.is_empty())
        && n != name_of(node)
    {
        return (false, false);
    }
    if !fits_node_affinity(spec, node) {
        return (false, false);
    }
    let ts = tolerations(spec);
    let untolerated: Vec<&Value> = node["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| matches!(t["effect"].as_str(), Some("NoSchedule" | "NoExecute")))
        .filter(|taint| !ts.iter().any(|t| tolerates(t, taint)))
        .collect();
    if untolerated.is_empty() {
        return (true, true);
    }
    let keep = untolerated.iter().all(|t| t["effect"] == "NoSchedule");
    (false, keep)
}

/// The node a daemon Pod is for: its `nodeName`, else its `matchFields metadata.name` affinity.
fn target_node(pod: &Value) -> Option<String> {
    if let Some(n) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
        return Some(n.to_string());
    }
    let terms =
        pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            .as_array()?;
    terms.iter().find_map(|term| {
        term["matchFields"].as_array()?.iter().find_map(|f| {
            let vals = f["values"].as_array()?;
            (f["key"] == "metadata.name" && f["operator"] == "In" && vals.len() == 1)
                .then(|| vals[0].as_str().map(String::from))
                .flatten()
        })
    })
}

/// `ReplaceDaemonSetPodNodeNameNodeAffinity`.
fn with_node_affinity(spec: &mut Value, node: &str) {
    let field = json!({"key": "metadata.name", "operator": "In", "values": [node]});
    if !spec["affinity"].is_object() {
        spec["affinity"] = json!({});
    }
    if !spec["affinity"]["nodeAffinity"].is_object() {
        spec["affinity"]["nodeAffinity"] = json!({});
    }
    let required = &mut spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
    let terms = required["nodeSelectorTerms"].as_array().cloned().unwrap_or_default();
    if terms.is_empty() {
        *required = json!({"nodeSelectorTerms": [{"matchFields": [field]}]});
        return;
    }
    let terms: Vec<Value> = terms
        .into_iter()
        .map(|mut t| {
            t["matchFields"] = json!([field.clone()]);
            t
        })
        .collect();
    required["nodeSelectorTerms"] = json!(terms);
}

fn template_generation(ds: &Value) -> Option<String> {
    ds["metadata"]["annotations"][GENERATION_ANNOTATION].as_str().map(String::from)
}

/// `util.IsPodUpdated`.
fn is_updated(pod: &Value, hash: &str, generation: &Option<String>) -> bool {
    let labels = &pod["metadata"]["labels"];
    let by_generation = generation.as_deref().is_some_and(|g| labels[GENERATION_LABEL].as_str() == Some(g));
    by_generation || labels[HASH_LABEL].as_str() == Some(hash)
}

fn creation_order(a: &Value, b: &Value) -> std::cmp::Ordering {
    let t = |p: &Value| p["metadata"]["creationTimestamp"].as_str().unwrap_or_default().to_string();
    t(a).cmp(&t(b)).then_with(|| name_of(a).cmp(name_of(b)))
}

async fn create_pod(client: &Client, ds: &Value, node: &str, hash: &str) -> Result<(), ApiError> {
    let mut template = ds["spec"]["template"].clone();
    let mut labels = template["metadata"]["labels"].as_object().cloned().unwrap_or_default();
    if let Some(g) = template_generation(ds) {
        labels.insert(GENERATION_LABEL.into(), json!(g));
    }
    labels.insert(HASH_LABEL.into(), json!(hash));
    if !template["metadata"].is_object() {
        template["metadata"] = json!({});
    }
    template["metadata"]["labels"] = Value::Object(labels);
    let mut pod = pod_from_template(&template, ds, "DaemonSet");
    if !pod["spec"].is_object() {
        pod["spec"] = json!({});
    }
    let ts = tolerations(&pod["spec"]);
    pod["spec"]["tolerations"] = json!(ts);
    with_node_affinity(&mut pod["spec"], node);
    match client.create(&path("v1", "pods", ns_of(ds), "", ""), &pod).await {
        Ok(created) => {
            let msg = format!("Created pod: {}", name_of(&created));
            client.event(ds, "Normal", "SuccessfulCreate", &msg, COMPONENT).await;
            Ok(())
        }
        Err(e) => {
            if let ApiError::Status { message, .. } = &e {
                client.event(ds, "Warning", "FailedCreate", &format!("Error creating: {message}"), COMPONENT).await;
            }
            Err(e)
        }
    }
}

async fn delete_pod(client: &Client, ds: &Value, pod: &Value) -> Result<(), ApiError> {
    match client.delete(&path("v1", "pods", ns_of(pod), name_of(pod), ""), None, None).await {
        Ok(_) => {
            let msg = format!("Deleted pod: {}", name_of(pod));
            client.event(ds, "Normal", "SuccessfulDelete", &msg, COMPONENT).await;
            Ok(())
        }
        Err(ApiError::Status { code: 404, .. }) => Ok(()),
        Err(e) => {
            if let ApiError::Status { message, .. } = &e {
                client.event(ds, "Warning", "FailedDelete", &format!("Error deleting: {message}"), COMPONENT).await;
            }
            Err(e)
        }
    }
}

/// `maxUnavailable` of a rolling update (an integer or a percentage of the desired count).
fn max_unavailable(ds: &Value, desired: i64) -> i64 {
    let v = &ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"];
    let n = match v {
        Value::Number(n) => n.as_i64().unwrap_or(1),
        Value::String(s) => match s.strip_suffix('%').and_then(|p| p.parse::<i64>().ok()) {
            Some(p) => (p * desired) / 100,
            None => s.parse().unwrap_or(1),
        },
        _ => 1,
    };
    n.max(0)
}

async fn sync(client: &Client, ds: &Value, nodes: &[Value]) -> Result<(), ApiError> {
    if is_terminating(ds) {
        return Ok(());
    }
    let ns = ns_of(ds).to_string();
    let ds_name = name_of(ds).to_string();

    let revisions = owned_revisions(client, ds).await?;
    let collision = ds["status"]["collisionCount"].as_i64();
    let data = revision_data(ds);
    let template = ds["spec"]["template"].clone();
    let (revision, used_collision) =
        ensure_revision(client, ds, "DaemonSet", &revisions, collision.unwrap_or(0), |c| {
            let hash = hash_of(&template, c);
            let mut labels = template["metadata"]["labels"].as_object().cloned().unwrap_or_default();
            labels.insert(HASH_LABEL.into(), json!(hash));
            WantedRevision { name: format!("{ds_name}-{hash}"), labels: Value::Object(labels), data: data.clone() }
        })
        .await?;
    let hash = revision["metadata"]["labels"][HASH_LABEL].as_str().unwrap_or_default().to_string();
    let generation = template_generation(ds);

    let pods = owned_pods(client, ds).await?;
    let mut by_node: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for p in pods {
        if let Some(n) = target_node(&p) {
            by_node.entry(n).or_default().push(p);
        }
    }
    for v in by_node.values_mut() {
        v.sort_by(creation_order);
    }

    // Create and delete.
    let tmpl_spec = &ds["spec"]["template"]["spec"];
    let mut desired = 0i64;
    let mut unavailable = 0i64;
    let mut outdated: Vec<Value> = Vec::new();
    for node in nodes {
        let node_name = name_of(node).to_string();
        let (should_run, should_continue) = node_should_run(tmpl_spec, node);
        let pods: Vec<&Value> = by_node.get(&node_name).map(|v| v.iter().collect()).unwrap_or_default();
        let live: Vec<&Value> = pods.iter().copied().filter(|p| !is_terminating(p)).collect();
        if should_run {
            desired += 1;
        }
        if should_run && pods.is_empty() {
            create_pod(client, ds, &node_name, &hash).await?;
            unavailable += 1;
        } else if should_continue {
            let (failed, running): (Vec<&Value>, Vec<&Value>) = live.iter().partition(|p| phase(p) == "Failed");
            for p in failed {
                delete_pod(client, ds, p).await?;
            }
            for p in running.iter().skip(1) {
                delete_pod(client, ds, p).await?;
            }
            if should_run {
                match running.first() {
                    Some(p) => {
                        if !is_available(p, ds["spec"]["minReadySeconds"].as_i64().unwrap_or(0)) {
                            unavailable += 1;
                        }
                        if !is_updated(p, &hash, &generation) {
                            outdated.push((*p).clone());
                        }
                    }
                    None => unavailable += 1,
                }
            }
        } else {
            for p in live {
                delete_pod(client, ds, p).await?;
            }
        }
    }

    // Rolling update: replace outdated Pods while the unavailable budget allows (unavailable
    // outdated Pods first).
    if ds["spec"]["updateStrategy"]["type"].as_str().unwrap_or("RollingUpdate") == "RollingUpdate" {
        let min_ready = ds["spec"]["minReadySeconds"].as_i64().unwrap_or(0);
        let mut budget = max_unavailable(ds, desired) - unavailable;
        outdated.sort_by_key(|p| is_available(p, min_ready));
        for p in outdated {
            let counted = !is_available(&p, min_ready);
            if !counted {
                if budget <= 0 {
                    break;
                }
                budget -= 1;
            }
            delete_pod(client, ds, &p).await?;
        }
    }

    // Status, from the Pods as they are now.
    let pods = owned_pods(client, ds).await?;
    let mut by_node: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for p in pods {
        if is_terminating(&p) && is_finished(&p) {
            continue;
        }
        if let Some(n) = target_node(&p) {
            by_node.entry(n).or_default().push(p);
        }
    }
    let min_ready = ds["spec"]["minReadySeconds"].as_i64().unwrap_or(0);
    let (mut desired, mut current, mut misscheduled, mut ready, mut available, mut updated) = (0, 0, 0, 0, 0, 0);
    for node in nodes {
        let (should_run, _) = node_should_run(tmpl_spec, node);
        let pods = by_node.get_mut(name_of(node));
        if should_run {
            desired += 1;
            let Some(pods) = pods.filter(|p| !p.is_empty()) else { continue };
            current += 1;
            pods.sort_by(|a, b| {
                // Oldest first; among equals, running before pending before unknown.
                creation_order(a, b).then_with(|| {
                    let rank = |p: &Value| match phase(p) {
                        "Running" => 0,
                        "Pending" => 1,
                        _ => 2,
                    };
                    rank(a).cmp(&rank(b))
                })
            });
            let pod = &pods[0];
            if is_ready(pod) {
                ready += 1;
                if is_available(pod, min_ready) {
                    available += 1;
                }
            }
            if is_updated(pod, &hash, &generation) {
                updated += 1;
            }
        } else if pods.is_some_and(|p| !p.is_empty()) {
            misscheduled += 1;
        }
    }
    let mut status = Map::new();
    status.insert("currentNumberScheduled".into(), json!(current));
    status.insert("numberMisscheduled".into(), json!(misscheduled));
    status.insert("desiredNumberScheduled".into(), json!(desired));
    status.insert("numberReady".into(), json!(ready));
    let mut put = |k: &str, v: i64| {
        if v != 0 {
            status.insert(k.into(), json!(v));
        }
    };
    put("observedGeneration", ds["metadata"]["generation"].as_i64().unwrap_or(0));
    put("updatedNumberScheduled", updated);
    put("numberAvailable", available);
    put("numberUnavailable", desired - available);
    if collision.is_some() || used_collision > 0 {
        status.insert("collisionCount".into(), json!(used_collision));
    }
    if let Some(c) = ds["status"].get("conditions").filter(|c| c.as_array().is_some_and(|a| !a.is_empty())) {
        status.insert("conditions".into(), c.clone());
    }
    let status = Value::Object(status);

    let live: Vec<String> = vec![name_of(&revision).to_string()];
    let revisions = owned_revisions(client, ds).await?;
    let live: Vec<String> = live
        .into_iter()
        .chain(by_node.values().flatten().filter_map(|p| {
            let h = p["metadata"]["labels"][HASH_LABEL].as_str()?;
            Some(format!("{ds_name}-{h}"))
        }))
        .collect();
    truncate_history(client, ds, &revisions, &live).await;

    if ds["status"] != status {
        let mut body = ds.clone();
        body["status"] = status;
        client.update(&path("apps/v1", "daemonsets", &ns, &ds_name, "status"), &body).await?;
    }
    Ok(())
}
