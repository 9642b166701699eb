//! Replays, at the function level, the validation and defaulting steps of recordings 03, 12,
//! 13, 15, 19, 20, 21, 22, 24, 25, 29, 30, 31. The recordings' `<ns>` becomes the valid name
//! [`NS`] on both sides, `<run>` the valid [`RUN`].

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::*;

/// A valid namespace name standing for the recordings' `<ns>`.
const NS: &str = "conf-test";
/// A valid run id standing for the recordings' `<run>`.
const RUN: &str = "r1a2b";

fn load(dir: &str, case: &str) -> Value {
    let path = format!("{}/conformance/{dir}/{case}.json", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).expect("file")).expect("json")
}

/// A recorded exchange, `<ns>` replaced by [`NS`].
fn recorded(case: &str, step: &str) -> Value {
    let rec = load("recorded", case);
    let e = rec["exchanges"].as_array().and_then(|a| a.iter().find(|e| e["step"] == step)).expect("step");
    let text = serde_json::to_string(e).expect("json").replace("<ns>", NS).replace("<run>", RUN);
    serde_json::from_str(&text).expect("json")
}

/// The request body of a case step, `${...}` substituted as normalized recordings show them.
fn request(case: &str, step: &str) -> Value {
    let c = load("cases", case);
    let s = c["steps"].as_array().and_then(|a| a.iter().find(|s| s["name"] == step)).expect("step");
    let text = serde_json::to_string(&s["body"])
        .expect("body")
        .replace("${ns}", NS)
        .replace("${run}", RUN)
        .replace("${node}", &format!("node-{RUN}"))
        .replace("${pv}", &format!("pv-{RUN}"));
    serde_json::from_str(&text).expect("json")
}

fn with_ns(mut obj: Value) -> Value {
    obj["metadata"]["namespace"] = json!(NS);
    obj
}

fn api_version(obj: &Value) -> String {
    obj["apiVersion"].as_str().unwrap_or("v1").to_string()
}

/// The create pipeline up to validation (no service allocation).
fn create(obj: Value) -> (Value, Vec<Cause>) {
    let av = api_version(&obj);
    let kind = obj["kind"].as_str().unwrap_or("").to_string();
    let mut obj = obj;
    check_decode(&av, &kind, &obj).expect("decodes");
    default_object(&av, &kind, &mut obj);
    prepare_for_create(&av, &kind, &mut obj, "<time>");
    let causes = validate_create(&av, &kind, &obj);
    (obj, causes)
}

fn invalid_body(obj: &Value, causes: &[Cause]) -> Value {
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    invalid_error(&api_version(obj), obj["kind"].as_str().unwrap_or(""), name, causes).body().expect("status")
}

fn assert_invalid_create(case: &str, step: &str, obj: Value) {
    let (obj, causes) = create(obj);
    assert!(!causes.is_empty(), "{case}/{step}: expected causes");
    assert_eq!(invalid_body(&obj, &causes), recorded(case, step)["body"], "{case}/{step}");
}

/// Drops what the store and field manager add.
fn strip_meta(mut v: Value) -> Value {
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in ["managedFields", "uid", "resourceVersion", "creationTimestamp", "namespace"] {
            m.remove(k);
        }
    }
    v
}

// ------------------------------------------------------------------------------------ 22, 21

#[test]
fn recorded_invalid_names_keys_and_labels() {
    for step in [
        "invalid-name-uppercase",
        "missing-name",
        "invalid-data-key",
        "invalid-label-value",
        "multiple-validation-errors",
    ] {
        assert_invalid_create("22-errors", step, with_ns(request("22-errors", step)));
    }
}

#[test]
fn recorded_namespace_defaults_and_invalid_names() {
    let (ns, causes) = create(request("21-namespaces", "create"));
    assert!(causes.is_empty(), "{causes:?}");
    assert_eq!(strip_meta(ns), strip_meta(recorded("21-namespaces", "create")["body"].clone()));
    for step in ["create-invalid-name", "create-too-long-name"] {
        assert_invalid_create("21-namespaces", step, request("21-namespaces", step));
    }
}

#[test]
fn recorded_namespace_label_is_forced_on_update() {
    let old = recorded("21-namespaces", "get")["body"].clone();
    let mut obj = old.clone();
    obj["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!("spoofed");
    default_object("v1", "Namespace", &mut obj);
    prepare_for_update("v1", "Namespace", &mut obj, &old);
    assert!(validate_update("v1", "Namespace", &obj, &old).is_empty());
    assert_eq!(obj, recorded("21-namespaces", "metadata-name-label-is-enforced")["body"]);
}

#[test]
fn recorded_namespace_terminating_forbidden() {
    let err = namespace_terminating_error("", "configmaps", "late", &format!("{NS}-x"));
    assert_eq!(err.body().expect("body"), recorded("21-namespaces", "create-in-terminating-namespace")["body"]);
}

// ------------------------------------------------------------------------------------ 03, 16

#[test]
fn recorded_configmap_immutability() {
    let old = recorded("03-configmap-crud", "create-immutable")["body"].clone();
    let mut obj = with_ns(request("03-configmap-crud", "update-immutable-data"));
    default_object("v1", "ConfigMap", &mut obj);
    prepare_for_update("v1", "ConfigMap", &mut obj, &old);
    let causes = validate_update("v1", "ConfigMap", &obj, &old);
    assert_eq!(invalid_body(&obj, &causes), recorded("03-configmap-crud", "update-immutable-data")["body"]);

    let mut labels_only = old.clone();
    labels_only["metadata"]["labels"] = json!({"frozen": "yes"});
    assert!(validate_update("v1", "ConfigMap", &labels_only, &old).is_empty());

    let (cm, causes) = create(with_ns(request("03-configmap-crud", "create-immutable")));
    assert!(causes.is_empty());
    assert_eq!(strip_meta(cm), strip_meta(old));
}

#[test]
fn recorded_no_new_finalizers_while_deleting() {
    let mut old = recorded("03-configmap-crud", "create-immutable")["body"].clone();
    old["metadata"]["deletionTimestamp"] = json!("<time>");
    old["metadata"]["finalizers"] = json!(["example.com/hold"]);
    old["immutable"] = json!(false);
    let mut obj = old.clone();
    obj["metadata"]["finalizers"] = json!(["example.com/hold", "example.com/another"]);
    obj["metadata"]["name"] = json!("held");
    old["metadata"]["name"] = json!("held");
    let causes = validate_update("v1", "ConfigMap", &obj, &old);
    let want = load("recorded", "16-finalizers-deletion")["exchanges"]
        .as_array()
        .and_then(|a| {
            a.iter().find(|e| e["step"] == "watch-finalized-deletion/add-finalizer-while-terminating").cloned()
        })
        .expect("step");
    let want: Value =
        serde_json::from_str(&serde_json::to_string(&want).expect("json").replace("<ns>", NS)).expect("json");
    assert_eq!(invalid_body(&obj, &causes), want["body"]);
}

// ------------------------------------------------------------------------------------ 19

#[test]
fn recorded_lease_validation_and_microtime() {
    for step in ["invalid-duration", "invalid-negative-transitions"] {
        assert_invalid_create("19-lease", step, with_ns(request("19-lease", step)));
    }
    for step in
        ["takeover-seconds-precision-rejected", "takeover-millisecond-precision-rejected", "invalid-time-format"]
    {
        let obj = request("19-lease", step);
        let err = check_decode("coordination.k8s.io/v1", "Lease", &obj).expect_err(step);
        assert_eq!(err.body().expect("body"), recorded("19-lease", step)["body"], "{step}");
    }
    let (lease, causes) = create(with_ns(request("19-lease", "create")));
    assert!(causes.is_empty());
    assert_eq!(lease["spec"]["renewTime"], "2026-01-01T00:00:05.123456Z");
    let mut shifted = json!({"spec": {"renewTime": "2026-01-01T01:00:00.000001+01:00"}});
    default_object("coordination.k8s.io/v1", "Lease", &mut shifted);
    assert_eq!(shifted["spec"]["renewTime"], "2026-01-01T00:00:00.000001Z");
}

// ------------------------------------------------------------------------------------ 20

#[test]
fn recorded_event_validation() {
    let mut generated = with_ns(request("20-events", "events-v1-generate-name-trailing-dot-invalid"));
    generated["metadata"]["name"] = json!("subject.k2x9q");
    let (obj, causes) = create(generated);
    let got = serde_json::to_string(&invalid_body(&obj, &causes)).expect("json").replace("k2x9q", "<suffix>");
    let want = recorded("20-events", "events-v1-generate-name-trailing-dot-invalid")["body"].clone();
    assert_eq!(serde_json::from_str::<Value>(&got).expect("json"), want);
    for step in ["events-v1-missing-event-time", "events-v1-bad-type"] {
        assert_invalid_create("20-events", step, with_ns(request("20-events", step)));
    }
    let err = check_decode(EVENTS_V1, "Event", &request("20-events", "events-v1-event-time-without-micros"))
        .expect_err("micro");
    assert_eq!(err.body().expect("body"), recorded("20-events", "events-v1-event-time-without-micros")["body"]);
    for step in ["create-core-event", "create-events-v1-event", "create-events-v1-generate-name"] {
        let mut obj = with_ns(request("20-events", step));
        if obj["metadata"]["name"].is_null() {
            obj["metadata"]["name"] = json!("subject-abcde");
        }
        let (_, causes) = create(obj);
        assert!(causes.is_empty(), "{step}: {causes:?}");
    }
}

#[test]
fn recorded_event_api_conversion() {
    let core = recorded("20-events", "create-core-event")["body"].clone();
    assert_eq!(event_for_version(&core, EVENTS_V1), recorded("20-events", "get-core-as-events-v1")["body"]);
    assert_eq!(event_for_version(&core, "v1"), core);
    let new = recorded("20-events", "create-events-v1-event")["body"].clone();
    let stored = events_v1_to_core(&new);
    assert_eq!(event_for_version(&stored, "v1"), recorded("20-events", "get-events-v1-as-core")["body"]);
    assert_eq!(event_for_version(&stored, EVENTS_V1), new);
    assert_eq!(event_for_version(&new, EVENTS_V1), new);
    // List items (no kind/apiVersion on the real list items, same fields otherwise).
    let generated = recorded("20-events", "create-events-v1-generate-name")["body"].clone();
    let as_core = event_for_version(&events_v1_to_core(&generated), "v1");
    let list = recorded("20-events", "list-core")["body"]["items"][0].clone();
    let mut as_core_item = as_core;
    as_core_item.as_object_mut().map(|o| {
        o.remove("kind");
        o.remove("apiVersion")
    });
    assert_eq!(as_core_item, list);
}

#[test]
fn event_update_rules() {
    let old = recorded("20-events", "create-events-v1-event")["body"].clone();
    let mut obj = old.clone();
    obj["series"] = json!({"count": 2, "lastObservedTime": "2026-01-01T00:00:08.000000Z"});
    assert!(validate_update(EVENTS_V1, "Event", &obj, &old).is_empty());
    obj["note"] = json!("changed");
    let causes = validate_update(EVENTS_V1, "Event", &obj, &old);
    assert_eq!(causes.len(), 1);
    assert_eq!(causes[0].field, "note");
    assert_eq!(causes[0].message, "Invalid value: \"changed\": field is immutable");
}

// ------------------------------------------------------------------------------------ 24

#[test]
fn recorded_secrets() {
    let (s, causes) = create(with_ns(request("24-secrets-services", "secret-string-data")));
    assert!(causes.is_empty());
    assert_eq!(
        strip_meta(s.clone()),
        strip_meta(recorded("24-secrets-services", "secret-string-data")["body"].clone())
    );

    let mut put = with_ns(request("24-secrets-services", "secret-string-data-wins"));
    default_object("v1", "Secret", &mut put);
    prepare_for_update("v1", "Secret", &mut put, &s);
    assert!(validate_update("v1", "Secret", &put, &s).is_empty());
    assert_eq!(
        strip_meta(put.clone()),
        strip_meta(recorded("24-secrets-services", "secret-string-data-wins")["body"].clone())
    );

    let err = check_decode("v1", "Secret", &request("24-secrets-services", "secret-bad-base64")).expect_err("b64");
    assert_eq!(err.body().expect("body"), recorded("24-secrets-services", "secret-bad-base64")["body"]);

    assert_invalid_create(
        "24-secrets-services",
        "secret-tls-missing-keys",
        with_ns(request("24-secrets-services", "secret-tls-missing-keys")),
    );

    let mut retyped = put.clone();
    retyped["type"] = json!("example.com/other");
    let causes = validate_update("v1", "Secret", &retyped, &put);
    assert_eq!(invalid_body(&retyped, &causes), recorded("24-secrets-services", "secret-type-immutable")["body"]);

    let (applied, causes) = create(with_ns(request("24-secrets-services", "secret-apply-string-data")));
    assert!(causes.is_empty());
    assert_eq!(
        strip_meta(applied),
        strip_meta(recorded("24-secrets-services", "secret-apply-string-data")["body"].clone())
    );
}

fn create_service(obj: Value, used: &BTreeSet<String>, ports: &BTreeSet<i64>, seed: u64) -> Result<Value, Vec<Cause>> {
    let mut obj = obj;
    default_object("v1", "Service", &mut obj);
    allocate_service(&mut obj, None, used, ports, seed)?;
    prepare_for_create("v1", "Service", &mut obj, "<time>");
    let causes = validate_create("v1", "Service", &obj);
    if causes.is_empty() { Ok(obj) } else { Err(causes) }
}

/// Compares a Service with the recorded one, cluster IPs and node ports by type only.
fn assert_service_like(got: &Value, want: &Value) {
    let mut got = strip_meta(got.clone());
    let mut want = strip_meta(want.clone());
    for v in [&mut got, &mut want] {
        if let Some(ip) = v["spec"]["clusterIP"].as_str()
            && ip != "None"
        {
            v["spec"]["clusterIP"] = json!("<ip>");
            v["spec"]["clusterIPs"] = json!(["<ip>"]);
        }
        if let Some(ps) = v["spec"]["ports"].as_array_mut() {
            for p in ps {
                if p.get("nodePort").is_some() {
                    p["nodePort"] = json!(0);
                }
            }
        }
    }
    assert_eq!(got, want);
}

#[test]
fn recorded_services() {
    let none = BTreeSet::new();
    let nports = BTreeSet::new();
    let web =
        create_service(with_ns(request("24-secrets-services", "service-create")), &none, &nports, 7).expect("valid");
    assert_service_like(&web, &recorded("24-secrets-services", "service-create")["body"]);
    let ip = web["spec"]["clusterIP"].as_str().expect("ip").to_string();
    assert!(ip.starts_with("10.") && ip.parse::<std::net::Ipv4Addr>().is_ok());

    // PUT without clusterIP keeps it.
    let mut put = with_ns(request("24-secrets-services", "service-update-without-cluster-ip-keeps-it"));
    default_object("v1", "Service", &mut put);
    allocate_service(&mut put, Some(&web), &none, &nports, 8).expect("alloc");
    prepare_for_update("v1", "Service", &mut put, &web);
    assert!(validate_update("v1", "Service", &put, &web).is_empty());
    assert_eq!(put["spec"]["clusterIP"], json!(ip));
    assert_service_like(&put, &recorded("24-secrets-services", "service-update-without-cluster-ip-keeps-it")["body"]);

    // Changing it is rejected.
    let mut changed = put.clone();
    changed["spec"]["clusterIP"] = json!("10.96.250.250");
    changed["spec"]["clusterIPs"] = json!(["10.96.250.250"]);
    allocate_service(&mut changed, Some(&put), &none, &nports, 9).expect("alloc");
    prepare_for_update("v1", "Service", &mut changed, &put);
    let causes = validate_update("v1", "Service", &changed, &put);
    assert_eq!(
        invalid_body(&changed, &causes),
        recorded("24-secrets-services", "service-change-cluster-ip-rejected")["body"]
    );

    let headless =
        create_service(with_ns(request("24-secrets-services", "service-headless")), &none, &nports, 1).expect("valid");
    assert_service_like(&headless, &recorded("24-secrets-services", "service-headless")["body"]);

    let np =
        create_service(with_ns(request("24-secrets-services", "service-nodeport")), &none, &nports, 2).expect("valid");
    assert_service_like(&np, &recorded("24-secrets-services", "service-nodeport")["body"]);
    let port = np["spec"]["ports"][0]["nodePort"].as_i64().expect("nodePort");
    assert!((30000..=32767).contains(&port));

    for step in ["service-invalid-port", "service-duplicate-port-names"] {
        let obj = with_ns(request("24-secrets-services", step));
        let causes = create_service(obj.clone(), &none, &nports, 3).expect_err(step);
        assert_eq!(invalid_body(&obj, &causes), recorded("24-secrets-services", step)["body"], "{step}");
    }
}

#[test]
fn service_allocation_conflicts() {
    let used: BTreeSet<String> = ["10.96.0.10".to_string()].into();
    let mut svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": NS},
        "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 53, "nodePort": 30053}], "type": "NodePort"}});
    default_object("v1", "Service", &mut svc);
    let ports: BTreeSet<i64> = [30053].into();
    let causes = allocate_service(&mut svc, None, &used, &ports, 1).expect_err("conflicts");
    let msgs: Vec<String> = causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect();
    assert_eq!(
        msgs,
        vec![
            "spec.clusterIPs: Invalid value: [\"10.96.0.10\"]: failed to allocate IP 10.96.0.10: provided IP is already allocated",
            "spec.ports[0].nodePort: Invalid value: 30053: provided port is already allocated",
        ]
    );
    // Deterministic and collision-free.
    assert_eq!(allocate_cluster_ip(&BTreeSet::new(), 42), allocate_cluster_ip(&BTreeSet::new(), 42));
    let first = allocate_cluster_ip(&BTreeSet::new(), 42).expect("ip");
    let taken: BTreeSet<String> = [first.clone()].into();
    assert_ne!(allocate_cluster_ip(&taken, 42), Some(first));
    assert_eq!(
        service_cluster_ips(&json!({"spec": {"clusterIP": "None", "clusterIPs": ["None"]}})),
        Vec::<String>::new()
    );
}

// ------------------------------------------------------------------------------------ workloads

fn assert_created_like(case: &str, step: &str, obj: Value) {
    let (got, causes) = create(obj);
    assert!(causes.is_empty(), "{case}/{step}: {causes:?}");
    let want = recorded(case, step)["body"].clone();
    assert_eq!(got["spec"], want["spec"], "{case}/{step} spec");
    assert_eq!(got["status"], want["status"], "{case}/{step} status");
    assert_eq!(got["metadata"].get("generation"), want["metadata"].get("generation"), "{case}/{step} generation");
    assert_eq!(got["metadata"].get("labels"), want["metadata"].get("labels"), "{case}/{step} labels");
    assert_eq!(got["metadata"].get("annotations"), want["metadata"].get("annotations"), "{case}/{step} annotations");
}

#[test]
fn recorded_workload_defaults() {
    assert_created_like("13-patch-types", "create-deployment", with_ns(request("13-patch-types", "create-deployment")));
    assert_created_like("12-ssa-deployment", "a-creates", with_ns(request("12-ssa-deployment", "a-creates")));
    assert_created_like(
        "15-status-subresource",
        "create-deployment",
        with_ns(request("15-status-subresource", "create-deployment")),
    );
    assert_created_like(
        "30-statefulset-daemonset",
        "create-statefulset",
        with_ns(request("30-statefulset-daemonset", "create-statefulset")),
    );
    assert_created_like(
        "30-statefulset-daemonset",
        "create-daemonset",
        with_ns(request("30-statefulset-daemonset", "create-daemonset")),
    );
    assert_created_like(
        "25-node-and-pod-lifecycle",
        "create-pod",
        with_ns(request("25-node-and-pod-lifecycle", "create-pod")),
    );
    let uid = "0f0e4f7e-1111-4222-8333-444455556666";
    let mut job = with_ns(request("29-job-lifecycle", "create-job"));
    job["metadata"]["uid"] = json!(uid);
    let (got, causes) = create(job);
    assert!(causes.is_empty(), "{causes:?}");
    let got: Value =
        serde_json::from_str(&serde_json::to_string(&got).expect("json").replace(uid, "<uid>")).expect("json");
    let want = recorded("29-job-lifecycle", "create-job")["body"].clone();
    assert_eq!(got["spec"], want["spec"]);
    assert_eq!(got["status"], want["status"]);
    assert_eq!(got["metadata"]["labels"], want["metadata"]["labels"]);
    assert_eq!(got["metadata"]["generation"], want["metadata"]["generation"]);
    assert_created_like(
        "31-persistent-volume-binding",
        "create-claim",
        with_ns(request("31-persistent-volume-binding", "create-claim")),
    );
    assert_created_like(
        "31-persistent-volume-binding",
        "create-volume",
        request("31-persistent-volume-binding", "create-volume"),
    );
}

#[test]
fn recorded_generation_rules() {
    let old = recorded("15-status-subresource", "create-deployment")["body"].clone();
    let mut labels = old.clone();
    labels["metadata"]["labels"] = json!({"x": "y"});
    labels["status"] = json!({"collisionCount": 9});
    prepare_for_update("apps/v1", "Deployment", &mut labels, &old);
    assert_eq!(labels["metadata"]["generation"], 1);
    assert_eq!(labels["status"], old["status"]);
    let mut scaled = old.clone();
    scaled["spec"]["replicas"] = json!(2);
    prepare_for_update("apps/v1", "Deployment", &mut scaled, &old);
    assert_eq!(scaled["metadata"]["generation"], 2);
    assert!(validate_update("apps/v1", "Deployment", &scaled, &old).is_empty());
}

#[test]
fn image_pull_policy_defaults() {
    for (image, want) in [
        ("nginx", "Always"),
        ("nginx:latest", "Always"),
        ("registry:5000/app", "Always"),
        ("registry:5000/app:1.0", "IfNotPresent"),
        ("app@sha256:abc", "IfNotPresent"),
    ] {
        let mut pod = json!({"spec": {"containers": [{"name": "c", "image": image}]}});
        default_object("v1", "Pod", &mut pod);
        assert_eq!(pod["spec"]["containers"][0]["imagePullPolicy"], want, "{image}");
    }
}

#[test]
fn go_time_and_base64_edge_cases() {
    use super::decode::{RFC3339, RFC3339_MICRO, decode_base64, parse_go_time};
    assert!(parse_go_time("2026-02-29T00:00:00Z", RFC3339).is_err());
    assert_eq!(
        parse_go_time("2026-13-01T00:00:00Z", RFC3339).expect_err("month"),
        "parsing time \"2026-13-01T00:00:00Z\": month out of range"
    );
    assert_eq!(
        parse_go_time("2026-01-01T00:00:00.000000Zx", RFC3339_MICRO).expect_err("extra"),
        "parsing time \"2026-01-01T00:00:00.000000Zx\": extra text: \"x\""
    );
    assert_eq!(
        parse_go_time("2026-01-01T00:00:00.5Z", RFC3339).expect("frac").format_seconds(),
        "2026-01-01T00:00:00Z"
    );
    assert_eq!(decode_base64("ZXh0cmE=").expect("ok"), b"extra");
    assert_eq!(decode_base64("abc").expect_err("short"), "illegal base64 data at input byte 0");
    assert_eq!(decode_base64("YQ=").expect_err("pad"), "illegal base64 data at input byte 3");
    assert_eq!(decode_base64("YQ==\nYQ==").expect_err("trailing"), "illegal base64 data at input byte 5");
    assert_eq!(decode_base64("YW\nJj").expect("newline"), b"abc");
}

#[test]
fn update_duplicates_metadata_causes_like_the_real_server() {
    let old = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": NS}});
    let obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": NS, "labels": {"k": "has space"}}});
    let causes = validate_update("v1", "ConfigMap", &obj, &old);
    assert_eq!(causes.len(), 4, "{causes:?}");
    let body = invalid_body(&obj, &causes);
    assert!(!body["message"].as_str().unwrap_or("").starts_with("ConfigMap \"a\" is invalid: ["));
}

#[test]
fn bad_input_does_not_panic() {
    let odd = [
        json!(null),
        json!([1, 2]),
        json!("x"),
        json!({"metadata": "x", "spec": 3, "data": [1]}),
        json!({"metadata": {"name": "é-", "generateName": "é-", "labels": {"a": 1}}, "spec": {"ports": "x", "clusterIPs": 5}}),
    ];
    for kind in ["ConfigMap", "Secret", "Service", "Namespace", "Pod", "Deployment", "Event", "Lease", "Job", "Widget"]
    {
        for av in ["v1", "apps/v1", "batch/v1", EVENTS_V1, "coordination.k8s.io/v1", "example.com/v1"] {
            for o in &odd {
                let mut obj = o.clone();
                let _ = check_decode(av, kind, &obj);
                default_object(av, kind, &mut obj);
                let _ = allocate_service(&mut obj, Some(o), &BTreeSet::new(), &BTreeSet::new(), 1);
                prepare_for_create(av, kind, &mut obj, "<time>");
                prepare_for_update(av, kind, &mut obj, o);
                let _ = validate_create(av, kind, &obj);
                let _ = validate_update(av, kind, &obj, o);
                let _ = event_for_version(&obj, EVENTS_V1);
            }
        }
    }
}
