//! What kube-controller-manager gives every namespace: the serviceaccounts controller creates
//! the `default` ServiceAccount (no `secrets`; a POST setting no fields, so no managedFields
//! entry) and the root-ca-cert publisher the `kube-root-ca.crt` ConfigMap (`data["ca.crt"]`
//! and the `kubernetes.io/description` annotation), recreating either when deleted and
//! restoring the ConfigMap's content when changed. Terminating namespaces are left alone.

use serde_json::{Value, json};

use crate::client::{Client, path};

/// The ConfigMap the root-ca-cert publisher maintains.
pub const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";

/// The annotation on that ConfigMap.
pub const ROOT_CA_DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

/// The cluster CA bundle published in every namespace (a self-signed CA; the emulator serves
/// plain HTTP, so nothing verifies against it).
pub const CA_BUNDLE: &str = concat!(
    "-----BEGIN CERTIFICATE-----\n",
    "MIIDITCCAgmgAwIBAgIUAM1ZavfUCuyWAvEs3vnBzMb3VGowDQYJKoZIhvcNAQEL\n",
    "BQAwGDEWMBQGA1UEAwwNc2ltY2x1c3Rlci1jYTAeFw0yNjExMjkxMTIxNTZaFw0z\n",
    "NjExMjYxMTIxNTZaMBgxFjAUBgNVBAMMDXNpbWNsdXN0ZXItY2EwggEiMA0GCSqG\n",
    "SIb3DQEBAQUAA4IBDwAwggEKAoIBAQC8mOa6VvCs4M0yLRgeQ08qtEH9z4wlGaVB\n",
    "UzyeZi0eY8LJTwTcsW5SEh9y79q+UtWt/BSLtMlCpKu2sNQNTsFyoH87YUhdLsku\n",
    "lk49x/sL7VDR9IbeNKbESFiWtPJCwYSw4u0KCrvhmKJcDXOTgvavviEA9IpKjdUU\n",
    "EYtxGU2w6oTi1u0SAH0uYm+R1BNrh9Fe9ZhsTCD75U4ghrha5LmOF9dvZIAiGuz8\n",
    "HAoGx8wLN7OeuhljOR29NZLOVEGEB0x+5dKXF00BTnJtoIFemgGBuMCtRqy0TyAR\n",
    "xo1Bgdyh8nVFbuXWCEgNTHTZc0EQqMYy9mDC+Cdykqs9O+yAVSbhAgMBAAGjYzBh\n",
    "MB0GA1UdDgQWBBR5TmxQin8ZBa58bL0Fa5SrYm0EFDAfBgNVHSMEGDAWgBR5TmxQ\n",
    "in8ZBa58bL0Fa5SrYm0EFDAPBgNVHRMBAf8EBTADAQH/MA4GA1UdDwEB/wQEAwIB\n",
    "hjANBgkqhkiG9w0BAQsFAAOCAQEAdtDRr+vF1WA4zD9VT90FOBniyeX365VT/kBL\n",
    "3wRmfJDLxbX3+2ILhxpBKoksappr2MrZwlI8oGVB9xJaE/ibUpAsk4N9vwHR8Ok2\n",
    "JVfpna3AHtX5hDp+MXI/V8pOG7tLzLzUXTsoqZHtW6+xxOhXNFAy1dOlLhNIW3FR\n",
    "4Q0lTD2uDGASmhZJ5UGtbIxgVUYB5hkwPeYYOqKpUwZO9LU4xMh5rKuz3l3H8sj6\n",
    "igyuz0REJK7dvjb4nRTeWiXxaEuMaIXwYLp1qEjTiKwLOhItfxiLx2W9lOHr1onE\n",
    "GywXsDjC1KEUr4L+48gDNEaXkkJiDjvuLQo+yhbuNV7izZJc3g==\n",
    "-----END CERTIFICATE-----\n",
);

/// One pass over every namespace.
pub async fn reconcile(client: Client) {
    let (namespaces, has_sa, configmaps) = {
        let txn = client.state().store.lock();
        let namespaces: Vec<String> = txn
            .all("/namespaces")
            .into_iter()
            .filter(|n| !n["metadata"]["deletionTimestamp"].is_string() && n["status"]["phase"] != "Terminating")
            .filter_map(|n| n["metadata"]["name"].as_str().map(String::from))
            .collect();
        let has_sa: Vec<bool> =
            namespaces.iter().map(|ns| txn.get("/serviceaccounts", ns, "default").is_some()).collect();
        let configmaps: Vec<Option<Value>> =
            namespaces.iter().map(|ns| txn.get("/configmaps", ns, ROOT_CA_CONFIGMAP).cloned()).collect();
        (namespaces, has_sa, configmaps)
    };
    let data = json!({"ca.crt": CA_BUNDLE});
    for ((ns, has_sa), cm) in namespaces.iter().zip(has_sa).zip(configmaps) {
        if !has_sa {
            let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}});
            let _ = client.create(&path("v1", "serviceaccounts", ns, "", ""), &sa).await;
        }
        match cm {
            None => {
                let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": ROOT_CA_CONFIGMAP,
                                             "annotations": {"kubernetes.io/description": ROOT_CA_DESCRIPTION}},
                                "data": data.clone()});
                let _ = client.create(&path("v1", "configmaps", ns, "", ""), &cm).await;
            }
            Some(cm) if cm["metadata"]["deletionTimestamp"].is_string() => {}
            Some(cm) => {
                let described =
                    cm["metadata"]["annotations"]["kubernetes.io/description"].as_str().is_some_and(|d| !d.is_empty());
                if cm["data"] != data || !described {
                    let mut new = cm.clone();
                    new["apiVersion"] = json!("v1");
                    new["kind"] = json!("ConfigMap");
                    new["data"] = data.clone();
                    if !new["metadata"]["annotations"].is_object() {
                        new["metadata"]["annotations"] = json!({});
                    }
                    new["metadata"]["annotations"]["kubernetes.io/description"] = json!(ROOT_CA_DESCRIPTION);
                    let _ = client.update(&path("v1", "configmaps", ns, ROOT_CA_CONFIGMAP, ""), &new).await;
                }
            }
        }
    }
}
