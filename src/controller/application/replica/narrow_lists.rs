//! Which kinds each service account may not list across the cluster, remembered by the replica.

/// How long a kind a service account may not list across the cluster is listed namespace by
/// namespace without asking the cluster-wide list again (RBAC may be granted later).
const NARROW_FOR: std::time::Duration = std::time::Duration::from_secs(300);

/// The kinds each service account may not list across the cluster (the API server answered
/// 403), with when it said so: the next plans list them in each namespace at once instead of
/// being refused first, one request fewer per kind and plan.
#[derive(Default)]
pub struct NarrowLists(std::sync::Mutex<std::collections::HashMap<(String, String, String), std::time::Instant>>);

impl NarrowLists {
    fn key(who: &str, r: &kube::core::ApiResource) -> (String, String, String) {
        (who.to_string(), r.group.clone(), r.kind.clone())
    }

    /// Whether `who` was refused the cluster-wide list of `r` less than [`NARROW_FOR`] ago.
    pub(crate) fn refused(&self, who: &str, r: &kube::core::ApiResource) -> bool {
        let mut refused = self.0.lock().expect("narrow lists lock");
        let key = Self::key(who, r);
        match refused.get(&key) {
            Some(at) if at.elapsed() < NARROW_FOR => true,
            Some(_) => {
                refused.remove(&key);
                false
            }
            None => false,
        }
    }

    pub(crate) fn note(&self, who: &str, r: &kube::core::ApiResource) {
        self.0.lock().expect("narrow lists lock").insert(Self::key(who, r), std::time::Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::ApiResource;

    #[test]
    fn a_refusal_is_remembered_per_service_account_and_kind() {
        let narrow = NarrowLists::default();
        let cm = ApiResource {
            group: String::new(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            plural: "configmaps".into(),
        };
        let deploy = ApiResource {
            group: "apps".into(),
            version: "v1".into(),
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            plural: "deployments".into(),
        };
        assert!(!narrow.refused("a/deployer", &cm));
        narrow.note("a/deployer", &cm);
        // (service account, kind, refused)
        let cases = [("a/deployer", &cm, true), ("b/deployer", &cm, false), ("a/deployer", &deploy, false)];
        for (who, r, refused) in cases {
            assert_eq!(narrow.refused(who, r), refused, "{who} {}", r.kind);
        }
        // A refusal older than NARROW_FOR is asked again.
        narrow.0.lock().unwrap().insert(NarrowLists::key("a/deployer", &cm), std::time::Instant::now() - NARROW_FOR);
        assert!(!narrow.refused("a/deployer", &cm));
        assert!(narrow.0.lock().unwrap().is_empty(), "an expired refusal is forgotten");
    }
}
