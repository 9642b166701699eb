//! Walks over objects guided by their type: the field set of an applied configuration, the
//! comparison of two versions (added / modified / removed paths), the apply merge, pruning,
//! and the Go zero values of built-in types.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::set::{FieldSet, field_pe, key_pe, value_pe};
use crate::schema::{ListType, TypeNav};

/// The list semantics to use at this node (untyped lists are atomic).
fn list_type(ty: &TypeNav) -> ListType {
    if ty.is_untyped() { ListType::Atomic } else { ty.list_type() }
}

/// The path element of a list item (`k:` for list-maps, `v:` for sets, `i:` otherwise).
pub(crate) fn item_pe(item: &Value, lt: &ListType, item_ty: &TypeNav, index: usize) -> String {
    match lt {
        ListType::Map(keys) => {
            let Value::Object(m) = item else { return format!("i:{index}") };
            let mut fields = Vec::new();
            for k in keys {
                match m.get(k) {
                    Some(v) => fields.push((k.clone(), v.clone())),
                    None => {
                        if let Some(d) = item_ty.key_default(k) {
                            fields.push((k.clone(), d));
                        }
                    }
                }
            }
            if fields.is_empty() { format!("i:{index}") } else { key_pe(&fields) }
        }
        ListType::Set => value_pe(item),
        ListType::Atomic => format!("i:{index}"),
    }
}

/// The type below a path element.
pub(crate) fn child_type<'a>(ty: &TypeNav<'a>, pe: &str) -> TypeNav<'a> {
    match pe.strip_prefix("f:") {
        Some(name) => ty.field(name),
        None => ty.items(),
    }
}

fn is_empty_container(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::Object(m)) => m.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        _ => false,
    }
}

/// The field set an applied configuration owns: leaves, atomic lists and maps, empty maps and
/// lists, and list-map / set items themselves (no plain map nodes).
pub(crate) fn to_field_set(value: &Value, ty: &TypeNav) -> FieldSet {
    let mut out = FieldSet::new();
    let mut path = Vec::new();
    fs_walk(value, ty, &mut path, &mut out);
    out
}

fn fs_walk(v: &Value, ty: &TypeNav, path: &mut Vec<String>, out: &mut FieldSet) {
    match v {
        Value::Object(m) => {
            if ty.is_atomic_map() || m.is_empty() {
                out.insert(path);
                return;
            }
            for (k, cv) in m {
                path.push(field_pe(k));
                fs_walk(cv, &ty.field(k), path, out);
                path.pop();
            }
        }
        Value::Array(a) => {
            let lt = list_type(ty);
            if lt == ListType::Atomic || a.is_empty() {
                out.insert(path);
                return;
            }
            let it = ty.items();
            for (i, item) in a.iter().enumerate() {
                path.push(item_pe(item, &lt, &it, i));
                out.insert(path);
                if item.is_object() {
                    fs_walk(item, &it, path, out);
                }
                path.pop();
            }
        }
        Value::Null if !ty.is_untyped() && !ty.is_atomic_map() && ty.kind() != crate::schema::NodeKind::Scalar => {}
        _ => out.insert(path),
    }
}

/// What changed between two versions of an object.
#[derive(Debug, Default)]
pub(crate) struct Comparison {
    pub added: FieldSet,
    pub modified: FieldSet,
    pub removed: FieldSet,
}

/// Compare two objects the way structured-merge-diff does (a merge walk whose non-leaf nodes
/// count as added/removed when absent on one side, which gives Update entries their `"."`).
pub(crate) fn compare(lhs: &Value, rhs: &Value, ty: &TypeNav) -> Comparison {
    let mut c = Comparison::default();
    let mut path = Vec::new();
    cmp(Some(lhs), Some(rhs), ty, &mut path, &mut c);
    c
}

fn leaf(lhs: Option<&Value>, rhs: Option<&Value>, path: &[String], c: &mut Comparison) {
    match (lhs, rhs) {
        (None, Some(_)) => c.added.insert(path),
        (Some(_), None) => c.removed.insert(path),
        (Some(a), Some(b)) if a != b => c.modified.insert(path),
        _ => {}
    }
}

fn post_item(lhs: Option<&Value>, rhs: Option<&Value>, path: &[String], c: &mut Comparison) {
    if lhs.is_none() {
        c.added.insert(path);
    } else if rhs.is_none() {
        c.removed.insert(path);
    }
}

fn cmp(lhs: Option<&Value>, rhs: Option<&Value>, ty: &TypeNav, path: &mut Vec<String>, c: &mut Comparison) {
    let shape = |v: Option<&Value>| match v {
        None | Some(Value::Null) => 0u8,
        Some(Value::Object(_)) => 1,
        Some(Value::Array(_)) => 2,
        Some(_) => 3,
    };
    let (ls, rs) = (shape(lhs), shape(rhs));
    let is_map = (ls == 1 || rs == 1) && ls != 2 && ls != 3 && rs != 2 && rs != 3;
    let is_list = (ls == 2 || rs == 2) && ls != 1 && ls != 3 && rs != 1 && rs != 3;
    if is_map {
        if ty.is_atomic_map() || (is_empty_container(lhs) && is_empty_container(rhs)) {
            return leaf(lhs, rhs, path, c);
        }
        let empty = Map::new();
        let lm = lhs.and_then(Value::as_object).unwrap_or(&empty);
        let rm = rhs.and_then(Value::as_object).unwrap_or(&empty);
        for (k, lv) in lm {
            path.push(field_pe(k));
            cmp(Some(lv), rm.get(k), &ty.field(k), path, c);
            path.pop();
        }
        for (k, rv) in rm {
            if !lm.contains_key(k) {
                path.push(field_pe(k));
                cmp(None, Some(rv), &ty.field(k), path, c);
                path.pop();
            }
        }
        if !path.is_empty() {
            post_item(lhs, rhs, path, c);
        }
    } else if is_list {
        let lt = list_type(ty);
        if lt == ListType::Atomic || (is_empty_container(lhs) && is_empty_container(rhs)) {
            return leaf(lhs, rhs, path, c);
        }
        let it = ty.items();
        let empty = Vec::new();
        let la = lhs.and_then(Value::as_array).unwrap_or(&empty);
        let ra = rhs.and_then(Value::as_array).unwrap_or(&empty);
        let mut order: Vec<String> = Vec::new();
        let mut lmap: HashMap<String, &Value> = HashMap::new();
        let mut rmap: HashMap<String, &Value> = HashMap::new();
        for (i, v) in la.iter().enumerate() {
            let pe = item_pe(v, &lt, &it, i);
            if !lmap.contains_key(&pe) {
                order.push(pe.clone());
            }
            lmap.insert(pe, v);
        }
        for (i, v) in ra.iter().enumerate() {
            let pe = item_pe(v, &lt, &it, i);
            if !lmap.contains_key(&pe) && !rmap.contains_key(&pe) {
                order.push(pe.clone());
            }
            rmap.insert(pe, v);
        }
        for pe in order {
            path.push(pe.clone());
            cmp(lmap.get(&pe).copied(), rmap.get(&pe).copied(), &it, path, c);
            path.pop();
        }
        if !path.is_empty() {
            post_item(lhs, rhs, path, c);
        }
    } else {
        leaf(lhs, rhs, path, c);
    }
}

/// Merge an applied configuration into the live object (structured-merge-diff semantics:
/// granular maps merged key by key, list-maps and sets merged by item, the rest replaced).
pub(crate) fn merge(live: Option<&Value>, config: &Value, ty: &TypeNav) -> Value {
    match (live, config) {
        (Some(Value::Object(lm)), Value::Object(rm)) if !ty.is_atomic_map() => {
            let mut out = lm.clone();
            for (k, rv) in rm {
                let merged = merge(lm.get(k), rv, &ty.field(k));
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        (Some(Value::Array(la)), Value::Array(ra)) => {
            let lt = list_type(ty);
            if lt == ListType::Atomic {
                return config.clone();
            }
            merge_list(la, ra, &lt, &ty.items())
        }
        _ => config.clone(),
    }
}

fn merge_list(la: &[Value], ra: &[Value], lt: &ListType, it: &TypeNav) -> Value {
    let lhs: Vec<(String, &Value)> = la.iter().enumerate().map(|(i, v)| (item_pe(v, lt, it, i), v)).collect();
    let rhs: Vec<(String, &Value)> = ra.iter().enumerate().map(|(i, v)| (item_pe(v, lt, it, i), v)).collect();
    let observed_l: HashMap<&str, &Value> = lhs.iter().map(|(pe, v)| (pe.as_str(), *v)).collect();
    let observed_r: HashMap<&str, &Value> = rhs.iter().map(|(pe, v)| (pe.as_str(), *v)).collect();
    let mut shared: std::collections::VecDeque<&str> =
        rhs.iter().filter(|(pe, _)| observed_l.contains_key(pe.as_str())).map(|(pe, _)| pe.as_str()).collect();
    let mut next_shared = shared.pop_front();
    let mut merged_r: std::collections::HashSet<&str> = std::collections::HashSet::new();
    let mut out = Vec::new();
    let merge_item = |pe: &str| -> Value {
        match (observed_l.get(pe), observed_r.get(pe)) {
            (l, Some(r)) => merge(l.copied(), r, it),
            (Some(l), None) => (*l).clone(),
            (None, None) => Value::Null,
        }
    };
    let (mut li, mut ri) = (0, 0);
    while li < lhs.len() || ri < rhs.len() {
        if li < lhs.len() && ri < rhs.len() {
            let pe = lhs[li].0.as_str();
            if pe == rhs[ri].0 {
                merged_r.insert(pe);
                out.push(merge_item(pe));
                li += 1;
                ri += 1;
                next_shared = shared.pop_front();
                continue;
            }
            if observed_r.contains_key(pe) && next_shared.is_some_and(|n| n != pe) {
                li += 1;
                continue;
            }
        }
        if li < lhs.len() {
            let pe = lhs[li].0.as_str();
            if !observed_r.contains_key(pe) {
                out.push(merge_item(pe));
                li += 1;
                continue;
            } else if merged_r.contains(pe) {
                li += 1;
                continue;
            }
        }
        if ri < rhs.len() {
            let pe = rhs[ri].0.as_str();
            merged_r.insert(pe);
            out.push(merge_item(pe));
            ri += 1;
            if next_shared == Some(pe) {
                next_shared = shared.pop_front();
            }
        }
    }
    Value::Array(out)
}

/// Add every named (declared) struct field that has children as a member, as
/// structured-merge-diff's `EnsureNamedFieldsAreMembers` does.
pub(crate) fn ensure_named_fields(set: &FieldSet, ty: &TypeNav) -> FieldSet {
    let mut out = FieldSet::new();
    let (members, children) = set.parts();
    for m in members {
        out.insert_member(m);
    }
    for (pe, c) in children {
        if let Some(name) = pe.strip_prefix("f:")
            && ty.has_field(name)
        {
            out.insert_member(pe);
        }
        out.set_child(pe, ensure_named_fields(c, &child_type(ty, pe)));
    }
    out
}

/// Remove what the applier owned before (`last`) and nobody owns now (`managed`), both with
/// named fields as members.
pub(crate) fn prune(v: &mut Value, ty: &TypeNav, last: &FieldSet, managed: Option<&FieldSet>) {
    let owned = |pe: &str| managed.is_some_and(|m| m.has_member(pe));
    match v {
        Value::Object(m) if !ty.is_atomic_map() => {
            let keys: Vec<String> = m.keys().cloned().collect();
            for k in keys {
                let pe = field_pe(&k);
                let cty = ty.field(&k);
                let Some(cv) = m.get_mut(&k) else { continue };
                let removable = ty.has_field(&k) || is_leaf(cv, &cty);
                if last.has_member(&pe) && !owned(&pe) && removable {
                    m.remove(&k);
                } else if let Some(lc) = last.child(&pe) {
                    let was_empty = is_empty_container(Some(cv));
                    prune(cv, &cty, lc, managed.and_then(|s| s.child(&pe)));
                    if !was_empty && is_empty_container(Some(cv)) && !cv.is_null() {
                        m.remove(&k);
                    }
                }
            }
        }
        Value::Array(a) => {
            let lt = list_type(ty);
            if lt == ListType::Atomic {
                return;
            }
            let it = ty.items();
            let items = std::mem::take(a);
            for (i, mut item) in items.into_iter().enumerate() {
                let pe = item_pe(&item, &lt, &it, i);
                if last.has_member(&pe) && !owned(&pe) {
                    continue;
                }
                if let Some(lc) = last.child(&pe) {
                    prune(&mut item, &it, lc, managed.and_then(|s| s.child(&pe)));
                }
                a.push(item);
            }
        }
        _ => {}
    }
}

fn is_leaf(v: &Value, ty: &TypeNav) -> bool {
    match v {
        Value::Object(m) => m.is_empty() || ty.is_atomic_map(),
        Value::Array(a) => a.is_empty() || list_type(ty) == ListType::Atomic,
        _ => true,
    }
}

/// How a field of a Go struct looks in the zero value of its parent.
#[derive(Clone, Copy)]
enum Zero {
    /// A non-pointer struct: `{}` (filled recursively).
    Struct,
    /// A nil slice, map or pointer without `omitempty`, or a zero `metav1.Time`: `null`.
    Null,
}

/// Non-pointer struct fields and non-omitempty nil fields of the built-in types (beyond the
/// `metadata`/`spec`/`status` of every top-level kind).
fn zero_fields(def: &str) -> &'static [(&'static str, Zero)] {
    use Zero::{Null, Struct};
    let short = def.rsplit('.').next().unwrap_or(def);
    let group = def.strip_suffix(short).unwrap_or("");
    match (group, short) {
        ("io.k8s.apimachinery.pkg.apis.meta.v1.", "ObjectMeta") => &[("creationTimestamp", Null)],
        ("io.k8s.api.apps.v1.", "DeploymentSpec") => &[("selector", Null), ("template", Struct), ("strategy", Struct)],
        ("io.k8s.api.apps.v1.", "ReplicaSetSpec") => &[("selector", Null), ("template", Struct)],
        ("io.k8s.api.apps.v1.", "StatefulSetSpec") => {
            &[("selector", Null), ("template", Struct), ("updateStrategy", Struct)]
        }
        ("io.k8s.api.apps.v1.", "DaemonSetSpec") => {
            &[("selector", Null), ("template", Struct), ("updateStrategy", Struct)]
        }
        ("io.k8s.api.batch.v1.", "JobSpec") => &[("template", Struct)],
        ("io.k8s.api.batch.v1.", "CronJobSpec") => &[("jobTemplate", Struct)],
        ("io.k8s.api.batch.v1.", "JobTemplateSpec") => &[("metadata", Struct), ("spec", Struct)],
        ("io.k8s.api.core.v1.", "PodTemplateSpec") => &[("metadata", Struct), ("spec", Struct)],
        ("io.k8s.api.core.v1.", "PodTemplate") => &[("template", Struct)],
        ("io.k8s.api.core.v1.", "PodSpec") => &[("containers", Null)],
        ("io.k8s.api.core.v1.", "Container") | ("io.k8s.api.core.v1.", "EphemeralContainer") => {
            &[("resources", Struct)]
        }
        ("io.k8s.api.core.v1.", "ServiceStatus") => &[("loadBalancer", Struct)],
        ("io.k8s.api.networking.v1.", "IngressStatus") => &[("loadBalancer", Struct)],
        ("io.k8s.api.networking.v1.", "NetworkPolicySpec") => &[("podSelector", Struct)],
        ("io.k8s.api.core.v1.", "PersistentVolumeClaimSpec") => &[("resources", Struct)],
        ("io.k8s.api.core.v1.", "NodeStatus") => &[("daemonEndpoints", Struct), ("nodeInfo", Struct)],
        ("io.k8s.api.core.v1.", "Event") => &[
            ("involvedObject", Struct),
            ("source", Struct),
            ("firstTimestamp", Null),
            ("lastTimestamp", Null),
            ("eventTime", Null),
        ],
        ("io.k8s.api.events.v1.", "Event") => &[
            ("regarding", Struct),
            ("deprecatedSource", Struct),
            ("eventTime", Null),
            ("deprecatedFirstTimestamp", Null),
            ("deprecatedLastTimestamp", Null),
        ],
        ("io.k8s.api.rbac.v1.", "RoleBinding") | ("io.k8s.api.rbac.v1.", "ClusterRoleBinding") => {
            &[("roleRef", Struct)]
        }
        ("io.k8s.api.rbac.v1.", "Role") | ("io.k8s.api.rbac.v1.", "ClusterRole") => &[("rules", Null)],
        ("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.", "CustomResourceDefinitionSpec") => {
            &[("names", Struct), ("versions", Null)]
        }
        ("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.", "CustomResourceDefinitionStatus") => {
            &[("acceptedNames", Struct), ("storedVersions", Null)]
        }
        ("io.k8s.api.authentication.v1.", "TokenRequestSpec") => &[("audiences", Null)],
        ("io.k8s.api.discovery.v1.", "EndpointSlice") => &[("endpoints", Null), ("ports", Null)],
        ("io.k8s.api.autoscaling.v2.", "HorizontalPodAutoscalerSpec")
        | ("io.k8s.api.autoscaling.v1.", "HorizontalPodAutoscalerSpec") => &[("scaleTargetRef", Struct)],
        _ => &[],
    }
}

/// Fill in what the Go zero value of a built-in type always carries (non-pointer structs as
/// `{}`, non-omitempty nil fields as `null`) where the object lacks it, so that comparisons
/// see the nodes the real server's typed objects always have.
pub(crate) fn fill_zero(v: &mut Value, ty: &TypeNav) {
    if !ty.is_builtin() {
        return;
    }
    match v {
        Value::Object(m) => {
            if ty.is_atomic_map() {
                return;
            }
            if let Some(name) = ty.definition_name() {
                let top_level = ty.schema().is_some_and(|s| s.get("x-kubernetes-group-version-kind").is_some());
                if top_level {
                    for f in ["metadata", "spec", "status"] {
                        if ty.has_field(f) && !m.contains_key(f) {
                            m.insert(f.into(), Value::Object(Map::new()));
                        }
                    }
                }
                for (f, z) in zero_fields(name) {
                    if ty.has_field(f) && !m.contains_key(*f) {
                        let val = match z {
                            Zero::Struct => Value::Object(Map::new()),
                            Zero::Null => Value::Null,
                        };
                        m.insert((*f).into(), val);
                    }
                }
            }
            for (k, cv) in m.iter_mut() {
                fill_zero(cv, &ty.field(k));
            }
        }
        Value::Array(a) => {
            let it = ty.items();
            for item in a.iter_mut() {
                fill_zero(item, &it);
            }
        }
        _ => {}
    }
}
