use serde_json::{Value, json};

use super::diagnose::diagnose;
use super::*;

fn rref(group: &str, kind: &str, ns: Option<&str>, name: &str) -> ResourceRef {
    ResourceRef { group: group.into(), kind: kind.into(), namespace: ns.map(str::to_string), name: name.into() }
}

/// The identity of a live object (namespace `a` unless cluster-scoped kinds).
fn id_of(obj: &Value) -> ResourceRef {
    let (group, _) = refs::split_api_version(obj["apiVersion"].as_str().unwrap());
    let kind = obj["kind"].as_str().unwrap();
    let ns = obj["metadata"]["namespace"].as_str().or((kind != "PersistentVolume").then_some("a"));
    rref(group, kind, ns, obj["metadata"]["name"].as_str().unwrap())
}

fn observed(objects: Vec<Value>, absent: &[ResourceRef], managed: &[ResourceRef]) -> Observed {
    Observed {
        objects: objects.into_iter().map(|o| (id_of(&o), o)).collect(),
        absent: absent.iter().cloned().collect(),
        managed: managed.iter().cloned().collect(),
    }
}

fn deployment(spec: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "web", "namespace": "a", "uid": "d1"},
           "spec": {"selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}}, "spec": spec}}})
}

fn replica_set(spec: &Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
           "metadata": {"name": "web-1", "namespace": "a", "uid": "r1",
                        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "d1"}]},
           "spec": {"selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}}, "spec": spec}}})
}

fn pod(spec: &Value, status: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "web-1-x", "namespace": "a", "uid": "p1", "labels": {"app": "web"},
                        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "r1"}]},
           "spec": spec, "status": status})
}

fn account() -> Value {
    json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": "a"}})
}

/// A Deployment, its ReplicaSet and Pod with `spec` and the Pod's `status`.
fn workload(spec: Value, status: Value) -> Vec<Value> {
    vec![deployment(spec.clone()), replica_set(&spec), pod(&spec, status), account()]
}

fn web() -> ResourceRef {
    rref("apps", "Deployment", Some("a"), "web")
}

/// `(reason, message, path as "Edge Kind name[ missing]")`.
fn diagnosis_of(o: &Observed, starts: &[ResourceRef]) -> (String, String, Vec<String>) {
    let d = diagnose(&build(o), starts).expect("a diagnosis");
    let path = d
        .path
        .iter()
        .map(|s| {
            format!("{} {} {}{}", s.edge, s.resource.kind, s.resource.name, if s.missing { " missing" } else { "" })
        })
        .collect();
    (d.reason, d.message, path)
}

const OWNED_POD: [&str; 2] = ["Owns ReplicaSet web-1", "Owns Pod web-1-x"];

fn owned_then(last: &str) -> Vec<String> {
    let mut p: Vec<String> = OWNED_POD.iter().map(|s| s.to_string()).collect();
    p.push(last.to_string());
    p
}

fn waiting(reason: &str, message: &str) -> Value {
    json!({"phase": "Pending", "containerStatuses": [{"name": "app", "ready": false, "restartCount": 0,
           "state": {"waiting": {"reason": reason, "message": message}}}]})
}

#[test]
fn a_pod_mounting_a_missing_config_map() {
    let spec = json!({"containers": [{"name": "app"}], "volumes": [{"name": "f", "configMap": {"name": "flags"}}]});
    let o = observed(
        workload(spec, waiting("ContainerCreating", "")),
        &[rref("", "ConfigMap", Some("a"), "flags")],
        &[web()],
    );
    let (reason, message, path) = diagnosis_of(&o, &[web()]);
    assert_eq!(reason, "MissingConfigMap");
    assert_eq!(path, owned_then("Uses ConfigMap flags missing"));
    assert!(message.starts_with("ConfigMap a/flags, used by "), "{message}");
}

#[test]
fn a_secret_missing_from_env_from() {
    let spec = json!({"containers": [{"name": "app", "envFrom": [{"secretRef": {"name": "creds"}}]}]});
    let status = waiting("CreateContainerConfigError", "secret \"creds\" not found");
    let o = observed(workload(spec, status), &[rref("", "Secret", Some("a"), "creds")], &[web()]);
    let (reason, message, path) = diagnosis_of(&o, &[web()]);
    assert_eq!(reason, "MissingSecret");
    assert_eq!(path, owned_then("Uses Secret creds missing"));
    assert!(message.contains("CreateContainerConfigError: secret \"creds\" not found"), "{message}");
}

#[test]
fn an_image_that_cannot_be_pulled() {
    let spec = json!({"containers": [{"name": "app", "image": "nope:1"}]});
    let o = observed(workload(spec, waiting("ImagePullBackOff", "Back-off pulling image \"nope:1\"")), &[], &[web()]);
    let (reason, message, path) = diagnosis_of(&o, &[web()]);
    assert_eq!((reason.as_str(), path), ("ImagePullBackOff", owned_then("x")[..2].to_vec()));
    assert_eq!(message, "container app of Pod a/web-1-x: ImagePullBackOff: Back-off pulling image \"nope:1\"");
}

#[test]
fn a_crash_loop_with_its_exit_code() {
    let spec = json!({"containers": [{"name": "app"}]});
    let status = json!({"phase": "Running", "containerStatuses": [{"name": "app", "ready": false, "restartCount": 4,
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
        "lastState": {"terminated": {"exitCode": 3, "reason": "Error"}}}]});
    let (reason, message, path) = diagnosis_of(&observed(workload(spec, status), &[], &[web()]), &[web()]);
    assert_eq!((reason.as_str(), path.len()), ("CrashLoopBackOff", 2));
    assert_eq!(
        message,
        "container app of Pod a/web-1-x is in CrashLoopBackOff (last exit code 3, reason Error, 4 restarts)"
    );
}

#[test]
fn an_unschedulable_pod() {
    let spec = json!({"containers": [{"name": "app"}]});
    let why = "0/1 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}.";
    let status = json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
        "reason": "Unschedulable", "message": why}]});
    let (reason, message, path) = diagnosis_of(&observed(workload(spec, status), &[], &[web()]), &[web()]);
    assert_eq!((reason.as_str(), path.len()), ("Unschedulable", 2));
    assert_eq!(message, format!("Pod a/web-1-x cannot be scheduled: Unschedulable: {why}"));
}

#[test]
fn an_unschedulable_pod_waiting_for_a_pending_claim_is_the_claim() {
    let spec = json!({"containers": [{"name": "app"}], "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]});
    let status = json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
        "reason": "Unschedulable", "message": "pod has unbound immediate PersistentVolumeClaims"}]});
    let mut objects = workload(spec, status);
    objects.push(
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": "a"},
                        "spec": {"resources": {"requests": {"storage": "1Gi"}}}, "status": {"phase": "Pending"}}),
    );
    let (reason, message, path) = diagnosis_of(&observed(objects, &[], &[web()]), &[web()]);
    assert_eq!(reason, "PendingClaim");
    assert_eq!(path, owned_then("Mounts PersistentVolumeClaim data"));
    assert!(message.starts_with("PersistentVolumeClaim a/data is Pending (no StorageClass"), "{message}");
}

fn service() -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "a"},
           "spec": {"selector": {"app": "web"}}})
}

fn slice(ready: bool) -> Value {
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
           "metadata": {"name": "web-abc", "namespace": "a", "labels": {"kubernetes.io/service-name": "web"}},
           "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": ready}}]})
}

#[test]
fn a_service_selecting_no_ready_pods() {
    let spec = json!({"containers": [{"name": "app"}]});
    let status = json!({"phase": "Running", "containerStatuses": [{"name": "app", "ready": false, "restartCount": 0,
        "state": {"running": {}}}]});
    let mut objects = workload(spec, status);
    objects.extend([service(), slice(false)]);
    let svc = rref("", "Service", Some("a"), "web");
    let o = observed(objects.clone(), &[], &[web(), svc.clone()]);
    let (reason, message, path) = diagnosis_of(&o, &[web(), svc.clone()]);
    assert_eq!((reason.as_str(), path), ("NoReadyEndpoints", vec![]));
    assert_eq!(message, "Service a/web has no ready endpoints: it selects 1 Pod, not ready");
    // A ready endpoint: no evidence at all.
    objects.pop();
    objects.push(slice(true));
    assert_eq!(diagnose(&build(&observed(objects, &[], &[web(), svc.clone()])), &[web(), svc]), None);
}

#[test]
fn an_ingress_routing_to_a_missing_service() {
    let ingress = json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "web", "namespace": "a"},
        "spec": {"rules": [{"http": {"paths": [{"path": "/", "backend": {"service": {"name": "api"}}}]}}]}});
    let ing = rref("networking.k8s.io", "Ingress", Some("a"), "web");
    let o = observed(vec![ingress], &[rref("", "Service", Some("a"), "api")], std::slice::from_ref(&ing));
    let (reason, message, path) = diagnosis_of(&o, &[ing]);
    assert_eq!((reason.as_str(), path), ("MissingService", vec!["Routes Service api missing".to_string()]));
    assert_eq!(message, "Service a/api, routed to by Ingress.networking.k8s.io a/web, does not exist");
}

#[test]
fn an_autoscaler_scaling_a_missing_deployment() {
    let hpa = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "web", "namespace": "a"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "maxReplicas": 3}});
    let h = rref("autoscaling", "HorizontalPodAutoscaler", Some("a"), "web");
    let o = observed(vec![hpa], &[web()], std::slice::from_ref(&h));
    let (reason, _, path) = diagnosis_of(&o, &[h]);
    assert_eq!((reason.as_str(), path), ("MissingDeployment", vec!["Scales Deployment web missing".to_string()]));
}

#[test]
fn a_failed_job() {
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "migrate", "namespace": "a", "uid": "j1"},
        "spec": {"selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "j1"}}, "template": {"spec": {"containers": [{"name": "m"}]}}},
        "status": {"failed": 2, "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                   "message": "Job has reached the specified backoff limit"}]}});
    let j = rref("batch", "Job", Some("a"), "migrate");
    let (reason, message, path) = diagnosis_of(&observed(vec![job, account()], &[], std::slice::from_ref(&j)), &[j]);
    assert_eq!((reason.as_str(), path), ("JobFailed", vec![]));
    assert_eq!(
        message,
        "Job.batch a/migrate failed: BackoffLimitExceeded: Job has reached the specified backoff limit"
    );
}

#[test]
fn optional_references_are_never_evidence() {
    let spec =
        json!({"containers": [{"name": "app", "envFrom": [{"configMapRef": {"name": "extra", "optional": true}}]}]});
    let status =
        json!({"phase": "Running", "containerStatuses": [{"name": "app", "ready": false, "state": {"running": {}}}]});
    let o = observed(workload(spec, status), &[rref("", "ConfigMap", Some("a"), "extra")], &[web()]);
    let g = build(&o);
    assert!(g.nodes.iter().any(|n| n.missing() && n.resource.name == "extra"), "drawn, as missing");
    assert_eq!(diagnose(&g, &[web()]), None);
}

#[test]
fn a_pod_failure_beats_a_missing_reference_and_the_first_start_wins_a_tie() {
    // The template names a missing pull secret, but the Pods crash-loop: the crash is the cause.
    let spec = json!({"containers": [{"name": "app"}], "imagePullSecrets": [{"name": "regcred"}]});
    let status = json!({"phase": "Running", "containerStatuses": [{"name": "app", "restartCount": 2,
        "state": {"waiting": {"reason": "CrashLoopBackOff"}}, "lastState": {"terminated": {"exitCode": 1}}}]});
    let o = observed(workload(spec, status), &[rref("", "Secret", Some("a"), "regcred")], &[web()]);
    assert_eq!(diagnosis_of(&o, &[web()]).0, "CrashLoopBackOff");
}

#[test]
fn the_graph_is_the_same_whatever_the_input_order() {
    let spec = json!({"containers": [{"name": "app", "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}],
                      "serviceAccountName": "runner",
                      "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}},
                                  {"name": "p", "projected": {"sources": [{"configMap": {"name": "c"}}]}}]});
    let mut objects = workload(spec, json!({"phase": "Running"}));
    objects.extend([
        service(),
        slice(true),
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": "a"},
               "spec": {"volumeName": "pv-1"}, "status": {"phase": "Bound"}}),
        json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-1"}}),
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web", "namespace": "a"},
               "spec": {"selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}}}),
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "a", "uid": "w1",
               "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "d1"}]},
               "spec": {"secretName": "ignored"}}),
    ]);
    let absent = [rref("", "Secret", Some("a"), "s"), rref("", "ServiceAccount", Some("a"), "runner")];
    let g = build(&observed(objects.clone(), &absent, &[web()]));
    objects.reverse();
    assert_eq!(build(&observed(objects, &absent, &[web()])), g);
    let names: Vec<String> = g
        .links
        .iter()
        .map(|l| format!("{} {} {}", g.nodes[l.from].resource.name, l.edge, g.nodes[l.to].resource.kind))
        .collect();
    for want in [
        "data Binds PersistentVolume",
        "web-1-x Mounts PersistentVolumeClaim",
        "web-1-x Uses Secret",
        "web-1-x RunsAs ServiceAccount",
        "web Owns ReplicaSet",
        "web Owns Widget",
        "web-1 Owns Pod",
        "web Selects Pod",
        "web Selects Deployment",
        "web Endpoints EndpointSlice",
    ] {
        assert!(names.contains(&want.to_string()), "{want} in {names:#?}");
    }
    // The ConfigMap `c` was neither read nor found absent: left out, not called missing.
    assert!(!g.nodes.iter().any(|n| n.resource.name == "c"));
    assert!(g.nodes.iter().any(|n| n.resource.name == "runner" && n.missing()));
    // A kind without rules contributes only its ownerReferences.
    assert!(!g.nodes.iter().any(|n| n.resource.name == "ignored"));
    assert_eq!(names.iter().filter(|n| n.starts_with("web Selects Pod")).count(), 2, "Service and PDB: {names:#?}");
}

#[test]
fn selectors_become_label_selector_strings() {
    let s = json!({"matchLabels": {"b": "2", "a": "1"},
                   "matchExpressions": [{"key": "t", "operator": "In", "values": ["x", "y"]},
                                        {"key": "u", "operator": "DoesNotExist"}]});
    assert_eq!(refs::selector_string(&s).as_deref(), Some("a=1,b=2,t in (x,y),!u"));
    assert_eq!(refs::selector_string(&json!({})), None, "an empty selector would select everything");
    assert!(refs::selector_matches(&s, &json!({"a": "1", "b": "2", "t": "y"})));
    assert!(!refs::selector_matches(&s, &json!({"a": "1", "b": "2", "t": "y", "u": ""})));
    assert!(!refs::selector_matches(&json!({}), &json!({"a": "1"})));
}
