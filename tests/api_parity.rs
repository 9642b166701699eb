//! Exchanges where simcluster once answered differently from the real kube-apiserver, run on
//! both (`NAME::simcluster`, `NAME::realkube`) against the same expectation, so the emulator
//! cannot drift from its oracle again unnoticed.

mod support;

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};
use support::{Cluster, apply_as};

/// One kind: its API resource, whether it is namespaced, and a minimal valid object.
struct Kind {
    gvk: (&'static str, &'static str, &'static str),
    plural: &'static str,
    namespaced: bool,
    body: Value,
    /// Whether the real server refuses a PUT without `metadata.resourceVersion`.
    needs_resource_version: bool,
}

fn kinds() -> Vec<Kind> {
    let k = |gvk, plural, namespaced, body: Value, needs_resource_version| Kind {
        gvk,
        plural,
        namespaced,
        body,
        needs_resource_version,
    };
    vec![
        k(("coordination.k8s.io", "v1", "Lease"), "leases", true, json!({"spec": {"holderIdentity": "a"}}), true),
        k(
            ("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration"),
            "validatingwebhookconfigurations",
            false,
            json!({}),
            true,
        ),
        k(
            ("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration"),
            "mutatingwebhookconfigurations",
            false,
            json!({}),
            true,
        ),
        k(
            ("policy", "v1", "PodDisruptionBudget"),
            "poddisruptionbudgets",
            true,
            json!({"spec": {"maxUnavailable": 1}}),
            true,
        ),
        k(("node.k8s.io", "v1", "RuntimeClass"), "runtimeclasses", false, json!({"handler": "runc"}), true),
        k(("storage.k8s.io", "v1", "CSIDriver"), "csidrivers", false, json!({"spec": {}}), true),
        k(("", "v1", "ConfigMap"), "configmaps", true, json!({"data": {"a": "1"}}), false),
        k(("", "v1", "ServiceAccount"), "serviceaccounts", true, json!({}), false),
        k(("rbac.authorization.k8s.io", "v1", "Role"), "roles", true, json!({"rules": []}), false),
        k(
            ("storage.k8s.io", "v1", "StorageClass"),
            "storageclasses",
            false,
            json!({"provisioner": "example.com/x"}),
            false,
        ),
    ]
}

/// A PUT without `metadata.resourceVersion` is an unconditional overwrite for most kinds, and
/// refused (422, `metadata.resourceVersion: Invalid value: 0: must be specified for an update`)
/// for those whose strategy forbids it: Leases among them, which the shard fence relies on.
fn an_update_without_resource_version_is_refused_where_the_server_refuses_it(cluster: Cluster) {
    const NS: &str = "parity";
    let runtime = support::runtime();
    runtime.block_on(async {
        let client = cluster.client().await;
        apply_as(&client, "test", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})).await;
        let mut mismatches = Vec::new();
        for kind in kinds() {
            let (group, version, k) = kind.gvk;
            let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, k), kind.plural);
            let api: Api<DynamicObject> = if kind.namespaced {
                Api::namespaced_with(client.clone(), NS, &ar)
            } else {
                Api::all_with(client.clone(), &ar)
            };
            let name = format!("parity-{}", kind.plural.trim_end_matches('s'));
            let mut obj = kind.body.clone();
            obj["apiVersion"] = json!(ar.api_version);
            obj["kind"] = json!(k);
            obj["metadata"] = json!({"name": name});
            let obj: DynamicObject = serde_json::from_value(obj).unwrap();
            api.create(&PostParams::default(), &obj).await.unwrap_or_else(|e| panic!("create {k}: {e}"));
            let answer = api.replace(&name, &PostParams::default(), &obj).await;
            let refused = match &answer {
                Ok(_) => false,
                Err(kube::Error::Api(s)) => {
                    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"), "{k}: {s:?}");
                    assert!(
                        s.message
                            .ends_with("metadata.resourceVersion: Invalid value: 0: must be specified for an update"),
                        "{k}: {}",
                        s.message
                    );
                    true
                }
                Err(e) => panic!("{k}: {e}"),
            };
            if refused != kind.needs_resource_version {
                mismatches
                    .push(format!("{k}: refused {refused}, the real server refuses: {}", kind.needs_resource_version));
            }
        }
        assert!(mismatches.is_empty(), "{mismatches:#?}");
    });
}

crate::both!(an_update_without_resource_version_is_refused_where_the_server_refuses_it);
