//! The API types against their generated CRDs, without a cluster: serde round trips of the
//! examples in `testdata/api/`, schema defaults equal to the Rust defaults, every CEL rule
//! evaluated (with the `cel` crate) on valid and invalid objects, the published JSON schemas,
//! and the structural-schema rules the API server enforces on CRDs.

use std::path::PathBuf;

use kuvryn_sync::api::{Application, HealthCheck, Repository, Revision, crd};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

fn testdata(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/api").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    kuvryn_sync::yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `openAPIV3Schema` and the published JSON schema of a kind.
fn schemas(kind: &str) -> (Value, Value) {
    let manifest = crd::manifests().into_iter().find(|m| m["spec"]["names"]["kind"] == json!(kind)).expect("kind");
    let openapi = manifest["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone();
    let file = crd::generate()
        .into_iter()
        .find(|f| f.path == format!("schemas/sync.kuvryn.io/{}_v1alpha1.json", kind.to_lowercase()))
        .expect("json schema");
    (openapi, serde_json::from_str(&file.contents).unwrap())
}

/// Structural defaulting as the API server does it: a missing property with a `default` gets
/// it, then defaulting continues inside (so defaulted objects get their nested defaults).
fn apply_defaults(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(obj) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (name, sub) in props {
                    if !obj.contains_key(name)
                        && let Some(d) = sub.get("default")
                    {
                        obj.insert(name.clone(), d.clone());
                    }
                    if let Some(v) = obj.get_mut(name) {
                        apply_defaults(sub, v);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = schema.get("items") {
                items.iter_mut().for_each(|v| apply_defaults(sub, v));
            }
        }
        _ => {}
    }
}

/// Evaluate every `x-kubernetes-validations` rule that applies to `value`; return the messages
/// of the rules that did not hold (a rule that does not compile or does not return a bool fails
/// with its own text, so a broken rule fails here rather than in a cluster).
fn cel_failures(schema: &Value, value: &Value) -> Vec<String> {
    let mut out = Vec::new();
    cel_walk(schema, value, &mut out);
    out
}

fn cel_walk(schema: &Value, value: &Value, out: &mut Vec<String>) {
    if let Some(rules) = schema.get("x-kubernetes-validations").and_then(Value::as_array) {
        for rule in rules {
            let text = rule["rule"].as_str().expect("rule text");
            let message = rule.get("message").and_then(Value::as_str).unwrap_or(text);
            let program = match cel::Program::compile(text) {
                Ok(p) => p,
                Err(e) => {
                    out.push(format!("rule {text:?} does not compile: {e}"));
                    continue;
                }
            };
            let mut ctx = cel::Context::default();
            ctx.add_variable("self", value.clone()).expect("bind self");
            match program.execute(&ctx) {
                Ok(cel::Value::Bool(true)) => {}
                Ok(cel::Value::Bool(false)) => out.push(message.to_string()),
                other => out.push(format!("rule {text:?} did not evaluate to a bool: {other:?}")),
            }
        }
    }
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true)) {
        return;
    }
    match value {
        Value::Object(obj) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (name, sub) in props {
                    if let Some(v) = obj.get(name) {
                        cel_walk(sub, v, out);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = schema.get("items") {
                items.iter().for_each(|v| cel_walk(sub, v, out));
            }
        }
        _ => {}
    }
}

fn schema_errors(json_schema: &Value, value: &Value) -> Vec<String> {
    let validator = jsonschema::validator_for(json_schema).expect("the published schema compiles");
    validator.iter_errors(value).map(|e| format!("{}: {e}", e.instance_path())).collect()
}

/// Everything the API server (schema + CEL) would object to, after defaulting.
fn problems(kind: &str, object: &Value) -> Vec<String> {
    let (openapi, json_schema) = schemas(kind);
    let mut defaulted = object.clone();
    apply_defaults(&openapi, &mut defaulted);
    let mut out = schema_errors(&json_schema, &defaulted);
    out.extend(cel_failures(&openapi, &defaulted));
    out
}

fn merge_patch(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

fn kind_of(v: &Value) -> String {
    v["kind"].as_str().expect("kind").to_string()
}

/// value -> T -> value equals the API server's defaulted value: the Rust type loses nothing
/// and its defaults are the schema's.
fn assert_round_trip<T: Serialize + DeserializeOwned>(file: &str) {
    let original = testdata(file);
    let (openapi, _) = schemas(&kind_of(&original));
    let mut defaulted = original.clone();
    apply_defaults(&openapi, &mut defaulted);
    let typed: T = serde_json::from_value(original).unwrap_or_else(|e| panic!("{file}: {e}"));
    let back = serde_json::to_value(&typed).unwrap();
    assert_eq!(back, defaulted, "{file}: round trip through the Rust type must equal the defaulted object");
}

#[test]
fn examples_round_trip_through_the_rust_types() {
    assert_round_trip::<Repository>("repository-full.yaml");
    assert_round_trip::<Repository>("repository-minimal.yaml");
    assert_round_trip::<Application>("application-full.yaml");
    assert_round_trip::<Application>("application-minimal.yaml");
    assert_round_trip::<Revision>("revision-full.yaml");
    assert_round_trip::<Revision>("revision-failed.yaml");
    assert_round_trip::<HealthCheck>("healthcheck-full.yaml");
}

#[test]
fn examples_are_valid() {
    for file in [
        "repository-full.yaml",
        "repository-minimal.yaml",
        "application-full.yaml",
        "application-minimal.yaml",
        "revision-full.yaml",
        "revision-failed.yaml",
        "healthcheck-full.yaml",
    ] {
        let v = testdata(file);
        assert_eq!(problems(&kind_of(&v), &v), Vec::<String>::new(), "{file}");
    }
}

#[test]
fn unconditional_defaults_are_materialized_by_the_schema() {
    let (openapi, _) = schemas("Application");
    let mut app = testdata("application-minimal.yaml");
    apply_defaults(&openapi, &mut app);
    let spec = &app["spec"];
    assert_eq!(spec["sync"], json!({"automatic": true, "prune": false, "selfHeal": false, "conflictPolicy": "fail"}));
    assert_eq!(spec["health"], json!({"timeout": "5m"}));
    assert_eq!(spec["history"], json!({"limit": 10}));
    assert_eq!(
        spec["failurePolicy"],
        json!({"action": "pause", "maxAttempts": 3, "backoff": {"duration": "10s", "factor": 2, "maxDuration": "5m"}})
    );
    assert_eq!(spec["strategy"], json!({"waves": true, "hooks": true}));
    assert_eq!(spec["deletionPolicy"], json!("Orphan"));
    assert_eq!(spec["suspend"], json!(false));
    assert_eq!(spec["source"]["path"], json!("."));
    // No render type: chosen from the path by the controller (a conditional default).
    assert_eq!(spec["source"]["render"], json!({}));

    let (openapi, _) = schemas("Repository");
    let mut repo = testdata("repository-minimal.yaml");
    apply_defaults(&openapi, &mut repo);
    assert_eq!(repo["spec"]["interval"], json!("1m"));
    assert_eq!(repo["spec"]["timeout"], json!("60s"));
    assert_eq!(repo["spec"]["applicationConfigPaths"], json!([".ksync.yaml"]));
    assert_eq!(repo["spec"]["suspend"], json!(false));
    assert_eq!(repo["spec"]["type"], json!("Git"));
}

#[derive(serde::Deserialize)]
struct Case {
    name: String,
    base: String,
    patch: Value,
    #[serde(default)]
    expect: Option<String>,
}

fn cases(file: &str) -> Vec<(Case, Value)> {
    let all: Vec<Case> = serde_json::from_value(testdata(file)).expect("cases");
    assert!(!all.is_empty());
    all.into_iter()
        .map(|c| {
            let mut object = testdata(&c.base);
            merge_patch(&mut object, &c.patch);
            (c, object)
        })
        .collect()
}

#[test]
fn invalid_objects_are_refused_with_the_documented_message() {
    for (case, object) in cases("invalid.yaml") {
        let expect = case.expect.as_deref().expect("invalid cases name their error");
        let found = problems(&kind_of(&object), &object);
        assert!(
            found.iter().any(|p| p.contains(expect)),
            "{}: expected an error containing {expect:?}, got {found:#?}",
            case.name
        );
    }
}

#[test]
fn edge_cases_are_accepted() {
    for (case, object) in cases("valid-edge.yaml") {
        assert_eq!(problems(&kind_of(&object), &object), Vec::<String>::new(), "{}", case.name);
    }
}

/// The rules the API server checks before it accepts a CRD (structural schemas, list-map keys,
/// defaults that validate) and the bounds it needs to estimate CEL cost.
#[test]
fn crd_schemas_are_structural_and_cel_cost_is_bounded() {
    for manifest in crd::manifests() {
        let kind = manifest["spec"]["names"]["kind"].as_str().unwrap().to_string();
        let openapi = &manifest["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let mut problems = Vec::new();
        structural(openapi, &kind, &mut Vec::new(), &mut problems);
        assert_eq!(problems, Vec::<String>::new(), "{kind}");
    }
}

fn structural(schema: &Value, path: &str, bounded_by: &mut Vec<bool>, problems: &mut Vec<String>) {
    let obj = schema.as_object().expect("schema object");
    for forbidden in ["$ref", "allOf", "anyOf", "oneOf", "not", "definitions", "$defs", "nullable"] {
        if obj.contains_key(forbidden) {
            problems.push(format!("{path}: uses {forbidden}"));
        }
    }
    let preserve = obj.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
    let ty = obj.get("type").and_then(Value::as_str);
    if ty.is_none() && !preserve && obj.get("x-kubernetes-int-or-string") != Some(&json!(true)) {
        problems.push(format!("{path}: no type"));
    }
    if obj.contains_key("properties") && obj.contains_key("additionalProperties") {
        problems.push(format!("{path}: both properties and additionalProperties"));
    }
    if obj.contains_key("properties") && ty != Some("object") {
        problems.push(format!("{path}: properties on a non-object"));
    }
    if obj.contains_key("items") != (ty == Some("array")) {
        problems.push(format!("{path}: items and type array must go together"));
    }
    if let Some(d) = obj.get("default") {
        let errs = default_problems(schema, d);
        problems.extend(errs.into_iter().map(|e| format!("{path}: default does not validate: {e}")));
    }
    if let Some(required) = obj.get("required").and_then(Value::as_array) {
        for r in required {
            if obj.get("properties").and_then(|p| p.get(r.as_str().unwrap())).is_none() {
                problems.push(format!("{path}: required {r} is not a property"));
            }
        }
    }
    if obj.get("x-kubernetes-list-type") == Some(&json!("map")) {
        let items = &obj["items"];
        for key in obj["x-kubernetes-list-map-keys"].as_array().expect("map keys") {
            let required = items["required"].as_array().is_some_and(|r| r.contains(key));
            let defaulted = items["properties"][key.as_str().unwrap()].get("default").is_some();
            if !required && !defaulted {
                problems.push(format!("{path}: list-map key {key} is neither required nor defaulted"));
            }
        }
    }
    let unbounded_here = match ty {
        Some("array") => !obj.contains_key("maxItems"),
        Some("string") => !obj.contains_key("maxLength") && !obj.contains_key("enum"),
        _ => false,
    };
    if obj.contains_key("x-kubernetes-validations") {
        if unbounded_here {
            problems.push(format!("{path}: CEL rule on an unbounded {}", ty.unwrap_or("?")));
        }
        if bounded_by.iter().any(|b| !b) {
            problems.push(format!("{path}: CEL rule under an array without maxItems"));
        }
        if ty == Some("array")
            && obj["items"]["type"] == json!("string")
            && !obj["items"].as_object().unwrap().contains_key("maxLength")
        {
            problems.push(format!("{path}: CEL rule over strings without maxLength"));
        }
    }
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        for (name, sub) in props {
            structural(sub, &format!("{path}.{name}"), bounded_by, problems);
        }
    }
    if let Some(items) = obj.get("items") {
        bounded_by.push(obj.contains_key("maxItems"));
        structural(items, &format!("{path}[]"), bounded_by, problems);
        bounded_by.pop();
    }
}

fn default_problems(schema: &Value, default: &Value) -> Vec<String> {
    let mut s = schema.clone();
    let m = s.as_object_mut().unwrap();
    m.remove("default");
    let wrapped = crd::to_json_schema(&json!({"type": "object", "properties": {"spec": s}}), "g", "v", "K");
    let mut probe = json!({"apiVersion": "g/v", "kind": "K", "metadata": {}, "spec": default});
    apply_defaults(&json!({"type": "object", "properties": {"spec": schema}}), &mut probe);
    schema_errors(&wrapped, &probe)
}
