//! A real OpenSSH server on loopback serving bare repositories over `ssh://`.
//!
//! [`SshServer::start`] runs `/usr/sbin/sshd` in the foreground (`-D -e`) on 127.0.0.1 with its
//! own configuration, a fresh ed25519 host key and an `authorized_keys` holding a fresh client
//! key; the login user is the one running the tests (root is allowed with keys only). The
//! repositories live in the server's temporary folder and are reached by absolute path. The
//! server is killed on drop. The server is the system's `/usr/sbin/sshd`, or the one
//! `scripts/install-tools` unpacks into `tools/openssh` where there is none (no root needed).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{run, temp_dir};

/// Where Debian (and most distributions) install the OpenSSH server.
pub const SSHD: &str = "/usr/sbin/sshd";

/// The sshd to run and the library folders it needs: the system's, else the one
/// `scripts/install-tools` unpacked into `tools/openssh`.
fn sshd() -> Option<(PathBuf, String)> {
    if Path::new(SSHD).exists() {
        return Some((PathBuf::from(SSHD), String::new()));
    }
    let root = super::repo_root().join("tools/openssh");
    let sshd = root.join("usr/sbin/sshd");
    let libs =
        format!("{}:{}", root.join("usr/lib/x86_64-linux-gnu").display(), root.join("lib/x86_64-linux-gnu").display());
    sshd.exists().then_some((sshd, libs))
}

/// An SSH key pair generated with `ssh-keygen`.
pub struct KeyPair {
    /// The private key (OpenSSH format), as a Secret's `identity` holds it.
    pub private: Vec<u8>,
    /// The public key line (`ssh-ed25519 AAAA... comment`).
    pub public: String,
}

impl KeyPair {
    /// A fresh ed25519 key pair without a passphrase (generated in `dir` as `name`, `name.pub`).
    pub fn generate(dir: &Path, name: &str) -> KeyPair {
        let path = dir.join(name);
        run(Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", &format!("ksync-test-{name}"), "-f"])
            .arg(&path)
            .stdin(Stdio::null()));
        KeyPair {
            private: std::fs::read(&path).expect("private key"),
            public: std::fs::read_to_string(path.with_extension("pub")).expect("public key").trim().to_string(),
        }
    }
}

/// A running `sshd`.
pub struct SshServer {
    base: tempfile::TempDir,
    child: Child,
    port: u16,
    user: String,
    /// The key pair whose public key is authorized.
    pub client: KeyPair,
    /// The server's public host key line (`ssh-ed25519 AAAA...`).
    pub host_public_key: String,
}

impl SshServer {
    /// Start `sshd` on a free loopback port and wait until it accepts connections. Panics,
    /// saying to run `scripts/install-tools`, when sshd is not installed.
    pub fn start() -> SshServer {
        let Some((sshd, libs)) = sshd() else {
            panic!(
                "neither {SSHD} nor tools/openssh: run scripts/install-tools (it unpacks openssh-server), then re-run the SSH tests"
            )
        };
        let user = run(&mut Command::new("whoami")).trim().to_string();
        assert!(!user.is_empty(), "whoami printed nothing");
        // As root, sshd insists on its privilege separation folder (normally made by the init
        // script, on a tmpfs).
        if is_root() {
            std::fs::create_dir_all("/run/sshd").expect("creating /run/sshd");
        }
        let base = temp_dir("sshd");
        let dir = base.path();
        let host = KeyPair::generate(dir, "host_key");
        let client = KeyPair::generate(dir, "client_key");
        std::fs::write(dir.join("authorized_keys"), format!("{}\n", client.public)).expect("authorized_keys");
        std::fs::create_dir(dir.join("repos")).expect("repos folder");
        let host_public_key = host.public.split_whitespace().take(2).collect::<Vec<_>>().join(" ");

        let started = crate::start_on_free_port(Duration::from_secs(10), |port| {
            let config = dir.join("sshd_config");
            std::fs::write(
                &config,
                format!(
                    "Port {port}\n\
                     ListenAddress 127.0.0.1\n\
                     HostKey {host_key}\n\
                     AuthorizedKeysFile {authorized}\n\
                     PidFile {pid}\n\
                     PasswordAuthentication no\n\
                     KbdInteractiveAuthentication no\n\
                     PubkeyAuthentication yes\n\
                     PermitRootLogin prohibit-password\n\
                     StrictModes no\n\
                     UsePAM no\n\
                     AllowUsers {user}\n\
                     LogLevel VERBOSE\n",
                    host_key = dir.join("host_key").display(),
                    authorized = dir.join("authorized_keys").display(),
                    pid = dir.join("sshd.pid").display(),
                ),
            )
            .expect("sshd_config");
            let log = std::fs::File::create(dir.join("sshd.log")).expect("sshd log");
            let mut command = Command::new(&sshd);
            if !libs.is_empty() {
                command.env("LD_LIBRARY_PATH", &libs);
            }
            command
                .arg("-D")
                .arg("-e")
                .arg("-f")
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| panic!("starting {}: {e}", sshd.display()))
        });
        let Some((child, port)) = started else {
            panic!(
                "sshd did not start; its log:\n{}",
                std::fs::read_to_string(dir.join("sshd.log")).unwrap_or_default()
            );
        };
        SshServer { base, child, port, user, client, host_public_key }
    }

    /// The port sshd listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The `known_hosts` line trusting this server's host key.
    pub fn known_hosts(&self) -> String {
        format!("[127.0.0.1]:{} {}\n", self.port, self.host_public_key)
    }

    /// Create an empty bare repository `name`; returns its folder (push there directly).
    pub fn create_repo(&self, name: &str) -> PathBuf {
        let path = self.repo_path(name);
        run(Command::new("git").args(["init", "--quiet", "--bare", "--initial-branch=main"]).arg(&path));
        path
    }

    /// The folder of the bare repository `name`.
    pub fn repo_path(&self, name: &str) -> PathBuf {
        self.base.path().join("repos").join(format!("{name}.git"))
    }

    /// The `ssh://user@127.0.0.1:port/abs/path/name.git` URL of repository `name`.
    pub fn url(&self, name: &str) -> String {
        format!("ssh://{}@127.0.0.1:{}{}", self.user, self.port, self.repo_path(name).display())
    }

    /// What sshd logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.base.path().join("sshd.log")).unwrap_or_default()
    }
}

impl Drop for SshServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn is_root() -> bool {
    run(Command::new("id").arg("-u")).trim() == "0"
}
