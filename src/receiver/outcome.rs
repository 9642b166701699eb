//! How a receiver request ended: its HTTP status, its metric label and its short JSON body
//! (which never names a Repository or a token). Pure.

use http::StatusCode;

/// The end of one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A verified push named Repositories: `triggered` were asked to fetch now, `pending`
    /// already had a request waiting (coalesced: no second fetch).
    Accepted {
        /// Repositories whose reconcile-requested-at annotation was written.
        triggered: usize,
        /// Repositories with a request already pending.
        pending: usize,
    },
    /// Verified, but no fetch to do: another ref or URL, a ping, another event.
    Ignored(&'static str),
    /// No candidate's token verifies the request.
    Unauthorized,
    /// A delivery id seen within the replay window, or a generic timestamp too old.
    Replayed,
    /// No Repository has this path.
    NotFound,
    /// The body is over the limit.
    TooLarge,
    /// A bucket is empty: retry after this many seconds.
    RateLimited(u64),
    /// Verified, but the body is not a push of its sender.
    Malformed,
    /// Not a POST.
    MethodNotAllowed,
    /// The API server did not take a trigger: the sender should retry.
    Unavailable,
}

impl Outcome {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Outcome::Accepted { .. } => StatusCode::ACCEPTED,
            Outcome::Ignored(_) => StatusCode::OK,
            Outcome::Unauthorized => StatusCode::UNAUTHORIZED,
            Outcome::Replayed => StatusCode::CONFLICT,
            Outcome::NotFound => StatusCode::NOT_FOUND,
            Outcome::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Outcome::RateLimited(_) => StatusCode::TOO_MANY_REQUESTS,
            Outcome::Malformed => StatusCode::BAD_REQUEST,
            Outcome::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Outcome::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The `result` label of `ksync_receiver_requests_total`.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Accepted { .. } => "accepted",
            Outcome::Ignored(_) => "ignored",
            Outcome::Unauthorized => "unauthorized",
            Outcome::Replayed => "replayed",
            Outcome::NotFound => "not_found",
            Outcome::TooLarge => "too_large",
            Outcome::RateLimited(_) => "rate_limited",
            Outcome::Malformed => "malformed",
            Outcome::MethodNotAllowed => "method_not_allowed",
            Outcome::Unavailable => "unavailable",
        }
    }

    /// The response body.
    pub fn body(&self) -> serde_json::Value {
        let result = self.label();
        match self {
            Outcome::Accepted { triggered, pending } => {
                serde_json::json!({"result": result, "triggered": triggered, "pending": pending})
            }
            Outcome::Ignored(why) => serde_json::json!({"result": result, "reason": why}),
            _ => serde_json::json!({"result": result}),
        }
    }

    /// Every label, for the docs and the tests.
    pub const LABELS: &[&str] = &[
        "accepted",
        "ignored",
        "unauthorized",
        "replayed",
        "not_found",
        "too_large",
        "rate_limited",
        "malformed",
        "method_not_allowed",
        "unavailable",
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_labels() {
        let all = [
            (Outcome::Accepted { triggered: 2, pending: 1 }, 202),
            (Outcome::Ignored("ping"), 200),
            (Outcome::Unauthorized, 401),
            (Outcome::Replayed, 409),
            (Outcome::NotFound, 404),
            (Outcome::TooLarge, 413),
            (Outcome::RateLimited(3), 429),
            (Outcome::Malformed, 400),
            (Outcome::MethodNotAllowed, 405),
            (Outcome::Unavailable, 503),
        ];
        for (o, code) in &all {
            assert_eq!(o.status().as_u16(), *code, "{o:?}");
            assert!(Outcome::LABELS.contains(&o.label()));
            assert_eq!(o.body()["result"], o.label());
        }
        assert_eq!(all.len(), Outcome::LABELS.len());
        assert_eq!(Outcome::Accepted { triggered: 2, pending: 1 }.body()["triggered"], 2);
    }
}
