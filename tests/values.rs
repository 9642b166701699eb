//! Helm `valuesFrom` read as the Application's service account: what its RBAC allows, nothing
//! more; Secret values are returned for redaction.

use std::time::Duration;

use kuvryn_sync::api::application::{ValuesKind, ValuesReference};
use kuvryn_sync::render::values;
use serde_json::json;
use testkit::Cluster;

fn r(kind: ValuesKind, name: &str, optional: bool) -> ValuesReference {
    ValuesReference { kind, name: name.into(), key: "values.yaml".into(), optional }
}

fn values_are_read_as_the_service_account(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let admin = cluster.client().await;
        let ns = "values-test";
        let apply = |obj: serde_json::Value| {
            let admin = admin.clone();
            async move {
                testkit::apply_as(&admin, "test", &obj).await;
            }
        };
        apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})).await;
        apply(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "deployer", "namespace": ns}})).await;
        apply(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "helm-values", "namespace": ns},
                     "stringData": {"values.yaml": "password: hunter2-secret\nreplicas: 3\n"}})).await;
        apply(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "someone-elses", "namespace": ns},
                     "stringData": {"values.yaml": "token: not-for-you\n"}})).await;
        apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "public", "namespace": ns},
                     "data": {"values.yaml": "greeting: hi\n"}})).await;
        apply(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "values-reader", "namespace": ns},
                     "rules": [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["helm-values"], "verbs": ["get"]},
                               {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]})).await;
        apply(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "values-reader", "namespace": ns},
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "values-reader"},
                     "subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": ns}]})).await;

        let sa = kuvryn_sync::impersonate::standalone(&cluster.config().await, ns, "deployer").unwrap();
        let wanted =
            [r(ValuesKind::Secret, "helm-values", false), r(ValuesKind::ConfigMap, "public", false), r(ValuesKind::ConfigMap, "absent", true)];
        // A real API server authorizes from an informer's copy of RBAC: the RoleBinding takes
        // effect a moment after it is written.
        let (docs, secrets) = testkit::eventually("the RoleBinding to take effect", Duration::from_secs(30), || async {
            match values::read(&sa, ns, &wanted, &Default::default()).await {
                Ok(read) => Some(read),
                Err(e) if e.to_string().contains("may not read it") => None,
                Err(e) => panic!("reading the values: {e}"),
            }
        })
        .await;
        assert_eq!(docs, [json!({"password": "hunter2-secret", "replicas": 3}), json!({"greeting": "hi"})]);
        assert!(secrets.iter().any(|s| s == "hunter2-secret"), "{secrets:?}");

        let e = values::read(&sa, ns, &[r(ValuesKind::Secret, "someone-elses", false)], &Default::default()).await.unwrap_err();
        assert!(e.to_string().contains("may not read it"), "{e}");
        assert!(!e.to_string().contains("not-for-you"), "{e}");
        let e = values::read(&sa, ns, &[r(ValuesKind::ConfigMap, "absent", false)], &Default::default()).await.unwrap_err();
        assert!(e.to_string().contains("not found (set optional: true"), "{e}");
    });
}

testkit::both!(values_are_read_as_the_service_account,);
