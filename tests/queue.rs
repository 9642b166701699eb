//! One reconcile queue per replica, fair across namespaces (`src/controller/queue/`): with one
//! slot for the whole replica over four shards, a tenant with one Application that arrives
//! while another tenant has 150 queued is served in turn with them, not after them.
//!
//! The order itself is the table test's (`src/controller/queue/turns.rs`, which fails without
//! round robin); this runs the whole path, and asserts that the small tenant is served in turn:
//! fewer than a sixth of the busy Applications go first. The count starts when the small
//! tenant's Application has its shard label (the leader's labeller is outside the queue). Runs
//! count 3 to 6 (5 to 7 when the queue was made; 15 to 24 with the former per-shard queues).
//! With shards whose controllers started late, every busy Application of the shards that
//! started first went first, 27 to 49: the HealthCheck list, waited for with kube's
//! `Store::wait_until_ready`, woke one shard of four and the others at its 10 s timeout
//! (`replica/healthchecks.rs FirstList`).
//!
//! A reconcile that waited for its slot runs on the store's copy as it is then, not on the one it
//! was handed when it fell due (`run.rs reconcile_tracked`).

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

/// The manager with one reconcile slot for the whole replica, its Leases in [`SYSTEM`], and
/// `extra` arguments.
async fn one_slot_manager(cluster: &Cluster, client: &kube::Client, extra: &[&str]) -> Manager {
    apply_as(client, "test", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM}})).await;
    let mut args = vec!["--enable-webhooks", "false", "--concurrent-applications", "1", "--lease-namespace", SYSTEM];
    args.extend(["--kube-api-qps", "0"]);
    args.extend(extra);
    Manager::start(cluster, &args, &[("RUST_LOG", "kuvryn_sync=info")])
}

fn ready(a: &Application) -> bool {
    a.status.as_ref().is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
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
        let manager = one_slot_manager(&cluster, &client, &["--shards", "4"]).await;
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
        // Counted from when the leader's labeller gave it its shard, the moment its shard's
        // watch can queue it: the labelling is outside the queue, and on a loaded machine it
        // takes seconds in which the busy tenant keeps the slot for want of anyone else.
        let labelled = eventually("the small tenant's Application labelled with its shard", WAIT, || async {
            let app = Api::<Application>::namespaced(client.clone(), SMALL).get("web").await.ok()?;
            app.labels().get(names::labels::SHARD).map(|_| jiff::Timestamp::now())
        })
        .await;
        let (small, busy) = eventually("a Revision for every Application", WAIT, || async {
            let small = revisions_created(&client, SMALL).await.first().copied()?;
            let busy = revisions_created(&client, BUSY).await;
            (busy.len() == APPS).then_some((small, busy))
        })
        .await;
        let before = busy.iter().filter(|t| **t < small).count();
        let queued = busy.iter().filter(|t| **t < labelled).count();
        eprintln!(
            "busy Applications planned before the small tenant's: {before} of {APPS}, {queued} of them before it had its shard"
        );
        let before = before - queued;
        assert!(
            before < APPS / 6,
            "the small tenant waited behind the busy one: {before} of {APPS} busy Applications had their Revision before it\n{}",
            manager.stderr()
        );
        eventually("every Application Ready", WAIT, || async {
            let busy = Api::<Application>::namespaced(client.clone(), BUSY).list(&ListParams::default()).await.ok()?;
            let small = Api::<Application>::namespaced(client.clone(), SMALL).get("web").await.ok()?;
            (busy.items.iter().filter(|a| ready(a)).count() == APPS && ready(&small)).then_some(())
        })
        .await;
    });
}

/// A reconcile handed the copy of an Application from before this replica's own status write,
/// which then waits for a slot while the watch shows that write, runs on the store's copy: its
/// status write is not refused as computed from a stale copy (409). Timeline, one slot: `x` is
/// asked for a reconcile (X1), whose read of its ConfigMap `cm-x` simcluster holds 3 s; meanwhile the
/// Application watches are held 6 s and `y`'s ConfigMap is edited (Y waits for the slot; its read
/// will be held 10 s). Once X1 has written x's status, `x`'s ConfigMap is edited: X2 is handed
/// the held store's copy, from before X1's write, and waits behind Y while the watches resume
/// and show the write. simcluster only: a real server cannot be made to hold requests.
fn a_reconcile_that_waited_for_its_slot_runs_on_the_stores_newer_copy(cluster: Cluster) {
    use simcluster::faults::{FaultAction, FaultRule};
    const NS: &str = "stale";
    let sim = cluster.sim().expect("simcluster");
    let server = GitServer::start();
    let url = server.create_repo("platform");
    let work = WorkTree::clone(&url);
    work.write(".ksync.yaml", "applications: []\n");
    let cm = |name: &str| format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: {{v: '1'}}\n");
    work.write("x/cm.yaml", &cm("cm-x")).write("y/cm.yaml", &cm("cm-y"));
    work.commit_and_push("x and y");
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let client = cluster.client().await;
        install_crds(&client).await;
        deployer_namespace(&client, NS).await;
        let manager = one_slot_manager(&cluster, &client, &[]).await;
        create_repository(&client, NS, &url).await;
        application(&client, NS, "x", "x").await;
        application(&client, NS, "y", "y").await;
        let apps = Api::<Application>::namespaced(client.clone(), NS);
        eventually("x and y Ready", Duration::from_secs(120), || async {
            let (x, y) = (apps.get("x").await.ok()?, apps.get("y").await.ok()?);
            (ready(&x) && ready(&y)).then_some(())
        })
        .await;
        let sa = format!("system:serviceaccount:{NS}:deployer");
        let held_read = |name: &str, millis: u64| FaultRule {
            verb: Some("get".into()),
            resource: Some("configmaps".into()),
            name: Some(name.into()),
            user: Some(sa.clone()),
            action: Some(FaultAction::Latency { millis }),
            times: Some(1),
            ..Default::default()
        };
        let edit = |name: &'static str| {
            let client = client.clone();
            async move {
                let patch = json!({"data": {"v": "edited"}});
                Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client, NS)
                    .patch(name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch))
                    .await
                    .unwrap();
            }
        };
        let from = sim.audit_log().len();
        let x_status_writes = |code: u16| {
            sim.audit_log()[from..]
                .iter()
                .filter(|e| e.resource == "applications/status" && e.name == "x" && e.code == code)
                .count()
        };
        sim.add_fault(held_read("cm-x", 3000));
        let poke = json!({"metadata": {"annotations": {names::annotations::RECONCILE_REQUESTED_AT: "now"}}});
        apps.patch("x", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&poke)).await.unwrap();
        eventually("X1 reading x", Duration::from_secs(30), || async { (sim.fault_times_left() == 0).then_some(()) })
            .await;
        sim.add_fault(FaultRule {
            verb: Some("watch".into()),
            group: Some("sync.kuvryn.io".into()),
            resource: Some("applications".into()),
            action: Some(FaultAction::Latency { millis: 6000 }),
            ..Default::default()
        });
        sim.drop_watches(Some("sync.kuvryn.io/applications"));
        sim.add_fault(held_read("cm-y", 10_000));
        edit("cm-y").await;
        eventually("X1's status write", Duration::from_secs(30), || async {
            (x_status_writes(200) == 1).then_some(())
        })
        .await;
        eventually("Y reading y", Duration::from_secs(30), || async { (sim.fault_times_left() == 0).then_some(()) })
            .await;
        edit("cm-x").await;
        // Only the watches dropped above are held.
        sim.clear_faults();
        eventually("x Drifted", Duration::from_secs(60), || async {
            let x = apps.get("x").await.ok()?;
            x.status?.sync?.drifted.iter().any(|r| r.name == "cm-x").then_some(())
        })
        .await;
        assert_eq!(x_status_writes(409), 0, "a status write of x refused as stale\n{}", manager.stderr());
    });
}

testkit::both!(a_small_tenant_is_served_in_turn_with_a_busy_one);

mod a_reconcile_that_waited_for_its_slot_runs_on_the_stores_newer_copy {
    #[test]
    fn simcluster() {
        super::a_reconcile_that_waited_for_its_slot_runs_on_the_stores_newer_copy(testkit::Cluster::start());
    }
}
