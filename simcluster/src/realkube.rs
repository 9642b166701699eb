//! Starting `../shared/realkube` (the real control plane the tests compare simcluster with).
//!
//! `up` picks free loopback ports and binds them a moment later; with several control planes
//! starting at once another process can take a port in between (seen in CI: "etcd failed to
//! start: listen tcp 127.0.0.1:PORT: bind: address already in use"). Such a start is retried
//! after `down`, a few times; any other failure is returned as it is.

use std::path::Path;
use std::process::{Command, Output, Stdio};

/// How many times a start that lost a port race is tried.
const ATTEMPTS: usize = 4;

/// Whether `up`'s output says it lost a port to another process.
pub fn lost_a_port(out: &Output) -> bool {
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    !out.status.success() && text.contains("address already in use")
}

/// Run `scripts/up dir`, again after `scripts/down dir` when it lost a port race; the last output.
pub fn up(scripts: &Path, dir: &Path) -> std::io::Result<Output> {
    up_with(scripts, dir, &[])
}

/// [`up`] with more environment for `up`, such as `REALKUBE_APISERVER_ARGS`.
pub fn up_with(scripts: &Path, dir: &Path, env: &[(&str, &str)]) -> std::io::Result<Output> {
    let mut attempt = 1;
    loop {
        let out = Command::new(scripts.join("up")).arg(dir).envs(env.iter().copied()).stdin(Stdio::null()).output()?;
        if !lost_a_port(&out) || attempt == ATTEMPTS {
            return Ok(out);
        }
        let _ = Command::new(scripts.join("down")).arg(dir).stdin(Stdio::null()).output();
        attempt += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn only_a_lost_port_is_retried() {
        let out = |code: i32, err: &str| Output {
            status: std::process::ExitStatus::from_raw(code << 8),
            stdout: Vec::new(),
            stderr: err.as_bytes().to_vec(),
        };
        let race = "etcd failed to start: listen tcp 127.0.0.1:45139: bind: address already in use";
        assert!(lost_a_port(&out(1, race)));
        assert!(!lost_a_port(&out(0, race)), "a start that succeeded");
        assert!(!lost_a_port(&out(1, "kube-apiserver exited: bad flag")), "another failure");
    }
}
