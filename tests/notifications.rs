//! Notifications end to end (docs/notifications.md), on both servers: a failed rollout's
//! lifecycle Events reach Slack-, Teams- and webhook-style sinks (loopback servers checking
//! each provider's documented request) once each, routed by name, severity and reason; a
//! `429` is retried after its `Retry-After`; a missing Secret is reported on the status; and
//! no Secret value appears in any payload, status or Event.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, PostParams};
use kuvryn_sync::api::notification::Notification;
use serde_json::{Value, json};
use testkit::Cluster;
use testkit::apps::Env;
use testkit::eventually;
use testkit::fleet::{Fleet, Options};
use testkit::manifests::deployment;
use testkit::sinks::{Kind, Reply, Sink};

/// In every Secret value: must be found in no payload, status or Event.
const MARKER: &str = "SECRETMARKER";

testkit::both!(
    a_failed_rollout_notifies_each_sink_once,
    one_delivery_when_the_delivering_replica_is_killed,
    one_applications_events_are_delivered_one_at_a_time_in_the_order_they_happened,
    events_are_watched_from_the_first_notification_and_again_after_the_last_is_deleted
);

fn spec(ns: &str) -> Value {
    json!({"source": {"repository": "platform", "path": "app"}, "serviceAccountName": "deployer",
           "destination": {"namespace": ns}, "health": {"timeout": "5s"}, "failurePolicy": {"maxAttempts": 1}})
}

fn ntfs_api(env: &Env) -> Api<Notification> {
    Api::namespaced(env.client.clone(), &env.ns)
}

/// The reasons of the deliveries a sink accepted, read by `reason`.
fn reasons(sink: &Sink, reason: impl Fn(&Value) -> String) -> Vec<String> {
    sink.delivered().iter().map(reason).collect()
}

fn a_failed_rollout_notifies_each_sink_once(cluster: Cluster) {
    const NS: &str = "notify-failed";
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::start(&cluster, NS).await;
        let slack = Sink::start(Kind::Slack, &format!("slack/{MARKER}-address")).await;
        let teams = Sink::start(Kind::Teams, &format!("teams/{MARKER}-address")).await;
        let token = format!("{MARKER}-token");
        let hook = Sink::start(Kind::Webhook { key: token.clone() }, &format!("hook/{MARKER}-address")).await;
        let unrouted = Sink::start(Kind::Slack, &format!("unrouted/{MARKER}-address")).await;
        // The webhook is throttled first: delivered after its Retry-After.
        hook.script([Reply::TooMany(2)]);
        env.secret("slack", &[("address", &slack.url), ("token", &token), ("username", &format!("{MARKER}-user"))])
            .await;
        env.secret("teams", &[("address", &teams.url)]).await;
        env.secret("hook", &[("address", &hook.url), ("token", &token)]).await;
        env.secret("unrouted", &[("address", &unrouted.url)]).await;
        // Slack: every Warning of every Application. Teams: Application `app` by name, every
        // severity, HealthTimeout only. Webhook: by label selector, HealthTimeout.
        env.notification("slack", json!({"severity": "Warning", "provider": {"type": "Slack", "secretRef": {"name": "slack"}}})).await;
        env.notification("teams", json!({"applications": {"names": ["app"]}, "reasons": ["HealthTimeout"],
            "provider": {"type": "Teams", "secretRef": {"name": "teams"}}})).await;
        env.notification("hook", json!({"applications": {"selector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["web"]}]}},
            "reasons": ["HealthTimeout"], "provider": {"type": "Webhook", "secretRef": {"name": "hook"}}})).await;
        // Not routed: another Application's name; Normal Events only of another reason.
        env.notification("unrouted", json!({"applications": {"names": ["another"]},
            "provider": {"type": "Slack", "secretRef": {"name": "unrouted"}}})).await;
        env.notification("unrouted-reason", json!({"reasons": ["RolledBack"],
            "provider": {"type": "Slack", "secretRef": {"name": "unrouted"}}})).await;
        // Suspended while the rollout fails, resumed after: the meantime's Events are not sent.
        env.notification("paused", json!({"suspend": true, "provider": {"type": "Slack", "secretRef": {"name": "unrouted"}}})).await;
        // A missing Secret: Ready=False, no retry storm.
        env.notification("no-secret", json!({"severity": "Warning", "provider": {"type": "Slack", "secretRef": {"name": "absent"}}})).await;
        let stop = env.start_notifications();

        let files = [("app/deploy.yaml", deployment("web").ready_ms(1000).image("registry.invalid/web:1").to_string())];
        let files: Vec<(&str, &str)> = files.iter().map(|(p, t)| (*p, t.as_str())).collect();
        let mut app_spec = spec(NS);
        app_spec["source"]["path"] = json!("app");
        env.app_from("app", &files, app_spec).await;
        // The label the webhook's selector needs.
        let apps = env.apps();
        let patch = json!({"metadata": {"labels": {"tier": "web"}}});
        apps.patch("app", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch)).await.unwrap();
        let failed = env.failed_revision("app").await;
        let commit = failed.spec.source.commit.clone();

        let slack_reason = |v: &Value| v["text"].as_str().unwrap_or_default().rsplit(": ").next().unwrap().to_string();
        let teams_reason = |v: &Value| {
            v["attachments"][0]["content"]["body"][0]["text"].as_str().unwrap_or_default().rsplit(": ").next().unwrap().to_string()
        };
        let wait = Duration::from_secs(60);
        let end = std::time::Instant::now() + wait;
        while !(reasons(&slack, slack_reason).contains(&"HealthTimeout".to_string())
            && reasons(&teams, teams_reason).contains(&"HealthTimeout".to_string()))
        {
            if std::time::Instant::now() > end {
                let events = Api::<Event>::namespaced(env.client.clone(), NS).list(&ListParams::default()).await.unwrap();
                let events: Vec<_> = events
                    .items
                    .iter()
                    .map(|e| (e.reason.clone(), e.type_.clone(), e.reporting_controller.clone(), e.metadata.annotations.clone()))
                    .collect();
                panic!(
                    "Slack and Teams did not get the HealthTimeout: slack {:?}, teams {:?}, problems {:?}; Events {events:#?}",
                    slack.received(),
                    teams.received(),
                    slack.problems()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        eventually("the webhook to get it after its 429", wait, || async { (!hook.delivered().is_empty()).then_some(()) }).await;
        // The suspended Notification marks what it skips; resumed, it sends none of it.
        let events: Api<Event> = Api::namespaced(env.client.clone(), NS);
        eventually("the HealthTimeout Event marked skipped for the suspended Notification", wait, || async {
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items.iter().any(|e| {
                e.reason.as_deref() == Some("HealthTimeout")
                    && e.metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get("notify.sync.kuvryn.io/paused"))
                        .is_some_and(|v| v.starts_with("skipped "))
            })
            .then_some(())
        })
        .await;
        let resume = json!({"spec": {"suspend": false}});
        ntfs_api(&env).patch("paused", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&resume)).await.unwrap();
        // Once each, even after a few rescans.
        tokio::time::sleep(Duration::from_secs(8)).await;
        for (name, sink) in [("slack", &slack), ("teams", &teams), ("hook", &hook), ("unrouted", &unrouted)] {
            assert!(sink.problems().is_empty(), "{name}: {:?}", sink.problems());
        }
        let slack_got = reasons(&slack, slack_reason);
        assert_eq!(slack_got.iter().filter(|r| *r == "HealthTimeout").count(), 1, "slack: {slack_got:?}");
        assert!(!slack_got.iter().any(|r| r == "HealthDegraded" || r == "Drifted"), "slack: {slack_got:?}");
        assert_eq!(reasons(&teams, teams_reason), ["HealthTimeout"], "teams");
        assert!(unrouted.received().is_empty(), "unrouted: {:?}", unrouted.received());
        // The webhook: 429, then one delivery at least the Retry-After later, with the commit.
        let got = hook.received();
        assert_eq!(got.iter().map(|r| r.status).collect::<Vec<_>>(), [429, 200], "webhook");
        assert!(got[1].at - got[0].at >= Duration::from_millis(1900), "retried before Retry-After");
        let body = &hook.delivered()[0];
        assert_eq!((body["application"].as_str(), body["reason"].as_str()), (Some("app"), Some("HealthTimeout")));
        assert_eq!(body["commit"].as_str(), Some(commit.as_str()));

        // Status: Ready and lastDelivery; the missing Secret's Ready=False.
        let ntfs: Api<Notification> = Api::namespaced(env.client.clone(), NS);
        let hook_status = ntfs.get("hook").await.unwrap().status.unwrap();
        let last = hook_status.last_delivery.unwrap();
        assert_eq!((last.application.as_str(), last.reason.as_str(), last.attempts), ("app", "HealthTimeout", 2));
        assert_eq!(hook_status.conditions[0].status, "True");
        let missing = eventually("Ready=False on the Notification without its Secret", wait, || async {
            let s = ntfs.get("no-secret").await.ok()?.status?;
            s.conditions.iter().find(|c| c.type_ == "Ready" && c.status == "False").cloned()
        })
        .await;
        assert_eq!(missing.reason, "ProviderNotConfigured");
        assert!(missing.message.contains("absent"), "{}", missing.message);

        // No Secret value anywhere: payloads, statuses, Events.
        let mut seen: Vec<String> = Vec::new();
        for sink in [&slack, &teams, &hook] {
            seen.extend(sink.received().into_iter().map(|r| r.body));
        }
        for n in ntfs.list(&ListParams::default()).await.unwrap() {
            seen.push(serde_json::to_string(&n.status).unwrap());
        }
        for e in Api::<Event>::namespaced(env.client.clone(), NS).list(&ListParams::default()).await.unwrap() {
            seen.push(serde_json::to_string(&e).unwrap());
        }
        for text in &seen {
            assert!(!text.contains(MARKER), "a Secret value leaked: {text}");
        }
        let _ = stop.send(());
    });
}

/// Two sharded replicas (real processes). The owner of the Application's shard claims the
/// HealthTimeout Event and is answered 503 with a long Retry-After by both sinks, so the
/// delivery is pending; it is SIGKILLed; the other replica takes the shard, takes over the stale
/// claim, and each sink gets exactly one delivery.
fn one_delivery_when_the_delivering_replica_is_killed(cluster: Cluster) {
    const NS: &str = "notify-kill";
    const SYSTEM: &str = "kuvryn-system";
    let (server, wt) = testkit::GitServer::with_repo("platform");
    wt.write(".ksync.yaml", "applications: []\n");
    wt.write("app/deploy.yaml", &deployment("web").ready_ms(1000).image("registry.invalid/web:1").to_string());
    wt.commit_and_push("a Deployment that never turns Healthy");
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let fleet = Fleet::prepare(&cluster, SYSTEM, "notify-kill").await;
        let client = fleet.client.clone();
        testkit::deployer_namespace(&client, NS).await;
        let slack = Sink::start(Kind::Slack, &format!("slack/{MARKER}")).await;
        let teams = Sink::start(Kind::Teams, &format!("teams/{MARKER}")).await;
        // Pending at the owner: answered 503, try again in a minute.
        slack.script([Reply::Status(503, Some(60))]);
        teams.script([Reply::Status(503, Some(60))]);
        let env_like = |name: &'static str, url: String| (name, url);
        for (name, url) in [env_like("slack", slack.url.clone()), env_like("teams", teams.url.clone())] {
            let s: Secret = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": name, "namespace": NS}, "stringData": {"address": url}}))
            .unwrap();
            Api::<Secret>::namespaced(client.clone(), NS).create(&PostParams::default(), &s).await.unwrap();
            let n: Notification = serde_json::from_value(json!({"apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Notification",
                "metadata": {"name": name, "namespace": NS},
                "spec": {"reasons": ["HealthTimeout"], "provider": {"type": if name == "slack" { "Slack" } else { "Teams" }, "secretRef": {"name": name}}}}))
            .unwrap();
            Api::<Notification>::namespaced(client.clone(), NS).create(&PostParams::default(), &n).await.unwrap();
        }
        let options = Options { shards: 2, lease_duration: "5s", extra: &["--kube-api-qps", "0"], env: &[] };
        let mut replicas = std::collections::BTreeMap::new();
        for name in ["ksync-a", "ksync-b"] {
            replicas.insert(name.to_string(), fleet.start(&cluster, name, options).await);
        }
        fleet.create_repository(NS, "platform", &server.url("platform"), "1h").await;
        let app: kuvryn_sync::api::Application = serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "app", "namespace": NS}, "spec": spec(NS),
        }))
        .unwrap();
        Api::<kuvryn_sync::api::Application>::namespaced(client.clone(), NS)
            .create(&PostParams::default(), &app)
            .await
            .unwrap();

        // Both sinks answered 503 once: the deliveries are pending at the owner.
        let wait = Duration::from_secs(120);
        let events: Api<Event> = Api::namespaced(client.clone(), NS);
        let end = std::time::Instant::now() + wait;
        while slack.received().is_empty() || teams.received().is_empty() {
            if std::time::Instant::now() > end {
                let list = events.list(&ListParams::default()).await.unwrap();
                let seen: Vec<_> = list
                    .items
                    .iter()
                    .map(|e| (e.reason.clone(), e.reporting_controller.clone(), e.metadata.annotations.clone()))
                    .collect();
                let app = Api::<kuvryn_sync::api::Application>::namespaced(client.clone(), NS).get("app").await.unwrap();
                panic!("no first attempt: Events {seen:?}; labels {:?}, status {:?}", app.metadata.labels, app.status);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let holder = eventually("the claim naming its replica", wait, || async {
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items.iter().find_map(|e| {
                let v = e.metadata.annotations.as_ref()?.get("notify.sync.kuvryn.io/slack")?;
                v.starts_with("claimed ").then(|| v.rsplit(' ').next().unwrap().to_string())
            })
        })
        .await;
        assert!(replicas.contains_key(&holder), "claimed by {holder}");
        drop(replicas.remove(&holder));

        // The survivor takes the shard and the stale claim: one delivery each.
        eventually("each sink to get one delivery from the survivor", wait, || async {
            (slack.delivered().len() == 1 && teams.delivered().len() == 1).then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_secs(10)).await;
        for (name, sink) in [("slack", &slack), ("teams", &teams)] {
            assert!(sink.problems().is_empty(), "{name}: {:?}", sink.problems());
            let statuses: Vec<u16> = sink.received().iter().map(|r| r.status).collect();
            assert_eq!(statuses.first(), Some(&503), "{name}: {statuses:?}");
            assert_eq!(sink.delivered().len(), 1, "{name}: {statuses:?}");
        }
        let marked = events.list(&ListParams::default()).await.unwrap().items.into_iter().find_map(|e| {
            e.metadata.annotations.as_ref()?.get("notify.sync.kuvryn.io/teams").cloned()
        });
        assert!(marked.as_deref().is_some_and(|v| v.starts_with("delivered ")), "{marked:?}");
    });
}

/// Three lifecycle Events of one Application, the first throttled by its sink for 2 s: the
/// later two wait for it, so the sink gets them in the order they happened (a commit status
/// that keeps the last state written must end with the latest).
fn one_applications_events_are_delivered_one_at_a_time_in_the_order_they_happened(cluster: Cluster) {
    const NS: &str = "notify-order";
    let runtime = testkit::runtime();
    runtime.block_on(async {
        // No controllers: the only Events are the test's.
        let env = Env::without_controllers(&cluster, NS).await;
        let token = format!("{MARKER}-token");
        let hook = Sink::start(Kind::Webhook { key: token.clone() }, "hook/").await;
        hook.script([Reply::TooMany(2)]);
        env.secret("hook", &[("address", &hook.url), ("token", &token)]).await;
        env.notification("hook", json!({"provider": {"type": "Webhook", "secretRef": {"name": "hook"}}})).await;
        env.create_app("app", spec(NS)).await;
        let _stop = env.start_notifications();
        let events: Api<Event> = Api::namespaced(env.client.clone(), NS);
        let reasons = ["NewRevision", "Progressing", "Succeeded"];
        for (i, reason) in reasons.iter().enumerate() {
            let ev = lifecycle_event(NS, &format!("app.{i}"), reason, jiff::Timestamp::now());
            events.create(&PostParams::default(), &ev).await.unwrap();
            // The first is being throttled before the next happens.
            if i == 0 {
                eventually("the first delivery to be throttled", Duration::from_secs(60), || async {
                    (!hook.received().is_empty()).then_some(())
                })
                .await;
            }
        }
        eventually("the three Events delivered", Duration::from_secs(60), || async {
            (hook.delivered().len() == 3).then_some(())
        })
        .await;
        assert!(hook.problems().is_empty(), "{:?}", hook.problems());
        let got = reasons_of(&hook);
        assert_eq!(got, reasons, "statuses {:?}", hook.received().iter().map(|r| r.status).collect::<Vec<_>>());
    });
}

/// An Application lifecycle Event of `app` that happened at `at`, as the controller reports it.
fn lifecycle_event(ns: &str, name: &str, reason: &str, at: jiff::Timestamp) -> Event {
    serde_json::from_value(json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": name, "namespace": ns},
        "eventTime": at.to_string(),
        "reportingController": "kuvryn-sync", "reportingInstance": "test",
        "action": "Reconcile", "reason": reason, "type": "Normal", "note": name,
        "regarding": {"apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application", "namespace": ns, "name": "app"},
    }))
    .unwrap()
}

fn events_are_watched_from_the_first_notification_and_again_after_the_last_is_deleted(cluster: Cluster) {
    const NS: &str = "notify-watch";
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::without_controllers(&cluster, NS).await;
        let token = format!("{MARKER}-token");
        let hook = Sink::start(Kind::Webhook { key: token.clone() }, "hook/").await;
        env.secret("hook", &[("address", &hook.url), ("token", &token)]).await;
        env.create_app("app", spec(NS)).await;
        // The engine runs before any Notification exists, so it watches no Events yet.
        let _stop = env.start_notifications();
        let events: Api<Event> = Api::namespaced(env.client.clone(), NS);
        let ago = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(30);
        events.create(&PostParams::default(), &lifecycle_event(NS, "before", "NewRevision", ago)).await.unwrap();

        // The first Notification starts the watch: an Event after it is delivered, the one
        // from before it is not.
        let routes_all = || json!({"provider": {"type": "Webhook", "secretRef": {"name": "hook"}}});
        env.notification("first", routes_all()).await;
        let now = jiff::Timestamp::now();
        events.create(&PostParams::default(), &lifecycle_event(NS, "after-first", "Progressing", now)).await.unwrap();
        let sent = || reasons_of(&hook);
        eventually("the Event after the first Notification delivered", Duration::from_secs(60), || async {
            sent().contains(&"Progressing".to_string()).then_some(())
        })
        .await;

        // Deleting the last Notification stops the watch; the next one starts it again.
        let ntfs = ntfs_api(&env);
        ntfs.delete("first", &Default::default()).await.unwrap();
        eventually("the first Notification gone", Duration::from_secs(30), || async {
            ntfs.get_opt("first").await.unwrap().is_none().then_some(())
        })
        .await;
        env.notification("second", routes_all()).await;
        let now = jiff::Timestamp::now();
        events.create(&PostParams::default(), &lifecycle_event(NS, "after-second", "Succeeded", now)).await.unwrap();
        eventually("the Event after the second Notification delivered", Duration::from_secs(60), || async {
            sent().contains(&"Succeeded".to_string()).then_some(())
        })
        .await;
        assert!(
            !sent().contains(&"NewRevision".to_string()),
            "an Event older than every Notification was sent: {:?}",
            sent()
        );
        assert!(hook.problems().is_empty(), "{:?}", hook.problems());
    });
}

fn reasons_of(sink: &Sink) -> Vec<String> {
    reasons(sink, |v| v["reason"].as_str().unwrap_or_default().to_string())
}

/// A message as the engine builds it, for the sender tests.
fn message() -> kuvryn_sync::notify::message::Message {
    kuvryn_sync::notify::message::Message {
        event: "uid-1".into(),
        namespace: "team".into(),
        application: "web".into(),
        severity: kuvryn_sync::api::notification::Severity::Warning,
        reason: "HealthTimeout".into(),
        message: "deployment/web: 0 of 1 Pods available".into(),
        revision: Some("web-1".into()),
        commit: Some("0123456789abcdef0123456789abcdef01234567".into()),
        source_url: None,
        at: "2026-12-05T18:00:00Z".into(),
        sent: 0,
    }
}

fn provider(type_: &str) -> kuvryn_sync::api::notification::Provider {
    serde_json::from_value(json!({"type": type_, "secretRef": {"name": "s"}})).unwrap()
}

/// The sender against every provider's sink: each request has the documented shape (the sinks
/// check it), `5xx` and `429` are retried (after `Retry-After`), and the delivery counts its
/// attempts.
#[test]
fn the_sender_delivers_to_each_providers_sink() {
    use kuvryn_sync::notify::message::ProviderSecret;
    use kuvryn_sync::notify::send::{Outcome, Sender};
    testkit::runtime().block_on(async {
        let sender = Sender::default();
        let token = format!("{MARKER}-token");
        let cases = [
            ("Slack", Kind::Slack, vec![], 1),
            ("Teams", Kind::Teams, vec![Reply::Status(500, None)], 2),
            ("Discord", Kind::Discord, vec![Reply::TooMany(1)], 2),
            (
                "Webhook",
                Kind::Webhook { key: token.clone() },
                vec![Reply::Status(502, None), Reply::Status(503, Some(1))],
                3,
            ),
            ("Alertmanager", Kind::Alertmanager, vec![], 1),
        ];
        for (type_, kind, script, attempts) in cases {
            let sink = Sink::start(kind, "").await;
            sink.script(script);
            let secret = ProviderSecret {
                address: Some(sink.url.trim_end_matches('/').to_string()),
                token: Some(token.clone()),
                username: None,
            };
            let got = sender.deliver(&provider(type_), &secret, &message(), || true).await;
            assert!(matches!(got, Outcome::Delivered { attempts: a, .. } if a == attempts), "{type_}: {got:?}");
            assert!(sink.problems().is_empty(), "{type_}: {:?}", sink.problems());
            assert_eq!(sink.delivered().len(), 1, "{type_}");
            for r in sink.received() {
                assert!(!r.body.contains(MARKER), "{type_}: a Secret value in {}", r.body);
            }
        }
    });
}

/// A refusal (4xx) is final, after one attempt, and its message never shows the Secret's
/// values even when the provider echoes them; a replica that no longer owns the shard sends
/// nothing.
#[test]
fn a_refusal_is_final_and_redacted() {
    use kuvryn_sync::notify::message::ProviderSecret;
    use kuvryn_sync::notify::send::{Outcome, Sender};
    testkit::runtime().block_on(async {
        let sink = Sink::start(Kind::Slack, &format!("{MARKER}-address")).await;
        // Slack's 404 `no_service` names nothing, but a proxy may echo the URL: script a body
        // that does, through the 404 path of a wrong address.
        let secret = ProviderSecret {
            address: Some(format!("{}/wrong", sink.url)),
            token: Some(format!("{MARKER}-token")),
            username: None,
        };
        sink.script([Reply::Status(404, None)]);
        let got = Sender::default().deliver(&provider("Slack"), &secret, &message(), || true).await;
        match got {
            Outcome::Failed { attempts, reason } => {
                assert_eq!(attempts, 1);
                assert!(reason.starts_with("HTTP 404"), "{reason}");
                assert!(!reason.contains(MARKER), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        let before = sink.received().len();
        let got = Sender::default().deliver(&provider("Slack"), &secret, &message(), || false).await;
        assert!(matches!(got, Outcome::NotSent { .. }), "{got:?}");
        assert_eq!(sink.received().len(), before, "sent without owning the shard");
    });
}
