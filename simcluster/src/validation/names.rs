//! Name and key formats (apimachinery `util/validation` and `api/validate/content`) with their
//! exact messages, and object metadata validation (`ValidateObjectMeta`,
//! `ValidateObjectMetaUpdate`).

use serde_json::Value;

use super::field::{self, child};
use crate::errors::Cause;

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_SUBDOMAIN_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const LABEL_KEY_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_KEY_MSG: &str =
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// `RegexError(msg, fmt, examples...)` (note the doubled spaces Go produces).
pub(crate) fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let mut out = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push_str(&format!("'{e}', "));
    }
    out.push_str(&format!("regex used for validation is '{fmt}')"));
    out
}

fn is_label_chars(s: &str, first_alpha: bool) -> bool {
    let b = s.as_bytes();
    let (Some(first), Some(last)) = (b.first(), b.last()) else { return false };
    let first_ok =
        if first_alpha { first.is_ascii_lowercase() } else { first.is_ascii_lowercase() || first.is_ascii_digit() };
    first_ok
        && (last.is_ascii_lowercase() || last.is_ascii_digit())
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

fn matches_subdomain(s: &str) -> bool {
    s.split('.').all(|p| is_label_chars(p, false))
}

/// `IsDNS1123Label`.
pub(crate) fn dns1123_label(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    if !is_label_chars(v, false) {
        if matches_subdomain(v) {
            errs.push("must not contain dots".to_string());
        } else {
            errs.push(regex_error(
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

/// `IsDNS1123Subdomain` (`bytes_unit`: the `content` package's variant, used for label key
/// prefixes, says "bytes" where this one says "characters").
fn dns1123_subdomain_impl(v: &str, bytes_unit: bool) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 253 {
        errs.push(format!("must be no more than 253 {}", if bytes_unit { "bytes" } else { "characters" }));
    }
    if !matches_subdomain(v) {
        errs.push(regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// `IsDNS1123Subdomain`.
pub(crate) fn dns1123_subdomain(v: &str) -> Vec<String> {
    dns1123_subdomain_impl(v, false)
}

/// `IsDNS1035Label`.
pub(crate) fn dns1035_label(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    if !is_label_chars(v, true) {
        errs.push(regex_error(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character",
            DNS1035_LABEL_FMT,
            &["my-name", "abc-123"],
        ));
    }
    errs
}

fn matches_label_key_name(s: &str) -> bool {
    let b = s.as_bytes();
    let (Some(first), Some(last)) = (b.first(), b.last()) else { return false };
    first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// `IsQualifiedName` / `IsLabelKey`.
pub(crate) fn qualified_name(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = v.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(dns1123_subdomain_impl(prefix, true).into_iter().map(|m| format!("prefix part {m}")));
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a valid label key {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(LABEL_KEY_MSG, LABEL_KEY_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 bytes".to_string());
    }
    if !matches_label_key_name(name) {
        errs.push(format!(
            "name part {}",
            regex_error(LABEL_KEY_MSG, LABEL_KEY_FMT, &["MyName", "my.name", "123-abc"])
        ));
    }
    errs
}

/// `IsValidLabelValue`.
pub(crate) fn label_value(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 63 {
        errs.push("must be no more than 63 bytes".to_string());
    }
    if !v.is_empty() && !matches_label_key_name(v) {
        errs.push(regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?",
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// `IsConfigMapKey` (ConfigMap and Secret data keys).
pub(crate) fn config_map_key(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 253 {
        errs.push("must be no more than 253 characters".to_string());
    }
    if v.is_empty() || !v.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_')) {
        errs.push(regex_error(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
            "[-._a-zA-Z0-9]+",
            &["key.name", "KEY_NAME", "key-name"],
        ));
    }
    match v {
        "." => errs.push("must not be '.'".to_string()),
        ".." => errs.push("must not be '..'".to_string()),
        _ if v.starts_with("..") => errs.push("must not start with '..'".to_string()),
        _ => {}
    }
    errs
}

/// `IsValidPathSegmentName` (`prefix`: the generateName variant, which only checks contents).
pub(crate) fn path_segment_name(v: &str, prefix: bool) -> Vec<String> {
    if !prefix {
        for bad in [".", ".."] {
            if v == bad {
                return vec![format!("may not be '{bad}'")];
            }
        }
    }
    ["/", "%"].iter().filter(|bad| v.contains(*bad)).map(|bad| format!("may not contain '{bad}'")).collect()
}

/// How a kind's names are validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NameRule {
    /// `NameIsDNSSubdomain`.
    Subdomain,
    /// `NameIsDNSLabel`.
    Label,
    /// `NameIsDNS1035Label`.
    Dns1035,
    /// `path.ValidatePathSegmentName`.
    PathSegment,
}

impl NameRule {
    /// The name function, `prefix` for generateName (a trailing `-` is masked as upstream
    /// `maskTrailingDash` does).
    pub(crate) fn check(self, name: &str, prefix: bool) -> Vec<String> {
        let masked;
        let name = if prefix && self != NameRule::PathSegment && name.len() > 1 && name.ends_with('-') {
            // Upstream cuts two bytes; off a char boundary the name is invalid anyway.
            masked = format!("{}a", name.get(..name.len() - 2).unwrap_or(name));
            masked.as_str()
        } else {
            name
        };
        match self {
            NameRule::Subdomain => dns1123_subdomain(name),
            NameRule::Label => dns1123_label(name),
            NameRule::Dns1035 => dns1035_label(name),
            NameRule::PathSegment => path_segment_name(name, prefix),
        }
    }
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

fn sorted_entries(v: Option<&Value>) -> Vec<(&String, &Value)> {
    let mut out: Vec<(&String, &Value)> = v.and_then(Value::as_object).map(|m| m.iter().collect()).unwrap_or_default();
    out.sort_by(|a, b| a.0.cmp(b.0));
    out
}

/// `ValidateLabels`.
pub(crate) fn validate_labels(labels: Option<&Value>, path: &str) -> Vec<Cause> {
    let mut errs = Vec::new();
    for (k, v) in sorted_entries(labels) {
        for m in qualified_name(k) {
            errs.push(field::invalid_str(path, k, &m));
        }
        let v = v.as_str().unwrap_or("");
        for m in label_value(v) {
            errs.push(field::invalid_str(path, v, &m));
        }
    }
    errs
}

/// `ValidateAnnotations` (keys are qualified names, case-insensitively; total size 256 KiB).
pub(crate) fn validate_annotations(annotations: Option<&Value>, path: &str) -> Vec<Cause> {
    let mut errs = Vec::new();
    let mut size = 0usize;
    for (k, v) in sorted_entries(annotations) {
        for m in qualified_name(&k.to_lowercase()) {
            errs.push(field::invalid_str(path, k, &m));
        }
        size += k.len() + v.as_str().map(str::len).unwrap_or(0);
    }
    if size > 256 * 1024 {
        errs.push(field::too_long(path, 256 * 1024));
    }
    errs
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect())
        .unwrap_or_default()
}

/// `ValidateFinalizers`, plus the core API's `validateKubeFinalizerName` when `core`.
fn validate_finalizers(finalizers: Option<&Value>, path: &str, core: bool) -> Vec<Cause> {
    let list = strings(finalizers);
    let mut errs = Vec::new();
    for f in &list {
        for m in qualified_name(f) {
            errs.push(field::invalid_str(path, f, &m));
        }
    }
    if list.iter().any(|f| f == "orphan") && list.iter().any(|f| f == "foregroundDeletion") {
        errs.push(field::invalid(
            path,
            &Value::from(list.clone()),
            "finalizer orphan and foregroundDeletion cannot be both set",
        ));
    }
    if core {
        for (i, f) in list.iter().enumerate() {
            let p = field::index(path, i);
            for m in qualified_name(f) {
                errs.push(field::invalid_str(&p, f, &m));
            }
            if !f.contains('/') && !matches!(f.as_str(), "kubernetes" | "orphan" | "foregroundDeletion") {
                errs.push(field::invalid_str(
                    &p,
                    f,
                    "name is neither a standard finalizer name nor is it fully qualified",
                ));
            }
        }
    }
    errs
}

/// `ValidateOwnerReferences`.
fn validate_owner_references(refs: Option<&Value>, path: &str) -> Vec<Cause> {
    let mut errs = Vec::new();
    let Some(list) = refs.and_then(Value::as_array) else { return errs };
    let mut first_controller = String::new();
    for r in list {
        let api_version = s(r, "apiVersion");
        let version = api_version.rsplit('/').next().unwrap_or("");
        if version.is_empty() {
            errs.push(field::invalid_str(&child(path, "apiVersion"), api_version, "version must not be empty"));
        }
        if s(r, "kind").is_empty() {
            errs.push(field::invalid_str(&child(path, "kind"), "", "must not be empty"));
        }
        if s(r, "name").is_empty() {
            errs.push(field::invalid_str(&child(path, "name"), "", "must not be empty"));
        }
        if s(r, "uid").is_empty() {
            errs.push(field::invalid_str(&child(path, "uid"), "", "must not be empty"));
        }
        if r.get("controller").and_then(Value::as_bool) == Some(true) {
            let cur = format!("{}/{}", s(r, "kind"), s(r, "name"));
            if first_controller.is_empty() {
                first_controller = cur;
            } else {
                errs.push(crate::errors::Cause::new(
                    "FieldValueInvalid",
                    format!(
                        "Invalid value: {}: Only one reference can have Controller set to true. Found \"true\" in references for {first_controller} and {cur}",
                        go_owner_references(list)
                    ),
                    path,
                ));
            }
        }
    }
    errs
}

/// `ValidateObjectMeta` of `obj.metadata` (`core`: the core API's variant with its extra
/// finalizer-name check).
pub(crate) fn validate_object_meta(obj: &Value, namespaced: bool, rule: NameRule, core: bool) -> Vec<Cause> {
    let empty = Value::Null;
    let meta = obj.get("metadata").unwrap_or(&empty);
    let mut errs = Vec::new();
    let generate_name = s(meta, "generateName");
    if !generate_name.is_empty() {
        for m in rule.check(generate_name, true) {
            errs.push(field::invalid_str("metadata.generateName", generate_name, &m));
        }
    }
    let name = s(meta, "name");
    if name.is_empty() {
        errs.push(field::required("metadata.name", "name or generateName is required"));
    } else {
        for m in rule.check(name, false) {
            errs.push(field::invalid_str("metadata.name", name, &m));
        }
    }
    let namespace = s(meta, "namespace");
    if namespaced {
        if namespace.is_empty() {
            errs.push(field::required("metadata.namespace", ""));
        } else {
            for m in dns1123_label(namespace) {
                errs.push(field::invalid_str("metadata.namespace", namespace, &m));
            }
        }
    } else if !namespace.is_empty() {
        errs.push(field::forbidden("metadata.namespace", "not allowed on this type"));
    }
    if let Some(g) = meta.get("generation").and_then(Value::as_i64)
        && g < 0
    {
        errs.push(field::invalid_int("metadata.generation", g, "must be greater than or equal to 0"));
    }
    errs.extend(validate_labels(meta.get("labels"), "metadata.labels"));
    errs.extend(validate_annotations(meta.get("annotations"), "metadata.annotations"));
    errs.extend(validate_owner_references(meta.get("ownerReferences"), "metadata.ownerReferences"));
    errs.extend(validate_finalizers(meta.get("finalizers"), "metadata.finalizers", core));
    errs
}

/// `field.ValidateImmutableField`: `Invalid value: <new>: field is immutable` when different
/// (absent compares as null).
pub(crate) fn immutable(new: Option<&Value>, old: Option<&Value>, path: &str) -> Option<Cause> {
    let n = new.unwrap_or(&Value::Null);
    let o = old.unwrap_or(&Value::Null);
    (n != o).then(|| field::invalid(path, n, "field is immutable"))
}

/// `ValidateObjectMetaUpdate` of `obj.metadata` against `old.metadata` (the resourceVersion and
/// generation checks are left to the store, which sets both).
pub(crate) fn validate_object_meta_update(obj: &Value, old: &Value) -> Vec<Cause> {
    let empty = Value::Null;
    let meta = obj.get("metadata").unwrap_or(&empty);
    let old_meta = old.get("metadata").unwrap_or(&empty);
    let mut errs = Vec::new();
    if old_meta.get("deletionTimestamp").is_some_and(|v| !v.is_null()) {
        let old_f = strings(old_meta.get("finalizers"));
        let mut extra: Vec<String> =
            strings(meta.get("finalizers")).into_iter().filter(|f| !old_f.contains(f)).collect();
        extra.sort();
        extra.dedup();
        if !extra.is_empty() {
            let shown = extra.iter().map(|f| crate::rbac::go_quote(f)).collect::<Vec<_>>().join(", ");
            errs.push(field::forbidden(
                "metadata.finalizers",
                &format!(
                    "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{shown}}}"
                ),
            ));
        }
    }
    for k in ["name", "namespace", "uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"] {
        let n = meta.get(k).filter(|v| !v.is_null() && *v != "");
        let o = old_meta.get(k).filter(|v| !v.is_null() && *v != "");
        errs.extend(immutable(n, o, &format!("metadata.{k}")));
    }
    errs.extend(validate_labels(meta.get("labels"), "metadata.labels"));
    errs.extend(validate_annotations(meta.get("annotations"), "metadata.annotations"));
    errs.extend(validate_owner_references(meta.get("ownerReferences"), "metadata.ownerReferences"));
    errs
}

/// Owner references as Go's `encoding/json` writes them (struct field order).
fn go_owner_references(list: &[Value]) -> String {
    let items: Vec<String> = list
        .iter()
        .map(|r| {
            let mut parts = Vec::new();
            for k in ["apiVersion", "kind", "name", "uid", "controller", "blockOwnerDeletion"] {
                if let Some(v) = r.get(k) {
                    parts.push(format!("{}:{}", serde_json::to_string(k).unwrap_or_default(), v));
                }
            }
            format!("{{{}}}", parts.join(","))
        })
        .collect();
    format!("[{}]", items.join(","))
}
