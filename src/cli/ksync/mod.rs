//! `ksync`: the command-line client.

use clap::{Parser, Subcommand};

use super::Result;
use crate::api::names;
use crate::telemetry::logging::LogFormat;

/// Kuvryn Sync command-line client.
#[derive(Parser, Debug)]
#[command(name = "ksync", version, about = "Kuvryn Sync command-line client")]
pub struct Args {
    /// Log line format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true, env = "KSYNC_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print the client version and the API version it speaks.
    Version,
}

/// Parse the process arguments and run.
pub fn main() -> std::process::ExitCode {
    super::main(|a: &Args| a.log_format, run)
}

/// Run parsed arguments.
pub fn run(args: Args) -> Result<()> {
    match args.command {
        Command::Version => {
            println!("ksync {} (API {})", env!("CARGO_PKG_VERSION"), names::API_VERSION);
            Ok(())
        }
    }
}
