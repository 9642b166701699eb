//! The status stage: the one writer of what a reconcile tells about the Application, its Events
//! (told by the stages as data, [`super::events`]) and its status (the write that is refused when
//! computed from a stale copy).

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::ObjectRef;
use serde_json::json;

use super::Reconcile;
use super::error::Error;
use super::events::Events;
use super::replica::{Context, fenced};
use crate::api::application::{Application, ApplicationStatus};
use crate::api::names;

/// Publish the Events a reconcile of `app` told ([`super::events`]), in order: before each
/// status write ([`write_status`]), before the finalizer goes, and once the reconcile ends.
pub(super) async fn publish_events(ctx: &Context, app: &Application, events: &Events) {
    for told in events.take() {
        publish(ctx, app, told.related.as_ref(), told.type_, &told.reason, &told.note).await;
    }
}

async fn publish(
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

/// Write `new` unless it equals the status the reconcile started from, after the Events told
/// so far. `Ok(false)`: refused, computed from a stale copy. A redeploy request this reconcile announced ([`Context::redeploys`]) is recorded as
/// `lastHandledRedeployAt`, and forgotten once written; while a request waits to be taken up,
/// the write's own watch event triggers a reconcile.
pub(super) async fn write_status(r: &Reconcile<'_>, new: &ApplicationStatus) -> Result<bool, Error> {
    let Reconcile { ctx, app, old, events, .. } = *r;
    publish_events(ctx, app, events).await;
    let key = ObjectRef::from_obj(app);
    let announced = ctx.redeploys.announced(&key);
    let with_redeploy;
    let new = match announced {
        Some(at) if new.last_handled_redeploy_at.as_ref() != Some(&at) => {
            with_redeploy = ApplicationStatus { last_handled_redeploy_at: Some(at), ..new.clone() };
            &with_redeploy
        }
        _ => new,
    };
    // A request not taken up yet (it waits for a running attempt): this write's own watch
    // event triggers the next reconcile, which may take it up, instead of the resync.
    let waiting = crate::plan::redeploy::requested(app.annotations())
        .ok()
        .flatten()
        .is_some_and(|at| new.last_handled_redeploy_at.as_ref() != Some(&at));
    let written = write_if_changed(ctx, app, old, new, !waiting).await;
    if matches!(written, Ok(true)) {
        ctx.redeploys.recorded(&key, new.last_handled_redeploy_at.as_ref());
    }
    written
}

async fn write_if_changed(
    ctx: &Context,
    app: &Application,
    old: &ApplicationStatus,
    new: &ApplicationStatus,
    quiet: bool,
) -> Result<bool, Error> {
    if old.same_but_unchanged(new) {
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
            ctx.written.record(app.resource_version(), written, quiet);
            Ok(true)
        }
        Err(kube::Error::Api(s)) if s.code == 409 => {
            tracing::debug!(application = %app.name_any(), "status computed from a stale copy; reconciling the newer one");
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}
