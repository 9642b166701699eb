//! An in-process API client for the emulator's own controllers. Controllers act exactly as
//! kube-controller-manager does on a real cluster: through the API, as a named field manager,
//! so defaulting, validation, managedFields, resourceVersions and watch events are those of any
//! client request.

use std::collections::BTreeSet;
use std::sync::Arc;

use http::{HeaderMap, HeaderValue, Method};
use serde_json::{Value, json};

use crate::errors::ApiError;
use crate::server::Req;
use crate::state::State;

/// A client acting as `manager` with admin rights.
#[derive(Clone)]
pub struct Client {
    state: Arc<State>,
    manager: String,
    /// The namespaces a controller pass is about (`None`: all); see [`Client::scoped`].
    scope: Option<Arc<BTreeSet<String>>>,
}

/// [`Client::request`] to another API server (`simcluster nodes`): the same request, sent
/// with that server's credentials; its errors as [`ApiError`]s.
async fn remote_request(
    remote: &kube::Client,
    method: Method,
    path: &str,
    query: &std::collections::BTreeMap<String, String>,
    headers: HeaderMap,
    body: Option<&Value>,
) -> Result<Value, ApiError> {
    let mut uri = path.to_string();
    if !query.is_empty() {
        uri.push('?');
        uri.push_str(&form_urlencoded::Serializer::new(String::new()).extend_pairs(query).finish());
    }
    let mut req = http::Request::builder().method(method).uri(uri);
    for (k, v) in &headers {
        req = req.header(k, v);
    }
    let body = body.map(|b| serde_json::to_vec(b).unwrap_or_default()).unwrap_or_default();
    let req = req.body(body).map_err(|e| ApiError::internal(e.to_string()))?;
    match remote.request_text(req).await {
        Ok(text) => Ok(serde_json::from_str(&text).unwrap_or(Value::Null)),
        Err(kube::Error::Api(s)) => Err(ApiError::status(
            s.code,
            &s.reason,
            s.message.clone(),
            s.details.as_ref().and_then(|d| serde_json::to_value(d).ok()),
        )),
        // Unreachable server, TLS or timeout: as the API's "service unavailable".
        Err(e) => Err(ApiError::status(503, "ServiceUnavailable", e.to_string(), None)),
    }
}

/// The path of a resource collection or object: `/api/v1/namespaces/ns/pods/name/status`.
pub fn path(api_version: &str, resource: &str, namespace: &str, name: &str, sub: &str) -> String {
    let mut p = if api_version.contains('/') { format!("/apis/{api_version}") } else { format!("/api/{api_version}") };
    if !namespace.is_empty() {
        p.push_str(&format!("/namespaces/{namespace}"));
    }
    p.push_str(&format!("/{resource}"));
    if !name.is_empty() {
        p.push_str(&format!("/{name}"));
    }
    if !sub.is_empty() {
        p.push_str(&format!("/{sub}"));
    }
    p
}

impl Client {
    /// A client writing as `manager` (e.g. `kube-controller-manager`).
    pub fn new(state: Arc<State>, manager: &str) -> Client {
        Client { state, manager: manager.to_string(), scope: None }
    }

    /// This client for a controller pass about the objects of some namespaces only (`None`:
    /// all): its lists across all namespaces of a namespaced resource return only the objects
    /// of those namespaces. The controllers whose objects relate only to objects of their own
    /// namespace use it to look at just the namespaces that changed since their last pass.
    pub fn scoped(&self, namespaces: Option<Arc<BTreeSet<String>>>) -> Client {
        Client { scope: namespaces, ..self.clone() }
    }

    /// Whether this client's lists see only some namespaces (see [`Client::scoped`]).
    pub fn is_scoped(&self) -> bool {
        self.scope.is_some()
    }

    /// Whether objects of `namespace` are in this client's scope (see [`Client::scoped`]).
    pub fn in_scope(&self, namespace: &str) -> bool {
        self.scope.as_ref().is_none_or(|s| s.contains(namespace))
    }

    /// The server state (for reads that need no API semantics).
    pub fn state(&self) -> &Arc<State> {
        &self.state
    }

    /// Send one request; the response body as JSON, or the API error.
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<&Value>,
        content_type: &str,
    ) -> Result<Value, ApiError> {
        let mut headers = HeaderMap::new();
        headers.insert(
            "Content-Type",
            HeaderValue::from_str(content_type).unwrap_or(HeaderValue::from_static("application/json")),
        );
        headers.insert("User-Agent", HeaderValue::from_str(&format!("{}/v1.36.2", self.manager)).expect("ascii"));
        let mut q: std::collections::BTreeMap<String, String> =
            query.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        q.entry("fieldManager".into()).or_insert_with(|| self.manager.clone());
        if method == Method::GET || method == Method::DELETE {
            q.remove("fieldManager");
        }
        if let Some(remote) = &self.state.remote {
            return remote_request(remote, method, path, &q, headers, body).await;
        }
        let req = Req {
            method,
            query: q,
            headers,
            body: body.map(|b| bytes::Bytes::from(serde_json::to_vec(b).unwrap_or_default())).unwrap_or_default(),
            accept: crate::http::parse_accept(Some("application/json")),
            user: crate::rbac::UserInfo::admin(),
            impersonated_by: None,
        };
        let resp = crate::server::route(&self.state, &req, path).await?;
        let status = resp.status().as_u16();
        let bytes =
            axum::body::to_bytes(resp.into_body(), 64 << 20).await.map_err(|e| ApiError::internal(e.to_string()))?;
        let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if status >= 400 {
            return Err(ApiError::status(
                status,
                v["reason"].as_str().unwrap_or_default(),
                v["message"].as_str().unwrap_or_default(),
                v.get("details").cloned(),
            ));
        }
        Ok(v)
    }

    /// GET an object.
    pub async fn get(&self, path: &str) -> Result<Value, ApiError> {
        self.request(Method::GET, path, &[], None, "application/json").await
    }

    /// List a collection (optionally label-selected); the items carry kind and apiVersion.
    ///
    /// A list of the current state is read straight from the store, with the same items, order
    /// and conversions as the API's list (no encoding to JSON and back); anything else takes the
    /// API path.
    pub async fn list(&self, path: &str, label_selector: &str) -> Result<Vec<Value>, ApiError> {
        self.list_where(path, label_selector, |_| true).await
    }

    /// [`Client::list`], keeping only the items `keep` accepts (looked at before they are
    /// copied out of the store, so a controller interested in few objects of a large collection
    /// copies only those).
    pub async fn list_where(
        &self,
        path: &str,
        label_selector: &str,
        keep: impl Fn(&Value) -> bool,
    ) -> Result<Vec<Value>, ApiError> {
        if let Some(items) = self.list_current(path, label_selector, &keep) {
            return Ok(items);
        }
        let q: Vec<(&str, &str)> =
            if label_selector.is_empty() { vec![] } else { vec![("labelSelector", label_selector)] };
        let list = self.request(Method::GET, path, &q, None, "application/json").await?;
        let kind = list["kind"].as_str().unwrap_or_default().trim_end_matches("List").to_string();
        let api_version = list["apiVersion"].clone();
        Ok(list["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|mut i| {
                if i.get("kind").is_none() {
                    i["kind"] = json!(kind);
                    i["apiVersion"] = api_version.clone();
                }
                i
            })
            .filter(|i| keep(i))
            .collect())
    }

    /// The first core/v1 Event in `namespace` about the object with `uid` that `pred` accepts
    /// (as the API lists it), looking only at that object's Events.
    fn find_event(&self, namespace: &str, uid: &Value, pred: impl Fn(&Value) -> bool) -> Option<Value> {
        let rt = self.state.registry.find("", "v1", "events")?;
        let txn = self.state.store.lock();
        txn.in_namespace(&rt.key(), namespace)
            // Stored in either API's shape: a cheap look at the uid before the conversion.
            .filter(|o| o["involvedObject"]["uid"] == *uid || o["regarding"]["uid"] == *uid)
            .map(|o| crate::admission::presented(&self.state, &rt, o))
            .find(|e| pred(e))
            .map(|e| {
                let mut e = e.into_owned();
                e["kind"] = json!("Event");
                e["apiVersion"] = json!("v1");
                e
            })
    }

    /// The fast path of [`Client::list`]: `None` when the path or selector needs the API.
    fn list_current(&self, path: &str, label_selector: &str, keep: &dyn Fn(&Value) -> bool) -> Option<Vec<Value>> {
        let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let (group, version, rest) = match segs.as_slice() {
            ["api", v, rest @ ..] => ("", *v, rest),
            ["apis", g, v, rest @ ..] => (*g, *v, rest),
            _ => return None,
        };
        let (namespace, resource) = match rest {
            ["namespaces", ns, res] => (*ns, *res),
            [res] => ("", *res),
            _ => return None,
        };
        if [namespace, resource].iter().any(|s| s.contains('%')) {
            return None;
        }
        let rt = self.state.registry.find(group, version, resource)?;
        if !rt.has_verb("list") || (!namespace.is_empty() && !rt.namespaced) {
            return None;
        }
        let labels = crate::selectors::LabelSelector::parse(label_selector).ok()?;
        let kind = json!(rt.kind);
        let api_version = json!(rt.api_version());
        let txn = self.state.store.lock();
        let key = rt.key();
        let objects: Box<dyn Iterator<Item = &Value>> = match &self.scope {
            Some(scope) if namespace.is_empty() && rt.namespaced => {
                Box::new(scope.iter().flat_map(|ns| txn.in_namespace(&key, ns)))
            }
            _ => txn.in_namespace(&key, namespace),
        };
        let mut items: Vec<(String, Value)> = objects
            .filter_map(|o| {
                let o = crate::admission::presented(&self.state, &rt, o);
                if !labels.matches_object(&o) || !keep(&o) {
                    return None;
                }
                let mut o = o.into_owned();
                let key = format!(
                    "{}/{}",
                    o["metadata"]["namespace"].as_str().unwrap_or_default(),
                    o["metadata"]["name"].as_str().unwrap_or_default()
                );
                if let Some(m) = o.as_object_mut() {
                    m.insert("kind".into(), kind.clone());
                    m.insert("apiVersion".into(), api_version.clone());
                }
                Some((key, o))
            })
            .collect();
        drop(txn);
        // The API orders items by "namespace/name" (the storage key).
        items.sort_by(|a, b| a.0.cmp(&b.0));
        Some(items.into_iter().map(|(_, o)| o).collect())
    }

    /// POST a new object.
    pub async fn create(&self, path: &str, obj: &Value) -> Result<Value, ApiError> {
        self.request(Method::POST, path, &[], Some(obj), "application/json").await
    }

    /// PUT an object (or its status with a `/status` path).
    pub async fn update(&self, path: &str, obj: &Value) -> Result<Value, ApiError> {
        self.request(Method::PUT, path, &[], Some(obj), "application/json").await
    }

    /// Merge-patch an object.
    pub async fn merge_patch(&self, path: &str, patch: &Value) -> Result<Value, ApiError> {
        self.request(Method::PATCH, path, &[], Some(patch), "application/merge-patch+json").await
    }

    /// Strategic-merge-patch an object.
    pub async fn strategic_patch(&self, path: &str, patch: &Value) -> Result<Value, ApiError> {
        self.request(Method::PATCH, path, &[], Some(patch), "application/strategic-merge-patch+json").await
    }

    /// DELETE an object (`grace`: gracePeriodSeconds, `propagation`: propagationPolicy).
    pub async fn delete(&self, path: &str, grace: Option<i64>, propagation: Option<&str>) -> Result<Value, ApiError> {
        let mut body = json!({"kind": "DeleteOptions", "apiVersion": "v1"});
        if let Some(g) = grace {
            body["gracePeriodSeconds"] = json!(g);
        }
        if let Some(p) = propagation {
            body["propagationPolicy"] = json!(p);
        }
        self.request(Method::DELETE, path, &[], Some(&body), "application/json").await
    }

    /// Record a core/v1 Event about `object` as kube-controller-manager's `component` does:
    /// named `<object>.<hex nanoseconds>`, `source.component` and `reportingComponent` set,
    /// `eventTime: null`; an identical event (same object, type, reason, message) is aggregated
    /// into the existing one (`count` + 1, `lastTimestamp`).
    pub async fn event(&self, object: &Value, type_: &str, reason: &str, message: &str, component: &str) {
        let ns = object["metadata"]["namespace"].as_str().unwrap_or("default").to_string();
        let name = object["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let involved = json!({
            "kind": object["kind"], "namespace": object["metadata"]["namespace"], "name": name,
            "uid": object["metadata"]["uid"], "apiVersion": object["apiVersion"],
            "resourceVersion": object["metadata"]["resourceVersion"],
        });
        let events_path = path("v1", "events", &ns, "", "");
        let now = crate::api::now();
        if let Some(mut e) = self.find_event(&ns, &involved["uid"], |e| {
            e["involvedObject"]["uid"] == involved["uid"]
                && e["reason"] == reason
                && e["message"] == message
                && e["type"] == type_
                && e["source"]["component"] == component
        }) {
            e["count"] = json!(e["count"].as_i64().unwrap_or(1) + 1);
            e["lastTimestamp"] = json!(now);
            let ename = e["metadata"]["name"].as_str().unwrap_or_default().to_string();
            let _ = self.update(&path("v1", "events", &ns, &ename, ""), &e).await;
            return;
        }
        let nanos = jiff::Timestamp::now().as_nanosecond();
        let ev = json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": format!("{name}.{nanos:x}"), "namespace": ns},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "source": {"component": component},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "type": type_,
            "eventTime": null,
            "reportingComponent": component,
            // Not sent: the server shows `reportingInstance: ""` anyway, and the real
            // kube-controller-manager's entry has no `f:reportingInstance`.
        });
        let _ = self.create(&events_path, &ev).await;
    }
}
