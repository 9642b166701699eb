//! API discovery: which kinds the cluster serves, whether each is namespaced (for validation,
//! [`crate::plan::validate::Scopes`]) and the resource to address each served version by (for
//! reading live objects and applying). A kind missing from a snapshot (for example a CRD
//! installed a moment ago) is looked up again by the caller refreshing the snapshot.

use std::collections::BTreeMap;

use kube::Client;
use kube::core::ApiResource;
use kube::discovery::{Discovery, Scope};

/// A snapshot of the served kinds.
#[derive(Clone, Debug, Default)]
pub struct ClusterScopes {
    /// (group, kind) → namespaced.
    kinds: BTreeMap<(String, String), bool>,
    /// (group, version, kind) → the resource.
    resources: BTreeMap<(String, String, String), ApiResource>,
}

impl PartialEq for ClusterScopes {
    fn eq(&self, other: &Self) -> bool {
        self.kinds == other.kinds
            && self.resources.len() == other.resources.len()
            && self.resources.iter().zip(other.resources.iter()).all(|(a, b)| a.0 == b.0 && a.1.plural == b.1.plural)
    }
}

impl ClusterScopes {
    /// Run discovery (every group, preferred and other versions).
    pub async fn discover(client: &Client) -> Result<ClusterScopes, kube::Error> {
        let discovery = Discovery::new(client.clone()).run().await?;
        let mut kinds = BTreeMap::new();
        let mut resources = BTreeMap::new();
        for group in discovery.groups() {
            for (resource, caps) in group.recommended_resources() {
                kinds.insert((resource.group.clone(), resource.kind.clone()), caps.scope == Scope::Namespaced);
            }
            for version in group.versions() {
                for (resource, caps) in group.versioned_resources(version) {
                    kinds
                        .entry((resource.group.clone(), resource.kind.clone()))
                        .or_insert(caps.scope == Scope::Namespaced);
                    resources.insert(
                        (resource.group.clone(), resource.version.clone(), resource.kind.clone()),
                        resource.clone(),
                    );
                }
            }
        }
        Ok(ClusterScopes { kinds, resources })
    }

    /// How many kinds are known.
    pub fn len(&self) -> usize {
        self.kinds.len()
    }

    /// Whether no kind is known.
    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    /// The resource serving `group/version` `kind`, when the cluster serves it.
    pub fn resource(&self, group: &str, version: &str, kind: &str) -> Option<&ApiResource> {
        self.resources.get(&(group.to_string(), version.to_string(), kind.to_string()))
    }
}

impl crate::plan::validate::Scopes for ClusterScopes {
    fn namespaced(&self, group: &str, kind: &str) -> Option<bool> {
        self.kinds.get(&(group.to_string(), kind.to_string())).copied()
    }
}
