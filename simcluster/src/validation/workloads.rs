//! Pods, pod templates and the workload kinds (Deployment, ReplicaSet, StatefulSet, DaemonSet,
//! Job), plus PersistentVolume(Claim)s: scheme defaulting, the create/update preparation of
//! their strategies (status, generation, Pod admission defaults) and basic validation.

use serde_json::{Map, Value, json};

use super::field::{self, child, index};
use super::names::{self, NameRule, validate_object_meta};
use super::service::validate_port_num_or_name;
use crate::errors::Cause;

fn obj_mut<'a>(v: &'a mut Value, key: &str) -> Option<&'a mut Map<String, Value>> {
    let o = v.as_object_mut()?;
    if !o.get(key).is_some_and(Value::is_object) {
        o.insert(key.into(), json!({}));
    }
    o.get_mut(key).and_then(Value::as_object_mut)
}

fn set_default(m: &mut Map<String, Value>, key: &str, v: Value) {
    if m.get(key).is_none_or(Value::is_null) {
        m.insert(key.into(), v);
    }
}

fn set_default_str(m: &mut Map<String, Value>, key: &str, v: &str) {
    if m.get(key).and_then(Value::as_str).is_none_or(str::is_empty) {
        m.insert(key.into(), json!(v));
    }
}

/// `latest` or no tag (and no digest): `Always`, else `IfNotPresent`.
fn pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, tag)) if tag != "latest" => "IfNotPresent",
        _ => "Always",
    }
}

fn default_probe(p: &mut Value) {
    if let Some(m) = p.as_object_mut() {
        set_default(m, "timeoutSeconds", json!(1));
        set_default(m, "periodSeconds", json!(10));
        set_default(m, "successThreshold", json!(1));
        set_default(m, "failureThreshold", json!(3));
        if let Some(h) = m.get_mut("httpGet").and_then(Value::as_object_mut) {
            set_default_str(h, "path", "/");
            set_default_str(h, "scheme", "HTTP");
        }
    }
}

fn default_container(c: &mut Value) {
    let Some(m) = c.as_object_mut() else { return };
    set_default_str(m, "terminationMessagePath", "/dev/termination-log");
    set_default_str(m, "terminationMessagePolicy", "File");
    let image = m.get("image").and_then(Value::as_str).unwrap_or("").to_string();
    set_default_str(m, "imagePullPolicy", pull_policy(&image));
    set_default(m, "resources", json!({}));
    if let Some(ports) = m.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            set_default_str(p, "protocol", "TCP");
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = m.get_mut(probe) {
            default_probe(p);
        }
    }
    if let Some(env) = m.get_mut("env").and_then(Value::as_array_mut) {
        for e in env.iter_mut() {
            if let Some(fr) = e.pointer_mut("/valueFrom/fieldRef").and_then(Value::as_object_mut) {
                set_default_str(fr, "apiVersion", "v1");
            }
        }
    }
}

/// `SetDefaults_PodSpec` and the container/volume defaults, for Pods and pod templates alike.
pub(crate) fn default_pod_spec(spec: &mut Value) {
    let Some(m) = spec.as_object_mut() else { return };
    set_default_str(m, "dnsPolicy", "ClusterFirst");
    set_default_str(m, "restartPolicy", "Always");
    set_default(m, "terminationGracePeriodSeconds", json!(30));
    set_default(m, "securityContext", json!({}));
    set_default_str(m, "schedulerName", "default-scheduler");
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        if let Some(cs) = m.get_mut(list).and_then(Value::as_array_mut) {
            cs.iter_mut().for_each(default_container);
        }
    }
    if let Some(vols) = m.get_mut("volumes").and_then(Value::as_array_mut) {
        for v in vols.iter_mut().filter_map(Value::as_object_mut) {
            for src in ["secret", "configMap", "projected", "downwardAPI"] {
                if let Some(s) = v.get_mut(src).and_then(Value::as_object_mut) {
                    set_default(s, "defaultMode", json!(420));
                }
            }
            if let Some(h) = v.get_mut("hostPath").and_then(Value::as_object_mut) {
                set_default(h, "type", json!(""));
            }
        }
    }
    // The deprecated serviceAccount mirrors serviceAccountName (conversion).
    let san = m.get("serviceAccountName").and_then(Value::as_str).unwrap_or("").to_string();
    let sa = m.get("serviceAccount").and_then(Value::as_str).unwrap_or("").to_string();
    if san.is_empty() && !sa.is_empty() {
        m.insert("serviceAccountName".into(), json!(sa));
    } else if !san.is_empty() {
        m.insert("serviceAccount".into(), json!(san));
    }
}

fn default_template(obj: &mut Value) {
    if let Some(spec) = obj.pointer_mut("/spec/template/spec") {
        default_pod_spec(spec);
    }
}

fn spec(obj: &mut Value) -> Option<&mut Map<String, Value>> {
    obj_mut(obj, "spec")
}

/// Scheme defaulting of the workload kinds (`kind` as in the body).
pub(crate) fn default_workload(kind: &str, obj: &mut Value) {
    match kind {
        // v1 defaulting of a Limited level: lendablePercent 0 (nominalConcurrencyShares is
        // defaulted only when the field is absent: 30).
        "PriorityLevelConfiguration" => {
            if let Some(l) = spec(obj).and_then(|s| s.get_mut("limited")).and_then(Value::as_object_mut) {
                set_default(l, "lendablePercent", json!(0));
                set_default(l, "nominalConcurrencyShares", json!(30));
            }
        }
        "Pod" => {
            if let Some(s) = obj.get_mut("spec") {
                default_pod_spec(s);
                if let Some(m) = s.as_object_mut() {
                    set_default(m, "enableServiceLinks", json!(true));
                }
            }
            // PodCondition's times are non-pointer metav1.Time: a zero one (absent, or removed
            // by a strategic-merge `null`) is serialized as `null`.
            if let Some(conditions) = obj.pointer_mut("/status/conditions").and_then(Value::as_array_mut) {
                for c in conditions.iter_mut().filter_map(Value::as_object_mut) {
                    for f in ["lastProbeTime", "lastTransitionTime"] {
                        c.entry(f).or_insert(Value::Null);
                    }
                }
            }
        }
        "PodTemplate" => {
            if let Some(s) = obj.pointer_mut("/template/spec") {
                default_pod_spec(s);
            }
        }
        "Deployment" => {
            if let Some(s) = spec(obj) {
                set_default(s, "replicas", json!(1));
                let strategy = s.entry("strategy").or_insert_with(|| json!({}));
                if let Some(st) = strategy.as_object_mut() {
                    set_default_str(st, "type", "RollingUpdate");
                    if st.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
                        let ru = st.entry("rollingUpdate").or_insert_with(|| json!({}));
                        if let Some(ru) = ru.as_object_mut() {
                            set_default(ru, "maxUnavailable", json!("25%"));
                            set_default(ru, "maxSurge", json!("25%"));
                        }
                    }
                }
                set_default(s, "revisionHistoryLimit", json!(10));
                set_default(s, "progressDeadlineSeconds", json!(600));
                // `paused` is omitempty: false is not stored (nor in managedFields).
                if s.get("paused") == Some(&json!(false)) {
                    s.remove("paused");
                }
            }
            default_template(obj);
        }
        "ReplicaSet" | "ReplicationController" => {
            if let Some(s) = spec(obj) {
                set_default(s, "replicas", json!(1));
            }
            default_template(obj);
        }
        "StatefulSet" => {
            if let Some(s) = spec(obj) {
                set_default(s, "replicas", json!(1));
                set_default_str(s, "podManagementPolicy", "OrderedReady");
                let us = s.entry("updateStrategy").or_insert_with(|| json!({}));
                if let Some(us) = us.as_object_mut() {
                    set_default_str(us, "type", "RollingUpdate");
                    if us.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
                        let ru = us.entry("rollingUpdate").or_insert_with(|| json!({}));
                        if let Some(ru) = ru.as_object_mut() {
                            set_default(ru, "partition", json!(0));
                        }
                    }
                }
                set_default(s, "revisionHistoryLimit", json!(10));
                let p = s.entry("persistentVolumeClaimRetentionPolicy").or_insert_with(|| json!({}));
                if let Some(p) = p.as_object_mut() {
                    set_default_str(p, "whenDeleted", "Retain");
                    set_default_str(p, "whenScaled", "Retain");
                }
            }
            default_template(obj);
        }
        "DaemonSet" => {
            if let Some(s) = spec(obj) {
                let us = s.entry("updateStrategy").or_insert_with(|| json!({}));
                if let Some(us) = us.as_object_mut() {
                    set_default_str(us, "type", "RollingUpdate");
                    if us.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
                        let ru = us.entry("rollingUpdate").or_insert_with(|| json!({}));
                        if let Some(ru) = ru.as_object_mut() {
                            set_default(ru, "maxUnavailable", json!(1));
                            set_default(ru, "maxSurge", json!(0));
                        }
                    }
                }
                set_default(s, "revisionHistoryLimit", json!(10));
            }
            if let Some(meta) = obj_mut(obj, "metadata") {
                let ann = meta.entry("annotations").or_insert_with(|| json!({}));
                if let Some(ann) = ann.as_object_mut() {
                    set_default(ann, "deprecated.daemonset.template.generation", json!("1"));
                }
            }
            default_template(obj);
        }
        "Job" => {
            if let Some(s) = spec(obj) {
                let completions = s.get("completions").filter(|v| !v.is_null()).cloned();
                let parallelism = s.get("parallelism").filter(|v| !v.is_null()).cloned();
                if completions.is_none() && parallelism.is_none() {
                    s.insert("completions".into(), json!(1));
                    s.insert("parallelism".into(), json!(1));
                }
                set_default(s, "parallelism", json!(1));
                set_default(s, "backoffLimit", json!(6));
                set_default_str(s, "completionMode", "NonIndexed");
                set_default(s, "suspend", json!(false));
                if s.get("podFailurePolicy").is_none_or(Value::is_null) {
                    set_default_str(s, "podReplacementPolicy", "TerminatingOrFailed");
                } else {
                    set_default_str(s, "podReplacementPolicy", "Failed");
                }
                set_default(s, "manualSelector", json!(false));
            }
            default_template(obj);
        }
        "CronJob" => {
            if let Some(s) = spec(obj) {
                set_default_str(s, "concurrencyPolicy", "Allow");
                set_default(s, "suspend", json!(false));
                set_default(s, "successfulJobsHistoryLimit", json!(3));
                set_default(s, "failedJobsHistoryLimit", json!(1));
            }
            if let Some(s) = obj.pointer_mut("/spec/jobTemplate/spec/template/spec") {
                default_pod_spec(s);
            }
        }
        "PersistentVolumeClaim" => {
            if let Some(s) = spec(obj) {
                set_default_str(s, "volumeMode", "Filesystem");
            }
        }
        "PersistentVolume" => {
            if let Some(s) = spec(obj) {
                set_default_str(s, "persistentVolumeReclaimPolicy", "Retain");
                // `storageClassName` is `omitempty` on PersistentVolumes.
                if s.get("storageClassName").is_some_and(|v| v.is_null() || *v == "") {
                    s.remove("storageClassName");
                }
                set_default_str(s, "volumeMode", "Filesystem");
                if let Some(h) = s.get_mut("hostPath").and_then(Value::as_object_mut) {
                    set_default(h, "type", json!(""));
                }
            }
        }
        _ => {}
    }
}

/// The status a new object of these kinds starts with (what a Go server serializes for the
/// reset status).
pub(crate) fn initial_status(kind: &str) -> Option<Value> {
    Some(match kind {
        "Deployment" | "Job" | "CronJob" | "FlowSchema" | "PriorityLevelConfiguration" => json!({}),
        "ReplicaSet" | "ReplicationController" => json!({"replicas": 0}),
        "StatefulSet" => json!({"replicas": 0, "availableReplicas": 0}),
        "DaemonSet" => {
            json!({"currentNumberScheduled": 0, "numberMisscheduled": 0, "desiredNumberScheduled": 0, "numberReady": 0})
        }
        "PersistentVolumeClaim" => json!({"phase": "Pending"}),
        _ => return None,
    })
}

/// Kinds whose `metadata.generation` the server maintains (1 on create, bumped on spec
/// changes).
pub(crate) fn has_generation(kind: &str) -> bool {
    matches!(
        kind,
        "Deployment"
            | "ReplicaSet"
            | "ReplicationController"
            | "StatefulSet"
            | "DaemonSet"
            | "Job"
            | "CronJob"
            | "Pod"
            | "PodDisruptionBudget"
            | "HorizontalPodAutoscaler"
            | "NetworkPolicy"
            | "Ingress"
            | "CustomResourceDefinition"
            | "FlowSchema"
            | "PriorityLevelConfiguration"
    )
}

fn qos_class(spec: &Value) -> &'static str {
    let containers: Vec<&Value> = ["initContainers", "containers"]
        .iter()
        .filter_map(|k| spec.get(*k).and_then(Value::as_array))
        .flatten()
        .collect();
    let res = |c: &Value, which: &str, r: &str| c.pointer(&format!("/resources/{which}/{r}")).cloned();
    let any = containers
        .iter()
        .any(|c| ["cpu", "memory"].iter().any(|r| res(c, "requests", r).is_some() || res(c, "limits", r).is_some()));
    if !any {
        return "BestEffort";
    }
    let guaranteed = containers.iter().all(|c| {
        ["cpu", "memory"].iter().all(|r| {
            let l = res(c, "limits", r);
            let q = res(c, "requests", r).or_else(|| l.clone());
            l.is_some() && q == l
        })
    });
    if guaranteed { "Guaranteed" } else { "Burstable" }
}

/// Pod admission defaults the real server adds after the field manager ran (so they never
/// appear in managedFields): ServiceAccount (`default`), DefaultTolerationSeconds (300 s for
/// not-ready/unreachable), Priority (0, `PreemptLowerPriority`); and the Pod strategy's
/// `status: {phase: Pending, qosClass}`.
pub(crate) fn prepare_pod_create(obj: &mut Value) {
    if let Some(s) = spec(obj) {
        if s.get("serviceAccountName").and_then(Value::as_str).is_none_or(str::is_empty) {
            s.insert("serviceAccountName".into(), json!("default"));
            s.insert("serviceAccount".into(), json!("default"));
        }
        super::pods::default_tolerations(s);
        set_default(s, "priority", json!(0));
        set_default_str(s, "preemptionPolicy", "PreemptLowerPriority");
    }
    let qos = qos_class(obj.get("spec").unwrap_or(&Value::Null));
    if let Some(o) = obj.as_object_mut() {
        o.insert("status".into(), json!({"phase": "Pending", "qosClass": qos}));
    }
}

/// `PersistentVolume` create: status `Pending` with its transition time.
pub(crate) fn prepare_pv_create(obj: &mut Value, now: &str) {
    if let Some(o) = obj.as_object_mut() {
        o.insert("status".into(), json!({"phase": "Pending", "lastPhaseTransitionTime": now}));
    }
}

/// Job `PrepareForCreate` selector generation (unless `manualSelector`): the four
/// controller-uid / job-name labels on the template and `selector.matchLabels` on the uid.
pub(crate) fn prepare_job_create(obj: &mut Value) {
    let uid = obj.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("").to_string();
    let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
    if uid.is_empty() || obj.pointer("/spec/manualSelector").and_then(Value::as_bool) == Some(true) {
        return;
    }
    let labels = json!({
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": name,
        "controller-uid": uid,
        "job-name": name,
    });
    if let Some(s) = spec(obj) {
        s.insert("selector".into(), json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}));
        let tmpl = s.entry("template").or_insert_with(|| json!({}));
        if let Some(meta) = obj_mut(tmpl, "metadata") {
            let l = meta.entry("labels").or_insert_with(|| json!({}));
            if let (Some(l), Some(new)) = (l.as_object_mut(), labels.as_object()) {
                for (k, v) in new {
                    l.insert(k.clone(), v.clone());
                }
            }
        }
    }
    // The Job's own labels default to the template's.
    let tmpl_labels = obj.pointer("/spec/template/metadata/labels").cloned();
    if let (Some(meta), Some(tl)) = (obj_mut(obj, "metadata"), tmpl_labels)
        && meta.get("labels").is_none_or(|l| l.as_object().is_none_or(Map::is_empty))
    {
        meta.insert("labels".into(), tl);
    }
}

fn validate_containers(spec: &Value, path: &str) -> Vec<Cause> {
    let mut errs = Vec::new();
    let containers = spec.get("containers").and_then(Value::as_array).cloned().unwrap_or_default();
    if containers.is_empty() {
        errs.push(field::required(&child(path, "containers"), ""));
    }
    let mut seen: Vec<String> = Vec::new();
    for (list, items) in [
        ("initContainers", spec.get("initContainers").and_then(Value::as_array).cloned().unwrap_or_default()),
        ("containers", containers),
    ] {
        for (i, c) in items.iter().enumerate() {
            let cp = index(&child(path, list), i);
            let name = c.get("name").and_then(Value::as_str).unwrap_or("");
            if name.is_empty() {
                errs.push(field::required(&child(&cp, "name"), ""));
            } else {
                for m in names::dns1123_label(name) {
                    errs.push(field::invalid_str(&child(&cp, "name"), name, &m));
                }
                if seen.iter().any(|n| n == name) {
                    errs.push(field::duplicate(&child(&cp, "name"), &json!(name)));
                }
                seen.push(name.to_string());
            }
            if c.get("image").and_then(Value::as_str).is_none_or(str::is_empty) {
                errs.push(field::required(&child(&cp, "image"), ""));
            }
            if let Some(ports) = c.get("ports").and_then(Value::as_array) {
                for (j, p) in ports.iter().enumerate() {
                    let pp = index(&child(&cp, "ports"), j);
                    errs.extend(validate_port_num_or_name(
                        &child(&pp, "containerPort"),
                        Some(p.get("containerPort").unwrap_or(&json!(0))),
                    ));
                }
            }
        }
    }
    errs
}

fn validate_selector_matches_template(obj: &Value, require_selector: bool) -> Vec<Cause> {
    let mut errs = Vec::new();
    let selector = obj.pointer("/spec/selector");
    let match_labels = selector.and_then(|s| s.get("matchLabels")).and_then(Value::as_object);
    let has_exprs =
        selector.and_then(|s| s.get("matchExpressions")).and_then(Value::as_array).is_some_and(|a| !a.is_empty());
    if require_selector && selector.is_none_or(Value::is_null) {
        // A nil selector selects nothing, so the template's labels never match it either.
        errs.push(field::required("spec.selector", ""));
        let tl = obj.pointer("/spec/template/metadata/labels").cloned().unwrap_or(Value::Null);
        errs.push(field::invalid("spec.template.metadata.labels", &tl, "`selector` does not match template `labels`"));
        return errs;
    }
    if require_selector && match_labels.is_none_or(Map::is_empty) && !has_exprs {
        errs.push(field::invalid(
            "spec.selector",
            selector.unwrap_or(&Value::Null),
            "empty selector is invalid for deployment",
        ));
    }
    errs.extend(names::validate_labels(selector.and_then(|s| s.get("matchLabels")), "spec.selector.matchLabels"));
    let tl = obj.pointer("/spec/template/metadata/labels").and_then(Value::as_object);
    if let Some(ml) = match_labels
        && !ml.iter().all(|(k, v)| tl.and_then(|t| t.get(k)) == Some(v))
    {
        errs.push(field::invalid(
            "spec.template.metadata.labels",
            &tl.map(|t| Value::Object(t.clone())).unwrap_or(Value::Null),
            "`selector` does not match template `labels`",
        ));
    }
    errs
}

fn non_negative(obj: &Value, key: &str, errs: &mut Vec<Cause>) {
    if let Some(v) = obj.pointer(&format!("/spec/{key}")).and_then(Value::as_i64)
        && v < 0
    {
        errs.push(field::invalid_int(&format!("spec.{key}"), v, "must be greater than or equal to 0"));
    }
}

/// Validation of the workload kinds and Pods (metadata, selector/template agreement, replica
/// counts, containers).
pub(crate) fn validate_workload(kind: &str, obj: &Value) -> Vec<Cause> {
    let mut errs = validate_object_meta(obj, true, NameRule::Subdomain, true);
    match kind {
        "Pod" => {
            errs.extend(validate_containers(obj.get("spec").unwrap_or(&Value::Null), "spec"));
        }
        "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet" => {
            errs.extend(validate_selector_matches_template(obj, true));
            for k in ["replicas", "revisionHistoryLimit", "minReadySeconds"] {
                non_negative(obj, k, &mut errs);
            }
            if let Some(t) = obj.pointer("/spec/template/spec") {
                errs.extend(validate_containers(t, "spec.template.spec"));
            }
        }
        "Job" => {
            for k in ["parallelism", "completions", "backoffLimit", "activeDeadlineSeconds"] {
                non_negative(obj, k, &mut errs);
            }
            if let Some(t) = obj.pointer("/spec/template/spec") {
                let rp = t.get("restartPolicy").and_then(Value::as_str).unwrap_or("");
                if rp != "OnFailure" && rp != "Never" {
                    errs.push(field::not_supported(
                        "spec.template.spec.restartPolicy",
                        &json!(rp),
                        &["OnFailure", "Never"],
                    ));
                }
                errs.extend(validate_containers(t, "spec.template.spec"));
            }
        }
        _ => {}
    }
    errs
}
