//! A chart's dependencies made present before a Helm render, as the controller and `ksync diff`
//! both do it: pulled from their Helm repositories and OCI registries with the credentials the
//! Application names (read as its service account), or materialized from the same repository
//! and commit (`file://`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::api::Api;

use super::{Dependency, chart, pull};
use crate::api::application::ApplicationSource;
use crate::source::{Credentials, GitCache};

/// What was made present.
#[derive(Clone, Default)]
pub struct Present {
    /// Pulled archives, in the order `Chart.yaml` lists them.
    pub pulled: Vec<Arc<pull::Pulled>>,
    /// `file://` charts: name and materialized directory.
    pub local: Vec<(String, Arc<crate::source::checkout::Checkout>)>,
    /// Passwords read for the pulls (never in a message).
    pub secrets: Vec<String>,
}

impl Present {
    /// As the renderer takes them.
    pub fn dependencies(&self) -> Vec<Dependency> {
        let pulled = self.pulled.iter().map(|p| Dependency::Pulled(p.clone()));
        let local = self.local.iter().map(|(name, c)| Dependency::Local {
            name: name.clone(),
            dir: c.path().to_path_buf(),
            tree: c.tree.to_string(),
        });
        pulled.chain(local).collect()
    }
}

/// Why the dependencies could not be made present: a message naming the chart, and whether
/// trying again can help (a failed pull can; a dependency leaving the repository cannot).
#[derive(Debug, PartialEq, Eq)]
pub struct Failed {
    /// What went wrong (bounded, redacted).
    pub message: String,
    /// Whether trying again can help.
    pub retryable: bool,
}

/// Where the chart's Git source is.
pub struct Git<'a> {
    /// The Git cache.
    pub cache: &'a GitCache,
    /// The repository URL.
    pub url: &'a str,
    /// Its credentials.
    pub credentials: &'a Credentials,
    /// The commit.
    pub commit: &'a str,
}

/// Make present the dependencies of the chart materialized at `dir` (the Application's
/// `source.path` of `git`): every one not vendored under `charts/`. `sa` reads the credentials'
/// Secrets; a version range resolved less than `fresh_for` ago is not resolved again.
pub async fn make_present(
    charts: &pull::Charts,
    git: &Git<'_>,
    sa: &Client,
    ns: &str,
    source: &ApplicationSource,
    dir: &Path,
    fresh_for: Duration,
) -> Result<Present, Failed> {
    let failed = |message: String, retryable: bool| Failed { message, retryable };
    let read = |file: &str| -> Option<String> {
        let path = dir.join(file);
        std::fs::symlink_metadata(&path).ok().filter(|m| m.is_file() && m.len() <= 1024 * 1024)?;
        std::fs::read_to_string(path).ok()
    };
    let Some(chart_yaml) = read("Chart.yaml") else { return Ok(Present::default()) };
    let wanted = chart::wanted(&source.path, &chart_yaml, read("Chart.lock").as_deref(), |n| chart::vendored(dir, n))
        .map_err(|m| failed(m, false))?;
    let mut out = Present::default();
    let granted = source.render.helm.as_ref().map(|h| h.credentials.as_slice()).unwrap_or_default();
    for w in wanted {
        match w.origin {
            chart::Origin::File(path) => match git.cache.checkout(git.url, git.credentials, git.commit, &path).await {
                Ok(c) if c.path().join("Chart.yaml").is_file() => out.local.push((w.name.clone(), c)),
                Ok(_) => {
                    return Err(failed(
                        format!("dependency {:?} (file://): {path} holds no Chart.yaml", w.name),
                        false,
                    ));
                }
                Err(e) => return Err(failed(format!("dependency {:?} (file://{path}): {e}", w.name), e.retryable())),
            },
            chart::Origin::Remote { repository, version, exact } => {
                let grant = granted
                    .iter()
                    .filter(|g| repository.starts_with(g.url.trim_end_matches('/')))
                    .max_by_key(|g| g.url.len());
                let auth = match grant {
                    None => pull::Auth::default(),
                    Some(g) => read_auth(sa, ns, &g.secret_ref.name)
                        .await
                        .map_err(|m| failed(format!("dependency {:?} from {repository}: {m}", w.name), true))?,
                };
                out.secrets.extend(auth.password.iter().cloned());
                let pulled = charts
                    .pull(&repository, &w.name, &version, exact, &auth, fresh_for)
                    .await
                    .map_err(|m| failed(m, true))?;
                out.pulled.push(pulled);
            }
        }
    }
    Ok(out)
}

/// The credentials in the Secret `name` (`username`, `password`, `ca.crt`), read with `client`.
async fn read_auth(client: &Client, ns: &str, name: &str) -> Result<pull::Auth, String> {
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), ns);
    let secret = match secrets.get_opt(name).await {
        Ok(Some(s)) => s,
        Ok(None) => return Err(format!("Secret {name} does not exist")),
        Err(kube::Error::Api(e)) if e.code == 403 => {
            return Err(format!("the Application's service account may not read Secret {name}"));
        }
        Err(e) => return Err(format!("reading Secret {name}: {e}")),
    };
    Ok(pull::Auth::from_secret(&secret))
}
