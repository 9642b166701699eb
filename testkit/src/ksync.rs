//! The real `ksync` binary, run as a user runs it: a fresh `HOME`, no inherited environment,
//! stdin closed, the cluster's admin kubeconfig.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use super::{Cluster, temp_dir};

/// The binary under test: `KSYNC_BIN`; else the `ksync` of the running test's build: the one
/// Cargo built for the `ksync` package's tests, or, for the root package's tests (which Cargo
/// gives only their own binaries), the one next to `ksync-controller` (a build of the
/// workspace, or of its default members from the root, puts both in one folder).
pub fn bin() -> PathBuf {
    if let Some(path) = std::env::var_os("KSYNC_BIN") {
        return PathBuf::from(path);
    }
    let built = crate::binaries::built("ksync");
    assert!(
        built.is_file(),
        "{} is missing: build it with `cargo build --bin ksync` (or run the tests from the workspace root), or set KSYNC_BIN",
        built.display()
    );
    built
}

/// What `ksync` printed and how it exited.
#[derive(Debug)]
pub struct Output {
    /// The exit code (-1 when killed by a signal).
    pub code: i32,
    /// What it printed on stdout.
    pub stdout: String,
    /// What it printed on stderr.
    pub stderr: String,
}

/// `ksync --kubeconfig <cluster's> -n NS ARGS`, whatever its exit code.
pub fn run(cluster: &Cluster, ns: &str, args: &[&str]) -> Output {
    run_at(&cluster.kubeconfig(), ns, args)
}

/// As [`run`], with the cluster's kubeconfig file: for a thread that has no [`Cluster`].
pub fn run_at(kubeconfig: &std::path::Path, ns: &str, args: &[&str]) -> Output {
    let home = temp_dir("ksync-home");
    let out = Command::new(bin())
        .env_clear()
        .env("HOME", home.path())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["-n", ns])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("ksync");
    Output {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// As [`run`]; it must succeed.
pub fn ok(cluster: &Cluster, ns: &str, args: &[&str]) -> Output {
    let out = run(cluster, ns, args);
    assert_eq!(out.code, 0, "ksync {args:?}:\n{}{}", out.stdout, out.stderr);
    out
}
