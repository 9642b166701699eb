//! The chaos run's short form in the test command (issue 44, item 7): 2 minutes of commits,
//! SIGKILLs (the leader included) and API faults on 3 replicas and 40 Applications that prune,
//! with debug builds of `ksync-controller` and `simcluster` next to `loadtest` (alone:
//! `cargo build --bin ksync-controller && cargo build -p simcluster --bin simcluster`). It
//! asserts that nothing was lost, never a time: every wait in the run has a deadline.

use std::process::Command;

#[test]
fn a_short_chaos_run_loses_nothing() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let out = Command::new(env!("CARGO_BIN_EXE_loadtest"))
        .args(["--scenario", "chaos", "--chaos-duration", "2m", "--apps", "40", "--namespaces", "4"])
        .args(["--shards", "4", "--lease-duration", "10s", "--settle", "1s", "--timeout", "8m", "--json"])
        .arg("--logs")
        .arg(dir.path().join("logs"))
        .arg("--out")
        .arg(dir.path().join("out"))
        .output()
        .expect("loadtest");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON report ({e}); status {}:\n{stderr}", out.status));
    let chaos = &report["chaos"];
    let context = format!("{chaos:#}\n{stderr}");
    // The chaos happened: commits, kills of the leader and of others, faults.
    assert!(chaos["commits"].as_u64().is_some_and(|n| n > 0), "{context}");
    let kills = chaos["kills"].as_array().expect("kills");
    assert!(kills.len() >= 2, "{context}");
    assert!(kills.iter().any(|k| k[2] == true), "the leader was killed: {context}");
    assert!(chaos["faults"].as_object().is_some_and(|f| !f.is_empty()), "{context}");
    assert!(chaos["checked_writes"][0].as_u64().is_some_and(|n| n > 0), "{context}");
    // Nothing lost.
    for count in
        ["never_deployed", "wrongly_pruned_or_missing", "not_pruned", "unheld_shard_writes", "unheld_leader_writes"]
    {
        assert_eq!(chaos[count], 0, "{count}: {context}");
    }
    // Every Application converged at the last commit (within `--timeout`: the run fails
    // otherwise).
    assert!(chaos["converged_after_s"].is_number(), "{context}");
    assert!(report["failure"].is_null(), "{context}");
    assert!(out.status.success(), "{context}");
    let md = std::fs::read_to_string(dir.path().join("out/report.md")).expect("report.md");
    assert!(md.contains("| chaos: writes to a shard not held then | 0 | 0 | met |"), "{md}");
}
