//! The shared Git object cache against real Git servers on loopback: `git daemon` and the real
//! `git http-backend` (smart HTTP with basic auth), as users meet them.

use std::sync::Arc;
use std::time::Duration;

use kuvryn_sync::api::application::{Render, RenderType};
use kuvryn_sync::render::{Renderer, Request, Tools};
use kuvryn_sync::source::{CacheConfig, Credentials, Error, GitCache, Limits, Reference};
use testkit::{GitHttpServer, GitServer, HttpOptions, WorkTree, temp_dir};

const T: Duration = Duration::from_secs(30);

fn cache(dir: &std::path::Path) -> GitCache {
    GitCache::new(CacheConfig::new(dir)).unwrap()
}

fn branch(b: &str) -> Reference {
    Reference::Branch(b.into())
}

fn none() -> Credentials {
    Credentials::default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_resolves_share_one_fetch_and_pinned_commits_need_none() {
    // Every request is slowed down, so all callers are surely waiting while the first fetches.
    let server =
        GitHttpServer::start_with(HttpOptions { delay: Some(Duration::from_millis(300)), ..Default::default() });
    let bare = server.create_repo("platform");
    let url = server.url("platform");
    let work = WorkTree::clone(bare.to_str().unwrap());
    work.write("apps/web/cm.yaml", "kind: ConfigMap\n");
    let first = work.commit_and_push("first");
    let dir = temp_dir("cache");
    let cache = cache(dir.path());

    // 25 Applications ask for the branch at once: one fetch.
    let asks = (0..25).map(|_| {
        let cache = cache.clone();
        let url = url.clone();
        tokio::spawn(async move { cache.resolve(&url, &branch("main"), &none(), T).await })
    });
    let results = futures_util::future::join_all(asks).await;
    for r in results {
        assert_eq!(r.unwrap().unwrap().commit, first);
    }
    let fetches = || server.requests().iter().filter(|r| r.starts_with("GET /platform.git/info/refs")).count();
    assert_eq!(fetches(), 1, "one fetch for 25 concurrent requests: {:?}", server.requests());

    // A pinned commit already in the object database: no network at all.
    for _ in 0..10 {
        let r = cache.resolve(&url, &Reference::Commit(first.clone()), &none(), T).await.unwrap();
        assert_eq!(r.commit, first);
        assert!(!r.fetched);
    }
    assert_eq!(fetches(), 1);

    // A new commit: again exactly one fetch for all of them.
    work.write("apps/web/cm.yaml", "kind: ConfigMap\ndata: {a: b}\n");
    let second = work.commit_and_push("second");
    let asks = (0..25).map(|_| {
        let cache = cache.clone();
        let url = url.clone();
        tokio::spawn(async move { cache.resolve(&url, &branch("main"), &none(), T).await })
    });
    let fetched: usize = futures_util::future::join_all(asks)
        .await
        .into_iter()
        .map(|r| {
            let r = r.unwrap().unwrap();
            assert_eq!(r.commit, second);
            usize::from(r.fetched)
        })
        .sum();
    assert_eq!(fetched, 1, "one of the callers downloaded the pack");
    assert_eq!(fetches(), 2);

    // Spellings of the same remote share the cache.
    let other_spelling = format!("{}/", url.trim_end_matches(".git"));
    let r = cache.resolve(&other_spelling, &Reference::Commit(second.clone()), &none(), T).await.unwrap();
    assert!(!r.fetched);
    assert_eq!(fetches(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn branches_tags_commits_and_force_pushes() {
    let server = GitServer::start();
    let url = server.create_repo("refs");
    let work = WorkTree::clone(&url);
    work.write("a.txt", "1\n");
    let one = work.commit_and_push("one");
    work.git(&["tag", "-a", "v1", "-m", "release 1"]);
    work.git(&["tag", "light"]);
    work.git(&["push", "--quiet", "origin", "v1", "light"]);
    work.write("a.txt", "2\n");
    let two = work.commit_and_push("two");
    let dir = temp_dir("cache");
    let cache = cache(dir.path());

    assert_eq!(cache.resolve(&url, &branch("main"), &none(), T).await.unwrap().commit, two);
    // An annotated tag peels to its commit; a lightweight one is the commit.
    assert_eq!(cache.resolve(&url, &Reference::Tag("v1".into()), &none(), T).await.unwrap().commit, one);
    assert_eq!(cache.resolve(&url, &Reference::Tag("light".into()), &none(), T).await.unwrap().commit, one);
    // Full and abbreviated commits.
    assert_eq!(cache.resolve(&url, &Reference::Commit(one.clone()), &none(), T).await.unwrap().commit, one);
    assert_eq!(cache.resolve(&url, &Reference::Commit(one[..8].to_string()), &none(), T).await.unwrap().commit, one);

    // What does not exist is a clear error that retrying does not fix.
    for (reference, want) in [
        (branch("nope"), "branch \"nope\" not found"),
        (Reference::Tag("v9".into()), "tag \"v9\" not found"),
        (Reference::Commit("0123456789abcdef0123456789abcdef01234567".into()), "not reachable"),
    ] {
        let e = cache.resolve(&url, &reference, &none(), T).await.unwrap_err();
        assert!(matches!(e, Error::NotFound(_)), "{reference}: {e:?}");
        assert!(!e.retryable());
        assert!(e.to_string().contains(want), "{reference}: {e}");
    }

    // Reads open the repository once and share it: this one is opened before the fetch below.
    let before = cache.checkout(&url, &none(), &two, "").await.unwrap();
    assert_eq!(std::fs::read_to_string(before.path().join("a.txt")).unwrap(), "2\n");
    assert_eq!(cache.commit_subject(&url, &none(), &two).await.as_deref(), Some("two"));

    // Force-push: main moves to a commit that does not descend from the old one.
    work.git(&["reset", "--quiet", "--hard", &one]);
    work.write("b.txt", "rewritten\n");
    work.git(&["add", "--all"]);
    work.git(&["commit", "--quiet", "-m", "rewritten"]);
    work.git(&["push", "--quiet", "--force", "origin", "main"]);
    let rewritten = work.git(&["rev-parse", "HEAD"]).trim().to_string();
    assert_eq!(cache.resolve(&url, &branch("main"), &none(), T).await.unwrap().commit, rewritten);
    let checkout = cache.checkout(&url, &none(), &rewritten, "").await.unwrap();
    assert_eq!(std::fs::read_to_string(checkout.path().join("b.txt")).unwrap(), "rewritten\n");
    assert_eq!(std::fs::read_to_string(checkout.path().join("a.txt")).unwrap(), "1\n");
    // Objects fetched after the shared reader was opened are found through it.
    assert_eq!(
        cache.read_file(&url, &none(), &rewritten, "b.txt").await.unwrap().as_deref(),
        Some(&b"rewritten\n"[..])
    );
    assert_eq!(cache.commit_subject(&url, &none(), &rewritten).await.as_deref(), Some("rewritten"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_https_repository_with_a_private_ca_and_credentials() {
    let server = GitHttpServer::start_with(HttpOptions {
        auth: Some(("deploy", "s3cr3t-token-value")),
        tls: true,
        ..Default::default()
    });
    let bare = server.create_repo("private");
    let work = WorkTree::clone(bare.to_str().unwrap());
    work.write("x.yaml", "a: 1\n");
    let head = work.commit_and_push("first");
    let url = server.url("private");
    assert!(url.starts_with("https://"));
    let dir = temp_dir("cache");
    let cache = cache(dir.path());
    let ca = server.ca_pem.clone().map(String::into_bytes);
    let creds = |password: Option<&str>, ca: Option<Vec<u8>>| Credentials {
        username: password.map(|_| "deploy".to_string()),
        password: password.map(String::from),
        ca_cert: ca,
        ..Default::default()
    };

    // Without the private CA, the server is not trusted.
    let e = cache.resolve(&url, &branch("main"), &creds(Some("s3cr3t-token-value"), None), T).await.unwrap_err();
    assert!(!e.to_string().contains("s3cr3t"), "{e}");
    assert!(matches!(e, Error::Transport(_)), "untrusted certificate: {e:?}");

    let e =
        cache.resolve(&url, &branch("main"), &creds(Some("wrong-password-value"), ca.clone()), T).await.unwrap_err();
    assert!(matches!(e, Error::Auth(_)), "{e:?}");
    assert!(!e.to_string().contains("wrong-password-value"), "{e}");
    let e = cache.resolve(&url, &branch("main"), &creds(None, ca.clone()), T).await.unwrap_err();
    assert!(matches!(e, Error::Auth(_)), "no credentials: {e:?}");

    let r = cache.resolve(&url, &branch("main"), &creds(Some("s3cr3t-token-value"), ca.clone()), T).await.unwrap();
    assert_eq!(r.commit, head);
    let dirs: Vec<String> = std::fs::read_dir(dir.path().join("repos"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    assert!(dirs.iter().all(|d| !d.contains("s3cr3t") && !d.contains("deploy")), "{dirs:?}");
    assert!(server.requests().iter().any(|r| r.contains("git-upload-pack") && r.ends_with(" 200")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_are_never_sent_over_plain_http() {
    let server = GitHttpServer::start(Some(("deploy", "plain-text-pass")), false);
    let bare = server.create_repo("plain");
    let work = WorkTree::clone(bare.to_str().unwrap());
    work.commit_and_push("first");
    let dir = temp_dir("cache");
    let creds =
        Credentials { username: Some("deploy".into()), password: Some("plain-text-pass".into()), ..Default::default() };
    let e = cache(dir.path()).resolve(&server.url("plain"), &branch("main"), &creds, T).await.unwrap_err();
    assert!(matches!(e, Error::Unsupported(_)), "{e:?}");
    assert!(e.to_string().contains("credentials are sent only over HTTPS"), "{e}");
    assert!(server.requests().iter().all(|r| !r.ends_with(" 200")), "{:?}", server.requests());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dumb_http_is_refused_clearly() {
    let server = GitHttpServer::start(None, true);
    let bare = server.create_repo("dumb");
    let work = WorkTree::clone(bare.to_str().unwrap());
    work.write("x.yaml", "a: 1\n");
    work.commit_and_push("first");
    testkit::run(std::process::Command::new("git").arg("-C").arg(&bare).arg("update-server-info"));
    let dir = temp_dir("cache");
    let e = cache(dir.path()).resolve(&server.url("dumb"), &branch("main"), &none(), T).await.unwrap_err();
    assert!(matches!(e, Error::Unsupported(_)), "{e:?}");
    assert!(e.to_string().contains("dumb HTTP"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_goes_down_keeps_the_last_good_state() {
    let mut server = GitServer::start();
    let url = server.create_repo("flaky");
    let work = WorkTree::clone(&url);
    work.write("apps/a/x.yaml", "a: 1\n");
    let head = work.commit_and_push("first");
    let dir = temp_dir("cache");
    let cache = cache(dir.path());
    assert_eq!(cache.resolve(&url, &branch("main"), &none(), T).await.unwrap().commit, head);
    server.stop();
    let e = cache.resolve(&url, &branch("main"), &none(), Duration::from_secs(5)).await.unwrap_err();
    assert!(e.retryable(), "{e:?}");
    assert!(matches!(e, Error::Transport(_) | Error::Timeout(_)), "{e:?}");
    // What was fetched is still there.
    let checkout = cache.checkout(&url, &none(), &head, "apps/a").await.unwrap();
    assert_eq!(std::fs::read_to_string(checkout.path().join("x.yaml")).unwrap(), "a: 1\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_times_out() {
    // Accepts connections and never says anything.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let held = Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = held.clone();
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            keep.lock().unwrap().push(s);
        }
    });
    let dir = temp_dir("cache");
    let url = format!("git://127.0.0.1:{port}/silent.git");
    let e = cache(dir.path()).resolve(&url, &branch("main"), &none(), Duration::from_secs(2)).await.unwrap_err();
    assert!(matches!(e, Error::Timeout(_)), "{e:?}");
    assert!(e.retryable());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkouts_hold_exactly_the_tree_and_refuse_unsafe_content() {
    let server = GitServer::start();
    let url = server.create_repo("trees");
    let work = WorkTree::clone(&url);
    work.write("apps/web/deploy.yaml", "kind: Deployment\n");
    work.write("apps/web/nested/cm.yaml", "kind: ConfigMap\n");
    work.write("apps/web/run.sh", "#!/bin/sh\n");
    work.write("apps/other/x.yaml", "x\n");
    std::os::unix::fs::symlink("nested/cm.yaml", work.path().join("apps/web/link.yaml")).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(work.path().join("apps/web/run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let good = work.commit_and_push("good");
    let dir = temp_dir("cache");
    let cache = cache(dir.path());
    cache.resolve(&url, &branch("main"), &none(), T).await.unwrap();

    let c = cache.checkout(&url, &none(), &good, "apps/web").await.unwrap();
    let mut files: Vec<String> = walk(c.path());
    files.sort();
    assert_eq!(files, ["deploy.yaml", "link.yaml", "nested/cm.yaml", "run.sh"]);
    assert_eq!(std::fs::read_to_string(c.path().join("link.yaml")).unwrap(), "kind: ConfigMap\n");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(c.path().join("run.sh")).unwrap().permissions().mode() & 0o111, 0o111);
    // The same tree again is the same checkout.
    let again = cache.checkout(&url, &none(), &good, "./apps/web/").await.unwrap();
    assert_eq!(again.path(), c.path());
    // The same tree for other credentials (issue 44) is a checkout of their own: like the objects,
    // a checkout is only served to the credentials it was made for.
    let other = Credentials { ca_cert: Some(b"another identity".to_vec()), ..Default::default() };
    cache.resolve(&url, &branch("main"), &other, T).await.unwrap();
    let theirs = cache.checkout(&url, &other, &good, "apps/web").await.unwrap();
    assert_eq!(theirs.tree, c.tree);
    assert_ne!(theirs.path(), c.path(), "a checkout shared across credentials");

    for (path, want) in
        [("../x", "leaves the checkout"), ("/etc", "repository-relative"), ("apps/none", "does not exist")]
    {
        let e = cache.checkout(&url, &none(), &good, path).await.unwrap_err();
        assert!(e.to_string().contains(want), "{path}: {e}");
    }

    // A symlink out of the requested tree.
    std::os::unix::fs::symlink("../other/x.yaml", work.path().join("apps/web/escape.yaml")).unwrap();
    let escaping = work.commit_and_push("escape");
    cache.resolve(&url, &branch("main"), &none(), T).await.unwrap();
    let e = cache.checkout(&url, &none(), &escaping, "apps/web").await.unwrap_err();
    assert!(matches!(e, Error::UnsafePath(_)), "{e:?}");
    assert!(e.to_string().contains("escape.yaml points outside the checkout"), "{e}");
    // ... which is fine from the root, where it stays inside.
    cache.checkout(&url, &none(), &escaping, "").await.unwrap();
    std::fs::remove_file(work.path().join("apps/web/escape.yaml")).unwrap();

    // A submodule (a gitlink entry; `git add --all` would drop it, so commit by hand).
    work.git(&["add", "--all"]);
    work.git(&["update-index", "--add", "--cacheinfo", &format!("160000,{good},apps/web/vendored")]);
    work.git(&["commit", "--quiet", "-m", "submodule"]);
    work.git(&["push", "--quiet", "origin", "main"]);
    let with_submodule = work.git(&["rev-parse", "HEAD"]).trim().to_string();
    cache.resolve(&url, &branch("main"), &none(), T).await.unwrap();
    let e = cache.checkout(&url, &none(), &with_submodule, "apps/web").await.unwrap_err();
    assert!(matches!(e, Error::Unsupported(_)), "{e:?}");
    assert!(e.to_string().contains("submodules are not supported"), "{e}");

    // Limits.
    let small = GitCache::new(CacheConfig {
        limits: Limits { max_files: 2, max_bytes: 1 << 20 },
        ..CacheConfig::new(temp_dir("small").path().join("c"))
    })
    .unwrap();
    small.resolve(&url, &Reference::Commit(good.clone()), &none(), T).await.unwrap();
    let e = small.checkout(&url, &none(), &good, "apps/web").await.unwrap_err();
    assert!(matches!(e, Error::TooLarge(_)), "{e:?}");
    assert!(e.to_string().contains("more than 2 files"), "{e}");
    // Nothing half-written is left behind.
    assert_eq!(std::fs::read_dir(small_checkouts(&small, &url)).unwrap().count(), 0);
}

const LEAK: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: leaked\ndata:\n  token: only-the-controller-may-read-this\n";

/// A symlink at `at` in the work tree (folders created).
fn symlink(work: &WorkTree, target: &str, at: &str) {
    let full = work.path().join(at);
    std::fs::create_dir_all(full.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(target, full).unwrap();
}

/// What the real renderer makes of `dir` (for the failure message when a checkout that
/// should have been refused was not).
async fn render_anyway(dir: &std::path::Path, type_: RenderType) -> String {
    let t = testkit::Tools::get();
    let renderer = Renderer::new(
        Tools { helm: t.bin.join("helm"), kubectl: t.bin.join("kubectl") },
        kuvryn_sync::render::Limits::default(),
        kuvryn_sync::render::DEFAULT_CACHE_BYTES,
    );
    let render = Render { type_: Some(type_), helm: None };
    let req = Request {
        dir,
        tree: None,
        render: &render,
        renderer: type_,
        application: "tenant",
        namespace: "tenant",
        values_from: Vec::new(),
        secrets: Vec::new(),
        capabilities: None,
        dependencies: Vec::new(),
        packaged: None,
    };
    match renderer.render(&req).await {
        Ok(objects) => format!("objects {}", serde_json::to_string(&*objects).unwrap()),
        Err(e) => format!("an error: {e}"),
    }
}

// See: issue 18. The OS applies `..` after following the links before it: with `s/l -> ..`,
// `s/l/s/l/../../leak.yaml` reads as inside the checkout but is two levels above it (here, in
// the cache directory). Helm (`.Files.Get`), Kustomize and plain YAML all follow such links.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chained_symlinks_cannot_leave_the_checkout() {
    let server = GitServer::start();
    let url = server.create_repo("chained");
    let work = WorkTree::clone(&url);
    // Helm: `.helmignore` hides the loop from helm's walk of the chart.
    work.write("chart/Chart.yaml", "apiVersion: v2\nname: leak\nversion: 0.1.0\n")
        .write("chart/.helmignore", "s/\n")
        .write(
            "chart/templates/cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: copied\ndata:\n  x: {{ .Files.Get \"x.yaml\" | quote }}\n",
        );
    symlink(&work, "..", "chart/s/l");
    symlink(&work, "s/l/s/l/../../leak.yaml", "chart/x.yaml");
    // Kustomize and plain YAML: hidden folders are not walked.
    work.write("overlay/kustomization.yaml", "resources:\n- x.yaml\n");
    symlink(&work, "..", "overlay/.s/l");
    symlink(&work, ".s/l/.s/l/../../leak.yaml", "overlay/x.yaml");
    symlink(&work, "..", "plain/.s/l");
    symlink(&work, ".s/l/.s/l/../../leak.yaml", "plain/x.yaml");
    // No loop needed: a/b/c is `d`, one level below the root, not three.
    work.write("shallow/d/cm.yaml", "kind: ConfigMap\n");
    symlink(&work, "../../d", "shallow/a/b/c");
    symlink(&work, "a/b/c/../../../leak.yaml", "shallow/x.yaml");
    // A directory loop.
    work.write("looped/cm.yaml", "kind: ConfigMap\n");
    symlink(&work, ".", "looped/d");
    // A chain that stays inside.
    work.write("inside/c/cm.yaml", "kind: ConfigMap\n");
    symlink(&work, "../c", "inside/a/b");
    symlink(&work, "a/b/cm.yaml", "inside/e.yaml");
    let commit = work.commit_and_push("links");
    let dir = temp_dir("cache");
    std::fs::write(dir.path().join("leak.yaml"), LEAK).unwrap();
    let cache = cache(dir.path());
    cache.resolve(&url, &branch("main"), &none(), T).await.unwrap();

    let mut accepted = Vec::new();
    for (path, type_, want) in [
        ("chart", RenderType::Helm, "symlink x.yaml points outside the checkout"),
        ("overlay", RenderType::Kustomize, "symlink x.yaml points outside the checkout"),
        ("plain", RenderType::Yaml, "symlink x.yaml points outside the checkout"),
        ("shallow", RenderType::Yaml, "symlink x.yaml points outside the checkout"),
        ("looped", RenderType::Yaml, "symlink d -> \".\" makes a directory loop"),
    ] {
        match cache.checkout(&url, &none(), &commit, path).await {
            Err(e) => {
                assert!(matches!(e, Error::UnsafePath(_)), "{path}: {e:?}");
                assert!(e.to_string().contains(want), "{path}: {e}");
            }
            Ok(c) => accepted
                .push(format!("{path}: accepted, and rendering it gave {}", render_anyway(c.path(), type_).await)),
        }
    }
    assert!(accepted.is_empty(), "{accepted:#?}");
    let c = cache.checkout(&url, &none(), &commit, "inside").await.unwrap();
    assert_eq!(std::fs::read_to_string(c.path().join("e.yaml")).unwrap(), "kind: ConfigMap\n");
    // Nothing refused is left behind.
    let left = std::fs::read_dir(dir.path().join("checkouts")).unwrap().count();
    assert_eq!(left, 1, "only the accepted checkout stays");
}

fn small_checkouts(cache: &GitCache, url: &str) -> std::path::PathBuf {
    cache.repository_dir(url, &none()).unwrap().parent().unwrap().parent().unwrap().join("checkouts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evicted_checkouts_are_deleted_once_no_reader_holds_them() {
    let server = GitServer::start();
    let url = server.create_repo("evict");
    let work = WorkTree::clone(&url);
    let mut commits = Vec::new();
    for i in 0..4 {
        work.write("big.txt", &format!("{i}{}\n", "x".repeat(200 * 1024)));
        commits.push(work.commit_and_push(&format!("c{i}")));
    }
    let dir = temp_dir("cache");
    // Room for about two checkouts.
    let cache = GitCache::new(CacheConfig { checkout_bytes: 450 * 1024, ..CacheConfig::new(dir.path()) }).unwrap();
    cache.resolve(&url, &branch("main"), &none(), T).await.unwrap();
    let held = cache.checkout(&url, &none(), &commits[0], "").await.unwrap();
    for c in &commits[1..] {
        drop(cache.checkout(&url, &none(), c, "").await.unwrap());
        cache.run_pending_tasks();
    }
    // The size bound evicted at least one of the four (each ~200 KiB, room for ~450 KiB), and
    // an evicted checkout's directory is gone.
    let checkouts = dir.path().join("checkouts");
    // moka drops an evicted value during a later maintenance pass, and the directory is removed
    // on the blocking pool (off the runtime), so each removal is waited for.
    cache.run_pending_tasks();
    let count = || std::fs::read_dir(&checkouts).unwrap().count();
    testkit::eventually("an evicted checkout's directory removed", Duration::from_secs(30), || async {
        (count() <= 3).then_some(())
    })
    .await;
    cache.clear_checkouts();
    // Every checkout nobody holds is gone; the held one is intact until dropped.
    testkit::eventually("every checkout nobody holds removed", Duration::from_secs(30), || async {
        (count() == 1).then_some(())
    })
    .await;
    assert!(held.path().join("big.txt").exists());
    let path = held.path().to_path_buf();
    drop(held);
    testkit::eventually("the held checkout removed once dropped", Duration::from_secs(30), || async {
        (!path.exists()).then_some(())
    })
    .await;
}

fn walk(root: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() && !p.is_symlink() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(root).unwrap().to_string_lossy().to_string());
            }
        }
    }
    out
}

// See: issue 18. A file:// URL reads the controller's own disk: refused by default, a remote like
// any other with `allow_local` (`--allow-local-repositories`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_url_is_refused_unless_local_repositories_are_allowed() {
    let server = GitServer::start();
    server.create_repo("local");
    let bare = server.repo_path("local");
    let work = WorkTree::clone(bare.to_str().unwrap());
    work.write("apps/a/x.yaml", "a: 1\n");
    let head = work.commit_and_push("first");
    let url = format!("file://{}", bare.display());

    let refused = temp_dir("cache");
    let cache = cache(refused.path());
    for e in [
        cache.resolve(&url, &branch("main"), &none(), T).await.map(|r| r.commit).unwrap_err(),
        cache.resolve(&url, &Reference::Commit(head.clone()), &none(), T).await.map(|r| r.commit).unwrap_err(),
        cache.checkout(&url, &none(), &head, "apps/a").await.map(|c| c.tree).unwrap_err(),
    ] {
        assert!(matches!(e, Error::Unsupported(_)), "{e:?}");
        assert!(e.to_string().contains("--allow-local-repositories"), "{e}");
    }
    assert_eq!(std::fs::read_dir(refused.path().join("repos")).unwrap().count(), 0, "nothing was fetched");

    let dir = temp_dir("cache");
    let cache = GitCache::new(CacheConfig { allow_local: true, ..CacheConfig::new(dir.path()) }).unwrap();
    assert_eq!(cache.resolve(&url, &branch("main"), &none(), T).await.unwrap().commit, head);
    let c = cache.checkout(&url, &none(), &head, "apps/a").await.unwrap();
    assert_eq!(std::fs::read_to_string(c.path().join("x.yaml")).unwrap(), "a: 1\n");
}

// See: issue 18 (tenants cannot read each other's Git source).
/// A commit fetched with one tenant's credentials is in the cache; another tenant naming the same
/// URL and that commit, without credentials or with wrong ones, must be refused by the remote (an
/// auth error), never handed the cached commit. The same credentials (from another Secret with
/// the same content) still cost no network for a pinned commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_commit_is_not_served_to_other_credentials() {
    let server = GitHttpServer::start_with(HttpOptions {
        auth: Some(("deploy", "tenant-a-token-1234")),
        tls: true,
        ..Default::default()
    });
    let bare = server.create_repo("private");
    let work = WorkTree::clone(bare.to_str().unwrap());
    work.write("apps/web/cm.yaml", "data: {owner: tenant-a}\n");
    let head = work.commit_and_push("tenant a's private commit");
    let url = server.url("private");
    let dir = temp_dir("cache");
    let cache = cache(dir.path());
    let ca = server.ca_pem.clone().map(String::into_bytes);
    let a = Credentials {
        username: Some("deploy".into()),
        password: Some("tenant-a-token-1234".into()),
        ca_cert: ca.clone(),
        ..Default::default()
    };
    assert_eq!(cache.resolve(&url, &branch("main"), &a, T).await.unwrap().commit, head);

    // Tenant B: no credentials (only the CA, to reach the server at all), or a wrong password.
    let anonymous = Credentials { ca_cert: ca.clone(), ..Default::default() };
    let wrong = Credentials { password: Some("tenant-b-guess-5678".into()), ..a.clone() };
    for (who, creds) in [("no credentials", &anonymous), ("a wrong password", &wrong)] {
        for reference in [Reference::Commit(head.clone()), Reference::Commit(head[..10].to_string())] {
            let e = cache.resolve(&url, &reference, creds, T).await.map(|r| r.commit);
            assert!(matches!(e, Err(Error::Auth(_))), "{who}, {reference}: got {e:?}, want an auth error");
            let message = e.unwrap_err().to_string();
            assert!(!message.contains("5678"), "{message}");
            if creds.password.is_none() {
                assert!(message.contains("the Repository gives no credentials"), "{message}");
            }
        }
    }

    // Nor is the tree, a file or a commit message read for them from what A fetched.
    for creds in [&anonymous, &wrong] {
        let e = cache.checkout(&url, creds, &head, "apps/web").await.map(|c| c.tree);
        assert!(matches!(e, Err(Error::NotFound(_))), "{e:?}");
        let e = cache.read_file(&url, creds, &head, "apps/web/cm.yaml").await;
        assert!(matches!(e, Err(Error::NotFound(_))), "{e:?}");
        assert_eq!(cache.commit_subject(&url, creds, &head).await, None);
    }
    // Nothing of A's was written where B's repositories are, and no directory name holds a value.
    let dirs: Vec<String> = std::fs::read_dir(dir.path().join("repos"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    assert!(dirs.iter().all(|d| !d.contains("tenant") && !d.contains("deploy")), "{dirs:?}");
    for creds in [&anonymous, &wrong] {
        let b_dir = cache.repository_dir(&url, creds).unwrap();
        assert_ne!(b_dir, cache.repository_dir(&url, &a).unwrap());
        let objects = walk(&b_dir.join("objects"));
        let loose = |o: &String| o.split('/').next().is_some_and(|d| d.len() == 2);
        assert!(objects.iter().all(|o| !o.ends_with(".pack") && !loose(o)), "{objects:?}");
    }

    // The same credentials from another Secret: the pinned commit costs no network.
    let requests = server.requests().len();
    let r = cache.resolve(&url, &Reference::Commit(head.clone()), &a.clone(), T).await.unwrap();
    assert_eq!((r.commit.as_str(), r.fetched), (head.as_str(), false));
    assert_eq!(server.requests().len(), requests, "{:?}", server.requests());
    let c = cache.checkout(&url, &a.clone(), &head, "apps/web").await.unwrap();
    assert_eq!(std::fs::read_to_string(c.path().join("cm.yaml")).unwrap(), "data: {owner: tenant-a}\n");
    assert_eq!(cache.credential_id(&a), cache.credential_id(&a.clone()));
    assert_ne!(cache.credential_id(&a), cache.credential_id(&wrong));
}
