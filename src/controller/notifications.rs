//! The notifications engine: delivers the lifecycle Events of Applications to the
//! `Notification`s that route them (`docs/notifications.md`).
//!
//! # Expected flow
//! The Events in the API server are the outbox. Every replica watches Events and Notifications;
//! for each Event about an Application of a shard this replica owns (every Event when not
//! sharded), and each Notification that routes it ([`crate::notify::route`]):
//! 0. queue it in the lane of (Notification, Application) ([`crate::notify::lanes`]): one
//!    delivery at a time, oldest Event first;
//! 1. claim it: an annotation on the Event ([`crate::notify::claim`]) written with the Event's
//!    resourceVersion, so of two replicas racing one wins;
//! 2. read the provider Secret (this namespace only), the Revision the Event names, build the
//!    message, and send it ([`crate::notify::send`]: rate-limited, retried);
//! 3. mark the Event delivered (or failed), write the Notification's status, count it.
//!
//! The watch and a rescan every third of the claim bound visit every Event again: a shard that
//! moves to this replica has its pending Events delivered once the dead holder's claim is stale.
//! Events are watched only while at least one Notification exists: the first one starts the
//! watch (its list visits every Event kept), the last one's deletion stops it and drops them.
//!
//! # Guarantees
//! - never sent: Events older than [`MAX_AGE`] or than the Notification, observations
//!   (`HealthDegraded`, `Drifted`), Events routed while the Notification was suspended;
//! - one delivery per Event and Notification across replicas, but for a replica killed between
//!   the provider's answer and the mark (then twice);
//! - a missing Secret or key fails the delivery at once (`Ready=False`), never retried.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::api::application::Application;
use crate::api::names;
use crate::api::notification::{Notification, ProviderType, Severity};
use crate::api::revision::Revision;
use crate::metric_names as m;
use crate::notify::lanes::Lanes;
use crate::notify::message::{Message, ProviderSecret};
use crate::notify::providers::{self, commit};
use crate::notify::send::{Outcome, Sender};
use crate::notify::status::{DELIVERY_FAILED, NOT_CONFIGURED};
use crate::notify::{claim, compose, route, status};

/// Events older than this are never delivered: a restart or a new Notification does not flood
/// a channel with history (Events live an hour by default).
pub const MAX_AGE: Duration = Duration::from_secs(3600);

/// What the engine needs.
pub struct Context {
    client: Client,
    replica: String,
    fence: Option<sharding::coordinator::Fence>,
    /// Claims older than this are taken over (the Lease duration).
    stale_after: Duration,
    sender: Sender,
    /// (Event uid, Notification `namespace/name`) queued or delivering in this replica now:
    /// never started twice.
    running: Mutex<HashSet<(String, String)>>,
    /// Deliveries by (Notification, Application), each `namespace/name`, oldest Event first:
    /// a provider that keeps the last state written (a commit status) ends with the latest.
    lanes: Lanes<(String, String), (i64, String), (Event, Notification)>,
}

impl Context {
    /// An engine for replica `replica`, delivering for the shards `fence` owns (all without),
    /// taking over claims older than `stale_after`.
    pub fn new(
        client: Client,
        replica: String,
        fence: Option<sharding::coordinator::Fence>,
        stale_after: Duration,
    ) -> Context {
        Context {
            client,
            replica,
            fence,
            stale_after,
            sender: Sender::default(),
            running: Mutex::default(),
            lanes: Lanes::default(),
        }
    }

    /// Whether this replica delivers for Application `app` now.
    fn owns(&self, app: &Application) -> bool {
        let Some(fence) = &self.fence else { return true };
        let shard = app.labels().get(names::labels::SHARD).and_then(|s| s.parse::<u32>().ok());
        shard.is_some_and(|s| fence.owns(s).is_some())
    }
}

/// Run until `shutdown`.
pub async fn run(ctx: Arc<Context>, shutdown: impl std::future::Future<Output = ()>) {
    let (notifications, writer) = reflector::store();
    let mut ntf_watch = reflector::reflector(
        writer,
        watcher(Api::<Notification>::all(ctx.client.clone()), watcher::Config::default()).default_backoff(),
    )
    .boxed();
    let mut events: Option<EventWatch> = None;
    let mut rescan = tokio::time::interval((ctx.stale_after / 3).max(Duration::from_secs(1)));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            item = ntf_watch.next() => match item {
                // Events are watched and kept only while a Notification may route them: a
                // cluster without Notifications pays nothing for its Events.
                Some(_) => match (notifications.is_empty(), events.is_some()) {
                    (false, false) => events = Some(EventWatch::start(&ctx.client)),
                    (true, true) => events = None,
                    _ => {}
                },
                None => return,
            },
            item = next_event(&mut events) => match item {
                Some(Ok(watcher::Event::Apply(ev) | watcher::Event::InitApply(ev))) => {
                    visit(&ctx, &notifications.state(), &ev);
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => tracing::debug!(error = %e, "watching Events"),
                None => return,
            },
            _ = rescan.tick() => {
                let routes = notifications.state();
                if let (false, Some(watch)) = (routes.is_empty(), &events) {
                    for ev in watch.store.state() {
                        visit(&ctx, &routes, &ev);
                    }
                }
            }
        }
    }
}

/// The watch of the routable Events and what it keeps.
struct EventWatch {
    store: reflector::Store<Event>,
    stream: futures_util::stream::BoxStream<'static, Result<watcher::Event<Event>, watcher::Error>>,
}

impl EventWatch {
    fn start(client: &Client) -> EventWatch {
        let (store, writer) = reflector::store::<Event>();
        let stream = reflector::reflector(
            writer,
            watcher(Api::<Event>::all(client.clone()), watcher::Config::default().fields(&routable_selector()))
                .default_backoff()
                .modify(|e| e.metadata.managed_fields = None),
        )
        .boxed();
        EventWatch { store, stream }
    }
}

/// The next item of the Event watch; never while there is none.
async fn next_event(watch: &mut Option<EventWatch>) -> Option<Result<watcher::Event<Event>, watcher::Error>> {
    match watch {
        Some(w) => w.stream.next().await,
        None => std::future::pending().await,
    }
}

/// The field selector of the Events watched: only those a Notification may route (the
/// Application lifecycle Events this controller reports), so a replica neither decodes nor keeps
/// the rest of the cluster's Events. [`visit`] checks the same again.
fn routable_selector() -> String {
    format!("reportingController={},regarding.kind=Application", names::FIELD_MANAGER)
}

/// Start the deliveries `ev` may need through `notifications` (cheap checks first).
fn visit(ctx: &Arc<Context>, notifications: &[Arc<Notification>], ev: &Event) {
    let regarding = ev.regarding.clone().unwrap_or_default();
    if ev.reporting_controller.as_deref() != Some(names::FIELD_MANAGER)
        || regarding.kind.as_deref() != Some("Application")
        || age(ev).is_none_or(|a| a > MAX_AGE)
    {
        return;
    }
    let ns = regarding.namespace.clone().unwrap_or_default();
    let now = jiff::Timestamp::now().as_second();
    let no_labels = BTreeMap::new();
    let seen = seen(ev, &ns, regarding.name.as_deref().unwrap_or_default(), &no_labels);
    for ntf in notifications {
        if !route::may_route(&awake(ntf), &seen) {
            continue;
        }
        let value = ev.annotations().get(&claim::key(&ntf.name_any())).cloned();
        if claim::decide(value.as_deref(), now, ctx.stale_after.as_secs() as i64) == claim::Decision::Leave {
            continue;
        }
        let notification = format!("{}/{}", ntf.namespace().unwrap_or_default(), ntf.name_any());
        let key = (ev.metadata.uid.clone().unwrap_or_default(), notification.clone());
        if !ctx.running.lock().expect("running lock").insert(key.clone()) {
            continue;
        }
        tracing::trace!(event = %ev.name_any(), notification = %ntf.name_any(), "visiting");
        let lane = (notification, format!("{ns}/{}", regarding.name.as_deref().unwrap_or_default()));
        let order = (happened(ev).map_or(0, |t| t.as_microsecond()), key.0);
        if ctx.lanes.push(&lane, order, (ev.clone(), Notification::clone(ntf))) {
            tokio::spawn(drain(ctx.clone(), lane));
        }
    }
}

/// Deliver `lane`'s queue until it is empty ([`Lanes`]).
async fn drain(ctx: Arc<Context>, lane: (String, String)) {
    while let Some((ev, ntf)) = ctx.lanes.next(&lane) {
        deliver(&ctx, &ev, &ntf).await;
        let uid = ev.metadata.uid.clone().unwrap_or_default();
        ctx.running.lock().expect("running lock").remove(&(uid, lane.0.clone()));
    }
}

/// When `ev` happened: its `eventTime`, else its creation.
fn happened(ev: &Event) -> Option<jiff::Timestamp> {
    ev.event_time.as_ref().map(|t| t.0).or_else(|| ev.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// `ntf` as if not suspended: a suspended Notification still claims the Events it routes, to
/// mark them skipped (see [`deliver`]).
fn awake(ntf: &Notification) -> Notification {
    let mut n = ntf.clone();
    n.spec.suspend = false;
    n
}

/// What routing reads of `ev` about Application `ns/app` labelled `labels`.
fn seen<'a>(ev: &'a Event, ns: &'a str, app: &'a str, labels: &'a BTreeMap<String, String>) -> route::Seen<'a> {
    let regarding = ev.regarding.as_ref();
    route::Seen {
        reporting_controller: ev.reporting_controller.as_deref().unwrap_or_default(),
        regarding_api_version: regarding.and_then(|r| r.api_version.as_deref()).unwrap_or_default(),
        regarding_kind: regarding.and_then(|r| r.kind.as_deref()).unwrap_or_default(),
        namespace: ns,
        application: app,
        labels,
        severity: if ev.type_.as_deref() == Some("Warning") { Severity::Warning } else { Severity::Normal },
        reason: ev.reason.as_deref().unwrap_or_default(),
    }
}

/// How long ago `ev` happened.
fn age(ev: &Event) -> Option<Duration> {
    let at = happened(ev)?;
    let secs = jiff::Timestamp::now().as_second() - at.as_second();
    Some(Duration::from_secs(u64::try_from(secs).unwrap_or(0)))
}

/// Deliver `ev` through `ntf`, if it routes it and this replica wins the claim.
async fn deliver(ctx: &Context, ev: &Event, ntf: &Notification) {
    let regarding = ev.regarding.clone().unwrap_or_default();
    let (ns, app_name) = (regarding.namespace.unwrap_or_default(), regarding.name.unwrap_or_default());
    let Ok(Some(app)) = Api::<Application>::namespaced(ctx.client.clone(), &ns).get_opt(&app_name).await else {
        return;
    };
    if !ctx.owns(&app) {
        tracing::trace!(event = %ev.name_any(), "not this replica's shard");
        return;
    }
    let seen = seen(ev, &ns, &app_name, app.labels());
    // Events from before the Notification existed are history, not news.
    let created = ntf.metadata.creation_timestamp.as_ref().map(|t| t.0.as_second()).unwrap_or(i64::MAX);
    let happened = happened(ev).map(|t| t.as_second());
    if !route::routes(&awake(ntf), &seen) || happened.is_none_or(|h| h < created) {
        tracing::trace!(event = %ev.name_any(), notification = %ntf.name_any(), "not routed");
        return;
    }
    let key = claim::key(&ntf.name_any());
    let events: Api<Event> = Api::namespaced(ctx.client.clone(), ev.namespace().as_deref().unwrap_or_default());
    let now = jiff::Timestamp::now().as_second();
    let claimed = json!({"metadata": {
        "resourceVersion": ev.resource_version(),
        "annotations": {&key: claim::claimed(&ctx.replica, now)},
    }});
    if let Err(e) = events.patch(&ev.name_any(), &PatchParams::default(), &Patch::Merge(&claimed)).await {
        // 409: another replica claimed it (or the Event moved on: the next visit decides again).
        tracing::debug!(error = %e, event = %ev.name_any(), "not claimed");
        return;
    }
    let started = Instant::now();
    let provider = ntf.spec.provider.type_;
    let rev_name = ev.related.as_ref().and_then(|r| r.name.clone());
    let revision = match rev_name {
        Some(r) => Api::<Revision>::namespaced(ctx.client.clone(), &ns).get_opt(&r).await.ok().flatten(),
        None => None,
    };
    let msg = compose::message(ev, revision.as_ref());
    let outcome = if ntf.spec.suspend
        || !providers::applies(provider, &msg)
        || superseded(provider, &msg, happened, revision.as_ref())
    {
        // Suspended: marked, so resuming does not send the meantime's Events. A commit status
        // needs a commit and an Event that sets a state, and a pending the Revision's finish
        // already overtook would overwrite its success: others are not for it.
        Outcome::NotSent { reason: String::new() }
    } else {
        match secret(ctx, &ns, &ntf.spec.provider.secret_ref.name).await {
            Err(reason) => Outcome::NotSent { reason },
            Ok(secret) => {
                let fence_app = app.clone();
                ctx.sender.deliver(&ntf.spec.provider, &secret, &msg, || ctx.owns(&fence_app)).await
            }
        }
    };
    let (mark, result, outcome_for_status) = match &outcome {
        Outcome::Delivered { attempts, answer } => ("delivered", Some(Ok(answer.clone())), *attempts),
        Outcome::Failed { attempts, reason } => ("failed", Some(Err((DELIVERY_FAILED, reason.clone()))), *attempts),
        Outcome::NotSent { reason } if reason.is_empty() => ("dropped", None, 0),
        // Lost the shard mid-way: leave the claim, the next owner takes it over.
        Outcome::NotSent { .. } if !ctx.owns(&app) => return,
        Outcome::NotSent { reason } => ("failed", Some(Err((NOT_CONFIGURED, reason.clone()))), 0),
    };
    metrics::counter!(m::NOTIFICATIONS_TOTAL, m::label::PROVIDER => provider.as_str(), m::label::RESULT => mark)
        .increment(1);
    metrics::histogram!(crate::metric_names::NOTIFICATION_DURATION_SECONDS, m::label::PROVIDER => provider.as_str())
        .record(crate::notify::send::elapsed(started));
    let now = jiff::Timestamp::now();
    let value = match mark {
        "delivered" => claim::delivered(now.as_second()),
        "dropped" => claim::skipped(now.as_second()),
        _ => claim::failed(now.as_second()),
    };
    let marked = json!({"metadata": {"annotations": {&key: value}}});
    if let Err(e) = events.patch(&ev.name_any(), &PatchParams::default(), &Patch::Merge(&marked)).await {
        tracing::warn!(error = %e, event = %ev.name_any(), "marking a notification delivered");
    }
    if let Some(outcome) = result {
        let r = status::Result {
            application: app_name.clone(),
            reason: msg.reason.clone(),
            attempts: outcome_for_status,
            outcome,
        };
        write_status(ctx, ntf, &r, now).await;
    }
}

/// Whether `msg`, an Event that happened at `happened`, is a commit status its Revision's
/// latest finished attempt has overtaken ([`commit::superseded`]).
fn superseded(provider: ProviderType, msg: &Message, happened: Option<i64>, revision: Option<&Revision>) -> bool {
    let finished = revision
        .and_then(|r| r.status.as_ref())
        .and_then(|s| s.attempts.last())
        .and_then(|a| a.finished_at.as_ref())
        .map(|t| t.0.as_second());
    provider.is_commit_status()
        && happened.is_some_and(|h| commit::state(msg).is_some_and(|st| commit::superseded(st, h, finished)))
}

/// The provider Secret `name` of namespace `ns`, or why it cannot be used.
async fn secret(ctx: &Context, ns: &str, name: &str) -> Result<ProviderSecret, String> {
    let secret = Api::<Secret>::namespaced(ctx.client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|e| format!("reading Secret {ns}/{name}: {e}"))?
        .ok_or_else(|| format!("Secret {ns}/{name} not found"))?;
    let data = secret.data.unwrap_or_default();
    let text =
        |key: &str| data.get(key).and_then(|v| String::from_utf8(v.0.clone()).ok()).map(|s| s.trim().to_string());
    Ok(ProviderSecret { address: text("address"), token: text("token"), username: text("username") })
}

async fn write_status(ctx: &Context, ntf: &Notification, r: &status::Result, now: jiff::Timestamp) {
    let api = Api::<Notification>::namespaced(ctx.client.clone(), ntf.namespace().as_deref().unwrap_or_default());
    // The freshest status, so two replicas' writes keep each other's lastDelivery/lastFailure.
    let old = match api.get_opt(&ntf.name_any()).await {
        Ok(Some(n)) => n,
        _ => return,
    };
    let new = status::after(&old.status.clone().unwrap_or_default(), old.metadata.generation, r, now);
    let patch = json!({"status": new});
    if let Err(e) = api.patch_status(&ntf.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
        tracing::warn!(error = %e, notification = %ntf.name_any(), "writing a Notification's status");
    }
}
