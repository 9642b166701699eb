//! Repository hygiene: a fresh clone works for anyone, on any machine.
//!
//! - No tracked symlink leaves the tree (an absolute target, or a relative one that climbs out):
//!   a tracked `target -> <home>/.cache/...` once locked every other user out of the build.
//! - No tracked text file names an absolute path of a build machine: a home directory (root's,
//!   or one under `/home` or `/Users`), anything under this workplace's `/work`, this checkout's
//!   own path, the current `$HOME` or `CARGO_TARGET_DIR`.
//! - The manager (`kuvryn-sync`'s library and `ksync-controller`) does not depend on the API
//!   server emulator: only the `ksync` package (for `ksync dev`) and tests do.
//! - Every `Controller` of the library takes `controller::EachWatchBacksOff` and only watches
//!   that back off on their own.
//!
//! Each rule is checked on this checkout and, so that the check itself is known to bite, on a
//! scratch repository that breaks it. The checks read git's index, so they need `git` and a
//! clone (CI runs the suite in a fresh clone); outside one they fail and say so.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use regex::Regex;

/// `git` in `dir`, its stdout (panics with stderr on failure).
fn git(dir: &Path, args: &[&str]) -> Vec<u8> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running git (needed by the hygiene checks): {e}"));
    assert!(
        out.status.success(),
        "git {args:?} in {} failed (the hygiene checks need a git clone): {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Tracked files: (mode, blob id, path), from the index.
fn tracked(root: &Path) -> Vec<(String, String, String)> {
    let out = git(root, &["ls-files", "-s", "-z"]);
    out.split(|b| *b == 0)
        .filter(|e| !e.is_empty())
        .map(|e| {
            let e = String::from_utf8_lossy(e);
            let (meta, path) = e.split_once('\t').expect("ls-files -s: mode sha stage\\tpath");
            let mut meta = meta.split(' ');
            let mode = meta.next().unwrap().to_string();
            let sha = meta.next().unwrap().to_string();
            (mode, sha, path.to_string())
        })
        .collect()
}

/// Why a symlink at `link` (relative to the tree's root) pointing at `target` leaves the tree,
/// if it does. Judged on the text as git stores it: `..` climbing above the root, or absolute.
fn symlink_escape(link: &str, target: &str) -> Option<String> {
    if Path::new(target).is_absolute() {
        return Some(format!("{link} -> {target}: an absolute target (it exists only on the machine that made it)"));
    }
    let mut depth: i64 = 0;
    let parent = Path::new(link).parent().unwrap_or(Path::new(""));
    for c in parent.components().chain(Path::new(target).components()) {
        match c {
            Component::Normal(_) => depth += 1,
            Component::ParentDir => {
                depth -= 1;
                if depth < 0 {
                    return Some(format!("{link} -> {target}: climbs out of the repository"));
                }
            }
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return Some(format!("{link} -> {target}: not relative")),
        }
    }
    None
}

/// Patterns of absolute paths that belong to one build machine.
fn machine_paths(root: &Path) -> Vec<Regex> {
    // Built so that this file does not name the paths it looks for.
    let lead = r"(?:^|[^A-Za-z0-9_.~-])";
    let mut patterns = vec![
        format!("{lead}/ro{}/", "ot"),
        format!("{lead}/hom{}/[A-Za-z0-9_.-]+/", "e"),
        format!("{lead}/User{}/[A-Za-z0-9_. -]+/", "s"),
        format!("{lead}/wor{}/", "k"),
    ];
    let mut exact: BTreeSet<String> = BTreeSet::new();
    exact.insert(root.display().to_string());
    if let Ok(canonical) = root.canonicalize() {
        exact.insert(canonical.display().to_string());
    }
    for var in ["HOME", "CARGO_TARGET_DIR"] {
        if let Some(v) = std::env::var_os(var) {
            let p = PathBuf::from(v);
            // "/" or a one-level path such as "/tmp" would match every path.
            if p.is_absolute() && p.components().count() > 2 {
                exact.insert(p.display().to_string());
            }
        }
    }
    patterns.extend(exact.iter().map(|p| format!("{lead}{}", regex::escape(p))));
    patterns.iter().map(|p| Regex::new(p).unwrap()).collect()
}

/// Every hygiene problem of the clone at `root`, one line each.
fn problems(root: &Path) -> Vec<String> {
    let patterns = machine_paths(root);
    let mut found = Vec::new();
    for (mode, sha, path) in tracked(root) {
        let blob = git(root, &["cat-file", "blob", &sha]);
        if mode == "120000" {
            let target = String::from_utf8_lossy(&blob);
            found.extend(symlink_escape(&path, &target));
            continue;
        }
        if blob.contains(&0) {
            continue; // binary
        }
        let text = String::from_utf8_lossy(&blob);
        for (n, line) in text.lines().enumerate() {
            if let Some(m) = patterns.iter().find_map(|p| p.find(line)) {
                found.push(format!(
                    "{path}:{}: names a path of a build machine ({:?}): `{}`",
                    n + 1,
                    m.as_str().trim_start_matches(|c: char| !c.eq(&'/')),
                    line.trim()
                ));
            }
        }
    }
    found
}

#[test]
fn this_clone_is_self_contained() {
    let root = testkit::repo_root();
    let found = problems(&root);
    assert!(
        found.is_empty(),
        "tracked files that only work on one machine (use a relative path, or ~ / $HOME in docs):\n{}",
        found.join("\n")
    );
}

/// A scratch repository with one commit of `files` (path, contents) and `links` (path, target).
fn scratch(files: &[(&str, &str)], links: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = testkit::temp_dir("hygiene");
    git(dir.path(), &["init", "-q"]);
    for (path, contents) in files {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, contents).unwrap();
    }
    for (path, target) in links {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, p).unwrap();
    }
    git(dir.path(), &["add", "-A"]);
    dir
}

#[test]
fn the_check_catches_a_symlink_leaving_the_tree() {
    let target = format!("/ro{}/.cache/kuvryn-sync/target", "ot");
    let repo = scratch(
        &[("README.md", "fine\n"), ("docs/a.md", "fine\n")],
        &[
            ("target", &target),
            ("docs/up", "../../elsewhere"),
            ("docs/deep/s", "../../../x"),
            ("docs/ok", "../README.md"),
            ("docs/self", "."),
        ],
    );
    let found = problems(repo.path());
    assert_eq!(found.len(), 3, "{found:#?}");
    assert!(found.iter().any(|p| p.starts_with("target -> ") && p.contains("absolute")), "{found:#?}");
    assert!(found.iter().any(|p| p.starts_with("docs/up -> ") && p.contains("climbs out")), "{found:#?}");
    assert!(found.iter().any(|p| p.starts_with("docs/deep/s -> ")), "{found:#?}");
}

#[test]
fn the_check_catches_absolute_paths_of_a_build_machine() {
    let repo = scratch(
        &[
            ("a.sh", &format!("export CARGO_TARGET_DIR=/ro{}/.cache/x\n", "ot")),
            ("b.md", &format!("see /hom{}/alice/src/kuvryn\n", "e")),
            ("c.rs", &format!("const P: &str = \"/Us{}/bob/k/\";\n", "ers")),
            ("d.toml", &format!("path = \"/wor{}/main/tools\"\n", "k")),
            // Not machine paths: in-cluster paths, URLs, the home-relative form.
            ("ok.md", "hostPath /srv/data, /var/lib/x, https://example.com/home/page/, ~/.cache/kuvryn-sync\n"),
            ("bin.dat", &format!("\0/ro{}/ in a binary file is not text\n", "ot")),
        ],
        &[],
    );
    let here = repo.path().join("e.txt");
    std::fs::write(&here, format!("built in {}\n", repo.path().display())).unwrap();
    git(repo.path(), &["add", "e.txt"]);
    let found = problems(repo.path());
    let files: BTreeSet<&str> = found.iter().map(|p| p.split(':').next().unwrap()).collect();
    assert_eq!(files, BTreeSet::from(["a.sh", "b.md", "c.rs", "d.toml", "e.txt"]), "{found:#?}");
}

/// The names of the normal (non-dev, non-build) dependencies of `package`, transitively, for
/// this machine's platform (`cargo tree`; offline: the build has fetched them already).
fn normal_dependencies(package: &str) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "--locked",
            "--edges",
            "normal",
            "--prefix",
            "none",
            "--format",
            "{p}",
            "--package",
        ])
        .arg(package)
        .arg("--manifest-path")
        .arg(testkit::repo_root().join("Cargo.toml"))
        .output()
        .expect("cargo tree");
    assert!(out.status.success(), "cargo tree: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1) // the package itself
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

#[test]
fn the_manager_does_not_depend_on_the_emulator() {
    let manager = normal_dependencies("kuvryn-sync");
    assert!(manager.contains("kube") && manager.contains("sharding"), "{manager:?}");
    assert!(!manager.contains("simcluster"), "the library (and so ksync-controller) depends on simcluster");
    // The client's `ksync dev` does: the same walk finds it there.
    assert!(normal_dependencies("ksync").contains("simcluster"));
}

/// What breaks `controller::EachWatchBacksOff`'s contract in one source file: a `Controller`
/// built without it (kube's default backoff holds every trigger back on any one watch's error,
/// docs/reliability.md), or fed by a watch with no backoff of its own (`Controller::new`,
/// `owns`, `watches`).
fn controller_problems(path: &str, text: &str) -> Vec<String> {
    let code: String = text.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n");
    let mut out = Vec::new();
    for (i, _) in code.match_indices("Controller::for_stream(") {
        let chain = code[i..].split(';').next().unwrap_or_default();
        if !chain.contains(".trigger_backoff(") {
            out.push(format!("{path}: a Controller without .trigger_backoff(EachWatchBacksOff)"));
        }
    }
    let unbacked = Regex::new(r"Controller::new(_with)?\(|\.(owns|watches)(_with)?\([^)]*Config").expect("regex");
    out.extend(
        unbacked.find_iter(&code).map(|m| format!("{path}: {} (its watch has no backoff of its own)", m.as_str())),
    );
    out
}

#[test]
fn every_controller_backs_off_per_watch() {
    let root = testkit::repo_root();
    let mut problems = Vec::new();
    let mut controllers = 0;
    for (_, _, path) in tracked(&root) {
        if path.ends_with(".rs") && path.starts_with("src/") {
            let text = std::fs::read_to_string(root.join(&path)).expect("a source file");
            controllers += text.matches("Controller::for_stream(").count();
            problems.extend(controller_problems(&path, &text));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(controllers >= 4, "the Application, Repository, HealthCheck and labeller controllers: {controllers}");
    // The check bites.
    let bad = [
        "let c = Controller::for_stream(own, store).run(r, e, ctx);",
        "Controller::new(api, watcher::Config::default()).trigger_backoff(EachWatchBacksOff);",
        "c.trigger_backoff(EachWatchBacksOff).watches(api, watcher::Config::default(), map);",
    ];
    for text in bad {
        assert_eq!(controller_problems("x.rs", text).len(), 1, "{text}");
    }
    assert!(controller_problems("x.rs", "Controller::for_stream(o, s).trigger_backoff(EachWatchBacksOff);").is_empty());
}

/// How `path` of the Application controller keeps replica state: each piece is a type of
/// `replica/` with its own methods, so nothing outside `replica/` takes a lock on the context,
/// and the `Context` has no bare `Mutex` field.
fn replica_state_problems(path: &str, text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if !path.contains("/replica/") {
        let lock = Regex::new(r"\b(?:ctx|c)\.\w+\.lock\(").expect("a regex");
        problems.extend(lock.find_iter(text).map(|m| format!("{path}: {} outside replica/", m.as_str())));
    }
    if let Some(fields) = text.split("pub struct Context {").nth(1).and_then(|t| t.split("\n}\n").next()) {
        problems.extend(
            fields
                .lines()
                .filter(|l| l.contains("Mutex<"))
                .map(|l| format!("{path}: a bare Mutex in Context: {}", l.trim())),
        );
    }
    problems
}

#[test]
fn replica_state_keeps_its_locks() {
    let root = testkit::repo_root();
    let mut problems = Vec::new();
    let mut files = 0;
    for (_, _, path) in tracked(&root) {
        if path.ends_with(".rs") && path.starts_with("src/controller/application/") {
            files += 1;
            let text = std::fs::read_to_string(root.join(&path)).expect("a source file");
            problems.extend(replica_state_problems(&path, &text));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(files > 20, "the Application controller's files: {files}");
    // The check bites.
    let a = "src/controller/application/source.rs";
    assert_eq!(replica_state_problems(a, "let r = ctx.resolved.lock().expect(\"l\");").len(), 1);
    assert!(replica_state_problems("src/controller/application/replica/resolved.rs", "self.0.lock()").is_empty());
    let context = "pub struct Context {\n    pub(super) failures: Mutex<HashMap<K, u32>>,\n}\n";
    assert_eq!(replica_state_problems("src/controller/application/replica/mod.rs", context).len(), 1);
}
