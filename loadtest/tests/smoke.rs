//! The load test at toy size, end to end: 20 Applications on 2 replicas, 6 edits, one takeover.
//! Ignored by default (it needs the `ksync-controller` and `simcluster` binaries of the same
//! profile next to `loadtest`, and about a minute):
//!
//! ```sh
//! cargo build --bin ksync-controller && cargo build -p simcluster --bin simcluster
//! cargo test -p loadtest --test smoke -- --ignored
//! ```

use std::process::Command;

#[test]
#[ignore = "runs the whole load test; needs the ksync-controller and simcluster binaries"]
fn a_small_load_converges_detects_drift_and_takes_over() {
    let out = Command::new(env!("CARGO_BIN_EXE_loadtest"))
        .args(["--apps", "20", "--replicas", "2", "--shards", "4", "--edits", "6", "--namespaces", "4"])
        .args(["--deployment-every", "5", "--lease-duration", "6s", "--settle", "1s", "--timeout", "3m", "--json"])
        .output()
        .expect("loadtest");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "loadtest failed:\n{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(report["convergence"]["per_app"]["count"], 20, "{report:#}");
    assert_eq!(report["drift"]["detected"]["count"], 3, "{report:#}");
    assert_eq!(report["drift"]["repaired"]["count"], 3, "{report:#}");
    assert_eq!(report["drift"]["missed"], 0, "{report:#}");
    let takeover = &report["takeover"];
    assert_eq!(takeover["missed"], 0, "{report:#}");
    assert_eq!(takeover["reconciled"]["count"], takeover["apps"], "{report:#}");
    for phase in report["usage"].as_array().expect("usage") {
        assert!(phase["processes"]["simcluster"]["rss_kib"].as_u64().unwrap_or(0) > 0, "{phase}");
    }
}
