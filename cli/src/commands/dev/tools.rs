//! Finding `helm` and `kubectl` for the replicas' renderers, installing them when missing.
//!
//! In order, for each tool: the flag (`--helm`, `--kubectl`, or `KSYNC_HELM`/`KSYNC_KUBECTL`);
//! the folder `KSYNC_TOOLS_BIN`; the `tools/bin` folder of the source checkout this binary was
//! built from (where `scripts/install-tools` puts them, and where the tests find them). When
//! neither tool is found there and that checkout has `scripts/install-tools`, it is run (saying
//! so) with `--no-ssh`, which installs the pinned, checksum-verified binaries into `tools/bin`.
//! Last, `helm` and `kubectl` on `PATH`.

use std::path::{Path, PathBuf};

use kuvryn_sync::command::{Error, Result};

/// The source checkout this binary was built from (`cargo run` builds it there): the workspace
/// root, above this package's `cli/`.
pub fn project_dir() -> PathBuf {
    let package = Path::new(env!("CARGO_MANIFEST_DIR"));
    package.parent().unwrap_or(package).to_path_buf()
}

/// `--helm` and `--kubectl`, shared by the commands that render.
#[derive(Clone, Debug, Default, PartialEq, Eq, clap::Args)]
pub struct ToolArgs {
    /// The helm (v4) binary (default: the one scripts/install-tools installs, else PATH).
    #[arg(long, env = "KSYNC_HELM", value_name = "PATH")]
    pub helm: Option<PathBuf>,
    /// The kubectl binary, for Kustomize (default: the one scripts/install-tools installs, else PATH).
    #[arg(long, env = "KSYNC_KUBECTL", value_name = "PATH")]
    pub kubectl: Option<PathBuf>,
}

/// The tools the replicas render with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tools {
    /// `helm` (v4).
    pub helm: PathBuf,
    /// `kubectl` (for `kubectl kustomize`).
    pub kubectl: PathBuf,
}

/// Both tools in `dir`, if it has them.
fn in_dir(dir: &Path) -> Option<Tools> {
    let t = Tools { helm: dir.join("helm"), kubectl: dir.join("kubectl") };
    (t.helm.is_file() && t.kubectl.is_file()).then_some(t)
}

/// `name` on `PATH`.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(name)).find(|p| p.is_file())
}

/// The tools, from the flags, the known folders, an install, or `PATH` (see the module
/// documentation). `say` reports what is done.
pub async fn find(helm: Option<PathBuf>, kubectl: Option<PathBuf>, say: &mut dyn FnMut(&str)) -> Result<Tools> {
    if let (Some(helm), Some(kubectl)) = (&helm, &kubectl) {
        return Ok(Tools { helm: helm.clone(), kubectl: kubectl.clone() });
    }
    let fill = |found: Tools| Tools {
        helm: helm.clone().unwrap_or(found.helm),
        kubectl: kubectl.clone().unwrap_or(found.kubectl),
    };
    if let Some(dir) = std::env::var_os("KSYNC_TOOLS_BIN").map(PathBuf::from)
        && let Some(t) = in_dir(&dir)
    {
        return Ok(fill(t));
    }
    let project = project_dir();
    if let Some(t) = in_dir(&project.join("tools/bin")) {
        return Ok(fill(t));
    }
    let script = project.join("scripts/install-tools");
    if script.is_file() {
        say(&format!(
            "helm and kubectl are not installed yet: running {} --no-ssh (pinned versions, checksums verified, into {})",
            script.display(),
            project.join("tools/bin").display()
        ));
        let out = tokio::process::Command::new(&script)
            .args(["--print-bin-dir", "--no-ssh"])
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::inherit())
            .output()
            .await
            .map_err(|e| Error::Startup(format!("running {}: {e}", script.display())))?;
        if !out.status.success() {
            return Err(Error::Startup(format!(
                "{} failed ({}); install helm v4 and kubectl v1.35 and pass --helm and --kubectl",
                script.display(),
                out.status
            )));
        }
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        return in_dir(&dir)
            .map(fill)
            .ok_or_else(|| Error::Startup(format!("{} did not install helm and kubectl", script.display())));
    }
    match (helm.or_else(|| on_path("helm")), kubectl.or_else(|| on_path("kubectl"))) {
        (Some(helm), Some(kubectl)) => Ok(Tools { helm, kubectl }),
        _ => Err(Error::Startup(
            "helm and kubectl not found: put helm v4 and kubectl v1.35 on PATH, or pass --helm and --kubectl".into(),
        )),
    }
}
