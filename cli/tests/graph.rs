//! `ksync graph` end to end, on what the controller really produced: an Application whose
//! Deployment mounts a ConfigMap that does not exist, rolled out by the controllers in-process
//! (`testkit::apps::Env`) with the workload simulation, on simcluster and on a real
//! kube-apiserver. The tree, `dot` and JSON outputs are compared with the snapshots in
//! `cli/tests/snapshots/` (generated names filtered). The Pod mounts no service account token:
//! simcluster's admission does not inject the token volume a real API server adds (its
//! `kube-root-ca.crt` would be one more Uses edge, on the real server only).

use kuvryn_sync::api::application::Application;
use serde_json::json;
use testkit::apps::{Env, WAIT};
use testkit::{Cluster, eventually, ksync};

const DEPLOY: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      automountServiceAccountToken: false\n      containers:\n      - name: app\n        image: nginx:1.27\n        env:\n        - name: COLOR\n          valueFrom: {configMapKeyRef: {name: settings, key: color}}\n        volumeMounts: [{name: flags, mountPath: /etc/flags}]\n      volumes:\n      - {name: flags, configMap: {name: flags}}\n";
const SERVICE: &str =
    "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  selector: {app: web}\n  ports: [{port: 80}]\n";
const SETTINGS: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  color: blue\n";

fn snapshot(name: &str, output: &str) {
    let mut settings = insta::Settings::clone_current();
    // ReplicaSet, Pod and EndpointSlice names are generated.
    settings.add_filter(r"web-[a-z0-9]{5,10}(-[a-z0-9]{5})?\b", "web-[generated]");
    settings.bind(|| insta::assert_snapshot!(name, output));
}

fn the_graph_of_a_deployment_missing_its_config_map(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let ns = "graph";
        let env = Env::start(&cluster, ns).await;
        env.app_from(
            "web",
            &[("web/deploy.yaml", DEPLOY), ("web/service.yaml", SERVICE), ("web/settings.yaml", SETTINGS)],
            json!({"source": {"repository": "platform", "path": "web"}, "serviceAccountName": "deployer",
                   "destination": {"namespace": ns}, "health": {"timeout": "5s"}}),
        )
        .await;
        let app: Application = eventually("the diagnosis", WAIT, || async {
            let a = env.apps().get("web").await.ok()?;
            (a.status.as_ref()?.diagnosis.as_ref()?.reason == "MissingConfigMap").then_some(a)
        })
        .await;
        let tree = ksync::ok(&cluster, ns, &["graph", "web"]).stdout;
        snapshot("graph_web", &tree);
        snapshot("graph_web_dot", &ksync::ok(&cluster, ns, &["graph", "web", "-o", "dot"]).stdout);
        let out = ksync::ok(&cluster, ns, &["graph", "web", "-o", "json"]).stdout;
        let parsed: serde_json::Value = serde_json::from_str(&out).unwrap();
        // The CLI's walk, as the user, finds what the controller wrote.
        let written = serde_json::to_value(app.status.unwrap().diagnosis.unwrap()).unwrap();
        assert_eq!(parsed["diagnosis"]["reason"], written["reason"]);
        assert_eq!(parsed["diagnosis"]["path"].as_array().map(Vec::len), written["path"].as_array().map(Vec::len));
        snapshot("graph_web_json", &out);
        // `ksync app` shows the controller's diagnosis.
        let shown = ksync::ok(&cluster, ns, &["app", "web"]).stdout;
        assert!(
            shown.contains("Root cause: Deployment.apps graph/web: MissingConfigMap: ConfigMap graph/flags"),
            "{shown}"
        );
    });
}

testkit::both!(the_graph_of_a_deployment_missing_its_config_map);
