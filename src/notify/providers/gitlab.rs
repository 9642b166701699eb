//! GitLab commit statuses: `POST {api}/api/v4/projects/{id}/statuses/{sha}` with a
//! `PRIVATE-TOKEN` header, the project path URL-encoded as its id (`state` is `pending`,
//! `running`, `success` or `failed`).
//!
//! GitLab moves a status only forwards (pending → running → success or failed) and answers
//! 400 "Cannot transition status" to a repeat: [`already_there`] tells that answer apart, so a
//! repeat is not a failed delivery.

use serde_json::json;

use super::commit::{self, State};
use crate::api::names;
use crate::notify::message::{Message, Method, ProviderSecret, Request};

/// The public instance.
pub const PUBLIC: &str = "https://gitlab.com";

/// The status request for `msg` (`None` when the Event sets no state).
pub fn request(repository: Option<&str>, secret: &ProviderSecret, msg: &Message) -> Result<Option<Request>, String> {
    let Some(state) = commit::state(msg) else { return Ok(None) };
    let token = secret.token.as_deref().ok_or("the provider Secret has no token")?;
    let path = commit::repository(repository, msg)?;
    for part in path.split('/') {
        commit::safe(part)?;
    }
    let url = format!(
        "{}/api/v4/projects/{}/statuses/{}",
        commit::base(secret.address.as_deref(), Some(PUBLIC), "GitLab")?,
        commit::segment(&path),
        commit::commit(msg)?
    );
    let state = match state {
        // A rollout under way is `running`; a Revision only created is `pending`.
        State::Pending if msg.reason == names::events::NEW_REVISION => "pending",
        State::Pending => "running",
        State::Success => "success",
        State::Failure => "failed",
    };
    let body = json!({"state": state, "name": commit::context(msg), "description": commit::description(msg)});
    Ok(Some(Request {
        method: Method::Post,
        url,
        headers: vec![("PRIVATE-TOKEN".into(), token.to_string()), ("Content-Type".into(), "application/json".into())],
        body: serde_json::to_vec(&body).expect("JSON"),
    }))
}

/// Whether GitLab's answer says the commit already has that state (a repeat, not a failure).
pub fn already_there(status: u16, body: &str) -> bool {
    status == 400 && body.contains("Cannot transition status")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::notification::Severity;
    use crate::notify::providers::commit::tests::message;

    #[test]
    fn the_documented_shape() {
        let secret = ProviderSecret { token: Some("glpat-secret".into()), ..Default::default() };
        let mut m = message(Severity::Normal, "Progressing");
        m.source_url = Some("https://gitlab.example/group/sub/shop.git".into());
        let r = request(None, &secret, &m).unwrap().unwrap();
        assert_eq!(
            r.url,
            "https://gitlab.com/api/v4/projects/group%2Fsub%2Fshop/statuses/2c26b46b68ffc68ff99b453c1d30413413422d70"
        );
        assert!(r.headers.contains(&("PRIVATE-TOKEN".into(), "glpat-secret".into())));
        let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(body["state"], "running");
        assert_eq!(body["name"], "kuvryn-sync/team-a/web");
        let states: Vec<String> =
            [(Severity::Normal, "NewRevision"), (Severity::Normal, "Succeeded"), (Severity::Warning, "ApplyFailure")]
                .iter()
                .map(|(s, r)| {
                    let req = request(None, &secret, &message(*s, r)).unwrap().unwrap();
                    serde_json::from_slice::<serde_json::Value>(&req.body).unwrap()["state"]
                        .as_str()
                        .unwrap()
                        .to_string()
                })
                .collect();
        assert_eq!(states, ["pending", "success", "failed"]);
        assert!(already_there(400, r#"{"message":"Cannot transition status via :run from :running"}"#));
        assert!(!already_there(400, r#"{"message":"state is invalid"}"#));
    }
}
