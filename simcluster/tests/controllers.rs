//! kube-controller-manager's controllers observed through a kube-rs client, with the scheduler
//! and kubelet simulation on: PodDisruptionBudget and HorizontalPodAutoscaler status, rolling
//! updates, garbage collection, EndpointSlices. Every wait polls with a deadline.

use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Event, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// Poll `f` every 100 ms until it gives a value; fail after `secs` seconds.
async fn wait_for<T, F: Future<Output = Option<T>>>(secs: u64, what: &str, mut f: impl FnMut() -> F) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out after {secs} s waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn start() -> (simcluster::SimCluster, kube::Client) {
    let sim = simcluster::SimCluster::start(simcluster::Config::default(), 0).await.unwrap();
    let client = sim.client().await.unwrap();
    (sim, client)
}

fn deployment(name: &str, replicas: i32, image: &str) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "app", "image": image}]}}}
    }))
    .unwrap()
}

/// Wait until the Deployment has `n` available replicas, all updated.
async fn wait_available(api: &Api<Deployment>, name: &str, n: i64) -> Value {
    wait_for(60, &format!("{name} with {n} available replicas"), || async {
        let d = serde_json::to_value(api.get(name).await.ok()?).ok()?;
        let s = &d["status"];
        (s["availableReplicas"] == n && s["updatedReplicas"] == n && s["replicas"] == n).then_some(d)
    })
    .await
}

async fn events_of(client: &kube::Client, name: &str) -> Vec<(String, String, String)> {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let list = events.list(&ListParams::default()).await.unwrap().items;
    list.into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .map(|e| (e.type_.unwrap_or_default(), e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

fn condition<'a>(obj: &'a Value, ctype: &str) -> Option<&'a Value> {
    obj["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == ctype)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_disruption_budget_status_follows_ready_pods_and_scale() {
    let (_sim, client) = start().await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    deployments.create(&PostParams::default(), &deployment("web", 3, "registry.example.com/web:1")).await.unwrap();
    wait_available(&deployments, "web", 3).await;
    for (name, budget) in [("min-2", json!({"minAvailable": 2})), ("max-half", json!({"maxUnavailable": "50%"}))] {
        let mut spec = json!({"selector": {"matchLabels": {"app": "web"}}});
        spec.as_object_mut().unwrap().extend(budget.as_object().unwrap().clone());
        let pdb =
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name}, "spec": spec});
        pdbs.create(&PostParams::default(), &serde_json::from_value(pdb).unwrap()).await.unwrap();
    }
    let status = |name: &'static str, pdbs: Api<PodDisruptionBudget>| async move {
        let p = serde_json::to_value(pdbs.get(name).await.ok()?).ok()?;
        p["status"]["observedGeneration"].is_i64().then_some(p)
    };
    let p = wait_for(30, "min-2 status", || status("min-2", pdbs.clone())).await;
    let s = &p["status"];
    assert_eq!((s["expectedPods"].as_i64(), s["currentHealthy"].as_i64()), (Some(3), Some(3)));
    assert_eq!((s["desiredHealthy"].as_i64(), s["disruptionsAllowed"].as_i64()), (Some(2), Some(1)));
    assert_eq!(s["observedGeneration"], p["metadata"]["generation"]);
    assert!(s.get("disruptedPods").is_none(), "an empty map is omitted: {s}");
    let c = condition(&p, "DisruptionAllowed").unwrap();
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str(), c["message"].as_str()),
        (Some("True"), Some("SufficientPods"), Some(""))
    );
    // 50 % of 3 unavailable, rounded up: 2 may go.
    let p = wait_for(30, "max-half status", || status("max-half", pdbs.clone())).await;
    assert_eq!(
        (p["status"]["desiredHealthy"].as_i64(), p["status"]["disruptionsAllowed"].as_i64()),
        (Some(1), Some(2))
    );

    // Scaled down to 1: min-2 allows nothing.
    let scale = json!({"spec": {"replicas": 1}});
    deployments.patch_scale("web", &PatchParams::default(), &Patch::Merge(&scale)).await.unwrap();
    let p = wait_for(60, "min-2 insufficient", || {
        let pdbs = pdbs.clone();
        async move {
            let p = serde_json::to_value(pdbs.get("min-2").await.ok()?).ok()?;
            (p["status"]["currentHealthy"] == 1 && p["status"]["expectedPods"] == 1).then_some(p)
        }
    })
    .await;
    assert_eq!(p["status"]["disruptionsAllowed"], 0);
    let c = condition(&p, "DisruptionAllowed").unwrap();
    assert_eq!((c["status"].as_str(), c["reason"].as_str()), (Some("False"), Some("InsufficientPods")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hpa_without_metrics_keeps_the_target_in_range() {
    let (sim, client) = start().await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), "default");
    deployments.create(&PostParams::default(), &deployment("web", 1, "registry.example.com/web:1")).await.unwrap();
    let hpa = json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "web"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                 "minReplicas": 2, "maxReplicas": 4,
                 "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}]}
    });
    hpas.create(&PostParams::default(), &serde_json::from_value(hpa).unwrap()).await.unwrap();

    // Below minReplicas: scaled up through the scale subresource.
    wait_available(&deployments, "web", 2).await;
    let h = wait_for(30, "the rescale in the HPA status", || async {
        let h = serde_json::to_value(hpas.get("web").await.ok()?).ok()?;
        (h["status"]["desiredReplicas"] == 2).then_some(h)
    })
    .await;
    assert!(h["status"]["lastScaleTime"].is_string());
    let c = condition(&h, "AbleToScale").unwrap();
    assert_eq!((c["status"].as_str(), c["reason"].as_str()), (Some("True"), Some("SucceededRescale")));
    let rescaled = (
        "Normal".to_string(),
        "SuccessfulRescale".to_string(),
        "New size: 2; reason: Current number of replicas below Spec.MinReplicas".to_string(),
    );
    wait_for(30, "the SuccessfulRescale Event", || async {
        events_of(&client, "web").await.contains(&rescaled).then_some(())
    })
    .await;

    // The next sync (15 s later on the simulation's clock): in range, but no metrics.
    sim.advance_clock(Duration::from_secs(16));
    let h = wait_for(30, "ScalingActive=False", || async {
        let h = serde_json::to_value(hpas.get("web").await.ok()?).ok()?;
        condition(&h, "ScalingActive").is_some().then_some(h)
    })
    .await;
    let c = condition(&h, "ScalingActive").unwrap();
    assert_eq!((c["status"].as_str(), c["reason"].as_str()), (Some("False"), Some("FailedGetResourceMetric")));
    assert!(c["message"].as_str().unwrap().ends_with("(get pods.metrics.k8s.io)"), "{c}");
    assert_eq!(condition(&h, "AbleToScale").unwrap()["reason"], "SucceededGetScale");
    assert_eq!(h["status"]["currentReplicas"], 2);
    wait_for(30, "the metric Events", || async {
        let reasons: Vec<String> =
            events_of(&client, "web").await.into_iter().filter(|e| e.0 == "Warning").map(|e| e.1).collect();
        (reasons.contains(&"FailedGetResourceMetric".to_string())
            && reasons.contains(&"FailedComputeMetricsReplicas".to_string()))
        .then_some(())
    })
    .await;

    // Above maxReplicas: scaled down at the next sync.
    let scale = json!({"spec": {"replicas": 6}});
    deployments.patch_scale("web", &PatchParams::default(), &Patch::Merge(&scale)).await.unwrap();
    sim.advance_clock(Duration::from_secs(16));
    wait_for(60, "scaled back to 4", || async {
        let d = deployments.get("web").await.ok()?;
        (d.spec.replicas == Some(4)).then_some(())
    })
    .await;
}

fn pod_ready(p: &Pod) -> bool {
    let cs = p.status.as_ref().and_then(|s| s.conditions.as_ref());
    cs.is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Ready Pods of `app` that are not being deleted.
async fn available_pods(pods: &Api<Pod>, app: &str) -> Option<Vec<Pod>> {
    let list = pods.list(&ListParams::default().labels(&format!("app={app}"))).await.ok()?.items;
    Some(list.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none() && pod_ready(p)).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_replaces_the_replica_set_within_max_unavailable() {
    let (_sim, client) = start().await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let replicasets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    // 4 replicas, default strategy: maxUnavailable 25 % (1), maxSurge 25 % (1).
    deployments.create(&PostParams::default(), &deployment("web", 4, "registry.example.com/web:1")).await.unwrap();
    wait_available(&deployments, "web", 4).await;
    let first = replicasets.list(&ListParams::default().labels("app=web")).await.unwrap().items;
    assert_eq!(first.len(), 1);
    let old_name = first[0].metadata.name.clone().unwrap();
    let old_hash = first[0].metadata.labels.as_ref().unwrap()["pod-template-hash"].clone();

    // Watch availability during the rollout.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = tokio::spawn({
        let (pods, stop) = (pods.clone(), stop.clone());
        async move {
            let mut min = usize::MAX;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(a) = available_pods(&pods, "web").await {
                    min = min.min(a.len());
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            min
        }
    });

    let image = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "registry.example.com/web:2"}]}}}});
    deployments.patch("web", &PatchParams::default(), &Patch::Strategic(&image)).await.unwrap();
    let d = wait_for(60, "the rollout complete", || async {
        let d = serde_json::to_value(deployments.get("web").await.ok()?).ok()?;
        let s = &d["status"];
        let done = s["observedGeneration"] == d["metadata"]["generation"]
            && s["updatedReplicas"] == 4
            && s["replicas"] == 4
            && s["availableReplicas"] == 4
            && condition(&d, "Progressing").is_some_and(|c| c["reason"] == "NewReplicaSetAvailable");
        done.then_some(d)
    })
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let min_available = watcher.await.unwrap();
    assert!(min_available >= 3, "available Pods dropped to {min_available} (replicas 4, maxUnavailable 1)");
    assert_eq!(d["metadata"]["annotations"]["deployment.kubernetes.io/revision"], "2");

    let all = replicasets.list(&ListParams::default().labels("app=web")).await.unwrap().items;
    assert_eq!(all.len(), 2);
    let new = all.iter().find(|rs| rs.metadata.name.as_deref() != Some(old_name.as_str())).unwrap();
    let old = all.iter().find(|rs| rs.metadata.name.as_deref() == Some(old_name.as_str())).unwrap();
    let new_name = new.metadata.name.clone().unwrap();
    let new_hash = new.metadata.labels.as_ref().unwrap()["pod-template-hash"].clone();
    assert_ne!(new_hash, old_hash);
    assert_eq!(new_name, format!("web-{new_hash}"));
    let revision =
        |rs: &ReplicaSet| rs.metadata.annotations.as_ref().unwrap()["deployment.kubernetes.io/revision"].clone();
    assert_eq!((revision(old), revision(new)), ("1".to_string(), "2".to_string()));
    assert_eq!(old.spec.replicas, Some(0));
    assert_eq!(new.spec.replicas, Some(4));
    let running = available_pods(&pods, "web").await.unwrap();
    assert_eq!(running.len(), 4);
    assert!(running.iter().all(|p| p.metadata.labels.as_ref().unwrap()["pod-template-hash"] == new_hash));

    let scaling: Vec<String> =
        events_of(&client, "web").await.into_iter().filter(|e| e.1 == "ScalingReplicaSet").map(|e| e.2).collect();
    assert!(
        scaling.iter().any(|m| m.starts_with(&format!("Scaled up replica set {new_name} from 0 to "))),
        "{scaling:?}"
    );
    assert!(
        scaling.iter().any(|m| m.starts_with(&format!("Scaled down replica set {old_name} from 4 to "))),
        "{scaling:?}"
    );
    // The last step down is from 1 when the new Pods become available one at a time, from 2
    // when two of them do so within one pass: which depends on timing.
    assert!(
        scaling.iter().any(|m| m.starts_with(&format!("Scaled down replica set {old_name} from "))
            && m.ends_with(" to 0")
            && !m.contains(" from 4 to ")),
        "{scaling:?}"
    );
}

/// Wait until nothing of Deployment `app` is left: the Deployment, its ReplicaSets, its Pods.
async fn wait_collected(client: &kube::Client, app: &str) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let replicasets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let labels = ListParams::default().labels(&format!("app={app}"));
    wait_for(60, &format!("{app} collected"), || async {
        let gone = deployments.get_opt(app).await.ok()?.is_none()
            && replicasets.list(&labels).await.ok()?.items.is_empty()
            && pods.list(&labels).await.ok()?.items.is_empty();
        gone.then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_deployment_collects_its_replica_sets_and_pods() {
    let (_sim, client) = start().await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    for app in ["bg", "fg"] {
        deployments.create(&PostParams::default(), &deployment(app, 2, "registry.example.com/web:1")).await.unwrap();
    }
    wait_available(&deployments, "bg", 2).await;
    wait_available(&deployments, "fg", 2).await;

    // Background: the Deployment goes at once, the collector follows.
    deployments.delete("bg", &DeleteParams::background()).await.unwrap();
    assert!(deployments.get_opt("bg").await.unwrap().is_none());
    wait_collected(&client, "bg").await;

    // Foreground: the Deployment stays, with the foregroundDeletion finalizer, until its
    // dependents are gone.
    deployments.delete("fg", &DeleteParams::foreground()).await.unwrap();
    if let Some(d) = deployments.get_opt("fg").await.unwrap() {
        assert!(d.metadata.deletion_timestamp.is_some());
        assert!(d.metadata.finalizers.unwrap_or_default().contains(&"foregroundDeletion".to_string()));
    }
    wait_collected(&client, "fg").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_slice_follows_the_ready_pods() {
    let (sim, client) = start().await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    deployments.create(&PostParams::default(), &deployment("api", 2, "registry.example.com/api:1")).await.unwrap();
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "api"},
                     "spec": {"selector": {"app": "api"}, "ports": [{"port": 80, "targetPort": 8080}]}});
    services.create(&PostParams::default(), &serde_json::from_value(svc).unwrap()).await.unwrap();

    // The slice's ready addresses and the Ready Pods' IPs agree.
    let agree = |want: usize| {
        let (slices, pods) = (slices.clone(), pods.clone());
        async move {
            let mut ips: Vec<String> =
                available_pods(&pods, "api").await?.into_iter().filter_map(|p| p.status?.pod_ip).collect();
            let list = slices.list(&ListParams::default().labels("kubernetes.io/service-name=api")).await.ok()?.items;
            let mut addresses: Vec<String> = list
                .into_iter()
                .flat_map(|s| s.endpoints.unwrap_or_default())
                .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
                .flat_map(|e| e.addresses)
                .collect();
            ips.sort();
            addresses.sort();
            (ips.len() == want && ips == addresses).then_some(ips)
        }
    };
    let before = wait_for(60, "the slice with both Pods", || agree(2)).await;

    let victim = available_pods(&pods, "api").await.unwrap().remove(0);
    let victim_ip = victim.status.clone().unwrap().pod_ip.unwrap();
    sim.kill_pod("default", victim.metadata.name.as_deref().unwrap()).await.unwrap();
    let after = wait_for(60, "the slice without the killed Pod", || {
        let agree = agree(2);
        let victim_ip = victim_ip.clone();
        async move { agree.await.filter(|ips| !ips.contains(&victim_ip)) }
    })
    .await;
    assert_ne!(before, after);
}
