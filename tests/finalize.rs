//! Deleting an Application with `deletionPolicy: DeleteManagedResources`, end to end on both
//! servers: it never deletes what is not its own to delete (issue 18, item 6), and it never wedges
//! the namespace it lives in.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject};
use kube::discovery::ApiResource;
use kuvryn_sync::api::names;
use kuvryn_sync::api::revision::RevisionPhase;
use serde_json::{Value, json};
use testkit::apps::{Env, WAIT};
use testkit::{Cluster, apply_as, eventually};

/// How long a namespace may take to be emptied and removed by the namespace controller.
const NAMESPACE_GONE: std::time::Duration = std::time::Duration::from_secs(120);

fn configmap(namespace: &str, name: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {namespace}\ndata:\n  k: v\n")
}

fn namespace(name: &str) -> String {
    format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n")
}

fn crd(plural: &str, kind: &str) -> String {
    format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: {plural}.fin.example.com\nspec:\n  group: fin.example.com\n  scope: Namespaced\n  names: {{plural: {plural}, singular: {singular}, kind: {kind}}}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        x-kubernetes-preserve-unknown-fields: true\n",
        singular = plural.trim_end_matches('s'),
    )
}

fn custom(kind: &str, namespace: &str, name: &str) -> String {
    format!(
        "apiVersion: fin.example.com/v1\nkind: {kind}\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  size: 1\n"
    )
}

/// Wait until the Application's desired Revision is Healthy.
async fn until_healthy(env: &Env, app: &str) {
    env.revision_where(app, &format!("{app} Healthy"), |r| {
        r.status.as_ref().is_some_and(|s| s.phase == RevisionPhase::Healthy)
    })
    .await;
}

/// Delete the Application and wait until it is gone.
async fn delete_app(env: &Env, app: &str) {
    env.apps().delete(app, &DeleteParams::default()).await.unwrap();
    eventually(&format!("the Application {app} to go"), WAIT, || async {
        env.apps().get_opt(app).await.ok()?.is_none().then_some(())
    })
    .await;
}

/// Whether the Namespace `name` is gone or on its way (deletionTimestamp set).
async fn going(client: &kube::Client, name: &str) -> bool {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces.get_opt(name).await.unwrap().is_none_or(|n| n.metadata.deletion_timestamp.is_some())
}

/// The PruneSkipped Warning Events about `app`, their notes.
async fn prune_skipped(env: &Env, app: &str) -> Vec<String> {
    env.events(app)
        .await
        .into_iter()
        .filter(|(t, r, _)| t == "Warning" && r == names::events::PRUNE_SKIPPED)
        .map(|(_, _, note)| note)
        .collect()
}

fn spec(env: &Env, path: &str, cluster_kinds: Value) -> Value {
    json!({"source": {"repository": "platform", "path": path}, "serviceAccountName": "deployer",
           "destination": {"namespace": env.ns, "allowedNamespaces": [format!("{}-*", env.ns)],
                           "clusterResources": cluster_kinds},
           "deletionPolicy": "DeleteManagedResources"})
}

/// See: issue 18, item 6. A managed Namespace that holds an object the Application does not
/// manage is kept, with that object, and a PruneSkipped Warning Event names it; a managed
/// Namespace holding only the Application's objects is deleted, and so is everything else.
fn a_namespace_holding_what_the_application_does_not_manage_is_kept(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::start(&cluster, "fin-ns").await;
        env.allow_everything().await;
        let wt = env.repository("platform").await;
        wt.write("app/shared.yaml", &namespace("fin-ns-shared"))
            .write("app/own.yaml", &namespace("fin-ns-own"))
            .write("app/shared-cm.yaml", &configmap("fin-ns-shared", "settings"))
            .write("app/own-cm.yaml", &configmap("fin-ns-own", "settings"))
            .write("app/cm.yaml", &configmap("fin-ns", "settings"));
        let commit = wt.commit_and_push("namespaces");
        env.refresh("platform", &commit).await;
        env.create_app("app", spec(&env, "app", json!([{"group": "", "kind": "Namespace"}]))).await;
        until_healthy(&env, "app").await;
        // Someone else's object in a Namespace the Application manages.
        apply_as(
            &env.client,
            "someone",
            &json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "unmanaged", "namespace": "fin-ns-shared"}, "data": {"mine": "yes"}}),
        )
        .await;

        delete_app(&env, "app").await;
        let notes = prune_skipped(&env, "app").await;
        let cms = |ns: &str| Api::<ConfigMap>::namespaced(env.client.clone(), ns);
        assert!(!going(&env.client, "fin-ns-shared").await, "a Namespace holding another's object is kept");
        assert!(cms("fin-ns-shared").get_opt("unmanaged").await.unwrap().is_some());
        assert!(cms("fin-ns-shared").get_opt("settings").await.unwrap().is_none(), "its own objects in it are deleted");
        assert!(cms("fin-ns").get_opt("settings").await.unwrap().is_none());
        assert!(going(&env.client, "fin-ns-own").await, "a Namespace holding only its objects is deleted: {notes:?}");
        assert!(
            notes
                .iter()
                .any(|n| n.contains("Namespace fin-ns-shared") && n.contains("ConfigMap fin-ns-shared/unmanaged")),
            "{notes:?}"
        );
        assert!(!notes.iter().any(|n| n.contains("fin-ns-own")), "{notes:?}");
    });
}

/// See: issue 18, item 6. A managed CustomResourceDefinition with a custom resource the
/// Application does not manage (in any namespace) is kept, with that resource, and a PruneSkipped
/// Warning Event names it; one whose resources are all the Application's is deleted.
fn a_crd_with_custom_resources_the_application_does_not_manage_is_kept(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::start(&cluster, "fin-crd").await;
        env.allow_everything().await;
        testkit::deployer_namespace(&env.client, "fin-crd-other").await;
        let wt = env.repository("platform").await;
        wt.write("app/widgets.yaml", &crd("widgets", "Widget"))
            .write("app/gadgets.yaml", &crd("gadgets", "Gadget"))
            .write("app/widget.yaml", &custom("Widget", "fin-crd", "ours"))
            .write("app/gadget.yaml", &custom("Gadget", "fin-crd", "ours"));
        let commit = wt.commit_and_push("definitions");
        env.refresh("platform", &commit).await;
        let crds = json!([{"group": "apiextensions.k8s.io", "kind": "CustomResourceDefinition"}]);
        env.create_app("app", spec(&env, "app", crds)).await;
        until_healthy(&env, "app").await;
        // Someone else's Widget, in another namespace.
        apply_as(
            &env.client,
            "someone",
            &json!({"apiVersion": "fin.example.com/v1", "kind": "Widget",
            "metadata": {"name": "stray", "namespace": "fin-crd-other"}, "spec": {"size": 2}}),
        )
        .await;

        delete_app(&env, "app").await;
        let definitions: Api<CustomResourceDefinition> = Api::all(env.client.clone());
        let widgets_crd = definitions.get_opt("widgets.fin.example.com").await.unwrap();
        assert!(
            widgets_crd.as_ref().is_some_and(|c| c.metadata.deletion_timestamp.is_none()),
            "a CRD with another's custom resource is kept (deletionTimestamp: {:?})",
            widgets_crd.map(|c| c.metadata.deletion_timestamp)
        );
        let widget = ApiResource {
            group: "fin.example.com".into(),
            version: "v1".into(),
            api_version: "fin.example.com/v1".into(),
            kind: "Widget".into(),
            plural: "widgets".into(),
        };
        let widgets = |ns: &str| Api::<DynamicObject>::namespaced_with(env.client.clone(), ns, &widget);
        assert!(widgets("fin-crd-other").get_opt("stray").await.unwrap().is_some());
        assert!(widgets("fin-crd").get_opt("ours").await.unwrap().is_none(), "its own custom resources are deleted");
        let gadgets_crd = definitions.get_opt("gadgets.fin.example.com").await.unwrap();
        assert!(
            gadgets_crd.as_ref().is_none_or(|c| c.metadata.deletion_timestamp.is_some()),
            "a CRD with only its custom resources is deleted"
        );
        let notes = prune_skipped(&env, "app").await;
        assert!(
            notes.iter().any(|n| n.contains("CustomResourceDefinition widgets.fin.example.com")
                && n.contains("Widget fin-crd-other/stray")),
            "{notes:?}"
        );
        assert!(!notes.iter().any(|n| n.contains("gadgets")), "{notes:?}");
    });
}

/// See: issue 18, item 6. An Application whose own namespace is deleted does not wedge it: the
/// namespace controller removes its service account's RoleBindings (here, first), so deletes in
/// that namespace would be refused; the finalizer tries none there, deletes what it manages
/// elsewhere as far as it still may, and lets the Application go, and the namespace with it.
fn an_application_does_not_wedge_its_own_namespace_being_deleted(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::start(&cluster, "fin-own").await;
        // The service account's rights: its Role in fin-own (Env), and ConfigMaps in
        // fin-own-away (a RoleBinding there, which outlives fin-own).
        apply_as(
            &env.client,
            "test",
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fin-own-away"}}),
        )
        .await;
        apply_as(
            &env.client,
            "test",
            &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "deployer", "namespace": "fin-own-away"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}]}),
        )
        .await;
        apply_as(
            &env.client,
            "test",
            &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "deployer", "namespace": "fin-own-away"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "deployer"},
            "subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": "fin-own"}]}),
        )
        .await;
        let wt = env.repository("platform").await;
        wt.write("app/own.yaml", &configmap("fin-own", "own"))
            .write("app/away.yaml", &configmap("fin-own-away", "away"));
        let commit = wt.commit_and_push("here and away");
        env.refresh("platform", &commit).await;
        let mut s = spec(&env, "app", json!([]));
        s["destination"]["allowedNamespaces"] = json!(["fin-own-away"]);
        env.create_app("app", s).await;
        until_healthy(&env, "app").await;
        let audit_from = cluster.sim().map(|s| s.audit_log().len()).unwrap_or_default();

        // The namespace is deleted; its RoleBindings go first.
        let bindings: Api<DynamicObject> = Api::namespaced_with(
            env.client.clone(),
            "fin-own",
            &ApiResource {
                group: "rbac.authorization.k8s.io".into(),
                version: "v1".into(),
                api_version: "rbac.authorization.k8s.io/v1".into(),
                kind: "RoleBinding".into(),
                plural: "rolebindings".into(),
            },
        );
        bindings.delete("deployer", &DeleteParams::default()).await.unwrap();
        let namespaces: Api<Namespace> = Api::all(env.client.clone());
        namespaces.delete("fin-own", &DeleteParams::default()).await.unwrap();
        eventually("the Application's namespace to go", NAMESPACE_GONE, || async {
            namespaces.get_opt("fin-own").await.ok()?.is_none().then_some(())
        })
        .await;
        let away: Api<ConfigMap> = Api::namespaced(env.client.clone(), "fin-own-away");
        assert!(away.get_opt("away").await.unwrap().is_none(), "what it manages elsewhere is deleted as far as it may");
        if let Some(sim) = cluster.sim() {
            let tried: Vec<_> = sim.audit_log()[audit_from..]
                .iter()
                .filter(|e| {
                    e.verb == "delete" && e.namespace == "fin-own" && e.user == "system:serviceaccount:fin-own:deployer"
                })
                .cloned()
                .collect();
            assert!(tried.is_empty(), "no delete is tried in the terminating namespace: {tried:#?}");
        }
    });
}

testkit::both!(
    a_namespace_holding_what_the_application_does_not_manage_is_kept,
    a_crd_with_custom_resources_the_application_does_not_manage_is_kept,
    an_application_does_not_wedge_its_own_namespace_being_deleted,
);
