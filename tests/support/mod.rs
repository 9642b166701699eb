//! The one harness every integration test uses: it locates the real tools, starts a real git
//! server on loopback, and picks the cluster to run against.
//!
//! - [`Tools`]: the `helm` and `kubectl` that `scripts/install-tools` installed (real upstream
//!   binaries, checksum-verified).
//! - [`GitServer`]: a real `git daemon` on 127.0.0.1 serving bare repositories from a temporary
//!   folder, with push enabled; [`WorkTree`] commits and pushes to it.
//! - [`Cluster`]: `KSYNC_E2E_KUBECONFIG` names a real cluster; otherwise the embedded emulator
//!   (`simcluster`, arriving with its own issue). Tests that need what only simcluster has call
//!   [`Cluster::require_simcluster`], which skips them, saying why, on a real cluster.
//!
//! Everything started here is stopped and deleted on drop. Waits use deadlines, never sleeps
//! that hope.
#![allow(dead_code)] // each test binary uses a different part of the harness

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Environment variable naming a real cluster's kubeconfig for the end-to-end run.
pub const E2E_KUBECONFIG: &str = "KSYNC_E2E_KUBECONFIG";

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A fresh temporary directory, deleted on drop.
pub fn temp_dir(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("ksync-{prefix}-")).tempdir().expect("temp dir")
}

/// Poll `check` until it returns `Some` or `deadline` passes (then panic with `what`).
pub fn wait_for<T>(what: &str, deadline: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + deadline;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < end, "timed out after {deadline:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Run a command to completion; panic with its output when it fails.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The real rendering tools.
pub struct Tools {
    /// Folder holding `helm` and `kubectl`.
    pub bin: PathBuf,
}

impl Tools {
    /// Locate the tools `scripts/install-tools` installed (`KSYNC_TOOLS_BIN` overrides).
    pub fn get() -> Tools {
        let bin =
            std::env::var_os("KSYNC_TOOLS_BIN").map(PathBuf::from).unwrap_or_else(|| repo_root().join("tools/bin"));
        for tool in ["helm", "kubectl"] {
            assert!(
                bin.join(tool).exists(),
                "{} is missing: run scripts/install-tools (scripts/test does)",
                bin.join(tool).display()
            );
        }
        Tools { bin }
    }

    /// `helm` with isolated cache/config/data folders under `home`.
    pub fn helm(&self, home: &Path) -> Command {
        let mut c = Command::new(self.bin.join("helm"));
        c.env_clear()
            .env("HOME", home)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"));
        c
    }

    /// `kubectl` with no ambient kubeconfig.
    pub fn kubectl(&self, home: &Path) -> Command {
        let mut c = Command::new(self.bin.join("kubectl"));
        c.env_clear().env("HOME", home).env("KUBECONFIG", home.join("kubeconfig"));
        c
    }
}

/// A free loopback port (bound, read, released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// A real `git daemon` on loopback serving every bare repository under its base folder.
pub struct GitServer {
    base: tempfile::TempDir,
    child: Child,
    /// The listening address.
    pub addr: SocketAddr,
}

impl GitServer {
    /// Start `git daemon` on a free loopback port and wait until it accepts connections.
    pub fn start() -> GitServer {
        let base = temp_dir("git");
        // A port picked free can be taken before git binds it: try a few.
        for _ in 0..5 {
            let port = free_port();
            let mut child = Command::new("git")
                .args(["daemon", "--reuseaddr", "--export-all", "--enable=receive-pack", "--informative-errors"])
                .arg(format!("--base-path={}", base.path().display()))
                .arg("--listen=127.0.0.1")
                .arg(format!("--port={port}"))
                .arg(base.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("git daemon (is git installed?)");
            let addr: SocketAddr = ([127, 0, 0, 1], port).into();
            let end = Instant::now() + Duration::from_secs(10);
            while Instant::now() < end {
                if let Ok(Some(_)) = child.try_wait() {
                    break; // it exited (port taken): try another port
                }
                if TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
                    return GitServer { base, child, addr };
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("git daemon did not start");
    }

    /// Create an empty bare repository `name` and return its `git://` URL.
    pub fn create_repo(&self, name: &str) -> String {
        let path = self.base.path().join(format!("{name}.git"));
        run(Command::new("git").args(["init", "--quiet", "--bare", "--initial-branch=main"]).arg(&path));
        self.url(name)
    }

    /// The `git://` URL of repository `name`.
    pub fn url(&self, name: &str) -> String {
        format!("git://{}/{name}.git", self.addr)
    }
}

impl Drop for GitServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A working tree that commits and pushes to a [`GitServer`] repository.
pub struct WorkTree {
    dir: tempfile::TempDir,
}

impl WorkTree {
    /// Clone `url` (which may be empty) into a fresh folder.
    pub fn clone(url: &str) -> WorkTree {
        let dir = temp_dir("work");
        run(git_cmd(dir.path()).args(["clone", "--quiet", url, "."]));
        run(git_cmd(dir.path()).args(["checkout", "--quiet", "-B", "main"]));
        WorkTree { dir }
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Write `contents` to the repository-relative `path` (folders created).
    pub fn write(&self, path: &str, contents: &str) -> &Self {
        let full = self.dir.path().join(path);
        std::fs::create_dir_all(full.parent().expect("parent")).expect("mkdir");
        std::fs::write(full, contents).expect("write");
        self
    }

    /// Commit everything and push `main`; returns the new commit id.
    pub fn commit_and_push(&self, message: &str) -> String {
        run(git_cmd(self.path()).args(["add", "--all"]));
        run(git_cmd(self.path()).args(["commit", "--quiet", "--allow-empty", "-m", message]));
        run(git_cmd(self.path()).args(["push", "--quiet", "origin", "main"]));
        run(git_cmd(self.path()).args(["rev-parse", "HEAD"])).trim().to_string()
    }
}

/// `git` in `dir` with a fixed identity and no user or system configuration.
pub fn git_cmd(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Kuvryn Test")
        .env("GIT_AUTHOR_EMAIL", "test@kuvryn.invalid")
        .env("GIT_COMMITTER_NAME", "Kuvryn Test")
        .env("GIT_COMMITTER_EMAIL", "test@kuvryn.invalid");
    c
}

/// The cluster a test runs against.
pub enum Cluster {
    /// A real cluster named by `KSYNC_E2E_KUBECONFIG`.
    External {
        /// Its kubeconfig.
        kubeconfig: PathBuf,
    },
    /// simcluster, in this process on its own runtime, with its kubeconfig in a temp folder.
    Sim {
        /// The emulator.
        sim: simcluster::SimCluster,
        /// The runtime serving it (dropped last).
        runtime: tokio::runtime::Runtime,
        /// Folder holding `kubeconfig`.
        dir: tempfile::TempDir,
    },
}

impl Cluster {
    /// The cluster for this run: the real one named by `KSYNC_E2E_KUBECONFIG`, else a fresh
    /// simcluster (workload simulation on).
    pub fn start() -> Cluster {
        if let Some(path) = std::env::var_os(E2E_KUBECONFIG) {
            return Cluster::External { kubeconfig: PathBuf::from(path) };
        }
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        let sim =
            runtime.block_on(simcluster::SimCluster::start(simcluster::Config::default(), 0)).expect("simcluster");
        let dir = temp_dir("cluster");
        std::fs::write(dir.path().join("kubeconfig"), sim.kubeconfig()).expect("write kubeconfig");
        Cluster::Sim { sim, runtime, dir }
    }

    /// The kubeconfig path.
    pub fn kubeconfig(&self) -> PathBuf {
        match self {
            Cluster::External { kubeconfig } => kubeconfig.clone(),
            Cluster::Sim { dir, .. } => dir.path().join("kubeconfig"),
        }
    }

    /// Whether this is a real cluster.
    pub fn is_external(&self) -> bool {
        matches!(self, Cluster::External { .. })
    }

    /// For tests that need simcluster's audit log, fault injection or simulated kubelet: `false`
    /// (with the reason printed) on a real cluster, where the test must skip.
    pub fn require_simcluster(&self, test: &str, needs: &str) -> bool {
        if self.is_external() {
            eprintln!("SKIP {test}: needs {needs}, which only simcluster has");
            return false;
        }
        true
    }

    /// `kubectl` against this cluster.
    pub fn kubectl(&self, tools: &Tools, home: &Path) -> Command {
        let mut c = tools.kubectl(home);
        c.env("KUBECONFIG", self.kubeconfig());
        c
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Cluster::Sim { sim, .. } = self {
            sim.stop();
        }
    }
}
