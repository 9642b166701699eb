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
