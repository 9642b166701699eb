//! Benchmark of the shared Git cache (`cargo bench --bench git_cache`): a repository of about
//! 2,000 files holding 50 Applications, served by a real `git daemon` on loopback.
//!
//! Measures: the first fetch plus materializing all 50 paths; picking up a new commit that
//! changes one Application (fetch, then all 50 paths again: 49 unchanged trees are cache hits);
//! and 50 concurrent resolves of the branch (single-flight). Results go to
//! `docs/performance.md`.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kuvryn_sync::source::{CacheConfig, Credentials, GitCache, Reference};

const APPS: usize = 50;
const FILES_PER_APP: usize = 40;

fn git(dir: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@kuvryn.invalid")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@kuvryn.invalid")
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn manifest(app: usize, file: usize, generation: usize) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app-{app}-cm-{file}\ndata:\n  generation: \"{generation}\"\n  payload: \"{}\"\n",
        "x".repeat(600)
    )
}

fn main() {
    let base = tempfile::tempdir().expect("tmp");
    let bare = base.path().join("bench.git");
    git(base.path(), &["init", "--quiet", "--bare", "--initial-branch=main", bare.to_str().unwrap()]);
    let work = base.path().join("work");
    std::fs::create_dir(&work).unwrap();
    git(&work, &["init", "--quiet", "--initial-branch=main"]);
    for app in 0..APPS {
        let dir = work.join(format!("apps/app-{app}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..FILES_PER_APP {
            std::fs::write(dir.join(format!("cm-{f}.yaml")), manifest(app, f, 0)).unwrap();
        }
    }
    git(&work, &["add", "--all"]);
    git(&work, &["commit", "--quiet", "-m", "initial"]);
    git(&work, &["push", "--quiet", bare.to_str().unwrap(), "main"]);

    let exec_path = git(base.path(), &["--exec-path"]);
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut daemon = Command::new(std::path::Path::new(&exec_path).join("git-daemon"))
        .args(["--reuseaddr", "--export-all", "--listen=127.0.0.1"])
        .arg(format!("--port={port}"))
        .arg(format!("--base-path={}", base.path().display()))
        .arg(base.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("git-daemon");
    let end = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < end, "git daemon did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let url = format!("git://127.0.0.1:{port}/bench.git");

    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let cache_dir = tempfile::tempdir().unwrap();
        let cache = GitCache::new(CacheConfig::new(cache_dir.path())).unwrap();
        let creds = Credentials::default();
        let main = Reference::Branch("main".into());
        let t = Duration::from_secs(60);
        let materialize_all = |commit: String| {
            let cache = cache.clone();
            let url = url.clone();
            async move {
                let tasks = (0..APPS).map(|app| {
                    let (cache, url, commit) = (cache.clone(), url.clone(), commit.clone());
                    tokio::spawn(async move {
                        cache
                            .checkout(&url, &Credentials::default(), &commit, &format!("apps/app-{app}"))
                            .await
                            .unwrap()
                    })
                });
                futures_util::future::join_all(tasks).await.into_iter().map(|r| r.unwrap()).collect::<Vec<_>>()
            }
        };

        let started = Instant::now();
        let first = cache.resolve(&url, &main, &creds, t).await.unwrap();
        let fetched = started.elapsed();
        let checkouts = materialize_all(first.commit.clone()).await;
        let total = started.elapsed();
        let files: u64 = checkouts.iter().map(|c| c.files).sum();
        println!(
            "first fetch: {:.0} ms; + materialize {APPS} paths ({files} files): {:.0} ms total",
            fetched.as_secs_f64() * 1e3,
            total.as_secs_f64() * 1e3
        );
        drop(checkouts);

        for f in 0..FILES_PER_APP {
            std::fs::write(work.join(format!("apps/app-7/cm-{f}.yaml")), manifest(7, f, 1)).unwrap();
        }
        git(&work, &["commit", "--quiet", "--all", "-m", "app-7 generation 1"]);
        git(&work, &["push", "--quiet", bare.to_str().unwrap(), "main"]);
        let started = Instant::now();
        let second = cache.resolve(&url, &main, &creds, t).await.unwrap();
        assert!(second.fetched);
        let fetched = started.elapsed();
        let _checkouts = materialize_all(second.commit.clone()).await;
        let total = started.elapsed();
        println!(
            "new commit (one app changed): fetch {:.0} ms; + all {APPS} paths again {:.0} ms total",
            fetched.as_secs_f64() * 1e3,
            total.as_secs_f64() * 1e3
        );

        let started = Instant::now();
        let tasks = (0..APPS).map(|_| {
            let (cache, url, main, creds) = (cache.clone(), url.clone(), main.clone(), creds.clone());
            tokio::spawn(async move { cache.resolve(&url, &main, &creds, t).await.unwrap() })
        });
        let results = futures_util::future::join_all(tasks).await;
        println!(
            "{APPS} concurrent resolves of the branch (nothing new): {:.0} ms, {} downloads",
            started.elapsed().as_secs_f64() * 1e3,
            results.into_iter().filter(|r| r.as_ref().unwrap().fetched).count()
        );
    });
    let _ = daemon.kill();
    let _ = daemon.wait();
}
