//! `ksync reconcile`, `ksync suspend`/`resume` and `ksync notifications` end to end: the real
//! `ksync` binary against the cluster (simcluster, and a real control plane as `::realkube`), a
//! real `git daemon`, and the Repository and Application controllers in-process. The
//! Repository polls hourly, so only the command can make it fetch within the test.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kuvryn_sync::api::conditions;
use kuvryn_sync::api::names;
use kuvryn_sync::api::notification::Notification;
use kuvryn_sync::api::repository::Repository;
use kuvryn_sync::api::revision::RevisionPhase;
use serde_json::json;
use testkit::apps::{Env, WAIT};
use testkit::{Cluster, eventually, ksync};

const NS: &str = "reconcile";

fn config(color: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  color: {color}\n")
}

/// `ksync ARGS` off the runtime's threads (it waits on the controllers running on them).
async fn ksync(cluster: &Cluster, args: &[&str]) -> ksync::Output {
    let (kubeconfig, args) = (cluster.kubeconfig(), args.iter().map(|a| a.to_string()).collect::<Vec<_>>());
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ksync::run_at(&kubeconfig, NS, &args)
    })
    .await
    .unwrap()
}

async fn ok(cluster: &Cluster, args: &[&str]) -> String {
    let out = ksync(cluster, args).await;
    assert_eq!(out.code, 0, "ksync {args:?}:\n{}{}", out.stdout, out.stderr);
    assert!(out.stderr.is_empty(), "ksync {args:?}: {out:?}");
    out.stdout
}

async fn color(env: &Env) -> Option<String> {
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), NS);
    cms.get_opt("settings").await.ok()??.data?.get("color").cloned()
}

async fn ready_reason<K>(
    api: &Api<K>,
    name: &str,
    conds: impl Fn(&K) -> Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
) -> String
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let obj = api.get(name).await.unwrap();
    conditions::get(&conds(&obj), names::conditions::READY).map(|c| c.reason.clone()).unwrap_or_default()
}

fn reconcile_fetches_now_and_suspend_pauses_until_resume(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::start(&cluster, NS).await;
        let wt = env
            .app_from(
                "web",
                &[("web/config.yaml", &config("blue"))],
                json!({"source": {"repository": "platform", "path": "web"}, "serviceAccountName": "deployer",
                       "destination": {"namespace": NS}, "health": {"timeout": "60s"}}),
            )
            .await;
        let first = env
            .revision_where("web", "the first rollout Healthy", |r| {
                r.status.as_ref().is_some_and(|s| s.phase == RevisionPhase::Healthy)
            })
            .await;
        let repos: Api<Repository> = Api::namespaced(env.client.clone(), NS);
        let old = repos.get("platform").await.unwrap().status.unwrap().revision.unwrap().commit;

        // A push; the hourly poll would not see it: `ksync reconcile repo` fetches it now and
        // says which commit it found.
        wt.write("web/config.yaml", &config("green"));
        let new = wt.commit_and_push("green");
        let printed = ok(&cluster, &["reconcile", "repo", "platform"]).await;
        assert_eq!(
            printed,
            format!(
                "Repository \"platform\" in namespace \"{NS}\" fetched branch/main: commit {new} (was {}).\n",
                &old[..12]
            )
        );
        eventually("the new commit applied", WAIT, || async { (color(&env).await.as_deref() == Some("green")).then_some(()) })
            .await;
        let again = ok(&cluster, &["reconcile", "repo", "platform"]).await;
        assert!(again.ends_with(&format!("commit {new} (unchanged).\n")), "{again}");
        let app = ok(&cluster, &["reconcile", "app", "web"]).await;
        assert!(app.starts_with(&format!("Application \"web\" in namespace \"{NS}\" reconciled: Ready=True")), "{app}");

        // Suspended, the Repository fetches nothing and says so; reconcile refuses it.
        let printed = ok(&cluster, &["suspend", "repo", "platform"]).await;
        assert_eq!(
            printed,
            format!("Repository \"platform\" in namespace \"{NS}\" suspended: nothing is fetched and no Application changes until: ksync resume repo platform\n")
        );
        assert_eq!(ready_reason(&repos, "platform", |r: &Repository| r.status.clone().unwrap_or_default().conditions).await, "Suspended");
        let refused = ksync(&cluster, &["reconcile", "repo", "platform"]).await;
        assert_eq!(refused.code, 1, "{refused:?}");
        assert!(refused.stderr.contains("is suspended (spec.suspend): resume it with: ksync resume repo platform"), "{refused:?}");
        assert!(ok(&cluster, &["suspend", "repo", "platform"]).await.contains("was already suspended"));
        wt.write("web/config.yaml", &config("red"));
        let red = wt.commit_and_push("red");
        let resumed = ok(&cluster, &["resume", "repo", "platform"]).await;
        assert!(resumed.contains("resumed"), "{resumed}");
        eventually("the resumed Repository to fetch", WAIT, || async {
            (repos.get("platform").await.ok()?.status?.revision?.commit == red).then_some(())
        })
        .await;
        eventually("red applied", WAIT, || async { (color(&env).await.as_deref() == Some("red")).then_some(()) }).await;

        // A suspended Application applies nothing of a new commit until resumed.
        let printed = ok(&cluster, &["suspend", "app", "web"]).await;
        assert!(printed.contains("suspended: nothing is planned, applied, pruned or self-healed until: ksync resume app web"), "{printed}");
        let apps = env.apps();
        assert_eq!(ready_reason(&apps, "web", |a| a.status.clone().unwrap_or_default().conditions).await, "Suspended");
        wt.write("web/config.yaml", &config("violet"));
        let violet = wt.commit_and_push("violet");
        assert!(ok(&cluster, &["reconcile", "repo", "platform"]).await.contains(&violet));
        let refused = ksync(&cluster, &["reconcile", "app", "web"]).await;
        assert!(refused.stderr.contains("is suspended (spec.suspend): resume it with: ksync resume app web"), "{refused:?}");
        assert_eq!(color(&env).await.as_deref(), Some("red"), "a suspended Application applied a commit");
        ok(&cluster, &["resume", "app", "web"]).await;
        eventually("violet applied once resumed", WAIT, || async {
            (color(&env).await.as_deref() == Some("violet")).then_some(())
        })
        .await;
        assert_ne!(first.metadata.name, env.apps().get("web").await.unwrap().status.unwrap().desired_revision);

        // Unknown names fail with the API's "not found", writing nothing.
        let missing = ksync(&cluster, &["reconcile", "repo", "nope"]).await;
        assert_eq!(missing.code, 1);
        assert!(missing.stderr.contains(&format!("Repository \"nope\" not found in namespace \"{NS}\"")), "{missing:?}");
    });
}

/// What `ksync notifications` lists is what the engine wrote: a failed rollout delivered to a
/// Slack-style sink shows as the Notification's last delivery.
fn notifications_are_listed_with_their_routes(cluster: Cluster) {
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::start(&cluster, NS).await;
        let none = ksync(&cluster, &["notifications"]).await;
        assert_eq!((none.code, none.stdout.as_str()), (0, ""), "{none:?}");
        assert!(none.stderr.contains("No Notifications found"), "{none:?}");
        let slack = testkit::sinks::Sink::start(testkit::sinks::Kind::Slack, "services/T0/B0/cli").await;
        env.secret("slack", &[("address", &slack.url)]).await;
        env.notification(
            "chat",
            json!({"applications": {"names": ["web"]}, "severity": "Warning", "reasons": ["HealthTimeout"],
                   "provider": {"type": "Slack", "secretRef": {"name": "slack"}}}),
        )
        .await;
        let _engine = env.start_notifications();
        let never = testkit::manifests::deployment("web").image("registry.invalid/web:1").ready_ms(500).to_string();
        env.app_from(
            "web",
            &[("web/deploy.yaml", &never)],
            json!({"source": {"repository": "platform", "path": "web"}, "serviceAccountName": "deployer",
                   "destination": {"namespace": NS}, "health": {"timeout": "5s"}, "failurePolicy": {"maxAttempts": 1}}),
        )
        .await;
        let notifications: Api<Notification> = Api::namespaced(env.client.clone(), NS);
        eventually("the HealthTimeout delivered", WAIT, || async {
            (notifications.get("chat").await.ok()?.status?.last_delivery?.reason == "HealthTimeout").then_some(())
        })
        .await;
        let out = ok(&cluster, &["notifications"]).await;
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        for column in ["NAME", "PROVIDER", "APPLICATIONS", "EVENTS", "READY", "LAST DELIVERY", "AGE"] {
            assert!(lines[0].contains(column), "{out}");
        }
        for cell in ["chat", "Slack", "web", "warnings: HealthTimeout", "True", "web HealthTimeout"] {
            assert!(lines[1].contains(cell), "{cell:?} missing: {out}");
        }
        let wide = ok(&cluster, &["notifications", "-o", "wide"]).await;
        assert!(wide.lines().next().unwrap().contains("LAST FAILURE"), "{wide}");
        let json_out = ok(&cluster, &["notifications", "-o", "json"]).await;
        let v: serde_json::Value = serde_json::from_str(&json_out).unwrap();
        assert_eq!(v["items"][0]["spec"]["provider"]["type"], "Slack");
        assert_eq!(v["items"][0]["status"]["lastDelivery"]["application"], "web");
    });
}

testkit::both!(reconcile_fetches_now_and_suspend_pauses_until_resume, notifications_are_listed_with_their_routes);
