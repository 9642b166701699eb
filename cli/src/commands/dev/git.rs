//! The quickstart's Git side: a real `git daemon` on loopback serving a bare repository (pushes
//! enabled), and the working copy the user commits to, made from the example shipped in
//! `examples/quickstart` ([`super::example`]).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use kuvryn_sync::command::{Error, Result};

use super::process;

/// The name of the repository on the Git server.
pub const REPOSITORY: &str = "quickstart";

/// Identity of the commit `ksync dev` makes, and of the user's commits when git has none.
const AUTHOR: (&str, &str) = ("Kuvryn Quickstart", "quickstart@kuvryn.invalid");

/// `git ARGS` in `dir`; its stdout, or an error with its stderr. Positional arguments (paths,
/// URLs, refs) go after `--` (`--end-of-options` for `rev-parse`), so none is read as an option.
pub async fn git(dir: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| Error::Startup(format!("running git (is git installed?): {e}")))?;
    if !out.status.success() {
        return Err(Error::Startup(format!(
            "git {} in {}: {}",
            args.join(" "),
            dir.display(),
            kuvryn_sync::view::one_line(&String::from_utf8_lossy(&out.stderr))
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A running `git daemon`.
pub struct Daemon {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl Daemon {
    /// Serve every repository under `base` on `127.0.0.1:port` (0: a free port), pushes enabled,
    /// logging to `log`; returns once it accepts connections.
    /// `exe` is this binary, which supervises it ([`process::supervised`]).
    pub async fn start(exe: &Path, base: &Path, port: u16, log: &Path) -> Result<Daemon> {
        // `git daemon` runs `git-daemon` as a child that would outlive a signal to `git`: start
        // the daemon program itself.
        let exec_path = git(base, &["--exec-path"]).await?;
        let program = PathBuf::from(exec_path).join("git-daemon");
        if !program.is_file() {
            return Err(Error::Startup(format!("{} is missing: install git's daemon", program.display())));
        }
        // A free port can be taken before git binds it: try a few.
        let attempts = if port == 0 { 5 } else { 1 };
        for _ in 0..attempts {
            let port = if port == 0 { process::free_port()? } else { port };
            let log_file = std::fs::File::create(log).map_err(|e| super::io_error(log, e))?;
            let mut child = process::supervised(exe, &program)
                .args(["--verbose", "--reuseaddr", "--export-all", "--enable=receive-pack", "--informative-errors"])
                .arg(format!("--base-path={}", base.display()))
                .arg("--listen=127.0.0.1")
                .arg(format!("--port={port}"))
                .arg("--")
                .arg(base)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log_file)
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| Error::Startup(format!("starting {}: {e}", program.display())))?;
            let addr: SocketAddr = ([127, 0, 0, 1], port).into();
            if process::wait_listening(&mut child, addr, Duration::from_secs(10)).await {
                return Ok(Daemon { child, addr });
            }
            let _ = child.kill().await;
        }
        let detail = std::fs::read_to_string(log).unwrap_or_default();
        Err(Error::Startup(format!(
            "the Git server did not start on 127.0.0.1:{port}{}: {}",
            if port == 0 { "" } else { " (in use? --port 0 picks free ports)" },
            kuvryn_sync::view::one_line(detail.trim())
        )))
    }

    /// The `git://` URL of repository `name`.
    pub fn url(&self, name: &str) -> String {
        format!("git://{}/{name}.git", self.addr)
    }

    /// Its process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Whether it exited (and how), without waiting.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Stop it: SIGTERM, then SIGKILL after `grace`.
    pub async fn stop(&mut self, grace: Duration) {
        process::terminate(&mut self.child, grace).await;
    }
}

/// Where the example repository lives in the state directory.
pub struct Paths {
    /// Folder the daemon serves (`<state>/git`).
    pub base: PathBuf,
    /// The working copy (`<state>/repo`).
    pub work: PathBuf,
}

impl Paths {
    /// The bare repository.
    pub fn bare(&self) -> PathBuf {
        self.base.join(format!("{REPOSITORY}.git"))
    }
}

/// How the working copy was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Written from the example and committed now.
    Fresh,
    /// Kept from an earlier run (with the user's commits).
    Reused,
}

/// Make sure the working copy and the bare repository exist, point the working copy's `origin`
/// at `url`, and push `main`. A working copy from an earlier run is kept (with its commits)
/// unless `fresh`; otherwise it is written from the shipped example and committed. Returns the
/// commit pushed.
pub async fn prepare(paths: &Paths, url: &str, fresh: bool) -> Result<(String, Origin)> {
    let reuse = !fresh && paths.work.join(".git").is_dir();
    if !reuse {
        for dir in [&paths.work, &paths.base] {
            if dir.exists() {
                std::fs::remove_dir_all(dir).map_err(|e| super::io_error(dir, e))?;
            }
        }
    }
    std::fs::create_dir_all(&paths.base).map_err(|e| super::io_error(&paths.base, e))?;
    if !paths.bare().join("HEAD").is_file() {
        let bare = paths.bare();
        git(&paths.base, &["init", "--quiet", "--bare", "--initial-branch=main", "--", &bare.to_string_lossy()])
            .await?;
    }
    if !reuse {
        super::example::write(&paths.work)?;
        let work = &paths.work;
        git(work, &["init", "--quiet", "--initial-branch=main"]).await?;
        // Commits the user makes here need an identity; give the repository one only when git
        // has none configured.
        if git(work, &["config", "user.email"]).await.is_err() {
            git(work, &["config", "user.name", AUTHOR.0]).await?;
            git(work, &["config", "user.email", AUTHOR.1]).await?;
        }
        git(work, &["add", "--all"]).await?;
        let name = format!("user.name={}", AUTHOR.0);
        let email = format!("user.email={}", AUTHOR.1);
        git(
            work,
            &["-c", &name, "-c", &email, "-c", "commit.gpgsign=false", "commit", "--quiet", "-m", "Quickstart example"],
        )
        .await?;
        git(work, &["remote", "add", "--", "origin", url]).await?;
    } else {
        git(&paths.work, &["remote", "set-url", "--", "origin", url]).await?;
    }
    git(&paths.work, &["push", "--quiet", "--set-upstream", "--", "origin", "main"]).await.map_err(|e| {
        Error::Startup(format!("{e} (the working copy and the served repository disagree: --fresh starts over)"))
    })?;
    let commit = git(&paths.work, &["rev-parse", "--verify", "--end-of-options", "main"]).await?;
    Ok((commit, if reuse { Origin::Reused } else { Origin::Fresh }))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Every positional argument goes after `--`: the real git accepts it in each place.
    #[tokio::test]
    async fn the_working_copy_is_prepared_and_pushed_again() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths { base: dir.path().join("git"), work: dir.path().join("repo") };
        let url = paths.bare().to_string_lossy().to_string();
        let (first, origin) = prepare(&paths, &url, true).await.unwrap();
        assert_eq!(origin, Origin::Fresh);
        assert_eq!(first.len(), 40, "{first}");
        let (again, origin) = prepare(&paths, &url, false).await.unwrap();
        assert_eq!((again.as_str(), origin), (first.as_str(), Origin::Reused));
        let served = git(&paths.base, &["--git-dir", &url, "rev-parse", "--verify", "--end-of-options", "main"]).await;
        assert_eq!(served.unwrap(), first);
    }
}
