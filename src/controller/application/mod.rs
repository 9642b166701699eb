//! The Application controller: one reconcile runs the spec's pipeline top to bottom, one file
//! per stage; this file is the reconcile ([`reconcile`]), which enters each stage once, and
//! what passes through it (`Reconcile`, `flow.rs`). `run.rs` runs it per shard
//! (`shards.rs`), and `replica/` holds what the replica's reconciles share ([`Context`]).
//!
//! # Layout, bottom up
//! 1. `flow.rs` (what passes between stages), `error.rs`, and `replica/`: the [`Context`] and
//!    the caches, watches and held Events it owns.
//! 2. `status.rs`: the one writer of the Application's status and Events.
//! 3. The stages below. None takes from another (the test command checks it with
//!    `scripts/import-graph --stages`); their decisions are in [`crate::decisions`].
//! 4. This file, then `run.rs` and `shards.rs`.
//!
//! # Stages
//! 1. `spec.suspend`: `Ready=False` (`Suspended`), nothing else. Deletion: `finalize.rs`.
//! 2. `source.rs`: the Repository's `status.revision.commit`, or `spec.source.revision` (a
//!    commit, branch or tag of the same repository, resolved at most once per the Repository's
//!    interval), made present in the shared Git cache with the Repository's credentials (no
//!    network when it already is for those credentials; fetched again when only other
//!    credentials fetched it, so the remote decides).
//! 3. `revision.rs`: the Revision of the identity (Application, commit, path, render settings,
//!    service account), created when missing, owned by the Application; the previous one
//!    superseded; history beyond `spec.history.limit` deleted (oldest first, never the desired
//!    one nor held ones).
//! 4. `desired.rs`: materialize the source path, read Helm `valuesFrom` and render, both as the
//!    Application's service account (impersonation); validate against API discovery; label
//!    every object as managed by the Application.
//! 5. `planning.rs` with [`crate::live`]: the live objects, server-side dry-run applies of those that
//!    exist (conflicts), and the managed objects as the service account (a drift check takes
//!    the managed inventory from the shard's watch caches, and plans again, reading every
//!    desired object, before anything is written; a plan that may be acted on takes a kind
//!    from the caches only as [`crate::decisions::inventory`] allows); the plan
//!    ([`crate::plan::build`]), stored bounded on the Revision with `spec.desiredStateHash`.
//! 6. `gate.rs` (spec.dependsOn), then the rollout (`rollout/`: apply, prune, waves and hooks,
//!    health, diagnosis, retries, drift; decisions in [`crate::decisions::rollout`]);
//!    `render_failure.rs` when the render failed, `rolling_back.rs` for rollbacks.
//! 7. `status.rs`: `desiredRevision`, `sync`, conditions; a Warning Event whenever the failure
//!    message changes.
//!
//! # Guarantees
//! - Every write goes through [`Context::writer`] ([`crate::apply::Writer`]): it is sent only
//!   while this replica owns the Application's shard, checked right before the request leaves.
//! - A render, validation or API failure is reported on the Revision (`status.failure`, phase
//!   `Failed`) and on the Application (`Ready=False` with the reason: `SourceFailure`,
//!   `RenderFailure`, `ValidationFailure`, `ApplyFailure` for what the service account may
//!   not read), with every problem listed; retrying failures are retried, others wait for a
//!   change. Nothing is applied or pruned after a failure before the plan.
//! - The controller never uses its own permissions for the Application's objects or values.
//! - Secret values (from `valuesFrom` Secrets and desired Secrets) never reach status, Events
//!   or logs: messages are redacted, and plans show only which keys changed.

mod desired;
mod error;
mod events;
mod finalize;
mod flow;
mod gate;
mod planning;
mod render_failure;
mod replica;
mod revision;
mod rolling_back;
mod rollout;
mod run;
pub mod shards;
mod source;
mod status;

use crate::decisions::{self, approval, dependencies, rollback};
pub use error::Error;
pub use replica::progress;
pub use replica::{Context, DEFAULT_SHARD, Settings, shard_of};
pub use run::{run, run_shard};

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use tracing::Instrument as _;

use super::with_jitter;
use crate::api::application::{Application, ApplicationStatus};
use crate::api::conditions;
use crate::api::names;
use crate::api::revision::{self as rev, AttemptResult, Revision};
use crate::plan::revision as identity;
use flow::{Failure, Planned};
use replica::{fenced, may_write};
use rollout::Rollout;
use status::write_status;

/// When an Application is looked at again after its status write was refused as stale.
const STALE_RETRY: Duration = Duration::from_millis(500);

/// When an Application is looked at again after this replica could not write for its shard.
const NOT_OWNER_RETRY: Duration = Duration::from_secs(1);

/// What one reconcile of an Application starts from, the same for every stage: the replica's
/// context, the Application as read, its status as stored when the reconcile began, and the
/// clock. The status being built is passed apart (`&mut`), as each stage changes it.
#[derive(Clone, Copy)]
struct Reconcile<'a> {
    pub ctx: &'a Context,
    pub app: &'a Application,
    pub ns: &'a str,
    pub name: &'a str,
    pub old: &'a crate::api::application::ApplicationStatus,
    pub now: jiff::Timestamp,
    /// The Application's rollout policy ([`decisions::rollout::policy_of`]), computed once.
    pub policy: &'a decisions::rollout::Policy,
    /// The Events this reconcile tells, published by `status.rs`.
    pub events: &'a events::Events,
}

/// Reconcile one Application (see the module documentation).
pub async fn reconcile(app: Arc<Application>, ctx: Arc<Context>) -> Result<Action, Error> {
    let events = events::Events::default();
    let result = reconcile_once(app.clone(), ctx.clone(), &events).await;
    status::publish_events(&ctx, &app, &events).await;
    result
}

/// `app` as the reconcile sees it: an approval or rollback requester recorded under the
/// manager's own identity does not count ([`approval::discount_manager`]).
fn discount_manager(ctx: &Context, app: Arc<Application>) -> Arc<Application> {
    let Some(manager) = ctx.manager_identity.as_deref() else { return app };
    let Some(kept) = approval::discount_manager(app.annotations(), manager) else { return app };
    tracing::warn!(
        application = %app.name_any(),
        namespace = app.namespace().unwrap_or_default(),
        manager,
        "an approval or rollback request recorded under the manager's own identity does not count"
    );
    let mut copy = (*app).clone();
    copy.metadata.annotations = Some(kept);
    Arc::new(copy)
}

async fn reconcile_once(app: Arc<Application>, ctx: Arc<Context>, events: &events::Events) -> Result<Action, Error> {
    // Not the copy our last status write replaced (see `written`).
    let app = discount_manager(&ctx, ctx.written.latest(app));
    let ns = app.namespace().ok_or(Error::NoNamespace)?;
    let name = app.name_any();
    let old = app.status.clone().unwrap_or_default();
    let policy = decisions::rollout::policy_of(&app);
    let r = Reconcile {
        ctx: &ctx,
        app: &app,
        ns: &ns,
        name: &name,
        old: &old,
        now: Timestamp::now(),
        events,
        policy: &policy,
    };
    let mut status = old.clone();
    status.observed_generation = app.metadata.generation;
    if let Some(at) = app.annotations().get(names::annotations::RECONCILE_REQUESTED_AT) {
        status.last_handled_reconcile_at = Some(at.clone());
    }

    // Fencing: a requeue may fire after the shard moved to another replica. If it did, this
    // shard's controller is stopped soon and the requeue with it; if the Lease is only late
    // to renew, the Application is looked at again in a moment, never dropped.
    if !may_write(&ctx, &app) {
        return Ok(Action::requeue(NOT_OWNER_RETRY));
    }

    // Step 1: deletion, the finalizer, suspension.
    if app.metadata.deletion_timestamp.is_some() {
        return match finalize::finalize(&r, &mut status).await? {
            finalize::Finalized::NotHeld => Ok(Action::await_change()),
            finalize::Finalized::Failed => stored(&r, &status, Action::requeue(finalize::RETRY)).await,
            finalize::Finalized::Done => {
                // Told while the Application is still there.
                status::publish_events(&ctx, &app, events).await;
                finalize::release(&r).await?;
                Ok(Action::await_change())
            }
        };
    }
    if finalize::keep_finalizer(&app, &ctx, &ns).await? {
        // The change triggers a reconcile of the updated Application.
        return Ok(Action::await_change());
    }
    if app.spec.suspend {
        let message = "reconciliation is suspended (spec.suspend): nothing is applied or pruned";
        conditions::mark_suspended(&mut status.conditions, message, app.metadata.generation, r.now);
        return stored(&r, &status, Action::await_change()).await;
    }

    // spec.dependsOn: while a dependency is not ready, nothing is applied.
    let hold = match gate::check(&r, &mut status).await {
        gate::Gate::Free => None,
        gate::Gate::Unknown => return Ok(Action::requeue(Duration::from_secs(2))),
        gate::Gate::Checked(v) => Some(v).filter(|v| !v.ready()),
    };
    // Steps 2 to 8, then the Application's status.
    let (action, after) = deploy(&r, &mut status, hold.as_ref()).await?;
    if !write_status(&r, &status).await? {
        return Ok(Action::requeue(STALE_RETRY));
    }
    // A completed or abandoned rollback's request is removed only once the status it follows
    // from is stored.
    if let Some(after) = after {
        rolling_back::after(&r, after).await?;
    }
    Ok(action)
}

/// `then` once `status` is stored; a look again soon when the write was refused as stale.
async fn stored(r: &Reconcile<'_>, status: &ApplicationStatus, then: Action) -> Result<Action, Error> {
    Ok(if write_status(r, status).await? { then } else { Action::requeue(STALE_RETRY) })
}

/// The commit this reconcile deploys: its resolved source, how it was chosen (the spec's, a
/// pending rollback's target, or the Revision a hold keeps running), and its Revision's name.
struct Target {
    source: flow::Source,
    choice: rolling_back::Choice,
    revision: String,
}

/// The name of `app`'s Revision at `commit` ([`identity::name`]).
fn revision_name(app: &Application, source: &flow::Source) -> String {
    identity::name(&identity::Identity {
        application: &app.name_any(),
        commit: &source.commit,
        path: &app.spec.source.path,
        render: &app.spec.source.render,
        service_account: &app.spec.service_account_name,
        charts: &identity::charts_digest(&source.charts.versions()),
    })
}

/// Step 2: the source, and the commit deployed. `Err(action)`: a fetch failed, and was reported.
async fn target(r: &Reconcile<'_>, status: &mut ApplicationStatus) -> Result<Result<Target, Action>, Error> {
    let Reconcile { ctx, app, ns, name, .. } = *r;
    let retry_soon = Action::requeue(with_jitter(Duration::from_secs(30), name));
    let source = match source::resolve_source(app, ctx, ns, None).instrument(tracing::info_span!("fetch")).await? {
        Ok(s) => s,
        Err(failure) => {
            failure.report(r, status, !failure.retryable);
            return Ok(Err(if failure.retryable { retry_soon } else { Action::requeue(ctx.settings.resync) }));
        }
    };
    // A pending rollback deploys its target; a held Revision leaves the last healthy one running.
    let choice = rolling_back::choose(r, &source.commit, revision_name(app, &source)).await?;
    let source = match choice.pinned() {
        None => source,
        Some(commit) => match source::resolve_source(app, ctx, ns, Some(commit))
            .instrument(tracing::info_span!("fetch", pinned = commit))
            .await?
        {
            Ok(s) => s,
            Err(failure) => {
                // A failed fetch of the target keeps the request: tried again after a while.
                failure.report(r, status, false);
                return Ok(Err(retry_soon));
            }
        },
    };
    let revision = revision_name(app, &source);
    Ok(Ok(Target { source, choice, revision }))
}

/// Steps 4 and 5: render the desired state of `source` and plan it, from the service account's
/// lists, or with `from_caches`, from the watch caches, made again from the lists when
/// `from_caches` says the plan would be acted on (a plan from the caches never is).
async fn render_and_plan(
    r: &Reconcile<'_>,
    source: &flow::Source,
    from_caches: Option<&(dyn Fn(&Planned) -> bool + Sync)>,
) -> Result<Result<Planned, Failure>, Error> {
    let Reconcile { ctx, app, ns, name, .. } = *r;
    let desired = match desired::desired(r, source).instrument(tracing::info_span!("render")).await? {
        Err(failure) => return Ok(Err(failure)),
        Ok(desired) => desired,
    };
    let fresh = |desired| {
        planning::plan(app, ctx, ns, name, desired, false)
            .instrument(tracing::info_span!("plan", from_watch_caches = false))
    };
    let Some(acted_on) = from_caches else { return fresh(desired).await };
    let planned = planning::plan(app, ctx, ns, name, desired.clone(), true)
        .instrument(tracing::info_span!("plan", from_watch_caches = true))
        .await?;
    match &planned {
        Ok(p) if !p.fresh && acted_on(p) => fresh(desired).await,
        _ => Ok(planned),
    }
}

/// Steps 4 and 5 for the Revision the Application already desires (`rev`, whose status is being
/// built as `rs`). A drift check (it is deployed and unchanged) and an attempt waiting for
/// health read the managed-object inventory from the watch caches, and do not read again the
/// objects whose resourceVersion has not moved: an attempt's objects are read as the service
/// account once, when it starts (or applies its next wave or leaves its hooks), and its
/// inventory listed then unless [`crate::decisions::inventory`] lets the caches answer.
async fn plan_desired(
    r: &Reconcile<'_>,
    target: &Target,
    rev: &Revision,
    rs: &rev::RevisionStatus,
    hold: Option<&dependencies::Verdict>,
) -> Result<Result<Planned, Failure>, Error> {
    let Reconcile { app, old, now, .. } = *r;
    let same_revision = old.desired_revision.as_deref() == Some(target.revision.as_str());
    let waiting = rs
        .attempts
        .last()
        .is_some_and(|a| a.result == AttemptResult::Running && a.hook.is_none_or(|h| h == rev::HookPhase::Sync));
    let drift_check =
        same_revision && (waiting || rev.status.as_ref().is_some_and(|s| s.deployed_desired_state_hash.is_some()));
    // A plan from the watch caches is never acted on: when it would start a rollout (self-heal,
    // a changed desired state) or may apply an attempt's next wave, or end its hooks and apply
    // its first, the plan is made again from what the service account reads (and lists, unless
    // decisions::inventory lets the caches answer) now.
    let next_wave = rs.attempts.last().is_some_and(|a| {
        a.result == AttemptResult::Running && (a.wave.is_some() || a.hook.is_some_and(|h| h != rev::HookPhase::Sync))
    });
    let again = |p: &Planned| {
        let situation = decisions::rollout::Situation {
            app,
            old,
            revision: &target.revision,
            status: rs,
            desired: &p.hash,
            plan_digest: &p.plan.digest,
            changes: p.plan.changes(),
            now,
            rollback: target.choice.request.as_ref(),
            policy: r.policy,
        };
        hold.is_none()
            && (next_wave || matches!(decisions::rollout::step(&situation).0, decisions::rollout::Step::Start { .. }))
    };
    render_and_plan(r, &target.source, drift_check.then_some(&again as &(dyn Fn(&Planned) -> bool + Sync))).await
}

/// Steps 2 to 8 (see the module documentation). `hold`: the dependencies are not ready, so
/// nothing may be applied; only the Revision already desired is looked at (health, drift), and
/// a new one is not even rendered. Returns what to do next and what follows a stored status.
async fn deploy(
    r: &Reconcile<'_>,
    status: &mut ApplicationStatus,
    hold: Option<&dependencies::Verdict>,
) -> Result<(Action, Option<rolling_back::After>), Error> {
    let Reconcile { ctx, app, name, old, now, .. } = *r;
    let target = match target(r, status).await? {
        Ok(target) => target,
        Err(action) => return Ok((action, None)),
    };
    let rev_name = target.revision.as_str();
    tracing::Span::current().record("revision", rev_name).record("commit", target.source.commit.as_str());
    let waits = Action::requeue(with_jitter(ctx.settings.resync, name));
    if let Some(verdict) = hold
        && old.desired_revision.as_deref() != Some(rev_name)
    {
        // Not even rendered: the kinds it uses may come with a dependency.
        dependencies::report_wait(app, status, verdict, now);
        return Ok((waits, None));
    }
    fenced(ctx, app)?;
    // A Revision the Application does not desire yet is rendered and planned first (as the
    // desired Revision would be: from the service account's lists), so it is created with its
    // desiredStateHash rather than patched with it.
    let new = status.desired_revision.as_deref() != Some(rev_name);
    let early = if new { Some(render_and_plan(r, &target.source, None).await?) } else { None };
    let hash = early.as_ref().and_then(|p| p.as_ref().ok()).map(|p| p.hash.as_str());
    let rev = revision::enter(r, status, &target.source, rev_name, new, hash).await?;
    let old_rs = rev.status.clone().unwrap_or_default();
    let mut rs = old_rs.clone();
    rs.observed_generation = rev.metadata.generation;
    if matches!(target.choice.target, rollback::Target::Lift | rollback::Target::Rollback { .. }) {
        rolling_back::lift(&mut rs);
    }
    let rollback_target = matches!(target.choice.target, rollback::Target::Rollback { .. });
    let render_attempt = match render_failure::step(r, &rs, rollback_target) {
        decisions::rollout::RenderStep::Render { attempt } => attempt,
        decisions::rollout::RenderStep::Wait { at } => {
            // Backing off after a render failure: nothing is rendered, and nothing changes. As
            // on the Application (`render_failure::wait`), only a failure retrying may fix is
            // retried rather than stalled.
            let retrying = rs.failure.as_ref().is_none_or(|f| f.retryable);
            revision::store_status(r, rev_name, &old_rs, &mut rs, retrying).await?;
            return Ok((render_failure::wait(r, status, &rs, at).await, None));
        }
    };
    let result = match early {
        Some(result) => result,
        None => plan_desired(r, &target, &rev, &rs, hold).await?,
    };
    let mut reconciled = rolling_back::Reconciled {
        revision: rev_name.to_string(),
        commit: target.source.commit.clone(),
        failure: None,
        desired: result.as_ref().ok().map(|p| p.hash.clone()),
        healthy: false,
    };
    let action = match (result, hold) {
        // The desired Revision failed validation while a dependency is not ready (a kind a
        // dependency serves is gone for a moment): a wait, not a failure.
        (Err(failure), Some(verdict)) if failure.reason == names::reasons::VALIDATION_FAILURE => {
            dependencies::report_wait(app, status, verdict, now);
            waits
        }
        (Err(mut failure), _) => {
            failure.message.push_str(rollback::no_target(app, status, rev_name));
            let action = render_failure::failed(r, status, &mut rs, failure, render_attempt).await;
            reconciled.failure = rs.failure.clone();
            action
        }
        (Ok(planned), _) => {
            revision::record_desired_hash(r, &rev, &planned.hash).await?;
            let rollout = Rollout::new(r, rev_name, status, &mut rs, hold, target.choice.request.as_ref());
            let (action, healthy) = rollout.deploy(planned, &target.source.commit).await?;
            reconciled.healthy = healthy;
            action
        }
    };
    let after = record(r, status, &target, &reconciled, &old_rs, rs).await?;
    Ok((action, after))
}

/// Step 9: what the reconcile leaves behind besides the Application's status: a failure
/// policy's rollback request, the Revision's status, the rollback settled, history trimmed.
async fn record(
    r: &Reconcile<'_>,
    status: &mut ApplicationStatus,
    target: &Target,
    reconciled: &rolling_back::Reconciled,
    old_rs: &rev::RevisionStatus,
    mut rs: rev::RevisionStatus,
) -> Result<Option<rolling_back::After>, Error> {
    let Reconcile { ctx, app, ns, old, .. } = *r;
    // A failure policy's request before the failed attempt it follows from is stored (see
    // `failure_request`).
    if let Some((to, from)) = rolling_back::failure_request(r, &target.choice, reconciled, old_rs, &rs, status).await? {
        rolling_back::request_automatic(ctx, app, ns, &to, &from).await?;
    }
    // The Revision's status before `settle`: a rollback that completes holds other Revisions
    // only once the attempt that completed it is recorded. A failed Revision is retried when
    // the Application says it keeps trying (`Reconciling`, not `Stalled`).
    let retrying = conditions::is_true(&status.conditions, names::conditions::RECONCILING);
    revision::store_status(r, &target.revision, old_rs, &mut rs, retrying).await?;
    let after = rolling_back::settle(r, &target.choice, reconciled, &rs, status).await?;
    // History changes only with a new desired Revision or a new limit: a drift check lists no
    // Revisions, and neither does an Application's first Revision (nothing to trim: Revisions
    // of an earlier Application of that name are owned by it and go with it).
    if old.desired_revision.is_some()
        && (old.desired_revision.as_deref() != Some(target.revision.as_str())
            || old.observed_generation != app.metadata.generation)
    {
        revision::retain_history(ctx, app, ns, &target.revision, app.spec.history.limit).await?;
    }
    Ok(after)
}
