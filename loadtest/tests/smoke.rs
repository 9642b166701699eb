//! The load test at smoke size, end to end, in the test command: 100 Applications on 2
//! replicas, 10 edits, one takeover, with the `ksync-controller` and `simcluster` binaries of the
//! same profile next to `loadtest` (a workspace test run builds all three; alone:
//! `cargo build --bin ksync-controller && cargo build -p simcluster --bin simcluster`). About
//! 30 s with debug builds. It asserts the report's shape and that nothing stalled, never a time.

use std::process::Command;

#[test]
fn a_small_load_converges_detects_drift_and_takes_over_without_stalling() {
    let out = Command::new(env!("CARGO_BIN_EXE_loadtest"))
        .args(["--apps", "100", "--replicas", "2", "--shards", "4", "--edits", "10", "--namespaces", "4"])
        .args(["--deployment-every", "10", "--lease-duration", "6s", "--settle", "1s", "--timeout", "5m", "--json"])
        .output()
        .expect("loadtest");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "loadtest failed:\n{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert!(report["failure"].is_null(), "{report:#}");
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
}
