//! Exchanges where simcluster once answered differently from the real kube-apiserver, run on
//! both (`NAME::simcluster`, `NAME::realkube`) against the same expectation, so the emulator
//! cannot drift from its oracle again unnoticed.

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};
use testkit::{Cluster, apply_as};

/// One kind: its API resource, whether it is namespaced, and a minimal valid object.
struct Kind {
    gvk: (&'static str, &'static str, &'static str),
    plural: &'static str,
    namespaced: bool,
    body: Value,
    /// Whether the real server refuses a PUT without `metadata.resourceVersion`.
    needs_resource_version: bool,
}

fn kinds() -> Vec<Kind> {
    let k = |gvk, plural, namespaced, body: Value, needs_resource_version| Kind {
        gvk,
        plural,
        namespaced,
        body,
        needs_resource_version,
    };
    vec![
        k(("coordination.k8s.io", "v1", "Lease"), "leases", true, json!({"spec": {"holderIdentity": "a"}}), true),
        k(
            ("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration"),
            "validatingwebhookconfigurations",
            false,
            json!({}),
            true,
        ),
        k(
            ("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration"),
            "mutatingwebhookconfigurations",
            false,
            json!({}),
            true,
        ),
        k(
            ("policy", "v1", "PodDisruptionBudget"),
            "poddisruptionbudgets",
            true,
            json!({"spec": {"maxUnavailable": 1}}),
            true,
        ),
        k(("node.k8s.io", "v1", "RuntimeClass"), "runtimeclasses", false, json!({"handler": "runc"}), true),
        k(("storage.k8s.io", "v1", "CSIDriver"), "csidrivers", false, json!({"spec": {}}), true),
        k(("", "v1", "ConfigMap"), "configmaps", true, json!({"data": {"a": "1"}}), false),
        k(("", "v1", "ServiceAccount"), "serviceaccounts", true, json!({}), false),
        k(("rbac.authorization.k8s.io", "v1", "Role"), "roles", true, json!({"rules": []}), false),
        k(
            ("storage.k8s.io", "v1", "StorageClass"),
            "storageclasses",
            false,
            json!({"provisioner": "example.com/x"}),
            false,
        ),
    ]
}

/// A PUT without `metadata.resourceVersion` is an unconditional overwrite for most kinds, and
/// refused (422, `metadata.resourceVersion: Invalid value: 0: must be specified for an update`)
/// for those whose strategy forbids it: Leases among them, which the shard fence relies on.
fn an_update_without_resource_version_is_refused_where_the_server_refuses_it(cluster: Cluster) {
    const NS: &str = "parity";
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let client = cluster.client().await;
        apply_as(&client, "test", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})).await;
        let mut mismatches = Vec::new();
        for kind in kinds() {
            let (group, version, k) = kind.gvk;
            let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, k), kind.plural);
            let api: Api<DynamicObject> = if kind.namespaced {
                Api::namespaced_with(client.clone(), NS, &ar)
            } else {
                Api::all_with(client.clone(), &ar)
            };
            let name = format!("parity-{}", kind.plural.trim_end_matches('s'));
            let mut obj = kind.body.clone();
            obj["apiVersion"] = json!(ar.api_version);
            obj["kind"] = json!(k);
            obj["metadata"] = json!({"name": name});
            let obj: DynamicObject = serde_json::from_value(obj).unwrap();
            api.create(&PostParams::default(), &obj).await.unwrap_or_else(|e| panic!("create {k}: {e}"));
            let answer = api.replace(&name, &PostParams::default(), &obj).await;
            let refused = match &answer {
                Ok(_) => false,
                Err(kube::Error::Api(s)) => {
                    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"), "{k}: {s:?}");
                    assert!(
                        s.message
                            .ends_with("metadata.resourceVersion: Invalid value: 0: must be specified for an update"),
                        "{k}: {}",
                        s.message
                    );
                    true
                }
                Err(e) => panic!("{k}: {e}"),
            };
            if refused != kind.needs_resource_version {
                mismatches
                    .push(format!("{k}: refused {refused}, the real server refuses: {}", kind.needs_resource_version));
            }
        }
        assert!(mismatches.is_empty(), "{mismatches:#?}");
    });
}

testkit::both!(an_update_without_resource_version_is_refused_where_the_server_refuses_it);

/// One raw request as the admin: (status code, body as JSON, `Warning` headers).
async fn call(
    client: &kube::Client,
    method: &str,
    path: &str,
    body: Option<(&str, &Value)>,
) -> (u16, Value, Vec<String>) {
    call_with(client, method, path, body, &[]).await
}

/// [`call`] with extra request headers.
async fn call_with(
    client: &kube::Client,
    method: &str,
    path: &str,
    body: Option<(&str, &Value)>,
    headers: &[(&str, &str)],
) -> (u16, Value, Vec<String>) {
    let mut req = http::Request::builder().method(method).uri(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let bytes = match body {
        Some((content_type, b)) => {
            req = req.header("Content-Type", content_type);
            serde_json::to_vec(b).unwrap()
        }
        None => Vec::new(),
    };
    let req = req.body(kube::client::Body::from(bytes)).unwrap();
    let res = client.send(req).await.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let code = res.status().as_u16();
    let warnings = res.headers().get_all("Warning").iter().filter_map(|v| v.to_str().ok()).map(String::from).collect();
    let bytes = res.into_body().collect_bytes().await.unwrap();
    let body = serde_json::from_slice(&bytes).unwrap_or_else(|_| json!(String::from_utf8_lossy(&bytes)));
    (code, body, warnings)
}

/// POST `body` as JSON to `path`; panics unless 201.
async fn create(client: &kube::Client, path: &str, body: Value) -> Value {
    let (code, out, _) = call(client, "POST", path, Some(("application/json", &body))).await;
    assert_eq!(code, 201, "POST {path}: {out}");
    out
}

/// The sorted names a list returns, or its error (code and message).
async fn names(client: &kube::Client, path: &str, field_selector: &str) -> Result<Vec<String>, (u16, String)> {
    let q: String = field_selector
        .bytes()
        .map(|b| match b {
            b'=' => "%3D".to_string(),
            b'!' => "%21".to_string(),
            b',' => "%2C".to_string(),
            b'/' => "%2F".to_string(),
            _ => (b as char).to_string(),
        })
        .collect();
    let (code, body, _) = call(client, "GET", &format!("{path}?fieldSelector={q}"), None).await;
    if code != 200 {
        return Err((code, body["message"].as_str().unwrap_or_default().to_string()));
    }
    let mut n: Vec<String> =
        body["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_string()).collect();
    n.sort();
    Ok(n)
}

fn ok(names: &[&str]) -> Result<Vec<String>, (u16, String)> {
    Ok(names.iter().map(|s| s.to_string()).collect())
}

fn refused(message: &str) -> Result<Vec<String>, (u16, String)> {
    Err((400, message.to_string()))
}

/// Wait until the namespace's `default` ServiceAccount exists (Pods need it).
async fn default_service_account(client: &kube::Client, ns: &str) {
    testkit::eventually("the default ServiceAccount", std::time::Duration::from_secs(30), || async {
        let (code, _, _) = call(client, "GET", &format!("/api/v1/namespaces/{ns}/serviceaccounts/default"), None).await;
        (code == 200).then_some(())
    })
    .await;
}

/// Event field selectors: core/v1 `source` is the Event's `source.component`, else its
/// `reportingComponent` (what events.k8s.io calls `reportingController`); `reportingComponent`
/// selects that field, and each API version refuses the other's names.
fn event_field_selectors_select_like_the_real_registry(cluster: Cluster) {
    const NS: &str = "parity";
    testkit::runtime().block_on(async {
        let client = cluster.client().await;
        apply_as(&client, "test", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})).await;
        let core = format!("/api/v1/namespaces/{NS}/events");
        let v1 = format!("/apis/events.k8s.io/v1/namespaces/{NS}/events");
        let about = json!({"kind": "Pod", "name": "p1", "namespace": NS});
        create(
            &client,
            &core,
            json!({"metadata": {"name": "e1"}, "involvedObject": about, "reason": "R1",
            "message": "m", "type": "Normal", "source": {"component": "deployment-controller"}}),
        )
        .await;
        create(
            &client,
            &v1,
            json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e2"},
            "regarding": about, "reason": "R2", "note": "m", "type": "Normal", "action": "A",
            "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "ctl.example/x",
            "reportingInstance": "i1"}),
        )
        .await;
        create(
            &client,
            &core,
            json!({"metadata": {"name": "e3"}, "involvedObject": about, "reason": "R3",
            "message": "m", "type": "Warning", "source": {"component": "a"}, "reportingComponent": "b",
            "reportingInstance": "i"}),
        )
        .await;
        let checks = [
            (&core, "source=deployment-controller", ok(&["e1"])),
            (&core, "source=ctl.example/x", ok(&["e2"])),
            (&core, "source=a", ok(&["e3"])),
            (&core, "source=b", ok(&[])),
            (&core, "reportingComponent=b", ok(&["e3"])),
            (&core, "reportingComponent=ctl.example/x", ok(&["e2"])),
            (&core, "type=Warning", ok(&["e3"])),
            (&core, "involvedObject.name=p1,reason!=R1", ok(&["e2", "e3"])),
            (&core, "reportingController=b", refused("field label not supported: reportingController")),
            (&v1, "reportingController=b", ok(&["e3"])),
            (&v1, "reportingController=ctl.example/x", ok(&["e2"])),
            (&v1, "regarding.kind=Pod,type=Normal", ok(&["e1", "e2"])),
            (&v1, "source=a", refused("field label not supported: source")),
            (&v1, "reportingComponent=b", refused("field label not supported: reportingComponent")),
        ];
        let mut wrong = Vec::new();
        for (path, selector, want) in checks {
            let got = names(&client, path, selector).await;
            if got != want {
                wrong.push(format!("{path}?fieldSelector={selector}: got {got:?}, want {want:?}"));
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
    });
}

testkit::both!(event_field_selectors_select_like_the_real_registry);

/// The field labels of other kinds: which each accepts (Namespaces, Nodes and
/// CertificateSigningRequests not `metadata.namespace`; apps/v1 ReplicaSets only the metadata
/// fields; Services `spec.type` and `spec.clusterIP`), the three ways of refusing one, and the
/// values of fields the Go types always have (`spec.hostNetwork=false`, `status.replicas=0`,
/// a Job's `status.successful`).
fn field_labels_of_other_kinds_are_the_real_ones(cluster: Cluster) {
    const NS: &str = "parity";
    testkit::runtime().block_on(async {
        let client = cluster.client().await;
        apply_as(&client, "test", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})).await;
        let pods = format!("/api/v1/namespaces/{NS}/pods");
        let pod = |name: &str, host: bool| {
            let mut spec = json!({"automountServiceAccountToken": false, "containers": [{"name": "c", "image": "x"}]});
            if host {
                spec["hostNetwork"] = json!(true);
            }
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
        };
        default_service_account(&client, NS).await;
        create(&client, &pods, pod("h1", false)).await;
        create(&client, &pods, pod("h2", true)).await;
        let services = format!("/api/v1/namespaces/{NS}/services");
        create(&client, &services, json!({"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}})).await;
        let rcs = format!("/api/v1/namespaces/{NS}/replicationcontrollers");
        create(
            &client,
            &rcs,
            json!({"metadata": {"name": "rc"}, "spec": {"replicas": 0, "selector": {"a": "b"},
            "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}}),
        )
        .await;
        let jobs = format!("/apis/batch/v1/namespaces/{NS}/jobs");
        create(
            &client,
            &jobs,
            json!({"metadata": {"name": "j"}, "spec": {"suspend": true, "template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}}),
        )
        .await;
        let listed =
            |f: &str| format!("\"{f}\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"");
        let checks = [
            (pods.clone(), "spec.hostNetwork=false", ok(&["h1"])),
            (pods.clone(), "spec.hostNetwork=true", ok(&["h2"])),
            (pods.clone(), "spec.hostNetwork=", ok(&[])),
            (pods.clone(), "status.podIPs=", ok(&["h1", "h2"])),
            (pods.clone(), "spec.hostname=x", refused("field label not supported: spec.hostname")),
            (services.clone(), "spec.type=ClusterIP", ok(&["s"])),
            (services.clone(), "spec.clusterIP=None", ok(&[])),
            (rcs.clone(), "status.replicas=0", ok(&["rc"])),
            (jobs.clone(), "status.successful=0", ok(&["j"])),
            (jobs.clone(), "foo=x", refused("field label \"foo\" not supported for Job")),
            (
                "/api/v1/namespaces".into(),
                "metadata.namespace=x",
                refused("field label not supported: metadata.namespace"),
            ),
            ("/api/v1/nodes".into(), "metadata.namespace=x", refused("field label not supported: metadata.namespace")),
            ("/api/v1/nodes".into(), "spec.unschedulable=true", ok(&[])),
            (
                "/apis/certificates.k8s.io/v1/certificatesigningrequests".into(),
                "metadata.namespace=x",
                refused("field label not supported: metadata.namespace"),
            ),
            ("/api/v1/secrets".into(), "foo=x", refused("field label not supported: foo")),
            (
                format!("/apis/apps/v1/namespaces/{NS}/replicasets"),
                "status.replicas=1",
                refused(&listed("status.replicas")),
            ),
            (format!("/api/v1/namespaces/{NS}/configmaps"), "data=x", refused(&listed("data"))),
        ];
        let mut wrong = Vec::new();
        for (path, selector, want) in checks {
            let got = names(&client, &path, selector).await;
            if got != want {
                wrong.push(format!("{path}?fieldSelector={selector}: got {got:?}, want {want:?}"));
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
    });
}

testkit::both!(field_labels_of_other_kinds_are_the_real_ones);

/// A 422's message and its causes as (reason, field, message).
fn invalid(body: &Value) -> (String, Vec<(String, String, String)>) {
    let causes = body["details"]["causes"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
                    (s("reason"), s("field"), s("message"))
                })
                .collect()
        })
        .unwrap_or_default();
    (body["message"].as_str().unwrap_or_default().to_string(), causes)
}

/// What `ValidatePodUpdate` allows: only container and init container images,
/// `activeDeadlineSeconds` (set, or lowered), added tolerations (existing ones may change
/// only their `tolerationSeconds`), and metadata; anything else is 422 with one
/// `FieldValueForbidden` cause on `spec` whose message lists what may change and then a diff of
/// the spec. The DefaultTolerationSeconds admission puts its two tolerations back on update.
fn pod_updates_may_change_only_what_the_real_server_allows(cluster: Cluster) {
    const NS: &str = "parity";
    const ALLOWED: &str = "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";
    testkit::runtime().block_on(async {
        let client = cluster.client().await;
        apply_as(&client, "test", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})).await;
        default_service_account(&client, NS).await;
        let pods = format!("/api/v1/namespaces/{NS}/pods");
        let p1 = format!("{pods}/p1");
        let created = create(&client, &pods, json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p1"},
            "spec": {"schedulerName": "nobody", "automountServiceAccountToken": false, "activeDeadlineSeconds": 30,
                     "tolerations": [{"key": "a", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}],
                     "containers": [{"name": "c", "image": "nginx", "env": [{"name": "A", "value": "1"}]}],
                     "initContainers": [{"name": "i", "image": "busybox"}]}}))
        .await;
        assert_eq!(created["metadata"]["generation"], 1);
        let smp = "application/strategic-merge-patch+json";
        let merge = "application/merge-patch+json";
        let patch = |ct: &'static str, body: Value| {
            let client = client.clone();
            let p1 = p1.clone();
            async move { call(&client, "PATCH", &p1, Some((ct, &body))).await }
        };
        let cause = |reason: &str, field: &str, message: &str| (reason.to_string(), field.to_string(), message.to_string());

        // Anything else: the list of what may change, then a diff.
        let (code, body, _) = patch(smp, json!({"spec": {"containers": [{"name": "c", "env": [{"name": "A", "value": "2"}]}]}})).await;
        assert_eq!((code, body["reason"].as_str()), (422, Some("Invalid")), "{body}");
        assert_eq!(body["details"]["name"], "p1");
        assert_eq!(body["details"]["kind"], "Pod");
        let (message, causes) = invalid(&body);
        assert!(message.starts_with(&format!("Pod \"p1\" is invalid: spec: Forbidden: {ALLOWED}\n@@ -")), "{message}");
        assert_eq!(causes.len(), 1, "{causes:?}");
        let (reason, field, text) = &causes[0];
        assert_eq!((reason.as_str(), field.as_str()), ("FieldValueForbidden", "spec"));
        assert!(text.starts_with(&format!("Forbidden: {ALLOWED}\n@@ -")), "{text}");
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines.iter().any(|l| l.starts_with('-') && l.to_lowercase().contains("\"value\": \"1\"")), "{text}");
        assert!(lines.iter().any(|l| l.starts_with('+') && l.to_lowercase().contains("\"value\": \"2\"")), "{text}");
        let (code, body, _) = patch(merge, json!({"spec": {"terminationGracePeriodSeconds": 10}})).await;
        assert_eq!(code, 422, "{body}");
        assert!(invalid(&body).0.starts_with(&format!("Pod \"p1\" is invalid: spec: Forbidden: {ALLOWED}\n")), "{body}");

        // activeDeadlineSeconds: may be lowered, never raised nor removed.
        let (code, body, _) = patch(merge, json!({"spec": {"activeDeadlineSeconds": 60}})).await;
        assert_eq!(code, 422, "{body}");
        let msg = "Invalid value: 60: must be less than or equal to previous value";
        assert_eq!(
            invalid(&body),
            (
                format!("Pod \"p1\" is invalid: spec.activeDeadlineSeconds: {msg}"),
                vec![cause("FieldValueInvalid", "spec.activeDeadlineSeconds", msg)]
            )
        );
        let (code, body, _) = patch(merge, json!({"spec": {"activeDeadlineSeconds": null}})).await;
        assert_eq!(code, 422, "{body}");
        let msg = "Invalid value: null: must not update from a positive integer to nil value";
        assert_eq!(
            invalid(&body),
            (
                format!("Pod \"p1\" is invalid: spec.activeDeadlineSeconds: {msg}"),
                vec![cause("FieldValueInvalid", "spec.activeDeadlineSeconds", msg)]
            )
        );
        let (code, body, _) = patch(merge, json!({"spec": {"activeDeadlineSeconds": 20}})).await;
        assert_eq!(code, 200, "{body}");
        assert_eq!(body["metadata"]["generation"], 2);

        // Containers: neither added nor removed; images may change.
        let (code, body, _) = patch(smp, json!({"spec": {"containers": [{"name": "d", "image": "x"}]}})).await;
        assert_eq!(code, 422, "{body}");
        let msg = "Forbidden: pod updates may not add or remove containers";
        assert_eq!(
            invalid(&body),
            (format!("Pod \"p1\" is invalid: spec.containers: {msg}"), vec![cause("FieldValueForbidden", "spec.containers", msg)])
        );
        let (code, body, _) =
            patch(smp, json!({"spec": {"containers": [{"name": "c", "image": "nginx:2"}], "initContainers": [{"name": "i", "image": "busybox:2"}]}}))
                .await;
        assert_eq!(code, 200, "{body}");
        assert_eq!(body["metadata"]["generation"], 3);

        // Tolerations: existing ones may change only their tolerationSeconds; new ones may be
        // added; the two default ones come back when left out.
        let (code, body, _) =
            patch(merge, json!({"spec": {"tolerations": [{"key": "a", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 10},
                                                       {"key": "b", "operator": "Exists"}]}}))
            .await;
        assert_eq!(code, 200, "{body}");
        let keys: Vec<&str> =
            body["spec"]["tolerations"].as_array().unwrap().iter().map(|t| t["key"].as_str().unwrap()).collect();
        assert_eq!(keys, ["a", "b", "node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"]);
        assert_eq!(body["spec"]["tolerations"][0]["tolerationSeconds"], 10);
        let (code, body, _) = patch(merge, json!({"spec": {"tolerations": [{"key": "c", "operator": "Exists"}]}})).await;
        assert_eq!(code, 422, "{body}");
        let msg = "Forbidden: existing toleration can not be modified except its tolerationSeconds";
        assert_eq!(
            invalid(&body),
            (format!("Pod \"p1\" is invalid: spec.tolerations: {msg}"), vec![cause("FieldValueForbidden", "spec.tolerations", msg)])
        );
        let (code, body, _) =
            patch(merge, json!({"spec": {"tolerations": [{"key": "a", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}]}}))
                .await;
        assert_eq!(code, 422, "{body}");
        let effect = "Invalid value: \"NoSchedule\": effect must be 'NoExecute' when `tolerationSeconds` is set";
        assert_eq!(
            invalid(&body),
            (
                format!("Pod \"p1\" is invalid: [spec.tolerations[0].effect: {effect}, spec.tolerations: {msg}]"),
                vec![
                    cause("FieldValueInvalid", "spec.tolerations[0].effect", effect),
                    cause("FieldValueForbidden", "spec.tolerations", msg)
                ]
            )
        );

        // Metadata may change.
        let (code, body, _) = patch(merge, json!({"metadata": {"labels": {"x": "y"}}})).await;
        assert_eq!(code, 200, "{body}");
        assert_eq!(body["metadata"]["generation"], 4);
    });
}

testkit::both!(pod_updates_may_change_only_what_the_real_server_allows);

/// The create-only apply a plan makes of an object it takes as absent
/// (`kuvryn_sync::decisions::absent`): a Server-Side Apply carrying `metadata.resourceVersion:
/// "1"` creates a missing object (and keeps no trace of the precondition), and is refused with
/// `409 Conflict` where the object exists, whoever owns its fields, forced or not.
fn a_create_only_apply_creates_what_is_missing_and_is_refused_where_it_exists(cluster: Cluster) {
    use kube::api::{Patch, PatchParams};
    use kuvryn_sync::decisions::absent::PRECONDITION;
    const NS: &str = "parity-absent";
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let client = cluster.client().await;
        apply_as(&client, "test", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})).await;
        let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), NS);
        let cm = |color: &str| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "presumed", "namespace": NS, "resourceVersion": PRECONDITION},
                   "data": {"color": color}})
        };
        let ours = PatchParams::apply("kuvryn-sync");
        let created = api.patch("presumed", &ours, &Patch::Apply(cm("blue"))).await.expect("created");
        assert_ne!(created.metadata.resource_version.as_deref(), Some(PRECONDITION));
        let fields = serde_json::to_string(&created.metadata.managed_fields).unwrap();
        assert!(!fields.contains("resourceVersion"), "{fields}");
        let refused = |answer: kube::Result<k8s_openapi::api::core::v1::ConfigMap>| match answer {
            Err(kube::Error::Api(s)) => (s.code, s.reason),
            other => panic!("not refused: {other:?}"),
        };
        // The same object again, another value, another manager, forced: refused, unchanged.
        for (params, color) in [
            (ours.clone(), "blue"),
            (ours.clone(), "red"),
            (PatchParams::apply("someone").force(), "red"),
            (ours.clone().force(), "red"),
        ] {
            let answer = api.patch("presumed", &params, &Patch::Apply(cm(color))).await;
            assert_eq!(refused(answer), (409, "Conflict".to_string()), "{params:?} {color}");
        }
        let now = api.get("presumed").await.unwrap();
        assert_eq!(now.data.unwrap()["color"], "blue");
        assert_eq!(now.metadata.resource_version, created.metadata.resource_version);
    });
}

testkit::both!(a_create_only_apply_creates_what_is_missing_and_is_refused_where_it_exists);
