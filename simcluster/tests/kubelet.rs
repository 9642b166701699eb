//! The scheduler and kubelet simulation, through a kube-rs client: every failure mode a Pod
//! spec can ask for, with the exact status fields and Events a real cluster shows, and the
//! scheduler's unschedulable verdicts. Each test waits with a deadline for the state it
//! asserts (never a fixed sleep).

use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, Pod, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use simcluster::nodes::Nodes;
use simcluster::state::{NodeConfig, Timing};
use simcluster::{Config, SimCluster};
use std::path::PathBuf;

const DEADLINE: Duration = Duration::from_secs(60);

/// The server a test runs against: simcluster with its own Node simulation, or a real control
/// plane (`realkube`) with the same simulation as its client ([`simcluster::nodes`]).
enum Cluster {
    Sim(SimCluster),
    Real { scripts: PathBuf, dir: tempfile::TempDir, nodes: Option<Nodes> },
}

impl Cluster {
    /// The emulator (for its clock: tests that need it run on simcluster only).
    fn sim(&self) -> &SimCluster {
        match self {
            Cluster::Sim(sim) => sim,
            Cluster::Real { .. } => panic!("this test needs simcluster's clock"),
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Cluster::Real { scripts, dir, nodes } = self {
            drop(nodes.take());
            let _ = std::process::Command::new(scripts.join("down")).arg(dir.path()).output();
        }
    }
}

/// realkube's scripts (`KSYNC_REALKUBE_DIR`, default `../shared/realkube`; `scripts/test` leaves
/// the `realkube` tests out, saying so, where there is none).
fn realkube() -> PathBuf {
    let scripts = std::env::var_os("KSYNC_REALKUBE_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/realkube"), PathBuf::from);
    assert!(scripts.join("up").is_file(), "no realkube at {} (set KSYNC_REALKUBE_DIR)", scripts.display());
    scripts
}

/// Each test as `NAME::simcluster` and `NAME::realkube`: the same Pods through the same
/// simulation, on the emulator and as a client of the real control plane, whose own
/// controllers (Deployments, Jobs, EndpointSlices, the node lifecycle) then read what the
/// simulated kubelet wrote.
macro_rules! both {
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn simcluster() {
                super::$name(false).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn realkube() {
                super::$name(true).await;
            }
        }
    )+};
}

async fn start(real: bool, config: Config) -> (Cluster, kube::Client) {
    let want = config.nodes.len();
    let (cluster, client) = if real {
        let scripts = realkube();
        let dir = tempfile::Builder::new().prefix("kubelet-realkube-").tempdir().expect("temp dir");
        let up = simcluster::realkube::up(&scripts, dir.path()).expect("realkube up");
        assert!(up.status.success(), "realkube did not start: {}", String::from_utf8_lossy(&up.stderr));
        let kc = kube::config::Kubeconfig::read_from(dir.path().join("kubeconfig")).unwrap();
        let kc = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap();
        let client = kube::Client::try_from(kc).unwrap();
        let nodes = Nodes::start(client.clone(), config, true).await.expect("simulated Nodes");
        (Cluster::Real { scripts, dir, nodes: Some(nodes) }, client)
    } else {
        let sim = SimCluster::start(config, 0).await.unwrap();
        let client = sim.client().await.unwrap();
        (Cluster::Sim(sim), client)
    };
    // The Nodes are registered Ready and lose their not-ready taint.
    let nodes: Api<Node> = Api::all(client.clone());
    eventually("Nodes ready and untainted", || async {
        let list = nodes.list(&ListParams::default()).await.ok()?;
        let ok = list
            .items
            .iter()
            .filter(|n| {
                let v = serde_json::to_value(n).unwrap();
                let taints = v["spec"]["taints"].as_array().cloned().unwrap_or_default();
                !taints.iter().any(|t| t["key"] == "node.kubernetes.io/not-ready")
            })
            .count();
        (ok >= want).then_some(())
    })
    .await;
    (cluster, client)
}

/// Poll `f` every 50 ms until it gives a value, failing after [`DEADLINE`].
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
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn create_pod(client: &kube::Client, pod: Value) -> Value {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let p: Pod = serde_json::from_value(pod).unwrap();
    serde_json::to_value(pods.create(&PostParams::default(), &p).await.unwrap()).unwrap()
}

/// Wait until the Pod satisfies `pred`; the Pod as JSON.
async fn wait_pod(client: &kube::Client, name: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    eventually(&format!("pod {name}: {what}"), || async {
        let p = serde_json::to_value(pods.get(name).await.ok()?).unwrap();
        pred(&p).then_some(p)
    })
    .await
}

fn condition<'a>(pod: &'a Value, type_: &str) -> &'a Value {
    pod["status"]["conditions"].as_array().and_then(|cs| cs.iter().find(|c| c["type"] == type_)).unwrap_or(&Value::Null)
}

fn container<'a>(pod: &'a Value, name: &str) -> &'a Value {
    pod["status"]["containerStatuses"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == name))
        .unwrap_or(&Value::Null)
}

fn running_and_ready(p: &Value) -> bool {
    p["status"]["phase"] == "Running" && condition(p, "Ready")["status"] == "True"
}

/// Events about the object `name`, as (type, reason, message, source component).
async fn events(client: &kube::Client, name: &str) -> Vec<(String, String, String, String)> {
    let api: Api<Event> = Api::namespaced(client.clone(), "default");
    let list = api.list(&ListParams::default().fields(&format!("involvedObject.name={name}"))).await.unwrap();
    list.items
        .into_iter()
        .map(|e| {
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default(),
                e.source.and_then(|s| s.component).unwrap_or_default(),
            )
        })
        .collect()
}

/// Wait for an Event about `name` with this reason whose message starts with `prefix`.
async fn wait_event(client: &kube::Client, name: &str, type_: &str, reason: &str, prefix: &str) -> String {
    eventually(&format!("event {reason} '{prefix}' about {name}"), || async {
        events(client, name)
            .await
            .into_iter()
            .find(|(t, r, m, _)| t == type_ && r == reason && m.starts_with(prefix))
            .map(|(_, _, m, _)| m)
    })
    .await
}

fn pod(name: &str, container: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"containers": [container]}})
}

async fn a_pod_starts_with_the_kubelet_events_and_status(real: bool) {
    let (_sim, client) = start(real, Config::default()).await;
    create_pod(&client, pod("web", json!({"name": "app", "image": "registry.example.com/web:1.0"}))).await;
    let p = wait_pod(&client, "web", "running and ready", running_and_ready).await;
    let node = p["spec"]["nodeName"].as_str().unwrap().to_string();
    let types: Vec<&str> =
        p["status"]["conditions"].as_array().unwrap().iter().map(|c| c["type"].as_str().unwrap()).collect();
    for t in ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"] {
        assert!(types.contains(&t), "condition {t} in {types:?}");
        assert_eq!(condition(&p, t)["status"], "True");
    }
    let c = container(&p, "app");
    assert_eq!(c["ready"], true);
    assert_eq!(c["started"], true);
    assert_eq!(c["restartCount"], 0);
    assert_eq!(c["lastState"], json!({}));
    assert!(c["state"]["running"]["startedAt"].is_string());
    assert!(c["containerID"].as_str().unwrap().starts_with("containerd://"));
    assert!(c["imageID"].as_str().unwrap().starts_with("registry.example.com/web@sha256:"));
    let index: usize = node.trim_start_matches("sim-node-").parse().unwrap();
    assert_eq!(p["status"]["hostIP"], format!("172.18.0.{}", index + 1));
    assert_eq!(p["status"]["hostIPs"], json!([{"ip": p["status"]["hostIP"]}]));
    assert!(p["status"]["podIP"].as_str().unwrap().starts_with(&format!("10.244.{index}.")));
    assert_eq!(p["status"]["qosClass"], "BestEffort");
    assert!(p["status"]["startTime"].is_string());

    assert_eq!(
        wait_event(&client, "web", "Normal", "Scheduled", "").await,
        format!("Successfully assigned default/web to {node}")
    );
    wait_event(&client, "web", "Normal", "Pulling", "Pulling image \"registry.example.com/web:1.0\"").await;
    let pulled = wait_event(&client, "web", "Normal", "Pulled", "").await;
    assert!(pulled.starts_with("Successfully pulled image \"registry.example.com/web:1.0\" in "), "{pulled}");
    wait_event(&client, "web", "Normal", "Created", "Created container: app").await;
    wait_event(&client, "web", "Normal", "Started", "Started container app").await;

    // Deletion: Killing, then the Pod is gone.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.delete("web", &DeleteParams::default()).await.unwrap();
    wait_event(&client, "web", "Normal", "Killing", "Stopping container app").await;
    eventually("pod deleted", || async { pods.get_opt("web").await.unwrap().is_none().then_some(()) }).await;
}

async fn an_image_that_cannot_be_pulled_goes_to_image_pull_back_off(real: bool) {
    let (_sim, client) = start(real, Config::default()).await;
    create_pod(&client, pod("nopull", json!({"name": "app", "image": "registry.invalid/app:1"}))).await;
    let p = wait_pod(&client, "nopull", "ImagePullBackOff", |p| {
        container(p, "app")["state"]["waiting"]["reason"] == "ImagePullBackOff"
    })
    .await;
    let c = container(&p, "app");
    assert!(
        c["state"]["waiting"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Back-off pulling image \"registry.invalid/app:1\": ErrImagePull: rpc error: code = NotFound")
    );
    assert_eq!(c["ready"], false);
    assert_eq!(c["started"], false);
    assert_eq!(c["imageID"], "");
    assert_eq!(p["status"]["phase"], "Pending");
    assert_eq!(condition(&p, "Ready")["reason"], "ContainersNotReady");
    assert_eq!(condition(&p, "Ready")["message"], "containers with unready status: [app]");

    let failed = wait_event(&client, "nopull", "Warning", "Failed", "Failed to pull image").await;
    assert!(
        failed.starts_with("Failed to pull image \"registry.invalid/app:1\": rpc error: code = NotFound"),
        "{failed}"
    );
    wait_event(&client, "nopull", "Warning", "Failed", "Error: ErrImagePull").await;
    assert_eq!(
        wait_event(&client, "nopull", "Normal", "BackOff", "").await,
        "Back-off pulling image \"registry.invalid/app:1\""
    );
    wait_event(&client, "nopull", "Warning", "Failed", "Error: ImagePullBackOff").await;
}

async fn a_crashing_container_goes_to_crash_loop_back_off(real: bool) {
    let (_sim, client) = start(real, Config::default()).await;
    let mut p = pod(
        "crash",
        json!({"name": "app", "image": "registry.example.com/app:1",
               "env": [{"name": "SIMCLUSTER_EXIT_CODE", "value": "3"}, {"name": "SIMCLUSTER_RUN_MS", "value": "100"}]}),
    );
    p["metadata"]["annotations"] = json!({"simcluster.kuvryn.io/backoff-ms": "300"});
    let created = create_pod(&client, p).await;
    let uid = created["metadata"]["uid"].as_str().unwrap().to_string();
    let p = wait_pod(&client, "crash", "CrashLoopBackOff with 2 restarts", |p| {
        let c = container(p, "app");
        c["state"]["waiting"]["reason"] == "CrashLoopBackOff" && c["restartCount"].as_i64() >= Some(2)
    })
    .await;
    let c = container(&p, "app");
    let message = c["state"]["waiting"]["message"].as_str().unwrap();
    assert!(message.starts_with("back-off "), "{message}");
    assert!(message.ends_with(&format!(" restarting failed container=app pod=crash_default({uid})")), "{message}");
    let last = &c["lastState"]["terminated"];
    assert_eq!(last["exitCode"], 3);
    assert_eq!(last["reason"], "Error");
    assert!(last["startedAt"].is_string() && last["finishedAt"].is_string());
    assert!(last["containerID"].as_str().unwrap().starts_with("containerd://"));
    assert_eq!(c["ready"], false);
    assert_eq!(p["status"]["phase"], "Running");
    assert_eq!(
        wait_event(&client, "crash", "Warning", "BackOff", "").await,
        format!("Back-off restarting failed container app in pod crash_default({uid})")
    );
    // The restart count keeps growing.
    wait_pod(&client, "crash", "restartCount 3", |p| container(p, "app")["restartCount"].as_i64() >= Some(3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advancing_the_clock_skips_a_long_back_off() {
    let (sim, client) = start(false, Config::default()).await;
    let mut p = pod(
        "slowcrash",
        json!({"name": "app", "image": "registry.example.com/app:1",
               "env": [{"name": "SIMCLUSTER_EXIT_CODE", "value": "1"}, {"name": "SIMCLUSTER_RUN_MS", "value": "50"}]}),
    );
    p["metadata"]["annotations"] =
        json!({"simcluster.kuvryn.io/backoff-ms": "60000", "simcluster.kuvryn.io/backoff-max-ms": "600000"});
    create_pod(&client, p).await;
    let p = wait_pod(&client, "slowcrash", "CrashLoopBackOff", |p| {
        container(p, "app")["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    })
    .await;
    let c = container(&p, "app");
    assert_eq!(c["restartCount"], 1);
    assert!(
        c["state"]["waiting"]["message"].as_str().unwrap().starts_with("back-off 1m0s restarting failed container=app")
    );
    sim.sim().advance_clock(Duration::from_secs(61));
    let p = wait_pod(&client, "slowcrash", "second back-off", |p| {
        let c = container(p, "app");
        c["restartCount"] == 2 && c["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    })
    .await;
    assert!(
        container(&p, "app")["state"]["waiting"]["message"]
            .as_str()
            .unwrap()
            .starts_with("back-off 2m0s restarting failed container=app")
    );
}

async fn an_oom_killed_container_terminates_with_137(real: bool) {
    let (_sim, client) = start(real, Config::default()).await;
    let mut p = pod(
        "oom",
        json!({"name": "app", "image": "registry.example.com/app:1", "env": [{"name": "SIMCLUSTER_OOM_KILLED", "value": "true"}]}),
    );
    p["spec"]["restartPolicy"] = json!("Never");
    create_pod(&client, p).await;
    let p = wait_pod(&client, "oom", "Failed", |p| p["status"]["phase"] == "Failed").await;
    let t = &container(&p, "app")["state"]["terminated"];
    assert_eq!(t["reason"], "OOMKilled");
    assert_eq!(t["exitCode"], 137);
    assert_eq!(condition(&p, "Ready")["reason"], "PodCompleted");
    assert_eq!(condition(&p, "PodReadyToStartContainers")["status"], "False");
}

async fn a_missing_configmap_is_a_create_container_config_error_until_it_exists(real: bool) {
    let (_sim, client) = start(real, Config::default()).await;
    create_pod(
        &client,
        pod(
            "cfg",
            json!({"name": "app", "image": "registry.example.com/app:1",
                   "env": [{"name": "LEVEL", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "level"}}}]}),
        ),
    )
    .await;
    let p = wait_pod(&client, "cfg", "CreateContainerConfigError", |p| {
        container(p, "app")["state"]["waiting"]["reason"] == "CreateContainerConfigError"
    })
    .await;
    assert_eq!(container(&p, "app")["state"]["waiting"]["message"], "configmap \"settings\" not found");
    assert_eq!(p["status"]["phase"], "Pending");
    wait_event(&client, "cfg", "Warning", "Failed", "Error: configmap \"settings\" not found").await;

    // The ConfigMap without the key: a missing key.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "settings"}, "data": {"other": "x"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    wait_pod(&client, "cfg", "missing key", |p| {
        container(p, "app")["state"]["waiting"]["message"] == "couldn't find key level in ConfigMap default/settings"
    })
    .await;
    // With the key: the Pod starts.
    let patch = json!({"data": {"level": "debug"}});
    cms.patch("settings", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    wait_pod(&client, "cfg", "running and ready", running_and_ready).await;
}

async fn a_missing_secret_volume_fails_to_mount_until_it_exists(real: bool) {
    let (_sim, client) = start(real, Config::default()).await;
    let mut p = pod("mount", json!({"name": "app", "image": "registry.example.com/app:1"}));
    p["spec"]["volumes"] = json!([{"name": "creds", "secret": {"secretName": "db-creds"}}]);
    create_pod(&client, p).await;
    wait_event(
        &client,
        "mount",
        "Warning",
        "FailedMount",
        "MountVolume.SetUp failed for volume \"creds\" : secret \"db-creds\" not found",
    )
    .await;
    let p = wait_pod(&client, "mount", "ContainerCreating", |p| {
        container(p, "app")["state"]["waiting"]["reason"] == "ContainerCreating"
    })
    .await;
    assert_eq!(p["status"]["phase"], "Pending");
    assert_eq!(container(&p, "app")["started"], false);

    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let s: Secret =
        serde_json::from_value(json!({"metadata": {"name": "db-creds"}, "stringData": {"password": "x"}})).unwrap();
    secrets.create(&PostParams::default(), &s).await.unwrap();
    wait_pod(&client, "mount", "running and ready", running_and_ready).await;
}

async fn endpoints_follow_readiness(real: bool) {
    let (_sim, client) = start(real, Config::default()).await;
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let svc: Service = serde_json::from_value(json!({"metadata": {"name": "mixed"},
        "spec": {"selector": {"app": "mixed"}, "ports": [{"port": 80, "targetPort": 8080}]}}))
    .unwrap();
    services.create(&PostParams::default(), &svc).await.unwrap();
    let probe = json!({"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1});
    for (name, ready) in [("good", true), ("bad", false)] {
        let mut c = json!({"name": "app", "image": "registry.example.com/app:1", "ports": [{"containerPort": 8080}],
                           "readinessProbe": probe});
        if !ready {
            c["env"] = json!([{"name": "SIMCLUSTER_READY", "value": "false"}]);
        }
        let mut p = pod(name, c);
        p["metadata"]["labels"] = json!({"app": "mixed"});
        create_pod(&client, p).await;
    }
    wait_pod(&client, "good", "ready", running_and_ready).await;
    let bad = wait_pod(&client, "bad", "running", |p| container(p, "app")["started"] == true).await;
    assert_eq!(bad["status"]["phase"], "Running");
    assert_eq!(condition(&bad, "Ready")["status"], "False");
    assert_eq!(condition(&bad, "Ready")["message"], "containers with unready status: [app]");
    assert_eq!(condition(&bad, "ContainersReady")["reason"], "ContainersNotReady");
    wait_event(
        &client,
        "bad",
        "Warning",
        "Unhealthy",
        "Readiness probe failed: HTTP probe failed with statuscode: 503",
    )
    .await;

    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    let endpoints = eventually("an EndpointSlice with both Pods", || async {
        let list = slices.list(&ListParams::default().labels("kubernetes.io/service-name=mixed")).await.ok()?;
        let eps: Vec<Value> = list
            .items
            .iter()
            .flat_map(|s| serde_json::to_value(s).unwrap()["endpoints"].as_array().cloned().unwrap_or_default())
            .collect();
        (eps.len() == 2).then_some(eps)
    })
    .await;
    let by_pod = |n: &str| endpoints.iter().find(|e| e["targetRef"]["name"] == n).unwrap().clone();
    assert_eq!(by_pod("good")["conditions"]["ready"], true);
    assert_eq!(by_pod("bad")["conditions"]["ready"], false);
}

async fn wait_unschedulable(client: &kube::Client, name: &str, message: &str) {
    let p = wait_pod(client, name, &format!("unschedulable: {message}"), |p| {
        condition(p, "PodScheduled")["message"] == message
    })
    .await;
    let c = condition(&p, "PodScheduled");
    assert_eq!(c["status"], "False");
    assert_eq!(c["reason"], "Unschedulable");
    assert_eq!(p["status"]["phase"], "Pending");
    assert!(p["spec"]["nodeName"].is_null());
    let found = eventually("FailedScheduling event", || async {
        events(client, name)
            .await
            .into_iter()
            .find(|(t, r, m, _)| t == "Warning" && r == "FailedScheduling" && m == message)
    })
    .await;
    assert_eq!(found.3, "default-scheduler");
}

async fn too_large_requests_are_unschedulable_until_a_node_fits(real: bool) {
    let nodes = NodeConfig::defaults(3).into_iter().map(|n| NodeConfig { cpu: "2".into(), ..n }).collect();
    let (_sim, client) = start(real, Config { nodes, ..Default::default() }).await;
    create_pod(
        &client,
        pod(
            "big",
            json!({"name": "app", "image": "registry.example.com/app:1", "resources": {"requests": {"cpu": "3"}}}),
        ),
    )
    .await;
    wait_unschedulable(&client, "big", "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.").await;

    // A large Node appears (registered by hand, as a real kubelet would).
    let nodes: Api<Node> = Api::all(client.clone());
    let n: Node = serde_json::from_value(json!({"metadata": {"name": "big-node", "labels": {"kubernetes.io/hostname": "big-node"}},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}, "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}]}}))
    .unwrap();
    nodes.create(&PostParams::default(), &n).await.unwrap();
    let p = wait_pod(&client, "big", "scheduled", |p| p["spec"]["nodeName"] == "big-node").await;
    assert_eq!(condition(&p, "PodScheduled")["status"], "True");
    wait_event(&client, "big", "Normal", "Scheduled", "Successfully assigned default/big to big-node").await;
}

async fn an_unmatched_node_selector_is_unschedulable_until_a_node_is_labelled(real: bool) {
    let (_sim, client) = start(real, Config::default()).await;
    let mut p = pod("picky", json!({"name": "app", "image": "registry.example.com/app:1"}));
    p["spec"]["nodeSelector"] = json!({"disk": "ssd"});
    create_pod(&client, p).await;
    wait_unschedulable(&client, "picky", "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.").await;

    let nodes: Api<Node> = Api::all(client.clone());
    let patch = json!({"metadata": {"labels": {"disk": "ssd"}}});
    nodes.patch("sim-node-2", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let p = wait_pod(&client, "picky", "running on sim-node-2", running_and_ready).await;
    assert_eq!(p["spec"]["nodeName"], "sim-node-2");
}

async fn an_untolerated_taint_is_unschedulable_until_removed(real: bool) {
    let taint = json!({"key": "dedicated", "value": "batch", "effect": "NoSchedule"});
    let nodes = NodeConfig::defaults(3).into_iter().map(|n| NodeConfig { taints: vec![taint.clone()], ..n }).collect();
    let (_sim, client) = start(real, Config { nodes, ..Default::default() }).await;
    create_pod(&client, pod("plain", json!({"name": "app", "image": "registry.example.com/app:1"}))).await;
    wait_unschedulable(&client, "plain", "0/3 nodes are available: 3 node(s) had untolerated taint {dedicated: batch}. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.").await;

    // A Pod that tolerates it is scheduled.
    let mut tolerant = pod("tolerant", json!({"name": "app", "image": "registry.example.com/app:1"}));
    tolerant["spec"]["tolerations"] =
        json!([{"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"}]);
    create_pod(&client, tolerant).await;
    wait_pod(&client, "tolerant", "running", running_and_ready).await;

    let api: Api<Node> = Api::all(client.clone());
    let patch = json!({"spec": {"taints": null}});
    api.patch("sim-node-3", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let p = wait_pod(&client, "plain", "running on sim-node-3", running_and_ready).await;
    assert_eq!(p["spec"]["nodeName"], "sim-node-3");
}

async fn pods_of_another_scheduler_are_left_alone(real: bool) {
    let (_sim, client) = start(real, Config::default()).await;
    let mut other = pod("other", json!({"name": "app", "image": "registry.example.com/app:1"}));
    other["spec"]["schedulerName"] = json!("my-scheduler");
    create_pod(&client, other).await;
    // A Pod created after it is scheduled: the scheduler has looked at both.
    create_pod(&client, pod("mine", json!({"name": "app", "image": "registry.example.com/app:1"}))).await;
    wait_pod(&client, "mine", "scheduled", |p| p["spec"]["nodeName"].is_string()).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let other = serde_json::to_value(pods.get("other").await.unwrap()).unwrap();
    assert!(other["spec"]["nodeName"].is_null());
    assert!(other["status"]["conditions"].is_null(), "{}", other["status"]);
    assert!(events(&client, "other").await.is_empty());
}

async fn cordoned_nodes_are_unschedulable(real: bool) {
    let (_sim, client) = start(real, Config::default()).await;
    let nodes: Api<Node> = Api::all(client.clone());
    for n in ["sim-node-1", "sim-node-2", "sim-node-3"] {
        nodes.cordon(n).await.unwrap();
    }
    create_pod(&client, pod("cordoned", json!({"name": "app", "image": "registry.example.com/app:1"}))).await;
    wait_unschedulable(&client, "cordoned", "0/3 nodes are available: 3 node(s) were unschedulable. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.").await;
    nodes.uncordon("sim-node-1").await.unwrap();
    let p = wait_pod(&client, "cordoned", "running on sim-node-1", running_and_ready).await;
    assert_eq!(p["spec"]["nodeName"], "sim-node-1");
}

async fn a_missing_claim_is_unschedulable(real: bool) {
    let (_sim, client) = start(real, Config::default()).await;
    let mut p = pod("claims", json!({"name": "app", "image": "registry.example.com/app:1"}));
    p["spec"]["volumes"] = json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]);
    create_pod(&client, p).await;
    wait_unschedulable(&client, "claims", "0/3 nodes are available: persistentvolumeclaim \"data\" not found. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.").await;
}

async fn wait_job(client: &kube::Client, name: &str, condition_type: &str) -> Value {
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    eventually(&format!("job {name} {condition_type}"), || async {
        let j = serde_json::to_value(jobs.get(name).await.ok()?).unwrap();
        let done = j["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == condition_type && c["status"] == "True"));
        done.then_some(j)
    })
    .await
}

fn job(name: &str, env: Value) -> Job {
    serde_json::from_value(json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"backoffLimit": 1, "template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "main", "image": "registry.example.com/batch:1.0", "env": env}]}}}}))
    .unwrap()
}

async fn a_job_completes(real: bool) {
    let (_sim, client) = start(real, Config::default()).await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    jobs.create(&PostParams::default(), &job("ok", json!([]))).await.unwrap();
    let j = wait_job(&client, "ok", "Complete").await;
    assert_eq!(j["status"]["succeeded"], 1);
    assert!(j["status"]["completionTime"].is_string());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let list = pods.list(&ListParams::default().labels("batch.kubernetes.io/job-name=ok")).await.unwrap();
    let p = serde_json::to_value(&list.items[0]).unwrap();
    assert_eq!(p["status"]["phase"], "Succeeded");
    let t = &container(&p, "main")["state"]["terminated"];
    assert_eq!(t["exitCode"], 0);
    assert_eq!(t["reason"], "Completed");
    assert_eq!(condition(&p, "Ready")["reason"], "PodCompleted");
}

async fn a_job_fails_after_its_backoff_limit(real: bool) {
    let (_sim, client) = start(real, Config::default()).await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    jobs.create(&PostParams::default(), &job("fail", json!([{"name": "SIMCLUSTER_EXIT_CODE", "value": "1"}])))
        .await
        .unwrap();
    let j = wait_job(&client, "fail", "Failed").await;
    assert_eq!(j["status"]["failed"], 2);
    let failed = j["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Failed").unwrap().clone();
    assert_eq!(failed["reason"], "BackoffLimitExceeded");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let list = pods.list(&ListParams::default().labels("batch.kubernetes.io/job-name=fail")).await.unwrap();
    for p in list.items {
        let p = serde_json::to_value(&p).unwrap();
        assert_eq!(p["status"]["phase"], "Failed");
        let t = &container(&p, "main")["state"]["terminated"];
        assert_eq!(t["exitCode"], 1);
        assert_eq!(t["reason"], "Error");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delay_annotation_is_honoured() {
    let (sim, client) = start(false, Config::default()).await;
    let mut p = pod("slow", json!({"name": "app", "image": "registry.example.com/app:1"}));
    p["metadata"]["annotations"] = json!({"simcluster.kuvryn.io/pull-ms": "1500"});
    let t0 = sim.sim().now();
    create_pod(&client, p).await;
    // Bound and pulling: ContainerCreating, not ready.
    let p = wait_pod(&client, "slow", "ContainerCreating", |p| {
        container(p, "app")["state"]["waiting"]["reason"] == "ContainerCreating"
    })
    .await;
    assert_eq!(condition(&p, "Ready")["message"], "containers with unready status: [app]");
    assert_eq!(condition(&p, "PodReadyToStartContainers")["status"], "True");
    let p = wait_pod(&client, "slow", "running and ready", running_and_ready).await;
    assert!(sim.sim().now().as_millisecond() - t0.as_millisecond() >= 1500, "became ready before the pull delay");
    let pulled = wait_event(&client, "slow", "Normal", "Pulled", "").await;
    assert!(pulled.contains(" in 1.5"), "{pulled}");
    let started: jiff::Timestamp =
        container(&p, "app")["state"]["running"]["startedAt"].as_str().unwrap().parse().unwrap();
    assert!(started.as_second() > t0.as_second());
}

async fn init_containers_run_first(real: bool) {
    let (_sim, client) = start(real, Config::default()).await;
    let mut p = pod("init", json!({"name": "app", "image": "registry.example.com/app:1"}));
    p["spec"]["initContainers"] = json!([{"name": "setup", "image": "registry.example.com/setup:1",
                                          "env": [{"name": "SIMCLUSTER_RUN_MS", "value": "2000"}]}]);
    create_pod(&client, p).await;
    let p = wait_pod(&client, "init", "initializing", |p| {
        condition(p, "Initialized")["status"] == "False"
            && p["status"]["initContainerStatuses"][0]["state"]["running"].is_object()
    })
    .await;
    assert_eq!(condition(&p, "Initialized")["reason"], "ContainersNotInitialized");
    assert_eq!(condition(&p, "Initialized")["message"], "containers with incomplete status: [setup]");
    assert_eq!(container(&p, "app")["state"]["waiting"]["reason"], "PodInitializing");
    assert_eq!(p["status"]["phase"], "Pending");
    let p = wait_pod(&client, "init", "running", running_and_ready).await;
    let t = &p["status"]["initContainerStatuses"][0]["state"]["terminated"];
    assert_eq!(t["reason"], "Completed");
    assert_eq!(t["exitCode"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_come_from_the_config() {
    let nodes = vec![
        NodeConfig { name: "small".into(), cpu: "1".into(), memory: "2Gi".into(), pods: 10, ..Default::default() },
        NodeConfig {
            name: "gpu".into(),
            labels: [("accelerator".to_string(), "gpu".to_string())].into(),
            taints: vec![json!({"key": "gpu", "value": "true", "effect": "NoSchedule"})],
            ..Default::default()
        },
    ];
    let sim = SimCluster::start(Config { nodes, timing: Timing::default(), ..Default::default() }, 0).await.unwrap();
    let client = sim.client().await.unwrap();
    let api: Api<Node> = Api::all(client.clone());
    let gpu = eventually("gpu node ready", || async {
        let n = serde_json::to_value(api.get_opt("gpu").await.ok()??).unwrap();
        let taints = n["spec"]["taints"].as_array().cloned().unwrap_or_default();
        (!taints.iter().any(|t| t["key"] == "node.kubernetes.io/not-ready")).then_some(n)
    })
    .await;
    assert_eq!(gpu["metadata"]["labels"]["accelerator"], "gpu");
    assert_eq!(gpu["metadata"]["labels"]["kubernetes.io/hostname"], "gpu");
    assert_eq!(gpu["spec"]["taints"], json!([{"key": "gpu", "value": "true", "effect": "NoSchedule"}]));
    let ready = gpu["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap().clone();
    assert_eq!(ready["status"], "True");
    assert_eq!(ready["reason"], "KubeletReady");
    let small = serde_json::to_value(api.get("small").await.unwrap()).unwrap();
    assert_eq!(small["status"]["allocatable"]["cpu"], "1");
    assert_eq!(small["status"]["allocatable"]["memory"], "2Gi");
    assert_eq!(small["status"]["allocatable"]["pods"], "10");
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(client, "kube-node-lease");
    let lease = leases.get("small").await.unwrap();
    assert_eq!(lease.spec.unwrap().holder_identity.as_deref(), Some("small"));
}

/// Load check (ignored by default; `cargo test -p simcluster --release --test kubelet -- --ignored
/// --nocapture`): 3,000 Pods created at once on 20 Nodes all become Running and Ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn three_thousand_pods_become_ready() {
    let count: usize = std::env::var("SIMCLUSTER_LOAD_PODS").ok().and_then(|v| v.parse().ok()).unwrap_or(3000);
    let nodes = NodeConfig::defaults(20).into_iter().map(|n| NodeConfig { pods: 250, ..n }).collect();
    let (_sim, client) = start(false, Config { nodes, ..Default::default() }).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let t0 = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..8 {
        let pods = pods.clone();
        tasks.spawn(async move {
            for i in (worker..count).step_by(8) {
                let p: Pod = serde_json::from_value(pod(
                    &format!("load-{i}"),
                    json!({"name": "app", "image": "registry.example.com/app:1",
                           "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}),
                ))
                .unwrap();
                pods.create(&PostParams::default(), &p).await.unwrap();
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    let created = t0.elapsed();
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let list = pods.list(&ListParams::default()).await.unwrap();
        let ready = list.items.iter().filter(|p| running_and_ready(&serde_json::to_value(p).unwrap())).count();
        if ready == count {
            break;
        }
        assert!(Instant::now() < deadline, "{ready}/{count} ready after 600 s");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!("{count} Pods: created in {created:?}, all Running and Ready after {:?}", t0.elapsed());
}

both!(
    a_pod_starts_with_the_kubelet_events_and_status,
    an_image_that_cannot_be_pulled_goes_to_image_pull_back_off,
    a_crashing_container_goes_to_crash_loop_back_off,
    an_oom_killed_container_terminates_with_137,
    a_missing_configmap_is_a_create_container_config_error_until_it_exists,
    a_missing_secret_volume_fails_to_mount_until_it_exists,
    endpoints_follow_readiness,
    too_large_requests_are_unschedulable_until_a_node_fits,
    an_unmatched_node_selector_is_unschedulable_until_a_node_is_labelled,
    an_untolerated_taint_is_unschedulable_until_removed,
    pods_of_another_scheduler_are_left_alone,
    cordoned_nodes_are_unschedulable,
    a_missing_claim_is_unschedulable,
    a_job_completes,
    a_job_fails_after_its_backoff_limit,
    init_containers_run_first,
);
