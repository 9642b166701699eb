//! Helm `valuesFrom`: values documents from Secrets and ConfigMaps in the Application's
//! namespace, read as the Application's service account (impersonation), so an Application can
//! only use what its service account may read.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use serde_json::Value;

use super::Error;
use crate::api::application::{ValuesKind, ValuesReference};

/// Values files read from Git Repositories, by (Repository, path): `None` when the commit has no
/// such file. See [`repository_files`].
pub type RepositoryFiles = std::collections::BTreeMap<(String, String), Option<String>>;

/// Most bytes of one values file read from a Git Repository.
pub const MAX_VALUES_FILE_BYTES: usize = 1024 * 1024;

/// The values files `refs` name in Git Repositories of `namespace`, each at the commit its
/// Repository observes (`status.revision`), read with `client` (the controller's identity: a
/// Repository's credentials are used only for the URLs its Secret lists, as for any fetch).
pub async fn repository_files(
    client: &kube::Client,
    cache: &crate::source::GitCache,
    namespace: &str,
    refs: &[ValuesReference],
) -> Result<RepositoryFiles, Error> {
    let mut out = RepositoryFiles::new();
    for r in refs.iter().filter(|r| r.is_repository()) {
        let what = format!("Repository {} (valuesFrom key {})", r.name, r.key);
        let fail =
            |message: String, retryable: bool| Error::Failed { message: format!("{what}: {message}"), retryable };
        let repos: Api<crate::api::repository::Repository> = Api::namespaced(client.clone(), namespace);
        let repo = match repos.get_opt(&r.name).await {
            Ok(Some(repo)) => repo,
            Ok(None) => return Err(fail("does not exist".into(), true)),
            Err(e) => return Err(fail(e.to_string(), true)),
        };
        if repo.spec.is_chart() {
            return Err(fail("is a chart Repository: values files come from Git Repositories".into(), false));
        }
        let Some(commit) = repo.status.as_ref().and_then(|s| s.revision.as_ref()).map(|v| v.commit.clone()) else {
            return Err(fail("has not resolved its ref yet".into(), true));
        };
        let credentials = match crate::source::secret::of_repository(
            client,
            namespace,
            repo.spec.secret_ref.as_ref(),
            &repo.spec.url,
        )
        .await
        {
            Ok(Ok(c)) => c,
            Ok(Err(message)) => return Err(fail(message, true)),
            Err(e) => return Err(fail(e.to_string(), true)),
        };
        let timeout = crate::api::duration::parse(&repo.spec.timeout).unwrap_or(std::time::Duration::from_secs(60));
        let at = crate::source::Reference::Commit(commit.clone());
        if let Err(e) = cache.resolve(&repo.spec.url, &at, &credentials, timeout).await {
            return Err(fail(credentials.redact(&format!("fetching commit {commit}: {e}")), e.retryable()));
        }
        let text = match cache.read_file(&repo.spec.url, &credentials, &commit, &r.key).await {
            Ok(Some(bytes)) if bytes.len() > MAX_VALUES_FILE_BYTES => {
                return Err(fail(format!("larger than {} KiB", MAX_VALUES_FILE_BYTES >> 10), false));
            }
            Ok(Some(bytes)) => Some(String::from_utf8(bytes).map_err(|_| fail("not UTF-8 text".into(), false))?),
            Ok(None) => None,
            Err(e) => return Err(fail(credentials.redact(&e.to_string()), e.retryable())),
        };
        out.insert((r.name.clone(), r.key.clone()), text);
    }
    Ok(out)
}

/// The values documents, in order, and every string read from a Secret (for redaction).
/// A missing object or key is skipped when the reference is `optional`, else an error; an
/// object the service account may not read is an error naming it (retryable: RBAC may change).
pub async fn read(
    client: &kube::Client,
    namespace: &str,
    refs: &[ValuesReference],
    files: &RepositoryFiles,
) -> Result<(Vec<Value>, Vec<String>), Error> {
    let mut docs = Vec::new();
    let mut secrets = Vec::new();
    for r in refs {
        let what = format!("{:?} {} (valuesFrom key {})", r.kind, r.name, r.key);
        let fail = |message: String, retryable: bool| Error::Failed { message, retryable };
        let text: Option<String> = match r.kind {
            ValuesKind::Repository => files.get(&(r.name.clone(), r.key.clone())).cloned().flatten(),
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
