#![forbid(unsafe_code)]
//! `ksync`, the command-line client. All logic lives in `kuvryn_sync::cli::ksync`.

fn main() -> std::process::ExitCode {
    kuvryn_sync::cli::ksync::main()
}
