//! The load's shape (which Applications, in which namespaces, which of them self-heal, which get
//! a Deployment, which are edited) as pure functions, and the processes it runs on: simcluster
//! and the `ksync-controller` replicas, each its own process.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::Error;
use crate::procfs::{self, Usage};

/// The Repository every namespace has, and the bare repository it points to.
pub const REPOSITORY: &str = "platform";
/// The ServiceAccount each Application deploys as (`testkit::deployer_namespace`).
pub const DEPLOYER: &str = "deployer";
/// The namespace of the replicas' ServiceAccounts and Leases.
pub const SYSTEM: &str = "kuvryn-system";
/// The Lease name prefix (the controller's default).
pub const LEASE_PREFIX: &str = "kuvryn-sync";
/// The value of the edited key as Git has it.
pub const GIT_VALUE: &str = "v1";

/// One Application of the load.
#[derive(Clone, Debug, PartialEq)]
pub struct AppDef {
    /// Its namespace (also its destination).
    pub namespace: String,
    /// Its name, also the name of its ConfigMap.
    pub name: String,
    /// `spec.sync.selfHeal`.
    pub self_heal: bool,
    /// Whether its directory also holds a one-replica Deployment.
    pub deployment: bool,
    /// Whether its directory also holds a ClusterIP Service and a Deployment (of no replicas
    /// unless `deployment`): the cold-sync shape.
    pub three: bool,
    /// `spec.sync.prune` (the chaos run).
    pub prune: bool,
}

/// What each Application's directory holds (`--objects`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Objects {
    /// A ConfigMap (every `--deployment-every`-th also a one-replica Deployment).
    #[default]
    Configmap,
    /// A ConfigMap, a ClusterIP Service and a zero-replica Deployment (one replica for every
    /// `--deployment-every`-th).
    Three,
}

impl AppDef {
    /// Its directory in the repository.
    pub fn path(&self) -> String {
        format!("apps/{}/{}", self.namespace, self.name)
    }

    /// Its shard among `shards`.
    pub fn shard(&self, shards: u32) -> u32 {
        sharding::ring::shard_of(&sharding::ring::application_key(&self.namespace, &self.name), shards)
    }

    /// The Application object.
    pub fn object(&self) -> Value {
        json!({
            "apiVersion": kuvryn_sync::api::names::API_VERSION, "kind": "Application",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "source": {"repository": REPOSITORY, "path": self.path()},
                "serviceAccountName": DEPLOYER,
                "destination": {"namespace": self.namespace},
                // A hand edit (an Update, as `kubectl edit` sends) takes the field from our
                // field manager; only `adopt` lets the repair take it back (`fail` stops the
                // repair with ApplyConflict).
                "sync": {
                    "selfHeal": self.self_heal,
                    "conflictPolicy": if self.self_heal { "adopt" } else { "fail" },
                    "prune": self.prune,
                },
            },
        })
    }

    /// Its manifests: (repository path, YAML).
    pub fn files(&self) -> Vec<(String, String)> {
        let name = &self.name;
        let mut files = vec![(
            format!("{}/configmap.yaml", self.path()),
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  {}: {GIT_VALUE}\n  app: {name}\n",
                crate::observe::EDITED_KEY
            ),
        )];
        if self.three {
            files.push((
                format!("{}/service.yaml", self.path()),
                format!(
                    "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}-web\nspec:\n  selector: {{app: {name}}}\n  ports:\n  - port: 80\n    targetPort: 8080\n"
                ),
            ));
        }
        if self.deployment || self.three {
            let replicas = u8::from(self.deployment);
            files.push((
                format!("{}/deployment.yaml", self.path()),
                format!(
                    "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}-web\nspec:\n  replicas: {replicas}\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n      containers:\n      - name: web\n        image: nginx:1.27\n"
                ),
            ));
        }
        files
    }
}

/// The namespace names: `team-00`, `team-01`, ...
pub fn namespaces(count: usize) -> Vec<String> {
    (0..count.max(1)).map(|i| format!("team-{i:02}")).collect()
}

/// `apps` Applications named `app-0000`, ... spread round-robin over `namespaces`; every other
/// one in each namespace self-heals; every `deployment_every`-th (0: none) also runs a
/// Deployment; with [`Objects::Three`] every one also has a Service and a Deployment.
pub fn plan(apps: usize, namespaces: &[String], deployment_every: usize, objects: Objects) -> Vec<AppDef> {
    (0..apps)
        .map(|i| AppDef {
            namespace: namespaces[i % namespaces.len()].clone(),
            name: format!("app-{i:04}"),
            self_heal: (i / namespaces.len()).is_multiple_of(2),
            deployment: deployment_every > 0 && i.is_multiple_of(deployment_every),
            three: objects == Objects::Three,
            prune: false,
        })
        .collect()
}

/// `count` of `items` spread evenly over them, the k-th from its stretch at offset
/// `k mod stretch` (so a pattern in `items` with the stretch's period, such as namespaces
/// taken in turn, is not sampled at one phase only).
fn spread(items: &[usize], count: usize) -> Vec<usize> {
    let count = count.min(items.len());
    if count == 0 {
        return Vec::new();
    }
    let stretch = items.len() / count;
    (0..count).map(|k| items[k * items.len() / count + k % stretch]).collect()
}

/// Which Applications to edit: `edits` of them, half self-healing and half not (alternating),
/// each half spread evenly over the fleet, so every namespace, shard and replica gets some.
pub fn edit_sample(apps: &[AppDef], edits: usize) -> Vec<usize> {
    let (heal, report): (Vec<usize>, Vec<usize>) = (0..apps.len()).partition(|i| apps[*i].self_heal);
    let heal = spread(&heal, edits.div_ceil(2));
    let report = spread(&report, edits / 2);
    let mut out = Vec::with_capacity(edits);
    for k in 0..heal.len().max(report.len()) {
        out.extend(report.get(k));
        out.extend(heal.get(k));
    }
    out
}

/// Every child process running now, so an interrupted load test can kill them.
static CHILDREN: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());

/// Note `pid` as a child to kill when the load test is interrupted.
pub fn adopt(pid: u32) {
    CHILDREN.lock().unwrap_or_else(PoisonError::into_inner).insert(pid);
}

/// SIGKILL every child still running (on SIGINT or SIGTERM, when no destructor runs).
pub fn kill_children() {
    for pid in std::mem::take(&mut *CHILDREN.lock().unwrap_or_else(PoisonError::into_inner)) {
        let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
    }
}

/// A child process of the load test, killed on drop.
pub struct Process {
    /// Its name in the report.
    pub name: String,
    /// Where its stderr goes.
    pub log: PathBuf,
    /// Where it serves `/metrics` (replicas).
    pub metrics_port: Option<u16>,
    child: Child,
}

impl Process {
    /// Start `cmd` as `name`, its stderr to `log`.
    pub fn spawn(name: &str, cmd: &mut Command, log: PathBuf) -> Result<Process, Error> {
        let file = std::fs::File::create(&log)?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .map_err(|source| Error::Start { what: name.to_string(), source })?;
        adopt(child.id());
        Ok(Process { name: name.to_string(), log, metrics_port: None, child })
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Memory and CPU now; `None` once it has exited.
    pub fn usage(&mut self) -> Option<Usage> {
        if !matches!(self.child.try_wait(), Ok(None)) {
            return None;
        }
        procfs::usage(self.pid())
    }

    /// SIGKILL it and reap it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        CHILDREN.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.child.id());
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `name` next to this executable (`target/<profile>/`), where cargo puts the workspace's
/// binaries, unless `given`.
pub fn binary(given: Option<&Path>, name: &str, build: &str) -> Result<PathBuf, Error> {
    let path = match given {
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe()?.with_file_name(name),
    };
    if path.is_file() { Ok(path) } else { Err(Error::MissingBinary { path, build: build.to_string() }) }
}

/// Start the `simcluster` binary on a free loopback port (kubelet simulation on); returns the
/// process and its admin kubeconfig.
pub fn start_simcluster(bin: &Path, dir: &Path, pods: usize) -> Result<(Process, PathBuf), Error> {
    let kubeconfig = dir.join("admin.kubeconfig");
    let mut cmd = Command::new(bin);
    let nodes = nodes_for(pods).to_string();
    cmd.args(["--port", "0", "--nodes", &nodes, "--kubeconfig-out"]).arg(&kubeconfig).env("RUST_LOG", "warn");
    let mut sim = Process::spawn("simcluster", &mut cmd, dir.join("simcluster.log"))?;
    // The kubeconfig is written once the server listens.
    let end = Instant::now() + Duration::from_secs(60);
    while !kubeconfig.is_file() {
        if !sim.running() || Instant::now() > end {
            return Err(Error::Timeout(Duration::from_secs(60), format!("simcluster (see {})", sim.log.display())));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok((sim, kubeconfig))
}

/// Pods a simulated Node holds (simcluster's default Node: 110, some kept free).
const PODS_PER_NODE: usize = 100;

/// Simulated Nodes for `pods` Pods: at least 3, and room for every Pod (with 3 default Nodes,
/// 670 of 1,000 Deployments once stayed unscheduled and their Applications never Healthy).
pub fn nodes_for(pods: usize) -> usize {
    pods.div_ceil(PODS_PER_NODE).max(3)
}

/// How to run a replica.
pub struct ReplicaOptions<'a> {
    /// The `ksync-controller` binary.
    pub bin: &'a Path,
    /// `--shards`.
    pub shards: u32,
    /// `--lease-duration`.
    pub lease_duration: Duration,
    /// `--concurrent-applications`, when set.
    pub concurrency: Option<u16>,
    /// `RUST_LOG`.
    pub log_filter: &'a str,
    /// More arguments for `run`.
    pub extra: &'a [String],
    /// The `tools/bin` folder with `helm` and `kubectl`, when installed.
    pub tools: Option<&'a Path>,
}

/// Start replica `name` as the identity of `kubeconfig`, its Git cache and log under `dir`,
/// `/metrics` on a free loopback port.
pub fn start_replica(
    options: &ReplicaOptions<'_>,
    name: &str,
    kubeconfig: &Path,
    dir: &Path,
) -> Result<Process, Error> {
    let cache = dir.join(format!("{name}-git-cache"));
    std::fs::create_dir_all(&cache)?;
    let port = testkit::free_port();
    let mut cmd = Command::new(options.bin);
    cmd.args(["run", "--replica-id", name, "--lease-namespace", SYSTEM])
        .arg("--metrics-bind-address")
        .arg(format!("127.0.0.1:{port}"))
        .args(["--lease-prefix", LEASE_PREFIX, "--shards", &options.shards.to_string()])
        .arg("--lease-duration")
        .arg(format!("{}ms", options.lease_duration.as_millis()))
        .arg("--git-cache-dir")
        .arg(&cache)
        .env("KUBECONFIG", kubeconfig)
        .env("RUST_LOG", options.log_filter);
    if let Some(n) = options.concurrency {
        cmd.args(["--concurrent-applications", &n.to_string()]);
    }
    cmd.args(options.extra);
    if let Some(tools) = options.tools {
        cmd.env("KSYNC_HELM", tools.join("helm")).env("KSYNC_KUBECTL", tools.join("kubectl"));
    }
    let mut p = Process::spawn(name, &mut cmd, dir.join(format!("{name}.log")))?;
    p.metrics_port = Some(port);
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn there_are_nodes_for_every_pod() {
        // (pods, nodes)
        for (pods, nodes) in [(0, 3), (100, 3), (300, 3), (301, 4), (1000, 10), (10_000, 100)] {
            assert_eq!(nodes_for(pods), nodes, "{pods} Pods");
        }
    }

    #[test]
    fn three_objects_are_a_configmap_a_service_and_a_deployment_of_no_replicas() {
        let apps = plan(4, &namespaces(1), 2, Objects::Three);
        let files = |i: usize| apps[i].files().into_iter().map(|(p, y)| (p.rsplit('/').next().unwrap().to_string(), y));
        let kinds: Vec<String> = files(1).map(|(p, _)| p).collect();
        assert_eq!(kinds, ["configmap.yaml", "service.yaml", "deployment.yaml"]);
        let replicas = |i: usize| files(i).find(|(p, _)| p == "deployment.yaml").unwrap().1;
        assert!(replicas(1).contains("replicas: 0"), "{}", replicas(1));
        assert!(replicas(0).contains("replicas: 1"), "every 2nd runs a Pod");
        assert_eq!(plan(4, &namespaces(1), 0, Objects::Configmap)[0].files().len(), 1);
    }

    #[test]
    fn the_plan_spreads_namespaces_self_heal_and_deployments() {
        let ns = namespaces(3);
        assert_eq!(ns, ["team-00", "team-01", "team-02"]);
        let apps = plan(10, &ns, 4, Objects::Configmap);
        assert_eq!(apps[4].namespace, "team-01");
        assert_eq!(apps[4].name, "app-0004");
        // Per namespace: self-healing, not, self-healing, ...
        let heal: Vec<usize> = (0..10).filter(|i| apps[*i].self_heal).collect();
        assert_eq!(heal, [0, 1, 2, 6, 7, 8]);
        assert_eq!(
            apps.iter().filter(|a| a.deployment).map(|a| a.name.as_str()).collect::<Vec<_>>(),
            ["app-0000", "app-0004", "app-0008"]
        );
        assert_eq!(apps[4].path(), "apps/team-01/app-0004");
        assert_eq!(apps[4].files().len(), 2);
        assert_eq!(apps[1].files().len(), 1);
        let cm: Value = kuvryn_sync::yaml::from_str(&apps[1].files()[0].1).unwrap();
        assert_eq!(cm["data"]["value"], GIT_VALUE);
        assert_eq!(apps[1].object()["spec"]["sync"]["selfHeal"], true);
        assert_eq!(apps[1].object()["spec"]["sync"]["conflictPolicy"], "adopt");
        assert_eq!(apps[3].object()["spec"]["sync"]["selfHeal"], false);
    }

    #[test]
    fn the_edit_sample_is_half_self_healing_and_spread() {
        let apps = plan(1000, &namespaces(10), 10, Objects::Configmap);
        let sample = edit_sample(&apps, 200);
        assert_eq!(sample.len(), 200);
        assert_eq!(sample.iter().filter(|i| apps[**i].self_heal).count(), 100);
        let distinct: std::collections::BTreeSet<_> = sample.iter().collect();
        assert_eq!(distinct.len(), 200);
        // Alternating, and spread over the whole fleet and every namespace.
        assert!(!apps[sample[0]].self_heal && apps[sample[1]].self_heal);
        assert!(sample.iter().any(|i| *i > 900) && sample.iter().any(|i| *i < 100));
        let spaces: std::collections::BTreeSet<_> = sample.iter().map(|i| &apps[*i].namespace).collect();
        assert_eq!(spaces.len(), 10);
        // Odd counts and more edits than Applications.
        assert_eq!(edit_sample(&apps, 5).len(), 5);
        assert_eq!(edit_sample(&plan(4, &namespaces(1), 0, Objects::Configmap), 10).len(), 4);
    }
}
