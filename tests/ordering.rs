//! Rollout order within an Application, end to end on both servers (simcluster, and realkube with
//! simulated Nodes): sync waves, each Healthy before the next is applied.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kuvryn_sync::api::names;
use kuvryn_sync::api::revision::{AttemptResult, PlanAction, RevisionPhase};
use serde_json::json;
use testkit::Cluster;
use testkit::apps::{Env, entries};
use testkit::manifests::deployment;

const SETTINGS: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  color: blue\n";

/// A Job whose one Pod runs for `run_ms`, in wave `wave`.
fn job(wave: i32, run_ms: u32) -> String {
    format!(
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: migrate\n  annotations: {{sync.kuvryn.io/sync-wave: \"{wave}\"}}\nspec:\n  backoffLimit: 0\n  template:\n    metadata:\n      annotations: {{simcluster.kuvryn.io/run-ms: \"{run_ms}\"}}\n    spec:\n      restartPolicy: Never\n      containers:\n      - name: migrate\n        image: busybox:1.36\n"
    )
}

/// A Deployment `web` in wave `wave` whose Pods read the `settings` ConfigMap.
fn web(wave: i32, image: &str) -> String {
    deployment("web")
        .wave(wave)
        .ready_ms(1000)
        .image(image)
        .env_from_config_map("COLOR", "settings", "color")
        .to_string()
}

/// A ConfigMap `name` in wave `wave`.
fn config(name: &str, wave: i32) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  annotations: {{sync.kuvryn.io/sync-wave: \"{wave}\"}}\ndata:\n  k: v\n"
    )
}

/// The Application `app` of this file's scenarios: path `app`, one attempt, `timeout` per wave.
fn spec(ns: &str, timeout: &str) -> serde_json::Value {
    json!({"source": {"repository": "platform", "path": "app"}, "serviceAccountName": "deployer",
           "destination": {"namespace": ns}, "health": {"timeout": timeout}, "failurePolicy": {"maxAttempts": 1}})
}

fn borrowed<'a>(files: &'a [(&'a str, String)]) -> Vec<(&'a str, &'a str)> {
    files.iter().map(|(p, t)| (*p, t.as_str())).collect()
}

fn time_of(t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>, what: &str) -> jiff::Timestamp {
    t.unwrap_or_else(|| panic!("{what} has no time")).0
}

/// Wave 0 (a ConfigMap and a Job running for 3 s), wave 1 (a Deployment reading the ConfigMap),
/// wave 2 (a ConfigMap): each wave is created only once the waves before it are Healthy.
fn waves_are_applied_in_order_each_healthy_before_the_next(cluster: Cluster) {
    const NS: &str = "waves";
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::start(&cluster, NS).await;
        let files = [
            ("app/settings.yaml", SETTINGS.to_string()),
            ("app/job.yaml", job(0, 3000)),
            ("app/deploy.yaml", web(1, "nginx:1.27")),
            ("app/after.yaml", config("after", 2)),
        ];
        env.app_from("app", &borrowed(&files), spec(NS, "60s")).await;
        let rev = env
            .revision_where("app", "the Revision Healthy", |r| {
                r.status.as_ref().is_some_and(|s| s.phase == RevisionPhase::Healthy)
            })
            .await;
        let st = rev.status.clone().unwrap();
        let attempt = st.attempts.last().unwrap();
        assert_eq!((attempt.result, attempt.wave), (AttemptResult::Succeeded, Some(2)));
        let waves: Vec<(String, i32)> = entries(&rev).iter().map(|e| (e.resource.name.clone(), e.wave)).collect();
        assert_eq!(
            waves,
            [("settings".to_string(), 0), ("migrate".into(), 0), ("web".into(), 1), ("after".into(), 2)],
            "the stored plan in apply order, with waves"
        );

        // Created in order, each after the wave before was Healthy (API times have seconds).
        let jobs: Api<Job> = Api::namespaced(env.client.clone(), NS);
        let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), NS);
        let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), NS);
        let job = jobs.get("migrate").await.unwrap();
        let completed = time_of(job.status.as_ref().and_then(|s| s.completion_time.as_ref()), "the Job's completion");
        let web = deployments.get("web").await.unwrap();
        let created = time_of(web.metadata.creation_timestamp.as_ref(), "the Deployment");
        assert!(completed <= created, "wave 1 created at {created}, before wave 0's Job completed at {completed}");
        let available = web
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| {
                c.iter().find(|c| c.type_.as_deref() == Some("Available") && c.status.as_deref() == Some("True"))
            })
            .map(|c| time_of(c.last_transition_time.as_ref(), "Available"))
            .expect("the Deployment Available");
        let after = cms.get("after").await.unwrap();
        let after_created = time_of(after.metadata.creation_timestamp.as_ref(), "the wave 2 ConfigMap");
        assert!(
            available <= after_created,
            "wave 2 created at {after_created}, before wave 1 was Available at {available}"
        );
        if let Some(sim) = cluster.sim() {
            // simcluster's audit log, in order: every write of wave 0 before any of wave 1.
            let writes: Vec<String> = sim
                .audit_log()
                .into_iter()
                .filter(|e| e.field_manager == names::FIELD_MANAGER && e.verb == "patch" && !e.dry_run)
                .map(|e| format!("{}/{}", e.resource, e.name))
                .collect();
            assert_eq!(
                writes,
                ["configmaps/settings", "jobs/migrate", "deployments/web", "configmaps/after"],
                "the writes of the rollout"
            );
        }
        // Each wave is named as it starts and completes.
        let events: Vec<String> = env.events("app").await.into_iter().map(|e| e.2).collect();
        for want in [
            "wave 0: applying 2 of its 2 objects",
            "wave 0 is Healthy",
            "wave 1: applying",
            "wave 1 is Healthy",
            "wave 2: applying",
        ] {
            assert!(events.iter().any(|m| m.contains(want)), "no Event saying {want:?}: {events:#?}");
        }
    });
}

/// A wave that never turns Healthy fails the attempt, naming the wave, and the waves after it
/// are never applied.
fn a_wave_that_never_turns_healthy_stops_the_rollout(cluster: Cluster) {
    const NS: &str = "stuck-wave";
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::start(&cluster, NS).await;
        let files = [
            ("app/settings.yaml", SETTINGS.to_string()),
            ("app/deploy.yaml", web(0, "registry.invalid/web:1")),
            ("app/never.yaml", config("never", 1)),
        ];
        env.app_from("app", &borrowed(&files), spec(NS, "5s")).await;
        let rev = env.failed_revision("app").await;
        let st = rev.status.clone().unwrap();
        let failure = st.failure.clone().unwrap();
        assert_eq!(failure.reason, "HealthTimeout");
        assert!(
            failure.message.starts_with("wave 0: not Healthy within spec.health.timeout (5s)"),
            "{}",
            failure.message
        );
        assert!(failure.message.contains("Deployment stuck-wave/web"), "{}", failure.message);
        assert_eq!(st.attempts.last().map(|a| (a.result, a.wave)), Some((AttemptResult::Failed, Some(0))));
        let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), NS);
        assert!(cms.get_opt("never").await.unwrap().is_none(), "wave 1 was applied");
        let e = entries(&rev);
        let never = e.iter().find(|e| e.resource.name == "never").expect("wave 1 in the plan");
        assert_eq!((never.action, never.wave), (PlanAction::Create, 1));
        if let Some(sim) = cluster.sim() {
            let touched: Vec<_> = sim.audit_log().into_iter().filter(|e| e.name == "never").collect();
            assert!(touched.iter().all(|e| e.dry_run), "only dry runs of wave 1: {touched:#?}");
        }
        // The Application's status is written after the Revision's.
        let ready = testkit::eventually("the Application to report the failure", testkit::apps::WAIT, || async {
            let app = env.apps().get("app").await.ok()?;
            let ready = app
                .status
                .as_ref()
                .and_then(|s| kuvryn_sync::api::conditions::get(&s.conditions, names::conditions::READY))
                .cloned()?;
            (ready.reason == "HealthTimeout").then_some(ready)
        })
        .await;
        assert!(ready.message.contains("wave 0: "), "{}", ready.message);

        // `spec.strategy.waves: false` and a new attempt: one group, so wave 1 is written with
        // the broken Deployment, and every entry is in wave 0.
        let patch = json!({"spec": {"strategy": {"waves": false}},
                           "metadata": {"annotations": {names::annotations::RECONCILE_REQUESTED_AT: "one group"}}});
        env.apps().patch("app", &Default::default(), &kube::api::Patch::Merge(&patch)).await.unwrap();
        testkit::eventually("wave 1 written with wave 0", testkit::apps::WAIT, || async {
            cms.get_opt("never").await.ok()?.map(|_| ())
        })
        .await;
        let rev = env
            .revision_where("app", "a plan in one group", |r| {
                let e = entries(r);
                !e.is_empty()
                    && e.iter().all(|e| e.wave == 0)
                    && r.status.as_ref().is_some_and(|s| s.attempts.len() == 2)
            })
            .await;
        assert_eq!(rev.status.unwrap().attempts[1].wave, None);
    });
}

/// Waves turned off while an attempt waits for wave 0: the rest is applied at once, in one
/// group, and the attempt completes.
fn waves_turned_off_mid_rollout_apply_the_rest_at_once(cluster: Cluster) {
    const NS: &str = "waves-off";
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::start(&cluster, NS).await;
        let files = [("app/job.yaml", job(0, 15_000)), ("app/after.yaml", config("after", 1))];
        env.app_from("app", &borrowed(&files), spec(NS, "60s")).await;
        env.revision_where("app", "the attempt waiting for wave 0", |r| {
            r.status
                .as_ref()
                .and_then(|s| s.attempts.last())
                .is_some_and(|a| a.result == AttemptResult::Running && a.wave == Some(0))
        })
        .await;
        let patch = json!({"spec": {"strategy": {"waves": false}}});
        env.apps().patch("app", &Default::default(), &kube::api::Patch::Merge(&patch)).await.unwrap();
        let rev = env
            .revision_where("app", "the Revision Healthy", |r| {
                r.status.as_ref().is_some_and(|s| s.phase == RevisionPhase::Healthy)
            })
            .await;
        let st = rev.status.unwrap();
        assert_eq!(st.attempts.len(), 1, "one attempt: {:?}", st.attempts);
        assert_eq!((st.attempts[0].result, st.attempts[0].wave), (AttemptResult::Succeeded, None));
        let jobs: Api<Job> = Api::namespaced(env.client.clone(), NS);
        let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), NS);
        let job = jobs.get("migrate").await.unwrap();
        let completed = time_of(job.status.as_ref().and_then(|s| s.completion_time.as_ref()), "the Job's completion");
        let after = cms.get("after").await.unwrap();
        let created = time_of(after.metadata.creation_timestamp.as_ref(), "the wave 1 ConfigMap");
        assert!(created < completed, "wave 1 waited for wave 0 ({created}, {completed}) after waves were turned off");
    });
}

testkit::both!(
    waves_are_applied_in_order_each_healthy_before_the_next,
    a_wave_that_never_turns_healthy_stops_the_rollout,
    waves_turned_off_mid_rollout_apply_the_rest_at_once,
);
