//! CEL `x-kubernetes-validations`: compilation checks for CRDs, and evaluation on custom
//! resources as apiextensions-apiserver does it (transition rules with `oldSelf` on correlated
//! values, ratcheting of unchanged values, `messageExpression`, `fieldPath`, `reason`).

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, LazyLock, Mutex};

use kube_cel::KubeCelExt as _;
use kube_cel::cel;
use serde_json::Value;

use super::fielderr::{self as fe, Bad};
use super::schema::{addl, correlate_field, correlate_item, embedded, flag, items, props, ty};
use crate::errors::Cause;

/// CEL reserved words, escaped as `__word__` when used as property names.
const RESERVED: &[&str] = &[
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// The CEL field name of a property (`cel.Escape`); `None` when it cannot be accessed from CEL.
pub(crate) fn escape(name: &str) -> Option<String> {
    let first = name.chars().next()?;
    if first.is_ascii_digit() {
        return None;
    }
    if RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    let mut out = String::with_capacity(name.len());
    let mut chars = name.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '_' if chars.peek() == Some(&'_') => {
                chars.next();
                out.push_str("__underscores__");
            }
            c if c.is_ascii_alphanumeric() || c == '_' => out.push(c),
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            _ => return None,
        }
    }
    Some(out)
}

fn cel_str(s: &str) -> cel::Value {
    cel::Value::String(Arc::new(s.to_string()))
}

fn cel_map(entries: Vec<(String, cel::Value)>) -> cel::Value {
    let map: HashMap<cel::objects::Key, cel::Value> =
        entries.into_iter().map(|(k, v)| (cel::objects::Key::String(Arc::new(k)), v)).collect();
    cel::Value::Map(cel::objects::Map { map: Arc::new(map) })
}

/// JSON to CEL without a schema.
fn plain_to_cel(v: &Value) -> cel::Value {
    match v {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                cel::Value::Int(i)
            } else if let Some(u) = n.as_u64() {
                cel::Value::UInt(u)
            } else {
                cel::Value::Float(n.as_f64().unwrap_or(0.0))
            }
        }
        Value::String(s) => cel_str(s),
        Value::Array(a) => cel::Value::List(Arc::new(a.iter().map(plain_to_cel).collect())),
        Value::Object(m) => cel_map(m.iter().map(|(k, v)| (k.clone(), plain_to_cel(v))).collect()),
    }
}

/// JSON to CEL following the schema (`UnstructuredToVal`): declared properties by their escaped
/// names, `format: date-time|date` as timestamps, `duration` as durations, `byte` as bytes,
/// `number` as doubles; a resource root exposes `apiVersion`, `kind` and only `metadata.name`
/// and `metadata.generateName`.
pub(crate) fn to_cel(s: Option<&Value>, v: &Value, resource_root: bool) -> cel::Value {
    let Some(s) = s else { return plain_to_cel(v) };
    match v {
        Value::Null => cel::Value::Null,
        Value::Number(n) if ty(s) == "number" => cel::Value::Float(n.as_f64().unwrap_or(0.0)),
        Value::String(st) if ty(s) == "string" => {
            let format = s.get("format").and_then(Value::as_str).unwrap_or("");
            let arc = Arc::new(st.clone());
            let converted = match format {
                "date-time" | "datetime" => cel::functions::time::timestamp(arc).ok(),
                "date" => cel::functions::time::timestamp(Arc::new(format!("{st}T00:00:00Z"))).ok(),
                "duration" => cel::functions::time::duration(arc).ok(),
                "byte" => {
                    use base64::Engine as _;
                    base64::engine::general_purpose::STANDARD.decode(st).ok().map(|b| cel::Value::Bytes(Arc::new(b)))
                }
                _ => None,
            };
            converted.unwrap_or_else(|| cel_str(st))
        }
        Value::Array(a) => {
            let is = items(s);
            cel::Value::List(Arc::new(a.iter().map(|x| to_cel(is, x, is.is_some_and(embedded))).collect()))
        }
        Value::Object(m) => {
            let mut entries = Vec::new();
            if resource_root {
                for k in ["apiVersion", "kind"] {
                    if let Some(Value::String(x)) = m.get(k) {
                        entries.push((k.to_string(), cel_str(x)));
                    }
                }
                let mut meta = Vec::new();
                for k in ["name", "generateName"] {
                    if let Some(Value::String(x)) = m.get("metadata").and_then(|md| md.get(k)) {
                        meta.push((k.to_string(), cel_str(x)));
                    }
                }
                entries.push(("metadata".to_string(), cel_map(meta)));
            }
            if let Some(ps) = props(s) {
                for (k, x) in m {
                    if resource_root && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                        continue;
                    }
                    if let (Some(p), Some(name)) = (ps.get(k), escape(k)) {
                        entries.push((name, to_cel(Some(p), x, embedded(p))));
                    }
                }
            } else if let Some(a) = addl(s) {
                for (k, x) in m {
                    entries.push((k.clone(), to_cel(Some(a), x, embedded(a))));
                }
            } else if flag(s, "x-kubernetes-preserve-unknown-fields") {
                for (k, x) in m {
                    if resource_root && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                        continue;
                    }
                    entries.push((k.clone(), plain_to_cel(x)));
                }
            }
            cel_map(entries)
        }
        other => plain_to_cel(other),
    }
}

/// One `x-kubernetes-validations` entry.
#[derive(Clone, Debug, Default)]
pub(crate) struct Rule {
    pub rule: String,
    pub message: String,
    pub message_expression: String,
    pub field_path: String,
    pub reason: String,
    pub optional_old_self: bool,
}

pub(crate) fn rules_of(s: &Value) -> Vec<Rule> {
    let Some(list) = s.get("x-kubernetes-validations").and_then(Value::as_array) else { return Vec::new() };
    let text = |r: &Value, k: &str| r.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    list.iter()
        .map(|r| Rule {
            rule: text(r, "rule"),
            message: text(r, "message"),
            message_expression: text(r, "messageExpression"),
            field_path: text(r, "fieldPath"),
            reason: text(r, "reason"),
            optional_old_self: r.get("optionalOldSelf").and_then(Value::as_bool).unwrap_or(false),
        })
        .collect()
}

impl Rule {
    fn error_string(&self) -> String {
        if self.message.is_empty() { self.rule.trim().to_string() } else { self.message.trim().to_string() }
    }

    fn message_or_default(&self) -> String {
        if self.message.is_empty() {
            format!("failed rule: {}", self.error_string())
        } else {
            self.message.trim().to_string()
        }
    }
}

/// Most compiled expressions kept; past it the cache starts over (a CRD's rules are few, so
/// only an API that keeps changing them gets there).
const MAX_PROGRAMS: usize = 4096;

/// Compile a CEL expression, never panicking. Programs are kept by their text: every write of
/// a custom resource evaluates its CRD's rules, and parsing them each time was the largest part
/// of an update's cost at 10,000 Applications.
pub(crate) fn compile(expr: &str) -> Result<Arc<cel::Program>, String> {
    type Compiled = Result<Arc<cel::Program>, String>;
    static PROGRAMS: LazyLock<Mutex<HashMap<String, Compiled>>> = LazyLock::new(Default::default);
    if let Some(p) = PROGRAMS.lock().unwrap_or_else(|e| e.into_inner()).get(expr) {
        return p.clone();
    }
    let compiled = match std::panic::catch_unwind(|| cel::Program::compile(expr)) {
        Ok(Ok(p)) => Ok(Arc::new(p)),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("ERROR: <input>: failed to parse {expr:?}")),
    };
    let mut programs = PROGRAMS.lock().unwrap_or_else(|e| e.into_inner());
    if programs.len() >= MAX_PROGRAMS {
        programs.clear();
    }
    programs.insert(expr.to_string(), compiled.clone());
    compiled
}

/// Evaluate a boolean expression over plain JSON variables (webhook `matchConditions`).
pub(crate) fn eval_bool(expr: &str, vars: &[(&str, &Value)]) -> Result<bool, String> {
    let program = compile(expr)?;
    let base = base_context();
    let mut ctx = base.new_inner_scope();
    for (name, v) in vars {
        ctx.add_variable_from_value(*name, plain_to_cel(v));
    }
    match execute(&program, &ctx)? {
        cel::Value::Bool(b) => Ok(b),
        _ => Err("expression must evaluate to bool".to_string()),
    }
}

fn uses_old_self(p: &cel::Program) -> bool {
    p.references().has_variable("oldSelf")
}

fn base_context() -> cel::Context<'static> {
    let mut ctx = cel::Context::default();
    ctx.register_all();
    ctx
}

fn execute(p: &cel::Program, ctx: &cel::Context) -> Result<cel::Value, String> {
    match std::panic::catch_unwind(AssertUnwindSafe(|| p.execute(ctx))) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(exec_error(&e)),
        Err(_) => Err("internal error".to_string()),
    }
}

/// cel-go's wording of evaluation errors.
fn exec_error(e: &cel::ExecutionError) -> String {
    match e {
        cel::ExecutionError::NoSuchKey(k) => format!("no such key: {k}"),
        cel::ExecutionError::NoSuchOverload => "no such overload".to_string(),
        cel::ExecutionError::DivisionByZero(_) => "division by zero".to_string(),
        cel::ExecutionError::RemainderByZero(_) => "modulus by zero".to_string(),
        cel::ExecutionError::IndexOutOfBounds(v) => format!("index out of bounds: {}", cel_display(v)),
        cel::ExecutionError::UndeclaredReference(r) => format!("no such attribute(s): {r}"),
        cel::ExecutionError::Overflow(..) => "integer overflow".to_string(),
        other => other.to_string(),
    }
}

fn cel_display(v: &cel::Value) -> String {
    match v {
        cel::Value::Int(i) => i.to_string(),
        cel::Value::UInt(u) => u.to_string(),
        cel::Value::String(s) => s.to_string(),
        other => format!("{other:?}"),
    }
}

/// The `fieldPath` of a rule as a field path relative to the rule's node (`ValidFieldPath`).
pub(crate) fn normalize_field_path(fp: &str, s: &Value) -> Result<String, String> {
    let mut out = String::new();
    let mut schema = s;
    let chars: Vec<char> = fp.chars().collect();
    let mut i = 0;
    let step = |name: String, schema: &mut &Value, out: &mut String| -> Result<(), String> {
        if let Some(p) = props(schema) {
            let Some(next) = p.get(&name) else { return Err("does not refer to a valid field".into()) };
            *out = fe::child(out, &name);
            *schema = next;
        } else if let Some(a) = addl(schema) {
            *out = fe::key(out, &name);
            *schema = a;
        } else {
            return Err("does not refer to a valid field".into());
        }
        Ok(())
    };
    if chars.is_empty() {
        return Err("unexpected end of JSON path".into());
    }
    while i < chars.len() {
        match chars[i] {
            '.' => {
                let start = i + 1;
                let mut j = start;
                while j < chars.len() && chars[j] != '.' && chars[j] != '[' {
                    j += 1;
                }
                if j == start {
                    return Err("unexpected end of JSON path".into());
                }
                step(chars[start..j].iter().collect(), &mut schema, &mut out)?;
                i = j;
            }
            '[' => {
                if chars.get(i + 1) != Some(&'\'') {
                    return Err("expected single quoted string".into());
                }
                let mut j = i + 2;
                let mut name = String::new();
                while j < chars.len() && chars[j] != '\'' {
                    if chars[j] == '\\' && j + 1 < chars.len() {
                        j += 1;
                    }
                    name.push(chars[j]);
                    j += 1;
                }
                if chars.get(j + 1) != Some(&']') {
                    return Err("expected ]".into());
                }
                step(name, &mut schema, &mut out)?;
                i = j + 2;
            }
            c => return Err(format!("expected [ or . but got: {c}")),
        }
    }
    Ok(out)
}

/// Evaluate the rules of schema node `s` and below on `data` (with its correlated `old` value),
/// appending failures. `parent_equal` is whether the nearest correlatable ancestor is unchanged.
pub(crate) fn validate(
    s: &Value,
    data: &Value,
    old: Option<&Value>,
    path: &str,
    resource_root: bool,
    parent_equal: bool,
    errs: &mut Vec<Cause>,
) {
    if data.is_null() {
        return;
    }
    let equal = match old {
        Some(o) => o == data,
        None => parent_equal,
    };
    let rules = rules_of(s);
    if !rules.is_empty() {
        let ctx = base_context();
        let self_val = to_cel(Some(s), data, resource_root);
        let old_val = old.map(|o| to_cel(Some(s), o, resource_root));
        for rule in &rules {
            eval_rule(rule, s, data, self_val.clone(), old_val.clone(), path, equal, &ctx, errs);
        }
    }
    match data {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            if let Some(a) = addl(s) {
                for k in &keys {
                    if props(s).is_some_and(|p| p.contains_key(k.as_str())) {
                        continue;
                    }
                    let o = correlate_field(s, k, old);
                    validate(a, &m[k.as_str()], o, &fe::key(path, k), embedded(a), equal, errs);
                }
            }
            if let Some(p) = props(s) {
                for k in &keys {
                    if resource_root && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                        continue;
                    }
                    if let Some(ps) = p.get(k.as_str()) {
                        let o = correlate_field(s, k, old);
                        validate(ps, &m[k.as_str()], o, &fe::child(path, k), embedded(ps), equal, errs);
                    }
                }
            }
        }
        Value::Array(a) => {
            if let Some(is) = items(s) {
                for (i, x) in a.iter().enumerate() {
                    let o = correlate_item(s, x, old);
                    validate(is, x, o, &fe::index(path, i), embedded(is), equal, errs);
                }
            }
        }
        _ => {}
    }
}

#[allow(
    clippy::too_many_arguments,
    reason = "one rule at one node of the walk: the walk passes each of its positions along, as the apiserver's validator does"
)]
fn eval_rule(
    rule: &Rule,
    s: &Value,
    data: &Value,
    self_val: cel::Value,
    old_val: Option<cel::Value>,
    path: &str,
    equal: bool,
    base: &cel::Context<'static>,
    errs: &mut Vec<Cause>,
) {
    let type_bad = || Bad::str(ty(s));
    if rule.rule.trim().is_empty() {
        return;
    }
    let program = match compile(&rule.rule) {
        Ok(p) => p,
        Err(e) => {
            errs.push(fe::invalid(path, type_bad(), &format!("rule compile error: compilation failed: {e}")));
            return;
        }
    };
    let uses_old = uses_old_self(&program);
    if uses_old && old_val.is_none() {
        // Transition rules run only with a correlated old value (optionalOldSelf rules would
        // run with `oldSelf` = optional.none(), which this CEL implementation lacks).
        return;
    }
    if rule.optional_old_self {
        // Not supported: `oldSelf` would be an optional.
        return;
    }
    let mut ctx = base.new_inner_scope();
    ctx.add_variable_from_value("self", self_val);
    if let Some(o) = old_val {
        ctx.add_variable_from_value("oldSelf", o);
    }
    let result = execute(&program, &ctx);
    match result {
        Ok(cel::Value::Bool(true)) => return,
        Ok(cel::Value::Bool(false)) => {}
        Ok(other) => {
            errs.push(fe::invalid(
                path,
                type_bad(),
                &format!("rule did not evaluate to a bool (got {other:?}) evaluating rule: {}", rule.error_string()),
            ));
            return;
        }
        Err(e) if e == "no such overload" => {
            errs.push(fe::invalid(
                path,
                type_bad(),
                &format!(
                    "'{e}': call arguments did not match a supported operator, function or macro signature for rule: {}",
                    rule.error_string()
                ),
            ));
            return;
        }
        Err(e) => {
            errs.push(fe::invalid(path, type_bad(), &format!("{e} evaluating rule: {}", rule.error_string())));
            return;
        }
    }
    if !uses_old && equal {
        // Ratcheted: the value did not change (the real server turns this into a warning).
        return;
    }
    let mut err_path = path.to_string();
    if !rule.field_path.is_empty()
        && let Ok(n) = normalize_field_path(&rule.field_path, s)
    {
        err_path = fe::child(path, &n);
    }
    let mut detail = None;
    if !rule.message_expression.is_empty()
        && let Ok(p) = compile(&rule.message_expression)
        && let Ok(cel::Value::String(m)) = execute(&p, &ctx)
    {
        let t = m.trim();
        if !t.is_empty() && !t.contains('\n') {
            detail = Some(t.to_string());
        }
    }
    let detail = detail.unwrap_or_else(|| rule.message_or_default());
    let value = match data {
        Value::Object(_) | Value::Array(_) => Bad::Omit,
        _ if matches!(ty(s), "object" | "array") => Bad::Omit,
        other => Bad::Json(other.clone()),
    };
    errs.push(match rule.reason.as_str() {
        "FieldValueForbidden" => fe::forbidden(&err_path, &detail),
        "FieldValueRequired" => fe::required(&err_path, &detail),
        "FieldValueDuplicate" => fe::duplicate(&err_path, value),
        _ => fe::invalid(&err_path, value, &detail),
    });
}

/// CRD-time checks of every rule in a schema: the rule and messageExpression compile, a
/// transition rule sits on a correlatable node, fieldPath and reason are valid.
pub(crate) fn check_rules(s: &Value, path: &str, correlatable: bool, errs: &mut Vec<Cause>) {
    let Some(obj) = s.as_object() else { return };
    if let Some(list) = obj.get("x-kubernetes-validations").and_then(Value::as_array) {
        let base = fe::child(path, "x-kubernetes-validations");
        for (i, (raw, rule)) in list.iter().zip(rules_of(s)).enumerate() {
            let rp = fe::index(&base, i);
            if rule.rule.trim().is_empty() {
                errs.push(fe::required(&fe::child(&rp, "rule"), ""));
                continue;
            }
            match compile(&rule.rule) {
                Err(e) => errs.push(fe::invalid(
                    &fe::child(&rp, "rule"),
                    Bad::Json(raw.clone()),
                    &format!("compilation failed: {e}"),
                )),
                Ok(p) => {
                    if uses_old_self(&p) && !correlatable {
                        errs.push(fe::invalid(
                            &fe::child(&rp, "rule"),
                            Bad::Json(raw.clone()),
                            &format!(
                                "oldSelf cannot be used on the uncorrelatable portion of the schema within {path}"
                            ),
                        ));
                    }
                }
            }
            if !rule.message_expression.is_empty()
                && let Err(e) = compile(&rule.message_expression)
            {
                errs.push(fe::invalid(
                    &fe::child(&rp, "messageExpression"),
                    Bad::Json(raw.clone()),
                    &format!("messageExpression compilation failed: {e}"),
                ));
            }
            if rule.message.contains('\n') {
                errs.push(fe::invalid(
                    &fe::child(&rp, "message"),
                    Bad::str(&rule.message),
                    "message must not contain line breaks",
                ));
            }
            if rule.message.is_empty() && rule.rule.contains('\n') {
                errs.push(fe::required(
                    &fe::child(&rp, "message"),
                    "message must be specified if rule contains line breaks",
                ));
            }
            if !rule.field_path.is_empty()
                && let Err(e) = normalize_field_path(&rule.field_path, s)
            {
                errs.push(fe::invalid(
                    &fe::child(&rp, "fieldPath"),
                    Bad::str(&rule.field_path),
                    &format!("fieldPath must be a valid path: {e}"),
                ));
            }
            if !rule.reason.is_empty()
                && !matches!(
                    rule.reason.as_str(),
                    "FieldValueInvalid" | "FieldValueForbidden" | "FieldValueRequired" | "FieldValueDuplicate"
                )
            {
                errs.push(fe::not_supported(
                    &fe::child(&rp, "reason"),
                    Bad::str(&rule.reason),
                    &["FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired", "FieldValueDuplicate"]
                        .map(String::from),
                ));
            }
        }
    }
    if let Some(p) = props(s) {
        let atomic = s.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic");
        let mut keys: Vec<&String> = p.keys().collect();
        keys.sort();
        for k in keys {
            check_rules(&p[k.as_str()], &format!("{path}.properties[{k}]"), correlatable && !atomic, errs);
        }
    }
    if let Some(a) = addl(s) {
        let atomic = s.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic");
        check_rules(a, &fe::child(path, "additionalProperties"), correlatable && !atomic, errs);
    }
    if let Some(is) = items(s) {
        let map_list = s.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map");
        check_rules(is, &fe::child(path, "items"), correlatable && map_list, errs);
    }
}
