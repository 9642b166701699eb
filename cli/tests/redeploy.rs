//! `ksync redeploy` end to end: the real `ksync` binary against the cluster (simcluster, and a
//! real control plane as `::realkube`), a real `git daemon`, and the Repository and Application
//! controllers in-process. A redeploy restarts the Deployment's Pods in a new attempt on the
//! same Revision, exactly once per request; a bad request value applies nothing.
//!
//! `KSYNC_BIN` runs another `ksync` binary than the one Cargo built for this test.

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kuvryn_sync::api::conditions;
use kuvryn_sync::api::names;
use kuvryn_sync::api::revision::{AttemptResult, PlanAction, Revision, RevisionPhase};
use serde_json::json;
use testkit::apps::{Env, WAIT, entries};
use testkit::{Cluster, eventually, ksync};

const NS: &str = "redeploy";

const DEPLOYMENT: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n      annotations: {simcluster.kuvryn.io/ready-ms: \"500\"}\n    spec:\n      containers:\n      - name: web\n        image: nginx:1.27\n";
const CONFIG: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  color: blue\n";

fn restarted_at(d: &Deployment) -> Option<String> {
    d.spec.template.metadata.as_ref()?.annotations.as_ref()?.get(names::annotations::RESTARTED_AT).cloned()
}

/// The Application's Revision once `check` holds for it.
async fn revision_where(env: &Env, what: &str, check: impl Fn(&Revision) -> bool) -> Revision {
    env.revision_where("web", what, check).await
}

fn healthy_after(r: &Revision, attempts: usize) -> bool {
    r.status.as_ref().is_some_and(|s| {
        s.phase == RevisionPhase::Healthy
            && s.attempts.len() == attempts
            && s.attempts.last().is_some_and(|a| a.result == AttemptResult::Succeeded)
    })
}

/// Running and ready Pods of `web`, by uid (terminating ones left out).
async fn ready_pods(env: &Env) -> BTreeSet<String> {
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), NS);
    let list = pods.list(&ListParams::default().labels("app=web")).await.unwrap();
    list.items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .filter_map(|p| p.metadata.uid)
        .collect()
}

fn redeploy_restarts_the_workloads_once_and_refuses_a_bad_request(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::start(&cluster, NS).await;
        env.app_from(
            "web",
            &[("web/deploy.yaml", DEPLOYMENT), ("web/config.yaml", CONFIG)],
            json!({"source": {"repository": "platform", "path": "web"}, "serviceAccountName": "deployer",
                   "destination": {"namespace": NS}, "sync": {"prune": true},
                   "health": {"timeout": "60s"}, "failurePolicy": {"maxAttempts": 1}}),
        )
        .await;
        let rev = revision_where(&env, "the first rollout to be Healthy", |r| healthy_after(r, 1)).await;
        let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), NS);
        assert_eq!(restarted_at(&deployments.get("web").await.unwrap()), None);
        let old_pods = eventually("two ready Pods", WAIT, || async {
            let p = ready_pods(&env).await;
            (p.len() == 2).then_some(p)
        })
        .await;

        // `ksync redeploy`: the annotation, and what happens next.
        let ksync = |args: &[&str]| {
            let out = ksync::ok(&cluster, NS, args);
            assert!(out.stderr.is_empty(), "ksync {args:?}: {out:?}");
            out.stdout
        };
        let printed = ksync(&["redeploy", "web"]);
        let app = env.apps().get("web").await.unwrap();
        let at = app.annotations().get(names::annotations::REDEPLOY_REQUESTED_AT).cloned().expect("the request");
        assert_eq!(kuvryn_sync::plan::redeploy::parse(&at).as_deref(), Ok(at.as_str()), "written normalized");
        assert!(printed.contains(&format!("requested at {at}")), "{printed}");
        assert!(
            printed.contains(&format!(
                "The controller restarts Deployment {NS}/web with a new attempt on Revision {}",
                rev.name_any()
            )),
            "{printed}"
        );

        // A new attempt on the same Revision: the Deployment updated with restartedAt, Healthy.
        let rev2 =
            revision_where(&env, "a second attempt on the same Revision, Healthy", |r| healthy_after(r, 2)).await;
        assert_eq!(rev2.name_any(), rev.name_any(), "the same Revision");
        assert_ne!(rev2.spec.desired_state_hash, rev.spec.desired_state_hash, "a new desired state");
        let web = entries(&rev2).into_iter().find(|e| e.resource.kind == "Deployment").unwrap();
        assert_eq!(web.action, PlanAction::Update, "{web:?}");
        assert!(web.fields.iter().any(|f| f.contains("restartedAt")), "{:?}", web.fields);
        let settings = entries(&rev2).into_iter().find(|e| e.resource.kind == "ConfigMap").unwrap();
        assert_eq!(settings.action, PlanAction::Unchanged, "only workloads are restarted");
        let d = deployments.get("web").await.unwrap();
        assert_eq!(restarted_at(&d).as_deref(), Some(at.as_str()));
        let app = eventually("the Application Ready with the request recorded", WAIT, || async {
            let a = env.apps().get("web").await.ok()?;
            let s = a.status.as_ref()?;
            let ready = conditions::get(&s.conditions, names::conditions::READY)?.status == "True";
            (ready && s.last_handled_redeploy_at.as_deref() == Some(at.as_str())).then_some(a)
        })
        .await;
        assert_eq!(app.status.as_ref().unwrap().desired_revision.as_deref(), Some(rev.name_any().as_str()));
        // New Pods replaced the old ones.
        eventually("two new ready Pods and none of the old", WAIT, || async {
            let p = ready_pods(&env).await;
            (p.len() == 2 && p.is_disjoint(&old_pods)).then_some(())
        })
        .await;
        let announced = |events: Vec<(String, String, String)>| {
            events
                .into_iter()
                .filter(|(_, reason, note)| {
                    reason == names::reasons::PROGRESSING && note.starts_with("redeploy requested at")
                })
                .map(|(_, _, note)| note)
                .collect::<Vec<_>>()
        };
        let notes = announced(env.events("web").await);
        assert_eq!(notes, [format!("redeploy requested at {at}: restarting Deployment {NS}/web")]);

        // Later reconciles keep the value and restart nothing again.
        let replica_sets: Api<ReplicaSet> = Api::namespaced(env.client.clone(), NS);
        let sets = replica_sets.list(&ListParams::default().labels("app=web")).await.unwrap().items.len();
        let generation = d.metadata.generation;
        for token in ["again-1", "again-2"] {
            env.poke("web", token).await;
            eventually("a reconcile of the deployed Revision", WAIT, || async {
                let a = env.apps().get("web").await.ok()?;
                (a.status?.last_handled_reconcile_at.as_deref() == Some(token)).then_some(())
            })
            .await;
        }
        let r = env.revisions().get(&rev.name_any()).await.unwrap();
        assert_eq!(r.status.as_ref().unwrap().attempts.len(), 2, "no third attempt");
        let d = deployments.get("web").await.unwrap();
        assert_eq!(d.metadata.generation, generation, "the Deployment was not changed again");
        assert_eq!(restarted_at(&d).as_deref(), Some(at.as_str()));
        assert_eq!(replica_sets.list(&ListParams::default().labels("app=web")).await.unwrap().items.len(), sets);
        assert_eq!(announced(env.events("web").await).len(), 1, "one Event per request");

        // A request that is not an RFC 3339 time: a clear error, an Event, nothing applied.
        let bad = "tomorrow; please";
        let patch = json!({"metadata": {"annotations": {names::annotations::REDEPLOY_REQUESTED_AT: bad}}});
        env.apps().patch("web", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
        let (reason, message) = eventually("the bad request reported", WAIT, || async {
            let a = env.apps().get("web").await.ok()?;
            let c = conditions::get(&a.status.as_ref()?.conditions, names::conditions::READY)?.clone();
            (c.status == "False").then_some((c.reason, c.message))
        })
        .await;
        assert_eq!(reason, names::reasons::VALIDATION_FAILURE);
        assert!(
            message.contains(names::annotations::REDEPLOY_REQUESTED_AT)
                && message.contains("\"tomorrow; please\"")
                && message.contains("not an RFC 3339 time"),
            "{message}"
        );
        let warned = env.events("web").await;
        assert!(
            warned.iter().any(|(t, r, n)| t == "Warning" && r == names::reasons::VALIDATION_FAILURE && *n == message),
            "{warned:#?}"
        );
        let d = deployments.get("web").await.unwrap();
        assert_eq!(d.metadata.generation, generation, "nothing applied");
        assert_eq!(restarted_at(&d).as_deref(), Some(at.as_str()));
        let r = env.revisions().get(&rev.name_any()).await.unwrap();
        assert_eq!(r.status.as_ref().unwrap().attempts.len(), 2, "no attempt");
        let a = env.apps().get("web").await.unwrap();
        assert_eq!(a.status.as_ref().unwrap().last_handled_redeploy_at.as_deref(), Some(at.as_str()));
    });
}

/// A redeploy requested while an attempt is running waits for it, then gets its own attempt:
/// taken up at once, the running attempt would complete without applying it and record the new
/// desired state as deployed (the restart lost, shown as drift).
fn a_redeploy_during_an_attempt_waits_for_it_and_then_restarts(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::start(&cluster, NS).await;
        let slow = DEPLOYMENT.replace("ready-ms: \"500\"", "ready-ms: \"5000\"");
        assert_ne!(slow, DEPLOYMENT);
        env.app_from(
            "web",
            &[("web/deploy.yaml", &slow)],
            json!({"source": {"repository": "platform", "path": "web"}, "serviceAccountName": "deployer",
                   "destination": {"namespace": NS}, "health": {"timeout": "60s"}, "failurePolicy": {"maxAttempts": 1}}),
        )
        .await;
        let rev = revision_where(&env, "the first attempt running", |r| {
            r.status.as_ref().is_some_and(|s| s.attempts.last().is_some_and(|a| a.result == AttemptResult::Running))
        })
        .await;
        ksync::ok(&cluster, NS, &["redeploy", "web"]);
        let at = env.apps().get("web").await.unwrap().annotations()[names::annotations::REDEPLOY_REQUESTED_AT].clone();
        let still_first = env.revisions().get(&rev.name_any()).await.unwrap();
        assert_eq!(still_first.status.unwrap().attempts.len(), 1, "the request came during the first attempt");

        let done = revision_where(&env, "a second attempt after the first, Healthy", |r| healthy_after(r, 2)).await;
        assert_eq!(done.name_any(), rev.name_any());
        let first = &done.status.as_ref().unwrap().attempts[0];
        assert_eq!(first.result, AttemptResult::Succeeded);
        let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), NS);
        assert_eq!(restarted_at(&deployments.get("web").await.unwrap()).as_deref(), Some(at.as_str()));
        let a = eventually("the request recorded, Synced", WAIT, || async {
            let a = env.apps().get("web").await.ok()?;
            let s = a.status.clone()?;
            (s.last_handled_redeploy_at.as_deref() == Some(at.as_str())).then_some(s)
        })
        .await;
        assert_eq!(format!("{:?}", a.sync.unwrap().status), "Synced");
    });
}

testkit::both!(
    redeploy_restarts_the_workloads_once_and_refuses_a_bad_request,
    a_redeploy_during_an_attempt_waits_for_it_and_then_restarts
);
