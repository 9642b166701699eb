//! The `MutatingWebhookConfiguration` that routes Application writes to the manager, as
//! `ksync-controller webhook-configuration` prints it for `deploy/` and the Helm chart.
//!
//! Why one mutating webhook and no validating one: the check of the chosen Revision and the
//! record of who asked belong to one decision on one object. A mutating webhook may deny, so one
//! call looks the Revision up, refuses a wrong one and records the requester; a separate
//! validating webhook would look the same Revision up a second time and add a second call (and
//! a second way to fail) to every write. What a validating webhook would add, seeing the object
//! after every other mutating webhook, is covered by `reinvocationPolicy: IfNeeded`: when a later
//! mutating webhook changes the object, the API server calls this one again on the result.
//!
//! Scope: only CREATE and UPDATE of `applications.sync.kuvryn.io` (no subresource: status writes
//! never reach it), and only when the new or old object carries a `sync.kuvryn.io/rollback-*` or
//! `sync.kuvryn.io/approved-*` annotation (`matchConditions`), so an Application without a
//! rollback request or an approval is never blocked by the webhook being down. `failurePolicy:
//! Fail` (a request the webhook cannot check is refused, never let through unrecorded),
//! `sideEffects: None`, `timeoutSeconds: 5`.
//!
//! A second webhook of the same configuration, [`SHARD_WEBHOOK_NAME`], sees only the CREATE of an
//! Application without a `sync.kuvryn.io/shard` label and gives it its shard's label
//! ([`SHARD_PATH`]), so no write of the labeller is needed. It decides nothing: `failurePolicy:
//! Ignore` (the webhook down, the Application is created unlabelled and the labeller labels it),
//! `reinvocationPolicy: Never`.

use serde_json::{Value, json};

use crate::api::names;

/// The webhook's name inside the configuration.
pub const WEBHOOK_NAME: &str = "applications.sync.kuvryn.io";
/// The HTTPS path the manager serves reviews at.
pub const PATH: &str = "/mutate-applications";
/// The webhook's `timeoutSeconds`.
pub const TIMEOUT_SECONDS: i32 = 5;
/// The shard-labelling webhook's name inside the configuration.
pub const SHARD_WEBHOOK_NAME: &str = "shard-labels.applications.sync.kuvryn.io";
/// The HTTPS path the manager labels new Applications at.
pub const SHARD_PATH: &str = "/label-applications";
/// The shard-labelling webhook's `timeoutSeconds`: a create waits no longer for a label the
/// labeller would give anyway.
pub const SHARD_TIMEOUT_SECONDS: i32 = 2;

/// Where the API server reaches the webhook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A Service (the normal, in-cluster case): name, namespace, port.
    Service {
        /// Its name.
        name: String,
        /// Its namespace.
        namespace: String,
        /// Its port.
        port: u16,
    },
    /// A URL (`https://host:port`), for a manager outside the cluster.
    Url(String),
}

/// The configuration named `name` reaching the webhook at `target`. With `inject_ca_from`
/// (`<namespace>/<Certificate>`), cert-manager's CA injector fills `caBundle`; otherwise the
/// manager does.
pub fn configuration(name: &str, target: &Target, inject_ca_from: Option<&str>) -> Value {
    let client_config = |path: &str| match target {
        Target::Service { name, namespace, port } => {
            json!({"service": {"name": name, "namespace": namespace, "path": path, "port": port}})
        }
        Target::Url(url) => json!({"url": format!("{}{path}", url.trim_end_matches('/'))}),
    };
    let has = |obj: &str| {
        format!(
            "(has({obj}.metadata.annotations) && {obj}.metadata.annotations.exists(k, k.startsWith('{}') || k.startsWith('sync.kuvryn.io/approved-')))",
            names::annotations::ROLLBACK_PREFIX
        )
    };
    let mut metadata = json!({"name": name, "labels": {names::labels::MANAGED_BY: names::labels::MANAGED_BY_VALUE}});
    if let Some(from) = inject_ca_from {
        metadata["annotations"] = json!({"cert-manager.io/inject-ca-from": from});
    }
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": metadata,
        "webhooks": [{
            "name": WEBHOOK_NAME,
            "admissionReviewVersions": ["v1"],
            "clientConfig": client_config(PATH),
            "rules": [{
                "apiGroups": [names::GROUP],
                "apiVersions": [names::VERSION],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["applications"],
                "scope": "Namespaced",
            }],
            "matchConditions": [{
                "name": "rollback-or-approval-annotations",
                "expression": format!("{} || (oldObject != null && {})", has("object"), has("oldObject")),
            }],
            "failurePolicy": "Fail",
            "matchPolicy": "Equivalent",
            "sideEffects": "None",
            "timeoutSeconds": TIMEOUT_SECONDS,
            "reinvocationPolicy": "IfNeeded",
        }, {
            "name": SHARD_WEBHOOK_NAME,
            "admissionReviewVersions": ["v1"],
            "clientConfig": client_config(SHARD_PATH),
            "rules": [{
                "apiGroups": [names::GROUP],
                "apiVersions": [names::VERSION],
                "operations": ["CREATE"],
                "resources": ["applications"],
                "scope": "Namespaced",
            }],
            "matchConditions": [{
                "name": "no-shard-label",
                "expression": format!(
                    "!has(object.metadata.labels) || !('{}' in object.metadata.labels)",
                    names::labels::SHARD
                ),
            }],
            "failurePolicy": "Ignore",
            "matchPolicy": "Equivalent",
            "sideEffects": "None",
            "timeoutSeconds": SHARD_TIMEOUT_SECONDS,
            "reinvocationPolicy": "Never",
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_applications_and_only_their_main_resource() {
        let c = configuration("kuvryn-sync", &Target::Url("https://127.0.0.1:9443".into()), None);
        let w = &c["webhooks"][0];
        assert_eq!(w["rules"].as_array().unwrap().len(), 1);
        assert_eq!(w["rules"][0]["apiGroups"], json!(["sync.kuvryn.io"]));
        assert_eq!(w["rules"][0]["resources"], json!(["applications"]));
        assert_eq!(w["rules"][0]["operations"], json!(["CREATE", "UPDATE"]));
        assert_eq!(w["failurePolicy"], "Fail");
        assert_eq!(w["sideEffects"], "None");
        assert_eq!(w["clientConfig"]["url"], "https://127.0.0.1:9443/mutate-applications");
        assert!(c["metadata"].get("annotations").is_none());
        let cm = configuration(
            "x",
            &Target::Service { name: "s".into(), namespace: "n".into(), port: 443 },
            Some("n/ksync-webhook"),
        );
        assert_eq!(cm["metadata"]["annotations"]["cert-manager.io/inject-ca-from"], "n/ksync-webhook");
        assert_eq!(cm["webhooks"][0]["clientConfig"]["service"]["path"], PATH);
        // The shard labels: only creates, never blocking one.
        let l = &c["webhooks"][1];
        assert_eq!(l["name"], SHARD_WEBHOOK_NAME);
        assert_eq!(l["rules"][0]["operations"], json!(["CREATE"]));
        assert_eq!(l["rules"][0]["resources"], json!(["applications"]));
        assert_eq!(l["failurePolicy"], "Ignore");
        assert_eq!(l["clientConfig"]["url"], "https://127.0.0.1:9443/label-applications");
        assert_eq!(cm["webhooks"][1]["clientConfig"]["service"]["path"], SHARD_PATH);
    }
}
