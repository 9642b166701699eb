//! The load-test size, with the scheduler and kubelet on: about 30,000 objects (by default
//! 1,000 Deployments of 3 replicas, so 1,000 ReplicaSets and 3,000 Pods; 1,000 Services, so
//! 1,000 EndpointSlices and Endpoints; 10,000 ConfigMaps; 5,000 Secrets; 100 Namespaces) on
//! 20 Nodes. It measures, and prints, the time until every Deployment is Available, the
//! process's CPU time (server, controllers and the kube-rs clients are one process), its RSS,
//! and the CPU the controllers cost at rest afterwards. It asserts only that everything
//! becomes Available (with a generous deadline): speed is a figure for `docs/simcluster.md`,
//! not a test verdict.
//!
//! ```sh
//! cargo test -p simcluster --release --test load -- --ignored --nocapture
//! ```
//!
//! `SIMCLUSTER_LOAD_DEPLOYMENTS` (default 1000) scales everything (ConfigMaps 10×, Secrets 5×,
//! Services 1×, a Namespace per 10 Deployments); `SIMCLUSTER_LOAD_THREADS` (default 2) sets the
//! runtime's worker threads (1 runs everything on one core); `SIMCLUSTER_LOAD_IDLE_SECS`
//! (default 30) sets how long the idle CPU is measured.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Secret, Service};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use simcluster::state::NodeConfig;
use simcluster::{Config, SimCluster};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// utime + stime of this process, in seconds.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // The clock tick is 100 Hz on Linux.
    (ticks(11) + ticks(12)) / 100.0
}

/// Resident set size in MiB.
fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

fn deployment(ns: &str, name: &str) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{
                    "name": "app", "image": "registry.example.com/app:1",
                    "ports": [{"containerPort": 8080}],
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                }]},
            },
        },
    }))
    .unwrap()
}

fn service(ns: &str, name: &str) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 8080}]},
    }))
    .unwrap()
}

fn available(d: &Value) -> bool {
    d["status"]["availableReplicas"] == 3
        && d["status"]["updatedReplicas"] == 3
        && d["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Available" && c["status"] == "True"))
}

#[test]
#[ignore = "a load check of several minutes; run in release mode with --nocapture for its figures"]
fn thirty_thousand_objects() {
    let threads = env("SIMCLUSTER_LOAD_THREADS", 2) as usize;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build().unwrap();
    rt.block_on(run());
}

async fn run() {
    let deployments = env("SIMCLUSTER_LOAD_DEPLOYMENTS", 1000) as usize;
    let idle_secs = env("SIMCLUSTER_LOAD_IDLE_SECS", 30);
    let namespaces = deployments.div_ceil(10);
    let configmaps = deployments * 10;
    let secrets = deployments * 5;
    let nodes = NodeConfig::defaults(20).into_iter().map(|n| NodeConfig { pods: 250, ..n }).collect();
    let sim = SimCluster::start(Config { nodes, ..Default::default() }, 0).await.unwrap();
    let client = sim.client().await.unwrap();
    let node_api: Api<Node> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(60);
    while node_api.list(&ListParams::default()).await.map(|l| l.items.len()).unwrap_or(0) < 20 {
        assert!(Instant::now() < deadline, "the Nodes did not register");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let (cpu0, t0) = (cpu_seconds(), Instant::now());
    // Each of 8 workers syncs whole namespaces, as an Application would: its ConfigMaps and
    // Secrets, then its Services and Deployments.
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..8 {
        let client = client.clone();
        tasks.spawn(async move {
            for n in (worker..namespaces).step_by(8) {
                let ns = format!("load-{n}");
                let ns_api: Api<Namespace> = Api::all(client.clone());
                let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
                ns_api.create(&PostParams::default(), &namespace).await.unwrap();
                let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
                let sec: Api<Secret> = Api::namespaced(client.clone(), &ns);
                let svc: Api<Service> = Api::namespaced(client.clone(), &ns);
                let dep: Api<Deployment> = Api::namespaced(client.clone(), &ns);
                let first = n * 10;
                let last = (first + 10).min(deployments);
                for i in first * 10..last * 10 {
                    let cm: ConfigMap = serde_json::from_value(json!({
                        "metadata": {"name": format!("config-{i}")},
                        "data": {"settings.yaml": format!("replicas: 3\nname: config-{i}\nlevel: info\n")},
                    }))
                    .unwrap();
                    cms.create(&PostParams::default(), &cm).await.unwrap();
                }
                for i in first * 5..last * 5 {
                    let s: Secret = serde_json::from_value(json!({
                        "metadata": {"name": format!("secret-{i}")},
                        "stringData": {"password": format!("password-{i}")},
                    }))
                    .unwrap();
                    sec.create(&PostParams::default(), &s).await.unwrap();
                }
                for i in first..last {
                    let name = format!("app-{i}");
                    svc.create(&PostParams::default(), &service(&ns, &name)).await.unwrap();
                    dep.create(&PostParams::default(), &deployment(&ns, &name)).await.unwrap();
                }
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    let created = t0.elapsed();
    let cpu_created = cpu_seconds() - cpu0;
    let writes = namespaces + configmaps + secrets + 2 * deployments;
    println!(
        "created {writes} objects in {:.1} s ({:.0} creates/s), CPU {cpu_created:.1} s, RSS {:.0} MiB",
        created.as_secs_f64(),
        writes as f64 / created.as_secs_f64(),
        rss_mib()
    );

    let all: Api<Deployment> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(1800);
    let mut last_report = Instant::now();
    loop {
        let list = all.list(&ListParams::default()).await.unwrap();
        let ready = list.items.iter().filter(|d| available(&serde_json::to_value(d).unwrap())).count();
        if ready == deployments {
            break;
        }
        if last_report.elapsed() > Duration::from_secs(10) {
            println!(
                "  {ready}/{deployments} Deployments Available after {:.0} s, CPU {:.1} s",
                t0.elapsed().as_secs_f64(),
                cpu_seconds() - cpu0
            );
            last_report = Instant::now();
        }
        assert!(Instant::now() < deadline, "{ready}/{deployments} Deployments Available after 1800 s");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let done = t0.elapsed();
    let cpu_done = cpu_seconds() - cpu0;
    let objects = object_count(&client).await;
    println!(
        "all {deployments} Deployments Available after {:.1} s; CPU {cpu_done:.1} s ({:.2} cores on average); \
         RSS {:.0} MiB; {objects} objects stored",
        done.as_secs_f64(),
        cpu_done / done.as_secs_f64(),
        rss_mib()
    );

    // At rest: nothing changes, the controllers should cost little.
    let (cpu1, t1) = (cpu_seconds(), Instant::now());
    tokio::time::sleep(Duration::from_secs(idle_secs)).await;
    let idle = cpu_seconds() - cpu1;
    println!(
        "idle {:.0} s: CPU {idle:.2} s ({:.1}% of a core); RSS {:.0} MiB",
        t1.elapsed().as_secs_f64(),
        100.0 * idle / t1.elapsed().as_secs_f64(),
        rss_mib()
    );
    drop(sim);
}

/// How many objects the server holds, counted through the API (the kinds this check creates
/// or causes).
async fn object_count(client: &kube::Client) -> usize {
    let mut total = 0;
    for (group, version, plural) in [
        ("", "v1", "namespaces"),
        ("", "v1", "configmaps"),
        ("", "v1", "secrets"),
        ("", "v1", "services"),
        ("", "v1", "endpoints"),
        ("", "v1", "pods"),
        ("", "v1", "events"),
        ("", "v1", "serviceaccounts"),
        ("", "v1", "nodes"),
        ("apps", "v1", "deployments"),
        ("apps", "v1", "replicasets"),
        ("discovery.k8s.io", "v1", "endpointslices"),
        ("coordination.k8s.io", "v1", "leases"),
    ] {
        let ar = kube::api::ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: if group.is_empty() { version.into() } else { format!("{group}/{version}") },
            kind: String::new(),
            plural: plural.into(),
        };
        let api: Api<kube::api::DynamicObject> = Api::all_with(client.clone(), &ar);
        total += api.list_metadata(&ListParams::default()).await.map(|l| l.items.len()).unwrap_or(0);
    }
    total
}
