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

/// The storage keys of the RBAC objects.
const KEYS: [&str; 4] = [
    "rbac.authorization.k8s.io/roles",
    "rbac.authorization.k8s.io/clusterroles",
    "rbac.authorization.k8s.io/rolebindings",
    "rbac.authorization.k8s.io/clusterrolebindings",
];

/// The RBAC objects as of the resourceVersions of their keys' last changes: every request is
/// authorized against them, and copying them per request took a third of the server's time with
/// 50 namespaces of Roles and RoleBindings.
#[derive(Default)]
pub struct PolicyCache(std::sync::Mutex<Option<([u64; 4], std::sync::Arc<PolicyObjects>)>>);

impl PolicyObjects {
    /// The current ones: from the cache unless an RBAC object changed since it was filled.
    pub fn load(state: &State) -> std::sync::Arc<PolicyObjects> {
        let txn = state.store.lock();
        let versions = KEYS.map(|k| txn.changed_at(k));
        let mut cache = state.policy.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, objects)) = cache.as_ref()
            && *at == versions
        {
            return objects.clone();
        }
        let get = |k: &str| txn.all(k).into_iter().cloned().collect::<Vec<_>>();
        let objects = std::sync::Arc::new(PolicyObjects {
            roles: get(KEYS[0]),
            cluster_roles: get(KEYS[1]),
            role_bindings: get(KEYS[2]),
            cluster_role_bindings: get(KEYS[3]),
        });
        *cache = Some((versions, objects.clone()));
        objects
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

/// The user of the bearer token, before impersonation.
pub fn authenticate_token(state: &State, headers: &HeaderMap) -> Result<UserInfo, ApiError> {
    let token = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    match token {
        None => Ok(UserInfo::admin()),
        Some(t) if t == state.config.admin_token => Ok(UserInfo::admin()),
        Some(t) => match verify_token(state, t) {
            Some((ns, name)) => Ok(UserInfo::service_account(&ns, &name)),
            None => Err(ApiError::status(401, "Unauthorized", "Unauthorized", None)),
        },
    }
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
        Some(t) => match verify_token(state, t) {
            Some((ns, name)) => UserInfo::service_account(&ns, &name),
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

fn b64(data: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(data)
}

fn signature(state: &State, signed: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(state.token_key.as_bytes());
    h.update(b".");
    h.update(signed.as_bytes());
    b64(&h.finalize())
}

/// A ServiceAccount bearer token: a JWT signed with this process's key (SHA-256 over a secret
/// key and the payload; the emulator is its only verifier).
pub fn issue_token(state: &State, namespace: &str, name: &str, expires: i64) -> String {
    let header = b64(br#"{"alg":"HS256","typ":"JWT"}"#);
    let payload =
        b64(serde_json::json!({"sub": crate::rbac::service_account_username(namespace, name), "exp": expires})
            .to_string()
            .as_bytes());
    let signed = format!("{header}.{payload}");
    let sig = signature(state, &signed);
    format!("{signed}.{sig}")
}

fn verify_token(state: &State, token: &str) -> Option<(String, String)> {
    use base64::Engine;
    let (signed, sig) = token.rsplit_once('.')?;
    if signature(state, signed) != sig {
        return None;
    }
    let payload = signed.split('.').nth(1)?;
    let claims: Value =
        serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload).ok()?).ok()?;
    if claims["exp"].as_i64()? < jiff::Timestamp::now().as_second() {
        return None;
    }
    let (ns, name) = crate::rbac::split_service_account_username(claims["sub"].as_str()?)?;
    Some((ns.to_string(), name.to_string()))
}
