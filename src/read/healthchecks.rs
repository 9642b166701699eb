//! The HealthChecks that apply to an Application's resources, read as the user, so `ksync app`
//! and `ksync graph` judge health as the controller does: the HealthCheck of each object's kind
//! in its namespace (the Application's for a cluster-scoped object), chosen and compiled the
//! same way ([`crate::controller::healthcheck`]). HealthChecks that cannot be listed (forbidden,
//! CRD missing) are none: the built-in rules apply.

use std::collections::BTreeMap;

use kube::api::{Api, ListParams};

use super::connect::Cluster;
use crate::api::healthcheck::HealthCheck;
use crate::controller::healthcheck::{compile, winner};
use crate::health::cel::Rules;

/// HealthChecks by namespace.
#[derive(Default)]
pub struct Checks {
    by_namespace: BTreeMap<String, Vec<HealthCheck>>,
}

impl Checks {
    /// List the HealthChecks of each of `namespaces`.
    pub async fn read(cluster: &Cluster, namespaces: impl IntoIterator<Item = String>) -> Checks {
        let mut by_namespace = BTreeMap::new();
        for ns in namespaces {
            if by_namespace.contains_key(&ns) {
                continue;
            }
            let api: Api<HealthCheck> = Api::namespaced(cluster.client.clone(), &ns);
            let found = match api.list(&ListParams::default()).await {
                Ok(list) => list.items,
                Err(e) => {
                    tracing::debug!(error = %e, namespace = %ns, "listing HealthChecks");
                    Vec::new()
                }
            };
            by_namespace.insert(ns, found);
        }
        Checks { by_namespace }
    }

    /// `checks`, as listed.
    pub fn of(checks: impl IntoIterator<Item = HealthCheck>) -> Checks {
        let mut by_namespace: BTreeMap<String, Vec<HealthCheck>> = BTreeMap::new();
        for hc in checks {
            by_namespace.entry(hc.metadata.namespace.clone().unwrap_or_default()).or_default().push(hc);
        }
        Checks { by_namespace }
    }

    /// The rules for `group`/`kind` in `namespace`, if a HealthCheck applies.
    pub fn rules(&self, namespace: &str, group: &str, kind: &str) -> Option<Rules> {
        let all = self.by_namespace.get(namespace)?;
        winner(all.iter(), namespace, group, kind).map(compile)
    }
}
