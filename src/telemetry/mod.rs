//! Telemetry: logging now; metrics, traces and Events as the controllers arrive.

pub mod logging;
