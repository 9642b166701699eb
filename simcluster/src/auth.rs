//! Authentication: the admin bearer token (or no token) is the cluster admin; ServiceAccount
//! tokens map to their account; `Impersonate-User`/`Impersonate-Group` switch identity.

use http::HeaderMap;

use crate::errors::ApiError;
use crate::state::State;

/// Who is asking.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UserInfo {
    /// User name.
    pub name: String,
    /// Groups.
    pub groups: Vec<String>,
}

impl UserInfo {
    /// The cluster admin.
    pub fn admin() -> UserInfo {
        UserInfo { name: "system:admin".into(), groups: vec!["system:masters".into(), "system:authenticated".into()] }
    }

    /// Whether RBAC is bypassed (system:masters).
    pub fn is_admin(&self) -> bool {
        self.groups.iter().any(|g| g == "system:masters")
    }
}

/// Groups every ServiceAccount user has.
pub fn service_account_groups(namespace: &str) -> Vec<String> {
    vec!["system:serviceaccounts".into(), format!("system:serviceaccounts:{namespace}"), "system:authenticated".into()]
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
        Some(t) => match t.strip_prefix("simcluster-sa:") {
            // ServiceAccount tokens issued by this emulator: `simcluster-sa:<ns>:<name>`.
            Some(rest) => {
                let (ns, name) = rest.split_once(':').unwrap_or(("default", rest));
                UserInfo { name: format!("system:serviceaccount:{ns}:{name}"), groups: service_account_groups(ns) }
            }
            None => {
                return Err(ApiError::status(401, "Unauthorized", "Unauthorized", None));
            }
        },
    };
    let imp_user = headers.get("Impersonate-User").and_then(|v| v.to_str().ok());
    let Some(user) = imp_user else { return Ok(base) };
    if !base.is_admin() {
        return Err(ApiError::status(
            403,
            "Forbidden",
            format!(
                "users \"{user}\" is forbidden: User \"{}\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope",
                base.name
            ),
            Some(serde_json::json!({"name": user, "kind": "users"})),
        ));
    }
    let mut groups: Vec<String> =
        headers.get_all("Impersonate-Group").iter().filter_map(|v| v.to_str().ok().map(String::from)).collect();
    if let Some(rest) = user.strip_prefix("system:serviceaccount:")
        && let Some((ns, _)) = rest.split_once(':')
        && groups.is_empty()
    {
        groups = service_account_groups(ns);
    }
    if !groups.iter().any(|g| g == "system:authenticated") {
        groups.push("system:authenticated".into());
    }
    Ok(UserInfo { name: user.to_string(), groups })
}
