//! `loadtest`: see `loadtest/README.md`.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    loadtest::main()
}
