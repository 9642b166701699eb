//! Running a renderer binary with limits: a clean environment (only `PATH` and a scratch
//! `HOME`/cache directory), a timeout after which it is killed, and a cap on the output read.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt;

use super::{Error, Limits};

/// What the program printed.
pub struct Output {
    /// Standard output (at most `limits.max_output_bytes`).
    pub stdout: Vec<u8>,
}

/// Run `program args` in `cwd` with `env` (plus `PATH`, `HOME`), under `limits`. A non-zero
/// exit is an error carrying a bounded excerpt of stderr. A relative path in `env` is inside
/// the run's scratch directory.
pub async fn run(
    program: &Path,
    args: &[&str],
    cwd: &Path,
    env: &[(&str, &Path)],
    limits: &Limits,
    what: &str,
) -> Result<Output, Error> {
    run_with_input(program, args, cwd, env, None, limits, what).await
}

/// [`run`], writing `input` to the program's standard input (a password for
/// `--password-stdin`: never an argument, which any process of the host can read).
pub async fn run_with_input(
    program: &Path,
    args: &[&str],
    cwd: &Path,
    env: &[(&str, &Path)],
    input: Option<&[u8]>,
    limits: &Limits,
    what: &str,
) -> Result<Output, Error> {
    let scratch = tempfile::Builder::new()
        .prefix("ksync-render-")
        .tempdir()
        .map_err(|e| Error::Internal(format!("scratch directory: {e}")))?;
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", scratch.path())
        .env("XDG_CACHE_HOME", scratch.path().join("cache"))
        .env("XDG_CONFIG_HOME", scratch.path().join("config"))
        .env("XDG_DATA_HOME", scratch.path().join("data"))
        .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, scratch.path().join(v));
    }
    let mut child = cmd.spawn().map_err(|e| Error::Failed {
        message: format!("{what}: cannot run {}: {e}", program.display()),
        retryable: false,
    })?;
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        use tokio::io::AsyncWriteExt;
        // Small (a password): the pipe's buffer takes it before the program reads.
        let _ = stdin.write_all(input).await;
        drop(stdin);
    }
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let max = limits.max_output_bytes;
    let work = async {
        let mut out = Vec::new();
        let mut err = Vec::new();
        // The buffers live on the heap: held across `.await`, an array would be part of the
        // future, which debug builds copy several times per poll (a Helm render of an
        // Application overflowed a 2 MiB worker stack that way).
        let read_out = async {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = stdout.read(&mut buf).await?;
                if n == 0 {
                    return Ok::<bool, std::io::Error>(false);
                }
                out.extend_from_slice(&buf[..n]);
                if out.len() as u64 > max {
                    return Ok(true);
                }
            }
        };
        let read_err = async {
            let mut buf = vec![0u8; 8 * 1024];
            loop {
                let n = stderr.read(&mut buf).await?;
                if n == 0 {
                    return Ok::<(), std::io::Error>(());
                }
                if err.len() < 64 * 1024 {
                    err.extend_from_slice(&buf[..n]);
                }
            }
        };
        let (too_big, _) = tokio::join!(read_out, read_err);
        (too_big, out, err)
    };
    let (too_big, out, err) = match tokio::time::timeout(limits.timeout, work).await {
        Ok(r) => r,
        Err(_) => {
            let _ = child.kill().await;
            return Err(Error::Failed {
                message: format!("{what} did not finish within {:?}", limits.timeout),
                retryable: true,
            });
        }
    };
    if matches!(too_big, Ok(true)) {
        let _ = child.kill().await;
        return Err(Error::Failed {
            message: format!("{what} printed more than {} bytes (the output limit)", max),
            retryable: false,
        });
    }
    let status = tokio::time::timeout(Duration::from_secs(5).max(limits.timeout), child.wait())
        .await
        .map_err(|_| Error::Failed { message: format!("{what} did not exit"), retryable: true })?
        .map_err(|e| Error::Internal(format!("{what}: {e}")))?;
    if !status.success() {
        return Err(Error::Failed { message: format!("{what} failed: {}", excerpt(&err)), retryable: false });
    }
    Ok(Output { stdout: out })
}

/// The first lines of stderr, bounded to 1,000 characters.
pub fn excerpt(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let text = text.trim();
    let mut out: String = text.chars().take(1000).collect();
    if text.chars().count() > 1000 {
        out.push_str(" ...");
    }
    if out.is_empty() { "no error output".to_string() } else { out }
}

#[cfg(test)]
mod tests {
    use super::*;

    // See: `ksync dev`'s replicas (debug builds) aborted with "thread 'tokio-rt-worker' has
    // overflowed its stack" on their first Helm Application, while 64 KiB and 8 KiB read
    // buffers were arrays held in this future.
    #[test]
    fn the_render_future_keeps_its_buffers_off_the_stack() {
        let limits = Limits::default();
        let future = run(Path::new("true"), &[], Path::new("."), &[], &limits, "true");
        let size = std::mem::size_of_val(&future);
        assert!(size < 16 * 1024, "the future of process::run is {size} bytes");
    }
}
