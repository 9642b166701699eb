//! simcluster throughput, measured on loopback (`cargo bench -p simcluster`): writes with
//! 100,000 objects stored, a label-selected list out of them, 1,000 concurrent watches under a
//! paced create rate, and server-side apply. Prints figures; asserts nothing about speed.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

fn cm(name: String, labels: &[(&str, &str)]) -> ConfigMap {
    let mut c = ConfigMap::default();
    c.metadata.name = Some(name);
    c.metadata.labels = Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
    c.data = Some([("key".to_string(), "value".to_string())].into());
    c
}

async fn create_many(
    api: &Api<ConfigMap>,
    prefix: &str,
    n: usize,
    labels: &'static [(&'static str, &'static str)],
) -> Duration {
    let start = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let api = api.clone();
        let next = next.clone();
        let prefix = prefix.to_string();
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return;
                }
                api.create(&PostParams::default(), &cm(format!("{prefix}-{i}"), labels)).await.expect("create");
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    start.elapsed()
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let n: usize = std::env::var("SIMCLUSTER_BENCH_OBJECTS").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let sim = simcluster::SimCluster::start(simcluster::Config { kubelet: false, ..Default::default() }, 0)
        .await
        .expect("start");
    let client = sim.client().await.expect("client");
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let rss0 = rss_mib();

    let selected = n / 10;
    let t = create_many(&api, "sel", selected, &[("bench", "selected")]).await;
    let t2 = create_many(&api, "other", n - selected, &[("bench", "other")]).await;
    let total = t + t2;
    println!(
        "create: {n} ConfigMaps in {:.1} s = {:.0} creates/s (16 concurrent clients)",
        total.as_secs_f64(),
        n as f64 / total.as_secs_f64()
    );
    println!(
        "memory: {:.0} MiB RSS for {n} objects ({:.2} KiB/object, server and client in one process)",
        rss_mib() - rss0,
        (rss_mib() - rss0) * 1024.0 / n as f64
    );

    let lp = ListParams::default().labels("bench=selected");
    let start = Instant::now();
    let rounds = 10;
    for _ in 0..rounds {
        let l = api.list(&lp).await.expect("list");
        assert_eq!(l.items.len(), selected);
    }
    println!(
        "list: {selected} of {n} objects by label selector in {:.0} ms on average",
        start.elapsed().as_secs_f64() * 1000.0 / rounds as f64
    );

    // 1,000 concurrent label-selected watches; 1,000 creates paced at 1,000/s.
    let watches = 1000;
    let creates = 1000;
    let received = Arc::new(AtomicUsize::new(0));
    let rv = api.list(&ListParams::default().limit(1)).await.expect("list").metadata.resource_version.expect("rv");
    // Raw HTTP watch clients that count event lines: the figure is the server's, not a client's
    // JSON parsing.
    let mut handles = Vec::new();
    let addr = sim.addr();
    for _ in 0..watches {
        let received = received.clone();
        let rv = rv.clone();
        handles.push(tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
            let req = format!(
                "GET /api/v1/namespaces/default/configmaps?watch=true&labelSelector=bench%3Dwatched&resourceVersion={rv}&timeoutSeconds=120 HTTP/1.1\r\nHost: bench\r\n\r\n"
            );
            s.write_all(req.as_bytes()).await.expect("request");
            let mut buf = vec![0u8; 64 * 1024];
            let (mut seen, mut last) = (0, 0u8);
            while seen < creates {
                let n = match s.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                for &b in &buf[..n] {
                    if b == b'\n' && last == b'}' {
                        seen += 1;
                        received.fetch_add(1, Ordering::Relaxed);
                    }
                    last = b;
                }
            }
        }));
    }
    let start = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    for i in 0..creates {
        tick.tick().await;
        api.create(&PostParams::default(), &cm(format!("watched-{i}"), &[("bench", "watched")])).await.expect("create");
    }
    let created = start.elapsed();
    for h in handles {
        let _ = tokio::time::timeout(Duration::from_secs(60), h).await;
    }
    let all = start.elapsed();
    println!(
        "watch: {watches} watches, {creates} creates in {:.2} s; {} of {} events delivered {:.2} s after the first create",
        created.as_secs_f64(),
        received.load(Ordering::Relaxed),
        watches * creates,
        all.as_secs_f64()
    );

    // Server-side apply of new and existing objects.
    let applies = 5000;
    let pp = PatchParams::apply("bench").force();
    let start = Instant::now();
    for round in 0..2 {
        for i in 0..applies / 2 {
            let mut c = cm(format!("ssa-{i}"), &[("bench", "ssa")]);
            c.data = Some([("round".to_string(), round.to_string())].into());
            let mut v = serde_json::to_value(&c).expect("json");
            v["apiVersion"] = "v1".into();
            v["kind"] = "ConfigMap".into();
            api.patch(&format!("ssa-{i}"), &pp, &Patch::Apply(v)).await.expect("apply");
        }
    }
    println!(
        "apply: {applies} server-side applies (half create, half update) in {:.1} s = {:.0} applies/s (one client)",
        start.elapsed().as_secs_f64(),
        applies as f64 / start.elapsed().as_secs_f64()
    );
}
