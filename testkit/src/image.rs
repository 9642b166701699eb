//! The manager's container image as a root filesystem: `scripts/build-image --rootfs` assembles
//! what `deploy/image/Containerfile` copies into its `FROM scratch` image (this build's
//! `ksync-controller`, the pinned `helm` and `kubectl`, `ssh`, their libraries), and a process
//! runs from it as a container runtime would run it: chrooted into its own copy of the root, with
//! `/dev`, `/proc` and `/sys` mounted in a mount namespace of its own, the image's `USER` and `ENV`.
//!
//! The chroot needs root (then it runs as the image's user, 65532) or unprivileged user
//! namespaces (then as the mapped invoking user). [`isolation`] says why a machine with neither
//! cannot, and the tests print it: `SKIP` where running from the image is the whole test, and
//! the host's binaries in its place where it is one part of it.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{repo_root, run, temp_dir};

/// The image's root filesystem, deleted on drop.
pub struct ImageRoot {
    _dir: tempfile::TempDir,
    /// The root filesystem.
    pub root: PathBuf,
    /// The Containerfile's `ENV`, in order.
    pub env: Vec<(String, String)>,
    /// The Containerfile's `USER` (`uid:gid`).
    pub user: String,
    /// The Containerfile's `ENTRYPOINT`.
    pub entrypoint: Vec<String>,
}

/// How a process enters the image's root here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isolation {
    /// Root: a mount namespace and `chroot --userspec` the image's user.
    Root,
    /// Not root: a user namespace mapping the invoking user to root, a mount namespace, `chroot`.
    UserNamespace,
}

/// `chroot`, which is in `/usr/sbin` (not in a non-root user's `PATH` on Debian).
fn chroot_bin() -> PathBuf {
    ["/usr/sbin/chroot", "/sbin/chroot", "/usr/bin/chroot"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("no chroot (coreutils) in /usr/sbin, /sbin or /usr/bin")
}

/// The script run in the new mount namespace before the chroot: the runtime's mounts. They go
/// with the namespace when the process exits.
const ENTER: &str = r#"root=$1; shift
for d in dev proc sys; do mount --rbind "/$d" "$root/$d" || exit 125; done
exec "$@""#;

/// How this machine can run a process from the image, or why it cannot.
pub fn isolation() -> Result<Isolation, String> {
    if rustix::process::geteuid().is_root() {
        return Ok(Isolation::Root);
    }
    let probe = Command::new("unshare")
        .args(["--user", "--map-root-user", "--mount", "--propagation", "private"])
        .arg(chroot_bin())
        .args(["/", "true"])
        .output();
    match probe {
        Ok(out) if out.status.success() => Ok(Isolation::UserNamespace),
        Ok(out) => Err(format!(
            "not root, and `unshare --user --map-root-user --mount chroot` fails: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => Err(format!("not root, and no unshare (util-linux): {e}")),
    }
}

/// A Containerfile's instructions as (INSTRUCTION, arguments), continued lines joined.
fn instructions(containerfile: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in containerfile.lines() {
        let line = line.trim();
        if line.starts_with('#') || (line.is_empty() && pending.is_empty()) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => pending.push_str(part),
            None => {
                pending.push_str(line);
                let full = std::mem::take(&mut pending);
                if let Some((op, rest)) = full.split_once(char::is_whitespace) {
                    out.push((op.to_uppercase(), rest.trim().to_string()));
                }
            }
        }
    }
    out
}

impl ImageRoot {
    /// Assemble the image's root filesystem with `scripts/build-image --rootfs`, with `binary`
    /// as its `ksync-controller`.
    pub fn build(binary: &Path) -> ImageRoot {
        let dir = temp_dir("image");
        let root = dir.path().join("rootfs");
        run(Command::new(repo_root().join("scripts/build-image"))
            .arg("--binary")
            .arg(binary)
            .arg("--rootfs")
            .arg(&root));
        let containerfile =
            std::fs::read_to_string(repo_root().join("deploy/image/Containerfile")).expect("Containerfile");
        let (mut env, mut user, mut entrypoint) = (Vec::new(), String::new(), Vec::new());
        for (op, rest) in instructions(&containerfile) {
            match op.as_str() {
                "ENV" => {
                    for pair in rest.split_whitespace() {
                        let (k, v) = pair.split_once('=').expect("ENV KEY=VALUE");
                        env.push((k.to_string(), v.to_string()));
                    }
                }
                "USER" => user = rest,
                "ENTRYPOINT" => entrypoint = serde_json::from_str(&rest).expect("ENTRYPOINT in exec form"),
                _ => {}
            }
        }
        assert!(!user.is_empty() && !entrypoint.is_empty(), "the Containerfile sets USER and ENTRYPOINT");
        ImageRoot { _dir: dir, root, env, user, entrypoint }
    }

    /// A container's own root under `dir`: the image's files hard-linked (read-only to the
    /// image's user: root owns them), its own `/tmp` and Git cache, mount points for the runtime.
    pub fn container_root(&self, dir: &Path, name: &str) -> PathBuf {
        let root = dir.join(format!("{name}-root"));
        run(Command::new("cp").arg("-al").arg(&self.root).arg(&root));
        for d in ["dev", "proc", "sys"] {
            std::fs::create_dir_all(root.join(d)).expect("mount point");
        }
        root
    }

    /// `argv` (a path inside the image) run in `container_root` as the image runs it: the
    /// image's `ENV` (the caller adds the container's), its user when root runs the tests.
    pub fn command(&self, isolation: Isolation, container_root: &Path, argv: &[String]) -> Command {
        let mut cmd = Command::new("unshare");
        if isolation == Isolation::UserNamespace {
            cmd.args(["--user", "--map-root-user"]);
        }
        cmd.args(["--mount", "--propagation", "private", "sh", "-c", ENTER, "sh"]).arg(container_root);
        cmd.arg(chroot_bin());
        if isolation == Isolation::Root {
            cmd.arg(format!("--userspec={}", self.user));
        }
        cmd.arg(container_root).args(argv);
        cmd.env_clear();
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd
    }
}
