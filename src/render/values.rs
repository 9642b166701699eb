//! Helm `valuesFrom`: values documents from Secrets and ConfigMaps in the Application's
//! namespace, read as the Application's service account (impersonation), so an Application can
//! only use what its service account may read.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use serde_json::Value;

use super::Error;
use crate::api::application::{ValuesKind, ValuesReference};

/// A client acting as `system:serviceaccount:<namespace>:<name>`.
pub fn impersonating(
    config: &kube::Config,
    namespace: &str,
    service_account: &str,
) -> Result<kube::Client, kube::Error> {
    kube::Client::try_from(crate::client::without_retries(impersonation(config, namespace, service_account)))
}

/// `config` acting as `system:serviceaccount:<namespace>:<name>`. No groups are named: the API
/// server gives an impersonated ServiceAccount its own groups, and naming them would need the
/// right to impersonate any group (`system:masters` included).
pub fn impersonation(config: &kube::Config, namespace: &str, service_account: &str) -> kube::Config {
    let mut config = config.clone();
    config.auth_info.impersonate = Some(format!("system:serviceaccount:{namespace}:{service_account}"));
    config.auth_info.impersonate_groups = None;
    config
}

/// The values documents, in order, and every string read from a Secret (for redaction).
/// A missing object or key is skipped when the reference is `optional`, else an error; an
/// object the service account may not read is an error naming it (retryable: RBAC may change).
pub async fn read(
    client: &kube::Client,
    namespace: &str,
    refs: &[ValuesReference],
) -> Result<(Vec<Value>, Vec<String>), Error> {
    let mut docs = Vec::new();
    let mut secrets = Vec::new();
    for r in refs {
        let what = format!("{:?} {} (valuesFrom key {})", r.kind, r.name, r.key);
        let fail = |message: String, retryable: bool| Error::Failed { message, retryable };
        let text: Option<String> = match r.kind {
            ValuesKind::Secret => {
                let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
                match api.get_opt(&r.name).await {
                    Ok(Some(s)) => {
                        s.data.and_then(|d| d.get(&r.key).map(|v| String::from_utf8_lossy(&v.0).to_string()))
                    }
                    Ok(None) => None,
                    Err(kube::Error::Api(e)) if e.code == 403 => {
                        return Err(fail(format!("{what}: the Application's service account may not read it"), true));
                    }
                    Err(e) => return Err(fail(format!("{what}: {e}"), true)),
                }
            }
            ValuesKind::ConfigMap => {
                let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
                match api.get_opt(&r.name).await {
                    Ok(Some(c)) => c.data.and_then(|d| d.get(&r.key).cloned()),
                    Ok(None) => None,
                    Err(kube::Error::Api(e)) if e.code == 403 => {
                        return Err(fail(format!("{what}: the Application's service account may not read it"), true));
                    }
                    Err(e) => return Err(fail(format!("{what}: {e}"), true)),
                }
            }
        };
        let Some(text) = text else {
            if r.optional {
                continue;
            }
            return Err(fail(format!("{what}: not found (set optional: true to allow that)"), true));
        };
        if r.kind == ValuesKind::Secret {
            secrets.push(text.clone());
            secrets.extend(
                text.lines().filter_map(|l| l.split_once(':')).map(|(_, v)| v.trim().trim_matches('"').to_string()),
            );
        }
        let doc: Value = crate::yaml::from_str(&text).map_err(|e| {
            // The parser's message may quote the content: never for a Secret.
            let detail =
                if r.kind == ValuesKind::Secret { "invalid YAML".to_string() } else { format!("invalid YAML: {e}") };
            fail(format!("{what}: {detail}"), false)
        })?;
        match doc {
            Value::Object(_) => docs.push(doc),
            Value::Null => {}
            _ => return Err(fail(format!("{what}: a values document must be a mapping"), false)),
        }
    }
    secrets.retain(|s| s.len() >= 4);
    Ok((docs, secrets))
}
