//! Validation and defaulting of built-in objects, as the real kube-apiserver does them, with
//! its exact messages and field paths. Pure functions over JSON objects.
//!
//! The real request flow, and where each function fits (create / update):
//! 1. decode: [`check_decode`] (400 for malformed MicroTime/Time strings and base64 bytes);
//! 2. scheme defaulting: [`default_object`] — its results count as the request's fields (they
//!    appear in an Update's managedFields, e.g. `f:progressDeadlineSeconds`, `f:type` of a
//!    Secret, `f:protocol` of Service ports);
//! 3. the field manager runs (not here);
//! 4. on create, `generateName` is resolved by the store (validation messages then use the
//!    generated name, as recorded);
//! 5. Services only: [`allocate_service`] (cluster IP, node ports, IP families; 422 causes on
//!    conflicts);
//! 6. [`prepare_for_create`] / [`prepare_for_update`]: the strategy's preparation (status reset
//!    or kept, generation, Namespace finalizer, Pod admission defaults...) — never in
//!    managedFields;
//! 7. [`validate_create`] / [`validate_update`]; a non-empty result becomes
//!    [`invalid_error`] (422).
//!
//! Kinds without specific rules get the generic metadata validation only (DNS-1123 subdomain
//! names, labels, annotations, finalizers, owner references).

mod decode;
mod events;
mod field;
mod kinds;
pub(crate) mod names;
mod pods;
mod service;
mod workloads;

use serde_json::{Value, json};

use crate::errors::{ApiError, Cause};

pub use events::{EVENTS_V1, core_to_events_v1, event_for_version, events_v1_to_core};
pub use service::{
    NODE_PORT_RANGE, SERVICE_CIDR, allocate_cluster_ip, allocate_node_port, allocate_service, service_cluster_ips,
    service_node_ports,
};

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("")
}

/// Whether a built-in kind is cluster-scoped (`false` for unknown kinds).
pub fn is_cluster_scoped(kind: &str) -> bool {
    matches!(
        kind,
        "Namespace"
            | "Node"
            | "PersistentVolume"
            | "ClusterRole"
            | "ClusterRoleBinding"
            | "CustomResourceDefinition"
            | "StorageClass"
            | "PriorityClass"
            | "APIService"
            | "MutatingWebhookConfiguration"
            | "ValidatingWebhookConfiguration"
            | "ValidatingAdmissionPolicy"
            | "ValidatingAdmissionPolicyBinding"
            | "CSIDriver"
            | "CSINode"
            | "VolumeAttachment"
            | "RuntimeClass"
            | "IngressClass"
            | "CertificateSigningRequest"
            | "FlowSchema"
            | "PriorityLevelConfiguration"
            | "IPAddress"
            | "ServiceCIDR"
    )
}

/// Time fields of a kind: (JSON pointer, is MicroTime).
fn time_fields(api_version: &str, kind: &str) -> Vec<(&'static str, bool)> {
    let mut out = vec![("/metadata/creationTimestamp", false), ("/metadata/deletionTimestamp", false)];
    match (api_version, kind) {
        ("coordination.k8s.io/v1", "Lease") => {
            out.extend([("/spec/acquireTime", true), ("/spec/renewTime", true)]);
        }
        ("v1", "Event") => out.extend([
            ("/eventTime", true),
            ("/series/lastObservedTime", true),
            ("/firstTimestamp", false),
            ("/lastTimestamp", false),
        ]),
        (EVENTS_V1, "Event") => out.extend([
            ("/eventTime", true),
            ("/series/lastObservedTime", true),
            ("/deprecatedFirstTimestamp", false),
            ("/deprecatedLastTimestamp", false),
        ]),
        _ => {}
    }
    out
}

/// The decoding errors of the real server for typed fields stricter than JSON strings:
/// `Lease in version "v1" cannot be handled as a Lease: parsing time "2026-01-01T00:00:30Z" as
/// "2006-01-02T15:04:05.000000Z07:00": cannot parse "Z" as ".000000"` (MicroTime needs exactly six
/// fractional digits; `metav1.Time` fields are RFC 3339), and `Secret in version "v1" cannot be
/// handled as a Secret: illegal base64 data at input byte 3` (Secret `data`, ConfigMap
/// `binaryData`). 400 BadRequest.
pub fn check_decode(api_version: &str, kind: &str, obj: &Value) -> Result<(), ApiError> {
    let fail = |why: String| Err(ApiError::bad_request(decode::decode_message(api_version, kind, &why)));
    for (ptr, micro) in time_fields(api_version, kind) {
        match obj.pointer(ptr) {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => {
                let layout = if micro { decode::RFC3339_MICRO } else { decode::RFC3339 };
                if let Err(why) = decode::parse_go_time(s, layout) {
                    return fail(why);
                }
            }
            Some(other) => {
                let ty = match other {
                    Value::Bool(_) => "bool",
                    Value::Number(_) => "number",
                    Value::Array(_) => "array",
                    _ => "object",
                };
                return fail(format!("json: cannot unmarshal {ty} into Go value of type string"));
            }
        }
    }
    let bytes_field = match (api_version, kind) {
        ("v1", "Secret") => Some("data"),
        ("v1", "ConfigMap") => Some("binaryData"),
        _ => None,
    };
    if let Some(f) = bytes_field
        && let Some(m) = obj.get(f).and_then(Value::as_object)
    {
        for v in m.values() {
            if let Some(s) = v.as_str()
                && let Err(why) = decode::decode_base64(s)
            {
                return fail(why);
            }
        }
    }
    Ok(())
}

fn normalize_times(api_version: &str, kind: &str, obj: &mut Value) {
    for (ptr, micro) in time_fields(api_version, kind) {
        let Some(v) = obj.pointer_mut(ptr) else { continue };
        let Some(s) = v.as_str() else { continue };
        let layout = if micro { decode::RFC3339_MICRO } else { decode::RFC3339 };
        if let Ok(t) = decode::parse_go_time(s, layout) {
            *v = Value::String(if micro { t.format_micros() } else { t.format_seconds() });
        }
    }
}

/// Scheme defaulting and decode-time normalization, in the request's version: Secret
/// (`type: Opaque`, `stringData` folded into base64 `data`), canonical base64 and UTC time
/// strings, Namespace (`kubernetes.io/metadata.name` label forced), Service (type, session
/// affinity, port protocol and targetPort, traffic policies), Pods and pod templates of
/// Deployment / ReplicaSet / StatefulSet / DaemonSet / Job / CronJob (restartPolicy,
/// terminationGracePeriodSeconds, dnsPolicy, securityContext, schedulerName, container
/// terminationMessage*, imagePullPolicy, resources, port protocol, probes), the workload
/// specs' own defaults, PV/PVC volumeMode. Apply to the object as it will be stored, on create
/// and on update (after patches are applied). Objects that are not JSON objects are left alone.
pub fn default_object(api_version: &str, kind: &str, obj: &mut Value) {
    if !obj.is_object() {
        return;
    }
    normalize_times(api_version, kind, obj);
    match (group_of(api_version), kind) {
        ("", "Secret") => kinds::default_secret(obj),
        ("", "ConfigMap") => kinds::canonicalize_bytes_map(obj, "binaryData"),
        ("", "Namespace") => kinds::default_namespace(obj),
        ("", "Service") => service::default_service(obj),
        ("", "Pod" | "PodTemplate" | "ReplicationController" | "PersistentVolumeClaim" | "PersistentVolume")
        | ("apps", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet")
        | ("batch", "Job" | "CronJob")
        | ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration") => workloads::default_workload(kind, obj),
        _ => {}
    }
}

/// The strategy's create preparation (after defaulting, name generation and, for Services,
/// [`allocate_service`]; before [`validate_create`]): `metadata.generation: 1` for kinds that
/// carry one; status reset (`Deployment: {}`, `StatefulSet: {replicas: 0, availableReplicas: 0}`,
/// Service `{loadBalancer: {}}`, Namespace `{phase: Active}` plus the `kubernetes` finalizer,
/// PVC/PV `Pending`, Pod `{phase: Pending, qosClass}`); Pod admission defaults (service account
/// `default`, the two 300 s NoExecute tolerations, priority 0); Job selector and labels (needs
/// `metadata.uid` already set). `now`: RFC 3339 seconds, for PV `lastPhaseTransitionTime`.
pub fn prepare_for_create(api_version: &str, kind: &str, obj: &mut Value, now: &str) {
    if !obj.is_object() {
        return;
    }
    let group = group_of(api_version);
    let builtin = matches!(
        group,
        "" | "apps"
            | "batch"
            | "policy"
            | "autoscaling"
            | "networking.k8s.io"
            | "apiextensions.k8s.io"
            | "flowcontrol.apiserver.k8s.io"
    );
    if builtin
        && workloads::has_generation(kind)
        && let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut)
    {
        meta.insert("generation".into(), json!(1));
    }
    if builtin && let Some(status) = workloads::initial_status(kind) {
        obj["status"] = status;
    }
    match (group, kind) {
        ("", "Namespace") => kinds::prepare_namespace_create(obj),
        ("", "Service") => service::prepare_service_create(obj),
        ("", "Pod") => workloads::prepare_pod_create(obj),
        ("", "PersistentVolume") => workloads::prepare_pv_create(obj, now),
        ("batch", "Job") => workloads::prepare_job_create(obj),
        ("discovery.k8s.io", "EndpointSlice") => {
            if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.insert("generation".into(), json!(1));
            }
        }
        _ => {}
    }
}

/// Kinds whose main resource ignores `status` on update (they have a status subresource).
fn has_status_subresource(group: &str, kind: &str) -> bool {
    matches!(
        (group, kind),
        (
            "",
            "Namespace"
                | "Service"
                | "Pod"
                | "Node"
                | "PersistentVolume"
                | "PersistentVolumeClaim"
                | "ReplicationController"
        ) | ("apps", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet")
            | ("batch", "Job" | "CronJob")
    )
}

/// The strategy's update preparation of the main resource (after defaulting and, for
/// Services, [`allocate_service`]; before [`validate_update`]): system metadata kept from `old`
/// (uid when absent, creationTimestamp, deletionTimestamp and deletionGracePeriodSeconds when
/// absent, generation — bumped when `spec` changed, or a Deployment's annotations), `status`
/// kept for kinds with a status subresource, Namespace `spec.finalizers` kept and name label
/// forced, Service node ports released on a type change, DaemonSet template generation.
pub fn prepare_for_update(api_version: &str, kind: &str, obj: &mut Value, old: &Value) {
    if !obj.is_object() {
        return;
    }
    let group = group_of(api_version);
    if let (Some(meta), Some(old_meta)) = (obj.get_mut("metadata").and_then(Value::as_object_mut), old.get("metadata"))
    {
        for (k, only_if_absent) in [
            ("uid", true),
            ("creationTimestamp", false),
            ("deletionTimestamp", true),
            ("deletionGracePeriodSeconds", true),
            ("generation", false),
        ] {
            let absent = meta.get(k).is_none_or(|v| v.is_null() || *v == "");
            match old_meta.get(k) {
                Some(v) if !v.is_null() && (absent || !only_if_absent) => {
                    meta.insert(k.into(), v.clone());
                }
                None if !only_if_absent => {
                    meta.remove(k);
                }
                _ => {}
            }
        }
    }
    if (group, kind) == ("", "Pod")
        && let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut)
    {
        pods::default_tolerations(spec);
    }
    let spec_changed = obj.get("spec") != old.get("spec")
        || (kind == "Deployment" && obj.pointer("/metadata/annotations") != old.pointer("/metadata/annotations"));
    if spec_changed
        && let Some(g) = old.pointer("/metadata/generation").and_then(Value::as_i64)
        && let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut)
    {
        meta.insert("generation".into(), json!(g + 1));
    }
    if has_status_subresource(group, kind)
        && let Some(o) = obj.as_object_mut()
    {
        match old.get("status") {
            Some(s) => o.insert("status".into(), s.clone()),
            None => o.remove("status"),
        };
    }
    match (group, kind) {
        ("", "Namespace") => kinds::prepare_namespace_update(obj, old),
        ("", "Service") => service::prepare_service_update(obj, old),
        ("apps", "DaemonSet") => {
            let key = "deprecated.daemonset.template.generation";
            let old_gen = old
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(key))
                .and_then(Value::as_str)
                .and_then(|s| s.parse::<i64>().ok())
                .unwrap_or(1);
            let changed = obj.pointer("/spec/template") != old.pointer("/spec/template");
            let gen_now = if changed { old_gen + 1 } else { old_gen };
            if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
                let ann = meta.entry("annotations").or_insert_with(|| json!({}));
                if let Some(ann) = ann.as_object_mut() {
                    ann.insert(key.into(), json!(gen_now.to_string()));
                }
            }
        }
        ("discovery.k8s.io", "EndpointSlice") => {
            // The generation counts changes to anything but metadata, and to labels.
            let content = |v: &Value| -> Value {
                let mut m = v.as_object().cloned().unwrap_or_default();
                m.retain(|k, v| !matches!(k.as_str(), "metadata" | "apiVersion" | "kind") && !v.is_null());
                Value::Object(m)
            };
            let changed =
                content(obj) != content(old) || obj.pointer("/metadata/labels") != old.pointer("/metadata/labels");
            if changed
                && let Some(g) = old.pointer("/metadata/generation").and_then(Value::as_i64)
                && let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut)
            {
                meta.insert("generation".into(), json!(g + 1));
            }
        }
        _ => {}
    }
}

fn generic_meta(obj: &Value, kind: &str) -> Vec<Cause> {
    names::validate_object_meta(obj, !is_cluster_scoped(kind), names::NameRule::PathSegment, false)
}

fn strategy_create(api_version: &str, kind: &str, obj: &Value) -> Vec<Cause> {
    match (group_of(api_version), kind) {
        ("", "ConfigMap") => kinds::validate_config_map(obj),
        ("", "Secret") => kinds::validate_secret(obj),
        ("", "ServiceAccount") => kinds::validate_service_account(obj),
        ("", "Namespace") => kinds::validate_namespace(obj),
        ("", "Service") => service::validate_service(obj),
        ("", "Event") | ("events.k8s.io", "Event") => events::validate_event(api_version, obj),
        ("coordination.k8s.io", "Lease") => kinds::validate_lease(obj),
        ("", "Pod") => {
            let mut errs = workloads::validate_workload(kind, obj);
            errs.extend(pods::validate_pod_spec(obj.get("spec").unwrap_or(&Value::Null)));
            errs
        }
        ("apps", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet") | ("batch", "Job") => {
            workloads::validate_workload(kind, obj)
        }
        ("rbac.authorization.k8s.io", _) => {
            names::validate_object_meta(obj, !is_cluster_scoped(kind), names::NameRule::PathSegment, false)
        }
        ("", "Node" | "PersistentVolume" | "PersistentVolumeClaim") => {
            names::validate_object_meta(obj, !is_cluster_scoped(kind), names::NameRule::Subdomain, true)
        }
        _ => names::validate_object_meta(obj, !is_cluster_scoped(kind), names::NameRule::Subdomain, false),
    }
}

/// Validation of a new object (after [`prepare_for_create`]): the kind's own rules; if they
/// pass, the generic metadata rules the real server runs afterwards. Causes in the real order.
pub fn validate_create(api_version: &str, kind: &str, obj: &Value) -> Vec<Cause> {
    let errs = strategy_create(api_version, kind, obj);
    if !errs.is_empty() {
        return errs;
    }
    generic_meta(obj, kind)
}

/// Validation of an update (after [`prepare_for_update`]): the generic metadata rules
/// (`ValidateObjectMeta` + `ValidateObjectMetaUpdate`), then the kind's update rules — which
/// repeat the metadata update rules, so a metadata error is listed twice, as on a real server
/// (its message only once, see [`invalid_error`]). The resourceVersion is not checked here.
pub fn validate_update(api_version: &str, kind: &str, obj: &Value, old: &Value) -> Vec<Cause> {
    let mut errs = generic_meta(obj, kind);
    errs.extend(names::validate_object_meta_update(obj, old));
    let strategy = match (group_of(api_version), kind) {
        ("", "ConfigMap") => kinds::validate_config_map_update(obj, old),
        ("", "Secret") => kinds::validate_secret_update(obj, old),
        ("", "ServiceAccount") => kinds::validate_service_account_update(obj, old),
        ("", "Namespace") => kinds::validate_namespace_update(obj, old),
        ("", "Service") => service::validate_service_update(obj, old),
        ("", "Event") | ("events.k8s.io", "Event") => events::validate_event_update(api_version, obj, old),
        ("coordination.k8s.io", "Lease") => kinds::validate_lease_update(obj, old),
        ("", "Pod") => {
            let mut e = names::validate_object_meta_update(obj, old);
            e.extend(strategy_create(api_version, kind, obj));
            e.extend(pods::validate_pod_update(obj, old));
            e
        }
        _ => {
            let mut e = names::validate_object_meta_update(obj, old);
            e.extend(strategy_create(api_version, kind, obj));
            e
        }
    };
    errs.extend(strategy);
    errs
}

/// The 422 Invalid error for `causes`, as the real server builds it: `<Kind>[.<group>] "<name>"
/// is invalid: <field>: <message>` (several: `[a, b]`, identical messages once, causes all
/// listed), `details` without `name` when the name is empty. Events of both APIs report the
/// core kind (`Event "x" is invalid`, no group).
pub fn invalid_error(api_version: &str, kind: &str, name: &str, causes: &[Cause]) -> ApiError {
    let group = if kind == "Event" && api_version == EVENTS_V1 { "" } else { group_of(api_version) };
    let qualified = if group.is_empty() { kind.to_string() } else { format!("{kind}.{group}") };
    let mut msgs: Vec<String> = Vec::new();
    for c in causes {
        let m = if c.field.is_empty() { c.message.clone() } else { format!("{}: {}", c.field, c.message) };
        if !msgs.contains(&m) {
            msgs.push(m);
        }
    }
    let joined = if msgs.len() == 1 { msgs.remove(0) } else { format!("[{}]", msgs.join(", ")) };
    let mut details = serde_json::Map::new();
    if !name.is_empty() {
        details.insert("name".into(), json!(name));
    }
    if !group.is_empty() {
        details.insert("group".into(), json!(group));
    }
    details.insert("kind".into(), json!(kind));
    details.insert("causes".into(), Value::Array(causes.iter().map(Cause::to_json).collect()));
    ApiError::status(
        422,
        "Invalid",
        format!("{qualified} {} is invalid: {joined}", crate::rbac::go_quote(name)),
        Some(Value::Object(details)),
    )
}

/// The 403 of a create in a terminating namespace: `configmaps "late" is forbidden: unable to
/// create new content in namespace ns because it is being terminated`, with a
/// `NamespaceTerminating` cause on `metadata.namespace`.
pub fn namespace_terminating_error(group: &str, resource: &str, name: &str, namespace: &str) -> ApiError {
    let mut err = crate::rbac::forbidden_status(
        group,
        resource,
        name,
        &format!("unable to create new content in namespace {namespace} because it is being terminated"),
    );
    if let ApiError::Status { details: Some(d), .. } = &mut err {
        d["causes"] = json!([{
            "reason": "NamespaceTerminating",
            "message": format!("namespace {namespace} is being terminated"),
            "field": "metadata.namespace",
        }]);
    }
    err
}

#[cfg(test)]
mod tests;
