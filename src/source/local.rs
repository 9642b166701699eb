//! A local directory as a source (`ksync diff --path`): its entries, read without following
//! symlinks, so the same symlink rules as a Git checkout apply ([`super::checkout::check_symlinks`]).

use std::path::Path;

use super::checkout::{Entries, Node};

/// Most entries read from a local directory.
pub const MAX_ENTRIES: usize = 100_000;

/// Every entry under `root` by its path relative to it (`.git` directories left out), or why it
/// could not be read: an I/O error, more than [`MAX_ENTRIES`] entries, or a name that is not
/// UTF-8.
pub fn entries(root: &Path) -> Result<Entries, String> {
    let mut out = Entries::new();
    let mut stack = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, rel)) = stack.pop() {
        let read = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for entry in read {
            let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                return Err(format!("{}: a file name that is not UTF-8", entry.path().display()));
            };
            if name == ".git" {
                continue;
            }
            let path = if rel.is_empty() { name.to_string() } else { format!("{rel}/{name}") };
            // symlink_metadata: a link is recorded as a link, never followed.
            let meta =
                std::fs::symlink_metadata(entry.path()).map_err(|e| format!("{}: {e}", entry.path().display()))?;
            let node = if meta.file_type().is_symlink() {
                let target =
                    std::fs::read_link(entry.path()).map_err(|e| format!("{}: {e}", entry.path().display()))?;
                Node::Link(target.to_string_lossy().into_owned())
            } else if meta.is_dir() {
                stack.push((entry.path(), path.clone()));
                Node::Dir
            } else {
                Node::File
            };
            out.insert(path, node);
            if out.len() > MAX_ENTRIES {
                return Err(format!("{}: more than {MAX_ENTRIES} files and directories", root.display()));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::checkout::{LinkProblem, check_symlinks};

    #[test]
    fn links_are_read_not_followed_and_checked_like_a_checkout() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("app/sub")).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join("app/sub/a.yaml"), "x").unwrap();
        std::os::unix::fs::symlink("sub/a.yaml", root.join("app/inside")).unwrap();
        let found = entries(root).unwrap();
        assert_eq!(found.get("app/inside"), Some(&Node::Link("sub/a.yaml".into())));
        assert_eq!(found.get("app/sub"), Some(&Node::Dir));
        assert!(!found.keys().any(|k| k.starts_with(".git")), "{found:?}");
        assert!(check_symlinks(&found).is_ok());
        // A link out of the directory is refused, as in a Git checkout.
        std::os::unix::fs::symlink("/etc/passwd", root.join("app/leak")).unwrap();
        let refused = check_symlinks(&entries(root).unwrap()).unwrap_err();
        assert_eq!((refused.link.as_str(), refused.problem), ("app/leak", LinkProblem::Outside));
    }
}
