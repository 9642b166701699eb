//! Rollback end to end: the controllers in-process (`testkit::apps::Env`), a real Git server,
//! and the real `ksync rollback`, on simcluster and on a real kube-apiserver: roll back, the
//! hold, a new commit ending it, a rollback failure policy, and a manual-sync rollback approved
//! by its own request.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::Api;
use kuvryn_sync::api::application::Application;
use kuvryn_sync::api::conditions;
use kuvryn_sync::api::names;
use kuvryn_sync::api::revision::{Revision, RevisionPhase};
use serde_json::json;
use testkit::apps::{Env, WAIT};
use testkit::ksync;
use testkit::{Cluster, eventually};

fn config(color: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  color: {color}\n")
}

fn phase(r: &Revision) -> Option<RevisionPhase> {
    r.status.as_ref().map(|s| s.phase)
}

fn held_by(r: &Revision) -> Option<String> {
    let c = conditions::get(&r.status.as_ref()?.conditions, names::conditions::ROLLED_BACK)?;
    (c.status == "True").then(|| c.reason.clone())
}

fn ready(a: &Application) -> (String, String) {
    let c = a.status.as_ref().and_then(|s| conditions::get(&s.conditions, names::conditions::READY).cloned());
    c.map(|c| (c.status, c.reason)).unwrap_or_default()
}

async fn color(cms: &Api<ConfigMap>) -> Option<String> {
    cms.get("settings").await.ok()?.data?.get("color").cloned()
}

async fn healthy_at(env: &Env, commit: &str) -> Revision {
    env.revision_where("web", &format!("commit {commit} Healthy"), |r| {
        r.spec.source.commit == commit && phase(r) == Some(RevisionPhase::Healthy)
    })
    .await
}

fn a_rollback_deploys_the_target_and_holds_until_a_new_commit(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let ns = "rollback";
        let env = Env::start(&cluster, ns).await;
        let wt = env
            .app_from(
                "web",
                &[("web/config.yaml", &config("blue"))],
                json!({"source": {"repository": "platform", "path": "web"}, "serviceAccountName": "deployer",
                       "destination": {"namespace": ns}, "failurePolicy": {"action": "rollback", "maxAttempts": 2}}),
            )
            .await;
        let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), ns);
        let a = eventually("blue deployed", WAIT, || async {
            let r = env.revision_where("web", "a Healthy Revision", |r| phase(r) == Some(RevisionPhase::Healthy)).await;
            (color(&cms).await.as_deref() == Some("blue")).then_some(r)
        })
        .await;
        let blue = a.spec.source.commit.clone();
        let red = wt.write("web/config.yaml", &config("red")).commit_and_push("red");
        env.refresh("platform", &red).await;
        let b = healthy_at(&env, &red).await;
        assert_eq!(color(&cms).await.as_deref(), Some("red"));

        // `ksync rollback` with no target: the last healthy Revision before the desired one.
        let out = ksync::ok(&cluster, ns, &["rollback", "web"]).stdout;
        assert!(out.contains(&format!("Requested a rollback of web to Revision {}", a.name_any())), "{out}");
        let app = eventually("rolled back and holding", WAIT, || async {
            let app = env.apps().get("web").await.ok()?;
            let done = color(&cms).await.as_deref() == Some("blue")
                && ready(&app) == ("False".into(), names::reasons::ROLLED_BACK.into())
                && !app.annotations().contains_key(names::annotations::ROLLBACK_TO);
            done.then_some(app)
        })
        .await;
        let status = app.status.clone().unwrap();
        assert_eq!(status.desired_revision.as_deref(), Some(a.name_any().as_str()), "the target runs");
        assert_eq!(status.last_healthy_revision.as_deref(), Some(a.name_any().as_str()));
        assert_eq!(format!("{:?}", status.sync.unwrap().status), "OutOfSync", "the held revision is not deployed");
        let held = env.revisions().get(&b.name_any()).await.unwrap();
        assert_eq!(held_by(&held).as_deref(), Some(names::reasons::MANUAL_ROLLBACK));
        assert_eq!(phase(&held), Some(RevisionPhase::Failed));
        // Held is final: Stalled, and not Ready, with the hold's reason.
        let held_status = held.status.as_ref().unwrap();
        for type_ in [names::conditions::READY, names::conditions::STALLED] {
            let c = conditions::get(&held_status.conditions, type_).unwrap();
            let want = if type_ == names::conditions::READY { "False" } else { "True" };
            assert_eq!((c.status.as_str(), c.reason.as_str()), (want, names::reasons::ROLLED_BACK), "{type_}");
        }
        let target = env.revisions().get(&a.name_any()).await.unwrap();
        assert_eq!(target.status.as_ref().unwrap().attempts.len(), 2, "the rollback is a new attempt on the target");

        // The hold lasts: a reconcile changes nothing.
        env.poke("web", "still held").await;
        eventually("the poke handled", WAIT, || async {
            let a = env.apps().get("web").await.ok()?;
            (a.status?.last_handled_reconcile_at.as_deref() == Some("still held")).then_some(())
        })
        .await;
        assert_eq!(color(&cms).await.as_deref(), Some("blue"));
        assert_eq!(ready(&env.apps().get("web").await.unwrap()).1, names::reasons::ROLLED_BACK);

        // A new commit ends it.
        let green = wt.write("web/config.yaml", &config("green")).commit_and_push("green");
        env.refresh("platform", &green).await;
        healthy_at(&env, &green).await;
        eventually("green deployed and Ready", WAIT, || async {
            let app = env.apps().get("web").await.ok()?;
            (color(&cms).await.as_deref() == Some("green") && ready(&app).0 == "True").then_some(())
        })
        .await;

        // Failure policy rollback: a commit whose desired state is invalid (two objects of one
        // identity) rolls back to the previous healthy Revision and holds it.
        let broken = wt.write("web/again.yaml", &config("purple")).commit_and_push("the same ConfigMap twice");
        env.refresh("platform", &broken).await;
        let held = eventually("the broken commit held", WAIT, || async {
            let list = env.revisions().list(&Default::default()).await.ok()?;
            let r = list.items.into_iter().find(|r| r.spec.source.commit == broken)?;
            (held_by(&r).as_deref() == Some(names::reasons::ROLLBACK_COMPLETED)).then_some(r)
        })
        .await;
        assert_eq!(held.status.as_ref().unwrap().failure.as_ref().unwrap().reason, "ValidationFailure");
        eventually("the Application reporting the hold", WAIT, || async {
            (ready(&env.apps().get("web").await.ok()?).1 == names::reasons::ROLLED_BACK).then_some(())
        })
        .await;
        assert_eq!(color(&cms).await.as_deref(), Some("green"));
        let events = env.events("web").await;
        assert!(
            events.iter().any(|e| e.1 == names::reasons::ROLLED_BACK && e.2.contains(&held.name_any())),
            "{events:#?}"
        );
        let _ = blue;
    });
}

fn a_first_rollout_failing_under_rollback_is_handled_as_pause(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let ns = "rollback-first";
        let env = Env::start(&cluster, ns).await;
        env.app_from(
            "web",
            &[("web/config.yaml", &config("blue")), ("web/again.yaml", &config("red"))],
            json!({"source": {"repository": "platform", "path": "web"}, "serviceAccountName": "deployer",
                   "destination": {"namespace": ns}, "failurePolicy": {"action": "rollback"}}),
        )
        .await;
        let app = eventually("the first rollout failing", WAIT, || async {
            let app = env.apps().get("web").await.ok()?;
            (ready(&app).1 == names::reasons::VALIDATION_FAILURE).then_some(app)
        })
        .await;
        let c = conditions::get(&app.status.as_ref().unwrap().conditions, names::conditions::READY).unwrap();
        // Retried as under pause: the attempt count follows the message.
        let message = "; no previous healthy Revision to roll back to (attempt ";
        assert!(c.message.contains(message), "{}", c.message);
        let rev = env.revisions().get(app.status.as_ref().unwrap().desired_revision.as_ref().unwrap()).await.unwrap();
        let failure = rev.status.as_ref().unwrap().failure.clone().unwrap();
        assert_eq!(failure.reason, names::reasons::VALIDATION_FAILURE);
        assert!(failure.message.ends_with("; no previous healthy Revision to roll back to"), "{}", failure.message);
        assert!(!app.annotations().contains_key(names::annotations::ROLLBACK_TO));
    });
}

fn a_rollback_that_cannot_reach_its_target_is_abandoned(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let ns = "rollback-abandon";
        let env = Env::start(&cluster, ns).await;
        let wt = env
            .app_from(
                "web",
                &[("web/config.yaml", &config("blue"))],
                json!({"source": {"repository": "platform", "path": "web"}, "serviceAccountName": "deployer",
                       "destination": {"namespace": ns}}),
            )
            .await;
        let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), ns);
        env.revision_where("web", "blue Healthy", |r| phase(r) == Some(RevisionPhase::Healthy)).await;
        let broken = wt.write("web/again.yaml", &config("purple")).commit_and_push("the same ConfigMap twice");
        env.refresh("platform", &broken).await;
        let b = env
            .revision_where("web", "the invalid commit failing", |r| {
                r.spec.source.commit == broken && phase(r) == Some(RevisionPhase::Failed)
            })
            .await;
        let other = config("purple").replace("name: settings", "name: other");
        let green =
            wt.write("web/again.yaml", &other).write("web/config.yaml", &config("green")).commit_and_push("green");
        env.refresh("platform", &green).await;
        healthy_at(&env, &green).await;

        // Rolling back to the invalid Revision cannot succeed: abandoned, the desired one runs.
        ksync::ok(&cluster, ns, &["rollback", "web", "--revision", &b.name_any()]);
        let events = eventually("RollbackAbandoned", WAIT, || async {
            let ev = env.events("web").await;
            ev.iter().any(|e| e.1 == names::events::ROLLBACK_ABANDONED).then_some(ev)
        })
        .await;
        let abandoned = events.iter().find(|e| e.1 == names::events::ROLLBACK_ABANDONED).unwrap();
        assert_eq!(abandoned.0, "Warning");
        assert!(abandoned.2.contains("ValidationFailure"), "{abandoned:?}");
        eventually("the request removed and the desired Revision Ready", WAIT, || async {
            let app = env.apps().get("web").await.ok()?;
            let done = !app.annotations().keys().any(|k| k.starts_with(names::annotations::ROLLBACK_PREFIX))
                && ready(&app) == ("True".into(), "Succeeded".into());
            done.then_some(())
        })
        .await;
        assert_eq!(color(&cms).await.as_deref(), Some("green"));
    });
}

fn a_manual_sync_rollback_is_approved_by_its_own_request(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let ns = "rollback-manual";
        let env = Env::start(&cluster, ns).await;
        let wt = env
            .app_from(
                "web",
                &[("web/config.yaml", &config("blue"))],
                json!({"source": {"repository": "platform", "path": "web"}, "serviceAccountName": "deployer",
                       "destination": {"namespace": ns}, "sync": {"automatic": false}}),
            )
            .await;
        let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), ns);
        let waiting = |r: &Revision| phase(r) == Some(RevisionPhase::AwaitingApproval);
        let a = env.revision_where("web", "blue waiting for approval", waiting).await;
        env.planned_digest("web", &a.name_any()).await;
        ksync::ok(&cluster, ns, &["sync", "web", "--yes"]);
        healthy_at(&env, &a.spec.source.commit).await;
        let red = wt.write("web/config.yaml", &config("red")).commit_and_push("red");
        env.refresh("platform", &red).await;
        let b =
            env.revision_where("web", "red waiting for approval", |r| r.spec.source.commit == red && waiting(r)).await;
        env.planned_digest("web", &b.name_any()).await;
        ksync::ok(&cluster, ns, &["sync", "web", "--yes"]);
        healthy_at(&env, &red).await;
        assert_eq!(color(&cms).await.as_deref(), Some("red"));

        // The request approves the chosen Revision: no ksync sync.
        let out = ksync::ok(&cluster, ns, &["rollback", "web", "--revision", &a.name_any()]).stdout;
        assert!(out.contains("The request approves it"), "{out}");
        eventually("blue back, red held and the request removed", WAIT, || async {
            let r = env.revisions().get(&b.name_any()).await.ok()?;
            let app = env.apps().get("web").await.ok()?;
            let done = color(&cms).await.as_deref() == Some("blue")
                && held_by(&r).as_deref() == Some("ManualRollback")
                && !app.annotations().contains_key(names::annotations::ROLLBACK_TO);
            done.then_some(())
        })
        .await;
        let target = env.revisions().get(&a.name_any()).await.unwrap();
        let approval = target.status.as_ref().unwrap().approval.clone().expect("status.approval");
        assert_eq!(approval.source.as_deref(), Some("ManualRollback"));
        let events = env.events("web").await;
        assert!(events.iter().any(|e| e.1 == names::events::ROLLBACK_APPROVED), "{events:#?}");

        // A request whose target hash does not match (the policy changed since it was asked
        // for, or it was forged) approves nothing: it waits for ksync sync.
        let stale = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
        let at = jiff::Timestamp::now().to_string();
        let request = json!({"metadata": {"annotations": {
            names::annotations::ROLLBACK_TO: red,
            names::annotations::ROLLBACK_KIND: "manual",
            names::annotations::ROLLBACK_TARGET_REVISION: b.name_any(),
            names::annotations::ROLLBACK_REQUESTED_BY: "mallory",
            names::annotations::ROLLBACK_REQUESTED_AT: at,
            names::annotations::ROLLBACK_TARGET_HASH: stale,
        }}});
        env.apps().patch("web", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&request)).await.unwrap();
        // The Events come before the Revision's status write of the same reconcile.
        let (events, r) = eventually("RollbackTargetChanged, and the target waiting", WAIT, || async {
            let ev = env.events("web").await;
            let r = env.revisions().get(&b.name_any()).await.ok()?;
            let changed = ev.iter().any(|e| e.1 == names::events::ROLLBACK_TARGET_CHANGED && e.0 == "Warning");
            (changed && phase(&r) == Some(RevisionPhase::AwaitingApproval)).then_some((ev, r))
        })
        .await;
        assert!(events.iter().any(|e| e.1 == names::events::APPROVAL_STALE), "{events:#?}");
        assert_eq!(held_by(&r), None, "asking to roll back to it lifts its hold");
        assert_eq!(color(&cms).await.as_deref(), Some("blue"), "nothing deployed without an approval");
        env.planned_digest("web", &b.name_any()).await;
        ksync::ok(&cluster, ns, &["sync", "web", "--yes"]);
        eventually("red deployed by ksync sync", WAIT, || async {
            let app = env.apps().get("web").await.ok()?;
            let done = color(&cms).await.as_deref() == Some("red")
                && !app.annotations().contains_key(names::annotations::ROLLBACK_TO);
            done.then_some(())
        })
        .await;
        let r = env.revisions().get(&b.name_any()).await.unwrap();
        assert_eq!(r.status.as_ref().unwrap().approval.as_ref().unwrap().source.as_deref(), Some("ManualSync"));
    });
}

/// A commit whose Deployment crash-loops fails its attempt on health, and a rollback failure
/// policy returns to the previous healthy commit, pruning the Deployment, and holds the crashing
/// one. Its container is never ready: one that is ready for a moment before it crashes can make
/// the Deployment available, and the attempt succeed, before the crash; a crash after a
/// rollout makes the Application Degraded, it fails no attempt.
fn a_crash_looping_commit_is_rolled_back_by_the_failure_policy(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let ns = "rollback-crash";
        let env = Env::start(&cluster, ns).await;
        let wt = env
            .app_from(
                "web",
                &[("web/config.yaml", &config("blue"))],
                json!({"source": {"repository": "platform", "path": "web"}, "serviceAccountName": "deployer",
                       "destination": {"namespace": ns}, "sync": {"prune": true}, "health": {"timeout": "20s"},
                       "failurePolicy": {"action": "rollback", "maxAttempts": 3}}),
            )
            .await;
        let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), ns);
        let a = eventually("blue deployed", WAIT, || async {
            let r = env.revision_where("web", "a Healthy Revision", |r| phase(r) == Some(RevisionPhase::Healthy)).await;
            (color(&cms).await.as_deref() == Some("blue")).then_some(r)
        })
        .await;
        let crash = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n  progressDeadlineSeconds: 5\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - name: web\n        image: web:2\n        env: [{name: SIMCLUSTER_EXIT_CODE, value: \"3\"}, {name: SIMCLUSTER_READY, value: \"false\"}]\n";
        let bad = wt
            .write("web/config.yaml", &config("red"))
            .write("web/deploy.yaml", crash)
            .commit_and_push("a crash-looping web");
        env.refresh("platform", &bad).await;
        // Up to the 20 s health timeout, then a rollback with its own apply and health wait: more
        // than one step's usual deadline on a loaded machine.
        let held = eventually("the crashing commit held", WAIT * 3, || async {
            let list = env.revisions().list(&Default::default()).await.ok()?;
            let r = list.items.into_iter().find(|r| r.spec.source.commit == bad)?;
            let app = env.apps().get("web").await.ok()?;
            let done = held_by(&r).as_deref() == Some(names::reasons::ROLLBACK_COMPLETED)
                && !app.annotations().contains_key(names::annotations::ROLLBACK_TO);
            done.then_some(r)
        })
        .await;
        let st = held.status.as_ref().unwrap();
        let failed = st.attempts.first().unwrap();
        assert_eq!(failed.result, kuvryn_sync::api::revision::AttemptResult::Failed);
        let reason = failed.reason.clone().unwrap_or_default();
        assert!([names::reasons::DEGRADED, names::reasons::HEALTH_TIMEOUT].contains(&reason.as_str()), "{reason}");
        assert_eq!(st.attempts.len(), 1, "rolled back as it failed, not retried: {:#?}", st.attempts);
        assert_eq!(color(&cms).await.as_deref(), Some("blue"));
        let deployments: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(env.client.clone(), ns);
        eventually("the crashing Deployment pruned", WAIT, || async {
            deployments.get_opt("web").await.ok()?.is_none().then_some(())
        })
        .await;
        let app = eventually("the Application reporting the hold", WAIT, || async {
            let app = env.apps().get("web").await.ok()?;
            (ready(&app) == ("False".into(), names::reasons::ROLLED_BACK.into())).then_some(app)
        })
        .await;
        assert_eq!(app.status.unwrap().desired_revision.as_deref(), Some(a.name_any().as_str()));
    });
}

/// On manual sync, a rollback to a Revision that is live and unchanged still needs an approval
/// given for it: it waits in `AwaitingApproval` (the earlier `ksync sync` of that Revision does
/// not count), and `ksync sync` completes it, holding the commit rolled back from.
fn a_manual_sync_rollback_to_a_live_target_waits_for_approval(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let ns = "rollback-live";
        let env = Env::start(&cluster, ns).await;
        let wt = env
            .app_from(
                "web",
                &[("web/config.yaml", &config("blue"))],
                json!({"source": {"repository": "platform", "path": "web"}, "serviceAccountName": "deployer",
                       "destination": {"namespace": ns}, "sync": {"automatic": false}}),
            )
            .await;
        let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), ns);
        let waiting = |r: &Revision| phase(r) == Some(RevisionPhase::AwaitingApproval);
        let b = env.revision_where("web", "blue waiting for approval", waiting).await;
        env.planned_digest("web", &b.name_any()).await;
        ksync::ok(&cluster, ns, &["sync", "web", "--yes"]);
        healthy_at(&env, &b.spec.source.commit).await;
        // A commit that changes nothing under the path: a new Revision of the same desired
        // state, waiting for approval.
        let readme = wt.write("README.md", "docs\n").commit_and_push("docs");
        env.refresh("platform", &readme).await;
        let c = env
            .revision_where("web", "the docs commit waiting", |r| r.spec.source.commit == readme && waiting(r))
            .await;

        // A manual rollback to the live Revision, written by hand without a requester: no
        // approval of its own, and the earlier ksync sync was given before the request, a
        // nanosecond before, in the same microsecond (the Revision records approvals to the
        // microsecond).
        let approved_at: jiff::Timestamp =
            env.apps().get("web").await.unwrap().annotations()[names::annotations::APPROVED_AT].parse().unwrap();
        let requested_at = approved_at + jiff::SignedDuration::from_nanos(1);
        let request = json!({"metadata": {"annotations": {
            names::annotations::ROLLBACK_TO: b.spec.source.commit,
            names::annotations::ROLLBACK_KIND: "manual",
            names::annotations::ROLLBACK_TARGET_REVISION: b.name_any(),
            names::annotations::ROLLBACK_REQUESTED_AT: requested_at.to_string(),
        }}});
        env.apps().patch("web", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&request)).await.unwrap();
        env.revision_where("web", "the live target waiting for approval", |r| {
            r.name_any() == b.name_any() && waiting(r)
        })
        .await;
        let held = env.revisions().get(&c.name_any()).await.unwrap();
        assert_eq!(held_by(&held), None, "nothing completes without an approval");
        assert!(env.apps().get("web").await.unwrap().annotations().contains_key(names::annotations::ROLLBACK_TO));

        env.planned_digest("web", &b.name_any()).await;
        ksync::ok(&cluster, ns, &["sync", "web", "--yes"]);
        eventually("the rollback completed and the docs commit held", WAIT, || async {
            let app = env.apps().get("web").await.ok()?;
            let r = env.revisions().get(&c.name_any()).await.ok()?;
            let done = held_by(&r).as_deref() == Some(names::reasons::MANUAL_ROLLBACK)
                && !app.annotations().contains_key(names::annotations::ROLLBACK_TO);
            done.then_some(())
        })
        .await;
        let target = env.revisions().get(&b.name_any()).await.unwrap();
        let st = target.status.as_ref().unwrap();
        assert_eq!(st.approval.as_ref().unwrap().source.as_deref(), Some("ManualSync"));
        assert_eq!(st.attempts.len(), 2, "the approved rollback is an attempt of its own: {:#?}", st.attempts);
        assert_eq!(color(&cms).await.as_deref(), Some("blue"));
    });
}

testkit::both!(
    a_rollback_that_cannot_reach_its_target_is_abandoned,
    a_rollback_deploys_the_target_and_holds_until_a_new_commit,
    a_first_rollout_failing_under_rollback_is_handled_as_pause,
    a_manual_sync_rollback_is_approved_by_its_own_request,
    a_manual_sync_rollback_to_a_live_target_waits_for_approval,
    a_crash_looping_commit_is_rolled_back_by_the_failure_policy,
);
