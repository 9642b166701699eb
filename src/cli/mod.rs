//! Command-line front ends of the two binaries. `main` only parses and calls [`controller::run`]
//! or [`ksync::run`]; everything else lives here.

pub mod controller;
pub mod ksync;
pub mod view;

/// An error a command reports to the user (exit status 1).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The path involved.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Generated files differ from the ones on disk.
    #[error("{0}")]
    Stale(String),
    /// The manager could not start.
    #[error("{0}")]
    Startup(String),
}

/// Result of a command.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The common `main` of both binaries: parse, set up logging, run, report an error on stderr.
pub fn main<A: clap::Parser>(
    log_format: fn(&A) -> crate::telemetry::logging::LogFormat,
    run: fn(A) -> Result<()>,
) -> std::process::ExitCode {
    let args = A::parse();
    crate::telemetry::logging::init(log_format(&args));
    match run(args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::debug!("{e}");
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
