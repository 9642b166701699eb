//! The Pods of managed workloads, linked to their Application through the owner chain: a crash
//! loop or an OOM kill changes only a Pod, so Pods are watched (metadata only) and each event is
//! mapped to the Application of the Deployment, StatefulSet or DaemonSet that runs the Pod.
//!
//! Nothing is written to a workload's Pod template for this (a changed template restarts every
//! Pod): a Pod names its controller in `ownerReferences`, and the workload, found in the
//! shard's store of managed workloads ([`super::managed::Inventory`]), names its Application in
//! its `sync.kuvryn.io/application` annotation.
//!
//! | Pod's controller (`ownerReferences`, `controller: true`) | workload |
//! |---|---|
//! | `apps` StatefulSet or DaemonSet `N` | that StatefulSet or DaemonSet `N` |
//! | `apps` ReplicaSet `D-H`, the Pod labelled `pod-template-hash: H` | Deployment `D` |
//! | anything else (a Job, a bare ReplicaSet, none) | none: the event is dropped |
//!
//! The ReplicaSet step follows the Deployment controller's naming (a Deployment `D` names the
//! ReplicaSet of a template `D-<pod-template-hash>` and labels its Pods with the hash) instead
//! of watching ReplicaSets: no ReplicaSet is listed, watched or kept. A ReplicaSet a Deployment
//! adopted under another name (one of another Deployment's, renamed) is not recognised: its
//! Pods' events are dropped, and the Application is still checked on its Deployment's status
//! changes and at `--drift-resync-interval`. A ReplicaSet whose name happens to fit a managed
//! Deployment of the same namespace only triggers one more check of that Application.

use futures_util::Stream;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::{WatchStreamExt, watcher};

/// The label the Deployment controller puts on the Pods of a ReplicaSet: the template's hash,
/// which ends the ReplicaSet's name.
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";

/// A workload that runs Pods, as a Pod's owner chain names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    /// `Deployment`, `StatefulSet` or `DaemonSet` (group `apps`).
    pub kind: &'static str,
    /// Its namespace, the Pod's.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

/// The workload that runs the Pod of `meta`, from its controller owner reference (the table in
/// the module's documentation). Pure.
pub fn workload_of(meta: &ObjectMeta) -> Option<Workload> {
    let namespace = meta.namespace.clone()?;
    let owner = meta.owner_references.as_ref()?.iter().find(|o| o.controller == Some(true))?;
    if owner.api_version.split_once('/').map(|(g, _)| g) != Some("apps") {
        return None;
    }
    let (kind, name) = match owner.kind.as_str() {
        "StatefulSet" => ("StatefulSet", owner.name.clone()),
        "DaemonSet" => ("DaemonSet", owner.name.clone()),
        "ReplicaSet" => {
            let hash = meta.labels.as_ref()?.get(POD_TEMPLATE_HASH).filter(|h| !h.is_empty())?;
            let deployment = owner.name.strip_suffix(hash.as_str())?.strip_suffix('-')?;
            ("Deployment", deployment.to_string())
        }
        _ => return None,
    };
    (!name.is_empty()).then_some(Workload { kind, namespace, name })
}

/// Metadata-only watch events of every Pod in the cluster, without `managedFields`: no label
/// can select the Pods of managed workloads without writing it into their templates. Nothing
/// is kept: each event is mapped ([`workload_of`]) and dropped.
pub fn events(client: &Client) -> impl Stream<Item = Result<PartialObjectMeta<Pod>, watcher::Error>> + Send + 'static {
    // `Api<PartialObjectMeta<Pod>>` makes metadata-only requests.
    watcher(Api::<PartialObjectMeta<Pod>>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .modify(|p| p.metadata.managed_fields = None)
        .touched_objects()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn owner(api_version: &str, kind: &str, name: &str, controller: Option<bool>) -> OwnerReference {
        OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: "u".into(),
            controller,
            ..Default::default()
        }
    }

    fn pod(owners: Vec<OwnerReference>, hash: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            name: Some("p".into()),
            namespace: Some("shop".into()),
            owner_references: Some(owners),
            labels: hash.map(|h| [(POD_TEMPLATE_HASH.to_string(), h.to_string())].into()),
            ..Default::default()
        }
    }

    fn workload(kind: &'static str, name: &str) -> Option<Workload> {
        Some(Workload { kind, namespace: "shop".into(), name: name.into() })
    }

    #[test]
    fn a_pod_is_linked_to_its_workload_through_its_controller() {
        let rs = |name: &str| owner("apps/v1", "ReplicaSet", name, Some(true));
        let cases: Vec<(&str, ObjectMeta, Option<Workload>)> = vec![
            ("Deployment's", pod(vec![rs("web-7b46446")], Some("7b46446")), workload("Deployment", "web")),
            (
                "Deployment with dashes",
                pod(vec![rs("my-web-1-5c9f")], Some("5c9f")),
                workload("Deployment", "my-web-1"),
            ),
            (
                "StatefulSet's",
                pod(vec![owner("apps/v1", "StatefulSet", "db", Some(true))], None),
                workload("StatefulSet", "db"),
            ),
            (
                "DaemonSet's",
                pod(vec![owner("apps/v1", "DaemonSet", "agent", Some(true))], None),
                workload("DaemonSet", "agent"),
            ),
            (
                "the controller among owners",
                pod(vec![owner("v1", "ConfigMap", "x", None), rs("web-abc")], Some("abc")),
                workload("Deployment", "web"),
            ),
            ("ReplicaSet without the hash label", pod(vec![rs("web-7b46446")], None), None),
            ("ReplicaSet not named after the hash", pod(vec![rs("web-7b46446")], Some("99")), None),
            ("hash without a dash before it", pod(vec![rs("web7b46446")], Some("7b46446")), None),
            ("ReplicaSet named only the hash", pod(vec![rs("-abc")], Some("abc")), None),
            ("empty hash", pod(vec![rs("web-")], Some("")), None),
            ("a Job's", pod(vec![owner("batch/v1", "Job", "migrate", Some(true))], None), None),
            ("not the controller", pod(vec![owner("apps/v1", "StatefulSet", "db", Some(false))], None), None),
            ("controller unset", pod(vec![owner("apps/v1", "StatefulSet", "db", None)], None), None),
            (
                "another group's StatefulSet",
                pod(vec![owner("example.com/v1", "StatefulSet", "db", Some(true))], None),
                None,
            ),
            ("no owners", pod(vec![], None), None),
            ("a bare Pod", ObjectMeta { namespace: Some("shop".into()), ..Default::default() }, None),
        ];
        for (what, meta, want) in cases {
            assert_eq!(workload_of(&meta), want, "{what}");
        }
    }
}
