//! Node faults end to end, with the scheduler and kubelet on, through a kube-rs client: a
//! stopped kubelet makes its Node `Unknown` and tainted unreachable once its Lease is old (by
//! the simulation's clock), a kubelet reporting not ready makes its Node `NotReady`; either way
//! the Node's Pods become unready and leave the ready endpoints of their Service, and all of it
//! recovers when the kubelet comes back. Each step waits with a deadline for the final state
//! (a Lease may look stale for a moment after the clock moves, before its kubelet renews it).

use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use simcluster::{Config, SimCluster};

const DEADLINE: Duration = Duration::from_secs(60);
const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
const NOT_READY: &str = "node.kubernetes.io/not-ready";

/// Poll `f` every 100 ms until it gives a value, failing after [`DEADLINE`].
async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn condition<'a>(o: &'a Value, type_: &str) -> &'a Value {
    o["status"]["conditions"].as_array().and_then(|cs| cs.iter().find(|c| c["type"] == type_)).unwrap_or(&Value::Null)
}

fn taint_keys(node: &Value) -> Vec<String> {
    node["spec"]["taints"]
        .as_array()
        .map(|ts| ts.iter().filter_map(|t| t["key"].as_str().map(String::from)).collect())
        .unwrap_or_default()
}

async fn node(client: &kube::Client, name: &str) -> Option<Value> {
    let nodes: Api<Node> = Api::all(client.clone());
    nodes.get(name).await.ok().map(|n| serde_json::to_value(n).unwrap())
}

/// A cluster of 3 Nodes; the Service `web` selects two Pods on `sim-node-1` and one on
/// `sim-node-2`, all Running and Ready and ready endpoints.
async fn start() -> (SimCluster, kube::Client) {
    let sim = SimCluster::start(Config::default(), 0).await.unwrap();
    let client = sim.client().await.unwrap();
    eventually("Nodes ready and untainted", || async {
        let nodes: Api<Node> = Api::all(client.clone());
        let list = nodes.list(&ListParams::default()).await.ok()?;
        let ok = list
            .items
            .iter()
            .map(|n| serde_json::to_value(n).unwrap())
            .filter(|n| condition(n, "Ready")["status"] == "True" && !taint_keys(n).iter().any(|k| k == NOT_READY))
            .count();
        (ok == 3).then_some(())
    })
    .await;
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let svc: Service = serde_json::from_value(json!({"metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}}))
    .unwrap();
    services.create(&PostParams::default(), &svc).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for (name, node) in [("web-a", "sim-node-1"), ("web-b", "sim-node-1"), ("web-c", "sim-node-2")] {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app": "web"}},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "containers": [{"name": "app", "image": "registry.example.com/web:1",
                                "ports": [{"containerPort": 8080}]}],
            },
        }))
        .unwrap();
        pods.create(&PostParams::default(), &p).await.unwrap();
    }
    wait_ready(&client, &[("web-a", true), ("web-b", true), ("web-c", true)]).await;
    (sim, client)
}

/// Wait until each Pod's Ready condition and its endpoint in the Service's EndpointSlice and
/// v1 Endpoints are as given.
async fn wait_ready(client: &kube::Client, want: &[(&str, bool)]) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for (name, ready) in want {
        let status = if *ready { "True" } else { "False" };
        eventually(&format!("Pod {name} Ready={status}"), || async {
            let p = serde_json::to_value(pods.get(name).await.ok()?).unwrap();
            (condition(&p, "Ready")["status"] == status).then_some(())
        })
        .await;
    }
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    eventually(&format!("EndpointSlice endpoints {want:?}"), || async {
        let list = slices.list(&ListParams::default().labels("kubernetes.io/service-name=web")).await.ok()?;
        let eps: Vec<Value> = list
            .items
            .iter()
            .flat_map(|s| serde_json::to_value(s).unwrap()["endpoints"].as_array().cloned().unwrap_or_default())
            .collect();
        let ok = eps.len() == want.len()
            && want.iter().all(|(name, ready)| {
                eps.iter().any(|e| e["targetRef"]["name"] == *name && e["conditions"]["ready"] == *ready)
            });
        ok.then_some(())
    })
    .await;
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    eventually(&format!("Endpoints addresses {want:?}"), || async {
        let ep = serde_json::to_value(endpoints.get("web").await.ok()?).unwrap();
        let names = |field: &str| -> Vec<String> {
            ep["subsets"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|s| s[field].as_array().cloned().unwrap_or_default())
                .filter_map(|a| a["targetRef"]["name"].as_str().map(String::from))
                .collect()
        };
        let (ready, not_ready) = (names("addresses"), names("notReadyAddresses"));
        let ok = want.iter().all(|(name, r)| {
            let n = name.to_string();
            if *r {
                ready.contains(&n) && !not_ready.contains(&n)
            } else {
                not_ready.contains(&n) && !ready.contains(&n)
            }
        });
        ok.then_some(())
    })
    .await;
}

/// Wait until `sim-node-1` is Ready again without the node controller's taints.
async fn wait_node_recovered(client: &kube::Client) {
    eventually("sim-node-1 Ready and untainted", || async {
        let n = node(client, "sim-node-1").await?;
        let ready = condition(&n, "Ready")["status"] == "True";
        let tainted = taint_keys(&n).iter().any(|k| k == UNREACHABLE || k == NOT_READY);
        (ready && !tainted).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_kubelet_makes_its_node_unknown_and_its_pods_unready_until_it_starts() {
    let (sim, client) = start().await;
    sim.stop_node("sim-node-1");
    // The node controller notes when it last saw the Lease change, on the simulation's clock:
    // move the clock in steps, letting it look between them, until the grace period (50 s)
    // has passed. Default tolerations evict the Pods only after 300 s.
    let mut advanced = Duration::ZERO;
    let deadline = Instant::now() + DEADLINE;
    let unknown = loop {
        let n = node(&client, "sim-node-1").await.expect("sim-node-1");
        if condition(&n, "Ready")["status"] == "Unknown" {
            break n;
        }
        assert!(advanced < Duration::from_secs(120), "sim-node-1 still {} after 120 s", condition(&n, "Ready"));
        assert!(Instant::now() < deadline, "sim-node-1 not Unknown in time: {}", condition(&n, "Ready"));
        sim.advance_clock(Duration::from_secs(5));
        advanced += Duration::from_secs(5);
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let ready = condition(&unknown, "Ready");
    assert_eq!(ready["reason"], "NodeStatusUnknown");
    assert_eq!(ready["message"], "Kubelet stopped posting node status.");
    assert!(advanced >= Duration::from_secs(40), "Unknown after only {advanced:?}");
    eventually("the unreachable taints", || async {
        let n = node(&client, "sim-node-1").await?;
        let taints = n["spec"]["taints"].as_array().cloned().unwrap_or_default();
        let has = |effect: &str| taints.iter().any(|t| t["key"] == UNREACHABLE && t["effect"] == effect);
        (has("NoSchedule") && has("NoExecute")).then_some(())
    })
    .await;
    // The other Nodes stay Ready (their kubelets renew their Leases as the clock moves).
    for other in ["sim-node-2", "sim-node-3"] {
        eventually(&format!("{other} Ready"), || async {
            let n = node(&client, other).await?;
            (condition(&n, "Ready")["status"] == "True" && taint_keys(&n).is_empty()).then_some(())
        })
        .await;
    }
    wait_ready(&client, &[("web-a", false), ("web-b", false), ("web-c", true)]).await;

    sim.start_node("sim-node-1");
    wait_node_recovered(&client).await;
    wait_ready(&client, &[("web-a", true), ("web-b", true), ("web-c", true)]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_reporting_not_ready_makes_its_node_and_pods_unready_until_it_recovers() {
    let (sim, client) = start().await;
    sim.set_node_ready("sim-node-1", false);
    let n = eventually("sim-node-1 Ready=False", || async {
        let n = node(&client, "sim-node-1").await?;
        (condition(&n, "Ready")["status"] == "False").then_some(n)
    })
    .await;
    assert_eq!(condition(&n, "Ready")["reason"], "KubeletNotReady");
    eventually("the not-ready taint", || async {
        let n = node(&client, "sim-node-1").await?;
        taint_keys(&n).iter().any(|k| k == NOT_READY).then_some(())
    })
    .await;
    wait_ready(&client, &[("web-a", false), ("web-b", false), ("web-c", true)]).await;

    sim.set_node_ready("sim-node-1", true);
    wait_node_recovered(&client).await;
    wait_ready(&client, &[("web-a", true), ("web-b", true), ("web-c", true)]).await;
}
