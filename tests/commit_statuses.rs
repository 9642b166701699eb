//! The commit-status requests (`kuvryn_sync::notify::providers`) sent over HTTP to loopback
//! servers that check each host's documented shape (`testkit::git_hosts`): every state of a
//! Revision's lifecycle is accepted by GitHub, GitLab, Gitea and Bitbucket; GitLab's refusal of a
//! repeated state reads as delivered; a wrong token is refused; no Secret value is sent
//! anywhere but in its auth header.

use kuvryn_sync::api::notification::{Provider, ProviderType, Severity};
use kuvryn_sync::notify::message::{Message, Method, ProviderSecret, Request};
use kuvryn_sync::notify::providers;
use testkit::git_hosts::{GitHost, Host};

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
