//! The writes of a rollback (decisions in [`crate::decisions::rollback`]): requesting one for a failure
//! policy, holding the Revisions rolled back from when it completes, abandoning it, and
//! reading whether a Revision is held. Every write goes through the shard-fenced writer.

use jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::events::EventType;
use serde_json::{Value, json};

use super::Reconcile;
use super::error::Error;
use super::replica::Context;
use crate::api::application::{Application, ApplicationStatus, FailureAction, SyncState};
use crate::api::conditions;
use crate::api::names;
use crate::api::revision::reference as revision_ref;
use crate::api::revision::{self as rev, AttemptResult, Revision, RevisionPhase, RevisionStatus};
use crate::decisions::rollback::{self, Kind, Outcome, Request, Target, same_commit};

/// Whether `rs` carries the hold of a completed rollback.
pub(super) fn is_held(rs: Option<&RevisionStatus>) -> bool {
    rs.is_some_and(|s| conditions::is_true(&s.conditions, names::conditions::ROLLED_BACK))
}

/// End the hold on `rs` (the Revision is deployed again).
pub(super) fn lift(rs: &mut RevisionStatus) {
    conditions::remove(&mut rs.conditions, names::conditions::ROLLED_BACK);
}

/// The Revision `name`, if it exists.
pub(super) async fn get(ctx: &Context, ns: &str, name: &str) -> Result<Option<Revision>, Error> {
    Ok(Api::<Revision>::namespaced(ctx.client.clone(), ns).get_opt(name).await?)
}

/// Remove every `sync.kuvryn.io/rollback-*` annotation, only as this reconcile saw it: each is
/// tested for the value it had, so a request written meanwhile (a new `ksync rollback`) is left
/// for the next reconcile instead of being erased.
async fn remove_request(ctx: &Context, app: &Application, ns: &str) -> Result<(), Error> {
    let ops = removal_ops(app.annotations());
    if ops.is_empty() {
        return Ok(());
    }
    let name = app.name_any();
    let patch = json_patch::Patch(ops);
    let result = ctx
        .writer(&ctx.client, ns, &name)
        .patch::<Application, _>(Some(ns), &name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await;
    match result {
        // A test failed: the request changed since this reconcile read it.
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 422 => {
            tracing::info!(application = %name, namespace = ns, "rollback request changed meanwhile: kept");
            Ok(())
        }
        r => r.map(|_| ()).map_err(Into::into),
    }
}

/// JSON Patch operations that remove each `sync.kuvryn.io/rollback-*` annotation of
/// `annotations` only while it still has the value seen.
fn removal_ops(annotations: &std::collections::BTreeMap<String, String>) -> Vec<json_patch::PatchOperation> {
    use json_patch::{PatchOperation, RemoveOperation, TestOperation, jsonptr::PointerBuf};
    annotations
        .iter()
        .filter(|(k, _)| k.starts_with(names::annotations::ROLLBACK_PREFIX))
        .flat_map(|(k, v)| {
            let path = PointerBuf::from_tokens(["metadata", "annotations", k.as_str()]);
            [
                PatchOperation::Test(TestOperation { path: path.clone(), value: Value::String(v.clone()) }),
                PatchOperation::Remove(RemoveOperation { path }),
            ]
        })
        .collect()
}

/// Merge `annotations` (a `null` removes one) into the Application's.
async fn patch_annotations(ctx: &Context, app: &Application, ns: &str, annotations: Value) -> Result<(), Error> {
    let name = app.name_any();
    ctx.writer(&ctx.client, ns, &name)
        .patch::<Application, _>(
            Some(ns),
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": annotations}})),
        )
        .await?;
    Ok(())
}

/// Give up the pending rollback (`why`): remove the request, `RollbackAbandoned` Warning.
pub(super) async fn abandon(r: &Reconcile<'_>, why: &str) -> Result<(), Error> {
    remove_request(r.ctx, r.app, r.ns).await?;
    let note = format!("rollback abandoned, reconciling the desired revision again: {why}");
    r.events.tell(None, EventType::Warning, names::events::ROLLBACK_ABANDONED, &note);
    Ok(())
}

/// The rollback to `target` (Healthy) completed: every other Revision of commit `from` is
/// marked `Failed` with a `RolledBack` condition. Returns the held Revisions.
async fn hold(
    ctx: &Context,
    app: &Application,
    ns: &str,
    target: &str,
    from: &str,
    kind: Kind,
) -> Result<Vec<String>, Error> {
    let name = app.name_any();
    let api: Api<Revision> = Api::namespaced(ctx.client.clone(), ns);
    let list = api.list(&ListParams::default().labels(&format!("{}={name}", names::labels::APPLICATION))).await?;
    let reason = match kind {
        Kind::Manual => names::reasons::MANUAL_ROLLBACK,
        Kind::Automatic => names::reasons::ROLLBACK_COMPLETED,
    };
    let mut held = Vec::new();
    for r in list
        .items
        .iter()
        .filter(|r| r.spec.application == name && r.name_any() != target && same_commit(&r.spec.source.commit, from))
    {
        let mut rs = r.status.clone().unwrap_or_default();
        let now = Timestamp::now();
        conditions::set(
            &mut rs.conditions,
            names::conditions::ROLLED_BACK,
            conditions::Status::True,
            reason,
            &format!("rolled back to Revision {target}: not deployed again while the hold lasts"),
            r.metadata.generation,
            now,
        );
        rs.phase = RevisionPhase::Failed;
        crate::api::revision_conditions::set(&mut rs, false, now);
        super::replica::fenced(ctx, app)?;
        ctx.revisions.forget(ns, &name);
        ctx.writer(&ctx.client, ns, &name)
            .patch_status::<Revision, _>(
                Some(ns),
                &r.name_any(),
                &PatchParams::apply(names::STATUS_FIELD_MANAGER).force(),
                &Patch::Apply(json!({"apiVersion": names::API_VERSION, "kind": "Revision", "status": rs})),
            )
            .await?;
        held.push(r.name_any());
    }
    Ok(held)
}

/// A rollback failure policy asks to roll back from commit `from` to `to`.
pub(super) async fn request_automatic(
    ctx: &Context,
    app: &Application,
    ns: &str,
    to: &str,
    from: &str,
) -> Result<(), Error> {
    let annotations = json!({
        names::annotations::ROLLBACK_TO: to,
        names::annotations::ROLLBACK_FROM: from,
        names::annotations::ROLLBACK_KIND: names::annotations::ROLLBACK_KIND_AUTOMATIC,
    });
    patch_annotations(ctx, app, ns, annotations).await
}

/// Which commit this reconcile deploys, and the pending request.
pub(super) struct Choice {
    /// From [`crate::decisions::rollback::target`].
    pub target: Target,
    /// The pending, valid request.
    pub request: Option<Request>,
    /// The Revision the spec resolves to.
    pub spec_revision: String,
}

impl Choice {
    /// The commit to resolve instead of the spec's.
    pub fn pinned(&self) -> Option<&str> {
        match &self.target {
            Target::Rollback { to, .. } => Some(to),
            Target::Hold { commit, .. } => Some(commit),
            Target::Spec | Target::Lift => None,
        }
    }
}

/// Read the request (an invalid one is abandoned) and whether the spec's Revision `spec_revision`
/// is held, and choose. A hold is looked for only when the spec resolves to another Revision
/// than the one the Application last reconciled (a hold, or a new identity that may be held):
/// in the steady state this costs no request.
pub(super) async fn choose(r: &Reconcile<'_>, spec_commit: &str, spec_revision: String) -> Result<Choice, Error> {
    let Reconcile { ctx, app, ns, old, .. } = *r;
    let request = match rollback::request_of(app.annotations()) {
        None => None,
        Some(Ok(r)) => Some(r),
        Some(Err(why)) => {
            abandon(r, &why).await?;
            None
        }
    };
    let look = request.is_none()
        && old.desired_revision.as_deref().is_some_and(|d| d != spec_revision)
        && old.last_healthy_revision.is_some();
    let held = look && get(ctx, ns, &spec_revision).await?.is_some_and(|r| is_held(r.status.as_ref()));
    let running = match old.last_healthy_revision.as_deref().filter(|_| held) {
        Some(r) => get(ctx, ns, r)
            .await?
            .map(|rev| rollback::Running { revision: r.to_string(), commit: rev.spec.source.commit }),
        None => None,
    };
    let spec = rollback::Spec { commit: spec_commit.to_string(), held };
    let target = rollback::target(request.as_ref(), &spec, running.as_ref());
    Ok(Choice { target, request, spec_revision })
}

/// What the reconcile of the chosen Revision came to.
pub(super) struct Reconciled {
    /// The Revision reconciled.
    pub revision: String,
    /// Its commit.
    pub commit: String,
    /// A render, validation or source failure, before any attempt.
    pub failure: Option<rev::Failure>,
    /// The desired state it rendered (`None` when rendering failed).
    pub desired: Option<String>,
    /// Its desired state is deployed live, Healthy, and no attempt runs.
    pub healthy: bool,
}

/// After the reconcile of the chosen Revision (its status stored): complete or abandon a
/// pending rollback, and report a hold.
pub(super) async fn settle(
    r: &Reconcile<'_>,
    choice: &Choice,
    done: &Reconciled,
    rs: &RevisionStatus,
    status: &mut ApplicationStatus,
) -> Result<Option<After>, Error> {
    let Reconcile { ctx, app, ns, old, now, .. } = *r;
    match &choice.target {
        Target::Rollback { from, .. } => {
            let policy = r.policy;
            let running = rs.attempts.last().is_some_and(|a| a.result == AttemptResult::Running);
            let progress = rollback::Progress {
                healthy: done.healthy,
                failed_for_good: done.failure.as_ref().is_some_and(|f| !f.retryable),
                paused: !running
                    && crate::decisions::rollout::consecutive_failures(&rs.attempts, done.desired.as_deref())
                        >= policy.max_attempts,
            };
            let kind = choice.request.as_ref().map(|r| r.kind).unwrap_or_default();
            match rollback::outcome(&progress) {
                Outcome::Pending => {}
                Outcome::Complete => {
                    let held = hold(ctx, app, ns, &done.revision, from, kind).await?;
                    return Ok(Some(After::Completed { target: done.revision.clone(), held }));
                }
                Outcome::Abandon => {
                    let why = rs
                        .failure
                        .as_ref()
                        .or(done.failure.as_ref())
                        .map(|f| format!("Revision {} failed: {}: {}", done.revision, f.reason, f.message))
                        .unwrap_or_else(|| format!("Revision {} failed", done.revision));
                    return Ok(Some(After::Abandoned { why }));
                }
            }
        }
        Target::Hold { .. } => {
            let sync = status.sync.get_or_insert_with(Default::default);
            if sync.status == SyncState::Synced {
                sync.status = SyncState::OutOfSync;
            }
            let ready = conditions::get(&status.conditions, names::conditions::READY);
            if ready.is_none_or(|c| c.status == "True") {
                let message = format!(
                    "Revision {} is held by a rollback: Revision {} runs instead. A new commit, a changed source path, render or service account, deleting Revision {} or rolling back to it ends the hold",
                    choice.spec_revision, done.revision, choice.spec_revision
                );
                conditions::set(
                    &mut status.conditions,
                    names::conditions::READY,
                    conditions::Status::False,
                    names::reasons::ROLLED_BACK,
                    &message,
                    app.metadata.generation,
                    now,
                );
                // Unchanged since the last reconcile: keep its time, so a hold writes nothing.
                if let Some(o) = conditions::get(&old.conditions, names::conditions::READY)
                    && o.reason == names::reasons::ROLLED_BACK
                    && o.message == message
                    && o.observed_generation == app.metadata.generation
                {
                    let o = o.clone();
                    if let Some(c) = status.conditions.iter_mut().find(|c| c.type_ == names::conditions::READY) {
                        *c = o;
                    }
                }
            }
        }
        Target::Spec | Target::Lift => {}
    }
    Ok(None)
}

/// A rollback failure policy asks to roll back from the commit of `done` to the last healthy
/// Revision's when this reconcile failed the desired Revision's attempt (`old_rs` is its status
/// as stored, `rs` as this reconcile leaves it): returns `(to, from)`.
///
/// The failed attempt is the only trace of the failure, so the caller writes the request
/// (`request_automatic`) before it stores `rs`: stored first, a reconcile stopped in between (a
/// stale copy of the Application, an API error) would leave a failed attempt and no request.
pub(super) async fn failure_request(
    r: &Reconcile<'_>,
    choice: &Choice,
    done: &Reconciled,
    old_rs: &RevisionStatus,
    rs: &RevisionStatus,
    status: &ApplicationStatus,
) -> Result<Option<(String, String)>, Error> {
    let Reconcile { ctx, app, ns, .. } = *r;
    if !matches!(choice.target, Target::Spec | Target::Lift)
        || app.spec.failure_policy.action != FailureAction::Rollback
    {
        return Ok(None);
    }
    let previous = status.last_healthy_revision.clone().filter(|r| *r != done.revision);
    // Only as the Revision fails: an attempt that just failed. A render or validation
    // failure that retrying may fix (a chart pull) is retried within maxAttempts first.
    let Some(failed) = rs.attempts.last().filter(|a| {
        a.result == AttemptResult::Failed
            && old_rs.attempts.last().is_none_or(|o| o.number != a.number || o.result != a.result)
    }) else {
        return Ok(None);
    };
    let policy = r.policy;
    let for_good = done.failure.as_ref().is_some_and(|f| !f.retryable)
        || crate::decisions::rollout::consecutive_failures(&rs.attempts, None) >= policy.max_attempts;
    if failed.desired_state_hash.is_none() && !for_good {
        return Ok(None);
    }
    let Some(previous) = previous else { return Ok(None) };
    Ok(get(ctx, ns, &previous).await?.map(|prev| (prev.spec.source.commit, done.commit.clone())))
}

/// What a reconcile does to the rollback request once its status is stored.
pub(super) enum After {
    /// The rollback to `target` completed (`held` are held): remove the request.
    Completed {
        /// The Revision rolled back to.
        target: String,
        /// The Revisions held.
        held: Vec<String>,
    },
    /// Give the rollback up.
    Abandoned {
        /// Why.
        why: String,
    },
}

/// Carry out `after`.
pub(super) async fn after(r: &Reconcile<'_>, after: After) -> Result<(), Error> {
    match after {
        After::Completed { target, held } => {
            remove_request(r.ctx, r.app, r.ns).await?;
            let note = if held.is_empty() {
                format!("rolled back to Revision {target}")
            } else {
                format!("rolled back to Revision {target}; held: {}", held.join(", "))
            };
            let related = revision_ref(r.ns, &target);
            r.events.tell(Some(related), EventType::Normal, names::reasons::ROLLED_BACK, &note);
            Ok(())
        }
        After::Abandoned { why } => abandon(r, &why).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_removed_only_as_it_was_seen() {
        let seen = [
            (names::annotations::ROLLBACK_TO.to_string(), "abc1234".to_string()),
            ("example.com/other".to_string(), "kept".to_string()),
        ]
        .into();
        let ops = serde_json::to_value(json_patch::Patch(removal_ops(&seen))).unwrap();
        let path = "/metadata/annotations/sync.kuvryn.io~1rollback-to";
        assert_eq!(ops, json!([{"op": "test", "path": path, "value": "abc1234"}, {"op": "remove", "path": path}]));
        let mut doc = json!({"metadata": {"annotations": {names::annotations::ROLLBACK_TO: "abc1234", "example.com/other": "kept"}}});
        json_patch::patch(&mut doc, &json_patch::Patch(removal_ops(&seen))).unwrap();
        assert_eq!(doc, json!({"metadata": {"annotations": {"example.com/other": "kept"}}}));
        // A request written meanwhile is not erased.
        let mut newer = json!({"metadata": {"annotations": {names::annotations::ROLLBACK_TO: "def5678"}}});
        assert!(json_patch::patch(&mut newer, &json_patch::Patch(removal_ops(&seen))).is_err());
    }
}
