//! The verbs: get, list, watch, create, update, patch, delete, deletecollection, and the
//! status subresource, with the real server's preconditions, resourceVersion semantics,
//! generation rules and error bodies.

use std::sync::Arc;

use axum::body::Body;
use http::{Method, Response};
use serde_json::{Value, json};

use crate::admission;
use crate::errors::{ApiError, details};
use crate::registry::ResourceType;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::server::{Req, Target};
use crate::state::State;
use crate::store::Txn;

/// What a handler produced.
pub enum Output {
    /// A JSON object (shaped by the Accept header before encoding).
    Value {
        /// HTTP code.
        code: u16,
        /// Body.
        body: Value,
        /// Extra headers (`Warning`).
        headers: Vec<(String, String)>,
    },
    /// A finished response (watch streams).
    Response(Response<Body>),
}

fn ok(code: u16, body: Value) -> Output {
    Output::Value { code, body, headers: vec![] }
}

/// The current time, RFC 3339 with seconds.
pub fn now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A new uid.
pub fn new_uid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The 5-character suffix of a generateName.
pub fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let u = uuid::Uuid::new_v4();
    u.as_bytes()[..5].iter().map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char).collect()
}

/// The field manager of a request: `fieldManager`, else the User-Agent's program name.
pub fn manager_of(req: &Req) -> String {
    if let Some(m) = req.q("fieldManager") {
        return m.to_string();
    }
    req.header("User-Agent")
        .map(|ua| ua.split('/').next().unwrap_or(ua).to_string())
        .unwrap_or_else(|| "unknown".into())
}

fn is_dry_run(req: &Req) -> bool {
    req.q("dryRun").is_some_and(|v| v == "All")
}

/// Route a resource request to its verb.
pub async fn dispatch(state: &Arc<State>, req: &Req, t: &Target) -> Result<Output, ApiError> {
    let watch = t.legacy_watch || req.q("watch").is_some_and(|w| w == "true" || w == "1");
    let verb = match (&req.method, &t.name, &t.sub) {
        (&Method::GET, None, None) if watch => "watch",
        (&Method::GET, Some(_), None) if t.legacy_watch => "watch",
        (&Method::GET, None, None) => "list",
        (&Method::POST, None, None) => "create",
        (&Method::DELETE, None, None) => "deletecollection",
        (&Method::GET, Some(_), _) => "get",
        (&Method::PUT, Some(_), _) => "update",
        (&Method::PATCH, Some(_), _) => "patch",
        (&Method::DELETE, Some(_), None) => "delete",
        (&Method::POST, Some(_), Some(_)) => "create",
        (&Method::POST, Some(_), None) => {
            return Err(ApiError::method_not_allowed(
                "the server does not allow this method on the requested resource",
            ));
        }
        _ => {
            return Err(ApiError::method_not_allowed(
                "the server does not allow this method on the requested resource",
            ));
        }
    };
    let allowed = match &t.sub {
        Some(sub) => t.rt.subresource(sub).is_some_and(|s| s.verbs.iter().any(|v| v == verb)),
        None => t.rt.has_verb(verb),
    };
    if !allowed {
        return Err(ApiError::method_not_allowed("the server does not allow this method on the requested resource"));
    }
    let resource = match &t.sub {
        Some(s) => format!("{}/{s}", t.rt.resource),
        None => t.rt.resource.clone(),
    };
    let attrs = crate::faults::RequestAttributes {
        verb,
        group: &t.rt.group,
        resource: &resource,
        namespace: &t.namespace,
        name: t.name.as_deref().unwrap_or_default(),
        user: &req.user.name,
    };
    match state.faults.check(&attrs) {
        Some(crate::faults::FaultAction::Latency { millis }) => {
            tokio::time::sleep(crate::faults::latency(millis)).await
        }
        Some(crate::faults::FaultAction::Status { code }) => {
            let e = injected(code);
            let headers = if code == 429 { vec![("Retry-After".to_string(), "1".to_string())] } else { vec![] };
            return Ok(Output::Value { code, body: e.body().unwrap_or_default(), headers });
        }
        Some(crate::faults::FaultAction::Reset) => return Ok(Output::Response(reset())),
        None => {}
    }
    let client = req.impersonated_by.as_deref().unwrap_or(&req.user.name);
    state.faults.count_request(client, verb, &resource, is_dry_run(req));
    let out = match admission::authorize(state, req, t, verb) {
        Ok(()) => serve_verb(state, req, t, verb).await,
        Err(e) => Err(e),
    };
    if matches!(verb, "create" | "update" | "patch" | "delete" | "deletecollection") {
        // A create names its object in the body: the audit takes the name from what was stored,
        // as kube-apiserver fills `objectRef.name` from the request object.
        let (code, rv, created) = match &out {
            Ok(Output::Value { code, body, .. }) => (
                *code,
                body["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_string(),
                body["metadata"]["name"].as_str().filter(|_| verb == "create" && t.sub.is_none()).map(String::from),
            ),
            Ok(Output::Response(r)) => (r.status().as_u16(), String::new(), None),
            Err(e) => (e.code(), String::new(), None),
        };
        state.faults.audit(crate::faults::AuditEvent {
            time: state.clock.micro(),
            user: req.user.name.clone(),
            groups: req.user.groups.clone(),
            impersonated_by: req.impersonated_by.clone(),
            verb: verb.to_string(),
            group: t.rt.group.clone(),
            resource,
            namespace: t.namespace.clone(),
            name: t.name.clone().or(created).unwrap_or_default(),
            field_manager: req.q("fieldManager").unwrap_or_default().to_string(),
            code,
            resource_version: rv,
            dry_run: is_dry_run(req),
        });
    }
    out
}

/// The error of an injected status fault.
fn injected(code: u16) -> ApiError {
    match code {
        429 => ApiError::status(
            429,
            "TooManyRequests",
            "the server has received too many requests and has asked us to try again later",
            Some(json!({"retryAfterSeconds": 1})),
        ),
        503 => {
            ApiError::status(503, "ServiceUnavailable", "the server is currently unable to handle the request", None)
        }
        504 => {
            ApiError::status(504, "Timeout", "the server was unable to return a response in the time allotted", None)
        }
        c => ApiError::status(
            c,
            "InternalError",
            "an error on the server (injected fault) has prevented the request from succeeding",
            None,
        ),
    }
}

/// A response whose body fails at once, so the server closes the connection unanswered.
fn reset() -> Response<Body> {
    let stream = futures_util::stream::once(async {
        Err::<bytes::Bytes, std::io::Error>(std::io::Error::other("injected connection reset"))
    });
    Response::builder().status(200).body(Body::from_stream(stream)).expect("response")
}

async fn serve_verb(state: &Arc<State>, req: &Req, t: &Target, verb: &str) -> Result<Output, ApiError> {
    if t.sub.as_deref() == Some("scale") && !t.rt.custom {
        return scale(state, req, t, verb);
    }
    match verb {
        "watch" => crate::watch::serve(state, req, t).map(Output::Response),
        "list" => list(state, req, t),
        "create" if t.sub.is_some() => admission::subresource_create(state, req, t),
        "create" => create(state, req, t),
        "deletecollection" => delete_collection(state, req, t),
        "get" => get(state, t),
        "update" => guaranteed_update(|| update(state, req, t)),
        "patch" => guaranteed_update(|| patch(state, req, t)),
        "delete" => delete(state, req, t),
        _ => Err(ApiError::method_not_allowed("the server does not allow this method on the requested resource")),
    }
}

/// An object as a GET returns it (with kind and apiVersion).
pub fn with_type(rt: &ResourceType, mut obj: Value) -> Value {
    if let Some(m) = obj.as_object_mut() {
        let mut out = serde_json::Map::new();
        out.insert("kind".into(), json!(rt.kind));
        out.insert("apiVersion".into(), json!(rt.api_version()));
        for (k, v) in std::mem::take(m) {
            if k != "kind" && k != "apiVersion" {
                out.insert(k, v);
            }
        }
        return Value::Object(out);
    }
    obj
}

fn get(state: &Arc<State>, t: &Target) -> Result<Output, ApiError> {
    let name = t.name.as_deref().unwrap_or_default();
    let txn = state.store.lock();
    let obj = txn
        .get(&t.rt.key(), &t.namespace, name)
        .ok_or_else(|| ApiError::not_found(&t.rt.group, &t.rt.resource, name))?;
    let obj = admission::present(state, &t.rt, obj.clone());
    Ok(ok(200, with_type(&t.rt, obj)))
}

/// Parsed list options.
pub struct ListOptions {
    /// Label selector.
    pub labels: LabelSelector,
    /// Field selector.
    pub fields: FieldSelector,
    /// The resource listed (its field labels' values, see [`admission::field_label_value`]).
    pub rt: Arc<ResourceType>,
}

/// Parse and check `labelSelector` and `fieldSelector`.
pub fn list_options(state: &State, req: &Req, rt: &Arc<ResourceType>) -> Result<ListOptions, ApiError> {
    let labels = LabelSelector::parse(req.q("labelSelector").unwrap_or("")).map_err(ApiError::bad_request)?;
    let fields = FieldSelector::parse(req.q("fieldSelector").unwrap_or("")).map_err(ApiError::bad_request)?;
    let (supported, style) = admission::field_labels(state, rt);
    if let Some(field) = fields.unsupported(&supported) {
        return Err(ApiError::bad_request(match style {
            admission::FieldLabelError::Conversion => format!("field label not supported: {field}"),
            admission::FieldLabelError::Job => format!("field label \"{field}\" not supported for Job"),
            admission::FieldLabelError::Listed => {
                let only: Vec<String> = supported.iter().map(|f| format!("\"{f}\"")).collect();
                format!("\"{field}\" is not a known field selector: only {}", only.join(", "))
            }
        }));
    }
    Ok(ListOptions { labels, fields, rt: rt.clone() })
}

/// Whether an object (as clients see it) matches the options (and the namespace, if any).
pub fn matches(opts: &ListOptions, namespace: &str, obj: &Value) -> bool {
    (namespace.is_empty() || obj["metadata"]["namespace"].as_str() == Some(namespace))
        && opts.labels.matches_object(obj)
        && opts.fields.matches_with(|f| admission::field_label_value(&opts.rt, obj, f))
}

fn list_options_invalid(field: &str, message: &str) -> ApiError {
    ApiError::status(
        422,
        "Invalid",
        format!("ListOptions.meta.k8s.io \"\" is invalid: {field}: Forbidden: {message}"),
        Some(json!({"group": "meta.k8s.io", "kind": "ListOptions",
                    "causes": [{"reason": "FieldValueForbidden", "message": format!("Forbidden: {message}"), "field": field}]})),
    )
}

/// Continue token: base64 JSON like the real one (`{"v":"meta.k8s.io/v1","rv":N,"start":"key"}`).
fn encode_continue(rv: u64, start: &str) -> String {
    use base64::Engine;
    let token = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": start});
    base64::engine::general_purpose::URL_SAFE.encode(token.to_string())
}

fn decode_continue(token: &str) -> Result<(u64, String), ApiError> {
    use base64::Engine;
    let bad = |why: String| ApiError::bad_request(format!("invalid continue token: {why}"));
    let raw = base64::engine::general_purpose::URL_SAFE
        .decode(token)
        .or_else(|_| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(token))
        .map_err(|e| bad(format!("illegal base64 data: {e}")))?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| {
        let c = raw.first().copied().unwrap_or(0);
        bad(format!("continue key is not valid: invalid character '\\u{c:04x}' looking for beginning of value"))
    })?;
    let rv = v["rv"].as_u64().ok_or_else(|| bad("continue key is not valid: missing rv".into()))?;
    Ok((rv, v["start"].as_str().unwrap_or_default().to_string()))
}

fn parse_rv(s: &str) -> Option<u64> {
    s.parse::<u64>().ok()
}

/// Too-large resourceVersion: 504 (the real server waits ~3 s first).
fn too_large_rv(rv: u64, current: u64) -> ApiError {
    ApiError::status(
        504,
        "Timeout",
        format!("Timeout: Too large resource version: {rv}, current: {current}"),
        Some(
            json!({"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}], "retryAfterSeconds": 1}),
        ),
    )
}

fn list(state: &Arc<State>, req: &Req, t: &Target) -> Result<Output, ApiError> {
    let opts = list_options(state, req, &t.rt)?;
    let rv_param = req.q("resourceVersion").filter(|s| !s.is_empty());
    let rv_match = req.q("resourceVersionMatch").filter(|s| !s.is_empty());
    if req.q("sendInitialEvents").is_some() {
        return Err(list_options_invalid("sendInitialEvents", "sendInitialEvents is forbidden for list"));
    }
    if rv_match.is_some() && rv_param.is_none() {
        return Err(list_options_invalid(
            "resourceVersionMatch",
            "resourceVersionMatch is forbidden unless resourceVersion is provided",
        ));
    }
    let limit: i64 = req.q("limit").and_then(|l| l.parse().ok()).unwrap_or(0);
    let mut limit = if limit > 0 { limit as usize } else { 0 };
    let txn = state.store.lock();
    let current = txn.rv();
    let (snapshot_rv, start) = match req.q("continue").filter(|c| !c.is_empty()) {
        Some(c) => {
            let (rv, start) = decode_continue(c)?;
            (rv, Some(start))
        }
        None => {
            let rv = match rv_param {
                None => current,
                Some("0") => {
                    limit = 0;
                    current
                }
                Some(s) => {
                    let rv = parse_rv(s).ok_or_else(|| {
                        ApiError::bad_request(format!(
                            "resourceVersion: Invalid value: \"{s}\": must be a non-negative integer"
                        ))
                    })?;
                    if rv > current {
                        return Err(too_large_rv(rv, current));
                    }
                    if rv_match == Some("Exact") { rv } else { current }
                }
            };
            (rv, None)
        }
    };
    // The current state is read in place (one namespace's range when namespaced), an older one
    // reconstructed from history; either way only what is returned is copied.
    let snapshot = if snapshot_rv >= current {
        None
    } else {
        Some(txn.snapshot(&t.rt.key(), snapshot_rv).ok_or_else(|| ApiError::status(410, "Expired", String::from("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list."), None))?)
    };
    let objects: Box<dyn Iterator<Item = &Value>> = match &snapshot {
        Some(objects) => Box::new(objects.values()),
        None => txn.in_namespace(&t.rt.key(), &t.namespace),
    };
    let mut items = Vec::new();
    let mut next = None;
    let mut remaining = 0usize;
    let mut ordered: Vec<(String, &Value)> = objects
        .map(|o| {
            let key = format!(
                "{}/{}",
                o["metadata"]["namespace"].as_str().unwrap_or_default(),
                o["metadata"]["name"].as_str().unwrap_or_default()
            );
            (key, o)
        })
        .collect();
    ordered.sort_by(|a, b| a.0.cmp(&b.0));
    for (key, obj) in ordered {
        if let Some(s) = &start
            && key.as_str() <= s.as_str()
        {
            continue;
        }
        if !matches(&opts, &t.namespace, &admission::presented(state, &t.rt, obj)) {
            continue;
        }
        if limit > 0 && items.len() == limit {
            if next.is_none() {
                next = Some(encode_continue(snapshot_rv, &last_key(&items)));
            }
            remaining += 1;
            continue;
        }
        items.push((key, obj.clone()));
    }
    drop(txn);
    let mut meta = json!({"resourceVersion": snapshot_rv.to_string()});
    if let Some(c) = next {
        meta["continue"] = json!(c);
        if opts.labels.is_empty() && opts.fields.is_empty() {
            meta["remainingItemCount"] = json!(remaining);
        }
    } else if t.rt.custom {
        meta["continue"] = json!("");
    }
    let items: Vec<Value> = items
        .into_iter()
        .map(|(_, o)| {
            let o = admission::present(state, &t.rt, o);
            if t.rt.custom { with_type(&t.rt, o) } else { strip_type(o) }
        })
        .collect();
    Ok(ok(200, json!({"kind": t.rt.list_kind(), "apiVersion": t.rt.api_version(), "metadata": meta, "items": items})))
}

fn last_key(items: &[(String, Value)]) -> String {
    items.last().map(|(k, _)| k.clone()).unwrap_or_default()
}

fn strip_type(mut o: Value) -> Value {
    if let Some(m) = o.as_object_mut() {
        m.remove("kind");
        m.remove("apiVersion");
    }
    o
}

/// Decode a request body and check it against the target (kind, apiVersion, namespace).
fn decode_object(req: &Req, t: &Target) -> Result<Value, ApiError> {
    let ct = req.header("Content-Type");
    let mut obj = crate::http::decode_body(ct, &req.body)?;
    if !obj.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf",
        ));
    }
    let kind = obj["kind"].as_str().unwrap_or_default().to_string();
    let av = obj["apiVersion"].as_str().unwrap_or_default().to_string();
    let expected_kind = match &t.sub {
        Some(sub) => t.rt.subresource(sub).map(|s| s.kind.clone()).unwrap_or_else(|| t.rt.kind.clone()),
        None => t.rt.kind.clone(),
    };
    if kind.is_empty() && av.is_empty() {
        obj["kind"] = json!(expected_kind);
        obj["apiVersion"] = json!(t.rt.api_version());
    } else if kind != expected_kind || av != t.rt.api_version() {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({})",
            t.rt.api_version()
        )));
    }
    if t.rt.namespaced {
        match obj["metadata"]["namespace"].as_str() {
            Some(ns) if !ns.is_empty() && ns != t.namespace => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            _ => {
                obj["metadata"]["namespace"] = json!(t.namespace);
            }
        }
    }
    Ok(obj)
}

/// Whether the resource tracks metadata.generation.
pub fn has_generation(rt: &ResourceType) -> bool {
    rt.custom
        || matches!(
            rt.resource.as_str(),
            "deployments"
                | "replicasets"
                | "statefulsets"
                | "daemonsets"
                | "jobs"
                | "cronjobs"
                | "pods"
                | "customresourcedefinitions"
                | "horizontalpodautoscalers"
                | "poddisruptionbudgets"
                | "networkpolicies"
                | "ingresses"
                | "validatingwebhookconfigurations"
                | "mutatingwebhookconfigurations"
                | "replicationcontrollers"
                | "flowschemas"
                | "prioritylevelconfigurations"
        )
}

fn has_status_subresource(rt: &ResourceType) -> bool {
    rt.subresource("status").is_some()
}

/// The parts of an object that count as its spec for generation bumps.
fn spec_part(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
        m.remove("kind");
        m.remove("apiVersion");
    }
    o
}

fn check_namespace(state: &State, txn: &Txn<'_>, t: &Target, creating: bool) -> Result<(), ApiError> {
    if !t.rt.namespaced {
        return Ok(());
    }
    let Some(ns) = txn.get("/namespaces", "", &t.namespace) else {
        return Err(ApiError::not_found("", "namespaces", &t.namespace));
    };
    if creating && ns["metadata"]["deletionTimestamp"].is_string() {
        let _ = state;
        return Err(ApiError::status(
            403,
            "Forbidden",
            format!(
                "{} \"{}\" is forbidden: unable to create new content in namespace {} because it is being terminated",
                t.rt.resource, "", t.namespace
            ),
            Some(
                json!({"name": "", "kind": t.rt.resource, "causes": [{"reason": "NamespaceTerminating", "message": format!("namespace {} is being terminated", t.namespace), "field": "metadata.namespace"}]}),
            ),
        ));
    }
    Ok(())
}

/// Create an object (POST, or apply on a missing object). `obj` is decoded and checked.
pub fn create_object(
    state: &Arc<State>,
    req: &Req,
    t: &Target,
    mut obj: Value,
    applied: Option<Value>,
) -> Result<Output, ApiError> {
    let mut warnings = admission::prepare_create(state, req, &t.rt, &mut obj)?;
    let dry = is_dry_run(req);
    let meta = obj["metadata"].as_object().cloned().unwrap_or_default();
    let mut name = meta.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
    if name.is_empty()
        && let Some(g) = meta.get("generateName").and_then(Value::as_str)
        && !g.is_empty()
    {
        name = format!("{g}{}", name_suffix());
        obj["metadata"]["name"] = json!(name);
    }
    {
        let txn = state.store.lock();
        check_namespace(state, &txn, t, true).map_err(|e| match e {
            ApiError::Status { code: 403, .. } => {
                crate::validation::namespace_terminating_error(&t.rt.group, &t.rt.resource, &name, &t.namespace)
            }
            other => other,
        })?;
    }
    let manager = manager_of(req);
    if applied.is_none() {
        admission::update_fields(state, None, &mut obj, &t.rt, &manager, None);
    }
    let webhooks = crate::webhook::configured(state);
    let options = write_options(req, "CreateOptions");
    let attrs = webhook_attributes(req, t, "CREATE", &name, None, options);
    if webhooks {
        warnings.extend(crate::webhook::mutate(state, &attrs, Some(&mut obj))?);
    }
    let m = obj["metadata"].as_object_mut().expect("metadata is an object");
    m.insert("uid".into(), json!(new_uid()));
    m.insert("creationTimestamp".into(), json!(now()));
    m.remove("resourceVersion");
    m.remove("deletionTimestamp");
    m.remove("deletionGracePeriodSeconds");
    m.remove("selfLink");
    if has_generation(&t.rt) {
        m.insert("generation".into(), json!(1));
    } else {
        m.remove("generation");
    }
    admission::strategy_create(state, &t.rt, &mut obj)?;
    admission::validate_create(state, &t.rt, &obj)?;
    if webhooks {
        warnings.extend(crate::webhook::validate(state, &attrs, Some(&obj))?);
    }
    let mut txn = state.store.lock();
    if txn.get(&t.rt.key(), &t.namespace, &name).is_some() {
        return Err(ApiError::already_exists(&t.rt.group, &t.rt.resource, &name));
    }
    let obj = order_metadata(obj);
    if dry {
        let mut out = obj;
        out["metadata"].as_object_mut().expect("metadata").remove("resourceVersion");
        return Ok(Output::Value {
            code: 201,
            body: with_type(&t.rt, admission::present(state, &t.rt, out)),
            headers: warnings_headers(&mut warnings),
        });
    }
    let rv = txn.next_rv();
    let mut stored = obj;
    stored["metadata"]["resourceVersion"] = json!(rv.to_string());
    let stored = admission::to_storage(&t.rt, order_metadata(with_type(&t.rt, stored)));
    txn.put(&t.rt.key(), &t.namespace, &name, stored.clone(), rv);
    drop(txn);
    admission::after_write(state, &t.rt, &stored);
    Ok(Output::Value {
        code: 201,
        body: admission::present(state, &t.rt, stored),
        headers: warnings_headers(&mut warnings),
    })
}

fn warnings_headers(w: &mut Vec<String>) -> Vec<(String, String)> {
    w.drain(..).map(|m| ("Warning".to_string(), m)).collect()
}

/// Put metadata keys in the order the real server writes them (cosmetic: JSON compare ignores
/// order, but humans read these).
pub fn order_metadata(mut obj: Value) -> Value {
    const ORDER: [&str; 16] = [
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
        "",
    ];
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        let mut old = std::mem::take(m);
        for k in ORDER {
            if let Some(v) = old.remove(k) {
                m.insert(k.to_string(), v);
            }
        }
        m.extend(old);
    }
    obj
}

fn create(state: &Arc<State>, req: &Req, t: &Target) -> Result<Output, ApiError> {
    let obj = decode_object(req, t)?;
    if let Some(out) = admission::virtual_create(state, req, t, &obj) {
        return out.map(|v| ok(201, v));
    }
    create_object(state, req, t, obj, None)
}

/// Store an updated object: keeps identity fields, bumps generation on spec changes, records
/// managed fields, skips the write when nothing changed.
pub fn store_update(
    state: &Arc<State>,
    req: &Req,
    t: &Target,
    old: &Value,
    mut new: Value,
    applied: Option<&Value>,
) -> Result<Output, ApiError> {
    let name = t.name.clone().unwrap_or_default();
    let sub = t.sub.as_deref();
    // Identity and server-owned metadata come from the stored object.
    for k in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "namespace",
        "name",
    ] {
        match old["metadata"].get(k) {
            Some(v) => {
                new["metadata"][k] = v.clone();
            }
            None => {
                if let Some(m) = new["metadata"].as_object_mut() {
                    m.remove(k);
                }
            }
        }
    }
    if old["metadata"]["generateName"].is_string() && !new["metadata"]["generateName"].is_string() {
        new["metadata"]["generateName"] = old["metadata"]["generateName"].clone();
    }
    // Status subresource: main writes keep the old status, status writes keep the old rest.
    if has_status_subresource(&t.rt) {
        match sub {
            Some("status") => {
                let status = new.get("status").cloned();
                let meta_new = new["metadata"].clone();
                new = old.clone();
                match status {
                    Some(s) => new["status"] = s,
                    None => {
                        if let Some(m) = new.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
                // Status writes change only status (and the managed fields of an apply).
                new["metadata"]["resourceVersion"] = meta_new["resourceVersion"].clone();
                // A Deployment's status strategy resets only spec and labels: annotations
                // written through status stay (kube-controller-manager sets the revision so).
                if t.rt.group == "apps" && t.rt.resource == "deployments" {
                    match meta_new.get("annotations") {
                        Some(a) if !a.is_null() => new["metadata"]["annotations"] = a.clone(),
                        _ => {
                            if let Some(m) = new["metadata"].as_object_mut() {
                                m.remove("annotations");
                            }
                        }
                    }
                }
                if applied.is_some() {
                    new["metadata"]["managedFields"] = meta_new["managedFields"].clone();
                }
            }
            _ => match old.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    if let Some(m) = new.as_object_mut() {
                        m.remove("status");
                    }
                }
            },
        }
    }
    // Finalizers may not be added while deleting.
    if old["metadata"]["deletionTimestamp"].is_string() {
        let old_f: Vec<String> = strings(&old["metadata"]["finalizers"]);
        let added: Vec<String> =
            strings(&new["metadata"]["finalizers"]).into_iter().filter(|f| !old_f.contains(f)).collect();
        if !added.is_empty() {
            let list = added.iter().map(|f| format!("\"{f}\"")).collect::<Vec<_>>().join(", ");
            let msg = format!(
                "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{list}}}"
            );
            let cause = crate::errors::Cause::new("FieldValueForbidden", msg, "metadata.finalizers");
            return Err(ApiError::invalid(&t.rt.group, &t.rt.kind, &name, &[cause.clone(), cause]));
        }
    }
    let mut warnings = admission::prepare_update(state, req, &t.rt, &mut new, old)?;
    if t.rt.custom && sub != Some("status") {
        let g = old["metadata"]["generation"].as_i64().unwrap_or(1);
        let changed = spec_part(&new) != spec_part(old) || annotations_on_crd_changed(&t.rt, &new, old);
        new["metadata"]["generation"] = json!(if changed { g + 1 } else { g });
    }
    let manager = manager_of(req);
    if applied.is_none() {
        admission::update_fields(state, Some(old), &mut new, &t.rt, &manager, sub);
    }
    let webhooks = crate::webhook::configured(state);
    let attrs = webhook_attributes(req, t, "UPDATE", &name, Some(old), write_options(req, "UpdateOptions"));
    if webhooks {
        warnings.extend(crate::webhook::mutate(state, &attrs, Some(&mut new))?);
    }
    if sub.is_none() {
        admission::strategy_update(state, &t.rt, &mut new, old)?;
    } else if sub == Some("status") {
        // The PersistentVolume status strategy (lastPhaseTransitionTime).
        crate::kcm::pv::prepare_status_update(&t.rt.group, &t.rt.resource, &mut new, old);
    }
    admission::validate_update(state, &t.rt, &new, old)?;
    if webhooks {
        warnings.extend(crate::webhook::validate(state, &attrs, Some(&new))?);
    }
    let mut new = order_metadata(with_type(&t.rt, new));
    new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
    if without_time(&new) == without_time(old) {
        return Ok(Output::Value {
            code: 200,
            body: admission::present(state, &t.rt, old.clone()),
            headers: warnings_headers(&mut warnings),
        });
    }
    if is_dry_run(req) {
        return Ok(Output::Value {
            code: 200,
            body: admission::present(state, &t.rt, new),
            headers: warnings_headers(&mut warnings),
        });
    }
    let mut txn = state.store.lock();
    let current = txn.get(&t.rt.key(), &t.namespace, &name).cloned();
    if current.as_ref().map(|c| &c["metadata"]["resourceVersion"]) != Some(&old["metadata"]["resourceVersion"]) {
        RACED.with(|r| r.set(true));
        return Err(stale(t, &name));
    }
    // Last finalizer gone while deleting: the object goes away.
    if new["metadata"]["deletionTimestamp"].is_string() && strings(&new["metadata"]["finalizers"]).is_empty() {
        let rv = txn.next_rv();
        new["metadata"]["resourceVersion"] = json!(rv.to_string());
        // Watchers see the object as it was before the finalizer went, with the new version.
        let mut last = old.clone();
        last["metadata"]["resourceVersion"] = json!(rv.to_string());
        txn.remove(&t.rt.key(), &t.namespace, &name, last, rv);
        drop(txn);
        admission::after_delete(state, &t.rt, &new);
        return Ok(Output::Value {
            code: 200,
            body: admission::present(state, &t.rt, new),
            headers: warnings_headers(&mut warnings),
        });
    }
    let rv = txn.next_rv();
    new["metadata"]["resourceVersion"] = json!(rv.to_string());
    txn.put(&t.rt.key(), &t.namespace, &name, new.clone(), rv);
    drop(txn);
    admission::after_write(state, &t.rt, &new);
    Ok(Output::Value {
        code: 200,
        body: admission::present(state, &t.rt, new),
        headers: warnings_headers(&mut warnings),
    })
}

fn annotations_on_crd_changed(_rt: &ResourceType, _new: &Value, _old: &Value) -> bool {
    false
}

/// The object with managedFields times removed (a write that changes nothing else is a no-op).
fn without_time(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(mf) = v["metadata"]["managedFields"].as_array_mut() {
        for e in mf {
            if let Some(m) = e.as_object_mut() {
                m.remove("time");
            }
        }
    }
    v
}

/// Strings of a JSON array.
pub fn strings(v: &Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(String::from)).collect()).unwrap_or_default()
}

fn load(state: &State, t: &Target) -> Result<Value, ApiError> {
    let name = t.name.as_deref().unwrap_or_default();
    let obj = {
        let txn = state.store.lock();
        txn.get(&t.rt.key(), &t.namespace, name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&t.rt.group, &t.rt.resource, name))?
    };
    Ok(admission::present(state, &t.rt, obj))
}

thread_local! {
    /// Set by `store_update` when the stored object changed while the write was computed.
    static RACED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// kube-apiserver's `GuaranteedUpdate`: a write that lost a race with a concurrent write (say,
/// a controller's status update) is recomputed from the new stored object, where a
/// resourceVersion precondition of the request is checked again; only a request carrying one
/// sees a conflict.
fn guaranteed_update(mut write: impl FnMut() -> Result<Output, ApiError>) -> Result<Output, ApiError> {
    let mut tries = 0;
    loop {
        RACED.with(|r| r.set(false));
        let result = write();
        if result.is_err() && RACED.with(|r| r.get()) && tries < 16 {
            tries += 1;
            continue;
        }
        return result;
    }
}

fn update(state: &Arc<State>, req: &Req, t: &Target) -> Result<Output, ApiError> {
    let name = t.name.clone().unwrap_or_default();
    let mut new = decode_object(req, t)?;
    if let Some(n) = new["metadata"]["name"].as_str()
        && n != name
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({n}) does not match the name on the URL ({name})"
        )));
    }
    new["metadata"]["name"] = json!(name);
    let old = match load(state, t) {
        Ok(o) => o,
        Err(e) => {
            if t.sub.is_none() && admission::allow_create_on_update(&t.rt) {
                return create_object(state, req, t, new, None);
            }
            return Err(e);
        }
    };
    match new["metadata"]["resourceVersion"].as_str() {
        Some(rv) if !rv.is_empty() => {
            if old["metadata"]["resourceVersion"].as_str() != Some(rv) {
                return Err(stale(t, &name));
            }
        }
        _ => {
            if admission::requires_resource_version_on_update(&t.rt) {
                let cause = crate::errors::Cause::new(
                    "FieldValueInvalid",
                    "Invalid value: 0: must be specified for an update",
                    "metadata.resourceVersion",
                );
                return Err(ApiError::invalid(&t.rt.group, &t.rt.resource, &name, &[cause]));
            }
        }
    }
    store_update(state, req, t, &old, new, None)
}

fn patch(state: &Arc<State>, req: &Req, t: &Target) -> Result<Output, ApiError> {
    let name = t.name.clone().unwrap_or_default();
    let ct = req.header("Content-Type").unwrap_or("").split(';').next().unwrap_or("").trim().to_lowercase();
    let kind = match ct.as_str() {
        "application/json-patch+json" => admission::PatchKind::Json,
        "application/merge-patch+json" => admission::PatchKind::Merge,
        "application/strategic-merge-patch+json" => admission::PatchKind::Strategic,
        "application/apply-patch+yaml" | "application/apply-patch+json" | "application/apply-patch+cbor" => {
            admission::PatchKind::Apply
        }
        _ => {
            return Err(ApiError::status(415, "UnsupportedMediaType", "415: Unsupported Media Type", Some(json!({}))));
        }
    };
    if kind == admission::PatchKind::Apply {
        return apply(state, req, t);
    }
    let old = load(state, t)?;
    let patched = admission::patch_object(state, &t.rt, &old, &req.body, kind)?;
    let mut new = patched;
    if new["metadata"]["name"].as_str() != Some(name.as_str()) {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            new["metadata"]["name"].as_str().unwrap_or_default()
        )));
    }
    if let Some(rv) = new["metadata"]["resourceVersion"].as_str()
        && Some(rv) != old["metadata"]["resourceVersion"].as_str()
    {
        return Err(stale(t, &name));
    }
    new["kind"] = json!(t.rt.kind);
    new["apiVersion"] = json!(t.rt.api_version());
    store_update(state, req, t, &old, new, None)
}

fn apply(state: &Arc<State>, req: &Req, t: &Target) -> Result<Output, ApiError> {
    admission::check_options(req, "PatchOptions")?;
    let name = t.name.clone().unwrap_or_default();
    if req.q("fieldManager").is_none_or(str::is_empty) {
        return Err(ApiError::status(
            422,
            "Invalid",
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
            Some(
                json!({"group": "meta.k8s.io", "kind": "PatchOptions", "causes": [{"reason": "FieldValueRequired", "message": "Required value: is required for apply patch", "field": "fieldManager"}]}),
            ),
        ));
    }
    let config = crate::http::yaml_to_json(std::str::from_utf8(&req.body).unwrap_or("")).map_err(|e| match e {
        ApiError::Status { message, .. } => ApiError::bad_request(format!("error decoding YAML: {message}")),
        other => other,
    })?;
    admission::check_applied(&t.rt, &name, &config)?;
    match load(state, t) {
        Ok(old) => {
            if let Some(rv) = config["metadata"]["resourceVersion"].as_str()
                && Some(rv) != old["metadata"]["resourceVersion"].as_str()
            {
                return Err(stale(t, &name));
            }
            let new = admission::apply_fields(
                state,
                Some(&old),
                old.clone(),
                &config,
                &t.rt,
                &manager_of(req),
                t.sub.as_deref(),
                req.q("force") == Some("true"),
            )?;
            store_update(state, req, t, &old, new, Some(&config))
        }
        Err(e) => {
            if t.sub.is_some() {
                return Err(e);
            }
            let mut base = json!({"kind": t.rt.kind, "apiVersion": t.rt.api_version(), "metadata": {"name": name}});
            if t.rt.namespaced {
                base["metadata"]["namespace"] = json!(t.namespace);
            }
            let obj = admission::apply_fields(
                state,
                None,
                base,
                &config,
                &t.rt,
                &manager_of(req),
                None,
                req.q("force") == Some("true"),
            )?;
            create_object(state, req, t, obj, Some(config))
        }
    }
}

/// DeleteOptions from the body and query.
struct DeleteOptions {
    uid: Option<String>,
    rv: Option<String>,
    propagation: Option<String>,
    grace: Option<i64>,
}

fn delete_options(req: &Req) -> Result<DeleteOptions, ApiError> {
    let body = if req.body.is_empty() {
        Value::Null
    } else {
        crate::http::decode_body(req.header("Content-Type"), &req.body)?
    };
    let propagation =
        body["propagationPolicy"].as_str().map(String::from).or_else(|| req.q("propagationPolicy").map(String::from));
    if let Some(p) = &propagation
        && !matches!(p.as_str(), "Orphan" | "Background" | "Foreground")
    {
        return Err(ApiError::status(
            422,
            "Invalid",
            format!(
                "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"{p}\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
            ),
            Some(
                json!({"group": "meta.k8s.io", "kind": "DeleteOptions", "causes": [{"reason": "FieldValueNotSupported", "message": format!("Unsupported value: \"{p}\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""), "field": "propagationPolicy"}]}),
            ),
        ));
    }
    Ok(DeleteOptions {
        uid: body["preconditions"]["uid"].as_str().map(String::from),
        rv: body["preconditions"]["resourceVersion"].as_str().map(String::from),
        propagation,
        grace: body["gracePeriodSeconds"].as_i64().or_else(|| req.q("gracePeriodSeconds").and_then(|g| g.parse().ok())),
    })
}

fn delete(state: &Arc<State>, req: &Req, t: &Target) -> Result<Output, ApiError> {
    let opts = delete_options(req)?;
    let name = t.name.clone().unwrap_or_default();
    let old = load(state, t)?;
    if let Some(uid) = &opts.uid
        && old["metadata"]["uid"].as_str() != Some(uid)
    {
        return Err(ApiError::status(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the UID in the precondition ({uid}) does not match the UID in record ({}). The object might have been deleted and then recreated",
                t.rt.kind,
                old["metadata"]["uid"].as_str().unwrap_or_default()
            ),
            Some(json!({"name": name, "kind": t.rt.kind})),
        ));
    }
    if let Some(rv) = &opts.rv
        && old["metadata"]["resourceVersion"].as_str() != Some(rv)
    {
        return Err(ApiError::status(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({}). The object might have been modified",
                t.rt.kind,
                old["metadata"]["resourceVersion"].as_str().unwrap_or_default()
            ),
            Some(json!({"name": name, "kind": t.rt.kind})),
        ));
    }
    if crate::webhook::configured(state) {
        let mut options = write_options(req, "DeleteOptions");
        if let Some(p) = &opts.propagation {
            options["propagationPolicy"] = json!(p);
        }
        if let Some(g) = opts.grace {
            options["gracePeriodSeconds"] = json!(g);
        }
        let attrs = webhook_attributes(req, t, "DELETE", &name, Some(&old), options);
        crate::webhook::mutate(state, &attrs, None)?;
        crate::webhook::validate(state, &attrs, None)?;
    }
    delete_object(state, t, &old, opts.propagation.as_deref(), opts.grace, is_dry_run(req))
}

/// The options of a write, as an admission webhook sees them.
fn write_options(req: &Req, kind: &str) -> Value {
    let mut o = json!({"kind": kind, "apiVersion": "meta.k8s.io/v1"});
    if is_dry_run(req) {
        o["dryRun"] = json!(["All"]);
    }
    if let Some(m) = req.q("fieldManager").filter(|m| !m.is_empty()) {
        o["fieldManager"] = json!(m);
    }
    o
}

fn webhook_attributes<'a>(
    req: &'a Req,
    t: &'a Target,
    operation: &'static str,
    name: &'a str,
    old: Option<&'a Value>,
    options: Value,
) -> crate::webhook::Attributes<'a> {
    crate::webhook::Attributes {
        rt: &t.rt,
        sub: t.sub.as_deref(),
        operation,
        name,
        namespace: &t.namespace,
        user: &req.user,
        old,
        dry_run: is_dry_run(req),
        options,
    }
}

/// Delete (or mark deleted) one object, honouring finalizers and propagation.
fn delete_object(
    state: &Arc<State>,
    t: &Target,
    old: &Value,
    propagation: Option<&str>,
    grace: Option<i64>,
    dry: bool,
) -> Result<Output, ApiError> {
    let name = old["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let mut finalizers = strings(&old["metadata"]["finalizers"]);
    let policy = propagation.map(String::from).unwrap_or_else(|| admission::default_propagation(&t.rt).to_string());
    let already = old["metadata"]["deletionTimestamp"].is_string();
    if !already {
        match policy.as_str() {
            "Foreground" if !finalizers.iter().any(|f| f == "foregroundDeletion") => {
                finalizers.push("foregroundDeletion".into())
            }
            "Orphan" if !finalizers.iter().any(|f| f == "orphan") => finalizers.push("orphan".into()),
            _ => {}
        }
    }
    if !already {
        for f in admission::deletion_finalizers(&t.rt) {
            if !finalizers.contains(&f) {
                finalizers.push(f);
            }
        }
    }
    let graceful = admission::graceful_delete(&t.rt, old, grace);
    if finalizers.is_empty() && graceful.is_none() && !admission::held_on_delete(&t.rt, old) {
        if dry {
            return Ok(ok(200, success_status(t, old)));
        }
        let mut txn = state.store.lock();
        let rv = txn.next_rv();
        let mut last = old.clone();
        last["metadata"]["resourceVersion"] = json!(rv.to_string());
        if already && grace == Some(0) {
            last["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        }
        txn.remove(&t.rt.key(), &t.namespace, &name, last.clone(), rv);
        drop(txn);
        admission::after_delete(state, &t.rt, &last);
        return Ok(ok(200, admission::delete_response(&t.rt, last, success_status(t, old))));
    }
    if already {
        // A terminating object whose grace period is cut to zero (the kubelet's final delete)
        // goes now if nothing else holds it.
        if grace == Some(0)
            && strings(&old["metadata"]["finalizers"]).is_empty()
            && old["metadata"]["deletionGracePeriodSeconds"].as_i64().unwrap_or(0) > 0
        {
            if dry {
                return Ok(ok(200, with_type(&t.rt, old.clone())));
            }
            let mut txn = state.store.lock();
            let rv = txn.next_rv();
            let mut last = old.clone();
            last["metadata"]["resourceVersion"] = json!(rv.to_string());
            last["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            txn.remove(&t.rt.key(), &t.namespace, &name, last.clone(), rv);
            drop(txn);
            admission::after_delete(state, &t.rt, &last);
            return Ok(ok(200, admission::delete_response(&t.rt, last, success_status(t, old))));
        }
        return Ok(ok(200, with_type(&t.rt, old.clone())));
    }
    let mut new = old.clone();
    let at = state.clock.now() + jiff::SignedDuration::from_secs(graceful.unwrap_or(0));
    new["metadata"]["deletionTimestamp"] = json!(at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
    new["metadata"]["deletionGracePeriodSeconds"] = json!(graceful.unwrap_or(0));
    admission::mark_deleting(&t.rt, &mut new);
    if !finalizers.is_empty() {
        new["metadata"]["finalizers"] = json!(finalizers);
    }
    if let Some(g) = graceful
        && g > 0
        && has_generation(&t.rt)
    {
        let gen_ = new["metadata"]["generation"].as_i64().unwrap_or(1);
        new["metadata"]["generation"] = json!(gen_ + 1);
    }
    let new = order_metadata(new);
    if dry {
        return Ok(ok(200, with_type(&t.rt, new)));
    }
    let mut txn = state.store.lock();
    let rv = txn.next_rv();
    let mut new = new;
    new["metadata"]["resourceVersion"] = json!(rv.to_string());
    txn.put(&t.rt.key(), &t.namespace, &name, new.clone(), rv);
    drop(txn);
    admission::after_write(state, &t.rt, &new);
    Ok(ok(200, with_type(&t.rt, new)))
}

fn success_status(t: &Target, old: &Value) -> Value {
    let mut d = details(old["metadata"]["name"].as_str().unwrap_or_default(), &t.rt.group, &t.rt.resource);
    d["uid"] = old["metadata"]["uid"].clone();
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": d})
}

fn delete_collection(state: &Arc<State>, req: &Req, t: &Target) -> Result<Output, ApiError> {
    let opts = list_options(state, req, &t.rt)?;
    let dopts = delete_options(req)?;
    let dry = is_dry_run(req);
    let objects: Vec<Value> = {
        let txn = state.store.lock();
        txn.all(&t.rt.key())
            .into_iter()
            .filter(|o| matches(&opts, &t.namespace, &admission::presented(state, &t.rt, o)))
            .cloned()
            .collect()
    };
    let rv = state.store.lock().rv();
    for obj in &objects {
        let target = Target {
            rt: t.rt.clone(),
            namespace: obj["metadata"]["namespace"].as_str().unwrap_or_default().to_string(),
            name: obj["metadata"]["name"].as_str().map(String::from),
            sub: None,
            legacy_watch: false,
        };
        delete_object(state, &target, obj, dopts.propagation.as_deref(), dopts.grace, dry)?;
    }
    let items: Vec<Value> =
        objects.into_iter().map(|o| if t.rt.custom { with_type(&t.rt, o) } else { strip_type(o) }).collect();
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if t.rt.custom {
        meta["continue"] = json!("");
    }
    Ok(ok(200, json!({"kind": t.rt.list_kind(), "apiVersion": t.rt.api_version(), "metadata": meta, "items": items})))
}

/// Delete an object on behalf of a controller (garbage collector, namespace controller).
pub fn controller_delete(state: &Arc<State>, rt: &Arc<ResourceType>, obj: &Value, propagation: Option<&str>) {
    let t = Target {
        rt: rt.clone(),
        namespace: obj["metadata"]["namespace"].as_str().unwrap_or_default().to_string(),
        name: obj["metadata"]["name"].as_str().map(String::from),
        sub: None,
        legacy_watch: false,
    };
    let _ = delete_object(state, &t, obj, propagation, Some(0), false);
}

/// The `autoscaling/v1` Scale of a workload.
fn to_scale(obj: &Value) -> Value {
    let mut selector: Vec<String> = obj["spec"]["selector"]["matchLabels"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())).collect())
        .unwrap_or_default();
    for e in obj["spec"]["selector"]["matchExpressions"].as_array().into_iter().flatten() {
        let key = e["key"].as_str().unwrap_or_default();
        let values: Vec<&str> = e["values"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        selector.push(match e["operator"].as_str().unwrap_or_default() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_string(),
            _ => format!("!{key}"),
        });
    }
    selector.sort();
    let m = &obj["metadata"];
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {"name": m["name"], "namespace": m["namespace"], "uid": m["uid"],
                     "resourceVersion": m["resourceVersion"], "creationTimestamp": m["creationTimestamp"]},
        "spec": {"replicas": obj["spec"]["replicas"].as_i64().unwrap_or(1)},
        "status": {"replicas": obj["status"]["replicas"].as_i64().unwrap_or(0), "selector": selector.join(",")},
    })
}

/// The scale subresource of Deployments, ReplicaSets and StatefulSets. A write that loses a race
/// with another writer (a controller's status update) is recomputed, as the real server's
/// guaranteed update does.
fn scale(state: &Arc<State>, req: &Req, t: &Target, verb: &str) -> Result<Output, ApiError> {
    guaranteed_update(|| scale_once(state, req, t, verb))
}

fn scale_once(state: &Arc<State>, req: &Req, t: &Target, verb: &str) -> Result<Output, ApiError> {
    let name = t.name.clone().unwrap_or_default();
    let old = load(state, t)?;
    let current = to_scale(&old);
    let wanted = match verb {
        "get" => return Ok(ok(200, current)),
        "update" => crate::http::decode_body(req.header("Content-Type"), &req.body)?,
        "patch" => {
            let ct = req.header("Content-Type").unwrap_or("").split(';').next().unwrap_or("").trim().to_lowercase();
            let kind = match ct.as_str() {
                "application/json-patch+json" => admission::PatchKind::Json,
                "application/merge-patch+json" => admission::PatchKind::Merge,
                "application/strategic-merge-patch+json" => admission::PatchKind::Strategic,
                _ => {
                    return Err(ApiError::status(
                        415,
                        "UnsupportedMediaType",
                        "415: Unsupported Media Type",
                        Some(json!({})),
                    ));
                }
            };
            let patch: Value = serde_json::from_slice(&req.body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            match kind {
                admission::PatchKind::Json => {
                    crate::fieldmanager::json_patch(&current, &patch).map_err(ApiError::from)?
                }
                _ => crate::fieldmanager::merge_patch(&current, &patch),
            }
        }
        _ => {
            return Err(ApiError::method_not_allowed(
                "the server does not allow this method on the requested resource",
            ));
        }
    };
    if let Some(rv) = wanted["metadata"]["resourceVersion"].as_str()
        && Some(rv) != old["metadata"]["resourceVersion"].as_str()
    {
        return Err(stale(t, &name));
    }
    let replicas = wanted["spec"]["replicas"].as_i64().unwrap_or(0);
    let mut new = old.clone();
    new["spec"]["replicas"] = json!(replicas);
    admission::update_fields(state, Some(&old), &mut new, &t.rt, &manager_of(req), Some("scale"));
    admission::strategy_update(state, &t.rt, &mut new, &old)?;
    if new == old {
        return Ok(ok(200, current));
    }
    let mut txn = state.store.lock();
    if txn.get(&t.rt.key(), &t.namespace, &name).map(|c| &c["metadata"]["resourceVersion"])
        != Some(&old["metadata"]["resourceVersion"])
    {
        RACED.with(|r| r.set(true));
        return Err(stale(t, &name));
    }
    let rv = txn.next_rv();
    new["metadata"]["resourceVersion"] = json!(rv.to_string());
    txn.put(&t.rt.key(), &t.namespace, &name, new.clone(), rv);
    drop(txn);
    admission::after_write(state, &t.rt, &new);
    Ok(ok(200, to_scale(&new)))
}

/// 409 for a write based on an older resourceVersion than the stored one.
fn stale(t: &Target, name: &str) -> ApiError {
    ApiError::conflict(
        &t.rt.group,
        &t.rt.resource,
        name,
        "the object has been modified; please apply your changes to the latest version and try again",
    )
}
