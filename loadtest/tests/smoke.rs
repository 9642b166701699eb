//! The load test at smoke size, end to end, in the test command: 100 Applications on 2
//! replicas, 10 edits, one takeover, with the `ksync-controller` and `simcluster` binaries of the
//! same profile next to `loadtest` (a workspace test run builds all three; alone:
//! `cargo build --bin ksync-controller && cargo build -p simcluster --bin simcluster`). About
//! 30 s with debug builds. It asserts the report's shape and that nothing stalled, never a time.

use std::process::Command;

/// Run the load test with `args` and `--json`; its report, once it succeeded without stopping
/// early.
fn report_of(args: &[&std::ffi::OsStr]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_loadtest")).args(args).arg("--json").output().expect("loadtest");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "loadtest failed:\n{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert!(report["failure"].is_null(), "{report:#}");
    report
}

/// The calibration measured a rate, convergence has its ratio to it (`needed` applies: the
/// objects Git declares), and the controller's and the cluster's writes are counted apart.
fn against_the_floor(report: &serde_json::Value, needed: u64) {
    let floor = &report["floor"];
    assert!(floor["per_s"].as_f64().is_some_and(|r| r > 0.0), "{report:#}");
    assert!(floor["steps"].as_array().is_some_and(|s| !s.is_empty()), "{report:#}");
    let ratio = &report["floor_ratio"]["convergence"];
    assert_eq!(ratio["writes_needed"], needed, "{report:#}");
    assert!(ratio["ratio"].as_f64().is_some_and(|r| r > 0.0), "{report:#}");
    let writes = &report["writes"]["convergence"];
    // Every Application's objects were applied by the controller (patch), at least once each.
    assert!(writes["controller"]["patch"].as_u64().is_some_and(|n| n >= needed), "{report:#}");
    assert!(writes["cluster_total"].as_u64().is_some(), "{report:#}");
}

fn os(args: &[&'static str]) -> Vec<&'static std::ffi::OsStr> {
    args.iter().map(|a| std::ffi::OsStr::new(*a)).collect()
}

#[test]
fn a_small_load_converges_detects_drift_and_takes_over_without_stalling() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let mut args = vec![std::ffi::OsStr::new("--out"), dir.path().as_os_str()];
    args.extend(os(&["--apps", "100", "--replicas", "2", "--shards", "4", "--edits", "10", "--namespaces", "4"]));
    args.extend(os(&["--deployment-every", "10", "--lease-duration", "6s", "--settle", "1s", "--timeout", "5m"]));
    let report = report_of(&args);
    assert_eq!(report["settings"]["apps"], 100, "{report:#}");
    let convergence = &report["convergence"];
    assert_eq!(convergence["per_app"]["count"], 100, "{report:#}");
    // Nothing stalled: every Application converged without being asked for a reconcile.
    assert_eq!(convergence["unaided"], 100, "{report:#}");
    assert_eq!(convergence["nudged"], 0, "{report:#}");
    assert_eq!(convergence["with_deployment"]["count"], 10, "{report:#}");
    assert_eq!(report["drift"]["detected"]["count"], 5, "{report:#}");
    assert_eq!(report["drift"]["repaired"]["count"], 5, "{report:#}");
    assert_eq!(report["drift"]["missed"], 0, "{report:#}");
    let takeover = &report["takeover"];
    assert_eq!(takeover["missed"], 0, "{report:#}");
    assert_eq!(takeover["reconciled"]["count"], takeover["apps"], "{report:#}");
    for phase in report["usage"].as_array().expect("usage") {
        assert!(phase["processes"]["simcluster"]["rss_kib"].as_u64().unwrap_or(0) > 0, "{phase}");
    }
    assert!(report["api_writes"].as_object().is_some_and(|w| !w.is_empty()), "{report:#}");
    assert_eq!(report["server"]["kind"], "simcluster", "{report:#}");
    // 100 ConfigMaps and 10 Deployments.
    against_the_floor(&report, 110);
    // Requests per new Application: the writes every one needs are there, once each or more.
    let requests = &report["requests_per_app"];
    for what in ["create revisions", "patch configmaps", "patch applications/status"] {
        assert!(requests[what].as_f64().is_some_and(|n| n >= 1.0), "{what}: {report:#}");
    }
    assert!(requests["all"].as_f64().unwrap_or(0.0) > 3.0, "{report:#}");
    // The plot's data: every Application, by the replica holding its shard.
    let ready: usize =
        report["ready"].as_object().expect("ready").values().map(|t| t.as_array().map_or(0, Vec::len)).sum();
    assert_eq!(ready, 100, "{report:#}");
    // The files: the same report, its goals table, and the plot.
    let md = std::fs::read_to_string(dir.path().join("report.md")).expect("report.md");
    assert!(md.contains("| Goal | Target | Measured |") && md.contains("API requests per new Application"), "{md}");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("report.json")).expect("report.json")).expect("JSON");
    assert_eq!(json["settings"], report["settings"]);
    let svg = std::fs::read_to_string(dir.path().join("ready.svg")).expect("ready.svg");
    assert!(svg.starts_with("<svg") && svg.contains("all (100)"), "{}", &svg[..svg.len().min(300)]);
}

#[test]
fn a_small_scale_out_converges_one_batch_per_replica_count() {
    let report = report_of(&os(&[
        "--scale-out",
        "--apps",
        "40",
        "--replicas",
        "2",
        "--shards",
        "4",
        "--namespaces",
        "2",
        "--deployment-every",
        "0",
        "--edits",
        "0",
        "--no-takeover",
        "--lease-duration",
        "6s",
        "--settle",
        "1s",
        "--timeout",
        "5m",
    ]));
    let scale_out = &report["scale_out"];
    // Half on one replica, half on both, each batch converged in full.
    for (batch, replicas) in [("one", 1), ("many", 2)] {
        assert_eq!(scale_out[batch]["replicas"], replicas, "{report:#}");
        assert_eq!(scale_out[batch]["apps"], 20, "{report:#}");
        assert_eq!(scale_out[batch]["ready"]["count"], 20, "{report:#}");
        assert!(scale_out[batch]["requests"]["patch configmaps"].as_u64().is_some_and(|n| n >= 20), "{report:#}");
    }
    assert!(scale_out["ratio"].as_f64().is_some_and(|r| r > 0.0), "{report:#}");
    // Their requests together are the run's requests per new Application.
    assert!(report["requests_per_app"]["patch configmaps"].as_f64().is_some_and(|n| n >= 1.0), "{report:#}");
}

/// The smoke run on a real control plane: a fresh realkube (`../shared/realkube`, as the test
/// kit finds it) with `simcluster nodes`, 20 Applications × 3 objects on 2 replicas. Named
/// `…realkube` so that `scripts/test` leaves it out, saying so, where there is no realkube; run
/// alone there, it fails saying what is missing.
#[test]
fn a_tiny_cold_sync_is_measured_against_the_floor_on_realkube() {
    let Some(scripts) = testkit::realkube_dir() else {
        panic!(
            "no realkube at ../shared/realkube (or {}): this test needs a real control plane; \
             scripts/test leaves the *realkube tests out in that case",
            testkit::REALKUBE_DIR
        )
    };
    eprintln!("realkube: {}", scripts.display());
    let report = report_of(&os(&[
        "--cluster",
        "realkube",
        "--apps",
        "20",
        "--replicas",
        "2",
        "--shards",
        "4",
        "--namespaces",
        "2",
        "--objects",
        "three",
        "--deployment-every",
        "5",
        "--edits",
        "2",
        "--lease-duration",
        "6s",
        "--settle",
        "1s",
        "--timeout",
        "5m",
        "--calibration-step",
        "1s",
    ]));
    assert_eq!(report["server"]["kind"], "realkube", "{report:#}");
    assert!(report["server"]["version"].as_str().is_some_and(|v| v.starts_with("v1.")), "{report:#}");
    let convergence = &report["convergence"];
    assert_eq!(convergence["per_app"]["count"], 20, "{report:#}");
    assert_eq!(convergence["unaided"], 20, "{report:#}");
    // Every 5th runs a Pod: the cluster's own controllers made its ReplicaSet and Pod, and the
    // simulated kubelet started it.
    assert_eq!(convergence["with_deployment"]["count"], 4, "{report:#}");
    against_the_floor(&report, 60);
    let cluster = &report["writes"]["convergence"]["cluster"];
    assert!(cluster["replicasets"].as_u64().is_some_and(|n| n >= 20), "{report:#}");
    assert!(cluster["pods"].as_u64().is_some_and(|n| n >= 4), "{report:#}");
    assert_eq!(report["drift"]["missed"], 0, "{report:#}");
    assert_eq!(report["takeover"]["missed"], 0, "{report:#}");
}
