//! Server-side printing of custom resources (`meta.k8s.io/v1` Table), as apiextensions'
//! tableconvertor does it.

use serde_json::{Value, json};

use super::fielderr as fe;
use super::jsonpath;
use super::{CrdVersion, IncludeObject};

/// ObjectMeta's `name` description (the Name column).
pub(crate) const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";

/// ObjectMeta's `creationTimestamp` description (the default Age column).
pub(crate) const CREATION_TIMESTAMP_DESCRIPTION: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// The printer columns served for a version: its own, or a default `Age` column.
fn columns(v: &CrdVersion) -> Vec<Value> {
    if !v.printer_columns.is_empty() {
        return v.printer_columns.clone();
    }
    vec![json!({
        "name": "Age",
        "type": "date",
        "description": CREATION_TIMESTAMP_DESCRIPTION,
        "jsonPath": ".metadata.creationTimestamp",
    })]
}

fn text<'a>(c: &'a Value, k: &str) -> &'a str {
    c.get(k).and_then(Value::as_str).unwrap_or("")
}

/// `columnDefinitions`.
pub(crate) fn column_definitions(v: &CrdVersion) -> Vec<Value> {
    let mut defs = vec![
        json!({"name": "Name", "type": "string", "format": "name", "description": NAME_DESCRIPTION, "priority": 0}),
    ];
    for c in columns(v) {
        let path = text(&c, "jsonPath");
        let description = match text(&c, "description") {
            "" => format!("Custom resource definition column (in JSONPath format): {path}"),
            d => d.to_string(),
        };
        defs.push(json!({
            "name": text(&c, "name"),
            "type": text(&c, "type"),
            "format": text(&c, "format"),
            "description": description,
            "priority": c.get("priority").and_then(Value::as_i64).unwrap_or(0),
        }));
    }
    defs
}

/// The cell of one column for one object.
fn cell(column: &Value, obj: &Value, now: jiff::Timestamp) -> Value {
    let Ok(steps) = jsonpath::parse(text(column, "jsonPath")) else { return Value::Null };
    let results = jsonpath::eval(&steps, obj);
    let Some(value) = results.first() else { return Value::Null };
    match text(column, "type") {
        "string" => match value {
            Value::Null => Value::Null,
            Value::String(s) => json!(s),
            Value::Object(_) | Value::Array(_) => json!(fe::go_json(value)),
            other => json!(fe::go_v(other)),
        },
        "integer" => match value {
            Value::Number(n) => match n.as_i64() {
                Some(i) => json!(i),
                None => n.as_f64().map(|f| json!(f.trunc() as i64)).unwrap_or(Value::Null),
            },
            _ => Value::Null,
        },
        "number" => match value {
            Value::Number(n) => n.as_f64().map(|f| json!(f)).unwrap_or(Value::Null),
            _ => Value::Null,
        },
        "boolean" => match value {
            Value::Bool(b) => json!(b),
            _ => Value::Null,
        },
        "date" => match value {
            Value::String(s) => match s.parse::<jiff::Timestamp>() {
                Ok(t) => json!(human_duration(now.as_second() - t.as_second())),
                Err(_) => json!("<invalid>"),
            },
            _ => Value::Null,
        },
        _ => Value::Null,
    }
}

/// apimachinery's `duration.HumanDuration` of a number of seconds.
pub(crate) fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".to_string();
    }
    if seconds < 0 {
        return "0s".to_string();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 { format!("{minutes}m") } else { format!("{minutes}m{s}s") };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 { format!("{hours}h") } else { format!("{hours}h{m}m") };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 { format!("{}d", hours / 24) } else { format!("{}d{h}h", hours / 24) };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 { format!("{}y", hours / 24 / 365) } else { format!("{}y{dy}d", hours / 24 / 365) };
    }
    format!("{}y", hours / 24 / 365)
}

/// The whole Table.
pub(crate) fn table(
    v: &CrdVersion,
    objects: &[Value],
    include: IncludeObject,
    list_meta: Value,
    now: jiff::Timestamp,
) -> Value {
    let cols = columns(v);
    let rows: Vec<Value> = objects
        .iter()
        .map(|obj| {
            let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
            let mut cells = vec![json!(name)];
            cells.extend(cols.iter().map(|c| cell(c, obj, now)));
            let object = match include {
                IncludeObject::None => Value::Null,
                IncludeObject::Metadata => json!({
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
                }),
                IncludeObject::Object => obj.clone(),
            };
            json!({"cells": cells, "object": object})
        })
        .collect();
    let mut meta = match list_meta {
        Value::Object(m) => m,
        _ => serde_json::Map::new(),
    };
    // Table's ListMeta: empty strings and null counts are omitted.
    meta.retain(|_, v| !(v.is_null() || v.as_str() == Some("")));
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": column_definitions(v),
        "rows": rows,
    })
}
