//! The finalize stage: `deletionPolicy: DeleteManagedResources` holds the Application with a
//! finalizer until what it manages is deleted.
//!
//! Not `kube::runtime::finalizer`: its finalizer patches go through an `Api` whose requests
//! cannot carry the shard fence (every write here must), and it puts the finalizer on every
//! object, while `Orphan` needs none.

use std::collections::BTreeSet;
use std::time::Duration;

use jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use serde_json::{Value, json};

use super::context::{Context, Error, STALE_RETRY, fenced, may_write};
use super::live;
use super::status::{Failure, report_failure, write_status};
use crate::api::application::{Application, ApplicationStatus, DeletionPolicy};
use crate::api::names;
use crate::plan::{self, inventory, validate};

pub(super) fn has_finalizer(app: &Application) -> bool {
    app.finalizers().iter().any(|f| f == names::finalizers::APPLICATION)
}

pub(super) async fn set_finalizers(
    ctx: &Context,
    app: &Application,
    ns: &str,
    finalizers: Vec<String>,
) -> Result<(), Error> {
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
pub(super) async fn keep_finalizer(app: &Application, ctx: &Context, ns: &str) -> Result<bool, Error> {
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
pub(super) async fn finalize(
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

pub(super) async fn delete_managed(app: &Application, ctx: &Context, ns: &str, name: &str) -> Result<(), String> {
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
