//! What Go's typed JSON decoding does to a built-in object before anything else: unknown
//! fields are found (and dropped), and values of the wrong JSON type are an error worded as
//! `encoding/json` words it.

use serde_json::Value;

use crate::schema::{NodeKind, TypeNav};

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn schema_type(ty: &TypeNav) -> Option<String> {
    let t = ty.schema()?.get("type")?;
    match t {
        Value::String(s) => Some(s.clone()),
        Value::Array(a) => a.iter().filter_map(Value::as_str).find(|s| *s != "null").map(String::from),
        _ => None,
    }
}

fn go_type(t: &str, format: Option<&str>) -> &'static str {
    match (t, format) {
        ("string", _) => "string",
        ("integer", Some("int32")) => "int32",
        ("integer", _) => "int64",
        ("boolean", _) => "bool",
        ("number", _) => "float64",
        _ => "string",
    }
}

/// Walk `obj` against its type: unknown field paths go to `unknown` (and are removed); the
/// first type mismatch is written to `type_error`.
pub fn check(ty: &TypeNav, obj: &mut Value, kind: &str, unknown: &mut Vec<String>, type_error: &mut Option<String>) {
    walk(ty, obj, "", kind, unknown, type_error);
}

fn walk(ty: &TypeNav, v: &mut Value, path: &str, kind: &str, unknown: &mut Vec<String>, err: &mut Option<String>) {
    if err.is_some() || v.is_null() || ty.is_untyped() {
        return;
    }
    if ty.schema().is_some_and(|s| {
        s.get("x-kubernetes-int-or-string").is_some() || s.get("x-kubernetes-preserve-unknown-fields").is_some()
    }) {
        return;
    }
    let go_path = if path.is_empty() { kind.to_string() } else { format!("{kind}.{path}") };
    match ty.kind() {
        NodeKind::Object => {
            let Some(m) = v.as_object_mut() else {
                *err = Some(format!(
                    "json: cannot unmarshal {} into Go struct field {go_path} of type object",
                    json_type(v)
                ));
                return;
            };
            let keys: Vec<String> = m.keys().cloned().collect();
            for k in keys {
                if path.is_empty() && matches!(k.as_str(), "apiVersion" | "kind") {
                    continue;
                }
                let sub_path = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                if ty.is_struct() && !ty.allows_field(&k) {
                    unknown.push(sub_path);
                    m.remove(&k);
                    continue;
                }
                let child = ty.field(&k);
                // Map values keep the map's Go field name in errors.
                let child_path = if ty.is_struct() { sub_path } else { path.to_string() };
                if let Some(cv) = m.get_mut(&k) {
                    walk(&child, cv, &child_path, kind, unknown, err);
                }
            }
        }
        NodeKind::List => {
            let Some(items) = v.as_array_mut() else {
                *err = Some(format!(
                    "json: cannot unmarshal {} into Go struct field {go_path} of type array",
                    json_type(v)
                ));
                return;
            };
            let it = ty.items();
            for item in items {
                walk(&it, item, path, kind, unknown, err);
            }
        }
        NodeKind::Scalar => {
            let Some(t) = schema_type(ty) else { return };
            let ok = match t.as_str() {
                "string" => v.is_string(),
                "integer" => v.is_i64() || v.is_u64(),
                "number" => v.is_number(),
                "boolean" => v.is_boolean(),
                _ => true,
            };
            if !ok {
                let format = ty.schema().and_then(|s| s.get("format")).and_then(Value::as_str);
                *err = Some(format!(
                    "json: cannot unmarshal {} into Go struct field {go_path} of type {}",
                    json_type(v),
                    go_type(&t, format)
                ));
            }
        }
        NodeKind::Unknown => {}
    }
}
