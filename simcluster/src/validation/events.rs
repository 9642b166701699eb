//! Events: the two APIs (`v1` Event and `events.k8s.io/v1` Event) over one stored object, as
//! on a real server (one internal type). Objects are stored in the core `v1` form; each API
//! shows them through [`event_for_version`], which fills the fields a Go server always
//! serializes (`eventTime: null`, `source: {}`, `deprecatedSource: {}`, ...).
//!
//! Validation follows upstream `ValidateEventCreate` / `ValidateEventUpdate`: the legacy rules
//! for every request, the strict ones for `events.k8s.io` requests (field names as upstream
//! writes them, e.g. `eventTime`, `type`, `note`, `series.count`).

use serde_json::{Map, Value, json};

use super::field::{self, child};
use super::names::{self, NameRule, validate_object_meta, validate_object_meta_update};
use crate::errors::Cause;

/// The events.k8s.io API version.
pub const EVENTS_V1: &str = "events.k8s.io/v1";

fn is_set(v: Option<&Value>) -> bool {
    v.is_some_and(|v| !v.is_null() && *v != "")
}

fn string(v: Option<&Value>) -> String {
    v.and_then(Value::as_str).unwrap_or("").to_string()
}

/// Converts an `events.k8s.io/v1` Event body to the core `v1` form (the storage form).
pub fn events_v1_to_core(ev: &Value) -> Value {
    let mut out = Map::new();
    out.insert("kind".into(), json!("Event"));
    out.insert("apiVersion".into(), json!("v1"));
    if let Some(m) = ev.get("metadata") {
        out.insert("metadata".into(), m.clone());
    }
    let copy = |out: &mut Map<String, Value>, from: &str, to: &str| {
        if let Some(v) = ev.get(from) {
            out.insert(to.into(), v.clone());
        }
    };
    copy(&mut out, "regarding", "involvedObject");
    copy(&mut out, "reason", "reason");
    copy(&mut out, "note", "message");
    copy(&mut out, "deprecatedSource", "source");
    copy(&mut out, "deprecatedFirstTimestamp", "firstTimestamp");
    copy(&mut out, "deprecatedLastTimestamp", "lastTimestamp");
    copy(&mut out, "deprecatedCount", "count");
    copy(&mut out, "type", "type");
    copy(&mut out, "eventTime", "eventTime");
    copy(&mut out, "series", "series");
    copy(&mut out, "action", "action");
    copy(&mut out, "related", "related");
    copy(&mut out, "reportingController", "reportingComponent");
    copy(&mut out, "reportingInstance", "reportingInstance");
    core_shape(Value::Object(out))
}

/// The core `v1` JSON form of a stored Event, as a Go server serializes it: `involvedObject`,
/// `source` (`{}`), `firstTimestamp`/`lastTimestamp`/`eventTime` (`null` when unset),
/// `reportingComponent` and `reportingInstance` (`""`) always present; `count`, `reason`,
/// `message`, `type`, `action` omitted when empty.
fn core_shape(mut obj: Value) -> Value {
    let Some(o) = obj.as_object_mut() else { return obj };
    for k in ["involvedObject", "source"] {
        if !o.get(k).is_some_and(Value::is_object) {
            o.insert(k.into(), json!({}));
        }
    }
    for k in ["firstTimestamp", "lastTimestamp", "eventTime"] {
        if !is_set(o.get(k)) {
            o.insert(k.into(), Value::Null);
        }
    }
    for k in ["reportingComponent", "reportingInstance"] {
        if !o.get(k).is_some_and(Value::is_string) {
            o.insert(k.into(), json!(""));
        }
    }
    for k in ["reason", "message", "type", "action"] {
        if o.get(k).is_some_and(|v| v.is_null() || *v == "") {
            o.remove(k);
        }
    }
    if o.get("count").is_some_and(|v| v.is_null() || *v == 0) {
        o.remove("count");
    }
    if o.get("series").is_some_and(Value::is_null) {
        o.remove("series");
    }
    if o.get("related").is_some_and(Value::is_null) {
        o.remove("related");
    }
    obj
}

/// Converts a core `v1` Event (storage form) to the `events.k8s.io/v1` form, with
/// `eventTime`, `deprecatedFirstTimestamp`/`deprecatedLastTimestamp` (`null` when unset),
/// `regarding` and `deprecatedSource` (`{}`) always present and `deprecatedCount` only when set.
pub fn core_to_events_v1(core: &Value) -> Value {
    let mut out = Map::new();
    out.insert("kind".into(), json!("Event"));
    out.insert("apiVersion".into(), json!(EVENTS_V1));
    if let Some(m) = core.get("metadata") {
        out.insert("metadata".into(), m.clone());
    }
    let get = |k: &str| core.get(k).filter(|v| !v.is_null());
    out.insert("eventTime".into(), get("eventTime").filter(|v| *v != "").cloned().unwrap_or(Value::Null));
    for (from, to) in [
        ("series", "series"),
        ("reportingComponent", "reportingController"),
        ("reportingInstance", "reportingInstance"),
        ("action", "action"),
        ("reason", "reason"),
    ] {
        if let Some(v) = get(from).filter(|v| *v != "") {
            out.insert(to.into(), v.clone());
        }
    }
    out.insert("regarding".into(), get("involvedObject").cloned().unwrap_or_else(|| json!({})));
    for (from, to) in [("related", "related"), ("message", "note"), ("type", "type")] {
        if let Some(v) = get(from).filter(|v| *v != "") {
            out.insert(to.into(), v.clone());
        }
    }
    out.insert("deprecatedSource".into(), get("source").cloned().unwrap_or_else(|| json!({})));
    out.insert(
        "deprecatedFirstTimestamp".into(),
        get("firstTimestamp").filter(|v| *v != "").cloned().unwrap_or(Value::Null),
    );
    out.insert(
        "deprecatedLastTimestamp".into(),
        get("lastTimestamp").filter(|v| *v != "").cloned().unwrap_or(Value::Null),
    );
    if let Some(c) = get("count").filter(|v| **v != 0) {
        out.insert("deprecatedCount".into(), c.clone());
    }
    Value::Object(out)
}

/// A stored Event (either form) as `api_version` (`v1` or `events.k8s.io/v1`) shows it.
pub fn event_for_version(obj: &Value, api_version: &str) -> Value {
    let core = if obj.get("apiVersion").and_then(Value::as_str) == Some(EVENTS_V1) {
        events_v1_to_core(obj)
    } else {
        core_shape(obj.clone())
    };
    if api_version == EVENTS_V1 { core_to_events_v1(&core) } else { core }
}

/// The core form of a request body of either API (what to validate and store).
fn as_core(api_version: &str, obj: &Value) -> Value {
    if api_version == EVENTS_V1 { events_v1_to_core(obj) } else { core_shape(obj.clone()) }
}

fn qualified_errs(v: &str, path: &str) -> Vec<Cause> {
    names::qualified_name(v).into_iter().map(|m| field::invalid_str(path, v, &m)).collect()
}

/// `legacyValidateEvent` on the core form.
fn legacy(ev: &Value, api_version: &str) -> Vec<Cause> {
    let mut errs = Vec::new();
    let ns = ev.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("");
    let io_ns = ev.pointer("/involvedObject/namespace").and_then(Value::as_str).unwrap_or("");
    let rc_field = if api_version == "v1" { "reportingComponent" } else { "reportingController" };
    if !is_set(ev.get("eventTime")) {
        let mismatch = if io_ns.is_empty() { !ns.is_empty() && ns != "default" } else { ns != io_ns };
        if mismatch {
            errs.push(field::invalid_str("involvedObject.namespace", io_ns, "does not match event.namespace"));
        }
    } else {
        if io_ns.is_empty() && ns != "default" && ns != "kube-system" {
            errs.push(field::invalid_str("involvedObject.namespace", io_ns, "does not match event.namespace"));
        }
        let rc = string(ev.get("reportingComponent"));
        if rc.is_empty() {
            errs.push(field::required(rc_field, ""));
        }
        errs.extend(qualified_errs(&rc, rc_field));
        let ri = string(ev.get("reportingInstance"));
        if ri.is_empty() {
            errs.push(field::required("reportingInstance", ""));
        }
        if ri.len() > 128 {
            errs.push(field::invalid_str("reportingInstance", "", "can have at most 128 characters"));
        }
        let action = string(ev.get("action"));
        if action.is_empty() {
            errs.push(field::required("action", ""));
        }
        if action.len() > 128 {
            errs.push(field::invalid_str("action", "", "can have at most 128 characters"));
        }
        let reason = string(ev.get("reason"));
        if reason.is_empty() {
            errs.push(field::required("reason", ""));
        }
        if reason.len() > 128 {
            errs.push(field::invalid_str("reason", "", "can have at most 128 characters"));
        }
        if string(ev.get("message")).len() > 1024 {
            errs.push(field::invalid_str("message", "", "can have at most 1024 characters"));
        }
    }
    for m in names::dns1123_subdomain(ns) {
        errs.push(field::invalid_str("namespace", ns, &m));
    }
    errs
}

fn validate_series(ev: &Value) -> Vec<Cause> {
    let mut errs = Vec::new();
    if let Some(series) = ev.get("series").filter(|s| s.is_object()) {
        if series.get("count").and_then(Value::as_i64).unwrap_or(0) < 2 {
            errs.push(field::invalid_str("series.count", "", "should be at least 2"));
        }
        if !is_set(series.get("lastObservedTime")) {
            errs.push(field::required("series.lastObservedTime", ""));
        }
    }
    errs
}

pub(crate) fn validate_event(api_version: &str, obj: &Value) -> Vec<Cause> {
    let ev = as_core(api_version, obj);
    let mut errs = legacy(&ev, api_version);
    if api_version != EVENTS_V1 {
        return errs;
    }
    errs.extend(validate_object_meta(&ev, true, NameRule::Subdomain, true));
    errs.extend(validate_series(&ev));
    if !is_set(ev.get("eventTime")) {
        errs.push(field::required("eventTime", ""));
    }
    let ty = string(ev.get("type"));
    if ty != "Normal" && ty != "Warning" {
        errs.push(field::invalid_str("type", "", &format!("has invalid value: {ty}")));
    }
    for k in ["firstTimestamp", "lastTimestamp"] {
        if is_set(ev.get(k)) {
            errs.push(field::invalid_str(k, "", "needs to be unset"));
        }
    }
    if ev.get("count").and_then(Value::as_i64).unwrap_or(0) != 0 {
        errs.push(field::invalid_str("count", "", "needs to be unset"));
    }
    if is_set(ev.pointer("/source/component")) || is_set(ev.pointer("/source/host")) {
        errs.push(field::invalid_str("source", "", "needs to be unset"));
    }
    errs
}

pub(crate) fn validate_event_update(api_version: &str, obj: &Value, old: &Value) -> Vec<Cause> {
    let ev = as_core(api_version, obj);
    let old_ev = as_core(old.get("apiVersion").and_then(Value::as_str).unwrap_or("v1"), old);
    let mut errs = legacy(&ev, api_version);
    if api_version != EVENTS_V1 {
        return errs;
    }
    errs.extend(validate_object_meta_update(&ev, &old_ev));
    if ev.get("series") != old_ev.get("series") {
        errs.extend(validate_series(&ev));
    }
    for (k, path) in [
        ("involvedObject", "involvedObject"),
        ("reason", "reason"),
        ("message", "note"),
        ("source", "source"),
        ("firstTimestamp", "firstTimestamp"),
        ("lastTimestamp", "lastTimestamp"),
        ("count", "count"),
        ("reason", "reason"),
        ("type", "type"),
        ("eventTime", "eventTime"),
        ("action", "action"),
        ("related", "related"),
        ("reportingComponent", "reportingController"),
        ("reportingInstance", "reportingInstance"),
    ] {
        errs.extend(names::immutable(ev.get(k), old_ev.get(k), &child("", path)));
    }
    errs
}
