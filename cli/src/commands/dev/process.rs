//! Child processes and ports: free loopback ports, waiting until something listens, stopping a
//! child with SIGTERM then, after a grace period, SIGKILL, and tying a child's life to ours.
//!
//! Every process `ksync dev` starts runs under [`supervised`]: `ksync supervised --parent PID --
//! PROGRAM ARGS` asks the kernel for SIGTERM when its parent dies (`PR_SET_PDEATHSIG`), checks
//! the parent is still there, and then executes PROGRAM in place (same pid; the setting survives
//! the exec). So even a `ksync dev` killed with SIGKILL, which cannot clean up, leaves no replica
//! or Git server behind. Caveat: the kernel sends the signal when the *thread* that started the
//! child exits, so children are started from the thread running `ksync dev`'s main future (the
//! one `block_on` polls), never from a worker or blocking-pool thread.

use std::ffi::OsString;
use std::net::{SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, getppid, kill_process, set_parent_process_death_signal};
use tokio::process::{Child, Command};

use kuvryn_sync::command::{Error, Result};

/// A command running `program` under `exe supervised` (see the module documentation): it gets
/// SIGTERM when this process dies.
pub fn supervised(exe: &Path, program: &Path) -> Command {
    let mut c = Command::new(exe);
    c.arg("supervised").arg("--parent").arg(std::process::id().to_string()).arg("--").arg(program);
    c
}

/// `ksync supervised --parent PARENT -- PROGRAM ARGS...`: arrange for SIGTERM when `parent`
/// dies, then become PROGRAM. Returns only on failure.
pub fn exec_supervised(parent: u32, command: &[OsString]) -> Result<()> {
    let Some((program, args)) = command.split_first() else {
        return Err(Error::Startup("ksync supervised: no program to run".into()));
    };
    set_parent_process_death_signal(Some(Signal::TERM))
        .map_err(|e| Error::Startup(format!("ksync supervised: PR_SET_PDEATHSIG: {e}")))?;
    // The parent may have died before the request above: then nobody would signal us.
    if i32::try_from(parent).ok() != Some(Pid::as_raw(getppid())) {
        return Err(Error::Startup(format!("ksync supervised: the parent process {parent} is gone")));
    }
    let e = std::process::Command::new(program).args(args).exec();
    Err(Error::Startup(format!("ksync supervised: running {}: {e}", Path::new(program).display())))
}

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
