//! Kuvryn Sync: a sharded GitOps controller for Kubernetes.
//!
//! The pure core (`api`) is kept apart from I/O (`telemetry`, `cli`); see
//! `docs/architecture.md` in the repository for the layout.
#![forbid(unsafe_code)]

pub mod api;
pub mod apply;
pub mod cli;
pub mod client;
pub mod controller;
pub mod decisions;
pub mod gather;
pub mod graph;
pub mod health;
pub mod identity;
pub mod metric_names;
pub mod offload;
pub mod plan;
pub mod redact;
pub mod render;
pub mod source;
pub mod telemetry;
pub mod text;
pub mod watch;
pub mod webhook;
pub mod yaml;
