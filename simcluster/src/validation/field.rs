//! Field errors as apimachinery's `field.Error` renders them into Status causes:
//! `reason` = the error type, `message` = `ErrorBody()` (`Invalid value: "x": detail`),
//! `field` = the path.

use serde_json::Value;

use crate::errors::Cause;
use crate::rbac::go_quote;

/// A bad value as `field.Error` prints it: ints/bools plainly, strings `%q`, anything else as
/// Go's `json.Marshal` writes it.
pub(crate) fn show(v: &Value) -> String {
    match v {
        Value::String(s) => go_quote(s),
        Value::Number(_) | Value::Bool(_) => v.to_string(),
        other => go_json(other),
    }
}

/// `json.Marshal` output: like serde_json's, with `<`, `>`, `&` escaped as Go does.
pub(crate) fn go_json(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default().replace('<', "\\u003c").replace('>', "\\u003e").replace('&', "\\u0026")
}

fn with_detail(head: String, detail: &str) -> String {
    if detail.is_empty() { head } else { format!("{head}: {detail}") }
}

/// `field.Invalid(path, value, detail)`.
pub(crate) fn invalid(path: &str, value: &Value, detail: &str) -> Cause {
    Cause::new("FieldValueInvalid", with_detail(format!("Invalid value: {}", show(value)), detail), path)
}

/// `field.Invalid` with a string value.
pub(crate) fn invalid_str(path: &str, value: &str, detail: &str) -> Cause {
    invalid(path, &Value::String(value.to_string()), detail)
}

/// `field.Invalid` with an integer value.
pub(crate) fn invalid_int(path: &str, value: i64, detail: &str) -> Cause {
    invalid(path, &Value::from(value), detail)
}

/// `field.Required(path, detail)`.
pub(crate) fn required(path: &str, detail: &str) -> Cause {
    Cause::new("FieldValueRequired", with_detail("Required value".into(), detail), path)
}

/// `field.Forbidden(path, detail)`.
pub(crate) fn forbidden(path: &str, detail: &str) -> Cause {
    Cause::new("FieldValueForbidden", with_detail("Forbidden".into(), detail), path)
}

/// `field.Duplicate(path, value)`.
pub(crate) fn duplicate(path: &str, value: &Value) -> Cause {
    Cause::new("FieldValueDuplicate", format!("Duplicate value: {}", show(value)), path)
}

/// `field.NotSupported(path, value, valid)`.
pub(crate) fn not_supported(path: &str, value: &Value, valid: &[&str]) -> Cause {
    let detail = if valid.is_empty() {
        String::new()
    } else {
        format!("supported values: {}", valid.iter().map(|v| go_quote(v)).collect::<Vec<_>>().join(", "))
    };
    Cause::new("FieldValueNotSupported", with_detail(format!("Unsupported value: {}", show(value)), &detail), path)
}

/// `field.TooLong(path, _, max)`.
pub(crate) fn too_long(path: &str, max: usize) -> Cause {
    let unit = if max == 1 { "byte" } else { "bytes" };
    Cause::new("FieldValueTooLong", format!("Too long: may not be more than {max} {unit}"), path)
}

/// `path[key]` as `field.Path.Key` prints it.
pub(crate) fn key(path: &str, k: &str) -> String {
    format!("{path}[{k}]")
}

/// `path[i]`.
pub(crate) fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

/// `path.child` (just `child` when `path` is empty).
pub(crate) fn child(path: &str, c: &str) -> String {
    if path.is_empty() { c.to_string() } else { format!("{path}.{c}") }
}
