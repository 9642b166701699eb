//! `--data`: objects, CRDs and the resourceVersion survive a restart; kube-rs talks to it.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("state.json");
    let config = simcluster::Config { data: Some(data.clone()), kubelet: false, ..Default::default() };

    let mut sim = simcluster::SimCluster::start(config.clone(), 0).await.unwrap();
    let client = sim.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("kept".into());
    cm.data = Some([("k".to_string(), "v".to_string())].into());
    let created = cms.create(&PostParams::default(), &cm).await.unwrap();
    sim.stop();
    drop(sim);
    assert!(data.exists(), "stop writes the snapshot");

    let sim = simcluster::SimCluster::start(config, 0).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(sim.client().await.unwrap(), "default");
    let got = cms.get("kept").await.unwrap();
    assert_eq!(got.metadata.uid, created.metadata.uid);
    assert_eq!(got.metadata.resource_version, created.metadata.resource_version);
    assert_eq!(got.data, cm.data);

    let mut next = ConfigMap::default();
    next.metadata.name = Some("after".into());
    let after = cms.create(&PostParams::default(), &next).await.unwrap();
    let rv = |c: &ConfigMap| c.metadata.resource_version.as_deref().unwrap().parse::<u64>().unwrap();
    assert!(rv(&after) > rv(&created), "resourceVersions keep increasing across the restart");
}
