//! Telemetry: logging now; metrics, traces and Events as the controllers arrive.

pub mod http;
pub mod logging;
