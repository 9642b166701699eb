//! simcluster: an in-process Kubernetes API server emulator over HTTP, for Kuvryn Sync's tests,
//! local quickstart and load test. Its fidelity is measured by `conformance/` (exchanges
//! recorded from a real kube-apiserver v1.36.2), which it must reproduce.
#![forbid(unsafe_code)]

pub mod admission;
pub mod api;
pub mod auth;
pub mod client;
pub mod control;
pub mod controllers;
pub mod crd;
pub mod discovery;
pub mod errors;
pub mod faults;
pub mod fieldmanager;
pub mod flowcontrol;
pub mod http;
pub mod kcm;
pub mod negotiate;
pub mod nodes;
pub mod protobuf;
pub mod rbac;
pub mod realkube;
pub mod registry;
pub mod schema;
pub mod selectors;
pub mod server;
pub mod snapshot;
pub mod state;
pub mod store;
pub mod tables;
pub mod typecheck;
pub mod validation;
pub mod watch;
pub mod webhook;

use std::net::SocketAddr;
use std::sync::Arc;

pub use state::Config;

/// A running emulator.
pub struct SimCluster {
    addr: SocketAddr,
    state: Arc<state::State>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl SimCluster {
    /// Start serving on `127.0.0.1:port` (0: any free port).
    pub async fn start(config: Config, port: u16) -> std::io::Result<SimCluster> {
        let state = Arc::new(state::State::new(config));
        match &state.config.data {
            Some(path) if path.exists() => snapshot::load(&state, path)?,
            _ => bootstrap(&state),
        }
        if state.config.storage_provisioner {
            ensure_storage_class(&state);
        }
        if let Some(path) = state.config.data.clone() {
            snapshot::start(state.clone(), path);
        }
        controllers::start(state.clone());
        kcm::start(state.clone());
        faults::start_killer(&state);
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        let addr = listener.local_addr()?;
        let app_state = state.clone();
        let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
            let s = app_state.clone();
            async move { server::handle(s, req).await }
        });
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = rx.await;
                })
                .await;
        });
        Ok(SimCluster { addr, state, shutdown: Some(tx) })
    }

    /// Make requests matching `rule` fail, slow down or reset (see [`faults`]).
    pub fn add_fault(&self, rule: faults::FaultRule) {
        self.state.faults.add(rule);
    }

    /// Reach the admission webhooks whose `clientConfig.service` is Service `namespace/name`,
    /// port `port`, at `addr` (a Service of simcluster has no endpoints to route to). Their
    /// certificates must be valid for `<name>.<namespace>.svc`, as in a real cluster.
    pub fn set_webhook_service(&self, namespace: &str, name: &str, port: u16, addr: SocketAddr) {
        self.state.webhook_services.set(namespace, name, port, addr);
    }

    /// How many more times the fault rules with `times` fire.
    pub fn fault_times_left(&self) -> u32 {
        self.state.faults.times_left()
    }

    /// Remove every fault rule.
    pub fn clear_faults(&self) {
        self.state.faults.clear();
    }

    /// End open watches: all, or those of `group/resource` (core: `/pods`).
    pub fn drop_watches(&self, resource: Option<&str>) {
        self.state.faults.drop_watches(resource.map(String::from));
    }

    /// Forget watch history, so older resourceVersions get 410 Expired.
    pub fn compact(&self) {
        self.state.store.lock().compact();
    }

    /// Hang every request until [`SimCluster::resume`].
    pub fn pause(&self) {
        self.state.faults.set_paused(true);
    }

    /// Serve again after [`SimCluster::pause`].
    pub fn resume(&self) {
        self.state.faults.set_paused(false);
    }

    /// Kill a Pod as if its Node lost it: deleted at once (`gracePeriodSeconds: 0`) after a
    /// Warning `Killing` Event, so its owner replaces it (see [`faults::kill_pod`]). Returns the
    /// API's answer to the deletion.
    pub async fn kill_pod(&self, namespace: &str, name: &str) -> Result<serde_json::Value, errors::ApiError> {
        faults::kill_pod(&self.state, namespace, name).await
    }

    /// Stop a Node's simulated kubelet: it no longer renews its Lease nor updates anything, so
    /// the node controller marks the Node `Unknown` once the Lease is 50 s old (by the
    /// simulation's clock, see [`SimCluster::advance_clock`]).
    pub fn stop_node(&self, name: &str) {
        faults::set_node_stopped(&self.state, name, true);
    }

    /// Start a stopped Node's kubelet again (it renews its Lease and reports Ready).
    pub fn start_node(&self, name: &str) {
        faults::set_node_stopped(&self.state, name, false);
    }

    /// Make a Node's simulated kubelet report `Ready=False` (`false`) or `Ready=True` (`true`).
    pub fn set_node_ready(&self, name: &str, ready: bool) {
        faults::set_node_ready(&self.state, name, ready);
    }

    /// Move the simulation's clock forward (Lease expiry, back-off, deadlines).
    pub fn advance_clock(&self, by: std::time::Duration) {
        self.state.clock.advance(by);
    }

    /// The simulation's clock.
    pub fn now(&self) -> jiff::Timestamp {
        self.state.clock.now()
    }

    /// Every write so far, oldest first.
    pub fn audit_log(&self) -> Vec<faults::AuditEvent> {
        self.state.faults.audit_log()
    }

    /// Every resource request so far (reads too), counted by client, verb and resource.
    pub fn request_counts(&self) -> Vec<faults::RequestCount> {
        self.state.faults.request_counts()
    }

    /// The base URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A kubeconfig for the admin user.
    pub fn kubeconfig(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: simcluster\n  cluster:\n    server: {}\nusers:\n- name: admin\n  user:\n    token: {}\ncontexts:\n- name: simcluster\n  context:\n    cluster: simcluster\n    user: admin\n    namespace: default\ncurrent-context: simcluster\n",
            self.url(),
            self.state.config.admin_token
        )
    }

    /// A kube-rs client for the admin user.
    pub async fn client(&self) -> Result<kube::Client, kube::Error> {
        let mut config = kube::Config::new(self.url().parse().expect("url"));
        config.auth_info.token = Some(self.state.config.admin_token.clone().into());
        kube::Client::try_from(config)
    }

    /// Stop serving (and write the snapshot, with `Config::data`).
    pub fn stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            faults::stop_killer(&self.state);
            kcm::node::forget(&self.state.token_key);
            kcm::hpa::forget(&self.state.token_key);
            kcm::disruption::forget(&self.state.token_key);
            let _ = tx.send(());
            if let Some(path) = &self.state.config.data
                && let Err(e) = snapshot::save(&self.state, path)
            {
                tracing::error!("simcluster: writing {}: {e}", path.display());
            }
        }
    }
}

impl Drop for SimCluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The objects a fresh cluster has: the standard namespaces.
fn bootstrap(state: &Arc<state::State>) {
    let mut txn = state.store.lock();
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let rv = txn.next_rv();
        let obj = serde_json::json!({
            "kind": "Namespace", "apiVersion": "v1",
            "metadata": {"name": ns, "uid": api::new_uid(), "resourceVersion": rv.to_string(),
                         "creationTimestamp": state.clock.rfc3339(), "labels": {"kubernetes.io/metadata.name": ns}},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"}
        });
        txn.put("/namespaces", "", ns, obj, rv);
    }
    for obj in rbac::bootstrap_objects() {
        let (Some(av), Some(kind)) = (obj["apiVersion"].as_str(), obj["kind"].as_str()) else { continue };
        let Some(rt) = state.registry.find_kind(av, kind) else { continue };
        let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let ns = obj["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
        let rv = txn.next_rv();
        let mut obj = obj.clone();
        obj["metadata"]["uid"] = serde_json::json!(api::new_uid());
        obj["metadata"]["resourceVersion"] = serde_json::json!(rv.to_string());
        obj["metadata"]["creationTimestamp"] = serde_json::json!(state.clock.rfc3339());
        txn.put(&rt.key(), &ns, &name, obj, rv);
    }
    txn.compact();
}

/// The default StorageClass of the storage provisioner, unless it exists.
fn ensure_storage_class(state: &Arc<state::State>) {
    let class = kcm::provisioner::storage_class();
    let Some(rt) = state.registry.find_kind("storage.k8s.io/v1", "StorageClass") else { return };
    let mut txn = state.store.lock();
    if txn.get(&rt.key(), "", kcm::provisioner::CLASS).is_some() {
        return;
    }
    let rv = txn.next_rv();
    let mut obj = class;
    obj["metadata"]["uid"] = serde_json::json!(api::new_uid());
    obj["metadata"]["resourceVersion"] = serde_json::json!(rv.to_string());
    obj["metadata"]["creationTimestamp"] = serde_json::json!(state.clock.rfc3339());
    txn.put(&rt.key(), "", kcm::provisioner::CLASS, obj, rv);
}
