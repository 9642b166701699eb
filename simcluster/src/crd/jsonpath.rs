//! The JSONPath subset of client-go's `jsonpath` used by printer columns and selectable fields:
//! `.field`, `['field']`, `[n]`, `[*]`, `.*`, `..field` and filters `[?(@.a.b == "x")]`
//! (`==`, `!=`, `<`, `<=`, `>`, `>=`, or a bare path for existence). Missing keys give no result.

use serde_json::Value;

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Step {
    Field(String),
    Recursive(String),
    Index(i64),
    Wildcard,
    Filter(Vec<Step>, Option<(String, Value)>),
}

/// Parse a path such as `.status.conditions[?(@.type=="Ready")].status` (optionally in `{...}`).
pub(crate) fn parse(path: &str) -> Result<Vec<Step>, String> {
    let mut p = path.trim();
    if let Some(inner) = p.strip_prefix('{').and_then(|x| x.strip_suffix('}')) {
        p = inner.trim();
    }
    if let Some(rest) = p.strip_prefix('$') {
        p = rest;
    }
    let chars: Vec<char> = p.chars().collect();
    let (steps, end) = parse_steps(&chars, 0, false)?;
    if end != chars.len() {
        return Err(format!("unrecognized character in action: {}", chars[end]));
    }
    Ok(steps)
}

fn is_name_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '-' || c == '/' || c == '$'
}

/// Parse steps from `i`; inside a filter, stop at an operator or `)`.
fn parse_steps(c: &[char], mut i: usize, in_filter: bool) -> Result<(Vec<Step>, usize), String> {
    let mut steps = Vec::new();
    while i < c.len() {
        match c[i] {
            '.' => {
                if c.get(i + 1) == Some(&'.') {
                    let start = i + 2;
                    let mut j = start;
                    while j < c.len() && is_name_char(c[j]) {
                        j += 1;
                    }
                    steps.push(Step::Recursive(c[start..j].iter().collect()));
                    i = j;
                } else if c.get(i + 1) == Some(&'*') {
                    steps.push(Step::Wildcard);
                    i += 2;
                } else {
                    let start = i + 1;
                    let mut j = start;
                    while j < c.len() && is_name_char(c[j]) {
                        j += 1;
                    }
                    if j > start {
                        steps.push(Step::Field(c[start..j].iter().collect()));
                    }
                    i = j;
                }
            }
            '[' => {
                let close = find_close(c, i)?;
                let inner: String = c[i + 1..close].iter().collect();
                let inner = inner.trim();
                if inner == "*" {
                    steps.push(Step::Wildcard);
                } else if let Some(f) = inner.strip_prefix("?(").and_then(|x| x.strip_suffix(')')) {
                    steps.push(parse_filter(f.trim())?);
                } else if (inner.starts_with('\'') && inner.ends_with('\'') && inner.len() >= 2)
                    || (inner.starts_with('"') && inner.ends_with('"') && inner.len() >= 2)
                {
                    steps.push(Step::Field(inner[1..inner.len() - 1].to_string()));
                } else if let Ok(n) = inner.parse::<i64>() {
                    steps.push(Step::Index(n));
                } else {
                    return Err(format!("invalid array index {inner}"));
                }
                i = close + 1;
            }
            '@' if in_filter => i += 1,
            _ if in_filter => break,
            ch => return Err(format!("unrecognized character in action: {ch}")),
        }
    }
    Ok((steps, i))
}

fn find_close(c: &[char], open: usize) -> Result<usize, String> {
    let mut depth = 0;
    let mut quote: Option<char> = None;
    for (j, &ch) in c.iter().enumerate().skip(open) {
        if let Some(q) = quote {
            if ch == q {
                quote = None;
            }
            continue;
        }
        match ch {
            '\'' | '"' => quote = Some(ch),
            '[' => depth += 1,
            ']' => {
                depth -= 1;
                if depth == 0 {
                    return Ok(j);
                }
            }
            _ => {}
        }
    }
    Err("unterminated array".to_string())
}

fn parse_filter(f: &str) -> Result<Step, String> {
    let chars: Vec<char> = f.chars().collect();
    if chars.first() != Some(&'@') {
        return Err(format!("unrecognized filter {f}"));
    }
    let (lhs, end) = parse_steps(&chars, 1, true)?;
    let rest: String = chars[end..].iter().collect();
    let rest = rest.trim();
    if rest.is_empty() {
        return Ok(Step::Filter(lhs, None));
    }
    for op in ["==", "!=", "<=", ">=", "<", ">"] {
        if let Some(lit) = rest.strip_prefix(op) {
            let lit = lit.trim();
            let value = if (lit.starts_with('"') && lit.ends_with('"') && lit.len() >= 2)
                || (lit.starts_with('\'') && lit.ends_with('\'') && lit.len() >= 2)
            {
                Value::String(lit[1..lit.len() - 1].to_string())
            } else {
                serde_json::from_str(lit).map_err(|_| format!("unrecognized literal {lit}"))?
            };
            return Ok(Step::Filter(lhs, Some((op.to_string(), value))));
        }
    }
    Err(format!("unrecognized filter {f}"))
}

/// All results of `steps` applied to `root`.
pub(crate) fn eval<'a>(steps: &[Step], root: &'a Value) -> Vec<&'a Value> {
    let mut cur = vec![root];
    for step in steps {
        let mut next = Vec::new();
        for v in cur {
            match step {
                Step::Field(name) => {
                    if let Some(x) = v.get(name.as_str()) {
                        next.push(x);
                    }
                }
                Step::Recursive(name) => recursive(v, name, &mut next),
                Step::Index(n) => {
                    if let Some(a) = v.as_array() {
                        let idx = if *n < 0 { a.len() as i64 + n } else { *n };
                        if idx >= 0
                            && let Some(x) = a.get(idx as usize)
                        {
                            next.push(x);
                        }
                    }
                }
                Step::Wildcard => match v {
                    Value::Array(a) => next.extend(a.iter()),
                    Value::Object(m) => {
                        let mut keys: Vec<&String> = m.keys().collect();
                        keys.sort();
                        next.extend(keys.into_iter().map(|k| &m[k.as_str()]));
                    }
                    _ => {}
                },
                Step::Filter(lhs, cond) => {
                    let candidates: Vec<&Value> = match v {
                        Value::Array(a) => a.iter().collect(),
                        other => vec![other],
                    };
                    for item in candidates {
                        let found = eval(lhs, item);
                        let keep = match cond {
                            None => !found.is_empty(),
                            Some((op, lit)) => found.first().is_some_and(|x| compare(x, op, lit)),
                        };
                        if keep {
                            next.push(item);
                        }
                    }
                }
            }
        }
        cur = next;
    }
    cur
}

fn recursive<'a>(v: &'a Value, name: &str, out: &mut Vec<&'a Value>) {
    match v {
        Value::Object(m) => {
            if name.is_empty() {
                out.push(v);
            } else if let Some(x) = m.get(name) {
                out.push(x);
            }
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            for k in keys {
                recursive(&m[k.as_str()], name, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| recursive(x, name, out)),
        _ => {}
    }
}

fn compare(x: &Value, op: &str, lit: &Value) -> bool {
    use std::cmp::Ordering;
    let ord = match (x, lit) {
        (Value::Number(a), Value::Number(b)) => a.as_f64().and_then(|a| b.as_f64().and_then(|b| a.partial_cmp(&b))),
        (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
        (Value::Bool(a), Value::Bool(b)) => Some(a.cmp(b)),
        _ => None,
    };
    match op {
        "==" => ord == Some(Ordering::Equal),
        "!=" => ord != Some(Ordering::Equal),
        "<" => ord == Some(Ordering::Less),
        "<=" => matches!(ord, Some(Ordering::Less | Ordering::Equal)),
        ">" => ord == Some(Ordering::Greater),
        ">=" => matches!(ord, Some(Ordering::Greater | Ordering::Equal)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths() {
        let obj = json!({"spec": {"size": 3, "a.b": 1}, "status": {"conditions": [
            {"type": "Synced", "status": "False"}, {"type": "Ready", "status": "True", "message": "ok"}]}});
        let get = |p: &str| eval(&parse(p).unwrap(), &obj).into_iter().cloned().collect::<Vec<_>>();
        assert_eq!(get(".spec.size"), vec![json!(3)]);
        assert_eq!(get(".spec['a.b']"), vec![json!(1)]);
        assert_eq!(get(".status.conditions[?(@.type==\"Ready\")].status"), vec![json!("True")]);
        assert_eq!(get(".status.conditions[?(@.type == 'Ready')].message"), vec![json!("ok")]);
        assert_eq!(get(".status.conditions[-1].type"), vec![json!("Ready")]);
        assert_eq!(get(".status.conditions[*].type"), vec![json!("Synced"), json!("Ready")]);
        assert_eq!(get("{.spec.missing}"), Vec::<Value>::new());
        assert!(parse(".spec[").is_err());
    }
}
