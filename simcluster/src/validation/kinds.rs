//! ConfigMap, Secret, ServiceAccount, Namespace and Lease: defaulting and validation.

use serde_json::{Map, Value, json};

use super::decode::{decode_base64, encode_base64};
use super::field::{self, key};
use super::names::{self, NameRule, config_map_key, validate_object_meta, validate_object_meta_update};
use crate::errors::Cause;

/// 1 MiB, `core.MaxSecretSize` (also the ConfigMap limit).
const MAX_SECRET_SIZE: usize = 1024 * 1024;

fn entries(v: Option<&Value>) -> Vec<(&String, &Value)> {
    let mut out: Vec<(&String, &Value)> = v.and_then(Value::as_object).map(|m| m.iter().collect()).unwrap_or_default();
    out.sort_by(|a, b| a.0.cmp(b.0));
    out
}

fn decoded_len(v: &Value) -> usize {
    v.as_str().and_then(|s| decode_base64(s).ok()).map(|b| b.len()).unwrap_or(0)
}

fn immutable_set(old: &Value) -> bool {
    old.get("immutable").and_then(Value::as_bool) == Some(true)
}

// ----------------------------------------------------------------------------- ConfigMap

pub(crate) fn validate_config_map(obj: &Value) -> Vec<Cause> {
    let mut errs = validate_object_meta(obj, true, NameRule::Subdomain, true);
    let data = obj.get("data");
    let binary = obj.get("binaryData");
    let has = |m: Option<&Value>, k: &str| m.and_then(|m| m.get(k)).is_some();
    let mut total = 0usize;
    for (k, v) in entries(data) {
        let p = key("data", k);
        for m in config_map_key(k) {
            errs.push(field::invalid_str(&p, k, &m));
        }
        if has(binary, k) {
            errs.push(field::invalid_str(&p, k, "duplicate of key present in binaryData"));
        }
        total += v.as_str().map(str::len).unwrap_or(0);
    }
    for (k, v) in entries(binary) {
        let p = key("binaryData", k);
        for m in config_map_key(k) {
            errs.push(field::invalid_str(&p, k, &m));
        }
        if has(data, k) {
            errs.push(field::invalid_str(&p, k, "duplicate of key present in data"));
        }
        total += decoded_len(v);
    }
    if total > MAX_SECRET_SIZE {
        errs.push(field::too_long("", MAX_SECRET_SIZE));
    }
    errs
}

pub(crate) fn validate_config_map_update(obj: &Value, old: &Value) -> Vec<Cause> {
    let mut errs = validate_object_meta_update(obj, old);
    if immutable_set(old) {
        if obj.get("immutable").and_then(Value::as_bool) != Some(true) {
            errs.push(field::forbidden("immutable", "field is immutable when `immutable` is set"));
        }
        for f in ["data", "binaryData"] {
            if norm_map(obj.get(f)) != norm_map(old.get(f)) {
                errs.push(field::forbidden(f, "field is immutable when `immutable` is set"));
            }
        }
    }
    errs.extend(validate_config_map(obj));
    errs
}

/// Absent, null and `{}` maps are all the same for `reflect.DeepEqual` after decoding into a
/// nil-or-empty Go map... except that Go distinguishes nil from empty; JSON `{}` decodes to an
/// empty map. The real server compares the decoded maps, so only absent/null are equal.
fn norm_map(v: Option<&Value>) -> Option<&Value> {
    v.filter(|v| !v.is_null())
}

// ----------------------------------------------------------------------------- Secret

/// Canonicalizes `[]byte` map values (`data` of Secrets, `binaryData` of ConfigMaps) as Go
/// re-encodes them; values that do not decode are left alone ([`super::check_decode`] rejects them).
pub(crate) fn canonicalize_bytes_map(obj: &mut Value, field_name: &str) {
    if let Some(m) = obj.get_mut(field_name).and_then(Value::as_object_mut) {
        for v in m.values_mut() {
            if let Some(bytes) = v.as_str().and_then(|s| decode_base64(s).ok()) {
                *v = Value::String(encode_base64(&bytes));
            }
        }
    }
}

/// `SetDefaults_Secret` and the v1→internal conversion: `type` defaults to `Opaque`,
/// `stringData` is folded into `data` (base64) and removed.
pub(crate) fn default_secret(obj: &mut Value) {
    let Some(o) = obj.as_object_mut() else { return };
    if o.get("type").and_then(Value::as_str).is_none_or(str::is_empty) {
        o.insert("type".into(), json!("Opaque"));
    }
    let string_data = o.remove("stringData");
    if let Some(Value::Object(sd)) = string_data
        && !sd.is_empty()
    {
        if !o.get("data").is_some_and(Value::is_object) {
            o.insert("data".into(), Value::Object(Map::new()));
        }
        if let Some(data) = o.get_mut("data").and_then(Value::as_object_mut) {
            for (k, v) in sd {
                let s = v.as_str().unwrap_or("").to_string();
                data.insert(k, Value::String(encode_base64(s.as_bytes())));
            }
        }
    }
    canonicalize_bytes_map(obj, "data");
}

pub(crate) fn validate_secret(obj: &Value) -> Vec<Cause> {
    let mut errs = validate_object_meta(obj, true, NameRule::Subdomain, true);
    let data = obj.get("data");
    let mut total = 0usize;
    for (k, v) in entries(data) {
        for m in config_map_key(k) {
            errs.push(field::invalid_str(&key("data", k), k, &m));
        }
        total += decoded_len(v);
    }
    if total > MAX_SECRET_SIZE {
        errs.push(field::too_long("data", MAX_SECRET_SIZE));
    }
    let has = |k: &str| data.and_then(|d| d.get(k)).is_some();
    let value_of = |k: &str| data.and_then(|d| d.get(k)).and_then(Value::as_str).and_then(|s| decode_base64(s).ok());
    match obj.get("type").and_then(Value::as_str).unwrap_or("") {
        "kubernetes.io/service-account-token" => {
            let name = obj
                .pointer("/metadata/annotations/kubernetes.io~1service-account.name")
                .and_then(Value::as_str)
                .unwrap_or("");
            if name.is_empty() {
                errs.push(field::required(&key("metadata.annotations", "kubernetes.io/service-account.name"), ""));
            }
        }
        "kubernetes.io/dockercfg" | "kubernetes.io/dockerconfigjson" => {
            let k = if obj["type"] == "kubernetes.io/dockercfg" { ".dockercfg" } else { ".dockerconfigjson" };
            match value_of(k) {
                None if !has(k) => errs.push(field::required(&key("data", k), "")),
                bytes => {
                    let ok =
                        bytes.and_then(|b| serde_json::from_slice::<Value>(&b).ok()).is_some_and(|v| v.is_object());
                    if !ok {
                        errs.push(field::invalid_str(&key("data", k), "<secret contents redacted>", "invalid JSON"));
                    }
                }
            }
        }
        "kubernetes.io/basic-auth" if !has("username") && !has("password") => {
            errs.push(field::required(&key("data", "username"), ""));
            errs.push(field::required(&key("data", "password"), ""));
        }
        "kubernetes.io/ssh-auth" if value_of("ssh-privatekey").is_none_or(|b| b.is_empty()) => {
            errs.push(field::required(&key("data", "ssh-privatekey"), ""));
        }
        "kubernetes.io/tls" => {
            for k in ["tls.crt", "tls.key"] {
                if !has(k) {
                    errs.push(field::required(&key("data", k), ""));
                }
            }
        }
        _ => {}
    }
    errs
}

pub(crate) fn validate_secret_update(obj: &Value, old: &Value) -> Vec<Cause> {
    let mut errs = validate_object_meta_update(obj, old);
    errs.extend(names::immutable(obj.get("type"), old.get("type"), "type"));
    if immutable_set(old) {
        if obj.get("immutable").and_then(Value::as_bool) != Some(true) {
            errs.push(field::forbidden("immutable", "field is immutable when `immutable` is set"));
        }
        if norm_map(obj.get("data")) != norm_map(old.get("data")) {
            errs.push(field::forbidden("data", "field is immutable when `immutable` is set"));
        }
    }
    errs.extend(validate_secret(obj));
    errs
}

// ----------------------------------------------------------------------------- ServiceAccount

pub(crate) fn validate_service_account(obj: &Value) -> Vec<Cause> {
    validate_object_meta(obj, true, NameRule::Subdomain, true)
}

pub(crate) fn validate_service_account_update(obj: &Value, old: &Value) -> Vec<Cause> {
    let mut errs = validate_object_meta_update(obj, old);
    errs.extend(validate_service_account(obj));
    errs
}

// ----------------------------------------------------------------------------- Namespace

/// `SetDefaults_Namespace`: the `kubernetes.io/metadata.name` label is forced to the name (when
/// there is one); `SetDefaults_NamespaceStatus`: phase `Active` when a status is given without one.
pub(crate) fn default_namespace(obj: &mut Value) {
    let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
    if !name.is_empty()
        && let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut)
    {
        if !meta.get("labels").is_some_and(Value::is_object) {
            meta.insert("labels".into(), json!({}));
        }
        if let Some(labels) = meta.get_mut("labels").and_then(Value::as_object_mut) {
            labels.insert("kubernetes.io/metadata.name".into(), Value::String(name));
        }
    }
    if let Some(status) = obj.get_mut("status").and_then(Value::as_object_mut)
        && status.get("phase").and_then(Value::as_str).is_none_or(str::is_empty)
    {
        status.insert("phase".into(), json!("Active"));
    }
}

/// Namespace `PrepareForCreate`: status reset to phase `Active`, the `kubernetes` finalizer added
/// to `spec.finalizers`.
pub(crate) fn prepare_namespace_create(obj: &mut Value) {
    default_namespace(obj);
    let Some(o) = obj.as_object_mut() else { return };
    o.insert("status".into(), json!({"phase": "Active"}));
    if !o.get("spec").is_some_and(Value::is_object) {
        o.insert("spec".into(), json!({}));
    }
    if let Some(spec) = o.get_mut("spec").and_then(Value::as_object_mut) {
        let mut fins: Vec<Value> = spec.get("finalizers").and_then(Value::as_array).cloned().unwrap_or_default();
        if !fins.iter().any(|f| f == "kubernetes") {
            fins.push(json!("kubernetes"));
        }
        spec.insert("finalizers".into(), Value::Array(fins));
    }
}

/// Namespace `PrepareForUpdate` (main resource): `spec.finalizers` and `status` kept from the
/// stored object, the name label forced.
pub(crate) fn prepare_namespace_update(obj: &mut Value, old: &Value) {
    default_namespace(obj);
    let Some(o) = obj.as_object_mut() else { return };
    match old.get("status") {
        Some(s) => o.insert("status".into(), s.clone()),
        None => o.remove("status"),
    };
    let old_fins = old.pointer("/spec/finalizers").cloned();
    if !o.get("spec").is_some_and(Value::is_object) {
        o.insert("spec".into(), json!({}));
    }
    if let Some(spec) = o.get_mut("spec").and_then(Value::as_object_mut) {
        match old_fins {
            Some(f) => spec.insert("finalizers".into(), f),
            None => spec.remove("finalizers"),
        };
    }
}

pub(crate) fn validate_namespace(obj: &Value) -> Vec<Cause> {
    let mut errs = validate_object_meta(obj, false, NameRule::Label, true);
    if let Some(fins) = obj.pointer("/spec/finalizers").and_then(Value::as_array) {
        for f in fins.iter().filter_map(Value::as_str) {
            let mut msgs = names::qualified_name(f);
            if msgs.is_empty() && !f.contains('/') && f != "kubernetes" && f != "orphan" && f != "foregroundDeletion" {
                msgs.push("name is neither a standard finalizer name nor is it fully qualified".into());
            }
            for m in msgs {
                errs.push(field::invalid_str("spec.finalizers", f, &m));
            }
        }
    }
    errs
}

pub(crate) fn validate_namespace_update(obj: &Value, old: &Value) -> Vec<Cause> {
    validate_object_meta_update(obj, old)
}

// ----------------------------------------------------------------------------- Lease

pub(crate) fn validate_lease(obj: &Value) -> Vec<Cause> {
    let mut errs = validate_object_meta(obj, true, NameRule::Subdomain, false);
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    if let Some(d) = spec.get("leaseDurationSeconds").and_then(Value::as_i64)
        && d <= 0
    {
        errs.push(field::invalid_int("spec.leaseDurationSeconds", d, "must be greater than 0"));
    }
    if let Some(t) = spec.get("leaseTransitions").and_then(Value::as_i64)
        && t < 0
    {
        errs.push(field::invalid_int("spec.leaseTransitions", t, "must be greater than or equal to 0"));
    }
    let strategy = spec.get("strategy").and_then(Value::as_str);
    if let Some(st) = strategy {
        if st.is_empty() {
            errs.push(field::required("spec.strategy", ""));
        } else {
            for m in names::qualified_name(st) {
                errs.push(field::invalid_str("spec.strategy", st, &m));
            }
        }
    }
    if spec.get("preferredHolder").and_then(Value::as_str).is_some_and(|p| !p.is_empty())
        && strategy.is_none_or(str::is_empty)
    {
        errs.push(field::forbidden("spec.preferredHolder", "may only be specified if `strategy` is defined"));
    }
    errs
}

pub(crate) fn validate_lease_update(obj: &Value, old: &Value) -> Vec<Cause> {
    let mut errs = validate_object_meta_update(obj, old);
    errs.extend(validate_lease(obj));
    errs
}
