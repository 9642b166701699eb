//! Function-level replays of the recorded CRD exchanges (conformance cases 14 and 15), and the
//! product CRDs of `crds/` against the API examples of `testdata/api/`.

use std::path::PathBuf;

use serde_json::{Value, json};

use super::*;
use crate::errors::ApiError;

const RUN: &str = "r1abc";
const NS: &str = "conf-ns1";

fn read(rel: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Replace the placeholders of cases (`${run}`, `${ns}`, `${group}`) and of recordings
/// (`<run>`, `<ns>`) with fixed values.
fn subst(v: &Value) -> Value {
    match v {
        Value::String(s) => Value::String(
            s.replace("${group}", "${run}.example.com")
                .replace("${run}", RUN)
                .replace("${ns}", NS)
                .replace("<run>", RUN)
                .replace("<ns>", NS),
        ),
        Value::Array(a) => Value::Array(a.iter().map(subst).collect()),
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), subst(v))).collect()),
        other => other.clone(),
    }
}

struct Case {
    steps: Vec<Value>,
    recorded: Vec<Value>,
}

impl Case {
    fn load(name: &str) -> Case {
        let case: Value = serde_json::from_str(&read(&format!("conformance/cases/{name}.json"))).unwrap();
        let rec: Value = serde_json::from_str(&read(&format!("conformance/recorded/{name}.json"))).unwrap();
        Case {
            steps: subst(&case["steps"]).as_array().unwrap().clone(),
            recorded: subst(&rec["exchanges"]).as_array().unwrap().clone(),
        }
    }

    fn request(&self, step: &str) -> Value {
        self.steps.iter().find(|s| s["name"] == step).unwrap_or_else(|| panic!("step {step}"))["body"].clone()
    }

    fn recorded(&self, step: &str) -> &Value {
        self.recorded.iter().find(|s| s["step"] == step).unwrap_or_else(|| panic!("recorded {step}"))
    }
}

fn group() -> String {
    format!("{RUN}.example.com")
}

fn causes_json(causes: &[Cause]) -> Value {
    Value::Array(causes.iter().map(Cause::to_json).collect())
}

fn widgets() -> (Case, CrdModel) {
    let case = Case::load("14-crd");
    let model = parse(&case.request("create-crd")).expect("the widget CRD is valid");
    (case, model)
}

/// A POST of a custom resource as the server core would run it: decode (prune, default), then
/// validate. `Ok((object, warnings))` or `Err(status body)`.
fn create(v: &CrdVersion, model: &CrdModel, body: &Value, fv: FieldValidation) -> Result<(Value, Vec<String>), Value> {
    let mut obj = body.clone();
    let warnings = match v.default_and_prune(&mut obj, fv) {
        Ok(w) => w,
        Err(causes) => {
            return Err(ApiError::bad_request(strict_decoding_message(&model.kind, &v.name, &causes)).body().unwrap());
        }
    };
    let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
    let causes = v.validate(&obj, None);
    if !causes.is_empty() {
        return Err(ApiError::invalid(&model.group, &model.kind, &name, &causes).body().unwrap());
    }
    Ok((obj, warnings))
}

fn warning_headers(rec: &Value) -> Vec<String> {
    match &rec["headers"]["Warning"] {
        Value::Array(a) => a.iter().map(|w| w.as_str().unwrap().to_string()).collect(),
        Value::String(s) => vec![s.clone()],
        _ => Vec::new(),
    }
}

#[test]
fn widget_crd_model_and_status() {
    let (case, model) = widgets();
    assert_eq!(model.group, group());
    assert_eq!((model.plural.as_str(), model.singular.as_str()), ("widgets", "widget"));
    assert_eq!((model.kind.as_str(), model.list_kind.as_str()), ("Widget", "WidgetList"));
    assert_eq!(model.short_names, vec!["wdg"]);
    assert_eq!(model.categories, vec!["conformance"]);
    assert!(model.namespaced);
    let v = &model.versions[0];
    assert!(v.served && v.storage && v.status_subresource && v.scale_subresource.is_none());
    assert_eq!(v.printer_columns.len(), 5);
    // The create response's status, then the one the server writes once the names are accepted.
    assert_eq!(initial_status(&model), case.recorded("create-crd")["body"]["status"]);
    assert_eq!(accepted_status(&model, "<time>"), case.recorded("wait-established")["body"]["status"]);
}

#[test]
fn widget_creates_default_prune_and_warn() {
    let (case, model) = widgets();
    let v = &model.versions[0];
    for step in ["create-w1", "create-w2-defaulted", "unknown-fields-pruned-with-warning", "unknown-fields-ignore"] {
        let fv = if step == "unknown-fields-ignore" { FieldValidation::Ignore } else { FieldValidation::Warn };
        let rec = case.recorded(step);
        assert_eq!(rec["status"], 201, "{step}");
        let (obj, warnings) = create(v, &model, &case.request(step), fv).unwrap_or_else(|e| panic!("{step}: {e}"));
        assert_eq!(obj["spec"], rec["body"]["spec"], "{step}");
        let keys: Vec<&String> = obj.as_object().unwrap().keys().collect();
        assert_eq!(keys, vec!["apiVersion", "kind", "metadata", "spec"], "{step}");
        let headers: Vec<String> = warnings.iter().map(|w| unknown_field_warning(w)).collect();
        assert_eq!(headers, warning_headers(rec), "{step}");
    }
}

#[test]
fn widget_invalid_creates_match_recorded_status() {
    let (case, model) = widgets();
    let v = &model.versions[0];
    for step in [
        "cel-rule-violation",
        "schema-minimum-violation",
        "schema-enum-violation",
        "schema-several-violations",
        "missing-required",
        "wrong-type",
        "duplicate-in-set",
        "unknown-fields-strict",
    ] {
        let fv = if step == "unknown-fields-strict" { FieldValidation::Strict } else { FieldValidation::Warn };
        let rec = case.recorded(step);
        let got = create(v, &model, &case.request(step), fv).expect_err(step);
        assert_eq!(got, rec["body"], "{step}");
    }
}

#[test]
fn widget_transition_rule_and_updates() {
    let (case, model) = widgets();
    let v = &model.versions[0];
    let w1 = case.recorded("create-w1")["body"].clone();
    let merge = |base: &Value, patch: &Value| {
        let mut out = base.clone();
        merge_patch(&mut out, patch);
        out
    };
    // cel-transition-rule: fixed may not change.
    let mut changed = merge(&w1, &case.request("cel-transition-rule"));
    assert_eq!(v.default_and_prune(&mut changed, FieldValidation::Warn), Ok(vec![]));
    let causes = v.validate(&changed, Some(&w1));
    let body = ApiError::invalid(&model.group, &model.kind, "w1", &causes).body().unwrap();
    assert_eq!(body, case.recorded("cel-transition-rule")["body"]);
    // merge-patch-spec-bumps-generation: accepted, and the result is the recorded spec.
    let mut bigger = merge(&w1, &case.request("merge-patch-spec-bumps-generation"));
    v.default_and_prune(&mut bigger, FieldValidation::Warn).unwrap();
    assert_eq!(v.validate(&bigger, Some(&w1)), vec![]);
    assert_eq!(bigger["spec"], case.recorded("merge-patch-spec-bumps-generation")["body"]["spec"]);
    // The server-side apply results validate against their predecessors.
    let a = &case.recorded("apply-list-map-a")["body"];
    let b = &case.recorded("apply-list-map-b")["body"];
    assert_eq!(v.validate(a, Some(&bigger)), vec![]);
    assert_eq!(v.validate(b, Some(a)), vec![]);
    // A transition rule is not evaluated on create, and an unchanged invalid value is ratcheted.
    let mut fixed = w1.clone();
    fixed["spec"]["tags"] = json!(["x", "x"]);
    assert_eq!(v.validate(&fixed, Some(&fixed)), vec![]);
    assert_eq!(v.validate(&fixed, None).len(), 1);
    // Duplicate keys of a list-type map.
    let mut dup = w1.clone();
    dup["spec"]["ports"] = json!([{"name": "http", "port": 1}, {"name": "http", "port": 2}]);
    assert_eq!(
        causes_json(&v.validate(&dup, None)),
        json!([{"reason": "FieldValueDuplicate", "message": "Duplicate value: {\"name\":\"http\"}", "field": "spec.ports[1]"}])
    );
}

fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = json!({});
            }
            let t = target.as_object_mut().unwrap();
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

/// The recorded Table, with the clock-dependent Age cells replaced by what `now` gives.
fn table_matches(rec: &Value, got: &Value) {
    let mut want = rec.clone();
    let mut got = got.clone();
    for t in [&mut want, &mut got] {
        if let Some(rows) = t["rows"].as_array_mut() {
            for r in rows {
                if let Some(c) = r["cells"].as_array_mut() {
                    c.pop();
                }
            }
        }
    }
    assert_eq!(got, want);
}

#[test]
fn widget_tables() {
    let (case, model) = widgets();
    let v = &model.versions[0];
    let list = &case.recorded("list")["body"];
    let items = list["items"].as_array().unwrap();
    let rv = json!({"resourceVersion": "<rv>"});

    let get = case.recorded("table-get");
    let w1 = case.recorded("get-w1")["body"].clone();
    table_matches(&get["body"], &v.table(std::slice::from_ref(&w1), IncludeObject::Metadata, rv.clone()));

    let t = v.table(items, IncludeObject::Metadata, json!({"resourceVersion": "<rv>", "continue": ""}));
    table_matches(&case.recorded("table-list")["body"], &t);
    let t = v.table(items, IncludeObject::None, rv.clone());
    table_matches(&case.recorded("table-list-include-none")["body"], &t);
    let w2 = items.iter().find(|i| i["metadata"]["name"] == "w2").unwrap();
    let t = v.table(std::slice::from_ref(w2), IncludeObject::Object, rv.clone());
    table_matches(&case.recorded("table-get-include-object")["body"], &t);

    // Age: a real timestamp against a fixed clock.
    let mut aged = w1.clone();
    aged["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
    let now: jiff::Timestamp = "2026-01-01T00:05:30Z".parse().unwrap();
    let t = v.table_at(&[aged], IncludeObject::None, rv, now);
    assert_eq!(t["rows"][0]["cells"], json!(["w1", 4, "red", null, 1, "5m30s"]));
}

#[test]
fn gadget_status_subresource_case() {
    let case = Case::load("15-status-subresource");
    let model = parse(&case.request("create-crd")).expect("the gadget CRD is valid");
    let v = &model.versions[0];
    assert!(v.status_subresource);
    assert_eq!(accepted_status(&model, "<time>"), case.recorded("wait-established")["body"]["status"]);
    assert_eq!(initial_status(&model)["storedVersions"], json!(["v1"]));
    // Creates and status writes validate; nothing is pruned or defaulted.
    for step in ["create-with-status-ignored", "put-status", "apply-status-condition"] {
        let mut obj = case.request(step);
        assert_eq!(v.default_and_prune(&mut obj, FieldValidation::Warn), Ok(vec![]), "{step}");
        assert_eq!(obj, case.request(step), "{step}");
        assert_eq!(v.validate(&obj, None), vec![], "{step}");
    }
    // (The recording normalized timestamps to `<time>`: put real ones back.)
    let stored: Value = serde_json::from_str(
        &serde_json::to_string(&case.recorded("get-status")["body"]).unwrap().replace("<time>", "2026-01-02T03:04:05Z"),
    )
    .unwrap();
    assert_eq!(v.validate(&stored, None), vec![]);
    // No CEL rules in this CRD: schema errors come without the `<nil>` cause.
    let mut bad = stored.clone();
    bad["status"]["conditions"] = json!([{"type": "Ready"}, {"type": "Ready", "status": "True"}]);
    bad["status"]["conditions"][0]["lastTransitionTime"] = json!("yesterday");
    assert_eq!(
        causes_json(&v.validate(&bad, None)),
        json!([
            {"reason": "FieldValueTypeInvalid", "field": "status.conditions[0].lastTransitionTime",
             "message": "Invalid value: \"yesterday\": status.conditions[0].lastTransitionTime in body must be of type date-time: \"yesterday\""},
            {"reason": "FieldValueRequired", "message": "Required value", "field": "status.conditions[0].status"},
            {"reason": "FieldValueDuplicate", "message": "Duplicate value: {\"type\":\"Ready\"}", "field": "status.conditions[1]"},
        ])
    );
}

// ---- the product CRDs against the API examples ----

fn yaml(text: &str) -> Value {
    serde_saphyr::from_str(text).unwrap_or_else(|e| panic!("yaml: {e}"))
}

fn product_crds() -> Vec<CrdModel> {
    let mut out = Vec::new();
    for name in ["applications", "healthchecks", "repositories", "revisions"] {
        let crd = yaml(&read(&format!("../crds/{name}.sync.kuvryn.io.yaml")));
        out.push(parse(&crd).unwrap_or_else(|e| panic!("{name}: {e:#?}")));
    }
    out
}

fn testdata(name: &str) -> Value {
    yaml(&read(&format!("../testdata/api/{name}")))
}

/// Create-time problems of an object as `field: message` strings (unknown fields first).
fn problems(crds: &[CrdModel], obj: &Value) -> Vec<String> {
    let kind = obj["kind"].as_str().unwrap();
    let model = crds.iter().find(|m| m.kind == kind).unwrap_or_else(|| panic!("no CRD for {kind}"));
    let v = model.storage_version().unwrap();
    let mut obj = obj.clone();
    let mut out: Vec<String> = match v.default_and_prune(&mut obj, FieldValidation::Warn) {
        Ok(w) => w.iter().map(|p| format!("unknown field {p:?}")).collect(),
        Err(c) => c.iter().map(|c| c.message.clone()).collect(),
    };
    out.extend(v.validate(&obj, None).iter().map(|c| format!("{}: {}", c.field, c.message)));
    out
}

#[test]
fn product_crds_parse() {
    let crds = product_crds();
    let kinds: Vec<&str> = crds.iter().map(|m| m.kind.as_str()).collect();
    assert_eq!(kinds, vec!["Application", "HealthCheck", "Repository", "Revision"]);
    for m in &crds {
        assert_eq!(m.group, "sync.kuvryn.io");
        assert!(m.namespaced);
        let v = m.storage_version().unwrap();
        assert!(v.status_subresource, "{}", m.kind);
        assert!(!v.printer_columns.is_empty(), "{}", m.kind);
    }
    let app = &crds[0].versions[0];
    assert_eq!(app.selectable_fields, vec![".spec.source.repository"]);
    assert_eq!(crds[0].short_names, vec!["app"]);
}

#[test]
fn product_examples_validate() {
    let crds = product_crds();
    for name in [
        "application-full.yaml",
        "application-minimal.yaml",
        "healthcheck-full.yaml",
        "repository-full.yaml",
        "repository-minimal.yaml",
        "revision-failed.yaml",
        "revision-full.yaml",
    ] {
        assert_eq!(problems(&crds, &testdata(name)), Vec::<String>::new(), "{name}");
    }
}

fn patched_cases(file: &str) -> Vec<(String, Option<String>, Value)> {
    let cases = testdata(file);
    cases
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let mut obj = testdata(c["base"].as_str().unwrap());
            merge_patch(&mut obj, &c["patch"]);
            (c["name"].as_str().unwrap().to_string(), c["expect"].as_str().map(str::to_string), obj)
        })
        .collect()
}

#[test]
fn product_edge_cases_are_accepted() {
    let crds = product_crds();
    for (name, _, obj) in patched_cases("valid-edge.yaml") {
        assert_eq!(problems(&crds, &obj), Vec::<String>::new(), "{name}");
    }
}

#[test]
fn product_invalid_cases_are_refused() {
    let crds = product_crds();
    for (name, expect, obj) in patched_cases("invalid.yaml") {
        let expect = expect.expect("invalid cases name their error");
        // JSON-pointer expectations name the field: `/spec/a/b` is the cause field `spec.a.b`.
        let expect = match expect.strip_prefix('/') {
            Some(p) => format!("{}:", p.replace('/', ".")),
            None => expect,
        };
        let found = problems(&crds, &obj);
        assert!(found.iter().any(|p| p.contains(&expect)), "{name}: expected {expect:?} in {found:#?}");
    }
}

#[test]
fn product_tables_and_root_rules() {
    let crds = product_crds();
    let app = crds[0].storage_version().unwrap();
    let mut obj = testdata("application-full.yaml");
    app.default_and_prune(&mut obj, FieldValidation::Warn).unwrap();
    obj["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
    let now: jiff::Timestamp = "2026-01-03T01:00:00Z".parse().unwrap();
    let t = app.table_at(std::slice::from_ref(&obj), IncludeObject::None, json!({"resourceVersion": "7"}), now);
    let names: Vec<&str> =
        t["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        vec!["Name", "Sync", "Health", "Revision", "Ready", "Status", "Dependencies", "Suspended", "Age"]
    );
    let cells = &t["rows"][0]["cells"];
    assert_eq!(cells[0], obj["metadata"]["name"]);
    assert_eq!(cells[8], json!("2d1h"));
    assert_eq!(t["metadata"], json!({"resourceVersion": "7"}));
    // Root rules see metadata.name; their causes have the `<nil>` field.
    let mut long = obj.clone();
    long["metadata"]["name"] = json!("a".repeat(64));
    let causes = app.validate(&long, None);
    assert_eq!(
        causes_json(&causes),
        json!([{"reason": "FieldValueInvalid", "field": "<nil>",
                "message": "Invalid value: Application names are at most 63 characters (they label every Revision)"}])
    );
    // Selectable field values.
    assert_eq!(
        app.field_value(&obj, ".spec.source.repository").as_deref(),
        obj["spec"]["source"]["repository"].as_str()
    );
}

#[test]
fn crd_validation_errors() {
    let (case, _) = widgets();
    let good = case.request("create-crd");
    let mut bad = good.clone();
    bad["metadata"]["name"] = json!("gizmos.example.com");
    bad["spec"]["scope"] = json!("Galaxy");
    bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["size"]["x-kubernetes-validations"] =
        json!([{"rule": "self >"}]);
    bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["tags"]["items"]["x-kubernetes-validations"] =
        json!([{"rule": "self == oldSelf"}]);
    bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["color"]["default"] =
        json!("purple");
    bad["spec"]["versions"][0]["additionalPrinterColumns"][0]["type"] = json!("float");
    let causes = parse(&bad).expect_err("invalid CRD");
    let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
    let sp = "spec.versions[0].schema.openAPIV3Schema.properties[spec]";
    assert_eq!(
        fields,
        vec![
            "metadata.name".to_string(),
            "spec.scope".to_string(),
            format!("{sp}.properties[color].default"),
            format!("{sp}.properties[size].x-kubernetes-validations[0].rule"),
            format!("{sp}.properties[tags].items.x-kubernetes-validations[0].rule"),
            "spec.versions[0].additionalPrinterColumns[0].type".to_string(),
        ]
    );
    assert_eq!(causes[1].message, "Unsupported value: \"Galaxy\": supported values: \"Cluster\", \"Namespaced\"");
    assert!(causes[2].message.starts_with("Unsupported value: \"purple\""), "{}", causes[2].message);
    assert!(causes[3].message.contains("compilation failed: ERROR: <input>:1:"), "{}", causes[3].message);
    assert!(causes[4].message.contains("oldSelf cannot be used on the uncorrelatable portion"));
}

#[test]
fn cel_features() {
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.example.com"},
        "spec": {"group": "example.com", "scope": "Cluster", "names": {"plural": "things", "kind": "Thing"},
          "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
            "type": "object",
            "properties": {"spec": {"type": "object",
              "x-kubernetes-validations": [
                {"rule": "self.max >= self.min", "messageExpression": "'max ' + string(self.max) + ' < min ' + string(self.min)",
                 "fieldPath": ".max", "reason": "FieldValueForbidden"},
                {"rule": "self.missing > 0"},
                {"rule": "!has(self.__namespace__) || self.__namespace__ != 'x'"},
                {"rule": "!has(self.when) || self.when < timestamp('2030-01-01T00:00:00Z')", "message": "too late"}],
              "properties": {"min": {"type": "integer"}, "max": {"type": "integer"}, "namespace": {"type": "string"},
                "missing": {"type": "integer"}, "when": {"type": "string", "format": "date-time"},
                "labels": {"type": "object", "additionalProperties": {"type": "string",
                  "x-kubernetes-validations": [{"rule": "self.size() < 4"}]}}}}}}}}]}
    });
    let model = parse(&crd).expect("valid");
    let v = &model.versions[0];
    let obj = json!({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "t"},
        "spec": {"min": 5, "max": 2, "namespace": "x", "when": "2031-01-01T00:00:00Z", "labels": {"a": "long!"}}});
    assert_eq!(
        causes_json(&v.validate(&obj, None)),
        json!([
            {"reason": "FieldValueForbidden", "message": "Forbidden: max 2 < min 5", "field": "spec.max"},
            {"reason": "FieldValueInvalid", "field": "spec",
             "message": "Invalid value: \"object\": no such key: missing evaluating rule: self.missing > 0"},
            {"reason": "FieldValueInvalid", "field": "spec",
             "message": "Invalid value: failed rule: !has(self.__namespace__) || self.__namespace__ != 'x'"},
            {"reason": "FieldValueInvalid", "field": "spec", "message": "Invalid value: too late"},
            {"reason": "FieldValueInvalid", "field": "spec.labels[a]", "message": "Invalid value: \"long!\": failed rule: self.size() < 4"},
        ])
    );
    // Kubernetes CEL libraries are registered.
    let (_, m) = widgets();
    let mut w = json!({"apiVersion": "x/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1}});
    m.versions[0].default_and_prune(&mut w, FieldValidation::Strict).unwrap();
    assert_eq!(w["spec"]["color"], "green");
    assert!(
        cel::compile(
            "'a,b'.split(',').size() == 2 && isURL('https://x') && quantity('1Gi').isGreaterThan(quantity('1Mi'))"
        )
        .is_ok()
    );
}

#[test]
fn strict_reports_every_unknown_field() {
    let (_, model) = widgets();
    let v = &model.versions[0];
    let mut obj = json!({"apiVersion": "x/v1", "kind": "Widget", "metadata": {"name": "w", "bogus": 1},
        "spec": {"size": 1, "ports": [{"name": "a", "extra": 1}]}, "zzz": true});
    let causes = v.default_and_prune(&mut obj, FieldValidation::Strict).expect_err("strict");
    assert_eq!(
        strict_decoding_message("Widget", "v1", &causes),
        "Widget in version \"v1\" cannot be handled as a Widget: strict decoding error: unknown field \"metadata.bogus\", unknown field \"spec.ports[0].extra\", unknown field \"zzz\""
    );
}
