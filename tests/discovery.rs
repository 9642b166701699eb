//! API discovery against the cluster (simcluster, or the one in `KSYNC_E2E_KUBECONFIG`): the
//! scopes validation relies on, including kinds a CRD adds.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kuvryn_sync::plan::validate::Scopes;
use kuvryn_sync::watch::discovery::ClusterScopes;
use serde_json::json;
use testkit::apps::{Env, WAIT};
use testkit::{Cluster, apply_as, eventually, install_crds};

fn discovery_knows_built_in_and_custom_kinds_and_their_scope(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let client = cluster.client().await;
        let before = ClusterScopes::discover(&client).await.unwrap();
        assert_eq!(before.namespaced("", "ConfigMap"), Some(true));
        assert_eq!(before.namespaced("apps", "Deployment"), Some(true));
        assert_eq!(before.namespaced("", "Namespace"), Some(false));
        assert_eq!(before.namespaced("rbac.authorization.k8s.io", "ClusterRole"), Some(false));
        assert_eq!(before.namespaced("example.com", "Widget"), None);
        install_crds(&client).await;
        let after = ClusterScopes::discover(&client).await.unwrap();
        assert_eq!(after.namespaced("sync.kuvryn.io", "Application"), Some(true));
        let apps = after.resource("sync.kuvryn.io", "v1alpha1", "Application").expect("served");
        assert_eq!(apps.plural, "applications");
        assert_eq!(before.resource("apps", "v1", "Deployment").map(|r| r.plural.as_str()), Some("deployments"));
        assert!(before.resource("apps", "v1beta1", "Deployment").is_none());
    });
}

testkit::both!(discovery_knows_built_in_and_custom_kinds_and_their_scope,);

// See: issue 18, item 8. An aggregated API whose backend is down (here `metrics.k8s.io` served by
// a Service without endpoints, as with a broken metrics-server) answers 503 to discovery: the
// other groups are still discovered and Applications still deploy.
fn an_unavailable_api_group_does_not_stop_reconciles(cluster: Cluster) {
    const NS: &str = "broken-group";
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::start(&cluster, NS).await;
        apply_as(&env.client, "test", &json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "metrics-server", "namespace": NS},
            "spec": {"ports": [{"port": 443, "targetPort": 4443}]}}))
        .await;
        apply_as(&env.client, "test", &json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": "v1beta1.metrics.k8s.io"},
            "spec": {"group": "metrics.k8s.io", "version": "v1beta1", "groupPriorityMinimum": 100, "versionPriority": 100,
                     "insecureSkipTLSVerify": true, "service": {"name": "metrics-server", "namespace": NS, "port": 443}}}))
        .await;
        // kube's default client retries a 503 for many minutes: ask once per try.
        let probe = kube::Client::try_from(kuvryn_sync::client::without_retries(cluster.config().await)).unwrap();
        let error = eventually("metrics.k8s.io to be listed and to answer 503", WAIT, || async {
            let listed = probe.list_api_groups().await.ok()?.groups.iter().any(|g| g.name == "metrics.k8s.io");
            match probe.list_api_group_resources("metrics.k8s.io/v1beta1").await {
                Err(kube::Error::Api(s)) if listed && s.code == 503 => Some(s),
                _ => None,
            }
        })
        .await;
        assert_eq!(error.code, 503);

        let wt = env.repository("platform").await;
        wt.write("web/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\ndata: {color: blue}\n");
        let commit = wt.commit_and_push("web");
        env.refresh("platform", &commit).await;
        env.create_app(
            "web",
            json!({"source": {"repository": "platform", "path": "web"}, "serviceAccountName": "deployer",
                   "destination": {"namespace": NS}}),
        )
        .await;
        let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), NS);
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            let cm = cms.get_opt("web").await.ok().flatten();
            if cm.and_then(|c| c.data).is_some_and(|d| d.get("color").map(String::as_str) == Some("blue")) {
                break;
            }
            if std::time::Instant::now() > deadline {
                let status = env.apps().get("web").await.ok().and_then(|a| a.status);
                let discovered = ClusterScopes::discover(&probe).await.map(|s| (s.len(), s.failed().clone()));
                let events = env.events("web").await;
                panic!("the Application did not deploy its ConfigMap in {WAIT:?}; its status: {status:#?}, events: {events:?}, discovery: {discovered:?}");
            }
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        }
        // Discovery itself: the other groups are there.
        let scopes = ClusterScopes::discover(&probe).await.expect("discovery with one broken group");
        assert_eq!(scopes.namespaced("", "ConfigMap"), Some(true));
    });
}

// realkube only: simcluster serves no aggregation layer (no `apiregistration.k8s.io`).
mod an_unavailable_api_group_does_not_stop_reconciles {
    #[test]
    fn realkube() {
        super::an_unavailable_api_group_does_not_stop_reconciles(testkit::Cluster::real());
    }
}
