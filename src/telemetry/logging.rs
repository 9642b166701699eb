//! Logging for both binaries: `tracing` with an env filter (`RUST_LOG`, default `info`) and a
//! text or JSON format, always on stderr so stdout stays machine-readable.

use tracing_subscriber::EnvFilter;

/// Log line format (`--log-format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log pipelines.
    Json,
}

/// Install the global subscriber. Later calls are ignored (tests may call it repeatedly).
pub fn init(format: LogFormat) {
    let _ = init_with_default(format, "info", false);
}

/// [`init`] with another filter when `RUST_LOG` is unset (`ksync` logs nothing by default, so
/// its stderr holds the one-line error and nothing else), and, with `traces`, the OTLP exporter
/// when the environment asks for it ([`super::traces`]). `Err`: the exporter cannot be set up.
pub fn init_with_default(format: LogFormat, default_filter: &str, traces: bool) -> Result<(), String> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let lines = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let lines = match format {
        LogFormat::Text => lines.boxed(),
        // With the current span's fields: a reconcile's `trace_id` when traces are exported.
        LogFormat::Json => lines.json().flatten_event(true).boxed(),
    };
    let registry = tracing_subscriber::registry().with(filter).with(lines);
    let otel = if traces { super::traces::layer()? } else { None };
    let _ = registry.with(otel).try_init();
    Ok(())
}
