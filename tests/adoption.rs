//! Taking over workloads another tool deployed (Argo CD, Flux, `helm install`) restarts none of
//! their Pods (issue 46, part 6): Kuvryn Sync stamps a managed object's own metadata, never its
//! Pod template, so neither adoption with `conflictPolicy: adopt` nor an Application rename
//! (`deletionPolicy: Orphan`, then a new Application) changes what Pods are made from.
//! `docs/migrating.md` describes the takeover this checks.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use kuvryn_sync::api::application::Application;
use kuvryn_sync::api::names;
use kuvryn_sync::plan::inventory;
use serde_json::{Value, json};
use testkit::apps::{Env, WAIT};
use testkit::{Cluster, apply_as, eventually};

const NS: &str = "adopt";

/// The Deployment `name` of `replicas` as Argo CD applied it (with its tracking label) and as
/// Git declares it.
fn deployment(name: &str, replicas: u32) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": name, "namespace": NS, "labels": {"app.kubernetes.io/instance": name}},
           "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}},
                                 "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}})
}

fn web() -> Value {
    deployment("web", 2)
}

/// What a restart would change: the Deployment's template, its ReplicaSets (name → uid) and its
/// Pods (name → uid). (Not its generation: a Deployment's moves with its annotations too.)
#[derive(Debug, PartialEq)]
struct Running {
    template: Value,
    replica_sets: BTreeMap<String, String>,
    pods: BTreeMap<String, String>,
}

async fn running(client: &kube::Client, name: &str) -> Running {
    let d = Api::<Deployment>::namespaced(client.clone(), NS).get(name).await.unwrap();
    let uids = |items: Vec<(String, Option<String>)>| -> BTreeMap<String, String> {
        items.into_iter().map(|(n, u)| (n, u.unwrap_or_default())).collect()
    };
    let selected = ListParams::default().labels(&format!("app={name}"));
    let rs = Api::<ReplicaSet>::namespaced(client.clone(), NS).list(&selected).await.unwrap();
    let pods = Api::<Pod>::namespaced(client.clone(), NS).list(&selected).await.unwrap();
    Running {
        template: serde_json::to_value(&d.spec.template).unwrap(),
        replica_sets: uids(rs.items.into_iter().map(|r| (r.name_any(), r.metadata.uid)).collect()),
        pods: uids(
            pods.items
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .map(|p| (p.name_any(), p.metadata.uid))
                .collect(),
        ),
    }
}

/// The Application `app` once it is Synced and Healthy and manages the Deployment `name`, and
/// `check` holds for that Deployment.
async fn synced_and_healthy(env: &Env, app: &str, name: &str, check: impl Fn(&Deployment) -> bool) -> Application {
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), NS);
    eventually(&format!("{app} Synced and Healthy, managing the Deployment"), WAIT * 2, || async {
        let a = env.apps().get(app).await.ok()?;
        let s = a.status.as_ref()?;
        let synced = s.sync.as_ref().is_some_and(|s| format!("{:?}", s.status) == "Synced");
        let healthy = s.health.as_ref().is_some_and(|h| format!("{:?}", h.status) == "Healthy");
        let d = deployments.get(name).await.ok().filter(|d| check(d))?;
        let ours = d.annotations().get(names::annotations::APPLICATION) == Some(&format!("{NS}/{app}"));
        (synced && healthy && ours).then_some(a)
    })
    .await
}

/// Wait until the Deployment `name` has rolled out `replicas` available Pods.
async fn available(deployments: &Api<Deployment>, name: &str, replicas: i32) {
    eventually(&format!("the Deployment {name} available with {replicas} Pods"), WAIT, || async {
        let d = deployments.get(name).await.ok()?;
        let s = d.status?;
        (s.observed_generation == d.metadata.generation && s.available_replicas == Some(replicas)).then_some(())
    })
    .await;
}

/// Whether the Deployment's Pod template carries the stamp earlier versions wrote.
fn stamped(d: &Deployment) -> bool {
    let meta = d.spec.template.metadata.clone().unwrap_or_default();
    meta.labels.unwrap_or_default().contains_key(names::labels::POD_OF)
        && meta.annotations.unwrap_or_default().contains_key(names::annotations::APPLICATION)
}

fn adopting_a_workload_or_renaming_its_application_restarts_nothing(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::start(&cluster, NS).await;
        // Deployed by another tool, running its two Pods.
        apply_as(&env.client, "argocd-controller", &web()).await;
        let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), NS);
        available(&deployments, "web", 2).await;
        let before = running(&env.client, "web").await;
        assert_eq!((before.replica_sets.len(), before.pods.len()), (1, 2), "{before:#?}");

        // Taken over by an Application of the same manifest.
        let spec = json!({"source": {"repository": "platform", "path": "web"}, "serviceAccountName": "deployer",
                          "destination": {"namespace": NS}, "sync": {"conflictPolicy": "adopt"}});
        env.app_from("web", &[("web/deploy.yaml", &web().to_string())], spec.clone()).await;
        synced_and_healthy(&env, "web", "web", |_| true).await;
        assert_eq!(running(&env.client, "web").await, before, "adopting restarted nothing");
        let d = deployments.get("web").await.unwrap();
        assert!(d.labels().contains_key(names::labels::APPLICATION_ID), "adopted: {:?}", d.labels());
        let template_labels = d.spec.template.metadata.clone().unwrap_or_default().labels.unwrap_or_default();
        assert!(!template_labels.contains_key(names::labels::POD_OF), "never stamped: {template_labels:?}");

        // Renamed: the Application deleted (its resources orphaned) and created again as web-v2.
        env.apps().delete("web", &DeleteParams::default()).await.unwrap();
        eventually("the Application web to go", WAIT, || async {
            env.apps().get_opt("web").await.ok()?.is_none().then_some(())
        })
        .await;
        env.create_app("web-v2", spec).await;
        synced_and_healthy(&env, "web-v2", "web", |_| true).await;
        assert_eq!(running(&env.client, "web").await, before, "renaming the Application restarted nothing");
    });
}

/// Upgrading: a Deployment whose Pod template an earlier version stamped (`sync.kuvryn.io/pod-of`
/// and `sync.kuvryn.io/application`, owned by the `kuvryn-sync` field manager) keeps the stamp,
/// so it does not roll, neither when nothing changed nor when a change is applied (a scale).
fn a_template_stamped_by_an_earlier_version_keeps_its_stamp(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::start(&cluster, NS).await;
        let mut old = deployment("legacy", 2);
        inventory::stamp(&mut old, NS, "legacy", names::labels::DEFAULT_SHARD);
        old["spec"]["template"]["metadata"]["labels"][names::labels::POD_OF] =
            json!(inventory::application_id(NS, "legacy"));
        old["spec"]["template"]["metadata"]["annotations"] =
            json!({names::annotations::APPLICATION: format!("{NS}/legacy")});
        apply_as(&env.client, names::FIELD_MANAGER, &old).await;
        let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), NS);
        available(&deployments, "legacy", 2).await;
        let before = running(&env.client, "legacy").await;

        // This version plans the same Git manifest, which does not declare the stamp.
        let spec = json!({"source": {"repository": "platform", "path": "legacy"}, "serviceAccountName": "deployer",
                          "destination": {"namespace": NS}});
        let wt = env.app_from("legacy", &[("legacy/deploy.yaml", &deployment("legacy", 2).to_string())], spec).await;
        synced_and_healthy(&env, "legacy", "legacy", |_| true).await;
        assert!(stamped(&deployments.get("legacy").await.unwrap()), "the stamp is kept");
        assert_eq!(running(&env.client, "legacy").await, before, "upgrading restarted nothing");

        // A change applied (scaled to 3) keeps it too: the same ReplicaSet, the two Pods kept.
        wt.write("legacy/deploy.yaml", &deployment("legacy", 3).to_string());
        let commit = wt.commit_and_push("legacy: 3 replicas");
        env.refresh("platform", &commit).await;
        synced_and_healthy(&env, "legacy", "legacy", |d| d.spec.replicas == Some(3)).await;
        available(&deployments, "legacy", 3).await;
        assert!(stamped(&deployments.get("legacy").await.unwrap()), "an apply keeps the stamp");
        let after = running(&env.client, "legacy").await;
        assert_eq!((&after.template, &after.replica_sets), (&before.template, &before.replica_sets));
        assert_eq!(after.pods.len(), 3, "{after:#?}");
        for (pod, uid) in &before.pods {
            assert_eq!(after.pods.get(pod), Some(uid), "Pod {pod} kept: {after:#?}");
        }
    });
}

testkit::both!(
    adopting_a_workload_or_renaming_its_application_restarts_nothing,
    a_template_stamped_by_an_earlier_version_keeps_its_stamp,
);
