//! Child processes and ports: free loopback ports, waiting until something listens, and
//! stopping a child with SIGTERM then, after a grace period, SIGKILL.

use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process};
use tokio::process::Child;

use crate::cli::{Error, Result};

/// A loopback port free right now (bound, read, released).
pub fn free_port() -> Result<u16> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| Error::Startup(format!("finding a free port: {e}")))
}

/// Whether `addr` accepts TCP connections.
pub async fn listening(addr: SocketAddr) -> bool {
    matches!(tokio::time::timeout(Duration::from_millis(200), tokio::net::TcpStream::connect(addr)).await, Ok(Ok(_)))
}

/// Wait until `addr` accepts connections (true), or `child` exits or `deadline` passes (false).
pub async fn wait_listening(child: &mut Child, addr: SocketAddr, deadline: Duration) -> bool {
    let end = Instant::now() + deadline;
    while Instant::now() < end {
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        if listening(addr).await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// Send `signal` to `child` (nothing if it has exited and been reaped).
pub fn signal(child: &Child, signal: Signal) {
    if let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok()).and_then(Pid::from_raw) {
        let _ = kill_process(pid, signal);
    }
}

/// Stop `child`: SIGTERM, wait up to `grace`, then SIGKILL; always reaps it.
pub async fn terminate(child: &mut Child, grace: Duration) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    signal(child, Signal::TERM);
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        let _ = child.kill().await;
    }
}
