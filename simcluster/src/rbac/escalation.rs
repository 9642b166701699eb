//! RBAC escalation prevention, checked by the real server on creates and updates of roles and
//! bindings once the request itself is authorized: a user may only grant permissions it holds,
//! unless it is in `system:masters` or may `escalate` the role (`bind` the referenced role for
//! bindings).

use std::collections::BTreeMap;

use serde_json::Value;

use super::{Attributes, MASTERS_GROUP, Policy, UserInfo, authorize_reason, forbidden_status, go_quote, rules_for};
use crate::errors::ApiError;

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

fn strs(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect())
        .unwrap_or_default()
}

#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
struct Rule {
    api_groups: Vec<String>,
    resources: Vec<String>,
    resource_names: Vec<String>,
    non_resource_urls: Vec<String>,
    verbs: Vec<String>,
}

impl Rule {
    fn from_json(v: &Value) -> Rule {
        Rule {
            api_groups: strs(v, "apiGroups"),
            resources: strs(v, "resources"),
            resource_names: strs(v, "resourceNames"),
            non_resource_urls: strs(v, "nonResourceURLs"),
            verbs: strs(v, "verbs"),
        }
    }

    /// One rule per (group, resource, verb[, name]) and per (URL, verb), as upstream
    /// `BreakdownRule`.
    fn breakdown(&self) -> Vec<Rule> {
        let mut out = Vec::new();
        for g in &self.api_groups {
            for r in &self.resources {
                for v in &self.verbs {
                    let base = Rule {
                        api_groups: vec![g.clone()],
                        resources: vec![r.clone()],
                        verbs: vec![v.clone()],
                        ..Rule::default()
                    };
                    if self.resource_names.is_empty() {
                        out.push(base);
                    } else {
                        for n in &self.resource_names {
                            out.push(Rule { resource_names: vec![n.clone()], ..base.clone() });
                        }
                    }
                }
            }
        }
        for u in &self.non_resource_urls {
            for v in &self.verbs {
                out.push(Rule { non_resource_urls: vec![u.clone()], verbs: vec![v.clone()], ..Rule::default() });
            }
        }
        out
    }

    /// Upstream `CompactString`: `{APIGroups:["*"], Resources:["*"], Verbs:["*"]}`.
    fn compact_string(&self) -> String {
        let list = |v: &[String]| format!("[{}]", v.iter().map(|s| go_quote(s)).collect::<Vec<_>>().join(" "));
        let mut parts = Vec::new();
        if !self.api_groups.is_empty() {
            parts.push(format!("APIGroups:{}", list(&self.api_groups)));
        }
        if !self.resources.is_empty() {
            parts.push(format!("Resources:{}", list(&self.resources)));
        }
        if !self.non_resource_urls.is_empty() {
            parts.push(format!("NonResourceURLs:{}", list(&self.non_resource_urls)));
        }
        if !self.resource_names.is_empty() {
            parts.push(format!("ResourceNames:{}", list(&self.resource_names)));
        }
        if !self.verbs.is_empty() {
            parts.push(format!("Verbs:{}", list(&self.verbs)));
        }
        format!("{{{}}}", parts.join(", "))
    }
}

fn has(set: &[String], x: &str) -> bool {
    set.iter().any(|s| s == x)
}

fn has_all(set: &[String], xs: &[String]) -> bool {
    xs.iter().all(|x| has(set, x))
}

fn covers(owner: &Rule, sub: &Rule) -> bool {
    let verbs = has(&owner.verbs, "*") || has_all(&owner.verbs, &sub.verbs);
    let groups = has(&owner.api_groups, "*") || has_all(&owner.api_groups, &sub.api_groups);
    let resources = has(&owner.resources, "*")
        || has_all(&owner.resources, &sub.resources)
        || sub.resources.iter().all(|r| {
            has(&owner.resources, r)
                || r.split_once('/').is_some_and(|(_, sr)| has(&owner.resources, &format!("*/{sr}")))
        });
    let urls = sub.non_resource_urls.iter().all(|p| {
        owner.non_resource_urls.iter().any(|o| o == p || (o.ends_with('*') && p.starts_with(o.trim_end_matches('*'))))
    });
    let names = if sub.resource_names.is_empty() {
        owner.resource_names.is_empty()
    } else {
        owner.resource_names.is_empty() || has_all(&owner.resource_names, &sub.resource_names)
    };
    verbs && groups && resources && urls && names
}

/// The sub-rules of `wanted` that `owned` does not cover, compacted (verbs of identical
/// single-resource rules merged) and rendered, sorted and deduplicated.
fn missing_rules(owned: &[Rule], wanted: &[Rule]) -> Vec<String> {
    let mut compact: BTreeMap<Rule, Vec<String>> = BTreeMap::new();
    for w in wanted {
        for sub in w.breakdown() {
            if owned.iter().any(|o| covers(o, &sub)) {
                continue;
            }
            let key = Rule { verbs: Vec::new(), ..sub.clone() };
            let verbs = compact.entry(key).or_default();
            for v in sub.verbs {
                if !verbs.contains(&v) {
                    verbs.push(v);
                }
            }
        }
    }
    let mut out: Vec<String> = compact
        .into_iter()
        .map(|(mut r, verbs)| {
            r.verbs = verbs;
            r.compact_string()
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

fn confirm_no_escalation(user: &UserInfo, namespace: &str, rules: &[Value], policy: &Policy<'_>) -> Result<(), String> {
    let owned: Vec<Rule> = rules_for(user, namespace, policy).iter().map(Rule::from_json).collect();
    let wanted: Vec<Rule> = rules.iter().map(Rule::from_json).collect();
    let missing = missing_rules(&owned, &wanted);
    if missing.is_empty() {
        return Ok(());
    }
    let groups = format!("[{}]", user.groups.iter().map(|g| go_quote(g)).collect::<Vec<_>>().join(" "));
    Err(format!(
        "user {} (groups={groups}) is attempting to grant RBAC permissions not currently held:\n{}",
        go_quote(&user.name),
        missing.join("\n")
    ))
}

fn obj_str<'a>(obj: &'a Value, path: &[&str]) -> &'a str {
    let mut cur = obj;
    for p in path {
        match cur.get(p) {
            Some(v) => cur = v,
            None => return "",
        }
    }
    cur.as_str().unwrap_or("")
}

fn allowed(user: &UserInfo, verb: &str, resource: &str, namespace: &str, name: &str, policy: &Policy<'_>) -> bool {
    let attrs = Attributes {
        verb: verb.into(),
        api_group: RBAC_GROUP.into(),
        resource: resource.into(),
        subresource: String::new(),
        namespace: namespace.into(),
        name: name.into(),
    };
    authorize_reason(user, &attrs, policy).is_some()
}

/// Escalation check for creating or updating a Role or ClusterRole (`obj`, with its
/// `metadata.namespace` set for Roles): 403 `roles.rbac.authorization.k8s.io "x" is forbidden:
/// user "u" (groups=["g1" "g2"]) is attempting to grant RBAC permissions not currently held:\n{...}`
/// unless the user holds every permission, is in `system:masters` or may `escalate` the role.
pub fn check_role_escalation(user: &UserInfo, obj: &Value, policy: &Policy<'_>) -> Result<(), ApiError> {
    if user.groups.iter().any(|g| g == MASTERS_GROUP) {
        return Ok(());
    }
    let resource = if obj_str(obj, &["kind"]) == "ClusterRole" { "clusterroles" } else { "roles" };
    let name = obj_str(obj, &["metadata", "name"]);
    let namespace = if resource == "roles" { obj_str(obj, &["metadata", "namespace"]) } else { "" };
    if allowed(user, "escalate", resource, namespace, name, policy) {
        return Ok(());
    }
    let rules = obj.get("rules").and_then(Value::as_array).cloned().unwrap_or_default();
    confirm_no_escalation(user, namespace, &rules, policy)
        .map_err(|why| forbidden_status(RBAC_GROUP, resource, name, &why))
}

/// Escalation check for creating or updating a RoleBinding or ClusterRoleBinding: allowed for
/// `system:masters`, with `bind` on the referenced role, or when the user holds every
/// permission of the referenced role; otherwise 403 (the referenced role missing:
/// `... is forbidden: roles.rbac.authorization.k8s.io "r" not found`).
pub fn check_binding_escalation(user: &UserInfo, obj: &Value, policy: &Policy<'_>) -> Result<(), ApiError> {
    if user.groups.iter().any(|g| g == MASTERS_GROUP) {
        return Ok(());
    }
    let resource = if obj_str(obj, &["kind"]) == "ClusterRoleBinding" { "clusterrolebindings" } else { "rolebindings" };
    let name = obj_str(obj, &["metadata", "name"]);
    let namespace = if resource == "rolebindings" { obj_str(obj, &["metadata", "namespace"]) } else { "" };
    let ref_kind = obj_str(obj, &["roleRef", "kind"]);
    let ref_name = obj_str(obj, &["roleRef", "name"]);
    let ref_resource = if ref_kind == "ClusterRole" { "clusterroles" } else { "roles" };
    if allowed(user, "bind", ref_resource, namespace, ref_name, policy) {
        return Ok(());
    }
    let role = if ref_kind == "ClusterRole" {
        policy.cluster_roles.iter().find(|r| obj_str(r, &["metadata", "name"]) == ref_name)
    } else {
        policy.roles.iter().find(|r| {
            obj_str(r, &["metadata", "name"]) == ref_name && obj_str(r, &["metadata", "namespace"]) == namespace
        })
    };
    let Some(role) = role else {
        let why = format!("{ref_resource}.{RBAC_GROUP} {} not found", go_quote(ref_name));
        return Err(forbidden_status(RBAC_GROUP, resource, name, &why));
    };
    let rules = role.get("rules").and_then(Value::as_array).cloned().unwrap_or_default();
    confirm_no_escalation(user, namespace, &rules, policy)
        .map_err(|why| forbidden_status(RBAC_GROUP, resource, name, &why))
}
