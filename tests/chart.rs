//! The Helm chart in `deploy/chart`, as users install it: `helm lint --strict` clean, its values
//! checked by its schema, rendered by the real `helm template`
//! for several value sets, every object server-side applied with strict field validation (the
//! API server's own schemas), and run: real `ksync-controller` replicas with the chart's arguments
//! and environment, authenticated as the chart's ServiceAccount (a TokenRequest token, not
//! admin), split the shards, deploy an Application and notice its drift at once. A table of
//! SubjectAccessReviews shows what that ServiceAccount may not do.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams, ValidationDirective};
use kube::discovery::ApiResource;
use kuvryn_sync::api::revision::{Revision, RevisionPhase};
use kuvryn_sync::api::{Application, Repository};
use serde_json::{Value, json};
use support::{Cluster, GitServer, Tools, WorkTree, eventually, free_port, install_crds, repo_root, temp_dir};

const NS: &str = "kuvryn-system";
const TENANT: &str = "team-a";

/// `helm template RELEASE deploy/chart -n kuvryn-system` with `values`: the rendered objects.
fn render(tools: &Tools, release: &str, values: &[&str]) -> Vec<Value> {
    let home = temp_dir("helm-home");
    let mut cmd = tools.helm(home.path());
    cmd.args(["template", release]).arg(repo_root().join("deploy/chart")).args(["--namespace", NS]);
    for v in values {
        cmd.args(["--set-json", v]);
    }
    let out = support::run(&mut cmd);
    kuvryn_sync::yaml::from_str_multiple::<Value>(&out)
        .expect("helm template prints YAML")
        .into_iter()
        .filter(|o| !o.is_null())
        .collect()
}

fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

/// Server-side apply `obj` with strict field validation: an unknown or mistyped field fails.
async fn apply_strict(client: &kube::Client, obj: &Value) {
    let api_version = obj["apiVersion"].as_str().expect("apiVersion");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let kind = obj["kind"].as_str().expect("kind");
    let ar = ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        plural: format!("{}s", kind.to_lowercase()),
    };
    let api: Api<DynamicObject> = match obj["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    let name = obj["metadata"]["name"].as_str().expect("name");
    let mut params = PatchParams::apply("helm");
    params.field_validation = Some(ValidationDirective::Strict);
    if let Err(e) = api.patch(name, &params, &Patch::Apply(obj)).await {
        panic!("applying the chart's {kind} {name}: {e}\n{obj:#}");
    }
}

async fn namespace(client: &kube::Client, name: &str) {
    support::apply_as(client, "test", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}))
        .await;
}

/// The manager container of the chart's Deployment.
fn manager_container(objects: &[Value]) -> &Value {
    let deployments = of_kind(objects, "Deployment");
    assert_eq!(deployments.len(), 1, "one Deployment");
    &deployments[0]["spec"]["template"]["spec"]["containers"][0]
}

fn args_of(container: &Value) -> Vec<String> {
    container["args"].as_array().expect("args").iter().map(|a| a.as_str().expect("arg").to_string()).collect()
}

#[test]
fn the_chart_is_lint_clean_and_its_schema_refuses_bad_values() {
    let tools = Tools::get();
    let home = temp_dir("helm-home");
    let chart = repo_root().join("deploy/chart");
    support::run(tools.helm(home.path()).args(["lint", "--strict"]).arg(&chart));
    for (value, complaint) in [
        ("shards=0", "/shards"),
        ("replicas=\"two\"", "/replicas"),
        ("driftResyncInterval=\"5 minutes\"", "/driftResyncInterval"),
        ("webhooks={\"enable\":true}", "enable"),
        ("watches={\"extraKinds\":[{\"resources\":[\"ingresses\"]}]}", "apiGroup"),
    ] {
        let out =
            tools.helm(home.path()).args(["template", "x"]).arg(&chart).args(["--set-json", value]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(complaint), "{value}: {stderr}");
    }
    let out = tools
        .helm(home.path())
        .args(["template", "x"])
        .arg(&chart)
        .args(["--set", "webhooks.certificate.source=certManager"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs webhooks.certificate.certManager.issuerRef.name"));
}

fn the_chart_renders_objects_the_api_server_accepts(cluster: Cluster) {
    let tools = Tools::get();
    // (release, values, whether webhooks are on)
    let sets: [(&str, &[&str], bool); 3] = [
        ("one", &["replicas=1"], true),
        ("three", &["replicas=3", "shards=16", "webhooks={\"enabled\":true}"], true),
        (
            "extra",
            &[
                "webhooks={\"enabled\":false}",
                "watches={\"extraKinds\":[{\"apiGroup\":\"networking.k8s.io\",\"resources\":[\"ingresses\"]}]}",
            ],
            false,
        ),
    ];
    let runtime = support::runtime();
    runtime.block_on(async {
        let client = cluster.client().await;
        namespace(&client, NS).await;
        for (release, values, webhooks) in sets {
            let objects = render(&tools, release, values);
            let kinds: BTreeSet<&str> = objects.iter().map(|o| o["kind"].as_str().unwrap()).collect();
            for kind in [
                "ServiceAccount",
                "ClusterRole",
                "ClusterRoleBinding",
                "Role",
                "RoleBinding",
                "Service",
                "Deployment",
                "PodDisruptionBudget",
            ] {
                assert!(kinds.contains(kind), "{release}: no {kind} in {kinds:?}");
            }
            assert!(!kinds.contains("CustomResourceDefinition"), "the chart does not ship the CRDs");
            for obj in &objects {
                apply_strict(&client, obj).await;
            }
            let fullname = format!("{release}-kuvryn-sync");
            // Every argument the chart passes is one the manager accepts.
            let container = manager_container(&objects);
            let mut argv = vec!["ksync-controller".to_string()];
            argv.extend(args_of(container));
            if let Err(e) = <kuvryn_sync::cli::controller::Args as clap::Parser>::try_parse_from(&argv) {
                panic!("{release}: the chart's arguments {argv:?}: {e}");
            }
            let env: BTreeMap<&str, &Value> =
                container["env"].as_array().unwrap().iter().map(|e| (e["name"].as_str().unwrap(), e)).collect();
            assert_eq!(
                env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"], "metadata.name",
                "the replica id is the Pod name"
            );
            assert_eq!(env["KSYNC_LEASE_NAMESPACE"]["value"], NS);
            assert_eq!(env["ENABLE_WEBHOOKS"]["value"], webhooks.to_string());
            let configs = of_kind(&objects, "MutatingWebhookConfiguration");
            if webhooks {
                // The webhook configuration is the one the manager itself prints for this Service.
                let printed = support::run(Command::new(support::manager::bin()).args([
                    "webhook-configuration",
                    "--name",
                    &fullname,
                    "--service-name",
                    &fullname,
                    "--service-namespace",
                    NS,
                ]));
                let printed: Value = kuvryn_sync::yaml::from_str(&printed).unwrap();
                assert_eq!(configs.len(), 1);
                assert_eq!(configs[0]["webhooks"], printed["webhooks"], "{release}");
                assert!(args_of(container).contains(&format!("--webhook-service-name={fullname}")));
            } else {
                assert!(configs.is_empty(), "{release}: no webhook configuration without webhooks");
            }
            // Extra watched kinds get list and watch, nothing more.
            let role = of_kind(&objects, "ClusterRole")[0];
            let ingresses = role["rules"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["resources"].as_array().unwrap().iter().any(|x| x == "ingresses"));
            match release {
                "extra" => assert_eq!(ingresses.expect("a rule for ingresses")["verbs"], json!(["list", "watch"])),
                _ => assert!(ingresses.is_none(), "{release}"),
            }
        }
    });
}

/// A token of the ServiceAccount `NS/name`, from the TokenRequest API.
async fn token(client: &kube::Client, name: &str) -> String {
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), NS);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec { expiration_seconds: Some(3600), ..Default::default() }),
        ..Default::default()
    };
    sas.create_token_request(name, &PostParams::default(), &request)
        .await
        .expect("TokenRequest")
        .status
        .and_then(|s| s.token)
        .expect("token")
}

/// A replica started as the chart's Deployment would start it, killed on drop.
struct Replica {
    child: std::process::Child,
    log: PathBuf,
    metrics: u16,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            eprintln!(
                "--- {} (last 60 lines)\n{}",
                self.log.display(),
                lines[lines.len().saturating_sub(60)..].join("\n")
            );
        }
    }
}

impl Replica {
    /// `ksync-controller` with the container's arguments and environment; what a kubelet would
    /// fill in (the Pod's name and namespace) filled in; its ports on 127.0.0.1; the tools'
    /// paths of this machine; `kubeconfig` as its credentials.
    fn start(container: &Value, pod: &str, kubeconfig: &Path, dir: &Path) -> Replica {
        let tools = Tools::get();
        let mut args = args_of(container);
        let metrics = free_port();
        for a in &mut args {
            if a.starts_with("--metrics-bind-address=") {
                *a = format!("--metrics-bind-address=127.0.0.1:{metrics}");
            }
        }
        args.push(format!("--webhook-bind-address=127.0.0.1:{}", free_port()));
        let log = dir.join(format!("{pod}.log"));
        let mut cmd = Command::new(support::manager::bin());
        cmd.args(&args).env_clear().env("PATH", std::env::var_os("PATH").unwrap_or_default());
        for e in container["env"].as_array().unwrap() {
            let name = e["name"].as_str().unwrap();
            let value = match (name, e["value"].as_str()) {
                ("POD_NAME", _) => pod.to_string(),
                ("POD_NAMESPACE", _) => NS.to_string(),
                ("HOME", _) => dir.display().to_string(),
                ("KSYNC_GIT_CACHE_DIR", _) => dir.join(format!("{pod}-git")).display().to_string(),
                (_, Some(v)) => v.to_string(),
                (_, None) => panic!("an environment variable the test does not know how to fill: {e}"),
            };
            cmd.env(name, value);
        }
        cmd.env("KUBECONFIG", kubeconfig)
            .env("KSYNC_HELM", tools.bin.join("helm"))
            .env("KSYNC_KUBECTL", tools.bin.join("kubectl"))
            .env("KSYNC_LOG_FORMAT", "text")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"));
        Replica { child: cmd.spawn().expect("ksync-controller"), log, metrics }
    }

    /// Whether `/readyz` answers 200: the replica takes part in the shard split (what the
    /// chart's readiness probe asks).
    fn ready(&self) -> bool {
        use std::io::{Read, Write};
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.metrics)) else { return false };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        if s.write_all(b"GET /readyz HTTP/1.0\r\nHost: x\r\n\r\n").is_err() {
            return false;
        }
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200")
    }

    /// SIGTERM, as a kubelet stops a Pod, and wait for the exit.
    async fn terminate(mut self) {
        let pid = rustix::process::Pid::from_child(&self.child);
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
        let child = &mut self.child;
        eventually("a replica to exit after SIGTERM", Duration::from_secs(60), || {
            let exited = child.try_wait().ok().flatten().is_some();
            async move { exited.then_some(()) }
        })
        .await;
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// The tenant's repository: one Application `web`, a ConfigMap, with selfHeal (and adopt: a
/// hand edit takes the field over).
fn tenant_repository(server: &GitServer) -> String {
    let url = server.create_repo("team-a");
    let work = WorkTree::clone(&url);
    work.write(
        ".ksync.yaml",
        "metadata: {name: web}\nspec: {source: {repository: team-a, path: apps/web}, serviceAccountName: deployer, destination: {namespace: team-a}, sync: {selfHeal: true, conflictPolicy: adopt}}\n",
    );
    work.write("apps/web/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\ndata: {greeting: hello}\n");
    work.commit_and_push("web");
    url
}

/// The chart's objects but the Deployment (replicas run as processes here), the CRDs, the
/// tenant namespace with its `deployer` and a Repository of `url`; returns a kubeconfig of the
/// chart's ServiceAccount (a TokenRequest token).
async fn install(cluster: &Cluster, client: &kube::Client, objects: &[Value], url: &str, dir: &Path) -> PathBuf {
    install_crds(client).await;
    namespace(client, NS).await;
    for obj in objects.iter().filter(|o| o["kind"] != "Deployment") {
        apply_strict(client, obj).await;
    }
    support::deployer_namespace(client, TENANT).await;
    let kubeconfig = dir.join("kubeconfig");
    cluster.write_kubeconfig(&kubeconfig, Some(&token(client, "kuvryn-sync").await), None);
    let repos: Api<Repository> = Api::namespaced(client.clone(), TENANT);
    let repo: Repository = serde_json::from_value(json!({
        "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Repository",
        "metadata": {"name": "team-a"}, "spec": {"url": url, "ref": {"branch": "main"}, "interval": "1s"},
    }))
    .unwrap();
    repos.create(&PostParams::default(), &repo).await.unwrap();
    kubeconfig
}

/// The holder of each of the four shard Leases, when it holds it now (renewed within its
/// duration).
async fn shard_holders(leases: &Api<Lease>) -> Vec<Option<String>> {
    let now = jiff::Timestamp::now();
    let mut out = Vec::new();
    for k in 0..4 {
        let spec = leases.get(&format!("kuvryn-sync-shard-{k}")).await.ok().and_then(|l| l.spec);
        let held = spec.and_then(|s| {
            let renewed = s.renew_time?.0;
            let until = renewed + jiff::SignedDuration::from_secs(i64::from(s.lease_duration_seconds?));
            (until > now).then_some(s.holder_identity?).filter(|h| !h.is_empty())
        });
        out.push(held);
    }
    out
}

async fn web_is_healthy(client: &kube::Client) {
    let apps: Api<Application> = Api::namespaced(client.clone(), TENANT);
    let revisions: Api<Revision> = Api::namespaced(client.clone(), TENANT);
    eventually("web to be deployed and Healthy", Duration::from_secs(120), || async {
        let desired = apps.get("web").await.ok()?.status?.desired_revision?;
        let r = revisions.get(&desired).await.ok()?;
        matches!(r.status.as_ref()?.phase, RevisionPhase::Healthy).then_some(())
    })
    .await;
}

/// A hand edit (`kubectl edit`) of web's ConfigMap is put back. With driftResyncInterval at 10 minutes, only the
/// ConfigMap watch, which the ClusterRole allows, can notice it within the deadline.
async fn drift_is_repaired(client: &kube::Client, value: &str) {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), TENANT);
    let by_hand = PatchParams { field_manager: Some("kubectl-edit".into()), ..Default::default() };
    cms.patch("web", &by_hand, &Patch::Merge(json!({"data": {"greeting": value}}))).await.unwrap();
    eventually("the drift to be repaired", Duration::from_secs(60), || async {
        (cms.get("web").await.ok()?.data?.get("greeting")? == "hello").then_some(())
    })
    .await;
}

const RUN_VALUES: &[&str] =
    &["replicas=2", "shards=4", "leaseDuration=\"6s\"", "driftResyncInterval=\"10m\"", "logFormat=\"text\""];

fn replicas_with_the_charts_arguments_run_as_its_service_account(cluster: Cluster) {
    let tools = Tools::get();
    let objects = render(&tools, "kuvryn-sync", RUN_VALUES);
    let server = GitServer::start();
    let url = tenant_repository(&server);
    let dir = temp_dir("chart-replicas");
    let runtime = support::runtime();
    runtime.block_on(async {
        let client = cluster.client().await;
        let kubeconfig = install(&cluster, &client, &objects, &url, dir.path()).await;
        let container = manager_container(&objects);
        let replicas: Vec<Replica> = ["kuvryn-sync-7d9f-a", "kuvryn-sync-7d9f-b"]
            .iter()
            .map(|pod| Replica::start(container, pod, &kubeconfig, dir.path()))
            .collect();

        // The two replicas split the four shards.
        let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
        eventually("both replicas to hold shards", Duration::from_secs(90), || async {
            let holders: Option<BTreeSet<String>> = shard_holders(&leases).await.into_iter().collect();
            (holders?.len() == 2).then_some(())
        })
        .await;
        web_is_healthy(&client).await;
        drift_is_repaired(&client, "edited").await;

        // The webhook's certificate was made and its CA put in the configuration.
        let configs: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
        eventually("the webhook configuration's caBundle", Duration::from_secs(60), || async {
            let config = configs.get("kuvryn-sync").await.ok()?;
            config.webhooks?.first()?.client_config.ca_bundle.as_ref().filter(|b| !b.0.is_empty()).map(|_| ())
        })
        .await;

        let all = replicas.iter().map(|r| r.log()).collect::<Vec<_>>().join("\n---\n");
        assert!(!all.contains("forbidden"), "a request of the chart's ServiceAccount was refused:\n{all}");
    });
}

/// `helm upgrade` to a chart whose Pod template differs rolls the Deployment: one new replica
/// at a time (maxSurge 1), and an old one stopped (SIGTERM) only once the new one is ready
/// (maxUnavailable 0). Done here with processes, as the Deployment controller and kubelets would.
/// Every shard, so every Application, has an owner again within a Lease duration.
fn a_rolling_update_leaves_no_shard_without_an_owner_for_a_lease_duration(cluster: Cluster) {
    let tools = Tools::get();
    let old = render(&tools, "kuvryn-sync", RUN_VALUES);
    let mut next_values = RUN_VALUES.to_vec();
    next_values.push("concurrentApplications=4");
    let new = render(&tools, "kuvryn-sync", &next_values);
    assert_ne!(manager_container(&old), manager_container(&new), "the upgrade changes the Pod template");
    let server = GitServer::start();
    let url = tenant_repository(&server);
    let dir = temp_dir("chart-rolling");
    let runtime = support::runtime();
    runtime.block_on(async {
        let client = cluster.client().await;
        let kubeconfig = install(&cluster, &client, &old, &url, dir.path()).await;
        let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
        let start =
            |objects: &[Value], pod: &str| Replica::start(manager_container(objects), pod, &kubeconfig, dir.path());
        let olds = vec![start(&old, "kuvryn-sync-old-a"), start(&old, "kuvryn-sync-old-b")];
        eventually("every shard to be held", Duration::from_secs(90), || async {
            shard_holders(&leases).await.iter().all(Option::is_some).then_some(())
        })
        .await;
        web_is_healthy(&client).await;
        for obj in new.iter().filter(|o| o["kind"] != "Deployment") {
            apply_strict(&client, obj).await;
        }

        // Sample the shard Leases while the replicas roll; the longest time each went unheld.
        let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
        let sampler = tokio::spawn({
            let leases = leases.clone();
            async move {
                let mut unheld_since: [Option<std::time::Instant>; 4] = [None; 4];
                let mut longest = [Duration::ZERO; 4];
                loop {
                    let holders = shard_holders(&leases).await;
                    let now = std::time::Instant::now();
                    for (k, h) in holders.iter().enumerate() {
                        match (h, unheld_since[k]) {
                            (None, None) => unheld_since[k] = Some(now),
                            (Some(_), Some(since)) => {
                                longest[k] = longest[k].max(now - since);
                                unheld_since[k] = None;
                            }
                            _ => {}
                        }
                    }
                    if stop_rx.try_recv().is_ok() {
                        for (k, since) in unheld_since.iter().enumerate() {
                            if let Some(since) = since {
                                longest[k] = longest[k].max(now - *since);
                            }
                        }
                        return longest;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        });
        let mut news = Vec::new();
        for (old_replica, name) in olds.into_iter().zip(["kuvryn-sync-new-a", "kuvryn-sync-new-b"]) {
            let replica = start(&new, name);
            eventually("the new replica to be ready", Duration::from_secs(90), || {
                let ready = replica.ready();
                async move { ready.then_some(()) }
            })
            .await;
            news.push(replica);
            old_replica.terminate().await;
        }
        eventually("the new replicas to hold every shard", Duration::from_secs(90), || async {
            let holders: Option<BTreeSet<String>> = shard_holders(&leases).await.into_iter().collect();
            holders.filter(|h| h.iter().all(|n| n.contains("-new-"))).map(|_| ())
        })
        .await;
        let _ = stop_tx.send(());
        let longest = sampler.await.unwrap();
        eprintln!("longest time each shard went without a holder during the rolling update: {longest:?}");
        for (k, gap) in longest.iter().enumerate() {
            assert!(
                *gap < Duration::from_secs(6),
                "shard {k} had no owner for {gap:?}, more than the 6s Lease duration"
            );
        }
        // The new replicas serve: a drift is noticed and repaired.
        drift_is_repaired(&client, "after-upgrade").await;
        let all = news.iter().map(|r| r.log()).collect::<Vec<_>>().join("\n---\n");
        assert!(!all.contains("forbidden"), "a request of the chart's ServiceAccount was refused:\n{all}");
    });
}

/// (verb, group, resource, subresource, namespace, name, allowed) for the chart's ServiceAccount.
const ACCESS: &[(&str, &str, &str, &str, &str, &str, bool)] = &[
    // What the code needs.
    ("impersonate", "", "serviceaccounts", "", TENANT, "deployer", true),
    ("patch", "sync.kuvryn.io", "applications", "status", TENANT, "web", true),
    ("create", "sync.kuvryn.io", "revisions", "", TENANT, "", true),
    ("watch", "", "configmaps", "", "", "", true),
    ("list", "", "pods", "", "", "", true),
    ("get", "", "secrets", "", TENANT, "git-credentials", true),
    ("update", "coordination.k8s.io", "leases", "", NS, "kuvryn-sync-shard-0", true),
    ("create", "", "secrets", "", NS, "", true),
    ("update", "", "secrets", "", NS, "kuvryn-sync-webhook-tls", true),
    ("update", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", "", "kuvryn-sync", true),
    ("create", "authorization.k8s.io", "selfsubjectaccessreviews", "", "", "", true),
    // What it must not do: every write to a tenant's objects goes through impersonation.
    ("impersonate", "", "users", "", "", "admin", false),
    ("impersonate", "", "groups", "", "", "system:masters", false),
    ("create", "", "secrets", "", TENANT, "", false),
    ("update", "", "secrets", "", TENANT, "git-credentials", false),
    ("delete", "", "secrets", "", TENANT, "git-credentials", false),
    ("update", "", "secrets", "", NS, "another-secret", false),
    ("create", "", "configmaps", "", TENANT, "", false),
    ("patch", "apps", "deployments", "", TENANT, "web", false),
    ("delete", "apps", "deployments", "", TENANT, "web", false),
    ("get", "", "pods", "", TENANT, "web-1", false),
    ("create", "", "pods", "exec", TENANT, "web-1", false),
    ("update", "coordination.k8s.io", "leases", "", "kube-system", "kube-controller-manager", false),
    ("update", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", "", "another-webhook", false),
    ("create", "rbac.authorization.k8s.io", "clusterrolebindings", "", "", "", false),
    ("create", "apiextensions.k8s.io", "customresourcedefinitions", "", "", "", false),
    ("create", "", "serviceaccounts", "token", TENANT, "deployer", false),
];

fn the_charts_service_account_may_do_only_what_the_manager_needs(cluster: Cluster) {
    let tools = Tools::get();
    let objects = render(&tools, "kuvryn-sync", &["replicas=1"]);
    let runtime = support::runtime();
    runtime.block_on(async {
        let client = cluster.client().await;
        namespace(&client, NS).await;
        namespace(&client, TENANT).await;
        for obj in objects.iter().filter(|o| o["kind"] != "Deployment") {
            apply_strict(&client, obj).await;
        }
        let reviews: Api<SubjectAccessReview> = Api::all(client.clone());
        let mut wrong = Vec::new();
        for &(verb, group, resource, subresource, namespace, name, allowed) in ACCESS {
            let review = SubjectAccessReview {
                spec: SubjectAccessReviewSpec {
                    user: Some(format!("system:serviceaccount:{NS}:kuvryn-sync")),
                    groups: Some(vec![
                        "system:serviceaccounts".into(),
                        format!("system:serviceaccounts:{NS}"),
                        "system:authenticated".into(),
                    ]),
                    resource_attributes: Some(ResourceAttributes {
                        verb: Some(verb.into()),
                        group: Some(group.into()),
                        resource: Some(resource.into()),
                        subresource: (!subresource.is_empty()).then(|| subresource.into()),
                        namespace: (!namespace.is_empty()).then(|| namespace.into()),
                        name: (!name.is_empty()).then(|| name.into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                ..Default::default()
            };
            let answer = reviews.create(&PostParams::default(), &review).await.expect("SubjectAccessReview");
            let got = answer.status.is_some_and(|s| s.allowed);
            if got != allowed {
                wrong.push(format!(
                    "{verb} {group}/{resource}/{subresource} {namespace}/{name}: allowed={got}, want {allowed}"
                ));
            }
        }
        assert!(wrong.is_empty(), "the chart's ServiceAccount:\n{}", wrong.join("\n"));
    });
}

crate::both!(
    the_chart_renders_objects_the_api_server_accepts,
    replicas_with_the_charts_arguments_run_as_its_service_account,
    the_charts_service_account_may_do_only_what_the_manager_needs,
    a_rolling_update_leaves_no_shard_without_an_owner_for_a_lease_duration,
);
