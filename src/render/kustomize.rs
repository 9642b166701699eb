//! Kustomize: the real `kubectl kustomize` on the materialized path. No network (remote bases,
//! components and resources are refused before running it), no exec or container plugins and
//! no Helm inflation (the flags that enable them are never passed).

use std::path::Path;

use serde_json::Value;

use super::{Error, Limits, Tools, process};

const FILES: [&str; 3] = ["kustomization.yaml", "kustomization.yml", "Kustomization"];

/// `kubectl kustomize -- .`: the directory after `--`, as every positional argument of a tool.
pub const KUSTOMIZE_ARGS: [&str; 3] = ["kustomize", "--", "."];

/// Render the kustomization at `dir`.
pub async fn render(tools: &Tools, dir: &Path, limits: &Limits) -> Result<Vec<Value>, Error> {
    if !FILES.iter().any(|f| dir.join(f).is_file()) {
        return Err(Error::Failed {
            message: "no kustomization.yaml at the source path (render type Kustomize)".into(),
            retryable: false,
        });
    }
    // The walk and the parse can take seconds on a large tree or output: off the runtime.
    let root = dir.to_path_buf();
    crate::offload::offload(move || check_no_remote(&root, &root)).await?;
    let out = process::run(&tools.kubectl, &KUSTOMIZE_ARGS, dir, &[], limits, "kustomize build").await?;
    super::parse_output(out.stdout, "kustomize", "kustomize output").await
}

/// Whether an entry of `resources`, `bases` or `components` points to the network.
pub fn is_remote(entry: &str) -> bool {
    entry.contains("://") || entry.starts_with("github.com/") || entry.starts_with("git@") || entry.contains("?ref=")
}

/// Refuse remote references in every kustomization under `dir`.
fn check_no_remote(root: &Path, dir: &Path) -> Result<(), Error> {
    for f in FILES {
        let path = dir.join(f);
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        let doc: Value = crate::yaml::from_str(&text).map_err(|e| Error::Failed {
            message: format!("{}: invalid YAML: {e}", path.strip_prefix(root).unwrap_or(&path).display()),
            retryable: false,
        })?;
        for field in ["resources", "bases", "components"] {
            for entry in doc.get(field).and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
                if is_remote(entry) {
                    return Err(Error::Failed {
                        message: format!(
                            "{}: {field} entry {entry:?} is a remote reference; rendering has no network access: vendor it into the repository",
                            path.strip_prefix(root).unwrap_or(&path).display()
                        ),
                        retryable: false,
                    });
                }
            }
        }
        if doc.get("helmCharts").is_some() {
            return Err(Error::Failed {
                message: format!(
                    "{}: helmCharts needs Helm inflation, which is disabled: use render type Helm",
                    path.strip_prefix(root).unwrap_or(&path).display()
                ),
                retryable: false,
            });
        }
    }
    let entries = std::fs::read_dir(dir).map_err(|e| Error::Internal(e.to_string()))?;
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() && !e.file_name().to_string_lossy().starts_with('.') {
            check_no_remote(root, &p)?;
        }
    }
    Ok(())
}
