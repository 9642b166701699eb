//! `simcluster nodes`: the scheduler and kubelet simulation as clients of any API server, as
//! KWOK does for real clusters. A control plane without Nodes (kube-apiserver and
//! kube-controller-manager alone, as `realkube` runs them) then gets simulated Nodes whose Pods
//! are bound, run through the same lifecycle and failure conventions as in the emulator
//! (`docs/simcluster.md`, "Scheduler and kubelet"), and report status as a kubelet does.
//!
//! # Expected flow
//!
//! - The objects the simulation reads (Pods, Nodes, ConfigMaps, Secrets, claims, StorageClasses)
//!   are mirrored from the server into a local [`State`]'s store by watches; once every mirror
//!   has its initial list, the scheduler and the kubelets start, reading the mirror and
//!   following its change stream exactly as they follow the emulator's own store.
//! - Every write (Node registration, Node Leases, bindings, Pod status, Events) goes to the
//!   server through [`crate::client::Client`], with the kubeconfig's credentials, as the field
//!   managers `default-scheduler` and `kubelet`.
//!
//! # Guarantees
//!
//! - The server's objects are mirrored as they are (their `resourceVersion`s too), so the
//!   kubelet's "older than what I wrote" checks compare the server's versions.
//! - A watch that fails is retried with back-off; a relist removes from the mirror what is gone.
//!
//! # Caveats
//!
//! The credentials need rights to create Nodes, Leases in `kube-node-lease`, bindings and
//! Events, and to write `pods/status` and `nodes/status` (an admin kubeconfig has them). The
//! simulation binds every Pod whose `schedulerName` is `default-scheduler`: on a cluster with a
//! scheduler of its own, give the simulated Nodes a taint.

use std::collections::HashSet;
use std::sync::Arc;

use futures_util::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

use crate::state::{Config, State};

/// What the scheduler and kubelet read: (storage key, group, version, kind, plural).
const MIRRORED: &[(&str, &str, &str, &str, &str)] = &[
    ("/pods", "", "v1", "Pod", "pods"),
    ("/nodes", "", "v1", "Node", "nodes"),
    ("/configmaps", "", "v1", "ConfigMap", "configmaps"),
    ("/secrets", "", "v1", "Secret", "secrets"),
    ("/persistentvolumeclaims", "", "v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
    ("storage.k8s.io/storageclasses", "storage.k8s.io", "v1", "StorageClass", "storageclasses"),
];

/// The running simulation; dropping it stops it.
pub struct Nodes {
    state: Arc<State>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Nodes {
    /// Mirror what the simulation reads from the server of `client`, then start the scheduler
    /// and the kubelets of `config.nodes` (with `config.timing`). Fails when an initial list
    /// fails (no access, server down).
    ///
    /// `publish_service_ca`: also publish the ConfigMap `openshift-service-ca.crt` in every
    /// namespace, as OpenShift's `service-ca-certificate-publisher-controller` does. A control
    /// plane built from OpenShift's Kubernetes tree (MicroShift, `realkube`) projects it into
    /// every Pod's service-account volume, so without that controller no Pod's volumes mount
    /// (a kubelet reports `FailedMount`, as the simulation does).
    pub async fn start(
        client: kube::Client,
        config: Config,
        publish_service_ca: bool,
    ) -> Result<Nodes, kube::runtime::watcher::Error> {
        let mut state = State::new(config);
        state.remote = Some(client.clone());
        let state = Arc::new(state);
        let mut tasks: Vec<tokio::task::JoinHandle<()>> = Vec::new();
        for &(key, group, version, kind, plural) in MIRRORED {
            let ar = ApiResource {
                group: group.into(),
                version: version.into(),
                api_version: if group.is_empty() { version.into() } else { format!("{group}/{version}") },
                kind: kind.into(),
                plural: plural.into(),
            };
            // The first list, here: its failure is the caller's (wrong credentials, no server).
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
            let mut stream = watcher(api, watcher::Config::default()).boxed();
            let mut seen = HashSet::new();
            loop {
                match stream.next().await {
                    Some(Ok(watcher::Event::InitDone)) => break,
                    Some(Ok(e)) => apply(&state, key, &ar, e, &mut seen),
                    Some(Err(e)) => {
                        for t in &tasks {
                            t.abort();
                        }
                        return Err(e);
                    }
                    None => break,
                }
            }
            tasks.push(tokio::spawn(mirror(state.clone(), key, ar, client.clone())));
        }
        if publish_service_ca {
            tasks.push(tokio::spawn(publish_openshift_service_ca(client.clone())));
        }
        tasks.push(tokio::spawn(crate::kcm::scheduler::run(state.clone())));
        tasks.push(tokio::spawn(crate::kcm::kubelet::run(state.clone())));
        Ok(Nodes { state, tasks })
    }

    /// The names of the simulated Nodes.
    pub fn names(&self) -> Vec<String> {
        self.state.config.nodes.iter().map(|n| n.name.clone()).collect()
    }

    /// Wait until every task has ended (they run until aborted; for the command line).
    pub async fn wait(mut self) {
        for t in std::mem::take(&mut self.tasks) {
            let _ = t.await;
        }
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Keep the mirror of one kind current (a new watch after the initial list of
/// [`Nodes::start`], relisting as the watcher decides).
async fn mirror(state: Arc<State>, key: &'static str, ar: ApiResource, client: kube::Client) {
    let api: Api<DynamicObject> = Api::all_with(client, &ar);
    let mut stream = watcher(api, watcher::Config::default()).default_backoff().boxed();
    let mut seen = HashSet::new();
    while let Some(e) = stream.next().await {
        match e {
            Ok(e) => apply(&state, key, &ar, e, &mut seen),
            Err(e) => tracing::warn!(kind = %ar.kind, error = %e, "watch failed; retrying"),
        }
    }
}

/// The ConfigMap OpenShift's service CA publisher keeps in every namespace (see
/// [`Nodes::start`]): the cluster's root CA stands in for the service CA.
async fn publish_openshift_service_ca(client: kube::Client) {
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    const NAME: &str = "openshift-service-ca.crt";
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut stream = watcher(namespaces, watcher::Config::default()).default_backoff().applied_objects().boxed();
    while let Some(ns) = stream.next().await {
        let Ok(ns) = ns else { continue };
        let (Some(name), None) = (ns.metadata.name, ns.metadata.deletion_timestamp) else { continue };
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &name);
        let ca = match Api::<ConfigMap>::namespaced(client.clone(), "kube-system").get_opt("kube-root-ca.crt").await {
            Ok(Some(cm)) => cm.data.and_then(|d| d.get("ca.crt").cloned()).unwrap_or_default(),
            _ => String::new(),
        };
        let cm = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": NAME, "annotations": {"service.beta.openshift.io/inject-cabundle": "true"}},
            "data": {"service-ca.crt": ca},
        });
        let params = kube::api::PatchParams::apply("service-ca-certificate-publisher");
        if let Err(e) = api.patch(NAME, &params, &kube::api::Patch::Apply(&cm)).await {
            tracing::debug!(namespace = %name, error = %e, "publishing {NAME}");
        }
    }
}

type Id = (String, String);

/// One watcher event into the mirror; `seen` collects a relist's objects, so its end removes the
/// others.
fn apply(state: &State, key: &str, ar: &ApiResource, event: watcher::Event<DynamicObject>, seen: &mut HashSet<Id>) {
    let value = |o: &DynamicObject| -> (Id, Value) {
        let mut v = serde_json::to_value(o).unwrap_or(Value::Null);
        v["apiVersion"] = json!(ar.api_version);
        v["kind"] = json!(ar.kind);
        let id = (o.metadata.namespace.clone().unwrap_or_default(), o.metadata.name.clone().unwrap_or_default());
        (id, v)
    };
    let mut txn = state.store.lock();
    match event {
        watcher::Event::Init => seen.clear(),
        watcher::Event::InitApply(o) | watcher::Event::Apply(o) => {
            let ((ns, name), v) = value(&o);
            let rv = txn.next_rv();
            txn.put(key, &ns, &name, v, rv);
            seen.insert((ns, name));
        }
        watcher::Event::Delete(o) => {
            let ((ns, name), v) = value(&o);
            let rv = txn.next_rv();
            txn.remove(key, &ns, &name, v, rv);
        }
        watcher::Event::InitDone => {
            let gone: Vec<(Id, Value)> = txn
                .all(key)
                .into_iter()
                .filter_map(|o| {
                    let m = &o["metadata"];
                    let id = (
                        m["namespace"].as_str().unwrap_or_default().to_string(),
                        m["name"].as_str().unwrap_or_default().to_string(),
                    );
                    (!seen.contains(&id)).then(|| (id, o.clone()))
                })
                .collect();
            for ((ns, name), last) in gone {
                let rv = txn.next_rv();
                txn.remove(key, &ns, &name, last, rv);
            }
            seen.clear();
        }
    }
}
