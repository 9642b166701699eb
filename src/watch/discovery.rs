//! API discovery: which kinds the cluster serves and whether each is namespaced, for validation
//! ([`crate::plan::validate::Scopes`]). A kind missing from a snapshot (for example a CRD
//! installed a moment ago) is looked up again once by refreshing.

use std::collections::BTreeMap;

use kube::Client;
use kube::discovery::{Discovery, Scope};

/// A snapshot of the served kinds: (group, kind) → namespaced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterScopes {
    kinds: BTreeMap<(String, String), bool>,
}

impl ClusterScopes {
    /// Run discovery (every group, preferred and other versions).
    pub async fn discover(client: &Client) -> Result<ClusterScopes, kube::Error> {
        let discovery = Discovery::new(client.clone()).run().await?;
        let mut kinds = BTreeMap::new();
        for group in discovery.groups() {
            for (resource, caps) in group.recommended_resources() {
                kinds.insert((resource.group.clone(), resource.kind.clone()), caps.scope == Scope::Namespaced);
            }
            for version in group.versions() {
                for (resource, caps) in group.versioned_resources(version) {
                    kinds
                        .entry((resource.group.clone(), resource.kind.clone()))
                        .or_insert(caps.scope == Scope::Namespaced);
                }
            }
        }
        Ok(ClusterScopes { kinds })
    }

    /// How many kinds are known.
    pub fn len(&self) -> usize {
        self.kinds.len()
    }

    /// Whether no kind is known.
    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }
}

impl crate::plan::validate::Scopes for ClusterScopes {
    fn namespaced(&self, group: &str, kind: &str) -> Option<bool> {
        self.kinds.get(&(group.to_string(), kind.to_string())).copied()
    }
}
