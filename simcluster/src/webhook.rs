//! Admission webhooks as kube-apiserver calls them: the stored `MutatingWebhookConfiguration`s
//! and `ValidatingWebhookConfiguration`s (admissionregistration.k8s.io/v1) select webhooks by
//! rules, namespace and object selectors and `matchConditions`; each selected webhook gets an
//! `AdmissionReview` v1 over HTTPS (trusting only its `caBundle`), at `clientConfig.url` or at
//! the local address a `clientConfig.service` is mapped to (see
//! [`crate::SimCluster::set_webhook_service`]).
//!
//! Expected flow, as in kube-apiserver: mutating webhooks run first, configurations ordered by
//! name and webhooks in their listed order, each JSON patch applied before the next call; a
//! webhook with `reinvocationPolicy: IfNeeded` runs once more when a later webhook changed the
//! object. Validating webhooks see the object after defaulting and validation, just before it
//! is stored.
//!
//! Errors: a denial, a failed call (under `failurePolicy: Fail`) and a patch that does not apply
//! are answered with the real server's Status (texts recorded from kube-apiserver v1.36.2, see
//! `tests/admission_webhooks.rs`). Caveat: the calls block the thread that runs the write (on a
//! multi-threaded runtime through `block_in_place`); a webhook server running on a
//! current-thread runtime that also runs simcluster would deadlock.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::errors::ApiError;
use crate::registry::ResourceType;
use crate::state::State;

const MUTATING: &str = "admissionregistration.k8s.io/mutatingwebhookconfigurations";
const VALIDATING: &str = "admissionregistration.k8s.io/validatingwebhookconfigurations";

/// What a webhook is asked about: one admission request.
pub struct Attributes<'a> {
    /// The resource.
    pub rt: &'a ResourceType,
    /// Its subresource, if any.
    pub sub: Option<&'a str>,
    /// `CREATE`, `UPDATE` or `DELETE`.
    pub operation: &'static str,
    /// Object name.
    pub name: &'a str,
    /// Namespace ("" for cluster-scoped objects).
    pub namespace: &'a str,
    /// The requesting user.
    pub user: &'a crate::rbac::UserInfo,
    /// The old (stored) object of an update or delete.
    pub old: Option<&'a Value>,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// The request's options (`CreateOptions`, `UpdateOptions`, `DeleteOptions`).
    pub options: Value,
}

/// Local addresses of the Services webhooks name in `clientConfig.service`, by
/// `namespace/name:port`.
#[derive(Default)]
pub struct Services(std::sync::Mutex<BTreeMap<String, SocketAddr>>);

impl Services {
    /// Map Service `namespace/name` port `port` to `addr`.
    pub fn set(&self, namespace: &str, name: &str, port: u16, addr: SocketAddr) {
        self.0.lock().expect("services lock").insert(format!("{namespace}/{name}:{port}"), addr);
    }

    fn get(&self, namespace: &str, name: &str, port: u16) -> Option<SocketAddr> {
        self.0.lock().expect("services lock").get(&format!("{namespace}/{name}:{port}")).copied()
    }
}

/// The defaults of a stored webhook configuration (`SetDefaults_ValidatingWebhook`,
/// `SetDefaults_MutatingWebhook`, `SetDefaults_Rule`).
pub fn default_configuration(rt: &ResourceType, obj: &mut Value) {
    let mutating = match (rt.group.as_str(), rt.resource.as_str()) {
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations") => true,
        ("admissionregistration.k8s.io", "validatingwebhookconfigurations") => false,
        _ => return,
    };
    for w in obj["webhooks"].as_array_mut().into_iter().flatten() {
        let Some(m) = w.as_object_mut() else { continue };
        m.entry("failurePolicy").or_insert(json!("Fail"));
        m.entry("matchPolicy").or_insert(json!("Equivalent"));
        m.entry("namespaceSelector").or_insert(json!({}));
        m.entry("objectSelector").or_insert(json!({}));
        m.entry("timeoutSeconds").or_insert(json!(10));
        if mutating {
            m.entry("reinvocationPolicy").or_insert(json!("Never"));
        }
        if let Some(s) = m.get_mut("clientConfig").and_then(|c| c.get_mut("service")).and_then(Value::as_object_mut) {
            s.entry("port").or_insert(json!(443));
        }
        for r in m.get_mut("rules").and_then(Value::as_array_mut).into_iter().flatten() {
            if let Some(r) = r.as_object_mut() {
                r.entry("scope").or_insert(json!("*"));
            }
        }
    }
}

/// Whether any webhook configuration is stored (writes then may block on calls).
pub fn configured(state: &State) -> bool {
    let txn = state.store.lock();
    !txn.all(MUTATING).is_empty() || !txn.all(VALIDATING).is_empty()
}

/// The webhooks of every configuration of `key`, configurations ordered by name.
fn webhooks(state: &State, key: &str) -> Vec<Value> {
    let txn = state.store.lock();
    let mut configs: Vec<&Value> = txn.all(key);
    configs.sort_by(|a, b| a["metadata"]["name"].as_str().cmp(&b["metadata"]["name"].as_str()));
    configs.iter().flat_map(|c| c["webhooks"].as_array().cloned().unwrap_or_default()).collect()
}

/// Run the mutating webhooks on `obj` (none for a delete: `obj` is `None`). Returns the
/// webhooks' warnings, as `Warning` header values.
pub fn mutate(state: &State, a: &Attributes<'_>, obj: Option<&mut Value>) -> Result<Vec<String>, ApiError> {
    let hooks = webhooks(state, MUTATING);
    if hooks.is_empty() {
        return Ok(Vec::new());
    }
    let mut scratch = None;
    let obj = match obj {
        Some(o) => o,
        None => scratch.insert(Value::Null),
    };
    let mut warnings = Vec::new();
    // (index of an IfNeeded webhook that ran, whether the object changed after it ran)
    let mut reinvoke: Vec<(usize, bool)> = Vec::new();
    for (i, hook) in hooks.iter().enumerate() {
        let changed = run_one(state, a, hook, obj, true, &mut warnings)?;
        if changed {
            for r in reinvoke.iter_mut() {
                r.1 = true;
            }
        }
        if hook["reinvocationPolicy"].as_str() == Some("IfNeeded") {
            reinvoke.push((i, false));
        }
    }
    for (i, needed) in reinvoke {
        if needed {
            run_one(state, a, &hooks[i], obj, true, &mut warnings)?;
        }
    }
    Ok(warnings)
}

/// Run the validating webhooks on `obj` (the new object; `None` for a delete).
pub fn validate(state: &State, a: &Attributes<'_>, obj: Option<&Value>) -> Result<Vec<String>, ApiError> {
    let hooks = webhooks(state, VALIDATING);
    let mut warnings = Vec::new();
    let mut obj = obj.cloned().unwrap_or(Value::Null);
    for hook in &hooks {
        run_one(state, a, hook, &mut obj, false, &mut warnings)?;
    }
    Ok(warnings)
}

/// Call one webhook if it matches; returns whether it changed the object.
fn run_one(
    state: &State,
    a: &Attributes<'_>,
    hook: &Value,
    obj: &mut Value,
    mutating: bool,
    warnings: &mut Vec<String>,
) -> Result<bool, ApiError> {
    let name = hook["name"].as_str().unwrap_or_default();
    let object = (!obj.is_null()).then_some(&*obj);
    if !matches_rules(hook, a) || !matches_namespace(state, hook, a, object) || !matches_object(hook, a, object) {
        return Ok(false);
    }
    let fail = hook["failurePolicy"].as_str() != Some("Ignore");
    let request = review_request(a, object);
    match match_conditions(hook, &request) {
        Ok(true) => {}
        Ok(false) => return Ok(false),
        Err(e) if fail => return Err(call_failed(name, &e)),
        Err(_) => return Ok(false),
    }
    if a.dry_run && !matches!(hook["sideEffects"].as_str(), Some("None" | "NoneOnDryRun")) {
        return Err(ApiError::status(
            400,
            "BadRequest",
            format!("admission webhook {name:?} does not support dry run"),
            None,
        ));
    }
    let uid = request["uid"].as_str().unwrap_or_default().to_string();
    let review = json!({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": request});
    let response = match call(state, hook, &review).and_then(|r| check_response(r, &uid)) {
        Ok(r) => r,
        Err(e) if fail => return Err(call_failed(name, &e)),
        Err(_) => return Ok(false),
    };
    for w in response["warnings"].as_array().into_iter().flatten().filter_map(Value::as_str) {
        warnings.push(format!("299 - \"{}\"", w.replace('"', "\\\"")));
    }
    if response["allowed"].as_bool() != Some(true) {
        return Err(denied(name, &response["status"]));
    }
    let Some(patch) = response["patch"].as_str().filter(|p| mutating && !p.is_empty() && object.is_some()) else {
        return Ok(false);
    };
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(patch)
        .map_err(|e| internal(&format!("failed calling webhook {name:?}: {e}")))?;
    let patch: Value = serde_json::from_slice(&bytes).map_err(|e| internal(&e.to_string()))?;
    let patched = apply_patch(obj, &patch).map_err(|e| internal(&e))?;
    let changed = patched != *obj;
    *obj = patched;
    Ok(changed)
}

/// Apply a webhook's JSON patch, with the wording of the real server's patch library for an
/// operation that does not apply.
fn apply_patch(obj: &Value, patch: &Value) -> Result<Value, String> {
    let Some(ops) = patch.as_array() else {
        return Err("json: cannot unmarshal object into Go value of type jsonpatch.Patch".into());
    };
    let mut doc = obj.clone();
    for op in ops {
        doc = crate::fieldmanager::json_patch(&doc, &json!([op])).map_err(|_| {
            let kind = op["op"].as_str().unwrap_or_default();
            let path = op["path"].as_str().unwrap_or_default();
            match kind {
                "remove" | "replace" => {
                    format!("{kind} operation does not apply: doc is missing path: {path:?}: missing value")
                }
                "test" => format!("testing value {path} failed: test failed"),
                _ => format!("{kind} operation does not apply: doc is missing path: {path:?}"),
            }
        })?;
    }
    Ok(doc)
}

/// `Internal error occurred: <m>` with the message as the one cause, as the real server
/// wraps an error that is not a Status.
fn internal(m: &str) -> ApiError {
    ApiError::status(
        500,
        "InternalError",
        format!("Internal error occurred: {m}"),
        Some(json!({"causes": [{"message": m}]})),
    )
}

fn call_failed(name: &str, e: &str) -> ApiError {
    internal(&format!("failed calling webhook {name:?}: {e}"))
}

/// `webhookerrors.ToStatusErr`: the webhook's Status with the denial's wording.
fn denied(name: &str, status: &Value) -> ApiError {
    let by = format!("admission webhook {name:?} denied the request");
    let code = status["code"].as_u64().filter(|c| *c >= 400).unwrap_or(400) as u16;
    let reason = status["reason"].as_str().unwrap_or_default();
    let message = match status["message"].as_str().filter(|m| !m.is_empty()) {
        Some(m) => format!("{by}: {m}"),
        None if !reason.is_empty() => format!("{by}: {reason}"),
        None => format!("{by} without explanation"),
    };
    ApiError::status(code, reason, message, status.get("details").filter(|d| d.is_object()).cloned())
}

fn check_response(review: Value, uid: &str) -> Result<Value, String> {
    let Some(response) = review.get("response").filter(|r| r.is_object()) else {
        return Err("received invalid webhook response: webhook response was absent".into());
    };
    let got = response["uid"].as_str().unwrap_or_default();
    if got != uid {
        return Err(format!("received invalid webhook response: expected response.uid={uid:?}, got {got:?}"));
    }
    Ok(response.clone())
}

fn gvr(a: &Attributes<'_>) -> (Value, Value) {
    let kind = match a.sub.and_then(|s| a.rt.subresource(s)) {
        Some(s) if !s.kind.is_empty() => json!({"group": s.group, "version": s.version, "kind": s.kind}),
        _ => json!({"group": a.rt.group, "version": a.rt.version, "kind": a.rt.kind}),
    };
    (kind, json!({"group": a.rt.group, "version": a.rt.version, "resource": a.rt.resource}))
}

/// The `AdmissionRequest` as kube-apiserver writes it.
fn review_request(a: &Attributes<'_>, object: Option<&Value>) -> Value {
    let (kind, resource) = gvr(a);
    let mut user = json!({"username": a.user.name});
    if !a.user.uid.is_empty() {
        user["uid"] = json!(a.user.uid);
    }
    if !a.user.groups.is_empty() {
        user["groups"] = json!(a.user.groups);
    }
    if !a.user.extra.is_empty() {
        user["extra"] = json!(a.user.extra);
    }
    let mut r = json!({"uid": crate::api::new_uid(), "kind": kind, "resource": resource});
    if let Some(s) = a.sub {
        r["subResource"] = json!(s);
    }
    r["requestKind"] = kind;
    r["requestResource"] = resource;
    if let Some(s) = a.sub {
        r["requestSubResource"] = json!(s);
    }
    if !a.name.is_empty() {
        r["name"] = json!(a.name);
    }
    if !a.namespace.is_empty() {
        r["namespace"] = json!(a.namespace);
    }
    r["operation"] = json!(a.operation);
    r["userInfo"] = user;
    r["object"] = object.map(|o| crate::api::with_type(a.rt, o.clone())).unwrap_or(Value::Null);
    r["oldObject"] = a.old.map(|o| crate::api::with_type(a.rt, o.clone())).unwrap_or(Value::Null);
    r["dryRun"] = json!(a.dry_run);
    r["options"] = a.options.clone();
    r
}

fn strs(v: &Value) -> Vec<&str> {
    v.as_array().into_iter().flatten().filter_map(Value::as_str).collect()
}

/// `rules`: operations, groups, versions, resources (`*`, `*/*`, `r/*`, `*/sub`) and scope.
fn matches_rules(hook: &Value, a: &Attributes<'_>) -> bool {
    hook["rules"].as_array().into_iter().flatten().any(|rule| {
        let any = |field: &str, want: &str| strs(&rule[field]).iter().any(|v| *v == "*" || *v == want);
        let scope_ok = match rule["scope"].as_str().unwrap_or("*") {
            "Cluster" => !a.rt.namespaced,
            "Namespaced" => a.rt.namespaced,
            _ => true,
        };
        let resource_ok = strs(&rule["resources"]).iter().any(|r| {
            let (res, sub) = r.split_once('/').unwrap_or((r, ""));
            let res_ok = res == "*" || res == a.rt.resource;
            let sub_ok = match a.sub {
                None => sub.is_empty(),
                Some(s) => sub == "*" || sub == s,
            };
            res_ok && sub_ok
        });
        scope_ok
            && any("operations", a.operation)
            && any("apiGroups", &a.rt.group)
            && any("apiVersions", &a.rt.version)
            && resource_ok
    })
}

/// `namespaceSelector`: the namespace's labels (a Namespace's own; none for other
/// cluster-scoped objects, which always match).
fn matches_namespace(state: &State, hook: &Value, a: &Attributes<'_>, object: Option<&Value>) -> bool {
    let sel = &hook["namespaceSelector"];
    if !sel.is_object() || selector_is_empty(sel) {
        return true;
    }
    let labels = if a.rt.group.is_empty() && a.rt.resource == "namespaces" {
        object.or(a.old).map(|o| o["metadata"]["labels"].clone()).unwrap_or(Value::Null)
    } else if !a.rt.namespaced {
        return true;
    } else {
        let txn = state.store.lock();
        txn.get("/namespaces", "", a.namespace).map(|n| n["metadata"]["labels"].clone()).unwrap_or(Value::Null)
    };
    selector_matches(sel, &labels)
}

/// `metav1.LabelSelectorAsSelector` applied to `labels` (`matchLabels` and `matchExpressions`
/// ANDed).
fn selector_matches(sel: &Value, labels: &Value) -> bool {
    let label = |k: &str| labels.get(k).and_then(Value::as_str);
    if let Some(m) = sel["matchLabels"].as_object()
        && m.iter().any(|(k, v)| label(k) != v.as_str())
    {
        return false;
    }
    sel["matchExpressions"].as_array().into_iter().flatten().all(|e| {
        let values = strs(&e["values"]);
        let v = label(e["key"].as_str().unwrap_or_default());
        match e["operator"].as_str().unwrap_or_default() {
            "In" => v.is_some_and(|v| values.contains(&v)),
            "NotIn" => v.is_none_or(|v| !values.contains(&v)),
            "Exists" => v.is_some(),
            "DoesNotExist" => v.is_none(),
            _ => false,
        }
    })
}

fn selector_is_empty(sel: &Value) -> bool {
    sel["matchLabels"].as_object().is_none_or(|m| m.is_empty())
        && sel["matchExpressions"].as_array().is_none_or(|a| a.is_empty())
}

/// `objectSelector`: the new or the old object's labels.
fn matches_object(hook: &Value, a: &Attributes<'_>, object: Option<&Value>) -> bool {
    let sel = &hook["objectSelector"];
    if !sel.is_object() || selector_is_empty(sel) {
        return true;
    }
    [object, a.old].into_iter().flatten().any(|o| selector_matches(sel, &o["metadata"]["labels"]))
}

/// `matchConditions`: every expression must be true (`object`, `oldObject`, `request`; no
/// `authorizer`). Errors are the webhook's call errors.
fn match_conditions(hook: &Value, request: &Value) -> Result<bool, String> {
    let mut errors = Vec::new();
    for c in hook["matchConditions"].as_array().into_iter().flatten() {
        let expr = c["expression"].as_str().unwrap_or_default();
        let vars = [("object", &request["object"]), ("oldObject", &request["oldObject"]), ("request", request)];
        match crate::crd::cel::eval_bool(expr, &vars) {
            Ok(true) => {}
            Ok(false) => return Ok(false),
            Err(e) => errors
                .push(format!("failed to evaluate match condition {:?}: {e}", c["name"].as_str().unwrap_or_default())),
        }
    }
    if errors.is_empty() { Ok(true) } else { Err(errors.join(", ")) }
}

/// Where a webhook is reached: the address to dial, the TLS server name and the URL (for
/// error messages).
struct Endpoint {
    addr: Result<String, String>,
    server_name: String,
    url: String,
    host_header: String,
    path: String,
}

fn endpoint(state: &State, hook: &Value, timeout: u64) -> Result<Endpoint, String> {
    let cc = &hook["clientConfig"];
    if let Some(url) = cc["url"].as_str() {
        let rest = url.strip_prefix("https://").ok_or_else(|| format!("unsupported webhook URL {url:?}"))?;
        let (hostport, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = match hostport.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => (h, p.parse::<u16>().unwrap_or(443)),
            _ => (hostport, 443),
        };
        let sep = if path.contains('?') { '&' } else { '?' };
        let host_bare = host.trim_start_matches('[').trim_end_matches(']');
        return Ok(Endpoint {
            addr: Ok(format!("{host}:{port}")),
            server_name: host_bare.to_string(),
            url: format!("https://{hostport}{path}{sep}timeout={timeout}s"),
            host_header: hostport.to_string(),
            path: format!("{path}{sep}timeout={timeout}s"),
        });
    }
    let svc = &cc["service"];
    let ns = svc["namespace"].as_str().unwrap_or_default();
    let name = svc["name"].as_str().unwrap_or_default();
    let port = svc["port"].as_u64().unwrap_or(443) as u16;
    let mut path = svc["path"].as_str().unwrap_or("").to_string();
    if !path.starts_with('/') {
        path.insert(0, '/');
    }
    let sep = if path.contains('?') { '&' } else { '?' };
    let host = format!("{name}.{ns}.svc");
    let addr = state
        .webhook_services
        .get(ns, name, port)
        .map(|a| a.to_string())
        .ok_or_else(|| format!("service \"{name}\" not found"));
    Ok(Endpoint {
        addr,
        server_name: host.clone(),
        url: format!("https://{host}:{port}{path}{sep}timeout={timeout}s"),
        host_header: format!("{host}:{port}"),
        path: format!("{path}{sep}timeout={timeout}s"),
    })
}

/// POST the review; the webhook's AdmissionReview answer, or the call error's text.
fn call(state: &State, hook: &Value, review: &Value) -> Result<Value, String> {
    let timeout = hook["timeoutSeconds"].as_u64().unwrap_or(10);
    let ep = endpoint(state, hook, timeout)?;
    let mut roots = rustls::RootCertStore::empty();
    if let Some(ca) = hook["clientConfig"]["caBundle"].as_str() {
        use base64::Engine as _;
        use rustls::pki_types::pem::PemObject as _;
        let pem = base64::engine::general_purpose::STANDARD.decode(ca).unwrap_or_default();
        for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&pem).flatten() {
            let _ = roots.add(cert);
        }
    }
    let body = serde_json::to_vec(review).map_err(|e| e.to_string())?;
    let url = ep.url.clone();
    let run = move || -> Result<(u16, String, Vec<u8>), String> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
        rt.block_on(async move {
            match tokio::time::timeout(Duration::from_secs(timeout), post(&ep, roots, body)).await {
                Ok(r) => r,
                Err(_) => Err("context deadline exceeded".to_string()),
            }
        })
    };
    // The call runs on a thread of its own, with its own runtime: the write pipeline is
    // synchronous.
    let out = std::thread::scope(|s| {
        let h = s.spawn(run);
        match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
            Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(|| h.join()),
            _ => h.join(),
        }
    })
    .map_err(|_| "webhook call panicked".to_string())?;
    out.map_err(|e| format!("failed to call webhook: Post {url:?}: {e}"))
        .and_then(|(code, content_type, bytes)| response_of(code, &content_type, &bytes))
}

/// client-go's reading of the answer: a non-2xx answer's body is quoted only when it is text
/// (no Content-Type or `text/*`), else "unknown".
fn response_of(code: u16, content_type: &str, bytes: &[u8]) -> Result<Value, String> {
    if !(200..300).contains(&code) {
        let is_text = content_type.is_empty() || content_type.starts_with("text/");
        let text = if is_text { String::from_utf8_lossy(bytes).trim().to_string() } else { "unknown".into() };
        let status: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
        let msg = match (status["kind"].as_str(), status["message"].as_str()) {
            (Some("Status"), Some(m)) => m.to_string(),
            _ if code >= 500 => format!("an error on the server ({text:?}) has prevented the request from succeeding"),
            _ => format!("the server responded with the status code {code} but did not return more information"),
        };
        return Err(format!("failed to call webhook: {msg}"));
    }
    serde_json::from_slice(bytes).map_err(|e| format!("received invalid webhook response: {e}"))
}

async fn post(ep: &Endpoint, roots: rustls::RootCertStore, body: Vec<u8>) -> Result<(u16, String, Vec<u8>), String> {
    let addr = ep.addr.clone()?;
    let tcp = tokio::net::TcpStream::connect(&addr).await.map_err(|e| {
        let why = match e.kind() {
            std::io::ErrorKind::ConnectionRefused => "connection refused".to_string(),
            _ => e.to_string(),
        };
        format!("dial tcp {addr}: connect: {why}")
    })?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(ep.server_name.clone()).map_err(|e| e.to_string())?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.map_err(|e| tls_error(&e))?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake::<_, axum::body::Body>(hyper_util::rt::TokioIo::new(tls))
            .await
            .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let req = http::Request::post(ep.path.as_str())
        .header("Host", ep.host_header.as_str())
        .header("User-Agent", "kube-apiserver-admission")
        .header("Accept", "application/json, */*")
        .header("Content-Type", "application/json")
        .body(axum::body::Body::from(body))
        .map_err(|e| e.to_string())?;
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let code = resp.status().as_u16();
    let content_type = resp.headers().get("Content-Type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let bytes =
        axum::body::to_bytes(axum::body::Body::new(resp.into_body()), 64 << 20).await.map_err(|e| e.to_string())?;
    Ok((code, content_type, bytes.to_vec()))
}

/// Go's wording of TLS failures.
fn tls_error(e: &std::io::Error) -> String {
    let inner = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>());
    match inner {
        Some(rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer)) => {
            "tls: failed to verify certificate: x509: certificate signed by unknown authority".into()
        }
        Some(rustls::Error::InvalidCertificate(c)) => format!("tls: failed to verify certificate: x509: {c:?}"),
        Some(other) => format!("tls: {other}"),
        None => e.to_string(),
    }
}
