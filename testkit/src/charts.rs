//! Helm chart servers on loopback, and small test charts, for the chart dependency tests (issue 46).
//!
//! - [`HelmRepo`]: a Helm chart repository over HTTPS (a certificate from a fresh private CA) with
//!   HTTP basic auth, on 127.0.0.1 and a free port. It is `git_http.py` serving a folder as static
//!   files (`--dumb`); [`HelmRepo::publish`] runs the real `helm package` into that folder and
//!   `helm repo index --url <url>` over it, so `index.yaml` lists every version published. A wrong
//!   or missing password gets `401`; every request is logged ([`HelmRepo::requests`]).
//! - [`OciRegistry`]: Debian's `docker-registry` (CNCF distribution 2.8, which
//!   `scripts/install-tools` puts into `tools/bin`) with filesystem storage in a temporary folder,
//!   htpasswd auth (one bcrypt line made here with the `bcrypt` crate, cost 4 because the registry
//!   checks the password on every request) and TLS with a certificate from its own private CA, on
//!   127.0.0.1 and a free port, killed on drop. [`OciRegistry::push`] runs `helm package` and
//!   `helm push` to `oci://127.0.0.1:PORT/charts`; [`OciRegistry::requests`] reads its access log.
//! - [`chart`]: a builder writing a small chart folder (Chart.yaml, a ConfigMap template,
//!   optionally a CRD in `crds/` with a template guarded by `.Capabilities.APIVersions.Has`, and
//!   `dependencies`).
//!
//! Each server has its own CA ([`crate::private_ca`]); its PEM is in `ca_file()`. Every `helm` the
//! kit runs is [`Tools::helm`] (empty environment, `HOME` and `HELM_*_HOME` in a scratch folder).
//!
//! # How `helm` v4.1.4 pulls from these servers (verified by `testkit/tests/charts.rs`)
//!
//! Nothing below reads or writes the real `$HOME` when helm runs with an empty environment plus
//! `HOME`, `HELM_CACHE_HOME`, `HELM_CONFIG_HOME` and `HELM_DATA_HOME` pointing into a scratch
//! folder (as [`Tools::helm`] does). `HELM_REPOSITORY_CONFIG` (default
//! `$HELM_CONFIG_HOME/repositories.yaml`), `HELM_REPOSITORY_CACHE` (default
//! `$HELM_CACHE_HOME/repository`) and `HELM_REGISTRY_CONFIG` (default
//! `$HELM_CONFIG_HOME/registry/config.json`) move single files (flags `--repository-config`,
//! `--repository-cache`, `--registry-config`; the tests use only the `HELM_*_HOME` defaults,
//! though `--registry-config FILE` and `HELM_REGISTRY_CONFIG=FILE` were each seen to work for an
//! OCI `helm dependency build` by hand). CA paths must be absolute: `helm repo add` stores
//! `--ca-file` in repositories.yaml exactly as given.
//!
//! ## HTTPS repository ([`HelmRepo`])
//!
//! - `helm repo add NAME URL --ca-file CA --username U --password-stdin` (password on stdin)
//!   downloads `URL/index.yaml` once and writes `repositories.yaml` (an entry with `caFile`,
//!   `username`, `password` in clear), `repositories.lock`, and in the repository cache
//!   `NAME-index.yaml` and `NAME-charts.txt`. Wrong password, exit status 1, stderr:
//!   `Error: looks like "URL" is not a valid chart repository or cannot be reached: failed to fetch URL/index.yaml : 401 Unauthorized`
//!   (URL as given, so `https://127.0.0.1:PORT` gives `.../127.0.0.1:PORT/index.yaml`). Without
//!   the CA: `... cannot be reached: Get "URL/index.yaml": tls: failed to verify certificate: x509: certificate signed by unknown authority`.
//! - Writing that repositories.yaml entry by hand (`name`, `url`, `caFile`, `username`,
//!   `password`) works the same for `helm dependency build`, without the `repo add` request.
//! - `helm dependency build CHART` takes the credentials and CA of an `https://` dependency only
//!   from the repositories.yaml entry whose `url` equals the dependency's `repository` (or the one
//!   named by `repository: "@NAME"`); the entry's `caFile`, `username` and `password` are used even
//!   when `--ca-file/--username/--password` (meant for OCI) name others. It first refreshes every repositories.yaml entry's index (stdout: `Hang tight
//!   while we grab the latest from your chart repositories...`), one `GET /index.yaml` each,
//!   then `GET /<chart>-<version>.tgz`; `--skip-refresh` skips the index download but then needs
//!   `NAME-index.yaml` in the repository cache (else
//!   `Error: no cached repository for NAME found. (try 'helm repo update'): open .../NAME-index.yaml: no such file or directory`).
//!   A wrong password in the entry is only a warning on the refresh (stdout:
//!   `...Unable to get an update from the "NAME" chart repository (URL):` then
//!   `failed to fetch URL/index.yaml : 401 Unauthorized`) and the build then fails (exit 1) with
//!   the `no cached repository for NAME` error above. No entry at all for the URL: a warning
//!   (`...Unable to get an update from the "URL" chart repository`, here the TLS error since no CA
//!   is known), then `Error: no cached repository for helm-manager-<sha256> found. ...`.
//!   It writes `charts/<chart>-<version>.tgz` and `Chart.lock` next to `Chart.yaml`.
//! - `helm pull CHART --repo URL --version V --ca-file CA --username U --password P -d DIR`
//!   works without any repositories.yaml (index and chart are fetched, nothing is left in the
//!   cache); `--version` takes exact versions and ranges (a range logs
//!   `level=WARN msg="unable to find exact version requested; falling back to closest available version"`).
//!   `DIR` must exist. Wrong password: the same `Error: looks like "URL" is not a valid chart
//!   repository or cannot be reached: failed to fetch URL/index.yaml : 401 Unauthorized`.
//!   Caveat: when repositories.yaml already has an entry for URL, `pull --repo` uses that entry's
//!   cached index and fails with `Error: no cached repo found. (try 'helm repo update')` when
//!   there is none.
//!
//! ## OCI registry ([`OciRegistry`])
//!
//! - `helm push PKG.tgz oci://HOST:PORT/charts --ca-file CA --username U --password P` needs no
//!   login and writes nothing (it prints `Pushed: HOST:PORT/charts/CHART:V` and `Digest: sha256:...`
//!   on stderr). `helm pull oci://HOST:PORT/charts/CHART --version V --ca-file CA
//!   --username U --password P -d DIR` likewise (exact versions and ranges; `DIR` must exist;
//!   `Pulled: ...` and `Digest: ...` on stderr).
//!   Wrong password, exit status 1, stderr:
//!   `Error: failed to perform "FetchReference" on source: GET "https://HOST:PORT/v2/charts/CHART/manifests/V": response status code 401: unauthorized: authentication required: [map[Action:pull Class: Name:charts/CHART Type:repository]]`;
//!   no credentials at all: `... manifests/V": basic credential not found`; without the CA:
//!   `... Get "https://HOST:PORT/v2/...": tls: failed to verify certificate: x509: certificate signed by unknown authority`.
//! - `helm registry login HOST:PORT --ca-file CA --username U --password-stdin` writes
//!   `$HELM_REGISTRY_CONFIG` (`{"auths":{"HOST:PORT":{"auth":"base64(U:P)"}}}`), prints
//!   `Login Succeeded` (on stderr); the CA is not stored. Wrong password, exit 1, stderr:
//!   `Error: authenticating to "HOST:PORT": GET "https://HOST:PORT/v2/": response status code 401: unauthorized: authentication required`.
//!   Writing that config.json by hand works the same (no login request).
//! - `helm dependency build` does work for an `oci://HOST:PORT/charts` dependency (exact version
//!   or range: it lists the tags). Credentials come from `--username/--password` or from
//!   `$HELM_REGISTRY_CONFIG`; the CA from `--ca-file` or `SSL_CERT_FILE`. With an `https://`
//!   dependency in the same build, that one still gets its repositories.yaml entry's credentials
//!   and CA, not these flags. Wrong password:
//!   `Error: could not retrieve list of tags for repository oci://HOST:PORT/charts: GET "https://HOST:PORT/v2/charts/CHART/tags/list": response status code 401: unauthorized: authentication required: [map[Action:pull Class: Name:charts/CHART Type:repository]]`
//!   (no credentials: `... tags/list": basic credential not found`; no CA: `... Get
//!   "https://HOST:PORT/v2/charts/CHART/tags/list": tls: failed to verify certificate: x509: certificate signed by unknown authority`).
//!   So an umbrella chart with one dependency from each kind of server builds with one
//!   `helm dependency build CHART --ca-file OCI_CA` after `helm repo add ... --ca-file REPO_CA`
//!   and `helm registry login` (or `--username/--password`), even with two different CAs.
//! - `SSL_CERT_FILE=CA` (Go's system pool) trusts a CA for every helm command, OCI and HTTPS
//!   (verified with `helm pull` from each).
//!
//! ## Caching
//!
//! helm keeps no chart cache of its own here: a second `helm dependency build` downloads every
//! dependency again (`GET /<chart>-<version>.tgz`, and the OCI manifest and both blobs), even
//! with `Chart.lock` and `charts/` in place. `helm template` of a built chart makes no request.
//! Any "no request on a cached pull" guarantee is the controller's to make; the servers'
//! `requests()` show it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::{Tools, private_ca, repo_root, run, temp_dir};

/// Start `spawn(port)` on free ports until the child listens on one within 20 s.
fn start_on_free_port(what: &str, spawn: impl FnMut(u16) -> Child) -> (Child, u16) {
    crate::start_on_free_port(Duration::from_secs(20), spawn).unwrap_or_else(|| panic!("{what} did not start"))
}

/// `helm package CHART_DIR -d DEST` in a scratch home; returns the package's path.
fn package(tools: &Tools, chart_dir: &Path, dest: &Path) -> PathBuf {
    let home = temp_dir("helm-package");
    let out = run(tools.helm(home.path()).arg("package").arg(chart_dir).arg("-d").arg(dest));
    // "Successfully packaged chart and saved it to: PATH"
    let path = out.trim().rsplit_once(": ").map(|(_, p)| PathBuf::from(p.trim()));
    path.filter(|p| p.is_file()).unwrap_or_else(|| panic!("helm package printed no package path: {out}"))
}

/// A Helm chart repository served over HTTPS with basic auth. Stopped on drop.
pub struct HelmRepo {
    base: tempfile::TempDir,
    child: Child,
    port: u16,
    user: String,
    password: String,
    tools: Tools,
}

impl HelmRepo {
    /// Start it on a free loopback port, accepting only `user`:`password`, with an empty
    /// `index.yaml`-less folder (publish a chart first).
    pub fn start(user: &str, password: &str) -> HelmRepo {
        let tools = Tools::get();
        let base = temp_dir("helm-repo");
        let (ca, cert, key) = private_ca();
        std::fs::write(base.path().join("ca.pem"), ca).expect("ca.pem");
        std::fs::write(base.path().join("cert.pem"), cert).expect("cert.pem");
        std::fs::write(base.path().join("key.pem"), key).expect("key.pem");
        std::fs::create_dir(base.path().join("served")).expect("served folder");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("git_http.py");
        let (child, port) = start_on_free_port("the Helm repository (git_http.py --dumb)", |port| {
            Command::new("python3")
                .arg(&script)
                .arg("--root")
                .arg(base.path().join("served"))
                .arg("--port")
                .arg(port.to_string())
                .arg("--log")
                .arg(base.path().join("requests.log"))
                .args(["--user", user, "--password", password, "--dumb"])
                .arg("--tls-cert")
                .arg(base.path().join("cert.pem"))
                .arg("--tls-key")
                .arg(base.path().join("key.pem"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("python3")
        });
        HelmRepo { base, child, port, user: user.into(), password: password.into(), tools }
    }

    /// The repository URL, `https://127.0.0.1:PORT` (no trailing slash; use it verbatim in
    /// `helm repo add` and in a dependency's `repository`).
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// The user it accepts.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The password it accepts.
    pub fn password(&self) -> &str {
        &self.password
    }

    /// The PEM file of the CA that signed its certificate (absolute).
    pub fn ca_file(&self) -> PathBuf {
        self.base.path().join("ca.pem")
    }

    /// The folder served (the packages and `index.yaml`).
    pub fn served(&self) -> PathBuf {
        self.base.path().join("served")
    }

    /// Package the chart in `chart_dir` into the served folder with the real `helm package` and
    /// re-index the folder (`helm repo index --url URL`): `index.yaml` lists every version
    /// published so far. Returns the package's path.
    pub fn publish(&self, chart_dir: &Path) -> PathBuf {
        let pkg = package(&self.tools, chart_dir, &self.served());
        let home = temp_dir("helm-index");
        run(self.tools.helm(home.path()).arg("repo").arg("index").arg(self.served()).arg("--url").arg(self.url()));
        pkg
    }

    /// Every request served so far, in order: `METHOD PATH QUERY STATUS` (e.g.
    /// `GET /index.yaml  200`, `GET /index.yaml  401`). Each is logged before it is answered.
    pub fn requests(&self) -> Vec<String> {
        std::fs::read_to_string(self.base.path().join("requests.log"))
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }
}

impl Drop for HelmRepo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `docker-registry` to run: the test tools' folder ([`Tools`]), else this checkout's
/// `tools/bin` (`KSYNC_TOOLS_BIN` may name another checkout's, made before the registry was
/// installed there).
fn registry_binary(tools: &Tools) -> PathBuf {
    [tools.bin.join("docker-registry"), repo_root().join("tools/bin/docker-registry")]
        .into_iter()
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "docker-registry is missing from {} and tools/bin: run scripts/install-tools, which takes it out of \
                 Debian's docker-registry package (`apt-get download docker-registry`, no root needed); without apt-get, \
                 put a CNCF distribution 2.8 `registry` binary there as docker-registry",
                tools.bin.display()
            )
        })
}

/// An htpasswd line for `user` with a bcrypt hash (`$2b$`, cost 4) of `password`, which
/// distribution's htpasswd auth accepts.
pub fn htpasswd_line(user: &str, password: &str) -> String {
    format!("{user}:{}\n", bcrypt::hash(password, 4).expect("bcrypt"))
}

/// An OCI registry (CNCF distribution) over HTTPS with basic auth (htpasswd). Killed on drop.
pub struct OciRegistry {
    base: tempfile::TempDir,
    child: Child,
    port: u16,
    user: String,
    password: String,
    tools: Tools,
}

impl OciRegistry {
    /// Start `docker-registry serve` on a free loopback port, accepting only `user`:`password`.
    /// Panics, naming `scripts/install-tools`, when the registry binary is not installed.
    pub fn start(user: &str, password: &str) -> OciRegistry {
        let tools = Tools::get();
        let registry = registry_binary(&tools);
        let base = temp_dir("oci-registry");
        let dir = base.path();
        let (ca, cert, key) = private_ca();
        std::fs::write(dir.join("ca.pem"), ca).expect("ca.pem");
        std::fs::write(dir.join("cert.pem"), cert).expect("cert.pem");
        std::fs::write(dir.join("key.pem"), key).expect("key.pem");
        std::fs::write(dir.join("htpasswd"), htpasswd_line(user, password)).expect("htpasswd");
        std::fs::create_dir(dir.join("storage")).expect("storage folder");
        let (child, port) = start_on_free_port("docker-registry", |port| {
            let config = dir.join("config.yml");
            std::fs::write(
                &config,
                format!(
                    "version: 0.1\n\
                     log:\n  level: info\n  formatter: text\n  accesslog:\n    disabled: false\n\
                     storage:\n  filesystem:\n    rootdirectory: {storage}\n  delete:\n    enabled: true\n\
                     http:\n  addr: 127.0.0.1:{port}\n  secret: kuvryn-test-secret\n  \
                     tls:\n    certificate: {cert}\n    key: {key}\n\
                     auth:\n  htpasswd:\n    realm: kuvryn-test\n    path: {htpasswd}\n",
                    storage = dir.join("storage").display(),
                    cert = dir.join("cert.pem").display(),
                    key = dir.join("key.pem").display(),
                    htpasswd = dir.join("htpasswd").display(),
                ),
            )
            .expect("config.yml");
            // The access log goes to stdout, the registry's own log to stderr: both into one file.
            let log = std::fs::File::create(dir.join("registry.log")).expect("registry log");
            let log2 = log.try_clone().expect("registry log");
            Command::new(&registry)
                .arg("serve")
                .arg(&config)
                .env_clear()
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(log2)
                .spawn()
                .unwrap_or_else(|e| panic!("{}: {e}", registry.display()))
        });
        OciRegistry { base, child, port, user: user.into(), password: password.into(), tools }
    }

    /// `127.0.0.1:PORT`, what `helm registry login` takes.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `oci://127.0.0.1:PORT/charts`, where [`OciRegistry::push`] puts charts (a dependency's
    /// `repository`).
    pub fn url(&self) -> String {
        format!("oci://{}/charts", self.host())
    }

    /// The user it accepts.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The password it accepts.
    pub fn password(&self) -> &str {
        &self.password
    }

    /// The PEM file of the CA that signed its certificate (absolute).
    pub fn ca_file(&self) -> PathBuf {
        self.base.path().join("ca.pem")
    }

    /// Package the chart in `chart_dir` and push it with the real `helm push --ca-file
    /// --username --password` (no login, scratch home). Returns `oci://127.0.0.1:PORT/charts/NAME`
    /// (pull it with `--version`).
    pub fn push(&self, chart_dir: &Path) -> String {
        let work = temp_dir("helm-push");
        let pkg = package(&self.tools, chart_dir, work.path());
        let mut push = self.tools.helm(work.path());
        push.arg("push").arg(&pkg).arg(self.url()).arg("--ca-file").arg(self.ca_file()).args([
            "--username",
            &self.user,
            "--password",
            &self.password,
        ]);
        let out = push.output().unwrap_or_else(|e| panic!("{push:?}: {e}"));
        // On stderr: "Pushed: 127.0.0.1:PORT/charts/NAME:VERSION", "Digest: sha256:..."
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{push:?} failed ({}):\n{stderr}\nregistry log:\n{}", out.status, self.log());
        let pushed =
            stderr.lines().find_map(|l| l.strip_prefix("Pushed: ")).unwrap_or_else(|| panic!("helm push: {stderr}"));
        let (name, _version) = pushed.trim().rsplit_once(':').expect("NAME:VERSION");
        format!("oci://{name}")
    }

    /// Every request answered so far, from the access log: `METHOD PATH STATUS` (e.g.
    /// `GET /v2/charts/leaf/tags/list 200`). A line is written after its response, so wait for
    /// a count with [`crate::wait_for`].
    pub fn requests(&self) -> Vec<String> {
        let log = std::fs::read_to_string(self.base.path().join("registry.log")).unwrap_or_default();
        // `127.0.0.1 - - [date] "GET /v2/ HTTP/1.1" 401 87 "" "Helm/4.1.4"`
        log.lines()
            .filter(|l| l.starts_with("127.0.0.1 - "))
            .filter_map(|l| {
                let mut parts = l.split('"');
                let request = parts.nth(1)?;
                let status = parts.next()?.split_whitespace().next()?;
                let mut words = request.split_whitespace();
                Some(format!("{} {} {status}", words.next()?, words.next()?))
            })
            .collect()
    }

    /// The registry's log (its own lines and the access log), for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.base.path().join("registry.log")).unwrap_or_default()
    }
}

impl Drop for OciRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The API group of the CRD [`ChartBuilder::with_crd`] puts into chart `name`:
/// `<name>.kuvryn.test` (kind `Widget`, version `v1`, plural `widgets`).
pub fn crd_group(name: &str) -> String {
    format!("{name}.kuvryn.test")
}

/// One entry of a chart's `dependencies`.
#[derive(Clone, Debug)]
pub struct Dependency {
    /// The dependency chart's name.
    pub name: String,
    /// A version or a range (`^1.0.0`, `~1.2`, `>=1.0.0 <2.0.0`).
    pub version: String,
    /// `https://...`, `oci://...` or `@NAME` (a repositories.yaml entry).
    pub repository: String,
    /// `alias` (renders the dependency under this name).
    pub alias: Option<String>,
}

/// A chart to write; see [`chart`].
#[must_use]
pub struct ChartBuilder {
    dir: PathBuf,
    name: String,
    version: String,
    dependencies: Vec<Dependency>,
    crd: bool,
}

/// A chart `name` at `version`, to be written to `parent/name` by [`ChartBuilder::write`]:
///
/// - `Chart.yaml` (`apiVersion: v2`, `type: application`, the dependencies added);
/// - `templates/configmap.yaml`: a ConfigMap `<release>-<name>` with `data.chart: <name>` and
///   `data.version: <version>` (so a render shows which version of each chart it holds);
/// - with [`ChartBuilder::with_crd`]: `crds/widgets.yaml`, the CRD `widgets.<group>` of
///   [`crd_group`], and `templates/widget.yaml`, a `Widget` `<release>-<name>` rendered only when
///   `.Capabilities.APIVersions.Has "<group>/v1/Widget"` (`helm template --api-versions
///   <group>/v1/Widget`, or a cluster serving the CRD).
pub fn chart(parent: &Path, name: &str, version: &str) -> ChartBuilder {
    ChartBuilder {
        dir: parent.join(name),
        name: name.into(),
        version: version.into(),
        dependencies: Vec::new(),
        crd: false,
    }
}

impl ChartBuilder {
    /// Depend on chart `name` at `version` (a version or range) from `repository`.
    pub fn dependency(mut self, name: &str, version: &str, repository: &str) -> Self {
        self.dependencies.push(Dependency {
            name: name.into(),
            version: version.into(),
            repository: repository.into(),
            alias: None,
        });
        self
    }

    /// Depend on chart `name` like [`ChartBuilder::dependency`], rendered as `alias`.
    pub fn dependency_as(mut self, alias: &str, name: &str, version: &str, repository: &str) -> Self {
        self.dependencies.push(Dependency {
            name: name.into(),
            version: version.into(),
            repository: repository.into(),
            alias: Some(alias.into()),
        });
        self
    }

    /// Add the CRD in `crds/` and the Widget guarded by `.Capabilities.APIVersions.Has`.
    pub fn with_crd(mut self) -> Self {
        self.crd = true;
        self
    }

    /// Write the chart (replacing the files it writes, keeping others); returns its folder.
    pub fn write(self) -> PathBuf {
        let (dir, name, version) = (&self.dir, &self.name, &self.version);
        std::fs::create_dir_all(dir.join("templates")).expect("chart folder");
        let mut chart_yaml = format!(
            "apiVersion: v2\nname: {name}\nversion: {version}\ntype: application\ndescription: A Kuvryn Sync test chart\n"
        );
        if !self.dependencies.is_empty() {
            chart_yaml.push_str("dependencies:\n");
            for d in &self.dependencies {
                chart_yaml.push_str(&format!(
                    "  - name: {}\n    version: {:?}\n    repository: {:?}\n",
                    d.name, d.version, d.repository
                ));
                if let Some(alias) = &d.alias {
                    chart_yaml.push_str(&format!("    alias: {alias}\n"));
                }
            }
        }
        std::fs::write(dir.join("Chart.yaml"), chart_yaml).expect("Chart.yaml");
        std::fs::write(
            dir.join("templates/configmap.yaml"),
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{{{ .Release.Name }}}}-{name}\n\
                 data:\n  chart: {name}\n  version: {{{{ .Chart.Version | quote }}}}\n"
            ),
        )
        .expect("configmap template");
        if self.crd {
            let group = crd_group(name);
            std::fs::create_dir_all(dir.join("crds")).expect("crds folder");
            std::fs::write(
                dir.join("crds/widgets.yaml"),
                format!(
                    "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n\
                     metadata:\n  name: widgets.{group}\n\
                     spec:\n  group: {group}\n  scope: Namespaced\n\
                     \x20 names:\n    kind: Widget\n    listKind: WidgetList\n    plural: widgets\n    singular: widget\n\
                     \x20 versions:\n    - name: v1\n      served: true\n      storage: true\n\
                     \x20     schema:\n        openAPIV3Schema:\n          type: object\n\
                     \x20         x-kubernetes-preserve-unknown-fields: true\n"
                ),
            )
            .expect("CRD");
            std::fs::write(
                dir.join("templates/widget.yaml"),
                format!(
                    "{{{{- if .Capabilities.APIVersions.Has \"{group}/v1/Widget\" }}}}\n\
                     apiVersion: {group}/v1\nkind: Widget\nmetadata:\n  name: {{{{ .Release.Name }}}}-{name}\n\
                     {{{{- end }}}}\n"
                ),
            )
            .expect("widget template");
        }
        self.dir
    }
}
