//! The real `ksync` binary against simcluster (or the cluster in `KSYNC_E2E_KUBECONFIG`):
//! Applications, Revisions and Repositories are created with their status through the API, the
//! read commands' tables and JSON are compared with the snapshots in `cli/tests/snapshots/`, `--watch`
//! is shown to redraw on a status change, and every error is one line on stderr with a non-zero
//! exit status. AGE is made deterministic with `KSYNC_NOW`: every time in the fixtures is an
//! offset from the first object's `creationTimestamp`, and "now" is 10m30s after it.
//!
//! `KSYNC_BIN` runs another `ksync` binary than the one Cargo built for this test (an installed
//! one, or a copy when several checkouts share a target directory and overwrite each other's
//! `target/debug/ksync`).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kuvryn_sync::api::names;
use kuvryn_sync::api::{Application, Repository, Revision};
use serde_json::{Value, json};
use testkit::{Cluster, apply_as, install_crds, temp_dir};

const C0: &str = "2c26b46b68ffc68ff99b453c1d30413413422d70";
const C1: &str = "3e23e8160039594a33894f6564e1b1348bbd7a00";
const C2: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b";
const DIGEST: &str = "sha256:5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8";

/// Times of the fixtures, as offsets from the first object's creation.
struct Clock {
    t0: Timestamp,
}

impl Clock {
    /// `d` before T0, RFC 3339.
    fn ago(&self, d: SignedDuration) -> String {
        (self.t0 - d).to_string()
    }
    /// What `KSYNC_NOW` is set to: 10m30s after T0, so objects created within 30 s of T0 are
    /// all "10m" old.
    fn now(&self) -> String {
        (self.t0 + SignedDuration::from_secs(630)).to_string()
    }
}

fn mins(m: i64) -> SignedDuration {
    SignedDuration::from_mins(m)
}

fn hours(h: i64) -> SignedDuration {
    SignedDuration::from_hours(h)
}

fn condition(type_: &str, status: &str, reason: &str, message: &str, at: &str) -> Value {
    json!({"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": at,
           "observedGeneration": 1})
}

async fn create<K>(client: &kube::Client, ns: &str, obj: Value) -> K
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + serde::de::DeserializeOwned
        + serde::Serialize
        + Clone
        + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(obj).expect("fixture");
    Api::<K>::namespaced(client.clone(), ns).create(&PostParams::default(), &obj).await.expect("create")
}

async fn set_status<K>(client: &kube::Client, ns: &str, name: &str, status: Value)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + serde::de::DeserializeOwned
        + Clone
        + std::fmt::Debug,
{
    Api::<K>::namespaced(client.clone(), ns)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(json!({"status": status})))
        .await
        .expect("patch status");
}

fn app_spec(path: &str, ns: &str) -> Value {
    json!({"source": {"repository": "platform", "path": path}, "serviceAccountName": "deployer",
           "destination": {"namespace": ns}, "sync": {"prune": true, "conflictPolicy": "adopt"}})
}

async fn revision(
    client: &kube::Client,
    clock: &Clock,
    a: &str,
    name: &str,
    app: &str,
    commit: &str,
    created: SignedDuration,
) {
    let created_at = clock.t0 - created + SignedDuration::from_nanos(123_456_789);
    create::<Revision>(
        client,
        a,
        json!({
            "apiVersion": names::API_VERSION, "kind": "Revision",
            "metadata": {"name": name, "namespace": a,
                         "labels": {names::labels::APPLICATION: app, names::labels::MANAGED_BY: names::labels::MANAGED_BY_VALUE},
                         "annotations": {names::annotations::CREATED_AT: created_at.to_string()}},
            "spec": {"application": app, "serviceAccountName": "deployer",
                     "source": {"repository": "platform", "url": "https://git.example.invalid/platform.git",
                                "ref": "branch/main", "commit": commit, "path": app},
                     "render": {"type": "Yaml"}},
        }),
    )
    .await;
}

/// The objects every snapshot shows, in the namespaces `a` (`team-a` in the snapshots) and `b`;
/// returns the clock they were made with.
async fn fixtures(client: &kube::Client, a: &str, b: &str) -> Clock {
    install_crds(client).await;
    let created =
        apply_as(client, "test", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": a}})).await;
    apply_as(client, "test", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": b}})).await;
    let t0: Timestamp = created["metadata"]["creationTimestamp"].as_str().expect("creationTimestamp").parse().unwrap();
    let clock = Clock { t0: Timestamp::from_second(t0.as_second()).unwrap() };

    // Repositories: one Ready, one still fetching (also managed by `web`), one failing elsewhere.
    for (ns, name, url, reference) in [
        (a, "platform", "https://git.example.invalid/platform.git", json!({"branch": "main"})),
        (a, "vendored", "https://git.example.invalid/vendored.git", json!({"tag": "v1.4.0"})),
        (b, "charts", "ssh://git@git.example.invalid/charts.git", json!({"commit": C0})),
    ] {
        create::<Repository>(
            client,
            ns,
            json!({"apiVersion": names::API_VERSION, "kind": "Repository", "metadata": {"name": name, "namespace": ns},
                   "spec": {"url": url, "ref": reference}}),
        )
        .await;
    }
    set_status::<Repository>(client, a, "platform", json!({
        "observedGeneration": 1,
        "conditions": [condition("Ready", "True", "Succeeded", &format!("resolved branch/main to {C2}"), &clock.ago(mins(1)))],
        "revision": {"ref": "branch/main", "commit": C2, "fetchedAt": clock.ago(mins(1))},
        "applications": {"discovered": 2, "files": [".ksync.yaml"]},
    }))
    .await;
    set_status::<Repository>(
        client,
        a,
        "vendored",
        json!({
            "observedGeneration": 1,
            "conditions": [condition("Ready", "False", "Progressing", "fetching tag/v1.4.0", &clock.ago(mins(2)))],
        }),
    )
    .await;
    set_status::<Repository>(client, b, "charts", json!({
        "observedGeneration": 1,
        "conditions": [condition("Ready", "False", "SourceFailure", "authentication required: Secret git-credentials has no identity", &clock.ago(hours(1)))],
    }))
    .await;

    // Applications: `web` degraded mid-rollout, `api` healthy, `worker` (team-b) not reconciled yet.
    for (ns, name) in [(a, "web"), (a, "api"), (b, "worker")] {
        create::<Application>(
            client,
            ns,
            json!({"apiVersion": names::API_VERSION, "kind": "Application",
                   "metadata": {"name": name, "namespace": ns}, "spec": app_spec(name, ns)}),
        )
        .await;
    }
    set_status::<Application>(client, a, "web", json!({
        "observedGeneration": 1,
        "conditions": [
            condition("Ready", "False", "Degraded", &format!("ConfigMap {a}/feature-flags is missing"), &clock.ago(mins(5))),
            condition("Reconciling", "True", "Progressing", "attempt 2 of 3 of Revision web-5f1c0a2e", &clock.ago(mins(5))),
        ],
        "sync": {"status": "OutOfSync", "revision": "web-5f1c0a2e", "commit": C2},
        "health": {"status": "Degraded", "message": format!("ConfigMap {a}/feature-flags is missing; Repository {a}/vendored: Ready is False (Progressing): fetching tag/v1.4.0")},
        "desiredRevision": "web-5f1c0a2e",
        "lastHealthyRevision": "web-1d2e3f4a",
    }))
    .await;
    set_status::<Application>(client, a, "api", json!({
        "observedGeneration": 1,
        "conditions": [condition("Ready", "True", "Succeeded", "Revision api-77aa88bb is deployed and Healthy", &clock.ago(hours(2)))],
        "sync": {"status": "Synced", "revision": "api-77aa88bb", "commit": C2},
        "health": {"status": "Healthy"},
        "desiredRevision": "api-77aa88bb",
        "lastHealthyRevision": "api-77aa88bb",
    }))
    .await;

    // Revisions of `web` (and one of `api`, which `ksync history web` must leave out).
    revision(client, &clock, a, "web-0a0b0c0d", "web", C0, hours(96)).await;
    revision(client, &clock, a, "web-1d2e3f4a", "web", C1, hours(48)).await;
    revision(client, &clock, a, "web-5f1c0a2e", "web", C2, hours(3)).await;
    revision(client, &clock, a, "api-77aa88bb", "api", C2, hours(3)).await;
    let attempt = |n: i32, result: &str, reason: Option<&str>, started: SignedDuration| {
        let mut a = json!({"number": n, "startedAt": clock.ago(started), "result": result, "planDigest": DIGEST});
        if result != "Running" {
            a["finishedAt"] = json!(clock.ago(started - mins(1)));
        }
        if let Some(r) = reason {
            a["reason"] = json!(r);
        }
        a
    };
    set_status::<Revision>(client, a, "web-0a0b0c0d", json!({
        "observedGeneration": 1,
        "phase": "Failed",
        "attempts": [attempt(1, "Failed", Some("ValidationFailure"), hours(95))],
        "failure": {"reason": "ValidationFailure", "message": "Deployment web: spec.replicas must be >= 0", "retryable": false},
    }))
    .await;
    set_status::<Revision>(client, a, "web-1d2e3f4a", json!({
        "observedGeneration": 1,
        "phase": "Healthy",
        "attempts": [attempt(1, "Succeeded", None, hours(47))],
        "plan": {"digest": DIGEST, "summary": {"create": 1, "update": 0, "unchanged": 0, "delete": 0},
                 "entries": [{"kind": "Secret", "namespace": a, "name": "creds", "version": "v1", "action": "Create"}]},
        "health": {"status": "Healthy", "healthy": 1},
        "deployedDesiredStateHash": DIGEST,
    }))
    .await;
    set_status::<Revision>(client, a, "web-5f1c0a2e", json!({
        "observedGeneration": 1,
        "phase": "Progressing",
        "previousHealthyRevision": "web-1d2e3f4a",
        "attempts": [attempt(1, "Failed", Some("HealthTimeout"), mins(20)), attempt(2, "Running", None, mins(5))],
        "failure": {"reason": "HealthTimeout", "message": format!("ConfigMap {a}/feature-flags is missing after 5m"), "retryable": true},
        "health": {"status": "Degraded", "healthy": 3, "progressing": 1, "degraded": 1, "message": format!("ConfigMap {a}/feature-flags is missing")},
        "plan": {
            "digest": DIGEST,
            "summary": {"create": 1, "update": 2, "unchanged": 3, "delete": 1},
            "truncated": false,
            "entries": [
                {"kind": "Secret", "namespace": a, "name": "creds", "version": "v1", "action": "Unchanged"},
                {"kind": "ConfigMap", "namespace": a, "name": "settings", "version": "v1", "action": "Update",
                 "fields": ["data.color", "data.size"]},
                {"kind": "ConfigMap", "namespace": a, "name": "feature-flags", "version": "v1", "action": "Create"},
                {"group": "sync.kuvryn.io", "kind": "Repository", "namespace": a, "name": "vendored",
                 "version": "v1alpha1", "action": "Unchanged"},
                {"group": "apps", "kind": "Deployment", "namespace": a, "name": "web", "version": "v1",
                 "action": "Update", "fields": ["spec.template.spec.containers[name=web].image"],
                 "adopted": [{"field": "spec.replicas", "manager": "kubectl-edit"}]},
                {"kind": "Secret", "namespace": a, "name": "legacy-token", "version": "v1", "action": "Unchanged",
                 "warning": "not pruned: Secrets are a high-risk kind; delete it by hand once it is no longer needed"},
                {"kind": "ConfigMap", "namespace": a, "name": "old-flags", "version": "v1", "action": "Delete"},
            ],
        },
    }))
    .await;
    set_status::<Revision>(client, a, "api-77aa88bb", json!({"observedGeneration": 1, "phase": "Healthy"})).await;

    // The live objects of `web`'s plan, but for feature-flags (missing). The Deployment is
    // paused, so it is Healthy whatever the simulated kubelet does.
    for obj in [
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": a}, "stringData": {"k": "v"}}),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "legacy-token", "namespace": a}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": a}, "data": {"color": "blue"}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": a},
               "spec": {"paused": true, "replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                        "template": {"metadata": {"labels": {"app": "web"}},
                                     "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}}),
    ] {
        apply_as(client, "test", &obj).await;
    }
    clock
}

/// The binary under test: `KSYNC_BIN`, else the one Cargo built.
fn ksync_bin() -> PathBuf {
    std::env::var_os("KSYNC_BIN").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_ksync")), PathBuf::from)
}

/// The test kit runs the `ksync` Cargo built for these tests (it finds it at run time: a
/// library gets no `CARGO_BIN_EXE_*`).
#[test]
fn the_kit_runs_the_ksync_cargo_built_for_these_tests() {
    let kit = testkit::ksync::bin().canonicalize().unwrap();
    assert_eq!(kit, ksync_bin().canonicalize().unwrap());
}

/// The `ksync` binary with a clean environment: no ambient kubeconfig, an empty HOME, no colour
/// settings, and `KSYNC_NOW` fixed.
struct Ksync {
    kubeconfig: PathBuf,
    now: String,
    home: tempfile::TempDir,
}

impl Ksync {
    fn new(kubeconfig: &Path, now: String) -> Ksync {
        Ksync { kubeconfig: kubeconfig.to_path_buf(), now, home: temp_dir("ksync-home") }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(ksync_bin());
        c.env_clear()
            .env("HOME", self.home.path())
            .env("KSYNC_NOW", &self.now)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig);
        c.args(args);
        c
    }

    /// Run; it must succeed with nothing on stderr. Returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.cmd(args).output().expect("ksync");
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(
            out.status.success() && stderr.is_empty(),
            "ksync {args:?}: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
            out.status
        );
        stdout.into_owned()
    }
}

/// Run `cmd`; it must fail with exit status 1, nothing on stdout and one line on stderr, which
/// is returned (without its newline).
fn fails(mut cmd: Command) -> String {
    let out = cmd.output().expect("ksync");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{cmd:?}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.is_empty(), "{cmd:?} printed {stdout}");
    assert!(stderr.ends_with('\n') && stderr.lines().count() == 1, "{cmd:?}: not one line: {stderr:?}");
    stderr.trim_end().to_string()
}

/// Snapshot machine-readable output with what the API server makes up (uids, resource
/// versions, times) replaced.
fn assert_objects_snapshot(name: &str, output: &str) {
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z", "[time]");
    settings.add_filter(r#""uid": "[0-9a-f-]+""#, r#""uid": "[uid]""#);
    settings.add_filter(r#""resourceVersion": "\d+""#, r#""resourceVersion": "[rv]""#);
    settings.add_filter(r"uid: [0-9a-f-]+", "uid: '[uid]'");
    settings.add_filter(r#"resourceVersion: ['"]\d+['"]"#, "resourceVersion: '[rv]'");
    settings.bind(|| insta::assert_snapshot!(name, output));
}

fn read_commands_print_tables_and_objects(cluster: Cluster) {
    let runtime = testkit::runtime();
    let clock = runtime.block_on(async { fixtures(&cluster.client().await, "team-a", "team-b").await });
    let k = Ksync::new(&cluster.kubeconfig(), clock.now());

    // `ksync apps` and its aliases, namespaces and formats.
    let apps = k.ok(&["apps", "-n", "team-a"]);
    insta::assert_snapshot!("apps", apps);
    assert_eq!(k.ok(&["app", "list", "-n", "team-a"]), apps, "`ksync app list` is `ksync apps`");
    insta::assert_snapshot!("apps_all_namespaces", k.ok(&["apps", "-A"]));
    insta::assert_snapshot!("apps_wide", k.ok(&["apps", "-n", "team-a", "-o", "wide"]));
    assert_objects_snapshot("apps_json", &k.ok(&["apps", "-n", "team-a", "-o", "json"]));
    let yaml = k.ok(&["apps", "-n", "team-b", "-o", "yaml"]);
    let parsed: Value = kuvryn_sync::yaml::from_str(&yaml).unwrap();
    assert_eq!(parsed["items"][0]["metadata"]["name"], "worker", "{yaml}");
    assert!(!yaml.contains("managedFields"), "{yaml}");

    // The context's namespace is the default one.
    let dir = temp_dir("ctx");
    let in_team_a = dir.path().join("kubeconfig");
    let admin = std::fs::read_to_string(cluster.kubeconfig()).unwrap();
    std::fs::write(&in_team_a, admin.replace("namespace: default", "namespace: team-a")).unwrap();
    assert_eq!(Ksync::new(&in_team_a, clock.now()).ok(&["apps"]), apps);

    // `ksync app NAME` is `ksync app get NAME`.
    let web = k.ok(&["app", "web", "-n", "team-a"]);
    insta::assert_snapshot!("app_web", web);
    assert_eq!(k.ok(&["app", "get", "web", "-n", "team-a"]), web);
    insta::assert_snapshot!("app_api", k.ok(&["app", "api", "-n", "team-a"]));
    insta::assert_snapshot!("app_worker", k.ok(&["app", "worker", "-n", "team-b"]));
    assert_objects_snapshot("app_web_yaml", &k.ok(&["app", "web", "-n", "team-a", "-o", "yaml"]));
    let json: Value = serde_json::from_str(&k.ok(&["app", "get", "web", "-n", "team-a", "-o", "json"])).unwrap();
    assert_eq!(json["status"]["desiredRevision"], "web-5f1c0a2e");

    // `ksync plan`: the desired Revision, or the one asked for.
    insta::assert_snapshot!("plan_web", k.ok(&["plan", "web", "-n", "team-a"]));
    insta::assert_snapshot!(
        "plan_web_last_healthy",
        k.ok(&["plan", "web", "-n", "team-a", "--revision", "web-1d2e3f4a"])
    );
    insta::assert_snapshot!("plan_web_no_plan", k.ok(&["plan", "web", "-n", "team-a", "--revision", "web-0a0b0c0d"]));
    assert_objects_snapshot("plan_web_json", &k.ok(&["plan", "web", "-n", "team-a", "-o", "json"]));

    // `ksync history`: newest first, only this Application's Revisions.
    insta::assert_snapshot!("history_web", k.ok(&["history", "web", "-n", "team-a"]));
    let list: Value = serde_json::from_str(&k.ok(&["history", "web", "-n", "team-a", "-o", "json"])).unwrap();
    let names: Vec<&str> =
        list["items"].as_array().unwrap().iter().map(|r| r["metadata"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["web-5f1c0a2e", "web-1d2e3f4a", "web-0a0b0c0d"]);

    // `ksync repos`.
    insta::assert_snapshot!("repos", k.ok(&["repos", "-n", "team-a"]));
    insta::assert_snapshot!("repos_all_namespaces_wide", k.ok(&["repos", "-A", "-o", "wide"]));
    assert_objects_snapshot("repos_json", &k.ok(&["repos", "-n", "team-b", "-o", "json"]));

    // Nothing to list is not an error: kubectl's message goes to stderr, stdout stays empty.
    let out = k.cmd(&["apps", "-n", "empty"]).output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "No Applications found in namespace \"empty\".\n");

    // Colour only when asked for: stdout is a pipe here.
    let coloured = k.ok(&["apps", "-n", "team-a", "--color", "always"]);
    assert!(coloured.contains("\u{1b}[31mDegraded\u{1b}[0m"), "{coloured:?}");
    assert!(!apps.contains('\u{1b}'));
}

fn apps_watch_redraws_when_a_status_changes(cluster: Cluster) {
    let runtime = testkit::runtime();
    let client = runtime.block_on(cluster.client());
    let clock = runtime.block_on(fixtures(&client, "watch-a", "watch-b"));
    let k = Ksync::new(&cluster.kubeconfig(), clock.now());
    let mut child =
        k.cmd(&["apps", "-n", "watch-a", "--watch"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let mut wait_for_line = |what: &str, want: &dyn Fn(&str) -> bool| {
        let end = Instant::now() + Duration::from_secs(30);
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    let hit = want(&line);
                    seen.push(line);
                    if hit {
                        return;
                    }
                }
                Err(_) => panic!("timed out waiting for {what}; output so far:\n{}", seen.join("\n")),
            }
        }
    };
    wait_for_line("the first table", &|l| l.starts_with("web ") && l.contains("OutOfSync"));

    runtime.block_on(set_status::<Application>(&client, "watch-a", "api", json!({
        "sync": {"status": "Drifted"},
        "health": {"status": "Progressing"},
        "conditions": [condition("Ready", "False", "Progressing", "ConfigMap watch-a/settings drifted", &clock.ago(mins(1)))],
    })));
    wait_for_line("the redrawn table", &|l| l.starts_with("api ") && l.contains("Drifted"));
    let _ = child.kill();
    let _ = child.wait();
    let text = seen.join("\n");
    // Two frames, separated by a blank line (no screen clearing on a pipe), the same header.
    assert_eq!(text.matches("NAME   SYNC").count(), 2, "{text}");
    assert!(text.contains("\n\nNAME"), "{text}");
    assert!(!text.contains('\u{1b}'), "{text}");
}

fn errors_are_one_line_with_a_non_zero_exit_status(cluster: Cluster) {
    let runtime = testkit::runtime();
    let client = runtime.block_on(cluster.client());
    let k = Ksync::new(&cluster.kubeconfig(), "2026-01-01T00:00:00Z".into());

    // No CRDs yet (the cluster of KSYNC_E2E_KUBECONFIG may have them already).
    if cluster.is_fresh() {
        assert_eq!(
            fails(k.cmd(&["apps"])),
            "error: the API server does not serve sync.kuvryn.io/v1alpha1 applications (are the Kuvryn Sync CRDs installed?)"
        );
    }

    runtime.block_on(async {
        install_crds(&client).await;
        apply_as(&client, "test", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "errors"}}))
            .await;
    });
    // An unknown Application, whichever command names it.
    for cmd in [&["app", "nope"][..], &["app", "get", "nope"], &["plan", "nope"], &["history", "nope"]] {
        let mut args = cmd.to_vec();
        args.extend(["-n", "errors"]);
        assert_eq!(fails(k.cmd(&args)), r#"error: Application "nope" not found in namespace "errors""#, "{args:?}");
    }
    // An Application without a desired Revision has no plan, and a Revision that is not there.
    runtime.block_on(create::<Application>(
        &client,
        "errors",
        json!({"apiVersion": names::API_VERSION, "kind": "Application", "metadata": {"name": "fresh", "namespace": "errors"},
               "spec": app_spec("fresh", "errors")}),
    ));
    assert_eq!(
        fails(k.cmd(&["plan", "fresh", "-n", "errors"])),
        r#"error: Application "fresh" in namespace "errors" has no desired Revision yet"#
    );
    assert_eq!(
        fails(k.cmd(&["plan", "fresh", "-n", "errors", "--revision", "gone"])),
        r#"error: Revision "gone" not found in namespace "errors""#
    );

    // Forbidden: a ServiceAccount with no RBAC at all.
    {
        let dir = temp_dir("nobody");
        let kubeconfig = runtime.block_on(async {
            let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), "errors");
            sas.create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "nobody"}})).unwrap(),
            )
            .await
            .unwrap();
            let request = TokenRequest {
                spec: Some(TokenRequestSpec { expiration_seconds: Some(3600), ..Default::default() }),
                ..Default::default()
            };
            let token = sas
                .create_token_request("nobody", &PostParams::default(), &request)
                .await
                .unwrap()
                .status
                .unwrap()
                .token
                .unwrap();
            let path = dir.path().join("kubeconfig");
            cluster.write_kubeconfig(&path, Some(&token), None);
            path
        });
        let nobody = Ksync::new(&kubeconfig, "2026-01-01T00:00:00Z".into());
        assert_eq!(
            fails(nobody.cmd(&["apps", "-n", "errors"])),
            r#"error: applications.sync.kuvryn.io is forbidden: User "system:serviceaccount:errors:nobody" cannot list resource "applications" in API group "sync.kuvryn.io" in the namespace "errors""#
        );
        assert_eq!(
            fails(nobody.cmd(&["app", "fresh", "-n", "errors"])),
            r#"error: applications.sync.kuvryn.io "fresh" is forbidden: User "system:serviceaccount:errors:nobody" cannot get resource "applications" in API group "sync.kuvryn.io" in the namespace "errors""#
        );
        assert!(fails(nobody.cmd(&["repos", "-A"])).contains("cannot list resource \"repositories\""));
    }

    // Unreachable: a kubeconfig pointing at a closed port.
    let dir = temp_dir("closed");
    let closed = dir.path().join("kubeconfig");
    let port = testkit::free_port();
    cluster.write_kubeconfig(&closed, None, Some(&format!("http://127.0.0.1:{port}")));
    let err = fails(Ksync::new(&closed, "2026-01-01T00:00:00Z".into()).cmd(&["apps"]));
    assert!(
        err.starts_with(&format!("error: cannot reach the API server at http://127.0.0.1:{port}: "))
            && err.contains("refused"),
        "{err}"
    );

    // No cluster at all: no kubeconfig flag, no KUBECONFIG, no ~/.kube/config, not in a Pod.
    let home = temp_dir("empty-home");
    let mut cmd = Command::new(ksync_bin());
    cmd.env_clear().env("HOME", home.path()).arg("apps");
    assert_eq!(
        fails(cmd),
        "error: no cluster configured: set KUBECONFIG or pass --kubeconfig (no ~/.kube/config found, and not running in a Pod)"
    );
    // A context the kubeconfig does not have.
    let err = fails(k.cmd(&["apps", "--context", "nope"]));
    assert!(err.starts_with("error: kubeconfig: ") && err.contains("nope"), "{err}");
    drop(dir);
}

#[test]
fn completions_come_from_the_same_definitions_as_help() {
    let run = |shell: &str| {
        let out = Command::new(ksync_bin()).args(["completion", shell]).env_clear().output().unwrap();
        assert!(out.status.success(), "{shell}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let bash = run("bash");
    let zsh = run("zsh");
    let fish = run("fish");
    assert!(zsh.starts_with("#compdef ksync"), "{zsh}");
    assert!(fish.contains("complete -c ksync"), "{fish}");
    for script in [&bash, &zsh, &fish] {
        for word in [
            "apps",
            "app",
            "plan",
            "history",
            "repos",
            "completion",
            "kubeconfig",
            "context",
            "all-namespaces",
            "watch",
        ] {
            assert!(script.contains(word), "{word} missing from a completion script");
        }
        // Help texts may say "now" (`ksync reconcile`); no flag or variable may.
        for word in ["--now", "KSYNC_NOW", "ksync_now"] {
            assert!(!script.contains(word), "KSYNC_NOW is for tests: no flag, nothing to complete ({word})");
        }
        for word in ["reconcile", "suspend", "resume", "notifications"] {
            assert!(script.contains(word), "{word} missing from a completion script");
        }
    }
    let mut help = Command::new(ksync_bin());
    help.arg("--help").env_clear();
    let help = String::from_utf8(help.output().unwrap().stdout).unwrap();
    for sub in ["apps", "app", "plan", "history", "repos", "completion", "version"] {
        assert!(help.contains(&format!("  {sub} ")), "{sub} missing from --help:\n{help}");
        assert!(bash.contains(sub));
    }
    // `ksync completion` with no or an unknown shell is a usage error.
    let out = Command::new(ksync_bin()).args(["completion", "tcsh"]).env_clear().output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn logs_json_on_request_and_refuses_an_unknown_format() {
    let out = Command::new(ksync_bin()).args(["--log-format", "json", "version"]).output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("sync.kuvryn.io/v1alpha1"));
    let bad = Command::new(ksync_bin()).args(["--log-format", "xml", "version"]).output().unwrap();
    assert!(!bad.status.success());
}

testkit::both!(
    read_commands_print_tables_and_objects,
    apps_watch_redraws_when_a_status_changes,
    errors_are_one_line_with_a_non_zero_exit_status,
);
