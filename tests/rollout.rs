//! Rollouts end to end against simcluster with its workload simulation (Pods scheduled, pulled,
//! started and made ready by the simulated kubelet), a real `git daemon`, and the Repository and
//! Application controllers in-process: apply as the service account, health, prune, conflicts,
//! failures, drift and deletion policies.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use kuvryn_sync::api::Application;
use kuvryn_sync::api::conditions;
use kuvryn_sync::api::names;
use kuvryn_sync::api::revision::{AttemptResult, PlanAction, Revision, RevisionPhase};
use kuvryn_sync::controller::application;
use kuvryn_sync::plan::inventory;
use serde_json::json;
use testkit::apps::{Env, WAIT, action_of, entries};
use testkit::manifests::deployment;
use testkit::{Cluster, apply_as, eventually};

/// The Deployment `web`: two replicas, each ready 2 s after it starts, serving port 80.
fn web_deployment(image: &str) -> String {
    web_deployment_ready_after(image, 2000)
}

/// [`web_deployment`] with its Pods ready `ready_ms` after they start.
fn web_deployment_ready_after(image: &str, ready_ms: u64) -> String {
    deployment("web")
        .replicas(2)
        .progress_deadline_seconds(600)
        .ready_ms(ready_ms)
        .image(image)
        .container_port(80)
        .to_string()
}

const SERVICE: &str =
    "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  selector: {app: web}\n  ports: [{port: 80}]\n";
const CONFIG: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  color: blue\n";
const KEEP: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: keep\n  annotations: {sync.kuvryn.io/prune: disabled}\ndata:\n  k: v\n";
const SECRET: &str = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: token\nstringData:\n  token: not-a-real-token\n";
const CRD: &str = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: widgets.example.com\nspec:\n  group: example.com\n  scope: Namespaced\n  names: {plural: widgets, singular: widget, kind: Widget}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        x-kubernetes-preserve-unknown-fields: true\n";
const WIDGET: &str = "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: gizmo\nspec:\n  size: 3\n";

/// Cluster-wide permissions the `deployer` needs for CustomResourceDefinitions.
async fn allow_crds(env: &Env) {
    apply_as(&env.client, "test", &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": format!("{}-crds", env.ns)},
        "rules": [{"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["*"]}]}))
    .await;
    apply_as(
        &env.client,
        "test",
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": format!("{}-crds", env.ns)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": format!("{}-crds", env.ns)},
        "subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": env.ns}]}),
    )
    .await;
}

fn phase(r: &Revision) -> Option<RevisionPhase> {
    r.status.as_ref().map(|s| s.phase)
}

/// Wait until the desired Revision is on `commit` and in `want`, remembering every phase seen.
async fn until_phase(env: &Env, app: &str, commit: &str, want: RevisionPhase, seen: &mut BTreeSet<String>) -> Revision {
    let phases = std::sync::Mutex::new(BTreeSet::new());
    let rev = eventually(&format!("Revision of {commit} to be {want:?}"), WAIT, || async {
        let a = env.apps().get(app).await.ok()?;
        let r = env.revisions().get(a.status.as_ref()?.desired_revision.as_ref()?).await.ok()?;
        if r.spec.source.commit != commit {
            return None;
        }
        if let Some(p) = phase(&r) {
            phases.lock().unwrap().insert(format!("{p:?}"));
            // Every phase on its way carries the kstatus conditions it implies.
            let working = matches!(p, RevisionPhase::Planning | RevisionPhase::Applying | RevisionPhase::Progressing);
            if working {
                assert_eq!(condition(&r, names::conditions::RECONCILING).0, "True", "{p:?}: {:?}", r.status);
                assert_eq!(condition(&r, names::conditions::READY).0, "Unknown", "{p:?}: {:?}", r.status);
            }
        }
        (phase(&r) == Some(want)).then_some(r)
    })
    .await;
    seen.extend(phases.into_inner().unwrap());
    rev
}

/// A Revision's condition `type_`: (status, reason), empty when absent.
fn condition(r: &Revision, type_: &str) -> (String, String) {
    let c = r.status.as_ref().and_then(|s| conditions::get(&s.conditions, type_)).cloned();
    c.map(|c| (c.status, c.reason)).unwrap_or_default()
}

fn ready(app: &Application) -> (String, String, String) {
    let c = app.status.as_ref().and_then(|s| conditions::get(&s.conditions, names::conditions::READY)).cloned();
    c.map(|c| (c.status, c.reason, c.message)).unwrap_or_default()
}

fn a_rollout_applies_waits_for_health_and_prunes_safely(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::start(&cluster, "rollout").await;
        allow_crds(&env).await;
        let wt = env.repository("platform").await;
        wt.write("web/deploy.yaml", &web_deployment("nginx:1.27"))
            .write("web/svc.yaml", SERVICE)
            .write("web/config.yaml", CONFIG)
            .write("web/keep.yaml", KEEP)
            .write("web/secret.yaml", SECRET)
            .write("web/crd.yaml", CRD)
            .write("web/widget.yaml", WIDGET);
        let first = wt.commit_and_push("web");
        env.refresh("platform", &first).await;
        env.create_app(
            "web",
            json!({"source": {"repository": "platform", "path": "web"}, "serviceAccountName": "deployer",
                   "destination": {"namespace": "rollout",
                                   "clusterResources": [{"group": "apiextensions.k8s.io", "kind": "CustomResourceDefinition"}]},
                   "sync": {"prune": true}, "health": {"timeout": "60s"}, "failurePolicy": {"maxAttempts": 1}}),
        )
        .await;

        // First sync: applied (the CRD before its Widget), Progressing while the Pods start, Healthy.
        let mut seen = BTreeSet::new();
        let rev1 = until_phase(&env, "web", &first, RevisionPhase::Healthy, &mut seen).await;
        assert!(seen.contains("Progressing"), "phases seen: {seen:?}");
        // Healthy is Ready, and kubectl's own wait sees it so.
        assert_eq!(condition(&rev1, names::conditions::READY), ("True".into(), "Succeeded".into()));
        assert_eq!(condition(&rev1, names::conditions::RECONCILING), Default::default());
        let home = testkit::temp_dir("rollout-kubectl");
        let revision = format!("revision/{}", rev1.name_any());
        let wait = ["wait", "--for=condition=Ready", "--timeout=30s", "-n", "rollout", revision.as_str()];
        testkit::run(cluster.kubectl(&testkit::Tools::get(), home.path()).args(wait));
        let st = rev1.status.clone().unwrap();
        assert_eq!(st.attempts.len(), 1);
        assert_eq!(st.attempts[0].result, AttemptResult::Succeeded);
        assert_eq!(st.deployed_desired_state_hash, rev1.spec.desired_state_hash);
        assert_eq!(st.health.as_ref().map(|h| h.healthy), Some(7));
        let app = eventually("the Application to be Ready", WAIT, || async {
            let a = env.apps().get("web").await.ok()?;
            (ready(&a).0 == "True").then_some(a)
        })
        .await;
        let status = app.status.clone().unwrap();
        assert_eq!(format!("{:?}", status.sync.as_ref().unwrap().status), "Synced");
        assert_eq!(format!("{:?}", status.health.as_ref().unwrap().status), "Healthy");
        assert_eq!(status.last_healthy_revision.as_deref(), Some(rev1.name_any().as_str()));
        let kinds: BTreeSet<String> = status.managed_kinds.iter().map(|k| k.kind.clone()).collect();
        for k in ["ConfigMap", "CustomResourceDefinition", "Deployment", "Secret", "Service", "Widget"] {
            assert!(kinds.contains(k), "managedKinds {kinds:?} lacks {k}");
        }
        // Applied with our field manager and labels, as the service account.
        let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "rollout");
        let cm = cms.get("settings").await.unwrap();
        assert_eq!(cm.labels().get(names::labels::MANAGED_BY).map(String::as_str), Some("kuvryn-sync"));
        assert_eq!(cm.labels().get(names::labels::APPLICATION_ID), Some(&inventory::application_id("rollout", "web")));
        assert_eq!(cm.annotations().get(names::annotations::APPLICATION).map(String::as_str), Some("rollout/web"));
        assert!(cm.managed_fields().iter().any(|m| m.manager.as_deref() == Some(names::FIELD_MANAGER)));
        let widgets = ApiResource {
            group: "example.com".into(),
            version: "v1".into(),
            api_version: "example.com/v1".into(),
            kind: "Widget".into(),
            plural: "widgets".into(),
        };
        let widget_api: Api<DynamicObject> = Api::namespaced_with(env.client.clone(), "rollout", &widgets);
        assert!(widget_api.get_opt("gizmo").await.unwrap().is_some());
        if let Some(sim) = cluster.sim() {
            let writes: Vec<_> = sim
                .audit_log()
                .into_iter()
                .filter(|e| e.field_manager == names::FIELD_MANAGER && e.verb == "patch")
                .collect();
            assert!(!writes.is_empty());
            assert!(
                writes.iter().all(|e| e.user == "system:serviceaccount:rollout:deployer"),
                "every apply is made as the service account: {writes:#?}"
            );
        }

        // A new image: a new Revision, Progressing, then Healthy; the first is its previous.
        wt.write("web/deploy.yaml", &web_deployment("nginx:1.28"));
        let second = wt.commit_and_push("web: nginx 1.28");
        env.refresh("platform", &second).await;
        let mut seen = BTreeSet::new();
        let rev2 = until_phase(&env, "web", &second, RevisionPhase::Healthy, &mut seen).await;
        assert!(seen.contains("Progressing"), "phases seen: {seen:?}");
        assert_eq!(rev2.status.as_ref().unwrap().previous_healthy_revision.as_deref(), Some(rev1.name_any().as_str()));
        let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), "rollout");
        let d = deployments.get("web").await.unwrap();
        assert_eq!(d.spec.template.spec.as_ref().unwrap().containers[0].image.as_deref(), Some("nginx:1.28"));
        // The Revision keeps the plan its rollout applied, after drift checks too.
        env.poke("web", "drift-check").await;
        eventually("a drift check of the deployed Revision", WAIT, || async {
            let a = env.apps().get("web").await.ok()?;
            (a.status?.last_handled_reconcile_at.as_deref() == Some("drift-check")).then_some(())
        })
        .await;
        let rev2 = env.revisions().get(&rev2.name_any()).await.unwrap();
        let st = rev2.status.as_ref().unwrap();
        let plan = st.plan.as_ref().unwrap();
        assert_eq!(st.attempts.last().and_then(|a| a.plan_digest.as_deref()), Some(plan.digest.as_str()));
        assert_eq!(plan.summary.update, 1, "{:?}", plan.summary);
        let web = entries(&rev2).into_iter().find(|e| e.resource.kind == "Deployment").unwrap();
        assert_eq!(web.action, PlanAction::Update);
        assert!(web.fields.iter().any(|f| f.contains("image")), "{:?}", web.fields);

        // Files removed with prune on: the ConfigMap and the Widget go; the opted-out
        // ConfigMap, the Secret and the CRD stay, labelled, with a warning and an Event.
        for f in ["web/config.yaml", "web/keep.yaml", "web/secret.yaml", "web/crd.yaml", "web/widget.yaml"] {
            wt.git(&["rm", "--quiet", f]);
        }
        let third = wt.commit_and_push("web: fewer objects");
        env.refresh("platform", &third).await;
        let rev3 = until_phase(&env, "web", &third, RevisionPhase::Healthy, &mut BTreeSet::new()).await;
        assert!(cms.get_opt("settings").await.unwrap().is_none());
        assert!(widget_api.get_opt("gizmo").await.unwrap().is_none());
        let keep = cms.get("keep").await.unwrap();
        assert_eq!(keep.labels().get(names::labels::MANAGED_BY).map(String::as_str), Some("kuvryn-sync"));
        let secrets: Api<Secret> = Api::namespaced(env.client.clone(), "rollout");
        assert!(secrets.get_opt("token").await.unwrap().is_some());
        let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
            Api::all(env.client.clone());
        assert!(crds.get_opt("widgets.example.com").await.unwrap().is_some());
        for (kind, name) in [("ConfigMap", "keep"), ("Secret", "token"), ("CustomResourceDefinition", "widgets.example.com")] {
            let e = entries(&rev3);
            let entry = e.iter().find(|e| e.resource.kind == kind && e.resource.name == name).unwrap_or_else(|| panic!("{kind} {name} in {e:#?}"));
            assert_eq!(entry.action, PlanAction::Unchanged);
            assert!(entry.warning.as_deref().is_some_and(|w| w.starts_with("prune skipped")), "{entry:?}");
        }
        let events = env.events("web").await;
        let skipped = events.iter().find(|e| e.1 == names::events::PRUNE_SKIPPED).expect("a PruneSkipped Event");
        assert_eq!(skipped.0, "Warning");
        for name in ["keep", "token", "widgets.example.com"] {
            assert!(skipped.2.contains(name), "{skipped:?}");
        }
        let kinds: BTreeSet<String> =
            env.apps().get("web").await.unwrap().status.unwrap().managed_kinds.iter().map(|k| k.kind.clone()).collect();
        assert!(kinds.contains("Secret") && kinds.contains("CustomResourceDefinition"), "{kinds:?}");
        assert!(!kinds.contains("Widget"), "{kinds:?}");

        // An image that cannot be pulled: the rollout fails with a health timeout naming the
        // Deployment, and with one attempt allowed it pauses (Stalled).
        let patch = json!({"spec": {"health": {"timeout": "3s"}}});
        env.apps().patch("web", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
        wt.write("web/deploy.yaml", &web_deployment("registry.invalid/nginx:1"));
        let fourth = wt.commit_and_push("web: a broken image");
        env.refresh("platform", &fourth).await;
        let rev4 = until_phase(&env, "web", &fourth, RevisionPhase::Failed, &mut BTreeSet::new()).await;
        let failure = rev4.status.as_ref().unwrap().failure.clone().unwrap();
        assert_eq!(failure.reason, "HealthTimeout");
        assert!(failure.message.contains("Deployment rollout/web"), "{}", failure.message);
        // The Pods say why: the image cannot be pulled.
        assert!(
            failure.message.contains("ImagePullBackOff") || failure.message.contains("ErrImagePull"),
            "{}",
            failure.message
        );
        assert_eq!(rev4.status.as_ref().unwrap().attempts[0].result, AttemptResult::Failed);
        // One attempt allowed: the Revision is Stalled with the failure, not Reconciling.
        assert_eq!(condition(&rev4, names::conditions::READY), ("False".into(), "HealthTimeout".into()));
        assert_eq!(condition(&rev4, names::conditions::STALLED), ("True".into(), "HealthTimeout".into()));
        assert_eq!(condition(&rev4, names::conditions::RECONCILING), Default::default());
        let app = eventually("the Application to stall", WAIT, || async {
            let a = env.apps().get("web").await.ok()?;
            conditions::is_true(&a.status.as_ref()?.conditions, names::conditions::STALLED).then_some(a)
        })
        .await;
        let (status, reason, message) = ready(&app);
        assert_eq!((status.as_str(), reason.as_str()), ("False", "HealthTimeout"));
        assert!(message.contains("1 of 1 attempts failed"), "{message}");
        // The last healthy Revision is still the one that deployed.
        assert_eq!(app.status.unwrap().last_healthy_revision.as_deref(), Some(rev3.name_any().as_str()));
        assert!(env.events("web").await.iter().any(|e| e.0 == "Warning" && e.1 == "HealthTimeout"));

        // A second attempt allowed, an hour away: the Application and its Revision are retried
        // (Reconciling), no longer Stalled.
        let patch = json!({"spec": {"failurePolicy": {"maxAttempts": 2, "backoff": {"duration": "1h"}}}});
        env.apps().patch("web", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
        let retried = eventually("the failed Revision and its Application to wait for the retry", WAIT, || async {
            let r = env.revisions().get(&rev4.name_any()).await.ok()?;
            let app = env.apps().get("web").await.ok()?;
            let waiting = ready(&app).2.contains("(attempt 1 of 2; next attempt at");
            (waiting && condition(&r, names::conditions::RECONCILING).0 == "True").then_some(r)
        })
        .await;
        assert_eq!(condition(&retried, names::conditions::READY), ("False".into(), "HealthTimeout".into()));
        assert_eq!(condition(&retried, names::conditions::STALLED), Default::default());
        assert_eq!(phase(&retried), Some(RevisionPhase::Failed));

        // The next commit fixes the image and puts a skipped object back in Git: it is desired
        // again and updated like any other.
        let patch = json!({"spec": {"health": {"timeout": "60s"}}});
        env.apps().patch("web", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
        wt.write("web/deploy.yaml", &web_deployment("nginx:1.29")).write("web/keep.yaml", &KEEP.replace("k: v", "k: v2"));
        let fifth = wt.commit_and_push("web: fixed image, keep is back");
        env.refresh("platform", &fifth).await;
        let rev5 = until_phase(&env, "web", &fifth, RevisionPhase::Healthy, &mut BTreeSet::new()).await;
        assert_eq!(cms.get("keep").await.unwrap().data.unwrap()["k"], "v2");
        // The stored plan is what the rollout applied: the skipped object was updated.
        assert_eq!(action_of(&rev5, "ConfigMap", "keep"), Some(PlanAction::Update));
        let app = eventually("Ready again", WAIT, || async {
            let a = env.apps().get("web").await.ok()?;
            (ready(&a).0 == "True").then_some(a)
        })
        .await;
        assert_eq!(app.status.unwrap().last_healthy_revision.as_deref(), Some(rev5.name_any().as_str()));
    });
}

fn conflicts_permissions_and_deletion_policies(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::start(&cluster, "owners").await;
        let wt = env.repository("platform").await;
        wt.write("conflict/cm.yaml", CONFIG)
            .write("readonly/cm.yaml", &CONFIG.replace("settings", "ro"))
            .write("orphan/cm.yaml", &CONFIG.replace("settings", "orphaned"))
            .write("delete/cm.yaml", &CONFIG.replace("settings", "doomed"))
            .write("delete/keep.yaml", KEEP)
            .write("delete/secret.yaml", SECRET);
        let commit = wt.commit_and_push("apps");
        env.refresh("platform", &commit).await;
        let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "owners");

        // Another manager owns data.color with another value: policy fail blocks the rollout,
        // naming the field and the manager; nothing is forced.
        apply_as(&env.client, "other-tool", &json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings", "namespace": "owners"}, "data": {"color": "green"}}))
        .await;
        let spec = |path: &str, sa: &str| {
            json!({"source": {"repository": "platform", "path": path}, "serviceAccountName": sa,
                   "destination": {"namespace": "owners"}, "failurePolicy": {"maxAttempts": 1}})
        };
        env.create_app("conflict", spec("conflict", "deployer")).await;
        let rev = until_phase(&env, "conflict", &commit, RevisionPhase::Failed, &mut BTreeSet::new()).await;
        let failure = rev.status.as_ref().unwrap().failure.clone().unwrap();
        assert_eq!(failure.reason, "ApplyConflict");
        assert!(failure.message.contains(".data.color is owned by \"other-tool\""), "{}", failure.message);
        assert_eq!(cms.get("settings").await.unwrap().data.unwrap()["color"], "green");
        let app = env.apps().get("conflict").await.unwrap();
        assert_eq!(ready(&app).1, "ApplyConflict");

        // Policy adopt: the field is taken and listed with its previous manager.
        let patch = json!({"spec": {"sync": {"conflictPolicy": "adopt"}}});
        env.apps().patch("conflict", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
        // Paused after one attempt: ask for another, as an operator would after fixing the cause.
        env.poke("conflict", "adopt").await;
        let rev = eventually("the adopted rollout", WAIT, || async {
            let a = env.apps().get("conflict").await.ok()?;
            let r = env.revisions().get(a.status?.desired_revision.as_ref()?).await.ok()?;
            (phase(&r) == Some(RevisionPhase::Healthy)).then_some(r)
        })
        .await;
        let _ = rev;
        assert_eq!(cms.get("settings").await.unwrap().data.unwrap()["color"], "blue");

        // A service account that may read but not write: the API's own message, and no write
        // under the controller's identity.
        for (kind, name) in [("Role", "reader"), ("RoleBinding", "reader")] {
            let obj = if kind == "Role" {
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name, "namespace": "owners"},
                       "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]})
            } else {
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": name, "namespace": "owners"},
                       "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
                       "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": "owners"}]})
            };
            apply_as(&env.client, "test", &obj).await;
        }
        env.create_app("readonly", spec("readonly", "reader")).await;
        let rev = until_phase(&env, "readonly", &commit, RevisionPhase::Failed, &mut BTreeSet::new()).await;
        let failure = rev.status.as_ref().unwrap().failure.clone().unwrap();
        assert_eq!(failure.reason, "ApplyFailure");
        assert!(failure.message.contains("forbidden"), "{}", failure.message);
        assert!(failure.message.contains("system:serviceaccount:owners:reader"), "{}", failure.message);
        assert!(cms.get_opt("ro").await.unwrap().is_none());
        if let Some(sim) = cluster.sim() {
            let by_controller: Vec<_> = sim
                .audit_log()
                .into_iter()
                .filter(|e| e.resource == "configmaps" && e.namespace == "owners" && e.name == "ro" && e.verb != "get")
                .filter(|e| !e.user.starts_with("system:serviceaccount:owners:"))
                .collect();
            assert!(by_controller.is_empty(), "writes not made as the service account: {by_controller:#?}");
        }

        // Suspended: nothing is applied.
        let mut s = spec("readonly", "deployer");
        s["suspend"] = json!(true);
        env.create_app("suspended", s).await;
        let app = eventually("Suspended", WAIT, || async {
            let a = env.apps().get("suspended").await.ok()?;
            (ready(&a).1 == "Suspended").then_some(a)
        })
        .await;
        assert_eq!(ready(&app).0, "False");
        assert!(cms.get_opt("ro").await.unwrap().is_none());
        assert!(app.status.unwrap().desired_revision.is_none());

        // deletionPolicy Orphan (the default): deleting the Application leaves its objects.
        env.create_app("orphan", spec("orphan", "deployer")).await;
        until_phase(&env, "orphan", &commit, RevisionPhase::Healthy, &mut BTreeSet::new()).await;
        env.apps().delete("orphan", &DeleteParams::default()).await.unwrap();
        eventually("the orphan Application to go", WAIT, || async {
            env.apps().get_opt("orphan").await.ok()?.is_none().then_some(())
        })
        .await;
        assert!(cms.get_opt("orphaned").await.unwrap().is_some());

        // DeleteManagedResources: high-risk kinds are deleted too, opted-out objects stay. The
        // finalizer holds the Application while its service account may not delete.
        let mut s = spec("delete", "deployer");
        s["deletionPolicy"] = json!("DeleteManagedResources");
        env.create_app("delete", s).await;
        until_phase(&env, "delete", &commit, RevisionPhase::Healthy, &mut BTreeSet::new()).await;
        let app = env.apps().get("delete").await.unwrap();
        assert!(app.finalizers().iter().any(|f| f == names::finalizers::APPLICATION));
        // Take the delete permission away first.
        apply_as(&env.client, "test", &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "deployer", "namespace": "owners"},
            "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch", "create", "update", "patch"]}]}))
        .await;
        env.apps().delete("delete", &DeleteParams::default()).await.unwrap();
        let stuck = eventually("the finalizer to report why it waits", WAIT, || async {
            let a = env.apps().get_opt("delete").await.ok()??;
            (ready(&a).1 == "PruneFailure").then_some(a)
        })
        .await;
        assert!(ready(&stuck).2.contains("forbidden"), "{:?}", ready(&stuck));
        assert!(cms.get_opt("doomed").await.unwrap().is_some());
        apply_as(&env.client, "test", &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "deployer", "namespace": "owners"},
            "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}))
        .await;
        eventually("the Application to go once it may delete", WAIT, || async {
            env.apps().get_opt("delete").await.ok()?.is_none().then_some(())
        })
        .await;
        assert!(cms.get_opt("doomed").await.unwrap().is_none());
        let secrets: Api<Secret> = Api::namespaced(env.client.clone(), "owners");
        assert!(secrets.get_opt("token").await.unwrap().is_none(), "high-risk kinds are deleted too");
        assert!(cms.get_opt("keep").await.unwrap().is_some(), "opted-out objects stay");
    });
}

fn drift_is_reported_or_repaired_and_health_keeps_being_observed(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::start(&cluster, "drift").await;
        let wt = env.repository("platform").await;
        wt.write("web/deploy.yaml", &web_deployment("nginx:1.27")).write("web/config.yaml", CONFIG);
        let commit = wt.commit_and_push("web");
        env.refresh("platform", &commit).await;
        env.create_app(
            "web",
            json!({"source": {"repository": "platform", "path": "web"}, "serviceAccountName": "deployer",
                   "destination": {"namespace": "drift"}}),
        )
        .await;
        let rev = until_phase(&env, "web", &commit, RevisionPhase::Healthy, &mut BTreeSet::new()).await;
        let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "drift");
        let edit_as = |manager: &str, color: &str| {
            let cms = cms.clone();
            let (manager, color) = (manager.to_string(), color.to_string());
            async move {
                let patch = json!({"data": {"color": color}});
                cms.patch(
                    "settings",
                    &PatchParams { field_manager: Some(manager), ..Default::default() },
                    &Patch::Merge(&patch),
                )
                .await
                .unwrap();
            }
        };
        let sync_of =
            |a: &Application| a.status.as_ref().and_then(|s| s.sync.as_ref()).map(|s| format!("{:?}", s.status));

        // Without selfHeal: a hand edit is noticed through the metadata watch (no poke), reported
        // as Drifted and left in place; the Revision stays Healthy with one attempt.
        edit_as("kubectl-edit", "red").await;
        let app = eventually("Drifted", WAIT, || async {
            let a = env.apps().get("web").await.ok()?;
            (sync_of(&a).as_deref() == Some("Drifted")).then_some(a)
        })
        .await;
        let drifted = app.status.as_ref().unwrap().sync.as_ref().unwrap().drifted.clone();
        assert_eq!(drifted.len(), 1);
        assert_eq!((drifted[0].kind.as_str(), drifted[0].name.as_str()), ("ConfigMap", "settings"));
        assert_eq!(cms.get("settings").await.unwrap().data.unwrap()["color"], "red");
        let r = env.revisions().get(&rev.name_any()).await.unwrap();
        assert_eq!(phase(&r), Some(RevisionPhase::Healthy));
        assert_eq!(r.status.as_ref().unwrap().attempts.len(), 1);
        // The drift check's findings are the Application's, and an Event's; the Revision keeps
        // the plan its rollout applied (both objects created).
        let summary = r.status.as_ref().unwrap().plan.as_ref().unwrap().summary.clone();
        assert_eq!((summary.create, summary.update, summary.unchanged), (2, 0, 0), "{summary:?}");
        let events = eventually("a Drifted Event", WAIT, || async {
            let ev = env.events("web").await;
            ev.iter().any(|e| e.1 == names::events::DRIFTED).then_some(ev)
        })
        .await;
        let drift = events.iter().find(|e| e.1 == names::events::DRIFTED).unwrap();
        assert_eq!(drift.0, "Warning");
        assert!(
            drift.2.contains(
                "(left in place: spec.sync.selfHeal is off; ksync sync repairs it): ConfigMap drift/settings"
            ),
            "{drift:?}"
        );

        // Undoing the edit returns to Synced without a rollout.
        edit_as("kubectl-edit", "blue").await;
        eventually("Synced again", WAIT, || async {
            let a = env.apps().get("web").await.ok()?;
            (sync_of(&a).as_deref() == Some("Synced")).then_some(())
        })
        .await;
        assert_eq!(env.revisions().get(&rev.name_any()).await.unwrap().status.unwrap().attempts.len(), 1);

        // A managed resource deleted by hand: Degraded, naming it, with a HealthDegraded Event,
        // and no new Revision.
        cms.delete("settings", &DeleteParams::default()).await.unwrap();
        let app = eventually("Degraded", WAIT, || async {
            let a = env.apps().get("web").await.ok()?;
            let h = a.status.as_ref()?.health.as_ref()?;
            (format!("{:?}", h.status) == "Degraded").then_some(a)
        })
        .await;
        let health = app.status.as_ref().unwrap().health.clone().unwrap();
        assert!(
            health.message.as_deref().is_some_and(|m| m.contains("ConfigMap drift/settings is missing")),
            "{health:?}"
        );
        assert_eq!(ready(&app).1, "Degraded");
        assert_eq!(app.status.as_ref().unwrap().desired_revision.as_deref(), Some(rev.name_any().as_str()));
        let events = eventually("a HealthDegraded Event", WAIT, || async {
            let ev = env.events("web").await;
            ev.iter().any(|e| e.1 == names::events::HEALTH_DEGRADED).then_some(ev)
        })
        .await;
        assert!(events.iter().any(|e| e.1 == "HealthDegraded" && e.2.contains("settings")), "{events:#?}");

        // With selfHeal the same drift is repaired through a rollout: recreated, Healthy, Synced.
        let patch = json!({"spec": {"sync": {"selfHeal": true}}});
        env.apps().patch("web", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
        eventually("the ConfigMap to be recreated", WAIT, || async { cms.get_opt("settings").await.ok()? }).await;
        let app = eventually("Healthy and Synced again", WAIT, || async {
            let a = env.apps().get("web").await.ok()?;
            let healthy = format!("{:?}", a.status.as_ref()?.health.as_ref()?.status) == "Healthy";
            (healthy && sync_of(&a).as_deref() == Some("Synced")).then_some(a)
        })
        .await;
        assert_eq!(ready(&app).0, "True");
        let r = env.revisions().get(&rev.name_any()).await.unwrap();
        assert_eq!(r.status.as_ref().unwrap().attempts.len(), 2, "a drift repair is a rollout");

        // A Deployment whose new Pods crash after a healthy rollout, with selfHeal off (so the
        // hand edit that breaks it stays): Degraded once its progress deadline passes, naming
        // it, and no new attempt or Revision.
        let patch = json!({"spec": {"sync": {"selfHeal": false}}});
        let patched = env.apps().patch("web", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
        eventually("the controller to see selfHeal off", WAIT, || async {
            let a = env.apps().get("web").await.ok()?;
            (a.status?.observed_generation == patched.metadata.generation).then_some(())
        })
        .await;
        let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), "drift");
        let crash = json!({"spec": {"progressDeadlineSeconds": 2, "template": {"spec": {"containers": [
            {"name": "web", "env": [{"name": "SIMCLUSTER_EXIT_CODE", "value": "3"}]}]}}}});
        deployments
            .patch(
                "web",
                &PatchParams { field_manager: Some("kubectl-edit".into()), ..Default::default() },
                &Patch::Strategic(&crash),
            )
            .await
            .unwrap();
        if let Some(sim) = cluster.sim() {
            // Past the progress deadline without waiting for it.
            tokio::time::sleep(Duration::from_millis(500)).await;
            sim.advance_clock(Duration::from_secs(5));
        }
        // Pods are not watched: once one is in CrashLoopBackOff, ask for a check (the resync
        // interval would do the same, later).
        let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(env.client.clone(), "drift");
        eventually("a Pod in CrashLoopBackOff", WAIT, || async {
            let list = pods.list(&Default::default()).await.ok()?;
            list.items
                .iter()
                .any(|p| {
                    p.status.as_ref().and_then(|s| s.container_statuses.as_ref()).is_some_and(|cs| {
                        cs.iter().any(|c| {
                            c.state.as_ref().and_then(|s| s.waiting.as_ref()).and_then(|w| w.reason.as_deref())
                                == Some("CrashLoopBackOff")
                        })
                    })
                })
                .then_some(())
        })
        .await;
        env.poke("web", "crash").await;
        let app = eventually("Degraded by the crash loop", WAIT, || async {
            let a = env.apps().get("web").await.ok()?;
            let h = a.status.as_ref()?.health.as_ref()?;
            let m = h.message.as_deref()?;
            (format!("{:?}", h.status) == "Degraded"
                && m.contains("Deployment drift/web")
                && m.contains("CrashLoopBackOff"))
            .then_some(a)
        })
        .await;
        let message = app.status.as_ref().unwrap().health.clone().unwrap().message.unwrap();
        assert!(message.contains("CrashLoopBackOff (exit code 3)"), "{message}");
        assert_eq!(app.status.as_ref().unwrap().desired_revision.as_deref(), Some(rev.name_any().as_str()));
        assert_eq!(env.revisions().get(&rev.name_any()).await.unwrap().status.unwrap().attempts.len(), 2);
    });
}

const ROBOT: &str =
    "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: robot\nautomountServiceAccountToken: false\n";

fn sync_of(a: &Application) -> Option<String> {
    a.status.as_ref().and_then(|s| s.sync.as_ref()).map(|s| format!("{:?}", s.status))
}

async fn until_sync(env: &Env, want: &str) -> Application {
    eventually(&format!("the Application to be {want}"), WAIT, || async {
        let a = env.apps().get("web").await.ok()?;
        (sync_of(&a).as_deref() == Some(want)).then_some(a)
    })
    .await
}

async fn until_healthy_and_synced(env: &Env) -> Application {
    eventually("the Application to be Healthy and Synced", WAIT, || async {
        let a = env.apps().get("web").await.ok()?;
        let healthy = format!("{:?}", a.status.as_ref()?.health.as_ref()?.status) == "Healthy";
        (healthy && sync_of(&a).as_deref() == Some("Synced") && ready(&a).0 == "True").then_some(a)
    })
    .await
}

/// Writes since audit entry `from` that neither the test made (field managers `test` and
/// `kubectl-edit`) nor were dry runs: what the controller wrote.
fn controller_writes(sim: &simcluster::SimCluster, from: usize) -> Vec<simcluster::faults::AuditEvent> {
    sim.audit_log()
        .into_iter()
        .skip(from)
        .filter(|e| !e.dry_run && e.field_manager != "test" && e.field_manager != "kubectl-edit")
        .collect()
}

fn a_deployment_edited_by_hand_other_watched_kinds_and_zero_writes_at_rest(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::start(&cluster, "steady").await;
        let wt = env.repository("platform").await;
        wt.write("web/deploy.yaml", &web_deployment("nginx:1.27"))
            .write("web/config.yaml", CONFIG)
            .write("web/sa.yaml", ROBOT);
        let commit = wt.commit_and_push("web");
        env.refresh("platform", &commit).await;
        env.create_app(
            "web",
            json!({"source": {"repository": "platform", "path": "web"}, "serviceAccountName": "deployer",
                   "destination": {"namespace": "steady"}}),
        )
        .await;
        let rev = until_phase(&env, "web", &commit, RevisionPhase::Healthy, &mut BTreeSet::new()).await;
        until_healthy_and_synced(&env).await;
        // The reconcile that made it Healthy publishes its held Events after its status write:
        // at rest only once that Event is there.
        eventually("the Succeeded Event", WAIT, || async {
            env.events("web").await.iter().any(|(_, reason, _)| reason == "Succeeded").then_some(())
        })
        .await;

        // simcluster only: the audit log tells dry runs from writes.
        if cluster.require_simcluster("zero writes at rest", "the audit log") {
            let sim = cluster.sim().unwrap();
            // At rest, a drift check costs reads and dry runs, never a write. Touching a label
            // nobody manages triggers checks through the metadata watches: of a ConfigMap
            // (watched by default) and of a ServiceAccount (watched because the controller may
            // list and watch it, as a SelfSubjectAccessReview said). (A label, not an
            // annotation: an object whose undeclared annotations alone moved is read but not
            // dry-run, and the audit log shows dry runs, not reads.)
            let dry_runs_of = |name: &str, from: usize| {
                sim.audit_log()
                    .into_iter()
                    .skip(from)
                    .filter(|e| e.dry_run && e.name == name && e.user == "system:serviceaccount:steady:deployer")
                    .count()
            };
            let mark = sim.audit_log().len();
            let before = env.apps().get("web").await.unwrap().status;
            let touch = json!({"metadata": {"labels": {"example.com/touched": "1"}}});
            let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "steady");
            let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(env.client.clone(), "steady");
            let as_test = PatchParams { field_manager: Some("test".into()), ..Default::default() };
            cms.patch("settings", &as_test, &Patch::Merge(&touch)).await.unwrap();
            eventually("a drift check after the ConfigMap changed", WAIT, || async {
                (dry_runs_of("settings", mark) > 0).then_some(())
            })
            .await;
            let mark2 = sim.audit_log().len();
            sas.patch("robot", &as_test, &Patch::Merge(&touch)).await.unwrap();
            eventually("a drift check after the ServiceAccount changed", WAIT, || async {
                (dry_runs_of("robot", mark2) > 0).then_some(())
            })
            .await;
            let a = env.apps().get("web").await.unwrap();
            assert_eq!(sync_of(&a).as_deref(), Some("Synced"));
            let writes = controller_writes(sim, mark);
            assert!(
                writes.is_empty(),
                "a drift check that found nothing wrote: {writes:#?}\nstatus before: {}\nafter: {}",
                serde_json::to_string_pretty(&before).unwrap(),
                serde_json::to_string_pretty(&a.status).unwrap()
            );
        }
        let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(env.client.clone(), "steady");

        // A hand edit of the ServiceAccount (not watched by default) is noticed without a poke
        // (the resync interval is 5 minutes): Drifted, left in place; undoing it: Synced.
        let edit = PatchParams { field_manager: Some("kubectl-edit".into()), ..Default::default() };
        sas.patch("robot", &edit, &Patch::Merge(&json!({"automountServiceAccountToken": true}))).await.unwrap();
        let app = until_sync(&env, "Drifted").await;
        let drifted = app.status.unwrap().sync.unwrap().drifted;
        assert_eq!(
            drifted.iter().map(|d| (d.kind.as_str(), d.name.as_str())).collect::<Vec<_>>(),
            [("ServiceAccount", "robot")]
        );
        assert_eq!(sas.get("robot").await.unwrap().automount_service_account_token, Some(true));
        sas.patch("robot", &edit, &Patch::Merge(&json!({"automountServiceAccountToken": false}))).await.unwrap();
        until_sync(&env, "Synced").await;

        // `kubectl edit` of the Deployment without selfHeal: Drifted, the edit stays, the
        // Revision stays Healthy with its one attempt; undoing it returns to Synced.
        let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), "steady");
        let scale = |n: i32| json!({"spec": {"replicas": n}});
        deployments.patch("web", &edit, &Patch::Strategic(&scale(3))).await.unwrap();
        let app = until_sync(&env, "Drifted").await;
        let drifted = app.status.unwrap().sync.unwrap().drifted;
        assert_eq!(
            drifted.iter().map(|d| (d.kind.as_str(), d.name.as_str())).collect::<Vec<_>>(),
            [("Deployment", "web")]
        );
        assert_eq!(deployments.get("web").await.unwrap().spec.replicas, Some(3));
        let r = env.revisions().get(&rev.name_any()).await.unwrap();
        assert_eq!(phase(&r), Some(RevisionPhase::Healthy));
        assert_eq!(r.status.as_ref().unwrap().attempts.len(), 1);
        deployments.patch("web", &edit, &Patch::Strategic(&scale(2))).await.unwrap();
        let app = until_sync(&env, "Synced").await;
        assert_eq!(app.status.unwrap().desired_revision.as_deref(), Some(rev.name_any().as_str()));
        assert_eq!(env.revisions().get(&rev.name_any()).await.unwrap().status.unwrap().attempts.len(), 1);

        // With selfHeal the edit is repaired by a rollout of the same Revision. `kubectl edit`
        // took the field over, so the repair needs the `adopt` conflict policy (under `fail`
        // it is blocked as an ownership conflict, as the conflicts test shows).
        let patch = json!({"spec": {"sync": {"selfHeal": true, "conflictPolicy": "adopt"}}});
        let patched = env.apps().patch("web", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
        eventually("the controller to see selfHeal on", WAIT, || async {
            let a = env.apps().get("web").await.ok()?;
            (a.status?.observed_generation == patched.metadata.generation).then_some(())
        })
        .await;
        deployments.patch("web", &edit, &Patch::Strategic(&scale(5))).await.unwrap();
        eventually("the Deployment to be repaired", WAIT, || async {
            (deployments.get("web").await.ok()?.spec.replicas == Some(2)).then_some(())
        })
        .await;
        let app = until_healthy_and_synced(&env).await;
        assert_eq!(app.status.unwrap().desired_revision.as_deref(), Some(rev.name_any().as_str()));
        // A drift repair is a rollout: attempt 2 of the same Revision, recorded once it ends.
        eventually("the repair recorded as attempt 2", WAIT, || async {
            let r = env.revisions().get(&rev.name_any()).await.ok()?;
            let a = r.status?.attempts;
            (a.len() == 2 && a[1].result == AttemptResult::Succeeded).then_some(())
        })
        .await;
        assert_eq!(env.revisions().list(&Default::default()).await.unwrap().items.len(), 1, "no new Revision");
    });
}

// See: issue 18. A tenant's chart copied a file of the controller's machine into a ConfigMap
// through chained symlinks (`s/l -> ..`, `x.yaml -> s/l/s/l/../..`), hidden from helm's walk
// by `.helmignore`, and the Application reported Healthy.
fn symlinks_out_of_the_checkout_fail_the_source_and_nothing_is_pruned(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::start(&cluster, "links").await;
        let wt = env.repository("platform").await;
        let cm = |name: &str| format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  k: v\n");
        wt.write("chart/Chart.yaml", "apiVersion: v2\nname: web\nversion: 0.1.0\n")
            .write("chart/templates/settings.yaml", &cm("{{ .Release.Name }}-settings"))
            .write("chart/templates/extra.yaml", &cm("{{ .Release.Name }}-extra"));
        let first = wt.commit_and_push("chart");
        env.refresh("platform", &first).await;
        env.create_app(
            "web",
            json!({"source": {"repository": "platform", "path": "chart", "render": {"type": "Helm"}},
                   "serviceAccountName": "deployer", "destination": {"namespace": "links"},
                   "sync": {"prune": true}}),
        )
        .await;
        until_phase(&env, "web", &first, RevisionPhase::Healthy, &mut BTreeSet::new()).await;
        let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "links");
        assert!(cms.get_opt("web-extra").await.unwrap().is_some());

        // The next commit drops a template (prune would delete its ConfigMap) and reads a
        // file of the controller's machine: 20 levels up from the checkout is `/`.
        wt.git(&["rm", "--quiet", "chart/templates/extra.yaml"]);
        wt.write("chart/.helmignore", "s/\n").write(
            "chart/templates/leak.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: leaked\ndata:\n  x: {{ .Files.Get \"x.yaml\" | quote }}\n",
        );
        std::fs::create_dir_all(wt.path().join("chart/s")).unwrap();
        std::os::unix::fs::symlink("..", wt.path().join("chart/s/l")).unwrap();
        let target = format!("{}{}etc/os-release", "s/l/".repeat(20), "../".repeat(20));
        std::os::unix::fs::symlink(&target, wt.path().join("chart/x.yaml")).unwrap();
        let second = wt.commit_and_push("chart: read the host");
        env.refresh("platform", &second).await;
        let outcome = eventually("the Revision to fail, or the file to be copied", WAIT, || async {
            if let Some(leaked) = cms.get_opt("leaked").await.ok()? {
                return Some(Err(leaked));
            }
            let a = env.apps().get("web").await.ok()?;
            let r = env.revisions().get(a.status.as_ref()?.desired_revision.as_ref()?).await.ok()?;
            (r.spec.source.commit == second && phase(&r) == Some(RevisionPhase::Failed)).then_some(Ok(r))
        })
        .await;
        let rev = outcome.unwrap_or_else(|leaked| panic!("the host's file was deployed: {:?}", leaked.data));
        let failure = rev.status.unwrap().failure.unwrap();
        assert_eq!(failure.reason, names::reasons::SOURCE_FAILURE);
        assert!(!failure.retryable);
        assert!(failure.message.contains("symlink x.yaml points outside the checkout"), "{}", failure.message);
        let app = eventually("the Application to report the source failure", WAIT, || async {
            let a = env.apps().get("web").await.ok()?;
            (ready(&a).1 == names::reasons::SOURCE_FAILURE).then_some(a)
        })
        .await;
        let (status, _, message) = ready(&app);
        assert_eq!(status, "False");
        assert!(message.contains("symlink x.yaml points outside the checkout"), "{message}");
        assert!(conditions::is_true(&app.status.as_ref().unwrap().conditions, names::conditions::STALLED));
        let events = eventually("a SourceFailure Event", WAIT, || async {
            let ev = env.events("web").await;
            ev.iter().any(|e| e.0 == "Warning" && e.1 == names::reasons::SOURCE_FAILURE).then_some(ev)
        })
        .await;
        assert!(events.iter().any(|e| e.2.contains("symlink x.yaml")), "{events:#?}");
        // Nothing pruned, nothing leaked.
        assert!(cms.get_opt("web-extra").await.unwrap().is_some(), "pruned although the source failed");
        assert!(cms.get_opt("web-settings").await.unwrap().is_some());
        assert!(cms.get_opt("leaked").await.unwrap().is_none());

        // Without the links the commit deploys, and only then is the dropped ConfigMap pruned.
        for f in ["chart/x.yaml", "chart/s/l", "chart/templates/leak.yaml"] {
            wt.git(&["rm", "--quiet", f]);
        }
        let third = wt.commit_and_push("chart: no links");
        env.refresh("platform", &third).await;
        until_phase(&env, "web", &third, RevisionPhase::Healthy, &mut BTreeSet::new()).await;
        assert!(cms.get_opt("web-extra").await.unwrap().is_none());
        assert!(cms.get_opt("web-settings").await.unwrap().is_some());
    });
}

/// A prune deletes only the object it listed (issue 18, item 2): an object re-created under the
/// same name since the list, relabelled for another Application or opted out of pruning is kept;
/// one that only changed otherwise (its data) is still deleted.
fn a_prune_deletes_only_the_object_it_listed(cluster: Cluster) {
    use kuvryn_sync::apply::{self, Writer};
    use kuvryn_sync::plan::{self, Plan};
    use kuvryn_sync::watch::discovery::ClusterScopes;
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let client = cluster.client().await;
        let ns = "prune-listed";
        testkit::deployer_namespace(&client, ns).await;
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        let cm = |name: &str, labels: serde_json::Value, annotations: serde_json::Value| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": ns, "labels": labels, "annotations": annotations},
                "data": {"k": "v1"}})
        };
        let ours = json!({names::labels::APPLICATION_ID: inventory::application_id(ns, "app")});
        let theirs = json!({names::labels::APPLICATION_ID: inventory::application_id(ns, "other")});
        let names = ["recreated", "relabelled", "opted-out", "edited", "untouched"];
        let mut listed = std::collections::BTreeMap::new();
        for n in names {
            let o = apply_as(&client, "test", &cm(n, ours.clone(), json!({}))).await;
            listed.insert(format!("/ConfigMap/{ns}/{n}"), o);
        }
        // What happens between the list and the prune.
        cms.delete("recreated", &DeleteParams::default()).await.unwrap();
        apply_as(&client, "test", &cm("recreated", ours.clone(), json!({}))).await;
        apply_as(&client, "test", &cm("relabelled", theirs.clone(), json!({}))).await;
        apply_as(&client, "test", &cm("opted-out", ours.clone(), json!({names::annotations::PRUNE: "disabled"}))).await;
        let mut edited = cm("edited", ours.clone(), json!({}));
        edited["data"]["k"] = json!("v2");
        apply_as(&client, "test", &edited).await;

        let entries = names
            .iter()
            .map(|n| plan::Entry {
                group: String::new(),
                kind: "ConfigMap".into(),
                version: "v1".into(),
                namespace: ns.into(),
                name: n.to_string(),
                action: plan::Action::Delete,
                changed: Vec::new(),
                more_changed: 0,
                warnings: Vec::new(),
                conflicts: Vec::new(),
                wave: 0,
                hook: None,
                chart_crd: false,
            })
            .collect();
        let doomed = Plan { entries, digest: String::new() };
        let scopes = ClusterScopes::discover(&client).await.unwrap();
        let prunable = |o: &serde_json::Value| inventory::prunable_by(o, ns, "app");
        let mut done = apply::Applied::default();
        let kept = apply::prune(&Writer::new(client.clone(), None), &scopes, &doomed, &listed, &prunable, &mut done)
            .await
            .unwrap();
        let left: BTreeSet<String> =
            cms.list(&Default::default()).await.unwrap().items.iter().map(|c| c.name_any()).collect();
        let want: BTreeSet<String> = ["recreated", "relabelled", "opted-out"].map(String::from).into();
        assert_eq!(
            left.intersection(&names.map(String::from).into()).cloned().collect::<BTreeSet<_>>(),
            want,
            "kept: {kept:?}"
        );
        assert_eq!(kept.len(), 3, "{kept:?}");
        assert!(kept.iter().any(|k| k.contains("recreated") && k.contains("another uid")), "{kept:?}");
        assert!(kept.iter().any(|k| k.contains("relabelled") && k.contains("no longer")), "{kept:?}");
        assert_eq!(done.deleted.len(), 2, "{:?}", done.deleted);
    });
}

// See: issue 44 (trust boundaries, round two).
/// No existence oracle across namespaces: a tenant writes objects of its namespace claiming an
/// Application of another namespace, one that exists and one that does not, and deploys them.
/// Its service account may not read that namespace, so both are refused with the same message:
/// the answer tells nothing of which Application exists there.
fn claims_on_another_namespaces_applications_tell_nothing(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::start(&cluster, "oracle-a").await;
        apply_as(
            &env.client,
            "test",
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "oracle-b"}}),
        )
        .await;
        apply_as(
            &env.client,
            "test",
            &json!({"apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
                "metadata": {"name": "secret-project", "namespace": "oracle-b"},
                "spec": {"source": {"repository": "platform", "path": "x"}, "serviceAccountName": "deployer",
                         "destination": {"namespace": "oracle-b"}, "suspend": true}}),
        )
        .await;
        let wt = env.repository("platform").await;
        for (app, claimed) in [("probe-exists", "oracle-b/secret-project"), ("probe-ghost", "oracle-b/no-such-project")]
        {
            // The tenant's own object, claiming the other namespace's Application.
            apply_as(
                &env.client,
                "tenant",
                &json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": app, "namespace": "oracle-a",
                                 "annotations": {names::annotations::APPLICATION: claimed}},
                    "data": {"color": "tenant"}}),
            )
            .await;
            wt.write(&format!("{app}/cm.yaml"), &CONFIG.replace("settings", app));
        }
        let commit = wt.commit_and_push("two probes");
        env.refresh("platform", &commit).await;
        let mut messages = BTreeSet::new();
        for (app, claimed) in [("probe-exists", "oracle-b/secret-project"), ("probe-ghost", "oracle-b/no-such-project")]
        {
            env.create_app(
                app,
                json!({"source": {"repository": "platform", "path": app}, "serviceAccountName": "deployer",
                       "destination": {"namespace": "oracle-a"}, "sync": {"conflictPolicy": "adopt"}}),
            )
            .await;
            let message = eventually("the probe refused", WAIT, || async {
                let (status, reason, message) = ready(&env.apps().get(app).await.ok()?);
                (status == "False" && reason == "ValidationFailure").then_some(message)
            })
            .await;
            assert!(message.contains(&format!("is managed by Application {claimed}")), "{message}");
            let message = message.split(" (attempt ").next().unwrap_or_default().to_string();
            messages.insert(message.replace(claimed, "CLAIMED").replace(app, "PROBE"));
        }
        assert_eq!(messages.len(), 1, "the answers differ: {messages:?}");
    });
}

/// A desired object carrying `metadata.resourceVersion: "1"` in Git, the value of the
/// create-only precondition (`decisions::absent`), over an object that exists: its refusal is
/// an `ApplyConflict` the attempt fails on, not a plan made again at once, and again.
fn a_resource_version_from_git_is_a_conflict_not_a_loop(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::start(&cluster, "pinned").await;
        let wt = env.repository("platform").await;
        wt.write(
            "pinned/cm.yaml",
            &CONFIG.replace("  name: settings\n", "  name: settings\n  resourceVersion: \"1\"\n"),
        );
        let commit = wt.commit_and_push("a pinned resourceVersion");
        env.refresh("platform", &commit).await;
        apply_as(
            &env.client,
            "other-tool",
            &json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings", "namespace": "pinned"}, "data": {"color": "blue"}}),
        )
        .await;
        env.create_app(
            "pinned",
            json!({"source": {"repository": "platform", "path": "pinned"}, "serviceAccountName": "deployer",
                   "destination": {"namespace": "pinned"}, "failurePolicy": {"maxAttempts": 1}}),
        )
        .await;
        let rev = until_phase(&env, "pinned", &commit, RevisionPhase::Failed, &mut BTreeSet::new()).await;
        assert_eq!(rev.status.as_ref().unwrap().failure.clone().unwrap().reason, "ApplyConflict");
    });
}

/// One object, one Application (issue 18, item 5): an Application declaring an object another
/// Application manages is refused with a ValidationFailure naming that Application, and applies
/// nothing; once that Application is deleted (its objects orphaned), it takes the object over.
fn an_object_belongs_to_one_application(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::start(&cluster, "shared").await;
        let wt = env.repository("platform").await;
        wt.write("first/cm.yaml", &CONFIG.replace("blue", "first"))
            .write("second/cm.yaml", &CONFIG.replace("blue", "second"))
            .write("second/own.yaml", &CONFIG.replace("settings", "own"));
        let commit = wt.commit_and_push("two Applications, one ConfigMap");
        env.refresh("platform", &commit).await;
        let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "shared");
        let spec = |path: &str| {
            json!({"source": {"repository": "platform", "path": path}, "serviceAccountName": "deployer",
                   "destination": {"namespace": "shared"}})
        };
        env.create_app("first", spec("first")).await;
        until_phase(&env, "first", &commit, RevisionPhase::Healthy, &mut BTreeSet::new()).await;
        let color = |c: &ConfigMap| c.data.as_ref().and_then(|d| d.get("color")).cloned().unwrap_or_default();
        assert_eq!(color(&cms.get("settings").await.unwrap()), "first");

        env.create_app("second", spec("second")).await;
        let message = eventually("the second Application refused", WAIT, || async {
            let (status, reason, message) = ready(&env.apps().get("second").await.ok()?);
            (status == "False" && reason == "ValidationFailure").then_some(message)
        })
        .await;
        assert!(message.contains("ConfigMap shared/settings is managed by Application shared/first"), "{message}");
        let events = env.events("second").await;
        assert!(
            events.iter().any(|(t, r, n)| t == "Warning" && r == "ValidationFailure" && n.contains("shared/first")),
            "{events:?}"
        );
        // Nothing of the second was applied, and the first is untouched.
        assert!(cms.get_opt("own").await.unwrap().is_none());
        let settings = cms.get("settings").await.unwrap();
        assert_eq!(color(&settings), "first");
        assert_eq!(settings.annotations()[names::annotations::APPLICATION], "shared/first");
        assert_eq!(ready(&env.apps().get("first").await.unwrap()).0, "True");

        // The first Application is deleted (deletionPolicy Orphan): its objects are nobody's,
        // and the second takes the ConfigMap over.
        env.apps().delete("first", &DeleteParams::default()).await.unwrap();
        eventually("the first Application gone", WAIT, || async {
            env.apps().get_opt("first").await.ok()?.is_none().then_some(())
        })
        .await;
        env.poke("second", "first-is-gone").await;
        eventually("the second Application owning the ConfigMap", WAIT, || async {
            let c = cms.get("settings").await.ok()?;
            (color(&c) == "second" && c.annotations().get(names::annotations::APPLICATION)? == "shared/second")
                .then_some(())
        })
        .await;
    });
}

/// Render failures of a Revision being rolled out are attempts: each is recorded, the next
/// render waits for the backoff, and after `maxAttempts` the Revision is paused, a failing render
/// counting nothing more; a render that works again (its `valuesFrom` ConfigMap fixed) is a new
/// desired state and rolls out at once.
fn render_failures_are_attempts_that_back_off_and_pause(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let ns = "render-attempts";
        let env = Env::start(&cluster, ns).await;
        let values = |mode: &str| {
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web-values", "namespace": ns},
                   "data": {"values.yaml": format!("mode: {mode}\n")}})
        };
        apply_as(&env.client, "test", &values("broken")).await;
        let wt = env.repository("platform").await;
        wt.write("chart/Chart.yaml", "apiVersion: v2\nname: web\nversion: 0.1.0\n").write(
            "chart/templates/settings.yaml",
            "{{ if eq .Values.mode \"broken\" }}{{ fail \"mode is broken\" }}{{ end }}\
             apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  mode: {{ .Values.mode }}\n",
        );
        let commit = wt.commit_and_push("chart");
        env.refresh("platform", &commit).await;
        env.create_app(
            "web",
            json!({"source": {"repository": "platform", "path": "chart",
                              "render": {"type": "Helm", "helm": {"valuesFrom": [{"kind": "ConfigMap", "name": "web-values"}]}}},
                   "serviceAccountName": "deployer", "destination": {"namespace": ns},
                   "failurePolicy": {"maxAttempts": 2, "backoff": {"duration": "4s", "factor": 1}}}),
        )
        .await;
        // Between the two attempts: a failing template is not something a retry fixes, so the
        // Revision, like the Application, is Stalled from the first attempt on.
        let backing_off = eventually("the first render attempt failed, a second scheduled", WAIT, || async {
            let app = env.apps().get("web").await.ok()?;
            let r = env.revisions().get(app.status.as_ref()?.desired_revision.as_ref()?).await.ok()?;
            (r.status.as_ref()?.attempts.len() == 1 && phase(&r) == Some(RevisionPhase::Failed)).then_some(r)
        })
        .await;
        assert_eq!(condition(&backing_off, names::conditions::STALLED).0, "True", "{:?}", backing_off.status);
        assert_eq!(condition(&backing_off, names::conditions::READY), ("False".into(), "RenderFailure".into()));
        assert_eq!(backing_off.status.as_ref().unwrap().failure.as_ref().map(|f| f.retryable), Some(false));
        let paused = "(2 of 2 attempts failed: paused until the desired state changes)";
        let app = eventually("two render attempts failed, paused", WAIT, || async {
            let app = env.apps().get("web").await.ok()?;
            ready(&app).2.contains(paused).then_some(app)
        })
        .await;
        let (status, reason, _) = ready(&app);
        assert_eq!((status.as_str(), reason.as_str()), ("False", names::reasons::RENDER_FAILURE));
        let stalled = conditions::get(&app.status.as_ref().unwrap().conditions, names::conditions::STALLED);
        assert_eq!(stalled.map(|c| c.status.as_str()), Some("True"));
        let rev_name = app.status.as_ref().unwrap().desired_revision.clone().unwrap();
        let rev = env.revisions().get(&rev_name).await.unwrap();
        let attempts = rev.status.as_ref().unwrap().attempts.clone();
        assert_eq!(attempts.len(), 2, "{attempts:#?}");
        for a in &attempts {
            assert_eq!((a.result, a.reason.as_deref()), (AttemptResult::Failed, Some(names::reasons::RENDER_FAILURE)));
            assert_eq!(a.desired_state_hash, None, "a render failure deployed no desired state");
        }
        let waited = attempts[1].started_at.0.duration_since(attempts[0].finished_at.as_ref().unwrap().0);
        assert!(waited >= jiff::SignedDuration::from_secs(4), "the second render waited for the backoff: {waited}");
        assert_eq!(phase(&rev), Some(RevisionPhase::Failed));
        assert_eq!(condition(&rev, names::conditions::STALLED), ("True".into(), "RenderFailure".into()));
        assert_eq!(condition(&rev, names::conditions::RECONCILING), Default::default());

        // Paused: a reconcile (a spec change) renders again, and its failure counts nothing.
        let touch = |timeout: &str| json!({"spec": {"health": {"timeout": timeout}}});
        let patched =
            env.apps().patch("web", &PatchParams::default(), &Patch::Merge(touch("4m"))).await.unwrap();
        let generation = patched.metadata.generation;
        eventually("the spec change reconciled", WAIT, || async {
            let a = env.apps().get("web").await.ok()?;
            (a.status?.observed_generation == generation).then_some(())
        })
        .await;
        let rev = env.revisions().get(&rev_name).await.unwrap();
        assert_eq!(rev.status.as_ref().unwrap().attempts.len(), 2, "a paused render counts no attempt");

        // The values fixed: the same Revision renders a desired state that works, and deploys.
        apply_as(&env.client, "test", &values("ok")).await;
        env.apps().patch("web", &PatchParams::default(), &Patch::Merge(touch("5m"))).await.unwrap();
        let rev = until_phase(&env, "web", &commit, RevisionPhase::Healthy, &mut BTreeSet::new()).await;
        assert_eq!(rev.name_any(), rev_name);
        let last = rev.status.as_ref().unwrap().attempts.last().cloned().unwrap();
        assert_eq!((last.number, last.result), (3, AttemptResult::Succeeded));
        let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), ns);
        let settings = cms.get("settings").await.unwrap();
        assert_eq!(settings.data.unwrap().get("mode").map(String::as_str), Some("ok"));
    });
}

/// A reconcile of the copy of an Application from before this replica's own status write (a
/// trigger came before that write's watch event) runs on what the write returned: the Revision
/// is not created again, and the status write is not refused as computed from a stale copy.
fn a_reconcile_of_the_copy_before_its_own_status_write_runs_on_the_written_one(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let ns = "stale-copy";
        let (env, ctx) = Env::start_driven(&cluster, ns).await;
        env.app_from(
            "web",
            &[("web/config.yaml", CONFIG)],
            json!({"source": {"repository": "platform", "path": "web"}, "serviceAccountName": "deployer",
                   "destination": {"namespace": ns}}),
        )
        .await;
        let desired = |a: &Application| a.status.as_ref().and_then(|s| s.desired_revision.clone());
        // The first reconcile adds the finalizer; a later one creates the Revision, applies and
        // writes the status. `before`: the copy that status write was computed from.
        let deadline = std::time::Instant::now() + WAIT;
        let mut before = None;
        let revision = loop {
            let app = Arc::new(env.apps().get("web").await.unwrap());
            if let Some(r) = desired(&app) {
                break r;
            }
            assert!(std::time::Instant::now() < deadline, "no status written: {:#?}", app.status);
            application::reconcile(app.clone(), ctx.clone()).await.unwrap();
            before = Some(app);
        };
        let before = before.expect("reconciled");
        assert_eq!(desired(&before), None);
        let creates = |sim: &simcluster::SimCluster| -> u64 {
            let counts = sim.request_counts().into_iter();
            counts.filter(|c| c.verb == "create" && c.resource == "revisions").map(|c| c.count).sum()
        };
        let created = cluster.sim().map(creates);

        let action = application::reconcile(before, ctx.clone()).await.unwrap();
        let stale = kube::runtime::controller::Action::requeue(Duration::from_millis(500));
        assert_ne!(action, stale, "the status write was refused as computed from a stale copy");
        let app = env.apps().get("web").await.unwrap();
        assert_eq!(desired(&app).as_deref(), Some(revision.as_str()));
        if cluster.require_simcluster("the Revision is created once", "request counts") {
            let sim = cluster.sim().unwrap();
            assert_eq!(created, Some(1));
            assert_eq!(creates(sim), 1, "the Revision was created again");
        }
    });
}

/// While an attempt waits for health, each reconcile plans from the watch caches (here, with
/// no shard watches running, from the service account's lists, which carry resourceVersions
/// too): an object a plan found unchanged is not read again until its resourceVersion moves.
fn an_attempt_waiting_for_health_does_not_read_its_unchanged_objects_again(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let ns = "waiting";
        let (env, ctx) = Env::start_driven(&cluster, ns).await;
        // Its Pods become ready only after ten minutes: the attempt waits all test long.
        let slow = web_deployment_ready_after("nginx:1.27", 600000);
        env.app_from(
            "web",
            &[("web/config.yaml", CONFIG), ("web/deploy.yaml", &slow)],
            json!({"source": {"repository": "platform", "path": "web"}, "serviceAccountName": "deployer",
                   "destination": {"namespace": ns}}),
        )
        .await;
        let reconcile = || async {
            let app = Arc::new(env.apps().get("web").await.unwrap());
            application::reconcile(app, ctx.clone()).await.unwrap();
        };
        let running = || async {
            let app = env.apps().get("web").await.ok()?;
            let rev = env.revisions().get(app.status?.desired_revision.as_deref()?).await.ok()?;
            let last = rev.status?.attempts.last().cloned()?;
            Some(last.result == AttemptResult::Running)
        };
        let gets = |sim: &simcluster::SimCluster| -> u64 {
            let counts = sim.request_counts().into_iter();
            counts.filter(|c| c.verb == "get" && c.resource == "configmaps").map(|c| c.count).sum()
        };
        let deadline = std::time::Instant::now() + WAIT;
        while running().await != Some(true) {
            assert!(std::time::Instant::now() < deadline, "no attempt started");
            reconcile().await;
        }
        // Not even the first look after the attempt's apply reads the ConfigMap again: the
        // apply returned it as it is.
        let before = cluster.sim().map(gets);
        for _ in 0..4 {
            reconcile().await;
        }
        assert_eq!(running().await, Some(true), "the attempt still waits for the Deployment");
        if cluster.require_simcluster("the ConfigMap is not read again", "request counts") {
            let sim = cluster.sim().unwrap();
            assert_eq!(gets(sim) - before.unwrap(), 0, "the unchanged ConfigMap was read again while waiting");
        }
    });
}

/// A driven Application `web` of one ConfigMap in `ns`, reconciled with the context returned
/// until it is Ready: the Application then, and the reconciles that took.
async fn a_ready_config_map(cluster: &Cluster, ns: &str) -> (Env, Arc<application::Context>, Application, usize) {
    let (env, ctx) = Env::start_driven(cluster, ns).await;
    env.app_from(
        "web",
        &[("web/config.yaml", CONFIG)],
        json!({"source": {"repository": "platform", "path": "web"}, "serviceAccountName": "deployer",
               "destination": {"namespace": ns}}),
    )
    .await;
    let deadline = std::time::Instant::now() + WAIT;
    let mut reconciles = 0;
    let mut app = env.apps().get("web").await.unwrap();
    while ready(&app).1 != "Succeeded" {
        assert!(std::time::Instant::now() < deadline, "the Application never turned Ready");
        application::reconcile(Arc::new(app), ctx.clone()).await.unwrap();
        reconciles += 1;
        app = env.apps().get("web").await.unwrap();
    }
    (env, ctx, app, reconciles)
}

fn the_steps_one_reconcile_takes_on_a_revision_are_told_in_one_event(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let (env, _ctx, app, reconciles) = a_ready_config_map(&cluster, "told-once").await;
        let rev = app.status.and_then(|s| s.desired_revision).expect("a desired Revision");
        let events = env.events("web").await;
        let about: Vec<&(String, String, String)> = events.iter().filter(|e| e.2.contains(rev.as_str())).collect();
        // A ConfigMap is Healthy once applied: the reconcile that created the Revision applied
        // it and saw it Healthy, and said so in one Event.
        assert_eq!(reconciles, 1, "{events:#?}");
        assert_eq!(about.len(), 1, "{events:#?}");
        let (kind, reason, note) = about[0];
        assert_eq!((kind.as_str(), reason.as_str()), ("Normal", "Succeeded"), "{note}");
        for step in
            [format!("Revision {rev} for commit"), "attempt 1: applying".into(), format!("Revision {rev} is Healthy")]
        {
            assert!(note.contains(&step), "{step:?} missing from {note:?}");
        }
    });
}

fn a_replica_taking_over_an_application_nothing_changed_writes_nothing(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let (env, _ctx, before, _) = a_ready_config_map(&cluster, "taken-over").await;
        // Its shard moves: another replica, which kept nothing of the reconciles above, checks it.
        let (other, _cache) = Env::another_replica(&cluster).await;
        application::reconcile(Arc::new(before.clone()), other).await.unwrap();
        let after = env.apps().get("web").await.unwrap();
        assert_eq!(
            after.resource_version(),
            before.resource_version(),
            "the status was written again:\nbefore {:#?}\nafter {:#?}",
            before.status,
            after.status
        );
    });
}

/// A ConfigMap, a Service and a Deployment of no replicas, as the load test's fleet has: the
/// Deployment is Healthy once its controller reports the generation, which comes after the
/// apply, and that report alone (no Pod, no resync within the test) must turn the Application
/// Ready: within seconds of the report, not at the rollout's next poll (30 s for watched kinds,
/// `decisions::rollout::WATCHED_POLL`), which a lost trigger would wait for. The rollout's first
/// look awaits that report from the shard's watch (`rollout/observed.rs`): the reconcile that
/// applied the objects saw them Healthy and told it in one Event.
fn a_deployment_of_no_replicas_turns_ready_on_its_controllers_report(cluster: Cluster) {
    const SERVICE: &str =
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  selector: {app: web}\n  ports: [{port: 80}]\n";
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let ns = "no-replicas";
        let env = Env::start(&cluster, ns).await;
        let idle = deployment("web").replicas(0).image("nginx:1.27").to_string();
        env.app_from(
            "web",
            &[("web/config.yaml", CONFIG), ("web/service.yaml", SERVICE), ("web/deploy.yaml", &idle)],
            json!({"source": {"repository": "platform", "path": "web"}, "serviceAccountName": "deployer",
                   "destination": {"namespace": ns}}),
        )
        .await;
        // Well under the resync (5 minutes) and the health timeout.
        let wait = Duration::from_secs(45);
        let app = eventually("the Application Ready", wait, || async {
            let app = env.apps().get("web").await.ok()?;
            (ready(&app).0 == "True").then_some(app)
        })
        .await;
        let ready_at = conditions::get(&app.status.as_ref().unwrap().conditions, names::conditions::READY)
            .map(|c| c.last_transition_time.0)
            .expect("Ready");
        let deploy = Api::<Deployment>::namespaced(env.client.clone(), ns).get("web").await.unwrap();
        let reported_at = deploy
            .managed_fields()
            .iter()
            .filter(|m| m.subresource.as_deref() == Some("status"))
            .filter_map(|m| m.time.as_ref().map(|t| t.0))
            .max()
            .expect("the Deployment controller's status write");
        // Both are whole seconds.
        let after = ready_at.duration_since(reported_at);
        assert!(
            after < jiff::SignedDuration::from_secs(10),
            "Ready {ready_at}, {after:?} after the Deployment controller's report ({reported_at}): woken by a poll, not by the report"
        );
        let rev = app.status.and_then(|s| s.desired_revision).expect("a desired Revision");
        let events = env.events("web").await;
        let about: Vec<&(String, String, String)> = events.iter().filter(|e| e.2.contains(rev.as_str())).collect();
        assert_eq!(about.len(), 1, "the first rollout took more than one reconcile: {events:#?}");
        let (kind, reason, note) = about[0];
        assert_eq!((kind.as_str(), reason.as_str()), ("Normal", "Succeeded"), "{note}");
        for step in ["attempt 1: applying".to_string(), format!("Revision {rev} is Healthy")] {
            assert!(note.contains(&step), "{step:?} missing from {note:?}");
        }
    });
}

testkit::both!(
    render_failures_are_attempts_that_back_off_and_pause,
    a_replica_taking_over_an_application_nothing_changed_writes_nothing,
    the_steps_one_reconcile_takes_on_a_revision_are_told_in_one_event,
    a_prune_deletes_only_the_object_it_listed,
    an_object_belongs_to_one_application,
    claims_on_another_namespaces_applications_tell_nothing,
    conflicts_permissions_and_deletion_policies,
    a_resource_version_from_git_is_a_conflict_not_a_loop,
    symlinks_out_of_the_checkout_fail_the_source_and_nothing_is_pruned,
    a_reconcile_of_the_copy_before_its_own_status_write_runs_on_the_written_one,
    an_attempt_waiting_for_health_does_not_read_its_unchanged_objects_again,
    a_deployment_of_no_replicas_turns_ready_on_its_controllers_report,
);

testkit::both!(
    a_rollout_applies_waits_for_health_and_prunes_safely,
    a_deployment_edited_by_hand_other_watched_kinds_and_zero_writes_at_rest,
    drift_is_reported_or_repaired_and_health_keeps_being_observed,
);
