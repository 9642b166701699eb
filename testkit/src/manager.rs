//! The real manager binary, `ksync-controller run`, as its own process, and the admission
//! webhook's configuration reaching it.
//!
//! On simcluster the configuration reaches the manager through a Service mapped to its port
//! (`SimCluster::set_webhook_service`); on a real cluster through `clientConfig.url` (realkube
//! cannot route to a Service).

use std::io::Read as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use kube::api::{Api, PostParams};
use kuvryn_sync::api::application::Application;
use kuvryn_sync::api::names::annotations as a;
use serde_json::{Value, json};

use super::{Cluster, apply_as, eventually, free_port, temp_dir};

/// The manager's namespace (`--webhook-namespace`): the certificate Secret's.
pub const SYSTEM: &str = "kuvryn-system";
/// The Service the configuration names on simcluster.
pub const SERVICE: &str = "kuvryn-sync-webhook";

/// `ksync-controller` of the running test's build, which Cargo builds for the root package's
/// tests (the path `CARGO_BIN_EXE_ksync-controller` names there).
pub fn bin() -> PathBuf {
    let path = crate::binaries::built("ksync-controller");
    assert!(
        path.is_file(),
        "{} is missing: Cargo builds ksync-controller for the tests of the root package (tests/); for other tests \
         build it with `cargo build --bin ksync-controller`",
        path.display()
    );
    path
}

/// A manager process, killed (SIGKILL) on drop; its stderr goes to a file.
pub struct Manager {
    child: std::process::Child,
    log: PathBuf,
    /// Where the webhook serves HTTPS on 127.0.0.1.
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl Manager {
    /// `ksync-controller run` against `cluster` with its webhook on 127.0.0.1 (checked every
    /// second), `extra` arguments and `env` variables.
    pub fn start(cluster: &Cluster, extra: &[&str], env: &[(&str, &str)]) -> Manager {
        Manager::start_with_metrics(cluster, extra, env, None)
    }

    /// [`Manager::start`], serving `/metrics` on 127.0.0.1:`metrics_port` when given (else no
    /// metrics endpoint).
    pub fn start_with_metrics(
        cluster: &Cluster,
        extra: &[&str],
        env: &[(&str, &str)],
        metrics_port: Option<u16>,
    ) -> Manager {
        let dir = temp_dir("manager");
        let port = free_port();
        let log = dir.path().join("stderr.log");
        let metrics = metrics_port.map(|p| format!("127.0.0.1:{p}")).unwrap_or_default();
        let mut cmd = Command::new(bin());
        cmd.args(["run", "--metrics-bind-address", &metrics])
            .arg("--git-cache-dir")
            .arg(dir.path().join("cache"))
            .args(["--webhook-bind-address", &format!("127.0.0.1:{port}")])
            .args(["--webhook-namespace", SYSTEM, "--webhook-cert-host", "127.0.0.1"])
            .args(["--webhook-check-interval", "1s"])
            .args(extra)
            .env("KUBECONFIG", cluster.kubeconfig())
            .env_remove("ENABLE_WEBHOOKS")
            .env_remove("POD_NAMESPACE")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"));
        for (k, v) in env {
            cmd.env(k, v);
        }
        Manager { child: cmd.spawn().expect("ksync-controller"), log, port, _dir: dir }
    }

    /// Everything it logged so far.
    pub fn stderr(&self) -> String {
        let mut s = String::new();
        let _ = std::fs::File::open(&self.log).and_then(|mut f| f.read_to_string(&mut s));
        s
    }

    /// Wait until the webhook answers through the API server: an approval on a dry-run
    /// Application in `ns` (which must exist) comes back recorded.
    pub async fn wait_until_served(&self, client: &kube::Client, ns: &str) {
        let apps: Api<Application> = Api::namespaced(client.clone(), ns);
        let probe: Application = serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "webhook-probe", "annotations": {a::APPROVED_PLAN: "sha256:probe"}},
            "spec": {"source": {"repository": "probe", "path": "."}, "serviceAccountName": "probe",
                     "destination": {"namespace": ns}, "suspend": true},
        }))
        .expect("Application");
        let dry_run = PostParams { dry_run: true, ..Default::default() };
        eventually("the webhook to answer", Duration::from_secs(60), || async {
            let created = apps.create(&dry_run, &probe).await.ok()?;
            created.metadata.annotations?.get(a::APPROVED_BY).map(|_| ())
        })
        .await;
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Install the configuration `ksync-controller webhook-configuration` prints, reaching the
/// manager serving on `port`: through the Service on simcluster, by URL on a real cluster.
pub async fn install_configuration(cluster: &Cluster, client: &kube::Client, port: u16) {
    let mut cmd = Command::new(bin());
    cmd.arg("webhook-configuration");
    if let Some(sim) = cluster.sim() {
        cmd.args(["--service-namespace", SYSTEM]);
        sim.set_webhook_service(SYSTEM, SERVICE, 443, ([127, 0, 0, 1], port).into());
    } else {
        cmd.args(["--url", &format!("https://127.0.0.1:{port}")]);
    }
    let yaml = super::run(&mut cmd);
    let config: Value = kuvryn_sync::yaml::from_str(&yaml).expect("configuration YAML");
    apply_as(client, "test", &config).await;
}
