//! Structural schemas over `serde_json::Value`: pruning of unknown fields, null pruning and
//! defaulting, OpenAPI value validation (kube-openapi's validators and messages), and the
//! `x-kubernetes-list-type` set/map invariants, each with update ratcheting.

use serde_json::{Map, Value};

use super::fielderr::{self as fe, Bad};
use crate::errors::Cause;

// ---- schema accessors ----

pub(crate) fn props(s: &Value) -> Option<&Map<String, Value>> {
    s.get("properties").and_then(Value::as_object)
}

/// The `additionalProperties` schema, when it is one (not a bool).
pub(crate) fn addl(s: &Value) -> Option<&Value> {
    s.get("additionalProperties").filter(|a| a.is_object())
}

pub(crate) fn items(s: &Value) -> Option<&Value> {
    s.get("items").filter(|a| a.is_object())
}

pub(crate) fn ty(s: &Value) -> &str {
    s.get("type").and_then(Value::as_str).unwrap_or("")
}

pub(crate) fn flag(s: &Value, name: &str) -> bool {
    s.get(name).and_then(Value::as_bool).unwrap_or(false)
}

pub(crate) fn embedded(s: &Value) -> bool {
    flag(s, "x-kubernetes-embedded-resource")
}

pub(crate) fn list_type(s: &Value) -> &str {
    s.get("x-kubernetes-list-type").and_then(Value::as_str).unwrap_or("atomic")
}

pub(crate) fn list_map_keys(s: &Value) -> Vec<String> {
    s.get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|k| k.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

/// The schema of property `k` of an object schema: a declared property or additionalProperties.
fn prop_schema<'a>(s: &'a Value, k: &str) -> Option<&'a Value> {
    props(s).and_then(|p| p.get(k)).or_else(|| addl(s))
}

fn sorted_keys(m: &Map<String, Value>) -> Vec<String> {
    let mut keys: Vec<String> = m.keys().cloned().collect();
    keys.sort();
    keys
}

// ---- pruning ----

/// Fields of `metadata` that ObjectMeta knows (anything else is dropped as unknown).
const OBJECT_META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// Prune unknown fields of `x` under schema `s` (None: no schema, everything is unknown),
/// recording their paths. `root` treats `apiVersion`, `kind` and `metadata` as embedded-resource
/// fields.
pub(crate) fn prune(x: &mut Value, s: Option<&Value>, path: &str, root: bool, unknown: &mut Vec<String>) {
    if let Some(s) = s
        && flag(s, "x-kubernetes-preserve-unknown-fields")
    {
        // Keep unknown fields, but still prune inside declared properties and items.
        match x {
            Value::Object(m) => {
                for (k, v) in m.iter_mut() {
                    if (root || embedded(s)) && k == "metadata" {
                        prune_meta(v, &fe::child(path, k), unknown);
                        continue;
                    }
                    if let Some(ps) = prop_schema(s, k) {
                        prune(v, Some(ps), &fe::child(path, k), false, unknown);
                    }
                }
            }
            Value::Array(a) => {
                if let Some(is) = items(s) {
                    for (i, v) in a.iter_mut().enumerate() {
                        prune(v, Some(is), &fe::index(path, i), false, unknown);
                    }
                }
            }
            _ => {}
        }
        return;
    }
    match x {
        Value::Object(m) => {
            let Some(s) = s else {
                for k in sorted_keys(m) {
                    unknown.push(fe::child(path, &k));
                }
                m.clear();
                return;
            };
            let is_resource = root || embedded(s);
            let mut drop = Vec::new();
            for (k, v) in m.iter_mut() {
                let p = fe::child(path, k);
                if is_resource && (k == "apiVersion" || k == "kind") && props(s).and_then(|ps| ps.get(k)).is_none() {
                    continue;
                }
                if is_resource && k == "metadata" {
                    prune_meta(v, &p, unknown);
                    continue;
                }
                if let Some(ps) = props(s).and_then(|ps| ps.get(k)) {
                    prune(v, Some(ps), &p, false, unknown);
                } else if let Some(a) = addl(s) {
                    prune(v, Some(a), &p, false, unknown);
                } else if s.get("additionalProperties") == Some(&Value::Bool(true)) {
                    // kept as is
                } else {
                    unknown.push(p);
                    drop.push(k.clone());
                }
            }
            for k in drop {
                m.remove(&k);
            }
        }
        Value::Array(a) => {
            let is = s.and_then(items);
            for (i, v) in a.iter_mut().enumerate() {
                prune(v, is, &fe::index(path, i), false, unknown);
            }
        }
        _ => {}
    }
}

fn prune_meta(meta: &mut Value, path: &str, unknown: &mut Vec<String>) {
    if let Value::Object(m) = meta {
        let drop: Vec<String> = m.keys().filter(|k| !OBJECT_META_FIELDS.contains(&k.as_str())).cloned().collect();
        for k in drop {
            unknown.push(fe::child(path, &k));
            m.remove(&k);
        }
    }
}

// ---- nulls and defaults ----

fn nullable(s: &Value) -> bool {
    flag(s, "nullable")
}

/// `PruneNonNullableNullsWithoutDefaults`: `null` values of non-nullable fields without a
/// default are dropped.
pub(crate) fn prune_nulls(x: &mut Value, s: &Value) {
    match x {
        Value::Object(m) => {
            let drop: Vec<String> = m
                .iter()
                .filter(|(k, v)| {
                    v.is_null() && prop_schema(s, k).is_some_and(|ps| !nullable(ps) && ps.get("default").is_none())
                })
                .map(|(k, _)| k.clone())
                .collect();
            for k in drop {
                m.remove(&k);
            }
            for (k, v) in m.iter_mut() {
                if let Some(ps) = prop_schema(s, k) {
                    prune_nulls(v, ps);
                }
            }
        }
        Value::Array(a) => {
            if let Some(is) = items(s) {
                a.iter_mut().for_each(|v| prune_nulls(v, is));
            }
        }
        _ => {}
    }
}

/// Structural defaulting: a missing property (or a `null` one that is not nullable) with a
/// `default` gets it; defaulting then continues inside.
pub(crate) fn apply_defaults(x: &mut Value, s: &Value) {
    match x {
        Value::Object(m) => {
            if let Some(ps) = props(s) {
                for (k, p) in ps {
                    if let Some(d) = p.get("default") {
                        let missing = match m.get(k) {
                            None => true,
                            Some(Value::Null) => !nullable(p),
                            Some(_) => false,
                        };
                        if missing {
                            m.insert(k.clone(), d.clone());
                        }
                    }
                }
            }
            for (k, v) in m.iter_mut() {
                if let Some(ps) = prop_schema(s, k) {
                    apply_defaults(v, ps);
                }
            }
        }
        Value::Array(a) => {
            if let Some(is) = items(s) {
                a.iter_mut().for_each(|v| apply_defaults(v, is));
            }
        }
        _ => {}
    }
}

// ---- correlation (ratcheting and transition rules) ----

/// The old value correlated with item `i` of a list: only list-type map items correlate (by
/// their keys).
pub(crate) fn correlate_item<'a>(s: &Value, item: &Value, old_list: Option<&'a Value>) -> Option<&'a Value> {
    if list_type(s) != "map" {
        return None;
    }
    let keys = list_map_keys(s);
    let old = old_list?.as_array()?;
    let key_of = |v: &Value| -> Vec<Value> { keys.iter().map(|k| v.get(k).cloned().unwrap_or(Value::Null)).collect() };
    let want = key_of(item);
    old.iter().find(|o| o.is_object() && key_of(o) == want)
}

/// The old value correlated with field `k` of an object (objects correlate unless atomic).
pub(crate) fn correlate_field<'a>(s: &Value, k: &str, old_obj: Option<&'a Value>) -> Option<&'a Value> {
    if s.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic") {
        return None;
    }
    old_obj?.get(k)
}

// ---- value validation (kube-openapi) ----

fn data_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) => {
            if n.is_f64() {
                "number"
            } else {
                "integer"
            }
        }
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn in_body(path: &str) -> String {
    format!("{path} in body")
}

fn num(v: &Value) -> Option<f64> {
    v.as_f64()
}

/// A cause from a kube-openapi validation error whose code is not specially mapped:
/// `field.Invalid(path, value, err.Error())`.
fn openapi_invalid(path: &str, value: Bad, msg: String) -> Cause {
    fe::invalid(path, value, &msg)
}

/// Validate `data` against schema `s` at `path` (kube-openapi order: type, allOf/anyOf/oneOf/not,
/// string, format, number, items, enum, object). `old` is the correlated old value: an
/// unchanged value is not validated again (ratcheting).
pub(crate) fn validate_value(s: &Value, data: &Value, old: Option<&Value>, path: &str, errs: &mut Vec<Cause>) {
    if old.is_some_and(|o| o == data) {
        return;
    }
    // type
    let t = ty(s);
    if data.is_null() {
        if !t.is_empty() && !nullable(s) {
            errs.push(fe::type_invalid(
                path,
                Bad::str("null"),
                &format!("{} must be of type {t}: \"null\"", in_body(path)),
            ));
        }
        validate_enum(s, data, path, errs);
        return;
    }
    let dt = data_type(data);
    if !t.is_empty() {
        let is_float_int = dt == "number" && t == "integer" && data.as_f64().is_some_and(|f| f.fract() == 0.0);
        let is_int_float = dt == "integer" && t == "number";
        if t != dt && !is_float_int && !is_int_float {
            errs.push(fe::type_invalid(
                path,
                Bad::str(dt),
                &format!("{} must be of type {t}: {}", in_body(path), fe::go_quote(dt)),
            ));
        }
    } else if flag(s, "x-kubernetes-int-or-string") && dt != "integer" && dt != "string" {
        errs.push(fe::type_invalid(
            path,
            Bad::str(dt),
            &format!("{} must be of type integer,string: {}", in_body(path), fe::go_quote(dt)),
        ));
    }
    // allOf / anyOf / oneOf / not
    if let Some(all) = s.get("allOf").and_then(Value::as_array) {
        for sub in all {
            validate_value(sub, data, None, path, errs);
        }
    }
    let passes = |sub: &Value| {
        let mut e = Vec::new();
        validate_value(sub, data, None, path, &mut e);
        e.is_empty()
    };
    let name = if path.is_empty() { "." } else { path };
    if let Some(any) = s.get("anyOf").and_then(Value::as_array)
        && !any.is_empty()
        && !any.iter().any(passes)
    {
        errs.push(openapi_invalid(path, Bad::str(""), format!("\"{name}\" must validate at least one schema (anyOf)")));
    }
    if let Some(one) = s.get("oneOf").and_then(Value::as_array)
        && !one.is_empty()
        && one.iter().filter(|x| passes(x)).count() != 1
    {
        errs.push(openapi_invalid(
            path,
            Bad::str(""),
            format!("\"{name}\" must validate one and only one schema (oneOf)"),
        ));
    }
    if let Some(not) = s.get("not").filter(|n| n.is_object())
        && passes(not)
    {
        errs.push(openapi_invalid(path, Bad::str(""), format!("\"{name}\" must not validate the schema (not)")));
    }
    match data {
        Value::String(st) => {
            validate_string(s, st, path, errs);
            validate_format(s, st, path, errs);
        }
        Value::Number(_) => validate_number(s, data, path, errs),
        Value::Array(a) => {
            if let Some(is) = items(s) {
                for (i, v) in a.iter().enumerate() {
                    let o = correlate_item(s, v, old);
                    validate_value(is, v, o, &fe::index(path, i), errs);
                }
            }
            let size = a.len() as i64;
            if let Some(min) = s.get("minItems").and_then(Value::as_i64)
                && size < min
            {
                errs.push(openapi_invalid(
                    path,
                    Bad::Int(size),
                    format!("{} should have at least {min} items", in_body(path)),
                ));
            }
            if let Some(max) = s.get("maxItems").and_then(Value::as_i64)
                && size > max
            {
                errs.push(fe::too_many(path, size, max));
            }
        }
        _ => {}
    }
    validate_enum(s, data, path, errs);
    if let Value::Object(m) = data {
        validate_object(s, m, old, path, errs);
    }
}

fn validate_string(s: &Value, st: &str, path: &str, errs: &mut Vec<Cause>) {
    let len = st.chars().count() as i64;
    if let Some(max) = s.get("maxLength").and_then(Value::as_i64)
        && len > max
    {
        errs.push(fe::too_long(path, max));
        return;
    }
    if let Some(min) = s.get("minLength").and_then(Value::as_i64)
        && len < min
    {
        errs.push(openapi_invalid(
            path,
            Bad::str(st),
            format!("{} should be at least {min} chars long", in_body(path)),
        ));
        return;
    }
    if let Some(p) = s.get("pattern").and_then(Value::as_str) {
        match super::formats::regex(p) {
            Some(re) if re.is_match(st) => {}
            _ => errs.push(openapi_invalid(path, Bad::str(st), format!("{} should match '{p}'", in_body(path)))),
        }
    }
}

fn validate_format(s: &Value, st: &str, path: &str, errs: &mut Vec<Cause>) {
    let Some(f) = s.get("format").and_then(Value::as_str) else { return };
    if !matches!(ty(s), "string" | "") {
        return;
    }
    if let Some(false) = super::formats::check(f, st) {
        errs.push(fe::type_invalid(
            path,
            Bad::str(st),
            &format!("{} must be of type {f}: {}", in_body(path), fe::go_quote(st)),
        ));
    }
}

fn validate_number(s: &Value, data: &Value, path: &str, errs: &mut Vec<Cause>) {
    let Some(v) = num(data) else { return };
    let bad = || Bad::Json(data.clone());
    if let Some(m) = s.get("multipleOf").and_then(Value::as_f64)
        && m > 0.0
    {
        let q = v / m;
        if (q - q.round()).abs() > 1e-9 {
            errs.push(openapi_invalid(
                path,
                bad(),
                format!("{} should be a multiple of {}", in_body(path), fe::go_float(m)),
            ));
        }
    }
    if let Some(min) = s.get("minimum").and_then(Value::as_f64) {
        let excl = flag(s, "exclusiveMinimum");
        if (excl && v <= min) || (!excl && v < min) {
            let rel = if excl { "greater than" } else { "greater than or equal to" };
            errs.push(openapi_invalid(path, bad(), format!("{} should be {rel} {}", in_body(path), fe::go_float(min))));
        }
    }
    if let Some(max) = s.get("maximum").and_then(Value::as_f64) {
        let excl = flag(s, "exclusiveMaximum");
        if (excl && v >= max) || (!excl && v > max) {
            let rel = if excl { "less than" } else { "less than or equal to" };
            errs.push(openapi_invalid(path, bad(), format!("{} should be {rel} {}", in_body(path), fe::go_float(max))));
        }
    }
}

fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

fn validate_enum(s: &Value, data: &Value, path: &str, errs: &mut Vec<Cause>) {
    let Some(en) = s.get("enum").and_then(Value::as_array) else { return };
    if en.is_empty() || en.iter().any(|e| json_eq(e, data)) {
        return;
    }
    let values: Vec<String> =
        en.iter().map(|e| if let Value::String(s) = e { s.clone() } else { fe::go_json(e) }).collect();
    errs.push(fe::not_supported(path, Bad::Json(data.clone()), &values));
}

fn validate_object(s: &Value, m: &Map<String, Value>, old: Option<&Value>, path: &str, errs: &mut Vec<Cause>) {
    let n = m.len() as i64;
    if let Some(min) = s.get("minProperties").and_then(Value::as_i64)
        && n < min
    {
        errs.push(openapi_invalid(
            path,
            Bad::Int(n),
            format!("{} should have at least {min} properties", in_body(path)),
        ));
        return;
    }
    if let Some(max) = s.get("maxProperties").and_then(Value::as_i64)
        && n > max
    {
        errs.push(fe::too_many(path, n, max));
        return;
    }
    let declared = props(s);
    let dot = |k: &str| if path.is_empty() { k.to_string() } else { format!("{path}.{k}") };
    if let Some(a) = addl(s) {
        for k in sorted_keys(m) {
            if declared.is_some_and(|d| d.contains_key(&k)) {
                continue;
            }
            validate_value(a, &m[&k], correlate_field(s, &k, old), &dot(&k), errs);
        }
    } else if s.get("additionalProperties") == Some(&Value::Bool(false)) {
        for k in sorted_keys(m) {
            if !declared.is_some_and(|d| d.contains_key(&k)) {
                let name = if path.is_empty() { String::new() } else { path.to_string() };
                errs.push(openapi_invalid(path, Bad::str(""), format!("{name}.{k} in body is a forbidden property")));
            }
        }
    }
    if let Some(d) = declared {
        for k in sorted_keys(d) {
            if let Some(v) = m.get(&k) {
                validate_value(&d[&k], v, correlate_field(s, &k, old), &dot(&k), errs);
            }
        }
    }
    if let Some(req) = s.get("required").and_then(Value::as_array) {
        for r in req.iter().filter_map(Value::as_str) {
            if !m.contains_key(r) {
                errs.push(fe::required(&dot(r), ""));
            }
        }
    }
}

// ---- list-type set/map invariants ----

/// `ValidateListSetsAndMaps` over the whole object.
pub(crate) fn validate_list_types(s: &Value, data: &Value, path: &str, errs: &mut Vec<Cause>) {
    match data {
        Value::Object(m) => {
            if let Some(a) = addl(s) {
                for k in sorted_keys(m) {
                    if props(s).is_some_and(|p| p.contains_key(&k)) {
                        continue;
                    }
                    validate_list_types(a, &m[&k], &fe::key(path, &k), errs);
                }
            }
            if let Some(p) = props(s) {
                for k in sorted_keys(m) {
                    if let Some(ps) = p.get(&k) {
                        validate_list_types(ps, &m[&k], &fe::child(path, &k), errs);
                    }
                }
            }
        }
        Value::Array(a) => {
            match list_type(s) {
                "set" => validate_list_set(a, path, errs),
                "map" => validate_list_map(s, a, path, errs),
                _ => {}
            }
            if let Some(is) = items(s) {
                for (i, v) in a.iter().enumerate() {
                    validate_list_types(is, v, &fe::index(path, i), errs);
                }
            }
        }
        _ => {}
    }
}

fn validate_list_set(a: &[Value], path: &str, errs: &mut Vec<Cause>) {
    let mut seen: Vec<(String, usize)> = Vec::new();
    for (i, x) in a.iter().enumerate() {
        let k = fe::go_json(x);
        match seen.iter_mut().find(|(s, _)| *s == k) {
            Some((_, times)) => {
                *times += 1;
                if *times == 2 {
                    errs.push(fe::duplicate(&fe::index(path, i), Bad::Json(x.clone())));
                }
            }
            None => seen.push((k, 1)),
        }
    }
}

fn validate_list_map(s: &Value, a: &[Value], path: &str, errs: &mut Vec<Cause>) {
    let keys = list_map_keys(s);
    let item_props = items(s).and_then(props);
    let mut bad_items = false;
    for (i, x) in a.iter().enumerate() {
        if !x.is_object() && !x.is_null() {
            errs.push(fe::invalid(
                &fe::index(path, i),
                Bad::Json(x.clone()),
                "must be an object for an array of list-type map",
            ));
            bad_items = true;
        }
    }
    if bad_items {
        return;
    }
    let mut seen: Vec<String> = Vec::new();
    for (i, x) in a.iter().enumerate() {
        let Some(m) = x.as_object() else { continue };
        let mut key_map = Map::new();
        for k in &keys {
            let v = match m.get(k) {
                Some(v) => v.clone(),
                None => match item_props.and_then(|p| p.get(k)).and_then(|p| p.get("default")) {
                    Some(d) => d.clone(),
                    None => {
                        errs.push(fe::required(&fe::child(&fe::index(path, i), k), ""));
                        continue;
                    }
                },
            };
            key_map.insert(k.clone(), v);
        }
        let key_map = Value::Object(key_map);
        let id = fe::go_json(&key_map);
        if seen.contains(&id) {
            errs.push(fe::duplicate(&fe::index(path, i), Bad::Json(key_map)));
        } else {
            seen.push(id);
        }
    }
}

/// `hasBlockingErr`: schema errors that stop CEL rules from running.
pub(crate) fn has_blocking(errs: &[Cause]) -> bool {
    errs.iter().any(|c| {
        matches!(
            c.reason.as_str(),
            "FieldValueNotSupported"
                | "FieldValueRequired"
                | "FieldValueTooLong"
                | "FieldValueTooMany"
                | "FieldValueTypeInvalid"
        )
    })
}

/// The cause appended when blocking errors stopped CEL rules.
pub(crate) fn rules_not_checked() -> Cause {
    fe::invalid(
        "",
        Bad::Json(Value::Null),
        "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
    )
}
