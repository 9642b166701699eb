//! Notifications (`docs/notifications.md`): the lifecycle Events of Applications, routed by the
//! `Notification`s of their namespace to chats, webhooks, Alertmanager and commit statuses.
//!
//! - [`message`]: what one delivery says, and the HTTP request a provider makes of it (pure);
//! - [`route`]: which Notifications take an Event (pure);
//! - [`providers`]: one file per provider, each a pure function from a message to a request;
//! - [`compose`]: the message of an Event (pure); [`claim`]: de-duplication across replicas by
//!   annotations on the Event (pure); [`retry`]: what follows an attempt (pure); [`lanes`]: one
//!   delivery at a time per Notification and Application, oldest Event first;
//! - [`send`]: sending with rate limits and retries; [`status`]: a Notification's status after
//!   a delivery (pure).
//!
//! The engine that watches Events and drives these is `crate::controller::notifications`.

pub mod claim;
pub mod compose;
pub mod lanes;
pub mod message;
pub mod providers;
pub mod retry;
pub mod route;
pub mod send;
pub mod status;
