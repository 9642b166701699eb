//! The kubelet simulation (on unless `simcluster --no-kubelet`): one task plays the kubelet of
//! every simulated Node of [`crate::state::Config::nodes`].
//!
//! # Expected flow
//!
//! - **Nodes**: each configured Node is registered (capacity and allocatable from the config, the
//!   standard `kubernetes.io/hostname|os|arch` labels plus the configured ones, the configured
//!   taints; admission adds `node.kubernetes.io/not-ready:NoSchedule`, which the node controller
//!   removes once the Node is Ready), its Lease in `kube-node-lease` is renewed every 10 s of
//!   clock time, and its conditions are posted when they change (and every minute).
//! - **Pods** bound to a simulated Node go through the per-container state machine of [`sim`]:
//!   image pull (`Pulling`/`Pulled`, honouring `imagePullPolicy`), `Created`/`Started`, Running,
//!   Ready after the ready delay, and the failure modes a Pod spec asks for (see
//!   `docs/simcluster.md`, "Scheduler and kubelet"). Init containers run to completion first.
//! - **Terminating Pods**: `Killing` Events for their running containers, then deletion with
//!   `gracePeriodSeconds=0`, promptly.
//!
//! # Guarantees
//!
//! - Every timestamp and delay is read from the simulation clock ([`crate::state::Clock`]);
//!   delays are [`crate::state::Timing`], overridden per Pod by `simcluster.kuvryn.io/*-ms`
//!   annotations.
//! - Work is proportional to what changes: the task follows the store's change stream (no
//!   lists), keeps a per-Pod next-action time, sleeps until the earliest one (at most 1 s), and
//!   writes a Pod's status only when it differs from what it last wrote.
//! - A Node in `node_faults.stopped` gets nothing at all (no Lease, no status, no Pod updates);
//!   a Node in `node_faults.not_ready` reports `Ready=False` (`KubeletNotReady`) and its Pods
//!   report `Ready=False`/`ContainersReady=False`, until the fault is removed.
//!
//! # Caveats
//!
//! Changes to a running Pod's spec (a new image) are not acted upon; readiness is not re-probed
//! after it passed; a container's back-off never resets.

pub mod events;
pub mod sim;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::broadcast::error::{RecvError, TryRecvError};

use crate::client::{Client, path};
use crate::state::{NodeConfig, State};
use crate::store::EventType;
use events::Recorder;
use sim::{Lookup, PodSim};

/// The field manager and Event source of the kubelet.
pub const KUBELET: &str = "kubelet";
/// Lease renewal interval (clock time).
const LEASE_RENEW_MS: i64 = 10_000;
/// Node status refresh when nothing changed (clock time).
const NODE_STATUS_MS: i64 = 60_000;
/// Longest sleep (clock advances are noticed within it).
const MAX_SLEEP_MS: i64 = 1_000;
/// How often the Nodes are looked at: registration (a deleted Node comes back), faults, Lease
/// and status.
const HEARTBEAT_CHECK_MS: i64 = 200;

/// The `Ready=False` message of a Node with the `not_ready` fault.
pub const NOT_READY_MESSAGE: &str = "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized";

type PodKey = (String, String);

/// One simulated Node.
struct SimNode {
    cfg: NodeConfig,
    /// 1-based.
    index: usize,
    ip: String,
    lease_renewed: Option<i64>,
    status_posted: Option<(i64, bool)>,
    next_ip: u32,
    images: HashSet<String>,
}

impl SimNode {
    fn host_ip(index: usize) -> String {
        format!("172.18.{}.{}", (index + 1) / 256, (index + 1) % 256)
    }

    fn object(&self, now: &str, ready: bool) -> Value {
        let name = &self.cfg.name;
        let mut labels =
            json!({"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"});
        for (k, v) in &self.cfg.labels {
            labels[k] = json!(v);
        }
        let cidr = format!("10.244.{}.0/24", self.index);
        let resources = json!({"cpu": self.cfg.cpu, "memory": self.cfg.memory, "pods": self.cfg.pods.to_string(), "ephemeral-storage": "100Gi"});
        let mut spec = json!({"podCIDR": cidr, "podCIDRs": [cidr]});
        if !self.cfg.taints.is_empty() {
            spec["taints"] = json!(self.cfg.taints);
        }
        json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels},
            "spec": spec,
            "status": {
                "capacity": resources, "allocatable": resources,
                "conditions": node_conditions(now, ready, &Value::Null),
                "addresses": [{"type": "InternalIP", "address": self.ip}, {"type": "Hostname", "address": name}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "nodeInfo": {"machineID": name, "systemUUID": name, "bootID": name, "kernelVersion": "6.12.0",
                             "osImage": "simcluster", "containerRuntimeVersion": "containerd://2.1.0",
                             "kubeletVersion": "v1.36.2", "kubeProxyVersion": "", "operatingSystem": "linux",
                             "architecture": "amd64"},
            },
        })
    }
}

/// A Node's four conditions; `old` (the stored Node) keeps unchanged transition times.
fn node_conditions(now: &str, ready: bool, old: &Value) -> Value {
    let prev = |t: &str, status: &str| {
        old["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == t && c["status"] == status)
            .and_then(|c| c["lastTransitionTime"].as_str())
            .unwrap_or(now)
            .to_string()
    };
    let c = |t: &str, status: &str, reason: &str, message: &str| {
        json!({"type": t, "status": status, "reason": reason, "message": message,
               "lastHeartbeatTime": now, "lastTransitionTime": prev(t, status)})
    };
    let ready = if ready {
        c("Ready", "True", "KubeletReady", "kubelet is posting ready status")
    } else {
        c("Ready", "False", "KubeletNotReady", NOT_READY_MESSAGE)
    };
    json!([
        c("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        c("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        c("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        ready,
    ])
}

/// One tracked Pod.
struct Tracked {
    pod: Value,
    node: usize,
    sim: PodSim,
    /// The status last written.
    written: Option<Value>,
    next: Option<i64>,
    killed: bool,
    /// Already Succeeded or Failed when first seen (e.g. after a restart of simcluster): never
    /// run again, only deleted.
    inert: bool,
}

/// Lookups straight from the store (cheap, no API round trip).
struct StoreLookup<'a>(&'a State);

impl Lookup for StoreLookup<'_> {
    fn get(&self, resource: &str, namespace: &str, name: &str) -> Option<Value> {
        self.0.store.lock().get(&format!("/{resource}"), namespace, name).cloned()
    }
}

/// The kubelets of every simulated Node.
struct Kubelet {
    state: Arc<State>,
    client: Client,
    events: Recorder,
    nodes: Vec<SimNode>,
    by_name: HashMap<String, usize>,
    pods: HashMap<PodKey, Tracked>,
    due: BTreeSet<(i64, PodKey)>,
    /// When the Nodes are next looked at (registration, Lease, status, faults).
    next_heartbeat: i64,
}

fn now_ms(state: &State) -> i64 {
    state.clock.now().as_millisecond()
}

impl Kubelet {
    fn new(state: Arc<State>) -> Kubelet {
        let client = Client::new(state.clone(), KUBELET);
        let nodes: Vec<SimNode> = state
            .config
            .nodes
            .iter()
            .enumerate()
            .map(|(i, cfg)| SimNode {
                cfg: cfg.clone(),
                index: i + 1,
                ip: SimNode::host_ip(i + 1),
                lease_renewed: None,
                status_posted: None,
                next_ip: 0,
                images: HashSet::new(),
            })
            .collect();
        let by_name = nodes.iter().enumerate().map(|(i, n)| (n.cfg.name.clone(), i)).collect();
        Kubelet {
            events: Recorder::new(client.clone(), KUBELET),
            client,
            state,
            nodes,
            by_name,
            pods: HashMap::new(),
            due: BTreeSet::new(),
            next_heartbeat: 0,
        }
    }

    fn stopped(&self, node: usize) -> bool {
        self.state.node_faults.stopped.lock().map(|s| s.contains(&self.nodes[node].cfg.name)).unwrap_or(false)
    }

    fn node_ready(&self, node: usize) -> bool {
        !self.state.node_faults.not_ready.lock().map(|s| s.contains(&self.nodes[node].cfg.name)).unwrap_or(false)
    }

    fn schedule(&mut self, key: &PodKey, at: Option<i64>) {
        let Some(t) = self.pods.get_mut(key) else { return };
        if let Some(old) = t.next.take() {
            self.due.remove(&(old, key.clone()));
        }
        if let Some(at) = at {
            t.next = Some(at);
            self.due.insert((at, key.clone()));
        }
    }

    /// Register, heartbeat and report every Node that is not stopped.
    async fn heartbeat(&mut self, now: i64) {
        if now < self.next_heartbeat {
            return;
        }
        self.next_heartbeat = now + HEARTBEAT_CHECK_MS;
        let now_s = self.state.clock.rfc3339();
        for i in 0..self.nodes.len() {
            if self.stopped(i) {
                continue;
            }
            let ready = self.node_ready(i);
            let name = self.nodes[i].cfg.name.clone();
            let stored = self.state.store.lock().get("/nodes", "", &name).cloned();
            let node = match stored {
                Some(n) => n,
                None => {
                    let obj = self.nodes[i].object(&now_s, ready);
                    match self.client.create(&path("v1", "nodes", "", "", ""), &obj).await {
                        Ok(n) => {
                            self.nodes[i].status_posted = Some((now, ready));
                            n
                        }
                        Err(_) => continue,
                    }
                }
            };
            let n = &self.nodes[i];
            let stale = n.status_posted.is_none_or(|(at, r)| r != ready || now - at >= NODE_STATUS_MS);
            if stale {
                let patch = json!({"status": {"conditions": node_conditions(&now_s, ready, &node)}});
                if self.client.merge_patch(&path("v1", "nodes", "", &name, "status"), &patch).await.is_ok() {
                    let changed = n.status_posted.is_some_and(|(_, r)| r != ready);
                    self.nodes[i].status_posted = Some((now, ready));
                    if changed {
                        // Readiness of its Pods follows the Node's.
                        let keys: Vec<PodKey> =
                            self.pods.iter().filter(|(_, t)| t.node == i).map(|(k, _)| k.clone()).collect();
                        for k in keys {
                            self.schedule(&k, Some(now));
                        }
                    }
                }
            }
            if self.nodes[i].lease_renewed.is_none_or(|at| now - at >= LEASE_RENEW_MS) {
                self.renew_lease(i, &node).await;
                self.nodes[i].lease_renewed = Some(now);
            }
        }
    }

    async fn renew_lease(&self, i: usize, node: &Value) {
        let name = &self.nodes[i].cfg.name;
        let lease_path = path("coordination.k8s.io/v1", "leases", "kube-node-lease", name, "");
        let renew = json!({"spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": self.state.clock.micro()}});
        if self.client.merge_patch(&lease_path, &renew).await.is_err() {
            let lease = json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "namespace": "kube-node-lease",
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"]["uid"]}]},
                "spec": renew["spec"],
            });
            let _ =
                self.client.create(&path("coordination.k8s.io/v1", "leases", "kube-node-lease", "", ""), &lease).await;
        }
    }

    /// Follow one stored Pod (added, changed or removed).
    fn observe(&mut self, kind: EventType, pod: &Value, now: i64) {
        let meta = &pod["metadata"];
        let key = (
            meta["namespace"].as_str().unwrap_or_default().to_string(),
            meta["name"].as_str().unwrap_or_default().to_string(),
        );
        let node = pod["spec"]["nodeName"].as_str().and_then(|n| self.by_name.get(n).copied());
        let gone = kind == EventType::Deleted
            || node.is_none()
            || self.pods.get(&key).is_some_and(|t| t.pod["metadata"]["uid"] != meta["uid"]);
        if gone {
            if let Some(t) = self.pods.get(&key) {
                let uid = t.pod["metadata"]["uid"].as_str().unwrap_or_default().to_string();
                self.schedule(&key, None);
                self.pods.remove(&key);
                self.events.forget(&uid);
            }
            if kind == EventType::Deleted {
                return;
            }
        }
        let Some(node) = node else { return };
        match self.pods.get_mut(&key) {
            Some(t) => {
                let rv = |p: &Value| p["metadata"]["resourceVersion"].as_str().and_then(|v| v.parse::<u64>().ok());
                if rv(pod) < rv(&t.pod) {
                    // An older version than the one our own write returned.
                    return;
                }
                let newly_deleting = pod["metadata"]["deletionTimestamp"].is_string()
                    && !t.pod["metadata"]["deletionTimestamp"].is_string();
                // Someone else changed the Pod's readiness (the node controller marks the Pods
                // of an unreachable Node not ready): as the kubelet's status manager, write
                // the status again, with its own view, at the next sync.
                let ready = |status: &Value| {
                    status["conditions"]
                        .as_array()
                        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
                        .map(|c| c["status"].clone())
                };
                let overwritten = t.written.as_ref().is_some_and(|w| ready(w) != ready(&pod["status"]));
                if overwritten {
                    t.written = None;
                }
                t.pod = pod.clone();
                if newly_deleting || overwritten {
                    self.schedule(&key, Some(now));
                }
            }
            None => {
                // A Pod a kubelet already reported (simcluster restarted with `--data`) keeps
                // its IP and start time.
                let ip = match pod["status"]["podIP"].as_str() {
                    Some(ip) => ip.to_string(),
                    None => {
                        let n = &mut self.nodes[node];
                        n.next_ip += 1;
                        format!("10.244.{}.{}", n.index, (n.next_ip - 1) % 250 + 2)
                    }
                };
                let mut sim = PodSim::new(pod, &self.state.config.timing, now, ip);
                if let Some(start) = pod["status"]["startTime"].as_str() {
                    sim.start_time = start.to_string();
                }
                let inert = matches!(pod["status"]["phase"].as_str(), Some("Succeeded" | "Failed"));
                let tracked = Tracked { pod: pod.clone(), node, sim, written: None, next: None, killed: false, inert };
                self.pods.insert(key.clone(), tracked);
                self.schedule(&key, Some(now));
            }
        }
    }

    /// Look at every Pod again (start, or missed changes).
    fn resync(&mut self, now: i64) {
        let pods: Vec<Value> = {
            let txn = self.state.store.lock();
            txn.all("/pods").into_iter().filter(|p| p["spec"]["nodeName"].is_string()).cloned().collect()
        };
        let present: HashSet<PodKey> = pods
            .iter()
            .map(|p| {
                (
                    p["metadata"]["namespace"].as_str().unwrap_or_default().to_string(),
                    p["metadata"]["name"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        let gone: Vec<(PodKey, Value)> =
            self.pods.iter().filter(|(k, _)| !present.contains(*k)).map(|(k, t)| (k.clone(), t.pod.clone())).collect();
        for (_, pod) in gone {
            self.observe(EventType::Deleted, &pod, now);
        }
        for pod in pods {
            self.observe(EventType::Modified, &pod, now);
        }
    }

    /// A ConfigMap, Secret or claim changed: Pods waiting for one look again now.
    fn poke_blocked(&mut self, now: i64) {
        let keys: Vec<PodKey> = self.pods.iter().filter(|(_, t)| t.sim.blocked()).map(|(k, _)| k.clone()).collect();
        for k in keys {
            if let Some(t) = self.pods.get_mut(&k) {
                t.sim.poke(now);
            }
            self.schedule(&k, Some(now));
        }
    }

    /// Act on every Pod whose time has come.
    async fn run_due(&mut self, now: i64) {
        let due: Vec<PodKey> = self.due.iter().take_while(|(at, _)| *at <= now).map(|(_, k)| k.clone()).collect();
        for key in due {
            self.sync(&key, now).await;
        }
    }

    async fn sync(&mut self, key: &PodKey, now: i64) {
        let Some(node) = self.pods.get(key).map(|t| t.node) else { return };
        if self.stopped(node) {
            let at = now + MAX_SLEEP_MS;
            self.schedule(key, Some(at));
            return;
        }
        let node_ready = self.node_ready(node);
        let host = self.nodes[node].cfg.name.clone();
        let host_ip = self.nodes[node].ip.clone();
        let (ns, name) = key.clone();
        let pod_path = path("v1", "pods", &ns, &name, "");
        let Some(t) = self.pods.get_mut(key) else { return };

        if t.pod["metadata"]["deletionTimestamp"].is_string() {
            if !t.killed {
                let pod = t.pod.clone();
                let running = t.sim.running_containers();
                t.killed = true;
                for (c, fp) in running {
                    self.events
                        .record(&pod, Some(&fp), "Normal", "Killing", &format!("Stopping container {c}"), Some(&host))
                        .await;
                }
            }
            let _ = self.client.delete(&pod_path, Some(0), None).await;
            // Retry until the deletion shows (finalizers may hold the object).
            self.schedule(key, Some(now + MAX_SLEEP_MS));
            return;
        }

        if t.inert {
            self.schedule(key, None);
            return;
        }
        let lookup = StoreLookup(&self.state);
        let images = &mut self.nodes[node].images;
        let evs = t.sim.step(now, &lookup, images);
        let host_network = t.pod["spec"]["hostNetwork"] == true;
        let status = t.sim.status(now, node_ready, &host_ip, host_network, &t.pod);
        let pod = t.pod.clone();
        let changed = t.written.as_ref() != Some(&status);
        let next = t.sim.next_deadline();
        for e in evs {
            self.events.record(&pod, e.field_path.as_deref(), e.type_, e.reason, &e.message, Some(&host)).await;
        }
        if changed {
            let patch = json!({"status": status});
            match self.client.merge_patch(&path("v1", "pods", &ns, &name, "status"), &patch).await {
                Ok(updated) => {
                    if let Some(t) = self.pods.get_mut(key) {
                        t.pod = updated;
                        t.written = Some(status);
                    }
                }
                Err(_) => {
                    self.schedule(key, Some(now + MAX_SLEEP_MS));
                    return;
                }
            }
        }
        self.schedule(key, next);
    }

    fn next_wake(&self, now: i64) -> i64 {
        let first = self.due.iter().next().map(|(at, _)| *at).unwrap_or(i64::MAX);
        first.min(self.next_heartbeat).min(now + MAX_SLEEP_MS)
    }
}

/// Run the kubelets until the store closes.
pub async fn run(state: Arc<State>) {
    let mut changes = state.store.subscribe();
    let mut k = Kubelet::new(state.clone());
    let now = now_ms(&state);
    k.heartbeat(now).await;
    k.resync(now);
    loop {
        let now = now_ms(&state);
        k.heartbeat(now).await;
        k.run_due(now).await;
        let now = now_ms(&state);
        let wait = (k.next_wake(now) - now).clamp(0, MAX_SLEEP_MS) as u64;
        let first = tokio::select! {
            r = changes.recv() => Some(r),
            _ = tokio::time::sleep(Duration::from_millis(wait)) => None,
        };
        let Some(first) = first else { continue };
        let mut batch = vec![first];
        loop {
            match changes.try_recv() {
                Ok(c) => batch.push(Ok(c)),
                Err(TryRecvError::Lagged(n)) => batch.push(Err(RecvError::Lagged(n))),
                Err(TryRecvError::Closed) => batch.push(Err(RecvError::Closed)),
                Err(TryRecvError::Empty) => break,
            }
            if batch.len() >= 10_000 {
                break;
            }
        }
        let now = now_ms(&state);
        let mut poke = false;
        let mut resync = false;
        for r in batch {
            match r {
                Ok(c) => match c.key.as_str() {
                    "/pods" => k.observe(c.kind, &c.object, now),
                    "/configmaps" | "/secrets" | "/persistentvolumeclaims" => poke = true,
                    _ => {}
                },
                Err(RecvError::Lagged(_)) => resync = true,
                Err(RecvError::Closed) => return,
            }
        }
        if resync {
            k.resync(now);
        }
        if poke {
            k.poke_blocked(now);
        }
    }
}
