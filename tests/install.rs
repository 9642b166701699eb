//! `docs/install.md` as a platform engineer follows it: every `sh` block of the guide, in its
//! order, run by `bash` from the repository's root with the real `helm` and `kubectl`, against
//! simcluster and a real kube-apiserver. The Pods the chart's Deployment gets are run as a
//! kubelet would run them: for each Pod, the manager from the image's root filesystem
//! (`scripts/build-image --rootfs`, chrooted, as the image's user) with that Pod's container
//! arguments and environment and a TokenRequest token of its ServiceAccount; SIGTERM when the
//! Pod goes. Between the sections the test checks what the guide promises: the replicas split
//! the shards, the team's Application deploys as its ServiceAccount, an upgrade and a scale-out
//! keep every shard owned, the alert rules and the dashboard load, and an uninstall stops the
//! manager and leaves the deployed objects in place.
//!
//! Two things of the guide are the reader's own and the test stands in for them: the team's Git
//! server (a `git daemon` on loopback, its URL put in place of the guide's) and a Prometheus
//! Operator's PrometheusRule CRD (a schemaless stand-in).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::ApiResource;
use kuvryn_sync::api::Application;
use kuvryn_sync::api::revision::{Revision, RevisionPhase};
use serde_json::{Value, json};
use testkit::image::{ImageRoot, isolation};
use testkit::replica::{Replica, Runtime, shard_holders, token};
use testkit::{Cluster, GitServer, Tools, WorkTree, apply_as, repo_root, temp_dir};

const GUIDE: &str = "docs/install.md";
const NS: &str = "kuvryn-system";
const TENANT: &str = "team-a";
/// The chart's default `shards`, which the guide keeps.
const SHARDS: usize = 16;
/// The chart's default `leaseDuration`.
const LEASE: Duration = Duration::from_secs(15);

/// The guide's code blocks in `lang`, each with the `## ` section it is in, in order.
fn blocks(guide: &str, lang: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut section = String::new();
    // The open block and its fence's indentation (a block inside a list item is indented).
    let mut block: Option<(String, usize)> = None;
    for line in guide.lines() {
        let indent = line.len() - line.trim_start().len();
        match &mut block {
            Some((b, _)) if line.trim_start() == "```" => {
                out.push((section.clone(), std::mem::take(b)));
                block = None;
            }
            Some((b, fence)) => {
                b.push_str(line.get(*fence..).unwrap_or("").trim_end_matches('\r'));
                b.push('\n');
            }
            None if line.trim_start() == format!("```{lang}") => block = Some((String::new(), indent)),
            None => {
                if let Some(h) = line.strip_prefix("## ") {
                    section = h.trim().to_string();
                }
            }
        }
    }
    out
}

/// What the test puts in place of the guide's placeholders: (placeholder, value).
fn substitute(script: &str, substitutions: &[(&str, String)], used: &mut BTreeSet<String>) -> String {
    let mut script = script.to_string();
    for (placeholder, value) in substitutions {
        if script.contains(placeholder) {
            used.insert(placeholder.to_string());
            script = script.replace(placeholder, value);
        }
    }
    script
}

/// Run a block as a reader pastes it into a shell: `bash -e` in the repository's root, the
/// tools on `PATH`, the cluster's admin kubeconfig. Returns its output; panics when it fails.
fn shell(cluster: &Cluster, tools: &Tools, home: &Path, script: &str) -> String {
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", tools.bin.display());
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .current_dir(repo_root())
        .env_clear()
        .env("PATH", path)
        .env("HOME", home)
        .env("KUBECONFIG", cluster.kubeconfig())
        .stdin(Stdio::null())
        .output()
        .expect("bash");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "a command of {GUIDE} failed ({}):\n{script}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("$ {}\n{stdout}", script.trim_end());
    stdout
}

/// Runs the manager of each Pod of the chart's Deployment, as a kubelet would, whenever
/// [`Kubelet::sync`] is called.
struct Kubelet<'a> {
    cluster: &'a Cluster,
    client: kube::Client,
    runtime: Runtime<'a>,
    dir: &'a Path,
    running: BTreeMap<String, Replica>,
    stopping: Vec<Replica>,
    /// Every Pod it ran.
    ran: BTreeSet<String>,
}

impl Kubelet<'_> {
    /// Start a manager for every scheduled Pod of the chart not being deleted; SIGTERM those
    /// whose Pod is gone or being deleted.
    async fn sync(&mut self) {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), NS);
        let Ok(list) = pods.list(&ListParams::default().labels("app.kubernetes.io/name=kuvryn-sync")).await else {
            return;
        };
        let mut live = BTreeSet::new();
        for pod in list.items {
            let name = pod.metadata.name.clone().expect("name");
            let Some(spec) = pod.spec.as_ref().filter(|s| s.node_name.is_some()) else { continue };
            if pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            live.insert(name.clone());
            if self.running.contains_key(&name) {
                continue;
            }
            let account = spec.service_account_name.clone().expect("the chart sets serviceAccountName");
            let kubeconfig = self.dir.join(format!("{name}.kubeconfig"));
            self.cluster.write_kubeconfig(&kubeconfig, Some(&token(&self.client, NS, &account).await), None);
            let container = serde_json::to_value(&spec.containers[0]).expect("container");
            assert_eq!(container["name"], "manager");
            let replica = Replica::start(&container, &name, NS, &kubeconfig, self.dir, self.runtime);
            self.ran.insert(name.clone());
            self.running.insert(name, replica);
        }
        let gone: Vec<String> = self.running.keys().filter(|n| !live.contains(*n)).cloned().collect();
        for name in gone {
            let replica = self.running.remove(&name).expect("running");
            replica.signal_term();
            self.stopping.push(replica);
        }
    }

    /// Every replica's log.
    fn logs(&self) -> String {
        self.running.values().chain(&self.stopping).map(Replica::log).collect::<Vec<_>>().join("\n---\n")
    }

    /// Keep syncing until `check` answers or `deadline` passes.
    async fn wait<T, F, Fut>(&mut self, what: &str, deadline: Duration, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        let end = Instant::now() + deadline;
        loop {
            self.sync().await;
            if let Some(v) = check().await {
                return v;
            }
            assert!(Instant::now() < end, "timed out after {deadline:?} waiting for {what}");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Sync while the Deployment rolls, until no Pod of `before` runs and `replicas` new ones
    /// hold every shard; returns the longest time a shard had no holder meanwhile.
    async fn roll(&mut self, before: &BTreeSet<String>, replicas: usize) -> Duration {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), NS);
        let end = Instant::now() + Duration::from_secs(180);
        let mut unheld_since: Vec<Option<Instant>> = vec![None; SHARDS];
        let mut longest = Duration::ZERO;
        loop {
            self.sync().await;
            let holders = shard_holders(&leases, "kuvryn-sync", SHARDS).await;
            let now = Instant::now();
            for (since, holder) in unheld_since.iter_mut().zip(&holders) {
                match (holder, *since) {
                    (None, None) => *since = Some(now),
                    (Some(_), Some(t)) => {
                        longest = longest.max(now - t);
                        *since = None;
                    }
                    _ => {}
                }
            }
            let running: BTreeSet<&String> = self.running.keys().collect();
            let rolled = running.len() == replicas && running.iter().all(|p| !before.contains(*p));
            if rolled
                && holders.iter().all(|h| h.as_ref().is_some_and(|h| running.iter().any(|p| h.contains(p.as_str()))))
            {
                return longest;
            }
            assert!(Instant::now() < end, "timed out waiting for the upgrade to roll {replicas} replicas");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Wait until the running replicas, and only they, hold every shard.
    async fn shards_split(&mut self, replicas: usize) {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), NS);
        let what = format!("{replicas} replicas to hold every shard");
        let end = Instant::now() + Duration::from_secs(120);
        loop {
            self.sync().await;
            let holders: Option<BTreeSet<String>> =
                shard_holders(&leases, "kuvryn-sync", SHARDS).await.into_iter().collect();
            let running: BTreeSet<&String> = self.running.keys().collect();
            if let Some(holders) = holders
                && running.len() == replicas
                && holders.len() == replicas
                && holders.iter().all(|h| running.iter().any(|pod| h.contains(pod.as_str())))
            {
                return;
            }
            assert!(Instant::now() < end, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// The team's repository: the guide's `.ksync.yaml` and a ConfigMap in `apps/web`.
fn team_repository(server: &GitServer, ksync_yaml: &str) -> String {
    let url = server.create_repo("team-a");
    let work = WorkTree::clone(&url);
    work.write(".ksync.yaml", ksync_yaml);
    work.write("apps/web/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\ndata: {greeting: hello}\n");
    work.commit_and_push("web");
    url
}

/// The Prometheus Operator's PrometheusRule kind, without its schema.
async fn prometheus_rule_crd(client: &kube::Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    apply_as(
        client,
        "test",
        &json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "prometheusrules.monitoring.coreos.com"},
            "spec": {
                "group": "monitoring.coreos.com", "scope": "Namespaced",
                "names": {"kind": "PrometheusRule", "plural": "prometheusrules", "singular": "prometheusrule", "listKind": "PrometheusRuleList"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
            },
        }),
    )
    .await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    testkit::eventually("the PrometheusRule CRD to be Established", Duration::from_secs(60), || async {
        let crd = crds.get("prometheusrules.monitoring.coreos.com").await.ok()?;
        crd.status?.conditions?.iter().any(|c| c.type_ == "Established" && c.status == "True").then_some(())
    })
    .await;
}

fn the_install_guide_works_as_written(cluster: Cluster) {
    let tools = Tools::get();
    let guide = std::fs::read_to_string(repo_root().join(GUIDE)).expect("the guide");
    let scripts = blocks(&guide, "sh");
    let sections: Vec<&str> = scripts.iter().map(|(s, _)| s.as_str()).fold(Vec::new(), |mut v, s| {
        if v.last() != Some(&s) {
            v.push(s);
        }
        v
    });
    assert_eq!(
        sections,
        ["Install", "Multi-tenant setup", "Upgrade", "Scale out", "Alerts and dashboard", "Uninstall"],
        "the sections of {GUIDE} with commands, in order: the test runs and checks each (add a new one here)"
    );
    for (section, script) in &scripts {
        assert!(!script.contains("..."), "{section}: a command with `...` cannot be pasted:\n{script}");
    }
    let section =
        |name: &str| -> Vec<&str> { scripts.iter().filter(|(s, _)| s == name).map(|(_, b)| b.as_str()).collect() };
    let yaml = blocks(&guide, "yaml");
    let ksync_yaml = &yaml.iter().find(|(s, _)| s == "Multi-tenant setup").expect("the guide's .ksync.yaml").1;

    let (image, why_not) = match isolation() {
        Ok(how) => (Some((ImageRoot::build(&testkit::manager::bin()), how)), None),
        Err(why) => (None, Some(why)),
    };
    let runtime = match &image {
        Some((image, how)) => Runtime::Image(image, *how),
        None => {
            eprintln!(
                "NOTE: the Pods run this build's ksync-controller from the host, not from the image: {}",
                why_not.unwrap_or_default()
            );
            Runtime::Host
        }
    };
    let server = GitServer::start();
    let url = team_repository(&server, ksync_yaml);
    let substitutions = [
        ("REGISTRY/kuvryn-sync", "localhost/kuvryn-sync".to_string()),
        ("https://git.example.com/team-a/deploy.git", url),
    ];
    let mut used = BTreeSet::new();
    let home = temp_dir("install-home");
    let dir = temp_dir("install");
    let tokio = testkit::runtime();
    tokio.block_on(async {
        let client = cluster.client().await;
        // The reader's monitoring stack: its namespace and the PrometheusRule kind.
        apply_as(
            &client,
            "test",
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "monitoring"}}),
        )
        .await;
        prometheus_rule_crd(&client).await;
        let mut kubelet = Kubelet {
            cluster: &cluster,
            client: client.clone(),
            runtime,
            dir: dir.path(),
            running: BTreeMap::new(),
            stopping: Vec::new(),
            ran: BTreeSet::new(),
        };
        let mut run = |name: &str| {
            for script in section(name) {
                shell(&cluster, &tools, home.path(), &substitute(script, &substitutions, &mut used));
            }
        };

        run("Install");
        kubelet.shards_split(2).await;

        run("Multi-tenant setup");
        let apps: Api<Application> = Api::namespaced(client.clone(), TENANT);
        let revisions: Api<Revision> = Api::namespaced(client.clone(), TENANT);
        kubelet
            .wait("the team's Application to be deployed and Healthy", Duration::from_secs(120), || async {
                let desired = apps.get("web").await.ok()?.status?.desired_revision?;
                let r = revisions.get(&desired).await.ok()?;
                matches!(r.status.as_ref()?.phase, RevisionPhase::Healthy).then_some(())
            })
            .await;
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), TENANT);
        assert_eq!(cms.get("web").await.expect("web's ConfigMap").data.unwrap()["greeting"], "hello");
        // The guide's last command of the section shows them.
        let shown = shell(&cluster, &tools, home.path(), section("Multi-tenant setup").last().unwrap());
        assert!(shown.contains("web"), "{shown}");

        let before: BTreeSet<String> = kubelet.running.keys().cloned().collect();
        run("Upgrade");
        let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
        secrets.get("sh.helm.release.v1.kuvryn-sync.v2").await.expect("helm upgrade made release 2");
        let gap = kubelet.roll(&before, 2).await;
        eprintln!("the upgrade rolled 2 replicas; the longest time a shard had no holder: {gap:?}");
        assert!(gap < LEASE, "a shard had no holder for {gap:?} during the upgrade, more than the {LEASE:?} Lease");

        run("Scale out");
        kubelet.shards_split(3).await;

        run("Alerts and dashboard");
        let rules_file: Value = kuvryn_sync::yaml::from_str(
            &std::fs::read_to_string(repo_root().join("deploy/prometheus/rules.yaml")).unwrap(),
        )
        .unwrap();
        let ar = ApiResource {
            group: "monitoring.coreos.com".into(),
            version: "v1".into(),
            api_version: "monitoring.coreos.com/v1".into(),
            kind: "PrometheusRule".into(),
            plural: "prometheusrules".into(),
        };
        let rules: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &ar);
        let rule = rules.get("kuvryn-sync").await.expect("the PrometheusRule");
        assert_eq!(rule.data["spec"]["groups"], rules_file["groups"], "the PrometheusRule holds rules.yaml's groups");
        let dashboards: Api<ConfigMap> = Api::namespaced(client.clone(), "monitoring");
        let dashboard = dashboards.get("kuvryn-sync-dashboard").await.expect("the dashboard ConfigMap");
        let json_file = std::fs::read_to_string(repo_root().join("deploy/grafana/kuvryn-sync.json")).unwrap();
        assert_eq!(dashboard.data.unwrap()["kuvryn-sync.json"], json_file);
        assert_eq!(dashboard.metadata.labels.unwrap()["grafana_dashboard"], "1");

        // Before the uninstall, which takes the replicas' rights away while they stop.
        let logs = kubelet.logs();
        run("Uninstall");
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
        kubelet
            .wait("the Deployment to be gone", Duration::from_secs(120), || async {
                let gone = deployments.get_opt("kuvryn-sync").await.ok()?.is_none();
                gone.then_some(())
            })
            .await;
        kubelet.wait("every manager Pod to be deleted", Duration::from_secs(120), || no_manager_pod(&client)).await;
        let stopping = &mut kubelet.stopping;
        testkit::eventually("every manager to exit after SIGTERM", Duration::from_secs(60), || {
            let all = stopping.iter_mut().all(Replica::exited);
            async move { all.then_some(()) }
        })
        .await;
        // What the guide says stays, and what goes with the namespace.
        apps.get("web").await.expect("the Application stays");
        cms.get("web").await.expect("its ConfigMap stays");
        let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
        assert!(leases.list(&ListParams::default()).await.map(|l| l.items.is_empty()).unwrap_or(true));

        // Two installed, two rolled in by the upgrade, one added by the scale-out.
        assert_eq!(kubelet.ran.len(), 5, "one manager per Pod the Deployment made: {:?}", kubelet.ran);
        assert!(!logs.contains("forbidden"), "a request of the chart's ServiceAccount was refused:\n{logs}");
    });
    let unused: Vec<&str> = substitutions.iter().map(|(p, _)| *p).filter(|p| !used.contains(*p)).collect();
    assert!(unused.is_empty(), "placeholders the test fills that {GUIDE} no longer has: {unused:?}");
}

/// No manager Pod of the chart is left.
async fn no_manager_pod(client: &kube::Client) -> Option<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let list = pods.list(&ListParams::default().labels("app.kubernetes.io/name=kuvryn-sync")).await.ok()?;
    list.items.is_empty().then_some(())
}

testkit::both!(the_install_guide_works_as_written);
