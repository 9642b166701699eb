//! The reconcilers: each reads state, calls pure functions for every decision, then performs
//! the writes they returned.
//!
//! - [`application`]: the Application controller (render, validate, plan, Revisions).
//! - [`repository`]: the Repository controller (Git source, `.ksync.yaml` discovery).
//! - [`discovery`]: its pure decision.

pub mod application;
pub mod discovery;
pub mod labeller;
pub mod orphans;
pub mod repository;
pub mod shards;
