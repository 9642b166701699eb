//! Third-party charts as `helm install` would deploy them, end to end on both servers: the
//! renderer chosen from the path, a chart's `crds/` applied in the first wave and listed as chart
//! CRDs, and `.Capabilities` answering from the target cluster, a chart's own CRDs included.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use kuvryn_sync::api::names;
use kuvryn_sync::api::revision::{PlanAction, RevisionPhase};
use serde_json::json;
use testkit::Cluster;
use testkit::apps::{Env, entries, entry};

const CHART: &str = "apiVersion: v2\nname: widgets\nversion: 1.0.0\n";

/// A CRD serving `kind` (plural `<kind>s`, lowercase) in `group`, `v1`.
fn crd(group: &str, kind: &str) -> String {
    let plural = format!("{}s", kind.to_lowercase());
    format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: {plural}.{group}\nspec:\n  group: {group}\n  scope: Namespaced\n  names: {{kind: {kind}, plural: {plural}, singular: {}, listKind: {kind}List}}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}\n",
        kind.to_lowercase()
    )
}

/// What the chart's templates saw of the cluster: its version and whether it serves the
/// chart's Widget and the Gadget installed by hand.
const CAPABILITIES: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: capabilities\n  annotations: {sync.kuvryn.io/sync-wave: \"-1\"}\ndata:\n  kube: {{ .Capabilities.KubeVersion.Version | quote }}\n  widget: {{ .Capabilities.APIVersions.Has \"charts.kuvryn.test/v1/Widget\" | quote }}\n  gadget: {{ .Capabilities.APIVersions.Has \"gadgets.kuvryn.test/v1/Gadget\" | quote }}\n";

/// A Widget only where the cluster serves the kind, as charts guard their custom resources.
const WIDGET: &str = "{{- if .Capabilities.APIVersions.Has \"charts.kuvryn.test/v1/Widget\" }}\napiVersion: charts.kuvryn.test/v1\nkind: Widget\nmetadata:\n  name: {{ .Release.Name }}\nspec:\n  size: 3\n{{- end }}\n";

fn spec(path: &str, render: serde_json::Value) -> serde_json::Value {
    json!({"source": {"repository": "platform", "path": path, "render": render}, "serviceAccountName": "deployer",
           "destination": {"namespace": "charts", "clusterResources": [{"group": "apiextensions.k8s.io", "kind": "CustomResourceDefinition"}]},
           "health": {"timeout": "60s"}, "failurePolicy": {"maxAttempts": 1}})
}

async fn healthy(env: &Env, app: &str) -> kuvryn_sync::api::revision::Revision {
    env.revision_where(app, "the Revision Healthy", |r| {
        r.status.as_ref().is_some_and(|s| s.phase == RevisionPhase::Healthy)
    })
    .await
}

/// A chart with `crds/` and `.Capabilities` guards, with no render type: rendered with Helm,
/// its CRD applied first and listed as a chart CRD, its guarded Widget created in the same
/// rollout (as under `helm install`), the server's version seen; a kind the cluster starts
/// serving later renders again as a new desired state. A kustomization with no type renders
/// with Kustomize, and a chart under an explicit `Yaml` renderer says to set Helm.
fn a_chart_deploys_as_helm_install_would(cluster: Cluster) {
    const NS: &str = "charts";
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::start(&cluster, NS).await;
        env.allow_everything().await;
        let wt = env
            .app_from(
                "widgets",
                &[
                    ("chart/Chart.yaml", CHART),
                    ("chart/crds/widgets.yaml", &crd("charts.kuvryn.test", "Widget")),
                    ("chart/templates/capabilities.yaml", CAPABILITIES),
                    ("chart/templates/widget.yaml", WIDGET),
                    ("overlay/kustomization.yaml", "resources: [cm.yaml]\nnamePrefix: kust-\n"),
                    ("overlay/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata: {a: b}\n"),
                ],
                spec("chart", json!({})),
            )
            .await;
        let rev = healthy(&env, "widgets").await;
        let e = entries(&rev);
        let crd_entry = entry(&e, "CustomResourceDefinition", "widgets.charts.kuvryn.test");
        assert!(crd_entry.chart_crd, "{crd_entry:?}");
        assert_eq!((crd_entry.action, crd_entry.wave), (PlanAction::Create, -1), "the CRD is in the first wave");
        assert_eq!(entry(&e, "Widget", "widgets").action, PlanAction::Create);

        let version = env.client.apiserver_version().await.unwrap().git_version;
        let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), NS);
        let seen = cms.get("capabilities").await.unwrap().data.unwrap_or_default();
        assert_eq!(seen.get("kube"), Some(&version), "{seen:?}");
        assert_eq!(seen.get("widget").map(String::as_str), Some("true"), "{seen:?}");
        assert_eq!(seen.get("gadget").map(String::as_str), Some("false"), "{seen:?}");
        let widgets: Api<DynamicObject> = Api::namespaced_with(
            env.client.clone(),
            NS,
            &ApiResource::from_gvk(&GroupVersionKind::gvk("charts.kuvryn.test", "v1", "Widget")),
        );
        let widget = widgets.get("widgets").await.unwrap();
        assert_eq!(widget.data["spec"]["size"], 3);
        let live_crd: Api<DynamicObject> = Api::all_with(
            env.client.clone(),
            &ApiResource::from_gvk(&GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition")),
        );
        let live = live_crd.get("widgets.charts.kuvryn.test").await.unwrap();
        assert_eq!(
            live.metadata.annotations.unwrap_or_default().get(names::annotations::CHART_CRD).map(String::as_str),
            Some("true")
        );

        // The cluster starts serving a kind the chart asks about: the next render sees it.
        let gadget: serde_json::Value =
            kuvryn_sync::yaml::from_str_multiple(&crd("gadgets.kuvryn.test", "Gadget")).unwrap().remove(0);
        testkit::apply_as(&env.client, "test", &gadget).await;
        testkit::eventually("the Gadget served and rendered", testkit::apps::WAIT, || async {
            // One reconcile a second: discovery is read again once the snapshot is older than
            // CAPABILITIES_MAX_AGE.
            env.poke("widgets", &format!("{:?}", std::time::Instant::now())).await;
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            let data = cms.get("capabilities").await.ok()?.data?;
            (data.get("gadget").map(String::as_str) == Some("true")).then_some(())
        })
        .await;

        // No type over a kustomization: Kustomize.
        env.create_app("overlay", spec("overlay", json!({}))).await;
        healthy(&env, "overlay").await;
        assert!(
            cms.get_opt("kust-settings").await.unwrap().is_some(),
            "the kustomization was not rendered with Kustomize"
        );

        // An explicit Yaml renderer over a chart: the failure says to set Helm.
        env.create_app("as-yaml", spec("chart", json!({"type": "Yaml"}))).await;
        let failed = env.failed_revision("as-yaml").await;
        let message = failed.status.and_then(|s| s.failure).map(|f| f.message).unwrap_or_default();
        assert!(message.contains("set spec.source.render.type: Helm"), "{message}");
        drop(wt);
    });
}

testkit::both!(a_chart_deploys_as_helm_install_would,);

/// A Secret `name` with the credentials (and CA) of a chart server, marked for the chart
/// repositories `urls` (`sync.kuvryn.io/chart-urls`; read as the controller, a chart
/// Repository's Secret is used only for what it lists).
async fn credentials(env: &Env, name: &str, user: &str, password: &str, ca: &std::path::Path, urls: &str) {
    let ca = std::fs::read_to_string(ca).unwrap();
    testkit::apply_as(
        &env.client,
        "test",
        &json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": name, "namespace": "pulls", "annotations": {names::annotations::CHART_URLS: urls}},
                "stringData": {"username": user, "password": password, "ca.crt": ca}}),
    )
    .await;
}

/// The `data.version` of ConfigMap `name`, once it exists.
async fn version_of(cms: &Api<ConfigMap>, name: &str, want: &str) {
    testkit::eventually(&format!("ConfigMap {name} at version {want}"), testkit::apps::WAIT, || async {
        let data = cms.get_opt(name).await.ok()??.data?;
        (data.get("version").map(String::as_str) == Some(want)).then_some(())
    })
    .await;
}

/// An umbrella chart in Git with one dependency from an HTTPS Helm repository (basic auth,
/// private CA, a version range), one from an OCI registry (htpasswd, private CA) and one
/// `file://` chart of the same repository: all pulled with the real helm and rendered; the
/// versions and digests are on the Revision. A second Application of the same chart pulls
/// nothing again. A release within the range, once the range is due to be resolved again, is a
/// new Revision that deploys. A wrong password is a retryable failed chart pull that says which
/// chart and never shows the password, and the Application recovers once the Secret is fixed.
/// A `file://` dependency leaving the repository is refused.
fn an_umbrella_chart_pulls_its_dependencies(cluster: Cluster) {
    const NS: &str = "pulls";
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let repo = testkit::charts::HelmRepo::start("repo-user", "repo-pass-7f3a");
        let registry = testkit::charts::OciRegistry::start("oci-user", "oci-pass-91c2");
        let work = testkit::temp_dir("charts");
        repo.publish(&testkit::charts::chart(work.path(), "redis", "1.2.3").write());
        repo.publish(&testkit::charts::chart(work.path(), "redis", "1.3.0").write());
        registry.push(&testkit::charts::chart(work.path(), "db", "2.0.1").write());
        let env = Env::start(&cluster, NS).await;
        env.allow_everything().await;
        credentials(&env, "repo-creds", repo.user(), repo.password(), &repo.ca_file(), &repo.url()).await;
        credentials(&env, "oci-creds", registry.user(), registry.password(), &registry.ca_file(), &registry.url()).await;
        let umbrella = format!(
            "apiVersion: v2\nname: umbrella\nversion: 0.1.0\ndependencies:\n- {{name: redis, version: \"~1.2\", repository: \"{}\"}}\n- {{name: db, version: 2.0.1, repository: \"{}\"}}\n- {{name: common, version: 0.1.0, repository: \"file://../common\"}}\n",
            repo.url(),
            registry.url()
        );
        let common = "apiVersion: v2\nname: common\nversion: 0.1.0\n";
        let common_cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-common\ndata:\n  version: {{ .Chart.Version | quote }}\n";
        let bad = "apiVersion: v2\nname: bad\nversion: 0.1.0\ndependencies:\n- {name: root, version: 0.1.0, repository: \"file://../../\"}\n";
        let helm = json!({"helm": {"credentials": [
            {"url": repo.url(), "secretRef": {"name": "repo-creds"}},
            {"url": format!("oci://{}", registry.host()), "secretRef": {"name": "oci-creds"}}]}});
        let spec = |path: &str| {
            json!({"source": {"repository": "platform", "path": path, "render": helm.clone()}, "serviceAccountName": "deployer",
                   "destination": {"namespace": NS}, "health": {"timeout": "60s"}, "failurePolicy": {"maxAttempts": 1}})
        };
        let wt = env
            .app_from(
                "app",
                &[
                    ("umbrella/Chart.yaml", &umbrella),
                    ("common/Chart.yaml", common),
                    ("common/templates/cm.yaml", common_cm),
                    ("bad/Chart.yaml", bad),
                ],
                spec("umbrella"),
            )
            .await;
        let rev = healthy(&env, "app").await;
        let charts: Vec<(String, String)> =
            rev.spec.charts.iter().map(|c| (c.name.clone(), c.version.clone())).collect();
        assert_eq!(charts, [("redis".to_string(), "1.2.3".to_string()), ("db".to_string(), "2.0.1".to_string())]);
        assert!(rev.spec.charts.iter().all(|c| c.digest.starts_with("sha256:") && c.digest.len() == 71), "{:?}", rev.spec.charts);
        let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), NS);
        version_of(&cms, "app-redis", "1.2.3").await;
        version_of(&cms, "app-db", "2.0.1").await;
        version_of(&cms, "app-common", "0.1.0").await;

        // The same chart for another Application: served from the pull cache.
        let (repo_requests, registry_requests) = (repo.requests().len(), registry.requests().len());
        env.create_app("again", spec("umbrella")).await;
        healthy(&env, "again").await;
        version_of(&cms, "again-redis", "1.2.3").await;
        assert_eq!(repo.requests().len(), repo_requests, "the Helm repository was asked again: {:?}", repo.requests());
        assert_eq!(registry.requests().len(), registry_requests, "the registry was asked again");

        // A release within the range: resolved again once the Repository's interval has passed.
        repo.publish(&testkit::charts::chart(work.path(), "redis", "1.2.4").write());
        let repos: Api<kuvryn_sync::api::repository::Repository> = Api::namespaced(env.client.clone(), NS);
        repos
            .patch("platform", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(json!({"spec": {"interval": "2s"}})))
            .await
            .unwrap();
        testkit::eventually("redis 1.2.4 deployed", testkit::apps::WAIT, || async {
            env.poke("app", &format!("{:?}", std::time::Instant::now())).await;
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            let data = cms.get_opt("app-redis").await.ok()??.data?;
            (data.get("version").map(String::as_str) == Some("1.2.4")).then_some(())
        })
        .await;
        let newer = env
            .revision_where("app", "the Revision with redis 1.2.4 Healthy", |r| {
                r.spec.charts.iter().any(|c| c.name == "redis" && c.version == "1.2.4")
                    && r.status.as_ref().is_some_and(|s| s.phase == RevisionPhase::Healthy)
            })
            .await;
        assert_ne!(newer.metadata.name, rev.metadata.name, "a new release is a Revision of its own");
        assert!(newer.spec.charts.iter().any(|c| c.name == "redis" && c.version == "1.2.4"), "{:?}", newer.spec.charts);

        // A wrong password: a failed chart pull, retried, fixed with the Secret.
        credentials(&env, "repo-creds", repo.user(), "wrong-pass-55d1", &repo.ca_file(), "").await;
        let message = testkit::eventually("a failed chart pull on Ready", testkit::apps::WAIT, || async {
            env.poke("app", &format!("{:?}", std::time::Instant::now())).await;
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            let app = env.apps().get("app").await.ok()?;
            let ready = kuvryn_sync::api::conditions::get(&app.status?.conditions, names::conditions::READY).cloned()?;
            (ready.reason == names::reasons::RENDER_FAILURE).then_some(ready.message)
        })
        .await;
        assert!(message.contains("failed chart pull of redis ~1.2 from https://127.0.0.1"), "{message}");
        assert!(message.contains("401"), "{message}");
        assert!(!message.contains("wrong-pass-55d1"), "the password is in Ready: {message}");
        assert_eq!(cms.get("app-redis").await.unwrap().data.unwrap()["version"], "1.2.4", "a failed pull touched the live state");
        credentials(&env, "repo-creds", repo.user(), repo.password(), &repo.ca_file(), &repo.url()).await;
        testkit::eventually("Ready again", testkit::apps::WAIT, || async {
            env.poke("app", &format!("{:?}", std::time::Instant::now())).await;
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            let app = env.apps().get("app").await.ok()?;
            let ready = kuvryn_sync::api::conditions::get(&app.status?.conditions, names::conditions::READY).cloned()?;
            (ready.status == "True").then_some(())
        })
        .await;

        // file:// out of the repository.
        env.create_app("bad", spec("bad")).await;
        let message = testkit::eventually("the file:// dependency refused", testkit::apps::WAIT, || async {
            let app = env.apps().get("bad").await.ok()?;
            let ready = kuvryn_sync::api::conditions::get(&app.status?.conditions, names::conditions::READY).cloned()?;
            (ready.reason == names::reasons::RENDER_FAILURE).then_some(ready.message)
        })
        .await;
        assert!(message.contains("file://../../") && message.contains("leaves the repository"), "{message}");
        drop(wt);
    });
}

testkit::both!(an_umbrella_chart_pulls_its_dependencies,);

/// A Repository of `type: Helm` and one of `type: OCI`, each following a chart within `~1.2`:
/// their Applications render the chart with their own values (the chart's CRDs first), and a
/// release within the range, once pushed, is found at the Repository's interval and deployed
/// as a Revision of its own, its version recorded.
fn chart_repositories_follow_a_version_range(cluster: Cluster) {
    const NS: &str = "pulls";
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let repo = testkit::charts::HelmRepo::start("repo-user", "repo-pass-7f3a");
        let registry = testkit::charts::OciRegistry::start("oci-user", "oci-pass-91c2");
        let work = testkit::temp_dir("charts");
        let greeting = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-greeting\ndata:\n  greeting: {{ .Values.greeting | default \"none\" | quote }}\n";
        let web = |version: &str| {
            let dir = testkit::charts::chart(work.path(), "web", version).with_crd().write();
            std::fs::write(dir.join("templates/greeting.yaml"), greeting).unwrap();
            dir
        };
        let api = |version: &str| testkit::charts::chart(work.path(), "api", version).write();
        repo.publish(&web("1.2.3"));
        repo.publish(&web("2.0.0"));
        registry.push(&api("1.2.3"));
        let env = Env::start(&cluster, NS).await;
        env.allow_everything().await;
        credentials(&env, "repo-creds", repo.user(), repo.password(), &repo.ca_file(), &repo.url()).await;
        credentials(&env, "oci-creds", registry.user(), registry.password(), &registry.ca_file(), &registry.url()).await;
        let repos: Api<kuvryn_sync::api::repository::Repository> = Api::namespaced(env.client.clone(), NS);
        // A Secret not marked for the chart repository: never used, nothing asked of the server
        // (checked before the other Repositories poll the same server).
        credentials(&env, "unmarked", repo.user(), repo.password(), &repo.ca_file(), "https://elsewhere.example.com").await;
        let unmarked: kuvryn_sync::api::repository::Repository = serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Repository", "metadata": {"name": "unmarked", "namespace": NS},
            "spec": {"type": "Helm", "url": repo.url(), "chart": {"name": "web"}, "secretRef": {"name": "unmarked"}}}))
        .unwrap();
        let asked = repo.requests().len();
        repos.create(&Default::default(), &unmarked).await.unwrap();
        let message = testkit::eventually("the unmarked Secret refused", testkit::apps::WAIT, || async {
            let r = repos.get("unmarked").await.ok()?;
            let ready = kuvryn_sync::api::conditions::get(&r.status?.conditions, names::conditions::READY).cloned()?;
            (ready.status == "False").then_some(ready.message)
        })
        .await;
        assert!(message.contains("annotation does not list this Repository's URL"), "{message}");
        assert_eq!(repo.requests().len(), asked, "the server was asked with an unmarked Secret");
        for (name, type_, url, chart, secret) in [
            ("helm-charts", "Helm", repo.url(), "web", "repo-creds"),
            ("oci-charts", "OCI", registry.url(), "api", "oci-creds"),
        ] {
            let r: kuvryn_sync::api::repository::Repository = serde_json::from_value(json!({
                "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Repository", "metadata": {"name": name, "namespace": NS},
                "spec": {"type": type_, "url": url, "chart": {"name": chart, "version": "~1.2"},
                         "secretRef": {"name": secret}, "interval": "2s"}}))
            .unwrap();
            repos.create(&Default::default(), &r).await.unwrap();
        }
        let spec = |repository: &str, render: serde_json::Value| {
            json!({"source": {"repository": repository, "render": render}, "serviceAccountName": "deployer",
                   "destination": {"namespace": NS, "clusterResources": [{"group": "apiextensions.k8s.io", "kind": "CustomResourceDefinition"}]},
                   "health": {"timeout": "60s"}, "failurePolicy": {"maxAttempts": 1}})
        };
        env.create_app("from-helm", spec("helm-charts", json!({"helm": {"values": {"greeting": "hello"}}}))).await;
        env.create_app("from-oci", spec("oci-charts", json!({}))).await;
        let first = healthy(&env, "from-helm").await;
        healthy(&env, "from-oci").await;
        assert_eq!(first.spec.source.commit, "1.2.3");
        assert_eq!(first.spec.charts.iter().map(|c| (c.name.as_str(), c.version.as_str())).collect::<Vec<_>>(), [("web", "1.2.3")]);
        let crd = entry(&entries(&first), "CustomResourceDefinition", "widgets.web.kuvryn.test").clone();
        assert!(crd.chart_crd, "{crd:?}");
        let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), NS);
        version_of(&cms, "from-helm-web", "1.2.3").await;
        version_of(&cms, "from-oci-api", "1.2.3").await;
        let said = cms.get("from-helm-greeting").await.unwrap().data.unwrap_or_default();
        assert_eq!(said.get("greeting").map(String::as_str), Some("hello"), "inline values");
        let widgets: Api<DynamicObject> = Api::namespaced_with(
            env.client.clone(),
            NS,
            &ApiResource::from_gvk(&GroupVersionKind::gvk("web.kuvryn.test", "v1", "Widget")),
        );
        assert!(widgets.get_opt("from-helm-web").await.unwrap().is_some(), "the chart's guarded Widget");

        // New releases within the range (and one outside it) are pushed: followed at the interval.
        repo.publish(&web("1.2.4"));
        repo.publish(&web("1.3.0"));
        registry.push(&api("1.2.4"));
        version_of(&cms, "from-helm-web", "1.2.4").await;
        version_of(&cms, "from-oci-api", "1.2.4").await;
        let newer = env
            .revision_where("from-helm", "the Revision of 1.2.4 Healthy", |r| {
                r.spec.source.commit == "1.2.4" && r.status.as_ref().is_some_and(|s| s.phase == RevisionPhase::Healthy)
            })
            .await;
        assert_ne!(newer.metadata.name, first.metadata.name);
        assert_eq!(newer.spec.charts.iter().map(|c| c.version.as_str()).collect::<Vec<_>>(), ["1.2.4"]);
        let r = repos.get("helm-charts").await.unwrap();
        assert_eq!(r.status.and_then(|s| s.revision).map(|r| r.commit).as_deref(), Some("1.2.4"));
    });
}

testkit::both!(chart_repositories_follow_a_version_range,);

/// A chart Repository's Application takes a values file from a Git Repository of the namespace,
/// at the commit that Repository observes: a new commit changing the file is a new desired
/// state, deployed without waiting for a resync.
fn values_files_come_from_a_git_repository(cluster: Cluster) {
    const NS: &str = "pulls";
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let repo = testkit::charts::HelmRepo::start("repo-user", "repo-pass-7f3a");
        let work = testkit::temp_dir("charts");
        let dir = testkit::charts::chart(work.path(), "web", "1.0.0").write();
        let greeting = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-greeting\ndata:\n  greeting: {{ .Values.greeting | default \"none\" | quote }}\n";
        std::fs::write(dir.join("templates/greeting.yaml"), greeting).unwrap();
        repo.publish(&dir);
        let env = Env::start(&cluster, NS).await;
        credentials(&env, "repo-creds", repo.user(), repo.password(), &repo.ca_file(), &repo.url()).await;
        let wt = env.repository("platform").await;
        wt.write("values/web.yaml", "greeting: from-git\n");
        let first = wt.commit_and_push("values");
        env.refresh("platform", &first).await;
        let chart: kuvryn_sync::api::repository::Repository = serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Repository", "metadata": {"name": "web-chart", "namespace": NS},
            "spec": {"type": "Helm", "url": repo.url(), "chart": {"name": "web", "version": "1.0.0"},
                     "secretRef": {"name": "repo-creds"}, "interval": "1h"}}))
        .unwrap();
        Api::<kuvryn_sync::api::repository::Repository>::namespaced(env.client.clone(), NS)
            .create(&Default::default(), &chart)
            .await
            .unwrap();
        env.create_app(
            "web",
            json!({"source": {"repository": "web-chart", "render": {"helm": {"valuesFrom": [
                       {"kind": "Repository", "name": "platform", "key": "values/web.yaml"}]}}},
                   "serviceAccountName": "deployer", "destination": {"namespace": NS}}),
        )
        .await;
        let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), NS);
        let greeting_is = |want: &'static str| {
            let cms = cms.clone();
            async move {
                testkit::eventually(&format!("the greeting {want}"), testkit::apps::WAIT, || async {
                    let data = cms.get_opt("web-greeting").await.ok()??.data?;
                    (data.get("greeting").map(String::as_str) == Some(want)).then_some(())
                })
                .await
            }
        };
        greeting_is("from-git").await;
        wt.write("values/web.yaml", "greeting: changed-in-git\n");
        let second = wt.commit_and_push("new values");
        env.refresh("platform", &second).await;
        greeting_is("changed-in-git").await;
    });
}

testkit::both!(values_files_come_from_a_git_repository,);
