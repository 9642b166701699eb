//! The control plane's controllers, as kube-controller-manager runs them: each reconciles the
//! objects it owns through the API (an in-process [`Client`] acting as
//! `kube-controller-manager`), woken by every change in the store and by a periodic tick for
//! time-based conditions. They run with the scheduler and kubelet simulation on or off
//! (`simcluster --no-kubelet`), as the conformance cases that play scheduler and kubelet need.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::client::Client;
use crate::state::State;

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

/// Start every controller. Each runs after any change to the store (coalesced) and at least
/// once a second. With the kubelet simulation on, the scheduler and the kubelets run in loops
/// of their own ([`scheduler::run`], [`kubelet::run`]): the kubelets wake at their Pods' next
/// deadlines rather than on a tick.
pub fn start(state: Arc<State>) {
    if state.config.kubelet {
        tokio::spawn(scheduler::run(state.clone()));
        tokio::spawn(kubelet::run(state.clone()));
    }
    for (_name, keys, reconcile) in controllers() {
        let client = Client::new(state.clone(), MANAGER);
        let mut changes = state.store.subscribe();
        tokio::spawn(async move {
            let relevant = |r: &Result<Arc<crate::store::Change>, tokio::sync::broadcast::error::RecvError>| match r {
                Ok(c) => keys.contains(&c.key.as_str()),
                // Missed changes (lagging): look again.
                Err(_) => true,
            };
            loop {
                reconcile(client.clone()).await;
                let deadline = tokio::time::sleep(Duration::from_secs(1));
                tokio::pin!(deadline);
                loop {
                    tokio::select! {
                        r = changes.recv() => {
                            if matches!(r, Err(tokio::sync::broadcast::error::RecvError::Closed)) {
                                return;
                            }
                            if relevant(&r) {
                                // Coalesce a burst of changes into one pass.
                                tokio::time::sleep(Duration::from_millis(10)).await;
                                while changes.try_recv().is_ok() {}
                                break;
                            }
                        }
                        _ = &mut deadline => break,
                    }
                }
            }
        });
    }
}
