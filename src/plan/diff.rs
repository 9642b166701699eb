//! Normalized comparison: only the fields the desired object declares are compared (what Kuvryn
//! Sync manages with Server-Side Apply), so server-populated fields (status, managedFields,
//! resourceVersion, uid, generation, creationTimestamp) and defaults the server adds never show
//! up as differences. The values compared on the desired side can be the desired object itself
//! or, better, the result of a server-side dry-run apply of it (server-normalized, as fluxcd's
//! ssa does); the field set always comes from the desired object.
//!
//! Secrets are compared by key: `stringData` is folded into `data` first, and a change is
//! reported as `data.<key>`; values never leave this module.

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
                    for d in items {
                        let name = d["name"].as_str().unwrap_or_default();
                        let find =
                            |list: &Vec<Value>| list.iter().find(|i| i["name"] == name).cloned().unwrap_or(Value::Null);
                        walk(d, &find(c), &find(l), &format!("{path}[name={name}]"), out);
                    }
                    // Entries the live list has and the candidate does not (added by hand).
                    let names = |list: &Vec<Value>| list.iter().map(|i| i["name"].clone()).collect::<Vec<_>>();
                    if names(c).len() != names(l).len() || names(l).iter().any(|n| !names(c).contains(n)) {
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
