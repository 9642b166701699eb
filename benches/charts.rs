//! Benchmark of a Helm render with a pulled dependency (`cargo bench --bench charts`): an
//! umbrella chart depending on a chart from a real Helm repository served over HTTPS with basic
//! auth on loopback (the test kit's), rendered with the real `helm`.
//!
//! Measures, each `ROUNDS` times (median, min, max): a cold render (an empty pull cache: `helm
//! repo add`, `helm pull`, then `helm template`) and a render with the pull cached (`helm
//! template` only; the render cache is off). Results go to `docs/performance.md`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kuvryn_sync::api::application::{Render, RenderType};
use kuvryn_sync::render::pull::Auth;
use kuvryn_sync::render::{self, Dependency, Limits, Renderer, Request, Tools};

const ROUNDS: usize = 15;

fn stats(name: &str, mut times: Vec<Duration>) {
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{name}: median {:.0} ms, min {:.0} ms, max {:.0} ms ({} rounds)",
        ms(times[times.len() / 2]),
        ms(times[0]),
        ms(times[times.len() - 1]),
        times.len()
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let tools = testkit::Tools::get();
    let repo = testkit::charts::HelmRepo::start("bench", "bench-password");
    let work = testkit::temp_dir("chart-bench");
    repo.publish(&testkit::charts::chart(work.path(), "redis", "1.2.3").write());
    let umbrella =
        testkit::charts::chart(work.path(), "umbrella", "0.1.0").dependency("redis", "~1.2", &repo.url()).write();
    let auth = Auth {
        username: Some(repo.user().into()),
        password: Some(repo.password().into()),
        ca: Some(std::fs::read(repo.ca_file()).unwrap()),
    };
    let render = Render { type_: Some(RenderType::Helm), helm: None };
    let new_renderer = || {
        Renderer::new(
            Tools { helm: tools.bin.join("helm"), kubectl: tools.bin.join("kubectl") },
            Limits::default(),
            render::DEFAULT_CACHE_BYTES,
        )
    };
    let once = |renderer: &Renderer| {
        runtime.block_on(async {
            let started = Instant::now();
            let pulled = renderer
                .charts()
                .pull(&repo.url(), "redis", "~1.2", false, &auth, Duration::from_secs(3600))
                .await
                .unwrap();
            let req = Request {
                dir: &umbrella,
                tree: None,
                render: &render,
                renderer: RenderType::Helm,
                application: "bench",
                namespace: "bench",
                values_from: Vec::new(),
                secrets: Vec::new(),
                capabilities: None,
                dependencies: vec![Dependency::Pulled(Arc::clone(&pulled))],
                packaged: None,
            };
            let objects = renderer.render(&req).await.unwrap();
            assert_eq!(objects.len(), 2, "the umbrella's and redis's ConfigMaps");
            started.elapsed()
        })
    };
    let cold: Vec<Duration> = (0..ROUNDS).map(|_| once(&new_renderer())).collect();
    let warm = new_renderer();
    once(&warm);
    let cached: Vec<Duration> = (0..ROUNDS).map(|_| once(&warm)).collect();
    stats("render with a cold pull", cold);
    stats("render with the pull cached", cached);
}
