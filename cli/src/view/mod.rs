//! The views only `ksync` prints, pure as [`kuvryn_sync::view`]'s (whose shared pieces they
//! use): objects and a time in, text out.

pub mod app;
pub mod dev;
pub mod diff;
pub mod notifications;
pub mod repos;
pub mod sync;
