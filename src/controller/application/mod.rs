//! The Application controller: from Git to a deterministic plan stored on a Revision.
//!
//! # Expected flow
//! 1. `spec.suspend`: `Ready=False` (`Suspended`), nothing else.
//! 2. Resolve the source: the Repository's `status.revision.commit`, or `spec.source.revision`
//!    (a commit, branch or tag of the same repository, resolved at most once per the
//!    Repository's interval). The commit is made present in the shared [`GitCache`] with the
//!    Repository's credentials (no network when it already is for those credentials; fetched
//!    again when only other credentials fetched it, so the remote decides).
//! 3. The Revision of the identity (Application, commit, path, render settings, service
//!    account) is created when missing, owned by the Application, labelled with its name.
//! 4. Materialize the source path, read Helm `valuesFrom` and render, both as the
//!    Application's service account (impersonation).
//! 5. Validate against API discovery; label every object as managed by the Application.
//! 6. Read the live objects, server-side dry-run applies of those that exist (conflicts), and
//!    the managed objects across `status.managedKinds` and the desired kinds, as the service
//!    account ([`live`]).
//! 7. Build the plan ([`crate::plan::build`]), store it bounded on the Revision with
//!    `spec.desiredStateHash`, delete Revisions beyond `spec.history.limit` (oldest first,
//!    never the desired one nor held ones).
//! 8. Application status: `desiredRevision`, `sync` (OutOfSync when the plan changes
//!    something), conditions; a Warning Event whenever the failure message changes.
//!
//! # Guarantees
//! - Nothing here writes to managed resources: every request against them is a read or a dry
//!   run. Applying comes with the rollout.
//! - A render, validation or API failure is reported on the Revision (`status.failure`, phase
//!   `Failed`) and on the Application (`Ready=False` with the reason: `SourceFailure`,
//!   `RenderFailure`, `ValidationFailure`, `ApplyFailure` for what the service account may
//!   not read), with every problem listed; retrying failures are retried, others wait for a
//!   change.
//! - The controller never uses its own permissions for the Application's objects or values.
//! - Secret values (from `valuesFrom` Secrets and desired Secrets) never reach status, Events
//!   or logs: messages are redacted, and plans show only which keys changed.

mod attempt;
pub mod live;
pub mod progress;
pub mod rollout;

use attempt::Rollout;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher::{self, watcher};
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};

use super::with_jitter;
use crate::api::application::{Application, ApplicationStatus, DeletionPolicy, RenderType, SyncState, SyncStatus};
use crate::api::conditions;
use crate::api::names;
use crate::api::repository::Repository;
use crate::api::revision::{self as rev, Revision, RevisionPhase, RevisionSource, RevisionSpec};
use crate::apply::Writer;
use crate::plan::{self, inventory, revision, validate};
use crate::render::{self, Renderer};
use crate::source::{GitCache, Reference};
use crate::watch::discovery::ClusterScopes;
use crate::watch::managed::{self as watched, ExtraKinds, Inventory};

/// When an Application is looked at again after its status write was refused as stale.
const STALE_RETRY: Duration = Duration::from_millis(500);

/// When an Application is looked at again after this replica could not write for its shard.
const NOT_OWNER_RETRY: Duration = Duration::from_secs(1);

/// The shard label value until sharding assigns one.
pub const DEFAULT_SHARD: &str = "0";

/// Tunables.
#[derive(Clone, Debug)]
pub struct Settings {
    /// How often a planned Application is reconciled again without a trigger.
    pub resync: Duration,
    /// Applications reconciled at once.
    pub concurrency: u16,
    /// Validation limits.
    pub validate: validate::Limits,
    /// How many shards Applications are spread over (`--shards`).
    pub shards: u32,
    /// The replica's API request budget (`--kube-api-qps`, `--kube-api-burst`).
    pub limiter: crate::client::Limiter,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            resync: Duration::from_secs(300),
            concurrency: 8,
            validate: validate::Limits::default(),
            shards: 1,
            limiter: crate::client::Limiter::unlimited(),
        }
    }
}

/// One watch of every Repository per replica: its store answers reconciles' reads, and its
/// events fan out to the shard controllers (each maps a Repository to its Applications).
struct Repositories {
    store: reflector::Store<Repository>,
    events: tokio::sync::broadcast::Sender<Arc<Repository>>,
    task: tokio::task::JoinHandle<()>,
}

impl Repositories {
    fn start(client: Client) -> Repositories {
        let (store, writer) = reflector::store();
        let (events, _) = tokio::sync::broadcast::channel(1024);
        let tx = events.clone();
        let task = tokio::spawn(async move {
            let stream =
                watcher(Api::<Repository>::all(client), watcher::Config::default()).default_backoff().reflect(writer);
            let mut stream = std::pin::pin!(stream);
            // What Applications read of each Repository, as last sent.
            let mut seen: HashMap<(Option<String>, String), String> = HashMap::new();
            while let Some(r) = stream.next().await {
                let (repo, deleted) = match r {
                    Ok(watcher::Event::Apply(r) | watcher::Event::InitApply(r)) => (r, false),
                    Ok(watcher::Event::Delete(r)) => (r, true),
                    Ok(watcher::Event::Init | watcher::Event::InitDone) => continue,
                    Err(e) => {
                        tracing::debug!(error = %e, "watching Repositories");
                        continue;
                    }
                };
                let key = (repo.namespace(), repo.name_any());
                let changed = if deleted {
                    seen.remove(&key).is_some()
                } else {
                    let now = Repositories::what_applications_read(&repo);
                    seen.insert(key, now.clone()).as_ref() != Some(&now)
                };
                // No subscriber (no shard running) is fine.
                if changed {
                    drop(tx.send(Arc::new(repo)));
                }
            }
        });
        Repositories { store, events, task }
    }

    /// What a change of triggers the Repository's Applications: its spec and generation, the
    /// commit it resolved and its readiness; not `status.revision.fetchedAt`, which every poll
    /// moves (at 1,000 Applications, reconciling each on every poll kept the replicas' API budget
    /// spent and delayed drift checks by seconds).
    fn what_applications_read(repo: &Repository) -> String {
        let status = repo.status.as_ref();
        let ready = status.and_then(|s| conditions::get(&s.conditions, names::conditions::READY));
        json!({
            "generation": repo.metadata.generation,
            "spec": repo.spec,
            "revision": status.and_then(|s| s.revision.as_ref()).map(|r| (&r.reference, &r.commit)),
            "ready": ready.map(|c| (&c.status, &c.reason)),
        })
        .to_string()
    }
}

impl Drop for Repositories {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the controller needs.
pub struct Context {
    /// The API client (the controller's own identity: Applications, Revisions, Repositories).
    pub client: Client,
    /// The configuration impersonating clients are derived from.
    config: kube::Config,
    /// The shared Git cache.
    pub cache: GitCache,
    /// Renders, with its cache.
    pub renderer: Renderer,
    /// Who Events are reported by.
    pub reporter: Reporter,
    /// Tunables.
    pub settings: Settings,
    /// This replica's shard ownership; `None` when not sharded (one replica owns everything).
    pub fence: Option<sharding::coordinator::Fence>,
    /// Managed kinds watched beyond the defaults.
    pub kinds: ExtraKinds,
    /// The reconcile queue and when each Application was last reconciled.
    pub progress: progress::Progress,
    /// Managed objects' metadata as the shard watches have it.
    pub inventory: Arc<Inventory>,
    /// Repositories as one watch of this replica has them (started with the first shard).
    repositories: std::sync::OnceLock<Repositories>,
    /// The resourceVersion of each Application's last status write by this replica: its watch
    /// event triggers no reconcile (nothing changed that the reconcile had not just seen).
    own_writes: Mutex<HashMap<ObjectRef<Application>, String>>,
    scopes: tokio::sync::Mutex<Option<(Instant, Arc<ClusterScopes>)>>,
    clients: Mutex<HashMap<(String, String), Client>>,
    /// The commit each (URL, credential identity, `spec.source.revision`) last resolved to.
    resolved: Mutex<HashMap<ResolvedKey, (Instant, String)>>,
}

impl Context {
    /// A context acting as `config`'s identity, reporting Events from `instance`.
    pub fn new(
        config: kube::Config,
        cache: GitCache,
        renderer: Renderer,
        instance: Option<String>,
        settings: Settings,
    ) -> Result<Context, kube::Error> {
        let client = settings.limiter.client(config.clone())?;
        let reporter = Reporter { controller: names::FIELD_MANAGER.to_string(), instance };
        Ok(Context {
            reporter,
            client: client.clone(),
            config,
            cache,
            renderer,
            settings,
            fence: None,
            kinds: ExtraKinds::new(client.clone()),
            progress: Default::default(),
            inventory: Default::default(),
            repositories: Default::default(),
            own_writes: Default::default(),
            scopes: Default::default(),
            clients: Default::default(),
            resolved: Default::default(),
        })
    }

    /// The Repositories watch, started on first use.
    fn repositories(&self) -> &Repositories {
        self.repositories.get_or_init(|| Repositories::start(self.client.clone()))
    }

    /// The Repository `ns/name` as the watch has it, when it has it.
    fn cached_repository(&self, ns: &str, name: &str) -> Option<Arc<Repository>> {
        self.repositories.get()?.store.get(&ObjectRef::new(name).within(ns))
    }

    /// The fence of the shard of Application `ns/name`, for its writes (`None` when not sharded).
    pub fn fence_of(&self, ns: &str, name: &str) -> Option<crate::client::Fenced> {
        let fence = self.fence.clone()?;
        let shard = shard_of(self, ns, name);
        Some(crate::client::Fenced::new(move || fence.until(shard)))
    }

    /// The writer of `client`'s requests for Application `ns/name`: each one fenced by its shard.
    pub fn writer(&self, client: &Client, ns: &str, name: &str) -> Writer {
        Writer::new(client.clone(), self.fence_of(ns, name))
    }

    /// A client acting as `system:serviceaccount:<ns>:<sa>` (kept per service account).
    fn client_for(&self, ns: &str, sa: &str) -> Result<Client, kube::Error> {
        let key = (ns.to_string(), sa.to_string());
        if let Some(c) = self.clients.lock().expect("clients lock").get(&key) {
            return Ok(c.clone());
        }
        let c = self.settings.limiter.client(render::values::impersonation(&self.config, ns, sa))?;
        self.clients.lock().expect("clients lock").insert(key, c.clone());
        Ok(c)
    }

    /// Run discovery now (after applying CustomResourceDefinitions).
    async fn rediscover(&self) -> Result<Arc<ClusterScopes>, kube::Error> {
        let s = Arc::new(ClusterScopes::discover(&self.client).await?);
        *self.scopes.lock().await = Some((Instant::now(), s.clone()));
        Ok(s)
    }

    /// The discovery snapshot; `refresh` runs discovery again unless it ran in the last
    /// two seconds (a CRD installed a moment ago).
    async fn scopes(&self, refresh: bool) -> Result<Arc<ClusterScopes>, kube::Error> {
        let mut guard = self.scopes.lock().await;
        match &*guard {
            Some((at, s)) if !refresh || at.elapsed() < Duration::from_secs(2) => Ok(s.clone()),
            _ => {
                let s = Arc::new(ClusterScopes::discover(&self.client).await?);
                *guard = Some((Instant::now(), s.clone()));
                Ok(s)
            }
        }
    }
}

/// Errors that make the controller retry with back-off (API failures of the controller's own
/// requests; everything about the Application is reported on it instead).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API request failed.
    #[error("API request failed: {0}")]
    Kube(kube::Error),
    /// The object has no namespace.
    #[error("the Application has no namespace")]
    NoNamespace,
    /// This replica stopped owning the Application's shard: the reconcile stops, writing
    /// nothing more.
    #[error("this replica no longer owns the Application's shard")]
    NotOwner,
    /// A rollout was about to act on a plan made from watch caches (a bug if it escapes
    /// [`reconcile`]: such plans are made again from a fresh list before anything is written).
    #[error("a rollout needs a plan made from a fresh list")]
    Stale,
}

impl From<kube::Error> for Error {
    fn from(e: kube::Error) -> Error {
        // A write the fence stopped: the shard moved, nothing to retry here.
        if crate::client::is_fence_error(&e) { Error::NotOwner } else { Error::Kube(e) }
    }
}

/// `Err(NotOwner)` unless this replica may write for `app` now (checked before every write
/// batch).
fn fenced(ctx: &Context, app: &Application) -> Result<(), Error> {
    if may_write(ctx, app) { Ok(()) } else { Err(Error::NotOwner) }
}

/// The shard of the Application `namespace/name`.
pub fn shard_of(ctx: &Context, namespace: &str, name: &str) -> u32 {
    sharding::ring::shard_of(&sharding::ring::application_key(namespace, name), ctx.settings.shards.max(1))
}

/// Whether this replica may write for `app` now (it owns the Application's shard).
fn may_write(ctx: &Context, app: &Application) -> bool {
    match &ctx.fence {
        None => true,
        Some(f) => f.owns(shard_of(ctx, &app.namespace().unwrap_or_default(), &app.name_any())).is_some(),
    }
}

/// Run the controller for every Application until `shutdown` completes.
pub async fn run(ctx: Arc<Context>, shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static) {
    run_shard(ctx, None, shutdown).await
}

/// Run the controller for the Applications of `shard` (watches label-selected to
/// `sync.kuvryn.io/shard`), or of every shard, until `shutdown` completes.
pub async fn run_shard(
    ctx: Arc<Context>,
    shard: Option<u32>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let client = ctx.client.clone();
    let apps: Api<Application> = Api::all(client.clone());
    let repo_events = ctx.repositories().events.subscribe();
    let config = match shard {
        Some(k) => watcher::Config::default().labels(&format!("{}={}", names::labels::SHARD, k)),
        None => watcher::Config::default(),
    };
    let selector = watched::selector(shard);
    let (store, writer) = reflector::store();
    let started = ctx.progress.shard_started(shard, store.clone());
    let noted = |r: ObjectRef<Application>, ctx: &Context| {
        ctx.progress.triggered(&r);
        r
    };
    let c = ctx.clone();
    let own = watcher(apps, config).default_backoff().reflect(writer).touched_objects().filter(move |a| {
        // Our own status write coming back: the store has it, no reconcile needed.
        let own = a.as_ref().is_ok_and(|a| {
            let r = ObjectRef::from_obj(a);
            let mut writes = c.own_writes.lock().expect("own writes lock");
            let ours = writes.get(&r).is_some_and(|rv| a.resource_version().as_ref() == Some(rv));
            if ours {
                writes.remove(&r);
            } else {
                c.progress.triggered(&r);
            }
            ours
        });
        std::future::ready(!own)
    });
    let controller = Controller::for_stream(own, store.clone()).with_config(
        controller::Config::default()
            .concurrency(ctx.settings.concurrency)
            // A burst of changes (a rollout's status updates) is one reconcile.
            .debounce(Duration::from_millis(200)),
    );
    let (c1, c2) = (ctx.clone(), ctx.clone());
    let extra = watched::extra_triggers(client, ctx.kinds.subscribe(), selector.clone(), ctx.inventory.clone(), shard)
        .map(move |r| noted(r, &c1));
    // A Repository change: its Applications in this shard (all of them if events were missed).
    let repo_triggers = futures_util::stream::unfold(repo_events, |mut rx| async move {
        use tokio::sync::broadcast::error::RecvError;
        match rx.recv().await {
            Ok(repo) => Some((Some(repo), rx)),
            Err(RecvError::Lagged(_)) => Some((None, rx)),
            Err(RecvError::Closed) => None,
        }
    })
    .flat_map(move |repo: Option<Arc<Repository>>| {
        let apps: Vec<_> = store
            .state()
            .into_iter()
            .filter(|a| {
                repo.as_ref().is_none_or(|r| a.namespace() == r.namespace() && a.spec.source.repository == r.name_any())
            })
            .map(|a| noted(ObjectRef::from_obj(&*a), &c2))
            .collect();
        futures_util::stream::iter(apps)
    });
    let inv = &ctx.inventory;
    controller
        .watches_stream(watched::touched::<Deployment>(&ctx.client, &selector, inv, shard), tracked(&ctx))
        .watches_stream(watched::touched::<StatefulSet>(&ctx.client, &selector, inv, shard), tracked(&ctx))
        .watches_stream(watched::touched::<DaemonSet>(&ctx.client, &selector, inv, shard), tracked(&ctx))
        .watches_stream(watched::touched::<ConfigMap>(&ctx.client, &selector, inv, shard), tracked(&ctx))
        .watches_stream(watched::touched::<Secret>(&ctx.client, &selector, inv, shard), tracked(&ctx))
        .watches_stream(watched::touched::<Service>(&ctx.client, &selector, inv, shard), tracked(&ctx))
        .reconcile_on(extra)
        .reconcile_on(repo_triggers)
        .graceful_shutdown_on(shutdown)
        .run(reconcile_tracked, error_policy, ctx.clone())
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "application reconcile");
            }
        })
        .await;
    ctx.inventory.forget_stopped();
    ctx.progress.shard_stopped(shard, started);
}

/// Maps a managed object's watch event to its Application, counting the trigger.
fn tracked<M: ResourceExt>(ctx: &Arc<Context>) -> impl Fn(M) -> Option<ObjectRef<Application>> + Send + Sync + 'static {
    let ctx = ctx.clone();
    move |m: M| {
        let r = watched::owner_app(&m)?;
        ctx.progress.triggered(&r);
        Some(r)
    }
}

/// [`reconcile`], recorded for the queue and staleness metrics.
async fn reconcile_tracked(app: Arc<Application>, ctx: Arc<Context>) -> Result<Action, Error> {
    let r = ObjectRef::from_obj(&*app);
    ctx.progress.started(&r);
    let started = Instant::now();
    let result = reconcile(app, ctx.clone()).await;
    ctx.progress.finished(&r);
    metrics::histogram!("ksync_reconcile_duration_seconds").record(started.elapsed().as_secs_f64());
    let label = match &result {
        Ok(_) => "ok",
        Err(Error::NotOwner) => "not_owner",
        Err(_) => "error",
    };
    metrics::counter!("ksync_reconciles_total", "result" => label).increment(1);
    result
}

fn error_policy(app: Arc<Application>, error: &Error, _ctx: Arc<Context>) -> Action {
    if matches!(error, Error::NotOwner) {
        return Action::requeue(NOT_OWNER_RETRY);
    }
    tracing::warn!(application = %app.name_any(), namespace = ?app.namespace(), error = %error, "reconcile failed");
    Action::requeue(Duration::from_secs(5))
}

/// How a failed step is reported.
#[derive(Clone, Debug, PartialEq)]
struct Failure {
    reason: &'static str,
    message: String,
    retryable: bool,
}

impl Failure {
    fn new(reason: &'static str, message: impl Into<String>, retryable: bool) -> Failure {
        Failure { reason, message: message.into(), retryable }
    }
}

/// What a resolved `spec.source.revision` is remembered by: (URL, credential identity of the
/// Repository's Secret, revision). With the identity, one tenant never learns the commit another
/// tenant's credentials resolved.
type ResolvedKey = (String, String, String);

/// The resolved source of an Application.
struct Source {
    repository: String,
    url: String,
    /// The Repository's credentials: the cache serves only what they fetched.
    credentials: crate::source::Credentials,
    reference: Option<String>,
    commit: String,
}

/// What planning produced, for the rollout.
struct Planned {
    hash: String,
    desired: Vec<Value>,
    plan: plan::Plan,
    stored: rev::Plan,
    scopes: Arc<ClusterScopes>,
    sa: Client,
    /// Live objects of the desired ones, by identity.
    live: std::collections::BTreeMap<String, Value>,
    /// Objects labelled as managed (metadata only).
    managed: Vec<Value>,
    adopt: bool,
    /// Secret values (from `valuesFrom` and desired Secrets): never in a message.
    secrets: Vec<String>,
    /// Made from lists as the service account, not from watch caches: what a rollout writes and
    /// prunes may be decided from it.
    fresh: bool,
}

/// Reconcile one Application (see the module documentation).
pub async fn reconcile(app: Arc<Application>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = app.namespace().ok_or(Error::NoNamespace)?;
    let name = app.name_any();
    let old = app.status.clone().unwrap_or_default();
    let mut status = old.clone();
    status.observed_generation = app.metadata.generation;
    if let Some(at) = app.annotations().get(names::annotations::RECONCILE_REQUESTED_AT) {
        status.last_handled_reconcile_at = Some(at.clone());
    }
    let generation = app.metadata.generation;
    let now = Timestamp::now();

    // Fencing: a requeue may fire after the shard moved to another replica. If it did, this
    // shard's controller is stopped soon and the requeue with it; if the Lease is only late
    // to renew, the Application is looked at again in a moment, never dropped.
    if !may_write(&ctx, &app) {
        return Ok(Action::requeue(NOT_OWNER_RETRY));
    }

    if app.metadata.deletion_timestamp.is_some() {
        return finalize(&app, &ctx, &ns, &name, &old, status).await;
    }
    if keep_finalizer(&app, &ctx, &ns).await? {
        // The change triggers a reconcile of the updated Application.
        return Ok(Action::await_change());
    }

    if app.spec.suspend {
        conditions::mark_suspended(
            &mut status.conditions,
            "reconciliation is suspended (spec.suspend): nothing is applied or pruned",
            generation,
            now,
        );
        if !write_status(&ctx, &app, &old, &status).await? {
            return Ok(Action::requeue(STALE_RETRY));
        }
        return Ok(Action::await_change());
    }

    let action = plan_app(&app, &ctx, &ns, &name, &old, &mut status, now).await?;
    if !write_status(&ctx, &app, &old, &status).await? {
        return Ok(Action::requeue(STALE_RETRY));
    }
    Ok(action)
}

/// Report `failure` on the Application: `Ready=False` (and `Stalled` when `stalled`), a Warning
/// Event when the message changed, a log line.
#[allow(clippy::too_many_arguments)]
async fn report_failure(
    ctx: &Context,
    app: &Application,
    old: &ApplicationStatus,
    status: &mut ApplicationStatus,
    failure: &Failure,
    stalled: bool,
    now: Timestamp,
) {
    let generation = app.metadata.generation;
    let previous = conditions::get(&old.conditions, names::conditions::READY).map(|c| c.message.clone());
    if stalled {
        conditions::mark_stalled(&mut status.conditions, failure.reason, &failure.message, generation, now);
    } else {
        conditions::mark_failed(&mut status.conditions, failure.reason, &failure.message, generation, now);
    }
    if previous.as_deref() != Some(failure.message.as_str()) {
        let ns = app.namespace().unwrap_or_default();
        let related = status.desired_revision.as_deref().map(|r| revision_ref(&ns, r));
        event(ctx, app, related.as_ref(), EventType::Warning, failure.reason, &failure.message).await;
    }
    tracing::info!(application = %app.name_any(), namespace = ?app.namespace(), reason = failure.reason, message = %failure.message, "application not ready");
}

/// Steps 2 to 8, and the rollout.
async fn plan_app(
    app: &Application,
    ctx: &Context,
    ns: &str,
    name: &str,
    old: &ApplicationStatus,
    status: &mut ApplicationStatus,
    now: Timestamp,
) -> Result<Action, Error> {
    let retry_soon = Action::requeue(with_jitter(Duration::from_secs(30), name));
    let source = match resolve_source(app, ctx, ns).await? {
        Ok(s) => s,
        Err(failure) => {
            report_failure(ctx, app, old, status, &failure, !failure.retryable, now).await;
            return Ok(if failure.retryable { retry_soon } else { Action::requeue(ctx.settings.resync) });
        }
    };
    let spec = &app.spec;
    let identity = revision::Identity {
        application: name,
        commit: &source.commit,
        path: &spec.source.path,
        render: &spec.source.render,
        service_account: &spec.service_account_name,
    };
    let rev_name = revision::name(&identity);
    fenced(ctx, app)?;
    let rev = ensure_revision(ctx, app, ns, &rev_name, &source).await?;
    if let Some(previous) = status.desired_revision.clone().filter(|p| *p != rev_name) {
        supersede(ctx, app, ns, &previous, &rev_name).await?;
    }
    if status.desired_revision.as_deref() != Some(rev_name.as_str()) {
        status.sync = Some(SyncStatus {
            status: SyncState::Unknown,
            revision: Some(rev_name.clone()),
            commit: Some(source.commit.clone()),
            drifted: Vec::new(),
        });
    }
    status.desired_revision = Some(rev_name.clone());
    let writer = ctx.writer(&ctx.client, ns, name);
    let old_rs = rev.status.clone().unwrap_or_default();
    let mut rs = old_rs.clone();
    rs.observed_generation = rev.metadata.generation;
    // A drift check (the desired Revision is deployed and unchanged) reads the managed-object
    // inventory from the watch caches; a rollout lists it as the service account.
    let drift_check = old.desired_revision.as_deref() == Some(rev_name.as_str())
        && rev.status.as_ref().is_some_and(|s| s.deployed_desired_state_hash.is_some());
    let mut result = desired_and_plan(app, ctx, ns, name, &source, drift_check).await?;
    // A drift check reads from the watch caches; when its plan would start a rollout (self-heal,
    // a changed desired state), the plan is made again from what the service account lists now.
    if let Ok(p) = &result
        && !p.fresh
        && matches!(attempt::step_of(app, old, &rs, p, now), rollout::Step::Start { .. })
    {
        result = desired_and_plan(app, ctx, ns, name, &source, false).await?;
    }
    let action = match result {
        Err(failure) => {
            // A deployed Revision stays what it is: the live state is untouched.
            if rs.deployed_desired_state_hash.is_none() {
                rs.phase = RevisionPhase::Failed;
            }
            rs.failure = Some(rev::Failure {
                reason: failure.reason.to_string(),
                message: bounded(&failure.message, 4096),
                retryable: failure.retryable,
            });
            report_failure(ctx, app, old, status, &failure, !failure.retryable, now).await;
            if failure.retryable { retry_soon } else { Action::requeue(with_jitter(ctx.settings.resync, name)) }
        }
        Ok(planned) => {
            if rev.spec.desired_state_hash.as_deref() != Some(planned.hash.as_str()) {
                writer
                    .patch::<Revision, _>(
                        Some(ns),
                        &rev_name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": {"desiredStateHash": planned.hash}})),
                    )
                    .await?;
            }
            rs.plan = Some(planned.stored.clone());
            let mut sync = status.sync.clone().unwrap_or_default();
            sync.revision = Some(rev_name.clone());
            sync.commit = Some(source.commit.clone());
            status.sync = Some(sync);
            let secrets = planned.secrets.clone();
            let mut run = Rollout { ctx, app, ns, name, rev: &rev_name, old, status, rs: &mut rs, now, secrets };
            run.run(planned).await?
        }
    };
    if rs != old_rs {
        fenced(ctx, app)?;
        writer
            .patch_status::<Revision, _>(
                Some(ns),
                &rev_name,
                &PatchParams::apply(names::STATUS_FIELD_MANAGER).force(),
                &Patch::Apply(json!({"apiVersion": names::API_VERSION, "kind": "Revision", "status": rs})),
            )
            .await?;
    }
    // History changes only with a new desired Revision or a new limit: a drift check lists no
    // Revisions.
    if old.desired_revision.as_deref() != Some(rev_name.as_str()) || old.observed_generation != app.metadata.generation
    {
        retain_history(ctx, app, ns, &rev_name, spec.history.limit).await?;
    }
    Ok(action)
}

use crate::plan::revision::bounded;

/// `spec.source.revision` as a reference: hex of 7 to 40 digits is a commit, anything else a
/// branch (then a tag when no branch has that name).
fn references_of(revision: &str) -> Vec<Reference> {
    let r = revision.trim();
    if (7..=40).contains(&r.len()) && r.bytes().all(|b| b.is_ascii_hexdigit()) {
        vec![Reference::Commit(r.to_ascii_lowercase())]
    } else if let Some(tag) = r.strip_prefix("refs/tags/") {
        vec![Reference::Tag(tag.to_string())]
    } else {
        let branch = r.strip_prefix("refs/heads/").unwrap_or(r);
        vec![Reference::Branch(branch.to_string()), Reference::Tag(branch.to_string())]
    }
}

/// Step 2. The outer error is an API failure to retry; the inner one is reported.
async fn resolve_source(app: &Application, ctx: &Context, ns: &str) -> Result<Result<Source, Failure>, Error> {
    let fail =
        |message: String, retryable: bool| Ok(Err(Failure::new(names::reasons::SOURCE_FAILURE, message, retryable)));
    let repos: Api<Repository> = Api::namespaced(ctx.client.clone(), ns);
    let repo_name = &app.spec.source.repository;
    // From the watch when it has it (a Repository change triggers its Applications after the
    // store has it); a miss asks the API server (created a moment ago, or no watch running).
    let repo = match ctx.cached_repository(ns, repo_name) {
        Some(r) => Some(r),
        None => repos.get_opt(repo_name).await?.map(Arc::new),
    };
    let Some(repo) = repo else {
        return fail(format!("Repository {repo_name:?} does not exist in namespace {ns}"), true);
    };
    let credentials = match super::repository::credentials(&ctx.client, ns, repo.spec.secret_ref.as_ref()).await? {
        Ok(c) => c,
        Err(message) => return fail(format!("Repository {repo_name}: {message}"), true),
    };
    let url = repo.spec.url.clone();
    let timeout = crate::api::duration::parse(&repo.spec.timeout).unwrap_or(Duration::from_secs(60));
    let (reference, commit) = match &app.spec.source.revision {
        None => match repo.status.as_ref().and_then(|s| s.revision.as_ref()) {
            Some(r) => (Some(r.reference.clone()), r.commit.clone()),
            None => {
                return fail(
                    format!("Repository {repo_name} has not resolved {} yet", repo.spec.reference.display()),
                    true,
                );
            }
        },
        Some(revision) => {
            let interval = crate::api::duration::parse(&repo.spec.interval).unwrap_or(Duration::from_secs(60));
            let key = (url.clone(), ctx.cache.credential_id(&credentials), revision.clone());
            let recent = ctx.resolved.lock().expect("resolved lock").get(&key).cloned();
            match recent {
                Some((at, commit)) if at.elapsed() < interval.mul_f64(0.9) => (Some(revision.clone()), commit),
                _ => {
                    let mut last = None;
                    let mut found = None;
                    for reference in references_of(revision) {
                        match ctx.cache.resolve(&url, &reference, &credentials, timeout).await {
                            Ok(r) => {
                                found = Some(r.commit);
                                break;
                            }
                            Err(e) => last = Some(e),
                        }
                    }
                    match (found, last) {
                        (Some(commit), _) => {
                            ctx.resolved.lock().expect("resolved lock").insert(key, (Instant::now(), commit.clone()));
                            (Some(revision.clone()), commit)
                        }
                        (None, Some(e)) => {
                            let message = credentials.redact(&format!("spec.source.revision {revision:?}: {e}"));
                            return fail(message, e.retryable());
                        }
                        (None, None) => return fail(format!("spec.source.revision {revision:?} is empty"), false),
                    }
                }
            }
        }
    };
    // Present in this replica's cache (no network when it already is).
    if let Err(e) = ctx.cache.resolve(&url, &Reference::Commit(commit.clone()), &credentials, timeout).await {
        return fail(credentials.redact(&format!("fetching commit {commit}: {e}")), e.retryable());
    }
    Ok(Ok(Source { repository: repo_name.clone(), url, credentials, reference, commit }))
}

/// Step 3: the Revision of this identity, created when missing.
async fn ensure_revision(
    ctx: &Context,
    app: &Application,
    ns: &str,
    rev_name: &str,
    source: &Source,
) -> Result<Revision, Error> {
    let api: Api<Revision> = Api::namespaced(ctx.client.clone(), ns);
    if let Some(r) = api.get_opt(rev_name).await? {
        return Ok(r);
    }
    let name = app.name_any();
    let rev = Revision {
        metadata: ObjectMeta {
            name: Some(rev_name.to_string()),
            namespace: Some(ns.to_string()),
            labels: Some(
                [
                    (names::labels::APPLICATION.to_string(), name.clone()),
                    (names::labels::MANAGED_BY.to_string(), names::labels::MANAGED_BY_VALUE.to_string()),
                ]
                .into(),
            ),
            annotations: Some([(names::annotations::CREATED_AT.to_string(), Timestamp::now().to_string())].into()),
            owner_references: Some(vec![OwnerReference {
                api_version: names::API_VERSION.to_string(),
                kind: "Application".to_string(),
                name: name.clone(),
                uid: app.uid().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            ..Default::default()
        },
        spec: RevisionSpec {
            application: name,
            source: RevisionSource {
                repository: source.repository.clone(),
                url: source.url.clone(),
                reference: source.reference.clone(),
                commit: source.commit.clone(),
                path: app.spec.source.path.clone(),
            },
            render: app.spec.source.render.clone(),
            service_account_name: app.spec.service_account_name.clone(),
            desired_state_hash: None,
        },
        status: None,
    };
    match ctx.writer(&ctx.client, ns, &rev.spec.application).create(Some(ns), &PostParams::default(), &rev).await {
        Ok(created) => {
            let short = &source.commit[..source.commit.len().min(12)];
            let subject =
                ctx.cache.commit_subject(&source.url, &source.credentials, &source.commit).await.unwrap_or_default();
            let note = if subject.is_empty() {
                format!("Revision {rev_name} for commit {short}")
            } else {
                format!("Revision {rev_name} for commit {short}: {subject}")
            };
            event(ctx, app, Some(&revision_ref(ns, rev_name)), EventType::Normal, names::events::NEW_REVISION, &note)
                .await;
            Ok(created)
        }
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(api.get(rev_name).await?),
        Err(e) => Err(e.into()),
    }
}

/// Every string a message must not show: desired Secrets' values.
fn secret_strings(objects: &[Value]) -> Vec<String> {
    use base64::Engine;
    let mut out = Vec::new();
    for o in objects.iter().filter(|o| o["kind"] == "Secret" && o["apiVersion"] == "v1") {
        if let Some(data) = o["data"].as_object() {
            for v in data.values().filter_map(Value::as_str) {
                if let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(v) {
                    out.push(String::from_utf8_lossy(&bytes).to_string());
                }
                out.push(v.to_string());
            }
        }
        if let Some(data) = o["stringData"].as_object() {
            out.extend(data.values().filter_map(Value::as_str).map(str::to_string));
        }
    }
    out
}

fn redact(message: &str, secrets: &[String]) -> String {
    let mut secrets: Vec<&String> = secrets.iter().filter(|s| s.len() >= 4).collect();
    // Longest first, so a value containing another is removed whole.
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    secrets.iter().fold(message.to_string(), |m, s| m.replace(s.as_str(), "<redacted>"))
}

/// Steps 4 to 7 up to the plan, or what failed.
async fn desired_and_plan(
    app: &Application,
    ctx: &Context,
    ns: &str,
    name: &str,
    source: &Source,
    from_cache: bool,
) -> Result<Result<Planned, Failure>, Error> {
    let spec = &app.spec;
    let checkout = match ctx.cache.checkout(&source.url, &source.credentials, &source.commit, &spec.source.path).await {
        Ok(c) => c,
        Err(e) => return Ok(Err(Failure::new(names::reasons::SOURCE_FAILURE, e.to_string(), e.retryable()))),
    };
    let sa_client = ctx.client_for(ns, &spec.service_account_name)?;
    let render_failure = |e: render::Error| match e {
        render::Error::Failed { message, retryable } => {
            Failure::new(names::reasons::RENDER_FAILURE, message, retryable)
        }
        render::Error::Invalid(m) => Failure::new(names::reasons::VALIDATION_FAILURE, m, false),
        render::Error::Internal(m) => Failure::new(names::reasons::RENDER_FAILURE, m, true),
    };
    let (values_from, mut secrets) = match (&spec.source.render.type_, &spec.source.render.helm) {
        (RenderType::Helm, Some(h)) if !h.values_from.is_empty() => {
            match render::values::read(&sa_client, ns, &h.values_from).await {
                Ok(v) => v,
                Err(e) => return Ok(Err(render_failure(e))),
            }
        }
        _ => (Vec::new(), Vec::new()),
    };
    let request = render::Request {
        dir: checkout.path(),
        tree: Some(checkout.tree.to_string()),
        render: &spec.source.render,
        application: name,
        namespace: &spec.destination.namespace,
        values_from,
        secrets: secrets.clone(),
    };
    let objects = match ctx.renderer.render(&request).await {
        Ok(o) => o,
        Err(e) => return Ok(Err(render_failure(e))),
    };
    secrets.extend(secret_strings(&objects));
    let fail = |reason: &'static str, message: String, retryable: bool| {
        Ok(Err(Failure::new(reason, redact(&message, &secrets), retryable)))
    };
    let mut scopes = ctx.scopes(false).await?;
    let mut validated = validate::validate(&objects, &spec.destination, &*scopes, ctx.settings.validate);
    if validated.is_err() {
        // A kind served since the last discovery (a CRD installed a moment ago).
        scopes = ctx.scopes(true).await?;
        validated = validate::validate(&objects, &spec.destination, &*scopes, ctx.settings.validate);
    }
    let mut desired = match validated {
        Ok(v) => v,
        Err(problems) => {
            let n = problems.len();
            let message =
                format!("{n} problem{} in the desired state: {}", if n == 1 { "" } else { "s" }, problems.join("; "));
            return fail(names::reasons::VALIDATION_FAILURE, message, false);
        }
    };
    let shard = if ctx.fence.is_some() || ctx.settings.shards > 1 {
        shard_of(ctx, ns, name).to_string()
    } else {
        DEFAULT_SHARD.to_string()
    };
    for o in &mut desired {
        inventory::stamp(o, ns, name, &shard);
    }
    let hash = revision::desired_state_hash(&desired);
    let mut namespaces = BTreeSet::from([spec.destination.namespace.clone()]);
    namespaces.extend(desired.iter().filter_map(|o| o["metadata"]["namespace"].as_str()).map(str::to_string));
    let managed_kinds = app.status.as_ref().map(|s| s.managed_kinds.clone()).unwrap_or_default();
    let adopt = spec.sync.conflict_policy == crate::api::application::ConflictPolicy::Adopt;
    for k in live::kinds_to_search(&managed_kinds, &desired) {
        if let Some(resource) = scopes.resource(&k.group, &k.version, &k.kind) {
            // Changes of a kind the controller may watch trigger drift checks at once.
            ctx.kinds.note(resource).await;
        }
    }
    let selector = inventory::selector(ns, name);
    let shard_key = ctx.fence.is_some().then(|| shard_of(ctx, ns, name));
    let cached = |r: &ApiResource| -> Option<Vec<Value>> {
        if !from_cache {
            return None;
        }
        let found = ctx.inventory.lookup(shard_key, &r.group, &r.kind, &selector)?;
        Some(found.into_iter().map(|m| json!({"apiVersion": r.api_version, "kind": r.kind, "metadata": m})).collect())
    };
    let read = live::read(&sa_client, &scopes, &desired, &managed_kinds, &selector, &namespaces, adopt, &cached).await;
    let live = match read {
        Ok(l) => l,
        Err(live::Error::Forbidden(m)) => {
            return fail(names::reasons::APPLY_FAILURE, format!("the Application's service account: {m}"), true);
        }
        Err(live::Error::Invalid(problems)) => {
            let n = problems.len();
            let message = format!(
                "{n} object{} refused by the API server: {}",
                if n == 1 { " was" } else { "s were" },
                problems.join("; ")
            );
            return fail(names::reasons::VALIDATION_FAILURE, message, false);
        }
        Err(live::Error::Api(e)) => return Err(e.into()),
    };
    let inputs = plan::Inputs {
        live: live.live,
        dry_run: live.dry_run,
        managed: live.managed,
        prune: spec.sync.prune,
        conflicts: live.conflicts,
    };
    let plan = plan::build(&desired, &inputs);
    let stored = revision::stored(&plan, adopt);
    Ok(Ok(Planned {
        hash,
        desired,
        plan,
        stored,
        scopes,
        sa: sa_client,
        live: inputs.live,
        managed: inputs.managed,
        adopt,
        secrets,
        fresh: !from_cache,
    }))
}

/// Delete Revisions beyond the history limit, oldest first (never `current`, never held ones).
async fn retain_history(
    ctx: &Context,
    application: &Application,
    ns: &str,
    current: &str,
    limit: i32,
) -> Result<(), Error> {
    let app = &application.name_any();
    let api: Api<Revision> = Api::namespaced(ctx.client.clone(), ns);
    let writer = ctx.writer(&ctx.client, ns, app);
    let list = api.list(&ListParams::default().labels(&format!("{}={app}", names::labels::APPLICATION))).await?;
    let kept: Vec<inventory::Kept> = list
        .items
        .iter()
        .filter(|r| r.spec.application == *app)
        .map(|r| inventory::Kept {
            name: r.name_any(),
            created: r
                .annotations()
                .get(names::annotations::CREATED_AT)
                .and_then(|a| a.parse().ok())
                .or_else(|| r.metadata.creation_timestamp.as_ref().map(|t| t.0))
                .unwrap_or_default(),
            held: r.status.as_ref().is_some_and(|s| conditions::is_true(&s.conditions, names::conditions::ROLLED_BACK)),
        })
        .collect();
    for name in inventory::expired(&kept, current, usize::try_from(limit).unwrap_or(1)) {
        match writer.delete::<Revision>(Some(ns), &name, &DeleteParams::default()).await {
            Ok(_) => tracing::info!(revision = %name, namespace = %ns, "history limit: deleted Revision"),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// A reference to the Revision `name` in `ns` (no uid or resourceVersion, so it is stable).
fn revision_ref(ns: &str, name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some(names::API_VERSION.to_string()),
        kind: Some("Revision".to_string()),
        name: Some(name.to_string()),
        namespace: Some(ns.to_string()),
        ..Default::default()
    }
}

/// Publish an Event about `app`. `related` (the Revision concerned) is part of the recorder's
/// aggregation key, so Events about different Revisions are never merged into one series.
async fn event(
    ctx: &Context,
    app: &Application,
    related: Option<&ObjectReference>,
    type_: EventType,
    reason: &str,
    note: &str,
) {
    let ev = Event {
        type_,
        reason: reason.to_string(),
        note: Some(note.chars().take(1024).collect()),
        action: "Plan".to_string(),
        secondary: related.cloned(),
    };
    // A fresh Recorder per Event: kube's Recorder merges Events of the same reason into one
    // series keeping the first note, and every Event published here says something new (a new
    // commit, a changed failure message).
    let recorder = Recorder::new(ctx.client.clone(), ctx.reporter.clone());
    if let Err(e) = recorder.publish(&ev, &app.object_ref(&())).await {
        tracing::debug!(error = %e, "publishing an Event");
    }
}

/// Write `new` unless it equals `old`. `Ok(false)`: refused, computed from a stale copy.
async fn write_status(
    ctx: &Context,
    app: &Application,
    old: &ApplicationStatus,
    new: &ApplicationStatus,
) -> Result<bool, Error> {
    if old == new {
        return Ok(true);
    }
    fenced(ctx, app)?;
    let ns = app.namespace().unwrap_or_default();
    let writer = ctx.writer(&ctx.client, &ns, &app.name_any());
    // The resourceVersion makes the write conditional: status computed from a stale copy of
    // the Application is refused (409) instead of overwriting a newer one, and the reconcile runs
    // again in a moment on the newer copy. (Not left to the newer version's watch event: when
    // that version is our own previous status write, its event triggers nothing.)
    let patch = json!({"apiVersion": names::API_VERSION, "kind": "Application",
        "metadata": {"name": app.name_any(), "resourceVersion": app.resource_version()}, "status": new});
    match writer
        .patch_status::<Application, _>(
            Some(&ns),
            &app.name_any(),
            &PatchParams::apply(names::STATUS_FIELD_MANAGER).force(),
            &Patch::Apply(patch),
        )
        .await
    {
        Ok(written) => {
            if let Some(rv) = written.resource_version() {
                ctx.own_writes.lock().expect("own writes lock").insert(ObjectRef::from_obj(app), rv);
            }
            Ok(true)
        }
        Err(kube::Error::Api(s)) if s.code == 409 => {
            tracing::debug!(application = %app.name_any(), "status computed from a stale copy; reconciling the newer one");
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

/// A Revision no longer desired whose attempt is still running: the attempt ends, `Failed` with
/// reason `Superseded`, so no Revision stays `Progressing` forever.
async fn supersede(ctx: &Context, app: &Application, ns: &str, previous: &str, by: &str) -> Result<(), Error> {
    let api: Api<Revision> = Api::namespaced(ctx.client.clone(), ns);
    let Some(rev) = api.get_opt(previous).await? else { return Ok(()) };
    let mut rs = rev.status.clone().unwrap_or_default();
    let Some(last) = rs.attempts.last_mut().filter(|a| a.result == rev::AttemptResult::Running) else {
        return Ok(());
    };
    last.result = rev::AttemptResult::Failed;
    last.finished_at = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now()));
    last.reason = Some(names::reasons::SUPERSEDED.to_string());
    rs.phase = RevisionPhase::Failed;
    rs.failure = Some(rev::Failure {
        reason: names::reasons::SUPERSEDED.to_string(),
        message: format!("superseded by Revision {by} before its rollout completed"),
        retryable: false,
    });
    ctx.writer(&ctx.client, ns, &app.name_any())
        .patch_status::<Revision, _>(
            Some(ns),
            previous,
            &PatchParams::apply(names::STATUS_FIELD_MANAGER).force(),
            &Patch::Apply(json!({"apiVersion": names::API_VERSION, "kind": "Revision", "status": rs})),
        )
        .await?;
    Ok(())
}

fn has_finalizer(app: &Application) -> bool {
    app.finalizers().iter().any(|f| f == names::finalizers::APPLICATION)
}

async fn set_finalizers(ctx: &Context, app: &Application, ns: &str, finalizers: Vec<String>) -> Result<(), Error> {
    fenced(ctx, app)?;
    // The resourceVersion makes this a compare-and-swap: a concurrent change is retried.
    let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": app.resource_version()}});
    ctx.writer(&ctx.client, ns, &app.name_any())
        .patch::<Application, _>(Some(ns), &app.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// `deletionPolicy: DeleteManagedResources` holds the Application with a finalizer until its
/// resources are deleted; `Orphan` needs none. Returns whether it changed the Application.
async fn keep_finalizer(app: &Application, ctx: &Context, ns: &str) -> Result<bool, Error> {
    let wants = app.spec.deletion_policy == DeletionPolicy::DeleteManagedResources;
    let has = has_finalizer(app);
    if wants && !has {
        let mut f = app.finalizers().to_vec();
        f.push(names::finalizers::APPLICATION.to_string());
        set_finalizers(ctx, app, ns, f).await?;
        return Ok(true);
    } else if !wants && has {
        let f = app.finalizers().iter().filter(|f| *f != names::finalizers::APPLICATION).cloned().collect();
        set_finalizers(ctx, app, ns, f).await?;
        return Ok(true);
    }
    Ok(false)
}

/// The Application is being deleted: with `DeleteManagedResources`, delete every managed
/// object (high-risk kinds included, opted-out ones kept) as the service account, in reverse
/// apply order, then let the Application go. A failure is reported and retried; it never
/// removes the finalizer early.
async fn finalize(
    app: &Application,
    ctx: &Context,
    ns: &str,
    name: &str,
    old: &ApplicationStatus,
    mut status: ApplicationStatus,
) -> Result<Action, Error> {
    if !has_finalizer(app) {
        return Ok(Action::await_change());
    }
    if app.spec.deletion_policy == DeletionPolicy::DeleteManagedResources {
        let now = Timestamp::now();
        match delete_managed(app, ctx, ns, name).await {
            Ok(()) => {}
            Err(message) => {
                let failure = Failure::new(
                    names::reasons::PRUNE_FAILURE,
                    format!("deleting the managed resources (deletionPolicy DeleteManagedResources): {message}"),
                    true,
                );
                report_failure(ctx, app, old, &mut status, &failure, false, now).await;
                if !write_status(ctx, app, old, &status).await? {
                    return Ok(Action::requeue(STALE_RETRY));
                }
                return Ok(Action::requeue(Duration::from_secs(10)));
            }
        }
    }
    let f = app.finalizers().iter().filter(|f| *f != names::finalizers::APPLICATION).cloned().collect();
    set_finalizers(ctx, app, ns, f).await?;
    Ok(Action::await_change())
}

async fn delete_managed(app: &Application, ctx: &Context, ns: &str, name: &str) -> Result<(), String> {
    let sa = ctx.client_for(ns, &app.spec.service_account_name).map_err(|e| e.to_string())?;
    let scopes = ctx.scopes(false).await.map_err(|e| e.to_string())?;
    let kinds = app.status.as_ref().map(|s| s.managed_kinds.clone()).unwrap_or_default();
    let namespaces = BTreeSet::from([app.spec.destination.namespace.clone()]);
    let mut found = live::Live::default();
    // As the service account, never from a cache: this decides what is deleted.
    live::read_managed(&sa, &scopes, &kinds, &inventory::selector(ns, name), &namespaces, &live::uncached, &mut found)
        .await
        .map_err(|e| e.to_string())?;
    let mut targets: Vec<Value> = found
        .managed
        .into_iter()
        .filter(|o| o["metadata"]["annotations"][names::annotations::PRUNE] != names::annotations::PRUNE_DISABLED)
        .collect();
    let rank = |o: &Value| {
        let av = o["apiVersion"].as_str().unwrap_or_default();
        let namespaced = o["metadata"]["namespace"].as_str().is_some_and(|n| !n.is_empty());
        (
            plan::order::rank(validate::group_of(av), o["kind"].as_str().unwrap_or_default(), namespaced),
            validate::identity(o),
        )
    };
    targets.sort_by_key(|o| std::cmp::Reverse(rank(o)));
    let entries: Vec<plan::Entry> = targets
        .iter()
        .map(|o| {
            let av = o["apiVersion"].as_str().unwrap_or_default();
            plan::Entry {
                group: validate::group_of(av).to_string(),
                kind: o["kind"].as_str().unwrap_or_default().to_string(),
                version: av.rsplit('/').next().unwrap_or_default().to_string(),
                namespace: o["metadata"]["namespace"].as_str().unwrap_or_default().to_string(),
                name: o["metadata"]["name"].as_str().unwrap_or_default().to_string(),
                action: plan::Action::Delete,
                changed: Vec::new(),
                more_changed: 0,
                warnings: Vec::new(),
                conflicts: Vec::new(),
            }
        })
        .collect();
    let doomed = plan::Plan { entries, digest: String::new() };
    if !may_write(ctx, app) {
        return Err("this replica no longer owns the Application's shard".into());
    }
    let listed: std::collections::BTreeMap<String, Value> =
        targets.iter().map(|o| (validate::identity(o), o.clone())).collect();
    let mut done = crate::apply::Applied::default();
    let prunable = |o: &Value| inventory::prunable_by(o, ns, name);
    let kept = crate::apply::prune(&ctx.writer(&sa, ns, name), &scopes, &doomed, &listed, &prunable, &mut done)
        .await
        .map_err(|e| e.to_string())?;
    if !kept.is_empty() {
        // Retried: the finalizer stays until every managed object is gone or no longer ours.
        return Err(format!("not deleted yet: {}", kept.join("; ")));
    }
    if !done.deleted.is_empty() {
        tracing::info!(application = %name, namespace = %ns, deleted = done.deleted.len(), "deleted managed resources");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_revisions_are_commits_branches_or_tags() {
        assert_eq!(references_of("0123abc"), vec![Reference::Commit("0123abc".into())]);
        assert_eq!(references_of("ABCDEF0123"), vec![Reference::Commit("abcdef0123".into())]);
        assert_eq!(references_of("main"), vec![Reference::Branch("main".into()), Reference::Tag("main".into())]);
        assert_eq!(references_of("refs/tags/v1.2.0"), vec![Reference::Tag("v1.2.0".into())]);
        assert_eq!(
            references_of("refs/heads/release"),
            vec![Reference::Branch("release".into()), Reference::Tag("release".into())]
        );
        // Too short to be a commit.
        assert_eq!(references_of("cafe"), vec![Reference::Branch("cafe".into()), Reference::Tag("cafe".into())]);
    }

    #[test]
    fn secret_values_are_redacted_from_messages() {
        let objs = vec![
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                   "data": {"password": "aHVudGVyMg=="}, "stringData": {"token": "tok-123456"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"x": "visible"}}),
        ];
        let secrets = secret_strings(&objs);
        let m = redact("password hunter2 and tok-123456 (aHVudGVyMg==) visible", &secrets);
        assert_eq!(m, "password <redacted> and <redacted> (<redacted>) visible");
    }
}
