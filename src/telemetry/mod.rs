//! Telemetry: logging, OTLP traces, the metrics endpoint.

pub mod http;
pub mod logging;
pub mod traces;
