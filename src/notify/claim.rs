//! De-duplication across replicas: the Event in the API server is the outbox, and an annotation
//! on it per Notification records who is delivering it and that it was delivered. Pure: the
//! engine reads the annotations, calls [`decide`], and writes [`claimed`] (with the Event's
//! resourceVersion: a lost race is a conflict, and another replica has it) or [`delivered`].
//!
//! # Guarantees
//! - two replicas never both hold a live claim: the claim is written with optimistic concurrency;
//! - a delivered Event is never delivered again through the same Notification;
//! - a claim whose holder died (SIGKILL) is taken over once older than the bound (the Lease
//!   duration: by then its shard has moved).
//!
//! # Caveat
//! A replica killed after the provider accepted a delivery but before it wrote [`delivered`]
//! leaves a stale claim: the next owner delivers again (at least once, not exactly once).

use sha2::{Digest, Sha256};

/// The annotation key of `notification`'s delivery: `notify.sync.kuvryn.io/<name>`, or, for a
/// name longer than an annotation key's name part allows (63), `<first 46>-<hash of 16 hex>`.
pub fn key(notification: &str) -> String {
    const PREFIX: &str = "notify.sync.kuvryn.io/";
    if notification.len() <= 63 {
        return format!("{PREFIX}{notification}");
    }
    let digest = Sha256::digest(notification.as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("{PREFIX}{}-{hex}", &notification[..46])
}

/// The value of a claim by `replica` at `now` (Unix seconds).
pub fn claimed(replica: &str, now: i64) -> String {
    format!("claimed {now} {replica}")
}

/// The value once delivered (or given up on: a failure is reported once, not retried by the
/// next owner) at `now`.
pub fn delivered(now: i64) -> String {
    format!("delivered {now}")
}

/// The value of an Event not sent: routed while the Notification was suspended (never sent
/// later), or without the commit a commit status needs.
pub fn skipped(now: i64) -> String {
    format!("skipped {now}")
}

/// The value once given up on after the retries.
pub fn failed(now: i64) -> String {
    format!("failed {now}")
}

/// What to do with one Event for one Notification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Nobody has it: claim it.
    Claim,
    /// A claim older than the bound, by `holder`: claim it over (its holder died).
    TakeOver { holder: String },
    /// Delivered or failed already, or a live claim: leave it.
    Leave,
}

/// The decision for the annotation `value` (absent: never claimed) at `now`, with claims
/// older than `stale_after` seconds taken over.
pub fn decide(value: Option<&str>, now: i64, stale_after: i64) -> Decision {
    let Some(value) = value else { return Decision::Claim };
    let mut parts = value.splitn(3, ' ');
    match (parts.next(), parts.next().and_then(|t| t.parse::<i64>().ok()), parts.next()) {
        (Some("claimed"), Some(at), holder) if now - at >= stale_after => {
            Decision::TakeOver { holder: holder.unwrap_or_default().to_string() }
        }
        (Some("claimed"), Some(_), _) => Decision::Leave,
        (Some("delivered" | "failed" | "skipped"), _, _) => Decision::Leave,
        // Unreadable (written by hand?): treat as unclaimed rather than never deliver.
        _ => Decision::Claim,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions() {
        let cases = [
            (None, Decision::Claim),
            (Some(claimed("a", 100)), Decision::Leave),
            (Some(claimed("a", 90)), Decision::TakeOver { holder: "a".into() }),
            (Some(claimed("a", 50)), Decision::TakeOver { holder: "a".into() }),
            (Some(delivered(10)), Decision::Leave),
            (Some(failed(10)), Decision::Leave),
            (Some(skipped(10)), Decision::Leave),
            (Some("garbage".into()), Decision::Claim),
        ];
        for (value, want) in cases {
            assert_eq!(decide(value.as_deref(), 105, 15), want, "{value:?}");
        }
    }

    #[test]
    fn keys_are_valid_annotation_keys() {
        assert_eq!(key("slack"), "notify.sync.kuvryn.io/slack");
        let long = "n".repeat(253);
        let k = key(&long);
        let name = k.split_once('/').unwrap().1;
        assert!(name.len() <= 63, "{name}");
        assert_ne!(key(&format!("{}a", "n".repeat(100))), key(&format!("{}b", "n".repeat(100))));
    }
}
