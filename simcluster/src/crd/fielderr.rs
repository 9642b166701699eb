//! Field errors as apimachinery's `field.Error` renders them (`ErrorBody()`), built directly as
//! Status causes, and the Go formatting they rely on (`%q`, `%v` of numbers, `json.Marshal`).

use serde_json::Value;

use crate::errors::Cause;

/// A field path: `""` is the nil path (rendered `<nil>`), otherwise `spec.ports[0].name`.
pub(crate) fn child(path: &str, name: &str) -> String {
    if path.is_empty() { name.to_string() } else { format!("{path}.{name}") }
}

/// `path[i]`.
pub(crate) fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

/// `path[key]` (field.Path.Key: map keys are not quoted).
pub(crate) fn key(path: &str, k: &str) -> String {
    format!("{path}[{k}]")
}

/// The cause's `field`: the nil path is `<nil>`.
fn field_str(path: &str) -> String {
    if path.is_empty() { "<nil>".to_string() } else { path.to_string() }
}

/// The bad value of a field error.
#[derive(Clone, Debug)]
pub(crate) enum Bad {
    /// `field.OmitValueType{}`: no value shown.
    Omit,
    /// A JSON value (`null` renders as `null`, strings quoted, numbers and booleans plain,
    /// objects and arrays as JSON).
    Json(Value),
    /// A Go `int` (rendered plain).
    Int(i64),
}

impl Bad {
    pub(crate) fn str(s: &str) -> Bad {
        Bad::Json(Value::String(s.to_string()))
    }
}

fn render_bad(bad: &Bad) -> Option<String> {
    match bad {
        Bad::Omit => None,
        Bad::Int(i) => Some(i.to_string()),
        Bad::Json(v) => Some(match v {
            Value::String(s) => go_quote(s),
            Value::Number(_) | Value::Bool(_) => go_v(v),
            other => go_json(other),
        }),
    }
}

/// `ErrorBody()` of an error type that shows its value.
fn body_with_value(type_str: &str, bad: &Bad, detail: &str) -> String {
    let mut s = match render_bad(bad) {
        Some(v) => format!("{type_str}: {v}"),
        None => type_str.to_string(),
    };
    if !detail.is_empty() {
        s.push_str(": ");
        s.push_str(detail);
    }
    s
}

fn body_plain(type_str: &str, detail: &str) -> String {
    if detail.is_empty() { type_str.to_string() } else { format!("{type_str}: {detail}") }
}

/// `field.Invalid`.
pub(crate) fn invalid(path: &str, bad: Bad, detail: &str) -> Cause {
    Cause::new("FieldValueInvalid", body_with_value("Invalid value", &bad, detail), field_str(path))
}

/// `field.TypeInvalid`.
pub(crate) fn type_invalid(path: &str, bad: Bad, detail: &str) -> Cause {
    Cause::new("FieldValueTypeInvalid", body_with_value("Invalid value", &bad, detail), field_str(path))
}

/// `field.NotSupported`.
pub(crate) fn not_supported(path: &str, bad: Bad, valid: &[String]) -> Cause {
    let detail = if valid.is_empty() {
        String::new()
    } else {
        format!("supported values: {}", valid.iter().map(|v| go_quote(v)).collect::<Vec<_>>().join(", "))
    };
    Cause::new("FieldValueNotSupported", body_with_value("Unsupported value", &bad, &detail), field_str(path))
}

/// `field.Required`.
pub(crate) fn required(path: &str, detail: &str) -> Cause {
    Cause::new("FieldValueRequired", body_plain("Required value", detail), field_str(path))
}

/// `field.Forbidden`.
pub(crate) fn forbidden(path: &str, detail: &str) -> Cause {
    Cause::new("FieldValueForbidden", body_plain("Forbidden", detail), field_str(path))
}

/// `field.Duplicate`.
pub(crate) fn duplicate(path: &str, bad: Bad) -> Cause {
    Cause::new("FieldValueDuplicate", body_with_value("Duplicate value", &bad, ""), field_str(path))
}

/// `field.TooLong` (the value is never shown).
pub(crate) fn too_long(path: &str, max: i64) -> Cause {
    let detail = if max >= 0 {
        format!("may not be more than {max} {}", if max == 1 { "byte" } else { "bytes" })
    } else {
        "value is too long".to_string()
    };
    Cause::new("FieldValueTooLong", body_plain("Too long", &detail), field_str(path))
}

/// `field.TooMany`.
pub(crate) fn too_many(path: &str, actual: i64, max: i64) -> Cause {
    let detail = if max >= 0 {
        format!("must have at most {max} {}", if max == 1 { "item" } else { "items" })
    } else {
        "has too many items".to_string()
    };
    let bad = if actual >= 0 { Bad::Int(actual) } else { Bad::Omit };
    Cause::new("FieldValueTooMany", body_with_value("Too many", &bad, &detail), field_str(path))
}

/// Go `strconv.Quote`.
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if c.is_control() => {
                let n = c as u32;
                if n <= 0xffff {
                    out.push_str(&format!("\\u{n:04x}"));
                } else {
                    out.push_str(&format!("\\U{n:08x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go `%v` of a JSON scalar as decoded into `interface{}` (int64 or float64, bool, string).
pub(crate) fn go_v(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.to_string()
            } else if let Some(u) = n.as_u64() {
                u.to_string()
            } else {
                go_float(n.as_f64().unwrap_or(0.0))
            }
        }
        Value::String(s) => s.clone(),
        other => go_json(other),
    }
}

/// Go `%v` (= `strconv.FormatFloat(f, 'g', -1, 64)`) of a float64.
pub(crate) fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf".to_string() } else { "-Inf".to_string() };
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0".to_string() } else { "0".to_string() };
    }
    // Shortest round-trip digits in Go's %g layout: with the shortest precision, strconv uses
    // an exponent when exp < -4 || exp >= 6.
    let sci = format!("{f:e}"); // e.g. "1.5e0", "-1.2345e21"
    let (mant, exp) = match sci.split_once('e') {
        Some((m, e)) => (m.to_string(), e.parse::<i32>().unwrap_or(0)),
        None => return sci,
    };
    let neg = mant.starts_with('-');
    let digits: String = mant.chars().filter(|c| c.is_ascii_digit()).collect();
    let nd = digits.len() as i32;
    let eprec = 6;
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    if exp < -4 || exp >= eprec {
        out.push_str(&digits[..1]);
        if nd > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if exp < 0 { '-' } else { '+' });
        out.push_str(&format!("{:02}", exp.abs()));
    } else if exp < 0 {
        out.push_str("0.");
        for _ in 0..(-exp - 1) {
            out.push('0');
        }
        out.push_str(&digits);
    } else {
        let int_len = (exp + 1) as usize;
        if digits.len() <= int_len {
            out.push_str(&digits);
            for _ in 0..(int_len - digits.len()) {
                out.push('0');
            }
        } else {
            out.push_str(&digits[..int_len]);
            out.push('.');
            out.push_str(&digits[int_len..]);
        }
    }
    out
}

/// Go `json.Marshal` of a decoded JSON value: keys sorted, `<`, `>`, `&` escaped.
pub(crate) fn go_json(v: &Value) -> String {
    let mut out = String::new();
    write_json(v, &mut out);
    out
}

fn write_json(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            if n.is_f64() {
                out.push_str(&go_json_float(n.as_f64().unwrap_or(0.0)));
            } else {
                out.push_str(&n.to_string());
            }
        }
        Value::String(s) => write_json_string(s, out),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json(x, out);
            }
            out.push(']');
        }
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json_string(k, out);
                out.push(':');
                write_json(&m[k.as_str()], out);
            }
            out.push('}');
        }
    }
}

fn go_json_float(f: f64) -> String {
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        // Go: 'e' format, exponent without leading zeros beyond two digits ("1e+21", "1e-07").
        let s = format!("{f:e}");
        if let Some((m, e)) = s.split_once('e') {
            let exp: i32 = e.parse().unwrap_or(0);
            return format!("{m}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
        }
        return s;
    }
    if f.fract() == 0.0 && abs < 1e21 {
        return format!("{}", f as i128);
    }
    format!("{f}")
}

fn write_json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn go_formatting() {
        assert_eq!(go_float(1.0), "1");
        assert_eq!(go_float(1.5), "1.5");
        assert_eq!(go_float(100.0), "100");
        assert_eq!(go_float(1e6), "1e+06");
        assert_eq!(go_float(123456.0), "123456");
        assert_eq!(go_float(1234567.0), "1.234567e+06");
        assert_eq!(go_float(0.0001), "0.0001");
        assert_eq!(go_float(0.00001), "1e-05");
        assert_eq!(go_quote("a\"b\n"), "\"a\\\"b\\n\"");
        assert_eq!(go_json(&json!({"b": 1, "a": "<x>"})), "{\"a\":\"\\u003cx\\u003e\",\"b\":1}");
        let c = invalid("", Bad::Json(Value::Null), "x");
        assert_eq!((c.field.as_str(), c.message.as_str()), ("<nil>", "Invalid value: null: x"));
        assert_eq!(too_many("a", 3, 2).message, "Too many: 3: must have at most 2 items");
        assert_eq!(too_long("a", 5).message, "Too long: may not be more than 5 bytes");
        assert_eq!(
            not_supported("a", Bad::str("x"), &["y".into(), "z".into()]).message,
            "Unsupported value: \"x\": supported values: \"y\", \"z\""
        );
        assert_eq!(duplicate("a", Bad::Json(json!({"name": "http"}))).message, "Duplicate value: {\"name\":\"http\"}");
    }
}
