//! The Repository controller end to end: a real `git daemon` (and smart HTTP with basic auth)
//! serving repositories the test builds, the controller running against the cluster
//! (simcluster, or the one in `KSYNC_E2E_KUBECONFIG`), Applications appearing, changing and
//! disappearing as Git changes, and bad commits changing nothing.

mod support;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use kuvryn_sync::api::conditions;
use kuvryn_sync::api::names;
use kuvryn_sync::api::{Application, Repository};
use kuvryn_sync::controller::repository::{self, Context};
use kuvryn_sync::source::{CacheConfig, GitCache};
use serde_json::{Value, json};
use support::{Cluster, GitHttpServer, GitServer, HttpOptions, WorkTree, eventually, install_crds, temp_dir};

const WAIT: Duration = Duration::from_secs(60);

fn app_yaml(name: &str, path: &str) -> String {
    format!(
        "- metadata:\n    name: {name}\n    labels: {{team: a}}\n  spec:\n    source: {{repository: platform, path: {path}}}\n    serviceAccountName: deployer\n    destination: {{namespace: {name}}}\n"
    )
}

struct Env {
    client: Client,
    ns: String,
    _cache_dir: tempfile::TempDir,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Env {
    async fn start(cluster: &Cluster, ns: &str) -> Env {
        Env::start_with(cluster, ns, false).await
    }

    /// With `allow_local`: as the manager runs with `--allow-local-repositories`.
    async fn start_with(cluster: &Cluster, ns: &str, allow_local: bool) -> Env {
        let client = cluster.client().await;
        install_crds(&client).await;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let _ = namespaces
            .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap())
            .await;
        let cache_dir = temp_dir("git-cache");
        let cache = GitCache::new(CacheConfig { allow_local, ..CacheConfig::new(cache_dir.path()) }).unwrap();
        let ctx = Arc::new(Context::new(client.clone(), cache, Some("test".into())));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(repository::run(ctx, async move {
            let _ = rx.await;
        }));
        Env { client, ns: ns.into(), _cache_dir: cache_dir, stop: Some(tx) }
    }

    fn repos(&self) -> Api<Repository> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    fn apps(&self) -> Api<Application> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    async fn create_repository(&self, name: &str, spec: Value) {
        let repo: Repository = serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Repository",
            "metadata": {"name": name, "namespace": self.ns}, "spec": spec,
        }))
        .unwrap();
        self.repos().create(&PostParams::default(), &repo).await.unwrap();
    }

    /// Wait until the Repository's Ready condition satisfies `check`; returns the Repository.
    async fn ready_where(&self, name: &str, what: &str, check: impl Fn(&Repository) -> bool) -> Repository {
        eventually(what, WAIT, || async {
            let r = self.repos().get(name).await.ok()?;
            check(&r).then_some(r)
        })
        .await
    }

    async fn app_names(&self) -> Vec<String> {
        let mut names: Vec<String> =
            self.apps().list(&ListParams::default()).await.unwrap().items.iter().map(|a| a.name_any()).collect();
        names.sort();
        names
    }

    async fn events(&self, regarding: &str) -> Vec<(String, String, String)> {
        support::events_about(&self.client, &self.ns, regarding).await
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

fn ready(r: &Repository) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    r.status.as_ref().and_then(|s| conditions::get(&s.conditions, names::conditions::READY))
}

fn commit_of(r: &Repository) -> Option<String> {
    r.status.as_ref()?.revision.as_ref().map(|v| v.commit.clone())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn applications_follow_git_and_bad_commits_change_nothing(cluster: Cluster) {
    let server = GitServer::start();
    let url = server.create_repo("platform");
    let work = WorkTree::clone(&url);
    work.write(
        ".ksync.yaml",
        &format!("applications:\n{}{}", app_yaml("web", "apps/web"), app_yaml("api", "apps/api")),
    );
    let first = work.commit_and_push("two apps");
    runtime().block_on(async {
        let env = Env::start(&cluster, "team-a").await;
        // An Application applied directly, not from Git.
        let manual: Application = serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "manual", "namespace": "team-a"},
            "spec": {"source": {"repository": "platform", "path": "x"}, "serviceAccountName": "sa", "destination": {"namespace": "x"}},
        }))
        .unwrap();
        let manual = env.apps().create(&PostParams::default(), &manual).await.unwrap();
        env.create_repository("platform", json!({"url": url, "ref": {"branch": "main"}, "interval": "1s"})).await;

        let r = env
            .ready_where("platform", "Ready at the first commit", |r| {
                ready(r).is_some_and(|c| c.status == "True") && commit_of(r).as_deref() == Some(first.as_str())
            })
            .await;
        let status = r.status.unwrap();
        assert_eq!(status.applications.as_ref().unwrap().discovered, 2);
        assert_eq!(status.applications.as_ref().unwrap().files, [".ksync.yaml"]);
        assert_eq!(status.revision.as_ref().unwrap().reference, "branch/main");
        assert!(conditions::is_true(&status.conditions, names::conditions::SOURCE_READY), "{status:?}");
        assert_eq!(env.app_names().await, ["api", "manual", "web"]);
        let web = env.apps().get("web").await.unwrap();
        assert_eq!(web.labels()[names::labels::REPOSITORY], "platform");
        assert_eq!(web.labels()["team"], "a");
        assert_eq!(web.annotations()[names::annotations::DISCOVERED_FROM], ".ksync.yaml");
        assert_eq!(web.spec.source.path, "apps/web");
        // Applied with the Repository controller's own field manager.
        let managers: Vec<String> =
            web.metadata.managed_fields.unwrap_or_default().into_iter().filter_map(|m| m.manager).collect();
        assert!(managers.contains(&repository::MANAGER.to_string()), "{managers:?}");
        let events = env.events("platform").await;
        assert!(events.iter().any(|(t, r, n)| t == "Normal" && r == "NewRevision" && n.contains(&first[..12])), "{events:?}");
        assert!(events.iter().any(|(_, r, n)| r == "DiscoveryChanged" && n.contains("created api, web")), "{events:?}");

        // Fetches that find the same commit write nothing (interval 1s): an idle Repository
        // costs no writes, and its Applications no reconciles.
        let git = &server;
        let fetches = |n: usize| {
            let at_least = git.upload_packs("platform") + n;
            eventually("more fetches", WAIT, move || async move { (git.upload_packs("platform") >= at_least).then_some(()) })
        };
        fetches(1).await;
        let before = env.repos().get("platform").await.unwrap().resource_version();
        fetches(3).await;
        let after = env.repos().get("platform").await.unwrap();
        assert_eq!(after.resource_version(), before, "a fetch of the same commit wrote {:?}", after.status);

        // Git changes: web moves, api goes, db arrives.
        work.write(".ksync.yaml", &format!("applications:\n{}{}", app_yaml("web", "apps/web-v2"), app_yaml("db", "apps/db")));
        let second = work.commit_and_push("web v2, api removed, db added");
        env.ready_where("platform", "the second commit", |r| commit_of(r).as_deref() == Some(second.as_str())).await;
        assert_eq!(env.app_names().await, ["db", "manual", "web"]);
        assert_eq!(env.apps().get("web").await.unwrap().spec.source.path, "apps/web-v2");
        // A discovered Application deleted by hand comes back (Git is the source of truth).
        env.apps().delete("db", &Default::default()).await.unwrap();
        eventually("db re-created", WAIT, || async { env.apps().get_opt("db").await.ok().flatten() }).await;
        let untouched = env.apps().get("manual").await.unwrap();
        assert_eq!(untouched.resource_version(), manual.resource_version(), "a directly applied Application is never touched");

        // A broken .ksync.yaml: Ready=False, Stalled, the file named, nothing changed.
        let web_before = env.apps().get("web").await.unwrap().resource_version();
        work.write(".ksync.yaml", "applications:\n- metadata: {name: web}\n  spec: {source: {repository: platform, path: p, bogus: 1}, serviceAccountName: d, destination: {namespace: web}}\n");
        let broken = work.commit_and_push("broken config");
        let r = env
            .ready_where("platform", "the broken commit reported", |r| {
                ready(r).is_some_and(|c| c.status == "False" && c.message.contains(&broken[..12]))
            })
            .await;
        let c = ready(&r).unwrap();
        assert_eq!(c.reason, names::reasons::CONFIG_FAILURE);
        assert!(c.message.contains(".ksync.yaml: applications[0]: Application web: unknown field spec.source.bogus"), "{}", c.message);
        assert!(c.message.contains("no Application was changed"), "{}", c.message);
        let status = r.status.clone().unwrap();
        assert!(conditions::is_true(&status.conditions, names::conditions::STALLED));
        assert_eq!(commit_of(&r).as_deref(), Some(second.as_str()), "the last accepted commit stays");
        assert_eq!(env.app_names().await, ["db", "manual", "web"]);
        assert_eq!(env.apps().get("web").await.unwrap().resource_version(), web_before);
        let events = env.events("platform").await;
        assert!(events.iter().any(|(t, r, _)| t == "Warning" && r == "ConfigFailure"), "{events:?}");

        // Declaring an Application that was applied directly: refused, nothing changed.
        work.write(".ksync.yaml", &format!("applications:\n{}", app_yaml("manual", "apps/taken")));
        let taking = work.commit_and_push("take over manual");
        let r = env
            .ready_where("platform", "the takeover refused", |r| {
                ready(r).is_some_and(|c| c.status == "False" && c.message.contains(&taking[..12]))
            })
            .await;
        assert!(ready(&r).unwrap().message.contains("manual (applied directly, not from Git)"), "{:?}", ready(&r));
        assert_eq!(env.app_names().await, ["db", "manual", "web"]);
        assert_eq!(env.apps().get("manual").await.unwrap().resource_version(), manual.resource_version());
        // Each commit and each new failure message got its own Event, with its own note (none
        // merged into an earlier one's series).
        let events = env.events("platform").await;
        for commit in [&first, &second] {
            assert!(events.iter().any(|(_, r, n)| r == "NewRevision" && n.contains(&commit[..12])), "{events:?}");
        }
        for commit in [&broken, &taking] {
            assert!(events.iter().any(|(t, r, n)| t == "Warning" && r == "ConfigFailure" && n.contains(&commit[..12])), "{events:?}");
        }

        // Fixed: Ready again, and the Applications follow.
        work.write(".ksync.yaml", &format!("applications:\n{}", app_yaml("web", "apps/web-v3")));
        let fixed = work.commit_and_push("fixed");
        env.ready_where("platform", "Ready after the fix", |r| {
            ready(r).is_some_and(|c| c.status == "True") && commit_of(r).as_deref() == Some(fixed.as_str())
        })
        .await;
        assert_eq!(env.app_names().await, ["manual", "web"]);

        // Suspended: Ready=False, Suspended; Git changes are not picked up.
        env.repos()
            .patch("platform", &PatchParams::default(), &Patch::Merge(json!({"spec": {"suspend": true}})))
            .await
            .unwrap();
        env.ready_where("platform", "Suspended", |r| ready(r).is_some_and(|c| c.reason == names::reasons::SUSPENDED)).await;
        work.write(".ksync.yaml", "applications: []\n");
        work.commit_and_push("everything removed while suspended");
        tokio::time::timeout(Duration::from_secs(3), std::future::pending::<()>()).await.ok();
        assert_eq!(env.app_names().await, ["manual", "web"], "a suspended Repository changes nothing");
    });
}

fn monorepo_config_paths_and_a_server_that_goes_down(cluster: Cluster) {
    let mut server = GitServer::start();
    let url = server.create_repo("mono");
    let work = WorkTree::clone(&url);
    work.write("teams/a/.ksync.yaml", &format!("applications:\n{}", app_yaml("a-web", "teams/a/web")));
    work.write(
        "teams/b/.ksync.yaml",
        &format!("applications:\n{}{}", app_yaml("b-web", "teams/b/web"), app_yaml("b-api", "teams/b/api")),
    );
    let first = work.commit_and_push("teams");
    runtime().block_on(async {
        let env = Env::start(&cluster, "mono").await;
        env.create_repository(
            "platform",
            json!({"url": url, "ref": {"branch": "main"}, "interval": "1s", "timeout": "5s",
                   "applicationConfigPaths": ["teams/a/.ksync.yaml", "teams/b/.ksync.yaml"]}),
        )
        .await;
        let r = env.ready_where("platform", "Ready", |r| commit_of(r).as_deref() == Some(first.as_str())).await;
        assert_eq!(r.status.unwrap().applications.unwrap().discovered, 3);
        assert_eq!(env.app_names().await, ["a-web", "b-api", "b-web"]);
        let a = env.apps().get("a-web").await.unwrap();
        assert_eq!(a.annotations()[names::annotations::DISCOVERED_FROM], "teams/a/.ksync.yaml");

        // The same name in two files: refused.
        work.write("teams/a/.ksync.yaml", &format!("applications:\n{}", app_yaml("b-web", "teams/a/web")));
        let dup = work.commit_and_push("duplicate");
        let r = env
            .ready_where("platform", "duplicate refused", |r| {
                ready(r).is_some_and(|c| c.status == "False" && c.message.contains(&dup[..12]))
            })
            .await;
        assert!(
            ready(&r)
                .unwrap()
                .message
                .contains("teams/b/.ksync.yaml: Application b-web is declared twice (also in teams/a/.ksync.yaml)"),
            "{:?}",
            ready(&r)
        );
        assert_eq!(env.app_names().await, ["a-web", "b-api", "b-web"]);

        // A configured file that is missing: refused.
        std::fs::remove_file(work.path().join("teams/a/.ksync.yaml")).unwrap();
        let missing = work.commit_and_push("team a file removed");
        let r = env
            .ready_where("platform", "missing file refused", |r| {
                ready(r).is_some_and(|c| c.status == "False" && c.message.contains(&missing[..12]))
            })
            .await;
        assert!(ready(&r).unwrap().message.contains("teams/a/.ksync.yaml: not found in the commit"), "{:?}", ready(&r));
        assert_eq!(env.app_names().await, ["a-web", "b-api", "b-web"]);

        // The server goes down: Ready=False with the reason, retrying; nothing changed.
        let before = commit_of(&env.repos().get("platform").await.unwrap());
        server.stop();
        let r = env
            .ready_where("platform", "fetch failure reported", |r| {
                ready(r).is_some_and(|c| c.status == "False" && c.reason == names::reasons::SOURCE_FAILURE)
            })
            .await;
        let status = r.status.clone().unwrap();
        assert!(conditions::is_true(&status.conditions, names::conditions::RECONCILING), "retryable: {status:?}");
        let source = conditions::get(&status.conditions, names::conditions::SOURCE_READY).unwrap();
        assert_eq!((source.status.as_str(), source.reason.as_str()), ("False", names::reasons::SOURCE_FAILURE));
        assert!(ready(&r).unwrap().message.contains("mono"), "{:?}", ready(&r));
        assert_eq!(commit_of(&r), before);
        assert_eq!(env.app_names().await, ["a-web", "b-api", "b-web"]);
    });
}

fn private_repository_credentials_from_a_secret(cluster: Cluster) {
    let server = GitHttpServer::start_with(HttpOptions {
        auth: Some(("deploy", "the-right-token-4711")),
        tls: true,
        ..Default::default()
    });
    let ca = server.ca_pem.clone().unwrap();
    let bare = server.create_repo("private");
    let work = WorkTree::clone(bare.to_str().unwrap());
    work.write(".ksync.yaml", &format!("applications:\n{}", app_yaml("web", "apps/web")));
    let head = work.commit_and_push("first");
    let url = server.url("private");
    runtime().block_on(async {
        let env = Env::start(&cluster, "private").await;
        let secrets: Api<Secret> = Api::namespaced(env.client.clone(), "private");
        let secret = |password: &str| -> Secret {
            serde_json::from_value(json!({"metadata": {"name": "git-creds"},
                "stringData": {"username": "deploy", "password": password, "ca.crt": ca}}))
            .unwrap()
        };
        secrets.create(&PostParams::default(), &secret("a-wrong-token-0815")).await.unwrap();
        env.create_repository(
            "platform",
            json!({"url": url, "ref": {"branch": "main"}, "interval": "1s", "secretRef": {"name": "git-creds"}}),
        )
        .await;
        let r = env
            .ready_where("platform", "authentication failure", |r| {
                ready(r).is_some_and(|c| c.status == "False" && c.message.contains("authentication"))
            })
            .await;
        let text = serde_json::to_string(&r.status).unwrap();
        assert!(!text.contains("a-wrong-token-0815"), "{text}");
        assert!(env.app_names().await.is_empty());

        secrets.replace("git-creds", &PostParams::default(), &secret("the-right-token-4711")).await.unwrap();
        env.ready_where("platform", "Ready with the right token", |r| commit_of(r).as_deref() == Some(head.as_str()))
            .await;
        assert_eq!(env.app_names().await, ["web"]);
        for (_, _, note) in env.events("platform").await {
            assert!(!note.contains("token-"), "{note}");
        }
    });
}

// See: issue 18 (tenants cannot read each other's Git source).
/// Two tenants, one private HTTPS repository (basic auth, private CA). Tenant A's Repository
/// has the credentials and fetches the commit, and A's Application is planned from it. Tenant B
/// names the same URL and pins that very commit, without credentials (its Secret holds only the
/// CA, to reach the server at all) or with a wrong password: B's Repositories report the
/// server's refusal (an authentication error on `Ready` and `SourceReady`, a Warning Event) and
/// discover nothing, and B's Application pinned to the commit gets a `SourceFailure` and no
/// Revision, so nothing of A's tree reaches B's namespace.
fn tenants_cannot_read_each_others_private_source(cluster: Cluster) {
    let (a_ns, b_ns) = ("iso-tenant-a", "iso-tenant-b");
    let server = GitHttpServer::start_with(HttpOptions {
        auth: Some(("deploy", "tenant-a-token-4711")),
        tls: true,
        ..Default::default()
    });
    let ca = server.ca_pem.clone().unwrap();
    let bare = server.create_repo("private");
    let work = WorkTree::clone(bare.to_str().unwrap());
    work.write(
        ".ksync.yaml",
        &format!(
            "metadata: {{name: web}}\nspec: {{source: {{repository: platform, path: apps/web}}, serviceAccountName: deployer, destination: {{namespace: {a_ns}}}, sync: {{automatic: false}}}}\n"
        ),
    );
    work.write(
        "apps/web/cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: tenant-a-private}\ndata: {owner: tenant-a}\n",
    );
    let head = work.commit_and_push("tenant a's private commit");
    let url = server.url("private");
    runtime().block_on(async {
        let env = support::apps::Env::start(&cluster, a_ns).await;
        support::deployer_namespace(&env.client, b_ns).await;
        let secret = |ns: &str, name: &str, data: Value| {
            let secrets: Api<Secret> = Api::namespaced(env.client.clone(), ns);
            let s: Secret = serde_json::from_value(json!({"metadata": {"name": name}, "stringData": data})).unwrap();
            async move { secrets.create(&PostParams::default(), &s).await.unwrap() }
        };
        let repository = |ns: &str, name: &str, spec: Value| {
            let repos: Api<Repository> = Api::namespaced(env.client.clone(), ns);
            let r: Repository = serde_json::from_value(json!({
                "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Repository",
                "metadata": {"name": name, "namespace": ns}, "spec": spec,
            }))
            .unwrap();
            async move { repos.create(&PostParams::default(), &r).await.unwrap() }
        };
        let repos = |ns: &str| -> Api<Repository> { Api::namespaced(env.client.clone(), ns) };

        // Tenant A, with its credentials: Ready at the commit, its Application planned from it.
        secret(a_ns, "git-creds", json!({"username": "deploy", "password": "tenant-a-token-4711", "ca.crt": ca})).await;
        repository(
            a_ns,
            "platform",
            json!({"url": url, "ref": {"branch": "main"}, "interval": "1h", "secretRef": {"name": "git-creds"}}),
        )
        .await;
        eventually("tenant A's Repository at the commit", WAIT, || async {
            let r = repos(a_ns).get("platform").await.ok()?;
            (commit_of(&r).as_deref() == Some(head.as_str())).then_some(())
        })
        .await;
        let rev = env.revision_where("web", "tenant A's plan", support::apps::planned).await;
        assert_eq!(rev.spec.source.commit, head);

        // Tenant B: the same URL and commit, without credentials or with a wrong password.
        secret(b_ns, "ca-only", json!({"ca.crt": ca})).await;
        secret(b_ns, "guessed", json!({"username": "deploy", "password": "tenant-b-guess-0815", "ca.crt": ca})).await;
        for (name, secret_name) in [("stolen", "ca-only"), ("guessed", "guessed")] {
            repository(
                b_ns,
                name,
                json!({"url": url, "ref": {"commit": head}, "interval": "1h", "secretRef": {"name": secret_name}}),
            )
            .await;
        }
        let b_apps: Api<Application> = Api::namespaced(env.client.clone(), b_ns);
        b_apps
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
                    "metadata": {"name": "thief", "namespace": b_ns},
                    "spec": {"source": {"repository": "stolen", "path": "apps/web", "revision": head},
                             "serviceAccountName": "deployer", "destination": {"namespace": b_ns}},
                }))
                .unwrap(),
            )
            .await
            .unwrap();
        for name in ["stolen", "guessed"] {
            let r = eventually(&format!("tenant B's Repository {name} to settle"), WAIT, || async {
                let r = repos(b_ns).get(name).await.ok()?;
                ready(&r).is_some_and(|c| c.observed_generation == r.metadata.generation).then_some(r)
            })
            .await;
            let c = ready(&r).unwrap();
            assert_eq!(
                (c.status.as_str(), c.reason.as_str()),
                ("False", names::reasons::SOURCE_FAILURE),
                "{name} must not resolve tenant A's commit: {c:?}"
            );
            assert!(c.message.contains("authentication"), "{name}: {}", c.message);
            let source =
                conditions::get(&r.status.as_ref().unwrap().conditions, names::conditions::SOURCE_READY).unwrap();
            assert_eq!(source.status, "False", "{name}: {source:?}");
            assert!(commit_of(&r).is_none(), "{name}: {:?}", r.status);
            let events = eventually(&format!("a Warning Event on {name}"), WAIT, || async {
                let ev = support::events_about(&env.client, b_ns, name).await;
                ev.iter().any(|e| e.0 == "Warning" && e.1 == names::reasons::SOURCE_FAILURE).then_some(ev)
            })
            .await;
            assert!(events.iter().any(|e| e.2.contains("authentication")), "{events:#?}");
        }
        let thief = eventually("tenant B's Application to report its source", WAIT, || async {
            let a = b_apps.get("thief").await.ok()?;
            let c = conditions::get(&a.status.as_ref()?.conditions, names::conditions::READY)?.clone();
            let settled = c.reason == names::reasons::SOURCE_FAILURE
                || c.status == "True"
                || a.status.as_ref()?.desired_revision.is_some();
            settled.then_some((a, c))
        })
        .await;
        let (app, c) = thief;
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", names::reasons::SOURCE_FAILURE), "{c:?}");
        assert!(c.message.contains("authentication"), "{}", c.message);
        assert!(app.status.unwrap().desired_revision.is_none());
        let revisions: Api<kuvryn_sync::api::revision::Revision> = Api::namespaced(env.client.clone(), b_ns);
        assert!(revisions.list(&ListParams::default()).await.unwrap().items.is_empty());
        assert!(b_apps.list(&ListParams::default()).await.unwrap().items.iter().all(|a| a.name_any() == "thief"));
        let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(env.client.clone(), b_ns);
        assert!(cms.get_opt("tenant-a-private").await.unwrap().is_none());
        for (_, _, note) in support::events_about(&env.client, b_ns, "guessed").await {
            assert!(!note.contains("0815"), "{note}");
        }
    });
}

// See: issue 18. A `file://` URL reads the controller's own disk: refused unless the manager
// runs with `--allow-local-repositories` (tests and local setups), then followed like any remote.
fn file_urls_are_refused_without_allow_local_repositories(cluster: Cluster) {
    let server = GitServer::start();
    server.create_repo("local");
    let bare = server.repo_path("local");
    let work = WorkTree::clone(bare.to_str().unwrap());
    work.write(".ksync.yaml", &format!("applications:\n{}", app_yaml("web", "apps/web")));
    let head = work.commit_and_push("first");
    let url = format!("file://{}", bare.display());
    runtime().block_on(async {
        let env = Env::start(&cluster, "local-off").await;
        env.create_repository("local", json!({"url": url, "ref": {"branch": "main"}, "interval": "1s"})).await;
        let r = env
            .ready_where("local", "the file:// URL refused", |r| ready(r).is_some_and(|c| c.status == "False"))
            .await;
        let c = ready(&r).unwrap();
        assert_eq!(c.reason, names::reasons::SOURCE_FAILURE, "{c:?}");
        assert!(c.message.contains("--allow-local-repositories"), "{}", c.message);
        let stalled = conditions::get(&r.status.as_ref().unwrap().conditions, names::conditions::STALLED);
        assert!(stalled.is_some_and(|s| s.status == "True"), "retrying cannot help: {stalled:?}");
        assert!(commit_of(&r).is_none());
        let events = eventually("a Warning Event", WAIT, || async {
            let ev = env.events("local").await;
            ev.iter().any(|e| e.0 == "Warning" && e.2.contains("--allow-local-repositories")).then_some(ev)
        })
        .await;
        assert!(!events.is_empty());
        assert!(env.app_names().await.is_empty());
        drop(env);

        // The same Repository under a manager started with the flag.
        let env = Env::start_with(&cluster, "local-off", true).await;
        env.ready_where("local", "Ready with --allow-local-repositories", |r| {
            ready(r).is_some_and(|c| c.status == "True") && commit_of(r).as_deref() == Some(head.as_str())
        })
        .await;
        assert_eq!(env.app_names().await, ["web"]);
    });
}

crate::both!(
    applications_follow_git_and_bad_commits_change_nothing,
    monorepo_config_paths_and_a_server_that_goes_down,
    private_repository_credentials_from_a_secret,
    tenants_cannot_read_each_others_private_source,
    file_urls_are_refused_without_allow_local_repositories,
);
