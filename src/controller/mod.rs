//! The reconcilers: each reads state, calls pure functions for every decision, then performs
//! the writes they returned.
//!
//! - [`application`]: the Application controller (render, validate, plan, Revisions).
//! - [`repository`]: the Repository controller (Git source, `.ksync.yaml` discovery).
//! - [`discovery`]: its pure decision.
//! - [`queue`]: the replica's reconcile slots, fair across namespaces.

pub mod application;
pub mod discovery;
pub mod healthcheck;
pub mod labeller;
pub mod notifications;
pub mod orphans;
pub mod queue;
pub mod repository;

/// The first retry after a failed reconcile.
pub const RETRY_FIRST: std::time::Duration = std::time::Duration::from_secs(5);
/// The longest wait between retries of a failing reconcile (the default drift resync).
pub const RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(300);

/// The backoff kube's `Controller` applies to its merged trigger streams: none, since every
/// watch feeding one of ours backs off on its own (`default_backoff()`).
///
/// kube's default backs off the merged stream as a whole: each error of any one watch held back
/// every trigger of the controller, a Repository's new commit included, for one backoff period
/// (0.8 s doubling to 30 s, plus jitter). A compaction makes every watch of a shard fail at once,
/// and the chaos run's Applications then waited up to 170 s for a commit their Repository had
/// already resolved. With this, an error passes through at once and only its own watch waits.
///
/// Contract: a controller given this takes no stream that errors without backing off itself
/// (not `Controller::new`, `owns` or `watches`, whose watches have no backoff of their own).
#[derive(Debug, Clone, Copy, Default)]
pub struct EachWatchBacksOff;

impl Iterator for EachWatchBacksOff {
    type Item = std::time::Duration;

    fn next(&mut self) -> Option<std::time::Duration> {
        Some(std::time::Duration::ZERO)
    }
}

impl kube::runtime::utils::Backoff for EachWatchBacksOff {
    fn reset(&mut self) {}
}

/// How long to wait before retrying an object whose last `failures` reconciles failed in a
/// row: [`RETRY_FIRST`], doubled with each further failure, at most [`RETRY_MAX`]. An API
/// server in trouble sees the retries of thousands of objects thin out instead of arriving
/// every few seconds; one success starts the count again.
pub fn retry_after(failures: u32) -> std::time::Duration {
    let doublings = failures.saturating_sub(1).min(16);
    RETRY_FIRST.saturating_mul(1 << doublings).min(RETRY_MAX)
}

/// `d` with ±10 % jitter (seeded by `seed` and the clock), so requeues of many objects spread out.
pub fn with_jitter(d: std::time::Duration, seed: &str) -> std::time::Duration {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|t| t.subsec_nanos()).unwrap_or(0);
    let h = seed.bytes().fold(u64::from(nanos), |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    d.mul_f64(0.9 + (h % 1000) as f64 / 5000.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn retries_back_off_exponentially_up_to_a_cap() {
        let secs = |n| retry_after(n).as_secs();
        let cases = [(0, 5), (1, 5), (2, 10), (3, 20), (4, 40), (5, 80), (6, 160), (7, 300), (8, 300), (u32::MAX, 300)];
        for (failures, want) in cases {
            assert_eq!(secs(failures), want, "after {failures} failures in a row");
        }
    }

    #[test]
    fn jitter_stays_within_ten_percent() {
        for seed in ["a", "team/web", "x".repeat(100).as_str()] {
            let d = with_jitter(Duration::from_secs(100), seed);
            assert!((Duration::from_secs(90)..=Duration::from_secs(110)).contains(&d), "{seed}: {d:?}");
        }
    }
}
