//! Fault injection and the audit log, observed by a kube-rs client.

use std::time::{Duration, Instant};

use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;
use simcluster::faults::{FaultAction, FaultRule};

async fn start() -> (simcluster::SimCluster, Api<ConfigMap>) {
    let sim =
        simcluster::SimCluster::start(simcluster::Config { kubelet: false, ..Default::default() }, 0).await.unwrap();
    let api = Api::namespaced(sim.client().await.unwrap(), "default");
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("target".into());
    api.create(&PostParams::default(), &cm).await.unwrap();
    (sim, api)
}

fn code(e: kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        other => panic!("expected an API error, got {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_faults_fire_the_given_number_of_times() {
    let (sim, api) = start().await;
    sim.add_fault(FaultRule {
        verb: Some("get".into()),
        resource: Some("configmaps".into()),
        name: Some("target".into()),
        action: Some(FaultAction::Status { code: 500 }),
        times: Some(2),
        ..Default::default()
    });
    // 500s are not retried by the client (kube-rs retries 429, 503 and 504 itself).
    assert_eq!(code(api.get("target").await.unwrap_err()), 500);
    assert_eq!(code(api.get("target").await.unwrap_err()), 500);
    api.get("target").await.expect("the third get is served");

    sim.add_fault(FaultRule {
        verb: Some("list".into()),
        action: Some(FaultAction::Status { code: 429 }),
        times: Some(1),
        ..Default::default()
    });
    let raw = reqwest_like_get(&sim, "/api/v1/namespaces/default/configmaps").await;
    assert_eq!(raw.0, 429);
    assert_eq!(raw.1.as_deref(), Some("1"), "429 carries Retry-After");
}

/// A plain HTTP GET: status and Retry-After header.
async fn reqwest_like_get(sim: &simcluster::SimCluster, path: &str) -> (u16, Option<String>) {
    let (status, retry, _) = raw(sim, "GET", path).await;
    (status, retry)
}

/// A plain HTTP request without a body: status, Retry-After header and body.
async fn raw(sim: &simcluster::SimCluster, method: &str, path: &str) -> (u16, Option<String>, String) {
    use std::io::{Read, Write};
    let (addr, path, method) = (sim.addr(), path.to_string(), method.to_string());
    let buf = tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(
            format!("{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .unwrap();
        let mut buf = String::new();
        s.read_to_string(&mut buf).unwrap();
        buf
    })
    .await
    .unwrap();
    let status = buf.split_whitespace().nth(1).unwrap().parse().unwrap();
    let retry =
        buf.lines().find_map(|l| l.to_ascii_lowercase().strip_prefix("retry-after: ").map(|v| v.trim().to_string()));
    let body = buf.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, retry, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retryable_statuses_are_retried_by_kube_rs() {
    let (sim, api) = start().await;
    let rule = |code: u16, times: u32| FaultRule {
        verb: Some("get".into()),
        resource: Some("configmaps".into()),
        name: Some("target".into()),
        action: Some(FaultAction::Status { code }),
        times: Some(times),
        ..Default::default()
    };
    // kube-rs honours Retry-After (1 s) on a 429, then gets the object.
    sim.add_fault(rule(429, 1));
    let t = Instant::now();
    api.get("target").await.expect("served after the 429");
    assert!(t.elapsed() >= Duration::from_millis(900), "the client waited for Retry-After: {:?}", t.elapsed());
    // 503 and 504 are retried too, until the rules are used up.
    sim.add_fault(rule(503, 2));
    api.get("target").await.expect("served after two 503s");
    sim.add_fault(rule(504, 2));
    api.get("target").await.expect("served after two 504s");
    // A client that does not retry sees them.
    for code in [503, 504] {
        sim.add_fault(rule(code, 1));
        assert_eq!(raw(&sim, "GET", "/api/v1/namespaces/default/configmaps/target").await.0, code);
    }
    assert_eq!(raw(&sim, "GET", "/api/v1/namespaces/default/configmaps/target").await.0, 200);
}

/// Wait (polling every 100 ms, at most `secs` seconds) until `f` gives a value.
async fn wait_for<T, F: std::future::Future<Output = Option<T>>>(secs: u64, what: &str, mut f: impl FnMut() -> F) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out after {secs} s waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_pod_is_replaced_by_its_deployment() {
    let sim = simcluster::SimCluster::start(simcluster::Config::default(), 0).await.unwrap();
    let client = sim.client().await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let d: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "app", "image": "registry.example.com/web:1.0"}]}}}
    }))
    .unwrap();
    deployments.create(&PostParams::default(), &d).await.unwrap();
    let running = |pods: Api<Pod>| async move {
        let list = pods.list(&ListParams::default().labels("app=web")).await.ok()?.items;
        let p = list.into_iter().find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))?;
        Some((p.metadata.name.clone()?, p.metadata.uid.clone()?))
    };
    let (name, uid) = wait_for(60, "a running Pod", || running(pods.clone())).await;

    let (code, _, body) = raw(&sim, "POST", &format!("/simcluster/v1/pods/default/{name}/kill")).await;
    assert_eq!(code, 200, "{body}");
    assert!(pods.get_opt(&name).await.unwrap().is_none(), "the Pod is gone at once");
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let killed = events.list(&ListParams::default()).await.unwrap().items;
    let killed = killed
        .iter()
        .find(|e| e.involved_object.uid.as_deref() == Some(&uid) && e.reason.as_deref() == Some("Killing"))
        .expect("a Killing Event");
    assert_eq!(killed.type_.as_deref(), Some("Warning"));
    assert_eq!(killed.source.as_ref().and_then(|s| s.component.as_deref()), Some("kubelet"));

    let (new_name, new_uid) = wait_for(60, "a replacement Pod", || {
        let pods = pods.clone();
        let uid = uid.clone();
        async move { running(pods).await.filter(|(_, u)| *u != uid) }
    })
    .await;
    assert_ne!(new_name, name);
    assert_ne!(new_uid, uid);

    // Killing a Pod that does not exist is a 404 with a Status body.
    let (code, _, body) = raw(&sim, "POST", "/simcluster/v1/pods/default/nothing/kill").await;
    assert_eq!(code, 404);
    assert!(body.contains(r#"pods \"nothing\" not found"#), "{body}");
    // The library call acts the same way.
    sim.kill_pod("default", &new_name).await.expect("killed");
    assert!(pods.get_opt(&new_name).await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_fault_endpoints_answer() {
    let sim =
        simcluster::SimCluster::start(simcluster::Config { kubelet: false, ..Default::default() }, 0).await.unwrap();
    for action in ["stop", "start", "not-ready", "ready"] {
        let (code, _, body) = raw(&sim, "POST", &format!("/simcluster/v1/nodes/sim-node-1/{action}")).await;
        assert_eq!(code, 200, "{action}: {body}");
    }
    assert_eq!(raw(&sim, "POST", "/simcluster/v1/nodes/sim-node-1/reboot").await.0, 404);
}

/// A Node as its kubelet registers it, Ready, with a heartbeat.
fn node(name: &str, heartbeat: &str) -> Node {
    let cond = |t: &str, s: &str, r: &str| {
        json!({"type": t, "status": s, "reason": r, "message": r,
                                                   "lastHeartbeatTime": heartbeat, "lastTransitionTime": "2026-01-01T00:00:00Z"})
    };
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"conditions": [cond("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                                  cond("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                                  cond("PIDPressure", "False", "KubeletHasSufficientPID"),
                                  cond("Ready", "True", "KubeletReady")]}
    }))
    .unwrap()
}

fn micro(secs: u64) -> String {
    jiff::Timestamp::from_second(1_767_225_600 + secs as i64).unwrap().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// Create (or renew) a Node's Lease with renewTime `secs` after 2026-01-01.
async fn renew(leases: &Api<Lease>, name: &str, secs: u64) {
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name},
                       "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": micro(secs)}});
    leases.patch(name, &PatchParams::apply("kubelet").force(), &Patch::Apply(&lease)).await.unwrap();
}

fn ready_status(node: &Node) -> String {
    let c = node.status.as_ref().and_then(|s| s.conditions.as_ref());
    c.and_then(|cs| cs.iter().find(|c| c.type_ == "Ready")).map(|c| c.status.clone()).unwrap_or_default()
}

fn taints(node: &Node) -> Vec<(String, String)> {
    let t = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
    t.into_iter().map(|t| (t.key, t.effect)).collect()
}

/// A Pod bound to `node`, reported Running and Ready.
async fn running_pod(pods: &Api<Pod>, name: &str, node: &str) {
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "registry.example.com/app:1"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let cond = |t: &str| json!({"type": t, "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"});
    let status = json!({"status": {"phase": "Running", "conditions": [cond("Initialized"), cond("Ready"), cond("ContainersReady")]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
}

fn pod_ready(p: &Pod) -> Option<String> {
    let cs = p.status.as_ref()?.conditions.as_ref()?;
    cs.iter().find(|c| c.type_ == "Ready").map(|c| c.status.clone())
}

async fn event_reasons(client: &kube::Client, ns: &str, name: &str) -> Vec<(String, String)> {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let list = events.list(&ListParams::default()).await.unwrap().items;
    list.into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

/// With the kubelet simulation off, the test plays two kubelets: `node-a` keeps renewing its
/// Lease while the clock advances, `node-b` is stopped. After 50 s of the simulation's clock
/// without renewal `node-b` is Unknown, tainted unreachable (NoSchedule and, since another Node
/// is Ready, NoExecute), its Pod not Ready, with the NodeNotReady Events, and evicted 300 s
/// later; once its kubelet is back (Lease renewed, Ready posted), the taints go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_stops_renewing_its_lease_becomes_unknown() {
    let sim =
        simcluster::SimCluster::start(simcluster::Config { kubelet: false, ..Default::default() }, 0).await.unwrap();
    let client = sim.client().await.unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for name in ["node-a", "node-b"] {
        nodes.create(&PostParams::default(), &node(name, "2026-01-01T00:00:00Z")).await.unwrap();
        renew(&leases, name, 0).await;
    }
    running_pod(&pods, "on-b", "node-b").await;
    // The taint from admission goes once the controller has seen the Nodes Ready.
    for name in ["node-a", "node-b"] {
        wait_for(30, "the not-ready taint removed", || {
            let nodes = nodes.clone();
            async move { taints(&nodes.get(name).await.ok()?).is_empty().then_some(()) }
        })
        .await;
    }
    sim.stop_node("node-b");

    // node-a renews every 5 s of the clock; node-b does not.
    let mut renewals = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        renewals += 5;
        renew(&leases, "node-a", renewals).await;
        sim.advance_clock(Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(50)).await;
        if ready_status(&nodes.get("node-b").await.unwrap()) == "Unknown" {
            break;
        }
        assert!(Instant::now() < deadline, "node-b did not become Unknown");
    }
    assert!(renewals >= 50, "not before the grace period: {renewals} s");
    let b = nodes.get("node-b").await.unwrap();
    let conditions = b.status.clone().unwrap().conditions.unwrap();
    for c in &conditions {
        assert_eq!(c.status, "Unknown", "{c:?}");
        assert_eq!(c.reason.as_deref(), Some("NodeStatusUnknown"));
        assert_eq!(c.message.as_deref(), Some("Kubelet stopped posting node status."));
    }
    assert_eq!(ready_status(&nodes.get("node-a").await.unwrap()), "True");

    let unreachable = |effect: &str| ("node.kubernetes.io/unreachable".to_string(), effect.to_string());
    let b = wait_for(30, "the unreachable taints", || {
        let nodes = nodes.clone();
        async move {
            let b = nodes.get("node-b").await.ok()?;
            let t = taints(&b);
            (t.contains(&unreachable("NoSchedule")) && t.contains(&unreachable("NoExecute"))).then_some(b)
        }
    })
    .await;
    assert_eq!(taints(&b).len(), 2, "{:?}", taints(&b));
    assert!(taints(&nodes.get("node-a").await.unwrap()).is_empty());

    let p = pods.get("on-b").await.unwrap();
    assert_eq!(pod_ready(&p).as_deref(), Some("False"), "MarkPodsNotReady");
    assert!(
        event_reasons(&client, "default", "on-b").await.contains(&("NodeNotReady".into(), "Node is not ready".into()))
    );
    assert!(
        event_reasons(&client, "default", "node-b")
            .await
            .contains(&("NodeNotReady".into(), "Node node-b status is now: NodeNotReady".into()))
    );

    // Five minutes later (node-a still renewing), the taint-eviction-controller deletes the Pod:
    // its default toleration of `unreachable:NoExecute` is 300 s.
    let until = renewals + 305;
    while renewals < until {
        renewals += 5;
        renew(&leases, "node-a", renewals).await;
        sim.advance_clock(Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let evicted = wait_for(30, "the Pod evicted", || {
        let pods = pods.clone();
        async move { pods.get("on-b").await.ok().filter(|p| p.metadata.deletion_timestamp.is_some()) }
    })
    .await;
    let cs = evicted.status.unwrap().conditions.unwrap();
    let target = cs.iter().find(|c| c.type_ == "DisruptionTarget").expect("DisruptionTarget");
    assert_eq!(target.reason.as_deref(), Some("DeletionByTaintManager"));
    assert!(
        event_reasons(&client, "default", "on-b")
            .await
            .contains(&("TaintManagerEviction".into(), "Marking for deletion Pod default/on-b".into()))
    );
    assert_eq!(ready_status(&nodes.get("node-a").await.unwrap()), "True");

    // The kubelet is back: Lease renewed, Ready posted with a new heartbeat.
    sim.start_node("node-b");
    renew(&leases, "node-b", renewals + 1).await;
    let back = node("node-b", "2026-01-01T01:00:00Z");
    let status = json!({"status": serde_json::to_value(back.status).unwrap()});
    nodes.patch_status("node-b", &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
    wait_for(30, "the taints removed", || {
        let nodes = nodes.clone();
        async move { taints(&nodes.get("node-b").await.ok()?).is_empty().then_some(()) }
    })
    .await;
    assert_eq!(ready_status(&nodes.get("node-b").await.unwrap()), "True");
}

/// A lone Node that stops heartbeating becomes Unknown as the clock advances; with no Ready Node
/// left the controller is in its "master disruption" mode: no NoExecute taint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_unknown_node_gets_no_no_execute_taint() {
    let sim =
        simcluster::SimCluster::start(simcluster::Config { kubelet: false, ..Default::default() }, 0).await.unwrap();
    let client = sim.client().await.unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    nodes.create(&PostParams::default(), &node("alone", "2026-01-01T00:00:00Z")).await.unwrap();
    renew(&leases, "alone", 0).await;
    wait_for(30, "the not-ready taint removed", || {
        let nodes = nodes.clone();
        async move { taints(&nodes.get("alone").await.ok()?).is_empty().then_some(()) }
    })
    .await;
    // The clock moves on in 5 s steps (the controller counts from when it last saw the Lease
    // change, which may be after the first step).
    let n = wait_for(30, "Unknown and tainted", || {
        let nodes = nodes.clone();
        sim.advance_clock(Duration::from_secs(5));
        async move {
            let n = nodes.get("alone").await.ok()?;
            (ready_status(&n) == "Unknown" && !taints(&n).is_empty()).then_some(n)
        }
    })
    .await;
    // Give the controller a few more passes: still no NoExecute taint.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let n = nodes.get("alone").await.unwrap_or(n);
    assert_eq!(taints(&n), vec![("node.kubernetes.io/unreachable".to_string(), "NoSchedule".to_string())]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_and_reset_faults() {
    let (sim, api) = start().await;
    sim.add_fault(FaultRule {
        verb: Some("get".into()),
        action: Some(FaultAction::Latency { millis: 300 }),
        times: Some(1),
        ..Default::default()
    });
    let t = Instant::now();
    api.get("target").await.unwrap();
    assert!(t.elapsed() >= Duration::from_millis(300), "the request waited for the injected latency");

    sim.add_fault(FaultRule {
        verb: Some("get".into()),
        action: Some(FaultAction::Reset),
        times: Some(1),
        ..Default::default()
    });
    let err = api.get("target").await.unwrap_err();
    assert!(!matches!(err, kube::Error::Api(_)), "a reset is a transport error, not an API answer: {err}");
    api.get("target").await.expect("served again after the reset");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_watches_end_and_compaction_expires_old_versions() {
    let (sim, api) = start().await;
    let rv = api.get("target").await.unwrap().metadata.resource_version.unwrap();
    // Only `target`: the controllers write other ConfigMaps (kube-root-ca.crt) meanwhile.
    let only_target = WatchParams::default().fields("metadata.name=target");
    let mut stream = api.watch(&only_target, &rv).await.unwrap().boxed();
    sim.drop_watches(Some("/configmaps"));
    let ended = tokio::time::timeout(Duration::from_secs(10), stream.try_next()).await.expect("the watch ends");
    assert!(matches!(ended, Ok(None)), "the stream closes: {ended:?}");

    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("later".into());
    api.create(&PostParams::default(), &cm).await.unwrap();
    sim.compact();
    let mut stream = api.watch(&WatchParams::default(), &rv).await.unwrap().boxed();
    match tokio::time::timeout(Duration::from_secs(10), stream.try_next()).await.unwrap() {
        Ok(Some(WatchEvent::Error(e))) => assert_eq!(e.code, 410),
        other => panic!("expected 410 Expired, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_hangs_requests_until_resume() {
    let (sim, api) = start().await;
    sim.pause();
    let pending = tokio::spawn({
        let api = api.clone();
        async move { api.get("target").await }
    });
    assert!(
        tokio::time::timeout(Duration::from_millis(500), async {
            while !pending.is_finished() {
                tokio::time::sleep(Duration::from_millis(10)).await
            }
        })
        .await
        .is_err(),
        "requests hang while paused"
    );
    sim.resume();
    pending.await.unwrap().expect("served after resume");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_records_who_wrote_what() {
    let (sim, _) = start().await;
    let mut config = kube::Config::new(sim.url().parse().unwrap());
    config.auth_info.impersonate = Some("system:serviceaccount:default:deployer".into());
    let as_sa: Api<ConfigMap> = Api::namespaced(kube::Client::try_from(config).unwrap(), "default");
    // No RBAC grant yet: refused, and audited as refused.
    let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}, "data": {"k": "v"}});
    let err = as_sa.patch("applied", &PatchParams::apply("ksync"), &Patch::Apply(&cm)).await.unwrap_err();
    assert_eq!(code(err), 403);

    let log = sim.audit_log();
    let last = log.last().unwrap();
    assert_eq!(last.verb, "patch");
    assert_eq!(last.user, "system:serviceaccount:default:deployer");
    assert_eq!(last.impersonated_by.as_deref(), Some("admin"));
    assert_eq!(last.field_manager, "ksync");
    assert_eq!(last.code, 403);
    // A create is named after the object it stored.
    let create = log.iter().find(|e| e.verb == "create" && e.resource == "configmaps").unwrap();
    assert!(!create.name.is_empty(), "{create:?}");
    assert_eq!(create.code, 201);
    assert!(!create.resource_version.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_counts_include_reads_by_the_authenticated_client() {
    let (sim, admin) = start().await;
    let mut config = kube::Config::new(sim.url().parse().unwrap());
    config.auth_info.impersonate = Some("system:serviceaccount:default:deployer".into());
    let as_sa: Api<ConfigMap> = Api::namespaced(kube::Client::try_from(config).unwrap(), "default");
    let count = |verb: &str, dry_run: bool| {
        sim.request_counts()
            .iter()
            .filter(|c| c.client == "admin" && c.verb == verb && c.resource == "configmaps" && c.dry_run == dry_run)
            .map(|c| c.count)
            .sum::<u64>()
    };
    let (gets, lists) = (count("get", false), count("list", false));
    assert!(admin.get_opt("absent").await.unwrap().is_none());
    admin.list(&Default::default()).await.unwrap();
    // Impersonated: counted for the client that sent it, refused or not.
    let _ = as_sa.get_opt("absent").await;
    let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "counted"}});
    let dry = PatchParams { dry_run: true, ..PatchParams::apply("ksync") };
    admin.patch("counted", &dry, &Patch::Apply(&cm)).await.unwrap();
    assert_eq!(count("get", false), gets + 2);
    assert_eq!(count("list", false), lists + 1);
    assert_eq!(count("patch", true), 1);
    assert!(!sim.request_counts().iter().any(|c| c.client.contains("deployer")), "{:?}", sim.request_counts());
}

/// Cluster IPs and node ports are allocated against what the other Services hold, kept up to
/// date from the store's changes: a held address is refused, a deleted Service's is free again,
/// and a Service keeps its own across updates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_addresses_follow_creates_updates_and_deletes() {
    use k8s_openapi::api::core::v1::Service;
    let (sim, _) = start().await;
    let services: Api<Service> = Api::namespaced(sim.client().await.unwrap(), "default");
    let svc = |name: &str, ip: &str, node_port: Option<i64>| {
        let mut port = json!({"port": 80});
        let mut spec = json!({"clusterIP": ip, "ports": [port.clone()]});
        if let Some(np) = node_port {
            port["nodePort"] = json!(np);
            spec = json!({"type": "NodePort", "clusterIP": ip, "ports": [port]});
        }
        serde_json::from_value::<Service>(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
    };
    let pp = PostParams::default();
    services.create(&pp, &svc("a", "10.96.0.50", Some(30050))).await.unwrap();
    let held = services.create(&pp, &svc("b", "10.96.0.50", None)).await.unwrap_err();
    assert!(format!("{held:?}").contains("already allocated"), "{held:?}");
    let port_held = services.create(&pp, &svc("b", "10.96.0.51", Some(30050))).await.unwrap_err();
    assert!(format!("{port_held:?}").contains("already allocated"), "{port_held:?}");
    // An update keeps its own address and port.
    let patch = json!({"metadata": {"labels": {"updated": "yes"}}});
    services.patch("a", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    // Deleted: both are free again.
    services.delete("a", &Default::default()).await.unwrap();
    services.create(&pp, &svc("b", "10.96.0.50", Some(30050))).await.unwrap();
    // Many Services, none sharing an address.
    for i in 0..50 {
        services.create(&pp, &svc(&format!("s{i}"), "", None)).await.unwrap();
    }
    let ips: std::collections::BTreeSet<String> = services
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|s| s.spec.as_ref()?.cluster_ip.clone())
        .collect();
    assert_eq!(ips.len(), 51, "{ips:?}");
}

/// Regression: an events.k8s.io/v1 watch showed stored (core) Events as if they were already
/// events.k8s.io ones, so `regarding`, `reportingController` and `note` were lost on the way
/// out (the notifications engine watches them; a list showed them right).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_events_k8s_io_watch_shows_regarding_and_reporting_controller() {
    use k8s_openapi::api::events::v1::Event as EventV1;
    let (sim, _) = start().await;
    let events: Api<EventV1> = Api::namespaced(sim.client().await.unwrap(), "default");
    let rv = events.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let mut stream = events.watch(&WatchParams::default(), &rv).await.unwrap().boxed();
    let ev: EventV1 = serde_json::from_value(json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "app.1", "namespace": "default"},
        "eventTime": "2026-12-05T18:00:00.000000Z", "type": "Warning", "reason": "HealthTimeout",
        "action": "Plan", "note": "not Healthy", "reportingController": "kuvryn-sync", "reportingInstance": "a",
        "regarding": {"apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application", "namespace": "default", "name": "app"},
    }))
    .unwrap();
    events.create(&PostParams::default(), &ev).await.unwrap();
    let got = loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.try_next()).await.unwrap().unwrap() {
            Some(WatchEvent::Added(e)) if e.metadata.name.as_deref() == Some("app.1") => break e,
            Some(_) => continue,
            None => panic!("the watch ended"),
        }
    };
    assert_eq!(got.reporting_controller.as_deref(), Some("kuvryn-sync"));
    assert_eq!(got.regarding.and_then(|r| r.name).as_deref(), Some("app"));
    assert_eq!(got.note.as_deref(), Some("not Healthy"));
}
