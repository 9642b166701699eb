//! Plain manifests: every `.yaml`, `.yml` and `.json` file under the path, in byte order of the
//! relative path, multi-document, `List` kinds flattened. Hidden files and directories (such as
//! `.ksync.yaml`) are skipped.

use std::path::Path;

use serde_json::Value;

use super::{Error, Limits, objects_of};

/// Render the directory.
pub fn render(dir: &Path, limits: &Limits) -> Result<Vec<Value>, Error> {
    let mut files = Vec::new();
    collect(dir, dir, &mut files)?;
    files.sort();
    let mut total = 0u64;
    let mut out = Vec::new();
    for rel in files {
        let path = dir.join(&rel);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Error::Failed { message: format!("{rel}: {e}"), retryable: false })?;
        total += text.len() as u64;
        if total > limits.max_output_bytes {
            return Err(Error::Failed {
                message: format!("the manifests exceed {} bytes (the render limit)", limits.max_output_bytes),
                retryable: false,
            });
        }
        let docs: Vec<Value> = if rel.ends_with(".json") {
            vec![
                serde_json::from_str(&text)
                    .map_err(|e| Error::Failed { message: format!("{rel}: invalid JSON: {e}"), retryable: false })?,
            ]
        } else {
            crate::yaml::from_str_multiple(&text)
                .map_err(|e| Error::Failed { message: format!("{rel}: invalid YAML: {e}"), retryable: false })?
        };
        out.extend(objects_of(docs, &rel)?);
    }
    Ok(out)
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<String>) -> Result<(), Error> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::Internal(format!("reading {}: {e}", dir.display())))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::Internal(e.to_string()))?;
        let name = entry.file_name().to_string_lossy().to_string();
        if name.starts_with('.') {
            continue;
        }
        let path = entry.path();
        let meta = std::fs::metadata(&path).map_err(|e| Error::Internal(e.to_string()))?;
        if meta.is_dir() {
            collect(root, &path, out)?;
        } else if name.ends_with(".yaml") || name.ends_with(".yml") || name.ends_with(".json") {
            let rel = path.strip_prefix(root).map_err(|e| Error::Internal(e.to_string()))?;
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
    Ok(())
}
