//! The calibration phase: the server's sustained Server-Side Apply rate for objects like the
//! fleet's, in a scratch namespace removed after (`crate::floor` has the ramp and the ratio).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::Value;

use super::Fleet;
use crate::floor::{self, Floor, Step};
use crate::{Result, fleet};

/// The scratch namespace.
pub const NAMESPACE: &str = "loadtest-floor";
/// The calibration's field manager.
const MANAGER: &str = "loadtest-floor";

/// An object of the fleet's kinds and sizes: its API and body.
struct Template {
    api: Api<DynamicObject>,
    body: Value,
}

impl Fleet {
    /// Measure the floor rate (see `crate::floor`), then remove the scratch namespace.
    pub(super) async fn calibrate(&mut self) -> Result<()> {
        self.phase("calibration");
        crate::server::own_namespace(&self.client, NAMESPACE, &self.run_id).await;
        let step_for = self.args.calibration_step;
        let mut result = Floor { namespace: NAMESPACE.into(), ..Default::default() };
        // Object `i` of the scratch fleet: the files of an Application like the fleet's (the
        // same `--objects` and share of Deployments, no Pods: replicas 0).
        let plan = |i: usize| {
            let mut def = fleet::plan(1, &[NAMESPACE.to_string()], 0, self.args.objects).remove(0);
            def.name = format!("floor-{i:06}");
            def.deployment = self.args.deployment_every > 0 && i.is_multiple_of(self.args.deployment_every);
            def.files()
                .into_iter()
                .map(|(_, yaml)| {
                    let mut v: Value = kuvryn_sync::yaml::from_str(&yaml).expect("the fleet's YAML");
                    if v["spec"]["replicas"].is_number() {
                        v["spec"]["replicas"] = 0.into();
                    }
                    v["metadata"]["namespace"] = NAMESPACE.into();
                    v
                })
                .collect::<Vec<Value>>()
        };
        result.kinds = plan(1).iter().map(|v| v["kind"].as_str().unwrap_or_default().to_string()).collect();
        let next = Arc::new(AtomicUsize::new(0));
        for &concurrency in floor::RAMP {
            if !floor::keep_ramping(&result.steps) {
                break;
            }
            let stop = Instant::now() + step_for;
            let start = Instant::now();
            let (ok, errors) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
            let workers: Vec<_> = (0..concurrency)
                .map(|_| {
                    let (client, next, ok, errors) = (self.client.clone(), next.clone(), ok.clone(), errors.clone());
                    async move {
                        while Instant::now() < stop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            for body in plan(i) {
                                let t = template(&client, body);
                                let name = t.body["metadata"]["name"].as_str().unwrap_or_default().to_string();
                                let params = PatchParams::apply(MANAGER).force();
                                match t.api.patch(&name, &params, &Patch::Apply(&t.body)).await {
                                    Ok(_) => {
                                        ok.fetch_add(1, Ordering::Relaxed);
                                    }
                                    Err(e) => {
                                        if errors.fetch_add(1, Ordering::Relaxed) == 0 {
                                            eprintln!("loadtest: floor: {name}: {e}");
                                        }
                                    }
                                }
                            }
                        }
                    }
                })
                .collect();
            futures_util::future::join_all(workers).await;
            let seconds = start.elapsed().as_secs_f64();
            let writes = ok.load(Ordering::Relaxed);
            #[allow(clippy::cast_precision_loss)]
            let per_s = writes as f64 / seconds;
            let errors = errors.load(Ordering::Relaxed);
            say!("floor: {concurrency} writers: {writes} applies in {seconds:.1} s, {per_s:.0}/s ({errors} failed)");
            result.steps.push(Step { concurrency, writes, errors, seconds, per_s });
        }
        if let Some(b) = floor::best(&result.steps) {
            (result.per_s, result.concurrency) = (b.per_s, b.concurrency);
        }
        say!("floor rate: {:.0} applies per second with {} writers", result.per_s, result.concurrency);
        // The fleet starts on a server no longer busy with the scratch objects.
        let removed = Instant::now();
        let left = crate::server::remove_scratch(&self.client, NAMESPACE, Duration::from_secs(300)).await;
        result.removed_s = left.then(|| removed.elapsed().as_secs_f64());
        if !left {
            say!("floor: {NAMESPACE} still there after 300 s; going on");
        }
        self.report.floor = Some(result);
        Ok(())
    }
}

/// The API of `body`'s kind in its namespace (plural: lower-cased kind + `s`, which holds for
/// ConfigMap, Service and Deployment).
fn template(client: &kube::Client, body: Value) -> Template {
    let api_version = body["apiVersion"].as_str().unwrap_or_default().to_string();
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), api_version.clone()),
    };
    let kind = body["kind"].as_str().unwrap_or_default().to_string();
    let plural = format!("{}s", kind.to_lowercase());
    let ar = kube::discovery::ApiResource { group, version, api_version, kind, plural };
    let ns = body["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
    Template { api: Api::namespaced_with(client.clone(), &ns, &ar), body }
}
