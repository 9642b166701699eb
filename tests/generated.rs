//! Generated artifacts are generated: `crds/` must be exactly what the Rust types produce.

use std::process::Command;

#[test]
fn crds_folder_is_current() {
    let stale = kuvryn_sync::manager::stale_files(&testkit::repo_root().join("crds")).unwrap();
    assert!(
        stale.is_empty(),
        "crds/ is stale: {stale:?}\nregenerate with: cargo run --bin ksync-controller -- crds --out crds"
    );
}

#[test]
fn crds_check_fails_on_a_stale_folder_and_names_the_fix() {
    let dir = testkit::temp_dir("crds");
    let bin = env!("CARGO_BIN_EXE_ksync-controller");
    testkit::run(Command::new(bin).args(["crds", "--out"]).arg(dir.path()));
    testkit::run(Command::new(bin).args(["crds", "--check", "--out"]).arg(dir.path()));

    std::fs::write(dir.path().join("applications.sync.kuvryn.io.yaml"), "edited by hand\n").unwrap();
    std::fs::write(dir.path().join("leftover.yaml"), "old\n").unwrap();
    let out = Command::new(bin).args(["crds", "--check", "--out"]).arg(dir.path()).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("applications.sync.kuvryn.io.yaml differs"), "{err}");
    assert!(err.contains("leftover.yaml is not generated any more"), "{err}");
    assert!(err.contains("crds --out"), "{err}");
}

#[test]
fn printed_crds_are_the_generated_files() {
    let out = testkit::run(Command::new(env!("CARGO_BIN_EXE_ksync-controller")).arg("crds"));
    let docs: Vec<serde_json::Value> = kuvryn_sync::yaml::from_str_multiple(&out).unwrap();
    let names: Vec<_> = docs.iter().map(|d| d["metadata"]["name"].as_str().unwrap().to_string()).collect();
    assert_eq!(
        names,
        [
            "repositories.sync.kuvryn.io",
            "applications.sync.kuvryn.io",
            "revisions.sync.kuvryn.io",
            "healthchecks.sync.kuvryn.io",
            "notifications.sync.kuvryn.io"
        ]
    );
    assert_eq!(docs, kuvryn_sync::api::crd::manifests());
}

#[test]
fn the_manager_logs_json_on_request() {
    let dir = testkit::temp_dir("crds");
    let out = Command::new(env!("CARGO_BIN_EXE_ksync-controller"))
        .args(["--log-format", "json", "crds", "--out"])
        .arg(dir.path())
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    assert!(out.status.success());
    let first = String::from_utf8_lossy(&out.stderr).lines().next().unwrap_or_default().to_string();
    let line: serde_json::Value = serde_json::from_str(&first).unwrap_or_else(|e| panic!("{first:?}: {e}"));
    assert_eq!(line["level"], "INFO");
    assert!(line["path"].as_str().unwrap().ends_with(".yaml"));
}
