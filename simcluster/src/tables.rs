//! Server-side printing (`Table`) for built-in kinds: the columns the real server prints for the
//! kinds our tests read, `Name` and `Age` for the rest. Custom resources use their CRD's printer
//! columns.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::negotiate::IncludeObject;
use crate::registry::ResourceType;
use crate::state::State;

const NAME_DESC: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const AGE_DESC: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

fn col(name: &str, ty: &str, format: &str, desc: &str) -> Value {
    json!({"name": name, "type": ty, "format": format, "description": desc, "priority": 0})
}

/// A human age like kubectl's (`0s`, `5m`, `3h`, `2d`).
pub fn age(created: &str) -> String {
    let Ok(t) = created.parse::<jiff::Timestamp>() else { return "<unknown>".into() };
    let secs = (jiff::Timestamp::now().as_second() - t.as_second()).max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 600 => format!("{}m{}s", s / 60, s % 60),
        s if s < 3 * 3600 => format!("{}m", s / 60),
        s if s < 8 * 3600 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        s if s < 2 * 86400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

fn count(v: &Value) -> usize {
    v.as_object().map(|m| m.len()).unwrap_or(0)
}

/// Build a Table of `objects`.
pub fn table(
    state: &Arc<State>,
    rt: &ResourceType,
    objects: &[Value],
    include: IncludeObject,
    list_meta: Value,
    version: &str,
) -> Value {
    if rt.custom
        && let Some(t) = crate::admission::custom_table(state, rt, objects, include, list_meta.clone())
    {
        return t;
    }
    type Cells = Box<dyn Fn(&Value) -> Vec<Value>>;
    let (columns, cells): (Vec<Value>, Cells) = match (rt.group.as_str(), rt.resource.as_str()) {
        ("", "configmaps") => (
            vec![
                col("Name", "string", "name", NAME_DESC),
                col(
                    "Data",
                    "string",
                    "",
                    "Data contains the configuration data. Each key must consist of alphanumeric characters, '-', '_' or '.'. Values with non-UTF-8 byte sequences must use the BinaryData field. The keys stored in Data must not overlap with the keys in the BinaryData field, this is enforced during validation process.",
                ),
                col("Age", "string", "", AGE_DESC),
            ],
            Box::new(|o: &Value| {
                vec![o["metadata"]["name"].clone(), json!(count(&o["data"]) + count(&o["binaryData"]))]
            }),
        ),
        ("", "secrets") => (
            vec![
                col("Name", "string", "name", NAME_DESC),
                col(
                    "Type",
                    "string",
                    "",
                    "Used to facilitate programmatic handling of secret data. More info: https://kubernetes.io/docs/concepts/configuration/secret/#secret-types",
                ),
                col(
                    "Data",
                    "string",
                    "",
                    "Data contains the secret data. Each key must consist of alphanumeric characters, '-', '_' or '.'. The serialized form of the secret data is a base64 encoded string, representing the arbitrary (possibly non-string) data value here. Described in https://tools.ietf.org/html/rfc4648#section-4",
                ),
                col("Age", "string", "", AGE_DESC),
            ],
            Box::new(|o: &Value| vec![o["metadata"]["name"].clone(), o["type"].clone(), json!(count(&o["data"]))]),
        ),
        ("", "namespaces") => (
            vec![
                col("Name", "string", "name", NAME_DESC),
                col("Status", "string", "", "The status of the namespace"),
                col("Age", "string", "", AGE_DESC),
            ],
            Box::new(|o: &Value| vec![o["metadata"]["name"].clone(), o["status"]["phase"].clone()]),
        ),
        _ => (
            vec![col("Name", "string", "name", NAME_DESC), col("Age", "string", "", AGE_DESC)],
            Box::new(|o: &Value| vec![o["metadata"]["name"].clone()]),
        ),
    };
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let mut c = cells(o);
            c.push(json!(age(o["metadata"]["creationTimestamp"].as_str().unwrap_or(""))));
            json!({"cells": c, "object": row_object(o, include, version)})
        })
        .collect();
    json!({"kind": "Table", "apiVersion": format!("meta.k8s.io/{version}"), "metadata": list_meta, "columnDefinitions": columns, "rows": rows})
}

/// The `object` of a row.
pub fn row_object(o: &Value, include: IncludeObject, version: &str) -> Value {
    match include {
        IncludeObject::None => Value::Null,
        IncludeObject::Metadata => crate::negotiate::partial(o, version),
        IncludeObject::Object => o.clone(),
    }
}
