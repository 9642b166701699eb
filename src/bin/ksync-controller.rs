#![forbid(unsafe_code)]
//! `ksync-controller`, the manager. All logic lives in `kuvryn_sync::cli::controller`.

fn main() -> std::process::ExitCode {
    kuvryn_sync::cli::controller::main()
}
