//! One reconcile queue per replica, fair across namespaces (`src/controller/queue/`): with one
//! slot for the whole replica over four shards, a tenant with one Application that arrives
//! while another tenant has 150 queued is served in turn with them, not after them.
//!
//! The order itself is the table test's (`src/controller/queue/turns.rs`, which fails without
//! round robin); this runs the whole path. Measured: 5 to 7 busy Applications had their Revision
//! before the small tenant's; with the former per-shard queues (4 reconciles at once here, in an
//! order that happened to favour the newest trigger) 15 to 24, so the bound asserted here is
//! about being served in turn at all, not about that difference.

use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use kuvryn_sync::api::Application;
use kuvryn_sync::api::names;
use kuvryn_sync::api::revision::Revision;
use serde_json::json;
use testkit::manager::{Manager, SYSTEM};
use testkit::{
    Cluster, GitServer, WorkTree, apply_as, create_repository, deployer_namespace, eventually, install_crds,
};

const BUSY: &str = "busy";
const SMALL: &str = "small";
const APPS: usize = 150;
const WAIT: Duration = Duration::from_secs(300);

/// When each Revision of namespace `ns` was created (to the nanosecond).
async fn revisions_created(client: &kube::Client, ns: &str) -> Vec<jiff::Timestamp> {
    let Ok(list) = Api::<Revision>::namespaced(client.clone(), ns).list(&ListParams::default()).await else {
        return Vec::new();
    };
    list.items.iter().filter_map(|r| r.annotations().get(names::annotations::CREATED_AT)?.parse().ok()).collect()
}

async fn application(client: &kube::Client, ns: &str, name: &str, path: &str) {
    let app: Application = serde_json::from_value(json!({
        "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"source": {"repository": "platform", "path": path}, "serviceAccountName": "deployer",
                 "destination": {"namespace": ns}},
    }))
    .unwrap();
    Api::<Application>::namespaced(client.clone(), ns).create(&PostParams::default(), &app).await.unwrap();
}

fn a_small_tenant_is_served_in_turn_with_a_busy_one(cluster: Cluster) {
    let server = GitServer::start();
    let url = server.create_repo("platform");
    let work = WorkTree::clone(&url);
    work.write(".ksync.yaml", "applications: []\n");
    let cm = |name: &str| format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: {{v: '1'}}\n");
    for i in 0..APPS {
        work.write(&format!("busy/app-{i:03}/cm.yaml"), &cm(&format!("app-{i:03}")));
    }
    work.write("small/cm.yaml", &cm("web"));
    work.commit_and_push("two tenants");
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let client = cluster.client().await;
        install_crds(&client).await;
        deployer_namespace(&client, BUSY).await;
        deployer_namespace(&client, SMALL).await;
        apply_as(&client, "test", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM}})).await;
        let manager = Manager::start(
            &cluster,
            &[
                "--enable-webhooks",
                "false",
                "--concurrent-applications",
                "1",
                "--shards",
                "4",
                "--lease-namespace",
                SYSTEM,
                "--kube-api-qps",
                "0",
            ],
            &[("RUST_LOG", "kuvryn_sync=info")],
        );
        // The small tenant's Repository is ready first; the busy tenant's Applications wait for
        // theirs, so they all fall due together when it is fetched.
        create_repository(&client, SMALL, &url).await;
        for i in 0..APPS {
            application(&client, BUSY, &format!("app-{i:03}"), &format!("busy/app-{i:03}")).await;
        }
        create_repository(&client, BUSY, &url).await;
        // The first busy Revision: the rest of the busy tenant's Applications are queued.
        let end = std::time::Instant::now() + WAIT;
        while revisions_created(&client, BUSY).await.is_empty() {
            assert!(std::time::Instant::now() < end, "no busy Revision after {WAIT:?}\n{}", manager.stderr());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        application(&client, SMALL, "web", "small").await;
        let (small, busy) = eventually("a Revision for every Application", WAIT, || async {
            let small = revisions_created(&client, SMALL).await.first().copied()?;
            let busy = revisions_created(&client, BUSY).await;
            (busy.len() == APPS).then_some((small, busy))
        })
        .await;
        let before = busy.iter().filter(|t| **t < small).count();
        eprintln!("busy Applications planned before the small tenant's: {before} of {APPS}");
        assert!(
            before < APPS / 3,
            "the small tenant waited behind the busy one: {before} of {APPS} busy Applications had their Revision before it\n{}",
            manager.stderr()
        );
        eventually("every Application Ready", WAIT, || async {
            let ready = |a: &Application| {
                a.status.as_ref().is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            };
            let busy = Api::<Application>::namespaced(client.clone(), BUSY).list(&ListParams::default()).await.ok()?;
            let small = Api::<Application>::namespaced(client.clone(), SMALL).get("web").await.ok()?;
            (busy.items.iter().filter(|a| ready(a)).count() == APPS && ready(&small)).then_some(())
        })
        .await;
    });
}

testkit::both!(a_small_tenant_is_served_in_turn_with_a_busy_one);
