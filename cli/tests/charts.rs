//! `ksync repos` and `ksync diff --revision VERSION` on a chart Repository (`type: Helm`), end to
//! end: the controllers in-process deploy a chart from a real Helm repository over HTTPS (basic
//! auth, a private CA), then the real `ksync` binary lists the Repository with the chart version
//! it follows and previews another version of the chart.

use std::path::Path;
use std::process::{Command, Stdio};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kuvryn_sync::api::repository::Repository;
use kuvryn_sync::api::revision::RevisionPhase;
use serde_json::json;
use testkit::Cluster;
use testkit::apps::Env;

const NS: &str = "chart-cli";

fn ksync(kubeconfig: &Path, args: &[&str]) -> (i32, String, String) {
    let home = testkit::temp_dir("ksync-home");
    let out = Command::new(testkit::ksync::bin())
        .env_clear()
        .env("HOME", home.path())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["-n", NS])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("ksync");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn a_chart_repository_in_repos_and_diff(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let charts = testkit::charts::HelmRepo::start("cli-user", "cli-pass-3e1f");
        let work = testkit::temp_dir("charts");
        charts.publish(&testkit::charts::chart(work.path(), "web", "1.2.3").write());
        charts.publish(&testkit::charts::chart(work.path(), "web", "1.2.4").write());
        let env = Env::start(&cluster, NS).await;
        let ca = std::fs::read_to_string(charts.ca_file()).unwrap();
        testkit::apply_as(
            &env.client,
            "test",
            &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "chart-creds", "namespace": NS,
                        "annotations": {"sync.kuvryn.io/chart-urls": charts.url()}},
                    "stringData": {"username": charts.user(), "password": charts.password(), "ca.crt": ca}}),
        )
        .await;
        let repo: Repository = serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Repository", "metadata": {"name": "web-chart", "namespace": NS},
            "spec": {"type": "Helm", "url": charts.url(), "chart": {"name": "web", "version": "1.2.3"},
                     "secretRef": {"name": "chart-creds"}, "interval": "1h"}}))
        .unwrap();
        Api::<Repository>::namespaced(env.client.clone(), NS).create(&Default::default(), &repo).await.unwrap();
        env.create_app(
            "web",
            json!({"source": {"repository": "web-chart"}, "serviceAccountName": "deployer", "destination": {"namespace": NS}}),
        )
        .await;
        env.revision_where("web", "1.2.3 deployed", |r| {
            r.spec.source.commit == "1.2.3" && r.status.as_ref().is_some_and(|s| s.phase == RevisionPhase::Healthy)
        })
        .await;
        let kubeconfig = cluster.kubeconfig();

        let (code, out, err) = ksync(&kubeconfig, &["repos"]);
        assert_eq!(code, 0, "{err}");
        let row = out.lines().find(|l| l.starts_with("web-chart")).unwrap_or_else(|| panic!("no row: {out}"));
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells[1..], [charts.url().as_str(), "chart", "web", "1.2.3", "1.2.3", "True", cells[7]], "{out}");

        let (code, out, err) = ksync(&kubeconfig, &["diff", "web", "--revision", "1.2.4"]);
        assert_eq!(code, 1, "changes: {out}\n{err}");
        assert!(out.contains("1.2.4"), "{out}");
        assert!(out.contains("-  version: 1.2.3") || out.contains("-  version: \"1.2.3\""), "{out}");
        assert!(!out.contains(charts.password()) && !err.contains(charts.password()), "{out}\n{err}");
        let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), NS);
        let live = cms.get("web-web").await.unwrap().data.unwrap_or_default();
        assert_eq!(live.get("version").map(String::as_str), Some("1.2.3"), "ksync diff changed the cluster");
    });
}

/// A chart Repository following a range, polled hourly: a version published later is found by
/// `ksync reconcile repo`, which resolves the range again at once and names the version.
fn reconcile_resolves_a_chart_range_again_now(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let charts = testkit::charts::HelmRepo::start("cli-user", "cli-pass-77a0");
        let work = testkit::temp_dir("charts");
        charts.publish(&testkit::charts::chart(work.path(), "web", "1.2.3").write());
        let env = Env::start(&cluster, NS).await;
        let ca = std::fs::read_to_string(charts.ca_file()).unwrap();
        testkit::apply_as(
            &env.client,
            "test",
            &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "chart-creds", "namespace": NS,
                        "annotations": {"sync.kuvryn.io/chart-urls": charts.url()}},
                    "stringData": {"username": charts.user(), "password": charts.password(), "ca.crt": ca}}),
        )
        .await;
        let repo: Repository = serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Repository", "metadata": {"name": "web-chart", "namespace": NS},
            "spec": {"type": "Helm", "url": charts.url(), "chart": {"name": "web", "version": "~1.2"},
                     "secretRef": {"name": "chart-creds"}, "interval": "1h"}}))
        .unwrap();
        let repos = Api::<Repository>::namespaced(env.client.clone(), NS);
        repos.create(&Default::default(), &repo).await.unwrap();
        testkit::eventually("1.2.3 resolved", testkit::apps::WAIT, || async {
            (repos.get("web-chart").await.ok()?.status?.revision?.commit == "1.2.3").then_some(())
        })
        .await;
        charts.publish(&testkit::charts::chart(work.path(), "web", "1.2.4").write());
        let kubeconfig = cluster.kubeconfig();
        let out = tokio::task::spawn_blocking(move || ksync(&kubeconfig, &["reconcile", "repo", "web-chart"])).await.unwrap();
        assert_eq!(
            (out.0, out.1.as_str()),
            (0, format!("Repository \"web-chart\" in namespace \"{NS}\" fetched chart web ~1.2: version 1.2.4 (was 1.2.3).\n").as_str()),
            "{}",
            out.2
        );
    });
}

testkit::both!(a_chart_repository_in_repos_and_diff, reconcile_resolves_a_chart_range_again_now);
