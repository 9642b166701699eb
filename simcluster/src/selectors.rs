//! Label and field selectors, parsed and reported as the real API server (a port of
//! apimachinery's `labels.Parse` lexer/parser error messages and `fields.ParseSelector`).

use std::collections::BTreeMap;

use serde_json::Value;

/// A label selector requirement operator.
#[derive(Clone, Debug, PartialEq)]
enum Op {
    Eq,
    NotEq,
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
}

/// One requirement.
#[derive(Clone, Debug, PartialEq)]
struct Requirement {
    key: String,
    op: Op,
    values: Vec<String>,
}

/// A parsed label selector (empty matches everything).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector {
    reqs: Vec<Requirement>,
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    In,
    NotIn,
    Eq,
    DoubleEq,
    NotEq,
    Not,
    Open,
    Close,
    Comma,
    Gt,
    Lt,
    End,
}

impl Tok {
    fn lit(&self) -> String {
        match self {
            Tok::Ident(s) => s.clone(),
            Tok::In => "in".into(),
            Tok::NotIn => "notin".into(),
            Tok::Eq => "=".into(),
            Tok::DoubleEq => "==".into(),
            Tok::NotEq => "!=".into(),
            Tok::Not => "!".into(),
            Tok::Open => "(".into(),
            Tok::Close => ")".into(),
            Tok::Comma => ",".into(),
            Tok::Gt => ">".into(),
            Tok::Lt => "<".into(),
            Tok::End => String::new(),
        }
    }
}

fn lex(s: &str) -> Vec<Tok> {
    let special = |c: char| matches!(c, '=' | '!' | '(' | ')' | ',' | '>' | '<');
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    let mut out = Vec::new();
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        if special(c) {
            let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
            let (tok, n) = match two.as_str() {
                "==" => (Tok::DoubleEq, 2),
                "!=" => (Tok::NotEq, 2),
                _ => match c {
                    '=' => (Tok::Eq, 1),
                    '!' => (Tok::Not, 1),
                    '(' => (Tok::Open, 1),
                    ')' => (Tok::Close, 1),
                    ',' => (Tok::Comma, 1),
                    '>' => (Tok::Gt, 1),
                    _ => (Tok::Lt, 1),
                },
            };
            out.push(tok);
            i += n;
            continue;
        }
        let start = i;
        while i < chars.len() && !chars[i].is_whitespace() && !special(chars[i]) {
            i += 1;
        }
        let word: String = chars[start..i].iter().collect();
        out.push(match word.as_str() {
            "in" => Tok::In,
            "notin" => Tok::NotIn,
            _ => Tok::Ident(word),
        });
    }
    out.push(Tok::End);
    out
}

struct Parser {
    toks: Vec<Tok>,
    pos: usize,
}

impl Parser {
    fn lookahead(&self) -> Tok {
        self.toks.get(self.pos).cloned().unwrap_or(Tok::End)
    }
    fn consume(&mut self) -> Tok {
        let t = self.lookahead();
        if self.pos < self.toks.len() {
            self.pos += 1;
        }
        t
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut reqs = Vec::new();
        loop {
            match self.lookahead() {
                Tok::Ident(_) | Tok::Not => {
                    let r = self.requirement().map_err(|e| format!("unable to parse requirement: {e}"))?;
                    reqs.push(r);
                    match self.consume() {
                        Tok::End => return Ok(reqs),
                        Tok::Comma => {
                            let t = self.lookahead();
                            if !matches!(t, Tok::Ident(_) | Tok::Not) {
                                return Err(format!("found '{}', expected: identifier after ','", t.lit()));
                            }
                        }
                        t => return Err(format!("found '{}', expected: ',' or 'end of string'", t.lit())),
                    }
                }
                Tok::End => return Ok(reqs),
                t => return Err(format!("found '{}', expected: !, identifier, or 'end of string'", t.lit())),
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        let mut op = None;
        let mut tok = self.consume();
        if tok == Tok::Not {
            op = Some(Op::DoesNotExist);
            tok = self.consume();
        }
        let Tok::Ident(key) = tok else {
            return Err(format!("found '{}', expected: identifier", tok.lit()));
        };
        validate_key(&key)?;
        if matches!(self.lookahead(), Tok::End | Tok::Comma) {
            return Ok(Requirement { key, op: op.unwrap_or(Op::Exists), values: vec![] });
        }
        if op == Some(Op::DoesNotExist) {
            return Ok(Requirement { key, op: Op::DoesNotExist, values: vec![] });
        }
        let op = match self.consume() {
            Tok::In => Op::In,
            Tok::NotIn => Op::NotIn,
            Tok::Eq | Tok::DoubleEq => Op::Eq,
            Tok::NotEq => Op::NotEq,
            Tok::Gt => Op::Gt,
            Tok::Lt => Op::Lt,
            t => return Err(format!("found '{}', expected: in, notin, =, ==, !=, gt, lt", t.lit())),
        };
        let values = match op {
            Op::In | Op::NotIn => self.values()?,
            _ => self.exact_value()?,
        };
        for v in &values {
            validate_value(v)?;
        }
        Ok(Requirement { key, op, values })
    }

    fn values(&mut self) -> Result<Vec<String>, String> {
        let t = self.consume();
        if t != Tok::Open {
            return Err(format!("found '{}' expected: '('", t.lit()));
        }
        match self.lookahead() {
            Tok::Ident(_) | Tok::Comma => {
                let s = self.identifiers()?;
                let t = self.consume();
                if t != Tok::Close {
                    return Err(format!("found '{}', expected: ')'", t.lit()));
                }
                Ok(s)
            }
            Tok::Close => {
                self.consume();
                Ok(vec![String::new()])
            }
            t => Err(format!("found '{}', expected: ',', ')' or identifier", t.lit())),
        }
    }

    fn identifiers(&mut self) -> Result<Vec<String>, String> {
        let mut s: Vec<String> = Vec::new();
        let insert = |s: &mut Vec<String>, v: String| {
            if !s.contains(&v) {
                s.push(v)
            }
        };
        loop {
            match self.consume() {
                Tok::Ident(v) => {
                    insert(&mut s, v);
                    match self.lookahead() {
                        Tok::Comma => continue,
                        Tok::Close => return Ok(s),
                        t => return Err(format!("found '{}', expected: ',' or ')'", t.lit())),
                    }
                }
                Tok::Comma => {
                    if s.is_empty() {
                        insert(&mut s, String::new());
                    }
                    match self.lookahead() {
                        Tok::Close => {
                            insert(&mut s, String::new());
                            return Ok(s);
                        }
                        Tok::Comma => {
                            self.consume();
                            insert(&mut s, String::new());
                        }
                        _ => {}
                    }
                }
                t => return Err(format!("found '{}', expected: ',', or identifier", t.lit())),
            }
        }
    }

    fn exact_value(&mut self) -> Result<Vec<String>, String> {
        if matches!(self.lookahead(), Tok::End | Tok::Comma) {
            return Ok(vec![String::new()]);
        }
        match self.consume() {
            Tok::Ident(v) => Ok(vec![v]),
            t => Err(format!("found '{}', expected: identifier", t.lit())),
        }
    }
}

fn validate_key(key: &str) -> Result<(), String> {
    let errs = crate::validation::names::qualified_name(key);
    if errs.is_empty() { Ok(()) } else { Err(format!("key: Invalid value: \"{key}\": {}", errs.join("; "))) }
}

fn validate_value(v: &str) -> Result<(), String> {
    let errs = crate::validation::names::label_value(v);
    if errs.is_empty() { Ok(()) } else { Err(format!("values[0][{v}]: Invalid value: \"{v}\": {}", errs.join("; "))) }
}

impl LabelSelector {
    /// Parse a `labelSelector` query value.
    pub fn parse(s: &str) -> Result<LabelSelector, String> {
        let mut p = Parser { toks: lex(s), pos: 0 };
        Ok(LabelSelector { reqs: p.parse()? })
    }

    /// Whether labels match.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.reqs.iter().all(|r| {
            let v = labels.get(&r.key);
            match r.op {
                Op::Eq | Op::In => v.is_some_and(|v| r.values.contains(v)),
                Op::NotEq | Op::NotIn => v.is_none_or(|v| !r.values.contains(v)),
                Op::Exists => v.is_some(),
                Op::DoesNotExist => v.is_none(),
                Op::Gt | Op::Lt => {
                    let Some(Ok(n)) = v.map(|v| v.parse::<i64>()) else { return false };
                    let Ok(want) = r.values[0].parse::<i64>() else { return false };
                    if r.op == Op::Gt { n > want } else { n < want }
                }
            }
        })
    }

    /// Whether an object's `metadata.labels` match.
    pub fn matches_object(&self, obj: &Value) -> bool {
        if self.reqs.is_empty() {
            return true;
        }
        self.matches(&labels_of(obj))
    }

    /// Whether the selector is empty.
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }
}

/// An object's labels.
pub fn labels_of(obj: &Value) -> BTreeMap<String, String> {
    obj["metadata"]["labels"]
        .as_object()
        .map(|m| m.iter().filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string()))).collect())
        .unwrap_or_default()
}

/// A parsed field selector: terms of `field=value`, `field==value`, `field!=value`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldSelector {
    terms: Vec<(String, bool, String)>,
}

impl FieldSelector {
    /// Parse a `fieldSelector` query value.
    pub fn parse(s: &str) -> Result<FieldSelector, String> {
        let mut terms = Vec::new();
        if s.trim().is_empty() {
            return Ok(FieldSelector { terms });
        }
        for term in s.split(',') {
            let parsed = if let Some((k, v)) = term.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = term.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = term.split_once('=') {
                (k, true, v)
            } else {
                return Err(format!("invalid selector: '{s}'; can't understand '{term}'"));
            };
            terms.push((parsed.0.trim().to_string(), parsed.1, parsed.2.trim().to_string()));
        }
        Ok(FieldSelector { terms })
    }

    /// Check every field is supported; `supported` lists the field paths of the resource.
    pub fn check_supported(&self, supported: &[String]) -> Result<(), String> {
        for (field, _, _) in &self.terms {
            if !supported.contains(field) {
                let only: Vec<String> = supported.iter().map(|f| format!("\"{f}\"")).collect();
                return Err(format!("\"{field}\" is not a known field selector: only {}", only.join(", ")));
            }
        }
        Ok(())
    }

    /// Whether an object matches (fields read by dotted path; missing fields are "").
    pub fn matches(&self, obj: &Value) -> bool {
        self.matches_with(|field| field_value(obj, field))
    }

    /// Whether an object matches, its fields' values given by `value` (the kind's selectable
    /// fields, as its registry computes them).
    pub fn matches_with(&self, value: impl Fn(&str) -> String) -> bool {
        self.terms.iter().all(|(field, eq, want)| (value(field) == *want) == *eq)
    }

    /// The first field not in `supported`.
    pub fn unsupported<'a>(&'a self, supported: &[String]) -> Option<&'a str> {
        self.terms.iter().map(|(f, _, _)| f.as_str()).find(|f| !supported.iter().any(|s| s == f))
    }

    /// The value required for `field` by an `=` term, if any.
    pub fn required(&self, field: &str) -> Option<&str> {
        self.terms.iter().find(|(f, eq, _)| f == field && *eq).map(|(_, _, v)| v.as_str())
    }

    /// Whether the selector is empty.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }
}

/// A field's value as a string, by dotted path.
pub fn field_value(obj: &Value, path: &str) -> String {
    let mut v = obj;
    for part in path.split('.') {
        v = &v[part];
    }
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn operators() {
        let l = labels(&[("app", "web"), ("tier", "frontend")]);
        for (sel, want) in [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app in (web,db)", true),
            ("app notin (web)", false),
            ("tier", true),
            ("!tier", false),
            ("!missing", true),
            ("app=web,tier=backend", false),
            ("", true),
        ] {
            assert_eq!(LabelSelector::parse(sel).unwrap().matches(&l), want, "{sel}");
        }
    }

    #[test]
    fn errors_are_worded_like_apimachinery() {
        assert_eq!(
            LabelSelector::parse("app in (web").unwrap_err(),
            "unable to parse requirement: found '', expected: ',' or ')'"
        );
        assert_eq!(
            LabelSelector::parse("app=no spaces allowed").unwrap_err(),
            "found 'spaces', expected: ',' or 'end of string'"
        );
        assert_eq!(
            FieldSelector::parse("metadata.name").unwrap_err(),
            "invalid selector: 'metadata.name'; can't understand 'metadata.name'"
        );
        let f = FieldSelector::parse("data.name=alpha").unwrap();
        assert_eq!(
            f.check_supported(&["metadata.name".into(), "metadata.namespace".into()]).unwrap_err(),
            "\"data.name\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        );
    }
}
