//! Plain manifests: every `.yaml`, `.yml` and `.json` file under the path, in byte order of the
//! relative path, multi-document, `List` kinds flattened. Hidden files and directories (such as
//! `.ksync.yaml`) are skipped.
//!
//! The YAML parser bounds what one file may decode to; the objects of all files together are
//! held to the same bound ([`super::MAX_DECODED_TEXT_BYTES`], [`super::MAX_DECODED_NODES`]),
//! or many small files of aliases would multiply it.

use std::path::Path;

use serde_json::Value;

use super::{Decoded, Error, Limits, objects_of};

/// Render the directory.
pub fn render(dir: &Path, limits: &Limits) -> Result<Vec<Value>, Error> {
    let mut files = Vec::new();
    collect(dir, dir, &mut files)?;
    files.sort();
    let mut total = 0u64;
    let mut decoded = Decoded::default();
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
        let objects = objects_of(docs, &rel)?;
        decoded.add(&objects)?;
        out.extend(objects);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A top-level mapping whose list names a 64 KiB scalar 600 times: 37.5 MiB of text, within
    /// what the YAML parser allows one file.
    fn alias_file() -> String {
        let mut s = format!("big: &big {}\n", "x".repeat(64 * 1024));
        for i in 0..61 {
            s.push_str(&format!("a{i}: &a{i} y\n"));
        }
        s + "list: [" + &"*big, ".repeat(600) + "]\n"
    }

    /// See: issue 18 (fuzz harness). Each file was bounded alone, the files together were not:
    /// about 950 such files fit the 64 MiB input limit and decoded to 35 GiB of strings.
    #[test]
    fn the_files_together_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.yaml"), alias_file()).unwrap();
        assert_eq!(render(dir.path(), &Limits::default()).unwrap().len(), 1);
        std::fs::write(dir.path().join("b.yaml"), alias_file()).unwrap();
        let e = render(dir.path(), &Limits::default()).unwrap_err().to_string();
        assert!(e.contains("MiB of text") && e.contains("render limit"), "{e}");
    }

    /// Values count too: 1.3 million empty lists in one JSON file (4 MB).
    #[test]
    fn values_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let json = format!("{{\"items\": [{}[]]}}", "[],".repeat(1_300_000));
        std::fs::write(dir.path().join("a.json"), json).unwrap();
        let e = render(dir.path(), &Limits::default()).unwrap_err().to_string();
        assert!(e.contains("values"), "{e}");
    }
}
