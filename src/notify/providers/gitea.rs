//! Gitea and Forgejo commit statuses: `POST {address}/api/v1/repos/{owner}/{repo}/statuses/{sha}`
//! with `Authorization: token …` (`state` is `pending`, `success` or `failure`). There is no
//! public instance: the Secret's `address` is required.

use serde_json::json;

use super::commit::{self, State};
use crate::notify::message::{Message, Method, ProviderSecret, Request};

/// The status request for `msg` (`None` when the Event sets no state).
pub fn request(repository: Option<&str>, secret: &ProviderSecret, msg: &Message) -> Result<Option<Request>, String> {
    let Some(state) = commit::state(msg) else { return Ok(None) };
    let token = secret.token.as_deref().ok_or("the provider Secret has no token")?;
    let path = commit::repository(repository, msg)?;
    let (owner, name) = commit::owner_and_name(&path)?;
    let url = format!(
        "{}/api/v1/repos/{}/{}/statuses/{}",
        commit::base(secret.address.as_deref(), None, "Gitea")?,
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
            ("Authorization".into(), format!("token {token}")),
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
        let secret = ProviderSecret {
            token: Some("gitea-secret".into()),
            address: Some("https://gitea.example/".into()),
            ..Default::default()
        };
        let r = request(None, &secret, &message(Severity::Normal, "Progressing")).unwrap().unwrap();
        assert_eq!(
            r.url,
            "https://gitea.example/api/v1/repos/acme/shop/statuses/2c26b46b68ffc68ff99b453c1d30413413422d70"
        );
        assert!(r.headers.contains(&("Authorization".into(), "token gitea-secret".into())));
        let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(body["state"], "pending");
        let no_address = ProviderSecret { token: Some("t".into()), ..Default::default() };
        assert!(request(None, &no_address, &message(Severity::Normal, "Succeeded")).unwrap_err().contains("address"));
    }
}
