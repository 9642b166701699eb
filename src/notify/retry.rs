//! What to do after one attempt: delivered, try again after a delay, or give up. Pure.
//!
//! 2xx is delivered. 429 waits its `Retry-After` (seconds or an HTTP date; capped), 408, 5xx
//! and connection errors back off exponentially; any other status is final (a wrong URL or
//! token: retrying cannot fix it). At most [`MAX_ATTEMPTS`] attempts.

use std::time::Duration;

/// Attempts per delivery.
pub const MAX_ATTEMPTS: u32 = 5;
/// The first backoff; doubled per attempt.
pub const BASE: Duration = Duration::from_secs(1);
/// The longest wait between attempts (also the cap on `Retry-After`).
pub const MAX_WAIT: Duration = Duration::from_secs(120);

/// The verdict on one attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Delivered,
    /// Try again after this long.
    Retry(Duration),
    /// Give up: the reason.
    Failed(String),
}

/// The verdict on attempt `attempt` (1-based) that got `status` (`None`: no answer, with
/// `error`), a `Retry-After` of `retry_after`, at `now` (Unix seconds).
pub fn verdict(attempt: u32, status: Option<u16>, retry_after: Option<&str>, error: &str, now: i64) -> Verdict {
    let why = match status {
        Some(s) if (200..300).contains(&s) => return Verdict::Delivered,
        Some(s) => format!("HTTP {s}{}{error}", if error.is_empty() { "" } else { ": " }),
        None => error.to_string(),
    };
    let retryable = match status {
        None => true,
        Some(s) => s == 429 || s == 408 || s >= 500,
    };
    if !retryable {
        return Verdict::Failed(why);
    }
    if attempt >= MAX_ATTEMPTS {
        return Verdict::Failed(format!("{why} (after {attempt} attempts)"));
    }
    let wait = match (status, retry_after.and_then(|v| parse_retry_after(v, now))) {
        (Some(429 | 503), Some(wait)) => wait,
        _ => backoff(attempt),
    };
    Verdict::Retry(wait.min(MAX_WAIT))
}

/// The wait after failed attempt `attempt`: 1 s, 2 s, 4 s, ...
pub fn backoff(attempt: u32) -> Duration {
    BASE.saturating_mul(1 << attempt.saturating_sub(1).min(16)).min(MAX_WAIT)
}

/// `Retry-After`: delay-seconds, or an HTTP date (RFC 9110).
pub fn parse_retry_after(value: &str, now: i64) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = jiff::fmt::rfc2822::parse(value).ok()?.timestamp().as_second();
    Some(Duration::from_secs(u64::try_from(at - now).unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts() {
        let s = Duration::from_secs;
        let cases = [
            (1, Some(200), None, Verdict::Delivered),
            (1, Some(204), None, Verdict::Delivered),
            (1, Some(429), Some("7"), Verdict::Retry(s(7))),
            (1, Some(429), Some("9999"), Verdict::Retry(MAX_WAIT)),
            (1, Some(429), None, Verdict::Retry(s(1))),
            (3, Some(500), None, Verdict::Retry(s(4))),
            (2, Some(503), Some("Sat, 05 Dec 2026 18:00:30 GMT"), Verdict::Retry(s(30))),
            (1, None, None, Verdict::Retry(s(1))),
            (1, Some(404), None, Verdict::Failed("HTTP 404".into())),
            (1, Some(400), None, Verdict::Failed("HTTP 400".into())),
            (5, Some(500), None, Verdict::Failed("HTTP 500 (after 5 attempts)".into())),
        ];
        let now: jiff::Timestamp = "2026-12-05T18:00:00Z".parse().unwrap();
        for (attempt, status, retry_after, want) in cases {
            assert_eq!(verdict(attempt, status, retry_after, "", now.as_second()), want, "{attempt} {status:?}");
        }
    }
}
