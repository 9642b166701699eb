//! Fault injection and the audit log, observed by a kube-rs client.

use std::time::{Duration, Instant};

use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
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
    use std::io::{Read, Write};
    let (addr, path) = (sim.addr(), path.to_string());
    let buf = tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes()).unwrap();
        let mut buf = String::new();
        s.read_to_string(&mut buf).unwrap();
        buf
    })
    .await
    .unwrap();
    let status = buf.split_whitespace().nth(1).unwrap().parse().unwrap();
    let retry =
        buf.lines().find_map(|l| l.to_ascii_lowercase().strip_prefix("retry-after: ").map(|v| v.trim().to_string()));
    (status, retry)
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
    let create = log.iter().find(|e| e.verb == "create" && e.name.is_empty() && e.resource == "configmaps").unwrap();
    assert_eq!(create.code, 201);
    assert!(!create.resource_version.is_empty());
}
