//! Replays of the recorded conformance steps at the function level: the live object is built
//! from earlier results, the request body of the step (from `cases/NN-*.json`) is applied or
//! patched, and the resulting data and managedFields are compared with what the real server
//! answered (`recorded/NN-*.json`), `time` values compared by presence only.

use serde_json::{Value, json};

use super::*;
use crate::schema::TypeNav;

const RUNNER: &str = "kube-conformance-runner";

struct Replay {
    case: Value,
    rec: Value,
}

impl Replay {
    fn load(name: &str) -> Replay {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/conformance");
        let read = |sub: &str| -> Value {
            let path = format!("{dir}/{sub}/{name}.json");
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
        };
        Replay { case: read("cases"), rec: read("recorded") }
    }

    fn step(&self, name: &str) -> &Value {
        self.case["steps"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["name"] == name))
            .unwrap_or_else(|| panic!("no step {name}"))
    }

    fn body(&self, name: &str) -> &Value {
        &self.step(name)["body"]
    }

    fn manager(&self, name: &str) -> String {
        self.step(name)["query"]["fieldManager"].as_str().unwrap_or(RUNNER).to_string()
    }

    fn force(&self, name: &str) -> bool {
        self.step(name)["query"]["force"] == "true"
    }

    fn response(&self, name: &str) -> &Value {
        let ex = self.rec["exchanges"]
            .as_array()
            .and_then(|s| s.iter().find(|e| e["step"] == name))
            .unwrap_or_else(|| panic!("no exchange {name}"));
        &ex["body"]
    }

    fn status(&self, name: &str) -> u64 {
        let ex = self.rec["exchanges"].as_array().and_then(|s| s.iter().find(|e| e["step"] == name));
        ex.and_then(|e| e["status"].as_u64()).unwrap_or(0)
    }
}

fn time_of(i: usize) -> String {
    format!("2026-11-29T10:{:02}:{:02}Z", i / 60, i % 60)
}

/// managedFields with `time` values replaced by `<time>`, sorted by identity, without the
/// entries of `skip_manager`.
fn norm_mf(obj: &Value, skip_manager: Option<&str>) -> Vec<Value> {
    let mut out: Vec<Value> = obj["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|e| Some(e["manager"].as_str().unwrap_or("")) != skip_manager)
        .map(|mut e| {
            if e.get("time").is_some() {
                e["time"] = json!("<time>");
            }
            e
        })
        .collect();
    out.sort_by_key(|e| format!("{}|{}|{}", e["manager"], e["operation"], e["subresource"]));
    out
}

fn assert_mf(step: &str, got: &Value, want: &Value, skip: Option<&str>) {
    let (g, w) = (norm_mf(got, skip), norm_mf(want, skip));
    assert_eq!(
        g,
        w,
        "{step}: managedFields differ\n got: {}\nwant: {}",
        serde_json::to_string_pretty(&g).unwrap_or_default(),
        serde_json::to_string_pretty(&w).unwrap_or_default()
    );
}

fn assert_conflict(step: &str, conflicts: &[Conflict], want: &Value) {
    let (msg, causes) = conflict_status(conflicts);
    let sort = |v: Vec<Value>| {
        let mut v = v;
        v.sort_by_key(|c| c.to_string());
        v
    };
    let want_causes = want["details"]["causes"].as_array().cloned().unwrap_or_default();
    assert_eq!(sort(causes), sort(want_causes), "{step}: causes");
    assert_eq!(msg, want["message"].as_str().unwrap_or(""), "{step}: message");
}

fn mgr<'a>(name: &'a str, op: Operation, sub: Option<&'a str>, av: &'a str, time: &'a str) -> Manager<'a> {
    Manager { name, operation: op, subresource: sub, api_version: av, time }
}

/// Add the server-set metadata of `stored` to a request body (what the server stores).
fn with_server_meta(body: &Value, stored: Option<&Value>) -> Value {
    let mut v = body.clone();
    for k in ["namespace", "uid", "resourceVersion", "creationTimestamp"] {
        let val = stored.map(|s| s["metadata"][k].clone()).unwrap_or_else(|| json!(format!("<{k}>")));
        v["metadata"][k] = val;
    }
    v
}

fn strip_status(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("status");
    }
    v
}

#[test]
fn case_10_ssa_ownership() {
    let r = Replay::load("10-ssa-ownership");
    let ty = TypeNav::builtin("v1", "ConfigMap").expect("type");
    let steps = [
        "a-creates",
        "a-reapplies-same-noop",
        "b-conflicts",
        "b-conflicts-on-two-fields",
        "b-forces",
        "b-co-owns-shared-same-value",
        "a-drops-onlya-and-shared",
        "a-drops-label",
        "b-changes-shared-now-sole-owner",
        "c-becomes-co-owner-noop",
        "d-conflicts-with-both-co-owners",
        "b-removes-everything",
    ];
    let mut state: Option<Value> = None;
    for (i, step) in steps.into_iter().enumerate() {
        let name = r.manager(step);
        let t = time_of(i);
        let m = mgr(&name, Operation::Apply, None, "v1", &t);
        let result = apply(state.as_ref(), r.body(step), &m, r.force(step), &ty);
        let want = r.response(step);
        match result {
            Ok(mut obj) => {
                assert!(r.status(step) < 300, "{step}: expected {} but applied", r.status(step));
                if state.is_none() {
                    obj = with_server_meta(&obj, None);
                }
                assert_eq!(obj["data"], want["data"], "{step}: data");
                assert_eq!(obj["metadata"]["labels"], want["metadata"]["labels"], "{step}: labels");
                assert_mf(step, &obj, want, None);
                if step == "a-reapplies-same-noop" {
                    assert_eq!(obj, *state.as_ref().expect("state"), "{step}: a no-op apply changes nothing");
                }
                state = Some(obj);
            }
            Err(conflicts) => {
                assert_eq!(r.status(step), 409, "{step}: unexpected conflicts {conflicts:?}");
                assert_conflict(step, &conflicts, want);
            }
        }
    }
    let final_state = state.expect("state");
    assert_mf("get-final", &final_state, r.response("get-final"), None);
}

#[test]
fn case_11_ssa_managers() {
    let r = Replay::load("11-ssa-managers");
    let ty = TypeNav::builtin("v1", "ConfigMap").expect("type");

    // POST with the default manager.
    let t0 = time_of(0);
    let mut posted = with_server_meta(r.body("post-default-manager"), None);
    update(None, &mut posted, &mgr(RUNNER, Operation::Update, None, "v1", &t0), &ty);
    assert_mf("post-default-manager", &posted, r.response("post-default-manager"), None);

    let steps = [
        "post-named-manager",
        "put-by-kubectl-edit",
        "merge-patch-by-patcher",
        "apply-conflicts-with-update-manager",
        "apply-same-value-as-update-manager-ok",
        "apply-force-takes-from-update-managers",
        "update-manager-overrides-applied-field",
        "reapply-now-conflicts",
        "dry-run-apply-existing",
        "apply-with-current-rv",
    ];
    let mut state: Option<Value> = None;
    for (i, step) in steps.into_iter().enumerate() {
        let s = r.step(step);
        let name = r.manager(step);
        let t = time_of(i + 1);
        let want = r.response(step);
        let body = r.body(step);
        let ctype = s["content_type"].as_str().unwrap_or("");
        let method = s["method"].as_str().unwrap_or("GET");
        if ctype.contains("apply-patch") || ctype == "${APPLY}" {
            let m = mgr(&name, Operation::Apply, None, "v1", &t);
            // The resourceVersion precondition is checked by the server, not applied.
            let mut config = body.clone();
            if let Some(md) = config["metadata"].as_object_mut() {
                md.remove("resourceVersion");
            }
            match apply(state.as_ref(), &config, &m, r.force(step), &ty) {
                Ok(obj) => {
                    assert!(r.status(step) < 300, "{step}: expected {}", r.status(step));
                    assert_eq!(obj["data"], want["data"], "{step}: data");
                    assert_mf(step, &obj, want, None);
                    if s["query"]["dryRun"].is_null() {
                        state = Some(obj);
                    }
                }
                Err(c) => {
                    assert_eq!(r.status(step), 409, "{step}: unexpected conflicts {c:?}");
                    assert_conflict(step, &c, want);
                }
            }
            continue;
        }
        let m = mgr(&name, Operation::Update, None, "v1", &t);
        let mut new = match (method, ctype) {
            ("POST", _) => with_server_meta(body, None),
            ("PUT", _) => with_server_meta(body, state.as_ref()),
            (_, c) if c.contains("merge-patch") => merge_patch(state.as_ref().expect("state"), body),
            other => panic!("unexpected {other:?}"),
        };
        update(state.as_ref(), &mut new, &m, &ty);
        assert_eq!(new["data"], want["data"], "{step}: data");
        assert_mf(step, &new, want, None);
        state = Some(new);
    }
    assert_mf("get-final", state.as_ref().expect("state"), r.response("get-final"), None);

    // Apply to a create under dryRun: the entry is the applier's only.
    let t = time_of(30);
    let created =
        apply(None, r.body("dry-run-apply-create"), &mgr("gitops", Operation::Apply, None, "v1", &t), false, &ty)
            .expect("apply");
    assert_mf("dry-run-apply-create", &created, r.response("dry-run-apply-create"), None);

    // An unknown field on a built-in type.
    let err = ty.check_declared(r.body("apply-unknown-field-strict")).expect_err("undeclared");
    let want = r.response("apply-unknown-field-strict")["message"].as_str().unwrap_or("").to_string();
    assert!(want.ends_with(&err), "{want} / {err}");
}

#[test]
fn case_12_ssa_deployment() {
    let r = Replay::load("12-ssa-deployment");
    let ty = TypeNav::builtin("apps/v1", "Deployment").expect("type");
    let kcm = Some("kube-controller-manager");
    let mut state: Option<Value> = None;
    let steps = [
        "a-creates",
        "b-adds-sidecar",
        "a-updates-image-keeps-sidecar",
        "b-conflicts-on-app-image",
        "scale-by-hpa",
        "a-reapply-replicas-conflicts-with-scale",
        "a-drops-replicas",
        "dry-run-apply",
        "b-removes-sidecar",
        "conflict-reported-before-validation",
    ];
    for (i, step) in steps.into_iter().enumerate() {
        let name = r.manager(step);
        let t = time_of(i);
        let want = r.response(step);
        if step == "scale-by-hpa" {
            let mut new = state.clone().expect("state");
            new["spec"]["replicas"] = json!(4);
            update(state.as_ref(), &mut new, &mgr(&name, Operation::Update, Some("scale"), "apps/v1", &t), &ty);
            let hpa = norm_mf(&new, None).into_iter().find(|e| e["manager"] == "hpa").expect("hpa entry");
            assert_eq!(
                hpa,
                json!({"manager": "hpa", "operation": "Update", "apiVersion": "apps/v1", "fieldsType": "FieldsV1",
                       "fieldsV1": {"f:spec": {"f:replicas": {}}}, "subresource": "scale"})
            );
            state = Some(new);
            continue;
        }
        let m = mgr(&name, Operation::Apply, None, "apps/v1", &t);
        match apply(state.as_ref(), r.body(step), &m, r.force(step), &ty) {
            Ok(obj) => {
                assert!(r.status(step) < 300, "{step}: expected {}", r.status(step));
                assert_mf(step, &obj, want, kcm);
                let names: Vec<&Value> = obj["spec"]["template"]["spec"]["containers"]
                    .as_array()
                    .map(|a| a.iter().map(|c| &c["name"]).collect())
                    .unwrap_or_default();
                let want_names: Vec<&Value> = want["spec"]["template"]["spec"]["containers"]
                    .as_array()
                    .map(|a| a.iter().map(|c| &c["name"]).collect())
                    .unwrap_or_default();
                assert_eq!(names, want_names, "{step}: containers");
                assert_eq!(obj["spec"]["replicas"], want["spec"]["replicas"], "{step}: replicas");
                assert_eq!(
                    obj["spec"]["template"]["spec"]["containers"][0]["image"],
                    want["spec"]["template"]["spec"]["containers"][0]["image"],
                    "{step}: image"
                );
                if r.step(step)["query"]["dryRun"].is_null() {
                    state = Some(obj);
                }
            }
            Err(c) => {
                assert_eq!(r.status(step), 409, "{step}: unexpected conflicts {c:?}");
                assert_conflict(step, &c, want);
            }
        }
    }
}

#[test]
fn case_13_patch_types_configmap() {
    let r = Replay::load("13-patch-types");
    let ty = TypeNav::builtin("v1", "ConfigMap").expect("type");
    let t0 = time_of(0);
    fn runner(t: &str) -> Manager<'_> {
        mgr(RUNNER, Operation::Update, None, "v1", t)
    }
    let mut state = with_server_meta(r.body("create"), None);
    update(None, &mut state, &runner(&t0), &ty);
    assert_mf("create", &state, r.response("create"), None);

    let steps = [
        "merge-patch",
        "merge-patch-null-labels",
        "json-patch",
        "json-patch-escaped-key",
        "json-patch-test-ok",
        "json-patch-test-fails",
        "json-patch-remove-missing",
        "json-patch-not-an-array",
        "strategic-merge-configmap",
    ];
    for (i, step) in steps.into_iter().enumerate() {
        let t = time_of(i + 1);
        let ctype = r.step(step)["content_type"].as_str().unwrap_or("");
        let body = r.body(step);
        let want = r.response(step);
        let patched = if ctype.contains("json-patch") {
            json_patch(&state, body)
        } else if ctype.contains("strategic") {
            strategic_merge_patch(&state, body, &ty)
        } else {
            Ok(merge_patch(&state, body))
        };
        match patched {
            Ok(mut new) => {
                assert_eq!(r.status(step), 200, "{step}: expected failure");
                update(Some(&state), &mut new, &runner(&t), &ty);
                assert_eq!(new["data"], want["data"], "{step}: data");
                assert_eq!(new["metadata"].get("labels"), want["metadata"].get("labels"), "{step}: labels");
                assert_mf(step, &new, want, None);
                state = new;
            }
            Err(e) => {
                assert_eq!(u64::from(e.code), r.status(step), "{step}: code");
                assert_eq!(e.reason, want["reason"].as_str().unwrap_or(""), "{step}: reason");
                if e.code == 422 {
                    assert_eq!(e.message, want["message"].as_str().unwrap_or(""), "{step}: message");
                    assert_eq!(e.details, Some(want["details"].clone()), "{step}: details");
                }
            }
        }
    }
    // The optimistic-lock test op against the stored resourceVersion fails the same way.
    let mut with_rv = state.clone();
    with_rv["metadata"]["resourceVersion"] = json!("12345");
    let e = json_patch(&with_rv, r.body("json-patch-rv-test-optimistic-lock")).expect_err("rv test fails");
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
}

#[test]
fn case_13_patch_types_deployment() {
    let r = Replay::load("13-patch-types");
    let ty = TypeNav::builtin("apps/v1", "Deployment").expect("type");
    let kcm = Some("kube-controller-manager");
    let t0 = time_of(0);
    // The create: the stored object (defaulted, as recorded) without its status.
    let mut created = strip_status(r.response("create-deployment"));
    if let Some(md) = created["metadata"].as_object_mut() {
        md.remove("managedFields");
    }
    update(None, &mut created, &mgr(RUNNER, Operation::Update, None, "apps/v1", &t0), &ty);
    assert_mf("create-deployment", &created, r.response("create-deployment"), kcm);

    let steps = [
        "smp-change-image-by-name",
        "smp-add-container",
        "smp-delete-directive",
        "smp-merge-env-by-name",
        "smp-set-element-order",
        "smp-replace-directive-on-map",
        "merge-patch-replaces-whole-list",
        "json-patch-deployment-replicas",
    ];
    let mut prev = r.response("create-deployment").clone();
    for (i, step) in steps.into_iter().enumerate() {
        let t = time_of(i + 1);
        let ctype = r.step(step)["content_type"].as_str().unwrap_or("");
        let body = r.body(step);
        let want = r.response(step);
        let live = strip_status(&prev);
        let patched = if ctype.contains("json-patch") {
            json_patch(&live, body)
        } else if ctype.contains("strategic") {
            strategic_merge_patch(&live, body, &ty)
        } else {
            Ok(merge_patch(&live, body))
        }
        .unwrap_or_else(|e| panic!("{step}: {e}"));
        // The patch result, before the server's defaulting: names, order, images, env, labels.
        let summary = |o: &Value| -> Value {
            let cs = o["spec"]["template"]["spec"]["containers"].as_array().cloned().unwrap_or_default();
            json!({
                "containers": cs.iter().map(|c| json!([c["name"], c["image"], c["env"]])).collect::<Vec<_>>(),
                "labels": o["spec"]["template"]["metadata"]["labels"],
                "replicas": o["spec"]["replicas"],
            })
        };
        assert_eq!(summary(&patched), summary(want), "{step}: patched object");
        // managedFields: recorded previous → recorded result (both defaulted by the server).
        let mut new = strip_status(want);
        if let Some(md) = new["metadata"].as_object_mut() {
            md.insert("managedFields".into(), live["metadata"]["managedFields"].clone());
        }
        update(Some(&live), &mut new, &mgr(RUNNER, Operation::Update, None, "apps/v1", &t), &ty);
        assert_mf(step, &new, want, kcm);
        prev = want.clone();
    }
    // A patch that empties a non-list of lists with $patch: replace on a list.
    let live = strip_status(&prev);
    let p =
        json!({"spec": {"template": {"spec": {"containers": [{"$patch": "replace"}, {"name": "x", "image": "i"}]}}}});
    let out = strategic_merge_patch(&live, &p, &ty).expect("replace list");
    assert_eq!(out["spec"]["template"]["spec"]["containers"], json!([{"name": "x", "image": "i"}]));
}

#[test]
fn entries_sorted_like_the_server() {
    let ty = TypeNav::builtin("v1", "ConfigMap").expect("type");
    let mut obj =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "uid": "u"}, "data": {"a": "1"}});
    update(None, &mut obj, &mgr("zeta", Operation::Update, None, "v1", "2026-11-29T10:00:05Z"), &ty);
    let mut next = obj.clone();
    next["data"]["b"] = json!("2");
    update(Some(&obj), &mut next, &mgr("alpha", Operation::Update, None, "v1", "2026-11-29T10:00:06Z"), &ty);
    let applied = apply(
        Some(&next),
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "1"}}),
        &mgr("mgr", Operation::Apply, None, "v1", "2026-11-29T10:00:07Z"),
        false,
        &ty,
    )
    .expect("apply");
    let names: Vec<&str> = applied["metadata"]["managedFields"]
        .as_array()
        .map(|a| a.iter().filter_map(|e| e["manager"].as_str()).collect())
        .unwrap_or_default();
    // Apply first (a no-op apply: no time), then Update entries by time.
    assert_eq!(names, ["mgr", "zeta", "alpha"]);
    assert!(applied["metadata"]["managedFields"][0].get("time").is_none());
}

#[test]
fn update_without_changes_records_nothing() {
    let ty = TypeNav::builtin("v1", "ServiceAccount").expect("type");
    let mut obj = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "app", "uid": "u", "namespace": "n"}});
    update(None, &mut obj, &mgr(RUNNER, Operation::Update, None, "v1", "2026-11-29T10:00:00Z"), &ty);
    assert!(obj["metadata"].get("managedFields").is_none());
    // An existing object without managedFields is not tracked.
    let mut changed = obj.clone();
    changed["metadata"]["labels"] = json!({"a": "b"});
    update(Some(&obj), &mut changed, &mgr(RUNNER, Operation::Update, None, "v1", "2026-11-29T10:00:01Z"), &ty);
    assert!(changed["metadata"].get("managedFields").is_none());
}

#[test]
fn status_update_and_set_lists() {
    // Deployment status by the controller (status subresource, status is a Go value struct).
    let ty = TypeNav::builtin("apps/v1", "Deployment").expect("type");
    let old = json!({"metadata": {"name": "d", "managedFields": [{"manager": "x", "operation": "Update", "apiVersion": "apps/v1",
        "time": "2026-11-29T10:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}}]}});
    let mut new = old.clone();
    new["status"] = json!({"observedGeneration": 1, "conditions": [{"type": "Available", "status": "False"}]});
    update(
        Some(&old),
        &mut new,
        &mgr("kcm", Operation::Update, Some("status"), "apps/v1", "2026-11-29T10:00:01Z"),
        &ty,
    );
    let e = &new["metadata"]["managedFields"][1];
    assert_eq!(e["subresource"], "status");
    assert_eq!(
        e["fieldsV1"],
        json!({"f:status": {"f:observedGeneration": {}, "f:conditions": {".": {}, "k:{\"type\":\"Available\"}": {".": {}, "f:type": {}, "f:status": {}}}}})
    );
    // Finalizers are a set: `v:` items.
    let cm = TypeNav::builtin("v1", "ConfigMap").expect("type");
    let mut obj = json!({"metadata": {"name": "c", "finalizers": ["example.com/keep"]}});
    update(None, &mut obj, &mgr(RUNNER, Operation::Update, None, "v1", "2026-11-29T10:00:00Z"), &cm);
    assert_eq!(
        obj["metadata"]["managedFields"][0]["fieldsV1"],
        json!({"f:metadata": {"f:finalizers": {".": {}, "v:\"example.com/keep\"": {}}}})
    );
}

#[test]
fn crd_apply_list_map_and_set() {
    let r = Replay::load("14-crd");
    let schema = json!({"type": "object", "properties": {
        "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
        "spec": {"type": "object", "properties": {
            "size": {"type": "integer"}, "color": {"type": "string"}, "fixed": {"type": "string"},
            "minReplicas": {"type": "integer"}, "maxReplicas": {"type": "integer"},
            "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                      "items": {"type": "object", "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}}},
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}}}}});
    let ty = TypeNav::new(&schema);
    let before = r.response("apply-list-map-a");
    // Rebuild the state before apply-list-map-a from its answer: the runner's Update entry only.
    let mut live = before.clone();
    let mf: Vec<Value> = before["metadata"]["managedFields"]
        .as_array()
        .map(|a| a.iter().filter(|e| e["manager"] == RUNNER).cloned().collect())
        .unwrap_or_default();
    live["metadata"]["managedFields"] = Value::Array(mf);
    let av = before["apiVersion"].as_str().unwrap_or("").to_string();
    let mut body_b = r.body("apply-list-map-b").clone();
    body_b["apiVersion"] = json!(av);
    let t = time_of(1);
    // mgr-a applied first (entry taken from the recording), then mgr-b adds a port and a tag.
    let out = apply(Some(before), &body_b, &mgr("mgr-b", Operation::Apply, None, &av, &t), false, &ty).expect("apply");
    let want = r.response("apply-list-map-b");
    assert_eq!(out["spec"], want["spec"]);
    assert_mf("apply-list-map-b", &out, want, None);
    let _ = live;
}

/// Every recorded POST of a built-in type: the creator's entry, computed from the stored object
/// (status stripped; fields the server sets after the field manager ran removed first).
#[test]
fn recorded_creates_of_builtin_types() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/conformance/recorded");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("recorded dir")
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().trim_end_matches(".json").to_string()))
        .collect();
    names.sort();
    let mut checked = 0;
    let mut failures = Vec::new();
    for name in names {
        let r = Replay::load(&name);
        for ex in r.rec["exchanges"].as_array().cloned().unwrap_or_default() {
            let step = ex["step"].as_str().unwrap_or("");
            let Some(s) = r.case["steps"].as_array().and_then(|a| a.iter().find(|s| s["name"] == step)) else {
                continue;
            };
            let body = &ex["body"];
            let mf = body["metadata"]["managedFields"].as_array().cloned().unwrap_or_default();
            if s["method"] != "POST" || ex["status"] != 201 || mf.len() != 1 || mf[0].get("subresource").is_some() {
                continue;
            }
            let (av, kind) = (body["apiVersion"].as_str().unwrap_or(""), body["kind"].as_str().unwrap_or(""));
            let Some(ty) = TypeNav::builtin(av, kind) else { continue };
            let manager = mf[0]["manager"].as_str().unwrap_or("").to_string();
            let mut new = strip_status(body);
            if let Some(md) = new["metadata"].as_object_mut() {
                md.remove("managedFields");
            }
            remove_server_set_fields(&mut new, kind, s);
            let t = time_of(0);
            update(None, &mut new, &mgr(&manager, Operation::Update, None, av, &t), &ty);
            checked += 1;
            if norm_mf(&new, None) != norm_mf(body, None) {
                failures.push(format!(
                    "{name}/{step}: got {}\n want {}",
                    serde_json::to_string(&new["metadata"]["managedFields"][0]["fieldsV1"]).unwrap_or_default(),
                    serde_json::to_string(&body["metadata"]["managedFields"][0]["fieldsV1"]).unwrap_or_default()
                ));
            }
        }
    }
    assert!(checked > 50, "only {checked} creates checked");
    assert!(failures.is_empty(), "{} of {checked} differ:\n{}", failures.len(), failures.join("\n"));
}

/// What the real server sets after the field manager ran (strategy, admission, allocators),
/// when the request did not set it.
fn remove_server_set_fields(obj: &mut Value, kind: &str, step: &Value) {
    let req = &step["body"];
    fn drop_unless_requested(obj: &mut Value, req: &Value, path: &[&str]) {
        let mut probe = req;
        for p in path {
            probe = &probe[*p];
        }
        if !probe.is_null() {
            return;
        }
        let Some((last, parents)) = path.split_last() else { return };
        let mut cur = &mut *obj;
        for p in parents {
            cur = &mut cur[*p];
        }
        if let Some(m) = cur.as_object_mut() {
            m.remove(*last);
        }
    }
    let drop = |obj: &mut Value, path: &[&str]| drop_unless_requested(obj, req, path);
    match kind {
        "Service" => {
            for f in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
                drop(obj, &["spec", f]);
            }
            let ports = obj["spec"]["ports"].as_array_mut();
            for p in ports.into_iter().flatten() {
                if let Some(m) = p.as_object_mut()
                    && req["spec"]["type"] == "NodePort"
                {
                    m.remove("nodePort");
                }
            }
        }
        // The namespace label is set by defaulting (recorded), the `kubernetes` finalizer later.
        "Namespace" => drop(obj, &["spec"]),
        "Job" => {
            drop(obj, &["metadata", "labels"]);
            drop(obj, &["spec", "selector"]);
            drop(obj, &["spec", "template", "metadata", "labels"]);
        }
        "Pod" => {
            for f in ["priority", "preemptionPolicy", "serviceAccount", "serviceAccountName", "tolerations"] {
                drop(obj, &["spec", f]);
            }
        }
        "PersistentVolume" | "PersistentVolumeClaim" => drop(obj, &["metadata", "finalizers"]),
        "Node" => drop(obj, &["spec", "taints"]),
        _ => {}
    }
}

/// Every recorded non-apply write (PUT, PATCH, status writes) of a built-in type in the cases
/// without controllers, replayed from the previous recorded state of the same object.
#[test]
fn recorded_updates_of_builtin_types() {
    let cases = [
        "03-configmap-crud",
        "11-ssa-managers",
        "13-patch-types",
        "16-finalizers-deletion",
        "19-lease",
        "20-events",
        "22-errors",
        "24-secrets-services",
    ];
    let mut checked = 0;
    let mut failures = Vec::new();
    for name in cases {
        let r = Replay::load(name);
        let mut last: std::collections::HashMap<String, Value> = std::collections::HashMap::new();
        for ex in r.rec["exchanges"].as_array().cloned().unwrap_or_default() {
            let step = ex["step"].as_str().unwrap_or("");
            let Some(s) = r.case["steps"].as_array().and_then(|a| a.iter().find(|s| s["name"] == step)) else {
                continue;
            };
            let body = &ex["body"];
            let path = s["path"].as_str().unwrap_or("").trim_end_matches("/status").to_string();
            let ok = ex["status"].as_u64().is_some_and(|c| c < 300);
            if ok && body["kind"].as_str().is_some_and(|k| k.ends_with("List")) {
                // List answers (and deletecollection's) show the current state of their items.
                for item in body["items"].as_array().into_iter().flatten() {
                    let key = format!("{path}/{}", item["metadata"]["name"].as_str().unwrap_or(""));
                    let mut item = item.clone();
                    item["apiVersion"] = body["apiVersion"].clone();
                    item["kind"] = json!(body["kind"].as_str().unwrap_or("").trim_end_matches("List"));
                    last.insert(key, item);
                }
                continue;
            }
            if !ok || body["metadata"]["uid"].is_null() {
                continue;
            }
            let method = s["method"].as_str().unwrap_or("GET");
            let ctype = s["content_type"].as_str().unwrap_or("");
            let key = if method == "POST" {
                format!("{path}/{}", body["metadata"]["name"].as_str().unwrap_or(""))
            } else {
                path.clone()
            };
            let prev = last.insert(key, body.clone());
            let is_write = (method == "PUT" || method == "PATCH") && !ctype.contains("apply") && ctype != "${APPLY}";
            let dry = !s["query"]["dryRun"].is_null();
            let (Some(prev), true, false) = (prev, is_write, dry) else { continue };
            let (av, kind) = (body["apiVersion"].as_str().unwrap_or(""), body["kind"].as_str().unwrap_or(""));
            let Some(ty) = TypeNav::builtin(av, kind) else { continue };
            let manager = s["query"]["fieldManager"].as_str().unwrap_or(RUNNER).to_string();
            let status_write = s["path"].as_str().unwrap_or("").ends_with("/status");
            let sub = status_write.then_some("status");
            let reset = |v: &Value| {
                let mut v = v.clone();
                if let Some(m) = v.as_object_mut() {
                    if status_write {
                        m.remove("spec")
                    } else {
                        m.remove("status")
                    };
                }
                v
            };
            let old = reset(&prev);
            let mut new = reset(body);
            // The object as the request produced it: managedFields as sent (none) → old's.
            if let Some(md) = new["metadata"].as_object_mut() {
                md.remove("managedFields");
            }
            let t = time_of(1);
            update(Some(&old), &mut new, &mgr(&manager, Operation::Update, sub, av, &t), &ty);
            checked += 1;
            if norm_mf(&new, None) != norm_mf(body, None) {
                failures.push(format!(
                    "{name}/{step}: got {}\n want {}",
                    serde_json::to_string(&norm_mf(&new, None)).unwrap_or_default(),
                    serde_json::to_string(&norm_mf(body, None)).unwrap_or_default()
                ));
            }
        }
    }
    assert!(checked > 10, "only {checked} updates checked");
    assert!(failures.is_empty(), "{} of {checked} differ:\n{}", failures.len(), failures.join("\n"));
}

/// Custom resources created with POST: the Update entry from the CRD's own schema
/// (unstructured objects: no Go zero values, so `f:spec` carries its `"."`).
#[test]
fn recorded_creates_of_custom_resources() {
    let r = Replay::load("14-crd");
    let schema = r.body("create-crd")["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone();
    let ty = TypeNav::new(&schema);
    for step in ["create-w1", "create-w2-defaulted"] {
        let want = r.response(step);
        let mut new = want.clone();
        if let Some(md) = new["metadata"].as_object_mut() {
            md.remove("managedFields");
        }
        let av = want["apiVersion"].as_str().unwrap_or("").to_string();
        let t = time_of(0);
        update(None, &mut new, &mgr(RUNNER, Operation::Update, None, &av, &t), &ty);
        assert_mf(step, &new, want, None);
    }
}

#[test]
fn strategic_merge_patch_directives() {
    let ty = TypeNav::builtin("v1", "Pod").expect("type");
    let pod = json!({"metadata": {"finalizers": ["a", "b"], "labels": {"x": "1", "y": "2"}},
        "spec": {"containers": [{"name": "c", "image": "i", "env": [{"name": "A", "value": "1"}]}],
                 "volumes": [{"name": "v", "emptyDir": {}}]}});
    // Primitive merge lists: union, new values first; deletion list.
    let out = strategic_merge_patch(&pod, &json!({"metadata": {"finalizers": ["c"]}}), &ty).expect("smp");
    assert_eq!(out["metadata"]["finalizers"], json!(["c", "a", "b"]));
    let out = strategic_merge_patch(&pod, &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}), &ty)
        .expect("smp");
    assert_eq!(out["metadata"]["finalizers"], json!(["b"]));
    // null deletes a key; $patch: delete on a map empties it.
    let out = strategic_merge_patch(&pod, &json!({"metadata": {"labels": {"x": null}}}), &ty).expect("smp");
    assert_eq!(out["metadata"]["labels"], json!({"y": "2"}));
    let out = strategic_merge_patch(&pod, &json!({"metadata": {"labels": {"$patch": "delete"}}}), &ty).expect("smp");
    assert_eq!(out["metadata"]["labels"], json!({}));
    // $retainKeys on a volume source (strategy merge,retainKeys).
    let p = json!({"spec": {"volumes": [{"name": "v", "$retainKeys": ["name", "configMap"], "configMap": {"name": "cm"}}]}});
    let out = strategic_merge_patch(&pod, &p, &ty).expect("smp");
    assert_eq!(out["spec"]["volumes"], json!([{"name": "v", "configMap": {"name": "cm"}}]));
    // A merge list item without its merge key, and a bad directive.
    let e = strategic_merge_patch(&pod, &json!({"spec": {"containers": [{"image": "x"}]}}), &ty).expect_err("no key");
    assert_eq!(e.code, 500);
    assert!(e.message.contains("does not contain declared merge key: name"), "{}", e.message);
    let e = strategic_merge_patch(&pod, &json!({"metadata": {"labels": {"$patch": "bogus"}}}), &ty).expect_err("bad");
    assert_eq!(e.code, 500);
    let e = strategic_merge_patch(&pod, &json!([1]), &ty).expect_err("not a map");
    assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));
}

#[test]
fn json_patch_operations() {
    let doc = json!({"a": [1, 2], "b": {"c": "d"}});
    let out = json_patch(
        &doc,
        &json!([{"op": "add", "path": "/a/-", "value": 3}, {"op": "add", "path": "/a/0", "value": 0},
                {"op": "move", "from": "/b/c", "path": "/e"}, {"op": "copy", "from": "/e", "path": "/b/f"},
                {"op": "test", "path": "/a/3", "value": 3}]),
    )
    .expect("patch");
    assert_eq!(out, json!({"a": [0, 1, 2, 3], "b": {"f": "d"}, "e": "d"}));
    for bad in [
        json!([{"op": "replace", "path": "/missing", "value": 1}]),
        json!([{"op": "add", "path": "/x/y", "value": 1}]),
        json!([{"op": "add", "path": "/a/5", "value": 1}]),
        json!([{"op": "remove", "path": "/a/01"}]),
        json!([{"op": "frob", "path": "/a"}]),
        json!([{"path": "/a"}]),
    ] {
        let e = json_patch(&doc, &bad).expect_err("fails");
        assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"), "{bad}");
    }
    let e = json_patch(&doc, &json!({"op": "add"})).expect_err("not a list");
    assert_eq!(
        e.message,
        "error decoding patch: json: cannot unmarshal object into Go value of type []handlers.jsonPatchOp"
    );
    assert_eq!(merge_patch(&doc, &json!({"b": null, "a": {"x": 1}})), json!({"a": {"x": 1}}));
}

#[test]
fn apply_prunes_struct_fields_and_keeps_other_owners() {
    let ty = TypeNav::builtin("apps/v1", "Deployment").expect("type");
    let base = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"replicas": 1, "strategy": {"type": "Recreate"},
                 "template": {"spec": {"containers": [{"name": "a", "image": "x", "ports": [{"containerPort": 80}]}]}}}});
    let t1 = time_of(1);
    let a = apply(None, &base, &mgr("a", Operation::Apply, None, "apps/v1", &t1), false, &ty).expect("apply");
    // Dropping the strategy and the port: both pruned; the container stays (still applied).
    let mut less = base.clone();
    less["spec"].as_object_mut().map(|m| m.remove("strategy"));
    less["spec"]["template"]["spec"]["containers"][0].as_object_mut().map(|m| m.remove("ports"));
    let t2 = time_of(2);
    let out = apply(Some(&a), &less, &mgr("a", Operation::Apply, None, "apps/v1", &t2), false, &ty).expect("apply");
    assert!(out["spec"].get("strategy").is_none(), "{out}");
    assert!(out["spec"]["template"]["spec"]["containers"][0].get("ports").is_none(), "{out}");
    assert_eq!(out["spec"]["template"]["spec"]["containers"][0]["image"], "x");
    // A field another applier co-owns survives the first applier dropping it.
    let t3 = time_of(3);
    let b_cfg =
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"replicas": 1}});
    let with_b =
        apply(Some(&out), &b_cfg, &mgr("b", Operation::Apply, None, "apps/v1", &t3), false, &ty).expect("apply");
    let mut no_replicas = less.clone();
    no_replicas["spec"].as_object_mut().map(|m| m.remove("replicas"));
    let t4 = time_of(4);
    let out = apply(Some(&with_b), &no_replicas, &mgr("a", Operation::Apply, None, "apps/v1", &t4), false, &ty)
        .expect("apply");
    assert_eq!(out["spec"]["replicas"], 1);
}
