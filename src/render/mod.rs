//! Rendering an Application's source path into Kubernetes objects: plain YAML/JSON, Kustomize
//! (the real `kubectl kustomize`) or Helm (the real `helm template`).
//!
//! Every renderer runs without network and without plugins, with a timeout, an output size
//! limit, a clean environment and a scratch `HOME`/cache directory ([`process`]). A failure is
//! an [`Error`] with a bounded, redacted excerpt of the tool's error output, reported as
//! `RenderFailure`. Output is cached by (tree id of the source path, render settings, values
//! digest) in [`Renderer`], so an Application whose path did not change in a new commit is not
//! rendered again.

pub mod chart;
pub mod dependencies;
pub mod helm;
pub mod kustomize;
pub mod plain;
pub mod process;
pub mod pull;
pub mod values;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::api::application::{Render, RenderType};

/// Why a render failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The renderer refused the input or failed (the message is bounded and redacted).
    #[error("{message}")]
    Failed {
        /// What went wrong.
        message: String,
        /// Whether trying again can help (a timeout).
        retryable: bool,
    },
    /// The render settings are invalid (a Helm release name helm would refuse): nothing was
    /// run; reported as `ValidationFailure`, never retried.
    #[error("{0}")]
    Invalid(String),
    /// A local failure.
    #[error("{0}")]
    Internal(String),
}

/// Limits of one render.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Kill the renderer after this long.
    pub timeout: Duration,
    /// Most bytes of output (and, for plain YAML, of input read).
    pub max_output_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { timeout: Duration::from_secs(60), max_output_bytes: 64 * 1024 * 1024 }
    }
}

/// The programs the renderers run.
#[derive(Clone, Debug)]
pub struct Tools {
    /// `helm` (v4).
    pub helm: PathBuf,
    /// `kubectl` (for `kubectl kustomize`).
    pub kubectl: PathBuf,
}

impl Default for Tools {
    fn default() -> Self {
        Tools { helm: "helm".into(), kubectl: "kubectl".into() }
    }
}

/// One render.
#[derive(Clone, Debug)]
pub struct Request<'a> {
    /// The materialized source path.
    pub dir: &'a Path,
    /// Its Git tree id (the cache key; `None` disables caching).
    pub tree: Option<String>,
    /// Render settings from the Application.
    pub render: &'a Render,
    /// The renderer: the settings' type, or the one [`renderer_of`] chose.
    pub renderer: RenderType,
    /// The Application's name (the default Helm release name).
    pub application: &'a str,
    /// The destination namespace.
    pub namespace: &'a str,
    /// Helm values resolved from `valuesFrom`, in order (inline `values` come last, from
    /// `render`).
    pub values_from: Vec<Value>,
    /// Strings to remove from error messages (values read from Secrets).
    pub secrets: Vec<String>,
    /// The target cluster's version and APIs, for Helm's `.Capabilities` (`None`: Helm's
    /// defaults).
    pub capabilities: Option<Arc<Capabilities>>,
    /// Chart dependencies to put under the chart's `charts/` (Helm only).
    pub dependencies: Vec<Dependency>,
    /// A packaged chart (from a Helm or OCI Repository) rendered instead of the chart at `dir`.
    pub packaged: Option<Arc<pull::Pulled>>,
}

/// A chart dependency made present for a render.
#[derive(Clone, Debug)]
pub enum Dependency {
    /// Pulled from a Helm repository or an OCI registry.
    Pulled(Arc<pull::Pulled>),
    /// A chart of the same repository (`file://`), materialized.
    Local {
        /// The dependency's name.
        name: String,
        /// The materialized chart.
        dir: PathBuf,
        /// Its Git tree id.
        tree: String,
    },
}

/// What Helm's `.Capabilities` answer: `.Capabilities.KubeVersion` and
/// `.Capabilities.APIVersions.Has`. Part of the render cache key, so a cluster that starts
/// serving an API a chart asks about renders again.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Capabilities {
    /// The server's version (`v1.36.2`).
    pub kube_version: Option<String>,
    /// Served `group/version` and `group/version/Kind` (`v1`, `v1/Pod`, `apps/v1/Deployment`).
    pub api_versions: std::collections::BTreeSet<String>,
}

/// Renders, with a cache of results.
#[derive(Clone)]
pub struct Renderer {
    tools: Tools,
    limits: Limits,
    /// Pulled chart dependencies, shared by every Application.
    charts: pull::Charts,
    /// Results as compact JSON text: a hit is parsed again (a fraction of a millisecond for an
    /// Application's objects), and a result takes about a quarter of the memory it would as
    /// parsed `Value`s, every key and string of which is its own allocation.
    cache: moka::sync::Cache<String, Arc<str>>,
}

/// The render cache's default bound: 128 MiB of rendered objects as compact JSON.
pub const DEFAULT_CACHE_BYTES: u64 = 128 * 1024 * 1024;

impl Renderer {
    /// A renderer keeping results that together take at most `cache_bytes` as compact JSON;
    /// the least recently used go first, and a result larger than the bound is not kept.
    pub fn new(tools: Tools, limits: Limits, cache_bytes: u64) -> Renderer {
        let cache = moka::sync::Cache::builder()
            .weigher(|_: &String, objects: &Arc<str>| u32::try_from(objects.len()).unwrap_or(u32::MAX))
            .max_capacity(cache_bytes)
            .build();
        let charts = pull::Charts::new(tools.helm.clone(), pull::Limits::default(), pull::DEFAULT_CACHE_BYTES);
        Renderer { tools, limits, cache, charts }
    }

    /// The pulled-chart cache.
    pub fn charts(&self) -> &pull::Charts {
        &self.charts
    }

    /// The bytes the cached results take now as compact JSON (pending evictions are applied
    /// first).
    pub fn cached_bytes(&self) -> u64 {
        self.cache.run_pending_tasks();
        self.cache.weighted_size()
    }

    /// Render `req`: the objects in a stable order.
    pub async fn render(&self, req: &Request<'_>) -> Result<Arc<Vec<Value>>, Error> {
        let key = req.tree.as_ref().map(|tree| cache_key(tree, req));
        // Parsing and printing a result (tens of megabytes for a large chart) happen off the
        // runtime, as rendering does.
        if let Some(k) = &key
            && let Some(hit) = self.cache.get(k)
            // Written below from objects: it parses (if not, it is rendered again).
            && let Ok(objects) = crate::offload::offload_if(
                crate::offload::Size::default().bytes(hit.len()).large(),
                move || serde_json::from_str::<Vec<Value>>(&hit),
            )
            .await
        {
            metrics::counter!(crate::metric_names::RENDER_CACHE_REQUESTS_TOTAL, crate::metric_names::label::RESULT => "hit").increment(1);
            return Ok(Arc::new(objects));
        }
        metrics::counter!(crate::metric_names::RENDER_CACHE_REQUESTS_TOTAL, crate::metric_names::label::RESULT => "miss").increment(1);
        let started = std::time::Instant::now();
        let result = match req.renderer {
            RenderType::Yaml => {
                let (dir, limits) = (req.dir.to_path_buf(), self.limits.clone());
                let plain = crate::offload::offload(move || plain::render(&dir, &limits)).await;
                plain.map_err(|e| chart_hint(e, req.dir))
            }
            RenderType::Kustomize => kustomize::render(&self.tools, req.dir, &self.limits).await,
            RenderType::Helm => helm::render(&self.tools, req, &self.limits).await,
        };
        let label = match req.renderer {
            RenderType::Yaml => "yaml",
            RenderType::Kustomize => "kustomize",
            RenderType::Helm => "helm",
        };
        metrics::histogram!(crate::metric_names::RENDER_DURATION_SECONDS, crate::metric_names::label::RENDERER => label)
            .record(started.elapsed().as_secs_f64());
        let objects = result.map_err(|e| redact(e, &req.secrets))?;
        let objects = Arc::new(objects);
        if let Some(k) = key {
            let printed = objects.clone();
            let large = crate::offload::Size::default().values(printed.iter()).large();
            if let Ok(text) = crate::offload::offload_if(large, move || serde_json::to_string(&*printed)).await {
                self.cache.insert(k, text.into());
            }
        }
        Ok(objects)
    }
}

/// The renderer for `render` at the materialized path `dir`: the settings' type when set;
/// otherwise chosen from what the path holds ([`choose`]).
pub fn renderer_of(render: &Render, dir: &Path) -> RenderType {
    let holds = |names: &[&str]| names.iter().any(|n| dir.join(n).is_file());
    choose(render, holds(&["Chart.yaml"]), holds(&KUSTOMIZATION_FILES))
}

/// The file names that make a directory a kustomization (what `kustomize build` looks for).
pub const KUSTOMIZATION_FILES: [&str; 3] = ["kustomization.yaml", "kustomization.yml", "Kustomization"];

/// The renderer, as Argo CD chooses it: an explicit type wins; without one, Helm settings or a
/// `Chart.yaml` mean Helm, a kustomization means Kustomize, anything else plain YAML. Pure.
pub fn choose(render: &Render, has_chart: bool, has_kustomization: bool) -> RenderType {
    match render.type_ {
        Some(t) => t,
        None if render.helm.is_some() || has_chart => RenderType::Helm,
        None if has_kustomization => RenderType::Kustomize,
        None => RenderType::Yaml,
    }
}

/// A plain-YAML failure over a chart says which renderer to set: a chart's templates are not
/// YAML until Helm renders them.
fn chart_hint(e: Error, dir: &Path) -> Error {
    match e {
        Error::Failed { message, retryable } if dir.join("Chart.yaml").is_file() => Error::Failed {
            message: format!(
                "{message} (the source path holds a Chart.yaml: set spec.source.render.type: Helm, or leave the type unset to choose it from the path)"
            ),
            retryable,
        },
        other => other,
    }
}

fn redact(e: Error, secrets: &[String]) -> Error {
    let clean = |m: String| crate::redact::redact(&m, secrets.iter().map(String::as_str));
    match e {
        Error::Failed { message, retryable } => Error::Failed { message: clean(message), retryable },
        Error::Invalid(m) => Error::Invalid(clean(m)),
        Error::Internal(m) => Error::Internal(clean(m)),
    }
}

/// The objects of a renderer's `stdout`, parsed on the blocking pool (tens of megabytes take
/// seconds). `tool` names the program in errors, `output` what it printed.
async fn parse_output(stdout: Vec<u8>, tool: &'static str, output: &'static str) -> Result<Vec<Value>, Error> {
    // Always off the runtime: YAML's aliases can make a small text build a large value.
    crate::offload::offload(move || {
        let text =
            String::from_utf8(stdout).map_err(|_| Error::Internal(format!("{tool} printed non-UTF-8 output")))?;
        let docs: Vec<Value> = crate::yaml::from_str_multiple(&text)
            .map_err(|e| Error::Failed { message: format!("{output}: {e}"), retryable: false })?;
        objects_of(docs, output)
    })
    .await
}

/// sha256 over the tree, the settings and the values (a digest, never the values themselves).
fn cache_key(tree: &str, req: &Request<'_>) -> String {
    let mut h = Sha256::new();
    h.update(tree.as_bytes());
    h.update(b"\0");
    h.update(serde_json::to_vec(req.render).unwrap_or_default());
    h.update(b"\0");
    h.update(format!("{:?}", req.renderer).as_bytes());
    h.update(b"\0");
    h.update(req.application.as_bytes());
    h.update(b"\0");
    h.update(req.namespace.as_bytes());
    for v in &req.values_from {
        h.update(b"\0");
        h.update(serde_json::to_vec(v).unwrap_or_default());
    }
    if let Some(p) = &req.packaged {
        h.update(b"\0packaged\0");
        h.update(p.digest.as_bytes());
    }
    for d in &req.dependencies {
        h.update(b"\0dependency\0");
        match d {
            Dependency::Pulled(p) => h.update(p.digest.as_bytes()),
            Dependency::Local { name, tree, .. } => h.update(format!("{name}\0{tree}").as_bytes()),
        }
    }
    // Only Helm asks: other renders keep their key when the cluster's APIs change.
    if let (RenderType::Helm, Some(c)) = (req.renderer, &req.capabilities) {
        h.update(b"\0capabilities\0");
        h.update(c.kube_version.as_deref().unwrap_or_default().as_bytes());
        for v in &c.api_versions {
            h.update(b"\0");
            h.update(v.as_bytes());
        }
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Most text (strings and keys, in bytes) the objects of one render may hold: what the YAML
/// parser allows one stream.
pub const MAX_DECODED_TEXT_BYTES: usize = 64 * 1024 * 1024;

/// Most values (scalars, lists and maps) the objects of one render may hold: the 250,000 nodes
/// plus 1,000,000 replayed through aliases the YAML parser allows one stream.
pub const MAX_DECODED_NODES: usize = 1_250_000;

/// What decoded objects hold so far, against [`MAX_DECODED_TEXT_BYTES`] and
/// [`MAX_DECODED_NODES`].
#[derive(Debug, Default)]
pub struct Decoded {
    text: usize,
    nodes: usize,
}

impl Decoded {
    /// Count `objects`; an error once the total passes a limit.
    pub fn add(&mut self, objects: &[Value]) -> Result<(), Error> {
        fn walk(v: &Value, d: &mut Decoded) {
            d.nodes += 1;
            match v {
                Value::String(s) => d.text += s.len(),
                Value::Array(items) => items.iter().for_each(|i| walk(i, d)),
                Value::Object(m) => m.iter().for_each(|(k, v)| {
                    d.text += k.len();
                    walk(v, d)
                }),
                _ => {}
            }
        }
        objects.iter().for_each(|o| walk(o, self));
        if self.text > MAX_DECODED_TEXT_BYTES || self.nodes > MAX_DECODED_NODES {
            return Err(Error::Failed {
                message: format!(
                    "the manifests decode to more than {} MiB of text or {MAX_DECODED_NODES} values (the render limit; YAML aliases count each time they are used)",
                    MAX_DECODED_TEXT_BYTES >> 20
                ),
                retryable: false,
            });
        }
        Ok(())
    }
}

/// Split parsed YAML documents into objects: `null` documents dropped, `List` kinds flattened.
pub fn objects_of(docs: Vec<Value>, source: &str) -> Result<Vec<Value>, Error> {
    let mut out = Vec::new();
    for doc in docs {
        match doc {
            Value::Null => {}
            Value::Object(ref m)
                if m.get("kind").and_then(Value::as_str).is_some_and(|k| k.ends_with("List"))
                    && m.contains_key("items") =>
            {
                match m.get("items") {
                    Some(Value::Array(items)) => out.extend(items.iter().filter(|i| !i.is_null()).cloned()),
                    Some(Value::Null) => {}
                    _ => {
                        return Err(Error::Failed {
                            message: format!("{source}: items of a List must be a list"),
                            retryable: false,
                        });
                    }
                }
            }
            Value::Object(_) => out.push(doc),
            other => {
                return Err(Error::Failed {
                    message: format!("{source}: a document must be an object, not {}", type_name(&other)),
                    retryable: false,
                });
            }
        }
    }
    Ok(out)
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::application::HelmRender;

    #[test]
    fn an_explicit_type_wins_and_an_unset_one_follows_the_path() {
        let typed = |t| Render { type_: Some(t), helm: None };
        let unset = Render { type_: None, helm: None };
        let helm_settings = Render { type_: None, helm: Some(HelmRender::default()) };
        // (settings, Chart.yaml, kustomization, chosen)
        let table = [
            (typed(RenderType::Yaml), true, true, RenderType::Yaml),
            (typed(RenderType::Kustomize), true, false, RenderType::Kustomize),
            (typed(RenderType::Helm), false, true, RenderType::Helm),
            (unset.clone(), true, false, RenderType::Helm),
            (unset.clone(), true, true, RenderType::Helm),
            (unset.clone(), false, true, RenderType::Kustomize),
            (unset.clone(), false, false, RenderType::Yaml),
            (helm_settings, false, true, RenderType::Helm),
        ];
        for (render, chart, kustomization, want) in table {
            assert_eq!(
                choose(&render, chart, kustomization),
                want,
                "{render:?} chart={chart} kustomization={kustomization}"
            );
        }
    }

    #[test]
    fn a_yaml_failure_over_a_chart_says_to_set_helm() {
        let dir = tempfile::tempdir().unwrap();
        let failed = || Error::Failed { message: "x.yaml: bad".into(), retryable: false };
        assert_eq!(chart_hint(failed(), dir.path()), failed(), "no chart, no hint");
        std::fs::write(dir.path().join("Chart.yaml"), "name: c\n").unwrap();
        let Error::Failed { message, .. } = chart_hint(failed(), dir.path()) else { panic!() };
        assert!(
            message.starts_with("x.yaml: bad (the source path holds a Chart.yaml: set spec.source.render.type: Helm"),
            "{message}"
        );
    }
}
