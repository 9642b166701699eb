//! Kuvryn Sync's test kit: the harness every integration test, the `ksync` tests and the load
//! test run on. It locates the real tools, starts real Git servers on loopback, picks the cluster
//! to run against, runs the real binaries as their own processes, and builds the manifests the
//! tests commit.
//!
//! - [`Tools`]: the `helm` and `kubectl` that `scripts/install-tools` installed (real upstream
//!   binaries, checksum-verified).
//! - [`GitServer`]: a real `git daemon` on 127.0.0.1 serving bare repositories from a temporary
//!   folder, with push enabled; [`WorkTree`] commits and pushes to it. [`GitHttpServer`] serves
//!   them over smart (or dumb) HTTP, [`ssh::SshServer`] over SSH.
//! - [`Cluster`]: [`Cluster::start`] is the embedded emulator (`simcluster`); [`Cluster::real`] a
//!   real control plane: the cluster named by `KSYNC_E2E_KUBECONFIG`, else a fresh realkube
//!   (kube-apiserver, kube-controller-manager and etcd from `../shared/realkube`, one per test,
//!   stopped on drop). [`both!`] makes one test function two tests, `NAME::simcluster` and
//!   `NAME::realkube`. Tests that need what only simcluster has call
//!   [`Cluster::require_simcluster`], which skips that part, saying why, on a real cluster.
//! - [`apps`]: the Repository and Application controllers in-process ([`apps::Env`]) and helpers
//!   to read plans off Revisions.
//! - Processes: [`manager::Manager`] (`ksync-controller run` with its webhook),
//!   [`replica::Replica`] (a replica as a kubelet starts the chart's container, from the host or
//!   from the image of [`image`]), [`fleet`] (replicas sharding one namespace's Applications with
//!   Leases), [`ksync`] (the `ksync` binary as a user runs it). The binaries are the ones the
//!   running test's build made ([`binaries`]).
//! - [`charts`]: Helm chart servers on loopback, a Helm repository over HTTPS
//!   ([`charts::HelmRepo`]) and an OCI registry ([`charts::OciRegistry`]), both with basic auth
//!   and a private CA, and builders of small test charts ([`charts::chart`]); its rustdoc says
//!   exactly how the real `helm` pulls from each.
//! - [`manifests`]: builders of the manifests the tests commit, such as [`manifests::deployment`].
//! - [`metrics`] scrapes a manager's `/metrics`; [`browser`] drives the dashboard in headless
//!   Chromium.
//!
//! Everything started here is stopped and deleted on drop. Waits use deadlines, never sleeps
//! that hope. Files the kit reads at run time are found from the workspace root
//! ([`repo_root`]) or from this crate's folder (`git_http.py`).

#![warn(missing_docs)]

pub mod apps;
pub mod binaries;
pub mod browser;
pub mod charts;
pub mod fleet;
pub mod git_hosts;
pub mod image;
pub mod ksync;
pub mod manager;
pub mod manifests;
pub mod metrics;
pub mod ports;
pub mod replica;
pub mod sinks;
pub mod ssh;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Environment variable naming a real cluster's kubeconfig for the end-to-end run.
pub const E2E_KUBECONFIG: &str = "KSYNC_E2E_KUBECONFIG";

/// The repository root: the nearest folder at or above this crate's manifest that holds
/// `Cargo.lock` (the workspace root).
pub fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.ancestors().find(|d| d.join("Cargo.lock").is_file()).unwrap_or(manifest).to_path_buf()
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

    /// `promtool` (from Debian's prometheus package, which `scripts/install-tools` unpacks), for
    /// the alert rules' tests.
    pub fn promtool(&self) -> PathBuf {
        let tool = self.bin.join("promtool");
        assert!(
            tool.exists(),
            "{} is missing: run scripts/install-tools, which takes promtool out of Debian's prometheus \
             package (`apt-get download prometheus`); without apt-get, put a promtool (Prometheus 2.x) there by hand",
            tool.display()
        );
        tool
    }

    /// `kubectl` with no ambient kubeconfig.
    pub fn kubectl(&self, home: &Path) -> Command {
        let mut c = Command::new(self.bin.join("kubectl"));
        c.env_clear().env("HOME", home).env("KUBECONFIG", home.join("kubeconfig"));
        c
    }
}

pub use ports::{free_port, start_on_free_port};

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
        let started = start_on_free_port(Duration::from_secs(10), |port| {
            let log = std::fs::File::create(base.path().join("daemon.log")).expect("daemon log");
            // `git daemon` would run `git-daemon` as a child that outlives a kill of `git`:
            // start the daemon itself.
            Command::new(git_daemon())
                .args(["--verbose", "--reuseaddr", "--export-all", "--enable=receive-pack", "--informative-errors"])
                .arg(format!("--base-path={}", base.path().display()))
                .arg("--listen=127.0.0.1")
                .arg(format!("--port={port}"))
                .arg(base.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("git daemon (is git installed?)")
        });
        let (child, port) = started.expect("git daemon did not start");
        GitServer { base, child, addr: ([127, 0, 0, 1], port).into() }
    }

    /// Start a server with the empty repository `name`, and a work tree of it.
    pub fn with_repo(name: &str) -> (GitServer, WorkTree) {
        let server = GitServer::start();
        let wt = WorkTree::clone(&server.create_repo(name));
        (server, wt)
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

    /// How many fetches (upload-pack requests) repository `name` has served so far.
    pub fn upload_packs(&self, name: &str) -> usize {
        let log = std::fs::read_to_string(self.base.path().join("daemon.log")).unwrap_or_default();
        let needle = format!("Request upload-pack for '/{name}.git'");
        log.lines().filter(|l| l.contains(&needle)).count()
    }

    /// The folder of the bare repository `name` (for pushing without the daemon).
    pub fn repo_path(&self, name: &str) -> PathBuf {
        self.base.path().join(format!("{name}.git"))
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stop serving (the server is down from now on).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `git-daemon` program of the installed git.
fn git_daemon() -> PathBuf {
    let exec_path = run(Command::new("git").arg("--exec-path"));
    PathBuf::from(exec_path.trim()).join("git-daemon")
}

/// A smart-HTTP Git server on loopback: the real `git http-backend` behind a small CGI host
/// (`git_http.py`), with optional basic auth and a request log; or, with `dumb`, the
/// repositories as static files.
pub struct GitHttpServer {
    base: tempfile::TempDir,
    child: Child,
    port: u16,
    /// With TLS: the PEM of the private CA that signed the server certificate.
    pub ca_pem: Option<String>,
}

/// How to run a [`GitHttpServer`].
#[derive(Default)]
pub struct HttpOptions<'a> {
    /// Basic auth (user, password).
    pub auth: Option<(&'a str, &'a str)>,
    /// Serve the dumb protocol (static files).
    pub dumb: bool,
    /// HTTPS with a certificate from a fresh private CA.
    pub tls: bool,
    /// Delay every request this long.
    pub delay: Option<Duration>,
}

/// A private CA and a server certificate for 127.0.0.1: (ca pem, cert pem, key pem).
pub fn private_ca() -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().expect("ca key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, "Kuvryn test CA");
    let ca = ca_params.self_signed(&ca_key).expect("ca");
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().expect("key");
    let params = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).expect("params");
    let cert = params.signed_by(&key, &issuer).expect("cert");
    (ca.pem(), cert.pem(), key.serialize_pem())
}

impl GitHttpServer {
    /// Start it; `auth` is (user, password).
    pub fn start(auth: Option<(&str, &str)>, dumb: bool) -> GitHttpServer {
        GitHttpServer::start_with(HttpOptions { auth, dumb, ..Default::default() })
    }

    /// Start it with all options.
    pub fn start_with(options: HttpOptions<'_>) -> GitHttpServer {
        let (auth, dumb) = (options.auth, options.dumb);
        let base = temp_dir("git-http");
        let tls = options.tls.then(private_ca);
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("git_http.py");
        if let Some((_, cert, key)) = &tls {
            std::fs::write(base.path().join("cert.pem"), cert).expect("cert");
            std::fs::write(base.path().join("key.pem"), key).expect("key");
        }
        let started = start_on_free_port(Duration::from_secs(20), |port| {
            let mut cmd = Command::new("python3");
            cmd.arg(&script)
                .arg("--root")
                .arg(base.path())
                .arg("--port")
                .arg(port.to_string())
                .arg("--log")
                .arg(base.path().join("requests.log"));
            if let Some((u, p)) = auth {
                cmd.args(["--user", u, "--password", p]);
            }
            if dumb {
                cmd.arg("--dumb");
            }
            if let Some(d) = options.delay {
                cmd.arg("--delay-ms").arg(d.as_millis().to_string());
            }
            if tls.is_some() {
                cmd.arg("--tls-cert").arg(base.path().join("cert.pem"));
                cmd.arg("--tls-key").arg(base.path().join("key.pem"));
            }
            cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("python3")
        });
        let (child, port) = started.expect("the git http server did not start");
        GitHttpServer { base, child, port, ca_pem: tls.map(|t| t.0) }
    }

    /// Create an empty bare repository `name`; returns its folder (push there directly).
    pub fn create_repo(&self, name: &str) -> PathBuf {
        let path = self.base.path().join(format!("{name}.git"));
        run(Command::new("git").args(["init", "--quiet", "--bare", "--initial-branch=main"]).arg(&path));
        path
    }

    /// The `http://` (or, with TLS, `https://`) URL of repository `name`.
    pub fn url(&self, name: &str) -> String {
        let scheme = if self.ca_pem.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}/{name}.git", self.port)
    }

    /// Every `Authorization` header received so far, as sent.
    pub fn authorizations(&self) -> Vec<String> {
        std::fs::read_to_string(self.base.path().join("requests.log.auth"))
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }

    /// Every request so far: `METHOD path query status`.
    pub fn requests(&self) -> Vec<String> {
        std::fs::read_to_string(self.base.path().join("requests.log"))
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }
}

impl Drop for GitHttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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

    /// Run git with `args` here; returns stdout.
    pub fn git(&self, args: &[&str]) -> String {
        run(git_cmd(self.path()).args(args))
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

/// Environment variable naming the folder of realkube's `up` and `down` scripts (default:
/// `../shared/realkube` next to the repository).
pub const REALKUBE_DIR: &str = "KSYNC_REALKUBE_DIR";

/// Where realkube's scripts are, if anywhere.
pub fn realkube_dir() -> Option<PathBuf> {
    let dir = std::env::var_os(REALKUBE_DIR)
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().parent().unwrap_or(Path::new("/")).join("shared/realkube"));
    dir.join("up").is_file().then_some(dir)
}

/// One test function run as two tests: `NAME::simcluster` on [`Cluster::start`] and
/// `NAME::realkube` on [`Cluster::real`]. `NAME` is a `fn NAME(cluster: Cluster)` of the test
/// file.
#[macro_export]
macro_rules! both {
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            #[test]
            fn simcluster() {
                super::$name($crate::Cluster::start());
            }
            #[test]
            fn realkube() {
                super::$name($crate::Cluster::real());
            }
        }
    )+};
}

/// The cluster a test runs against.
pub enum Cluster {
    /// A real cluster named by `KSYNC_E2E_KUBECONFIG` (shared: tests must not collide in it).
    External {
        /// Its kubeconfig.
        kubeconfig: PathBuf,
    },
    /// A realkube control plane started for this test, stopped on drop, with simulated Nodes.
    Real {
        /// realkube's scripts.
        scripts: PathBuf,
        /// Its state: certificates, etcd, logs and `kubeconfig`.
        dir: tempfile::TempDir,
        /// simcluster's scheduler and kubelets as clients of it (realkube has neither), so its
        /// Pods run; on their own runtime, stopped before the control plane.
        nodes: Option<(simcluster::nodes::Nodes, tokio::runtime::Runtime)>,
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
    /// A fresh simcluster (workload simulation on).
    pub fn start() -> Cluster {
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        let sim =
            runtime.block_on(simcluster::SimCluster::start(simcluster::Config::default(), 0)).expect("simcluster");
        let dir = temp_dir("cluster");
        std::fs::write(dir.path().join("kubeconfig"), sim.kubeconfig()).expect("write kubeconfig");
        Cluster::Sim { sim, runtime, dir }
    }

    /// A real control plane: the cluster of `KSYNC_E2E_KUBECONFIG`, else a fresh realkube. Panics,
    /// saying what is missing, when there is neither (`scripts/test` then leaves these tests out).
    pub fn real() -> Cluster {
        if let Some(path) = std::env::var_os(E2E_KUBECONFIG) {
            return Cluster::External { kubeconfig: PathBuf::from(path) };
        }
        let Some(scripts) = realkube_dir() else {
            panic!(
                "no real control plane: {E2E_KUBECONFIG} is unset and there is no realkube at ../shared/realkube \
                 (or {REALKUBE_DIR}); scripts/test leaves the realkube tests out in that case"
            )
        };
        let dir = temp_dir("realkube");
        let out = simcluster::realkube::up(&scripts, dir.path()).unwrap_or_else(|e| panic!("starting realkube: {e}"));
        assert!(
            out.status.success() && dir.path().join("kubeconfig").is_file(),
            "realkube did not start ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
        let kubeconfig = dir.path().join("kubeconfig");
        let nodes = runtime.block_on(async {
            let kc = kube::config::Kubeconfig::read_from(&kubeconfig).expect("kubeconfig");
            let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.expect("config");
            let client = kube::Client::try_from(config).expect("client");
            // realkube is built from OpenShift's tree: its admission projects
            // `openshift-service-ca.crt` into every Pod (see simcluster::nodes).
            simcluster::nodes::Nodes::start(client, simcluster::Config::default(), true).await.expect("simulated Nodes")
        });
        Cluster::Real { scripts, dir, nodes: Some((nodes, runtime)) }
    }

    /// The kubeconfig path.
    pub fn kubeconfig(&self) -> PathBuf {
        match self {
            Cluster::External { kubeconfig } => kubeconfig.clone(),
            Cluster::Real { dir, .. } | Cluster::Sim { dir, .. } => dir.path().join("kubeconfig"),
        }
    }

    /// The emulator, when this run uses it (its audit log, faults and clock).
    pub fn sim(&self) -> Option<&simcluster::SimCluster> {
        match self {
            Cluster::Sim { sim, .. } => Some(sim),
            Cluster::External { .. } | Cluster::Real { .. } => None,
        }
    }

    /// Whether this is a real cluster (realkube or `KSYNC_E2E_KUBECONFIG`'s).
    pub fn is_external(&self) -> bool {
        !matches!(self, Cluster::Sim { .. })
    }

    /// Whether the cluster was started for this test (simcluster or realkube), so it holds
    /// nothing yet; `KSYNC_E2E_KUBECONFIG`'s may.
    pub fn is_fresh(&self) -> bool {
        !matches!(self, Cluster::External { .. })
    }

    /// Write to `path` a copy of the admin kubeconfig with every user's credentials replaced by
    /// `token` and, when given, every cluster's server by `server`.
    pub fn write_kubeconfig(&self, path: &Path, token: Option<&str>, server: Option<&str>) {
        let mut config = kube::config::Kubeconfig::read_from(self.kubeconfig()).expect("kubeconfig");
        for user in &mut config.auth_infos {
            if let (Some(token), Some(auth)) = (token, user.auth_info.as_mut()) {
                *auth = kube::config::AuthInfo { token: Some(token.to_string().into()), ..Default::default() };
            }
        }
        for cluster in &mut config.clusters {
            if let (Some(server), Some(c)) = (server, cluster.cluster.as_mut()) {
                c.server = Some(server.to_string());
            }
        }
        std::fs::write(path, serde_json::to_vec(&config).expect("kubeconfig JSON")).expect("write kubeconfig");
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

    /// The kube-rs configuration of this cluster's admin (call inside a Tokio runtime).
    pub async fn config(&self) -> kube::Config {
        let kubeconfig = kube::config::Kubeconfig::read_from(self.kubeconfig()).expect("kubeconfig");
        kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.expect("config")
    }

    /// A kube-rs client for this cluster (call inside a Tokio runtime).
    pub async fn client(&self) -> kube::Client {
        let kubeconfig = kube::config::Kubeconfig::read_from(self.kubeconfig()).expect("kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.expect("config");
        kube::Client::try_from(config).expect("client")
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
        match self {
            Cluster::Sim { sim, .. } => sim.stop(),
            Cluster::Real { scripts, dir, nodes } => {
                drop(nodes.take());
                // Stops exactly what `up` started (by the pids it recorded in `dir`).
                let _ = Command::new(scripts.join("down")).arg(dir.path()).stdin(Stdio::null()).output();
            }
            Cluster::External { .. } => {}
        }
    }
}

/// Install (server-side apply) the Kuvryn Sync CRDs and wait until they are Established.
pub async fn install_crds(client: &kube::Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Api, Patch, PatchParams};
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for manifest in kuvryn_sync::api::crd::manifests() {
        let name = manifest["metadata"]["name"].as_str().expect("name").to_string();
        crds.patch(&name, &PatchParams::apply("ksync-test").force(), &Patch::Apply(&manifest))
            .await
            .expect("apply CRD");
        let end = Instant::now() + Duration::from_secs(30);
        loop {
            let crd = crds.get(&name).await.expect("get CRD");
            let established = crd
                .status
                .and_then(|s| s.conditions)
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Established" && c.status == "True"));
            if established {
                break;
            }
            assert!(Instant::now() < end, "CRD {name} not Established");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Poll `check` every 50 ms until it returns `Some`, or panic with `what` after `deadline`.
pub async fn eventually<T, F, Fut>(what: &str, deadline: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let end = Instant::now() + deadline;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < end, "timed out after {deadline:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A two-thread Tokio runtime for a test that also uses [`Cluster::start`] (which must be called
/// outside any runtime).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime")
}

/// Server-side apply `obj` (any kind; the plural is the lower-cased kind plus `s`) as `manager`,
/// forcing conflicts; returns the applied object.
pub async fn apply_as(client: &kube::Client, manager: &str, obj: &serde_json::Value) -> serde_json::Value {
    use kube::api::{Api, DynamicObject, Patch, PatchParams};
    let api_version = obj["apiVersion"].as_str().expect("apiVersion");
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), api_version.to_string()),
    };
    let kind = obj["kind"].as_str().expect("kind").to_string();
    let plural = format!("{}s", kind.to_lowercase());
    let ar = kube::discovery::ApiResource { group, version, api_version: api_version.into(), kind, plural };
    let api: Api<DynamicObject> = match obj["metadata"]["namespace"].as_str() {
        Some(n) => Api::namespaced_with(client.clone(), n, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    let name = obj["metadata"]["name"].as_str().expect("name").to_string();
    let applied = api.patch(&name, &PatchParams::apply(manager).force(), &Patch::Apply(obj)).await.expect("apply");
    serde_json::to_value(applied).expect("json")
}

/// The Events in `ns` about the object named `regarding`: (type, reason, note).
pub async fn events_about(client: &kube::Client, ns: &str, regarding: &str) -> Vec<(String, String, String)> {
    use k8s_openapi::api::events::v1::Event;
    use kube::api::{Api, ListParams};
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    events
        .list(&ListParams::default())
        .await
        .expect("list Events")
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(regarding))
        .map(|e| (e.type_.unwrap_or_default(), e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

/// A namespace `ns` with a ServiceAccount `deployer` that may do anything in it (what an
/// Application's `serviceAccountName` names in the tests).
pub async fn deployer_namespace(client: &kube::Client, ns: &str) {
    use serde_json::json;
    apply_as(client, "test", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})).await;
    apply_as(
        client,
        "test",
        &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "deployer", "namespace": ns}}),
    )
    .await;
    apply_as(
        client,
        "test",
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "deployer", "namespace": ns},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}),
    )
    .await;
    apply_as(
        client,
        "test",
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "deployer", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "deployer"},
        "subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": ns}]}),
    )
    .await;
}

/// A Repository `platform` in `ns` following `url`'s `main`, fetched hourly (tests ask for a
/// fetch when they need one).
pub async fn create_repository(client: &kube::Client, ns: &str, url: &str) {
    use kube::api::{Api, PostParams};
    let repo: kuvryn_sync::api::Repository = serde_json::from_value(serde_json::json!({
        "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Repository",
        "metadata": {"name": "platform", "namespace": ns},
        "spec": {"url": url, "ref": {"branch": "main"}, "interval": "1h"},
    }))
    .expect("a Repository");
    Api::<kuvryn_sync::api::Repository>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &repo)
        .await
        .expect("create the Repository");
}

/// A kubeconfig in `dir` acting as the ServiceAccount `<namespace>/<name>` (cluster-admin, with a
/// token from a TokenRequest), so simcluster's audit log attributes this identity's writes. The
/// namespace must exist. simcluster only: it swaps the admin token of [`Cluster::kubeconfig`].
pub async fn service_account_kubeconfig(
    cluster: &Cluster,
    client: &kube::Client,
    dir: &Path,
    namespace: &str,
    name: &str,
) -> PathBuf {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    use kube::api::{Api, PostParams};
    use serde_json::json;
    apply_as(
        client,
        "test",
        &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}}),
    )
    .await;
    apply_as(
        client,
        "test",
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": format!("ksync-{name}")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]}),
    )
    .await;
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec { expiration_seconds: Some(3600), ..Default::default() }),
        ..Default::default()
    };
    let token = sas
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .expect("TokenRequest")
        .status
        .expect("TokenRequest status")
        .token
        .expect("token");
    let admin = std::fs::read_to_string(cluster.kubeconfig()).expect("kubeconfig");
    let path = dir.join(format!("{name}.kubeconfig"));
    std::fs::write(&path, admin.replace("simcluster-admin-token", &token)).expect("write kubeconfig");
    path
}
