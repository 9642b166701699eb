//! Applications end to end: the Repository and Application controllers running in-process
//! against the cluster, a real Git server, and helpers to read plans off Revisions.

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kuvryn_sync::api::Repository;
use kuvryn_sync::api::application::Application;
use kuvryn_sync::api::names;
use kuvryn_sync::api::revision::{PlanAction, PlanEntry, Revision};
use kuvryn_sync::controller::{application, repository};
use kuvryn_sync::plan::inventory;
use kuvryn_sync::render::{Limits, Renderer, Tools};
use kuvryn_sync::source::{CacheConfig, GitCache};
use serde_json::{Value, json};

use super::{Cluster, GitServer, WorkTree, apply_as, eventually, install_crds, temp_dir};

/// How long a test waits for a controller.
pub const WAIT: Duration = Duration::from_secs(60);

/// A namespace with a `deployer` service account, a Git server and both controllers.
pub struct Env {
    /// The cluster admin's client.
    pub client: Client,
    /// The namespace of the Repositories, Applications and the `deployer` service account.
    pub ns: String,
    /// The Git server the Repositories follow.
    pub git: GitServer,
    _cache_dir: tempfile::TempDir,
    stop: Option<tokio::sync::watch::Sender<bool>>,
}

/// The in-process controllers log to the test's output, which the test runner shows only when
/// the test fails: `KSYNC_TEST_LOG` (an `EnvFilter`, default `kuvryn_sync=info`).
fn log_controllers() {
    let filter = std::env::var("KSYNC_TEST_LOG").unwrap_or_else(|_| "kuvryn_sync=info".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_test_writer()
        .try_init();
}

impl Env {
    /// CRDs, the namespace `ns` with a service account `deployer` that may do anything in it,
    /// a Git server, and both controllers running.
    pub async fn start(cluster: &Cluster, ns: &str) -> Env {
        let (env, apps) = Env::start_driven(cluster, ns).await;
        let rx = env.stop.as_ref().expect("running").subscribe();
        tokio::spawn(application::run(apps, async move {
            let mut rx = rx;
            let _ = rx.wait_for(|s| *s).await;
        }));
        env
    }

    /// As [`Env::start`] with the Repository controller only: the test reconciles its
    /// Applications itself (`application::reconcile`) with the context returned.
    pub async fn start_driven(cluster: &Cluster, ns: &str) -> (Env, Arc<application::Context>) {
        log_controllers();
        let mut env = Env::without_controllers(cluster, ns).await;
        let client = env.client.clone();
        let cache = GitCache::new(CacheConfig::new(env._cache_dir.path())).unwrap();
        let apps = Env::context(cluster, cache.clone()).await;
        let repos = Arc::new(
            repository::Context::new(client.clone(), cache, Some("test".into()))
                .with_charts(apps.renderer.charts().clone()),
        );
        let (tx, mut rx) = tokio::sync::watch::channel(false);
        tokio::spawn(repository::run(repos, async move {
            let _ = rx.wait_for(|s| *s).await;
        }));
        env.stop = Some(tx);
        (env, apps)
    }

    /// An Application controller's context as another replica has it: its own Git cache (in
    /// the folder returned) and renderer, nothing kept from earlier reconciles.
    pub async fn another_replica(cluster: &Cluster) -> (Arc<application::Context>, tempfile::TempDir) {
        let dir = temp_dir("git-cache");
        (Env::context(cluster, GitCache::new(CacheConfig::new(dir.path())).unwrap()).await, dir)
    }

    async fn context(cluster: &Cluster, cache: GitCache) -> Arc<application::Context> {
        let tools = super::Tools::get();
        let renderer = Renderer::new(
            Tools { helm: tools.bin.join("helm"), kubectl: tools.bin.join("kubectl") },
            Limits::default(),
            kuvryn_sync::render::DEFAULT_CACHE_BYTES,
        );
        Arc::new(
            application::Context::new(cluster.config().await, cache, renderer, Some("test".into()), Default::default())
                .unwrap(),
        )
    }

    /// As [`Env::start`] without the controllers: for tests that run the manager binary.
    pub async fn without_controllers(cluster: &Cluster, ns: &str) -> Env {
        let client = cluster.client().await;
        install_crds(&client).await;
        super::deployer_namespace(&client, ns).await;
        Env { client, ns: ns.into(), git: GitServer::start(), _cache_dir: temp_dir("git-cache"), stop: None }
    }

    /// A Secret `name` of the namespace holding `data` (as `stringData`).
    pub async fn secret(&self, name: &str, data: &[(&str, &str)]) {
        let data: serde_json::Map<String, Value> = data.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
        let s: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": self.ns}, "stringData": data,
        }))
        .unwrap();
        Api::namespaced(self.client.clone(), &self.ns).create(&PostParams::default(), &s).await.unwrap();
    }

    /// A Notification `name` of the namespace with `spec`.
    pub async fn notification(&self, name: &str, spec: Value) {
        let n: kuvryn_sync::api::notification::Notification = serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Notification",
            "metadata": {"name": name, "namespace": self.ns}, "spec": spec,
        }))
        .unwrap();
        Api::namespaced(self.client.clone(), &self.ns).create(&PostParams::default(), &n).await.unwrap();
    }

    /// The notifications engine in this process, as a single replica runs it, until the sender
    /// returned is used or dropped.
    pub fn start_notifications(&self) -> tokio::sync::oneshot::Sender<()> {
        use kuvryn_sync::controller::notifications;
        let ctx =
            Arc::new(notifications::Context::new(self.client.clone(), "test".into(), None, Duration::from_secs(15)));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(notifications::run(ctx, async move {
            let _ = rx.await;
        }));
        tx
    }

    /// The Applications of the namespace.
    pub fn apps(&self) -> Api<Application> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// The Revisions of the namespace.
    pub fn revisions(&self) -> Api<Revision> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// A Git repository `name` and a Repository object following its `main`.
    pub async fn repository(&self, name: &str) -> WorkTree {
        let url = self.git.create_repo(name);
        let wt = WorkTree::clone(&url);
        wt.write("README.md", "example\n").write(".ksync.yaml", "applications: []\n");
        wt.commit_and_push("initial");
        let repo: Repository = serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Repository",
            "metadata": {"name": name, "namespace": self.ns},
            "spec": {"url": url, "ref": {"branch": "main"}, "interval": "1h"},
        }))
        .unwrap();
        Api::<Repository>::namespaced(self.client.clone(), &self.ns)
            .create(&PostParams::default(), &repo)
            .await
            .unwrap();
        wt
    }

    /// Make the Repository fetch now (a new commit was pushed).
    pub async fn refresh(&self, repo: &str, commit: &str) {
        let repos: Api<Repository> = Api::namespaced(self.client.clone(), &self.ns);
        let patch = json!({"metadata": {"annotations": {names::annotations::RECONCILE_REQUESTED_AT: commit}}});
        repos.patch(repo, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
        eventually("the Repository to resolve the new commit", WAIT, || async {
            let r = repos.get(repo).await.ok()?;
            (r.status?.revision?.commit == commit).then_some(())
        })
        .await;
    }

    /// Create the Application `name` with `spec`.
    pub async fn create_app(&self, name: &str, spec: Value) {
        let app: Application = serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
            "metadata": {"name": name, "namespace": self.ns}, "spec": spec,
        }))
        .unwrap();
        self.apps().create(&PostParams::default(), &app).await.unwrap();
    }

    /// A Repository `platform` whose `main` holds `files` (path, text), and the Application `app`
    /// of `spec`; the work tree, for later commits.
    pub async fn app_from(&self, app: &str, files: &[(&str, &str)], spec: Value) -> WorkTree {
        let wt = self.repository("platform").await;
        for (path, text) in files {
            wt.write(path, text);
        }
        let commit = wt.commit_and_push(&format!("{app} and its files"));
        self.refresh("platform", &commit).await;
        self.create_app(app, spec).await;
        wt
    }

    /// The desired Revision of `app` once it is `Failed`.
    pub async fn failed_revision(&self, app: &str) -> Revision {
        self.revision_where(app, "the Revision Failed", |r| {
            r.status.as_ref().is_some_and(|s| s.phase == kuvryn_sync::api::revision::RevisionPhase::Failed)
        })
        .await
    }

    /// Ask for a reconcile of the Application.
    pub async fn poke(&self, app: &str, token: &str) {
        let patch = json!({"metadata": {"annotations": {names::annotations::RECONCILE_REQUESTED_AT: token}}});
        self.apps().patch(app, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    }

    /// The desired Revision of `app` once `check` holds for it.
    pub async fn revision_where(&self, app: &str, what: &str, check: impl Fn(&Revision) -> bool) -> Revision {
        // On timeout, what was last seen says why.
        let mut last = None;
        let end = std::time::Instant::now() + WAIT;
        loop {
            let seen = async {
                let a = self.apps().get(app).await.ok()?;
                let name = a.status.as_ref()?.desired_revision.clone()?;
                let r = self.revisions().get(&name).await.ok()?;
                Some((a, r))
            }
            .await;
            if let Some((a, r)) = seen {
                if check(&r) {
                    return r;
                }
                last = Some((a, r));
            }
            if std::time::Instant::now() >= end {
                let (a, r) = match &last {
                    Some((a, r)) => (
                        serde_json::to_string_pretty(&(a.metadata.annotations.as_ref(), &a.status)).unwrap_or_default(),
                        serde_json::to_string_pretty(&(&r.metadata.name, &r.status)).unwrap_or_default(),
                    ),
                    None => ("none".into(), "none".into()),
                };
                panic!(
                    "timed out after {WAIT:?} waiting for {what}\nthe Application last seen: {a}\nits desired Revision: {r}"
                );
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// Everything, cluster-wide, for the `deployer` service account: it may create Namespaces
    /// and CRDs and list every kind in them.
    pub async fn allow_everything(&self) {
        let name = format!("{}-everything", self.ns);
        apply_as(
            &self.client,
            "test",
            &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name}, "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}),
        )
        .await;
        apply_as(
            &self.client,
            "test",
            &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": self.ns}]}),
        )
        .await;
    }

    /// Wait until Application `app`'s `status.sync.planDigest` is the stored plan of Revision
    /// `rev` (what `ksync sync` then approves).
    pub async fn planned_digest(&self, app: &str, rev: &str) {
        eventually("the plan digest of the Revision waiting", WAIT, || async {
            let d = self.apps().get(app).await.ok()?.status?.sync?.plan_digest?;
            let r = self.revisions().get(rev).await.ok()?;
            (r.status?.plan?.digest == d).then_some(())
        })
        .await;
    }

    /// The Events about the object `regarding` in the namespace: (type, reason, note).
    pub async fn events(&self, regarding: &str) -> Vec<(String, String, String)> {
        super::events_about(&self.client, &self.ns, regarding).await
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(true);
        }
    }
}

/// The entries of `r`'s stored plan (none before it is planned).
pub fn entries(r: &Revision) -> Vec<PlanEntry> {
    r.status.as_ref().and_then(|s| s.plan.as_ref()).map(|p| p.entries.clone()).unwrap_or_default()
}

/// The entry for `kind` `name` among `entries`; panics, showing them, when there is none.
pub fn entry<'a>(entries: &'a [PlanEntry], kind: &str, name: &str) -> &'a PlanEntry {
    entries
        .iter()
        .find(|e| e.resource.kind == kind && e.resource.name == name)
        .unwrap_or_else(|| panic!("no plan entry for {kind} {name} in {entries:#?}"))
}

/// Whether `r` has a plan and no failure.
pub fn planned(r: &Revision) -> bool {
    r.status.as_ref().is_some_and(|s| s.plan.is_some() && s.failure.is_none())
}

/// What `r`'s plan does to `kind` `name`, if it names it.
pub fn action_of(r: &Revision, kind: &str, name: &str) -> Option<PlanAction> {
    entries(r).iter().find(|e| e.resource.kind == kind && e.resource.name == name).map(|e| e.action)
}

/// What the rollout will do, done by the test: apply the desired object as our field manager,
/// labelled as managed by the Application.
pub async fn apply_desired(env: &Env, app: &str, yaml: &str) {
    let mut obj: Value = kuvryn_sync::yaml::from_str(yaml).unwrap();
    obj["metadata"]["namespace"] = json!(env.ns);
    inventory::stamp(&mut obj, &env.ns, app, application::DEFAULT_SHARD);
    apply_as(&env.client, names::FIELD_MANAGER, &obj).await;
}
