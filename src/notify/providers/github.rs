//! GitHub commit statuses: `POST {api}/repos/{owner}/{repo}/statuses/{sha}` with a bearer token
//! (REST API "Create a commit status"; `state` is `pending`, `success` or `failure`).

use serde_json::json;

use super::commit::{self, State};
use crate::notify::message::{Message, Method, ProviderSecret, Request};

/// The public API.
pub const PUBLIC: &str = "https://api.github.com";

/// The status request for `msg` (`None` when the Event sets no state).
pub fn request(repository: Option<&str>, secret: &ProviderSecret, msg: &Message) -> Result<Option<Request>, String> {
    let Some(state) = commit::state(msg) else { return Ok(None) };
    let token = secret.token.as_deref().ok_or("the provider Secret has no token")?;
    let path = commit::repository(repository, msg)?;
    let (owner, name) = commit::owner_and_name(&path)?;
    let url = format!(
        "{}/repos/{}/{}/statuses/{}",
        commit::base(secret.address.as_deref(), Some(PUBLIC), "GitHub")?,
        commit::safe(owner)?,
        commit::safe(name)?,
        commit::commit(msg)?
    );
    let state = match state {
        State::Pending => "pending",
        State::Success => "success",
        State::Failure => "failure",
    };
    let body = json!({"state": state, "context": commit::context(msg), "description": commit::description(msg)});
    Ok(Some(Request {
        method: Method::Post,
        url,
        headers: vec![
            ("Authorization".into(), format!("Bearer {token}")),
            ("Accept".into(), "application/vnd.github+json".into()),
            ("X-GitHub-Api-Version".into(), "2022-11-28".into()),
            ("Content-Type".into(), "application/json".into()),
        ],
        body: serde_json::to_vec(&body).expect("JSON"),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::notification::Severity;
    use crate::notify::providers::commit::tests::message;

    #[test]
    fn the_documented_shape() {
        let secret = ProviderSecret { token: Some("ghp_secret".into()), ..Default::default() };
        let r = request(None, &secret, &message(Severity::Warning, "HealthTimeout")).unwrap().unwrap();
        assert_eq!(r.method, Method::Post);
        assert_eq!(r.url, "https://api.github.com/repos/acme/shop/statuses/2c26b46b68ffc68ff99b453c1d30413413422d70");
        assert!(r.headers.contains(&("Authorization".into(), "Bearer ghp_secret".into())));
        let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(
            body,
            json!({"state": "failure", "context": "kuvryn-sync/team-a/web", "description": "HealthTimeout: applied 3 objects"})
        );
        assert!(request(None, &secret, &message(Severity::Normal, "DiscoveryChanged")).unwrap().is_none());
        let none = ProviderSecret::default();
        assert!(request(None, &none, &message(Severity::Normal, "Succeeded")).unwrap_err().contains("no token"));
    }
}
