//! HealthChecks end to end, on simcluster and realkube: an Application manages an object of a
//! custom kind, a HealthCheck for that kind decides its health (Healthy, Degraded, back), and an
//! invalid HealthCheck is reported on its status (Stalled, InvalidExpression) while the objects
//! of its kind are Unknown, until it is fixed.

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use kuvryn_sync::api::application::Application;
use kuvryn_sync::api::conditions;
use kuvryn_sync::api::healthcheck::HealthCheck;
use kuvryn_sync::api::names;
use serde_json::{Value, json};
use testkit::apps::{Env, WAIT};
use testkit::{Cluster, apply_as, eventually};

const GROUP: &str = "hc.example.com";

/// A namespaced kind with a status subresource, so its status is written as a controller does.
fn crd() -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("gadgets.{GROUP}")},
        "spec": {"group": GROUP, "scope": "Namespaced",
                 "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                 "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}})
}

const GADGET: &str = "apiVersion: hc.example.com/v1\nkind: Gadget\nmetadata:\n  name: g1\nspec:\n  size: 3\n";

fn healthcheck(ns: &str, current: &str) -> Value {
    json!({"apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "HealthCheck",
        "metadata": {"name": "gadgets", "namespace": ns},
        "spec": {"target": {"apiVersion": format!("{GROUP}/v1"), "kind": "Gadget"},
                 "current": current,
                 "inProgress": "!has(status.phase) || status.phase == 'Pending'",
                 "failed": "has(status.phase) && status.phase == 'Failed'"}})
}

const CURRENT: &str = "has(status.phase) && status.phase == 'Ready'";

/// `(status, reason, message)` of condition `t` of the HealthCheck, when its status is for
/// its current generation.
async fn hc_condition(api: &Api<HealthCheck>, t: &str) -> Option<(String, String, String)> {
    let hc = api.get("gadgets").await.ok()?;
    let status = hc.status?;
    (status.observed_generation == hc.metadata.generation).then_some(())?;
    let c = conditions::get(&status.conditions, t)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

fn health(app: &Application) -> Option<(String, String)> {
    let h = app.status.as_ref()?.health.as_ref()?;
    Some((format!("{:?}", h.status), h.message.clone().unwrap_or_default()))
}

async fn until_health(env: &Env, what: &str, check: impl Fn(&str, &str) -> bool) -> (String, String) {
    eventually(what, WAIT, || async {
        let h = health(&env.apps().get("gadgets").await.ok()?)?;
        check(&h.0, &h.1).then_some(h)
    })
    .await
}

async fn set_phase(api: &Api<DynamicObject>, phase: &str) {
    let patch = json!({"status": {"phase": phase}});
    api.patch_status("g1", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
}

fn a_healthcheck_decides_the_health_of_its_kind(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let ns = "healthcheck";
        let env = Env::start(&cluster, ns).await;
        // The status controller is leader work in the manager; here it runs beside the others.
        let (stop, stopped) = tokio::sync::watch::channel(false);
        tokio::spawn(kuvryn_sync::controller::healthcheck::run(env.client.clone(), async move {
            let mut stopped = stopped;
            let _ = stopped.wait_for(|s| *s).await;
        }));
        apply_as(&env.client, "test", &crd()).await;
        let resource = ApiResource {
            group: GROUP.into(),
            version: "v1".into(),
            api_version: format!("{GROUP}/v1"),
            kind: "Gadget".into(),
            plural: "gadgets".into(),
        };
        let gadgets: Api<DynamicObject> = Api::namespaced_with(env.client.clone(), ns, &resource);
        eventually("the Gadget kind to be served", WAIT, || async { gadgets.list(&Default::default()).await.ok() })
            .await;
        let hcs: Api<HealthCheck> = Api::namespaced(env.client.clone(), ns);
        apply_as(&env.client, "test", &healthcheck(ns, CURRENT)).await;
        let ready = eventually("the HealthCheck to be Ready", WAIT, || async {
            hc_condition(&hcs, names::conditions::READY).await.filter(|c| c.0 == "True")
        })
        .await;
        assert_eq!(ready.1, names::reasons::SUCCEEDED);

        env.app_from(
            "gadgets",
            &[("gadgets/g1.yaml", GADGET)],
            json!({"source": {"repository": "platform", "path": "gadgets"}, "serviceAccountName": "deployer",
                   "destination": {"namespace": ns}, "health": {"timeout": "120s"}}),
        )
        .await;
        // No status yet: `inProgress` is true, the rollout waits.
        let (_, message) = until_health(&env, "the Gadget to be Progressing", |s, _| s == "Progressing").await;
        assert!(message.contains("HealthCheck gadgets: inProgress is true"), "{message}");
        set_phase(&gadgets, "Ready").await;
        until_health(&env, "the Gadget to be Healthy", |s, _| s == "Healthy").await;

        // `failed` turns true: Degraded, with the HealthCheck named.
        set_phase(&gadgets, "Failed").await;
        env.poke("gadgets", "failed").await;
        let (_, message) = until_health(&env, "the Application to be Degraded", |s, _| s == "Degraded").await;
        assert!(message.contains("Gadget healthcheck/g1: HealthCheck gadgets: failed is true"), "{message}");
        // `ksync app` and `ksync graph` judge the Gadget by the HealthCheck too.
        let shown = testkit::ksync::ok(&cluster, ns, &["app", "gadgets"]).stdout;
        assert!(shown.contains("HealthCheck gadgets: failed is true"), "{shown}");
        let graph = testkit::ksync::ok(&cluster, ns, &["graph", "gadgets"]).stdout;
        assert!(graph.contains("Gadget.hc.example.com healthcheck/g1  Degraded"), "{graph}");
        set_phase(&gadgets, "Ready").await;
        env.poke("gadgets", "recovered").await;
        until_health(&env, "the Application to be Healthy again", |s, _| s == "Healthy").await;

        // An invalid expression: the HealthCheck is Stalled and says why, the Gadget is Unknown
        // (counted as Progressing) with that message. No poke: the HealthCheck change triggers.
        apply_as(&env.client, "test", &healthcheck(ns, "status.phase ==")).await;
        let stalled = eventually("the HealthCheck to be Stalled", WAIT, || async {
            hc_condition(&hcs, names::conditions::STALLED).await.filter(|c| c.0 == "True")
        })
        .await;
        assert_eq!(stalled.1, names::reasons::INVALID_EXPRESSION);
        assert!(stalled.2.starts_with("current: "), "{stalled:?}");
        let ready = hc_condition(&hcs, names::conditions::READY).await.unwrap();
        assert_eq!((ready.0.as_str(), ready.1.as_str()), ("False", names::reasons::INVALID_EXPRESSION));
        let (status, message) = until_health(&env, "the Gadget to be Unknown", |_, m| m.contains("is invalid")).await;
        assert_eq!(status, "Progressing");
        assert!(message.contains("Gadget healthcheck/g1: HealthCheck gadgets is invalid: current: "), "{message}");

        // Fixed: Ready again, and the Application Healthy again.
        apply_as(&env.client, "test", &healthcheck(ns, CURRENT)).await;
        eventually("the HealthCheck to be Ready again", WAIT, || async {
            hc_condition(&hcs, names::conditions::READY).await.filter(|c| c.0 == "True")
        })
        .await;
        assert!(hc_condition(&hcs, names::conditions::STALLED).await.is_none());
        until_health(&env, "the Application to be Healthy after the fix", |s, _| s == "Healthy").await;
        let _ = stop.send(true);
    });
}

testkit::both!(a_healthcheck_decides_the_health_of_its_kind);
