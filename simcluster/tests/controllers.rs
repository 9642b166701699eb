//! kube-controller-manager's controllers observed through a kube-rs client, with the scheduler
//! and kubelet simulation on: PodDisruptionBudget and HorizontalPodAutoscaler status, rolling
//! updates, garbage collection, EndpointSlices. Every wait polls with a deadline.

use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
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
