//! Field sets as structured-merge-diff keeps them, and their `fieldsV1` JSON form.
//!
//! A path element is kept in its `fieldsV1` spelling: `f:<field>`, `k:<json key object>`,
//! `v:<json value>` or `i:<index>`. A set has members (paths it owns) and children (sets
//! under a path element); a path may be both (serialized with a `".": {}` marker).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

/// A set of field paths.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSet {
    members: BTreeSet<String>,
    children: BTreeMap<String, FieldSet>,
}

impl FieldSet {
    /// The empty set.
    pub fn new() -> FieldSet {
        FieldSet::default()
    }

    /// True when the set holds no path.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.is_empty()
    }

    /// Add a path (no-op for the empty path).
    pub fn insert(&mut self, path: &[String]) {
        match path {
            [] => {}
            [last] => {
                self.members.insert(last.clone());
            }
            [first, rest @ ..] => self.children.entry(first.clone()).or_default().insert(rest),
        }
    }

    /// True when the path is a member.
    pub fn has(&self, path: &[String]) -> bool {
        match path {
            [] => false,
            [last] => self.members.contains(last),
            [first, rest @ ..] => self.children.get(first).is_some_and(|c| c.has(rest)),
        }
    }

    /// True when this path element is a member at this level.
    pub fn has_member(&self, pe: &str) -> bool {
        self.members.contains(pe)
    }

    /// The set below a path element, if any.
    pub fn child(&self, pe: &str) -> Option<&FieldSet> {
        self.children.get(pe)
    }

    /// Members and children of this level.
    pub(crate) fn parts(&self) -> (&BTreeSet<String>, &BTreeMap<String, FieldSet>) {
        (&self.members, &self.children)
    }

    pub(crate) fn insert_member(&mut self, pe: &str) {
        self.members.insert(pe.to_string());
    }

    pub(crate) fn set_child(&mut self, pe: &str, child: FieldSet) {
        if child.is_empty() {
            self.children.remove(pe);
        } else {
            self.children.insert(pe.to_string(), child);
        }
    }

    /// Union.
    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.members.extend(other.members.iter().cloned());
        for (pe, c) in &other.children {
            let merged = match out.children.get(pe) {
                Some(mine) => mine.union(c),
                None => c.clone(),
            };
            out.children.insert(pe.clone(), merged);
        }
        out
    }

    /// Difference: members not in `other`'s members, children minus `other`'s children
    /// (non-recursive on members, like structured-merge-diff's `Set.Difference`).
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let members = self.members.difference(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (pe, c) in &self.children {
            match other.children.get(pe) {
                Some(oc) => {
                    let d = c.difference(oc);
                    if !d.is_empty() {
                        children.insert(pe.clone(), d);
                    }
                }
                None => {
                    children.insert(pe.clone(), c.clone());
                }
            }
        }
        FieldSet { members, children }
    }

    /// Intersection.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let members = self.members.intersection(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (pe, c) in &self.children {
            if let Some(oc) = other.children.get(pe) {
                let i = c.intersection(oc);
                if !i.is_empty() {
                    children.insert(pe.clone(), i);
                }
            }
        }
        FieldSet { members, children }
    }

    /// Every member path, members of a level before its children (structured-merge-diff order).
    pub fn paths(&self) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        self.collect_paths(&mut Vec::new(), &mut out);
        out
    }

    fn collect_paths(&self, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        for m in &self.members {
            let mut p = prefix.clone();
            p.push(m.clone());
            out.push(p);
        }
        for (pe, c) in &self.children {
            prefix.push(pe.clone());
            c.collect_paths(prefix, out);
            prefix.pop();
        }
    }

    /// The `fieldsV1` JSON.
    pub fn to_fields_v1(&self) -> Value {
        let mut out = Map::new();
        for m in &self.members {
            if !self.children.contains_key(m) {
                out.insert(m.clone(), Value::Object(Map::new()));
            }
        }
        for (pe, c) in &self.children {
            let mut v = c.to_fields_v1();
            if self.members.contains(pe)
                && let Value::Object(m) = &mut v
            {
                m.insert(".".into(), Value::Object(Map::new()));
            }
            out.insert(pe.clone(), v);
        }
        Value::Object(out)
    }

    /// Parse `fieldsV1` JSON.
    pub fn from_fields_v1(v: &Value) -> Result<FieldSet, String> {
        let Value::Object(m) = v else { return Err("fieldsV1 is not an object".into()) };
        let mut out = FieldSet::new();
        for (k, sub) in m {
            if k == "." {
                continue;
            }
            if !(k.starts_with("f:") || k.starts_with("k:") || k.starts_with("v:") || k.starts_with("i:")) {
                return Err(format!("unknown path element {k:?}"));
            }
            let Value::Object(sm) = sub else { return Err(format!("fieldsV1 value of {k:?} is not an object")) };
            let child = FieldSet::from_fields_v1(sub)?;
            if sm.is_empty() || sm.contains_key(".") {
                out.members.insert(k.clone());
            }
            if !child.is_empty() {
                out.children.insert(k.clone(), child);
            }
        }
        Ok(out)
    }
}

/// A path element for a field name.
pub fn field_pe(name: &str) -> String {
    format!("f:{name}")
}

/// A path element for a list-map item with these key fields (sorted by name).
pub fn key_pe(fields: &[(String, Value)]) -> String {
    let mut sorted: Vec<&(String, Value)> = fields.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let mut s = String::from("k:{");
    for (i, (k, v)) in sorted.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&json_string(&Value::String(k.clone())));
        s.push(':');
        s.push_str(&json_string(v));
    }
    s.push('}');
    s
}

/// A path element for a set item.
pub fn value_pe(v: &Value) -> String {
    format!("v:{}", json_string(v))
}

/// Compact JSON, with object keys sorted whatever serde_json's map ordering.
pub(crate) fn json_string(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", json_string(&Value::String(k.clone())), json_string(&m[k])))
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(a) => format!("[{}]", a.iter().map(json_string).collect::<Vec<_>>().join(",")),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

/// structured-merge-diff's `value.ToString`: strings quoted, lists and maps bracketed.
fn value_to_string(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::String(_) | Value::Number(_) | Value::Bool(_) => json_string(v),
        Value::Array(a) => format!("[{}]", a.iter().map(value_to_string).collect::<Vec<_>>().join(",")),
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys.into_iter().map(|k| format!("{k}={}", value_to_string(&m[k]))).collect();
            format!("{{{}}}", parts.join(","))
        }
    }
}

/// The path as the real server prints it in conflicts: `.spec.containers[name="app"].image`.
pub fn path_string(path: &[String]) -> String {
    let mut s = String::new();
    for pe in path {
        if let Some(f) = pe.strip_prefix("f:") {
            s.push('.');
            s.push_str(f);
        } else if let Some(k) = pe.strip_prefix("k:") {
            match serde_json::from_str::<Value>(k) {
                Ok(Value::Object(m)) => {
                    let mut keys: Vec<&String> = m.keys().collect();
                    keys.sort();
                    let parts: Vec<String> =
                        keys.into_iter().map(|k| format!("{k}={}", value_to_string(&m[k]))).collect();
                    s.push_str(&format!("[{}]", parts.join(",")));
                }
                _ => s.push_str(&format!("[{k}]")),
            }
        } else if let Some(v) = pe.strip_prefix("v:") {
            match serde_json::from_str::<Value>(v) {
                Ok(val) => s.push_str(&format!("[={}]", value_to_string(&val))),
                Err(_) => s.push_str(&format!("[={v}]")),
            }
        } else if let Some(i) = pe.strip_prefix("i:") {
            s.push_str(&format!("[{i}]"));
        } else {
            s.push_str(pe);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p(parts: &[&str]) -> Vec<String> {
        parts.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn fields_v1_round_trip() {
        let v = json!({"f:data": {".": {}, "f:a": {}}, "f:metadata": {"f:labels": {"f:x": {}}},
                       "f:spec": {"f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:name": {}}}}});
        let s = FieldSet::from_fields_v1(&v).expect("parse");
        assert!(s.has(&p(&["f:data"])));
        assert!(s.has(&p(&["f:data", "f:a"])));
        assert!(!s.has(&p(&["f:metadata"])));
        assert_eq!(s.to_fields_v1(), v);
        let d = s.difference(&FieldSet::from_fields_v1(&json!({"f:data": {"f:a": {}}})).expect("parse"));
        assert_eq!(d.to_fields_v1()["f:data"], json!({}));
    }

    #[test]
    fn path_strings() {
        assert_eq!(path_string(&p(&["f:data", "f:k1"])), ".data.k1");
        let k = key_pe(&[("name".into(), json!("app"))]);
        assert_eq!(k, "k:{\"name\":\"app\"}");
        assert_eq!(path_string(&["f:spec".to_string(), k, "f:image".to_string()]), ".spec[name=\"app\"].image");
        let k2 = key_pe(&[("protocol".into(), json!("TCP")), ("containerPort".into(), json!(8080))]);
        assert_eq!(k2, "k:{\"containerPort\":8080,\"protocol\":\"TCP\"}");
        assert_eq!(path_string(&[k2]), "[containerPort=8080,protocol=\"TCP\"]");
        assert_eq!(path_string(&[value_pe(&json!("a"))]), "[=\"a\"]");
    }
}
