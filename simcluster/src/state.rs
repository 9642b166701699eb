//! Server state shared by every request and background controller.

use std::sync::Mutex;

use crate::registry::Registry;
use crate::store::Store;

/// Emulator settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Bearer token of the admin user written into the kubeconfig (requests without a token are
    /// also admin, so plain `curl` and the conformance runner work).
    pub admin_token: String,
    /// Run the scheduler and kubelet simulation (off: the control-plane controllers only).
    pub kubelet: bool,
    /// Keep objects in this file across restarts (written once a second when something
    /// changed, and on [`crate::SimCluster::stop`]).
    pub data: Option<std::path::PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Config { admin_token: "simcluster-admin-token".into(), kubelet: true, data: None }
    }
}

/// Everything a request handler needs.
pub struct State {
    /// Objects.
    pub store: Store,
    /// Served resources.
    pub registry: Registry,
    /// Settings.
    pub config: Config,
    /// Allocated Service cluster IPs and node ports (next candidates).
    pub allocations: Mutex<Allocations>,
    /// Wakes the control-plane controllers after a write.
    pub kick: tokio::sync::Notify,
    /// Fault injection and the audit log.
    pub faults: crate::faults::Faults,
    /// Key signing the ServiceAccount tokens this emulator issues.
    pub token_key: String,
    /// Models of the stored CustomResourceDefinitions, by CRD name.
    pub crds: std::sync::RwLock<std::collections::BTreeMap<String, crate::crd::CrdModel>>,
}

/// Address and port allocation state.
#[derive(Default)]
pub struct Allocations {
    /// Next cluster IP offset in 10.96.0.0/12.
    pub next_ip: u32,
    /// Next node port.
    pub next_node_port: u16,
}

impl State {
    /// Fresh state.
    pub fn new(config: Config) -> State {
        State {
            store: Store::default(),
            registry: Registry::default(),
            config,
            allocations: Mutex::new(Allocations::default()),
            kick: tokio::sync::Notify::new(),
            crds: Default::default(),
            token_key: uuid::Uuid::new_v4().to_string(),
            faults: Default::default(),
        }
    }
}
