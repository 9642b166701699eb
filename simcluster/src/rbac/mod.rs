//! Authorization: RBAC evaluated from the Role/ClusterRole/RoleBinding/ClusterRoleBinding
//! objects in the store, Forbidden messages as the real server writes them, impersonation
//! headers, and the access review APIs (SelfSubjectAccessReview, SubjectAccessReview,
//! SelfSubjectReview).
//!
//! Everything here is pure: the caller passes the stored RBAC objects (JSON as stored) and gets
//! decisions, users and response bodies back.

mod bootstrap;
mod escalation;
mod reviews;

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::errors::ApiError;

pub use bootstrap::bootstrap_objects;
pub use escalation::{check_binding_escalation, check_role_escalation};
pub use reviews::{self_subject_access_review, self_subject_review, subject_access_review};

/// The group every authenticated user belongs to.
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";
/// The group of every service account.
pub const ALL_SERVICE_ACCOUNTS_GROUP: &str = "system:serviceaccounts";
/// The superuser group (bound to `cluster-admin` by [`bootstrap_objects`]).
pub const MASTERS_GROUP: &str = "system:masters";

/// An authenticated user.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserInfo {
    /// User name (`system:serviceaccount:<ns>:<name>` for service accounts).
    pub name: String,
    /// Groups, in the order the real server reports them.
    pub groups: Vec<String>,
    /// UID (empty when unknown).
    pub uid: String,
    /// Extra attributes.
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// The emulator's default identity, a cluster admin: user `admin` in `system:masters`
    /// and `system:authenticated`.
    pub fn admin() -> UserInfo {
        UserInfo {
            name: "admin".into(),
            groups: vec![MASTERS_GROUP.into(), AUTHENTICATED_GROUP.into()],
            ..UserInfo::default()
        }
    }

    /// A service account as authenticated by its token: groups `system:serviceaccounts`,
    /// `system:serviceaccounts:<ns>`, `system:authenticated`.
    pub fn service_account(namespace: &str, name: &str) -> UserInfo {
        UserInfo {
            name: service_account_username(namespace, name),
            groups: vec![
                ALL_SERVICE_ACCOUNTS_GROUP.into(),
                format!("{ALL_SERVICE_ACCOUNTS_GROUP}:{namespace}"),
                AUTHENTICATED_GROUP.into(),
            ],
            ..UserInfo::default()
        }
    }

    /// The JSON `userInfo` of a SelfSubjectReview / TokenReview (`uid`, `groups`, `extra`
    /// omitted when empty).
    pub fn to_json(&self) -> Value {
        let mut v = json!({"username": self.name});
        if !self.uid.is_empty() {
            v["uid"] = json!(self.uid);
        }
        if !self.groups.is_empty() {
            v["groups"] = json!(self.groups);
        }
        if !self.extra.is_empty() {
            v["extra"] = json!(self.extra);
        }
        v
    }
}

/// `system:serviceaccount:<ns>:<name>`.
pub fn service_account_username(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// Splits `system:serviceaccount:<ns>:<name>` into `(ns, name)`; `None` for other users or
/// malformed names (empty parts, extra colons).
pub fn split_service_account_username(user: &str) -> Option<(&str, &str)> {
    let rest = user.strip_prefix("system:serviceaccount:")?;
    let (ns, name) = rest.split_once(':')?;
    if ns.is_empty() || name.is_empty() || name.contains(':') {
        return None;
    }
    Some((ns, name))
}

/// The attributes of a resource request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attributes {
    /// get list watch create update patch delete deletecollection (also impersonate, bind,
    /// escalate, use, ...).
    pub verb: String,
    /// API group (`""` for core).
    pub api_group: String,
    /// Resource (plural).
    pub resource: String,
    /// Subresource (`""` for none).
    pub subresource: String,
    /// Namespace (`""` at cluster scope).
    pub namespace: String,
    /// Object name (`""` for collections).
    pub name: String,
}

/// The RBAC objects to evaluate against (JSON as stored).
#[derive(Clone, Copy, Debug)]
pub struct Policy<'a> {
    /// Role objects (all namespaces).
    pub roles: &'a [Value],
    /// ClusterRole objects.
    pub cluster_roles: &'a [Value],
    /// RoleBinding objects (all namespaces).
    pub role_bindings: &'a [Value],
    /// ClusterRoleBinding objects.
    pub cluster_role_bindings: &'a [Value],
}

/// What a request asks for: a resource or a non-resource URL.
#[derive(Clone, Copy, Debug)]
enum Request<'a> {
    Resource(&'a Attributes),
    NonResource { verb: &'a str, path: &'a str },
}

/// The verb of an API request: `get`/`list`/`watch` for GET (named / collection / `watch=true`
/// or `watch=1`), `create` (POST), `update` (PUT), `patch` (PATCH), `delete` / `deletecollection`
/// (DELETE named / collection). Unknown methods give `""`.
pub fn request_verb(method: &str, has_name: bool, watch: bool) -> &'static str {
    match method.to_ascii_uppercase().as_str() {
        "GET" | "HEAD" if watch => "watch",
        "GET" | "HEAD" if has_name => "get",
        "GET" | "HEAD" => "list",
        "POST" => "create",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" if has_name => "delete",
        "DELETE" => "deletecollection",
        _ => "",
    }
}

/// Whether `user` may do `attrs` under RBAC.
pub fn authorize(
    user: &UserInfo,
    attrs: &Attributes,
    roles: &[Value],
    cluster_roles: &[Value],
    role_bindings: &[Value],
    cluster_role_bindings: &[Value],
) -> bool {
    let policy = Policy { roles, cluster_roles, role_bindings, cluster_role_bindings };
    authorize_reason(user, attrs, &policy).is_some()
}

/// Like [`authorize`], returning the real server's reason when allowed, e.g.
/// `RBAC: allowed by RoleBinding "bot-cm-editor/ns" of Role "cm-editor" to ServiceAccount "bot/ns"`.
pub fn authorize_reason(user: &UserInfo, attrs: &Attributes, policy: &Policy<'_>) -> Option<String> {
    visit(user, Request::Resource(attrs), policy)
}

/// Whether `user` may `verb` (usually `get`) the non-resource URL `path` (`/api`, `/healthz`, ...);
/// the reason when allowed.
pub fn authorize_non_resource(user: &UserInfo, verb: &str, path: &str, policy: &Policy<'_>) -> Option<String> {
    visit(user, Request::NonResource { verb, path }, policy)
}

/// The 403 Status of a denied resource request, exactly as the real server writes it:
/// `configmaps "x" is forbidden: User "u" cannot update resource "configmaps" in API group "" in the namespace "ns"`,
/// `deployments.apps is forbidden: User "u" cannot list resource "deployments" in API group "apps" at the cluster scope`;
/// a subresource shows as `pods/status`; details carry name (if any), group (if any) and kind = resource.
pub fn forbidden(user: &UserInfo, attrs: &Attributes) -> ApiError {
    let mut resource = attrs.resource.clone();
    if !attrs.subresource.is_empty() {
        resource = format!("{resource}/{}", attrs.subresource);
    }
    let why = if attrs.namespace.is_empty() {
        format!(
            "User {} cannot {} resource {} in API group {} at the cluster scope",
            go_quote(&user.name),
            attrs.verb,
            go_quote(&resource),
            go_quote(&attrs.api_group)
        )
    } else {
        format!(
            "User {} cannot {} resource {} in API group {} in the namespace {}",
            go_quote(&user.name),
            attrs.verb,
            go_quote(&resource),
            go_quote(&attrs.api_group),
            go_quote(&attrs.namespace)
        )
    };
    forbidden_status(&attrs.api_group, &attrs.resource, &attrs.name, &why)
}

/// The 403 Status of a denied non-resource request:
/// `forbidden: User "u" cannot get path "/foo"`, `details: {}`.
pub fn forbidden_non_resource(user: &UserInfo, verb: &str, path: &str) -> ApiError {
    let why = format!("User {} cannot {verb} path {}", go_quote(&user.name), go_quote(path));
    forbidden_status("", "", "", &why)
}

/// A Forbidden Status as `apierrors.NewForbidden` builds it: `<resource>.<group> "name" is
/// forbidden: <why>` (parts omitted when empty).
pub fn forbidden_status(group: &str, resource: &str, name: &str, why: &str) -> ApiError {
    let qualified = crate::errors::qualified(group, resource);
    let message = if resource.is_empty() && group.is_empty() {
        format!("forbidden: {why}")
    } else if name.is_empty() {
        format!("{qualified} is forbidden: {why}")
    } else {
        format!("{qualified} {} is forbidden: {why}", go_quote(name))
    };
    let mut details = serde_json::Map::new();
    if !name.is_empty() {
        details.insert("name".into(), json!(name));
    }
    if !group.is_empty() {
        details.insert("group".into(), json!(group));
    }
    if !resource.is_empty() {
        details.insert("kind".into(), json!(resource));
    }
    ApiError::status(403, "Forbidden", message, Some(Value::Object(details)))
}

/// The identity a request acts as, given the authenticated `requester` and the impersonation
/// headers (`Impersonate-User`, each `Impersonate-Group`, `Impersonate-Uid`, and the
/// `Impersonate-Extra-<key>` values, keys already unescaped and lower-cased by the caller).
///
/// Without `Impersonate-User` and with no other impersonation header, the requester itself.
/// Otherwise the requester needs the `impersonate` verb on `users` (or `serviceaccounts` in the
/// service account's namespace, by name), on each `groups` name, on `uids` and on
/// `userextras/<key>` (group `authentication.k8s.io`) — else the 403 of [`forbidden`] for
/// that check. A service account user impersonated without groups gets `system:serviceaccounts`
/// and `system:serviceaccounts:<ns>`; `system:authenticated` is appended unless present
/// (or the user is `system:anonymous`, who gets `system:unauthenticated`).
/// Headers other than `Impersonate-User` without it: a 500 `InternalError` as on a real server.
pub fn impersonate(
    requester: &UserInfo,
    user: Option<&str>,
    groups: &[String],
    uid: Option<&str>,
    extra: &BTreeMap<String, Vec<String>>,
    policy: &Policy<'_>,
) -> Result<UserInfo, ApiError> {
    let user = user.filter(|u| !u.is_empty());
    let Some(username) = user else {
        if groups.is_empty() && uid.is_none_or(str::is_empty) && extra.is_empty() {
            return Ok(requester.clone());
        }
        return Err(ApiError::internal(
            "Internal error occurred: requested impersonation of groups, uid or extra without impersonating a user",
        ));
    };
    let check = |attrs: Attributes| -> Result<(), ApiError> {
        if authorize_reason(requester, &attrs, policy).is_some() { Ok(()) } else { Err(forbidden(requester, &attrs)) }
    };
    let impersonate_attrs = |group: &str, resource: &str, subresource: &str, namespace: &str, name: &str| Attributes {
        verb: "impersonate".into(),
        api_group: group.into(),
        resource: resource.into(),
        subresource: subresource.into(),
        namespace: namespace.into(),
        name: name.into(),
    };
    let sa = split_service_account_username(username);
    match sa {
        Some((ns, name)) => check(impersonate_attrs("", "serviceaccounts", "", ns, name))?,
        None => check(impersonate_attrs("", "users", "", "", username))?,
    }
    for g in groups {
        check(impersonate_attrs("", "groups", "", "", g))?;
    }
    if let Some(u) = uid.filter(|u| !u.is_empty()) {
        check(impersonate_attrs("authentication.k8s.io", "uids", "", "", u))?;
    }
    for (key, values) in extra {
        for v in values {
            check(impersonate_attrs("authentication.k8s.io", "userextras", key, "", v))?;
        }
    }
    let mut out_groups: Vec<String> = groups.to_vec();
    if let Some((ns, _)) = sa
        && groups.is_empty()
    {
        out_groups = vec![ALL_SERVICE_ACCOUNTS_GROUP.into(), format!("{ALL_SERVICE_ACCOUNTS_GROUP}:{ns}")];
    }
    if username == "system:anonymous" {
        if !out_groups.iter().any(|g| g == "system:unauthenticated") {
            out_groups.push("system:unauthenticated".into());
        }
    } else if !out_groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
        out_groups.push(AUTHENTICATED_GROUP.into());
    }
    Ok(UserInfo {
        name: username.to_string(),
        groups: out_groups,
        uid: uid.unwrap_or_default().to_string(),
        extra: extra.clone(),
    })
}

// ---------------------------------------------------------------------------------------------
// Evaluation

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn strs_of<'a>(v: &'a Value, key: &str) -> Vec<&'a str> {
    v.get(key).and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default()
}

fn meta_str<'a>(obj: &'a Value, key: &str) -> &'a str {
    obj.get("metadata").map(|m| str_of(m, key)).unwrap_or("")
}

/// The first subject of `binding` that applies to `user` (`binding_ns` is `""` for
/// ClusterRoleBindings).
fn applies_to<'a>(user: &UserInfo, binding: &'a Value, binding_ns: &str) -> Option<&'a Value> {
    let subjects = binding.get("subjects")?.as_array()?;
    subjects.iter().find(|s| {
        let name = str_of(s, "name");
        match str_of(s, "kind") {
            "User" => user.name == name,
            "Group" => user.groups.iter().any(|g| g == name),
            "ServiceAccount" => {
                let ns = if str_of(s, "namespace").is_empty() { binding_ns } else { str_of(s, "namespace") };
                !ns.is_empty() && user.name == service_account_username(ns, name)
            }
            _ => false,
        }
    })
}

fn describe_subject(subject: &Value, binding_ns: &str) -> String {
    let kind = str_of(subject, "kind");
    let name = str_of(subject, "name");
    if kind == "ServiceAccount" {
        let ns = if str_of(subject, "namespace").is_empty() { binding_ns } else { str_of(subject, "namespace") };
        format!("{kind} {}", go_quote(&format!("{name}/{ns}")))
    } else {
        format!("{kind} {}", go_quote(name))
    }
}

/// The rules of the role a binding refers to (`None` when it does not exist).
fn role_rules<'a>(role_ref: &Value, binding_ns: &str, policy: &Policy<'a>) -> Option<&'a Vec<Value>> {
    let name = str_of(role_ref, "name");
    let role = match str_of(role_ref, "kind") {
        "ClusterRole" => policy.cluster_roles.iter().find(|r| meta_str(r, "name") == name),
        "Role" if !binding_ns.is_empty() => {
            policy.roles.iter().find(|r| meta_str(r, "name") == name && meta_str(r, "namespace") == binding_ns)
        }
        _ => None,
    }?;
    role.get("rules").and_then(Value::as_array)
}

fn matches_any(list: &[&str], wanted: &str, all: &str) -> bool {
    list.iter().any(|x| *x == all || *x == wanted)
}

/// Whether one PolicyRule allows the request (upstream `RuleAllows`).
fn rule_allows(rule: &Value, req: Request<'_>) -> bool {
    let verbs = strs_of(rule, "verbs");
    match req {
        Request::Resource(a) => {
            if !matches_any(&verbs, &a.verb, "*") || !matches_any(&strs_of(rule, "apiGroups"), &a.api_group, "*") {
                return false;
            }
            let combined =
                if a.subresource.is_empty() { a.resource.clone() } else { format!("{}/{}", a.resource, a.subresource) };
            let resource_ok = strs_of(rule, "resources").iter().any(|r| {
                *r == "*"
                    || *r == combined
                    || (!a.subresource.is_empty()
                        && r.len() == a.subresource.len() + 2
                        && r.starts_with("*/")
                        && r.ends_with(a.subresource.as_str()))
            });
            if !resource_ok {
                return false;
            }
            let names = strs_of(rule, "resourceNames");
            names.is_empty() || names.contains(&a.name.as_str())
        }
        Request::NonResource { verb, path } => {
            matches_any(&verbs, verb, "*")
                && strs_of(rule, "nonResourceURLs")
                    .iter()
                    .any(|u| *u == "*" || *u == path || (u.ends_with('*') && path.starts_with(u.trim_end_matches('*'))))
        }
    }
}

/// Visits ClusterRoleBindings, then (for namespaced requests) the RoleBindings of the request's
/// namespace, in order; the first rule allowing the request gives the reason.
fn visit(user: &UserInfo, req: Request<'_>, policy: &Policy<'_>) -> Option<String> {
    for crb in policy.cluster_role_bindings {
        let Some(subject) = applies_to(user, crb, "") else { continue };
        let role_ref = crb.get("roleRef").unwrap_or(&Value::Null);
        if str_of(role_ref, "kind") != "ClusterRole" {
            continue;
        }
        let Some(rules) = role_rules(role_ref, "", policy) else { continue };
        if rules.iter().any(|r| rule_allows(r, req)) {
            return Some(format!(
                "RBAC: allowed by ClusterRoleBinding {} of {} {} to {}",
                go_quote(meta_str(crb, "name")),
                str_of(role_ref, "kind"),
                go_quote(str_of(role_ref, "name")),
                describe_subject(subject, "")
            ));
        }
    }
    let Request::Resource(attrs) = req else { return None };
    if attrs.namespace.is_empty() {
        return None;
    }
    for rb in policy.role_bindings.iter().filter(|rb| meta_str(rb, "namespace") == attrs.namespace) {
        let ns = attrs.namespace.as_str();
        let Some(subject) = applies_to(user, rb, ns) else { continue };
        let role_ref = rb.get("roleRef").unwrap_or(&Value::Null);
        let Some(rules) = role_rules(role_ref, ns, policy) else { continue };
        if rules.iter().any(|r| rule_allows(r, req)) {
            return Some(format!(
                "RBAC: allowed by RoleBinding {} of {} {} to {}",
                go_quote(&format!("{}/{ns}", meta_str(rb, "name"))),
                str_of(role_ref, "kind"),
                go_quote(str_of(role_ref, "name")),
                describe_subject(subject, ns)
            ));
        }
    }
    None
}

/// All the rules that apply to `user` in `namespace` (cluster-wide rules first; `""` for the
/// cluster scope only), as upstream `RulesFor` collects them.
pub fn rules_for(user: &UserInfo, namespace: &str, policy: &Policy<'_>) -> Vec<Value> {
    let mut out = Vec::new();
    for crb in policy.cluster_role_bindings {
        if applies_to(user, crb, "").is_none() {
            continue;
        }
        let role_ref = crb.get("roleRef").unwrap_or(&Value::Null);
        if str_of(role_ref, "kind") != "ClusterRole" {
            continue;
        }
        if let Some(rules) = role_rules(role_ref, "", policy) {
            out.extend(rules.iter().cloned());
        }
    }
    if !namespace.is_empty() {
        for rb in policy.role_bindings.iter().filter(|rb| meta_str(rb, "namespace") == namespace) {
            if applies_to(user, rb, namespace).is_none() {
                continue;
            }
            let role_ref = rb.get("roleRef").unwrap_or(&Value::Null);
            if let Some(rules) = role_rules(role_ref, namespace, policy) {
                out.extend(rules.iter().cloned());
            }
        }
    }
    out
}

/// Go's `%q` of a string (`strconv.Quote`): double quotes, backslash escapes for `"`, `\`,
/// control and non-printable characters.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if c.is_control() => {
                if (c as u32) < 0x10000 {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                } else {
                    out.push_str(&format!("\\U{:08x}", c as u32));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests;
