//! Notifications (`docs/notifications.md`): the lifecycle Events of Applications, routed by the
//! `Notification`s of their namespace to chats, webhooks, Alertmanager and commit statuses.
//!
//! - [`message`]: what one delivery says, and the HTTP request a provider makes of it (pure);
//! - [`route`]: which Notifications take an Event (pure);
//! - [`providers`]: one file per provider, each a pure function from a message to a request.

pub mod message;
pub mod providers;
pub mod route;
