//! The Helm chart in `deploy/chart`, as users install it: `helm lint --strict` clean, its values
//! checked by its schema, rendered by the real `helm template`
//! for several value sets, every object server-side applied with strict field validation (the
//! API server's own schemas), and run: real `ksync-controller` replicas with the chart's arguments
//! and environment, authenticated as the chart's ServiceAccount (a TokenRequest token, not
//! admin), split the shards, deploy an Application and notice its drift at once. A table of
//! SubjectAccessReviews shows what that ServiceAccount may not do.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams, ValidationDirective};
use kube::discovery::ApiResource;
use kuvryn_sync::api::revision::{Revision, RevisionPhase};
use kuvryn_sync::api::{Application, Repository};
use serde_json::{Value, json};
use testkit::replica::{Replica, Runtime, shard_holders, token};
use testkit::{Cluster, GitServer, Tools, WorkTree, eventually, install_crds, repo_root, temp_dir};

const NS: &str = "kuvryn-system";
const TENANT: &str = "team-a";

/// `helm template RELEASE deploy/chart -n kuvryn-system` with `values`: the rendered objects.
fn render(tools: &Tools, release: &str, values: &[&str]) -> Vec<Value> {
    render_chart(tools, &repo_root().join("deploy/chart"), release, values)
}

/// [`render`] of the chart at `chart` (a folder or a packaged `.tgz`).
fn render_chart(tools: &Tools, chart: &Path, release: &str, values: &[&str]) -> Vec<Value> {
    let home = temp_dir("helm-home");
    let mut cmd = tools.helm(home.path());
    cmd.args(["template", release]).arg(chart).args(["--namespace", NS]);
    for v in values {
        cmd.args(["--set-json", v]);
    }
    let out = testkit::run(&mut cmd);
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
        plural: match kind.to_lowercase() {
            k if k.ends_with('y') => format!("{}ies", &k[..k.len() - 1]),
            k if k.ends_with('s') => format!("{k}es"),
            k => format!("{k}s"),
        },
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
    testkit::apply_as(client, "test", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}))
        .await;
}

/// The manager container of the chart's Deployment.
/// The manager Deployment's `spec.selector.matchLabels`.
fn deployment_selector(objects: &[Value]) -> Value {
    of_kind(objects, "Deployment")[0]["spec"]["selector"]["matchLabels"].clone()
}

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
    testkit::run(tools.helm(home.path()).args(["lint", "--strict"]).arg(&chart));
    for (value, complaint) in [
        ("shards=0", "/shards"),
        ("replicas=\"two\"", "/replicas"),
        ("driftResyncInterval=\"5 minutes\"", "/driftResyncInterval"),
        ("webhooks={\"enable\":true}", "enable"),
        ("watches={\"extraKinds\":[{\"resources\":[\"ingresses\"]}]}", "apiGroup"),
        ("dashboard={\"port\":0}", "/dashboard/port"),
        ("dashboard={\"tokenHeader\":\"X Token\"}", "/dashboard/tokenHeader"),
        ("receiver={\"port\":0}", "/receiver/port"),
        ("receiver={\"ingress\":{\"host\":\"Hooks Example\"}}", "/receiver/ingress/host"),
        ("priorityAndFairness={\"matchingPrecedence\":9000}", "/priorityAndFairness/matchingPrecedence"),
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

/// The dashboard's NetworkPolicy keeps the receiver port open to all: Git hosts come in through
/// the ingress controller, from wherever.
#[test]
fn the_dashboard_policy_keeps_the_receiver_port_open() {
    let tools = Tools::get();
    let objects = render(
        &tools,
        "both",
        &["receiver={\"enabled\":true}", "dashboard={\"enabled\":true,\"networkPolicy\":{\"enabled\":true}}"],
    );
    let policies = of_kind(&objects, "NetworkPolicy");
    assert_eq!(policies.len(), 1);
    let open = &policies[0]["spec"]["ingress"][0];
    assert!(open.get("from").is_none(), "{open}");
    assert_eq!(
        open["ports"],
        json!([{"port": "metrics", "protocol": "TCP"}, {"port": "webhook", "protocol": "TCP"}, {"port": "receiver", "protocol": "TCP"}])
    );
}

fn the_chart_renders_objects_the_api_server_accepts(cluster: Cluster) {
    let tools = Tools::get();
    // (release, values, whether webhooks are on)
    let sets: [(&str, &[&str], bool); 5] = [
        ("one", &["replicas=1"], true),
        ("three", &["replicas=3", "shards=16", "webhooks={\"enabled\":true}"], true),
        (
            "extra",
            &[
                "webhooks={\"enabled\":false}",
                "priorityAndFairness={\"enabled\":false}",
                "watches={\"extraKinds\":[{\"apiGroup\":\"networking.k8s.io\",\"resources\":[\"ingresses\"]}]}",
            ],
            false,
        ),
        (
            "dash",
            &[
                "dashboard={\"enabled\":true,\"port\":8091,\"tokenHeader\":\"X-Forwarded-Access-Token\",\"networkPolicy\":{\"enabled\":true,\"from\":[{\"namespaceSelector\":{\"matchLabels\":{\"kubernetes.io/metadata.name\":\"ingress-nginx\"}}}]}}",
            ],
            true,
        ),
        (
            "hooks",
            &[
                "receiver={\"enabled\":true,\"port\":8096,\"ingress\":{\"enabled\":true,\"className\":\"nginx\",\"host\":\"hooks.example.com\",\"annotations\":{\"a\":\"b\"},\"tls\":[{\"hosts\":[\"hooks.example.com\"],\"secretName\":\"hooks-tls\"}]}}",
            ],
            true,
        ),
    ];
    let runtime = testkit::runtime();
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
            // The Lease FlowSchema: on unless turned off (the API server accepts it below).
            assert_eq!(kinds.contains("FlowSchema"), release != "extra", "{release}: {kinds:?}");
            for obj in &objects {
                apply_strict(&client, obj).await;
            }
            let fullname = format!("{release}-kuvryn-sync");
            // Every argument the chart passes is one the manager accepts.
            let container = manager_container(&objects);
            let mut argv = vec!["ksync-controller".to_string()];
            argv.extend(args_of(container));
            if let Err(e) = <kuvryn_sync::manager::Args as clap::Parser>::try_parse_from(&argv) {
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
                let printed = testkit::run(Command::new(testkit::manager::bin()).args([
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
            // The dashboard: off by default; when on, its own Service, port and flags.
            let dashboard = of_kind(&objects, "Service")
                .into_iter()
                .find(|s| s["metadata"]["name"] == format!("{fullname}-dashboard"));
            let args = args_of(container);
            if release == "dash" {
                let service = dashboard.expect("the dashboard's Service");
                assert_eq!(service["spec"]["ports"][0]["port"], 8091);
                assert_eq!(service["spec"]["ports"][0]["targetPort"], "dashboard");
                let port = container["ports"].as_array().unwrap().iter().find(|p| p["name"] == "dashboard");
                assert_eq!(port.expect("the dashboard's container port")["containerPort"], 8091);
                assert!(args.contains(&"--dashboard-bind-address=0.0.0.0:8091".to_string()), "{args:?}");
                assert!(args.contains(&"--dashboard-token-header=X-Forwarded-Access-Token".to_string()), "{args:?}");
                // Only the ingress controller's namespace reaches the dashboard port; the webhook
                // and metrics ports stay open.
                let policies = of_kind(&objects, "NetworkPolicy");
                assert_eq!(policies.len(), 1, "{release}");
                let ingress = policies[0]["spec"]["ingress"].as_array().unwrap();
                assert_eq!(
                    ingress[0]["ports"],
                    json!([{"port": "metrics", "protocol": "TCP"}, {"port": "webhook", "protocol": "TCP"}])
                );
                assert!(ingress[0].get("from").is_none(), "{ingress:?}");
                assert_eq!(ingress[1]["ports"], json!([{"port": "dashboard", "protocol": "TCP"}]));
                assert_eq!(
                    ingress[1]["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
                    "ingress-nginx"
                );
                assert_eq!(policies[0]["spec"]["podSelector"]["matchLabels"], deployment_selector(&objects));
            } else {
                assert!(of_kind(&objects, "NetworkPolicy").is_empty(), "{release}: no NetworkPolicy by default");
                assert!(dashboard.is_none(), "{release}: the dashboard is off by default");
                assert!(!args.iter().any(|a| a.starts_with("--dashboard")), "{release}: {args:?}");
            }
            // The receiver: off by default; when on, its Service, port, flag and Ingress.
            let receiver = of_kind(&objects, "Service")
                .into_iter()
                .find(|s| s["metadata"]["name"] == format!("{fullname}-receiver"));
            let ingresses = of_kind(&objects, "Ingress");
            if release == "hooks" {
                let service = receiver.expect("the receiver's Service");
                assert_eq!(service["spec"]["ports"][0]["port"], 8096);
                assert_eq!(service["spec"]["ports"][0]["targetPort"], "receiver");
                let port = container["ports"].as_array().unwrap().iter().find(|p| p["name"] == "receiver");
                assert_eq!(port.expect("the receiver's container port")["containerPort"], 8096);
                assert!(args.contains(&"--receiver-bind-address=0.0.0.0:8096".to_string()), "{args:?}");
                assert_eq!(ingresses.len(), 1);
                let spec = &ingresses[0]["spec"];
                assert_eq!(spec["ingressClassName"], "nginx");
                assert_eq!(spec["tls"][0]["secretName"], "hooks-tls");
                assert_eq!(ingresses[0]["metadata"]["annotations"]["a"], "b");
                let rule = &spec["rules"][0];
                assert_eq!(rule["host"], "hooks.example.com");
                assert_eq!(rule["http"]["paths"][0]["path"], "/hook/");
                assert_eq!(rule["http"]["paths"][0]["backend"]["service"]["name"], format!("{fullname}-receiver"));
            } else {
                assert!(receiver.is_none() && ingresses.is_empty(), "{release}: the receiver is off by default");
                assert!(!args.iter().any(|a| a.starts_with("--receiver")), "{release}: {args:?}");
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

/// The FlowSchema puts the replicas' Lease requests, and only them, ahead of the workload: the
/// chart's ServiceAccount (the name it is given too), `leases` in `coordination.k8s.io` in the
/// release namespace, the verbs a coordinator round and a leader election use, at the API
/// server's `leader-election` level, matched before the suggested `service-accounts` (9000).
#[test]
fn the_flow_schema_matches_the_replicas_lease_requests_only() {
    let tools = Tools::get();
    for (values, account) in [(&[][..], "kuvryn-sync"), (&["serviceAccount={\"name\":\"ksync\"}"][..], "ksync")] {
        let objects = render(&tools, "kuvryn-sync", values);
        let schemas = of_kind(&objects, "FlowSchema");
        assert_eq!(schemas.len(), 1);
        let schema = schemas[0];
        assert_eq!(schema["apiVersion"], "flowcontrol.apiserver.k8s.io/v1");
        assert_eq!(schema["metadata"]["name"], "kuvryn-sync-leases");
        let spec = &schema["spec"];
        assert_eq!(spec["priorityLevelConfiguration"]["name"], "leader-election");
        let precedence = spec["matchingPrecedence"].as_i64().unwrap();
        assert!((1..9000).contains(&precedence), "{precedence}");
        assert_eq!(
            spec["rules"],
            json!([{
                "subjects": [{"kind": "ServiceAccount", "serviceAccount": {"name": account, "namespace": NS}}],
                "resourceRules": [{
                    "apiGroups": ["coordination.k8s.io"],
                    "resources": ["leases"],
                    "verbs": ["get", "list", "create", "update"],
                    "namespaces": [NS],
                }],
            }]),
            "no other subject, resource, namespace or non-resource URL"
        );
        // The ServiceAccount it names is the one the replicas run as.
        let pod = &of_kind(&objects, "Deployment")[0]["spec"]["template"]["spec"];
        assert_eq!(pod["serviceAccountName"], account);
    }
    let off = render(&tools, "kuvryn-sync", &["priorityAndFairness={\"enabled\":false}"]);
    assert!(of_kind(&off, "FlowSchema").is_empty());
}

/// The replicas' Lease requests are classified by the chart's FlowSchema
/// (the `X-Kubernetes-PF-FlowSchema-UID` answer header names it), and their other requests, or
/// another account's Lease requests, are not.
fn the_replicas_lease_requests_are_classified_by_the_charts_flow_schema(cluster: Cluster) {
    use k8s_openapi::api::flowcontrol::v1::FlowSchema;
    let tools = Tools::get();
    let objects = render(&tools, "kuvryn-sync", &["replicas=1"]);
    testkit::runtime().block_on(async {
        let admin = cluster.client().await;
        namespace(&admin, NS).await;
        for obj in objects.iter().filter(|o| o["kind"] != "Deployment") {
            apply_strict(&admin, obj).await;
        }
        let uid = Api::<FlowSchema>::all(admin.clone()).get("kuvryn-sync-leases").await.unwrap().metadata.uid.unwrap();
        let mut config = cluster.config().await;
        config.auth_info =
            kube::config::AuthInfo { token: Some(token(&admin, NS, "kuvryn-sync").await.into()), ..Default::default() };
        let replica = kube::Client::try_from(config).unwrap();
        let schema_of = |client: kube::Client, method: &'static str, path: String| async move {
            let request = http::Request::builder().method(method).uri(path).body(Vec::new()).unwrap();
            let answer = client.send(request.map(kube::client::Body::from)).await.expect("an answer");
            answer.headers().get("x-kubernetes-pf-flowschema-uid").map(|v| v.to_str().unwrap().to_string())
        };
        let leases = format!("/apis/coordination.k8s.io/v1/namespaces/{NS}/leases");
        for (client, method, path, ours) in [
            (&replica, "GET", leases.clone(), true),
            (&replica, "GET", format!("{leases}/none"), true),
            (&replica, "GET", format!("/api/v1/namespaces/{NS}/configmaps"), false),
            (&replica, "GET", "/apis/coordination.k8s.io/v1/namespaces/default/leases".to_string(), false),
            (&replica, "DELETE", format!("{leases}/none"), false),
            (&admin, "GET", leases.clone(), false),
        ] {
            let got = schema_of(client.clone(), method, path.clone()).await;
            assert!(got.is_some(), "{method} {path}: classified");
            assert_eq!(got.as_deref() == Some(uid.as_str()), ours, "{method} {path}: {got:?}, the chart's is {uid}");
        }
    });
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
    testkit::deployer_namespace(client, TENANT).await;
    let kubeconfig = dir.join("kubeconfig");
    cluster.write_kubeconfig(&kubeconfig, Some(&token(client, NS, "kuvryn-sync").await), None);
    let repos: Api<Repository> = Api::namespaced(client.clone(), TENANT);
    let repo: Repository = serde_json::from_value(json!({
        "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Repository",
        "metadata": {"name": "team-a"}, "spec": {"url": url, "ref": {"branch": "main"}, "interval": "1s"},
    }))
    .unwrap();
    repos.create(&PostParams::default(), &repo).await.unwrap();
    kubeconfig
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
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let client = cluster.client().await;
        let kubeconfig = install(&cluster, &client, &objects, &url, dir.path()).await;
        let container = manager_container(&objects);
        let replicas: Vec<Replica> = ["kuvryn-sync-7d9f-a", "kuvryn-sync-7d9f-b"]
            .iter()
            .map(|pod| Replica::start(container, pod, NS, &kubeconfig, dir.path(), Runtime::Host))
            .collect();

        // The two replicas split the four shards.
        let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
        eventually("both replicas to hold shards", Duration::from_secs(90), || async {
            let holders: Option<BTreeSet<String>> =
                shard_holders(&leases, "kuvryn-sync", 4).await.into_iter().collect();
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

/// `scripts/release-assets` writes what a release publishes: `crds.yaml` holds exactly the CRDs
/// of `crds/` and `kubectl apply --server-side` takes it, the packaged chart renders what
/// `deploy/chart` renders, and `SHA256SUMS` checks.
#[test]
fn the_release_assets_hold_the_crds_and_the_chart() {
    let tools = Tools::get();
    let out = temp_dir("release");
    let printed = testkit::run(
        Command::new(repo_root().join("scripts/release-assets"))
            .arg("--binary")
            .arg(testkit::manager::bin())
            .arg(out.path()),
    );
    let chart = out.path().join("kuvryn-sync-0.1.0.tgz");
    let written: Vec<&str> = printed.lines().collect();
    assert_eq!(written.len(), 3, "crds.yaml, the chart and SHA256SUMS: {printed}");
    testkit::run(Command::new("sha256sum").args(["--check", "--strict", "SHA256SUMS"]).current_dir(out.path()));

    let asset = std::fs::read_to_string(out.path().join("crds.yaml")).unwrap();
    let docs = |text: &str| -> Vec<Value> {
        kuvryn_sync::yaml::from_str_multiple::<Value>(text).unwrap().into_iter().filter(|d| !d.is_null()).collect()
    };
    let mut from_asset = docs(&asset);
    let mut from_folder = Vec::new();
    for entry in std::fs::read_dir(repo_root().join("crds")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            from_folder.extend(docs(&std::fs::read_to_string(path).unwrap()));
        }
    }
    let by_name = |v: &Value| v["metadata"]["name"].as_str().unwrap().to_string();
    from_asset.sort_by_key(by_name);
    from_folder.sort_by_key(by_name);
    assert_eq!(from_asset.len(), 5);
    assert_eq!(from_asset, from_folder, "crds.yaml holds the CRDs of crds/");
    let cluster = Cluster::start();
    let home = temp_dir("release-kubectl");
    let applied = testkit::run(
        cluster.kubectl(&tools, home.path()).args(["apply", "--server-side", "-f"]).arg(out.path().join("crds.yaml")),
    );
    assert_eq!(applied.lines().filter(|l| l.contains("serverside-applied")).count(), 5, "{applied}");

    for values in [&["replicas=1"][..], &["replicas=3", "shards=16"]] {
        assert_eq!(
            render_chart(&tools, &chart, "kuvryn-sync", values),
            render(&tools, "kuvryn-sync", values),
            "the packaged chart renders what deploy/chart renders"
        );
    }
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
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let client = cluster.client().await;
        let kubeconfig = install(&cluster, &client, &old, &url, dir.path()).await;
        let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
        let start = |objects: &[Value], pod: &str| {
            Replica::start(manager_container(objects), pod, NS, &kubeconfig, dir.path(), Runtime::Host)
        };
        let olds = vec![start(&old, "kuvryn-sync-old-a"), start(&old, "kuvryn-sync-old-b")];
        eventually("every shard to be held", Duration::from_secs(90), || async {
            shard_holders(&leases, "kuvryn-sync", 4).await.iter().all(Option::is_some).then_some(())
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
                    let holders = shard_holders(&leases, "kuvryn-sync", 4).await;
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
            let holders: Option<BTreeSet<String>> =
                shard_holders(&leases, "kuvryn-sync", 4).await.into_iter().collect();
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
    ("create", "authorization.k8s.io", "subjectaccessreviews", "", "", "", true),
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
    let runtime = testkit::runtime();
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

testkit::both!(
    the_replicas_lease_requests_are_classified_by_the_charts_flow_schema,
    the_chart_renders_objects_the_api_server_accepts,
    replicas_with_the_charts_arguments_run_as_its_service_account,
    the_charts_service_account_may_do_only_what_the_manager_needs,
    a_rolling_update_leaves_no_shard_without_an_owner_for_a_lease_duration,
);
