//! The scheduler and kubelet simulation (on unless `simcluster --no-kubelet`): a few simulated
//! Nodes that report Ready and renew their Leases, a scheduler that binds pending Pods to the
//! Node with the fewest Pods, and a kubelet that starts bound Pods (Running and Ready, with an IP)
//! and finishes the deletion of terminating ones. Failure modes (image pull errors, crash loops,
//! unschedulable Pods) are not simulated yet.

use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{Value, json};

use crate::client::{Client, path};

/// Names of the simulated Nodes.
pub const NODES: [&str; 3] = ["sim-node-1", "sim-node-2", "sim-node-3"];

static NEXT_IP: AtomicU32 = AtomicU32::new(2);

fn now_micro() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

fn node(name: &str, index: usize) -> Value {
    let now = crate::api::now();
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}},
        "spec": {"podCIDR": format!("10.244.{index}.0/24"), "podCIDRs": [format!("10.244.{index}.0/24")]},
        "status": {
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
                 "lastHeartbeatTime": now, "lastTransitionTime": now},
            ],
            "addresses": [{"type": "InternalIP", "address": format!("172.18.0.{}", index + 2)}, {"type": "Hostname", "address": name}],
            "nodeInfo": {"kubeletVersion": "v1.36.2", "containerRuntimeVersion": "simcluster://1", "operatingSystem": "linux",
                         "architecture": "amd64", "osImage": "simcluster", "kernelVersion": "simcluster",
                         "kubeProxyVersion": "", "machineID": "", "systemUUID": "", "bootID": ""},
        },
    })
}

/// Register the Nodes if missing and renew their Leases.
async fn nodes(client: &Client) {
    for (i, name) in NODES.iter().enumerate() {
        let node_path = path("v1", "nodes", "", name, "");
        if client.get(&node_path).await.is_err() {
            let _ = client.create(&path("v1", "nodes", "", "", ""), &node(name, i + 1)).await;
        }
        let lease_path = path("coordination.k8s.io/v1", "leases", "kube-node-lease", name, "");
        let renew = json!({"spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": now_micro()}});
        match client.get(&lease_path).await {
            Ok(lease) => {
                let fresh = lease["spec"]["renewTime"]
                    .as_str()
                    .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                    .is_some_and(|t| jiff::Timestamp::now().as_second() - t.as_second() < 10);
                if !fresh {
                    let _ = client.merge_patch(&lease_path, &renew).await;
                }
            }
            Err(_) => {
                let mut lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                       "metadata": {"name": name, "namespace": "kube-node-lease"}});
                lease["spec"] = renew["spec"].clone();
                let _ =
                    client.create(&path("coordination.k8s.io/v1", "leases", "kube-node-lease", "", ""), &lease).await;
            }
        }
    }
}

/// One pass: Nodes, scheduling, Pod lifecycle.
pub async fn reconcile(client: Client) {
    if !client.state().config.kubelet {
        return;
    }
    nodes(&client).await;
    let Ok(pods) = client.list(&path("v1", "pods", "", "", ""), "").await else { return };
    let mut load: Vec<(usize, &str)> =
        NODES.iter().map(|n| (pods.iter().filter(|p| p["spec"]["nodeName"] == *n).count(), *n)).collect();
    for pod in &pods {
        let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
        let name = pod["metadata"]["name"].as_str().unwrap_or_default();
        let node_name = pod["spec"]["nodeName"].as_str().unwrap_or_default();
        let deleting = pod["metadata"]["deletionTimestamp"].is_string();
        if node_name.is_empty() {
            if deleting {
                continue;
            }
            load.sort();
            let target = load[0].1;
            load[0].0 += 1;
            let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                                 "target": {"apiVersion": "v1", "kind": "Node", "name": target}});
            if client.create(&path("v1", "pods", ns, name, "binding"), &binding).await.is_ok() {
                client
                    .event(
                        pod,
                        "Normal",
                        "Scheduled",
                        &format!("Successfully assigned {ns}/{name} to {target}"),
                        "default-scheduler",
                    )
                    .await;
            }
            continue;
        }
        if !NODES.contains(&node_name) {
            continue;
        }
        if deleting {
            let _ = client.delete(&path("v1", "pods", ns, name, ""), Some(0), None).await;
            continue;
        }
        if pod["status"]["phase"] == "Running"
            || pod["status"]["phase"] == "Succeeded"
            || pod["status"]["phase"] == "Failed"
        {
            continue;
        }
        start(&client, pod, ns, name, node_name).await;
    }
}

/// Report a bound Pod Running and Ready, as a kubelet would after pulling and starting it.
async fn start(client: &Client, pod: &Value, ns: &str, name: &str, node_name: &str) {
    let now = crate::api::now();
    let ip = NEXT_IP.fetch_add(1, Ordering::Relaxed);
    let index = NODES.iter().position(|n| *n == node_name).unwrap_or(0) + 1;
    let pod_ip = format!("10.244.{index}.{}", ip % 250 + 2);
    let cond = |t: &str| json!({"type": t, "status": "True", "lastProbeTime": null, "lastTransitionTime": now});
    let statuses: Vec<Value> = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            json!({"name": c["name"], "image": c["image"], "imageID": format!("{}@sha256:simulated", c["image"].as_str().unwrap_or("")),
                   "containerID": format!("simcluster://{name}-{}", c["name"].as_str().unwrap_or("")),
                   "ready": true, "started": true, "restartCount": 0,
                   "state": {"running": {"startedAt": now}}})
        })
        .collect();
    let patch = json!({"status": {
        "phase": "Running",
        "conditions": [cond("PodReadyToStartContainers"), cond("Initialized"), cond("Ready"), cond("ContainersReady")],
        "hostIP": format!("172.18.0.{}", index + 1), "hostIPs": [{"ip": format!("172.18.0.{}", index + 1)}],
        "podIP": pod_ip, "podIPs": [{"ip": pod_ip}],
        "startTime": now,
        "containerStatuses": statuses,
    }});
    let kubelet = Client::new(client.state().clone(), "kubelet");
    if kubelet.strategic_patch(&path("v1", "pods", ns, name, "status"), &patch).await.is_ok() {
        client.event(pod, "Normal", "Started", "Started container(s)", "kubelet").await;
    }
}
