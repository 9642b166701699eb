//! Manual-sync rollbacks end to end through the real manager binary (`ksync-controller run`, its
//! admission webhook on unless a test says otherwise), the real `ksync` and `kubectl`, and a real
//! Git server, on simcluster and realkube: the webhook's record of a request, its refusals and
//! restorations; a rollback whose rollout spans a manager restart; `ENABLE_WEBHOOKS=false`
//! trusting a hand-written request; and a target that renders differently since it deployed.
//!
//! These live in the root package, whose tests Cargo gives the `ksync-controller` it just built;
//! `ksync` is taken from beside it (see `testkit::ksync::bin`).

use std::time::Duration;

use futures_util::StreamExt as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kuvryn_sync::api::application::Application;
use kuvryn_sync::api::conditions;
use kuvryn_sync::api::names;
use kuvryn_sync::api::names::annotations as a;
use kuvryn_sync::api::revision::{Approval, AttemptResult, Revision, RevisionPhase};
use kuvryn_sync::plan::target_hash::rollback_target_hash;
use serde_json::{Value, json};
use testkit::apps::{Env, WAIT};
use testkit::manager::{Manager, SYSTEM, install_configuration};
use testkit::{Cluster, Tools, apply_as, eventually, ksync, temp_dir};

/// Starting a manager and its first reconciles take longer than one controller step.
const START: Duration = Duration::from_secs(120);

fn config(color: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  color: {color}\n")
}

fn manual(ns: &str) -> Value {
    json!({"source": {"repository": "platform", "path": "web"}, "serviceAccountName": "deployer",
           "destination": {"namespace": ns}, "sync": {"automatic": false}})
}

fn phase(r: &Revision) -> Option<RevisionPhase> {
    r.status.as_ref().map(|s| s.phase)
}

fn held_by(r: &Revision) -> Option<String> {
    let c = conditions::get(&r.status.as_ref()?.conditions, names::conditions::ROLLED_BACK)?;
    (c.status == "True").then(|| c.reason.clone())
}

fn approval(r: &Revision) -> Approval {
    r.status.as_ref().and_then(|s| s.approval.clone()).unwrap_or_else(|| panic!("no status.approval: {r:?}"))
}

fn has_request(app: &Application) -> bool {
    app.annotations().keys().any(|k| k.starts_with(a::ROLLBACK_PREFIX))
}

async fn color(cms: &Api<ConfigMap>) -> Option<String> {
    cms.get("settings").await.ok()?.data?.get("color").cloned()
}

/// The manager's rendering tools: the ones the tests installed, not whatever PATH has.
fn tool_args() -> Vec<String> {
    let tools = Tools::get();
    let path = |t: &str| tools.bin.join(t).display().to_string();
    vec!["--helm".into(), path("helm"), "--kubectl".into(), path("kubectl")]
}

/// A manager with `env` variables, and the webhook configuration reaching it unless
/// `ENABLE_WEBHOOKS=false` is among them; returns once the webhook answers.
async fn start_manager(cluster: &Cluster, client: &kube::Client, ns: &str, env: &[(&str, &str)]) -> Manager {
    apply_as(client, "test", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM}})).await;
    let args = tool_args();
    let manager = Manager::start(cluster, &args.iter().map(String::as_str).collect::<Vec<_>>(), env);
    if !env.contains(&("ENABLE_WEBHOOKS", "false")) {
        install_configuration(cluster, client, manager.port).await;
        manager.wait_until_served(client, ns).await;
    }
    manager
}

/// The user the API server says the admin kubeconfig is (what the webhook records).
async fn whoami(client: &kube::Client) -> String {
    let review = Api::<SelfSubjectReview>::all(client.clone())
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .expect("SelfSubjectReview");
    review.status.and_then(|s| s.user_info).and_then(|u| u.username).expect("username")
}

/// Wait for `web`'s Revision of `commit` to wait for approval, approve it with `ksync sync --yes`,
/// and return it Healthy.
async fn sync_commit(cluster: &Cluster, env: &Env, commit: &str) -> Revision {
    let waiting = env
        .revision_where("web", &format!("commit {commit} waiting for approval"), |r| {
            r.spec.source.commit == commit && phase(r) == Some(RevisionPhase::AwaitingApproval)
        })
        .await;
    env.planned_digest("web", &waiting.name_any()).await;
    ksync::ok(cluster, &env.ns, &["sync", "web", "--yes"]);
    env.revision_where("web", &format!("commit {commit} Healthy"), |r| {
        r.spec.source.commit == commit && phase(r) == Some(RevisionPhase::Healthy)
    })
    .await
}

/// The target hash the webhook and the controller expect for a rollback of `web` to `rev` now.
async fn expected_hash(env: &Env, rev: &str) -> String {
    let app = env.apps().get("web").await.unwrap();
    let target = env.revisions().get(rev).await.unwrap();
    let deployed = target.status.and_then(|s| s.deployed_desired_state_hash).expect("deployedDesiredStateHash");
    rollback_target_hash(&deployed, &app.spec.sync, &app.spec.strategy)
}

/// Run `write`, and return the annotations of the first stored version of `web` carrying a
/// rollback request: the controller may complete the rollback, removing them, before a read
/// after `write` would see them, and a watch sees every version.
async fn first_request(env: &Env, write: impl FnOnce()) -> std::collections::BTreeMap<String, String> {
    let version = env.apps().get("web").await.unwrap().resource_version().expect("resourceVersion");
    let mut stream = Box::pin(env.apps().watch(&WatchParams::default(), &version).await.expect("watch"));
    write();
    let found = tokio::time::timeout(WAIT, async {
        while let Some(event) = stream.next().await {
            if let Ok(WatchEvent::Modified(app)) = event
                && app.name_any() == "web"
                && app.annotations().contains_key(a::ROLLBACK_TO)
            {
                return Some(app.annotations().clone());
            }
        }
        None
    })
    .await;
    found.ok().flatten().expect("a stored rollback request")
}

/// `kubectl annotate --overwrite` of Application `web`, as a user writing by hand; (success,
/// stderr).
fn kubectl_annotate(cluster: &Cluster, ns: &str, annotations: &[(&str, &str)]) -> (bool, String) {
    let home = temp_dir("kubectl-home");
    let mut cmd = cluster.kubectl(&Tools::get(), home.path());
    cmd.args(["-n", ns, "annotate", "--overwrite", "applications.sync.kuvryn.io", "web"]);
    cmd.args(annotations.iter().map(|(k, v)| format!("{k}={v}")));
    let out = cmd.output().expect("kubectl");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn the_webhook_records_checks_and_restores_a_manual_sync_rollback(cluster: Cluster) {
    testkit::runtime().block_on(async {
        let ns = "rb-webhook";
        let env = Env::without_controllers(&cluster, ns).await;
        let _manager = start_manager(&cluster, &env.client, ns, &[]).await;
        let me = whoami(&env.client).await;
        let wt = env.app_from("web", &[("web/config.yaml", &config("blue"))], manual(ns)).await;
        let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), ns);
        let blue = wt.git(&["rev-parse", "HEAD"]).trim().to_string();
        let a_rev = sync_commit(&cluster, &env, &blue).await;
        let red = wt.write("web/config.yaml", &config("red")).commit_and_push("red");
        env.refresh("platform", &red).await;
        let b_rev = sync_commit(&cluster, &env, &red).await;
        assert_eq!(color(&cms).await.as_deref(), Some("red"));

        // `ksync rollback --revision A`: the request as stored is the webhook's record of it.
        let want_hash = expected_hash(&env, &a_rev.name_any()).await;
        let stored = first_request(&env, || {
            let out = ksync::ok(&cluster, ns, &["rollback", "web", "--revision", &a_rev.name_any()]);
            assert!(out.stdout.contains("The request approves it"), "{out:?}");
        })
        .await;
        assert_eq!(stored[a::ROLLBACK_TARGET_REVISION], a_rev.name_any());
        assert_eq!(stored[a::ROLLBACK_TO], blue);
        assert_eq!(stored[a::ROLLBACK_REQUESTED_BY], me);
        assert_eq!(stored[a::ROLLBACK_TARGET_HASH], want_hash);
        let at = &stored[a::ROLLBACK_REQUESTED_AT];
        let at_ts: jiff::Timestamp = at.parse().expect("RFC 3339 requested-at");
        // ksync writes nine fractional digits; the webhook replaces them with its own, six.
        let digits = at.split_once('.').map(|(_, f)| f.trim_end_matches('Z').len());
        assert_eq!(digits, Some(6), "requested-at {at} is the webhook's (microseconds), not ksync's (nanoseconds)");
        assert!((jiff::Timestamp::now().as_second() - at_ts.as_second()).abs() < 300, "{at}");

        // Approved by its own request: A deploys with no ksync sync, B is held.
        eventually("blue back, red held, the request done", WAIT, || async {
            let app = env.apps().get("web").await.ok()?;
            let b = env.revisions().get(&b_rev.name_any()).await.ok()?;
            let done = color(&cms).await.as_deref() == Some("blue")
                && held_by(&b).as_deref() == Some(names::reasons::MANUAL_ROLLBACK)
                && !has_request(&app);
            done.then_some(())
        })
        .await;
        let target_rev = env.revisions().get(&a_rev.name_any()).await.unwrap();
        eprintln!("target status: {:#?}\nevents: {:#?}", target_rev.status, env.events("web").await);
        let target = approval(&target_rev);
        assert_eq!(target.source.as_deref(), Some(names::reasons::MANUAL_ROLLBACK));
        assert_eq!(target.user, me);
        assert_eq!(target.time.0, at_ts, "approved at the request's time");
        let events = env.events("web").await;
        assert!(events.iter().any(|e| e.1 == names::events::ROLLBACK_APPROVED), "{events:#?}");

        // Wrong Revisions. ksync checks what it can before writing; the webhook refuses what any
        // other writer (kubectl here) asks for.
        let missing = ksync::run(&cluster, ns, &["rollback", "web", "--revision", "web-gone"]);
        assert_ne!(missing.code, 0, "{missing:?}");
        assert!(missing.stderr.contains("web-gone") && missing.stderr.contains("not found"), "{missing:?}");
        wt.write("api/config.yaml", &config("green").replace("name: settings", "name: api-settings"));
        let with_api = wt.commit_and_push("api");
        env.refresh("platform", &with_api).await;
        let mut api_spec = manual(ns);
        api_spec["source"]["path"] = json!("api");
        env.create_app("api", api_spec).await;
        let api_rev = env.revision_where("api", "api's Revision", |r| phase(r).is_some()).await;
        let other = ksync::run(&cluster, ns, &["rollback", "web", "--revision", &api_rev.name_any()]);
        assert_ne!(other.code, 0, "{other:?}");
        assert!(other.stderr.contains("belongs to Application \"api\", not \"web\""), "{other:?}");
        let denied = "admission webhook \"applications.sync.kuvryn.io\" denied the request: \
                      sync.kuvryn.io/rollback-target-revision";
        for (target, commit, why) in [
            (
                "web-gone".to_string(),
                blue.clone(),
                "Revision \"web-gone\" does not exist in this namespace".to_string(),
            ),
            (
                api_rev.name_any(),
                api_rev.spec.source.commit.clone(),
                format!(
                    "Revision \"{}\" belongs to Application \"api\", not to Application \"web\"",
                    api_rev.name_any()
                ),
            ),
        ] {
            let (ok, stderr) = kubectl_annotate(
                &cluster,
                ns,
                &[
                    (a::ROLLBACK_TO, commit.as_str()),
                    (a::ROLLBACK_KIND, "manual"),
                    (a::ROLLBACK_TARGET_REVISION, target.as_str()),
                ],
            );
            assert!(!ok, "kubectl annotate with {target} was accepted");
            assert!(stderr.contains(denied) && stderr.contains(&why), "{target}: {stderr}");
        }
        assert!(!has_request(&env.apps().get("web").await.unwrap()), "a refused request is not stored");

        // A pending request (suspended, so nothing acts on it) whose requester and target hash
        // are forged by hand: the webhook puts its record back.
        let suspend = |on: bool| json!({"spec": {"suspend": on}});
        env.apps().patch("web", &PatchParams::default(), &Patch::Merge(&suspend(true))).await.unwrap();
        ksync::ok(&cluster, ns, &["rollback", "web", "--revision", &b_rev.name_any()]);
        let pending = env.apps().get("web").await.unwrap().annotations().clone();
        assert_eq!(pending[a::ROLLBACK_REQUESTED_BY], me);
        assert_eq!(pending[a::ROLLBACK_TARGET_HASH], expected_hash(&env, &b_rev.name_any()).await);
        let (ok, stderr) = kubectl_annotate(
            &cluster,
            ns,
            &[(a::ROLLBACK_REQUESTED_BY, "mallory"), (a::ROLLBACK_TARGET_HASH, "sha256:forged")],
        );
        assert!(ok, "{stderr}");
        let after = env.apps().get("web").await.unwrap().annotations().clone();
        for k in [a::ROLLBACK_REQUESTED_BY, a::ROLLBACK_TARGET_HASH, a::ROLLBACK_REQUESTED_AT] {
            assert_eq!(after.get(k), pending.get(k), "{k} forged");
        }
        // Resumed, it deploys under the real requester.
        env.apps().patch("web", &PatchParams::default(), &Patch::Merge(&suspend(false))).await.unwrap();
        eventually("red back by the restored request", WAIT, || async {
            let app = env.apps().get("web").await.ok()?;
            (color(&cms).await.as_deref() == Some("red") && !has_request(&app)).then_some(())
        })
        .await;
        let b = approval(&env.revisions().get(&b_rev.name_any()).await.unwrap());
        assert_eq!((b.user.as_str(), b.source.as_deref()), (me.as_str(), Some(names::reasons::MANUAL_ROLLBACK)));
    });
}

/// A Deployment whose Pods mount the Secret `gate`: without it they never start, so its rollout
/// stays under way until the test creates it.
fn gated_deployment(color: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n      annotations: {{simcluster.kuvryn.io/backoff-max-ms: \"500\"}}\n    spec:\n      containers:\n      - name: web\n        image: nginx:1.27\n        env:\n        - {{name: COLOR, value: {color}}}\n        volumeMounts:\n        - {{name: gate, mountPath: /gate}}\n      volumes:\n      - name: gate\n        secret: {{secretName: gate}}\n"
    )
}

fn deployed_color(d: &Deployment) -> Option<String> {
    let c = d.spec.template.spec.as_ref()?.containers.first()?;
    c.env.as_ref()?.iter().find(|e| e.name == "COLOR")?.value.clone()
}

fn a_manager_restart_mid_rollback_keeps_its_approval(cluster: Cluster) {
    testkit::runtime().block_on(async {
        let ns = "rb-restart";
        let env = Env::without_controllers(&cluster, ns).await;
        let manager = start_manager(&cluster, &env.client, ns, &[]).await;
        let me = whoami(&env.client).await;
        let secrets: Api<Secret> = Api::namespaced(env.client.clone(), ns);
        let gate = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "gate", "namespace": ns},
                          "stringData": {"open": "yes"}});
        apply_as(&env.client, "test", &gate).await;
        let wt = env.app_from("web", &[("web/deploy.yaml", &gated_deployment("blue"))], manual(ns)).await;
        let blue = wt.git(&["rev-parse", "HEAD"]).trim().to_string();
        let a_rev = sync_commit(&cluster, &env, &blue).await;
        let red = wt.write("web/deploy.yaml", &gated_deployment("red")).commit_and_push("red");
        env.refresh("platform", &red).await;
        let b_rev = sync_commit(&cluster, &env, &red).await;

        // Closed gate: the rollback's new Pods cannot start.
        secrets.delete("gate", &DeleteParams::default()).await.unwrap();
        ksync::ok(&cluster, ns, &["rollback", "web", "--revision", &a_rev.name_any()]);
        let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), ns);
        let running = eventually("the rollback's attempt applied and waiting for health", WAIT, || async {
            let r = env.revisions().get(&a_rev.name_any()).await.ok()?;
            let s = r.status.as_ref()?;
            let applied = deployed_color(&deployments.get("web").await.ok()?).as_deref() == Some("blue");
            let running = s.attempts.last().is_some_and(|t| t.result == AttemptResult::Running);
            (applied && running && s.approval.as_ref()?.source.as_deref() == Some(names::reasons::MANUAL_ROLLBACK))
                .then_some(r)
        })
        .await;
        let attempt = running.status.as_ref().unwrap().attempts.last().unwrap().number;
        let requested_at = env.apps().get("web").await.unwrap().annotations()[a::ROLLBACK_REQUESTED_AT].clone();

        // The manager dies mid-rollout (SIGKILL); a new one takes over and serves the webhook.
        drop(manager);
        let manager = start_manager(&cluster, &env.client, ns, &[]).await;
        let warning = eventually("the start-up warning about the pending request", START, || async {
            manager.stderr().lines().find(|l| l.contains("pending rollback request")).map(String::from)
        })
        .await;
        assert!(warning.contains(&format!("{ns}/web")) && warning.contains(&me), "{warning}");
        apply_as(&env.client, "test", &gate).await;

        let done = eventually("the rollback completed by the new manager", START, || async {
            let app = env.apps().get("web").await.ok()?;
            let target = env.revisions().get(&a_rev.name_any()).await.ok()?;
            let b = env.revisions().get(&b_rev.name_any()).await.ok()?;
            let done = !has_request(&app)
                && phase(&target) == Some(RevisionPhase::Healthy)
                && held_by(&b).as_deref() == Some(names::reasons::MANUAL_ROLLBACK);
            done.then_some(target)
        })
        .await;
        let approved = approval(&done);
        assert_eq!(approved.source.as_deref(), Some(names::reasons::MANUAL_ROLLBACK));
        assert_eq!(approved.user, me, "the original requester");
        assert_eq!(approved.time.0, requested_at.parse::<jiff::Timestamp>().unwrap());
        let attempts = &done.status.as_ref().unwrap().attempts;
        assert!(attempts.iter().any(|t| t.number == attempt && t.result == AttemptResult::Succeeded), "{attempts:#?}");
        assert_eq!(deployed_color(&deployments.get("web").await.unwrap()).as_deref(), Some("blue"));
        // Only about the target: B's ApprovalStale before its ksync sync is the normal flow.
        let events = env.events("web").await;
        let lapsed = |e: &&(String, String, String)| {
            [names::events::APPROVAL_STALE, names::events::ROLLBACK_TARGET_CHANGED].contains(&e.1.as_str())
                && e.2.contains(&a_rev.name_any())
        };
        assert!(!events.iter().any(|e| lapsed(&e)), "the approval of the target lapsed: {events:#?}");
    });
}

fn with_webhooks_disabled_a_hand_written_request_is_trusted(cluster: Cluster) {
    testkit::runtime().block_on(async {
        let ns = "rb-no-webhook";
        let env = Env::without_controllers(&cluster, ns).await;
        let manager = start_manager(&cluster, &env.client, ns, &[("ENABLE_WEBHOOKS", "false")]).await;
        let wt = env.app_from("web", &[("web/config.yaml", &config("blue"))], manual(ns)).await;
        let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), ns);
        let blue = wt.git(&["rev-parse", "HEAD"]).trim().to_string();
        let a_rev = sync_commit(&cluster, &env, &blue).await;
        let red = wt.write("web/config.yaml", &config("red")).commit_and_push("red");
        env.refresh("platform", &red).await;
        let b_rev = sync_commit(&cluster, &env, &red).await;
        let warning = "ENABLE_WEBHOOKS=false: no admission webhook; rollback and approval annotations are not verified and are trusted as written";
        assert!(manager.stderr().lines().any(|l| l.contains("WARN") && l.contains(warning)), "{}", manager.stderr());

        // Anyone who may update the Application writes the whole request, naming anyone.
        // Sub-second, as ksync writes it: one in whole seconds can equal the approved-at of the last
        // ksync sync, which then counts as given at the request (see the report).
        let at = jiff::Timestamp::now().to_string();
        let request = json!({"metadata": {"annotations": {
            a::ROLLBACK_TO: blue,
            a::ROLLBACK_KIND: a::ROLLBACK_KIND_MANUAL,
            a::ROLLBACK_TARGET_REVISION: a_rev.name_any(),
            a::ROLLBACK_REQUESTED_BY: "mallory",
            a::ROLLBACK_REQUESTED_AT: at,
            a::ROLLBACK_TARGET_HASH: expected_hash(&env, &a_rev.name_any()).await,
        }}});
        env.apps().patch("web", &PatchParams::default(), &Patch::Merge(&request)).await.unwrap();
        eventually("blue deployed under the name written", WAIT, || async {
            let app = env.apps().get("web").await.ok()?;
            let b = env.revisions().get(&b_rev.name_any()).await.ok()?;
            let done = color(&cms).await.as_deref() == Some("blue")
                && !has_request(&app)
                && held_by(&b).as_deref() == Some(names::reasons::MANUAL_ROLLBACK);
            done.then_some(())
        })
        .await;
        let approved = approval(&env.revisions().get(&a_rev.name_any()).await.unwrap());
        assert_eq!((approved.user.as_str(), approved.source.as_deref()), ("mallory", Some(names::reasons::MANUAL_ROLLBACK)));
    });
}

/// A chart whose ConfigMap takes `color` from the chart's values and `size` from `valuesFrom`.
const CHART: &str = "apiVersion: v2\nname: web\nversion: 0.1.0\n";
const TEMPLATE: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  color: {{ .Values.color | quote }}\n  size: {{ .Values.size | quote }}\n";

async fn size(cms: &Api<ConfigMap>) -> Option<String> {
    cms.get("settings").await.ok()?.data?.get("size").cloned()
}

/// In-process controllers: what is tested is the controller's decision, which the manager
/// binary runs unchanged (and `ksync rollback` without a webhook writes the same request).
fn a_target_rendering_differently_since_it_deployed_waits_for_ksync_sync(cluster: Cluster) {
    testkit::runtime().block_on(async {
        let ns = "rb-values";
        let env = Env::start(&cluster, ns).await;
        let values = |size: &str| {
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "web-values", "namespace": ns},
                   "stringData": {"values.yaml": format!("size: {size}\n")}})
        };
        apply_as(&env.client, "test", &values("small")).await;
        let wt = env
            .app_from(
                "web",
                &[("web/Chart.yaml", CHART), ("web/values.yaml", "color: blue\n"), ("web/templates/settings.yaml", TEMPLATE)],
                json!({"source": {"repository": "platform", "path": "web",
                                  "render": {"type": "Helm", "helm": {"valuesFrom": [{"kind": "Secret", "name": "web-values"}]}}},
                       "serviceAccountName": "deployer", "destination": {"namespace": ns}, "sync": {"automatic": false}}),
            )
            .await;
        let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), ns);
        let blue = wt.git(&["rev-parse", "HEAD"]).trim().to_string();
        let a_rev = sync_commit(&cluster, &env, &blue).await;
        let red = wt.write("web/values.yaml", "color: red\n").commit_and_push("red");
        env.refresh("platform", &red).await;
        let b_rev = sync_commit(&cluster, &env, &red).await;
        assert_eq!((color(&cms).await, size(&cms).await), (Some("red".into()), Some("small".into())));

        // A would now render size large, not what it deployed: the request approves nothing.
        apply_as(&env.client, "test", &values("large")).await;
        let out = ksync::ok(&cluster, ns, &["rollback", "web", "--revision", &a_rev.name_any()]);
        assert!(out.stdout.contains("The request approves it"), "ksync saw a deployed state: {out:?}");
        let events = eventually("RollbackTargetChanged", WAIT, || async {
            let ev = env.events("web").await;
            ev.iter().any(|e| e.1 == names::events::ROLLBACK_TARGET_CHANGED).then_some(ev)
        })
        .await;
        let changed = events.iter().find(|e| e.1 == names::events::ROLLBACK_TARGET_CHANGED).unwrap();
        assert_eq!(changed.0, "Warning", "{changed:?}");
        assert!(events.iter().any(|e| e.1 == names::events::APPROVAL_STALE), "{events:#?}");
        assert!(!events.iter().any(|e| e.1 == names::events::ROLLBACK_APPROVED), "{events:#?}");
        env.revision_where("web", "A waiting for approval", |r| {
            r.name_any() == a_rev.name_any() && phase(r) == Some(RevisionPhase::AwaitingApproval)
        })
        .await;
        assert_eq!((color(&cms).await, size(&cms).await), (Some("red".into()), Some("small".into())), "nothing deployed");
        assert!(has_request(&env.apps().get("web").await.unwrap()), "the request stays");

        // ksync sync approves the new plan: A deploys with the new values.
        env.planned_digest("web", &a_rev.name_any()).await;
        ksync::ok(&cluster, ns, &["sync", "web", "--yes"]);
        eventually("A deployed by ksync sync, the request done", WAIT, || async {
            let app = env.apps().get("web").await.ok()?;
            let done = color(&cms).await.as_deref() == Some("blue")
                && size(&cms).await.as_deref() == Some("large")
                && !has_request(&app);
            done.then_some(())
        })
        .await;
        let approved = approval(&env.revisions().get(&a_rev.name_any()).await.unwrap());
        assert_eq!(approved.source.as_deref(), Some("ManualSync"));
        let b = env.revisions().get(&b_rev.name_any()).await.unwrap();
        assert_eq!(held_by(&b).as_deref(), Some(names::reasons::MANUAL_ROLLBACK));
    });
}

testkit::both!(
    with_webhooks_disabled_a_hand_written_request_is_trusted,
    a_target_rendering_differently_since_it_deployed_waits_for_ksync_sync,
    the_webhook_records_checks_and_restores_a_manual_sync_rollback,
    a_manager_restart_mid_rollback_keeps_its_approval,
);
