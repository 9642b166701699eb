//! A Notification's status after one delivery. Pure: the engine writes what [`after`] returns.
//!
//! `Ready` is `True` after a delivery, `False` after a failure with the reason
//! ([`DELIVERY_FAILED`] or [`NOT_CONFIGURED`]) and the failure's message; `lastDelivery` /
//! `lastFailure` keep the last of each. Messages are bounded and come from
//! [`super::send::Outcome`], already redacted of the Secret's values.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::conditions::{self, Status};
use crate::api::names;
use crate::api::notification::{Delivery, NotificationStatus};

/// `Ready=False`: the provider refused a delivery or kept failing.
pub const DELIVERY_FAILED: &str = "DeliveryFailed";
/// `Ready=False`: the Secret is missing, lacks a key the provider needs, or the provider
/// cannot be built (not retried: fix the configuration).
pub const NOT_CONFIGURED: &str = "ProviderNotConfigured";
/// `Ready=True`: the last delivery was accepted.
pub const DELIVERED: &str = "Delivered";

/// One delivery's result as the status records it.
#[derive(Clone, Debug, PartialEq)]
pub struct Result {
    pub application: String,
    pub reason: String,
    pub attempts: u32,
    /// `Ok(answer)` delivered; `Err((condition reason, message))` failed.
    pub outcome: std::result::Result<String, (&'static str, String)>,
}

/// The status after `result`, from `old`, for `generation`, at `now`.
pub fn after(old: &NotificationStatus, generation: Option<i64>, result: &Result, now: Timestamp) -> NotificationStatus {
    let mut new = old.clone();
    new.observed_generation = generation;
    let delivery = |message: &str| Delivery {
        at: Time(now),
        application: crate::text::bounded(&result.application, 253),
        reason: crate::text::bounded(&result.reason, 128),
        attempts: result.attempts,
        message: crate::text::bounded(message, 1024),
    };
    match &result.outcome {
        Ok(answer) => {
            new.last_delivery = Some(delivery(answer));
            let msg = format!("delivered {} of {}", result.reason, result.application);
            conditions::set(
                &mut new.conditions,
                names::conditions::READY,
                Status::True,
                DELIVERED,
                &msg,
                generation,
                now,
            );
        }
        Err((reason, message)) => {
            new.last_failure = Some(delivery(message));
            let msg = crate::text::bounded(message, 1024);
            conditions::set(
                &mut new.conditions,
                names::conditions::READY,
                Status::False,
                reason,
                &msg,
                generation,
                now,
            );
        }
    }
    new
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_follows_the_last_delivery() {
        let now: Timestamp = "2026-12-05T18:00:00Z".parse().unwrap();
        let failed = Result {
            application: "web".into(),
            reason: "HealthTimeout".into(),
            attempts: 5,
            outcome: Err((DELIVERY_FAILED, "HTTP 500: x".repeat(500))),
        };
        let s = after(&NotificationStatus::default(), Some(2), &failed, now);
        let ready = &s.conditions[0];
        assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", DELIVERY_FAILED));
        assert!(ready.message.len() <= 1024);
        assert_eq!(s.last_failure.as_ref().unwrap().attempts, 5);
        assert!(s.last_delivery.is_none());
        assert_eq!(s.observed_generation, Some(2));
        let ok = Result { outcome: Ok("ok".into()), attempts: 1, ..failed };
        let s = after(&s, Some(2), &ok, now);
        assert_eq!(s.conditions[0].status, "True");
        assert_eq!(s.last_delivery.as_ref().unwrap().message, "ok");
        assert!(s.last_failure.is_some(), "the last failure is kept");
    }
}
