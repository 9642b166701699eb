//! The Repository controller end to end: a real `git daemon` (and smart HTTP with basic auth)
//! serving repositories the test builds, the controller running against the cluster
//! (simcluster, or the one in `KSYNC_E2E_KUBECONFIG`), Applications appearing, changing and
//! disappearing as Git changes, and bad commits changing nothing.

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
use testkit::{Cluster, GitHttpServer, GitServer, HttpOptions, WorkTree, eventually, install_crds, temp_dir};

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
        testkit::events_about(&self.client, &self.ns, regarding).await
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
            serde_json::from_value(
                json!({"metadata": {"name": "git-creds", "annotations": {names::annotations::GIT_URLS: url}},
                "stringData": {"username": "deploy", "password": password, "ca.crt": ca}}),
            )
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
        let env = testkit::apps::Env::start(&cluster, a_ns).await;
        testkit::deployer_namespace(&env.client, b_ns).await;
        let secret = |ns: &str, name: &str, data: Value| {
            let secrets: Api<Secret> = Api::namespaced(env.client.clone(), ns);
            let s: Secret = serde_json::from_value(
                json!({"metadata": {"name": name, "annotations": {names::annotations::GIT_URLS: url}}, "stringData": data}),
            )
            .unwrap();
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
        let rev = env.revision_where("web", "tenant A's plan", testkit::apps::planned).await;
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
                let ev = testkit::events_about(&env.client, b_ns, name).await;
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
        for (_, _, note) in testkit::events_about(&env.client, b_ns, "guessed").await {
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

// See: issue 44 (trust boundaries, round two).
/// A push is never a person's decision: an entry of `.ksync.yaml` carrying an approval, a
/// rollback request or a redeploy is refused whole (`ConfigFailure` naming the file, the
/// Application and the annotation), the Applications keep the last good set, and a later good
/// commit is taken again.
fn git_never_declares_a_persons_decision(cluster: Cluster) {
    let server = GitServer::start();
    let url = server.create_repo("platform");
    let work = WorkTree::clone(&url);
    let web = |annotations: &str| {
        format!(
            "metadata:\n  name: web\n  annotations: {{{annotations}}}\nspec: {{source: {{repository: platform, path: apps/web}}, serviceAccountName: deployer, destination: {{namespace: web}}, sync: {{automatic: false}}}}\n"
        )
    };
    work.write(".ksync.yaml", &web("team.example.com/owner: a"));
    let first = work.commit_and_push("a manual-sync Application");
    runtime().block_on(async {
        let env = Env::start(&cluster, "git-decisions").await;
        env.create_repository("platform", json!({"url": url, "ref": {"branch": "main"}, "interval": "1s"})).await;
        env.ready_where("platform", "the first commit", |r| commit_of(r).as_deref() == Some(first.as_str())).await;
        let annotations = |app: Application| app.metadata.annotations.unwrap_or_default();
        assert_eq!(annotations(env.apps().get("web").await.unwrap())["team.example.com/owner"], "a");

        let forged = [
            (names::annotations::APPROVED_PLAN, "sync.kuvryn.io/approved-plan: 'sha256:0f', sync.kuvryn.io/approved-by: release-manager"),
            (names::annotations::ROLLBACK_TO, "sync.kuvryn.io/rollback-to: 0123456789abcdef0123456789abcdef01234567, sync.kuvryn.io/rollback-target-revision: web-0123456789ab"),
            (names::annotations::REDEPLOY_REQUESTED_AT, "sync.kuvryn.io/redeploy-requested-at: '2026-12-05T00:00:00Z'"),
        ];
        for (key, declared) in forged {
            work.write(".ksync.yaml", &web(&format!("team.example.com/owner: b, {declared}")));
            let head = work.commit_and_push("a commit that approves itself");
            let r = env
                .ready_where("platform", "the forged commit refused", |r| {
                    ready(r).is_some_and(|c| c.reason == names::reasons::CONFIG_FAILURE && c.message.contains(&head[..12]))
                })
                .await;
            let message = ready(&r).unwrap().message.clone();
            assert!(message.contains(".ksync.yaml") && message.contains("Application web") && message.contains(key), "{message}");
            assert_eq!(commit_of(&r).as_deref(), Some(first.as_str()), "the last good commit stays");
            let kept = annotations(env.apps().get("web").await.unwrap());
            assert_eq!(kept["team.example.com/owner"], "a", "the last good set is kept: {kept:?}");
            assert!(!kept.keys().any(|k| k.starts_with("sync.kuvryn.io/approved") || k.starts_with("sync.kuvryn.io/rollback") || k == names::annotations::REDEPLOY_REQUESTED_AT), "{kept:?}");
            assert!(
                env.events("platform").await.iter().any(|(_, reason, note)| reason == names::reasons::CONFIG_FAILURE && note.contains(key)),
                "a Warning Event names {key}"
            );
        }
        work.write(".ksync.yaml", &web("team.example.com/owner: c"));
        let fixed = work.commit_and_push("no decision in Git");
        env.ready_where("platform", "the good commit", |r| commit_of(r).as_deref() == Some(fixed.as_str())).await;
        assert_eq!(annotations(env.apps().get("web").await.unwrap())["team.example.com/owner"], "c");
    });
}

// See: issue 44 (trust boundaries, round two).
/// A credential reaches only where its owner meant: a Repository naming a Secret that is not
/// marked for Git (a database password), with a URL its author chose, sends nothing to that
/// server and says why; once the Secret lists the URL in `sync.kuvryn.io/git-urls`, it is used.
/// (The server's CA is in the Secret here: it stands for a server with a publicly trusted
/// certificate, which an attacker can have.)
fn a_secret_is_sent_only_to_the_urls_it_lists(cluster: Cluster) {
    let server = GitHttpServer::start_with(HttpOptions {
        auth: Some(("db-admin", "the-database-password-4711")),
        tls: true,
        ..Default::default()
    });
    let ca = server.ca_pem.clone().unwrap();
    let bare = server.create_repo("exfiltrate");
    let work = WorkTree::clone(bare.to_str().unwrap());
    work.write(".ksync.yaml", &format!("applications:\n{}", app_yaml("web", "apps/web")));
    let head = work.commit_and_push("first");
    let url = server.url("exfiltrate");
    runtime().block_on(async {
        let env = Env::start(&cluster, "secret-urls").await;
        let secrets: Api<Secret> = Api::namespaced(env.client.clone(), "secret-urls");
        let db: Secret = serde_json::from_value(json!({"metadata": {"name": "team-db"}, "type": "kubernetes.io/basic-auth",
            "stringData": {"username": "db-admin", "password": "the-database-password-4711", "ca.crt": ca}}))
        .unwrap();
        secrets.create(&PostParams::default(), &db).await.unwrap();
        let spec = |secret: &str| json!({"url": url, "ref": {"branch": "main"}, "interval": "1s", "secretRef": {"name": secret}});
        env.create_repository("steal", spec("team-db")).await;
        env.create_repository("missing", spec("no-such-secret")).await;
        let mut messages = Vec::new();
        for name in ["steal", "missing"] {
            let r = env
                .ready_where(name, "the Secret refused", |r| {
                    ready(r).is_some_and(|c| c.reason == names::reasons::SOURCE_FAILURE && c.message.contains(names::annotations::GIT_URLS))
                })
                .await;
            messages.push(ready(&r).unwrap().message.replace("no-such-secret", "team-db"));
        }
        assert_eq!(messages[0], messages[1], "a missing Secret and an unmarked one read the same");
        assert!(!messages[0].contains("4711"), "{}", messages[0]);
        assert_eq!(server.authorizations(), Vec::<String>::new(), "the Secret's credentials reached the server");
        assert_eq!(server.requests(), Vec::<String>::new(), "nothing was sent");
        assert!(env.app_names().await.is_empty());

        // Marked for this server (among others): used.
        let mark = |urls: &str| json!({"metadata": {"annotations": {names::annotations::GIT_URLS: urls}}});
        let prefix = url.rsplit_once('/').unwrap().0.to_string();
        secrets.patch("team-db", &PatchParams::default(), &Patch::Merge(mark(&format!("https://git.example.com/team-a, {prefix}/")))).await.unwrap();
        env.ready_where("steal", "Ready once the Secret lists the URL", |r| commit_of(r).as_deref() == Some(head.as_str())).await;
        assert!(!server.authorizations().is_empty());
    });
}

// See: issue 44 (trust boundaries, round two).
/// A deposed leader writes nothing: the Repository controller on a client whose writes are
/// fenced by a closed fence sends no write (no Application, no status), while it keeps asking
/// the fence.
fn a_closed_leader_fence_lets_no_write_through(cluster: Cluster) {
    let server = GitServer::start();
    let url = server.create_repo("platform");
    let work = WorkTree::clone(&url);
    work.write(".ksync.yaml", &format!("applications:\n{}", app_yaml("web", "apps/web")));
    work.commit_and_push("first");
    runtime().block_on(async {
        let client = cluster.client().await;
        install_crds(&client).await;
        let ns = "deposed-leader";
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let _ = namespaces
            .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap())
            .await;
        let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = asked.clone();
        let fence = kuvryn_sync::client::Fenced::new(move || {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            None
        });
        let fenced = kuvryn_sync::client::Limiter::unlimited().fenced_client(cluster.config().await, fence).unwrap();
        let cache_dir = temp_dir("git-cache");
        let cache = GitCache::new(CacheConfig::new(cache_dir.path())).unwrap();
        let ctx = Arc::new(Context::new(fenced, cache, Some("deposed".into())));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(repository::run(ctx, async move {
            let _ = rx.await;
        }));
        let repos: Api<Repository> = Api::namespaced(client.clone(), ns);
        let repo: Repository = serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Repository",
            "metadata": {"name": "platform", "namespace": ns},
            "spec": {"url": url, "ref": {"branch": "main"}, "interval": "1s"},
        }))
        .unwrap();
        repos.create(&PostParams::default(), &repo).await.unwrap();
        // Two syncs' worth of writes were stopped at the fence (each sync's dry run, its status).
        eventually("the fence asked for four writes", WAIT, || async {
            (asked.load(std::sync::atomic::Ordering::SeqCst) >= 4).then_some(())
        })
        .await;
        let apps: Api<Application> = Api::namespaced(client.clone(), ns);
        assert!(apps.list(&ListParams::default()).await.unwrap().items.is_empty());
        assert!(repos.get("platform").await.unwrap().status.is_none(), "no status written");
        let _ = tx.send(());
    });
}

// See: issue 44 (trust boundaries, round two).
/// The Repository controller deletes an Application only as it listed it: one deleted and
/// created again under the same name since (by a newer leader) survives.
fn an_application_created_again_is_not_deleted_by_a_stale_listing(cluster: Cluster) {
    runtime().block_on(async {
        let client = cluster.client().await;
        install_crds(&client).await;
        let ns = "stale-listing";
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let _ = namespaces
            .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap())
            .await;
        let apps: Api<Application> = Api::namespaced(client.clone(), ns);
        let app: Application = serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "web", "namespace": ns},
            "spec": {"source": {"repository": "platform", "path": "apps/web"}, "serviceAccountName": "deployer",
                     "destination": {"namespace": ns}},
        }))
        .unwrap();
        apps.create(&PostParams::default(), &app).await.unwrap();
        let stale = apps.list_metadata(&ListParams::default()).await.unwrap().items;
        apps.delete("web", &Default::default()).await.unwrap();
        eventually("the first web gone", WAIT, || async { apps.get_opt("web").await.unwrap().is_none().then_some(()) })
            .await;
        let again = apps.create(&PostParams::default(), &app).await.unwrap();
        let deleted = repository::delete_undeclared(&apps, &["web".to_string()], &stale).await.unwrap();
        assert!(deleted.is_empty(), "{deleted:?}");
        assert_eq!(apps.get("web").await.unwrap().metadata.uid, again.metadata.uid);
        // The listing of the object that is there deletes it.
        let fresh = apps.list_metadata(&ListParams::default()).await.unwrap().items;
        assert_eq!(repository::delete_undeclared(&apps, &["web".to_string()], &fresh).await.unwrap(), ["web"]);
    });
}

testkit::both!(
    git_never_declares_a_persons_decision,
    a_secret_is_sent_only_to_the_urls_it_lists,
    a_closed_leader_fence_lets_no_write_through,
    an_application_created_again_is_not_deleted_by_a_stale_listing,
    applications_follow_git_and_bad_commits_change_nothing,
    monorepo_config_paths_and_a_server_that_goes_down,
    private_repository_credentials_from_a_secret,
    tenants_cannot_read_each_others_private_source,
    file_urls_are_refused_without_allow_local_repositories,
);
