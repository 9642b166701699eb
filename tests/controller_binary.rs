//! The real `ksync-controller run` process: against the cluster of its kubeconfig, with a Git
//! cache directory, serving Prometheus metrics, /healthz and /readyz; Applications appear from a Repository and are
//! planned and rolled out; HealthChecks get their status; SIGTERM stops it within its drain limit.

use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use kuvryn_sync::api::healthcheck::HealthCheck;
use kuvryn_sync::api::revision::{Revision, RevisionPhase};
use kuvryn_sync::api::{Application, Repository};
use kuvryn_sync::api::{conditions, names};
use serde_json::json;
use testkit::{Cluster, GitServer, WorkTree, eventually, free_port, install_crds, temp_dir};

struct Kill(std::process::Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn the_manager_process_discovers_applications_and_serves_metrics(cluster: Cluster) {
    let server = GitServer::start();
    let url = server.create_repo("platform");
    let work = WorkTree::clone(&url);
    work.write(
        ".ksync.yaml",
        "metadata: {name: web}\nspec: {source: {repository: platform, path: apps/web}, serviceAccountName: deployer, destination: {namespace: default}}\n",
    );
    work.write("apps/web/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\ndata: {greeting: hello}\n");
    work.commit_and_push("one app");
    let cache = temp_dir("bin-cache");
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
        let tools = testkit::Tools::get();
        let _process = Kill(
            Command::new(env!("CARGO_BIN_EXE_ksync-controller"))
                .args(["run", "--metrics-bind-address", &format!("127.0.0.1:{port}")])
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
        let names = eventually("the web Application", Duration::from_secs(60), || async {
            let names: Vec<String> = apps.list(&ListParams::default()).await.ok()?.items.iter().map(|a| a.name_any()).collect();
            (!names.is_empty()).then_some(names)
        })
        .await;
        assert_eq!(names, ["web"]);
        // The Application controller plans it on a Revision and rolls it out.
        let revisions: Api<Revision> = Api::namespaced(client.clone(), "default");
        let rev = eventually("web to be deployed", Duration::from_secs(60), || async {
            let desired = apps.get("web").await.ok()?.status?.desired_revision?;
            let r = revisions.get(&desired).await.ok()?;
            matches!(r.status.as_ref()?.phase, RevisionPhase::Healthy).then_some(r)
        })
        .await;
        assert_eq!(rev.status.unwrap().plan.unwrap().entries[0].resource.name, "web");
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        assert_eq!(cms.get("web").await.unwrap().data.unwrap()["greeting"], "hello");
        // The cache is where the flag says.
        assert!(std::fs::read_dir(cache.path().join("repos")).unwrap().count() == 1);
        let metrics = eventually("metrics", Duration::from_secs(30), || async {
            let out = Command::new("python3")
                .args(["-c", &format!("import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:{port}/metrics').read().decode())")])
                .output()
                .ok()?;
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            text.contains("ksync_git_fetches_total").then_some(text)
        })
        .await;
        assert!(metrics.contains("ksync_git_fetches_total{result=\"fetched\"}"), "{metrics}");
        assert!(metrics.contains("ksync_git_fetch_duration_seconds"), "{metrics}");
        assert!(metrics.contains("ksync_render_duration_seconds"), "{metrics}");
        for path in ["healthz", "readyz"] {
            let out = Command::new("python3")
                .args(["-c", &format!("import urllib.request;r=urllib.request.urlopen('http://127.0.0.1:{port}/{path}');print(r.status, r.read().decode())")])
                .output()
                .unwrap();
            assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "200 ok", "/{path}: {}", String::from_utf8_lossy(&out.stderr));
        }
        // The process writes HealthCheck status (singleton work, here on the one replica).
        testkit::apply_as(&client, "test", &json!({"apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "HealthCheck",
            "metadata": {"name": "widgets", "namespace": "default"},
            "spec": {"target": {"apiVersion": "example.com/v1", "kind": "Widget"}, "current": "status.ready =="}})).await;
        let hcs: Api<HealthCheck> = Api::namespaced(client.clone(), "default");
        let stalled = eventually("the HealthCheck's status", Duration::from_secs(30), || async {
            let status = hcs.get("widgets").await.ok()?.status?;
            conditions::get(&status.conditions, names::conditions::STALLED).cloned()
        })
        .await;
        assert_eq!((stalled.status.as_str(), stalled.reason.as_str()), ("True", names::reasons::INVALID_EXPRESSION));
    });
}

testkit::both!(the_manager_process_discovers_applications_and_serves_metrics,);

/// A replica told to stop (SIGTERM) exits within its drain limit even when requests it has in
/// flight never get an answer: here the API server accepts connections and never replies.
#[test]
fn a_replica_stops_within_its_drain_limit_when_the_api_server_never_answers() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (accepted_tx, accepted) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().map_while(Result::ok) {
            held.push(stream);
            let _ = accepted_tx.send(());
        }
    });
    let dir = temp_dir("hung-api");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n\
             users: [{{name: u, user: {{token: t}}}}]\ncontexts: [{{name: c, context: {{cluster: c, user: u}}}}]\ncurrent-context: c\n"
        ),
    )
    .unwrap();
    let mut process = Kill(
        Command::new(env!("CARGO_BIN_EXE_ksync-controller"))
            .args(["run", "--metrics-bind-address", ""])
            .arg("--git-cache-dir")
            .arg(dir.path().join("cache"))
            .env("KUBECONFIG", &kubeconfig)
            .stdin(Stdio::null())
            .spawn()
            .expect("ksync-controller"),
    );
    // Some request is in flight, unanswered.
    accepted.recv_timeout(Duration::from_secs(60)).expect("the replica to call the API server");
    let pid = rustix::process::Pid::from_child(&process.0);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let status = testkit::wait_for(
        "the replica to exit after SIGTERM (its drain limit is 20s)",
        Duration::from_secs(60),
        || process.0.try_wait().unwrap(),
    );
    assert!(status.success(), "{status}");
}
