//! The providers: each turns a [`Message`] into the one HTTP request its service documents. Pure:
//! nothing here sends.
//!
//! Commit-status providers ([`github`], [`gitlab`], [`gitea`], [`bitbucket`], sharing
//! [`commit`]) write the state of the Event's commit; an Event that sets no state, or has no
//! commit, is not theirs to send ([`applies`]).

pub mod bitbucket;
pub mod commit;
pub mod gitea;
pub mod github;
pub mod gitlab;

use super::message::{Message, ProviderSecret, Request};
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
        ProviderType::GitHub => github::request(repository, secret, msg),
        ProviderType::GitLab => gitlab::request(repository, secret, msg),
        ProviderType::Gitea => gitea::request(repository, secret, msg),
        ProviderType::Bitbucket => bitbucket::request(repository, secret, msg),
        t => return Err(format!("provider {} is not built yet", t.as_str())),
    };
    status?.ok_or_else(|| format!("Event {} sets no commit status", msg.reason))
}

/// Whether an error answer means the request had already taken effect (GitLab refusing to set
/// a state the commit already has), so it counts as delivered.
pub fn already_delivered(provider: ProviderType, status: u16, body: &str) -> bool {
    provider == ProviderType::GitLab && gitlab::already_there(status, body)
}
