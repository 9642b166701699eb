//! Materializing a tree from the object database into a directory, without a working-tree
//! checkout, with the safety rules of a GitOps source:
//!
//! - the requested path must be repository-relative and stay inside the checkout;
//! - entry names must be plain (no `..`, `.`, `/`, NUL, `.git`);
//! - a symlink must lead inside the materialized tree as the OS resolves it: each link on
//!   the way followed before the `..` after it ([`check_symlinks`]), checked again on disk;
//! - no symlink may make a directory loop (`d -> .`), nor be a loop of links;
//! - submodules are refused (not supported), and so are trees over the file or byte limits.
//!
//! A [`Checkout`] deletes its directory when the last handle to it is dropped, so the
//! size-bounded cache can evict it while a reader still uses it.

use std::collections::{BTreeMap, HashMap};
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
        // The last reader may drop it on the async runtime: the removal goes to the blocking
        // pool. An empty path: already removed.
        if !self.dir.as_os_str().is_empty() {
            crate::offload::remove_dir_all_later(std::mem::take(&mut self.dir));
        }
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

/// What the symlink check knows of one entry of a tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link and its target, as stored in Git.
    Link(String),
}

/// Every entry of a tree by its path relative to the root (`a/b/c`, no `.`, `..` or `//`).
pub type Entries = BTreeMap<String, Node>;

/// Why a symlink is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkProblem {
    /// Absolute, empty, or, followed through the links it passes, leaves the root.
    Outside,
    /// A chain of links that never ends (`a -> b`, `b -> a`), or more than 40 links followed.
    Loop,
    /// Points to a directory it is inside of: walking the tree through it never ends.
    DirectoryLoop,
}

/// A refused symlink.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    /// The link, relative to the root.
    pub link: String,
    /// Its target as stored.
    pub target: String,
    /// Why.
    pub problem: LinkProblem,
}

/// Most links followed while resolving one path, as Linux counts them (`MAXSYMLINKS`).
pub const MAX_LINKS: usize = 40;

/// Longest symlink target Linux stores (`PATH_MAX` - 1).
const MAX_TARGET: usize = 4095;

/// Where the symlink `link` of `entries` leads, relative to the root (`""` is the root),
/// resolved as the OS resolves it: each component in turn, a link met on the way replaced by
/// where *it* leads (so `..` after a link to a directory climbs from that directory, not from
/// the link). A component that does not exist is taken as written. Not a link: `link` itself.
///
/// Errors: [`LinkProblem::Outside`] when an absolute or empty target, or any `..` on the
/// way, leaves the root; [`LinkProblem::Loop`] when resolving never ends or follows more than
/// [`MAX_LINKS`] links.
pub fn resolve_symlink(entries: &Entries, link: &str) -> Result<String, LinkProblem> {
    if !matches!(entries.get(link), Some(Node::Link(_))) {
        return Ok(link.to_string());
    }
    Resolver::new(entries).link(link).map(|r| r.path.join("/"))
}

/// Check every symlink of `entries`: each must resolve inside the root
/// ([`resolve_symlink`]), and none may lead to a directory it is inside of (a directory loop:
/// `d -> .`, or `a/x -> ../b` with `b/y -> ../a`), which would make a walk of the tree never
/// end. The first problem found: escapes and loops of links in path order, then directory
/// loops.
pub fn check_symlinks(entries: &Entries) -> Result<(), Refused> {
    let mut resolver = Resolver::new(entries);
    let refused = |link: &str, problem| {
        let target = match entries.get(link) {
            Some(Node::Link(t)) => t.clone(),
            _ => String::new(),
        };
        Refused { link: link.to_string(), target, problem }
    };
    // Where each link to a directory leads.
    let mut dir_links: Vec<(&str, String)> = Vec::new();
    for (path, node) in entries {
        if let Node::Link(_) = node {
            let to = resolver.link(path).map_err(|p| refused(path, p))?.path.join("/");
            if to.is_empty() || entries.get(&to) == Some(&Node::Dir) {
                dir_links.push((path, to));
            }
        }
    }
    match directory_loop(entries, &dir_links) {
        Some(link) => Err(refused(link, LinkProblem::DirectoryLoop)),
        None => Ok(()),
    }
}

/// The parent of a path relative to the root (`""` for a top-level entry).
fn parent_of(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(p, _)| p)
}

/// A link on a cycle of the graph whose nodes are the directories and whose edges go from a
/// directory to each subdirectory and to where each link in it to a directory leads: a walk
/// of the tree following links never ends exactly when this graph has a cycle from the root.
/// Depth-first from the root, without recursion (trees can be deep).
fn directory_loop<'e>(entries: &'e Entries, dir_links: &[(&'e str, String)]) -> Option<&'e str> {
    // Edges out of each directory: (to, the link taken, if any).
    let mut edges: HashMap<&str, Vec<(&str, Option<&'e str>)>> = HashMap::new();
    for (path, node) in entries {
        if *node == Node::Dir {
            edges.entry(parent_of(path)).or_default().push((path.as_str(), None));
        }
    }
    for (link, to) in dir_links {
        edges.entry(parent_of(link)).or_default().push((to.as_str(), Some(*link)));
    }
    #[derive(Clone, Copy, PartialEq)]
    enum State {
        Open,
        Done,
    }
    let mut state: HashMap<&str, State> = HashMap::new();
    // (directory, next edge to take, the link taken to get here)
    let mut stack: Vec<(&str, usize, Option<&'e str>)> = vec![("", 0, None)];
    state.insert("", State::Open);
    while let Some(top) = stack.last_mut() {
        let (dir, next) = (top.0, top.1);
        top.1 += 1;
        let Some(&(to, via)) = edges.get(dir).and_then(|out| out.get(next)) else {
            state.insert(dir, State::Done);
            stack.pop();
            continue;
        };
        match state.get(to) {
            // Back to a directory being walked: the cycle is this edge and the stack above
            // `to`; name a link on it (the edge taken last, or the latest link before it).
            Some(State::Open) => {
                let from = stack.iter().position(|(d, _, _)| *d == to).unwrap_or(0);
                return via.or_else(|| stack[from + 1..].iter().rev().find_map(|(_, _, l)| *l));
            }
            Some(State::Done) => {}
            None => {
                state.insert(to, State::Open);
                stack.push((to, 0, via));
            }
        }
    }
    None
}

/// A resolved link: where it leads (components from the root) and how many links resolving
/// it followed, itself included.
#[derive(Clone, Debug)]
struct Resolved<'e> {
    path: Vec<&'e str>,
    links: usize,
}

/// Resolves links, each once: where a link leads does not depend on how it was reached.
struct Resolver<'e> {
    entries: &'e Entries,
    /// Components of the deepest entry: no deeper path needs looking up.
    depth: usize,
    done: HashMap<&'e str, Result<Resolved<'e>, LinkProblem>>,
    /// The links being resolved, outermost first.
    active: Vec<&'e str>,
}

/// Where a walk ended and how many links it followed; the inner error is this walk's, the
/// outer one stops the outermost resolution.
type Walked<'e> = Result<Result<(Vec<&'e str>, usize), LinkProblem>, TooDeep>;

/// Resolving stopped [`MAX_LINKS`] links deep: the outermost link follows too many, but the
/// inner ones may not (so this is not remembered for them).
struct TooDeep;

impl<'e> Resolver<'e> {
    fn new(entries: &'e Entries) -> Self {
        let depth = entries.keys().map(|k| k.split('/').count()).max().unwrap_or(0);
        Resolver { entries, depth, done: HashMap::new(), active: Vec::new() }
    }

    /// Resolve the link at `link` (which must be one).
    fn link(&mut self, link: &str) -> Result<Resolved<'e>, LinkProblem> {
        let Some((key, _)) = self.entries.get_key_value(link) else { return Err(LinkProblem::Outside) };
        self.nested(key).unwrap_or(Err(LinkProblem::Loop))
    }

    fn nested(&mut self, link: &'e str) -> Result<Result<Resolved<'e>, LinkProblem>, TooDeep> {
        if let Some(r) = self.done.get(link) {
            return Ok(r.clone());
        }
        if self.active.contains(&link) {
            // Every link being resolved needs this one, which needs itself: none of them ends.
            return Ok(Err(LinkProblem::Loop));
        }
        if self.active.len() >= MAX_LINKS {
            return Err(TooDeep);
        }
        let entries = self.entries;
        let Some(Node::Link(target)) = entries.get(link) else { return Ok(Err(LinkProblem::Outside)) };
        self.active.push(link);
        let walked = self.walk(parent_of(link).split('/').filter(|c| !c.is_empty()).collect(), target);
        self.active.pop();
        let result = walked?.and_then(|(path, links)| {
            if links + 1 > MAX_LINKS { Err(LinkProblem::Loop) } else { Ok(Resolved { path, links: links + 1 }) }
        });
        self.done.insert(link, result.clone());
        Ok(result)
    }

    /// Follow `target` from the directory `dir`.
    fn walk(&mut self, dir: Vec<&'e str>, target: &'e str) -> Walked<'e> {
        if target.is_empty() || target.starts_with('/') || target.contains('\0') || target.len() > MAX_TARGET {
            return Ok(Err(LinkProblem::Outside));
        }
        let entries = self.entries;
        let mut at = dir;
        let mut links = 0;
        for part in target.split('/') {
            match part {
                "" | "." => {}
                ".." => {
                    if at.pop().is_none() {
                        return Ok(Err(LinkProblem::Outside));
                    }
                }
                name => {
                    at.push(name);
                    if at.len() > self.depth {
                        continue;
                    }
                    if let Some((key, Node::Link(_))) = entries.get_key_value(at.join("/").as_str()) {
                        match self.nested(key)? {
                            Ok(r) => {
                                links += r.links;
                                if links > MAX_LINKS {
                                    return Ok(Err(LinkProblem::Loop));
                                }
                                at = r.path;
                            }
                            Err(p) => return Ok(Err(p)),
                        }
                    }
                }
            }
        }
        Ok(Ok((at, links)))
    }
}

struct Writer<'r> {
    repo: &'r gix::Repository,
    limits: Limits,
    files: u64,
    bytes: u64,
    /// What to call the tree in errors (`path@commit`).
    label: String,
    /// What was written, for the symlink check.
    entries: Entries,
}

/// A failure to write `rel`. An entry that already exists is a malformed tree (two entries
/// of one name): never written through, and never retried.
fn write_error(rel: &str, e: std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::AlreadyExists {
        Error::UnsafePath(format!("{rel} appears twice in its tree"))
    } else {
        Error::Internal(format!("writing {rel}: {e}"))
    }
}

impl Writer<'_> {
    /// Write the tree `id` into `dest`, which is `rel` in the checkout. Nothing is written
    /// through a symlink: directories, links and files are all created new (`O_EXCL`) in a
    /// directory this function created.
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
                std::fs::create_dir(&path).map_err(|e| write_error(&child_rel, e))?;
                self.entries.insert(child_rel.clone(), Node::Dir);
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
                    if target.is_empty() || target.contains('\0') || target.len() > MAX_TARGET {
                        return Err(Error::UnsafePath(format!("symlink {child_rel} has an invalid target")));
                    }
                    // Where it leads is checked once the whole tree is known (`check_symlinks`).
                    std::os::unix::fs::symlink(target, &path).map_err(|e| write_error(&child_rel, e))?;
                    self.entries.insert(child_rel, Node::Link(target.to_string()));
                } else {
                    use std::io::Write;
                    let mut file = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(&path)
                        .map_err(|e| write_error(&child_rel, e))?;
                    file.write_all(&blob.data).map_err(|e| write_error(&child_rel, e))?;
                    if mode.is_executable() {
                        use std::os::unix::fs::PermissionsExt;
                        let _ = file.set_permissions(std::fs::Permissions::from_mode(0o755));
                    }
                    self.entries.insert(child_rel, Node::File);
                }
            }
        }
        Ok(())
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Refused { link, target, problem } = self;
        let target = if target.chars().count() > 200 {
            format!("{}...", target.chars().take(200).collect::<String>())
        } else {
            target.clone()
        };
        match problem {
            LinkProblem::Outside => write!(
                f,
                "symlink {link} points outside the checkout ({target:?}, resolved through the symlinks on its way as the OS does)"
            ),
            LinkProblem::Loop => write!(
                f,
                "symlink {link} -> {target:?} never resolves: it is a loop of symlinks, or follows more than {MAX_LINKS} (too many levels of symbolic links)"
            ),
            LinkProblem::DirectoryLoop => write!(
                f,
                "symlink {link} -> {target:?} makes a directory loop: it leads to a directory it is inside of, so a walk of the tree through it never ends (too many levels of symbolic links)"
            ),
        }
    }
}

/// After materializing: every symlink, resolved by the OS, leads inside `root` (a second
/// check of what [`check_symlinks`] decided from the tree). A link the OS cannot resolve
/// because its target does not exist was checked as text there.
fn check_on_disk(root: &Path, entries: &Entries) -> Result<()> {
    let root = std::fs::canonicalize(root).map_err(|e| Error::Internal(format!("reading the checkout: {e}")))?;
    for (link, node) in entries {
        if !matches!(node, Node::Link(_)) {
            continue;
        }
        match std::fs::canonicalize(root.join(link)) {
            Ok(to) if to.starts_with(&root) => {}
            Ok(_) => return Err(Error::UnsafePath(format!("symlink {link} points outside the checkout"))),
            Err(e) if rustix::io::Errno::from_io_error(&e) == Some(rustix::io::Errno::LOOP) => {
                return Err(Error::UnsafePath(format!("symlink {link}: too many levels of symbolic links")));
            }
            Err(_) => {}
        }
    }
    Ok(())
}

/// Write the tree `tree` into a new directory `dest` (which must not exist) and return the
/// handle. On any error the partial directory is removed. Every symlink must lead inside
/// `dest` as the OS resolves it, and none may make a directory loop ([`check_symlinks`]).
pub fn materialize(
    repo: &gix::Repository,
    tree: ObjectId,
    dest: PathBuf,
    limits: Limits,
    label: &str,
) -> Result<Checkout> {
    std::fs::create_dir_all(&dest).map_err(|e| Error::Internal(format!("creating the checkout directory: {e}")))?;
    // From here on, dropping the handle removes the directory.
    let mut checkout = Checkout { dir: dest, tree, files: 0, bytes: 0 };
    let mut w = Writer { repo, limits, files: 0, bytes: 0, label: label.to_string(), entries: Entries::new() };
    let written = w.tree(tree, &checkout.dir.clone(), "").and_then(|()| {
        check_symlinks(&w.entries).map_err(|refused| Error::UnsafePath(refused.to_string()))?;
        check_on_disk(&checkout.dir, &w.entries)
    });
    if let Err(e) = written {
        // This runs on the blocking pool: remove what was written before the error is
        // returned, so a failed checkout leaves nothing behind.
        let _ = std::fs::remove_dir_all(std::mem::take(&mut checkout.dir));
        return Err(e);
    }
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

    /// A tree from `path` (a file), `path/` (a directory) and `path -> target` (a symlink);
    /// the parents of every entry are directories.
    fn tree(spec: &[&str]) -> Entries {
        let mut entries = Entries::new();
        for s in spec {
            let (path, node) = match s.split_once(" -> ") {
                Some((p, t)) => (p.to_string(), Node::Link(t.to_string())),
                None if s.ends_with('/') => (s.trim_end_matches('/').to_string(), Node::Dir),
                None => (s.to_string(), Node::File),
            };
            let mut parent = path.as_str();
            while let Some((p, _)) = parent.rsplit_once('/') {
                entries.insert(p.to_string(), Node::Dir);
                parent = p;
            }
            entries.insert(path, node);
        }
        entries
    }

    #[test]
    fn symlinks_resolve_through_the_links_they_pass() {
        use LinkProblem::*;
        // (tree, link, where it leads or why it is refused)
        let cases: &[(&[&str], &str, Result<&str, LinkProblem>)] = &[
            (&["b", "a -> b"], "a", Ok("b")),
            (&["b", "dir/a -> ../b"], "dir/a", Ok("b")),
            (&["d/e/a -> ../../x/./y", "x/y"], "d/e/a", Ok("x/y")),
            (&["dir/a -> ../../b"], "dir/a", Err(Outside)),
            (&["a -> ../b"], "a", Err(Outside)),
            (&["d/a -> ./../.."], "d/a", Err(Outside)),
            (&["a -> /etc/passwd"], "a", Err(Outside)),
            (&["a -> "], "a", Err(Outside)),
            // A link to a link, and a chain through a linked directory, staying inside.
            (&["x -> y", "y -> z/f", "z/f"], "x", Ok("z/f")),
            (&["a/b -> ../c", "c/d.yaml", "e.yaml -> a/b/d.yaml"], "e.yaml", Ok("c/d.yaml")),
            (&["a/b -> ../c", "c/d/", "e -> a/b/d/.."], "e", Ok("c")),
            // See: issue 18. The OS applies `..` after following s/l: s/l/s/l is the root, and
            // three levels up from it is two levels above the checkout.
            (&["s/l -> ..", "tok -> s/l/s/l/../../.."], "tok", Err(Outside)),
            (&["s/l -> ..", "x.yaml -> s/l/s/l/../../leak.yaml"], "x.yaml", Err(Outside)),
            // No loop needed: a/b/c is `d`, one level below the root, not three.
            (&["a/b/c -> ../../d", "d/", "tok -> a/b/c/../../.."], "tok", Err(Outside)),
            (&["a/b/c -> ../../d", "d/f", "ok -> a/b/c/f"], "ok", Ok("d/f")),
            // A link inside a linked directory resolves from where that directory really is.
            (&["a/b -> ../c/d", "c/d/up -> ../..", "tok -> a/b/up/.."], "tok", Err(Outside)),
            // Links that never end.
            (&["a -> a"], "a", Err(Loop)),
            (&["a -> b", "b -> a"], "a", Err(Loop)),
            (&["a -> b/x", "b -> a"], "b", Err(Loop)),
            // Dangling: resolved as text from where the missing entry would be.
            (&["a -> missing/../b"], "a", Ok("b")),
            (&["a -> missing/../../b"], "a", Err(Outside)),
            (&["s/l -> ..", "a -> s/l/missing/../.."], "a", Err(Outside)),
        ];
        for (spec, link, want) in cases {
            let entries = tree(spec);
            let got = resolve_symlink(&entries, link);
            assert_eq!(got.as_deref().map_err(|e| *e), *want, "{spec:?}: {link}");
        }
        // A chain of 40 links is followed, one of 41 is not (Linux's limit).
        let chain = |n: usize| {
            let mut t: Vec<String> = (0..n).map(|i| format!("l{i} -> l{}", i + 1)).collect();
            t.push(format!("l{n} -> f"));
            t.push("f".into());
            t
        };
        let long = chain(39);
        let entries = tree(&long.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(resolve_symlink(&entries, "l0"), Ok("f".to_string()));
        let longer = chain(40);
        let entries = tree(&longer.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(resolve_symlink(&entries, "l0"), Err(LinkProblem::Loop));
        assert_eq!(resolve_symlink(&entries, "l1"), Ok("f".to_string()));
    }

    #[test]
    fn trees_with_escaping_or_looping_symlinks_are_refused() {
        use LinkProblem::*;
        // (tree, the link refused and why)
        type Case<'a> = (&'a [&'a str], Option<(&'a str, LinkProblem)>);
        let cases: &[Case] = &[
            (&["a.yaml", "b.yaml -> a.yaml", "d/c.yaml -> ../a.yaml"], None),
            (&["x/", "a -> x", "b -> x", "x/y -> ../z", "z/f"], None),
            (&["a/b -> ../c", "c/d.yaml", "e.yaml -> a/b/d.yaml"], None),
            // See: issue 18. Escapes are reported before the loop that makes them possible.
            (&["s/l -> ..", "tok -> s/l/s/l/../../.."], Some(("tok", Outside))),
            (&["s/l -> ..", "x.yaml -> s/l/s/l/../../leak.yaml"], Some(("x.yaml", Outside))),
            (&["a/b/c -> ../../d", "d/", "tok -> a/b/c/../../.."], Some(("tok", Outside))),
            (&["a -> b", "b -> a"], Some(("a", Loop))),
            // Directory loops: walking the tree through them never ends.
            (&["d -> ."], Some(("d", DirectoryLoop))),
            (&["sub/up -> ..", "sub/f"], Some(("sub/up", DirectoryLoop))),
            (&["a/deep/er/l -> ../../.."], Some(("a/deep/er/l", DirectoryLoop))),
            (&["a/x -> ../b", "b/y -> ../a"], Some(("b/y", DirectoryLoop))),
            (&["a/x -> ../b", "b/y -> ../c", "c/z -> ../a"], Some(("c/z", DirectoryLoop))),
            // ... but a link into a sibling of the way there is no loop.
            (&["a/x -> ../b", "b/y -> ../c", "c/z -> ../a/q", "a/q/"], None),
        ];
        for (spec, want) in cases {
            let got = check_symlinks(&tree(spec)).err().map(|r| (r.link, r.problem));
            assert_eq!(got, want.map(|(l, p)| (l.to_string(), p)), "{spec:?}");
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
