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
    init_with_default(format, "info");
}

/// [`init`] with another filter when `RUST_LOG` is unset (`ksync` logs nothing by default, so
/// its stderr holds the one-line error and nothing else).
pub fn init_with_default(format: LogFormat, default_filter: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
