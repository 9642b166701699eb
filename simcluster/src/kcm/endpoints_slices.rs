//! The endpointslice controller: for every Service with a selector, EndpointSlices
//! (`generateName: <service>-`, labels `kubernetes.io/service-name` and
//! `endpointslice.kubernetes.io/managed-by`, plus the Service's labels; a controller
//! ownerReference to the Service) listing the selected Pods that have an IP, terminating ones
//! included, with their three conditions, `targetRef`, `nodeName` and the resolved ports.
//! Endpoints are grouped by port set, at most 100 per slice; a Service without endpoints keeps
//! one placeholder slice with `"endpoints": null, "ports": null`. Slices are written only when
//! their endpoints, ports or labels change, and the trigger-time annotation is set then.
//! Slices of a deleted Service go with it through the garbage collector.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::common::{
    Snapshot, TriggerTracker, find_port, hostname_for, name, namespace, pod_ip, pod_is_endpoint, pod_ready, scope,
    service_families, service_selector, set_trigger_annotation, target_ref, terminating,
};
use crate::client::{Client, path};

/// `endpointslice.kubernetes.io/managed-by` value.
pub const MANAGED_BY: &str = "endpointslice-controller.k8s.io";
const LABEL_MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
const LABEL_SERVICE_NAME: &str = super::common::SERVICE_NAME;
const MAX_ENDPOINTS: usize = 100;

static TRACKER: std::sync::LazyLock<TriggerTracker> = std::sync::LazyLock::new(TriggerTracker::default);

/// One desired slice: address type, ports (`Null` for none) and endpoints.
struct Desired {
    address_type: String,
    ports: Value,
    endpoints: Vec<Value>,
}

fn endpoint_for(pod: &Value, svc: &Value, ip: String, zones: &std::collections::HashMap<String, String>) -> Value {
    let publish = svc["spec"]["publishNotReadyAddresses"].as_bool() == Some(true);
    let serving = publish || pod_ready(pod);
    let term = terminating(pod);
    let ready = publish || (serving && !term);
    let mut ep = Map::new();
    ep.insert("addresses".into(), json!([ip]));
    ep.insert("conditions".into(), json!({"ready": ready, "serving": serving, "terminating": term}));
    if let Some(h) = hostname_for(pod, svc) {
        ep.insert("hostname".into(), json!(h));
    }
    ep.insert("targetRef".into(), target_ref(pod));
    if let Some(node) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
        ep.insert("nodeName".into(), json!(node));
        if let Some(zone) = zones.get(node) {
            ep.insert("zone".into(), json!(zone));
        }
    }
    Value::Object(ep)
}

fn endpoint_ports(pod: &Value, svc: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    for sp in svc["spec"]["ports"].as_array().into_iter().flatten() {
        let Some(port) = find_port(pod, sp) else { continue };
        let mut p = Map::new();
        p.insert("name".into(), json!(sp["name"].as_str().unwrap_or_default()));
        p.insert("protocol".into(), json!(sp["protocol"].as_str().unwrap_or("TCP")));
        p.insert("port".into(), json!(port));
        if let Some(ap) = sp["appProtocol"].as_str() {
            p.insert("appProtocol".into(), json!(ap));
        }
        out.push(Value::Object(p));
    }
    out
}

fn sort_key(ep: &Value) -> (String, String) {
    (
        ep["addresses"][0].as_str().unwrap_or_default().to_string(),
        ep["targetRef"]["uid"].as_str().unwrap_or_default().to_string(),
    )
}

fn desired_slices(snap: &Snapshot, svc: &Value, pods: &[&Value]) -> Vec<Desired> {
    let families = service_families(svc);
    let mut out = Vec::new();
    for family in &families {
        // Port set (as JSON text, for grouping) → endpoints.
        let mut groups: BTreeMap<String, (Value, Vec<Value>)> = BTreeMap::new();
        for pod in pods {
            if !pod_is_endpoint(pod, true) {
                continue;
            }
            let Some(ip) = pod_ip(pod, family) else { continue };
            let ports = endpoint_ports(pod, svc);
            let ports = if ports.is_empty() { Value::Null } else { Value::Array(ports) };
            let key = ports.to_string();
            groups.entry(key).or_insert_with(|| (ports, vec![])).1.push(endpoint_for(pod, svc, ip, &snap.zones));
        }
        for (_, (ports, mut eps)) in groups {
            eps.sort_by_key(sort_key);
            for chunk in eps.chunks(MAX_ENDPOINTS) {
                out.push(Desired { address_type: family.clone(), ports: ports.clone(), endpoints: chunk.to_vec() });
            }
        }
    }
    if out.is_empty() {
        out.push(Desired {
            address_type: families.first().cloned().unwrap_or_else(|| "IPv4".into()),
            ports: Value::Null,
            endpoints: vec![],
        });
    }
    out
}

/// A list field with `[]` and absence read as `null`.
fn list_or_null(v: &Value) -> Value {
    match v {
        Value::Array(a) if !a.is_empty() => v.clone(),
        _ => Value::Null,
    }
}

fn sorted_endpoints(v: &Value) -> Vec<Value> {
    let mut eps = v.as_array().cloned().unwrap_or_default();
    eps.sort_by_key(sort_key);
    eps
}

fn labels_for(svc: &Value) -> Map<String, Value> {
    super::common::endpoint_labels(
        svc,
        &[LABEL_SERVICE_NAME, LABEL_MANAGED_BY],
        &[(LABEL_SERVICE_NAME, name(svc)), (LABEL_MANAGED_BY, MANAGED_BY)],
    )
}

fn owner_ref(svc: &Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "name": name(svc), "uid": svc["metadata"]["uid"],
           "controller": true, "blockOwnerDeletion": true})
}

fn slice_path(ns: &str, name: &str) -> String {
    path("discovery.k8s.io/v1", "endpointslices", ns, name, "")
}

/// Sync one Service's slices; true when every write succeeded.
async fn sync_service(client: &Client, snap: &Snapshot, svc: &Value) -> bool {
    let ns = namespace(svc);
    let pods = snap.selected_pods(svc);
    let (trigger, state) = TRACKER.compute(scope(client), svc, &pods);
    let desired = desired_slices(snap, svc, &pods);
    let labels = Value::Object(labels_for(svc));
    let mut existing: Vec<&Value> = snap
        .slices_labelled(ns, name(svc))
        .filter(|s| {
            s["metadata"]["labels"][LABEL_MANAGED_BY] == MANAGED_BY && !s["metadata"]["deletionTimestamp"].is_string()
        })
        .collect();
    existing.sort_by_key(|s| name(s).to_string());

    // Pair desired slices with existing ones: same address type and ports first, then any of
    // the same address type (reused, as the placeholder is); the rest are created or deleted.
    let mut pairs: Vec<(&Desired, Option<&Value>)> = Vec::new();
    let mut unmatched: Vec<&Desired> = Vec::new();
    for d in &desired {
        let pos = existing
            .iter()
            .position(|s| s["addressType"] == d.address_type.as_str() && list_or_null(&s["ports"]) == d.ports);
        match pos {
            Some(i) => pairs.push((d, Some(existing.remove(i)))),
            None => unmatched.push(d),
        }
    }
    for d in unmatched {
        let pos = existing.iter().position(|s| s["addressType"] == d.address_type.as_str());
        pairs.push((d, pos.map(|i| existing.remove(i))));
    }

    let mut ok = true;
    for (d, current) in pairs {
        let endpoints = if d.endpoints.is_empty() { Value::Null } else { Value::Array(d.endpoints.clone()) };
        match current {
            Some(cur) => {
                let same = cur["metadata"]["labels"] == labels
                    && list_or_null(&cur["ports"]) == d.ports
                    && sorted_endpoints(&cur["endpoints"]) == d.endpoints;
                if same {
                    continue;
                }
                let mut new = cur.clone();
                new["apiVersion"] = json!("discovery.k8s.io/v1");
                new["kind"] = json!("EndpointSlice");
                new["metadata"]["labels"] = labels.clone();
                new["endpoints"] = endpoints;
                new["ports"] = d.ports.clone();
                set_trigger_annotation(&mut new, trigger);
                ok &= client.update(&slice_path(ns, name(cur)), &new).await.is_ok();
            }
            None => {
                let mut new = json!({
                    "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                    "metadata": {"generateName": format!("{}-", name(svc)), "namespace": ns,
                                 "labels": labels, "ownerReferences": [owner_ref(svc)]},
                    "addressType": d.address_type, "endpoints": endpoints, "ports": d.ports,
                });
                set_trigger_annotation(&mut new, trigger);
                ok &= client.create(&slice_path(ns, ""), &new).await.is_ok();
            }
        }
    }
    for extra in existing {
        ok &= client.delete(&slice_path(ns, name(extra)), None, None).await.is_ok();
    }
    if ok {
        TRACKER.commit(scope(client), svc, state);
    }
    ok
}

/// One pass over every Service.
pub async fn reconcile(client: &Client, snap: &Snapshot) {
    let mut live = std::collections::HashSet::new();
    for svc in &snap.services {
        if svc["metadata"]["deletionTimestamp"].is_string() || service_selector(svc).is_none() {
            continue;
        }
        live.insert(svc["metadata"]["uid"].as_str().unwrap_or_default().to_string());
        sync_service(client, snap, svc).await;
    }
    // A pass over some namespaces only knows their Services: forget the others' only in a
    // full pass.
    if !client.is_scoped() {
        TRACKER.retain(scope(client), &live);
    }
}
