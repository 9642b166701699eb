//! A fleet of real `ksync-controller run` replicas sharding the Applications with Leases, each
//! its own process running as its own ServiceAccount (so simcluster's audit log says which
//! replica wrote what): the cluster prepared for them ([`Fleet::prepare`]), replicas started
//! ([`Fleet::start`]), the Repository they deploy from, and who holds the shard Leases.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use kuvryn_sync::api::Repository;
use serde_json::json;

use crate::{Cluster, Tools, apply_as, eventually, install_crds, service_account_kubeconfig, temp_dir};

/// A cluster prepared for replicas: the CRDs installed and the namespace of their
/// ServiceAccounts and Leases created; their kubeconfigs live in its temporary folder.
pub struct Fleet {
    /// The cluster admin's client.
    pub client: kube::Client,
    /// The namespace of the replicas' ServiceAccounts and Leases (`--lease-namespace`).
    pub lease_namespace: String,
    dir: tempfile::TempDir,
}

/// How to run one replica ([`Fleet::start`]).
#[derive(Clone, Copy, Debug)]
pub struct Options<'a> {
    /// `--shards`.
    pub shards: u32,
    /// `--lease-duration`, e.g. `5s`.
    pub lease_duration: &'a str,
    /// More arguments for `ksync-controller run`. Without a `--metrics-bind-address` among
    /// them the replica serves no metrics.
    pub extra: &'a [&'a str],
    /// More environment variables.
    pub env: &'a [(&'a str, &'a str)],
}

/// A replica process, killed (SIGKILL) on drop.
pub struct FleetReplica {
    /// Its `--replica-id`, also the name of its ServiceAccount.
    pub name: String,
    child: Child,
    _cache: tempfile::TempDir,
}

impl Drop for FleetReplica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The binary the replicas run: `KSYNC_CONTROLLER_BIN` (another build: a release, or one of
/// another checkout), else this build's [`crate::manager::bin`].
pub fn controller_bin() -> PathBuf {
    std::env::var_os("KSYNC_CONTROLLER_BIN").map_or_else(crate::manager::bin, PathBuf::from)
}

impl Fleet {
    /// Install the CRDs and create the namespace `lease_namespace`; `prefix` names the
    /// temporary folder of the replicas' kubeconfigs. Call inside a Tokio runtime.
    pub async fn prepare(cluster: &Cluster, lease_namespace: &str, prefix: &str) -> Fleet {
        let client = cluster.client().await;
        install_crds(&client).await;
        apply_as(
            &client,
            "test",
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": lease_namespace}}),
        )
        .await;
        Fleet { client, lease_namespace: lease_namespace.to_string(), dir: temp_dir(prefix) }
    }

    /// A kubeconfig acting as the ServiceAccount `name` of the Lease namespace (cluster-admin).
    pub async fn kubeconfig(&self, cluster: &Cluster, name: &str) -> PathBuf {
        service_account_kubeconfig(cluster, &self.client, self.dir.path(), &self.lease_namespace, name).await
    }

    /// Start replica `name` with its own ServiceAccount's kubeconfig ([`Fleet::kubeconfig`]).
    pub async fn start(&self, cluster: &Cluster, name: &str, options: Options<'_>) -> FleetReplica {
        let kubeconfig = self.kubeconfig(cluster, name).await;
        self.start_as(name, &kubeconfig, options)
    }

    /// Start replica `name` with `kubeconfig` as its credentials: `ksync-controller run` with
    /// its own Git cache, the installed `helm` and `kubectl`, and `RUST_LOG` from
    /// `KSYNC_TEST_REPLICA_LOG` (default `warn`); its output goes to the test's.
    pub fn start_as(&self, name: &str, kubeconfig: &Path, options: Options<'_>) -> FleetReplica {
        let tools = Tools::get();
        let cache = temp_dir("replica-cache");
        let metrics: &[&str] =
            if options.extra.contains(&"--metrics-bind-address") { &[] } else { &["--metrics-bind-address", ""] };
        let child = Command::new(controller_bin())
            .arg("run")
            .args(metrics)
            .args(["--replica-id", name, "--lease-namespace", &self.lease_namespace])
            .args(["--shards", &options.shards.to_string(), "--lease-duration", options.lease_duration])
            .args(options.extra)
            .arg("--git-cache-dir")
            .arg(cache.path())
            .env("KUBECONFIG", kubeconfig)
            .env("KSYNC_HELM", tools.bin.join("helm"))
            .env("KSYNC_KUBECTL", tools.bin.join("kubectl"))
            .env("RUST_LOG", std::env::var("KSYNC_TEST_REPLICA_LOG").unwrap_or_else(|_| "warn".into()))
            .envs(options.env.iter().copied())
            .stdin(Stdio::null())
            .spawn()
            .expect("ksync-controller");
        FleetReplica { name: name.into(), child, _cache: cache }
    }

    /// Create the Repository `name` in `namespace` following `url`'s `main`, fetched every
    /// `interval`.
    pub async fn create_repository(&self, namespace: &str, name: &str, url: &str, interval: &str) -> Api<Repository> {
        let repos: Api<Repository> = Api::namespaced(self.client.clone(), namespace);
        let repo: Repository = serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Repository",
            "metadata": {"name": name}, "spec": {"url": url, "ref": {"branch": "main"}, "interval": interval},
        }))
        .expect("a Repository");
        repos.create(&PostParams::default(), &repo).await.expect("create the Repository");
        repos
    }

    /// The holders of the shard Leases: Lease name to holder.
    pub async fn holders(&self) -> BTreeMap<String, String> {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &self.lease_namespace);
        leases
            .list(&ListParams::default().labels("sync.kuvryn.io/lease-role=shard"))
            .await
            .expect("list the shard Leases")
            .items
            .into_iter()
            .filter_map(|l| Some((l.name_any(), l.spec?.holder_identity.filter(|h| !h.is_empty())?)))
            .collect()
    }

    /// Wait up to `deadline` until the holders of the shard Leases satisfy `check` (`what`
    /// says what that means); returns them.
    pub async fn wait_for_holders(
        &self,
        what: &str,
        deadline: Duration,
        check: impl Fn(&BTreeMap<String, String>) -> bool,
    ) -> BTreeMap<String, String> {
        eventually(what, deadline, || async {
            let h = self.holders().await;
            check(&h).then_some(h)
        })
        .await
    }
}

/// How many shards each holder holds.
pub fn shares(holders: &BTreeMap<String, String>) -> BTreeMap<&str, usize> {
    holders.values().fold(BTreeMap::new(), |mut m, h| {
        *m.entry(h.as_str()).or_default() += 1;
        m
    })
}
