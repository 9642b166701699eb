//! Bitbucket Cloud build statuses: `POST {api}/2.0/repositories/{workspace}/{slug}/commit/{sha}/statuses/build`
//! (`state` is `INPROGRESS`, `SUCCESSFUL` or `FAILED`; `key` names the status, `url` is
//! required). With `username` in the Secret, basic auth (an app password); without, a bearer
//! access token.

use base64::Engine;
use serde_json::json;
use sha2::{Digest, Sha256};

use super::commit::{self, State};
use crate::notify::message::{Message, Method, ProviderSecret, Request};

/// The public API.
pub const PUBLIC: &str = "https://api.bitbucket.org";

/// The longest `key` Bitbucket takes.
pub const MAX_KEY: usize = 40;

/// The status request for `msg` (`None` when the Event sets no state).
pub fn request(repository: Option<&str>, secret: &ProviderSecret, msg: &Message) -> Result<Option<Request>, String> {
    let Some(state) = commit::state(msg) else { return Ok(None) };
    let token = secret.token.as_deref().ok_or("the provider Secret has no token")?;
    let path = commit::repository(repository, msg)?;
    let (workspace, slug) = commit::owner_and_name(&path)?;
    let url = format!(
        "{}/2.0/repositories/{}/{}/commit/{}/statuses/build",
        commit::base(secret.address.as_deref(), Some(PUBLIC), "Bitbucket")?,
        commit::safe(workspace)?,
        commit::safe(slug)?,
        commit::commit(msg)?
    );
    let state = match state {
        State::Pending => "INPROGRESS",
        State::Success => "SUCCESSFUL",
        State::Failure => "FAILED",
    };
    let context = commit::context(msg);
    let body = json!({
        "key": key(&context),
        "state": state,
        "name": context,
        "description": commit::description(msg),
        "url": format!("https://bitbucket.org/{workspace}/{slug}/commits/{}", commit::commit(msg)?),
    });
    let auth = match secret.username.as_deref() {
        Some(user) => {
            format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{token}")))
        }
        None => format!("Bearer {token}"),
    };
    Ok(Some(Request {
        method: Method::Post,
        url,
        headers: vec![("Authorization".into(), auth), ("Content-Type".into(), "application/json".into())],
        body: serde_json::to_vec(&body).expect("JSON"),
    }))
}

/// The status key: the context when it fits, else a digest of it (stable, so each commit keeps
/// one status per Application).
fn key(context: &str) -> String {
    if context.len() <= MAX_KEY {
        return context.to_string();
    }
    let digest = Sha256::digest(context.as_bytes());
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("kuvryn-sync-{}", &hex[..MAX_KEY - "kuvryn-sync-".len()])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::notification::Severity;
    use crate::notify::providers::commit::tests::message;

    #[test]
    fn the_documented_shape() {
        let basic = ProviderSecret {
            token: Some("app-password".into()),
            username: Some("ci-bot".into()),
            ..Default::default()
        };
        let r = request(None, &basic, &message(Severity::Normal, "Succeeded")).unwrap().unwrap();
        assert_eq!(
            r.url,
            "https://api.bitbucket.org/2.0/repositories/acme/shop/commit/2c26b46b68ffc68ff99b453c1d30413413422d70/statuses/build"
        );
        assert!(r.headers.contains(&("Authorization".into(), "Basic Y2ktYm90OmFwcC1wYXNzd29yZA==".into())));
        let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(body["state"], "SUCCESSFUL");
        assert_eq!(body["key"], "kuvryn-sync/team-a/web");
        assert!(body["url"].as_str().unwrap().starts_with("https://bitbucket.org/acme/shop/commits/"));
        let bearer = ProviderSecret { token: Some("access-token".into()), ..Default::default() };
        let r = request(None, &bearer, &message(Severity::Warning, "HealthTimeout")).unwrap().unwrap();
        assert!(r.headers.contains(&("Authorization".into(), "Bearer access-token".into())));
        let long = key(&"x".repeat(100));
        assert_eq!(long.len(), MAX_KEY);
        assert_eq!(long, key(&"x".repeat(100)));
    }
}
