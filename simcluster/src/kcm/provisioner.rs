//! A dynamic volume provisioner for the default StorageClass `standard` (on with
//! `simcluster --storage-provisioner` / [`crate::Config::storage_provisioner`]), acting as an
//! external provisioner built on sig-storage-lib-external-provisioner does (kind's
//! local-path-provisioner is one):
//!
//! - at start, the StorageClass `standard` ([`storage_class`]): default class annotation,
//!   provisioner [`PROVISIONER`], `reclaimPolicy: Delete`, `volumeBindingMode: Immediate`;
//! - each pass, for every claim without a volume whose `volume.kubernetes.io/storage-provisioner`
//!   annotation (set by the binder in [`crate::kcm::pv`]) names [`PROVISIONER`] and whose class
//!   is one of ours: a Normal `Provisioning` Event, a PersistentVolume `pvc-<claim uid>` (the
//!   requested capacity, the claim's access modes and volume mode, the class's reclaim policy
//!   and mount options, a `claimRef` to the claim, annotation `pv.kubernetes.io/provisioned-by`,
//!   a `hostPath` source), then a Normal `ProvisioningSucceeded` Event. The binder binds the
//!   pre-bound volume; under `Delete` the volume goes once its claim is deleted.
//!
//! Writes use field manager `simcluster-provisioner`.

use serde_json::{Value, json};

use crate::client::{Client, path};

/// The provisioner name of the `standard` class.
pub const PROVISIONER: &str = "simcluster.kuvryn.io/hostpath";
/// The default StorageClass.
pub const CLASS: &str = "standard";
/// The field manager of the provisioner's writes.
pub const MANAGER: &str = "simcluster-provisioner";
const ANN_PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";

/// The StorageClass `standard`.
pub fn storage_class() -> Value {
    json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": CLASS, "annotations": {crate::kcm::pv::ANN_DEFAULT_CLASS: "true"}},
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
    })
}

/// The volume provisioned for a claim of `class`.
pub fn volume_for(claim: &Value, class: &Value) -> Value {
    let m = &claim["metadata"];
    let uid = m["uid"].as_str().unwrap_or_default();
    let name = format!("pvc-{uid}");
    let mut spec = json!({
        "capacity": {"storage": claim["spec"]["resources"]["requests"]["storage"]},
        "accessModes": claim["spec"]["accessModes"],
        "persistentVolumeReclaimPolicy": class["reclaimPolicy"].as_str().unwrap_or("Delete"),
        "storageClassName": class["metadata"]["name"],
        "volumeMode": claim["spec"]["volumeMode"].as_str().unwrap_or("Filesystem"),
        "claimRef": {"kind": "PersistentVolumeClaim", "namespace": m["namespace"], "name": m["name"], "uid": uid,
                     "apiVersion": "v1", "resourceVersion": m["resourceVersion"]},
        "hostPath": {"path": format!("/var/lib/simcluster/volumes/{name}"), "type": "DirectoryOrCreate"},
    });
    if class["mountOptions"].is_array() {
        spec["mountOptions"] = class["mountOptions"].clone();
    }
    json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name, "annotations": {ANN_PROVISIONED_BY: PROVISIONER}},
        "spec": spec,
    })
}

/// One pass: provision a volume for each claim waiting for this provisioner.
pub async fn reconcile(client: Client) {
    if !client.state().config.storage_provisioner {
        return;
    }
    let client = Client::new(client.state().clone(), MANAGER);
    let (claims, classes, volumes): (Vec<Value>, Vec<Value>, Vec<String>) = {
        let txn = client.state().store.lock();
        let all = |k: &str| txn.all(k).into_iter().cloned().collect::<Vec<Value>>();
        let volumes: Vec<String> = txn
            .all("/persistentvolumes")
            .iter()
            .filter_map(|v| v["metadata"]["name"].as_str())
            .map(String::from)
            .collect();
        (all("/persistentvolumeclaims"), all("storage.k8s.io/storageclasses"), volumes)
    };
    let component = format!("{PROVISIONER}_simcluster");
    for mut claim in claims {
        let m = &claim["metadata"];
        if m["deletionTimestamp"].is_string()
            || claim["spec"]["volumeName"].as_str().is_some_and(|v| !v.is_empty())
            || m["annotations"][crate::kcm::pv::ANN_STORAGE_PROVISIONER] != PROVISIONER
        {
            continue;
        }
        let Some(class) = classes
            .iter()
            .find(|c| c["metadata"]["name"] == claim["spec"]["storageClassName"] && c["provisioner"] == PROVISIONER)
        else {
            continue;
        };
        if volumes.iter().any(|v| *v == format!("pvc-{}", m["uid"].as_str().unwrap_or_default())) {
            continue;
        }
        let key = format!("{}/{}", m["namespace"].as_str().unwrap_or_default(), m["name"].as_str().unwrap_or_default());
        claim["kind"] = json!("PersistentVolumeClaim");
        claim["apiVersion"] = json!("v1");
        let msg = format!("External provisioner is provisioning volume for claim {key:?}");
        client.event(&claim, "Normal", "Provisioning", &msg, &component).await;
        let volume = volume_for(&claim, class);
        if client.create(&path("v1", "persistentvolumes", "", "", ""), &volume).await.is_ok() {
            let msg =
                format!("Successfully provisioned volume {}", volume["metadata"]["name"].as_str().unwrap_or_default());
            client.event(&claim, "Normal", "ProvisioningSucceeded", &msg, &component).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_volume_is_pre_bound_to_its_claim() {
        let claim = json!({"metadata": {"name": "data", "namespace": "ns", "uid": "u1", "resourceVersion": "7"},
                           "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                                    "storageClassName": "standard"}});
        let v = volume_for(&claim, &storage_class());
        assert_eq!(v["metadata"]["name"], "pvc-u1");
        assert_eq!(v["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"], PROVISIONER);
        assert_eq!(v["spec"]["capacity"]["storage"], "1Gi");
        assert_eq!(v["spec"]["persistentVolumeReclaimPolicy"], "Delete");
        assert_eq!(v["spec"]["claimRef"]["uid"], "u1");
        assert_eq!(v["spec"]["storageClassName"], "standard");
    }
}
