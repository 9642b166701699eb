//! Pulling Helm charts with the real `helm`: from an `https://` Helm repository (`helm repo
//! add` then `helm pull`) or an `oci://` registry (`helm registry login` then `helm pull`), each
//! in a scratch configuration of its own, with the password on standard input (never an
//! argument), a timeout and a size limit.
//!
//! Pulled archives are kept in one cache shared by every Application of the replica, bounded in
//! bytes, keyed by repository, chart, exact version and a digest of the credentials, so a chart
//! one tenant pulled with its credentials is never served to a tenant with others. A version
//! range is resolved again once its resolution is older than the caller allows (the
//! Repository's interval), so a new release within the range is found.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::process;

/// Credentials for one chart repository, from a Secret (`username`, `password`, `ca.crt`).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Auth {
    /// User name.
    pub username: Option<String>,
    /// Password or token.
    pub password: Option<String>,
    /// PEM certificates to trust (a private CA).
    pub ca: Option<Vec<u8>>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth").field("username", &self.username.is_some()).field("ca", &self.ca.is_some()).finish()
    }
}

impl Auth {
    /// The credentials in a Secret: `username`, `password` (a trailing newline dropped) and
    /// `ca.crt`.
    pub fn from_secret(secret: &k8s_openapi::api::core::v1::Secret) -> Auth {
        let data = secret.data.clone().unwrap_or_default();
        let text = |k: &str| data.get(k).map(|v| String::from_utf8_lossy(&v.0).trim_end_matches('\n').to_string());
        Auth { username: text("username"), password: text("password"), ca: data.get("ca.crt").map(|v| v.0.clone()) }
    }

    /// A digest of the credentials: part of every cache key.
    fn id(&self) -> String {
        let mut h = Sha256::new();
        for part in [
            self.username.as_deref().map(str::as_bytes),
            self.password.as_deref().map(str::as_bytes),
            self.ca.as_deref(),
        ] {
            h.update(part.map_or(0u64, |p| p.len() as u64 + 1).to_le_bytes());
            h.update(part.unwrap_or_default());
        }
        hex(&h.finalize())
    }
}

/// A pulled chart archive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pulled {
    /// The chart's name.
    pub name: String,
    /// The repository it came from.
    pub repository: String,
    /// Its exact version.
    pub version: String,
    /// `sha256:<hex>` of the archive.
    pub digest: String,
    /// The `.tgz` archive.
    pub archive: Arc<[u8]>,
}

/// Limits of one pull.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Kill helm after this long.
    pub timeout: Duration,
    /// Most bytes of one chart archive.
    pub max_archive_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { timeout: Duration::from_secs(60), max_archive_bytes: 20 * 1024 * 1024 }
    }
}

/// The default bound of the pulled-chart cache.
pub const DEFAULT_CACHE_BYTES: u64 = 256 * 1024 * 1024;

/// Pulls charts, with a cache of archives and of range resolutions.
#[derive(Clone)]
pub struct Charts {
    helm: PathBuf,
    limits: Limits,
    archives: moka::sync::Cache<String, Arc<Pulled>>,
    /// Range key → when it was resolved and to which exact version.
    ranges: moka::sync::Cache<String, (Instant, String)>,
}

impl Charts {
    /// Pulls with `helm`, keeping at most `cache_bytes` of archives.
    pub fn new(helm: PathBuf, limits: Limits, cache_bytes: u64) -> Charts {
        let archives = moka::sync::Cache::builder()
            .weigher(|_: &String, p: &Arc<Pulled>| u32::try_from(p.archive.len()).unwrap_or(u32::MAX))
            .max_capacity(cache_bytes)
            .build();
        Charts { helm, limits, archives, ranges: moka::sync::Cache::new(100_000) }
    }

    /// The chart `name` at `version` (exact, or a range when not `exact`) from `repository`;
    /// a range resolved less than `fresh_for` ago is not resolved again. The error is a
    /// bounded, redacted sentence naming the chart.
    pub async fn pull(
        &self,
        repository: &str,
        name: &str,
        version: &str,
        exact: bool,
        auth: &Auth,
        fresh_for: Duration,
    ) -> Result<Arc<Pulled>, String> {
        let auth_id = auth.id();
        let key = |v: &str| format!("{repository}\0{name}\0{v}\0{auth_id}");
        let wanted = if exact {
            Some(version.to_string())
        } else {
            self.ranges.get(&key(version)).filter(|(at, _)| at.elapsed() < fresh_for).map(|(_, v)| v)
        };
        if let Some(hit) = wanted.and_then(|v| self.archives.get(&key(&v))) {
            metrics::counter!(crate::metric_names::CHART_PULLS_TOTAL, crate::metric_names::label::RESULT => "cached")
                .increment(1);
            return Ok(hit);
        }
        let started = Instant::now();
        let pulled = self.pull_now(repository, name, version, auth).await;
        let result = if pulled.is_ok() { "pulled" } else { "failed" };
        metrics::counter!(crate::metric_names::CHART_PULLS_TOTAL, crate::metric_names::label::RESULT => result)
            .increment(1);
        metrics::histogram!(crate::metric_names::CHART_PULL_DURATION_SECONDS).record(started.elapsed().as_secs_f64());
        let pulled = Arc::new(pulled.map_err(|e| {
            let secrets = [auth.password.as_deref().unwrap_or_default()];
            let e = crate::redact::redact(&e, secrets.into_iter().filter(|s| !s.is_empty()));
            format!("failed chart pull of {name} {version} from {repository}: {e}")
        })?);
        if !exact {
            self.ranges.insert(key(version), (Instant::now(), pulled.version.clone()));
        }
        self.archives.insert(key(&pulled.version), pulled.clone());
        Ok(pulled)
    }

    async fn pull_now(&self, repository: &str, name: &str, version: &str, auth: &Auth) -> Result<Pulled, String> {
        let scratch =
            tempfile::Builder::new().prefix("ksync-pull-").tempdir().map_err(|e| format!("scratch directory: {e}"))?;
        let dir = scratch.path();
        let out = dir.join("out");
        std::fs::create_dir_all(&out).map_err(|e| format!("scratch directory: {e}"))?;
        let (config, cache, data) = (dir.join("config"), dir.join("cache"), dir.join("data"));
        let env = [
            ("HELM_CONFIG_HOME", config.as_path()),
            ("HELM_CACHE_HOME", cache.as_path()),
            ("HELM_DATA_HOME", data.as_path()),
        ];
        let ca_file = match &auth.ca {
            Some(pem) => {
                let f = dir.join("ca.crt");
                std::fs::write(&f, pem).map_err(|e| format!("writing the CA: {e}"))?;
                Some(format!("--ca-file={}", f.display()))
            }
            None => None,
        };
        let limits = crate::render::Limits { timeout: self.limits.timeout, max_output_bytes: 1024 * 1024 };
        let (env, limits) = (&env, &limits);
        let helm = |args: Vec<String>, input: Option<Vec<u8>>, what: &'static str| async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            process::run_with_input(&self.helm, &args, dir, env, input.as_deref(), limits, what)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        let login = |mut args: Vec<String>| {
            if let Some(user) = &auth.username {
                args.push(format!("--username={user}"));
                args.push("--password-stdin".into());
            }
            args.extend(ca_file.clone());
            args
        };
        let input = auth.username.as_ref().map(|_| auth.password.clone().unwrap_or_default().into_bytes());
        let mut pull = vec!["pull".to_string()];
        if let Some(registry) = repository.strip_prefix("oci://") {
            let host = registry.split('/').next().unwrap_or_default();
            if auth.username.is_some() {
                helm(login(vec!["registry".into(), "login".into(), host.to_string()]), input, "helm registry login")
                    .await?;
            }
            pull.push(format!("{}/{name}", repository.trim_end_matches('/')));
        } else {
            let add = login(vec!["repo".into(), "add".into(), "ksync-pull".into(), repository.to_string()]);
            helm(add, input, "helm repo add").await?;
            pull.push(format!("ksync-pull/{name}"));
        }
        pull.push(format!("--version={version}"));
        pull.push(format!("--destination={}", out.display()));
        pull.extend(ca_file.clone());
        helm(pull, None, "helm pull").await?;
        let archive = single_archive(&out, self.limits.max_archive_bytes)?;
        let file = archive.file_name().map(|f| f.to_string_lossy().to_string()).unwrap_or_default();
        let exact = file
            .strip_prefix(&format!("{name}-"))
            .and_then(|v| v.strip_suffix(".tgz"))
            .ok_or_else(|| format!("helm pull wrote {file:?}, not a {name} archive"))?
            .to_string();
        let bytes = std::fs::read(&archive).map_err(|e| format!("reading the archive: {e}"))?;
        let digest = format!("sha256:{}", hex(&Sha256::digest(&bytes)));
        Ok(Pulled {
            name: name.to_string(),
            repository: repository.to_string(),
            version: exact,
            digest,
            archive: bytes.into(),
        })
    }
}

/// The one `.tgz` helm wrote into `dir`, at most `max` bytes.
fn single_archive(dir: &Path, max: u64) -> Result<PathBuf, String> {
    let entries: Vec<_> = std::fs::read_dir(dir).map_err(|e| e.to_string())?.flatten().collect();
    let [entry] = entries.as_slice() else {
        return Err(format!("helm pull wrote {} files, not one archive", entries.len()));
    };
    let meta = std::fs::symlink_metadata(entry.path()).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("helm pull wrote something other than a file".into());
    }
    if meta.len() > max {
        return Err(format!("the chart archive is larger than {} MiB (the pull limit)", max >> 20));
    }
    Ok(entry.path())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_part_of_the_key_and_never_printed() {
        let a = Auth { username: Some("u".into()), password: Some("hunter2".into()), ca: None };
        let b = Auth { password: Some("other".into()), ..a.clone() };
        let moved = Auth { username: Some("uh".into()), password: Some("unter2".into()), ca: None };
        assert_ne!(a.id(), b.id());
        assert_ne!(a.id(), moved.id(), "the parts are delimited");
        assert_eq!(a.id(), a.clone().id());
        assert!(!format!("{a:?}").contains("hunter2"));
    }
}
