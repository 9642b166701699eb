//! API Priority and Fairness classification: which FlowSchema (and so which priority level) a
//! request falls under, named on every answer in `X-Kubernetes-PF-FlowSchema-UID` and
//! `X-Kubernetes-PF-PriorityLevel-UID`.
//!
//! The suggested configuration (v1.36) is built in with fixed UIDs, as far as simcluster's users
//! need it: `exempt` (1) for `system:masters`, `probes` (2), `kube-system-service-accounts`
//! (900), `service-accounts` (9000), `global-default` (9900). FlowSchemas created through the API
//! take part as on a real server: sorted by `matchingPrecedence`, then name, the first whose
//! rules match wins; one naming a priority level that does not exist is dangling and skipped.
//! Classification only: simcluster does not queue or reject by priority level (it has no
//! concurrency limit, so no request waits behind another's seat).

use serde_json::Value;

use crate::rbac::UserInfo;

/// What a request is, as API Priority and Fairness matches it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// A request for a resource.
    Resource {
        /// Verb as in audit logs: get, list, watch, create, update, patch, delete, deletecollection.
        verb: String,
        /// API group ("" for core).
        group: String,
        /// Resource, `resource/subresource` for a subresource.
        resource: String,
        /// Namespace ("" for cluster-scoped, or every namespace).
        namespace: String,
    },
    /// Any other path.
    NonResource {
        /// The lower-cased HTTP method.
        verb: String,
        /// The path.
        path: String,
    },
}

impl Request {
    /// The request for `method` on `path` with `query`.
    pub fn of(method: &http::Method, path: &str, query: &std::collections::BTreeMap<String, String>) -> Request {
        let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let (group, rest) = match segs.as_slice() {
            ["api", "v1", rest @ ..] if !rest.is_empty() => ("", rest),
            ["apis", g, _, rest @ ..] if !rest.is_empty() => (*g, rest),
            _ => return Request::NonResource { verb: method.as_str().to_lowercase(), path: path.to_string() },
        };
        let (legacy_watch, rest) = match rest {
            ["watch", rest @ ..] => (true, rest),
            _ => (false, rest),
        };
        let (namespace, resource, name, sub) = match rest {
            ["namespaces", ns, res, tail @ ..]
                if !(group.is_empty() && matches!(*res, "status" | "finalize") && tail.is_empty()) =>
            {
                (*ns, *res, tail.first().copied(), tail.get(1).copied())
            }
            [res, tail @ ..] => ("", *res, tail.first().copied(), tail.get(1).copied()),
            [] => ("", "", None, None),
        };
        let watch = legacy_watch || matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
        let verb = match (method.as_str(), name) {
            ("GET", _) if watch => "watch",
            ("GET", Some(_)) => "get",
            ("GET", None) => "list",
            ("POST", _) => "create",
            ("PUT", _) => "update",
            ("PATCH", _) => "patch",
            ("DELETE", Some(_)) => "delete",
            ("DELETE", None) => "deletecollection",
            (m, _) => return Request::NonResource { verb: m.to_lowercase(), path: path.to_string() },
        };
        Request::Resource {
            verb: verb.into(),
            group: group.into(),
            resource: sub.map_or_else(|| resource.to_string(), |s| format!("{resource}/{s}")),
            namespace: namespace.into(),
        }
    }
}

/// A FlowSchema or priority level's UID (a fixed one for the built-in objects).
pub type Uid = String;

/// The built-in priority levels: name → fixed UID. Levels of the suggested configuration that no
/// built-in schema here names still exist, so a created FlowSchema may name them.
pub const LEVELS: &[(&str, &str)] = &[
    ("exempt", "5d1e4c6a-0000-4000-8000-00000000e1e0"),
    ("workload-high", "5d1e4c6a-0000-4000-8000-00000000a1f1"),
    ("workload-low", "5d1e4c6a-0000-4000-8000-00000000a1f2"),
    ("global-default", "5d1e4c6a-0000-4000-8000-000000009d1f"),
    ("leader-election", "5d1e4c6a-0000-4000-8000-0000000001e1"),
    ("node-high", "5d1e4c6a-0000-4000-8000-0000000000d1"),
    ("system", "5d1e4c6a-0000-4000-8000-0000000000c1"),
    ("catch-all", "5d1e4c6a-0000-4000-8000-0000000000ca"),
];

fn level_uid(name: &str) -> Option<&'static str> {
    LEVELS.iter().find(|(n, _)| *n == name).map(|(_, u)| *u)
}

/// The built-in schema for `user`'s `request`: (precedence, name, schema UID, level UID).
fn builtin(user: &UserInfo, request: &Request) -> (i64, &'static str, &'static str, &'static str) {
    let level = |n| level_uid(n).unwrap_or_default();
    let probe = matches!(request, Request::NonResource { path, .. }
        if matches!(path.trim_start_matches('/').split('/').next(), Some("healthz" | "livez" | "readyz")));
    if crate::auth::is_admin(user) {
        (1, "exempt", "5d1e4c6a-0000-4000-8000-0000000e1e01", level("exempt"))
    } else if probe {
        (2, "probes", "5d1e4c6a-0000-4000-8000-00000000b0be", level("exempt"))
    } else if user.name.starts_with("system:serviceaccount:kube-system:") {
        (900, "kube-system-service-accounts", "5d1e4c6a-0000-4000-8000-0000005a0001", level("workload-high"))
    } else if user.name.starts_with("system:serviceaccount:") {
        (9000, "service-accounts", "5d1e4c6a-0000-4000-8000-0000005a0002", level("workload-low"))
    } else {
        (9900, "global-default", "5d1e4c6a-0000-4000-8000-000000009d0f", level("global-default"))
    }
}

fn strs(v: &Value) -> impl Iterator<Item = &str> {
    v.as_array().into_iter().flatten().filter_map(Value::as_str)
}

fn any_or(v: &Value, want: &str) -> bool {
    strs(v).any(|s| s == "*" || s == want)
}

fn subject_matches(subject: &Value, user: &UserInfo) -> bool {
    match subject["kind"].as_str() {
        Some("User") => matches!(subject["user"]["name"].as_str(), Some(n) if n == "*" || n == user.name),
        Some("Group") => {
            matches!(subject["group"]["name"].as_str(), Some(n) if n == "*" || user.groups.iter().any(|g| g == n))
        }
        Some("ServiceAccount") => {
            let (Some(ns), Some(name)) =
                (subject["serviceAccount"]["namespace"].as_str(), subject["serviceAccount"]["name"].as_str())
            else {
                return false;
            };
            match user.name.strip_prefix("system:serviceaccount:").and_then(|r| r.split_once(':')) {
                Some((uns, uname)) => uns == ns && (name == "*" || uname == name),
                None => false,
            }
        }
        _ => false,
    }
}

fn rule_matches(rule: &Value, user: &UserInfo, request: &Request) -> bool {
    let subjects = rule["subjects"].as_array().map(Vec::as_slice).unwrap_or_default();
    if !subjects.iter().any(|s| subject_matches(s, user)) {
        return false;
    }
    match request {
        Request::Resource { verb, group, resource, namespace } => {
            rule["resourceRules"].as_array().into_iter().flatten().any(|r| {
                any_or(&r["verbs"], verb)
                    && any_or(&r["apiGroups"], group)
                    && any_or(&r["resources"], resource)
                    && if namespace.is_empty() {
                        r["clusterScope"].as_bool() == Some(true)
                    } else {
                        any_or(&r["namespaces"], namespace)
                    }
            })
        }
        Request::NonResource { verb, path } => rule["nonResourceRules"].as_array().into_iter().flatten().any(|r| {
            any_or(&r["verbs"], verb)
                && strs(&r["nonResourceURLs"]).any(|u| {
                    u == "*" || u == path || u.strip_suffix('*').is_some_and(|prefix| path.starts_with(prefix))
                })
        }),
    }
}

/// The (FlowSchema UID, priority level UID) classifying `user`'s `request`, given the
/// FlowSchemas and PriorityLevelConfigurations created through the API.
pub fn classify(user: &UserInfo, request: &Request, schemas: &[&Value], levels: &[&Value]) -> (Uid, Uid) {
    let (precedence, name, schema, level) = builtin(user, request);
    let level_of = |name: &str| {
        levels
            .iter()
            .find(|l| l["metadata"]["name"] == name)
            .and_then(|l| l["metadata"]["uid"].as_str())
            .or_else(|| level_uid(name))
            .map(str::to_string)
    };
    let mut created: Vec<(i64, &str, &Value)> = schemas
        .iter()
        .map(|s| {
            (s["spec"]["matchingPrecedence"].as_i64().unwrap_or(1000), s["metadata"]["name"].as_str().unwrap_or(""), *s)
        })
        .filter(|(p, n, _)| (*p, *n) < (precedence, name))
        .collect();
    created.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    for (_, _, s) in created {
        // A schema naming a level that does not exist is dangling: not used.
        let Some(level) = s["spec"]["priorityLevelConfiguration"]["name"].as_str().and_then(level_of) else {
            continue;
        };
        if s["spec"]["rules"].as_array().into_iter().flatten().any(|r| rule_matches(r, user, request)) {
            return (s["metadata"]["uid"].as_str().unwrap_or_default().to_string(), level);
        }
    }
    (schema.to_string(), level.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sa(ns: &str, name: &str) -> UserInfo {
        UserInfo {
            name: format!("system:serviceaccount:{ns}:{name}"),
            groups: vec!["system:serviceaccounts".into(), format!("system:serviceaccounts:{ns}")],
            uid: String::new(),
            extra: Default::default(),
        }
    }

    fn req(method: &str, path: &str) -> Request {
        Request::of(&method.parse().unwrap(), path, &Default::default())
    }

    #[test]
    fn requests_are_told_by_verb_group_resource_and_namespace() {
        let leases = "/apis/coordination.k8s.io/v1/namespaces/sys/leases";
        let r = |verb: &str, ns: &str, res: &str, group: &str| Request::Resource {
            verb: verb.into(),
            group: group.into(),
            resource: res.into(),
            namespace: ns.into(),
        };
        assert_eq!(req("GET", leases), r("list", "sys", "leases", "coordination.k8s.io"));
        assert_eq!(req("PUT", &format!("{leases}/a")), r("update", "sys", "leases", "coordination.k8s.io"));
        assert_eq!(req("GET", "/api/v1/namespaces/sys/pods/p/log"), r("get", "sys", "pods/log", ""));
        assert_eq!(req("GET", "/api/v1/namespaces/sys"), r("get", "", "namespaces", ""));
        assert_eq!(req("GET", "/api/v1/watch/namespaces/sys/pods"), r("watch", "sys", "pods", ""));
        assert_eq!(req("GET", "/healthz"), Request::NonResource { verb: "get".into(), path: "/healthz".into() });
    }

    #[test]
    fn a_created_schema_wins_by_precedence_and_only_for_what_it_matches() {
        let schema = json!({
            "metadata": {"name": "leases", "uid": "fs-1"},
            "spec": {
                "matchingPrecedence": 200,
                "priorityLevelConfiguration": {"name": "leader-election"},
                "rules": [{
                    "subjects": [{"kind": "ServiceAccount", "serviceAccount": {"namespace": "sys", "name": "ksync"}}],
                    "resourceRules": [{"verbs": ["get", "update"], "apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "namespaces": ["sys"]}],
                }],
            },
        });
        let leases = "/apis/coordination.k8s.io/v1/namespaces/sys/leases/a";
        let ours = classify(&sa("sys", "ksync"), &req("PUT", leases), &[&schema], &[]);
        assert_eq!(ours, ("fs-1".to_string(), level_uid("leader-election").unwrap().to_string()));
        for (user, method, path) in [
            (sa("sys", "other"), "PUT", leases),
            (sa("sys", "ksync"), "DELETE", leases),
            (sa("sys", "ksync"), "PUT", "/apis/coordination.k8s.io/v1/namespaces/app/leases/a"),
            (sa("sys", "ksync"), "PUT", "/api/v1/namespaces/sys/configmaps/a"),
        ] {
            let (uid, _) = classify(&user, &req(method, path), &[&schema], &[]);
            assert_eq!(uid, "5d1e4c6a-0000-4000-8000-0000005a0002", "{method} {path}: service-accounts");
        }
        // Dangling (no such level): skipped.
        let mut dangling = schema.clone();
        dangling["spec"]["priorityLevelConfiguration"]["name"] = json!("nowhere");
        assert_ne!(classify(&sa("sys", "ksync"), &req("PUT", leases), &[&dangling], &[]).0, "fs-1");
        // Later than the built-in that matches (exempt for system:masters): not used.
        let admin = UserInfo { name: "admin".into(), groups: vec!["system:masters".into()], ..sa("x", "y") };
        assert_ne!(classify(&admin, &req("PUT", leases), &[&schema], &[]).0, "fs-1");
    }
}
