//! A manager replica started as a kubelet starts the chart's container: its arguments and
//! environment, with what a kubelet fills in (the Pod's name and namespace) filled in, its ports
//! moved to free loopback ports (every replica shares this machine's network), a kubeconfig as
//! its credentials. It runs either this build's binaries from the host or, as in a Pod, from the
//! image's root filesystem ([`super::image`]).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use serde_json::Value;

use super::image::{ImageRoot, Isolation};
use super::{Tools, eventually, free_port};

/// Where a replica's binaries come from.
#[derive(Clone, Copy)]
pub enum Runtime<'a> {
    /// This build's `ksync-controller` and the tools `scripts/install-tools` installed.
    Host,
    /// The image's root filesystem, entered as [`ImageRoot::command`] does.
    Image(&'a ImageRoot, Isolation),
}

/// A token of the ServiceAccount `namespace/name`, from the TokenRequest API.
pub async fn token(client: &kube::Client, namespace: &str, name: &str) -> String {
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec { expiration_seconds: Some(3600), ..Default::default() }),
        ..Default::default()
    };
    sas.create_token_request(name, &PostParams::default(), &request)
        .await
        .expect("TokenRequest")
        .status
        .and_then(|s| s.token)
        .expect("token")
}

/// The holder of each of the shard Leases `<prefix>-shard-0..shards` in `leases`' namespace,
/// when it holds it now (renewed within its duration).
pub async fn shard_holders(leases: &Api<Lease>, prefix: &str, shards: usize) -> Vec<Option<String>> {
    let now = jiff::Timestamp::now();
    let mut out = Vec::new();
    for k in 0..shards {
        let spec = leases.get(&format!("{prefix}-shard-{k}")).await.ok().and_then(|l| l.spec);
        let held = spec.and_then(|s| {
            let renewed = s.renew_time?.0;
            let until = renewed + jiff::SignedDuration::from_secs(i64::from(s.lease_duration_seconds?));
            (until > now).then_some(s.holder_identity?).filter(|h| !h.is_empty())
        });
        out.push(held);
    }
    out
}

/// A replica, killed on drop (its log's tail printed when the test is failing).
pub struct Replica {
    child: std::process::Child,
    log: PathBuf,
    metrics: u16,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            eprintln!(
                "--- {} (last 60 lines)\n{}",
                self.log.display(),
                lines[lines.len().saturating_sub(60)..].join("\n")
            );
        }
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().map(|s| s.as_str().expect("a string").to_string()).collect()).unwrap_or_default()
}

/// `kubeconfig` made readable inside a container root: certificate files it names are copied
/// to `/tmp` there.
fn kubeconfig_inside(kubeconfig: &Path, root: &Path) -> String {
    let mut config = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
    for (k, cluster) in config.clusters.iter_mut().enumerate() {
        if let Some(path) = cluster.cluster.as_mut().and_then(|c| c.certificate_authority.as_mut()) {
            let inside = format!("/tmp/ca-{k}.crt");
            std::fs::copy(&*path, root.join(inside.trim_start_matches('/'))).expect("copy the CA");
            *path = inside;
        }
    }
    let path = root.join("tmp/kubeconfig");
    std::fs::write(&path, serde_json::to_vec(&config).expect("kubeconfig JSON")).expect("write kubeconfig");
    "/tmp/kubeconfig".to_string()
}

impl Replica {
    /// `container` (a Pod's container, or the chart's template of it) run as Pod `pod` of
    /// `namespace`, with `kubeconfig`'s credentials, its log and files under `dir`.
    pub fn start(
        container: &Value,
        pod: &str,
        namespace: &str,
        kubeconfig: &Path,
        dir: &Path,
        runtime: Runtime<'_>,
    ) -> Replica {
        let mut args = strings(&container["args"]);
        let metrics = free_port();
        for a in &mut args {
            if a.starts_with("--metrics-bind-address=") {
                *a = format!("--metrics-bind-address=127.0.0.1:{metrics}");
            }
        }
        args.push(format!("--webhook-bind-address=127.0.0.1:{}", free_port()));
        let log = dir.join(format!("{pod}.log"));
        let (mut cmd, kubeconfig) = match runtime {
            Runtime::Host => {
                let tools = Tools::get();
                let mut cmd = Command::new(super::manager::bin());
                cmd.args(&args).env_clear().env("PATH", std::env::var_os("PATH").unwrap_or_default());
                cmd.env("KSYNC_HELM", tools.bin.join("helm")).env("KSYNC_KUBECTL", tools.bin.join("kubectl"));
                (cmd, kubeconfig.display().to_string())
            }
            Runtime::Image(image, isolation) => {
                let root = image.container_root(dir, pod);
                let kubeconfig = kubeconfig_inside(kubeconfig, &root);
                let mut argv = match strings(&container["command"]) {
                    command if command.is_empty() => image.entrypoint.clone(),
                    command => command,
                };
                argv.extend(args);
                (image.command(isolation, &root, &argv), kubeconfig)
            }
        };
        let host = matches!(runtime, Runtime::Host);
        for e in container["env"].as_array().into_iter().flatten() {
            let name = e["name"].as_str().unwrap();
            let value = match (name, e["value"].as_str()) {
                ("POD_NAME", _) => pod.to_string(),
                ("POD_NAMESPACE", _) => namespace.to_string(),
                // The host's binaries get this machine's folders for the Pod's emptyDirs.
                ("HOME", _) if host => dir.display().to_string(),
                ("KSYNC_GIT_CACHE_DIR", _) if host => dir.join(format!("{pod}-git")).display().to_string(),
                (_, Some(v)) => v.to_string(),
                (_, None) => panic!("an environment variable the test does not know how to fill: {e}"),
            };
            cmd.env(name, value);
        }
        cmd.env("KUBECONFIG", kubeconfig)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"));
        Replica { child: cmd.spawn().expect("ksync-controller"), log, metrics }
    }

    /// Whether `/readyz` answers 200: the replica takes part in the shard split (what the
    /// chart's readiness probe asks).
    pub fn ready(&self) -> bool {
        use std::io::{Read, Write};
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.metrics)) else { return false };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        if s.write_all(b"GET /readyz HTTP/1.0\r\nHost: x\r\n\r\n").is_err() {
            return false;
        }
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200")
    }

    /// Whether it has exited.
    pub fn exited(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_some()
    }

    /// SIGTERM, as a kubelet stops a Pod, and wait for the exit.
    pub async fn terminate(mut self) {
        self.signal_term();
        let child = &mut self.child;
        eventually("a replica to exit after SIGTERM", Duration::from_secs(60), || {
            let exited = child.try_wait().ok().flatten().is_some();
            async move { exited.then_some(()) }
        })
        .await;
    }

    /// SIGTERM, without waiting.
    pub fn signal_term(&self) {
        let pid = rustix::process::Pid::from_child(&self.child);
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}
