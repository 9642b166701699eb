//! Machine-readable output (`-o json|yaml`) and writing to stdout.
//!
//! JSON is `serde_json`'s pretty form of the API objects; YAML is the same values through the
//! project's YAML crate ([`kuvryn_sync::yaml`]). Lists are a `v1` `List` as kubectl prints them.
//! `metadata.managedFields` is left out, as kubectl does by default.

use std::io::Write;

use serde::Serialize;
use serde_json::{Value, json};

use kuvryn_sync::command::{Error, Result};

/// A machine-readable format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// The objects as pretty-printed JSON.
    Json,
    /// The objects as YAML.
    Yaml,
}

/// The output of a list command: a table, a wider table, or the objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ListFormat {
    /// The table with more columns.
    Wide,
    /// The objects as a pretty-printed JSON `List`.
    Json,
    /// The objects as a YAML `List`.
    Yaml,
}

/// `v` as a JSON value without `metadata.managedFields`, its own or its `items`'.
fn value<T: Serialize>(v: &T) -> Result<Value> {
    let mut v = serde_json::to_value(v).map_err(|e| Error::Output(e.to_string()))?;
    let strip = |v: &mut Value| {
        if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
    };
    strip(&mut v);
    if let Some(items) = v.get_mut("items").and_then(Value::as_array_mut) {
        items.iter_mut().for_each(strip);
    }
    Ok(v)
}

/// The objects as a kubectl-style `List` (each loses `metadata.managedFields` in [`render`]).
pub fn list(items: &[Value]) -> Value {
    json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items})
}

/// One object (or a [`list`]) in `format`, ending in a newline.
pub fn render<T: Serialize>(v: &T, format: Format) -> Result<String> {
    let v = value(v)?;
    match format {
        Format::Json => {
            let mut s = serde_json::to_string_pretty(&v).map_err(|e| Error::Output(e.to_string()))?;
            s.push('\n');
            Ok(s)
        }
        Format::Yaml => {
            let s = kuvryn_sync::yaml::to_string(&v).map_err(|e| Error::Output(e.to_string()))?;
            Ok(if s.ends_with('\n') { s } else { s + "\n" })
        }
    }
}

/// Write `s` to stdout and flush. A closed pipe (`ksync apps | head -1`) is not an error.
pub fn print(s: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(s.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Error::Output(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn managed_fields_are_left_out_and_lists_look_like_kubectl() {
        let obj = json!({"kind": "X", "metadata": {"name": "a", "managedFields": [{"manager": "m"}]}});
        let l = list(&[obj]);
        assert_eq!(l["kind"], "List");
        let json: Value = serde_json::from_str(&render(&l, Format::Json).unwrap()).unwrap();
        assert_eq!(json["items"][0]["metadata"], json!({"name": "a"}));
        let yaml = render(&l, Format::Yaml).unwrap();
        assert!(yaml.contains("kind: List") && !yaml.contains("managedFields"), "{yaml}");
        assert!(render(&l, Format::Json).unwrap().ends_with("}\n"));
    }
}
