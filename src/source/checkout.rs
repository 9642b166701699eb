//! Materializing a tree from the object database into a directory, without a working-tree
//! checkout, with the safety rules of a GitOps source:
//!
//! - the requested path must be repository-relative and stay inside the checkout;
//! - entry names must be plain (no `..`, `.`, `/`, NUL, `.git`);
//! - a symlink must point inside the materialized tree (relative, never above its root);
//! - submodules are refused (not supported), and so are trees over the file or byte limits.
//!
//! A [`Checkout`] deletes its directory when the last handle to it is dropped, so the
//! size-bounded cache can evict it while a reader still uses it.

use std::path::{Component, Path, PathBuf};

use gix::ObjectId;
use gix::bstr::ByteSlice;

use super::{Error, Result};

/// Limits on one materialized tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most files (blobs and symlinks).
    pub max_files: u64,
    /// Most bytes of file content.
    pub max_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_files: 20_000, max_bytes: 256 * 1024 * 1024 }
    }
}

/// A materialized tree. The directory lives as long as some handle does.
#[derive(Debug)]
pub struct Checkout {
    dir: PathBuf,
    /// The tree id.
    pub tree: ObjectId,
    /// Files written.
    pub files: u64,
    /// Bytes written.
    pub bytes: u64,
}

impl Checkout {
    /// The directory holding exactly the tree.
    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Checkout {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Check a repository-relative path (an Application's `spec.source.path`, a config path):
/// relative, no `..`, returned without `./` and trailing `/` (`""` is the root).
pub fn clean_relative_path(path: &str) -> Result<String> {
    if path.starts_with('/') || path.starts_with('\\') {
        return Err(Error::UnsafePath(format!("path {path:?} must be repository-relative, not absolute")));
    }
    if path.contains('\0') || path.contains('\\') {
        return Err(Error::UnsafePath(format!("path {path:?} contains an invalid character")));
    }
    let mut parts = Vec::new();
    for c in Path::new(path).components() {
        match c {
            Component::Normal(p) => parts.push(p.to_string_lossy().to_string()),
            Component::CurDir => {}
            Component::ParentDir => {
                return Err(Error::UnsafePath(format!("path {path:?} leaves the checkout (contains ..)")));
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(Error::UnsafePath(format!("path {path:?} must be repository-relative, not absolute")));
            }
        }
    }
    Ok(parts.join("/"))
}

fn check_name(name: &[u8], at: &str) -> Result<String> {
    let s = name.to_str().map_err(|_| Error::UnsafePath(format!("{at}: a file name is not UTF-8")))?;
    if s.is_empty() || s == "." || s == ".." || s.contains('/') || s.contains('\0') || s.eq_ignore_ascii_case(".git") {
        return Err(Error::UnsafePath(format!("{at}: invalid entry name {s:?}")));
    }
    Ok(s.to_string())
}

/// Whether a symlink at `link` (relative to the tree root, with `/`) pointing to `target`
/// stays inside the tree.
pub fn symlink_stays_inside(link: &str, target: &str) -> bool {
    if target.is_empty() || target.starts_with('/') || target.contains('\0') {
        return false;
    }
    let mut depth: Vec<&str> = link.split('/').collect();
    depth.pop(); // the link's own name
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if depth.pop().is_none() {
                    return false;
                }
            }
            p => depth.push(p),
        }
    }
    true
}

struct Writer<'r> {
    repo: &'r gix::Repository,
    limits: Limits,
    files: u64,
    bytes: u64,
    /// What to call the tree in errors (`path@commit`).
    label: String,
}

impl Writer<'_> {
    fn tree(&mut self, id: ObjectId, dest: &Path, rel: &str) -> Result<()> {
        let tree =
            self.repo.find_object(id).map_err(|e| Error::Internal(format!("reading tree {id}: {e}")))?.into_tree();
        let decoded = tree.decode().map_err(|e| Error::Internal(format!("decoding tree {id}: {e}")))?;
        for entry in &decoded.entries {
            let at = if rel.is_empty() { self.label.clone() } else { format!("{}/{rel}", self.label) };
            let name = check_name(entry.filename, &at)?;
            let child_rel = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
            let path = dest.join(&name);
            let mode = entry.mode;
            let oid = entry.oid.to_owned();
            if mode.is_tree() {
                std::fs::create_dir(&path).map_err(|e| Error::Internal(format!("writing {child_rel}: {e}")))?;
                self.tree(oid, &path, &child_rel)?;
            } else if mode.is_commit() {
                return Err(Error::Unsupported(format!(
                    "{child_rel} is a Git submodule: submodules are not supported; vendor the content or use a separate Application"
                )));
            } else {
                self.files += 1;
                if self.files > self.limits.max_files {
                    return Err(Error::TooLarge(format!(
                        "{} has more than {} files (the limit)",
                        self.label, self.limits.max_files
                    )));
                }
                let blob =
                    self.repo.find_object(oid).map_err(|e| Error::Internal(format!("reading {child_rel}: {e}")))?;
                self.bytes += blob.data.len() as u64;
                if self.bytes > self.limits.max_bytes {
                    return Err(Error::TooLarge(format!(
                        "{} holds more than {} bytes (the limit)",
                        self.label, self.limits.max_bytes
                    )));
                }
                if mode.is_link() {
                    let target = blob
                        .data
                        .to_str()
                        .map_err(|_| Error::UnsafePath(format!("symlink {child_rel} has a non-UTF-8 target")))?;
                    if !symlink_stays_inside(&child_rel, target) {
                        return Err(Error::UnsafePath(format!(
                            "symlink {child_rel} points outside the checkout ({target:?})"
                        )));
                    }
                    std::os::unix::fs::symlink(target, &path)
                        .map_err(|e| Error::Internal(format!("writing {child_rel}: {e}")))?;
                } else {
                    std::fs::write(&path, &blob.data)
                        .map_err(|e| Error::Internal(format!("writing {child_rel}: {e}")))?;
                    if mode.is_executable() {
                        use std::os::unix::fs::PermissionsExt;
                        let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Write the tree `tree` into a new directory `dest` (which must not exist) and return the
/// handle. On any error the partial directory is removed.
pub fn materialize(
    repo: &gix::Repository,
    tree: ObjectId,
    dest: PathBuf,
    limits: Limits,
    label: &str,
) -> Result<Checkout> {
    std::fs::create_dir_all(&dest).map_err(|e| Error::Internal(format!("creating the checkout directory: {e}")))?;
    // From here on, dropping the handle removes the directory, on success and on error.
    let mut checkout = Checkout { dir: dest, tree, files: 0, bytes: 0 };
    let mut w = Writer { repo, limits, files: 0, bytes: 0, label: label.to_string() };
    w.tree(tree, &checkout.dir.clone(), "")?;
    checkout.files = w.files;
    checkout.bytes = w.bytes;
    Ok(checkout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths() {
        for (input, want) in
            [("", ""), (".", ""), ("apps/web", "apps/web"), ("./apps/web/", "apps/web"), ("a//b", "a/b")]
        {
            assert_eq!(clean_relative_path(input).unwrap(), want, "{input:?}");
        }
        for bad in ["/etc", "../x", "apps/../../x", "apps/..", "a\\b", "a\0b"] {
            assert!(matches!(clean_relative_path(bad), Err(Error::UnsafePath(_))), "{bad:?}");
        }
    }

    #[test]
    fn symlinks() {
        for (link, target, inside) in [
            ("a", "b", true),
            ("dir/a", "../b", true),
            ("dir/a", "../../b", false),
            ("a", "../b", false),
            ("a", "/etc/passwd", false),
            ("d/e/a", "../../x/./y", true),
            ("d/a", "./../..", false),
            ("a", "", false),
        ] {
            assert_eq!(symlink_stays_inside(link, target), inside, "{link} -> {target}");
        }
    }

    #[test]
    fn names() {
        assert!(check_name(b"ok.yaml", "x").is_ok());
        for bad in [&b".."[..], b".", b"", b".git", b".GIT", b"a/b"] {
            assert!(check_name(bad, "x").is_err(), "{bad:?}");
        }
    }
}
