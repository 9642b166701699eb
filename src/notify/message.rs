//! What one delivery says ([`Message`], built from one Event, bounded, never carrying a Secret
//! value), what a provider is given from its Secret ([`ProviderSecret`]) and what it asks to send
//! ([`Request`]). Pure.

use crate::api::notification::Severity;

/// The longest `message` carried, in characters (an Event's note is at most 1,024).
pub const MAX_MESSAGE: usize = 1024;

/// One lifecycle Event of one Application, as every provider is given it.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    /// The Event's uid: the key deliveries are de-duplicated by.
    pub event: String,
    /// The Application's namespace and name.
    pub namespace: String,
    pub application: String,
    /// `Normal` or `Warning`.
    pub severity: Severity,
    /// The Event's reason (`Succeeded`, `HealthTimeout`, ...).
    pub reason: String,
    /// The Event's note, at most [`MAX_MESSAGE`] characters.
    pub message: String,
    /// The Revision the Event is about, its commit and the URL of the Repository it came from.
    pub revision: Option<String>,
    pub commit: Option<String>,
    pub source_url: Option<String>,
    /// When it happened (RFC 3339).
    pub at: String,
    /// When this attempt is sent (Unix seconds): the signed timestamp of `Webhook`, so a
    /// receiver can refuse a replay. Set by the sender before each attempt.
    pub sent: i64,
}

/// A provider's Secret: only the keys providers read. `Debug` never prints a value.
#[derive(Clone, Default, PartialEq)]
pub struct ProviderSecret {
    /// `address`: the webhook URL, or a Git host's API base URL.
    pub address: Option<String>,
    /// `token`: a bearer token, GitLab's private token, or the HMAC key of `Webhook`.
    pub token: Option<String>,
    /// `username`: Bitbucket's, or Alertmanager's basic auth.
    pub username: Option<String>,
}

impl std::fmt::Debug for ProviderSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set = |v: &Option<String>| if v.is_some() { "<set>" } else { "<unset>" };
        f.debug_struct("ProviderSecret")
            .field("address", &set(&self.address))
            .field("token", &set(&self.token))
            .field("username", &set(&self.username))
            .finish()
    }
}

/// One HTTP request to send. `Debug` prints header names only: values may carry a token.
#[derive(Clone, PartialEq)]
pub struct Request {
    pub method: Method,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// The methods providers use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Post,
    Put,
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("Request")
            .field("method", &self.method)
            // A webhook URL is itself a secret (Slack, Teams, Discord).
            .field("url", &"<redacted>")
            .field("headers", &names)
            .field("body_bytes", &self.body.len())
            .finish()
    }
}
