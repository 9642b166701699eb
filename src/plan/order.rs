//! The static apply order: CustomResourceDefinitions, Namespaces, cluster-scoped definitions,
//! then namespaced configuration, Services, workloads, everything else, and webhooks last (so a
//! webhook never blocks the objects its own service needs). Prune walks it backwards.

/// The rank of a kind; lower applies first. `namespaced` is false for cluster-scoped kinds.
pub fn rank(group: &str, kind: &str, namespaced: bool) -> u8 {
    match (group, kind) {
        ("apiextensions.k8s.io", "CustomResourceDefinition") => 0,
        ("", "Namespace") => 1,
        ("admissionregistration.k8s.io", _) | ("apiregistration.k8s.io", "APIService") => 9,
        _ if !namespaced => 2,
        ("", "ResourceQuota" | "LimitRange" | "ServiceAccount" | "Secret" | "ConfigMap" | "PersistentVolumeClaim")
        | ("rbac.authorization.k8s.io", "Role" | "RoleBinding") => 3,
        ("", "Service") => 4,
        ("apps", "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet")
        | ("batch", "Job" | "CronJob")
        | ("", "Pod" | "ReplicationController") => 5,
        ("networking.k8s.io", "Ingress") | ("autoscaling", _) | ("policy", "PodDisruptionBudget") => 7,
        _ => 6,
    }
}

#[cfg(test)]
mod tests {
    use super::rank;

    #[test]
    fn definitions_first_webhooks_last() {
        let order = [
            ("apiextensions.k8s.io", "CustomResourceDefinition", false),
            ("", "Namespace", false),
            ("rbac.authorization.k8s.io", "ClusterRole", false),
            ("", "ConfigMap", true),
            ("", "Service", true),
            ("apps", "Deployment", true),
            ("example.com", "Widget", true),
            ("networking.k8s.io", "Ingress", true),
            ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration", false),
        ];
        let ranks: Vec<u8> = order.iter().map(|(g, k, n)| rank(g, k, *n)).collect();
        let mut sorted = ranks.clone();
        sorted.sort();
        assert_eq!(ranks, sorted);
        assert!(ranks.windows(2).all(|w| w[0] < w[1]), "{ranks:?}");
    }
}
