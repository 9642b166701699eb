//! The alert rules (`deploy/prometheus/`) and the Grafana dashboard (`deploy/grafana/`):
//!
//! - `promtool check rules` accepts `rules.yaml`, and `promtool test rules` passes
//!   `rules_test.yaml` (each alert fires when it should, not before its `for:`, not on healthy
//!   input). promtool is Debian's, put into `tools/bin` by `scripts/install-tools`; without it
//!   these tests fail saying so.
//! - Every `ksync_*` metric the rules and the dashboard name is one the manager exports: a
//!   `"ksync_..."` string in `src/` (the `metrics` facade's names), or `_sum`/`_count` of one
//!   recorded with `histogram!` (the exporter publishes summaries, so there is no `_bucket`). A
//!   renamed metric fails here, and the check is shown to catch a renamed one.
//! - The dashboard parses, has the `datasource`, `job` and `instance` variables, every panel
//!   queries the `${datasource}` variable with at least one target, and every expression is
//!   valid PromQL (`promtool check rules` on recording rules made of them).
//! - The real `ksync-controller run` (on simcluster) publishes what the rules and the dashboard
//!   read: `ksync_applications{sync,health}` following the Applications' status (a combination
//!   left reads 0), `ksync_shards_owned`, and the drift counters counting each drift once: a
//!   self-healed one as detected and repaired, a reported one (no selfHeal) as detected while
//!   further reconciles still see it, and not as repaired when someone else undoes it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kuvryn_sync::api::application::SyncState;
use kuvryn_sync::api::{Application, Repository};
use regex::Regex;
use serde_json::{Value, json};
use testkit::metrics::{Samples, metrics_until, scrape, value};
use testkit::{Cluster, GitServer, Tools, WorkTree, eventually, free_port, install_crds, repo_root, temp_dir};

const RULES: &str = "deploy/prometheus/rules.yaml";
const RULES_TEST: &str = "deploy/prometheus/rules_test.yaml";
const DASHBOARD: &str = "deploy/grafana/kuvryn-sync.json";

/// The alerts `rules.yaml` must define (each has tests in `rules_test.yaml`).
const ALERTS: [&str; 5] = [
    "KuvrynSyncReplicaDown",
    "KuvrynSyncShardOrphaned",
    "KuvrynSyncReconcilesStale",
    "KuvrynSyncApplicationsDegraded",
    "KuvrynSyncWebhookCertificateExpiring",
];

fn read(rel: &str) -> String {
    let path = repo_root().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// `promtool` with `args`, run in the repository root; panics with its output when it fails.
fn promtool(args: &[&str]) -> String {
    let tool = Tools::get().promtool();
    testkit::run(Command::new(tool).current_dir(repo_root()).args(args))
}

#[test]
fn promtool_accepts_the_rules_and_their_unit_tests_pass() {
    let checked = promtool(&["check", "rules", RULES]);
    assert!(checked.contains(&format!("SUCCESS: {} rules found", ALERTS.len())), "{checked}");
    let tested = promtool(&["test", "rules", RULES_TEST]);
    assert!(tested.contains("SUCCESS"), "{tested}");
    // Every alert is defined, and has tests.
    let rules = read(RULES);
    let tests = read(RULES_TEST);
    for alert in ALERTS {
        assert!(rules.contains(&format!("- alert: {alert}\n")), "{RULES} does not define {alert}");
        let cases = tests.matches(&format!("alertname: {alert}\n")).count();
        assert!(cases >= 2, "{RULES_TEST} has {cases} evaluation(s) of {alert}: it needs firing and not firing");
    }
}

/// The metric names the manager exports, and those recorded as histograms (published as
/// summaries: `NAME{quantile=...}`, `NAME_sum`, `NAME_count`).
fn exported() -> (BTreeSet<String>, BTreeSet<String>) {
    let name = Regex::new(r#""(ksync_[a-z0-9_]+)""#).unwrap();
    // Code names a metric by its constant in `src/metric_names.rs`.
    let histogram = Regex::new(r"histogram!\(\s*crate::metric_names::([A-Z0-9_]+)").unwrap();
    let constant = Regex::new(r#"pub const ([A-Z0-9_]+): &str = "(ksync_[a-z0-9_]+)";"#).unwrap();
    let constants: std::collections::BTreeMap<String, String> = constant
        .captures_iter(&std::fs::read_to_string(repo_root().join("src/metric_names.rs")).unwrap())
        .map(|c| (c[1].to_string(), c[2].to_string()))
        .collect();
    let (mut names, mut histograms) = (BTreeSet::new(), BTreeSet::new());
    let mut dirs = vec![repo_root().join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                names.extend(name.captures_iter(&text).map(|c| c[1].to_string()));
                histograms.extend(histogram.captures_iter(&text).filter_map(|c| constants.get(&c[1]).cloned()));
            }
        }
    }
    (names, histograms)
}

/// The `ksync_*` names in `text` that no exported metric provides.
fn unknown_metrics(text: &str, names: &BTreeSet<String>, histograms: &BTreeSet<String>) -> BTreeSet<String> {
    let used = Regex::new(r"\bksync_[a-z0-9_]+").unwrap();
    used.find_iter(text)
        .map(|m| m.as_str().to_string())
        .filter(|m| {
            let summary_part = ["_sum", "_count"]
                .iter()
                .any(|suffix| m.strip_suffix(suffix).is_some_and(|base| histograms.contains(base)));
            !names.contains(m) && !summary_part
        })
        .collect()
}

#[test]
fn the_rules_and_the_dashboard_name_only_metrics_the_manager_exports() {
    let (names, histograms) = exported();
    // The scan finds what it should: the metrics the rules are built on.
    for expected in [
        "ksync_shards_orphaned",
        "ksync_applications",
        "ksync_applications_reconcile_stale",
        "ksync_webhook_certificate_expiry_timestamp_seconds",
        "ksync_shards_owned",
        "ksync_drift_detected_total",
        "ksync_drift_repaired_total",
    ] {
        assert!(names.contains(expected), "{expected} not found in src/ (found: {names:?})");
    }
    assert!(histograms.contains("ksync_reconcile_duration_seconds"), "{histograms:?}");
    for file in [RULES, DASHBOARD] {
        let text = read(file);
        let unknown = unknown_metrics(&text, &names, &histograms);
        assert!(
            unknown.is_empty(),
            "{file} names metrics the manager does not export: {unknown:?}\n(exported: {names:?}; \
             histograms, published as summaries with _sum and _count and no _bucket: {histograms:?})"
        );
    }
    // The check bites: a metric renamed in the rules, or a histogram read through buckets.
    let renamed = read(RULES).replace("max(ksync_shards_orphaned)", "max(ksync_shard_orphaned)");
    assert_eq!(unknown_metrics(&renamed, &names, &histograms), BTreeSet::from(["ksync_shard_orphaned".to_string()]));
    let buckets = "histogram_quantile(0.99, rate(ksync_reconcile_duration_seconds_bucket[5m]))";
    assert_eq!(
        unknown_metrics(buckets, &names, &histograms),
        BTreeSet::from(["ksync_reconcile_duration_seconds_bucket".to_string()])
    );
}

/// The manager installs `PrometheusBuilder::new()` as it is (`src/manager.rs`): its
/// histograms are summaries with the quantiles the dashboard reads, and no buckets.
#[test]
fn the_exporter_publishes_histograms_as_summaries_with_the_quantiles_the_dashboard_reads() {
    let controller = read("src/manager.rs");
    assert!(
        Regex::new(r"PrometheusBuilder::new\(\)\s*\.install_recorder\(\)").unwrap().is_match(&controller),
        "the manager's exporter configuration changed: check the dashboard's quantile and _bucket use, then this test"
    );
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        metrics::histogram!("ksync_reconcile_duration_seconds").record(0.25);
    });
    let text = handle.render();
    for quantile in ["0.5", "0.99"] {
        assert!(text.contains(&format!("ksync_reconcile_duration_seconds{{quantile=\"{quantile}\"}}")), "{text}");
    }
    assert!(text.contains("ksync_reconcile_duration_seconds_count 1"), "{text}");
    assert!(!text.contains("_bucket"), "{text}");
    let dashboard = read(DASHBOARD);
    let quantiles = Regex::new(r#"quantile=\\"([0-9.]+)\\""#).unwrap();
    let used: BTreeSet<&str> = quantiles.captures_iter(&dashboard).map(|c| c.get(1).unwrap().as_str()).collect();
    assert!(!used.is_empty());
    for q in used {
        assert!(
            text.contains(&format!("quantile=\"{q}\"")),
            "the dashboard reads quantile {q}, not published:\n{text}"
        );
    }
}

/// Every panel of the dashboard, rows' nested panels included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in dashboard["panels"].as_array().expect("panels") {
        out.push(p);
        out.extend(p["panels"].as_array().into_iter().flatten());
    }
    out
}

#[test]
fn the_dashboard_queries_the_datasource_variable_in_every_panel_with_valid_promql() {
    let dashboard: Value = serde_json::from_str(&read(DASHBOARD)).expect("the dashboard is JSON");
    assert_eq!(dashboard["schemaVersion"], 39);
    assert_eq!(dashboard["uid"], "kuvryn-sync");
    let vars = dashboard["templating"]["list"].as_array().expect("templating.list");
    let var =
        |name: &str| vars.iter().find(|v| v["name"] == name).unwrap_or_else(|| panic!("no variable {name}: {vars:?}"));
    assert_eq!(var("datasource")["type"], "datasource");
    assert_eq!(var("datasource")["query"], "prometheus");
    for name in ["job", "instance"] {
        assert_eq!(var(name)["type"], "query");
        assert_eq!(var(name)["datasource"]["uid"], "${datasource}", "variable {name}");
    }
    let datasource = serde_json::json!({"type": "prometheus", "uid": "${datasource}"});
    let mut exprs = Vec::new();
    let mut titles = BTreeSet::new();
    for p in panels(&dashboard) {
        let title = p["title"].as_str().expect("title");
        if p["type"] == "row" {
            assert!(p.get("targets").is_none(), "row {title} has queries");
            continue;
        }
        assert!(titles.insert(title), "two panels are titled {title}");
        assert_eq!(p["datasource"], datasource, "panel {title}");
        let targets = p["targets"].as_array().unwrap_or_else(|| panic!("panel {title} has no targets"));
        assert!(!targets.is_empty(), "panel {title} has no targets");
        for t in targets {
            assert_eq!(t["datasource"], datasource, "panel {title}");
            let expr = t["expr"].as_str().unwrap_or_else(|| panic!("panel {title}: a target without expr"));
            assert!(expr.contains("ksync_"), "panel {title}: {expr}");
            exprs.push((title.to_string(), expr.to_string()));
        }
    }
    for wanted in [
        "Applications by sync state",
        "Applications by health",
        "Reconcile rate by result",
        "Reconcile duration",
        "Queue depth",
        "Queue time",
        "API requests by verb",
        "API throttling",
        "Shards owned per replica",
        "Orphaned shards",
        "Git fetches by result",
        "Git cache hit ratio",
        "Drift detected and repaired",
        "Webhook certificate days left",
    ] {
        assert!(titles.contains(wanted), "no panel {wanted}: {titles:?}");
    }
    // Valid PromQL: promtool parses each expression (Grafana's variables filled in) as a
    // recording rule.
    let dir = temp_dir("dashboard-promql");
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, (title, expr)) in exprs.iter().enumerate() {
        let filled = expr.replace("$__rate_interval", "5m").replace("$job", ".*").replace("$instance", ".*");
        rules.push_str(&format!(
            "      # {title}\n      - record: dashboard:expr_{i}\n        expr: {}\n",
            serde_json::to_string(&filled).unwrap()
        ));
    }
    let file: PathBuf = dir.path().join("dashboard.rules.yaml");
    std::fs::write(&file, &rules).unwrap();
    let checked = promtool(&["check", "rules", path_str(&file)]);
    assert!(checked.contains(&format!("SUCCESS: {} rules found", exprs.len())), "{checked}\n{rules}");
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 temporary path")
}

struct Kill(std::process::Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn applications(samples: &Samples, sync: &str, health: &str) -> f64 {
    value(samples, "ksync_applications", &[("sync", sync), ("health", health)])
}

#[test]
fn the_manager_publishes_application_states_shards_and_drift_counts() {
    let cluster = Cluster::start();
    let server = GitServer::start();
    let url = server.create_repo("platform");
    let work = WorkTree::clone(&url);
    work.write(
        ".ksync.yaml",
        "applications:\n\
         - metadata: {name: heal}\n  spec: {source: {path: apps/heal}, serviceAccountName: deployer, destination: {namespace: default}, sync: {selfHeal: true, conflictPolicy: adopt}}\n\
         - metadata: {name: watch}\n  spec: {source: {path: apps/watch}, serviceAccountName: deployer, destination: {namespace: default}}\n",
    );
    for app in ["heal", "watch"] {
        work.write(
            &format!("apps/{app}/cm.yaml"),
            &format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {app}}}\ndata: {{greeting: hello}}\n"),
        );
    }
    work.commit_and_push("two apps");
    let cache = temp_dir("obs-cache");
    let port = free_port();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let client = cluster.client().await;
        install_crds(&client).await;
        testkit::apply_as(&client, "test", &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "deployer", "namespace": "default"}})).await;
        testkit::apply_as(&client, "test", &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "deployer", "namespace": "default"},
            "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]})).await;
        testkit::apply_as(&client, "test", &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "deployer", "namespace": "default"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "deployer"},
            "subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": "default"}]})).await;
        let tools = Tools::get();
        let _process = Kill(
            Command::new(env!("CARGO_BIN_EXE_ksync-controller"))
                .args(["run", "--metrics-bind-address", &format!("127.0.0.1:{port}"), "--enable-webhooks", "false"])
                .arg("--git-cache-dir")
                .arg(cache.path())
                .env("KUBECONFIG", cluster.kubeconfig())
                .env("KSYNC_HELM", tools.bin.join("helm"))
                .env("KSYNC_KUBECTL", tools.bin.join("kubectl"))
                .stdin(Stdio::null())
                .spawn()
                .expect("ksync-controller"),
        );
        let repos: Api<Repository> = Api::namespaced(client.clone(), "default");
        let repo: Repository = serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Repository",
            "metadata": {"name": "platform"}, "spec": {"url": url, "ref": {"branch": "main"}, "interval": "1s"},
        }))
        .unwrap();
        repos.create(&PostParams::default(), &repo).await.unwrap();
        let apps: Api<Application> = Api::namespaced(client.clone(), "default");
        let sync_of = |app: Application| app.status.and_then(|s| s.sync).map(|s| s.status);

        // Both deployed: Synced and Healthy, the one shard (no --shards) owned.
        let m = metrics_until(port, "two Applications Synced and Healthy", |m| applications(m, "Synced", "Healthy") == 2.0).await;
        assert_eq!(value(&m, "ksync_shards_owned", &[]), 1.0);
        assert_eq!(value(&m, "ksync_applications_owned", &[]), 2.0);
        assert_eq!(value(&m, "ksync_drift_detected_total", &[]), 0.0);
        // Every combination is published, the empty ones as 0.
        let published = m.keys().filter(|(name, _)| name == "ksync_applications").count();
        assert_eq!(published, 16, "{m:?}");

        // A hand edit of the self-healed Application's ConfigMap: detected and repaired, once.
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let edit = |greeting: &str| Patch::Merge(json!({"data": {"greeting": greeting}}));
        cms.patch("heal", &PatchParams::default(), &edit("edited")).await.unwrap();
        let m = metrics_until(port, "the drift of heal repaired", |m| value(m, "ksync_drift_repaired_total", &[]) == 1.0).await;
        assert_eq!(value(&m, "ksync_drift_detected_total", &[]), 1.0);
        assert_eq!(cms.get("heal").await.unwrap().data.unwrap()["greeting"], "hello");

        // The other one only reports it: detected once, however many reconciles see it.
        cms.patch("watch", &PatchParams::default(), &edit("edited")).await.unwrap();
        eventually("watch Drifted", Duration::from_secs(60), || async {
            (sync_of(apps.get("watch").await.ok()?) == Some(SyncState::Drifted)).then_some(())
        })
        .await;
        let m = metrics_until(port, "watch counted Drifted", |m| applications(m, "Drifted", "Healthy") == 1.0).await;
        assert_eq!(applications(&m, "Synced", "Healthy"), 1.0);
        assert_eq!(value(&m, "ksync_drift_detected_total", &[]), 2.0);
        // More reconciles of the still drifted Application (a watch event each).
        for n in 0..3 {
            let annotate = json!({"metadata": {"annotations": {"sync.kuvryn.io/reconcile-requested-at": format!("2026-01-01T00:00:0{n}Z")}}});
            apps.patch("watch", &PatchParams::default(), &Patch::Merge(annotate)).await.unwrap();
            eventually("the reconcile request handled", Duration::from_secs(60), || async {
                let handled = apps.get("watch").await.ok()?.status?.last_handled_reconcile_at?;
                (handled == format!("2026-01-01T00:00:0{n}Z")).then_some(())
            })
            .await;
        }
        let m = scrape(port).expect("metrics");
        assert_eq!(value(&m, "ksync_drift_detected_total", &[]), 2.0);
        assert_eq!(value(&m, "ksync_drift_repaired_total", &[]), 1.0);

        // Undone by hand: Synced again, the Drifted count back to 0, nothing counted as repaired.
        cms.patch("watch", &PatchParams::default(), &edit("hello")).await.unwrap();
        let m = metrics_until(port, "watch Synced again", |m| applications(m, "Synced", "Healthy") == 2.0).await;
        assert_eq!(applications(&m, "Drifted", "Healthy"), 0.0);
        assert_eq!(value(&m, "ksync_drift_detected_total", &[]), 2.0);
        assert_eq!(value(&m, "ksync_drift_repaired_total", &[]), 1.0);
    });
}
