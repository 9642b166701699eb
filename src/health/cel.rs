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
//! And per reconcile, a [`Budget`]: what many objects cost together is bounded too.

use std::cell::RefCell;
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

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

/// The work one reconcile may spend on HealthCheck expressions, in the cost units of
/// [`super::cel_cost`]: four times [`MAX_COST`], so that any one object (at most three
/// expressions, each within [`MAX_COST`]) always fits. Ordinary expressions on ordinary objects
/// are charged tens to hundreds of units: hundreds of thousands of objects fit.
pub const RECONCILE_BUDGET: u64 = 4 * MAX_COST;

/// The CPU time one reconcile may spend on HealthCheck expressions, measured on the thread
/// that evaluates them. The cost estimate bounds the shape of an expression, not the
/// interpreter's speed on it: the issue's `data.all(k, data.exists(j, j == k))` over 250 keys
/// is charged about 500,000 units but takes about 40 ms in a debug build, where `MAX_COST`
/// units of the calibration shape take 0.25 s. So the time is bounded too. One second: 25 of
/// the ConfigMaps in a debug build (`budget_table` prints it), and thousands of objects
/// under an ordinary expression.
pub const RECONCILE_CPU: Duration = Duration::from_secs(1);

/// What is left of one reconcile's HealthCheck work.
///
/// Contract:
///
/// - **Charged before work.** Before a HealthCheck's expressions run on an object, their
///   static cost estimate for that object's actual size ([`super::cel_cost::estimate`] with the
///   object's bytes of JSON and its longest list or map) is charged, and they run only when it
///   fits and the CPU time spent so far is under the time limit. The time of each object is
///   added after it ran (a running expression cannot be stopped; each is bounded by
///   [`MAX_COST`]), so a reconcile spends at most the time limit plus one object's evaluation.
/// - **Past the budget, stop.** The first object that does not fit exhausts the budget: it and
///   every later object of the reconcile with a HealthCheck is Unknown (counted as
///   Progressing), "HealthCheck NAME: not evaluated: over the per-reconcile budget", and the
///   summary's message starts with [`Budget::note`]: what was spent on how many objects, and
///   how many were left out. Nothing is called Healthy without its rules having said so.
/// - **Progress.** With limits above zero and at least three times [`MAX_COST`], the first
///   object is always evaluated.
/// - The cost part depends only on the expressions and the objects; the time part on the
///   machine and the build (not on its load: it is the thread's CPU time, not wall time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Budget {
    limit: u64,
    cpu_limit: Duration,
    spent: u64,
    cpu: Duration,
    /// Objects evaluated in full.
    objects: u64,
    /// Objects left out once exhausted.
    skipped: u64,
    exhausted: bool,
}

impl Budget {
    /// A budget of `limit` cost units and `cpu_limit` of CPU time.
    pub fn new(limit: u64, cpu_limit: Duration) -> Budget {
        Budget { limit, cpu_limit, spent: 0, cpu: Duration::ZERO, objects: 0, skipped: 0, exhausted: false }
    }

    /// The budget of one reconcile: [`RECONCILE_BUDGET`], [`RECONCILE_CPU`].
    pub fn per_reconcile() -> Budget {
        Budget::new(RECONCILE_BUDGET, RECONCILE_CPU)
    }

    /// No limit: one object looked at on request (`ksync app`), or a few (hooks).
    pub fn unlimited() -> Budget {
        Budget::new(u64::MAX, Duration::MAX)
    }

    /// Whether an object did not fit: it and what came after were not evaluated.
    pub fn exhausted(&self) -> bool {
        self.exhausted
    }

    /// Cost units charged so far.
    pub fn spent(&self) -> u64 {
        self.spent
    }

    /// CPU time spent so far.
    pub fn cpu(&self) -> Duration {
        self.cpu
    }

    /// Take `cost` when it fits and time is left; else exhaust the budget.
    fn charge(&mut self, cost: u64) -> bool {
        if self.exhausted || cost > self.limit.saturating_sub(self.spent) || self.cpu >= self.cpu_limit {
            self.exhausted = true;
            return false;
        }
        self.spent += cost;
        true
    }

    /// The verdict on an object left out.
    fn over(&mut self, name: &str) -> Assessment {
        self.skipped += 1;
        unknown(format!("HealthCheck {name}: not evaluated: over the per-reconcile budget"))
    }

    /// Once exhausted, what was spent and left out, for the summary's message: "HealthChecks
    /// over the per-reconcile budget of 200000000 cost units and 1.00s of CPU (13188708 units
    /// and 1.00s spent on 26 objects, 274 not evaluated)".
    pub fn note(&self) -> Option<String> {
        if !self.exhausted {
            return None;
        }
        let time = |d: Duration| format!("{:.2}s", d.as_secs_f64());
        let cpu_limit = if self.cpu_limit == Duration::MAX { "unlimited".to_string() } else { time(self.cpu_limit) };
        Some(format!(
            "HealthChecks over the per-reconcile budget of {} cost units and {cpu_limit} of CPU \
             ({} units and {} spent on {} objects, {} not evaluated)",
            self.limit,
            self.spent,
            time(self.cpu),
            self.objects,
            self.skipped
        ))
    }
}

/// CPU time of the calling thread so far.
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(u64::try_from(t.tv_sec).unwrap_or(0), u32::try_from(t.tv_nsec).unwrap_or(0))
}

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

/// The verdict of `rules` on `obj` (deletion is decided before, by the caller), each expression
/// charged to `budget` before it runs ([`Budget`]).
pub(super) fn assess(rules: &Rules, obj: &Value, budget: &mut Budget) -> Assessment {
    let name = &rules.name;
    let programs = match &rules.programs {
        Ok(programs) => programs,
        Err(e) => return unknown(format!("HealthCheck {name} is invalid: {e}")),
    };
    if budget.exhausted {
        return budget.over(name);
    }
    let started = thread_cpu();
    let input = input(obj, &programs.variables);
    let (bytes, longest) = match check_input(&input) {
        Ok(size) => size,
        Err(e) => return unknown(format!("HealthCheck {name}: object too large to evaluate: {e}")),
    };
    // All three are charged at once: the verdict needs whichever runs, and a partial verdict
    // (`failed` false, `current` never run) would say nothing.
    let cost = [programs.failed.as_ref(), programs.in_progress.as_ref(), Some(&programs.current)]
        .into_iter()
        .flatten()
        .map(|p| estimate(p.expression(), bytes as u64, longest as u64))
        .fold(0_u64, u64::saturating_add);
    if !budget.charge(cost) {
        return budget.over(name);
    }
    budget.objects += 1;
    let verdict = evaluate(name, programs, &input);
    budget.cpu += thread_cpu().saturating_sub(started);
    verdict
}

/// Run the expressions on `input`, in the order of precedence.
fn evaluate(name: &str, programs: &Programs, input: &[(String, Value)]) -> Assessment {
    BASE.with(|base| {
        let mut ctx = base.new_inner_scope();
        for (key, value) in input {
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

/// Whether the input is within [`MAX_INPUT`] and [`MAX_LEN`], the bounds the cost limit assumes;
/// its bytes of JSON and the most elements of any of its lists and maps when it is.
fn check_input(vars: &[(String, Value)]) -> Result<(usize, usize), String> {
    let bytes: usize = vars.iter().map(|(_, v)| serde_json::to_vec(v).map_or(usize::MAX, |b| b.len())).sum();
    if bytes > MAX_INPUT {
        return Err(format!("{bytes} bytes of JSON (limit {MAX_INPUT})"));
    }
    let mut most = 0;
    for (name, value) in vars {
        if let Some((path, len)) = longest(value, name) {
            if len > MAX_LEN {
                return Err(format!("{path} has {len} elements (limit {MAX_LEN})"));
            }
            most = most.max(len);
        }
    }
    Ok((bytes, most))
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
