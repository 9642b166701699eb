//! Normalized comparison: only the fields the desired object declares are compared (what Kuvryn
//! Sync manages with Server-Side Apply), so server-populated fields (status, managedFields,
//! resourceVersion, uid, generation, creationTimestamp) and defaults the server adds never show
//! up as differences. The values compared on the desired side can be the desired object itself
//! or, better, the result of a server-side dry-run apply of it (server-normalized, as fluxcd's
//! ssa does); the field set always comes from the desired object.
//!
//! Secrets are compared by key: `stringData` is folded into `data` first, and a change is
//! reported as `data.<key>`; values never leave this module.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use base64::Engine as _;

/// Metadata fields the server owns.
const SERVER_METADATA: [&str; 7] =
    ["managedFields", "resourceVersion", "uid", "generation", "creationTimestamp", "selfLink", "deletionTimestamp"];

/// Fold a Secret's `stringData` into base64 `data` (what the API server stores).
pub fn fold_string_data(obj: &Value) -> Value {
    let mut obj = obj.clone();
    if obj["kind"] == "Secret"
        && obj["apiVersion"] == "v1"
        && let Some(Value::Object(sd)) = obj.as_object_mut().and_then(|m| m.remove("stringData"))
    {
        if !obj["data"].is_object() {
            obj["data"] = Value::Object(Default::default());
        }
        for (k, v) in sd {
            let text = v.as_str().unwrap_or_default();
            obj["data"][k] = Value::String(base64::engine::general_purpose::STANDARD.encode(text));
        }
    }
    obj
}

/// The field paths (`spec.replicas`, `spec.template.spec.containers[name=app].image`,
/// `data.password`) where `candidate` differs from `live`, over the fields `desired` declares.
pub fn changed_paths(desired: &Value, candidate: &Value, live: &Value) -> Vec<String> {
    let desired = fold_string_data(desired);
    let candidate = fold_string_data(candidate);
    let mut out = Vec::new();
    let Some(fields) = desired.as_object() else { return out };
    for (k, d) in fields {
        match k.as_str() {
            "apiVersion" | "kind" | "status" => continue,
            "metadata" => {
                let Some(meta) = d.as_object() else { continue };
                for (mk, mv) in meta {
                    if SERVER_METADATA.contains(&mk.as_str()) || mk == "name" || mk == "namespace" {
                        continue;
                    }
                    walk(mv, &candidate["metadata"][mk], &live["metadata"][mk], &format!("metadata.{mk}"), &mut out);
                }
            }
            _ => walk(d, &candidate[k], &live[k], k, &mut out),
        }
    }
    out.sort();
    out.dedup();
    out
}

fn walk(desired: &Value, candidate: &Value, live: &Value, path: &str, out: &mut Vec<String>) {
    match desired {
        Value::Object(fields) => {
            if !live.is_object() && !fields.is_empty() {
                out.push(path.to_string());
                return;
            }
            for (k, d) in fields {
                walk(d, &candidate[k], &live[k], &format!("{path}.{k}"), out);
            }
        }
        Value::Array(items) => {
            let keyed = !items.is_empty() && items.iter().all(|i| i.get("name").and_then(Value::as_str).is_some());
            match (keyed, candidate.as_array(), live.as_array()) {
                (true, Some(c), Some(l)) => {
                    // Indexed once: looking each name up by scanning made a list of n entries
                    // cost n² (n³ for the check below), minutes for a 1 MiB object.
                    let (by_name_c, by_name_l) = (by_name(c), by_name(l));
                    for d in items {
                        let name = d["name"].as_str().unwrap_or_default();
                        let candidate = by_name_c.get(name).copied().unwrap_or(&NULL);
                        let live = by_name_l.get(name).copied().unwrap_or(&NULL);
                        walk(d, candidate, live, &format!("{path}[name={name}]"), out);
                    }
                    // Entries the live list has and the candidate does not (added by hand).
                    let in_c: BTreeSet<String> = c.iter().map(|i| name_key(&i["name"])).collect();
                    if c.len() != l.len() || l.iter().any(|i| !in_c.contains(&name_key(&i["name"]))) {
                        out.push(path.to_string());
                    }
                }
                (false, Some(c), Some(l)) if c.len() == l.len() && c.len() == items.len() => {
                    for (i, d) in items.iter().enumerate() {
                        walk(d, &c[i], &l[i], &format!("{path}[{i}]"), out);
                    }
                }
                _ => {
                    if candidate != live {
                        out.push(path.to_string());
                    }
                }
            }
        }
        _ => {
            if candidate != live {
                out.push(path.to_string());
            }
        }
    }
}

static NULL: Value = Value::Null;

/// The first entry of each string `name`, as a scan in list order finds it.
fn by_name(list: &[Value]) -> BTreeMap<&str, &Value> {
    let mut m = BTreeMap::new();
    for i in list {
        if let Some(n) = i["name"].as_str() {
            m.entry(n).or_insert(i);
        }
    }
    m
}

/// A `name` value as text that is equal exactly when the values are: a string as itself,
/// anything else (a number, a missing name) as its JSON, kept apart by the first character.
fn name_key(v: &Value) -> String {
    match v {
        Value::String(s) => format!("s{s}"),
        other => format!("j{other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(containers: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "w"}, "spec": {"containers": containers}})
    }

    #[test]
    fn keyed_lists() {
        let d = deployment(json!([{"name": "a", "image": "1"}]));
        let same = deployment(json!([{"name": "a", "image": "1"}]));
        assert!(changed_paths(&d, &d, &same).is_empty());
        // The first entry of a name counts, as before.
        let dup = deployment(json!([{"name": "a", "image": "2"}, {"name": "a", "image": "1"}]));
        assert_eq!(changed_paths(&d, &dup, &same), ["spec.containers", "spec.containers[name=a].image"]);
        // An entry added by hand, with a name or without one.
        for extra in [json!({"name": "b"}), json!({"image": "x"}), json!({"name": 1})] {
            let live = deployment(json!([{"name": "a", "image": "1"}, extra]));
            assert_eq!(changed_paths(&d, &d, &live), ["spec.containers"], "{extra}");
        }
        // A number named 1 is not the string "1".
        let c = deployment(json!([{"name": "a", "image": "1"}, {"name": 1}]));
        let l = deployment(json!([{"name": "a", "image": "1"}, {"name": "1"}]));
        assert_eq!(changed_paths(&d, &c, &l), ["spec.containers"]);
        assert!(changed_paths(&d, &c, &c).is_empty());
    }

    /// See: issue 18 (fuzz harness). 20,000 named entries (a 1 MiB object holds more): the
    /// lookups by scanning took minutes.
    #[test]
    fn keyed_lists_take_linear_time() {
        let list: Vec<Value> = (0..20_000).map(|i| json!({"name": format!("e{i}"), "v": i})).collect();
        let d = deployment(Value::Array(list));
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(changed_paths(&d, &d, &d).len()));
        assert_eq!(rx.recv_timeout(std::time::Duration::from_secs(20)), Ok(0));
    }
}
