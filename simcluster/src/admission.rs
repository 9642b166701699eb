//! The per-kind hooks of the request pipeline: authorization, defaulting, validation, managed
//! fields, patch application, what a delete returns, and the reactions to writes (CRD
//! registration, garbage collection, namespace lifecycle).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::errors::{ApiError, Cause};
use crate::registry::ResourceType;
use crate::server::{Req, Target};
use crate::state::State;

fn is_crd(rt: &ResourceType) -> bool {
    rt.group == "apiextensions.k8s.io" && rt.resource == "customresourcedefinitions"
}

/// The CRD version serving a custom resource.
pub fn crd_version(state: &State, rt: &ResourceType) -> Option<crate::crd::CrdVersion> {
    let crds = state.crds.read().expect("crds lock");
    crds.values().find(|m| m.group == rt.group && m.plural == rt.resource).and_then(|m| m.version(&rt.version).cloned())
}

fn field_validation(req: &Req) -> crate::crd::FieldValidation {
    match req.q("fieldValidation") {
        Some("Strict") => crate::crd::FieldValidation::Strict,
        Some("Ignore") => crate::crd::FieldValidation::Ignore,
        _ => crate::crd::FieldValidation::Warn,
    }
}

/// The resources a CRD model serves.
pub fn crd_resources(model: &crate::crd::CrdModel) -> Vec<ResourceType> {
    model
        .versions
        .iter()
        .filter(|v| v.served)
        .map(|v| {
            let mut subresources = Vec::new();
            if v.scale_subresource.is_some() {
                subresources.push(crate::registry::Subresource {
                    name: "scale".into(),
                    group: "autoscaling".into(),
                    version: "v1".into(),
                    kind: "Scale".into(),
                    verbs: vec!["get".into(), "patch".into(), "update".into()],
                });
            }
            if v.status_subresource {
                subresources.push(crate::registry::Subresource {
                    name: "status".into(),
                    group: String::new(),
                    version: String::new(),
                    kind: model.kind.clone(),
                    verbs: vec!["get".into(), "patch".into(), "update".into()],
                });
            }
            ResourceType {
                group: model.group.clone(),
                version: v.name.clone(),
                resource: model.plural.clone(),
                singular: model.singular.clone(),
                kind: model.kind.clone(),
                namespaced: model.namespaced,
                verbs: ["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"]
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
                short_names: model.short_names.clone(),
                categories: model.categories.clone(),
                subresources,
                custom: true,
            }
        })
        .collect()
}

/// Check the user may do `verb` on the target.
pub fn authorize(state: &Arc<State>, req: &Req, t: &Target, verb: &str) -> Result<(), ApiError> {
    if crate::auth::is_admin(&req.user) {
        return Ok(());
    }
    let attrs = crate::rbac::Attributes {
        verb: verb.to_string(),
        api_group: t.rt.group.clone(),
        resource: t.rt.resource.clone(),
        subresource: t.sub.clone().unwrap_or_default(),
        namespace: t.namespace.clone(),
        name: t.name.clone().unwrap_or_default(),
    };
    let objects = crate::auth::PolicyObjects::load(state);
    if crate::rbac::authorize_reason(&req.user, &attrs, &objects.policy()).is_some() {
        Ok(())
    } else {
        Err(crate::rbac::forbidden(&req.user, &attrs))
    }
}

/// Requests that create nothing: access reviews and SelfSubjectReview.
pub fn virtual_create(state: &Arc<State>, req: &Req, t: &Target, body: &Value) -> Option<Result<Value, ApiError>> {
    let out = match (t.rt.group.as_str(), t.rt.resource.as_str()) {
        ("authorization.k8s.io", "selfsubjectaccessreviews") => {
            crate::rbac::self_subject_access_review(&req.user, body, &crate::auth::PolicyObjects::load(state).policy())
        }
        ("authorization.k8s.io", "subjectaccessreviews") => {
            crate::rbac::subject_access_review(body, &crate::auth::PolicyObjects::load(state).policy())
        }
        ("authentication.k8s.io", "selfsubjectreviews") => {
            Ok(crate::rbac::self_subject_review(&req.user, body, &state.clock.rfc3339()))
        }
        _ => return None,
    };
    Some(out.map(|mut v| {
        if t.rt.resource != "selfsubjectreviews" {
            let manager = crate::api::manager_of(req);
            let mut typed = body.clone();
            update_fields(state, None, &mut typed, &t.rt, &manager, None);
            if let Some(mf) = typed["metadata"].get("managedFields") {
                v["metadata"]["managedFields"] = mf.clone();
            }
        }
        v
    }))
}

/// POST to a subresource (`pods/binding`, `serviceaccounts/token`, ...).
pub fn subresource_create(state: &Arc<State>, req: &Req, t: &Target) -> Result<crate::api::Output, ApiError> {
    match (t.rt.group.as_str(), t.rt.resource.as_str(), t.sub.as_deref()) {
        ("", "serviceaccounts", Some("token")) => token_request(state, req, t),
        ("", "pods", Some("binding")) => bind_pod(state, req, t),
        _ => Err(ApiError::method_not_allowed("the server does not allow this method on the requested resource")),
    }
}

/// `pods/<name>/binding`: what the scheduler does: set `spec.nodeName` and `PodScheduled=True`
/// (no managedFields entry, as on a real server).
fn bind_pod(state: &Arc<State>, req: &Req, t: &Target) -> Result<crate::api::Output, ApiError> {
    let name = t.name.clone().unwrap_or_default();
    let body = crate::http::decode_body(req.header("Content-Type"), &req.body)?;
    let node = body["target"]["name"].as_str().unwrap_or_default().to_string();
    let mut txn = state.store.lock();
    let mut pod =
        txn.get(&t.rt.key(), &t.namespace, &name).cloned().ok_or_else(|| ApiError::not_found("", "pods", &name))?;
    if let Some(current) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
        return Err(ApiError::status(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on pods/binding \"{name}\": pod {name} is already assigned to node \"{current}\""
            ),
            Some(json!({"name": name, "kind": "pods/binding"})),
        ));
    }
    pod["spec"]["nodeName"] = json!(node);
    let mut conditions = pod["status"]["conditions"].as_array().cloned().unwrap_or_default();
    conditions.retain(|c| c["type"] != "PodScheduled");
    conditions.push(json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": state.clock.rfc3339()}));
    pod["status"]["conditions"] = json!(conditions);
    let rv = txn.next_rv();
    pod["metadata"]["resourceVersion"] = json!(rv.to_string());
    txn.put(&t.rt.key(), &t.namespace, &name, pod.clone(), rv);
    drop(txn);
    after_write(state, &t.rt, &pod);
    Ok(crate::api::Output::Value {
        code: 201,
        body: json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
        headers: vec![],
    })
}

/// `serviceaccounts/<name>/token`: a bearer token for the ServiceAccount (see [`crate::auth`]).
fn token_request(state: &Arc<State>, req: &Req, t: &Target) -> Result<crate::api::Output, ApiError> {
    let name = t.name.clone().unwrap_or_default();
    let sa = {
        let txn = state.store.lock();
        txn.get(&t.rt.key(), &t.namespace, &name).cloned()
    }
    .ok_or_else(|| ApiError::not_found("", "serviceaccounts", &name))?;
    let body = crate::http::decode_body(req.header("Content-Type"), &req.body)?;
    let expiration = body["spec"]["expirationSeconds"].as_i64().unwrap_or(3600).max(600);
    let audiences = match body["spec"]["audiences"].as_array() {
        Some(a) if !a.is_empty() => Value::Array(a.clone()),
        _ => json!(["https://kubernetes.default.svc.cluster.local"]),
    };
    let now = state.clock.now();
    let expires = now + jiff::SignedDuration::from_secs(expiration);
    let token = crate::auth::issue_token(state, &t.namespace, &name, expires.as_second());
    let mut doc = json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": t.namespace, "uid": sa["metadata"]["uid"], "creationTimestamp": state.clock.rfc3339()},
        "spec": body["spec"].clone(),
    });
    let time = state.clock.rfc3339();
    let manager = crate::api::manager_of(req);
    let mgr = crate::fieldmanager::Manager {
        name: &manager,
        operation: crate::fieldmanager::Operation::Update,
        subresource: Some("token"),
        api_version: "authentication.k8s.io/v1",
        time: &time,
    };
    if let Some(ty) = crate::schema::TypeNav::builtin("authentication.k8s.io/v1", "TokenRequest") {
        crate::fieldmanager::update(None, &mut doc, &mgr, &ty);
    }
    doc["spec"] = json!({"audiences": audiences, "expirationSeconds": expiration, "boundObjectRef": body["spec"].get("boundObjectRef").cloned().unwrap_or(Value::Null)});
    doc["status"] = json!({"token": token, "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()});
    Ok(crate::api::Output::Value { code: 201, body: doc, headers: vec![] })
}

/// An object as clients see it (conversions between API versions sharing storage).
/// Whether objects of this resource are converted on the way out (see [`present`]).
pub fn converts(rt: &ResourceType) -> bool {
    rt.resource == "events" && (rt.group.is_empty() || rt.group == "events.k8s.io")
}

/// [`present`] without a copy when nothing is converted.
pub fn presented<'a>(state: &State, rt: &ResourceType, obj: &'a Value) -> std::borrow::Cow<'a, Value> {
    if converts(rt) {
        std::borrow::Cow::Owned(present(state, rt, obj.clone()))
    } else {
        std::borrow::Cow::Borrowed(obj)
    }
}

/// An object as clients see it (conversions between API versions sharing storage).
pub fn present(_state: &State, rt: &ResourceType, obj: Value) -> Value {
    if rt.resource == "events" && (rt.group.is_empty() || rt.group == "events.k8s.io") {
        return crate::validation::event_for_version(&obj, &rt.api_version());
    }
    obj
}

/// How the real server refuses a field selector it does not support.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldLabelError {
    /// The kind's field label conversion function: `field label not supported: FIELD`.
    Conversion,
    /// The batch/v1 Job conversion function: `field label "FIELD" not supported for Job`.
    Job,
    /// No conversion function: `"FIELD" is not a known field selector: only "a", "b"`.
    Listed,
}

/// The field labels a resource can be selected by, as kube-apiserver v1.36 accepts them (its
/// field label conversion functions, `pkg/apis/*/v1/conversion.go`), and how it refuses others.
/// Namespaces, Nodes and CertificateSigningRequests do not take `metadata.namespace`; apps/v1
/// ReplicaSets take only the metadata fields.
pub fn field_labels(state: &State, rt: &ResourceType) -> (Vec<String>, FieldLabelError) {
    let meta = ["metadata.name", "metadata.namespace"];
    if rt.custom {
        let mut f: Vec<String> = meta.iter().map(|s| s.to_string()).collect();
        f.extend(crd_version(state, rt).map(|v| v.selectable_fields.clone()).unwrap_or_default());
        return (f, FieldLabelError::Listed);
    }
    let (f, style): (&[&str], _) = match (rt.group.as_str(), rt.resource.as_str()) {
        ("", "pods") => (
            &[
                "metadata.name",
                "metadata.namespace",
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIPs",
                "status.podIP",
                "status.nominatedNodeName",
            ],
            FieldLabelError::Conversion,
        ),
        ("", "events") => (
            &[
                "metadata.name",
                "metadata.namespace",
                "involvedObject.kind",
                "involvedObject.namespace",
                "involvedObject.name",
                "involvedObject.uid",
                "involvedObject.apiVersion",
                "involvedObject.resourceVersion",
                "involvedObject.fieldPath",
                "reason",
                "reportingComponent",
                "source",
                "type",
            ],
            FieldLabelError::Conversion,
        ),
        ("events.k8s.io", "events") => (
            &[
                "metadata.name",
                "metadata.namespace",
                "regarding.kind",
                "regarding.namespace",
                "regarding.name",
                "regarding.uid",
                "regarding.apiVersion",
                "regarding.resourceVersion",
                "regarding.fieldPath",
                "reason",
                "reportingController",
                "type",
            ],
            FieldLabelError::Conversion,
        ),
        ("", "secrets") => (&["metadata.name", "metadata.namespace", "type"], FieldLabelError::Conversion),
        ("", "namespaces") => (&["metadata.name", "status.phase"], FieldLabelError::Conversion),
        ("", "nodes") => (&["metadata.name", "spec.unschedulable"], FieldLabelError::Conversion),
        ("", "services") => {
            (&["metadata.name", "metadata.namespace", "spec.clusterIP", "spec.type"], FieldLabelError::Conversion)
        }
        ("", "replicationcontrollers") => {
            (&["metadata.name", "metadata.namespace", "status.replicas"], FieldLabelError::Conversion)
        }
        ("batch", "jobs") => (&["metadata.name", "metadata.namespace", "status.successful"], FieldLabelError::Job),
        ("certificates.k8s.io", "certificatesigningrequests") => {
            (&["metadata.name", "spec.signerName"], FieldLabelError::Conversion)
        }
        _ => (&meta, FieldLabelError::Listed),
    };
    (f.iter().map(|s| s.to_string()).collect(), style)
}

/// The value of a field label of an object as clients see it, as the kind's registry computes
/// its selectable fields (`ToSelectableFields`): booleans and counts the Go types always have
/// (`spec.hostNetwork=false`, `spec.unschedulable=false`, `status.replicas=0`), an Event's
/// `source` (its `source.component`, else its `reportingComponent`), a Job's
/// `status.successful` (its `status.succeeded`), a Pod's `status.podIP` (the first of
/// `status.podIPs`) and `status.podIPs` (accepted, never set: always empty).
pub fn field_label_value(rt: &ResourceType, obj: &Value, field: &str) -> String {
    use crate::selectors::field_value;
    let flag = |v: &Value| v.as_bool().unwrap_or(false).to_string();
    let count = |v: &Value| v.as_i64().unwrap_or(0).to_string();
    if rt.custom {
        return field_value(obj, field);
    }
    match (rt.group.as_str(), rt.resource.as_str(), field) {
        ("", "pods", "spec.hostNetwork") => flag(&obj["spec"]["hostNetwork"]),
        ("", "pods", "status.podIPs") => String::new(),
        ("", "pods", "status.podIP") => match obj["status"]["podIPs"][0]["ip"].as_str() {
            Some(ip) => ip.to_string(),
            None => field_value(obj, field),
        },
        ("", "events", "source") => {
            let component = field_value(obj, "source.component");
            if component.is_empty() { field_value(obj, "reportingComponent") } else { component }
        }
        ("", "nodes", "spec.unschedulable") => flag(&obj["spec"]["unschedulable"]),
        ("", "replicationcontrollers", "status.replicas") => count(&obj["status"]["replicas"]),
        ("batch", "jobs", "status.successful") => count(&obj["status"]["succeeded"]),
        _ => field_value(obj, field),
    }
}

fn name_causes(rt: &ResourceType, obj: &Value) -> Vec<Cause> {
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let gen_name = obj["metadata"]["generateName"].as_str().unwrap_or_default();
    if name.is_empty() {
        if gen_name.is_empty() {
            return vec![Cause::new(
                "FieldValueRequired",
                "Required value: name or generateName is required",
                "metadata.name",
            )];
        }
        return vec![];
    }
    let errs = if matches!(rt.resource.as_str(), "namespaces" | "services" | "serviceaccounts" | "nodes") {
        if rt.resource == "nodes" || rt.resource == "serviceaccounts" {
            crate::validation::names::dns1123_subdomain(name)
        } else {
            crate::validation::names::dns1123_label(name)
        }
    } else {
        crate::validation::names::dns1123_subdomain(name)
    };
    errs.into_iter()
        .map(|e| Cause::new("FieldValueInvalid", format!("Invalid value: \"{name}\": {e}"), "metadata.name"))
        .collect()
}

/// Defaulting and pruning before a create; returns `Warning` messages.
pub fn prepare_create(
    state: &Arc<State>,
    req: &Req,
    rt: &ResourceType,
    obj: &mut Value,
) -> Result<Vec<String>, ApiError> {
    check_options(req, "CreateOptions")?;
    let mut warnings = Vec::new();
    if !rt.custom {
        let av = rt.api_version();
        warnings = builtin_decode(req, rt, obj)?;
        crate::validation::check_decode(&av, &rt.kind, obj)?;
        crate::validation::default_object(&av, &rt.kind, obj);
        normalize_metadata(obj);
    }
    if is_crd(rt) && obj["spec"].get("conversion").is_none() {
        obj["spec"]["conversion"] = json!({"strategy": "None"});
    }
    if rt.subresource("status").is_some()
        && (rt.custom || is_crd(rt))
        && let Some(m) = obj.as_object_mut()
    {
        m.remove("status");
    }
    if is_crd(rt) {
        let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let model = crate::crd::parse(obj).map_err(|c| ApiError::invalid(&rt.group, &rt.kind, &name, &c))?;
        obj["status"] = crate::crd::initial_status(&model);
    }
    if rt.custom {
        return custom_prepare(state, req, rt, obj);
    }
    Ok(warnings)
}

/// Go drops empty lists and maps of metadata (omitempty).
pub fn normalize_metadata(obj: &mut Value) {
    if let Some(m) = obj["metadata"].as_object_mut() {
        for k in ["finalizers", "ownerReferences", "labels", "annotations", "managedFields"] {
            let empty = match m.get(k) {
                Some(Value::Array(a)) => a.is_empty(),
                Some(Value::Object(o)) => o.is_empty(),
                Some(Value::Null) => true,
                _ => false,
            };
            if empty {
                m.remove(k);
            }
        }
    }
}

/// Validate `dryRun` and `fieldValidation` query options.
pub fn check_options(req: &Req, kind: &str) -> Result<(), ApiError> {
    if let Some(d) = req.q("dryRun")
        && d != "All"
        && !d.is_empty()
    {
        let msg = format!("Unsupported value: [\"{d}\"]: supported values: \"All\"");
        return Err(ApiError::status(
            422,
            "Invalid",
            format!("{kind}.meta.k8s.io \"\" is invalid: dryRun: {msg}"),
            Some(
                json!({"group": "meta.k8s.io", "kind": kind, "causes": [{"reason": "FieldValueNotSupported", "message": msg, "field": "dryRun"}]}),
            ),
        ));
    }
    if let Some(v) = req.q("fieldValidation")
        && !matches!(v, "" | "Ignore" | "Strict" | "Warn")
    {
        let msg = format!("Unsupported value: \"{v}\": supported values: \"\", \"Ignore\", \"Strict\", \"Warn\"");
        return Err(ApiError::status(
            422,
            "Invalid",
            format!("{kind}.meta.k8s.io \"\" is invalid: fieldValidation: {msg}"),
            Some(
                json!({"group": "meta.k8s.io", "kind": kind, "causes": [{"reason": "FieldValueNotSupported", "message": msg, "field": "fieldValidation"}]}),
            ),
        ));
    }
    Ok(())
}

/// Decoding of a built-in object as Go's typed decoder does it: type mismatches are 400s,
/// unknown and duplicate fields are warnings (or 400s with `fieldValidation=Strict`), and
/// unknown fields are dropped.
fn builtin_decode(req: &Req, rt: &ResourceType, obj: &mut Value) -> Result<Vec<String>, ApiError> {
    let strict = req.q("fieldValidation") == Some("Strict");
    let ignore = req.q("fieldValidation") == Some("Ignore");
    let mut unknown = Vec::new();
    let mut type_error = None;
    with_type_nav_builtin(rt, |ty| crate::typecheck::check(ty, obj, &rt.kind, &mut unknown, &mut type_error));
    if let Some(e) = type_error {
        return Err(ApiError::bad_request(format!(
            "{} in version \"{}\" cannot be handled as a {}: {e}",
            rt.kind, rt.version, rt.kind
        )));
    }
    let mut problems: Vec<String> = unknown.iter().map(|p| format!("unknown field \"{p}\"")).collect();
    if let Some(dup) = crate::http::duplicate_field(&req.body) {
        problems.insert(0, format!("duplicate field \"{dup}\""));
    }
    if problems.is_empty() || ignore {
        return Ok(vec![]);
    }
    if strict {
        return Err(ApiError::bad_request(format!(
            "{} in version \"{}\" cannot be handled as a {}: strict decoding error: {}",
            rt.kind,
            rt.version,
            rt.kind,
            problems.join(", ")
        )));
    }
    Ok(problems.iter().map(|p| format!("299 - \"{}\"", p.replace('"', "\\\""))).collect())
}

fn with_type_nav_builtin<R>(rt: &ResourceType, f: impl FnOnce(&crate::schema::TypeNav) -> R) -> Option<R> {
    crate::schema::TypeNav::builtin(&rt.api_version(), &rt.kind).map(|t| f(&t))
}

fn custom_prepare(state: &State, req: &Req, rt: &ResourceType, obj: &mut Value) -> Result<Vec<String>, ApiError> {
    let Some(v) = crd_version(state, rt) else { return Ok(vec![]) };
    match v.default_and_prune(obj, field_validation(req)) {
        Ok(paths) => Ok(paths.iter().map(|p| crate::crd::unknown_field_warning(p)).collect()),
        Err(causes) => Err(ApiError::bad_request(crate::crd::strict_decoding_message(&rt.kind, &rt.version, &causes))),
    }
}

/// Validation of a new object.
pub fn validate_create(state: &Arc<State>, rt: &ResourceType, obj: &Value) -> Result<(), ApiError> {
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    if rt.custom {
        let mut causes = name_causes(rt, obj);
        if causes.is_empty()
            && let Some(v) = crd_version(state, rt)
        {
            causes = v.validate(obj, None);
        }
        if !causes.is_empty() {
            return Err(ApiError::invalid(&rt.group, &rt.kind, name, &causes));
        }
        return Ok(());
    }
    let av = rt.api_version();
    let causes = crate::validation::validate_create(&av, &rt.kind, obj);
    if !causes.is_empty() {
        return Err(crate::validation::invalid_error(&av, &rt.kind, name, &causes));
    }
    Ok(())
}

/// The cluster IPs and node ports the stored Services hold, brought up to date from the store's
/// history instead of visiting every Service on each Service write (at 10,000 Services that
/// visit took an eighth of the server's time).
#[derive(Default)]
pub struct ServiceAddresses {
    /// The resourceVersion it is current at (0: never filled).
    rv: u64,
    by_uid: std::collections::HashMap<String, (Vec<String>, Vec<i64>)>,
    /// Every IP and port held, with how many Services hold it.
    ip_count: std::collections::HashMap<String, u32>,
    port_count: std::collections::HashMap<i64, u32>,
    ips: std::collections::BTreeSet<String>,
    ports: std::collections::BTreeSet<i64>,
}

impl ServiceAddresses {
    fn hold(&mut self, ips: &[String], ports: &[i64]) {
        for ip in ips {
            *self.ip_count.entry(ip.clone()).or_default() += 1;
            self.ips.insert(ip.clone());
        }
        for p in ports {
            *self.port_count.entry(*p).or_default() += 1;
            self.ports.insert(*p);
        }
    }

    fn release(&mut self, ips: &[String], ports: &[i64]) {
        for ip in ips {
            if let Some(n) = self.ip_count.get_mut(ip) {
                *n -= 1;
                if *n == 0 {
                    self.ip_count.remove(ip);
                    self.ips.remove(ip);
                }
            }
        }
        for p in ports {
            if let Some(n) = self.port_count.get_mut(p) {
                *n -= 1;
                if *n == 0 {
                    self.port_count.remove(p);
                    self.ports.remove(p);
                }
            }
        }
    }

    fn forget(&mut self, uid: &str) {
        if let Some((ips, ports)) = self.by_uid.remove(uid) {
            self.release(&ips, &ports);
        }
    }

    fn set(&mut self, svc: &Value) {
        let uid = svc["metadata"]["uid"].as_str().unwrap_or_default().to_string();
        self.forget(&uid);
        let (ips, ports) = (crate::validation::service_cluster_ips(svc), crate::validation::service_node_ports(svc));
        self.hold(&ips, &ports);
        self.by_uid.insert(uid, (ips, ports));
    }

    /// Bring it up to `txn`'s resourceVersion: the Service changes since it was, or every
    /// Service when history no longer reaches back.
    fn refresh(&mut self, txn: &crate::store::Txn<'_>) {
        let now = txn.rv();
        match txn.changes_of_since("/services", self.rv).filter(|_| self.rv > 0) {
            Some(changes) => {
                for c in changes {
                    match c.kind {
                        crate::store::EventType::Deleted => {
                            self.forget(c.object["metadata"]["uid"].as_str().unwrap_or_default());
                        }
                        _ => self.set(&c.object),
                    }
                }
            }
            None => {
                *self = ServiceAddresses::default();
                for svc in txn.all("/services") {
                    self.set(svc);
                }
            }
        }
        self.rv = now;
    }
}

/// `f` of the cluster IPs and node ports the stored Services other than the one of uid
/// `except_uid` hold.
fn with_used_service_addresses<R>(
    state: &State,
    except_uid: &Value,
    f: impl FnOnce(&std::collections::BTreeSet<String>, &std::collections::BTreeSet<i64>) -> R,
) -> R {
    let txn = state.store.lock();
    let mut index = state.service_addresses.lock().unwrap_or_else(|p| p.into_inner());
    index.refresh(&txn);
    drop(txn);
    let except = except_uid.as_str().and_then(|u| index.by_uid.get(u).cloned());
    if let Some((ips, ports)) = &except {
        index.release(ips, ports);
    }
    let out = f(&index.ips, &index.ports);
    if let Some((ips, ports)) = &except {
        index.hold(ips, ports);
    }
    out
}

/// The strategy's preparation of a new object after identity and managed fields are set:
/// allocations, generation, initial status, admission defaults.
pub fn strategy_create(state: &Arc<State>, rt: &ResourceType, obj: &mut Value) -> Result<(), ApiError> {
    if rt.custom {
        return Ok(());
    }
    crate::webhook::default_configuration(rt, obj);
    let av = rt.api_version();
    if rt.group.is_empty() && rt.resource == "services" {
        // Before the index's lock: it is taken after the store's.
        let seed = state.store.lock().rv();
        let allocated = with_used_service_addresses(state, &Value::Null, |ips, ports| {
            crate::validation::allocate_service(obj, None, ips, ports, seed)
        });
        if let Err(causes) = allocated {
            let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
            return Err(crate::validation::invalid_error(&av, &rt.kind, &name, &causes));
        }
    }
    if rt.group.is_empty() && rt.resource == "nodes" {
        crate::kcm::node::admit_create(obj);
    }
    crate::validation::prepare_for_create(&av, &rt.kind, obj, &state.clock.rfc3339());
    // StorageObjectInUseProtection admission: pvc-/pv-protection finalizers.
    crate::kcm::pv::admit_create(&rt.group, &rt.resource, obj);
    // DefaultStorageClass admission: a claim without a class gets the default one.
    if rt.group.is_empty() && rt.resource == "persistentvolumeclaims" {
        crate::kcm::pv::admit_default_class(state, obj);
    }
    Ok(())
}

/// The strategy's preparation of an updated main resource (after managed fields are recorded).
pub fn strategy_update(state: &Arc<State>, rt: &ResourceType, obj: &mut Value, old: &Value) -> Result<(), ApiError> {
    if rt.custom {
        return Ok(());
    }
    crate::webhook::default_configuration(rt, obj);
    let av = rt.api_version();
    if rt.group.is_empty() && rt.resource == "services" {
        // Before the index's lock: it is taken after the store's.
        let seed = state.store.lock().rv();
        let allocated = with_used_service_addresses(state, &old["metadata"]["uid"], |ips, ports| {
            crate::validation::allocate_service(obj, Some(old), ips, ports, seed)
        });
        if let Err(causes) = allocated {
            let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
            return Err(crate::validation::invalid_error(&av, &rt.kind, &name, &causes));
        }
    }
    crate::validation::prepare_for_update(&av, &rt.kind, obj, old);
    Ok(())
}

/// Defaulting before an update; returns `Warning` messages.
pub fn prepare_update(
    state: &Arc<State>,
    req: &Req,
    rt: &ResourceType,
    new: &mut Value,
    _old: &Value,
) -> Result<Vec<String>, ApiError> {
    if is_crd(rt) {
        let name = new["metadata"]["name"].as_str().unwrap_or_default().to_string();
        crate::crd::parse(new).map_err(|c| ApiError::invalid(&rt.group, &rt.kind, &name, &c))?;
    }
    if !rt.custom {
        let av = rt.api_version();
        crate::validation::check_decode(&av, &rt.kind, new)?;
        crate::validation::default_object(&av, &rt.kind, new);
    }
    if !rt.custom {
        normalize_metadata(new);
    }
    if rt.custom {
        return custom_prepare(state, req, rt, new);
    }
    Ok(vec![])
}

/// Validation of an update.
pub fn validate_update(state: &Arc<State>, rt: &ResourceType, new: &Value, old: &Value) -> Result<(), ApiError> {
    let name = new["metadata"]["name"].as_str().unwrap_or_default();
    if rt.custom {
        if let Some(v) = crd_version(state, rt) {
            let causes = v.validate(new, Some(old));
            if !causes.is_empty() {
                return Err(ApiError::invalid(&rt.group, &rt.kind, name, &causes));
            }
        }
        return Ok(());
    }
    let av = rt.api_version();
    let causes = crate::validation::validate_update(&av, &rt.kind, new, old);
    if !causes.is_empty() {
        return Err(crate::validation::invalid_error(&av, &rt.kind, name, &causes));
    }
    Ok(())
}

/// Split an object into the part a write to `sub` manages and the rest: status writes manage
/// `status`; main writes manage everything but `status` when the resource has a status
/// subresource.
fn split_for(rt: &ResourceType, sub: Option<&str>, obj: &Value) -> (Value, serde_json::Map<String, Value>) {
    let mut managed = obj.clone();
    let mut rest = serde_json::Map::new();
    let Some(m) = managed.as_object_mut() else { return (managed, rest) };
    match sub {
        Some("status") => {
            let keys: Vec<String> = m
                .keys()
                .filter(|k| !matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status"))
                .cloned()
                .collect();
            for k in keys {
                if let Some(v) = m.remove(&k) {
                    rest.insert(k, v);
                }
            }
        }
        _ => {
            if rt.subresource("status").is_some()
                && let Some(v) = m.remove("status")
            {
                rest.insert("status".into(), v);
            }
        }
    }
    (managed, rest)
}

/// Run `f` with the type of a resource's objects.
pub fn with_type_nav<R>(state: &State, rt: &ResourceType, f: impl FnOnce(&crate::schema::TypeNav) -> R) -> R {
    if rt.custom
        && let Some(v) = crd_version(state, rt)
    {
        return f(&crate::schema::TypeNav::new(&v.schema));
    }
    match crate::schema::TypeNav::builtin(&rt.api_version(), &rt.kind) {
        Some(t) => f(&t),
        None => f(&crate::schema::TypeNav::untyped()),
    }
}

/// Record an Update operation's managed fields.
pub fn update_fields(
    state: &State,
    old: Option<&Value>,
    new: &mut Value,
    rt: &ResourceType,
    manager: &str,
    sub: Option<&str>,
) {
    let time = state.clock.rfc3339();
    let api_version = rt.api_version();
    let mgr = crate::fieldmanager::Manager {
        name: manager,
        operation: crate::fieldmanager::Operation::Update,
        subresource: sub,
        api_version: &api_version,
        time: &time,
    };
    let old_part = old.map(|o| split_for(rt, sub, o).0);
    let (mut new_part, _) = split_for(rt, sub, new);
    with_type_nav(state, rt, |ty| crate::fieldmanager::update(old_part.as_ref(), &mut new_part, &mgr, ty));
    match new_part["metadata"].get("managedFields") {
        Some(mf) if !mf.is_null() => new["metadata"]["managedFields"] = mf.clone(),
        _ => {
            if let Some(m) = new["metadata"].as_object_mut() {
                m.remove("managedFields");
            }
        }
    }
}

/// Server-side apply of `config` over `live` (None: create; `base` is then the new object's
/// identity). Returns the object to store, with managedFields.
#[allow(
    clippy::too_many_arguments,
    reason = "the inputs of one apply request as the handler has them (request, stored object, target); bundling them would only rename them"
)]
pub fn apply_fields(
    state: &State,
    live: Option<&Value>,
    base: Value,
    config: &Value,
    rt: &ResourceType,
    manager: &str,
    sub: Option<&str>,
    force: bool,
) -> Result<Value, ApiError> {
    let time = state.clock.rfc3339();
    let api_version = rt.api_version();
    let mgr = crate::fieldmanager::Manager {
        name: manager,
        operation: crate::fieldmanager::Operation::Apply,
        subresource: sub,
        api_version: &api_version,
        time: &time,
    };
    let (config_part, _) = split_for(rt, sub, config);
    let (live_part, rest) = match live {
        Some(l) => {
            let (p, r) = split_for(rt, sub, l);
            (Some(p), r)
        }
        None => (None, serde_json::Map::new()),
    };
    let name = base["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let result = with_type_nav(state, rt, |ty| {
        if ty.is_builtin()
            && let Err(e) = ty.check_declared(&config_part)
        {
            return Err(ApiError::status(
                500,
                "",
                format!("failed to create typed patch object (/{name}; {}, Kind={}): {e}", gvk_string(rt), rt.kind),
                None,
            ));
        }
        let live_or_base = live_part.clone().unwrap_or_else(|| base.clone());
        let live_arg = if live.is_some() { Some(&live_or_base) } else { None };
        let mut cfg = config_part.clone();
        if live.is_none() {
            // The new object's identity (namespace) is part of what is created.
            if let (Some(c), Some(b)) = (cfg["metadata"].as_object_mut(), base["metadata"].as_object()) {
                for (k, v) in b {
                    c.entry(k.clone()).or_insert(v.clone());
                }
            }
        }
        crate::fieldmanager::apply(live_arg, &cfg, &mgr, force, ty).map_err(|conflicts| {
            let (message, causes) = crate::fieldmanager::conflict_status(&conflicts);
            ApiError::status(409, "Conflict", message, Some(json!({"causes": causes})))
        })
    })?;
    let mut out = result;
    if let Some(m) = out.as_object_mut() {
        for (k, v) in rest {
            m.insert(k, v);
        }
    }
    Ok(out)
}

fn gvk_string(rt: &ResourceType) -> String {
    if rt.group.is_empty() { format!("/{}", rt.version) } else { format!("{}/{}", rt.group, rt.version) }
}

/// Patch types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchKind {
    /// RFC 6902.
    Json,
    /// RFC 7386.
    Merge,
    /// Strategic merge patch.
    Strategic,
    /// Server-side apply.
    Apply,
}

/// Apply a non-apply patch.
pub fn patch_object(
    state: &State,
    rt: &ResourceType,
    old: &Value,
    body: &[u8],
    kind: PatchKind,
) -> Result<Value, ApiError> {
    let patch: Value = serde_json::from_slice(body).map_err(|e| ApiError::bad_request(patch_decode_error(kind, &e)))?;
    match kind {
        PatchKind::Merge => {
            if !patch.is_object() {
                return Err(ApiError::bad_request(
                    "json: cannot unmarshal array into Go value of type map[string]interface {}",
                ));
            }
            Ok(crate::fieldmanager::merge_patch(old, &patch))
        }
        PatchKind::Json => crate::fieldmanager::json_patch(old, &patch).map_err(ApiError::from),
        PatchKind::Strategic => {
            if rt.custom {
                return Err(ApiError::status(
                    415,
                    "UnsupportedMediaType",
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
                    None,
                ));
            }
            with_type_nav(state, rt, |ty| crate::fieldmanager::strategic_merge_patch(old, &patch, ty))
                .map_err(ApiError::from)
        }
        PatchKind::Apply => Err(ApiError::internal("apply is not a plain patch")),
    }
}

fn patch_decode_error(_kind: PatchKind, e: &serde_json::Error) -> String {
    format!("error decoding patch: {e}")
}

/// Checks of an applied configuration before it is merged.
pub fn check_applied(rt: &ResourceType, name: &str, config: &Value) -> Result<(), ApiError> {
    let av = config["apiVersion"].as_str().unwrap_or_default();
    let kind = config["kind"].as_str().unwrap_or_default();
    if av != rt.api_version() || kind != rt.kind {
        let (g, v) = crate::registry::split_api_version(av);
        return Err(ApiError::bad_request(format!("invalid object type: {g}/{v}, Kind={kind}")));
    }
    if let Some(n) = config["metadata"]["name"].as_str()
        && n != name
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({n}) does not match the name on the URL ({name})"
        )));
    }
    Ok(())
}

/// Whether an update (PUT) must carry the object's `metadata.resourceVersion`: every custom
/// resource, and the built-in kinds whose registry strategy refuses unconditional updates (each
/// checked against kube-apiserver v1.36.2; the others, ConfigMaps, Secrets, Deployments, RBAC,
/// Services and most more, take a PUT without one as "overwrite").
pub fn requires_resource_version_on_update(rt: &ResourceType) -> bool {
    rt.custom
        || matches!(
            (rt.group.as_str(), rt.resource.as_str()),
            ("coordination.k8s.io", "leases")
                | (
                    "admissionregistration.k8s.io",
                    "mutatingwebhookconfigurations"
                        | "validatingwebhookconfigurations"
                        | "validatingadmissionpolicies"
                        | "validatingadmissionpolicybindings"
                )
                | ("apiextensions.k8s.io", "customresourcedefinitions")
                | ("node.k8s.io", "runtimeclasses")
                | ("policy", "poddisruptionbudgets")
                | ("storage.k8s.io", "csidrivers")
        )
}

/// Whether PUT creates a missing object.
pub fn allow_create_on_update(_rt: &ResourceType) -> bool {
    false
}

/// Default deletion propagation.
///
/// CRDs are held by `customresourcecleanup.apiextensions.k8s.io` until their objects are gone.
pub fn default_propagation(_rt: &ResourceType) -> &'static str {
    "Background"
}

/// Finalizers the server adds when an object is deleted.
pub fn deletion_finalizers(rt: &ResourceType) -> Vec<String> {
    if is_crd(rt) { vec!["customresourcecleanup.apiextensions.k8s.io".into()] } else { vec![] }
}

/// Whether a delete only marks the object (spec finalizers of namespaces).
pub fn held_on_delete(rt: &ResourceType, obj: &Value) -> bool {
    rt.group.is_empty()
        && rt.resource == "namespaces"
        && obj["spec"]["finalizers"].as_array().is_some_and(|f| !f.is_empty())
}

/// Kind-specific changes when an object starts deleting.
pub fn mark_deleting(rt: &ResourceType, obj: &mut Value) {
    if is_crd(rt)
        && let Some(m) = obj["metadata"].as_object_mut()
    {
        m.remove("deletionGracePeriodSeconds");
    }
    if rt.group.is_empty() && rt.resource == "namespaces" {
        obj["status"]["phase"] = json!("Terminating");
        if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("deletionGracePeriodSeconds");
        }
    }
}

/// The grace period a delete starts, if the kind deletes gracefully.
///
/// A Pod bound to a node that has not finished is deleted gracefully: it gets a
/// `deletionGracePeriodSeconds` (the request's, else its `terminationGracePeriodSeconds`, else
/// 30) and stays until the kubelet deletes it with `gracePeriodSeconds=0`.
pub fn graceful_delete(rt: &ResourceType, obj: &Value, grace: Option<i64>) -> Option<i64> {
    if !(rt.group.is_empty() && rt.resource == "pods") || grace == Some(0) {
        return None;
    }
    let bound = obj["spec"]["nodeName"].as_str().is_some_and(|n| !n.is_empty());
    let finished = matches!(obj["status"]["phase"].as_str(), Some("Succeeded" | "Failed"));
    if !bound || finished {
        return None;
    }
    Some(grace.or(obj["spec"]["terminationGracePeriodSeconds"].as_i64()).unwrap_or(30))
}

/// The body of a completed delete.
pub fn delete_response(rt: &ResourceType, last: Value, status: Value) -> Value {
    if (rt.group.is_empty() && matches!(rt.resource.as_str(), "namespaces" | "pods" | "services")) || is_crd(rt) {
        return crate::api::with_type(rt, last);
    }
    status
}

/// React to a stored write.
pub fn after_write(state: &Arc<State>, rt: &ResourceType, obj: &Value) {
    if is_crd(rt) {
        crd_changed(state, obj);
    }
    crate::controllers::notify(state, rt, obj);
}

/// React to a removal.
pub fn after_delete(state: &Arc<State>, rt: &ResourceType, obj: &Value) {
    if is_crd(rt) {
        let name = obj["metadata"]["name"].as_str().unwrap_or_default();
        state.crds.write().expect("crds lock").remove(name);
        state.registry.remove_custom(name);
    }
    crate::controllers::notify_removed(state);
}

/// A CRD was written: (re)register what it serves and establish it.
fn crd_changed(state: &Arc<State>, obj: &Value) {
    let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let Ok(model) = crate::crd::parse(obj) else { return };
    if obj["metadata"]["deletionTimestamp"].is_string() {
        return;
    }
    state.registry.set_custom(&name, crd_resources(&model));
    let established = obj["status"]["conditions"]
        .as_array()
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Established" && c["status"] == "True"));
    let accepted = crate::crd::accepted_status(&model, &state.clock.rfc3339());
    state.crds.write().expect("crds lock").insert(name, model);
    if !established {
        let mut new = obj.clone();
        new["status"] = accepted;
        if let Some(rt) = state.registry.find("apiextensions.k8s.io", "v1", "customresourcedefinitions") {
            crate::controllers::controller_update(state, &rt, new, "kube-apiserver", Some("status"));
        }
    }
}

/// Table of custom resources from their CRD's printer columns.
pub fn custom_table(
    state: &Arc<State>,
    rt: &ResourceType,
    objects: &[Value],
    include: crate::negotiate::IncludeObject,
    list_meta: Value,
) -> Option<Value> {
    let v = crd_version(state, rt)?;
    let include = match include {
        crate::negotiate::IncludeObject::None => crate::crd::IncludeObject::None,
        crate::negotiate::IncludeObject::Metadata => crate::crd::IncludeObject::Metadata,
        crate::negotiate::IncludeObject::Object => crate::crd::IncludeObject::Object,
    };
    Some(v.table(objects, include, list_meta))
}

/// The form an object is stored in (events.k8s.io Events are stored as core Events).
pub fn to_storage(rt: &ResourceType, obj: Value) -> Value {
    if rt.group == "events.k8s.io" && rt.resource == "events" {
        return crate::validation::events_v1_to_core(&obj);
    }
    obj
}
