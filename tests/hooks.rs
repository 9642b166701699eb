//! Sync hooks end to end on both servers (simcluster, and realkube with simulated Nodes: Jobs get
//! Pods from kube-controller-manager and simcluster's node simulation runs them, so every
//! scenario here runs on both): PreSync before any apply, PostSync after Healthy, SyncFail on
//! a failed attempt, delete policies, and a Helm chart's own hooks.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Api;
use kuvryn_sync::api::names;
use kuvryn_sync::api::revision::{AttemptResult, HookPhase, PlanAction, RevisionPhase};
use serde_json::json;
use testkit::Cluster;
use testkit::apps::{Env, entries, entry};

/// A Job hook of `phase` whose one Pod runs for `run_ms` and exits with `exit`, with extra
/// annotations `more` (YAML flow mappings' inside, e.g. `"a: b, "`).
fn hook_job(name: &str, phase: &str, more: &str, run_ms: u32, exit: u8) -> String {
    format!(
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {name}\n  annotations: {{{more}sync.kuvryn.io/hook: {phase}}}\nspec:\n  backoffLimit: 0\n  template:\n    metadata:\n      annotations: {{simcluster.kuvryn.io/run-ms: \"{run_ms}\"}}\n    spec:\n      restartPolicy: Never\n      containers:\n      - name: hook\n        image: busybox:1.36\n        env:\n        - {{name: SIMCLUSTER_EXIT_CODE, value: \"{exit}\"}}\n"
    )
}

fn config(name: &str, value: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  k: \"{value}\"\n")
}

const DEPLOYMENT: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n      annotations: {simcluster.kuvryn.io/ready-ms: \"1000\"}\n    spec:\n      containers:\n      - name: web\n        image: nginx:1.27\n";

fn time_of(t: Option<&Time>, what: &str) -> jiff::Timestamp {
    t.unwrap_or_else(|| panic!("{what} has no time")).0
}

fn job_finished(job: &Job, what: &str) -> jiff::Timestamp {
    let s = job.status.as_ref().unwrap_or_else(|| panic!("{what} has no status"));
    s.completion_time.as_ref().map(|t| t.0).unwrap_or_else(|| {
        s.conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "Failed" && c.status == "True")
            .map(|c| time_of(c.last_transition_time.as_ref(), what))
            .unwrap_or_else(|| panic!("{what} has not finished"))
    })
}

fn spec(ns: &str, path: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut s = json!({"source": {"repository": "platform", "path": path}, "serviceAccountName": "deployer",
                       "destination": {"namespace": ns}, "health": {"timeout": "60s"},
                       "failurePolicy": {"maxAttempts": 1}});
    if let (Some(s), Some(extra)) = (s.as_object_mut(), extra.as_object()) {
        s.extend(extra.clone());
    }
    s
}

/// The Application's status after the Revision's: its Ready reason.
async fn app_ready_reason(env: &Env, want: &str) {
    testkit::eventually("the Application's Ready reason", testkit::apps::WAIT, || async {
        let app = env.apps().get("app").await.ok()?;
        let ready = app
            .status
            .as_ref()
            .and_then(|s| kuvryn_sync::api::conditions::get(&s.conditions, names::conditions::READY))
            .cloned()?;
        (ready.reason == want).then_some(())
    })
    .await;
}

/// A PreSync Job completes before anything is applied; a PostSync Job is created once the
/// Deployment is Available, and deleted once it succeeded (`HookSucceeded`). Hooks are plan
/// entries, not managed resources, and never drift. A second rollout runs the PreSync hook
/// again, as a new object (`BeforeHookCreation`).
fn presync_before_any_apply_and_postsync_after_healthy(cluster: Cluster) {
    const NS: &str = "hooks";
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::start(&cluster, NS).await;
        let post = hook_job("smoke", "PostSync", "sync.kuvryn.io/hook-delete-policy: HookSucceeded, ", 500, 0);
        let wt = env
            .app_from(
                "app",
                &[
                    ("app/pre.yaml", &hook_job("migrate", "PreSync", "", 3000, 0)),
                    ("app/settings.yaml", &config("settings", "1")),
                    ("app/deploy.yaml", DEPLOYMENT),
                    ("app/post.yaml", &post),
                ],
                spec(NS, "app", json!({})),
            )
            .await;
        let jobs: Api<Job> = Api::namespaced(env.client.clone(), NS);
        let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), NS);
        let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), NS);
        // The PostSync Job exists between its creation and its deletion: catch it.
        let smoke = testkit::eventually("the PostSync Job", testkit::apps::WAIT, || async {
            jobs.get_opt("smoke").await.ok().flatten()
        })
        .await;
        let rev = env
            .revision_where("app", "the Revision Healthy", |r| {
                r.status.as_ref().is_some_and(|s| s.phase == RevisionPhase::Healthy)
            })
            .await;
        let st = rev.status.clone().unwrap();
        assert_eq!(
            st.attempts.last().map(|a| (a.result, a.hook)),
            Some((AttemptResult::Succeeded, Some(HookPhase::PostSync)))
        );
        let e = entries(&rev);
        assert_eq!(
            (entry(&e, "Job", "migrate").hook, entry(&e, "Job", "migrate").action),
            (Some(HookPhase::PreSync), PlanAction::Create)
        );
        assert_eq!(entry(&e, "Job", "smoke").hook, Some(HookPhase::PostSync));
        assert_eq!(entry(&e, "ConfigMap", "settings").hook, None);
        let names_in_order: Vec<&str> = e.iter().map(|e| e.resource.name.as_str()).collect();
        assert_eq!(names_in_order, ["migrate", "settings", "web", "smoke"], "PreSync first, PostSync last");

        // PreSync completed before the first apply; PostSync created once the Deployment was
        // Available.
        let migrate = jobs.get("migrate").await.unwrap();
        let pre_done = job_finished(&migrate, "the PreSync Job");
        let settings = cms.get("settings").await.unwrap();
        let applied = time_of(settings.metadata.creation_timestamp.as_ref(), "the ConfigMap");
        assert!(pre_done <= applied, "the ConfigMap was applied at {applied}, before PreSync completed at {pre_done}");
        let web = deployments.get("web").await.unwrap();
        let available = web
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| {
                c.iter().find(|c| c.type_.as_deref() == Some("Available") && c.status.as_deref() == Some("True"))
            })
            .map(|c| time_of(c.last_transition_time.as_ref(), "Available"))
            .expect("the Deployment Available");
        let post_created = time_of(smoke.metadata.creation_timestamp.as_ref(), "the PostSync Job");
        assert!(available <= post_created, "PostSync created at {post_created}, before Available at {available}");
        if let Some(sim) = cluster.sim() {
            // The audit log, in order: the PreSync hook's create, then the applies, then PostSync.
            let writes: Vec<String> = sim
                .audit_log()
                .into_iter()
                .filter(|e| {
                    e.field_manager == names::FIELD_MANAGER && !e.dry_run && (e.verb == "patch" || e.verb == "create")
                })
                .map(|e| format!("{} {}/{}", e.verb, e.resource, e.name).trim_end_matches('/').to_string())
                .collect();
            assert_eq!(
                writes,
                ["create jobs/migrate", "patch configmaps/settings", "patch deployments/web", "create jobs/smoke"],
                "the writes of the rollout"
            );
        }
        // HookSucceeded: the PostSync Job is deleted; the PreSync Job (BeforeHookCreation) stays.
        testkit::eventually("the PostSync Job deleted", testkit::apps::WAIT, || async {
            jobs.get_opt("smoke").await.ok()?.is_none().then_some(())
        })
        .await;
        let labels = migrate.metadata.labels.clone().unwrap_or_default();
        assert!(!labels.contains_key(names::labels::APPLICATION_ID), "a hook in the inventory: {labels:?}");
        assert!(labels.contains_key(names::labels::HOOK_OF), "{labels:?}");
        app_ready_reason(&env, "Succeeded").await;
        let app = env.apps().get("app").await.unwrap();
        let sync = app.status.as_ref().and_then(|s| s.sync.clone()).unwrap();
        assert!(sync.drifted.is_empty(), "hooks reported as drift: {:?}", sync.drifted);
        let events: Vec<(String, String, String)> = env.events("app").await;
        for want in [
            "PreSync hook Job hooks/migrate: created",
            "PreSync hook Job hooks/migrate succeeded",
            "PostSync hook Job hooks/smoke succeeded",
        ] {
            assert!(
                events.iter().any(|e| e.2.contains(want) && e.1 == "Progressing"),
                "no Event {want:?}: {events:#?}"
            );
        }

        // A new commit: the PreSync hook runs again, as a new object.
        wt.write("app/settings.yaml", &config("settings", "2"));
        let commit = wt.commit_and_push("settings 2");
        env.refresh("platform", &commit).await;
        let first_uid = migrate.metadata.uid.clone();
        let rerun = testkit::eventually("the PreSync Job created again", testkit::apps::WAIT, || async {
            let j = jobs.get_opt("migrate").await.ok()??;
            (j.metadata.uid != first_uid).then_some(j)
        })
        .await;
        env.revision_where("app", "the second Revision Healthy", |r| {
            r.spec.source.commit == commit && r.status.as_ref().is_some_and(|s| s.phase == RevisionPhase::Healthy)
        })
        .await;
        let settings = cms.get("settings").await.unwrap();
        assert_eq!(settings.data.unwrap()["k"], "2");
        let rerun_done = job_finished(&jobs.get("migrate").await.unwrap(), "the second PreSync Job");
        assert!(rerun.metadata.uid.is_some() && rerun_done >= pre_done);
    });
}

/// A failing PreSync Job fails the attempt with nothing of the plan applied; the SyncFail hook
/// runs after it, and the failure names the hook.
fn a_failing_presync_hook_fails_the_attempt_and_runs_syncfail(cluster: Cluster) {
    const NS: &str = "hooks-fail";
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::start(&cluster, NS).await;
        env.app_from(
            "app",
            &[
                ("app/pre.yaml", &hook_job("migrate", "PreSync", "", 500, 1)),
                ("app/settings.yaml", &config("settings", "1")),
                ("app/fail.yaml", &hook_job("page", "SyncFail", "", 200, 0)),
            ],
            spec(NS, "app", json!({})),
        )
        .await;
        let rev = env.failed_revision("app").await;
        let st = rev.status.clone().unwrap();
        let failure = st.failure.clone().unwrap();
        assert_eq!(failure.reason, "Degraded");
        assert!(
            failure.message.starts_with("PreSync hook Job hooks-fail/migrate failed: Job failed"),
            "{}",
            failure.message
        );
        assert_eq!(
            st.attempts.last().map(|a| (a.result, a.hook)),
            Some((AttemptResult::Failed, Some(HookPhase::SyncFail)))
        );
        let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), NS);
        assert!(cms.get_opt("settings").await.unwrap().is_none(), "applied after a failed PreSync hook");
        if let Some(sim) = cluster.sim() {
            let touched: Vec<_> = sim.audit_log().into_iter().filter(|e| e.name == "settings").collect();
            assert!(touched.iter().all(|e| e.dry_run), "only dry runs of the ConfigMap: {touched:#?}");
        }
        let jobs: Api<Job> = Api::namespaced(env.client.clone(), NS);
        let failed_at = job_finished(&jobs.get("migrate").await.unwrap(), "the PreSync Job");
        let page = jobs.get("page").await.expect("the SyncFail Job");
        let page_created = time_of(page.metadata.creation_timestamp.as_ref(), "the SyncFail Job");
        assert!(failed_at <= page_created, "SyncFail created at {page_created}, before PreSync failed at {failed_at}");
        job_finished(&page, "the SyncFail Job");
        app_ready_reason(&env, "Degraded").await;
        let events = env.events("app").await;
        assert!(
            events.iter().any(|e| e.0 == "Warning"
                && e.1 == "HookFailed"
                && e.2.contains("PreSync hook Job hooks-fail/migrate failed")),
            "no Warning for the failed hook: {events:#?}"
        );
        assert!(events.iter().any(|e| e.2.contains("SyncFail hook Job hooks-fail/page succeeded")), "{events:#?}");
    });
}

/// A Helm chart's own hooks: `pre-install,pre-upgrade` runs as PreSync (in the wave of its
/// `helm.sh/hook-weight`) and is deleted once it succeeded (`hook-succeeded`); a `test` hook is
/// never created; with `spec.strategy.hooks: false` no hook is created and the plan says why.
fn a_helm_charts_hooks_map_to_sync_hooks(cluster: Cluster) {
    const NS: &str = "helm-hooks";
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::start(&cluster, NS).await;
        let job = "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {{ .Release.Name }}-migrate\n  annotations:\n    helm.sh/hook: pre-install,pre-upgrade\n    helm.sh/hook-weight: \"-1\"\n    helm.sh/hook-delete-policy: hook-succeeded\nspec:\n  backoffLimit: 0\n  template:\n    metadata:\n      annotations: {simcluster.kuvryn.io/run-ms: \"2000\"}\n    spec:\n      restartPolicy: Never\n      containers:\n      - name: migrate\n        image: busybox:1.36\n";
        let test = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {{ .Release.Name }}-test\n  annotations:\n    helm.sh/hook: test\nspec:\n  restartPolicy: Never\n  containers:\n  - name: test\n    image: busybox:1.36\n";
        env.app_from(
            "app",
            &[
                ("chart/Chart.yaml", "apiVersion: v2\nname: web\nversion: 0.1.0\n"),
                ("chart/templates/migrate.yaml", job),
                ("chart/templates/test.yaml", test),
                ("chart/templates/settings.yaml", &config("{{ .Release.Name }}-settings", "1")),
            ],
            spec(NS, "chart", json!({"source": {"repository": "platform", "path": "chart", "render": {"type": "Helm"}}})),
        )
        .await;
        let jobs: Api<Job> = Api::namespaced(env.client.clone(), NS);
        let migrate = testkit::eventually("the pre-install Job", testkit::apps::WAIT, || async {
            jobs.get_opt("app-migrate").await.ok().flatten()
        })
        .await;
        let rev = env
            .revision_where("app", "the Revision Healthy", |r| {
                r.status.as_ref().is_some_and(|s| s.phase == RevisionPhase::Healthy)
            })
            .await;
        let e = entries(&rev);
        let m = entry(&e, "Job", "app-migrate");
        assert_eq!((m.hook, m.wave, m.action), (Some(HookPhase::PreSync), -1, PlanAction::Create));
        let t = entry(&e, "Pod", "app-test");
        assert_eq!((t.hook, t.action), (None, PlanAction::Skip));
        assert!(t.warning.as_deref().unwrap_or_default().contains("helm.sh/hook test is not run"), "{t:?}");
        let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), NS);
        let settings = cms.get("app-settings").await.unwrap();
        let applied = time_of(settings.metadata.creation_timestamp.as_ref(), "the ConfigMap");
        let created = time_of(migrate.metadata.creation_timestamp.as_ref(), "the Job");
        assert!(created <= applied);
        // hook-succeeded: deleted once it succeeded.
        testkit::eventually("the Job deleted", testkit::apps::WAIT, || async {
            jobs.get_opt("app-migrate").await.ok()?.is_none().then_some(())
        })
        .await;
        let pods: Api<Pod> = Api::namespaced(env.client.clone(), NS);
        assert!(pods.get_opt("app-test").await.unwrap().is_none(), "a Helm test hook was created");

        // Hooks off: another Application of the same chart skips every hook, its plan says why,
        // and no hook object is created.
        env.create_app(
            "off",
            spec(
                NS,
                "chart",
                json!({"source": {"repository": "platform", "path": "chart", "render": {"type": "Helm"}},
                       "strategy": {"hooks": false}}),
            ),
        )
        .await;
        let rev = env
            .revision_where("off", "the Revision Healthy without hooks", |r| {
                r.status.as_ref().is_some_and(|s| s.phase == RevisionPhase::Healthy)
            })
            .await;
        assert!(cms.get_opt("off-settings").await.unwrap().is_some());
        assert!(jobs.get_opt("off-migrate").await.unwrap().is_none(), "a hook ran with spec.strategy.hooks false");
        let e = entries(&rev);
        let m = entry(&e, "Job", "off-migrate");
        assert_eq!(m.action, PlanAction::Skip);
        assert_eq!(m.warning.as_deref(), Some("not run: spec.strategy.hooks is false"));
    });
}

/// An object already under a hook's name that this Application did not create as its hook (made
/// by hand here) is never deleted nor taken for the hook: the attempt fails naming it and
/// nothing of the plan is applied.
fn a_hook_never_takes_an_object_it_did_not_make(cluster: Cluster) {
    const NS: &str = "hooks-theirs";
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::start(&cluster, NS).await;
        let theirs = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "lock", "namespace": NS}, "data": {"owner": "a person"}});
        let made = testkit::apply_as(&env.client, "kubectl", &theirs).await;
        let lock = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: lock\n  annotations: {sync.kuvryn.io/hook: PreSync}\ndata:\n  owner: the hook\n";
        env.app_from(
            "app",
            &[("app/lock.yaml", lock), ("app/settings.yaml", &config("settings", "1"))],
            spec(NS, "app", json!({})),
        )
        .await;
        let rev = env.failed_revision("app").await;
        let failure = rev.status.unwrap().failure.unwrap();
        assert!(
            failure.message.contains("ConfigMap hooks-theirs/lock exists and is not a hook of this Application"),
            "{}",
            failure.message
        );
        let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), NS);
        let kept = cms.get("lock").await.unwrap();
        assert_eq!(kept.metadata.uid, made["metadata"]["uid"].as_str().map(str::to_string), "the same object");
        assert_eq!(kept.data.unwrap()["owner"], "a person");
        assert!(cms.get_opt("settings").await.unwrap().is_none(), "applied after a failed PreSync hook");
    });
}

testkit::both!(
    a_hook_never_takes_an_object_it_did_not_make,
    presync_before_any_apply_and_postsync_after_healthy,
    a_failing_presync_hook_fails_the_attempt_and_runs_syncfail,
    a_helm_charts_hooks_map_to_sync_hooks,
);
