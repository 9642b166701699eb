//! The endpoints controllers of kube-controller-manager: the endpointslice controller
//! ([`slices`]) and the legacy endpoints controller (here): for every Service
//! with a selector, a v1 Endpoints of the same name (label `endpoints.kubernetes.io/managed-by:
//! endpoint-controller` plus the Service's labels) whose subsets list the selected Pods that
//! have an IP: Ready ones in `addresses`, others in `notReadyAddresses`, terminating ones left
//! out (unless `publishNotReadyAddresses`), repacked by port set and sorted by IP; no
//! `subsets` when empty. Written only when subsets or labels change, with the
//! `endpoints.kubernetes.io/last-change-trigger-time` annotation of that sync (removed when the
//! change was no Pod or Service trigger, e.g. a deletion). The Endpoints of a deleted Service
//! are deleted.
//!
//! Every response about v1 Endpoints carries a deprecation `Warning` header
//! ([`deprecation_warning`], added by `server::resource_path`).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

#[path = "endpoints_common.rs"]
pub mod common;
#[path = "endpoints_slices.rs"]
pub mod slices;

use crate::client::{Client, path};
use crate::registry::ResourceType;
use common::{
    Snapshot, TriggerTracker, endpoint_labels, find_port, hostname_for, name, namespace, pod_ip, pod_is_endpoint,
    pod_ready, scope, service_families, service_selector, set_trigger_annotation, target_ref,
};

/// The deprecation warning of every v1 Endpoints response.
pub const DEPRECATION_WARNING: &str =
    "299 - \"v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice\"";

/// The label marking Endpoints this controller manages.
pub const LABEL_MANAGED_BY: &str = "endpoints.kubernetes.io/managed-by";
/// Its value.
pub const MANAGED_BY: &str = "endpoint-controller";

static TRACKER: std::sync::LazyLock<TriggerTracker> = std::sync::LazyLock::new(TriggerTracker::default);

/// The `Warning` header value for responses about `rt`, if it is deprecated (core v1
/// Endpoints).
pub fn deprecation_warning(rt: &ResourceType) -> Option<&'static str> {
    (rt.group.is_empty() && rt.version == "v1" && rt.resource == "endpoints").then_some(DEPRECATION_WARNING)
}

/// One pass: EndpointSlices, then v1 Endpoints.
pub async fn reconcile(client: Client) {
    let snap = Snapshot::read(&client);
    slices::reconcile(&client, &snap).await;
    reconcile_endpoints(&client, &snap).await;
}

fn address_for(pod: &Value, svc: &Value, ip: String) -> Value {
    let mut a = Map::new();
    a.insert("ip".into(), json!(ip));
    if let Some(h) = hostname_for(pod, svc) {
        a.insert("hostname".into(), json!(h));
    }
    if let Some(node) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
        a.insert("nodeName".into(), json!(node));
    }
    a.insert("targetRef".into(), target_ref(pod));
    Value::Object(a)
}

fn address_key(a: &Value) -> (String, String) {
    (a["ip"].as_str().unwrap_or_default().to_string(), a["targetRef"]["uid"].as_str().unwrap_or_default().to_string())
}

/// The subsets of a Service, repacked as `endpoints.RepackSubsets` does: addresses grouped by
/// the set of ports they serve, sorted by IP; ports sorted.
pub fn desired_subsets(svc: &Value, pods: &[&Value]) -> Vec<Value> {
    let publish = svc["spec"]["publishNotReadyAddresses"].as_bool() == Some(true);
    let family = service_families(svc).into_iter().next().unwrap_or_else(|| "IPv4".into());
    let svc_ports = svc["spec"]["ports"].as_array().cloned().unwrap_or_default();
    let headless = svc["spec"]["clusterIP"] == "None";
    // Address (as JSON text) → (address, ready, ports as JSON texts).
    let mut by_address: BTreeMap<String, (Value, bool, BTreeSet<String>)> = BTreeMap::new();
    for pod in pods {
        if !pod_is_endpoint(pod, publish) {
            continue;
        }
        let Some(ip) = pod_ip(pod, &family) else { continue };
        let addr = address_for(pod, svc, ip);
        let ready = publish || pod_ready(pod);
        let mut ports = BTreeSet::new();
        for sp in &svc_ports {
            let Some(port) = find_port(pod, sp) else { continue };
            let mut p = Map::new();
            if let Some(n) = sp["name"].as_str().filter(|n| !n.is_empty()) {
                p.insert("name".into(), json!(n));
            }
            p.insert("port".into(), json!(port));
            p.insert("protocol".into(), json!(sp["protocol"].as_str().unwrap_or("TCP")));
            if let Some(ap) = sp["appProtocol"].as_str() {
                p.insert("appProtocol".into(), json!(ap));
            }
            ports.insert(Value::Object(p).to_string());
        }
        if ports.is_empty() && !(svc_ports.is_empty() && headless) {
            continue;
        }
        let entry = by_address.entry(addr.to_string()).or_insert_with(|| (addr, ready, BTreeSet::new()));
        entry.1 |= ready;
        entry.2.extend(ports);
    }
    // Port set → (ready addresses, not-ready addresses).
    let mut groups: BTreeMap<Vec<String>, (Vec<Value>, Vec<Value>)> = BTreeMap::new();
    for (_, (addr, ready, ports)) in by_address {
        let g = groups.entry(ports.into_iter().collect()).or_default();
        if ready { g.0.push(addr) } else { g.1.push(addr) }
    }
    let mut subsets = Vec::new();
    for (ports, (mut ready, mut not_ready)) in groups {
        ready.sort_by_key(address_key);
        not_ready.sort_by_key(address_key);
        let mut ports: Vec<Value> = ports.iter().filter_map(|p| serde_json::from_str(p).ok()).collect();
        ports.sort_by_key(|p| (p["name"].as_str().unwrap_or_default().to_string(), p["port"].as_i64()));
        let mut s = Map::new();
        if !ready.is_empty() {
            s.insert("addresses".into(), Value::Array(ready));
        }
        if !not_ready.is_empty() {
            s.insert("notReadyAddresses".into(), Value::Array(not_ready));
        }
        if !ports.is_empty() {
            s.insert("ports".into(), Value::Array(ports));
        }
        subsets.push(Value::Object(s));
    }
    subsets
}

fn endpoints_path(ns: &str, name: &str) -> String {
    path("v1", "endpoints", ns, name, "")
}

async fn sync_service(client: &Client, snap: &Snapshot, svc: &Value) {
    let ns = namespace(svc);
    let pods = snap.selected_pods(svc);
    let (trigger, state) = TRACKER.compute(scope(client), svc, &pods);
    let subsets = desired_subsets(svc, &pods);
    let labels = Value::Object(endpoint_labels(svc, &[LABEL_MANAGED_BY], &[(LABEL_MANAGED_BY, MANAGED_BY)]));
    let current = snap.endpoints_named(ns, name(svc));
    let result = match current {
        Some(cur) => {
            let cur_subsets = cur["subsets"].as_array().cloned().unwrap_or_default();
            if cur_subsets == subsets && cur["metadata"]["labels"] == labels {
                Ok(Value::Null)
            } else {
                let mut new = cur.clone();
                new["apiVersion"] = json!("v1");
                new["kind"] = json!("Endpoints");
                new["metadata"]["labels"] = labels;
                set_subsets(&mut new, subsets);
                set_trigger_annotation(&mut new, trigger);
                client.update(&endpoints_path(ns, name(svc)), &new).await
            }
        }
        None => {
            let mut new = json!({"apiVersion": "v1", "kind": "Endpoints",
                                 "metadata": {"name": name(svc), "namespace": ns, "labels": labels}});
            set_subsets(&mut new, subsets);
            set_trigger_annotation(&mut new, trigger);
            client.create(&endpoints_path(ns, ""), &new).await
        }
    };
    if result.is_ok() {
        TRACKER.commit(scope(client), svc, state);
    }
}

fn set_subsets(obj: &mut Value, subsets: Vec<Value>) {
    let Some(o) = obj.as_object_mut() else { return };
    if subsets.is_empty() {
        o.remove("subsets");
    } else {
        o.insert("subsets".into(), Value::Array(subsets));
    }
}

async fn reconcile_endpoints(client: &Client, snap: &Snapshot) {
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
    // Endpoints this controller manages whose Service is gone.
    for ep in &snap.endpoints {
        if ep["metadata"]["labels"][LABEL_MANAGED_BY] != MANAGED_BY || ep["metadata"]["deletionTimestamp"].is_string() {
            continue;
        }
        let has_service = snap.service(namespace(ep), name(ep)).is_some();
        if !has_service {
            let _ = client.delete(&endpoints_path(namespace(ep), name(ep)), None, None).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, ip: &str, ready: bool, deleting: bool) -> Value {
        let mut p = json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"), "labels": {"app": "web"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "app", "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]}]},
            "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                       "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        });
        if deleting {
            p["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        p
    }

    #[test]
    fn subsets_split_ready_and_not_ready_and_skip_terminating() {
        let svc = json!({"metadata": {"name": "web", "namespace": "ns"},
                         "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}]}});
        let a = pod("a", "10.0.0.2", true, false);
        let b = pod("b", "10.0.0.1", false, false);
        let c = pod("c", "10.0.0.3", true, true);
        let s = desired_subsets(&svc, &[&a, &b, &c]);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0]["addresses"][0]["ip"], "10.0.0.2");
        assert_eq!(s[0]["notReadyAddresses"][0]["ip"], "10.0.0.1");
        assert_eq!(s[0]["ports"], json!([{"name": "http", "port": 8080, "protocol": "TCP"}]));
        assert!(desired_subsets(&svc, &[&c]).is_empty());
    }
}
