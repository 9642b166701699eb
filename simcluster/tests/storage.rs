//! The default StorageClass and its dynamic provisioner (`Config::storage_provisioner`),
//! observed through a kube-rs client.

use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

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

fn claim(name: &str, class: Option<&str>) -> PersistentVolumeClaim {
    let mut c = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
                       "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}});
    if let Some(class) = class {
        c["spec"]["storageClassName"] = json!(class);
    }
    serde_json::from_value(c).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_without_class_gets_a_provisioned_volume() {
    let config = simcluster::Config { kubelet: false, storage_provisioner: true, ..Default::default() };
    let sim = simcluster::SimCluster::start(config, 0).await.unwrap();
    let client = sim.client().await.unwrap();
    let classes: Api<StorageClass> = Api::all(client.clone());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let volumes: Api<PersistentVolume> = Api::all(client.clone());

    let standard = classes.get("standard").await.unwrap();
    let annotations = standard.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(annotations.get("storageclass.kubernetes.io/is-default-class").map(String::as_str), Some("true"));
    assert_eq!(standard.provisioner, "simcluster.kuvryn.io/hostpath");
    assert_eq!(standard.reclaim_policy.as_deref(), Some("Delete"));
    assert_eq!(standard.volume_binding_mode.as_deref(), Some("Immediate"));

    // DefaultStorageClass admission.
    let created = claims.create(&PostParams::default(), &claim("data", None)).await.unwrap();
    assert_eq!(created.spec.as_ref().unwrap().storage_class_name.as_deref(), Some("standard"));
    let uid = created.metadata.uid.clone().unwrap();
    // An empty class asks for none: left alone.
    let none = claims.create(&PostParams::default(), &claim("static", Some(""))).await.unwrap();
    assert_eq!(none.spec.unwrap().storage_class_name.as_deref(), Some(""));

    let bound = wait_for(30, "the claim Bound", || async {
        let c = claims.get("data").await.ok()?;
        (c.status.as_ref()?.phase.as_deref() == Some("Bound")).then_some(c)
    })
    .await;
    let volume_name = format!("pvc-{uid}");
    assert_eq!(bound.spec.as_ref().unwrap().volume_name.as_deref(), Some(volume_name.as_str()));
    let a = bound.metadata.annotations.clone().unwrap_or_default();
    for k in ["volume.kubernetes.io/storage-provisioner", "volume.beta.kubernetes.io/storage-provisioner"] {
        assert_eq!(a.get(k).map(String::as_str), Some("simcluster.kuvryn.io/hostpath"), "{k}");
    }
    assert_eq!(a.get("pv.kubernetes.io/bind-completed").map(String::as_str), Some("yes"));
    let capacity = &bound.status.as_ref().unwrap().capacity.as_ref().unwrap()["storage"];
    assert_eq!(capacity.0, "1Gi");

    let pv = volumes.get(&volume_name).await.unwrap();
    let spec = pv.spec.clone().unwrap();
    assert_eq!(spec.capacity.unwrap()["storage"].0, "1Gi");
    assert_eq!(spec.persistent_volume_reclaim_policy.as_deref(), Some("Delete"));
    assert_eq!(spec.storage_class_name.as_deref(), Some("standard"));
    assert_eq!(spec.claim_ref.unwrap().uid.as_deref(), Some(uid.as_str()));
    let pa = pv.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(pa.get("pv.kubernetes.io/provisioned-by").map(String::as_str), Some("simcluster.kuvryn.io/hostpath"));
    assert_eq!(pv.status.unwrap().phase.as_deref(), Some("Bound"));

    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let reasons = wait_for(30, "the provisioning Events", || async {
        let list = events.list(&ListParams::default()).await.ok()?.items;
        let reasons: Vec<String> = list
            .into_iter()
            .filter(|e| e.involved_object.uid.as_deref() == Some(uid.as_str()))
            .filter_map(|e| e.reason)
            .collect();
        reasons.contains(&"ProvisioningSucceeded".to_string()).then_some(reasons)
    })
    .await;
    for r in ["ExternalProvisioning", "Provisioning", "ProvisioningSucceeded"] {
        assert!(reasons.contains(&r.to_string()), "{r} in {reasons:?}");
    }

    // reclaimPolicy Delete: the volume goes with its claim.
    claims.delete("data", &DeleteParams::default()).await.unwrap();
    wait_for(30, "the volume deleted", || async { volumes.get_opt(&volume_name).await.ok()?.is_none().then_some(()) })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_provisioner_there_is_no_default_class() {
    let sim =
        simcluster::SimCluster::start(simcluster::Config { kubelet: false, ..Default::default() }, 0).await.unwrap();
    let client = sim.client().await.unwrap();
    let classes: Api<StorageClass> = Api::all(client.clone());
    assert!(classes.list(&ListParams::default()).await.unwrap().items.is_empty());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client, "default");
    let created = claims.create(&PostParams::default(), &claim("data", None)).await.unwrap();
    assert_eq!(created.spec.unwrap().storage_class_name, None);
}
