//! Benchmark of render (plain YAML) + validate + plan (`cargo bench --bench plan`): one
//! Application of 1,000 objects, and 1,000 Applications of 5 objects, with half the objects
//! live and a tenth of those changed. The pure core only: no cluster reads (those are measured
//! by the load test). Results go to `docs/performance.md`.

use std::collections::BTreeMap;
use std::time::Instant;

use kuvryn_sync::api::application::Destination;
use kuvryn_sync::plan::{self, Inputs, validate};
use kuvryn_sync::render::{Limits, plain};
use serde_json::Value;

/// `objects` objects: Deployment + ConfigMap pairs, and one more ConfigMap when odd.
fn write_app(dir: &std::path::Path, objects: usize) {
    std::fs::create_dir_all(dir).unwrap();
    if objects % 2 == 1 {
        std::fs::write(
            dir.join("extra.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: extra}\ndata: {x: y}\n",
        )
        .unwrap();
    }
    for i in 0..objects / 2 {
        let doc = format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web-{i}\n  labels: {{app: web-{i}}}\nspec:\n  replicas: 2\n  selector: {{matchLabels: {{app: web-{i}}}}}\n  template:\n    metadata: {{labels: {{app: web-{i}}}}}\n    spec:\n      containers:\n      - name: app\n        image: registry.example.com/web:{i}\n        ports: [{{containerPort: 8080}}]\n        env: [{{name: MODE, value: prod}}]\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: web-{i}-config}}\ndata: {{a: \"1\", b: \"2\"}}\n"
        );
        std::fs::write(dir.join(format!("obj-{i:05}.yaml")), doc).unwrap();
    }
}

fn scopes() -> BTreeMap<(String, String), bool> {
    [("apps", "Deployment"), ("", "ConfigMap")]
        .into_iter()
        .map(|(g, k)| ((g.to_string(), k.to_string()), true))
        .collect()
}

fn plan_dir(dir: &std::path::Path) -> usize {
    let objects = plain::render(dir, &Limits::default()).unwrap();
    let dest = Destination { namespace: "team-a".into(), ..Default::default() };
    let valid = validate::validate(&objects, &dest, &scopes(), validate::Limits::default()).unwrap();
    let mut live = BTreeMap::new();
    for (i, o) in valid.iter().enumerate().filter(|(i, _)| i % 2 == 0) {
        let mut l: Value = o.clone();
        l["metadata"]["uid"] = Value::String(format!("uid-{i}"));
        l["metadata"]["resourceVersion"] = Value::String("1".into());
        if i % 20 == 0 && l["kind"] == "Deployment" {
            l["spec"]["replicas"] = Value::from(5);
        }
        live.insert(validate::identity(o), l);
    }
    let p = plan::build(&valid, &Inputs { live, ..Default::default() });
    let _ = plan::revision::stored(&p, false);
    p.entries.len()
}

fn main() {
    let base = tempfile::tempdir().unwrap();
    // One Application of 1,000 objects.
    let big = base.path().join("big");
    write_app(&big, 1000);
    let started = Instant::now();
    let runs = 5;
    let mut n = 0;
    for _ in 0..runs {
        n = plan_dir(&big);
    }
    println!(
        "1 Application of {n} objects: render + validate + plan {:.1} ms",
        started.elapsed().as_secs_f64() * 1e3 / f64::from(runs)
    );
    // 1,000 Applications of 5 objects.
    let many = base.path().join("many");
    for a in 0..1000 {
        write_app(&many.join(format!("app-{a}")), 5);
    }
    let started = Instant::now();
    let mut total = 0;
    for a in 0..1000 {
        total += plan_dir(&many.join(format!("app-{a}")));
    }
    println!(
        "1,000 Applications ({total} objects): render + validate + plan {:.0} ms in all, {:.2} ms each",
        started.elapsed().as_secs_f64() * 1e3,
        started.elapsed().as_secs_f64()
    );
    in_place(base.path());
}

/// The steps a reconcile runs in place rather than on the blocking pool
/// (`kuvryn_sync::offload::offload_if`), on the largest desired state that still counts as
/// small: validate, find secrets, prepare, plan against half of it live, and the carried-out
/// plan, each as one would hold a worker.
fn in_place(base: &std::path::Path) {
    use kuvryn_sync::offload::Size;
    // The most objects whose desired state (and live copies) stay under the bound.
    let mut objects = 2;
    loop {
        let dir = base.join(format!("small-{objects}"));
        write_app(&dir, objects + 2);
        let rendered = plain::render(&dir, &Limits::default()).unwrap();
        if Size::default().values(rendered.iter()).values(rendered.iter().step_by(2)).large() {
            break;
        }
        objects += 2;
    }
    let dir = base.join(format!("small-{objects}"));
    let rendered = plain::render(&dir, &Limits::default()).unwrap();
    let bytes = serde_json::to_string(&rendered).unwrap().len();
    let dest = Destination { namespace: "team-a".into(), ..Default::default() };
    let mut steps = [0f64; 5];
    let runs = 50;
    for _ in 0..runs {
        let t = Instant::now();
        let valid = validate::validate(&rendered, &dest, &scopes(), validate::Limits::default()).unwrap();
        steps[0] += t.elapsed().as_secs_f64();
        let t = Instant::now();
        let _ = kuvryn_sync::redact::secret_strings(&rendered);
        steps[1] += t.elapsed().as_secs_f64();
        let t = Instant::now();
        let prepared = plan::prepare::prepare(valid, "team-a", "web", "0", None);
        steps[2] += t.elapsed().as_secs_f64();
        let live: BTreeMap<_, _> = prepared
            .objects
            .iter()
            .step_by(2)
            .map(|o| {
                let mut l = o.clone();
                l["metadata"]["resourceVersion"] = Value::String("1".into());
                (validate::identity(o), l)
            })
            .collect();
        let t = Instant::now();
        let p = plan::build(&prepared.objects, &Inputs { live, ..Default::default() });
        let _ = plan::revision::stored(&p, false);
        steps[3] += t.elapsed().as_secs_f64();
        let t = Instant::now();
        let _ = plan::carried_out(&p, &prepared.objects, &prepared.hooks);
        steps[4] += t.elapsed().as_secs_f64();
    }
    let ms = |s: f64| s * 1e3 / f64::from(runs);
    println!(
        "in place, {objects} objects ({bytes} bytes of JSON, the largest under the bound): validate {:.2} ms, secrets {:.2} ms, prepare {:.2} ms, plan {:.2} ms, carried out {:.2} ms",
        ms(steps[0]),
        ms(steps[1]),
        ms(steps[2]),
        ms(steps[3]),
        ms(steps[4])
    );
}
