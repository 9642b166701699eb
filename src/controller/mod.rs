//! The reconcilers: each reads state, calls pure functions for every decision, then performs
//! the writes they returned.
//!
//! - [`application`]: the Application controller (render, validate, plan, Revisions).
//! - [`repository`]: the Repository controller (Git source, `.ksync.yaml` discovery).
//! - [`discovery`]: its pure decision.

pub mod application;
pub mod discovery;
pub mod healthcheck;
pub mod labeller;
pub mod orphans;
pub mod repository;
pub mod shards;

/// `d` with ±10 % jitter (seeded by `seed` and the clock), so requeues of many objects spread out.
pub fn with_jitter(d: std::time::Duration, seed: &str) -> std::time::Duration {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|t| t.subsec_nanos()).unwrap_or(0);
    let h = seed.bytes().fold(u64::from(nanos), |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    d.mul_f64(0.9 + (h % 1000) as f64 / 5000.0)
}
