//! The reconcilers: each reads state, calls pure functions for every decision, then performs
//! the writes they returned.
//!
//! - [`repository`]: the Repository controller (Git source, `.ksync.yaml` discovery).
//! - [`discovery`]: its pure decision.

pub mod discovery;
pub mod repository;
