//! Render and validation failures of a Revision whose rollout is due (not deployed, or a
//! rollback's target) are attempts, governed by `maxAttempts` and the backoff as a failed apply
//! is: each is recorded as a failed attempt without a desired state, the next render waits for
//! the backoff, and once the attempts are used up a failing render counts nothing more
//! ([`crate::decisions::rollout::render_step`]). A deployed Revision whose re-render fails (a drift check)
//! is not being rolled out: its failure is reported and the live state left alone.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::Action;

use super::Reconcile;
use super::flow::{Failure, reason_const};
use super::replica::Context;
use crate::api::application::{Application, ApplicationStatus};
use crate::api::revision::{self as rev, Attempt, AttemptResult, RevisionPhase, RevisionStatus};
use crate::controller::with_jitter;
use crate::decisions::rollout::{self, Policy, RenderStep};
use crate::text::bounded;

/// Whether the Revision with status `rs` is being rolled out, so a render failure is an
/// attempt. `rollback_target`: it is a pending rollback's target.
pub(super) fn step(r: &Reconcile<'_>, rs: &RevisionStatus, rollback_target: bool) -> RenderStep {
    let Reconcile { app, old, now, policy, .. } = *r;
    if rs.deployed_desired_state_hash.is_some() && !rollback_target {
        return RenderStep::Render { attempt: None };
    }
    rollout::render_step(rs, policy, now, crate::decisions::rollout::retry_requested(app, old))
}

/// The render of this reconcile failed with `failure` (its message says why, and when a
/// rollback failure policy has nothing to return to): record it on the Revision, as failed
/// attempt `attempt` when it is one, report it on the Application with its attempt count, and
/// say when to look again.
pub(super) async fn failed(
    r: &Reconcile<'_>,
    status: &mut ApplicationStatus,
    rs: &mut RevisionStatus,
    failure: Failure,
    attempt: Option<i32>,
) -> Action {
    let Reconcile { ctx, app, now, policy, .. } = *r;
    // A deployed Revision stays what it is: the live state is untouched.
    if rs.deployed_desired_state_hash.is_none() {
        rs.phase = RevisionPhase::Failed;
    }
    rs.failure = Some(rev::Failure {
        reason: failure.reason.to_string(),
        message: bounded(&failure.message, 4096),
        retryable: failure.retryable,
    });
    let Some(number) = attempt else {
        // Not an attempt: a drift check, a render during a running attempt, or attempts used up.
        let counted = rollout::consecutive_failures(&rs.attempts, None);
        let paused = rs.deployed_desired_state_hash.is_none() && counted >= policy.max_attempts;
        let message = if paused { note(&failure, counted, policy, None) } else { failure.message.clone() };
        let reported = Failure { message, ..failure };
        reported.report(r, status, paused || !reported.retryable);
        return again(ctx, app, &reported, paused);
    };
    rollout::push(
        &mut rs.attempts,
        Attempt {
            number,
            started_at: Time(now),
            finished_at: Some(Time(now)),
            result: AttemptResult::Failed,
            reason: Some(failure.reason.to_string()),
            plan_digest: None,
            wave: None,
            wave_started_at: None,
            hook: None,
            desired_state_hash: None,
        },
    );
    match rollout::render_step(rs, policy, now, false) {
        RenderStep::Wait { at } => wait(r, status, rs, at).await,
        RenderStep::Render { .. } => {
            let failures = rollout::consecutive_failures(&rs.attempts, None);
            let reported = Failure { message: note(&failure, failures, policy, None), ..failure };
            reported.report(r, status, true);
            again(ctx, app, &reported, true)
        }
    }
}

/// Backing off after a render failure until `at`: report it with when the next attempt renders.
pub(super) async fn wait(
    r: &Reconcile<'_>,
    status: &mut ApplicationStatus,
    rs: &RevisionStatus,
    at: Timestamp,
) -> Action {
    let Reconcile { now, policy, .. } = *r;
    let failure = match &rs.failure {
        Some(f) => Failure { reason: reason_const(&f.reason), message: f.message.clone(), retryable: f.retryable },
        None => Failure::new(crate::api::names::reasons::RENDER_FAILURE, "the last render failed", true),
    };
    let failures = rollout::consecutive_failures(&rs.attempts, None);
    let reported = Failure { message: note(&failure, failures, policy, Some(at)), ..failure };
    // Retried in case its inputs change (a valuesFrom Secret, a CRD), but a failure retrying
    // cannot fix is Stalled: it needs a change.
    let stalled = !reported.retryable;
    reported.report(r, status, stalled);
    Action::requeue(now.duration_until(at).unsigned_abs().max(Duration::from_millis(200)))
}

fn note(failure: &Failure, failures: u32, policy: &Policy, next: Option<Timestamp>) -> String {
    bounded(&format!("{}{}", failure.message, rollout::attempts_note(failures, policy, next)), 4096)
}

/// When to look again at a render that failed and is not backing off: soon when retrying may
/// fix it, else at the resync interval (a paused render is looked at again only then).
fn again(ctx: &Context, app: &Application, failure: &Failure, paused: bool) -> Action {
    let name = kube::ResourceExt::name_any(app);
    if failure.retryable && !paused {
        Action::requeue(with_jitter(Duration::from_secs(30), &name))
    } else {
        Action::requeue(with_jitter(ctx.settings.resync, &name))
    }
}
