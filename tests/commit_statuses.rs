//! Commit statuses (docs/notifications.md#commit-statuses). End to end on both servers: a
//! Notification per host writes the deployed commit's status, pending then success, to
//! GitHub-, GitLab- and Gitea-style APIs on loopback (`testkit::git_hosts`, checking each host's
//! documented request), and a failed rollout's commit gets a failure. Then the requests alone:
//! every state of a Revision's lifecycle is accepted by GitHub, GitLab, Gitea and Bitbucket;
//! GitLab's refusal of a repeated state reads as delivered; a wrong token is refused; no Secret
//! value is sent anywhere but in its auth header.

use kuvryn_sync::api::notification::{Provider, ProviderType, Severity};
use kuvryn_sync::api::revision::RevisionPhase;
use kuvryn_sync::notify::message::{Message, Method, ProviderSecret, Request};
use kuvryn_sync::notify::providers;
use serde_json::json;
use testkit::Cluster;
use testkit::apps::{Env, WAIT};
use testkit::git_hosts::{GitHost, Host};
use testkit::manifests::deployment;

const COMMIT: &str = "2c26b46b68ffc68ff99b453c1d30413413422d70";

fn message(severity: Severity, reason: &str) -> Message {
    Message {
        event: "e1".into(),
        namespace: "team-a".into(),
        application: "web".into(),
        severity,
        reason: reason.into(),
        message: "Revision web-1a2b3c4d5e".into(),
        revision: Some("web-1a2b3c4d5e".into()),
        commit: Some(COMMIT.into()),
        source_url: Some("https://git.example.invalid/acme/shop.git".into()),
        at: "2026-12-05T12:00:00Z".into(),
        sent: 0,
    }
}

fn send(r: &Request) -> (u16, String) {
    let client = reqwest::blocking::Client::new();
    let mut b = match r.method {
        Method::Post => client.post(&r.url),
        Method::Put => client.put(&r.url),
    };
    for (k, v) in &r.headers {
        b = b.header(k, v);
    }
    let resp = b.body(r.body.clone()).send().expect("send");
    (resp.status().as_u16(), resp.text().unwrap_or_default())
}

fn provider(type_: ProviderType) -> Provider {
    Provider { type_, secret_ref: Default::default(), channel: None, repository: None }
}

#[test]
fn every_host_accepts_the_lifecycle_of_a_commit() {
    const TOKEN: &str = "tok-3b1f-never-in-a-body";
    let cases = [
        (Host::GitHub, ProviderType::GitHub, None, ["pending", "pending", "success", "failure"]),
        (Host::GitLab, ProviderType::GitLab, None, ["pending", "running", "success", "failed"]),
        (Host::Gitea, ProviderType::Gitea, None, ["pending", "pending", "success", "failure"]),
        (
            Host::Bitbucket,
            ProviderType::Bitbucket,
            Some("ci-bot"),
            ["INPROGRESS", "INPROGRESS", "SUCCESSFUL", "FAILED"],
        ),
    ];
    let lifecycle = [
        (Severity::Normal, "NewRevision"),
        (Severity::Normal, "Progressing"),
        (Severity::Normal, "Succeeded"),
        (Severity::Warning, "HealthTimeout"),
    ];
    for (host, type_, username, states) in cases {
        let server = GitHost::start(host, TOKEN, username);
        let secret = ProviderSecret {
            address: Some(server.url()),
            token: Some(TOKEN.into()),
            username: username.map(String::from),
        };
        for (severity, reason) in lifecycle {
            let msg = message(severity, reason);
            assert!(providers::applies(type_, &msg));
            let (status, body) = send(&providers::request(&provider(type_), &secret, &msg).unwrap());
            assert!(
                status == 201 || providers::already_delivered(type_, status, &body),
                "{host:?} {reason}: {status} {body}"
            );
        }
        let accepted = server.statuses();
        let got: Vec<&str> = accepted.iter().map(|s| s.state.as_str()).collect();
        // A host that keeps one state per commit refuses nothing here; GitHub, Gitea and
        // Bitbucket take a repeated pending as another status.
        assert_eq!(got, states, "{host:?}: {:?}", server.refused());
        assert!(accepted.iter().all(|s| s.repository == "acme/shop" && s.commit == COMMIT), "{accepted:?}");
        assert!(accepted.iter().all(|s| s.context == "kuvryn-sync/team-a/web"), "{accepted:?}");
        // The token is in the auth header only, never in a body or a URL.
        for raw in server.raw() {
            let (url, body) = (raw.lines().next().unwrap(), raw.lines().last().unwrap());
            assert!(!url.contains(TOKEN) && !body.contains(TOKEN), "{raw}");
        }
        // A wrong token is refused as the host refuses it.
        let wrong = ProviderSecret { token: Some("wrong".into()), ..secret.clone() };
        let (status, _) =
            send(&providers::request(&provider(type_), &wrong, &message(Severity::Normal, "Succeeded")).unwrap());
        assert_eq!(status, 401, "{host:?}");
    }
}

#[test]
fn gitlab_refusing_a_repeated_state_counts_as_delivered() {
    let server = GitHost::start(Host::GitLab, "t0k3n-gitlab-1234", None);
    let secret =
        ProviderSecret { address: Some(server.url()), token: Some("t0k3n-gitlab-1234".into()), username: None };
    let msg = message(Severity::Normal, "Progressing");
    let req = providers::request(&provider(ProviderType::GitLab), &secret, &msg).unwrap();
    assert_eq!(send(&req).0, 201);
    let (status, body) = send(&req);
    assert_eq!(status, 400);
    assert!(providers::already_delivered(ProviderType::GitLab, status, &body), "{body}");
    assert!(!providers::already_delivered(ProviderType::GitHub, status, &body));
}

#[test]
fn events_that_set_no_state_or_have_no_commit_are_not_sent() {
    let mut msg = message(Severity::Normal, "DiscoveryChanged");
    assert!(!providers::applies(ProviderType::GitHub, &msg));
    assert!(providers::applies(ProviderType::Slack, &msg));
    msg.reason = "Succeeded".into();
    msg.commit = None;
    assert!(!providers::applies(ProviderType::Gitea, &msg));
}

/// Every state a host accepted for `commit`, in order.
fn states(host: &GitHost, commit: &str) -> Vec<String> {
    host.statuses().iter().filter(|s| s.commit == commit).map(|s| s.state.clone()).collect()
}

fn a_deployed_commit_shows_pending_then_success_and_a_failed_one_failure(cluster: Cluster) {
    const NS: &str = "commit-status";
    const TOKEN: &str = "status-token-5d0c-SECRET";
    let runtime = testkit::runtime();
    runtime.block_on(async {
        let env = Env::start(&cluster, NS).await;
        let hosts = [
            ("github", "GitHub", GitHost::start(Host::GitHub, TOKEN, None)),
            ("gitlab", "GitLab", GitHost::start(Host::GitLab, TOKEN, None)),
            ("gitea", "Gitea", GitHost::start(Host::Gitea, TOKEN, None)),
        ];
        for (name, type_, host) in &hosts {
            env.secret(name, &[("address", &host.url()), ("token", TOKEN)]).await;
            env.notification(name, json!({"provider": {"type": type_, "secretRef": {"name": name}, "repository": "acme/shop"}}))
                .await;
        }
        let _stop = env.start_notifications();
        // The Pods wait for a ConfigMap that is not in Git: the rollout stays under way until
        // every host shows it pending, then the test lets it finish.
        let ok = deployment("web").image("nginx:1.27").ready_ms(300).env_from_config_map("GATE", "gate", "open");
        let wt = env
            .app_from(
                "web",
                &[("web/deploy.yaml", &ok.to_string())],
                json!({"source": {"repository": "platform", "path": "web"}, "serviceAccountName": "deployer",
                       "destination": {"namespace": NS}, "health": {"timeout": "20s"}, "failurePolicy": {"maxAttempts": 1}}),
            )
            .await;
        for (_, type_, host) in &hosts {
            testkit::eventually(&format!("{type_} to show a commit under way"), WAIT, || async {
                host.statuses().iter().any(|s| ["pending", "running"].contains(&s.state.as_str())).then_some(())
            })
            .await;
        }
        let gate = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gate"}, "data": {"open": "yes"}});
        let config_maps = kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(env.client.clone(), NS);
        config_maps.create(&Default::default(), &serde_json::from_value(gate).unwrap()).await.expect("create the gate");
        let healthy = env
            .revision_where("web", "the first rollout Healthy", |r| {
                r.status.as_ref().is_some_and(|s| s.phase == RevisionPhase::Healthy)
            })
            .await;
        let good = healthy.spec.source.commit.clone();
        for (_, type_, host) in &hosts {
            testkit::eventually(&format!("{type_} to show {good} success"), WAIT, || async {
                (states(host, &good).last().map(String::as_str) == Some("success")).then_some(())
            })
            .await;
            let seen = states(host, &good);
            // Pending (GitLab: pending, then running) before success, and never after it.
            assert!(["pending", "running"].contains(&seen[0].as_str()), "{type_}: {seen:?}");
            assert!(seen.iter().all(|s| ["pending", "running", "success"].contains(&s.as_str())), "{type_}: {seen:?}");
            assert!(host.statuses().iter().all(|s| s.repository == "acme/shop" && s.context == format!("kuvryn-sync/{NS}/web")));
            assert!(host.refused().iter().all(|(code, _)| *code == 400), "{type_}: {:?}", host.refused());
        }

        // A commit whose rollout fails: failure, with the reason.
        wt.write("web/deploy.yaml", &ok.image("registry.invalid/never:1").to_string());
        let bad = wt.commit_and_push("an image that never pulls");
        env.refresh("platform", &bad).await;
        env.failed_revision("web").await;
        for (_, type_, host) in &hosts {
            let want = if host.host() == Host::GitLab { "failed" } else { "failure" };
            testkit::eventually(&format!("{type_} to show {bad} {want}"), WAIT, || async {
                (states(host, &bad).last().map(String::as_str) == Some(want)).then_some(())
            })
            .await;
            let failure = host.statuses().into_iter().rfind(|s| s.commit == bad).unwrap();
            assert!(failure.description.starts_with("HealthTimeout: "), "{type_}: {failure:?}");
            // The token travels only in the auth header.
            for raw in host.raw() {
                let (url, body) = (raw.lines().next().unwrap(), raw.lines().last().unwrap());
                assert!(!url.contains(TOKEN) && !body.contains(TOKEN), "{raw}");
            }
        }
    });
}

testkit::both!(a_deployed_commit_shows_pending_then_success_and_a_failed_one_failure,);
