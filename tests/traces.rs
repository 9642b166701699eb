//! OpenTelemetry traces: the real `ksync-controller`, given `OTEL_EXPORTER_OTLP_ENDPOINT`,
//! exports a span per reconcile with child spans for fetch, render, plan, apply, prune and
//! health to an OTLP/HTTP receiver run by the test, and its JSON logs carry the reconcile's
//! trace id. Which variables turn traces on is a table test in `src/telemetry/traces.rs`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::Api;
use kuvryn_sync::api::application::Application;
use serde_json::Value;
use testkit::manager::Manager;
use testkit::{Cluster, GitServer, WorkTree, eventually, install_crds};

/// The child spans of the reconcile that starts a rollout.
const ROLLOUT: [&str; 5] = ["fetch", "render", "plan", "apply", "prune"];

/// An OTLP/HTTP receiver on loopback keeping every span it is sent (`/v1/traces`, JSON).
struct Receiver {
    url: String,
    spans: Arc<Mutex<Vec<Span>>>,
    requests: Arc<Mutex<Vec<String>>>,
}

#[derive(Clone, Debug)]
struct Span {
    trace: String,
    id: String,
    parent: String,
    name: String,
    attributes: Vec<(String, String)>,
    service: String,
}

impl Span {
    fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

/// The string form of an OTLP `AnyValue`.
fn any_value(v: &Value) -> String {
    ["stringValue", "intValue", "boolValue", "doubleValue"]
        .iter()
        .find_map(|k| v.get(*k).map(|x| x.as_str().map(str::to_string).unwrap_or_else(|| x.to_string())))
        .unwrap_or_default()
}

fn attributes(list: &Value) -> Vec<(String, String)> {
    list.as_array()
        .into_iter()
        .flatten()
        .map(|a| (a["key"].as_str().unwrap_or_default().to_string(), any_value(&a["value"])))
        .collect()
}

/// The spans of one `ExportTraceServiceRequest` in OTLP's JSON encoding.
fn spans_of(body: &Value) -> Vec<Span> {
    let mut out = Vec::new();
    for rs in body["resourceSpans"].as_array().into_iter().flatten() {
        let resource = attributes(&rs["resource"]["attributes"]);
        let service = resource.iter().find(|(k, _)| k == "service.name").map(|(_, v)| v.clone()).unwrap_or_default();
        for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
            for s in ss["spans"].as_array().into_iter().flatten() {
                out.push(Span {
                    trace: s["traceId"].as_str().unwrap_or_default().to_string(),
                    id: s["spanId"].as_str().unwrap_or_default().to_string(),
                    parent: s["parentSpanId"].as_str().unwrap_or_default().to_string(),
                    name: s["name"].as_str().unwrap_or_default().to_string(),
                    attributes: attributes(&s["attributes"]),
                    service: service.clone(),
                });
            }
        }
    }
    out
}

impl Receiver {
    async fn start() -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let spans: Arc<Mutex<Vec<Span>>> = Arc::default();
        let requests: Arc<Mutex<Vec<String>>> = Arc::default();
        let (s, r) = (spans.clone(), requests.clone());
        let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
            let (s, r) = (s.clone(), r.clone());
            async move {
                let (parts, body) = req.into_parts();
                let content_type =
                    parts.headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
                r.lock().unwrap().push(format!("{} {} {content_type}", parts.method, parts.uri.path()));
                let bytes = axum::body::to_bytes(body, 64 << 20).await.unwrap_or_default();
                if let Ok(v) = serde_json::from_slice::<Value>(&bytes) {
                    s.lock().unwrap().extend(spans_of(&v));
                }
                ([("content-type", "application/json")], "{}")
            }
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver { url, spans, requests }
    }

    fn spans(&self) -> Vec<Span> {
        self.spans.lock().unwrap().clone()
    }
}

/// A Repository `platform` declaring Application `web` (a ConfigMap) in `ns`; the commit.
async fn web(client: &kube::Client, git: &GitServer, ns: &str) -> String {
    let url = git.create_repo("platform");
    let wt = WorkTree::clone(&url);
    wt.write(
        ".ksync.yaml",
        &format!(
            "applications:\n- metadata: {{name: web}}\n  spec: {{source: {{path: web}}, serviceAccountName: deployer, destination: {{namespace: {ns}}}}}\n"
        ),
    );
    wt.write("web/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\ndata: {color: blue}\n");
    let commit = wt.commit_and_push("web");
    testkit::create_repository(client, ns, &url).await;
    commit
}

async fn desired_revision(client: &kube::Client, ns: &str) -> String {
    let apps: Api<Application> = Api::namespaced(client.clone(), ns);
    eventually("web deployed", Duration::from_secs(90), || async {
        let app = apps.get("web").await.ok()?;
        let st = app.status?;
        (st.last_healthy_revision.is_some() && st.last_healthy_revision == st.desired_revision)
            .then_some(st.desired_revision?)
    })
    .await
}

fn a_reconcile_is_traced_with_its_steps_and_its_trace_id_is_logged(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let ns = "traced";
        let client = cluster.client().await;
        install_crds(&client).await;
        testkit::deployer_namespace(&client, ns).await;
        let receiver = Receiver::start().await;
        let git = GitServer::start();
        let tools = testkit::Tools::get();
        let (helm, kubectl) = (tools.bin.join("helm"), tools.bin.join("kubectl"));
        let manager = Manager::start(
            &cluster,
            &["--enable-webhooks", "false", "--log-format", "json"],
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
                ("OTEL_BSP_SCHEDULE_DELAY", "100"),
                ("RUST_LOG", "info,kuvryn_sync::controller::application=debug"),
                ("KSYNC_HELM", helm.to_str().unwrap()),
                ("KSYNC_KUBECTL", kubectl.to_str().unwrap()),
            ],
        );
        let commit = web(&client, &git, ns).await;
        let revision = desired_revision(&client, ns).await;

        // The reconcile that rolled the Revision out, its children in the same trace, and the
        // health wait of a later reconcile of the same Revision.
        let revision_children = |name: &'static str, spans: &[Span]| -> Option<(Span, Vec<Span>)> {
            spans.iter().filter(|s| s.name == "reconcile" && s.attr("revision") == Some(revision.as_str())).find_map(
                |r| {
                    let children: Vec<Span> = spans.iter().filter(|c| c.parent == r.id).cloned().collect();
                    children.iter().any(|c| c.name == name).then(|| (r.clone(), children))
                },
            )
        };
        let (reconcile, children) = eventually("the rollout's spans exported", Duration::from_secs(60), || async {
            let spans = receiver.spans();
            let (r, children) = revision_children("apply", &spans)?;
            ROLLOUT.iter().all(|n| children.iter().any(|c| c.name == *n)).then_some((r, children))
        })
        .await;
        assert_eq!(reconcile.attr("application"), Some("web"));
        assert_eq!(reconcile.attr("namespace"), Some(ns));
        assert_eq!(reconcile.attr("commit"), Some(commit.as_str()));
        assert_eq!(reconcile.service, "kuvryn-sync", "OTEL_SERVICE_NAME unset: the default service name");
        assert_eq!(reconcile.trace.len(), 32, "{reconcile:?}");
        assert!(children.iter().all(|c| c.trace == reconcile.trace), "{children:#?}");
        let (watched, children) = eventually("a health wait exported", Duration::from_secs(60), || async {
            revision_children("health", &receiver.spans())
        })
        .await;
        let health = children.iter().find(|c| c.name == "health").unwrap();
        assert_eq!(health.trace, watched.trace);
        assert!(health.attr("status").is_some(), "{health:?}");
        let requests = receiver.requests.lock().unwrap().clone();
        assert!(requests.iter().all(|r| r == "POST /v1/traces application/json"), "{requests:?}");

        // The JSON log lines written during that reconcile name its trace.
        let logs = eventually("a log line with the trace id", Duration::from_secs(30), || async {
            let logs = manager.stderr();
            logs.contains(&format!("\"trace_id\":\"{}\"", reconcile.trace)).then_some(logs)
        })
        .await;
        let line = logs.lines().find(|l| l.contains(&reconcile.trace)).unwrap();
        let line: Value = serde_json::from_str(line).expect("a JSON log line");
        assert_eq!(line["span"]["name"], "reconcile", "{line}");
    });
}

/// An unsupported protocol is refused at startup, saying which variable and why.
#[test]
fn grpc_is_refused_at_startup() {
    let out = std::process::Command::new(testkit::manager::bin())
        .args(["run", "--enable-webhooks", "false"])
        .env("KUBECONFIG", "/nonexistent")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("OTEL_EXPORTER_OTLP_PROTOCOL=grpc"), "{stderr}");
}

testkit::both!(a_reconcile_is_traced_with_its_steps_and_its_trace_id_is_logged);
