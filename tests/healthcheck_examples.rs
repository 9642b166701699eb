//! The HealthChecks in `examples/healthchecks/` compile and give each recorded object the health
//! its `example.kuvryn.io/expected-health` annotation says.

use std::path::Path;

use kuvryn_sync::api::common::HealthStatus;
use kuvryn_sync::api::healthcheck::HealthCheck;
use kuvryn_sync::controller::healthcheck::{compile, target};
use kuvryn_sync::health::assess_with;
use serde_json::Value;

const EXPECTED: &str = "example.kuvryn.io/expected-health";

#[test]
fn every_example_gives_the_recorded_objects_their_expected_health() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/healthchecks");
    let mut dirs: Vec<_> =
        std::fs::read_dir(&root).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()).collect();
    dirs.sort();
    assert_eq!(dirs.len(), 4, "{dirs:?}");
    for dir in dirs {
        let hc: HealthCheck =
            kuvryn_sync::yaml::from_str(&std::fs::read_to_string(dir.join("healthcheck.yaml")).unwrap()).unwrap();
        let rules = compile(&hc);
        assert_eq!(rules.error(), None, "{}", dir.display());
        let objects: Vec<Value> =
            kuvryn_sync::yaml::from_str_multiple(&std::fs::read_to_string(dir.join("objects.yaml")).unwrap()).unwrap();
        let mut seen = Vec::new();
        for obj in &objects {
            let (group, kind) = target(&hc);
            let api_version = obj["apiVersion"].as_str().unwrap();
            assert_eq!(
                (api_version.rsplit_once('/').map_or("", |(g, _)| g), obj["kind"].as_str().unwrap()),
                (group, kind)
            );
            assert_eq!(obj["metadata"]["namespace"].as_str(), hc.metadata.namespace.as_deref(), "{}", dir.display());
            let expected: HealthStatus =
                serde_json::from_value(obj["metadata"]["annotations"][EXPECTED].clone()).expect("an expected health");
            let got = assess_with(&rules, obj);
            assert_eq!(got.status, expected, "{}: {} {:?}", dir.display(), obj["metadata"]["name"], got.message);
            seen.push(expected);
        }
        for status in [HealthStatus::Healthy, HealthStatus::Progressing, HealthStatus::Degraded] {
            assert!(seen.contains(&status), "{}: no {status:?} object", dir.display());
        }
    }
}
