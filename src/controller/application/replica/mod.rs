//! What every reconcile of this replica shares: the clients, caches and settings, the shard
//! fence, and the Repositories watch. Writes for an Application go through [`Context::writer`],
//! fenced by its shard.

pub(crate) mod dependency_watch;
pub(crate) mod echoes;
pub(crate) mod failures;
pub(crate) mod healthchecks;
pub mod progress;
pub(crate) mod redeploys;
pub(crate) mod resolved;
pub(crate) mod revision_cache;
pub(crate) mod unchanged;
pub(crate) mod written;

use std::collections::HashMap;
use std::time::Duration;

use futures_util::StreamExt;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher::{self, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use std::sync::Arc;

use super::error::Error;
use crate::api::application::Application;
use crate::api::conditions;
use crate::api::names;
use crate::api::repository::Repository;
use crate::apply::Writer;
use crate::plan::validate;
use crate::render::Renderer;
use crate::source::GitCache;
use crate::watch::discovery::ClusterScopes;
use crate::watch::managed::{ExtraKinds, Inventory};

pub use crate::api::names::labels::DEFAULT_SHARD;

/// Tunables.
#[derive(Clone, Debug)]
pub struct Settings {
    /// How often a planned Application is reconciled again without a trigger.
    pub resync: Duration,
    /// Applications reconciled at once by the replica, across its shards.
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
pub(super) struct Repositories {
    pub(super) store: reflector::Store<Repository>,
    pub(super) events: tokio::sync::broadcast::Sender<Arc<Repository>>,
    pub(super) task: tokio::task::JoinHandle<()>,
}

impl Repositories {
    pub(super) fn start(client: Client) -> Repositories {
        let (store, writer) = reflector::store();
        let (events, _) = tokio::sync::broadcast::channel(1024);
        let tx = events.clone();
        let task = tokio::spawn(async move {
            let stream = watcher(Api::<Repository>::all(client), watcher::Config::default())
                .default_backoff()
                .modify(|r| r.metadata.managed_fields = None)
                .reflect(writer);
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
                    tracing::debug!(repository = %repo.name_any(), namespace = ?repo.namespace(), deleted, "Repository changed what its Applications read");
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
    pub(super) fn what_applications_read(repo: &Repository) -> String {
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
    pub(super) config: kube::Config,
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
    /// The manager's own username when it runs as a service account
    /// ([`crate::identity::own_service_account`]): an approval or rollback request recorded
    /// under it never counts ([`crate::decisions::approval::discount_manager`]).
    pub manager_identity: Option<String>,
    /// Managed kinds watched beyond the defaults.
    pub kinds: ExtraKinds,
    /// The reconcile queue and when each Application was last reconciled.
    pub progress: progress::Progress,
    /// Managed objects' metadata as the shard watches have it.
    pub inventory: Arc<Inventory>,
    /// Every Application's readiness as a dependency (`spec.dependsOn`), watched once per
    /// replica from the first reconcile that needs it.
    pub(super) dependencies: dependency_watch::Dependencies,
    /// Repositories as one watch of this replica has them (started with the first shard).
    pub(super) repositories: std::sync::OnceLock<Repositories>,
    /// HealthChecks as one watch of this replica has them (started with the first shard).
    pub(super) healthchecks: std::sync::OnceLock<healthchecks::HealthChecks>,
    /// Status writes the Application watch has not shown yet: a reconcile of the copy one
    /// replaced runs on what it wrote, and the write's own watch event triggers no reconcile.
    pub(super) written: written::Written,
    /// Each Application's desired Revision as last read or written, and a watch saying whether
    /// it is still current: no `GET` of an unchanged Revision.
    pub(super) revisions: revision_cache::Revisions,
    /// The replica's slots for reconciles, shared by its shards (`--concurrent-applications`).
    pub(super) queue: Arc<crate::controller::queue::Queue>,
    /// Reconciles of each Application failed in a row, for the retry backoff.
    pub(super) failures: failures::Failures,
    /// Redeploy requests announced and not yet recorded in `status.lastHandledRedeployAt`.
    pub(super) redeploys: redeploys::Redeploys,
    /// Our applies, so their watch events trigger no reconcile.
    pub(super) echoes: echoes::Echoes,
    /// What each service account was answered when it listed a kind (refused across the
    /// cluster; allowed across it or in a namespace).
    pub(super) list_answers: crate::live::ListAnswers,
    /// What the last plans found unchanged: a drift check does not read it again.
    pub(super) unchanged: unchanged::Unchanged,
    /// Applications (`namespace/name`) an apply of whose presumed-absent object found it
    /// existing: their plans read every object for [`FOUND_EXISTING_FOR`]
    /// ([`crate::decisions::absent`]).
    pub(super) found_existing: moka::sync::Cache<String, ()>,
    pub(super) scopes: crate::watch::discovery::Snapshots,
    /// The client every service account's requests go through ([`crate::impersonate`]): the
    /// controller's identity impersonating no one, with the budget, and one connection pool.
    pub(super) as_tenants: Client,
    /// Impersonating clients, per service account, over `as_tenants`: at most [`MAX_CLIENTS`],
    /// and one unused for [`CLIENT_IDLE`] is dropped (made again when needed).
    pub(super) clients: moka::sync::Cache<(String, String), Client>,
    /// The commit each (URL, credential identity, `spec.source.revision`) last resolved to.
    pub(super) resolved: resolved::Resolved,
}

/// Impersonating clients kept at once (service accounts reconciled recently).
const MAX_CLIENTS: u64 = 1024;
/// An impersonating client unused this long is dropped, with its connections.
const CLIENT_IDLE: Duration = Duration::from_secs(600);
/// How long an Application whose presumed-absent object existed has every object read.
const FOUND_EXISTING_FOR: Duration = Duration::from_secs(3600);
/// Applications remembered so at once (more are forgotten first, and read at most once more).
const FOUND_EXISTING_MAX: u64 = 100_000;

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
        let as_tenants = settings.limiter.client(crate::impersonate::without_impersonation(&config))?;
        let reporter = Reporter { controller: names::FIELD_MANAGER.to_string(), instance };
        let queue = crate::controller::queue::Queue::new(usize::from(settings.concurrency));
        Ok(Context {
            reporter,
            client: client.clone(),
            config,
            cache,
            renderer,
            settings,
            fence: None,
            manager_identity: None,
            kinds: ExtraKinds::new(client.clone()),
            progress: Default::default(),
            inventory: Default::default(),
            dependencies: Default::default(),
            repositories: Default::default(),
            healthchecks: Default::default(),
            written: Default::default(),
            revisions: Default::default(),
            queue,
            failures: Default::default(),
            redeploys: Default::default(),
            echoes: Default::default(),
            list_answers: Default::default(),
            unchanged: Default::default(),
            found_existing: moka::sync::Cache::builder()
                .max_capacity(FOUND_EXISTING_MAX)
                .time_to_live(FOUND_EXISTING_FOR)
                .build(),
            scopes: Default::default(),
            as_tenants,
            clients: moka::sync::Cache::builder().max_capacity(MAX_CLIENTS).time_to_idle(CLIENT_IDLE).build(),
            resolved: Default::default(),
        })
    }

    /// The Repositories watch, started on first use.
    pub(super) fn repositories(&self) -> &Repositories {
        self.repositories.get_or_init(|| Repositories::start(self.client.clone()))
    }

    /// The HealthChecks watch, started on first use.
    pub(super) fn healthchecks(&self) -> &healthchecks::HealthChecks {
        self.healthchecks.get_or_init(|| healthchecks::HealthChecks::start(self.client.clone()))
    }

    /// The Repository `ns/name` as the watch has it, when it has it.
    pub(super) fn cached_repository(&self, ns: &str, name: &str) -> Option<Arc<Repository>> {
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
    pub(super) fn client_for(&self, ns: &str, sa: &str) -> Result<Client, kube::Error> {
        // `try_get_with`: concurrent misses of one key build one client, not one each.
        let key = (ns.to_string(), sa.to_string());
        self.clients
            .try_get_with(key, || crate::impersonate::client(&self.as_tenants, ns, sa, &self.config.default_namespace))
            .map_err(|e| match std::sync::Arc::try_unwrap(e) {
                Ok(e) => e,
                Err(shared) => kube::Error::Service(shared.to_string().into()),
            })
    }

    /// Run discovery now (after applying CustomResourceDefinitions).
    pub(super) async fn rediscover(&self) -> Result<Arc<ClusterScopes>, kube::Error> {
        self.scopes.refresh(&self.client).await
    }

    /// The discovery snapshot; `refresh` runs discovery again unless it ran in the last
    /// two seconds (a CRD installed a moment ago).
    pub(super) async fn scopes(&self, refresh: bool) -> Result<Arc<ClusterScopes>, kube::Error> {
        self.scopes.get(&self.client, refresh, Duration::from_secs(2)).await
    }

    /// A discovery snapshot at most [`CAPABILITIES_MAX_AGE`] old: what a Helm render's
    /// `.Capabilities` answer from. One discovery per that period at most, whatever the number
    /// of charts rendered.
    pub(super) async fn fresh_scopes(&self) -> Result<Arc<ClusterScopes>, kube::Error> {
        self.scopes.get(&self.client, true, CAPABILITIES_MAX_AGE).await
    }
}

/// How old the discovery a Helm render's `.Capabilities` answer from may be: an API the
/// cluster starts serving is seen by the next render after this long.
pub const CAPABILITIES_MAX_AGE: Duration = Duration::from_secs(15);

/// `Err(NotOwner)` unless this replica may write for `app` now (checked before every write
/// batch).
pub(super) fn fenced(ctx: &Context, app: &Application) -> Result<(), Error> {
    if may_write(ctx, app) { Ok(()) } else { Err(Error::NotOwner) }
}

/// The shard of the Application `namespace/name`.
pub fn shard_of(ctx: &Context, namespace: &str, name: &str) -> u32 {
    crate::controller::labeller::shard_of(namespace, name, ctx.settings.shards)
}

/// Whether this replica may write for `app` now (it owns the Application's shard).
pub(super) fn may_write(ctx: &Context, app: &Application) -> bool {
    match &ctx.fence {
        None => true,
        Some(f) => f.owns(shard_of(ctx, &app.namespace().unwrap_or_default(), &app.name_any())).is_some(),
    }
}
