//! The binaries under test, found at run time. `CARGO_BIN_EXE_<name>` is set only while Cargo
//! compiles the tests of the package owning the binary, never for a library such as this one,
//! so the kit asks the running test's build instead: the same files.

use std::path::PathBuf;

/// The path of binary `name` in the build of the running test: nextest's
/// `NEXTEST_BIN_EXE_<name>` where it gives one (the binaries of the test's own package, remapped
/// when a build archive runs elsewhere); else the build's output folder, which holds the test
/// executable's `deps/` and is where `CARGO_BIN_EXE_<name>` points. The file may be missing
/// (a binary of another package that was not built): callers say how to build it.
pub fn built(name: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(format!("NEXTEST_BIN_EXE_{name}")) {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the path of the running executable");
    let dir = exe.parent().expect("the folder of the running executable");
    let out = if dir.file_name().is_some_and(|n| n == "deps") { dir.parent().unwrap_or(dir) } else { dir };
    out.join(name)
}
