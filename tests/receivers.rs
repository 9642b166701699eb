//! Git push receivers end to end (`docs/receivers.md`): the real `ksync-controller run
//! --receiver-bind-address` against the cluster, a real `git daemon`, and real HTTP requests on
//! loopback signed as each host signs them. Repositories poll hourly, so only a push can make
//! them fetch within a test.

use std::io::{Read as _, Write as _};
use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use kuvryn_sync::api::names;
use kuvryn_sync::api::{Application, Repository};
use kuvryn_sync::receiver::verify::sign;
use serde_json::{Value, json};
use testkit::metrics::{scrape, value};
use testkit::{Cluster, GitServer, Tools, WorkTree, eventually, free_port, install_crds, temp_dir};

const WAIT: Duration = Duration::from_secs(90);
const TOKEN: &str = "tenant-a-receiver-token-0123456789";
const TOKEN_B: &str = "tenant-b-receiver-token-9876543210";

/// An HTTP response.
#[derive(Debug)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 request on a fresh connection to 127.0.0.1:`port`. With `chunked`, the body
/// goes in chunks without a Content-Length. The body is written from another thread, so a
/// server answering before reading it all (413) is still heard.
fn request(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8], chunked: bool) -> Reply {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect to the receiver");
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if chunked {
        head.push_str("Transfer-Encoding: chunked\r\n\r\n");
    } else {
        head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    }
    stream.write_all(head.as_bytes()).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let body = body.to_vec();
    let sending = std::thread::spawn(move || {
        if chunked {
            for chunk in body.chunks(64 * 1024) {
                if writer.write_all(format!("{:x}\r\n", chunk.len()).as_bytes()).is_err()
                    || writer.write_all(chunk).is_err()
                    || writer.write_all(b"\r\n").is_err()
                {
                    return;
                }
            }
            let _ = writer.write_all(b"0\r\n\r\n");
        } else {
            let _ = writer.write_all(&body);
        }
    });
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    // Read until the server closes; a reset after the full response (a refused large body) is fine.
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(_) if !raw.is_empty() => break,
            Err(e) => panic!("reading the response to {method} {path}: {e}"),
        }
    }
    let _ = sending.join();
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|s| s.parse().ok()).expect(&text);
    let headers =
        lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_string(), v.trim().to_string())).collect();
    Reply { status, headers, body: body.to_string() }
}

fn post(port: u16, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
    request(port, "POST", path, headers, body, false)
}

/// A GitHub push of `branch` of `url` to `commit`, signed with `token`, as delivery `delivery`.
fn github_push(port: u16, path: &str, token: &str, delivery: &str, url: &str, branch: &str, commit: &str) -> Reply {
    let body = json!({"ref": format!("refs/heads/{branch}"), "after": commit,
        "repository": {"clone_url": url, "html_url": "https://example.invalid/not-this"}})
    .to_string();
    let signature = format!("sha256={}", sign(token.as_bytes(), &[body.as_bytes()]));
    post(
        port,
        path,
        &[
            ("Content-Type", "application/json"),
            ("X-GitHub-Event", "push"),
            ("X-GitHub-Delivery", delivery),
            ("X-Hub-Signature-256", &signature),
        ],
        body.as_bytes(),
    )
}

/// A generic push, signed with `token` at Unix time `at`.
fn generic_push(port: u16, path: &str, token: &str, at: i64, url: &str, reference: &str) -> Reply {
    let body = json!({"url": url, "ref": reference}).to_string();
    let ts = at.to_string();
    let signature = format!("sha256={}", sign(token.as_bytes(), &[ts.as_bytes(), b".", body.as_bytes()]));
    post(port, path, &[("X-Ksync-Timestamp", &ts), ("X-Ksync-Signature", &signature)], body.as_bytes())
}

/// A push of `main` of `url` at `commit` as GitLab, Gitea or Bitbucket Cloud sends it, with TOKEN.
fn host_push(port: u16, path: &str, host: &str, url: &str, commit: &str) -> Reply {
    let (body, mut headers): (Value, Vec<(&str, String)>) = match host {
        "gitlab" => (
            json!({"ref": "refs/heads/main", "checkout_sha": commit, "project": {"git_http_url": url}}),
            vec![("X-Gitlab-Event", "Push Hook".into()), ("X-Gitlab-Token", TOKEN.into())],
        ),
        "gitea" => (
            json!({"ref": "refs/heads/main", "after": commit, "repository": {"clone_url": url}}),
            vec![("X-Gitea-Event", "push".into()), ("X-Gitea-Delivery", format!("g-{commit}"))],
        ),
        _ => (
            json!({"repository": {"links": {"clone": [{"href": url}]}},
                "push": {"changes": [{"new": {"type": "branch", "name": "main", "target": {"hash": commit}}}]}}),
            vec![("X-Event-Key", "repo:push".into()), ("X-Request-UUID", format!("b-{commit}"))],
        ),
    };
    let body = body.to_string();
    let hex = sign(TOKEN.as_bytes(), &[body.as_bytes()]);
    match host {
        "gitea" => headers.push(("X-Gitea-Signature", hex)),
        "bitbucket" => headers.push(("X-Hub-Signature", format!("sha256={hex}"))),
        _ => {}
    }
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    post(port, path, &headers, body.as_bytes())
}

fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
}

/// The manager process, killed on drop.
struct Manager(std::process::Child, tempfile::TempDir);

impl Drop for Manager {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("manager log:\n{}", self.log());
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Manager {
    fn log(&self) -> String {
        std::fs::read_to_string(self.1.path().join("stderr.log")).unwrap_or_default()
    }
}

/// `ksync-controller run` with the receiver on `receiver` and `/metrics` on `metrics`.
fn start_manager(cluster: &Cluster, receiver: u16, metrics: u16) -> Manager {
    start_manager_with(cluster, receiver, metrics, &[])
}

/// [`start_manager`] with `extra` arguments.
fn start_manager_with(cluster: &Cluster, receiver: u16, metrics: u16, extra: &[&str]) -> Manager {
    let dir = temp_dir("receiver-manager");
    let tools = Tools::get();
    let child = Command::new(env!("CARGO_BIN_EXE_ksync-controller"))
        .args(["run", "--enable-webhooks", "false"])
        .args(["--metrics-bind-address", &format!("127.0.0.1:{metrics}")])
        .args(["--receiver-bind-address", &format!("127.0.0.1:{receiver}")])
        .arg("--git-cache-dir")
        .arg(dir.path().join("cache"))
        .args(extra)
        .env("KUBECONFIG", cluster.kubeconfig())
        .env("KSYNC_HELM", tools.bin.join("helm"))
        .env("KSYNC_KUBECTL", tools.bin.join("kubectl"))
        .env_remove("POD_NAMESPACE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("stderr.log")).unwrap())
        .spawn()
        .expect("ksync-controller");
    Manager(child, dir)
}

/// `.ksync.yaml` declaring `n` Applications `app-<i>`, each deploying ConfigMap `cm-<i>` of
/// `apps/<i>` into `ns`, and those ConfigMaps with `data.version = version`.
fn write_apps(work: &WorkTree, ns: &str, n: usize, version: &str) {
    let mut config = String::from("applications:\n");
    for i in 0..n {
        config.push_str(&format!(
            "- metadata: {{name: app-{i}}}\n  spec: {{source: {{path: apps/{i}}}, serviceAccountName: deployer, destination: {{namespace: {ns}}}}}\n"
        ));
        work.write(
            &format!("apps/{i}/cm.yaml"),
            &format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm-{i}}}\ndata: {{version: \"{version}\"}}\n"),
        );
    }
    work.write(".ksync.yaml", &config);
}

async fn create_secret(client: &Client, ns: &str, name: &str, token: &str) {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns}, "stringData": {"token": token},
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), ns).create(&PostParams::default(), &secret).await.unwrap();
}

async fn create_repository(client: &Client, ns: &str, name: &str, url: &str, branch: &str, secret: &str) {
    let repo: Repository = serde_json::from_value(json!({
        "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Repository",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"url": url, "ref": {"branch": branch}, "interval": "1h", "receiver": {"secretRef": {"name": secret}}},
    }))
    .unwrap();
    Api::<Repository>::namespaced(client.clone(), ns).create(&PostParams::default(), &repo).await.unwrap();
}

/// The Repository once it has a receiver path and a commit.
async fn settled(client: &Client, ns: &str, name: &str) -> Repository {
    let repos: Api<Repository> = Api::namespaced(client.clone(), ns);
    eventually(&format!("{ns}/{name} has a receiver path and a commit"), WAIT, || async {
        let r = repos.get(name).await.ok()?;
        let s = r.status.as_ref()?;
        (s.receiver.is_some() && s.revision.is_some()).then_some(r)
    })
    .await
}

fn path_of(r: &Repository) -> String {
    r.status.as_ref().unwrap().receiver.as_ref().unwrap().path.clone()
}

fn commit_of(r: &Repository) -> String {
    r.status.as_ref().unwrap().revision.as_ref().unwrap().commit.clone()
}

fn requested(r: &Repository) -> Option<String> {
    r.annotations().get(names::annotations::RECONCILE_REQUESTED_AT).cloned()
}

fn handled(r: &Repository) -> Option<String> {
    r.status.as_ref().and_then(|s| s.last_handled_reconcile_at.clone())
}

/// Every Application `app-0..n` of `ns` Synced at `commit`, and its ConfigMap at `version`.
async fn all_applied(client: &Client, ns: &str, n: usize, commit: &str, version: &str, deadline: Duration) {
    let apps: Api<Application> = Api::namespaced(client.clone(), ns);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    eventually(&format!("{n} Applications at {commit}"), deadline, || async {
        let listed = apps.list(&Default::default()).await.ok()?;
        let at = listed
            .items
            .iter()
            .filter(|a| {
                a.status.as_ref().and_then(|s| s.sync.as_ref()).and_then(|s| s.commit.as_deref()) == Some(commit)
            })
            .count();
        (at == n).then_some(())?;
        let cms = cms.list(&Default::default()).await.ok()?;
        let current = cms
            .items
            .iter()
            .filter(|c| c.name_any().starts_with("cm-"))
            .filter(|c| c.data.as_ref().and_then(|d| d.get("version")).map(String::as_str) == Some(version))
            .count();
        (current == n).then_some(())
    })
    .await;
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// A GitHub-style push: the right signature fetches and deploys the pushed commit; a wrong
/// one, a replay, an unknown path, another branch, another tenant's token, a GET, a 2 MiB body
/// and a flood each get their status, are counted, and fetch nothing. Tokens appear nowhere.
fn github_push_fetches_only_when_signed(cluster: Cluster) {
    let server = GitServer::start();
    let url = server.create_repo("platform");
    let work = WorkTree::clone(&url);
    let (ns, ns_b) = ("receiver-a", "receiver-b");
    write_apps(&work, ns, 1, "one");
    let first = work.commit_and_push("one");
    let (port, metrics) = (free_port(), free_port());
    let manager = start_manager(&cluster, port, metrics);
    runtime().block_on(async {
        let client = cluster.client().await;
        install_crds(&client).await;
        testkit::deployer_namespace(&client, ns).await;
        testkit::deployer_namespace(&client, ns_b).await;
        create_secret(&client, ns, "hook", TOKEN).await;
        create_secret(&client, ns_b, "hook", TOKEN_B).await;
        create_secret(&client, ns, "short", "too-short\n").await;
        create_repository(&client, ns, "platform", &url, "main", "hook").await;
        // Tenant B follows the same URL and branch, with its own token.
        create_repository(&client, ns_b, "platform", &url, "main", "hook").await;
        // (On a branch that does not exist: its Applications would collide with platform's.)
        create_repository(&client, ns, "short", &url, "no-such-branch", "short").await;
        let repos: Api<Repository> = Api::namespaced(client.clone(), ns);
        let repos_b: Api<Repository> = Api::namespaced(client.clone(), ns_b);
        let repo = settled(&client, ns, "platform").await;
        let repo_b = settled(&client, ns_b, "platform").await;
        let path = path_of(&repo);
        let path_b = path_of(&repo_b);
        assert_eq!(commit_of(&repo), first);
        assert_ne!(path, path_b, "the namespace is part of the path");
        all_applied(&client, ns, 1, &first, "one", WAIT).await;

        // A token shorter than 16 bytes: no path, and a message saying why.
        let short = eventually("the short token reported", WAIT, || async {
            let r = repos.get("short").await.ok()?;
            let c =
                r.status.as_ref()?.conditions.iter().find(|c| c.type_ == names::conditions::RECEIVER_READY)?.clone();
            (c.status == "False").then_some((r, c))
        })
        .await;
        assert!(short.0.status.as_ref().unwrap().receiver.is_none());
        assert!(short.1.message.contains("shorter than 16 bytes"), "{}", short.1.message);
        assert!(!short.1.message.contains("too-short"));
        eventually("a Warning Event about the short token", WAIT, || async {
            let events = testkit::events_about(&client, ns, "short").await;
            events
                .iter()
                .any(|(t, reason, _)| t == "Warning" && reason == names::reasons::RECEIVER_FAILURE)
                .then_some(())
        })
        .await;

        // The receiver serves once the manager is up.
        eventually("the receiver answers", WAIT, || async {
            std::net::TcpStream::connect(("127.0.0.1", port)).ok().map(|_| ())
        })
        .await;

        write_apps(&work, ns, 1, "two");
        let second = work.commit_and_push("two");

        // Unknown path: 404.
        let r = github_push(port, "/hook/0000000000000000000000000000000000000000", TOKEN, "d0", &url, "main", &second);
        assert_eq!(r.status, 404, "{r:?}");
        assert_eq!(post(port, "/elsewhere", &[], b"{}").status, 404);

        // A wrong signature: 401, no fetch.
        let r = github_push(port, &path, "not-the-token-but-long-enough", "d1", &url, "main", &second);
        assert_eq!(r.status, 401, "{r:?}");
        // Tenant A's token on tenant B's path: 401.
        let r = github_push(port, &path_b, TOKEN, "d1b", &url, "main", &second);
        assert_eq!(r.status, 401, "{r:?}");
        // Not a POST: 405.
        let r = request(port, "GET", &path, &[], b"", false);
        assert_eq!((r.status, r.header("allow")), (405, Some("POST")), "{r:?}");
        // 2 MiB: 413, with and without a Content-Length.
        let big = vec![b' '; 2 << 20];
        let r = post(port, &path, &[("X-GitHub-Event", "push")], &big);
        assert_eq!(r.status, 413, "{r:?}");
        let r = request(port, "POST", &path, &[("X-GitHub-Event", "push")], &big, true);
        assert_eq!(r.status, 413, "{r:?}");
        // A push of another branch, signed: 200 ignored.
        let r = github_push(port, &path, TOKEN, "d2", &url, "feature", &second);
        assert_eq!(r.status, 200, "{r:?}");
        assert!(r.body.contains("ignored"), "{r:?}");
        // A ping, signed: 200.
        let ping = json!({"zen": "hi"}).to_string();
        let signature = format!("sha256={}", sign(TOKEN.as_bytes(), &[ping.as_bytes()]));
        let r = post(
            port,
            &path,
            &[("X-GitHub-Event", "ping"), ("X-GitHub-Delivery", "d-ping"), ("X-Hub-Signature-256", &signature)],
            ping.as_bytes(),
        );
        assert_eq!(r.status, 200, "{r:?}");
        // Signed, but not JSON: 400.
        let garbage = b"not json";
        let signature = format!("sha256={}", sign(TOKEN.as_bytes(), &[garbage]));
        let r = post(
            port,
            &path,
            &[("X-GitHub-Event", "push"), ("X-GitHub-Delivery", "d-bad"), ("X-Hub-Signature-256", &signature)],
            garbage,
        );
        assert_eq!(r.status, 400, "{r:?}");

        // None of these fetched or asked to: no annotation on either tenant's Repository.
        for api in [&repos, &repos_b] {
            let r = api.get("platform").await.unwrap();
            assert_eq!(requested(&r), None, "nothing asked for a fetch");
            assert_eq!(commit_of(&r), first);
        }

        // The right signature: 202, the new commit fetched and deployed.
        let r = github_push(port, &path, TOKEN, "d3", &url, "main", &second);
        assert_eq!(r.status, 202, "{r:?}");
        let body: Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(body["triggered"], 1, "{r:?}");
        eventually("the pushed commit fetched", WAIT, || async {
            let r = repos.get("platform").await.ok()?;
            (commit_of(&r) == second).then_some(())
        })
        .await;
        all_applied(&client, ns, 1, &second, "two", WAIT).await;
        // Tenant B, of the same URL and branch, was not triggered by A's token.
        let b = repos_b.get("platform").await.unwrap();
        assert_eq!((requested(&b), commit_of(&b)), (None, first.clone()));

        // The same delivery again: 409, no new request.
        let before = repos.get("platform").await.unwrap();
        let r = github_push(port, &path, TOKEN, "d3", &url, "main", &second);
        assert_eq!(r.status, 409, "{r:?}");
        let after = repos.get("platform").await.unwrap();
        assert_eq!(requested(&after), requested(&before));
        assert_eq!(handled(&after), handled(&before));

        // A flood: refused with 429 and Retry-After before any signature work.
        let mut limited = None;
        for i in 0..60 {
            let r = github_push(port, &path, "flooding-with-a-wrong-token", &format!("f{i}"), &url, "main", &second);
            assert!(r.status == 401 || r.status == 429, "{r:?}");
            if r.status == 429 {
                limited = Some(r);
                break;
            }
        }
        let limited = limited.expect("a flood is rate limited");
        let wait: u64 = limited.header("retry-after").expect("Retry-After").parse().unwrap();
        assert!(wait >= 1, "{limited:?}");

        // Counted.
        let m = scrape(metrics).expect("metrics");
        let count =
            |result: &str| value(&m, "ksync_receiver_requests_total", &[("provider", "github"), ("result", result)]);
        assert!(count("unauthorized") >= 2.0, "{m:?}");
        for (result, at_least) in
            [("not_found", 1.0), ("accepted", 1.0), ("replayed", 1.0), ("ignored", 2.0), ("malformed", 1.0)]
        {
            assert!(count(result) >= at_least, "{result}: {}", count(result));
        }
        assert!(count("too_large") >= 2.0 && count("rate_limited") >= 1.0);
        assert_eq!(value(&m, "ksync_receiver_triggered_total", &[]), 1.0);

        // A Repository that drops its receiver loses its path, and its old path is unknown.
        let patch = json!({"spec": {"receiver": null}});
        repos_b.patch("platform", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch)).await.unwrap();
        eventually("tenant B's path removed", WAIT, || async {
            let s = repos_b.get("platform").await.ok()?.status?;
            let condition = s.conditions.iter().any(|c| c.type_ == names::conditions::RECEIVER_READY);
            (s.receiver.is_none() && !condition).then_some(())
        })
        .await;
        let gone = eventually("tenant B's old path unknown", WAIT, || {
            let r = github_push(port, &path_b, TOKEN_B, "gone", &url, "main", &second);
            async move { (r.status == 404).then_some(r) }
        })
        .await;

        // The tokens appear in no status, Event, response or log line.
        let mut seen = String::new();
        for (api, n) in [(&repos, ns), (&repos_b, ns_b)] {
            for r in api.list(&Default::default()).await.unwrap() {
                seen.push_str(&serde_json::to_string(&r.status).unwrap());
                for e in testkit::events_about(&client, n, &r.name_any()).await {
                    seen.push_str(&format!("{e:?}"));
                }
            }
        }
        seen.push_str(&format!("{r:?}{limited:?}{gone:?}"));
        seen.push_str(&manager.log());
        for secret in [TOKEN, TOKEN_B, "too-short"] {
            assert!(!seen.contains(secret), "{secret} leaked");
        }
    });
    drop(manager);
}

/// A generic push for a monorepo: one Repository declaring many Applications, all deployed at
/// the pushed commit; a stale timestamp is refused.
fn generic_push_deploys_every_application_of_a_monorepo(cluster: Cluster) {
    const APPS: usize = 12;
    let server = GitServer::start();
    let url = server.create_repo("mono");
    let work = WorkTree::clone(&url);
    let ns = "receiver-mono";
    write_apps(&work, ns, APPS, "one");
    let first = work.commit_and_push("one");
    let (port, metrics) = (free_port(), free_port());
    let manager = start_manager(&cluster, port, metrics);
    runtime().block_on(async {
        let client = cluster.client().await;
        install_crds(&client).await;
        testkit::deployer_namespace(&client, ns).await;
        create_secret(&client, ns, "hook", TOKEN).await;
        create_repository(&client, ns, "mono", &url, "main", "hook").await;
        let repo = settled(&client, ns, "mono").await;
        let path = path_of(&repo);
        all_applied(&client, ns, APPS, &first, "one", WAIT).await;
        eventually("the receiver answers", WAIT, || async {
            std::net::TcpStream::connect(("127.0.0.1", port)).ok().map(|_| ())
        })
        .await;

        write_apps(&work, ns, APPS, "two");
        let second = work.commit_and_push("two");
        // Signed six minutes ago: refused as a replay.
        let r = generic_push(port, &path, TOKEN, now() - 360, &url, "main");
        assert_eq!(r.status, 409, "{r:?}");
        let repos: Api<Repository> = Api::namespaced(client.clone(), ns);
        assert_eq!(requested(&repos.get("mono").await.unwrap()), None);

        let r = generic_push(port, &path, TOKEN, now(), &url, "refs/heads/main");
        assert_eq!(r.status, 202, "{r:?}");
        all_applied(&client, ns, APPS, &second, "two", WAIT).await;

        // Each other host's push, signed its way, fetches the commit it names.
        for host in ["gitlab", "gitea", "bitbucket"] {
            work.write("README", host);
            let commit = work.commit_and_push(host);
            let r = host_push(port, &path, host, &url, &commit);
            assert_eq!(r.status, 202, "{host}: {r:?}");
            eventually(&format!("the commit {host} pushed fetched"), WAIT, || async {
                (commit_of(&repos.get("mono").await.ok()?) == commit).then_some(())
            })
            .await;
        }

        let m = scrape(metrics).expect("metrics");
        for host in ["gitlab", "gitea", "bitbucket"] {
            assert_eq!(value(&m, "ksync_receiver_requests_total", &[("provider", host), ("result", "accepted")]), 1.0);
        }
        assert_eq!(value(&m, "ksync_receiver_requests_total", &[("provider", "generic"), ("result", "accepted")]), 1.0);
        assert_eq!(value(&m, "ksync_receiver_requests_total", &[("provider", "generic"), ("result", "replayed")]), 1.0);
    });
    drop(manager);
}

/// Two replicas: a push posted to the one that is not the leader makes the leader's Repository
/// controller fetch (the receiver only writes the annotation).
fn a_push_to_any_replica_makes_the_leader_fetch(cluster: Cluster) {
    use k8s_openapi::api::coordination::v1::Lease;
    let server = GitServer::start();
    let url = server.create_repo("platform");
    let work = WorkTree::clone(&url);
    let (ns, leases) = ("receiver-replicas", "receiver-leases");
    write_apps(&work, ns, 1, "one");
    work.commit_and_push("one");
    let ports: Vec<(u16, u16)> = (0..2).map(|_| (free_port(), free_port())).collect();
    runtime().block_on(async {
        let client = cluster.client().await;
        install_crds(&client).await;
        testkit::deployer_namespace(&client, ns).await;
        testkit::apply_as(
            &client,
            "test",
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": leases}}),
        )
        .await;
    });
    let managers: Vec<Manager> = ports
        .iter()
        .enumerate()
        .map(|(i, (port, metrics))| {
            let id = format!("replica-{i}");
            start_manager_with(&cluster, *port, *metrics, &["--lease-namespace", leases, "--replica-id", &id])
        })
        .collect();
    runtime().block_on(async {
        let client = cluster.client().await;
        create_secret(&client, ns, "hook", TOKEN).await;
        create_repository(&client, ns, "platform", &url, "main", "hook").await;
        let path = path_of(&settled(&client, ns, "platform").await);
        let lease_api: Api<Lease> = Api::namespaced(client.clone(), leases);
        let leader = eventually("a leader", WAIT, || async {
            lease_api.get("kuvryn-sync-leader").await.ok()?.spec?.holder_identity
        })
        .await;
        let other = if leader == "replica-0" { 1 } else { 0 };
        let port = ports[other].0;
        eventually("the other replica's receiver answers", WAIT, || async {
            std::net::TcpStream::connect(("127.0.0.1", port)).ok().map(|_| ())
        })
        .await;
        // Its reflector may not have the path yet: 404 until it does.
        work.write("README", "two");
        let second = work.commit_and_push("two");
        let mut delivery = 0;
        let r = eventually("the other replica accepts the push", WAIT, || {
            delivery += 1;
            let r = github_push(port, &path, TOKEN, &format!("r{delivery}"), &url, "main", &second);
            async move { (r.status != 404).then_some(r) }
        })
        .await;
        assert_eq!(r.status, 202, "replica-{other} (leader {leader}): {r:?}");
        let repos: Api<Repository> = Api::namespaced(client.clone(), ns);
        eventually("the leader fetched the pushed commit", WAIT, || async {
            (commit_of(&repos.get("platform").await.ok()?) == second).then_some(())
        })
        .await;
        let m = scrape(ports[other].1).expect("metrics of the replica that got the push");
        assert_eq!(value(&m, "ksync_receiver_triggered_total", &[]), 1.0);
    });
    drop(managers);
}

/// The figure of `docs/performance.md#push-receivers`: push → every Application of a monorepo
/// of `KSYNC_RECEIVER_APPS` (100) Applications applied, through the receiver, on simcluster (or
/// realkube with `KSYNC_RECEIVER_REALKUBE=1`).
/// Polling's figure is its wait (the rest of the interval) plus the same apply time.
#[test]
#[ignore = "a measurement: cargo nextest run -p kuvryn-sync --test receivers --run-ignored only -E 'test(measure)' --no-capture"]
fn measure_push_to_applied() {
    let apps: usize = std::env::var("KSYNC_RECEIVER_APPS").ok().and_then(|v| v.parse().ok()).unwrap_or(100);
    // KSYNC_RECEIVER_REALKUBE=1: against a real kube-apiserver instead.
    let cluster =
        if std::env::var_os("KSYNC_RECEIVER_REALKUBE").is_some() { Cluster::real() } else { Cluster::start() };
    let server = GitServer::start();
    let url = server.create_repo("mono");
    let work = WorkTree::clone(&url);
    let ns = "receiver-measure";
    write_apps(&work, ns, apps, "one");
    let first = work.commit_and_push("one");
    let (port, metrics) = (free_port(), free_port());
    let manager = start_manager(&cluster, port, metrics);
    runtime().block_on(async {
        let client = cluster.client().await;
        install_crds(&client).await;
        testkit::deployer_namespace(&client, ns).await;
        create_secret(&client, ns, "hook", TOKEN).await;
        create_repository(&client, ns, "mono", &url, "main", "hook").await;
        let path = path_of(&settled(&client, ns, "mono").await);
        let started = std::time::Instant::now();
        all_applied(&client, ns, apps, &first, "one", Duration::from_secs(600)).await;
        eprintln!("cold: {apps} Applications applied {:.1} s after the Repository fetched", started.elapsed().as_secs_f64());
        for round in ["two", "three"] {
            write_apps(&work, ns, apps, round);
            let commit = work.commit_and_push(round);
            let pushed = std::time::Instant::now();
            let r = generic_push(port, &path, TOKEN, now(), &url, "main");
            assert_eq!(r.status, 202, "{r:?}");
            let answered = pushed.elapsed();
            let repos: Api<Repository> = Api::namespaced(client.clone(), ns);
            eventually("fetched", WAIT, || async {
                (commit_of(&repos.get("mono").await.ok()?) == commit).then_some(())
            })
            .await;
            let fetched = pushed.elapsed();
            all_applied(&client, ns, apps, &commit, round, Duration::from_secs(600)).await;
            let applied = pushed.elapsed();
            eprintln!(
                "push {round}: answered {:.0} ms, fetched {:.2} s, all {apps} Applications applied {:.1} s after the push",
                answered.as_secs_f64() * 1000.0,
                fetched.as_secs_f64(),
                applied.as_secs_f64()
            );
        }
        // Polling, for comparison: the same Repository at `interval: 1m` (the spec change makes
        // it fetch now), then a commit pushed right after that fetch, with no receiver request:
        // it waits for the next poll, one interval (±10 %) later.
        let repos: Api<Repository> = Api::namespaced(client.clone(), ns);
        let patch = json!({"spec": {"interval": "1m"}});
        repos.patch("mono", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch)).await.unwrap();
        eventually("the new interval fetched", WAIT, || async {
            let r = repos.get("mono").await.ok()?;
            (r.status?.observed_generation == r.metadata.generation).then_some(())
        })
        .await;
        write_apps(&work, ns, apps, "polled");
        let commit = work.commit_and_push("polled");
        let pushed = std::time::Instant::now();
        all_applied(&client, ns, apps, &commit, "polled", Duration::from_secs(600)).await;
        eprintln!(
            "polling (interval 1m, pushed right after a poll): all {apps} Applications applied {:.1} s after the push",
            pushed.elapsed().as_secs_f64()
        );
    });
    drop(manager);
}

testkit::both!(
    github_push_fetches_only_when_signed,
    generic_push_deploys_every_application_of_a_monorepo,
    a_push_to_any_replica_makes_the_leader_fetch,
);
