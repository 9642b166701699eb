//! An idle Application costs no request: a drift check (a resync, nothing changing) does not
//! `GET` and dry-run again a desired object whose resourceVersion in the shard's watch cache is
//! the one its last plan found unchanged (`src/controller/application/unchanged.rs`). A hand
//! edit moves the resourceVersion, so it is read and noticed as before; a reconcile an operator
//! asks for reads everything. Nor is its Revision read again while the Revision watch shows the
//! copy last read or written unchanged (`src/controller/application/revision_cache.rs`). A
//! Deployment whose status alone moved since (its controller's bookkeeping) is not read again
//! either: the watch cache keeps workloads' status. Nor, once a restarted manager (or one a shard moved to) has read an
//! Application's objects, those that are as `status.sync.unchanged` records. simcluster, whose
//! audit log shows every write and dry run; the restart also on the real server.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kuvryn_sync::api::application::SyncState;
use kuvryn_sync::api::{Application, Repository};
use serde_json::json;
use testkit::manager::Manager;
use testkit::metrics::{Samples, metrics_until, value};
use testkit::{Cluster, GitServer, WorkTree, eventually, free_port, install_crds};

const NS: &str = "idle";

fn reconciles(m: &Samples) -> f64 {
    m.iter().filter(|((name, _), _)| name == "ksync_reconciles_total").map(|(_, v)| v).sum()
}

fn skipped(m: &Samples) -> f64 {
    value(m, "ksync_desired_reads_total", &[("source", "unchanged")])
}

fn read(m: &Samples) -> f64 {
    value(m, "ksync_desired_reads_total", &[("source", "api")])
}

/// The dry runs of the Application's objects, as its service account, since audit entry `from`
/// (the audit log has writes and dry runs, not reads): (resource, name).
fn dry_runs(sim: &simcluster::SimCluster, from: usize) -> Vec<(String, String)> {
    dry_runs_in(sim, NS, from)
}

/// `log` without its terminal colours.
fn plain(log: &str) -> String {
    regex::Regex::new("\x1b\\[[0-9;]*m").unwrap().replace_all(log, "").into_owned()
}

/// The dry runs in namespace `ns` by its `deployer` service account since audit entry `from`.
fn dry_runs_in(sim: &simcluster::SimCluster, ns: &str, from: usize) -> Vec<(String, String)> {
    let deployer = format!("system:serviceaccount:{ns}:deployer");
    sim.audit_log()
        .into_iter()
        .skip(from)
        .filter(|e| e.user == deployer && e.namespace == ns && e.dry_run)
        .map(|e| (e.resource, e.name))
        .collect()
}

/// The manager's API requests by verb.
fn requests(m: &Samples) -> BTreeMap<String, f64> {
    m.iter()
        .filter(|((name, _), _)| name == "ksync_api_requests_total")
        .map(|((_, labels), v)| (labels.get("verb").cloned().unwrap_or_default(), *v))
        .collect()
}

/// simcluster, and a Git server with repository `platform` whose `.ksync.yaml` declares
/// Application `web` (path `web`) deploying to `ns`: the cluster, the server, its URL and a work
/// tree to commit the manifests in.
fn platform(ns: &str) -> (Cluster, GitServer, String, WorkTree) {
    platform_on(Cluster::start(), ns)
}

/// [`platform`] on `cluster`.
fn platform_on(cluster: Cluster, ns: &str) -> (Cluster, GitServer, String, WorkTree) {
    let server = GitServer::start();
    let url = server.create_repo("platform");
    let work = WorkTree::clone(&url);
    work.write(
        ".ksync.yaml",
        &format!("metadata: {{name: web}}\nspec: {{source: {{repository: platform, path: web}}, serviceAccountName: deployer, destination: {{namespace: {ns}}}}}\n"),
    );
    (cluster, server, url, work)
}

/// Application `web` of a ConfigMap, a Service and a Deployment (no replicas), committed.
fn three_objects(work: &WorkTree) {
    work.write("web/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\ndata: {greeting: hello}\n");
    work.write(
        "web/svc.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {selector: {app: web}, ports: [{port: 80}]}\n",
    );
    work.write(
        "web/deploy.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 0\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: web, image: nginx:1.27}]}\n",
    );
    work.commit_and_push("web");
}

/// A client of `cluster`, with the CRDs installed and namespace `ns` with its `deployer`.
async fn prepared(cluster: &Cluster, ns: &str) -> kube::Client {
    let client = cluster.client().await;
    install_crds(&client).await;
    testkit::deployer_namespace(&client, ns).await;
    client
}

/// The Repository `platform` of `url` in `ns`.
async fn create_repository(client: &kube::Client, ns: &str, url: &str) {
    let repos: Api<Repository> = Api::namespaced(client.clone(), ns);
    let repo: Repository = serde_json::from_value(json!({
        "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Repository",
        "metadata": {"name": "platform"}, "spec": {"url": url, "ref": {"branch": "main"}},
    }))
    .unwrap();
    repos.create(&PostParams::default(), &repo).await.unwrap();
}

#[test]
fn an_idle_application_is_not_read_again_until_something_changes() {
    let (cluster, _server, url, work) = platform(NS);
    let sim = cluster.sim().expect("simcluster");
    three_objects(&work);
    let port = free_port();
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let client = prepared(&cluster, NS).await;
        let _manager = Manager::start_with_metrics(
            &cluster,
            &["--enable-webhooks", "false", "--drift-resync-interval", "1s"],
            &[],
            Some(port),
        );
        create_repository(&client, NS, &url).await;
        let apps: Api<Application> = Api::namespaced(client.clone(), NS);
        let sync_of = |app: Application| app.status.and_then(|s| s.sync).map(|s| s.status);

        // Deployed, and settled: a resync already found it unchanged without reading it.
        let settled = metrics_until(port, "web Synced and Healthy, then a resync without reads", |m| {
            value(m, "ksync_applications", &[("sync", "Synced"), ("health", "Healthy")]) == 1.0 && skipped(m) >= 3.0
        })
        .await;

        // The deployment controller wrote the Deployment's status (and its revision annotation)
        // after the apply; only that moved, so it was not dry-run (the namespace was empty: no
        // object was dry-run before the apply either).
        let deployments: Vec<_> = dry_runs(sim, 0).into_iter().filter(|(r, _)| r == "deployments").collect();
        assert!(deployments.is_empty(), "a Deployment whose status alone moved was dry-run: {deployments:?}");

        // Resyncs every second, nothing changing: no GET, no dry run of the objects.
        let mark = sim.audit_log().len();
        let at_least = reconciles(&settled) + 3.0;
        let idle = metrics_until(port, "three more resyncs", |m| reconciles(m) >= at_least).await;
        let seen = dry_runs(sim, mark);
        assert!(seen.is_empty(), "an idle resync dry-ran objects again: {seen:?}");
        assert_eq!(read(&idle), read(&settled), "an idle resync read objects again");
        assert!(skipped(&idle) >= skipped(&settled) + 9.0, "three resyncs of three objects, none read");
        let resyncs = reconciles(&idle) - reconciles(&settled);
        let (before, after) = (requests(&settled), requests(&idle));
        let per_resync: BTreeMap<&String, f64> =
            after.iter().map(|(verb, n)| (verb, (n - before.get(verb).unwrap_or(&0.0)) / resyncs)).collect();
        eprintln!("API requests per idle resync of one Application, by verb: {per_resync:?}");
        // Nor its Revision: the Revision watch shows the copy kept unchanged (other requests of
        // the manager, a Lease's, may fall in the window, so fewer than one per resync).
        let gets = per_resync.get(&"get".to_string()).copied().unwrap_or_default();
        assert!(gets < 1.0, "an idle resync read its Revision again: {per_resync:?}");

        // A reconcile an operator asks for reads every object again.
        let mark = sim.audit_log().len();
        let request =
            json!({"metadata": {"annotations": {"sync.kuvryn.io/reconcile-requested-at": "2026-12-03T00:00:00Z"}}});
        apps.patch("web", &PatchParams::default(), &Patch::Merge(request)).await.unwrap();
        eventually("the requested reconcile to read every object", Duration::from_secs(60), || async {
            let read: BTreeSet<String> = dry_runs(sim, mark).into_iter().map(|(resource, _)| resource).collect();
            (read.len() == 3).then_some(())
        })
        .await;

        // A hand edit of the Deployment's spec: read, dry-run (more than its status moved), and
        // the drift noticed; undone, Synced again.
        let by_hand = PatchParams { field_manager: Some("kubectl-edit".into()), ..Default::default() };
        let deploys: Api<Deployment> = Api::namespaced(client.clone(), NS);
        let image =
            |image: &str| json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "image": image}]}}}});
        deploys.patch("web", &by_hand, &Patch::Strategic(image("nginx:1.28"))).await.unwrap();
        eventually("web Drifted by the Deployment's edit", Duration::from_secs(60), || async {
            (sync_of(apps.get("web").await.ok()?) == Some(SyncState::Drifted)).then_some(())
        })
        .await;
        deploys.patch("web", &by_hand, &Patch::Strategic(image("nginx:1.27"))).await.unwrap();
        eventually("web Synced once the edit is undone", Duration::from_secs(60), || async {
            (sync_of(apps.get("web").await.ok()?) == Some(SyncState::Synced)).then_some(())
        })
        .await;

        // A hand edit moves the ConfigMap's resourceVersion: it is read, and the drift noticed.
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
        cms.patch("web", &by_hand, &Patch::Merge(json!({"data": {"greeting": "edited"}}))).await.unwrap();
        eventually("web Drifted", Duration::from_secs(60), || async {
            (sync_of(apps.get("web").await.ok()?) == Some(SyncState::Drifted)).then_some(())
        })
        .await;
    });
}

/// A rollout's own applies come back through the watches while the rest of its wave is still
/// being applied (here each ConfigMap's apply is slowed to 300 ms, so the first one's event is
/// in long before the wave's answers are noted). They trigger no reconcile. Checked in the
/// manager's log once a reconcile asked for afterwards has run: a trigger still pending then
/// would have run before it or been merged into it, keeping its reason either way.
#[test]
fn a_rollouts_own_applies_trigger_no_reconcile_while_its_wave_is_applied() {
    const NS: &str = "echoes";
    let (cluster, _server, url, work) = platform(NS);
    let sim = cluster.sim().expect("simcluster");
    for i in 0..6 {
        work.write(
            &format!("web/cm-{i}.yaml"),
            &format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: web-{i}}}\n"),
        );
    }
    work.commit_and_push("six ConfigMaps");
    let port = free_port();
    testkit::runtime().block_on(async {
        let client = prepared(&cluster, NS).await;
        sim.add_fault(simcluster::faults::FaultRule {
            verb: Some("patch".into()),
            resource: Some("configmaps".into()),
            namespace: Some(NS.into()),
            action: Some(simcluster::faults::FaultAction::Latency { millis: 300 }),
            ..Default::default()
        });
        // The reconciles, each with what triggered it.
        let log = [("RUST_LOG", "warn,kube_runtime::controller=debug,kuvryn_sync::controller::application::run=debug")];
        let manager = Manager::start_with_metrics(&cluster, &["--enable-webhooks", "false"], &log, Some(port));
        create_repository(&client, NS, &url).await;
        metrics_until(port, "web Synced and Healthy", |m| {
            value(m, "ksync_applications", &[("sync", "Synced"), ("health", "Healthy")]) == 1.0
        })
        .await;
        sim.clear_faults();

        let mark = sim.audit_log().len();
        let apps: Api<Application> = Api::namespaced(client.clone(), NS);
        let request =
            json!({"metadata": {"annotations": {"sync.kuvryn.io/reconcile-requested-at": "2026-12-06T00:00:00Z"}}});
        apps.patch("web", &PatchParams::default(), &Patch::Merge(request)).await.unwrap();
        eventually("the requested reconcile to read every object", Duration::from_secs(60), || async {
            let read: BTreeSet<String> = dry_runs_in(sim, NS, mark).into_iter().map(|(_, name)| name).collect();
            (read.len() == 6).then_some(())
        })
        .await;
        // Logged once the reconcile has returned: the first rollout's, then the requested one's
        // (or a trigger's that was pending before it).
        let log = eventually("the requested reconcile in the log", Duration::from_secs(60), || async {
            let log = plain(&manager.stderr());
            (log.lines().filter(|l| l.contains("reconciled result")).count() >= 2).then_some(log)
        })
        .await;
        let by_configmaps: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("reconciled result") && l.contains("related object updated: ConfigMap"))
            .collect();
        assert!(by_configmaps.is_empty(), "the rollout's own applies triggered reconciles: {by_configmaps:#?}");
    });
}

/// A manager that starts with nothing of an Application in memory (it restarted, or took the
/// shard over) reads its objects, and dry-runs none of them when they are as
/// `status.sync.unchanged` records; an object edited meanwhile is dry-run (and found Drifted).
/// On simcluster its audit log shows the dry runs; on the real server, the spared ones say that
/// the objects read again give the recorded digest there too.
fn a_restarted_manager_dry_runs_only_what_changed_since_status_vouched_for_it(cluster: Cluster) {
    const NS: &str = "restarted";
    let (cluster, _server, url, work) = platform_on(cluster, NS);
    let sim = cluster.sim();
    three_objects(&work);
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let client = prepared(&cluster, NS).await;
        let args = ["--enable-webhooks", "false", "--drift-resync-interval", "1s"];
        let first = Manager::start_with_metrics(&cluster, &args, &[], Some(free_port()));
        create_repository(&client, NS, &url).await;
        let apps: Api<Application> = Api::namespaced(client.clone(), NS);
        let vouched = || async {
            let sync = apps.get("web").await.ok()?.status?.sync?;
            (sync.status == SyncState::Synced).then_some(sync.unchanged?)
        };
        let recorded = eventually("web Synced, its unchanged objects recorded", Duration::from_secs(90), || async {
            vouched().await
        })
        .await;
        assert!(recorded.digest.starts_with("sha256:"), "{recorded:?}");

        // Restarted with nothing changed: every object read, none dry-run.
        drop(first);
        let mark = sim.map(|s| s.audit_log().len());
        let port = free_port();
        let _second = Manager::start_with_metrics(&cluster, &args, &[], Some(port));
        let after =
            metrics_until(port, "a drift check that read web's objects", |m| read(m) >= 3.0 && reconciles(m) >= 1.0)
                .await;
        if let (Some(sim), Some(mark)) = (sim, mark) {
            let seen = dry_runs_in(sim, NS, mark);
            assert!(seen.is_empty(), "objects the status vouched for were dry-run again: {seen:?}");
        }
        assert!(value(&after, "ksync_dry_runs_spared_total", &[]) >= 3.0, "no dry run was spared");
        drop(_second);

        // Restarted after a hand edit: the objects no longer match, so they are dry-run, and the
        // edit is found.
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
        let by_hand = PatchParams { field_manager: Some("kubectl-edit".into()), ..Default::default() };
        cms.patch("web", &by_hand, &Patch::Merge(json!({"data": {"greeting": "edited"}}))).await.unwrap();
        let mark = sim.map(|s| s.audit_log().len());
        let _third = Manager::start_with_metrics(&cluster, &args, &[], Some(free_port()));
        eventually("web Drifted by the edit made while no manager ran", Duration::from_secs(60), || async {
            let sync = apps.get("web").await.ok()?.status?.sync?;
            (sync.status == SyncState::Drifted).then_some(())
        })
        .await;
        if let (Some(sim), Some(mark)) = (sim, mark) {
            let seen: BTreeSet<String> = dry_runs_in(sim, NS, mark).into_iter().map(|(resource, _)| resource).collect();
            assert!(seen.contains("configmaps"), "the edited ConfigMap was not dry-run: {seen:?}");
        }
    });
}

testkit::both!(a_restarted_manager_dry_runs_only_what_changed_since_status_vouched_for_it);

/// A workload whose status alone moves (here another controller adds a condition) is planned
/// from the shard's watch cache, which keeps workloads' status: its Application turns Degraded
/// by the new status (a HealthCheck replaces the Deployment rules in the namespace and reads
/// that condition) with no read of the object.
fn a_workload_whose_status_alone_moved_is_assessed_without_reading_it(cluster: Cluster) {
    const NS: &str = "status-moved";
    let (cluster, _server, url, work) = platform_on(cluster, NS);
    three_objects(&work);
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let client = prepared(&cluster, NS).await;
        let check: kuvryn_sync::api::healthcheck::HealthCheck = serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "HealthCheck",
            "metadata": {"name": "deployments", "namespace": NS},
            "spec": {"target": {"apiVersion": "apps/v1", "kind": "Deployment"},
                     "failed": "has(status.conditions) && status.conditions.exists(c, c.type == 'Example' && c.status == 'True')",
                     "current": "true"}}))
        .unwrap();
        Api::namespaced(client.clone(), NS).create(&PostParams::default(), &check).await.unwrap();
        let port = free_port();
        let _manager = Manager::start_with_metrics(&cluster, &["--enable-webhooks", "false"], &[], Some(port));
        create_repository(&client, NS, &url).await;
        let settled = metrics_until(port, "web Synced and Healthy", |m| {
            value(m, "ksync_applications", &[("sync", "Synced"), ("health", "Healthy")]) == 1.0
        })
        .await;

        let deploys: Api<Deployment> = Api::namespaced(client.clone(), NS);
        let condition = json!({"status": {"conditions": [{"type": "Example", "status": "True", "reason": "Checked",
            "message": "set by another controller", "lastUpdateTime": "2026-12-07T00:00:00Z",
            "lastTransitionTime": "2026-12-07T00:00:00Z"}]}});
        deploys.patch_status("web", &PatchParams::default(), &Patch::Strategic(condition)).await.unwrap();
        let apps: Api<Application> = Api::namespaced(client.clone(), NS);
        eventually("web Degraded by the Deployment's new condition", Duration::from_secs(60), || async {
            let health = apps.get("web").await.ok()?.status?.health?;
            (format!("{:?}", health.status) == "Degraded").then_some(())
        })
        .await;
        let after = metrics_until(port, "the reconcile's reads counted", |m| skipped(m) > skipped(&settled)).await;
        assert_eq!(read(&after), read(&settled), "the Deployment was read again for a change of its status");
    });
}

testkit::both!(a_workload_whose_status_alone_moved_is_assessed_without_reading_it);
