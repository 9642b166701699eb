//! Static worst-case cost of a CEL expression, so that a HealthCheck cannot stall a replica.
//!
//! The `cel` crate counts nothing while it evaluates, and a thread cannot be stopped from the
//! outside, so the bound is put on the expression before it ever runs: every node gets an upper
//! bound on the size of its value (bytes), on its elements when it is a list or map, and on the
//! work to compute it, from the largest input the evaluator accepts ([`super::cel::MAX_INPUT`]
//! bytes of JSON with lists and maps of at most [`super::cel::MAX_LEN`] elements; no field is
//! larger). An expression whose bound exceeds [`MAX_COST`] is rejected at compile time, as
//! Kubernetes does with CRD validation rules.
//!
//! Comprehensions (`all`, `exists`, `map`, `filter`, ...) are where cost multiplies. Their body is
//! estimated twice: with an element of size 0 (`c0`: the work every iteration does whatever the
//! element) and with an element as large as the whole range (`c1`). The elements of a list share
//! its size, and the body cost grows with the element's size at least linearly (sums and products
//! of sizes), so the iterations together cost at most `n × c0 + (c1 − c0)`: a single pass over a
//! list is linear in its size, and a comprehension nested in another over unrelated input is
//! a product of the two list lengths. The accumulator of `map` and `filter` is copied by the
//! `cel` crate at every append, so inside the body it counts at its final size (bounded the
//! same way): such a loop costs its iterations times the bytes it collects.

use kube_cel::cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};

/// The largest estimated cost accepted. Calibrated in `docs/health.md`: a `filter` over the
/// largest accepted list, then two more passes, take about 0.25 s in a debug build.
pub const MAX_COST: u64 = 50_000_000;

/// Work charged per byte of a regular expression pattern, compiled at every call.
const REGEX_COMPILE: u64 = 50;

/// Function namespaces of the Kubernetes CEL library (`lists.range`, `sets.contains`, ...).
const NAMESPACES: &[&str] = &["lists", "sets", "strings", "base64", "math", "format", "ip", "jsonpatch"];

/// Bounds on one expression's value and work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Bound {
    /// Work to compute the value.
    cost: u64,
    /// Largest size of the value: bytes of a string, list or map (as JSON), 1 for a scalar.
    size: u64,
    /// Most elements of the value when it is a list or map (a comprehension's iterations).
    len: u64,
}

impl Bound {
    fn scalar(cost: u64, size: u64) -> Bound {
        Bound { cost, size, len: size }
    }
}

/// The worst-case cost of `expr` when every variable not bound by a comprehension (the
/// object's fields, `self`) is at most `input` bytes of JSON with lists and maps of at most
/// `max_len` elements.
pub fn estimate(expr: &IdedExpr, input: u64, max_len: u64) -> u64 {
    Estimator { input, max_len, scope: Vec::new() }.bound(expr).cost
}

struct Estimator {
    input: u64,
    max_len: u64,
    /// Comprehension variables in scope with their bounds, innermost last.
    scope: Vec<(String, Bound)>,
}

impl Estimator {
    fn bound(&mut self, e: &IdedExpr) -> Bound {
        match &e.expr {
            Expr::Literal(LiteralValue::String(s)) => Bound::scalar(1, s.inner().len() as u64),
            Expr::Literal(LiteralValue::Bytes(b)) => Bound::scalar(1, b.inner().len() as u64),
            Expr::Literal(_) | Expr::Unspecified => Bound::scalar(1, 1),
            Expr::Ident(name) => match self.scope.iter().rev().find(|(n, _)| n == name) {
                Some((_, bound)) => Bound { cost: 1, ..*bound },
                None => Bound { cost: 1, size: self.input, len: self.max_len },
            },
            // A field is no larger than the value it is read from; `has()` is a bool.
            Expr::Select(select) => {
                let operand = self.bound(&select.operand);
                let cost = operand.cost.saturating_add(1);
                if select.test { Bound::scalar(cost, 1) } else { Bound { cost, ..self.part(operand) } }
            }
            Expr::List(list) => {
                let parts: Vec<Bound> = list.elements.iter().map(|x| self.bound(x)).collect();
                aggregate(&parts)
            }
            Expr::Map(map) => {
                let parts = self.entries(map.entries.iter().map(|e| &e.expr));
                aggregate(&parts)
            }
            Expr::Struct(st) => {
                let parts = self.entries(st.entries.iter().map(|e| &e.expr));
                aggregate(&parts)
            }
            Expr::Comprehension(c) => {
                let range = self.bound(&c.iter_range);
                let init = self.bound(&c.accu_init);
                let iterations = range.len;
                let element = self.part(range);
                let body = |this: &mut Self, element: Bound, accu: Bound| {
                    this.scope.push((c.iter_var.clone(), element));
                    if let Some(second) = &c.iter_var2 {
                        this.scope.push((second.clone(), element));
                    }
                    this.scope.push((c.accu_var.clone(), accu));
                    let cond = this.bound(&c.loop_cond);
                    let step = this.bound(&c.loop_step);
                    this.scope.truncate(this.scope.len() - if c.iter_var2.is_some() { 3 } else { 2 });
                    Bound { cost: cond.cost.saturating_add(step.cost), ..step }
                };
                let over = |s: u64, l: u64| iterations.saturating_mul(s).saturating_add(l.saturating_sub(s));
                let empty = Bound::scalar(0, 0);
                // First what the accumulator can grow to, then the work with it at that size:
                // the `cel` crate copies a list accumulator at every append (`map`, `filter`).
                let (small, large) = (body(self, empty, empty), body(self, element, empty));
                let accu = Bound {
                    cost: 1,
                    size: init.size.saturating_add(over(small.size, large.size)),
                    len: init.len.saturating_add(iterations),
                };
                let (small, large) = (body(self, empty, accu), body(self, element, accu));
                self.scope.push((c.accu_var.clone(), accu));
                let result = self.bound(&c.result);
                self.scope.pop();
                let cost = range
                    .cost
                    .saturating_add(init.cost)
                    .saturating_add(over(small.cost, large.cost))
                    .saturating_add(result.cost);
                Bound { cost, ..result }
            }
            Expr::Call(call) => {
                // `lists.range(n)` parses as a call of `range` on an identifier `lists`.
                let qualified = match call.target.as_deref().map(|t| &t.expr) {
                    Some(Expr::Ident(ns)) if NAMESPACES.contains(&ns.as_str()) => {
                        Some(format!("{ns}.{}", call.func_name))
                    }
                    _ => None,
                };
                let target = call.target.as_ref().filter(|_| qualified.is_none()).map(|t| self.bound(t));
                let args: Vec<Bound> = call.args.iter().map(|a| self.bound(a)).collect();
                let operands: Vec<Bound> = target.iter().copied().chain(args.iter().copied()).collect();
                let base = operands.iter().fold(1_u64, |acc, b| acc.saturating_add(b.cost));
                let literal_int = call.args.first().and_then(|a| match &a.expr {
                    Expr::Literal(LiteralValue::Int(i)) => u64::try_from(*i.inner()).ok(),
                    _ => None,
                });
                let literal_pattern =
                    matches!(call.args.last().map(|a| &a.expr), Some(Expr::Literal(LiteralValue::String(_))));
                let name = qualified.as_deref().unwrap_or(&call.func_name);
                let (work, size) = call_bound(name, target, &args, &operands, literal_int, literal_pattern);
                let len = match name {
                    "_+_" => operands.iter().fold(0_u64, |acc, b| acc.saturating_add(b.len)),
                    "_?_:_" => args.get(1).map_or(0, |b| b.len).max(args.get(2).map_or(0, |b| b.len)),
                    "_[_]" | "_[?_]" | "_?._" => operands.first().map_or(1, |b| self.part(*b).len),
                    _ => size,
                };
                Bound { cost: base.saturating_add(work), size: size.max(1), len: len.max(1) }
            }
        }
    }

    /// Bounds of a part of `whole` (a field, an element): no larger than it, and a list in it has
    /// at most `max_len` elements unless the whole is smaller.
    fn part(&self, whole: Bound) -> Bound {
        Bound { cost: 1, size: whole.size, len: whole.size.min(whole.len.max(self.max_len)) }
    }

    fn entries<'e>(&mut self, entries: impl Iterator<Item = &'e EntryExpr>) -> Vec<Bound> {
        entries
            .map(|entry| match entry {
                EntryExpr::MapEntry(m) => {
                    let (k, v) = (self.bound(&m.key), self.bound(&m.value));
                    Bound::scalar(k.cost.saturating_add(v.cost), k.size.saturating_add(v.size))
                }
                EntryExpr::StructField(f) => self.bound(&f.value),
            })
            .collect()
    }
}

/// A list or map literal: the work of its parts, one element per part at least.
fn aggregate(parts: &[Bound]) -> Bound {
    let folded = parts.iter().fold(Bound::scalar(1, 0), |acc, p| {
        Bound::scalar(acc.cost.saturating_add(p.cost), acc.size.saturating_add(p.size.max(1)))
    });
    Bound { len: parts.len() as u64, ..folded }
}

/// The work a function does beyond evaluating its operands, and the size of its result.
fn call_bound(
    name: &str,
    target: Option<Bound>,
    args: &[Bound],
    operands: &[Bound],
    literal_int: Option<u64>,
    literal_pattern: bool,
) -> (u64, u64) {
    let sum = operands.iter().fold(0_u64, |acc, b| acc.saturating_add(b.size));
    let first = operands.first().map_or(1, |b| b.size);
    let arg = |i: usize| args.get(i).map_or(1, |b| b.size);
    match name {
        "_&&_" | "_||_" | "!_" | "@not_strictly_false" | "_-_" | "_*_" | "_/_" | "_%_" | "-_" => (0, 1),
        "_?_:_" => (0, arg(1).max(arg(2))),
        // Comparing stops at the shorter operand.
        "_==_" | "_!=_" | "_<_" | "_<=_" | "_>_" | "_>=_" => (operands.iter().map(|b| b.size).min().unwrap_or(1), 1),
        // Concatenation copies both sides.
        "_+_" => (sum, sum),
        "_[_]" | "_[?_]" | "_?._" => (arg(1), first),
        "@in" => (arg(1), 1),
        "size" | "has" | "int" | "uint" | "double" | "bool" | "type" | "duration" | "timestamp" => (sum, 1),
        // Matching is linear in the text (`regex` crate). `matches` caches compiled patterns,
        // so a literal one is compiled once; a pattern read from the object may differ at every
        // call, and `find`, `findAll` compile theirs at every call.
        "matches" | "find" | "findAll" => {
            let text = target.map_or(arg(0), |t| t.size);
            let pattern = if target.is_some() { arg(0) } else { arg(1) };
            let compile = if name == "matches" && literal_pattern { 1 } else { REGEX_COMPILE };
            (text.saturating_add(pattern.saturating_mul(compile)), text)
        }
        // Each byte may become the whole replacement.
        "replace" => {
            let text = target.map_or(1, |t| t.size);
            let size = text.saturating_mul(arg(1).max(1)).saturating_add(text);
            (size, size)
        }
        // A range of a computed length is as long as any integer.
        "lists.range" => {
            let n = literal_int.unwrap_or(u64::MAX);
            (n, n)
        }
        "sort" | "isSorted" => (first.saturating_mul(64), first),
        // Pairwise comparisons.
        "distinct" | "sets.contains" | "sets.equivalent" | "sets.intersects" => {
            let product = operands.iter().fold(1_u64, |acc, b| acc.saturating_mul(b.size.max(1)));
            (product.max(first.saturating_mul(first)), first)
        }
        // Escaping, quoting and formatting can grow text by a small factor.
        "strings.quote" | "format" | "string" | "base64.encode" => (sum.saturating_mul(8), sum.saturating_mul(8)),
        _ => (sum, sum),
    }
}
