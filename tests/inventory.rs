//! Where a rollout finds the objects an Application manages (`decisions::inventory`): from the
//! shard's watch cache once its service account has listed the kind itself lately, otherwise by
//! a list as that account; and never from a cache that has not shown what this replica has just
//! applied.

use std::time::Duration;

use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kuvryn_sync::api::application::Application;
use kuvryn_sync::api::conditions;
use kuvryn_sync::api::names;
use kuvryn_sync::api::revision::RevisionPhase;
use serde_json::json;
use testkit::apps::{Env, WAIT};
use testkit::{Cluster, apply_as, eventually};

fn configmap(name: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  k: v\n")
}

fn ready(app: &Application) -> Option<(String, String, String)> {
    let c = conditions::get(&app.status.as_ref()?.conditions, names::conditions::READY)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

async fn until_ready(env: &Env, app: &str) {
    eventually(&format!("{app} Ready"), WAIT, || async {
        let a = env.apps().get(app).await.ok()?;
        (ready(&a)?.0 == "True").then_some(())
    })
    .await;
}

/// A Role `name` in `ns` with `verbs` on ConfigMaps only, bound to the service account `name`.
async fn configmaps_only(env: &Env, name: &str, verbs: &[&str]) {
    let ns = env.ns.as_str();
    apply_as(
        &env.client,
        "test",
        &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": ns}}),
    )
    .await;
    apply_as(
        &env.client,
        "test",
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name, "namespace": ns},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": verbs}]}),
    )
    .await;
    apply_as(
        &env.client,
        "test",
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": name, "namespace": ns},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]}),
    )
    .await;
}

/// Whether the API server lets service account `sa` of `ns` list ConfigMaps there.
async fn may_list_configmaps(env: &Env, sa: &str) -> bool {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(format!("system:serviceaccount:{}:{sa}", env.ns)),
            groups: Some(vec!["system:serviceaccounts".into(), format!("system:serviceaccounts:{}", env.ns)]),
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(env.ns.clone()),
                verb: Some("list".into()),
                resource: Some("configmaps".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = Api::<SubjectAccessReview>::all(env.client.clone()).create(&PostParams::default(), &review).await;
    answer.expect("a SubjectAccessReview").status.is_some_and(|s| s.allowed)
}

fn app_spec(path: &str, sa: &str, ns: &str) -> serde_json::Value {
    json!({"source": {"repository": "platform", "path": path}, "serviceAccountName": sa,
           "destination": {"namespace": ns}, "sync": {"prune": true}})
}

/// A service account that never listed a kind has its managed objects listed, as it: one that
/// may not list them gets `ApplyFailure` even though the controller's cache has them (the
/// guard). One that listed them lately has the next Application's taken from the cache: shown
/// here by taking its list permission away and seeing the next rollout go through, which it
/// could not if it listed (the 5-minute trust documented in docs/sharding.md).
fn a_rollout_lists_as_its_service_account_until_that_account_has_listed_the_kind(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let ns = "inventory";
        let env = Env::start(&cluster, ns).await;
        configmaps_only(&env, "blind", &["get", "create", "patch", "update", "delete"]).await;
        let wt = env.repository("platform").await;
        wt.write("first/cm.yaml", &configmap("first"))
            .write("second/cm.yaml", &configmap("second"))
            .write("blind/cm.yaml", &configmap("blind"));
        let commit = wt.commit_and_push("three Applications");
        env.refresh("platform", &commit).await;

        env.create_app("first", app_spec("first", "deployer", ns)).await;
        until_ready(&env, "first").await;

        // Never listed, and may not: refused, though the cache holds the namespace's objects.
        env.create_app("blind", app_spec("blind", "blind", ns)).await;
        let (_, _, message) = eventually("blind refused", WAIT, || async {
            let r = ready(&env.apps().get("blind").await.ok()?)?;
            (r.0 == "False" && r.1 == names::reasons::APPLY_FAILURE).then_some(r)
        })
        .await;
        assert!(message.contains("listing ConfigMap managed objects"), "{message}");
        let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), ns);
        assert!(cms.get_opt("blind").await.unwrap().is_none(), "nothing applied after a refused list");

        // deployer listed ConfigMaps for `first` a moment ago: take that away, and the next
        // rollout of the same account still goes through, its inventory from the cache.
        configmaps_only(&env, "deployer", &["get", "create", "patch", "update", "delete"]).await;
        eventually("deployer's list taken away", WAIT, || async {
            (!may_list_configmaps(&env, "deployer").await).then_some(())
        })
        .await;
        env.create_app("second", app_spec("second", "deployer", ns)).await;
        until_ready(&env, "second").await;
        assert!(cms.get_opt("second").await.unwrap().is_some());
    });
}

/// An attempt prunes an object this replica applied a moment before, though the shard's watch
/// has not shown it yet: simcluster holds every new watch of ConfigMaps for two minutes after the
/// open ones are dropped, so the cache does not see `b` come. Without the check that the cache
/// shows this replica's own writes, the third commit's rollout takes its inventory from the
/// cache, does not find `b`, and leaves it. simcluster only: a real server cannot be made to
/// hold a watch.
fn an_object_applied_before_the_watch_shows_it_is_still_pruned(cluster: Cluster) {
    let sim = cluster.sim().expect("simcluster");
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let ns = "inventory-lag";
        let env = Env::start(&cluster, ns).await;
        let wt = env.repository("platform").await;
        wt.write("web/a.yaml", &configmap("a"));
        let first = wt.commit_and_push("web: a");
        env.refresh("platform", &first).await;
        env.create_app("web", app_spec("web", "deployer", ns)).await;
        until_ready(&env, "web").await;

        sim.add_fault(simcluster::faults::FaultRule {
            verb: Some("watch".into()),
            resource: Some("configmaps".into()),
            action: Some(simcluster::faults::FaultAction::Latency { millis: 120_000 }),
            ..Default::default()
        });
        let held = std::time::Instant::now();
        sim.drop_watches(Some("/configmaps"));
        let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), ns);
        wt.write("web/b.yaml", &configmap("b"));
        let second = wt.commit_and_push("web: a and b");
        env.refresh("platform", &second).await;
        healthy_at(&env, &second).await;
        assert!(cms.get_opt("b").await.unwrap().is_some(), "b applied");

        std::fs::remove_file(wt.path().join("web/b.yaml")).unwrap();
        let third = wt.commit_and_push("web: a only");
        env.refresh("platform", &third).await;
        healthy_at(&env, &third).await;
        assert!(cms.get_opt("b").await.unwrap().is_none(), "b pruned by the rollout that removed it");
        assert!(held.elapsed() < Duration::from_secs(110), "the watch was still held: the cache never showed b");
        sim.clear_faults();
    });
}

async fn healthy_at(env: &Env, commit: &str) {
    env.revision_where("web", &format!("the Revision of {commit} Healthy"), |r| {
        r.spec.source.commit == commit && r.status.as_ref().is_some_and(|s| s.phase == RevisionPhase::Healthy)
    })
    .await;
}

testkit::both!(a_rollout_lists_as_its_service_account_until_that_account_has_listed_the_kind);

mod an_object_applied_before_the_watch_shows_it_is_still_pruned {
    #[test]
    fn simcluster() {
        super::an_object_applied_before_the_watch_shows_it_is_still_pruned(testkit::Cluster::start());
    }
}
