//! simcluster against the exchanges recorded from a real kube-apiserver v1.36.2
//! (`simcluster/conformance/`, a copy of the suite kept identical to `../shared/conformance`).
//!
//! `SIMCLUSTER_CONFORMANCE_ARGS` replaces the runner's selection arguments of the first test,
//! e.g. `SIMCLUSTER_CONFORMANCE_ARGS="--only 14 -v" cargo test -p simcluster --test conformance
//! api_server`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn suite() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("conformance")
}

async fn run_suite(kubelet: bool, default_args: &[&str]) {
    let sim = simcluster::SimCluster::start(simcluster::Config { kubelet, ..Default::default() }, 0)
        .await
        .expect("start simcluster");
    let url = sim.url();
    let args: Vec<String> = match std::env::var("SIMCLUSTER_CONFORMANCE_ARGS") {
        Ok(a) if !a.trim().is_empty() => a.split_whitespace().map(String::from).collect(),
        _ => default_args.iter().map(|s| s.to_string()).collect(),
    };
    let out = tokio::task::spawn_blocking(move || {
        Command::new("python3").arg(suite().join("run.py")).arg("--server").arg(&url).args(&args).output()
    })
    .await
    .expect("join")
    .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    let failures: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert!(out.status.success(), "conformance failures:\n{}", failures.join("\n"));
    assert!(stdout.lines().any(|l| l.contains(" passed, 0 failed")), "the runner reported no result:\n{stdout}");
}

/// Every case that needs only the API server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_server_cases_match_the_recordings() {
    run_suite(false, &["--skip-requires", "controllers-without-kubelet"]).await;
}

/// The workload-controller cases: kube-controller-manager's controllers run, while the case's
/// own steps play scheduler and kubelet (so simcluster runs without its kubelet simulation).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_cases_match_the_recordings() {
    if std::env::var("SIMCLUSTER_CONFORMANCE_ARGS").is_ok_and(|a| !a.trim().is_empty()) {
        eprintln!(
            "SKIP controller_cases_match_the_recordings: SIMCLUSTER_CONFORMANCE_ARGS selects the cases for the other test"
        );
        return;
    }
    run_suite(false, &["--only-requires", "controllers-without-kubelet"]).await;
}

fn files(dir: &Path, base: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read dir") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n == "__pycache__") {
                continue;
            }
            files(&p, base, out);
        } else {
            out.push(p.strip_prefix(base).expect("prefix").to_path_buf());
        }
    }
}

/// The project's copy of the suite never drifts from the shared one (where that exists, as in
/// CI): same files, same bytes.
#[test]
fn suite_copy_matches_shared_conformance() {
    let shared = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/conformance");
    if !shared.is_dir() {
        eprintln!("SKIP suite_copy_matches_shared_conformance: no ../shared/conformance next to the project");
        return;
    }
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    files(&suite(), &suite(), &mut ours);
    files(&shared, &shared, &mut theirs);
    ours.sort();
    theirs.sort();
    assert_eq!(ours, theirs, "simcluster/conformance must hold exactly the files of ../shared/conformance");
    for f in &ours {
        let a = std::fs::read(suite().join(f)).expect("read ours");
        let b = std::fs::read(shared.join(f)).expect("read shared");
        assert!(a == b, "simcluster/conformance/{} differs from ../shared/conformance: copy it again", f.display());
    }
}
