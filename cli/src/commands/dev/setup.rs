//! What the quickstart puts in the fresh cluster before the replicas start: the CRDs, the
//! namespaces, the example's service account with a Role over its namespace, the Helm values
//! ConfigMap, and then the Repository. The objects are built by pure functions and applied with
//! Server-Side Apply as the field manager [`FIELD_MANAGER`].

use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};

use kuvryn_sync::api::{Repository, names};
use kuvryn_sync::command::{Error, Result};

use super::example::{NAMESPACE, SERVICE_ACCOUNT, VALUES_CONFIGMAP};
use super::replicas::LEASE_NAMESPACE;

/// The field manager of everything `ksync dev` applies.
pub const FIELD_MANAGER: &str = "ksync-dev";

/// The name of the Repository (and of the repository on the Git server).
pub const REPOSITORY: &str = super::git::REPOSITORY;

/// How often the Repository looks for new commits.
pub const INTERVAL: &str = "5s";

/// The namespaces, the service account the Applications act as with a Role allowing everything
/// in their namespace, and the values ConfigMap of the Helm Application.
pub fn bootstrap_objects() -> Vec<Value> {
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LEASE_NAMESPACE}}),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": SERVICE_ACCOUNT, "namespace": NAMESPACE}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": SERVICE_ACCOUNT, "namespace": NAMESPACE},
               "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": SERVICE_ACCOUNT, "namespace": NAMESPACE},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SERVICE_ACCOUNT},
               "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}]}),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": VALUES_CONFIGMAP, "namespace": NAMESPACE},
               "data": {"values.yaml": "# Values a platform team keeps outside Git; the greeter Application reads them (valuesFrom).\nmessage: Hello from the greeter-values ConfigMap\n"}}),
    ]
}

/// The Repository following `main` of `url`.
pub fn repository(url: &str) -> Value {
    json!({"apiVersion": names::API_VERSION, "kind": "Repository",
           "metadata": {"name": REPOSITORY, "namespace": NAMESPACE},
           "spec": {"url": url, "ref": {"branch": "main"}, "interval": INTERVAL}})
}

/// The API resource of one of the kinds above.
fn resource(obj: &Value) -> ApiResource {
    let api_version = obj["apiVersion"].as_str().unwrap_or_default();
    let kind = obj["kind"].as_str().unwrap_or_default();
    let plural = match kind {
        "Repository" => "repositories".to_string(),
        k => format!("{}s", k.to_lowercase()),
    };
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        plural,
    }
}

/// Server-side apply `obj` as [`FIELD_MANAGER`].
pub async fn apply(client: &kube::Client, obj: &Value) -> Result<()> {
    let ar = resource(obj);
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let api: Api<DynamicObject> = match obj["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    api.patch(name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(obj))
        .await
        .map_err(|e| Error::Startup(format!("applying {} {name}: {e}", ar.kind)))?;
    Ok(())
}

/// Apply the Kuvryn Sync CRDs and wait until the API server serves them.
pub async fn install_crds(client: &kube::Client) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for manifest in kuvryn_sync::api::crd::manifests() {
        let name = manifest["metadata"]["name"].as_str().unwrap_or_default().to_string();
        crds.patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&manifest))
            .await
            .map_err(|e| Error::Startup(format!("installing the CRD {name}: {e}")))?;
        let end = Instant::now() + Duration::from_secs(30);
        loop {
            let crd = crds.get(&name).await.map_err(|e| Error::Startup(format!("reading the CRD {name}: {e}")))?;
            let established = crd
                .status
                .and_then(|s| s.conditions)
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Established" && c.status == "True"));
            if established {
                break;
            }
            if Instant::now() > end {
                return Err(Error::Startup(format!("the CRD {name} was not Established within 30s")));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Ok(())
}

/// Everything before the replicas: CRDs, then [`bootstrap_objects`].
pub async fn bootstrap(client: &kube::Client) -> Result<()> {
    install_crds(client).await?;
    for obj in bootstrap_objects() {
        apply(client, &obj).await?;
    }
    Ok(())
}

/// Create (apply) the Repository.
pub async fn create_repository(client: &kube::Client, url: &str) -> Result<()> {
    let obj = repository(url);
    // Checked against the type, so a field renamed in the API fails the unit tests.
    let _: Repository = serde_json::from_value(obj.clone()).map_err(|e| Error::Startup(e.to_string()))?;
    apply(client, &obj).await
}

/// An admin kubeconfig for the emulator at `url`, its context in the example's namespace.
pub fn kubeconfig(url: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: ksync-dev\n  cluster:\n    server: {url}\nusers:\n- name: ksync-dev-admin\n  user:\n    token: {token}\ncontexts:\n- name: ksync-dev\n  context:\n    cluster: ksync-dev\n    user: ksync-dev-admin\n    namespace: {NAMESPACE}\ncurrent-context: ksync-dev\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_repository_and_kubeconfig_parse() {
        let repo: Repository = serde_json::from_value(repository("git://127.0.0.1:1/quickstart.git")).unwrap();
        assert_eq!(repo.spec.interval, INTERVAL);
        let k = kube::config::Kubeconfig::from_yaml(&kubeconfig("http://127.0.0.1:6550", "t")).unwrap();
        assert_eq!(k.current_context.as_deref(), Some("ksync-dev"));
        let ctx = k.contexts[0].context.as_ref().unwrap();
        assert_eq!(ctx.namespace.as_deref(), Some(NAMESPACE));
    }

    #[test]
    fn plurals_are_the_api_servers() {
        let plurals: Vec<String> =
            bootstrap_objects().iter().chain([repository("x")].iter()).map(|o| resource(o).plural).collect();
        assert_eq!(
            plurals,
            ["namespaces", "namespaces", "serviceaccounts", "roles", "rolebindings", "configmaps", "repositories"]
        );
    }
}
