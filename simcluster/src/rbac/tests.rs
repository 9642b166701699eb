//! Replays, at the function level, what recording 18 (rbac-impersonation) shows. The namespace
//! is literally `<ns>`, so the recorded (normalized) bodies compare as they are.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::*;

const NS: &str = "<ns>";

fn recording(case: &str) -> Value {
    let path = format!("{}/conformance/recorded/{case}.json", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).expect("recording")).expect("json")
}

fn step<'a>(rec: &'a Value, name: &str) -> &'a Value {
    rec["exchanges"].as_array().and_then(|a| a.iter().find(|e| e["step"] == name)).expect("step")
}

struct World {
    roles: Vec<Value>,
    cluster_roles: Vec<Value>,
    role_bindings: Vec<Value>,
    cluster_role_bindings: Vec<Value>,
}

impl World {
    fn new(rec: &Value) -> World {
        let mut w =
            World { roles: vec![], cluster_roles: vec![], role_bindings: vec![], cluster_role_bindings: vec![] };
        for obj in bootstrap_objects() {
            match obj["kind"].as_str() {
                Some("ClusterRole") => w.cluster_roles.push(obj),
                Some("ClusterRoleBinding") => w.cluster_role_bindings.push(obj),
                _ => panic!("unexpected bootstrap kind"),
            }
        }
        w.roles.push(step(rec, "create-role")["body"].clone());
        w.role_bindings.push(step(rec, "create-rolebinding")["body"].clone());
        w
    }

    fn policy(&self) -> Policy<'_> {
        Policy {
            roles: &self.roles,
            cluster_roles: &self.cluster_roles,
            role_bindings: &self.role_bindings,
            cluster_role_bindings: &self.cluster_role_bindings,
        }
    }

    fn allows(&self, user: &UserInfo, attrs: &Attributes) -> bool {
        authorize(user, attrs, &self.roles, &self.cluster_roles, &self.role_bindings, &self.cluster_role_bindings)
    }
}

fn attrs(verb: &str, group: &str, resource: &str, namespace: &str, name: &str) -> Attributes {
    Attributes {
        verb: verb.into(),
        api_group: group.into(),
        resource: resource.into(),
        subresource: String::new(),
        namespace: namespace.into(),
        name: name.into(),
    }
}

fn bot(w: &World, groups: &[&str]) -> UserInfo {
    let groups: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
    impersonate(
        &UserInfo::admin(),
        Some("system:serviceaccount:<ns>:bot"),
        &groups,
        None,
        &BTreeMap::new(),
        &w.policy(),
    )
    .expect("admin may impersonate")
}

#[test]
fn impersonated_service_account_gets_its_groups() {
    let rec = recording("18-rbac-impersonation");
    let w = World::new(&rec);
    let u = bot(&w, &[]);
    assert_eq!(u.name, "system:serviceaccount:<ns>:bot");
    assert_eq!(u.groups, vec!["system:serviceaccounts", "system:serviceaccounts:<ns>", "system:authenticated"]);
    assert_eq!(u, UserInfo::service_account(NS, "bot"));
    let with_group = bot(&w, &["system:serviceaccounts"]);
    assert_eq!(with_group.groups, vec!["system:serviceaccounts", "system:authenticated"]);
}

#[test]
fn recorded_allowed_requests_are_allowed() {
    let rec = recording("18-rbac-impersonation");
    let w = World::new(&rec);
    let u = bot(&w, &[]);
    for (verb, name) in [("list", ""), ("create", ""), ("patch", "by-bot"), ("get", "by-bot"), ("watch", "")] {
        assert!(w.allows(&u, &attrs(verb, "", "configmaps", NS, name)), "{verb}");
    }
    assert!(
        w.allows(&UserInfo::admin(), &attrs("create", "apiextensions.k8s.io", "customresourcedefinitions", "", ""))
    );
}

#[test]
fn recorded_forbidden_bodies() {
    let rec = recording("18-rbac-impersonation");
    let w = World::new(&rec);
    let u = bot(&w, &[]);
    let cases = [
        ("bot-update-forbidden", attrs("update", "", "configmaps", NS, "by-bot")),
        ("bot-delete-forbidden", attrs("delete", "", "configmaps", NS, "by-bot")),
        ("bot-list-secrets-forbidden", attrs("list", "", "secrets", NS, "")),
        ("bot-get-missing-secret-forbidden-not-404", attrs("get", "", "secrets", NS, "nope")),
        ("bot-get-deployments-forbidden", attrs("list", "apps", "deployments", NS, "")),
        ("bot-list-namespaces-forbidden", attrs("list", "", "namespaces", "", "")),
        ("bot-list-configmaps-all-namespaces-forbidden", attrs("list", "", "configmaps", "", "")),
        ("bot-configmaps-other-namespace-forbidden", attrs("list", "", "configmaps", "default", "")),
        ("bot-watch-secrets-forbidden", attrs("watch", "", "secrets", NS, "")),
        ("bot-create-role-forbidden", attrs("create", "rbac.authorization.k8s.io", "roles", NS, "")),
    ];
    for (name, a) in cases {
        assert!(!w.allows(&u, &a), "{name} must be denied");
        let want = step(&rec, name);
        let err = forbidden(&u, &a);
        assert_eq!(err.code(), 403);
        assert_eq!(err.body().as_ref(), Some(&want["body"]), "{name}");
    }
}

#[test]
fn forbidden_subresource_and_non_resource_messages() {
    let u = UserInfo::service_account("ns", "bot");
    let mut a = attrs("patch", "apps", "deployments", "ns", "web");
    a.subresource = "status".into();
    let body = forbidden(&u, &a).body().expect("status body");
    assert_eq!(
        body["message"],
        "deployments.apps \"web\" is forbidden: User \"system:serviceaccount:ns:bot\" cannot patch resource \"deployments/status\" in API group \"apps\" in the namespace \"ns\""
    );
    assert_eq!(body["details"], json!({"name": "web", "group": "apps", "kind": "deployments"}));
    let body = forbidden_non_resource(&u, "get", "/metrics").body().expect("status body");
    assert_eq!(body["message"], "forbidden: User \"system:serviceaccount:ns:bot\" cannot get path \"/metrics\"");
    assert_eq!(body["details"], json!({}));
}

fn without_managed_fields(mut v: Value) -> Value {
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    v
}

fn request_body(case: &str, step_name: &str) -> Value {
    let path = format!("{}/conformance/cases/{case}.json", env!("CARGO_MANIFEST_DIR"));
    let c: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("case")).expect("json");
    let s = c["steps"].as_array().and_then(|a| a.iter().find(|s| s["name"] == step_name)).expect("step");
    let text = serde_json::to_string(&s["body"]).expect("body").replace("${ns}", NS);
    serde_json::from_str(&text).expect("body json")
}

#[test]
fn recorded_self_subject_access_reviews() {
    let rec = recording("18-rbac-impersonation");
    let w = World::new(&rec);
    let u = bot(&w, &[]);
    for name in ["bot-ssar-delete-denied", "bot-ssar-create-allowed", "bot-ssar-cluster-scope-denied"] {
        let got =
            self_subject_access_review(&u, &request_body("18-rbac-impersonation", name), &w.policy()).expect(name);
        let want = without_managed_fields(step(&rec, name)["body"].clone());
        assert_eq!(got, want, "{name}");
    }
    // The user needs system:basic-user to create them at all.
    assert!(w.allows(&u, &attrs("create", "authorization.k8s.io", "selfsubjectaccessreviews", "", "")));
    assert!(w.allows(&u, &attrs("create", "authentication.k8s.io", "selfsubjectreviews", "", "")));
}

#[test]
fn recorded_subject_access_review_and_whoami() {
    let rec = recording("18-rbac-impersonation");
    let w = World::new(&rec);
    let got = subject_access_review(&request_body("18-rbac-impersonation", "admin-subjectaccessreview"), &w.policy())
        .expect("valid");
    assert_eq!(got, without_managed_fields(step(&rec, "admin-subjectaccessreview")["body"].clone()));

    let u = bot(&w, &["system:serviceaccounts"]);
    let got = self_subject_review(&u, &request_body("18-rbac-impersonation", "bot-whoami"), "<time>");
    assert_eq!(got, step(&rec, "bot-whoami")["body"]);
}

#[test]
fn review_validation_errors() {
    let w = World::new(&recording("18-rbac-impersonation"));
    let err = self_subject_access_review(&UserInfo::admin(), &json!({"spec": {}}), &w.policy()).expect_err("invalid");
    let body = err.body().expect("body");
    assert_eq!(body["code"], 422);
    assert_eq!(
        body["message"],
        "SelfSubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.resourceAttributes: Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified"
    );
    let err = subject_access_review(&json!({"spec": {"resourceAttributes": {"verb": "get"}}}), &w.policy())
        .expect_err("no user");
    assert_eq!(err.body().expect("body")["details"]["causes"][0]["field"], "spec.user");
}

#[test]
fn group_binding_through_impersonated_group() {
    let rec = recording("18-rbac-impersonation");
    let mut w = World::new(&rec);
    let list_deployments = attrs("list", "apps", "deployments", NS, "");
    let u = bot(&w, &["system:serviceaccounts:<ns>"]);
    assert!(!w.allows(&u, &list_deployments));
    w.role_bindings.push(step(&rec, "group-grants-via-impersonated-group")["body"].clone());
    assert!(w.allows(&u, &list_deployments));
    // Only the bound namespace.
    assert!(!w.allows(&u, &attrs("list", "apps", "deployments", "default", "")));
    // view does not grant writes nor secrets.
    assert!(!w.allows(&u, &attrs("create", "apps", "deployments", NS, "")));
    assert!(!w.allows(&u, &attrs("get", "", "secrets", NS, "x")));
}

#[test]
fn impersonation_needs_permission() {
    let w = World::new(&recording("18-rbac-impersonation"));
    let u = bot(&w, &[]);
    let err = impersonate(&u, Some("someone"), &[], None, &BTreeMap::new(), &w.policy()).expect_err("forbidden");
    assert_eq!(
        err.body().expect("body")["message"],
        "users \"someone\" is forbidden: User \"system:serviceaccount:<ns>:bot\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
    );
    let err = impersonate(&UserInfo::admin(), None, &["g".into()], None, &BTreeMap::new(), &w.policy());
    assert_eq!(err.expect_err("group without user").code(), 500);
    let same = impersonate(&u, None, &[], None, &BTreeMap::new(), &w.policy()).expect("no impersonation");
    assert_eq!(same, u);
}

#[test]
fn non_resource_urls_and_wildcards() {
    let w = World::new(&recording("18-rbac-impersonation"));
    let u = UserInfo::service_account("x", "y");
    assert!(authorize_non_resource(&u, "get", "/apis/apps/v1", &w.policy()).is_some());
    assert!(authorize_non_resource(&u, "get", "/metrics", &w.policy()).is_none());
    let reason = authorize_reason(&UserInfo::admin(), &attrs("delete", "", "nodes", "", "n1"), &w.policy());
    assert_eq!(
        reason.as_deref(),
        Some(
            "RBAC: allowed by ClusterRoleBinding \"cluster-admin\" of ClusterRole \"cluster-admin\" to Group \"system:masters\""
        )
    );
    let role = json!({"kind": "Role", "metadata": {"name": "r", "namespace": "n"},
        "rules": [{"apiGroups": ["apps"], "resources": ["*/scale"], "verbs": ["update"], "resourceNames": ["web"]}]});
    let rb = json!({"kind": "RoleBinding", "metadata": {"name": "b", "namespace": "n"},
        "roleRef": {"kind": "Role", "name": "r"}, "subjects": [{"kind": "User", "name": "alice"}]});
    let alice = UserInfo { name: "alice".into(), ..UserInfo::default() };
    let mut a = attrs("update", "apps", "deployments", "n", "web");
    a.subresource = "scale".into();
    assert!(authorize(&alice, &a, std::slice::from_ref(&role), &[], std::slice::from_ref(&rb), &[]));
    a.name = "other".into();
    assert!(!authorize(&alice, &a, std::slice::from_ref(&role), &[], std::slice::from_ref(&rb), &[]));
    a.name = "web".into();
    a.subresource = String::new();
    assert!(!authorize(&alice, &a, &[role], &[], &[rb], &[]));
}

#[test]
fn escalation_prevention() {
    let rec = recording("18-rbac-impersonation");
    let mut w = World::new(&rec);
    // Let the bot manage roles and bindings in its namespace, but nothing more.
    w.roles.push(json!({"kind": "Role", "metadata": {"name": "rbac-manager", "namespace": NS},
        "rules": [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"], "verbs": ["create"]}]}));
    w.role_bindings.push(json!({"kind": "RoleBinding", "metadata": {"name": "bot-rbac", "namespace": NS},
        "roleRef": {"kind": "Role", "name": "rbac-manager"},
        "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": NS}]}));
    let u = bot(&w, &[]);
    let escalate = json!({"kind": "Role", "metadata": {"name": "escalate", "namespace": NS},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]});
    let err = check_role_escalation(&u, &escalate, &w.policy()).expect_err("escalation");
    assert_eq!(
        err.body().expect("body")["message"],
        "roles.rbac.authorization.k8s.io \"escalate\" is forbidden: user \"system:serviceaccount:<ns>:bot\" (groups=[\"system:serviceaccounts\" \"system:serviceaccounts:<ns>\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"*\"], Resources:[\"*\"], Verbs:[\"*\"]}"
    );
    let subset = json!({"kind": "Role", "metadata": {"name": "ok", "namespace": NS},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]});
    check_role_escalation(&u, &subset, &w.policy()).expect("held permissions");
    let partial = json!({"kind": "Role", "metadata": {"name": "partial", "namespace": NS},
        "rules": [{"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["get", "delete"]}]});
    let msg = check_role_escalation(&u, &partial, &w.policy()).expect_err("partial").body().expect("body")["message"]
        .as_str()
        .map(String::from)
        .unwrap_or_default();
    assert!(msg.ends_with(
        "not currently held:\n{APIGroups:[\"\"], Resources:[\"configmaps\"], Verbs:[\"delete\"]}\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"delete\"]}"
    ), "{msg}");
    check_role_escalation(&UserInfo::admin(), &escalate, &w.policy()).expect("system:masters");
    let bind_admin = json!({"kind": "RoleBinding", "metadata": {"name": "b", "namespace": NS},
        "roleRef": {"kind": "ClusterRole", "name": "admin"}, "subjects": [{"kind": "User", "name": "x"}]});
    assert_eq!(check_binding_escalation(&u, &bind_admin, &w.policy()).expect_err("bind admin").code(), 403);
    let bind_editor = json!({"kind": "RoleBinding", "metadata": {"name": "b", "namespace": NS},
        "roleRef": {"kind": "Role", "name": "cm-editor"}, "subjects": [{"kind": "User", "name": "x"}]});
    check_binding_escalation(&u, &bind_editor, &w.policy()).expect("holds cm-editor's rules");
}

#[test]
fn request_verbs() {
    assert_eq!(request_verb("GET", true, false), "get");
    assert_eq!(request_verb("GET", false, false), "list");
    assert_eq!(request_verb("GET", false, true), "watch");
    assert_eq!(request_verb("POST", false, false), "create");
    assert_eq!(request_verb("PUT", true, false), "update");
    assert_eq!(request_verb("PATCH", true, false), "patch");
    assert_eq!(request_verb("DELETE", true, false), "delete");
    assert_eq!(request_verb("DELETE", false, false), "deletecollection");
}
