//! The API server a run targets (`--cluster`, `--kubeconfig`): simcluster started for the run, a
//! fresh realkube (kube-apiserver, kube-controller-manager and etcd from `../shared/realkube`)
//! with `simcluster nodes` as its scheduler and kubelets, or any cluster the user names.
//!
//! On a cluster the run did not start, it owns only the namespaces it creates: each is labelled
//! [`OWNER_LABEL`] with the run's id, and they (and the replicas' ClusterRoleBindings) are deleted
//! at the end, on error and on Ctrl-C. The CRDs are left, since other objects may use them.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::Error;
use crate::fleet::Process;

/// The label on every namespace a run creates, with the run's id as value.
pub const OWNER_LABEL: &str = "loadtest.kuvryn.io/run";

/// The Service IP range of a realkube the load test starts: 65,534 Services.
pub const SERVICE_RANGE: &str = "10.0.0.0/16";

/// Which cluster `--cluster` starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClusterKind {
    /// The `simcluster` binary (API server emulator with simulated Nodes).
    #[default]
    Simcluster,
    /// A fresh realkube with `simcluster nodes` attached.
    Realkube,
}

/// What the run ran on, as the report gives it.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct ServerInfo {
    /// `simcluster`, `realkube` or `kubeconfig` (a cluster the user named).
    pub kind: String,
    /// `gitVersion` of `/version`.
    pub version: String,
    /// `platform` of `/version`.
    pub platform: String,
}

/// The server of a run; stops what it started on drop.
pub struct Server {
    /// `simcluster`, `realkube` or `kubeconfig`.
    pub kind: &'static str,
    /// The admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// The simcluster process (`--cluster simcluster`) or `simcluster nodes` (realkube).
    pub process: Option<Process>,
    /// realkube's scripts and state folder, for `down`.
    realkube: Option<(PathBuf, PathBuf)>,
}

/// What an interrupted run must still stop or delete (no destructor runs then).
static REALKUBE: Mutex<Option<(PathBuf, PathBuf)>> = Mutex::new(None);

impl Server {
    /// Whether the run started this server, so it holds nothing of anyone else's.
    pub fn is_fresh(&self) -> bool {
        self.kind != "kubeconfig"
    }

    /// Whether it is simcluster (audit log, request counts, fault injection).
    pub fn is_simcluster(&self) -> bool {
        self.kind == "simcluster"
    }

    /// Start the server `kind` (or use `kubeconfig`), its files under `dir`, with Nodes for `pods`.
    pub fn start(
        kind: ClusterKind,
        kubeconfig: Option<&Path>,
        sim_bin: &Path,
        dir: &Path,
        pods: usize,
    ) -> Result<Server, Error> {
        if let Some(path) = kubeconfig {
            if !path.is_file() {
                return Err(Error::Cluster(format!("--kubeconfig {}: no such file", path.display())));
            }
            return Ok(Server { kind: "kubeconfig", kubeconfig: path.to_path_buf(), process: None, realkube: None });
        }
        match kind {
            ClusterKind::Simcluster => {
                let (p, kubeconfig) = crate::fleet::start_simcluster(sim_bin, dir, pods)?;
                Ok(Server { kind: "simcluster", kubeconfig, process: Some(p), realkube: None })
            }
            ClusterKind::Realkube => Self::realkube(sim_bin, dir, pods),
        }
    }

    fn realkube(sim_bin: &Path, dir: &Path, pods: usize) -> Result<Server, Error> {
        let scripts = testkit::realkube_dir().ok_or_else(|| {
            Error::Cluster(format!(
                "--cluster realkube: no realkube at {} (or ${}); use --cluster simcluster or --kubeconfig",
                testkit::repo_root().parent().unwrap_or(Path::new("/")).join("shared/realkube").display(),
                testkit::REALKUBE_DIR
            ))
        })?;
        let state = dir.join("realkube");
        std::fs::create_dir_all(&state)?;
        *REALKUBE.lock().unwrap_or_else(PoisonError::into_inner) = Some((scripts.clone(), state.clone()));
        // `up`'s Service range is a /24: 254 Services, fewer than a fleet of `--objects three`
        // needs. The last of a repeated flag wins.
        let range = format!("--service-cluster-ip-range={SERVICE_RANGE}");
        // The caller's own extra flags (a kube-controller-manager with a larger client budget)
        // are kept, after the range.
        let with_callers = |var: &str| match std::env::var(var) {
            Ok(extra) if !extra.trim().is_empty() => format!("{range} {extra}"),
            _ => range.clone(),
        };
        let (apiserver, kcm) = (with_callers("REALKUBE_APISERVER_ARGS"), with_callers("REALKUBE_KCM_ARGS"));
        let env = [("REALKUBE_APISERVER_ARGS", apiserver.as_str()), ("REALKUBE_KCM_ARGS", kcm.as_str())];
        let out = simcluster::realkube::up_with(&scripts, &state, &env)?;
        let kubeconfig = state.join("kubeconfig");
        let mut server = Server { kind: "realkube", kubeconfig, process: None, realkube: Some((scripts, state)) };
        if !out.status.success() || !server.kubeconfig.is_file() {
            return Err(Error::Cluster(format!(
                "realkube did not start ({}):\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        // realkube has no scheduler, kubelet or Nodes: simcluster's, as a process of its own (its
        // CPU apart). It publishes `openshift-service-ca.crt`, which this tree's admission
        // projects into every Pod.
        let nodes = crate::fleet::nodes_for(pods).to_string();
        let mut cmd = Command::new(sim_bin);
        cmd.args(["nodes", "--nodes", &nodes, "--openshift-service-ca", "--kubeconfig"])
            .arg(&server.kubeconfig)
            .env("RUST_LOG", "warn");
        let log = dir.join("simcluster-nodes.log");
        let mut p = Process::spawn("simcluster-nodes", &mut cmd, log.clone())?;
        // It says so once every Node is registered.
        let end = Instant::now() + Duration::from_secs(60);
        while !std::fs::read_to_string(&log).unwrap_or_default().contains("running Nodes") {
            if !p.running() || Instant::now() > end {
                return Err(Error::Cluster(format!("simcluster nodes did not start (see {})", log.display())));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        server.process = Some(p);
        Ok(server)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        drop(self.process.take());
        if let Some((scripts, state)) = self.realkube.take() {
            down(&scripts, &state);
            REALKUBE.lock().unwrap_or_else(PoisonError::into_inner).take();
        }
    }
}

/// Stop exactly what realkube's `up` started in `state`.
fn down(scripts: &Path, state: &Path) {
    let _ = Command::new(scripts.join("down")).arg(state).stdin(Stdio::null()).output();
}

/// On SIGINT or SIGTERM: stop a realkube this run started.
pub fn stop_on_interrupt() {
    if let Some((scripts, state)) = REALKUBE.lock().unwrap_or_else(PoisonError::into_inner).take() {
        down(&scripts, &state);
    }
}

/// `/version` of the server.
pub async fn info(client: &kube::Client, kind: &str) -> ServerInfo {
    match client.apiserver_version().await {
        Ok(v) => ServerInfo { kind: kind.to_string(), version: v.git_version, platform: v.platform },
        Err(e) => ServerInfo { kind: kind.to_string(), version: format!("unknown ({e})"), platform: String::new() },
    }
}

/// Namespaces that exist and are not this run's: a run on someone's cluster must not use them.
pub async fn taken(client: &kube::Client, names: &[String]) -> Result<Vec<String>, Error> {
    use k8s_openapi::api::core::v1::Namespace;
    let api: kube::Api<Namespace> = kube::Api::all(client.clone());
    let mut out = Vec::new();
    for n in names {
        if api.get_opt(n).await?.is_some() {
            out.push(n.clone());
        }
    }
    Ok(out)
}

/// Create namespace `name` labelled as run `run`'s.
pub async fn own_namespace(client: &kube::Client, name: &str, run: &str) {
    testkit::apply_as(
        client,
        "loadtest",
        &serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {OWNER_LABEL: run}}}),
    )
    .await;
}

/// Delete every namespace labelled as run `run`'s and the ClusterRoleBindings named in
/// `bindings`; wait up to `wait` for the namespaces to be gone. The namespaces still there.
pub async fn remove_owned(client: &kube::Client, run: &str, bindings: &[String], wait: Duration) -> usize {
    use k8s_openapi::api::core::v1::Namespace;
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
    use kube::api::{DeleteParams, ListParams};
    let crbs: kube::Api<ClusterRoleBinding> = kube::Api::all(client.clone());
    for b in bindings {
        let _ = crbs.delete(b, &DeleteParams::default()).await;
    }
    let api: kube::Api<Namespace> = kube::Api::all(client.clone());
    let selector = ListParams::default().labels(&format!("{OWNER_LABEL}={run}"));
    let end = Instant::now() + wait;
    loop {
        let left = match api.list(&selector).await {
            Ok(l) => l.items,
            Err(e) => {
                eprintln!("loadtest: listing this run's namespaces: {e}");
                return usize::MAX;
            }
        };
        for ns in left.iter().filter(|n| n.metadata.deletion_timestamp.is_none()) {
            let name = ns.metadata.name.clone().unwrap_or_default();
            let _ = api.delete(&name, &DeleteParams::background()).await;
        }
        if left.is_empty() || Instant::now() > end {
            return left.len();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Delete namespace `name` and wait up to `wait` until it is gone; whether it is.
pub async fn remove_scratch(client: &kube::Client, name: &str, wait: Duration) -> bool {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::DeleteParams;
    let api: kube::Api<Namespace> = kube::Api::all(client.clone());
    let _ = api.delete(name, &DeleteParams::background()).await;
    let end = Instant::now() + wait;
    loop {
        match api.get_opt(name).await {
            Ok(None) => return true,
            _ if Instant::now() > end => return false,
            _ => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// What to delete if the run is interrupted on someone's cluster: client, run id, bindings.
type Cleanup = (kube::Client, String, Vec<String>);
static CLEANUP: Mutex<Option<Cleanup>> = Mutex::new(None);

/// On interrupt, delete run `run`'s namespaces and `bindings` through `client`.
pub fn clean_up_on_interrupt(client: kube::Client, run: String, bindings: Vec<String>) {
    *CLEANUP.lock().unwrap_or_else(PoisonError::into_inner) = Some((client, run, bindings));
}

/// On SIGINT or SIGTERM: ask for the deletion of what [`clean_up_on_interrupt`] named (without
/// waiting for the namespaces to terminate).
pub async fn cleanup_on_interrupt() {
    let cleanup = CLEANUP.lock().unwrap_or_else(PoisonError::into_inner).take();
    if let Some((client, run, bindings)) = cleanup {
        eprintln!("loadtest: deleting this run's namespaces ({OWNER_LABEL}={run})");
        let _ =
            tokio::time::timeout(Duration::from_secs(20), remove_owned(&client, &run, &bindings, Duration::ZERO)).await;
    }
}
