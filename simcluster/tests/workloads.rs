//! With the scheduler and kubelet simulation on, workloads come alive: a Deployment's Pods are
//! scheduled onto the simulated Nodes, start, and the Deployment becomes Available; or, when
//! their image cannot be pulled, it stays unavailable.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_becomes_available() {
    let sim = simcluster::SimCluster::start(simcluster::Config::default(), 0).await.unwrap();
    let client = sim.client().await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let d: Deployment = serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "app", "image": "registry.example.com/web:1.0"}]}}}
    }))
    .unwrap();
    deployments.create(&PostParams::default(), &d).await.unwrap();

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let d = serde_json::to_value(deployments.get("web").await.unwrap()).unwrap();
        let available = d["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Available" && c["status"] == "True"));
        if d["status"]["availableReplicas"] == 2 && available {
            break;
        }
        assert!(Instant::now() < deadline, "the Deployment did not become Available within 60 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let nodes: Api<Node> = Api::all(client.clone());
    let node_names: Vec<String> =
        nodes.list(&ListParams::default()).await.unwrap().items.into_iter().filter_map(|n| n.metadata.name).collect();
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let pods = pods.list(&ListParams::default().labels("app=web")).await.unwrap().items;
    assert_eq!(pods.len(), 2);
    for p in pods {
        let spec = p.spec.unwrap();
        assert!(node_names.contains(spec.node_name.as_ref().unwrap()), "scheduled onto a simulated Node");
        let status = p.status.unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert!(status.pod_ip.is_some());
    }
}

/// A Deployment whose image cannot be pulled does not become Available: its Pods wait in
/// ImagePullBackOff and count as unavailable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_with_an_unpullable_image_stays_unavailable() {
    let sim = simcluster::SimCluster::start(simcluster::Config::default(), 0).await.unwrap();
    let client = sim.client().await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let d: Deployment = serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "broken"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "broken"}},
                 "template": {"metadata": {"labels": {"app": "broken"}},
                              "spec": {"containers": [{"name": "app", "image": "registry.invalid/web:1.0"}]}}}
    }))
    .unwrap();
    deployments.create(&PostParams::default(), &d).await.unwrap();

    let pods: Api<Pod> = Api::namespaced(client, "default");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let list = pods.list(&ListParams::default().labels("app=broken")).await.unwrap().items;
        let backing_off = list
            .iter()
            .filter(|p| {
                let p = serde_json::to_value(p).unwrap();
                p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ImagePullBackOff"
            })
            .count();
        let d = serde_json::to_value(deployments.get("broken").await.unwrap()).unwrap();
        if backing_off == 2 && d["status"]["unavailableReplicas"] == 2 {
            assert!(d["status"]["availableReplicas"].as_i64().unwrap_or(0) == 0);
            let available = d["status"]["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == "Available"))
                .cloned()
                .unwrap_or_default();
            assert_eq!(available["status"], "False");
            assert_eq!(available["reason"], "MinimumReplicasUnavailable");
            break;
        }
        assert!(Instant::now() < deadline, "the Pods did not reach ImagePullBackOff within 60 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
