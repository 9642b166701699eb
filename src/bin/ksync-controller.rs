#![forbid(unsafe_code)]
//! `ksync-controller`, the manager. All logic lives in `kuvryn_sync::manager`.

/// The shipped build's allocator (`--features jemalloc`): it kept less memory than glibc's at
/// 10,000 Applications, for the same CPU (docs/performance.md).
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    kuvryn_sync::manager::main()
}
