//! The default ClusterRoles and ClusterRoleBindings a real cluster starts with, reduced to what
//! the recordings exercise: `cluster-admin` (bound to `system:masters`), `system:basic-user`
//! (everyone may create SelfSubjectAccessReviews, SelfSubjectRulesReviews and
//! SelfSubjectReviews), `system:discovery` and `system:public-info-viewer` (discovery and health
//! URLs), and the user-facing `admin` / `edit` / `view` roles (with their rules already
//! aggregated, plus the `aggregationRule` the real ones carry).

use serde_json::{Value, json};

fn meta(name: &str, aggregate_to: &[&str]) -> Value {
    let mut labels = json!({"kubernetes.io/bootstrapping": "rbac-defaults"});
    for to in aggregate_to {
        labels[format!("rbac.authorization.k8s.io/aggregate-to-{to}")] = json!("true");
    }
    json!({
        "name": name,
        "labels": labels,
        "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
    })
}

fn cluster_role(name: &str, rules: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta(name, &[]), "rules": rules})
}

fn aggregated_role(name: &str, rules: Value) -> Value {
    let mut role = cluster_role(name, rules);
    role["aggregationRule"] = json!({"clusterRoleSelectors": [
        {"matchLabels": {format!("rbac.authorization.k8s.io/aggregate-to-{name}"): "true"}}
    ]});
    role
}

fn binding(name: &str, role: &str, groups: &[&str]) -> Value {
    let subjects: Vec<Value> =
        groups.iter().map(|g| json!({"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": g})).collect();
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": meta(name, &[]),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": subjects,
    })
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Value {
    json!({"verbs": verbs, "apiGroups": groups, "resources": resources})
}

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];

fn view_rules() -> Vec<Value> {
    vec![
        rule(
            &[""],
            &[
                "configmaps",
                "endpoints",
                "persistentvolumeclaims",
                "persistentvolumeclaims/status",
                "pods",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "serviceaccounts",
                "services",
                "services/status",
            ],
            READ,
        ),
        rule(
            &[""],
            &[
                "bindings",
                "events",
                "limitranges",
                "namespaces/status",
                "pods/log",
                "pods/status",
                "replicationcontrollers/status",
                "resourcequotas",
                "resourcequotas/status",
            ],
            READ,
        ),
        rule(&[""], &["namespaces"], READ),
        rule(&["discovery.k8s.io"], &["endpointslices"], READ),
        rule(
            &["apps"],
            &[
                "controllerrevisions",
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "statefulsets",
                "statefulsets/scale",
                "statefulsets/status",
            ],
            READ,
        ),
        rule(&["autoscaling"], &["horizontalpodautoscalers", "horizontalpodautoscalers/status"], READ),
        rule(&["batch"], &["cronjobs", "cronjobs/status", "jobs", "jobs/status"], READ),
        rule(
            &["extensions"],
            &[
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "ingresses",
                "ingresses/status",
                "networkpolicies",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "replicationcontrollers/scale",
            ],
            READ,
        ),
        rule(&["policy"], &["poddisruptionbudgets", "poddisruptionbudgets/status"], READ),
        rule(&["networking.k8s.io"], &["ingresses", "ingresses/status", "networkpolicies"], READ),
        rule(&["events.k8s.io"], &["events"], READ),
        rule(&["coordination.k8s.io"], &["leases"], READ),
    ]
}

fn edit_rules() -> Vec<Value> {
    let mut rules = vec![
        rule(&[""], &["pods/attach", "pods/exec", "pods/portforward", "pods/proxy", "secrets", "services/proxy"], READ),
        rule(&[""], &["serviceaccounts"], &["impersonate"]),
        rule(
            &[""],
            &[
                "pods",
                "pods/attach",
                "pods/exec",
                "pods/portforward",
                "pods/proxy",
                "configmaps",
                "endpoints",
                "events",
                "persistentvolumeclaims",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "secrets",
                "serviceaccounts",
                "services",
                "services/proxy",
            ],
            WRITE,
        ),
        rule(&[""], &["serviceaccounts/token"], &["create"]),
        rule(
            &["apps"],
            &[
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "replicasets",
                "replicasets/scale",
                "statefulsets",
                "statefulsets/scale",
            ],
            WRITE,
        ),
        rule(&["autoscaling"], &["horizontalpodautoscalers"], WRITE),
        rule(&["batch"], &["cronjobs", "jobs"], WRITE),
        rule(&["policy"], &["poddisruptionbudgets"], WRITE),
        rule(&["networking.k8s.io"], &["ingresses", "networkpolicies"], WRITE),
        rule(&["events.k8s.io"], &["events"], WRITE),
        rule(&["coordination.k8s.io"], &["leases"], WRITE),
    ];
    rules.extend(view_rules());
    rules
}

fn admin_rules() -> Vec<Value> {
    let mut rules = vec![
        rule(&["authorization.k8s.io"], &["localsubjectaccessreviews"], &["create"]),
        rule(
            &["rbac.authorization.k8s.io"],
            &["rolebindings", "roles"],
            &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
        ),
    ];
    rules.extend(edit_rules());
    rules
}

/// The ClusterRoles and ClusterRoleBindings to create at startup (objects without uid,
/// resourceVersion or timestamps; the store adds them).
pub fn bootstrap_objects() -> Vec<Value> {
    let all_nonresource = json!([
        {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
        {"nonResourceURLs": ["*"], "verbs": ["*"]},
    ]);
    vec![
        cluster_role("cluster-admin", all_nonresource),
        cluster_role(
            "system:basic-user",
            json!([
                {"verbs": ["create"], "apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]},
                {"verbs": ["create"], "apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"]},
            ]),
        ),
        cluster_role(
            "system:discovery",
            json!([{"verbs": ["get"], "nonResourceURLs": [
                "/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz", "/version", "/version/"
            ]}]),
        ),
        cluster_role(
            "system:public-info-viewer",
            json!([{"verbs": ["get"], "nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"]}]),
        ),
        aggregated_role("admin", Value::Array(admin_rules())),
        aggregated_role("edit", Value::Array(edit_rules())),
        aggregated_role("view", Value::Array(view_rules())),
        binding("cluster-admin", "cluster-admin", &["system:masters"]),
        binding("system:basic-user", "system:basic-user", &["system:authenticated"]),
        binding("system:discovery", "system:discovery", &["system:authenticated"]),
        binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            &["system:authenticated", "system:unauthenticated"],
        ),
    ]
}
