//! Authentication: the admin bearer token (or no token) is the cluster admin; ServiceAccount
//! tokens issued by this emulator map to their account; `Impersonate-*` headers switch
//! identity, authorized by RBAC as on a real server.

use std::collections::BTreeMap;

use http::HeaderMap;
use serde_json::Value;

use crate::errors::ApiError;
pub use crate::rbac::UserInfo;
use crate::state::State;

/// The RBAC objects currently stored.
pub struct PolicyObjects {
    roles: Vec<Value>,
    cluster_roles: Vec<Value>,
    role_bindings: Vec<Value>,
    cluster_role_bindings: Vec<Value>,
}

impl PolicyObjects {
    /// Read them from the store.
    pub fn load(state: &State) -> PolicyObjects {
        let txn = state.store.lock();
        let get = |k: &str| txn.all(k).into_iter().cloned().collect::<Vec<_>>();
        PolicyObjects {
            roles: get("rbac.authorization.k8s.io/roles"),
            cluster_roles: get("rbac.authorization.k8s.io/clusterroles"),
            role_bindings: get("rbac.authorization.k8s.io/rolebindings"),
            cluster_role_bindings: get("rbac.authorization.k8s.io/clusterrolebindings"),
        }
    }

    /// As a policy.
    pub fn policy(&self) -> crate::rbac::Policy<'_> {
        crate::rbac::Policy {
            roles: &self.roles,
            cluster_roles: &self.cluster_roles,
            role_bindings: &self.role_bindings,
            cluster_role_bindings: &self.cluster_role_bindings,
        }
    }
}

/// Whether RBAC is bypassed (system:masters).
pub fn is_admin(u: &UserInfo) -> bool {
    u.groups.iter().any(|g| g == crate::rbac::MASTERS_GROUP)
}

/// Resolve the requesting user from the headers.
pub fn authenticate(state: &State, headers: &HeaderMap) -> Result<UserInfo, ApiError> {
    let token = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let base = match token {
        None => UserInfo::admin(),
        Some(t) if t == state.config.admin_token => UserInfo::admin(),
        Some(t) => match t.strip_prefix("simcluster-sa:").and_then(|rest| rest.split_once(':')) {
            Some((ns, name)) => UserInfo::service_account(ns, name),
            None => return Err(ApiError::status(401, "Unauthorized", "Unauthorized", None)),
        },
    };
    let header = |k: &str| headers.get(k).and_then(|v| v.to_str().ok());
    let groups: Vec<String> =
        headers.get_all("Impersonate-Group").iter().filter_map(|v| v.to_str().ok().map(String::from)).collect();
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (k, v) in headers {
        if let Some(key) = k.as_str().strip_prefix("impersonate-extra-")
            && let Ok(v) = v.to_str()
        {
            extra.entry(key.to_string()).or_default().push(v.to_string());
        }
    }
    let user = header("Impersonate-User");
    let uid = header("Impersonate-Uid");
    if user.is_none() && groups.is_empty() && uid.is_none() && extra.is_empty() {
        return Ok(base);
    }
    let objects = PolicyObjects::load(state);
    crate::rbac::impersonate(&base, user, &groups, uid, &extra, &objects.policy())
}
