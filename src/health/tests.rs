use serde_json::{Value, json};

use super::*;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AssessCase {
    name: String,
    status: HealthStatus,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    contains: Vec<String>,
    object: Value,
}

fn assess_cases() -> Vec<AssessCase> {
    crate::yaml::from_str_multiple(include_str!("../../testdata/health/assess.yaml")).unwrap()
}

#[test]
fn assess_table() {
    let cases = assess_cases();
    assert!(cases.len() >= 80, "{} cases", cases.len());
    let mut failures = Vec::new();
    for c in &cases {
        let got = assess(&c.object);
        let mut ok = got.status == c.status;
        if c.status == HealthStatus::Healthy {
            assert!(c.message.is_none() && c.contains.is_empty(), "{}: a Healthy case has no message", c.name);
            ok &= got.message.is_empty();
        } else {
            assert!(c.message.is_some() || !c.contains.is_empty(), "{}: say what the message is", c.name);
            ok &= c.message.as_ref().is_none_or(|m| *m == got.message);
            ok &= c.contains.iter().all(|f| got.message.contains(f.as_str()));
        }
        if !ok {
            failures.push(format!("{}: got {:?} {:?}", c.name, got.status, got.message));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn case_names_are_unique() {
    let mut names: Vec<String> = assess_cases().into_iter().map(|c| c.name).collect();
    let n = names.len();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), n);
}

/// Every dedicated kind gets every status it can get, and the generic rules too.
#[test]
fn the_table_covers_every_kind_and_outcome() {
    let cases = assess_cases();
    for (kind, statuses) in [
        ("Deployment", &[HealthStatus::Healthy, HealthStatus::Progressing, HealthStatus::Degraded][..]),
        ("StatefulSet", &[HealthStatus::Healthy, HealthStatus::Progressing]),
        ("DaemonSet", &[HealthStatus::Healthy, HealthStatus::Progressing]),
        ("Pod", &[HealthStatus::Healthy, HealthStatus::Progressing, HealthStatus::Degraded]),
        ("Job", &[HealthStatus::Healthy, HealthStatus::Progressing, HealthStatus::Degraded]),
        ("Widget", &[HealthStatus::Healthy, HealthStatus::Progressing, HealthStatus::Degraded]),
    ] {
        for status in statuses {
            assert!(
                cases.iter().any(|c| c.object["kind"] == kind && c.status == *status),
                "no {status:?} case for {kind}"
            );
        }
    }
}

#[test]
fn the_group_comes_from_the_api_version() {
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"generation": 1},
                            "spec": {"replicas": 2}, "status": {"observedGeneration": 1}});
    assert_eq!(assess(&deployment).message, "0 of 2 replicas updated");
    let mut other = deployment.clone();
    other["apiVersion"] = json!("example.com/v1");
    assert_eq!(assess(&other), Assessment::healthy());
    let mut core = deployment;
    core["apiVersion"] = json!("v1");
    assert_eq!(assess(&core), Assessment::healthy());
    // A core Pod, not a Pod of some other group.
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "status": {"phase": "Failed"}});
    assert_eq!(assess(&pod).status, HealthStatus::Degraded);
    let mut crd_pod = pod;
    crd_pod["apiVersion"] = json!("example.com/v1");
    assert_eq!(assess(&crd_pod).status, HealthStatus::Healthy);
}

#[test]
fn a_value_that_is_not_an_object_is_unknown() {
    for v in [json!(null), json!("Deployment"), json!([1, 2])] {
        assert_eq!(assess(&v), Assessment { status: HealthStatus::Unknown, message: "not a Kubernetes object".into() });
    }
}

#[test]
fn assessment_messages_are_bounded_on_a_character_boundary() {
    let long = "é".repeat(2 * MAX_MESSAGE);
    let obj = json!({"apiVersion": "example.com/v1", "kind": "Widget",
                     "status": {"conditions": [{"type": "Stalled", "status": "True", "reason": "R", "message": long}]}});
    let got = assess(&obj);
    assert_eq!(got.status, HealthStatus::Degraded);
    assert!(got.message.len() <= MAX_MESSAGE && got.message.len() > MAX_MESSAGE - 8, "{}", got.message.len());
    assert!(got.message.starts_with("stalled (R): éé") && got.message.ends_with("é…"), "{}", got.message);
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Resource {
    #[serde(default)]
    group: String,
    kind: String,
    #[serde(default)]
    namespace: String,
    name: String,
    #[serde(default)]
    live: Option<Value>,
    #[serde(default)]
    pods: Vec<Value>,
    #[serde(default = "yes")]
    pods_degrade: bool,
}

fn yes() -> bool {
    true
}

impl Resource {
    fn observed(&self) -> Observed<'_> {
        Observed {
            group: &self.group,
            kind: &self.kind,
            namespace: &self.namespace,
            name: &self.name,
            live: self.live.as_ref(),
            pods: &self.pods,
            pods_degrade: self.pods_degrade,
            check: None,
        }
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SummaryCase {
    name: String,
    resources: Vec<Resource>,
    status: HealthStatus,
    counts: [i32; 3],
    message: String,
    unhealthy: Vec<String>,
}

#[test]
fn summarize_table() {
    let cases: Vec<SummaryCase> = crate::yaml::from_str(include_str!("../../testdata/health/summarize.yaml")).unwrap();
    assert!(cases.len() >= 8);
    for c in cases {
        let observed: Vec<Observed<'_>> = c.resources.iter().map(Resource::observed).collect();
        let s = summarize(&observed);
        assert_eq!(s.status, c.status, "{}", c.name);
        assert_eq!([s.healthy, s.progressing, s.degraded], c.counts, "{}", c.name);
        assert_eq!(s.message, c.message, "{}", c.name);
        let keys: Vec<&str> = s.unhealthy.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, c.unhealthy, "{}", c.name);
        assert!(s.unhealthy.iter().all(|(_, a)| a.status != HealthStatus::Healthy && !a.message.is_empty()));
    }
}

#[test]
fn a_missing_resource_is_degraded_with_its_identity() {
    let s = summarize(&[Observed {
        group: "",
        kind: "ConfigMap",
        namespace: "web",
        name: "x",
        live: None,
        pods: &[],
        pods_degrade: true,
        check: None,
    }]);
    assert_eq!(s.status, HealthStatus::Degraded);
    assert_eq!(
        s.unhealthy,
        [(
            "ConfigMap web/x".to_string(),
            Assessment { status: HealthStatus::Degraded, message: "ConfigMap web/x is missing".into() }
        )]
    );
}

fn crashing_pod(i: usize, message: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("p{i}")},
           "status": {"phase": "Running", "containerStatuses": [{"name": "c", "restartCount": 1,
               "state": {"waiting": {"reason": "ImagePullBackOff", "message": message}}}]}})
}

#[test]
fn the_summary_message_is_bounded_and_counts_the_rest() {
    for (n, detail) in [(3, "x".repeat(600)), (40, "ü".repeat(900)), (5, "y".repeat(200)), (7, String::new())] {
        let pods: Vec<Value> = (0..n).map(|i| crashing_pod(i, &detail)).collect();
        let names: Vec<String> = (0..n).map(|i| format!("p{i:02}")).collect();
        let observed: Vec<Observed<'_>> = pods
            .iter()
            .zip(&names)
            .map(|(p, name)| Observed {
                group: "",
                kind: "Pod",
                namespace: "web",
                name,
                live: Some(p),
                pods: &[],
                pods_degrade: true,
                check: None,
            })
            .collect();
        let s = summarize(&observed);
        assert_eq!((s.status, s.degraded, s.unhealthy.len()), (HealthStatus::Degraded, n as i32, n));
        assert!(s.message.len() <= MAX_MESSAGE, "{} bytes", s.message.len());
        let named = s.message.matches("Pod web/p").count();
        assert!((1..=MAX_NAMED).contains(&named), "{}", s.message);
        assert!(s.message.starts_with("Pod web/p00: container c is in ImagePullBackOff"), "{}", s.message);
        if named < n {
            assert!(s.message.ends_with(&format!("; and {} more", n - named)), "{}", s.message);
        } else {
            assert!(!s.message.contains("more"), "{}", s.message);
        }
        if detail.is_empty() {
            assert_eq!(named, MAX_NAMED.min(n));
        }
    }
}

#[test]
fn the_summary_is_the_same_in_any_input_order() {
    let cases: Vec<SummaryCase> = crate::yaml::from_str(include_str!("../../testdata/health/summarize.yaml")).unwrap();
    for c in cases {
        let mut observed: Vec<Observed<'_>> = c.resources.iter().map(Resource::observed).collect();
        let reference = summarize(&observed);
        for _ in 0..observed.len() {
            observed.rotate_left(1);
            observed.reverse();
            assert_eq!(summarize(&observed), reference, "{}", c.name);
        }
    }
}

#[test]
fn truncation_keeps_characters_whole() {
    let mut s = "aé".repeat(10);
    truncate(&mut s, 8);
    assert_eq!(s, "aéa…");
    let mut short = "abc".to_string();
    truncate(&mut short, 3);
    assert_eq!(short, "abc");
}

/// A HealthCheck replaces the kind's rules in the summary, Pods as evidence included; invalid
/// rules make the object Unknown, counted as Progressing, never Healthy.
#[test]
fn a_healthcheck_decides_in_the_summary() {
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "api", "generation": 1},
                            "spec": {"replicas": 2}, "status": {"observedGeneration": 1, "phase": "Serving"}});
    let pods = [crashing_pod(0, "Back-off pulling image")];
    let observed = |check| Observed {
        group: "apps",
        kind: "Deployment",
        namespace: "web",
        name: "api",
        live: Some(&deployment),
        pods: &pods,
        pods_degrade: true,
        check,
    };
    assert_eq!(summarize(&[observed(None)]).status, HealthStatus::Degraded);
    let serving = cel::Rules::compile("deployments", "status.phase == 'Serving'", None, None);
    let s = summarize(&[observed(Some(&serving))]);
    assert_eq!((s.status, s.healthy), (HealthStatus::Healthy, 1));
    let invalid = cel::Rules::compile("deployments", "status.phase ==", None, None);
    let s = summarize(&[observed(Some(&invalid))]);
    assert_eq!((s.status, s.progressing), (HealthStatus::Progressing, 1));
    assert!(
        s.message.starts_with("Deployment web/api: HealthCheck deployments is invalid: current: "),
        "{}",
        s.message
    );
    assert_eq!(s.unhealthy[0].1.status, HealthStatus::Unknown);
}

#[test]
fn pods_are_evidence_only_of_a_workload_that_wants_some_and_was_observed() {
    // (case, workload, its Pods may explain)
    let cases = [
        ("observed, wants 2", json!({"spec": {"replicas": 2}, "status": {"observedGeneration": 1}}), true),
        ("a DaemonSet (no replicas), observed", json!({"spec": {}, "status": {"observedGeneration": 3}}), true),
        ("wants none", json!({"spec": {"replicas": 0}, "status": {"observedGeneration": 1}}), false),
        ("just created: no status", json!({"spec": {"replicas": 2}}), false),
        ("status without observedGeneration", json!({"spec": {"replicas": 2}, "status": {"replicas": 0}}), false),
    ];
    for (case, workload, want) in cases {
        assert_eq!(pods_may_explain(&workload), want, "{case}");
    }
}
