//! Running the Application controller: one kube `Controller` per shard, fed by the
//! Applications' own watch and every trigger that concerns them (managed objects, their Pods,
//! Repositories, HealthChecks, dependencies), each reconcile in one of the replica's slots.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use kube::ResourceExt;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher::{self, watcher};
use tracing::Instrument as _;

use super::NOT_OWNER_RETRY;
use super::error::Error;
use super::reconcile;
use super::replica::healthchecks;
use super::replica::{self, Context};
use crate::api::application::Application;
use crate::api::names;
use crate::api::repository::Repository;
use crate::controller::EachWatchBacksOff;
use crate::watch::managed::{self as watched, WithStatus};

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
    let hc_events = ctx.healthchecks().events.subscribe();
    ctx.healthchecks().ready().await;
    let config = match shard {
        Some(k) => watcher::Config::default().labels(&format!("{}={}", names::labels::SHARD, k)),
        None => watcher::Config::default(),
    };
    let selector = watched::selector(shard);
    let (store, writer) = reflector::store();
    // Set once the shard stops: reconciles still waiting for a slot then give up (the
    // controller waits for those in flight before it returns).
    let (stop_tx, stopping) = tokio::sync::watch::channel(false);
    // Its Applications' Revisions may have been written by another replica since they were kept.
    ctx.revisions.clear();
    let started = ctx.progress.shard_started(shard, store.clone());
    let noted = |r: ObjectRef<Application>, ctx: &Context| {
        ctx.progress.triggered(&r);
        r
    };
    let c = ctx.clone();
    // Nothing reads an Application's managedFields: the store keeps it without them.
    let own = watcher(apps, config)
        .default_backoff()
        .modify(|a| a.metadata.managed_fields = None)
        .reflect(writer)
        .touched_objects()
        .filter(move |a| {
            // Our own status write coming back: the store has it, no reconcile needed.
            let own = a.as_ref().is_ok_and(|a| {
                let r = ObjectRef::from_obj(a);
                let ours = c.written.observed(&r, a.resource_version().as_deref());
                if !ours {
                    c.progress.triggered(&r);
                }
                ours
            });
            std::future::ready(!own)
        });
    let controller = Controller::for_stream(own, store.clone()).trigger_backoff(EachWatchBacksOff).with_config(
        // Every due reconcile starts and waits for one of the replica's slots (`queue`), so
        // the cap is per replica and fair across namespaces.
        controller::Config::default()
            .concurrency(0)
            // A burst of changes (a rollout's status updates) is one reconcile.
            .debounce(Duration::from_millis(200)),
    );
    let (c1, c2) = (ctx.clone(), ctx.clone());
    let (c3, deps_store) = (ctx.clone(), store.clone());
    let current = store.clone();
    let (c5, pods_store) = (ctx.clone(), store.clone());
    let (c6, echo_store) = (ctx.clone(), store.clone());
    let (c4, hc_store) = (ctx.clone(), store.clone());
    let extra = watched::extra_triggers(client, ctx.kinds.subscribe(), selector.clone(), ctx.inventory.clone(), shard)
        .map(move |r| noted(r, &c1));
    // A Repository change: the Applications in this shard that read it, as their source or for a
    // values file (all of them if events were missed).
    let repo_triggers = received(repo_events).flat_map(move |repo: Option<Arc<Repository>>| {
        let apps: Vec<_> = store
            .state()
            .into_iter()
            .filter(|a| {
                repo.as_ref().is_none_or(|r| a.namespace() == r.namespace() && a.spec.uses_repository(&r.name_any()))
            })
            .map(|a| noted(ObjectRef::from_obj(&*a), &c2))
            .collect();
        tracing::debug!(repository = ?repo.as_ref().map(|r| r.name_any()), namespace = ?repo.as_ref().and_then(|r| r.namespace()), ?shard, applications = apps.len(), "a Repository change triggers Applications");
        futures_util::stream::iter(apps)
    });
    // A HealthCheck changed: the Applications in this shard that manage its kind (all of them if
    // events were missed). Its namespace is the managed objects', not necessarily the
    // Application's, so the kind alone selects.
    let hc_triggers = received(hc_events).flat_map(move |changed: Option<healthchecks::Changed>| {
        let apps: Vec<_> = hc_store
            .state()
            .into_iter()
            .filter(|a| {
                changed.as_ref().is_none_or(|c| {
                    a.status
                        .as_ref()
                        .is_some_and(|s| s.managed_kinds.iter().any(|k| k.group == c.group && k.kind == c.kind))
                })
            })
            .map(|a| noted(ObjectRef::from_obj(&*a), &c4))
            .collect();
        futures_util::stream::iter(apps)
    });
    // A dependency changed: its dependents in this shard (those with dependencies if events
    // were missed).
    let dep_events = ctx.dependencies.triggers.subscribe();
    let dep_triggers = received(dep_events).flat_map(move |r: Option<ObjectRef<Application>>| {
        let apps: Vec<_> = match r {
            Some(r) => deps_store.get(&r).map(|_| noted(r, &c3)).into_iter().collect(),
            None => deps_store
                .state()
                .into_iter()
                .filter(|a| !a.spec.depends_on.is_empty())
                .map(|a| noted(ObjectRef::from_obj(&*a), &c3))
                .collect(),
        };
        futures_util::stream::iter(apps)
    });
    // A managed object's event held while our apply of it was sent, that was not our apply's.
    let echo_triggers = received(ctx.echoes.triggers()).flat_map(move |r: Option<ObjectRef<Application>>| {
        let apps: Vec<_> = match r {
            Some(r) => echo_store.get(&r).map(|_| noted(r, &c6)).into_iter().collect(),
            // Missed: every Application of the shard.
            None => echo_store.state().iter().map(|a| noted(ObjectRef::from_obj(&**a), &c6)).collect(),
        };
        futures_util::stream::iter(apps)
    });
    // A Pod of a managed workload: its Application, when this shard has it. The workload is
    // found through the Pod's owner chain in this shard's store of managed workloads.
    let pods = crate::watch::pods::events(&ctx.client);
    let pod_inventory = ctx.inventory.clone();
    let pod_owner = move |p: PartialObjectMeta<Pod>| {
        let w = crate::watch::pods::workload_of(&p.metadata)?;
        let workload = pod_inventory.get(shard, "apps", w.kind, &w.namespace, &w.name)?;
        let r = watched::application_in(workload.annotations.as_ref()?)?;
        pods_store.get(&r)?;
        Some(noted(r, &c5))
    };
    let inv = &ctx.inventory;
    controller
        .watches_stream(watched::touched::<WithStatus<Deployment>>(&ctx.client, &selector, inv, shard), tracked(&ctx))
        .watches_stream(watched::touched::<WithStatus<StatefulSet>>(&ctx.client, &selector, inv, shard), tracked(&ctx))
        .watches_stream(watched::touched::<WithStatus<DaemonSet>>(&ctx.client, &selector, inv, shard), tracked(&ctx))
        .watches_stream(
            watched::touched::<PartialObjectMeta<ConfigMap>>(&ctx.client, &selector, inv, shard),
            tracked(&ctx),
        )
        .watches_stream(
            watched::touched::<PartialObjectMeta<Secret>>(&ctx.client, &selector, inv, shard),
            tracked(&ctx),
        )
        .watches_stream(
            watched::touched::<PartialObjectMeta<Service>>(&ctx.client, &selector, inv, shard),
            tracked(&ctx),
        )
        .watches_stream(pods, pod_owner)
        .reconcile_on(extra)
        .reconcile_on(repo_triggers)
        .reconcile_on(hc_triggers)
        .reconcile_on(dep_triggers)
        .reconcile_on(echo_triggers)
        .graceful_shutdown_on(async move {
            shutdown.await;
            let _ = stop_tx.send(true);
        })
        .run(move |app, ctx| reconcile_tracked(app, ctx, stopping.clone(), current.clone()), error_policy, ctx.clone())
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "application reconcile");
            }
        })
        .await;
    ctx.inventory.forget_stopped();
    ctx.progress.shard_stopped(shard, started);
}

/// Maps a managed object's watch event to its Application, counting the trigger. Our own
/// apply coming back ([`echoes`]) triggers nothing; an event while our apply is sent waits for
/// its answer.
fn tracked<M: kube::Resource<DynamicType = ()>>(
    ctx: &Arc<Context>,
) -> impl Fn(M) -> Option<ObjectRef<Application>> + Send + Sync + 'static {
    let ctx = ctx.clone();
    move |m: M| {
        let id = format!("{}/{}/{}/{}", M::group(&()), M::kind(&()), m.namespace().unwrap_or_default(), m.name_any());
        let r = watched::owner_app(&m);
        if ctx.echoes.is_echo(&id, m.resource_version().as_deref(), r.as_ref()) {
            return None;
        }
        let r = r?;
        ctx.progress.triggered(&r);
        Some(r)
    }
}

/// The longest a reconcile waits for its shard's Lease to be renewed before it is requeued.
const OWNER_WAIT: Duration = Duration::from_secs(30);

/// [`reconcile`] in one of the replica's slots ([`crate::controller::queue`]), recorded for the
/// queue and staleness metrics. It reconciles the shard store's copy as it is once the slot is
/// free, not the copy it was handed when it became due.
async fn reconcile_tracked(
    app: Arc<Application>,
    ctx: Arc<Context>,
    mut stopping: tokio::sync::watch::Receiver<bool>,
    store: reflector::Store<Application>,
) -> Result<Action, Error> {
    let r = ObjectRef::from_obj(&*app);
    // A label naming another shard than the Application's own (a tenant's edit, a smaller shard
    // count's) put it in this shard: its owner gives it its own, fenced by this shard, and the
    // owner of that one reconciles it (the leader's labeller sees only invalid labels).
    if let Some(fence) = &ctx.fence
        && let Some(labelled) = app.labels().get(names::labels::SHARD).and_then(|s| s.parse::<u32>().ok())
    {
        let ns = r.namespace.as_deref().unwrap_or_default();
        let own = replica::shard_of(&ctx, ns, &r.name);
        if labelled != own {
            let fence = fence.clone();
            let writer = crate::apply::Writer::new(
                ctx.client.clone(),
                Some(crate::client::Fenced::new(move || fence.until(labelled))),
            );
            crate::controller::labeller::relabel(&writer, ns, &r.name, own).await?;
            return Ok(Action::await_change());
        }
    }
    // A shard whose Lease is late to renew: wait for the renewal (or the shard to stop) before
    // taking a slot, instead of retrying every second.
    if let Some(fence) = &ctx.fence {
        let shard = replica::shard_of(&ctx, r.namespace.as_deref().unwrap_or_default(), &r.name);
        if fence.owns(shard).is_none() {
            tokio::select! {
                () = fence.owned(shard) => {}
                _ = stopping.wait_for(|s| *s) => return Ok(Action::await_change()),
                () = tokio::time::sleep(OWNER_WAIT) => return Ok(Action::requeue(NOT_OWNER_RETRY)),
            }
        }
    }
    let finishing = finishing(&ctx.written, store.get(&r), app);
    let slot = tokio::select! {
        slot = ctx.queue.enter(r.namespace.as_deref().unwrap_or_default(), finishing) => slot,
        // The shard stops: whoever owns it next reconciles this Application.
        _ = stopping.wait_for(|s| *s) => return Ok(Action::await_change()),
    };
    // The wait for a slot can be seconds in a cold start, and the copy handed over when the
    // reconcile became due may predate our last status write by then. `written` matches only the
    // copy that write was computed from, and forgets it once the store shows a newer one: so a
    // copy older than the store's would be reconciled as is, and its status write refused (409)
    // and planned again. Gone from the store: deleted, or its shard label moved.
    let Some(app) = store.get(&r) else { return Ok(Action::await_change()) };
    ctx.progress.started(&r);
    let started = Instant::now();
    let span = tracing::info_span!(
        "reconcile",
        application = %r.name,
        namespace = r.namespace.as_deref().unwrap_or_default(),
        revision = tracing::field::Empty,
        commit = tracing::field::Empty,
        trace_id = tracing::field::Empty,
    );
    if let Some(id) = crate::telemetry::traces::trace_id(&span) {
        span.record("trace_id", id);
    }
    // Boxed: every Application due (all of a shard's at once when it starts) has one of these
    // futures waiting for a slot above, and inline each would also carry the whole state of a
    // reconcile (kilobytes) while it waits.
    let ns = r.namespace.as_deref().unwrap_or_default();
    let result =
        crate::controller::queue::holding(slot, ns, Box::pin(reconcile(app, ctx.clone())).instrument(span.clone()))
            .await;
    if result.is_ok() {
        ctx.failures.succeeded(&r);
    }
    ctx.progress.finished(&r);
    metrics::histogram!(crate::metric_names::RECONCILE_DURATION_SECONDS).record(started.elapsed().as_secs_f64());
    let label = match &result {
        Ok(_) => "ok",
        Err(e) => e.metric_label(),
    };
    metrics::counter!(crate::metric_names::RECONCILES_TOTAL, crate::metric_names::label::RESULT => label).increment(1);
    span.in_scope(|| match &result {
        Ok(action) => tracing::debug!(result = label, next = ?action, "reconciled"),
        Err(e) => tracing::debug!(result = label, error = %e, "reconciled"),
    });
    result
}

/// Whether a reconcile finishes an attempt in flight ([`crate::controller::queue::finishing`]),
/// judged on the newest copy this replica knows when it asks for a slot: the store's (`now`),
/// or the copy our own status write returned that the store does not show yet. The copy handed
/// over when the reconcile became due can predate that write (under load the Application
/// watch lags behind our writes by seconds), and a reconcile classified on it would wait behind
/// all new work although it only has to look at its objects' health.
fn finishing(written: &replica::written::Written, now: Option<Arc<Application>>, handed: Arc<Application>) -> bool {
    crate::controller::queue::finishing(&written.latest(now.unwrap_or(handed)))
}

/// What a broadcast receiver gets, until its sender is gone: `None` when messages were missed.
fn received<T: Clone + Send + 'static>(
    rx: tokio::sync::broadcast::Receiver<T>,
) -> impl futures_util::Stream<Item = Option<T>> + Send {
    futures_util::stream::unfold(rx, |mut rx| async move {
        use tokio::sync::broadcast::error::RecvError;
        match rx.recv().await {
            Ok(t) => Some((Some(t), rx)),
            Err(RecvError::Lagged(_)) => Some((None, rx)),
            Err(RecvError::Closed) => None,
        }
    })
}

/// A failed reconcile is retried after a backoff that doubles with each failure in a row
/// ([`crate::controller::retry_after`]); a shard that moved is looked at again soon.
fn error_policy(app: Arc<Application>, error: &Error, ctx: Arc<Context>) -> Action {
    if matches!(error, Error::NotOwner) {
        return Action::requeue(NOT_OWNER_RETRY);
    }
    // Not a failure: the next plan reads what the last one took as absent.
    if matches!(error, Error::Presumed) {
        return Action::requeue(std::time::Duration::ZERO);
    }
    let failures = ctx.failures.failed(ObjectRef::from_obj(&*app));
    let retry = crate::controller::with_jitter(crate::controller::retry_after(failures), &app.name_any());
    tracing::warn!(application = %app.name_any(), namespace = ?app.namespace(), error = %error, failures, retry_in = ?retry, "reconcile failed");
    Action::requeue(retry)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Application at resourceVersion `rv`, with `Ready` `Unknown`/`Progressing` when `progressing`.
    fn app(rv: &str, progressing: bool) -> Application {
        let (status, reason) = if progressing { ("Unknown", "Progressing") } else { ("True", "Healthy") };
        replica::written::test_app(
            rv,
            serde_json::json!({"conditions": [{"type": "Ready", "status": status, "reason": reason, "message": "",
                                               "lastTransitionTime": "2026-12-06T10:00:00Z"}]}),
        )
    }

    #[test]
    fn a_reconcile_is_classified_on_the_newest_copy_the_replica_knows() {
        // (case, handed over, the store's copy now, our status write not shown yet
        // (computed from, returned), finishing)
        // A copy: (resourceVersion, Progressing).
        type Copy = (&'static str, bool);
        type Case = (&'static str, Copy, Option<Copy>, Option<(&'static str, Copy)>, bool);
        let cases: &[Case] = &[
            (
                "our Progressing write not watched yet",
                ("10", false),
                Some(("10", false)),
                Some(("10", ("11", true))),
                true,
            ),
            ("the store shows our write, the handed copy predates it", ("10", false), Some(("11", true)), None, true),
            ("the store shows the attempt ended since it became due", ("10", true), Some(("12", false)), None, false),
            ("someone wrote after our write", ("10", false), Some(("12", false)), Some(("10", ("11", true))), false),
            ("gone from the store: the handed copy", ("10", true), None, None, true),
            ("no attempt anywhere", ("10", false), Some(("10", false)), None, false),
        ];
        for (what, handed, now, write, want) in cases {
            let written = replica::written::Written::default();
            if let Some((before, (rv, progressing))) = write {
                written.record(Some((*before).to_string()), app(rv, *progressing), false);
            }
            let now = now.map(|(rv, p)| Arc::new(app(rv, p)));
            let got = finishing(&written, now, Arc::new(app(handed.0, handed.1)));
            assert_eq!(got, *want, "{what}");
        }
    }
}
