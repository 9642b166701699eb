//! Kuvryn Sync: a sharded GitOps controller for Kubernetes.
//!
//! The pure core (`api`) is kept apart from I/O (`telemetry`, `read`, `dashboard`); see
//! `docs/architecture.md` in the repository for the layout. The command-line client `ksync` is
//! the `cli/` package; what it shares with the manager is [`read`], [`view`], [`dashboard`] and
//! [`command`].
#![forbid(unsafe_code)]

pub mod api;
pub mod apply;
pub mod client;
pub mod command;
pub mod controller;
pub mod dashboard;
pub mod decisions;
pub mod gather;
pub mod graph;
pub mod health;
pub mod identity;
pub mod impersonate;
pub mod live;
pub mod manager;
pub mod metric_names;
pub mod notify;
pub mod offload;
pub mod packed;
pub mod plan;
pub mod read;
pub mod receiver;
pub mod redact;
pub mod render;
pub mod source;
pub mod telemetry;
pub mod text;
pub mod view;
pub mod watch;
pub mod webhook;
pub mod yaml;
