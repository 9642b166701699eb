//! The Application controller end to end against the cluster (simcluster, or the one in
//! `KSYNC_E2E_KUBECONFIG`): a real `git daemon`, the Repository and Application controllers
//! running in-process, plans stored on Revisions as Git and the cluster change. The
//! Applications here use manual sync (`spec.sync.automatic: false`), so the controller applies
//! nothing; the test plays the part of the rollout by server-side applying the desired objects
//! itself. Rollouts are tested in `tests/rollout.rs`.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kuvryn_sync::api::conditions;
use kuvryn_sync::api::names;
use kuvryn_sync::api::revision::{PlanAction, RevisionPhase};
use serde_json::json;
use testkit::apps::{Env, WAIT, action_of, apply_desired, entries, entry, planned};
use testkit::{Cluster, eventually};

const CM_A: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  color: blue\n  size: large\n";
const CM_B: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\ndata:\n  k: v\n";
const SECRET: &str =
    "apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\nstringData:\n  password: s3cr3t-in-git\n  user: admin\n";
const DEPLOY: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - name: web\n        image: nginx:1.27\n        resources:\n          requests: {cpu: \"1\"}\n";

fn plans_follow_git_and_the_cluster(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::start(&cluster, "plan-test").await;
        let wt = env.repository("platform").await;
        wt.write("web/a.yaml", CM_A)
            .write("web/b.yaml", CM_B)
            .write("web/secret.yaml", SECRET)
            .write("web/deploy.yaml", DEPLOY);
        let first = wt.commit_and_push("web: a, b, creds, deployment");
        env.refresh("platform", &first).await;
        env.create_app(
            "web",
            json!({"source": {"repository": "platform", "path": "web"}, "serviceAccountName": "deployer",
                   "destination": {"namespace": "plan-test"}, "sync": {"prune": true, "automatic": false}, "history": {"limit": 2}}),
        )
        .await;

        // A fresh namespace: everything is created.
        let rev = env.revision_where("web", "a plan for a fresh namespace", planned).await;
        let e = entries(&rev);
        assert_eq!(e.len(), 4, "{e:#?}");
        assert!(e.iter().all(|e| e.action == PlanAction::Create), "{e:#?}");
        // Apply order: Secret and ConfigMaps before the Deployment.
        assert_eq!(e.last().unwrap().resource.kind, "Deployment");
        let summary = &rev.status.as_ref().unwrap().plan.as_ref().unwrap().summary;
        assert_eq!((summary.create, summary.update, summary.delete, summary.unchanged), (4, 0, 0, 0));
        assert_eq!(rev.spec.source.commit, first);
        assert_eq!(rev.spec.source.path, "web");
        assert!(rev.spec.desired_state_hash.as_deref().is_some_and(|h| h.starts_with("sha256:")));
        assert_eq!(rev.labels().get(names::labels::APPLICATION).map(String::as_str), Some("web"));
        let app = env.apps().get("web").await.unwrap();
        assert_eq!(rev.owner_references()[0].uid, app.uid().unwrap());
        let status = app.status.unwrap();
        assert_eq!(status.desired_revision.as_deref(), Some(rev.name_any().as_str()));
        let sync = status.sync.unwrap();
        assert_eq!(format!("{:?}", sync.status), "OutOfSync");
        assert_eq!(sync.commit.as_deref(), Some(first.as_str()));
        let ready = conditions::get(&status.conditions, names::conditions::READY).unwrap();
        assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "AwaitingApproval"));
        assert!(ready.message.contains("4 to create"), "{}", ready.message);
        assert!(matches!(rev.status.as_ref().unwrap().phase, RevisionPhase::AwaitingApproval));
        let rs = rev.status.as_ref().unwrap();
        let rev_ready = conditions::get(&rs.conditions, names::conditions::READY).unwrap();
        assert_eq!((rev_ready.status.as_str(), rev_ready.reason.as_str()), ("False", "AwaitingApproval"));
        let digest = &rs.plan.as_ref().unwrap().digest;
        assert_eq!(rev_ready.message, format!("plan {digest} waits for approval (ksync sync)"));
        assert!(!conditions::is_true(&rs.conditions, names::conditions::RECONCILING));
        // Manual sync: nothing was written to the namespace.
        let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "plan-test");
        assert!(cms.get_opt("a").await.unwrap().is_none());

        // The rollout's part, played by the test: now everything is in place and unchanged.
        for y in [CM_A, CM_B, SECRET, DEPLOY] {
            apply_desired(&env, "web", y).await;
        }
        env.poke("web", "applied").await;
        let rev = env
            .revision_where("web", "an all-Unchanged plan", |r| {
                planned(r) && !entries(r).is_empty() && entries(r).iter().all(|e| e.action == PlanAction::Unchanged)
            })
            .await;
        assert_eq!(entries(&rev).len(), 4);
        eventually("the Application to be Synced", WAIT, || async {
            let sync = env.apps().get("web").await.ok()?.status?.sync?;
            (format!("{:?}", sync.status) == "Synced").then_some(())
        })
        .await;

        // Manual edits by another manager: Update with the changed paths and the conflicts;
        // a changed Secret shows only which key changed.
        let edit = json!({"data": {"color": "red"}});
        cms.patch(
            "a",
            &PatchParams { field_manager: Some("kubectl-edit".into()), ..Default::default() },
            &Patch::Merge(&edit),
        )
        .await
        .unwrap();
        let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(env.client.clone(), "plan-test");
        let edit = json!({"stringData": {"password": "changed-by-hand"}});
        secrets
            .patch(
                "creds",
                &PatchParams { field_manager: Some("kubectl-edit".into()), ..Default::default() },
                &Patch::Merge(&edit),
            )
            .await
            .unwrap();
        env.poke("web", "edited").await;
        let rev = env
            .revision_where("web", "Update entries after the manual edits", |r| {
                action_of(r, "ConfigMap", "a") == Some(PlanAction::Update)
                    && action_of(r, "Secret", "creds") == Some(PlanAction::Update)
            })
            .await;
        let e = entries(&rev);
        let a = entry(&e, "ConfigMap", "a");
        assert_eq!(a.fields, vec!["data.color"]);
        assert_eq!(a.conflicts.len(), 1, "{a:#?}");
        assert_eq!((a.conflicts[0].field.as_str(), a.conflicts[0].manager.as_str()), (".data.color", "kubectl-edit"));
        let creds = entry(&e, "Secret", "creds");
        assert_eq!(creds.fields, vec!["data.password"]);
        assert_eq!(entry(&e, "ConfigMap", "b").action, PlanAction::Unchanged);
        let stored = serde_json::to_string(&rev).unwrap();
        for secret in ["s3cr3t-in-git", "changed-by-hand", "czNjcjN0LWluLWdpdA==", "Y2hhbmdlZC1ieS1oYW5k"] {
            assert!(!stored.contains(secret), "a Secret value leaked into the Revision: {stored}");
        }

        // Conflict policy adopt: the same conflict is listed as adopted, with its manager.
        let patch = json!({"spec": {"sync": {"conflictPolicy": "adopt"}}});
        env.apps().patch("web", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
        let rev = env
            .revision_where("web", "adopted fields", |r| {
                entries(r).iter().any(|e| e.resource.name == "a" && !e.adopted.is_empty())
            })
            .await;
        let e = entries(&rev);
        let a = entry(&e, "ConfigMap", "a");
        assert_eq!(a.action, PlanAction::Update);
        assert!(a.conflicts.is_empty());
        assert_eq!((a.adopted[0].field.as_str(), a.adopted[0].manager.as_str()), (".data.color", "kubectl-edit"));

        // A file removed from Git: a new Revision, and the object it declared is deleted.
        wt.git(&["rm", "--quiet", "web/b.yaml"]);
        let second = wt.commit_and_push("web: drop b");
        env.refresh("platform", &second).await;
        let rev2 = env
            .revision_where("web", "a Delete entry on the new commit's Revision", |r| {
                r.spec.source.commit == second && action_of(r, "ConfigMap", "b") == Some(PlanAction::Delete)
            })
            .await;
        assert_ne!(rev2.name_any(), rev.name_any());
        assert_eq!(entries(&rev2).last().unwrap().resource.name, "b", "deletes come last");
        // Both Revisions are kept (limit 2).
        let revs = env.revisions().list(&ListParams::default().labels("sync.kuvryn.io/application=web")).await.unwrap();
        assert_eq!(revs.items.len(), 2);

        // A third commit: the oldest Revision goes (history limit 2), the new one is desired.
        wt.write("web/c.yaml", &CM_B.replace("name: b", "name: c"));
        let third = wt.commit_and_push("web: add c");
        env.refresh("platform", &third).await;
        let rev3 =
            env.revision_where("web", "the third commit's plan", |r| r.spec.source.commit == third && planned(r)).await;
        assert_eq!(action_of(&rev3, "ConfigMap", "c"), Some(PlanAction::Create));
        let remaining = eventually("the oldest Revision to be deleted", WAIT, || async {
            let revs =
                env.revisions().list(&ListParams::default().labels("sync.kuvryn.io/application=web")).await.ok()?;
            let mut names: Vec<String> = revs.items.iter().map(|r| r.name_any()).collect();
            names.sort();
            (names.len() == 2).then_some(names)
        })
        .await;
        let mut want = vec![rev2.name_any(), rev3.name_any()];
        want.sort();
        assert_eq!(remaining, want);

        // An Event tells each Revision's creation: `NewRevision`, or the later step of the same
        // reconcile it was told with (`Progressing`, `Succeeded`).
        let events = env.events("web").await;
        for r in [&rev, &rev2, &rev3] {
            let created = format!("Revision {} for commit", r.name_any());
            let told = events.iter().find(|e| e.2.contains(&created));
            assert!(
                told.is_some_and(|e| [names::events::NEW_REVISION, "Progressing", "Succeeded"].contains(&e.1.as_str())),
                "{created}: {events:#?}"
            );
        }
        assert!(events.iter().any(|e| e.2.contains("web: add c")), "{events:#?}");
    });
}

fn failures_are_reported_and_nothing_is_touched(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::start(&cluster, "fail-test").await;
        let wt = env.repository("platform").await;
        wt.write("outside/a.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: kube-system\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: mine\n");
        wt.write("broken/a.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: [\n");
        wt.write("ok/a.yaml", CM_B);
        let commit = wt.commit_and_push("three paths");
        wt.git(&["tag", "v1"]);
        wt.git(&["push", "--quiet", "origin", "v1"]);
        env.refresh("platform", &commit).await;
        let app = |path: &str, sa: &str| {
            json!({"source": {"repository": "platform", "path": path}, "serviceAccountName": sa,
                   "destination": {"namespace": "fail-test"}})
        };
        env.create_app("outside", app("outside", "deployer")).await;
        env.create_app("broken", app("broken", "deployer")).await;
        env.create_app("nobody", app("ok", "nobody")).await;
        let mut pinned = app("ok", "deployer");
        pinned["source"]["revision"] = json!("v1");
        pinned["sync"] = json!({"automatic": false});
        env.create_app("pinned", pinned).await;

        // Validation: every problem listed, Stalled, on the Revision and the Application.
        let rev = env
            .revision_where("outside", "a ValidationFailure", |r| {
                r.status.as_ref().and_then(|s| s.failure.as_ref()).is_some_and(|f| f.reason == "ValidationFailure")
            })
            .await;
        let status = rev.status.unwrap();
        assert!(matches!(status.phase, RevisionPhase::Failed));
        let stalled = conditions::get(&status.conditions, names::conditions::STALLED).unwrap();
        assert_eq!((stalled.status.as_str(), stalled.reason.as_str()), ("True", "ValidationFailure"));
        let rev_ready = conditions::get(&status.conditions, names::conditions::READY).unwrap();
        assert_eq!((rev_ready.status.as_str(), rev_ready.reason.as_str()), ("False", "ValidationFailure"));
        let failure = status.failure.unwrap();
        assert!(!failure.retryable);
        assert!(failure.message.contains("2 problems"), "{}", failure.message);
        assert!(failure.message.contains("ConfigMap a: namespace \"kube-system\" is outside the destination"), "{}", failure.message);
        assert!(failure.message.contains("Namespace mine: cluster-scoped Namespace"), "{}", failure.message);
        let a = env.apps().get("outside").await.unwrap().status.unwrap();
        let ready = conditions::get(&a.conditions, names::conditions::READY).unwrap();
        assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "ValidationFailure"));
        assert!(conditions::is_true(&a.conditions, names::conditions::STALLED));
        let events = eventually("a ValidationFailure Event", WAIT, || async {
            let ev = env.events("outside").await;
            ev.iter().any(|e| e.0 == "Warning" && e.1 == "ValidationFailure").then_some(ev)
        })
        .await;
        assert!(events.iter().any(|e| e.2.contains("kube-system")), "{events:#?}");

        // A render failure.
        let rev = env
            .revision_where("broken", "a RenderFailure", |r| {
                r.status.as_ref().and_then(|s| s.failure.as_ref()).is_some_and(|f| f.reason == "RenderFailure")
            })
            .await;
        assert!(rev.status.unwrap().failure.unwrap().message.contains("a.yaml"));

        // A service account without permissions: the API's own message, retried.
        let rev = env
            .revision_where("nobody", "an ApplyFailure", |r| {
                r.status.as_ref().and_then(|s| s.failure.as_ref()).is_some_and(|f| f.reason == "ApplyFailure")
            })
            .await;
        let failure = rev.status.unwrap().failure.unwrap();
        assert!(failure.retryable);
        assert!(failure.message.contains("forbidden"), "{}", failure.message);
        assert!(failure.message.contains("system:serviceaccount:fail-test:nobody"), "{}", failure.message);

        // See: issue 18. A Helm release name that helm would take for a flag: refused by the
        // API server (the CRD's CEL rule), so no Application carries it to the controller.
        let mut flag = app("ok", "deployer");
        flag["source"]["render"] = json!({"type": "Helm", "helm": {"releaseName": "--set-file=x=/proc/1/environ"}});
        let flag: kuvryn_sync::api::Application = serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "flag", "namespace": "fail-test"}, "spec": flag}))
        .unwrap();
        match env.apps().create(&Default::default(), &flag).await {
            Err(kube::Error::Api(s)) => {
                assert_eq!(s.code, 422, "{s:?}");
                assert!(s.message.contains("releaseName must be a Helm release name"), "{}", s.message);
            }
            other => panic!("an Application with releaseName --set-file=... was not refused: {other:?}"),
        }

        // spec.source.revision: a tag of the same repository.
        let rev = env.revision_where("pinned", "a plan of the tag", planned).await;
        assert_eq!(rev.spec.source.commit, commit);
        assert_eq!(action_of(&rev, "ConfigMap", "b"), Some(PlanAction::Create));

        // Nothing was created anywhere.
        for ns in ["fail-test", "kube-system"] {
            let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), ns);
            assert!(cms.get_opt("a").await.unwrap().is_none());
            assert!(cms.get_opt("b").await.unwrap().is_none());
        }
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(env.client.clone());
        assert!(namespaces.get_opt("mine").await.unwrap().is_none());
    });
}

/// Figures for `docs/performance.md` (ignored: run with `cargo test --release --test application
/// -- --ignored --nocapture`): the whole reconcile of one Application of 1,000 objects (render,
/// validate, 1,000 live reads and dry-run applies, plan, Revision) and of 200 Applications of 5
/// objects, against simcluster.
#[test]
#[ignore]
fn plan_load() {
    let cluster = Cluster::start();
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::start(&cluster, "plan-load").await;
        let wt = env.repository("platform").await;
        let cm = |name: &str| {
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  k: v\n  n: {name}\n")
        };
        let mut big = String::new();
        for i in 0..1000 {
            big.push_str(&cm(&format!("big-{i}")));
            big.push_str("---\n");
        }
        wt.write("big/all.yaml", &big);
        const SMALL: usize = 200;
        for a in 0..SMALL {
            for i in 0..5 {
                wt.write(&format!("small/{a}/{i}.yaml"), &cm(&format!("s{a}-{i}")));
            }
        }
        let commit = wt.commit_and_push("load");
        env.refresh("platform", &commit).await;
        let spec = |path: &str| {
            json!({"source": {"repository": "platform", "path": path}, "serviceAccountName": "deployer",
                   "destination": {"namespace": "plan-load"}})
        };
        let started = std::time::Instant::now();
        env.create_app("big", spec("big")).await;
        env.revision_where("big", "the big plan", planned).await;
        let fresh = started.elapsed();
        for i in 0..1000 {
            apply_desired(&env, "big", &cm(&format!("big-{i}"))).await;
        }
        let started = std::time::Instant::now();
        env.poke("big", "applied").await;
        env.revision_where("big", "an all-Unchanged big plan", |r| {
            r.status.as_ref().and_then(|s| s.plan.as_ref()).is_some_and(|p| p.summary.unchanged == 1000)
        })
        .await;
        let existing = started.elapsed();
        let started = std::time::Instant::now();
        for a in 0..SMALL {
            env.create_app(&format!("small-{a}"), spec(&format!("small/{a}"))).await;
        }
        for a in 0..SMALL {
            env.revision_where(&format!("small-{a}"), "a small plan", planned).await;
        }
        let small = started.elapsed();
        println!("1 Application of 1,000 ConfigMaps, fresh namespace (all Create): {fresh:.2?}");
        println!("the same, all 1,000 existing (1,000 reads + 1,000 dry-run applies): {existing:.2?}");
        println!("{SMALL} Applications of 5 ConfigMaps, created at once until all planned: {small:.2?}");
    });
}

/// A desired Revision deleted by hand is created again by the next reconcile: the copy the
/// controller kept of it is not used once the Revision watch shows it gone
/// (`src/controller/application/revision_cache.rs`).
fn a_desired_revision_deleted_by_hand_is_created_again(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let ns = "revision-deleted";
        let env = Env::start(&cluster, ns).await;
        env.app_from(
            "web",
            &[("web/b.yaml", CM_B)],
            json!({"source": {"repository": "platform", "path": "web"}, "serviceAccountName": "deployer",
                   "destination": {"namespace": ns}}),
        )
        .await;
        let first = env
            .revision_where("web", "web Healthy", |r| {
                r.status.as_ref().is_some_and(|s| s.phase == RevisionPhase::Healthy)
            })
            .await;
        // A resync after the last write: the next reconcile would take the copy kept.
        env.poke("web", "settled").await;
        eventually("the poke handled", WAIT, || async {
            let app = env.apps().get("web").await.ok()?;
            (app.status?.last_handled_reconcile_at.as_deref() == Some("settled")).then_some(())
        })
        .await;
        env.revisions().delete(&first.name_any(), &kube::api::DeleteParams::default()).await.unwrap();
        eventually("the Revision gone", WAIT, || async {
            env.revisions().get_opt(&first.name_any()).await.ok()?.is_none().then_some(())
        })
        .await;
        env.poke("web", "deleted").await;
        let again = env.revision_where("web", "the Revision created again", |r| r.uid() != first.uid()).await;
        assert_eq!(again.name_any(), first.name_any(), "the same identity, so the same name");
    });
}

// See: issue 44 (trust boundaries, round two): the chaos run's slow convergence.
/// A new commit reaches its Application while the controller's watches start over: after a
/// compaction every watch fails at once (410 on resume), and the lists of five kinds fail four
/// times more. kube's `Controller` held back every trigger for one backoff period per error of
/// any of its watches, so the Repository's new commit waited a minute or more; each watch now
/// backs off alone (`controller::EachWatchBacksOff`). simcluster only: a real server cannot be
/// made to compact its watch history on demand.
fn a_new_commit_is_not_held_back_by_failing_watches(cluster: Cluster) {
    let sim = cluster.sim().expect("simcluster");
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let ns = "watch-errors";
        let env = Env::start(&cluster, ns).await;
        let wt = env
            .app_from(
                "web",
                &[("web/b.yaml", CM_B)],
                json!({"source": {"repository": "platform", "path": "web"}, "serviceAccountName": "deployer",
                       "destination": {"namespace": ns}, "sync": {"automatic": false}}),
            )
            .await;
        env.revision_where("web", "a plan", planned).await;
        for resource in ["secrets", "services", "deployments", "statefulsets", "daemonsets"] {
            sim.add_fault(simcluster::faults::FaultRule {
                verb: Some("list".into()),
                resource: Some(resource.into()),
                action: Some(simcluster::faults::FaultAction::Status { code: 500 }),
                times: Some(4),
                ..Default::default()
            });
        }
        sim.compact();
        sim.drop_watches(None);
        let second = wt.write("web/b.yaml", &CM_B.replace("k: v", "k: w")).commit_and_push("web: b changes");
        env.refresh("platform", &second).await;
        // Without the fix: a minute or more (the sum of the backoffs of the errors ahead).
        eventually("web planned at the new commit", std::time::Duration::from_secs(20), || async {
            let app = env.apps().get("web").await.ok()?;
            (app.status?.sync?.commit.as_deref() == Some(second.as_str())).then_some(())
        })
        .await;
        // The watches did fail (and, failing, did not hold up the rest): every list refused.
        eventually("every refusal used", WAIT, || async { (sim.fault_times_left() == 0).then_some(()) }).await;
    });
}

testkit::both!(
    plans_follow_git_and_the_cluster,
    failures_are_reported_and_nothing_is_touched,
    a_desired_revision_deleted_by_hand_is_created_again,
);

mod a_new_commit_is_not_held_back_by_failing_watches {
    #[test]
    fn simcluster() {
        super::a_new_commit_is_not_held_back_by_failing_watches(testkit::Cluster::start());
    }
}
