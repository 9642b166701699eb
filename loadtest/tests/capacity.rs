//! `scripts/capacity` (the capacity model of docs/capacity.md) on load-test reports of two
//! fleet sizes: it reads what `loadtest --out` writes and answers for the sizes asked.

use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace")
}

fn capacity(args: &[&str]) -> std::process::Output {
    Command::new("python3")
        .arg(root().join("scripts/capacity"))
        .args(args)
        .output()
        .expect("python3 runs scripts/capacity (Python 3 is on every machine the README supports)")
}

#[test]
fn the_model_answers_for_each_size_from_the_measured_costs() {
    let data = root().join("loadtest/testdata/capacity");
    let out_dir = tempfile::tempdir().unwrap();
    let reports = ["1k.json", "3k.json", "idle.json", "takeover.json"].map(|f| data.join(f).display().to_string());
    let out = capacity(&[
        &reports[0],
        &reports[1],
        "--idle",
        &reports[2],
        "--takeover",
        &reports[3],
        "--sizes",
        "10000,100000",
        "--out",
        &out_dir.path().display().to_string(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    // One row per measured run, one per size asked for.
    assert!(text.contains("| 1,000 | simcluster | 3 × 32 |"), "{text}");
    assert!(text.contains("| 3,000 | simcluster | 3 × 32 |"), "{text}");
    // Renewals past the fence: the replicas' own count, then the load test's watch; "—" for a
    // report without the replicas' metrics.
    let row = |apps: &str| text.lines().find(|l| l.starts_with(&format!("| {apps} |"))).unwrap_or_default();
    assert!(row("3,000").contains("| 2 (0) |"), "{text}");
    assert!(row("1,000").contains("| — (0) |"), "{text}");
    let model: Vec<&str> =
        text.lines().filter(|l| l.starts_with("| 10,000 |") || l.starts_with("| 100,000 |")).collect();
    assert_eq!(model.len(), 2, "{text}");
    // The largest fleet needs more replicas than the smallest, and more shards than replicas.
    let replicas_shards = |line: &str| -> (u32, u32) {
        let cell = line.split('|').nth(2).unwrap().trim().to_string();
        let (r, s) = cell.split_once(" × ").unwrap();
        (r.parse().unwrap(), s.parse().unwrap())
    };
    let (small, large) = (replicas_shards(model[0]), replicas_shards(model[1]));
    assert!(large.0 > small.0, "{model:?}");
    assert!(large.1 >= large.0 * 8, "{model:?}");
    assert!(text.contains("goal: within 15 %"), "{text}");
    // At rest and the takeover come from their own runs: figures, not "needs ...".
    for line in &model {
        assert!(!line.contains("needs"), "{line}");
        assert!(line.trim_end().ends_with(" s |"), "a takeover time: {line}");
    }
    let svg = std::fs::read_to_string(out_dir.path().join("costs.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.matches("<polyline").count() == 3, "{svg}");
    assert!(out_dir.path().join("capacity.md").is_file());
}

#[test]
fn without_an_idle_or_takeover_run_the_model_says_what_it_needs() {
    let data = root().join("loadtest/testdata/capacity");
    let out = capacity(&[&data.join("1k.json").display().to_string(), "--sizes", "10000"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let row = text.lines().find(|l| l.starts_with("| 10,000 |")).expect("a row for 10,000");
    assert!(row.contains("needs `--idle`") && row.contains("needs `--takeover`"), "{row}");
}

#[test]
fn a_file_that_is_not_a_report_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let bogus = dir.path().join("bogus.json");
    std::fs::write(&bogus, r#"{"hello": 1}"#).unwrap();
    let out = capacity(&[&bogus.display().to_string()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a load-test report"));
}
