//! API discovery against the cluster (simcluster, or the one in `KSYNC_E2E_KUBECONFIG`): the
//! scopes validation relies on, including kinds a CRD adds.

mod support;

use kuvryn_sync::plan::validate::Scopes;
use kuvryn_sync::watch::discovery::ClusterScopes;
use support::{Cluster, install_crds};

fn discovery_knows_built_in_and_custom_kinds_and_their_scope(cluster: Cluster) {
    let runtime = support::runtime();
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

crate::both!(discovery_knows_built_in_and_custom_kinds_and_their_scope,);
