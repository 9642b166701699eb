//! The control plane's controllers, as kube-controller-manager runs them: each reconciles the
//! objects it owns through the API (an in-process [`Client`] acting as
//! `kube-controller-manager`), woken by every change in the store and by a periodic tick for
//! time-based conditions. They run with the scheduler and kubelet simulation on or off
//! (`simcluster --no-kubelet`), as the conformance cases that play scheduler and kubelet need.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::broadcast::error::{RecvError, TryRecvError};

use crate::client::Client;
use crate::state::State;
use crate::store::Change;

/// Every controller makes a pass over everything at least this often (unless passes are
/// costly, see [`FULL_BUSY_FACTOR`]).
const FULL_PASS: Duration = Duration::from_secs(1);

/// A burst of changes within this window makes one pass.
const COALESCE: Duration = Duration::from_millis(10);

/// A controller whose passes take long waits this many times as long before a pass after
/// changes: on a large cluster one busy controller then takes at most about a fifth of a core,
/// and the API and the others keep up. Small clusters' passes take well under a millisecond,
/// so the wait stays [`COALESCE`].
const BUSY_FACTOR: u32 = 4;

/// A controller whose full passes take long makes them at most every this many times their
/// duration: on a large cluster at rest, each controller's periodic pass then costs at most
/// about a twentieth of a core (time-based conditions are then noticed within a few seconds
/// rather than one). Small clusters' full passes stay once a second.
const FULL_BUSY_FACTOR: u32 = 20;

pub mod daemonset;
pub mod deployment;
pub mod disruption;
pub mod endpoints;
pub mod hpa;
pub mod job;
pub mod kubelet;
pub mod namespace_defaults;
pub mod node;
pub mod provisioner;
pub mod pv;
pub mod quantity;
pub mod replicaset;
pub mod scheduler;
pub mod statefulset;
pub mod taint_eviction;

/// The field manager of every controller write.
pub const MANAGER: &str = "kube-controller-manager";

type Reconcile = fn(Client) -> Pin<Box<dyn Future<Output = ()> + Send>>;

/// The controllers: name, the storage keys (`group/resource`) whose changes wake them, and the
/// reconcile pass.
fn controllers() -> Vec<(&'static str, &'static [&'static str], Reconcile)> {
    const PODS: &str = "/pods";
    vec![
        ("deployment-controller", &["apps/deployments", "apps/replicasets", PODS], |c| {
            Box::pin(deployment::reconcile(c))
        }),
        ("replicaset-controller", &["apps/replicasets", PODS], |c| Box::pin(replicaset::reconcile(c))),
        ("statefulset-controller", &["apps/statefulsets", "apps/controllerrevisions", PODS], |c| {
            Box::pin(statefulset::reconcile(c))
        }),
        ("daemonset-controller", &["apps/daemonsets", "apps/controllerrevisions", "/nodes", PODS], |c| {
            Box::pin(daemonset::reconcile(c))
        }),
        ("job-controller", &["batch/jobs", PODS], |c| Box::pin(job::reconcile(c))),
        ("endpoint-controller", &["/services", "/endpoints", "discovery.k8s.io/endpointslices", PODS], |c| {
            Box::pin(endpoints::reconcile(c))
        }),
        ("node-controller", &["/nodes", "coordination.k8s.io/leases", PODS], |c| Box::pin(node::reconcile(c))),
        ("taint-eviction-controller", &["/nodes", PODS], |c| Box::pin(taint_eviction::reconcile(c))),
        ("persistentvolume-controller", &["/persistentvolumes", "/persistentvolumeclaims"], |c| {
            Box::pin(pv::reconcile(c))
        }),
        (
            "disruption-controller",
            &[
                "policy/poddisruptionbudgets",
                "apps/deployments",
                "apps/replicasets",
                "apps/statefulsets",
                "/replicationcontrollers",
                PODS,
            ],
            |c| Box::pin(disruption::reconcile(c)),
        ),
        (
            "storage-provisioner",
            &["/persistentvolumeclaims", "/persistentvolumes", "storage.k8s.io/storageclasses"],
            |c| Box::pin(provisioner::reconcile(c)),
        ),
        ("horizontal-pod-autoscaler", &["autoscaling/horizontalpodautoscalers"], |c| Box::pin(hpa::reconcile(c))),
        ("namespace-defaults", &["/namespaces", "/serviceaccounts", "/configmaps"], |c| {
            Box::pin(namespace_defaults::reconcile(c))
        }),
    ]
}

/// The controllers whose objects relate only to objects of their own namespace (and to
/// cluster-scoped ones): a pass after changes in some namespaces only looks at those (see
/// [`Client::scoped`]).
const NAMESPACE_LOCAL: &[&str] = &[
    "deployment-controller",
    "replicaset-controller",
    "statefulset-controller",
    "daemonset-controller",
    "job-controller",
    "endpoint-controller",
];

/// What the next pass of a controller must look at: everything, or the namespaces of the
/// changes it has seen since its last pass.
#[derive(Default)]
struct Dirty {
    all: bool,
    namespaces: BTreeSet<String>,
}

impl Dirty {
    fn note(&mut self, r: &Result<Arc<Change>, RecvError>) {
        match r {
            // A cluster-scoped object may matter to any namespace.
            Ok(c) if !c.namespace.is_empty() => {
                self.namespaces.insert(c.namespace.clone());
            }
            // Missed changes (lagging): look at everything.
            _ => self.all = true,
        }
    }
}

/// Start every controller. Each runs after any change to the store (coalesced) and at least
/// once a second. With the kubelet simulation on, the scheduler and the kubelets run in loops
/// of their own ([`scheduler::run`], [`kubelet::run`]): the kubelets wake at their Pods' next
/// deadlines rather than on a tick.
///
/// A pass of a [`NAMESPACE_LOCAL`] controller after changes of namespaced objects only looks at
/// those namespaces; every controller still makes a full pass at least once a second (for
/// time-based conditions and retries), however busy the store is, unless its passes are costly
/// ([`BUSY_FACTOR`], [`FULL_BUSY_FACTOR`]).
pub fn start(state: Arc<State>) {
    if state.config.kubelet {
        tokio::spawn(scheduler::run(state.clone()));
        tokio::spawn(kubelet::run(state.clone()));
    }
    for (name, keys, reconcile) in controllers() {
        let client = Client::new(state.clone(), MANAGER);
        let mut changes = state.store.subscribe();
        let local = NAMESPACE_LOCAL.contains(&name);
        tokio::spawn(async move {
            let relevant = |r: &Result<Arc<Change>, RecvError>| match r {
                Ok(c) => keys.contains(&c.key.as_str()),
                Err(_) => true,
            };
            let mut dirty = Dirty { all: true, ..Default::default() };
            let mut last_full = Instant::now();
            // How long the last full pass took.
            let mut full_took = Duration::ZERO;
            loop {
                let full_period = FULL_PASS.max(full_took * FULL_BUSY_FACTOR);
                let full = !local || dirty.all || last_full.elapsed() >= full_period;
                let started = Instant::now();
                if full {
                    last_full = started;
                    reconcile(client.clone()).await;
                    full_took = started.elapsed();
                } else {
                    let scope = Arc::new(std::mem::take(&mut dirty.namespaces));
                    reconcile(client.scoped(Some(scope))).await;
                }
                let pass_took = started.elapsed();
                dirty = Dirty::default();
                let full_period = FULL_PASS.max(full_took * FULL_BUSY_FACTOR);
                let deadline = tokio::time::sleep(full_period.saturating_sub(last_full.elapsed()));
                tokio::pin!(deadline);
                loop {
                    tokio::select! {
                        r = changes.recv() => {
                            if matches!(r, Err(RecvError::Closed)) {
                                return;
                            }
                            if relevant(&r) {
                                dirty.note(&r);
                                // Coalesce a burst of changes into one pass (over a longer
                                // window when passes are costly, so a controller busy with a
                                // large cluster leaves time to the rest).
                                tokio::time::sleep(COALESCE.max(pass_took * BUSY_FACTOR)).await;
                                loop {
                                    match changes.try_recv() {
                                        Ok(c) => {
                                            let r = Ok(c);
                                            if relevant(&r) {
                                                dirty.note(&r);
                                            }
                                        }
                                        Err(TryRecvError::Empty) => break,
                                        Err(TryRecvError::Closed) => return,
                                        Err(TryRecvError::Lagged(_)) => dirty.all = true,
                                    }
                                }
                                break;
                            }
                        }
                        _ = &mut deadline => {
                            dirty.all = true;
                            break;
                        }
                    }
                }
            }
        });
    }
}
