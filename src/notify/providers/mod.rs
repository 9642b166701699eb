//! The providers: each turns a [`Message`] into the one HTTP request its service documents. Pure:
//! nothing here sends.

use super::message::{Message, ProviderSecret, Request};
use crate::api::notification::Provider;

/// The request `provider` makes of `msg`, or why it cannot (a missing address or token: a
/// configuration error, reported on the Notification, never retried).
pub fn request(provider: &Provider, secret: &ProviderSecret, msg: &Message) -> Result<Request, String> {
    let _ = (secret, msg);
    Err(format!("provider {} is not built yet", provider.type_.as_str()))
}
