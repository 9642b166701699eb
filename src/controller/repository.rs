//! The Repository controller: resolves `spec.ref` to a commit on an interval, reads the
//! `.ksync.yaml` files of that commit, and keeps the Applications they declare.
//!
//! # Expected flow
//! 1. `spec.suspend`: `Ready=False` (`Suspended`), nothing else (but step 6's receiver path).
//! 2. Credentials from `spec.secretRef` (`username`/`password` for HTTPS, `identity` and
//!    `known_hosts` for SSH).
//! 3. Resolve the reference through the shared [`GitCache`] (single-flight; a pinned commit
//!    already cached for the same credentials costs no network; one fetched with other
//!    credentials, or none, is fetched again with these, so the remote decides).
//! 4. Read every `spec.applicationConfigPaths` file from the commit, parse and validate all of
//!    them ([`crate::source::discovery`]).
//! 5. Decide ([`super::discovery::plan`]), server-side dry-run every apply, then apply (SSA,
//!    field manager `kuvryn-sync-repository`, forced: Git owns discovered Applications) and
//!    delete the Applications Git no longer declares. An Application already applied with the
//!    same body, whose generation, labels and annotations are still what that apply left
//!    ([`discovery::Applied`]), is skipped: most syncs change one Application, or none.
//! 6. Record `status.receiver.path` when `spec.receiver` names a Secret with a usable token
//!    ([`crate::receiver::path`]); the receiver asks for fetches with the
//!    `reconcile-requested-at` annotation, which makes the next resolve fresh.
//! 7. Record `status.revision` (the last commit accepted), `status.applications`, kstatus
//!    conditions, Events; requeue after `spec.interval` (±10 % jitter).
//!
//! Discovered Applications trigger a sync when what the Repository owns of them changes
//! ([`discovery::fingerprint`]) or they are deleted; not on their status writes.
//!
//! # Guarantees
//! - When any config file is missing, unreadable or invalid, names collide, an Application of
//!   the same name exists that this Repository did not create, or the dry run refuses an
//!   Application, the Repository is `Ready=False` (`Stalled` where retrying cannot help) with a
//!   message naming the file and the problem, and **no Application is created, changed or
//!   deleted** for that commit. `status.revision` keeps the last accepted commit, so
//!   Applications that follow the Repository keep deploying it.
//! - A fetch failure keeps the last good state (`status.revision`, the cache, every
//!   Application) and says why.
//! - Applications applied directly (without this Repository's label and `discovered-from`
//!   annotation) are never changed or deleted.
//! - Credentials never reach status, Events or logs: errors are redacted.
//! - A deposed leader writes nothing: with several replicas, every write goes through a client
//!   fenced by the leader Lease ([`crate::client::Limiter::fenced_client`]), and an
//!   Application is deleted only as it was listed (its `uid` as a precondition), never one
//!   created again under its name since ([`delete_undeclared`]).

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, PartialObjectMeta, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use super::discovery::{self, Applied, Existing};
use crate::api::application::Application;
use crate::api::conditions::{self, Status};
use crate::api::names;
use crate::api::repository::{DiscoveredApplications, ObservedRevision, ReceiverStatus, Repository, RepositoryStatus};
use crate::source::discovery::{ConfigError, check_config_path, parse_all};
use crate::source::{GitCache, Reference};

/// The field manager of discovered Applications.
pub const MANAGER: &str = "kuvryn-sync-repository";

/// What the controller needs.
pub struct Context {
    /// The API client.
    pub client: Client,
    /// The shared Git cache.
    pub cache: GitCache,
    /// Who Events are reported by.
    pub reporter: Reporter,
    /// The last resolution per Repository, so a reconcile triggered by something other than
    /// the interval (a status write, a discovered Application changing) re-syncs the
    /// Applications from the cached commit without contacting the remote.
    resolved: std::sync::Mutex<std::collections::HashMap<String, LastResolve>>,
    /// What was last applied for each discovered Application (namespace, name): an
    /// Application neither Git nor anyone else changed since is not applied again.
    applied: std::sync::Mutex<std::collections::HashMap<(String, String), Applied>>,
    /// Pulls charts for Helm and OCI Repositories (shared with the Application controller's
    /// renderer, so a version found here is in the cache when an Application renders it).
    charts: Option<crate::render::pull::Charts>,
}

/// What a Repository last resolved to, and under which spec.
#[derive(Clone)]
struct LastResolve {
    at: std::time::Instant,
    generation: Option<i64>,
    requested_at: Option<String>,
    commit: String,
}

impl Context {
    /// A context reporting Events as `kuvryn-sync` from `instance`.
    pub fn new(client: Client, cache: GitCache, instance: Option<String>) -> Context {
        let reporter = Reporter { controller: names::FIELD_MANAGER.to_string(), instance };
        Context { reporter, client, cache, resolved: Default::default(), applied: Default::default(), charts: None }
    }

    /// Follow Helm and OCI Repositories with `charts`; without it they are reported as not
    /// followed.
    pub fn with_charts(mut self, charts: crate::render::pull::Charts) -> Context {
        self.charts = Some(charts);
        self
    }
}

/// Errors that make the controller retry with back-off (API failures; source and config
/// problems are reported on the object instead).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API request failed.
    #[error("API request failed: {0}")]
    Kube(#[from] kube::Error),
    /// The object has no namespace.
    #[error("the Repository has no namespace")]
    NoNamespace,
}

/// Run the controller until `shutdown` completes.
pub async fn run(ctx: Arc<Context>, shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static) {
    let client = ctx.client.clone();
    let repos: Api<Repository> = Api::all(client.clone());
    let (store, writer) = reflector::store();
    let own = watcher(repos, watcher::Config::default()).default_backoff().reflect(writer).applied_objects();
    Controller::for_stream(own, store)
        .trigger_backoff(super::EachWatchBacksOff)
        .watches_stream(discovered_changes(client), |app: PartialObjectMeta<Application>| {
            let ns = app.namespace();
            app.labels()
                .get(names::labels::REPOSITORY)
                .and_then(|r| ns.map(|ns| ObjectRef::<Repository>::new(r).within(&ns)))
        })
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "repository reconcile");
            }
        })
        .await;
}

/// Discovered Applications (metadata only) whose [`discovery::fingerprint`] changed, and those
/// deleted: what makes their Repository sync again. Their status writes do not.
fn discovered_changes(
    client: Client,
) -> impl futures_util::Stream<Item = Result<PartialObjectMeta<Application>, watcher::Error>> + Send + 'static {
    let mut seen: std::collections::HashMap<(Option<String>, String), String> = Default::default();
    let apps: Api<PartialObjectMeta<Application>> = Api::all(client);
    watcher(apps, watcher::Config::default().labels(names::labels::REPOSITORY)).default_backoff().filter_map(
        move |event| {
            let out = match event {
                Ok(watcher::Event::Apply(app) | watcher::Event::InitApply(app)) => {
                    let print = discovery::fingerprint(&app.metadata);
                    let key = (app.namespace(), app.name_any());
                    (seen.insert(key, print.clone()).as_ref() != Some(&print)).then_some(Ok(app))
                }
                Ok(watcher::Event::Delete(app)) => {
                    seen.remove(&(app.namespace(), app.name_any()));
                    Some(Ok(app))
                }
                Ok(watcher::Event::Init | watcher::Event::InitDone) => None,
                Err(e) => Some(Err(e)),
            };
            std::future::ready(out)
        },
    )
}

fn error_policy(repo: Arc<Repository>, error: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(repository = %repo.name_any(), namespace = ?repo.namespace(), error = %error, "reconcile failed");
    Action::requeue(Duration::from_secs(5))
}

/// How a failed step is reported.
struct Failure {
    reason: &'static str,
    message: String,
    retryable: bool,
}

/// Reconcile one Repository (see the module documentation).
pub async fn reconcile(repo: Arc<Repository>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = repo.namespace().ok_or(Error::NoNamespace)?;
    let name = repo.name_any();
    let interval = crate::api::duration::parse(&repo.spec.interval).unwrap_or(Duration::from_secs(60));
    let requeue = Action::requeue(super::with_jitter(interval, &name));
    let old = repo.status.clone().unwrap_or_default();
    let mut status = old.clone();
    status.observed_generation = repo.metadata.generation;
    if let Some(at) = repo.annotations().get(names::annotations::RECONCILE_REQUESTED_AT) {
        status.last_handled_reconcile_at = Some(at.clone());
    }
    let generation = repo.metadata.generation;
    let now = Timestamp::now();
    receiver(&ctx, &repo, &ns, &old, &mut status).await?;

    if repo.spec.suspend {
        conditions::mark_suspended(
            &mut status.conditions,
            "reconciliation is suspended (spec.suspend)",
            generation,
            now,
        );
        write_status(&ctx, &repo, &old, &status).await?;
        return Ok(Action::await_change());
    }

    match sync(&repo, &ctx, &ns, &name, &mut status).await? {
        Ok(summary) => {
            conditions::mark_ready(&mut status.conditions, names::reasons::SUCCEEDED, &summary, generation, now);
        }
        Err(f) => {
            let previous = conditions::get(&old.conditions, names::conditions::READY).map(|c| c.message.clone());
            if f.retryable {
                conditions::mark_failed(&mut status.conditions, f.reason, &f.message, generation, now);
            } else {
                conditions::mark_stalled(&mut status.conditions, f.reason, &f.message, generation, now);
            }
            if previous.as_deref() != Some(f.message.as_str()) {
                event(&ctx, &repo, EventType::Warning, f.reason, &f.message).await;
            }
            tracing::info!(repository = %name, namespace = %ns, reason = f.reason, message = %f.message, "repository not ready");
        }
    }
    write_status(&ctx, &repo, &old, &status).await?;
    Ok(requeue)
}

/// The receiver path (`status.receiver`, `docs/receivers.md`): derived from the token of
/// `spec.receiver.secretRef`, read as the manager from the Repository's own namespace. A
/// missing or short token leaves no path, a `ReceiverReady=False` condition and a Warning Event
/// (once per message); the token itself is written nowhere.
async fn receiver(
    ctx: &Context,
    repo: &Repository,
    ns: &str,
    old: &RepositoryStatus,
    status: &mut RepositoryStatus,
) -> Result<(), Error> {
    let generation = repo.metadata.generation;
    let Some(spec) = &repo.spec.receiver else {
        status.receiver = None;
        status.conditions.retain(|c| c.type_ != names::conditions::RECEIVER_READY);
        return Ok(());
    };
    let secret_name = &spec.secret_ref.name;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(ctx.client.clone(), ns);
    let data = secrets
        .get_opt(secret_name)
        .await?
        .and_then(|s| s.data)
        .map(|d| d.into_iter().map(|(k, v)| (k, v.0)).collect());
    match crate::receiver::path::token(secret_name, data.as_ref()) {
        Ok(token) => {
            let path = crate::receiver::path::of(ns, secret_name, &token);
            conditions::set(
                &mut status.conditions,
                names::conditions::RECEIVER_READY,
                Status::True,
                names::reasons::SUCCEEDED,
                &format!("pushes are received at {path}"),
                generation,
                Timestamp::now(),
            );
            status.receiver = Some(ReceiverStatus { path });
        }
        Err(message) => {
            status.receiver = None;
            let before = conditions::get(&old.conditions, names::conditions::RECEIVER_READY).map(|c| c.message.clone());
            conditions::set(
                &mut status.conditions,
                names::conditions::RECEIVER_READY,
                Status::False,
                names::reasons::RECEIVER_FAILURE,
                &message,
                generation,
                Timestamp::now(),
            );
            if before.as_deref() != Some(message.as_str()) {
                event(ctx, repo, EventType::Warning, names::reasons::RECEIVER_FAILURE, &message).await;
            }
        }
    }
    Ok(())
}

/// Steps 2 to 5. The outer error is an API failure to retry; the inner one is reported on the
/// object.
async fn sync(
    repo: &Repository,
    ctx: &Context,
    ns: &str,
    name: &str,
    status: &mut RepositoryStatus,
) -> Result<Result<String, Failure>, Error> {
    let source_failure = |e: crate::source::Error| Failure {
        reason: names::reasons::SOURCE_FAILURE,
        retryable: e.retryable(),
        message: e.to_string(),
    };
    if repo.spec.is_chart() {
        return chart_sync(repo, ctx, ns, status).await;
    }
    let Some(reference) = repo.spec.reference.as_ref().and_then(Reference::from_git_ref) else {
        return Ok(Err(Failure {
            reason: names::reasons::SOURCE_FAILURE,
            message: "spec.ref must set exactly one of branch, tag or commit".into(),
            retryable: false,
        }));
    };
    let credentials =
        match crate::source::secret::of_repository(&ctx.client, ns, repo.spec.secret_ref.as_ref(), &repo.spec.url)
            .await?
        {
            Ok(c) => c,
            Err(message) => {
                return Ok(Err(Failure { reason: names::reasons::SOURCE_FAILURE, message, retryable: true }));
            }
        };
    let timeout = crate::api::duration::parse(&repo.spec.timeout).unwrap_or(Duration::from_secs(60));
    let url = &repo.spec.url;
    let generation = repo.metadata.generation;
    let key = format!("{ns}/{name}");
    let requested_at = repo.annotations().get(names::annotations::RECONCILE_REQUESTED_AT).cloned();
    let interval = crate::api::duration::parse(&repo.spec.interval).unwrap_or(Duration::from_secs(60));
    let recent = ctx.resolved.lock().expect("resolved lock").get(&key).cloned().filter(|l| {
        l.generation == generation && l.requested_at == requested_at && l.at.elapsed() < interval.mul_f64(0.9)
    });
    let fresh = recent.is_none();
    let resolution = match recent {
        Some(l) => Ok(crate::source::cache::Resolution { commit: l.commit, fetched: false }),
        None => ctx.cache.resolve(url, &reference, &credentials, timeout).await,
    };
    let resolved = match resolution {
        Ok(r) => {
            if fresh {
                ctx.resolved.lock().expect("resolved lock").insert(
                    key.clone(),
                    LastResolve { at: std::time::Instant::now(), generation, requested_at, commit: r.commit.clone() },
                );
            }
            r
        }
        Err(e) => {
            conditions::set(
                &mut status.conditions,
                names::conditions::SOURCE_READY,
                Status::False,
                names::reasons::SOURCE_FAILURE,
                &e.to_string(),
                generation,
                Timestamp::now(),
            );
            return Ok(Err(source_failure(e)));
        }
    };
    conditions::set(
        &mut status.conditions,
        names::conditions::SOURCE_READY,
        Status::True,
        names::reasons::SUCCEEDED,
        &format!("{reference} resolved to {}", &resolved.commit[..12.min(resolved.commit.len())]),
        generation,
        Timestamp::now(),
    );
    let commit = resolved.commit;
    let short = &commit[..12.min(commit.len())];

    // Read and validate every config file before changing anything.
    let mut files = Vec::new();
    for path in &repo.spec.application_config_paths {
        let config_failure = |e: ConfigError| Failure {
            reason: names::reasons::CONFIG_FAILURE,
            message: format!("commit {short}: {e}; no Application was changed"),
            retryable: false,
        };
        let clean = match check_config_path(path) {
            Ok(p) => p,
            Err(e) => return Ok(Err(config_failure(e))),
        };
        match ctx.cache.read_file(url, &credentials, &commit, &clean).await {
            Ok(Some(content)) => files.push((clean, content)),
            Ok(None) => {
                return Ok(Err(config_failure(ConfigError { file: clean, message: "not found in the commit".into() })));
            }
            Err(e) => {
                return Ok(Err(config_failure(ConfigError { file: clean, message: e.to_string() })));
            }
        }
    }
    let declared = match parse_all(&files, ns, name) {
        Ok(d) => d,
        Err(e) => {
            return Ok(Err(Failure {
                reason: names::reasons::CONFIG_FAILURE,
                message: format!("commit {short}: {e}; no Application was changed"),
                retryable: false,
            }));
        }
    };

    let apps: Api<Application> = Api::namespaced(ctx.client.clone(), ns);
    let listed = apps.list_metadata(&ListParams::default()).await?.items;
    let existing: Vec<Existing> = listed
        .iter()
        .map(|m| Existing {
            name: m.name_any(),
            repository: m.labels().get(names::labels::REPOSITORY).cloned(),
            discovered_from: m.annotations().get(names::annotations::DISCOVERED_FROM).cloned(),
        })
        .collect();
    let plan = discovery::plan(name, ns, &declared, &existing);
    if !plan.conflicts.is_empty() {
        return Ok(Err(Failure {
            reason: names::reasons::CONFIG_FAILURE,
            message: format!(
                "commit {short}: Applications already exist that this Repository did not create, and are left untouched: {}; rename them in Git; no Application was changed",
                plan.conflicts.join(", ")
            ),
            retryable: false,
        }));
    }

    // What neither Git nor anyone else changed since it was applied is not applied again: a
    // sync triggered by one Application's change costs two requests per changed Application,
    // not two per declared one.
    let to_apply: Vec<&serde_json::Value> = {
        let applied = ctx.applied.lock().expect("applied lock");
        plan.apply
            .iter()
            .filter(|obj| {
                let app = obj["metadata"]["name"].as_str().unwrap_or_default();
                let live = listed.iter().find(|m| m.name_any() == app);
                let record = applied.get(&(ns.to_string(), app.to_string()));
                !matches!((record, live), (Some(r), Some(m)) if r.unchanged(obj, &m.metadata))
            })
            .collect()
    };
    // Dry run first: one invalid Application blocks the whole commit.
    let dry = PatchParams::apply(MANAGER).force().dry_run();
    for obj in &to_apply {
        let app = obj["metadata"]["name"].as_str().unwrap_or_default();
        if let Err(e) = apps.patch(app, &dry, &Patch::Apply(obj)).await {
            let file = obj["metadata"]["annotations"][names::annotations::DISCOVERED_FROM].as_str().unwrap_or_default();
            return Ok(Err(match e {
                kube::Error::Api(ae) if (400..500).contains(&ae.code) && ae.code != 429 => Failure {
                    reason: names::reasons::CONFIG_FAILURE,
                    message: format!(
                        "commit {short}: {file}: Application {app} is invalid: {}; no Application was changed",
                        ae.message
                    ),
                    retryable: false,
                },
                other => Failure {
                    reason: names::reasons::APPLY_FAILURE,
                    message: format!("commit {short}: checking Application {app}: {other}; no Application was changed"),
                    retryable: true,
                },
            }));
        }
    }

    let before: std::collections::BTreeMap<String, Option<String>> =
        existing.iter().map(|e| (e.name.clone(), None)).collect();
    let mut created = Vec::new();
    let mut updated = Vec::new();
    let live =
        apps.list_metadata(&ListParams::default().labels(&format!("{}={name}", names::labels::REPOSITORY))).await?;
    let versions: std::collections::BTreeMap<String, Option<String>> =
        live.items.iter().map(|m| (m.name_any(), m.resource_version())).collect();
    let apply = PatchParams::apply(MANAGER).force();
    for obj in to_apply {
        let app = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let result: Application = apps.patch(&app, &apply, &Patch::Apply(obj)).await?;
        ctx.applied
            .lock()
            .expect("applied lock")
            .insert((ns.to_string(), app.clone()), Applied::new(obj, &result.metadata));
        if !before.contains_key(&app) {
            created.push(app);
        } else if versions.get(&app).cloned().flatten() != result.resource_version() {
            updated.push(app);
        }
    }
    for app in &plan.delete {
        ctx.applied.lock().expect("applied lock").remove(&(ns.to_string(), app.clone()));
    }
    let deleted = delete_undeclared(&apps, &plan.delete, &listed).await?;

    let ref_name = reference.to_string();
    let new_commit = status.revision.as_ref().map(|r| r.commit.as_str()) != Some(commit.as_str());
    if new_commit {
        let subject = ctx.cache.commit_subject(url, &credentials, &commit).await.unwrap_or_default();
        let note = format!("{ref_name} is at {short}: {subject}");
        event(ctx, repo, EventType::Normal, names::events::NEW_REVISION, &note).await;
        status.revision = Some(ObservedRevision {
            reference: ref_name.clone(),
            commit: commit.clone(),
            fetched_at: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now())),
        });
    } else if let Some(r) = status.revision.as_mut() {
        // A fetch that confirms the commit writes nothing: an idle Repository costs no writes,
        // and its Applications no reconciles.
        r.reference = ref_name.clone();
    }
    if !(created.is_empty() && updated.is_empty() && deleted.is_empty()) {
        let mut parts = Vec::new();
        for (verb, list) in [("created", &created), ("updated", &updated), ("deleted", &deleted)] {
            if !list.is_empty() {
                parts.push(format!("{verb} {}", bounded_list(list)));
            }
        }
        let note = format!("commit {short}: {}", parts.join("; "));
        event(ctx, repo, EventType::Normal, names::events::DISCOVERY_CHANGED, &note).await;
    }
    let paths: Vec<String> = files.iter().map(|(p, _)| p.clone()).collect();
    status.applications = Some(DiscoveredApplications {
        discovered: i32::try_from(declared.len()).unwrap_or(i32::MAX),
        files: paths.clone(),
    });
    Ok(Ok(format!(
        "{ref_name} at {short}: {} Application{} from {}",
        declared.len(),
        if declared.len() == 1 { "" } else { "s" },
        paths.join(", ")
    )))
}

/// A Helm or OCI Repository: the newest release of its chart within its version range,
/// pulled (so it is in the shared cache) and recorded as `status.revision` (`commit` is the
/// version). Charts declare no Applications.
async fn chart_sync(
    repo: &Repository,
    ctx: &Context,
    ns: &str,
    status: &mut RepositoryStatus,
) -> Result<Result<String, Failure>, Error> {
    let generation = repo.metadata.generation;
    let fail = |message: String, retryable: bool| {
        Ok(Err(Failure { reason: names::reasons::SOURCE_FAILURE, message, retryable }))
    };
    let (Some(chart), Some(charts)) = (&repo.spec.chart, &ctx.charts) else {
        return fail("a Helm or OCI Repository needs spec.chart, and a manager that pulls charts".into(), false);
    };
    let auth = match chart_auth(&ctx.client, ns, repo.spec.secret_ref.as_ref(), &repo.spec.url).await? {
        Ok(a) => a,
        Err(message) => return fail(message, true),
    };
    let interval = crate::api::duration::parse(&repo.spec.interval).unwrap_or(Duration::from_secs(60));
    let exact = crate::render::chart::is_exact(&chart.version);
    // A new reconcile request (`ksync reconcile repo`, a receiver) resolves the range again now.
    let requested = repo.annotations().get(names::annotations::RECONCILE_REQUESTED_AT);
    let handled = repo.status.as_ref().and_then(|s| s.last_handled_reconcile_at.as_ref());
    let fresh_for = if requested.is_some() && requested != handled { Duration::ZERO } else { interval.mul_f64(0.9) };
    let pulled = match charts.pull(&repo.spec.url, &chart.name, &chart.version, exact, &auth, fresh_for).await {
        Ok(p) => p,
        Err(message) => {
            conditions::set(
                &mut status.conditions,
                names::conditions::SOURCE_READY,
                Status::False,
                names::reasons::SOURCE_FAILURE,
                &message,
                generation,
                Timestamp::now(),
            );
            return fail(message, true);
        }
    };
    let following = repo.spec.following();
    conditions::set(
        &mut status.conditions,
        names::conditions::SOURCE_READY,
        Status::True,
        names::reasons::SUCCEEDED,
        &format!("{following} resolved to {}", pulled.version),
        generation,
        Timestamp::now(),
    );
    if status.revision.as_ref().map(|r| r.commit.as_str()) != Some(pulled.version.as_str()) {
        let note = format!("{following} is at {} ({})", pulled.version, pulled.digest);
        event(ctx, repo, EventType::Normal, names::events::NEW_REVISION, &note).await;
        status.revision = Some(ObservedRevision {
            reference: following.clone(),
            commit: pulled.version.clone(),
            fetched_at: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now())),
        });
    }
    status.applications = None;
    Ok(Ok(format!("{following} at {}", pulled.version)))
}

/// The credentials of a chart Repository at `url`: its Secret's `username`, `password` and
/// `ca.crt`, read with the controller's identity as a Git Repository's are.
///
/// # Contract
/// Used only when the Secret's [`names::annotations::CHART_URLS`] annotation lists `url`
/// ([`crate::source::secret::chart_url_allowed`]); otherwise nothing of it is used or sent, and
/// the message is the same whether the Secret is missing or only not marked.
pub async fn chart_auth(
    client: &Client,
    ns: &str,
    secret: Option<&crate::api::common::LocalObjectReference>,
    url: &str,
) -> Result<Result<crate::render::pull::Auth, String>, kube::Error> {
    let Some(secret) = secret else { return Ok(Ok(Default::default())) };
    let api: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), ns);
    let listed = |s: &k8s_openapi::api::core::v1::Secret| s.annotations().get(names::annotations::CHART_URLS).cloned();
    match api.get_opt(&secret.name).await? {
        Some(s) if listed(&s).is_some_and(|l| crate::source::secret::chart_url_allowed(url, &l)) => {
            Ok(Ok(crate::render::pull::Auth::from_secret(&s)))
        }
        // One message whatever the reason: nothing tells a missing Secret from an unmarked one.
        _ => Ok(Err(format!(
            "the credentials Secret {:?} (spec.secretRef) does not exist, or its {} annotation does not list this \
             Repository's URL: a Secret is sent only to the chart repositories it lists",
            secret.name,
            names::annotations::CHART_URLS
        ))),
    }
}

/// Delete the Applications `names` that Git no longer declares, each only as the object
/// `listed` saw (its `uid` as a precondition): one deleted and created again since, by a person
/// or by a newer leader, is left alone (the next sync looks again). Returns those deleted.
pub async fn delete_undeclared(
    apps: &Api<Application>,
    names: &[String],
    listed: &[PartialObjectMeta<Application>],
) -> Result<Vec<String>, kube::Error> {
    let mut deleted = Vec::new();
    for app in names {
        let Some(uid) = listed.iter().find(|m| m.name_any() == *app).and_then(|m| m.metadata.uid.clone()) else {
            continue;
        };
        let precondition = kube::api::Preconditions { uid: Some(uid), resource_version: None };
        match apps.delete(app, &DeleteParams { preconditions: Some(precondition), ..Default::default() }).await {
            Ok(_) => deleted.push(app.clone()),
            // Gone, or another object of that name now.
            Err(kube::Error::Api(ae)) if ae.code == 404 || ae.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(deleted)
}

fn bounded_list(names: &[String]) -> String {
    const MAX: usize = 10;
    if names.len() <= MAX {
        names.join(", ")
    } else {
        format!("{} and {} more", names[..MAX].join(", "), names.len() - MAX)
    }
}

async fn event(ctx: &Context, repo: &Repository, type_: EventType, reason: &str, note: &str) {
    let ev = Event {
        type_,
        reason: reason.to_string(),
        note: Some(note.chars().take(1024).collect()),
        action: "Reconcile".to_string(),
        secondary: None,
    };
    // A fresh Recorder per Event: kube's Recorder merges Events of the same reason into one
    // series keeping the first note, and every Event published here says something new (a new
    // commit, a changed failure message).
    let recorder = Recorder::new(ctx.client.clone(), ctx.reporter.clone());
    if let Err(e) = recorder.publish(&ev, &repo.object_ref(&())).await {
        tracing::debug!(error = %e, "publishing an Event");
    }
}

async fn write_status(
    ctx: &Context,
    repo: &Repository,
    old: &RepositoryStatus,
    new: &RepositoryStatus,
) -> Result<(), Error> {
    if old == new {
        return Ok(());
    }
    let api: Api<Repository> = Api::namespaced(ctx.client.clone(), &repo.namespace().unwrap_or_default());
    let mut body = json!({"status": new});
    // A merge patch keeps what it does not name: a receiver gone must be removed explicitly.
    if old.receiver.is_some() && new.receiver.is_none() {
        body["status"]["receiver"] = serde_json::Value::Null;
    }
    api.patch_status(&repo.name_any(), &PatchParams::apply(names::STATUS_FIELD_MANAGER), &Patch::Merge(body)).await?;
    Ok(())
}
