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

/// The suite checks its oracle: every recording must still match the real server it came from
/// (kube-apiserver and kube-controller-manager v1.36.2 of `../shared/realkube`, started fresh
/// for this test), so a mismatch here means a recording is wrong, never the server. The runner's
/// own steps play scheduler and kubelet in the controller cases, as they did when recording.
///
/// One step is left out: case 09's `watch-too-old-rv`, which needs a server whose etcd has
/// compacted history (minutes of uptime); a fresh realkube serves the too-old watch instead of
/// answering 410 (realkube's README says so).
///
/// Needs realkube (`KSYNC_REALKUBE_DIR`, default `../shared/realkube`): `scripts/test` leaves the
/// `*realkube` tests out, saying so, where it is absent.
#[test]
fn recordings_match_realkube() {
    let scripts = std::env::var_os("KSYNC_REALKUBE_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/realkube"), PathBuf::from);
    assert!(scripts.join("up").is_file(), "no realkube at {} (set KSYNC_REALKUBE_DIR)", scripts.display());
    let dir = tempfile::Builder::new().prefix("conformance-realkube-").tempdir().expect("temp dir");
    let up = simcluster::realkube::up(&scripts, dir.path()).expect("realkube up");
    let down = || {
        let _ = Command::new(scripts.join("down")).arg(dir.path()).output();
    };
    let printed = String::from_utf8_lossy(&up.stdout).to_string();
    let var = |name: &str| {
        printed.lines().find_map(|l| l.strip_prefix(&format!("{name}="))).map(str::to_string).unwrap_or_default()
    };
    let (server, ca, token) = (var("REALKUBE_SERVER"), var("REALKUBE_CA"), var("REALKUBE_TOKEN"));
    if !up.status.success() || server.is_empty() {
        down();
        panic!("realkube did not start: {printed}\n{}", String::from_utf8_lossy(&up.stderr));
    }
    let out = Command::new("python3")
        .arg(suite().join("run.py"))
        .args(["--server", &server, "--ca", &ca, "--token", &token])
        .output()
        .expect("python3 runs");
    down();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    let failures: Vec<&str> =
        stdout.lines().filter(|l| l.starts_with("FAIL") && !l.contains("watch-too-old-rv")).collect();
    assert!(failures.is_empty(), "recordings that no longer match the real server:\n{}", failures.join("\n"));
    assert!(stdout.lines().any(|l| l.contains(" passed, ")), "the runner reported no result:\n{stdout}");
}
