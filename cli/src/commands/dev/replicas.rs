//! The manager replicas: real processes, each running `ksync controller run` (this very binary,
//! in the mode that runs the same code as `ksync-controller run`), sharded with Leases, each
//! with its own Git cache, metrics port and log file.
//!
//! They run this binary rather than a sibling `ksync-controller` so that
//! `cargo run --bin ksync -- dev` (which builds only `ksync`) never starts a stale or missing
//! manager.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Child;

use kuvryn_sync::command::{Error, Result};

use super::process;
use super::tools::Tools;

/// Namespace of the Leases the replicas coordinate with.
pub const LEASE_NAMESPACE: &str = "kuvryn-system";

/// Shards the Applications are split into.
pub const SHARDS: u32 = 4;

/// Lease duration: short, so a stopped replica's shards move within seconds.
pub const LEASE_DURATION: &str = "6s";

/// One replica.
pub struct Replica {
    /// Its identity (`ksync-dev-0`, ...).
    pub name: String,
    /// Its process.
    pub child: Child,
    /// Its pid.
    pub pid: u32,
    /// Where it serves `/metrics`, `/healthz` and `/readyz`.
    pub metrics: SocketAddr,
    /// Its log file.
    pub log: PathBuf,
    /// How it exited, once it did.
    pub exited: Option<std::process::ExitStatus>,
}

/// What every replica shares.
pub struct Settings<'a> {
    /// The binary to run (`ksync` itself).
    pub exe: &'a Path,
    /// The cluster.
    pub kubeconfig: &'a Path,
    /// The renderers.
    pub tools: &'a Tools,
    /// Folder of the per-replica Git caches.
    pub cache_dir: &'a Path,
    /// Folder of the log files.
    pub log_dir: &'a Path,
}

/// Start replica `index` with its metrics on `127.0.0.1:metrics_port` (0: a free port).
pub fn start(s: &Settings<'_>, index: usize, metrics_port: u16) -> Result<Replica> {
    let name = format!("ksync-dev-{index}");
    let cache = s.cache_dir.join(&name);
    if cache.exists() {
        // Each start fetches afresh from the new Git server.
        std::fs::remove_dir_all(&cache).map_err(|e| super::io_error(&cache, e))?;
    }
    std::fs::create_dir_all(&cache).map_err(|e| super::io_error(&cache, e))?;
    let log = s.log_dir.join(format!("{name}.log"));
    let log_file = std::fs::File::create(&log).map_err(|e| super::io_error(&log, e))?;
    let err_file = log_file.try_clone().map_err(|e| super::io_error(&log, e))?;
    let port = if metrics_port == 0 { process::free_port()? } else { metrics_port };
    let metrics: SocketAddr = ([127, 0, 0, 1], port).into();
    let child = process::supervised(s.exe, s.exe)
        .args(["controller", "run", "--replica-id", &name, "--lease-namespace", LEASE_NAMESPACE])
        .args(["--shards", &SHARDS.to_string(), "--lease-duration", LEASE_DURATION])
        .arg("--metrics-bind-address")
        .arg(metrics.to_string())
        .arg("--git-cache-dir")
        .arg(&cache)
        .arg("--helm")
        .arg(&s.tools.helm)
        .arg("--kubectl")
        .arg(&s.tools.kubectl)
        .env("KUBECONFIG", s.kubeconfig)
        .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()))
        .stdin(Stdio::null())
        .stdout(log_file)
        .stderr(err_file)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| Error::Startup(format!("starting replica {name} ({}): {e}", s.exe.display())))?;
    let pid = child.id().unwrap_or_default();
    Ok(Replica { name, child, pid, metrics, log, exited: None })
}

/// Stop every replica at once: SIGTERM (each drains and releases its Leases), then SIGKILL
/// after `grace`.
pub async fn stop_all(replicas: &mut [Replica], grace: Duration) {
    let stops = replicas.iter_mut().map(|r| process::terminate(&mut r.child, grace));
    futures_util::future::join_all(stops).await;
}
