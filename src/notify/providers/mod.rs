//! The providers: each turns a [`Message`] into the one HTTP request its service documents. Pure:
//! nothing here sends.
//!
//! Every payload is bounded (the message at [`MAX_MESSAGE`], each field cut to the service's own
//! limit) and built only from the [`Message`]: a Secret's `token` reaches a request only as an
//! `Authorization` header or an HMAC key, its `address` only as the URL.
//!
//! Commit-status providers ([`github`], [`gitlab`], [`gitea`], [`bitbucket`], sharing
//! [`commit`]) write the state of the Event's commit; an Event that sets no state, or has no
//! commit, is not theirs to send ([`applies`]).

pub mod alertmanager;
pub mod bitbucket;
pub mod commit;
pub mod discord;
pub mod gitea;
pub mod github;
pub mod gitlab;
pub mod slack;
pub mod teams;
pub mod webhook;

use super::message::{MAX_MESSAGE, Message, ProviderSecret, Request};
use crate::api::notification::{Provider, ProviderType};

/// Whether `provider` has anything to send for `msg`: every message provider does; a
/// commit-status provider only for an Event that sets a state of a known commit.
pub fn applies(provider: ProviderType, msg: &Message) -> bool {
    !provider.is_commit_status() || (msg.commit.is_some() && commit::state(msg).is_some())
}

/// The request `provider` makes of `msg`, or why it cannot (a missing address or token: a
/// configuration error, reported on the Notification, never retried). Call it only where
/// [`applies`] holds.
pub fn request(provider: &Provider, secret: &ProviderSecret, msg: &Message) -> Result<Request, String> {
    let repository = provider.repository.as_deref();
    let status = match provider.type_ {
        ProviderType::Slack => return slack::request(provider, secret, msg),
        ProviderType::Teams => return teams::request(secret, msg),
        ProviderType::Discord => return discord::request(provider, secret, msg),
        ProviderType::Webhook => return webhook::request(secret, msg),
        ProviderType::Alertmanager => return alertmanager::request(secret, msg),
        ProviderType::GitHub => github::request(repository, secret, msg),
        ProviderType::GitLab => gitlab::request(repository, secret, msg),
        ProviderType::Gitea => gitea::request(repository, secret, msg),
        ProviderType::Bitbucket => bitbucket::request(repository, secret, msg),
    };
    status?.ok_or_else(|| format!("Event {} sets no commit status", msg.reason))
}

/// Whether an error answer means the request had already taken effect (GitLab refusing to set
/// a state the commit already has), so it counts as delivered.
pub fn already_delivered(provider: ProviderType, status: u16, body: &str) -> bool {
    provider == ProviderType::GitLab && gitlab::already_there(status, body)
}

/// The Secret's `address`, required by every chat and webhook provider.
fn address(secret: &ProviderSecret) -> Result<String, String> {
    match secret.address.as_deref().map(str::trim) {
        Some(a) if !a.is_empty() => Ok(a.to_string()),
        _ => Err("the provider Secret has no `address` key".to_string()),
    }
}

/// `s` cut to at most `max` characters (the chat services count characters), ending in `…`.
fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// A provider's answer, on one line and cut to `max` characters (for a failure's message).
pub fn excerpt(text: &str, max: usize) -> String {
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    cut(&one_line, max)
}

/// The message, bounded.
fn message(msg: &Message) -> String {
    cut(&msg.message, MAX_MESSAGE)
}

/// A one-line title: `<namespace>/<application>: <reason>`.
fn title(msg: &Message) -> String {
    cut(&format!("{}/{}: {}", msg.namespace, msg.application, msg.reason), 256)
}

/// The facts every payload shows, as (name, value), absent ones left out.
fn facts(msg: &Message) -> Vec<(&'static str, String)> {
    let mut out =
        vec![("Application", format!("{}/{}", msg.namespace, msg.application)), ("Reason", msg.reason.clone())];
    if let Some(r) = &msg.revision {
        out.push(("Revision", r.clone()));
    }
    if let Some(c) = &msg.commit {
        out.push(("Commit", c.clone()));
    }
    if let Some(u) = &msg.source_url {
        out.push(("Source", u.clone()));
    }
    out.into_iter().map(|(k, v)| (k, cut(&v, 256))).collect()
}

/// A JSON POST to `url`.
fn post_json(url: String, body: &serde_json::Value, mut headers: Vec<(String, String)>) -> Request {
    headers.insert(0, ("Content-Type".to_string(), "application/json".to_string()));
    Request { method: super::message::Method::Post, url, headers, body: serde_json::to_vec(body).unwrap_or_default() }
}

#[cfg(test)]
pub(crate) mod fixture {
    use super::*;
    use crate::api::common::LocalObjectReference;
    use crate::api::notification::Severity;

    /// A Message of a failed rollout.
    pub(crate) fn msg() -> Message {
        Message {
            event: "uid-1".into(),
            namespace: "team".into(),
            application: "web".into(),
            severity: Severity::Warning,
            reason: "HealthTimeout".into(),
            message: "deployment/web: 0 of 1 Pods available after 2m".into(),
            revision: Some("web-5f2c".into()),
            commit: Some("0123456789abcdef0123456789abcdef01234567".into()),
            source_url: Some("https://git.example.com/team/web.git".into()),
            at: "2026-12-05T18:00:00Z".into(),
            sent: 1_796_493_600,
        }
    }

    /// A Secret whose values are markers a test can look for.
    pub(crate) fn secret() -> ProviderSecret {
        ProviderSecret {
            address: Some("https://hooks.example.com/SECRET-ADDRESS".into()),
            token: Some("SECRET-TOKEN".into()),
            username: Some("SECRET-USER".into()),
        }
    }

    pub(crate) fn provider(type_: ProviderType) -> Provider {
        Provider { type_, secret_ref: LocalObjectReference { name: "s".into() }, channel: None, repository: None }
    }

    /// The body as JSON; it never carries a Secret value.
    pub(crate) fn body(r: &Request) -> serde_json::Value {
        let text = String::from_utf8(r.body.clone()).unwrap();
        for marker in ["SECRET-ADDRESS", "SECRET-TOKEN", "SECRET-USER"] {
            assert!(!text.contains(marker), "{marker} in the body: {text}");
        }
        serde_json::from_str(&text).unwrap()
    }

    pub(crate) fn header<'r>(r: &'r Request, name: &str) -> Option<&'r str> {
        r.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_cut_to_characters() {
        assert_eq!(cut("ééé", 3), "ééé");
        assert_eq!(cut("éééé", 3), "éé…");
        assert_eq!(cut(&"x".repeat(5000), MAX_MESSAGE).chars().count(), MAX_MESSAGE);
    }

    #[test]
    fn a_missing_address_is_a_configuration_error() {
        let p = fixture::provider(ProviderType::Slack);
        let err = request(&p, &ProviderSecret::default(), &fixture::msg()).unwrap_err();
        assert!(err.contains("address"), "{err}");
    }
}
