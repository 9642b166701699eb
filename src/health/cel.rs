//! HealthCheck rules: CEL expressions compiled once, bounded, and evaluated on live objects.
//!
//! Pure: no client, no I/O. The controller compiles a HealthCheck's spec into [`Rules`] (cached
//! per HealthCheck generation) and hands them to [`super::summarize`] through
//! [`super::Observed::check`].
//!
//! Semantics (see `docs/health.md`):
//!
//! - the expressions see the object's top-level fields as variables (`status`, `spec`,
//!   `metadata`, ...), as Flux's `healthCheckExprs` do, and the whole object as `self`;
//! - `failed` true is Degraded, else `inProgress` true is Progressing, else `current` true is
//!   Healthy; none true is Progressing;
//! - an expression that does not give a bool, or fails (a missing field read without `has()`),
//!   makes the object Unknown with a message: the rules did not decide;
//! - invalid rules make every object of their kind Unknown, "HealthCheck <name> is invalid: ...".
//!
//! Bounds: expressions of at most [`MAX_EXPRESSION`] bytes whose static worst-case cost
//! ([`super::cel_cost`]) is at most [`super::cel_cost::MAX_COST`] for objects of at most
//! [`MAX_INPUT`] bytes of JSON (without `metadata.managedFields`); a larger object is Unknown.

use std::cell::RefCell;
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use kube_cel::cel::extractors::This;

use kube_cel::KubeCelExt as _;
use kube_cel::cel;
use serde_json::Value;

use super::Assessment;
use super::cel_cost::{MAX_COST, estimate};
use crate::api::common::HealthStatus;

/// Largest input, in bytes of JSON, the rules are evaluated on: the fields of the object the
/// expressions name (`status`, `spec`, ...; all of it for `self`), `metadata.managedFields`
/// left out. A status this large is not a health report; the bound is what keeps the cost of
/// an expression bounded.
pub const MAX_INPUT: usize = 64 * 1024;

/// Most elements of any list or map in the input: a comprehension's iterations.
pub const MAX_LEN: usize = 256;

/// Longest expression, as the HealthCheck CRD allows.
pub const MAX_EXPRESSION: usize = 4096;

/// The compiled rules of one HealthCheck, or why they are invalid.
#[derive(Debug)]
pub struct Rules {
    name: String,
    programs: Result<Programs, String>,
}

#[derive(Debug)]
struct Programs {
    failed: Option<cel::Program>,
    in_progress: Option<cel::Program>,
    current: cel::Program,
    /// The object's top-level fields the expressions name, `self` for all of them.
    variables: Vec<String>,
}

impl Rules {
    /// Compile the expressions of HealthCheck `name`. Never fails: invalid rules carry the
    /// first error, prefixed with the field it is in (`inProgress: ...`).
    pub fn compile(name: &str, current: &str, in_progress: Option<&str>, failed: Option<&str>) -> Rules {
        let programs = (|| {
            let failed = failed.map(|e| compile_one("failed", e)).transpose()?;
            let in_progress = in_progress.map(|e| compile_one("inProgress", e)).transpose()?;
            let current = compile_one("current", current)?;
            let mut variables: Vec<String> = [failed.as_ref(), in_progress.as_ref(), Some(&current)]
                .into_iter()
                .flatten()
                .flat_map(|p| p.references().variables().into_iter().map(str::to_string).collect::<Vec<_>>())
                .collect();
            variables.sort();
            variables.dedup();
            Ok(Programs { failed, in_progress, current, variables })
        })();
        Rules { name: name.to_string(), programs }
    }

    /// The HealthCheck's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Why the rules are invalid, None when every expression compiled.
    pub fn error(&self) -> Option<&str> {
        self.programs.as_ref().err().map(String::as_str)
    }
}

/// Parse, check the result type where it is evident, and bound the cost of one expression.
fn compile_one(field: &str, expr: &str) -> Result<cel::Program, String> {
    if expr.len() > MAX_EXPRESSION {
        return Err(format!("{field}: longer than {MAX_EXPRESSION} bytes"));
    }
    let program = match std::panic::catch_unwind(|| cel::Program::compile(expr)) {
        Ok(Ok(program)) => program,
        Ok(Err(e)) => return Err(format!("{field}: {}", super::one_line(&e.to_string()))),
        Err(_) => return Err(format!("{field}: failed to parse")),
    };
    if let Some(kind) = evident_type(program.expression()).filter(|k| *k != "bool") {
        return Err(format!("{field}: must evaluate to a bool, not {kind}"));
    }
    let cost = estimate(program.expression(), MAX_INPUT as u64, MAX_LEN as u64);
    if cost > MAX_COST {
        return Err(format!(
            "{field}: estimated worst-case cost {cost} exceeds the limit of {MAX_COST} \
             (nested loops over the object's lists, or values built to grow?)"
        ));
    }
    Ok(program)
}

/// The result type of `e` when the expression's shape alone says it (no type checker in the
/// `cel` crate): literals, literal lists and maps, and operators with one result type.
fn evident_type(e: &cel::IdedExpr) -> Option<&'static str> {
    use cel::common::ast::{Expr, LiteralValue};
    Some(match &e.expr {
        Expr::Literal(LiteralValue::Boolean(_)) => "bool",
        Expr::Literal(LiteralValue::String(_)) => "string",
        Expr::Literal(LiteralValue::Int(_)) => "int",
        Expr::Literal(LiteralValue::UInt(_)) => "uint",
        Expr::Literal(LiteralValue::Double(_)) => "double",
        Expr::Literal(LiteralValue::Bytes(_)) => "bytes",
        Expr::Literal(LiteralValue::Null) => "null",
        Expr::List(_) => "list",
        Expr::Map(_) => "map",
        Expr::Call(call) => match call.func_name.as_str() {
            "_&&_" | "_||_" | "!_" | "_==_" | "_!=_" | "_<_" | "_<=_" | "_>_" | "_>=_" | "@in" => "bool",
            "size" => "int",
            "_+_" | "_-_" | "_*_" | "_/_" | "_%_" | "-_" => {
                let operand = call.args.iter().find_map(evident_type)?;
                if operand == "bool" { "bool" } else { return Some(operand).filter(|o| *o != "null") }
            }
            _ => return None,
        },
        _ => return None,
    })
}

thread_local! {
    /// The standard and Kubernetes CEL functions, registered once per thread.
    static BASE: cel::Context<'static> = {
        let mut ctx = cel::Context::default();
        ctx.register_all();
        ctx.add_function("matches", matches);
        ctx
    };

    /// Compiled patterns of `matches`, so a pattern in a loop is compiled once.
    static PATTERNS: RefCell<HashMap<String, regex::Regex>> = RefCell::new(HashMap::new());
}

/// Most patterns kept compiled per thread; the cache is emptied when full.
const MAX_PATTERNS: usize = 64;

/// `matches` as the `cel` crate defines it, with the compiled pattern cached: the crate compiles
/// it at every call, which made `list.all(x, x.matches('...'))` cost a compilation per element.
fn matches(
    ftx: &cel::FunctionContext,
    This(text): This<Arc<String>>,
    pattern: Arc<String>,
) -> Result<bool, cel::ExecutionError> {
    PATTERNS.with(|cache| {
        let mut cache = cache.borrow_mut();
        if let Some(re) = cache.get(pattern.as_str()) {
            return Ok(re.is_match(&text));
        }
        let re = regex::Regex::new(&pattern).map_err(|e| ftx.error(format!("'{pattern}' not a valid regex: {e}")))?;
        let found = re.is_match(&text);
        if cache.len() >= MAX_PATTERNS {
            cache.clear();
        }
        cache.insert(pattern.to_string(), re);
        Ok(found)
    })
}

/// The verdict of `rules` on `obj` (deletion is decided before, by the caller).
pub(super) fn assess(rules: &Rules, obj: &Value) -> Assessment {
    let name = &rules.name;
    let programs = match &rules.programs {
        Ok(programs) => programs,
        Err(e) => return unknown(format!("HealthCheck {name} is invalid: {e}")),
    };
    let input = input(obj, &programs.variables);
    if let Err(e) = check_input(&input) {
        return unknown(format!("HealthCheck {name}: object too large to evaluate: {e}"));
    }
    BASE.with(|base| {
        let mut ctx = base.new_inner_scope();
        for (key, value) in &input {
            ctx.add_variable_from_value(key.as_str(), to_cel(value));
        }
        let verdicts = [
            (programs.failed.as_ref(), "failed", HealthStatus::Degraded),
            (programs.in_progress.as_ref(), "inProgress", HealthStatus::Progressing),
            (Some(&programs.current), "current", HealthStatus::Healthy),
        ];
        for (program, field, status) in verdicts {
            let Some(program) = program else { continue };
            match execute(program, &ctx) {
                Ok(true) if status == HealthStatus::Healthy => return Assessment::healthy(),
                Ok(true) => return Assessment { status, message: format!("HealthCheck {name}: {field} is true") },
                Ok(false) => {}
                Err(e) => return unknown(format!("HealthCheck {name}: {field}: {e}")),
            }
        }
        Assessment::progressing(format!("HealthCheck {name}: no expression is true"))
    })
}

fn unknown(message: String) -> Assessment {
    Assessment { status: HealthStatus::Unknown, message }
}

/// The variables the expressions see: the top-level fields they name (an empty map for one the
/// object lacks), and `self` (the whole object) when they name it; `metadata.managedFields`
/// left out, no health rule reads them.
fn input(obj: &Value, names: &[String]) -> Vec<(String, Value)> {
    let mut obj = obj.clone();
    if let Some(metadata) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
    }
    // A field the object lacks is an empty map, so `has(status.phase)` is false on an object
    // without status instead of an error.
    let mut vars: Vec<(String, Value)> = names
        .iter()
        .map(|n| (n.clone(), obj.get(n.as_str()).cloned().unwrap_or_else(|| Value::Object(Default::default()))))
        .collect();
    if names.iter().any(|n| n == "self") {
        vars.retain(|(n, _)| n != "self");
        vars.push(("self".to_string(), obj));
    }
    vars
}

/// Whether the input is within [`MAX_INPUT`] and [`MAX_LEN`], the bounds the cost limit assumes.
fn check_input(vars: &[(String, Value)]) -> Result<(), String> {
    let bytes: usize = vars.iter().map(|(_, v)| serde_json::to_vec(v).map_or(usize::MAX, |b| b.len())).sum();
    if bytes > MAX_INPUT {
        return Err(format!("{bytes} bytes of JSON (limit {MAX_INPUT})"));
    }
    for (name, value) in vars {
        if let Some((path, len)) = longest(value, name)
            && len > MAX_LEN
        {
            return Err(format!("{path} has {len} elements (limit {MAX_LEN})"));
        }
    }
    Ok(())
}

/// The list or map with the most elements in `v`, with its path.
fn longest(v: &Value, path: &str) -> Option<(String, usize)> {
    let (here, children): (usize, Vec<(String, &Value)>) = match v {
        Value::Array(a) => (a.len(), a.iter().enumerate().map(|(i, x)| (format!("{path}[{i}]"), x)).collect()),
        Value::Object(m) => (m.len(), m.iter().map(|(k, x)| (format!("{path}.{k}"), x)).collect()),
        _ => return None,
    };
    children
        .into_iter()
        .filter_map(|(p, x)| longest(x, &p))
        .chain([(path.to_string(), here)])
        .max_by_key(|(_, len)| *len)
}

/// Evaluate one program to a bool, never panicking.
fn execute(program: &cel::Program, ctx: &cel::Context) -> Result<bool, String> {
    match std::panic::catch_unwind(AssertUnwindSafe(|| program.execute(ctx))) {
        Ok(Ok(cel::Value::Bool(b))) => Ok(b),
        Ok(Ok(other)) => Err(format!("must evaluate to a bool, got {}", type_name(&other))),
        Ok(Err(e)) => Err(exec_error(&e)),
        Err(_) => Err("evaluation failed".to_string()),
    }
}

/// cel-go's wording of the common evaluation errors.
fn exec_error(e: &cel::ExecutionError) -> String {
    match e {
        cel::ExecutionError::NoSuchKey(k) => format!("no such key: {k}"),
        cel::ExecutionError::UndeclaredReference(r) => format!("no such attribute: {r}"),
        cel::ExecutionError::NoSuchOverload => "no such overload".to_string(),
        other => other.to_string(),
    }
}

fn type_name(v: &cel::Value) -> &'static str {
    match v {
        cel::Value::Int(_) => "int",
        cel::Value::UInt(_) => "uint",
        cel::Value::Float(_) => "double",
        cel::Value::String(_) => "string",
        cel::Value::Bytes(_) => "bytes",
        cel::Value::List(_) => "list",
        cel::Value::Map(_) => "map",
        cel::Value::Null => "null",
        cel::Value::Bool(_) => "bool",
        _ => "another type",
    }
}

/// JSON to CEL: integers stay integers, other numbers are doubles.
fn to_cel(v: &Value) -> cel::Value {
    match v {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(u)) => cel::Value::UInt(u),
            _ => cel::Value::Float(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(a) => cel::Value::List(Arc::new(a.iter().map(to_cel).collect())),
        Value::Object(m) => {
            let map: std::collections::HashMap<cel::objects::Key, cel::Value> =
                m.iter().map(|(k, v)| (cel::objects::Key::String(Arc::new(k.clone())), to_cel(v))).collect();
            cel::Value::Map(cel::objects::Map { map: Arc::new(map) })
        }
    }
}

#[cfg(test)]
mod tests;
