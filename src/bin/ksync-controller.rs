#![forbid(unsafe_code)]
//! `ksync-controller`, the manager. All logic lives in `kuvryn_sync::manager`.

fn main() -> std::process::ExitCode {
    kuvryn_sync::manager::main()
}
