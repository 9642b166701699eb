use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::*;
use crate::health::{assess_with, assess_within};

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Check {
    current: String,
    #[serde(default)]
    in_progress: Option<String>,
    #[serde(default)]
    failed: Option<String>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    check: Check,
    status: HealthStatus,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    contains: Vec<String>,
    object: Value,
}

fn rules(check: &Check) -> Rules {
    Rules::compile("widgets", &check.current, check.in_progress.as_deref(), check.failed.as_deref())
}

#[test]
fn healthcheck_table() {
    let cases: Vec<Case> =
        crate::yaml::from_str_multiple(include_str!("../../../testdata/health/healthcheck.yaml")).unwrap();
    assert!(cases.len() >= 20, "{} cases", cases.len());
    let mut failures = Vec::new();
    for c in &cases {
        let got = assess_with(&rules(&c.check), &c.object);
        let mut ok = got.status == c.status;
        if c.status == HealthStatus::Healthy {
            assert!(c.message.is_none() && c.contains.is_empty(), "{}: a Healthy case has no message", c.name);
            ok &= got.message.is_empty();
        } else {
            assert!(c.message.is_some() || !c.contains.is_empty(), "{}: say what the message is", c.name);
            ok &= c.message.as_ref().is_none_or(|m| *m == got.message);
            ok &= c.contains.iter().all(|f| got.message.contains(f.as_str()));
        }
        if !ok {
            failures.push(format!("{}: got {:?} {:?}", c.name, got.status, got.message));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    for status in [HealthStatus::Healthy, HealthStatus::Progressing, HealthStatus::Degraded, HealthStatus::Unknown] {
        assert!(cases.iter().any(|c| c.status == status), "no {status:?} case");
    }
}

/// Expressions whose work grows faster than the object: without the static cost limit they
/// compile, and evaluating them on an input of the accepted size takes from seconds (nested
/// loops; the largest accepted input in one pass takes a fraction of a second) to all memory
/// (strings grown tenfold ten times, a billion-element range). (Two nested loops over lists of at most `MAX_LEN` elements are cheap, and accepted.)
const HOSTILE: &[&str] = &[
    // nested comprehensions over the object's lists: cubic, and quadratic with list copies
    "status.items.all(a, status.items.all(b, status.items.all(c, a == b && b == c)))",
    "status.items.map(a, status.items.map(b, status.items.exists(c, c == a))).size() > 0",
    "status.items.exists(a, status.items.filter(b, b == a).size() > 1)",
    // a string multiplied tenfold ten times: 10^10 bytes
    "'x'.replace('x', 'xxxxxxxxxx').replace('x', 'xxxxxxxxxx').replace('x', 'xxxxxxxxxx')\
     .replace('x', 'xxxxxxxxxx').replace('x', 'xxxxxxxxxx').replace('x', 'xxxxxxxxxx')\
     .replace('x', 'xxxxxxxxxx').replace('x', 'xxxxxxxxxx').replace('x', 'xxxxxxxxxx')\
     .replace('x', 'xxxxxxxxxx').size() > 0",
    // a text as large as the object replaced into itself
    "status.message.replace('a', status.message).size() > 0",
    // ranges of a large or computed length
    "lists.range(1000000000).all(i, i >= 0)",
    "lists.range(status.n).size() > 0",
    // a pattern from the object compiled for every element
    "status.items.all(a, a.matches(status.pattern))",
    // pairwise set operations over the object's lists
    "sets.contains(status.items, spec.items)",
];

#[test]
fn hostile_expressions_are_rejected_by_the_cost_limit() {
    for expr in HOSTILE {
        let rules = Rules::compile("hostile", expr, None, None);
        let error = rules.error().unwrap_or_else(|| panic!("accepted: {expr}"));
        assert!(error.contains("exceeds the limit of 50000000"), "{expr}: {error}");
        let verdict = assess_with(&rules, &json!({"metadata": {"name": "x"}, "status": {"items": [1, 2]}}));
        assert_eq!(verdict.status, HealthStatus::Unknown);
        assert!(verdict.message.starts_with("HealthCheck hostile is invalid: current: estimated worst-case cost"));
    }
}

/// What the limit must let through: one pass, or a few, over the object's lists and strings.
#[test]
fn ordinary_expressions_are_within_the_cost_limit() {
    for expr in [
        "status.conditions.filter(c, c.type == 'Ready').all(c, c.status == 'True')",
        "status.conditions.exists(c, c.type == 'Ready' && c.status == 'False' && c.reason.matches('^(Failed|Error)$'))",
        "has(status.observedGeneration) && status.observedGeneration == metadata.generation && \
         status.conditions.exists(c, c.type == 'Available' && c.status == 'True') && \
         !status.conditions.exists(c, c.type == 'Degraded' && c.status == 'True')",
        "status.phase in ['Cluster in healthy state', 'Healthy'] && status.readyInstances == spec.instances",
        "quantity(status.capacity).isGreaterThan(quantity('10Gi'))",
        "status.members.map(m, m.lowerAscii()).filter(m, m.startsWith('db-')).size() >= 2",
        // two nested loops: at most 256 × 256 iterations
        "status.members.all(a, spec.members.exists(b, a == b))",
    ] {
        let rules = Rules::compile("ordinary", expr, None, None);
        assert_eq!(rules.error(), None, "{expr}");
    }
}

/// The bound is what the limit is calibrated on: the heaviest accepted shapes (a `filter`,
/// whose accumulator the `cel` crate copies at every element, then more passes) over the
/// largest accepted input evaluate quickly.
#[test]
fn the_largest_input_evaluates_in_bounded_time() {
    let message = "m".repeat((MAX_INPUT - 2_000) / MAX_LEN - 70);
    let conditions: Vec<Value> = (0..MAX_LEN)
        .map(|i| json!({"type": format!("T{i}"), "status": "True", "reason": "Done", "message": message}))
        .collect();
    let obj = json!({"metadata": {"name": "big"}, "status": {"conditions": conditions}});
    let rules = Rules::compile(
        "big",
        "status.conditions.filter(c, c.status == 'True').all(c, c.status == 'True')",
        Some("status.conditions.exists(c, c.reason.matches('^Progress'))"),
        Some("status.conditions.map(c, c.message + c.reason).exists(m, m == 'Failed')"),
    );
    assert_eq!(rules.error(), None);
    let vars = input(&obj, &["status".to_string()]);
    assert!(check_input(&vars).is_ok(), "{:?}", check_input(&vars));
    let bytes = serde_json::to_vec(&obj["status"]).unwrap().len();
    assert!(bytes > MAX_INPUT * 9 / 10, "{bytes}");
    let started = Instant::now();
    assert_eq!(assess_with(&rules, &obj).status, HealthStatus::Healthy);
    let took = started.elapsed();
    eprintln!("{bytes} bytes, {MAX_LEN} conditions evaluated in {took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[test]
fn inputs_beyond_the_bounds_are_unknown() {
    let check = |obj: &Value, expr: &str| assess_with(&Rules::compile("big", expr, None, None), obj);
    let obj = json!({"metadata": {"name": "huge"}, "status": {"blob": "x".repeat(MAX_INPUT)}});
    let verdict = check(&obj, "has(status.blob)");
    assert_eq!(verdict.status, HealthStatus::Unknown);
    assert!(verdict.message.contains("object too large to evaluate: 65"), "{}", verdict.message);
    // Only the fields the expressions name count.
    assert_eq!(check(&obj, "metadata.name == 'huge'").status, HealthStatus::Healthy);
    assert_eq!(check(&obj, "self.metadata.name == 'huge'").status, HealthStatus::Unknown);
    let long = json!({"metadata": {"name": "l"}, "status": {"members": vec![1; MAX_LEN + 1]}});
    let verdict = check(&long, "status.members.size() > 0");
    assert_eq!(
        verdict.message,
        "HealthCheck big: object too large to evaluate: status.members has 257 elements (limit 256)"
    );
    // managedFields do not count: no rule reads them.
    let managed = json!({"metadata": {"name": "m", "managedFields": [{"x": "y".repeat(MAX_INPUT)}]}});
    assert_eq!(check(&managed, "self.metadata.name == 'm'").status, HealthStatus::Healthy);
}

#[test]
fn expressions_longer_than_the_crd_allows_are_invalid() {
    let long = format!("true || {}", vec!["true"; 1000].join(" || "));
    let rules = Rules::compile("long", &long, None, None);
    assert_eq!(rules.error(), Some("current: longer than 4096 bytes"));
}

/// A ConfigMap of `keys` keys, as the Application had.
fn configmap(keys: usize) -> Value {
    let data: serde_json::Map<String, Value> =
        (0..keys).map(|k| (format!("key-{k:03}"), json!(format!("value-{k:03}")))).collect();
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": data})
}

/// The quadratic expression: accepted, since its worst case is within the limit.
const QUADRATIC: &str = "data.all(k, data.exists(j, j == k))";

/// The [`Budget`] contract, one row per case: how many of `objects` identical objects are
/// evaluated within a limit of cost units and of CPU time, the rest Unknown with the budget's
/// message.
#[test]
fn budget_table() {
    let cheap = Rules::compile("cheap", "has(data.version)", None, None);
    let quadratic = Rules::compile("configmaps", QUADRATIC, None, None);
    assert_eq!(quadratic.error(), None, "the issue's expression is accepted");
    let small = json!({"metadata": {"name": "s"}, "data": {"version": "v1"}});
    let big = configmap(250);
    let charge = |rules: &Rules, obj: &Value| {
        let mut b = Budget::unlimited();
        assess(rules, obj, &mut b);
        b.spent()
    };
    let (cheap_cost, quadratic_cost) = (charge(&cheap, &small), charge(&quadratic, &big));
    eprintln!("charged per object: cheap {cheap_cost}, quadratic on 250 keys {quadratic_cost}");
    assert!(cheap_cost > 0 && cheap_cost < 100, "{cheap_cost}");
    assert!(quadratic_cost <= MAX_COST, "{quadratic_cost}");
    struct Row<'a> {
        what: &'static str,
        rules: &'a Rules,
        object: &'a Value,
        objects: usize,
        limit: u64,
        cpu: Duration,
        evaluated: usize,
    }
    let any = Duration::MAX;
    #[rustfmt::skip]
    let rows = [
        Row { what: "no limit", rules: &quadratic, object: &big, objects: 20, limit: u64::MAX, cpu: any, evaluated: 20 },
        Row { what: "exactly enough units", rules: &cheap, object: &small, objects: 10, limit: 10 * cheap_cost, cpu: any, evaluated: 10 },
        Row { what: "one unit short", rules: &cheap, object: &small, objects: 10, limit: 10 * cheap_cost - 1, cpu: any, evaluated: 9 },
        Row { what: "no units", rules: &cheap, object: &small, objects: 3, limit: 0, cpu: any, evaluated: 0 },
        Row { what: "no time", rules: &cheap, object: &small, objects: 3, limit: u64::MAX, cpu: Duration::ZERO, evaluated: 0 },
        // The first object always runs; its time then exhausts the budget.
        Row { what: "a nanosecond", rules: &quadratic, object: &big, objects: 3, limit: u64::MAX, cpu: Duration::from_nanos(1), evaluated: 1 },
        Row { what: "thousands of ordinary objects", rules: &cheap, object: &small, objects: 5000, limit: RECONCILE_BUDGET, cpu: RECONCILE_CPU, evaluated: 5000 },
    ];
    for row in rows {
        let mut budget = Budget::new(row.limit, row.cpu);
        let verdicts: Vec<Assessment> =
            (0..row.objects).map(|_| assess_within(row.rules, row.object, &mut budget)).collect();
        let evaluated = verdicts.iter().take_while(|a| a.status == HealthStatus::Healthy).count();
        assert_eq!(evaluated, row.evaluated, "{}", row.what);
        assert_eq!(budget.exhausted(), row.evaluated < row.objects, "{}", row.what);
        assert!(budget.spent() <= row.limit, "{}", row.what);
        for a in &verdicts[evaluated..] {
            assert_eq!(a.status, HealthStatus::Unknown, "{}", row.what);
            let expected = format!("HealthCheck {}: not evaluated: over the per-reconcile budget", row.rules.name());
            assert_eq!(a.message, expected, "{}", row.what);
        }
        let note = budget.note();
        assert_eq!(note.is_some(), budget.exhausted(), "{}", row.what);
        if let Some(note) = note {
            let spent = format!(
                "({} units and {:.2}s spent on {evaluated} objects, {} not evaluated)",
                budget.spent(),
                budget.cpu().as_secs_f64(),
                row.objects - evaluated
            );
            assert!(
                note.starts_with(&format!(
                    "HealthChecks over the per-reconcile budget of {} cost units and ",
                    row.limit
                )),
                "{note}"
            );
            assert!(note.ends_with(&spent), "{}: {note}", row.what);
        }
    }
    // Any one object fits in three times the per-expression limit: a reconcile always makes
    // progress.
    const { assert!(RECONCILE_BUDGET >= 3 * MAX_COST) };
    let three = Rules::compile("three", QUADRATIC, Some(QUADRATIC), Some(QUADRATIC));
    let mut budget = Budget::new(3 * MAX_COST, Duration::from_nanos(1));
    // `failed` is true first: evaluated, Degraded.
    assert_eq!(assess_within(&three, &big, &mut budget).status, HealthStatus::Degraded);
    // The 1,000 ConfigMaps: what one reconcile now spends on them (printed; the time
    // depends on the machine and the build).
    let started = Instant::now();
    let mut budget = Budget::per_reconcile();
    let evaluated = (0..1000)
        .map(|_| assess_within(&quadratic, &big, &mut budget))
        .filter(|a| a.status == HealthStatus::Healthy)
        .count();
    eprintln!(
        "{evaluated} of 1000 ConfigMaps of 250 keys evaluated within the budget, {:?} of CPU, in {:?}",
        budget.cpu(),
        started.elapsed()
    );
    assert!(budget.exhausted() && evaluated < 1000);
}

/// Past the budget the Application's message starts with what was spent and left out, then
/// names the resources and the HealthCheck.
#[test]
fn a_summary_past_the_budget_says_so_first() {
    let rules = Rules::compile("configmaps", "has(data.version)", None, None);
    let objects: Vec<Value> =
        (0..3).map(|i| json!({"metadata": {"name": format!("cm-{i}")}, "data": {"version": "v1"}})).collect();
    let names: Vec<String> = (0..3).map(|i| format!("cm-{i}")).collect();
    let observed: Vec<crate::health::Observed<'_>> = objects
        .iter()
        .zip(&names)
        .map(|(o, n)| crate::health::Observed {
            group: "",
            kind: "ConfigMap",
            namespace: "a",
            name: n,
            live: Some(o),
            pods: &[],
            pods_degrade: false,
            check: Some(&rules),
        })
        .collect();
    let mut budget = Budget::new(2 * 2, Duration::MAX);
    let summary = crate::health::summarize_within(&observed, &mut budget);
    assert_eq!((summary.status, summary.healthy, summary.progressing), (HealthStatus::Progressing, 2, 1));
    assert_eq!(
        summary.message,
        "HealthChecks over the per-reconcile budget of 4 cost units and unlimited of CPU (4 units and 0.00s spent on 2 objects, 1 not evaluated); \
         ConfigMap a/cm-2: HealthCheck configmaps: not evaluated: over the per-reconcile budget"
    );
    let mut unlimited = Budget::unlimited();
    assert_eq!(crate::health::summarize_within(&observed, &mut unlimited).status, HealthStatus::Healthy);
}
