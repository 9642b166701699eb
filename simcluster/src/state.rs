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
    /// The simulated Nodes (with the kubelet simulation on).
    pub nodes: Vec<NodeConfig>,
    /// How long the simulated scheduler and kubelet take (defaults are short, for fast tests;
    /// the load test sets realistic ones). Pods can override them with annotations.
    pub timing: Timing,
    /// Run a dynamic provisioner for the default StorageClass `standard` (created at start):
    /// a PersistentVolumeClaim of that class gets a new PersistentVolume.
    pub storage_provisioner: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            admin_token: "simcluster-admin-token".into(),
            kubelet: true,
            data: None,
            nodes: NodeConfig::defaults(3),
            timing: Timing::default(),
            storage_provisioner: false,
        }
    }
}

/// One simulated Node.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeConfig {
    /// Node name.
    pub name: String,
    /// Allocatable CPU (a quantity: `4`, `500m`).
    pub cpu: String,
    /// Allocatable memory (a quantity: `16Gi`).
    pub memory: String,
    /// Maximum Pods.
    pub pods: u32,
    /// Labels besides the standard `kubernetes.io/hostname|os|arch`.
    pub labels: std::collections::BTreeMap<String, String>,
    /// Taints (`{"key", "value", "effect"}`), besides those the node controller manages.
    pub taints: Vec<serde_json::Value>,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            name: String::new(),
            cpu: "4".into(),
            memory: "16Gi".into(),
            pods: 110,
            labels: Default::default(),
            taints: Vec::new(),
        }
    }
}

impl NodeConfig {
    /// `n` identical Nodes `sim-node-1` .. `sim-node-n` (4 CPUs, 16 GiB, 110 Pods each).
    pub fn defaults(n: usize) -> Vec<NodeConfig> {
        (1..=n).map(|i| NodeConfig { name: format!("sim-node-{i}"), ..Default::default() }).collect()
    }
}

/// Delays of the simulated scheduler and kubelet, in milliseconds.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Timing {
    /// From creation to binding.
    pub schedule_ms: u64,
    /// Pulling an image.
    pub pull_ms: u64,
    /// From pulled to Running.
    pub start_ms: u64,
    /// From Running to Ready (when readiness passes at all).
    pub ready_ms: u64,
    /// How long a container that exits (a Job's, or a crashing one) runs.
    pub run_ms: u64,
    /// The first restart/pull back-off; it doubles up to `backoff_max_ms`.
    pub backoff_ms: u64,
    /// The longest back-off.
    pub backoff_max_ms: u64,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            schedule_ms: 0,
            pull_ms: 0,
            start_ms: 0,
            ready_ms: 0,
            run_ms: 200,
            backoff_ms: 500,
            backoff_max_ms: 5_000,
        }
    }
}

impl Timing {
    /// The timings of a real cluster: seconds to pull and start, 10 s first back-off up to
    /// 5 minutes.
    pub fn realistic() -> Timing {
        Timing {
            schedule_ms: 50,
            pull_ms: 2_000,
            start_ms: 500,
            ready_ms: 1_000,
            run_ms: 5_000,
            backoff_ms: 10_000,
            backoff_max_ms: 300_000,
        }
    }
}

/// The emulator's one clock: wall time plus an offset a test can advance, so time-based
/// behaviour (Lease expiry, back-off, progress deadlines) can be reached without waiting.
/// Every simulated controller and the kubelet read time from here.
#[derive(Debug, Default)]
pub struct Clock {
    offset_ms: std::sync::atomic::AtomicI64,
}

impl Clock {
    /// Now.
    pub fn now(&self) -> jiff::Timestamp {
        let offset = self.offset_ms.load(std::sync::atomic::Ordering::Relaxed);
        jiff::Timestamp::now() + jiff::SignedDuration::from_millis(offset)
    }

    /// Move the clock forward.
    pub fn advance(&self, by: std::time::Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.offset_ms.fetch_add(ms, std::sync::atomic::Ordering::Relaxed);
    }

    /// Now as an RFC 3339 timestamp with seconds (`metav1.Time`).
    pub fn rfc3339(&self) -> String {
        self.now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    }

    /// Now with microseconds (`metav1.MicroTime`).
    pub fn micro(&self) -> String {
        self.now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
    }
}

/// Node faults a test injects: the simulated kubelet of a stopped Node no longer heartbeats
/// (the node controller marks it `Unknown` once its Lease is 50 s old); a not-ready Node's
/// kubelet reports `Ready=False`.
#[derive(Debug, Default)]
pub struct NodeFaults {
    /// Nodes whose kubelet has stopped.
    pub stopped: Mutex<std::collections::BTreeSet<String>>,
    /// Nodes whose kubelet reports NotReady.
    pub not_ready: Mutex<std::collections::BTreeSet<String>>,
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
    /// The one clock of the simulation.
    pub clock: Clock,
    /// Injected Node faults.
    pub node_faults: NodeFaults,
    /// The API server the scheduler and kubelet simulation act on when they run as clients of
    /// another server (`simcluster nodes`, see [`crate::nodes`]): their writes go there, and the
    /// store only mirrors what they read. `None`: this emulator's own API.
    pub remote: Option<kube::Client>,
    /// Local addresses of the Services admission webhooks are reached at.
    pub webhook_services: crate::webhook::Services,
    /// The RBAC objects every request is authorized against.
    pub policy: crate::auth::PolicyCache,
    /// The cluster IPs and node ports Services hold.
    pub service_addresses: std::sync::Mutex<crate::admission::ServiceAddresses>,
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
            clock: Clock::default(),
            node_faults: NodeFaults::default(),
            remote: None,
            webhook_services: Default::default(),
            policy: Default::default(),
            service_addresses: Default::default(),
        }
    }
}
