//! How an attempt ends: failed (after its SyncFail hooks), held while a dependency is not ready,
//! or succeeded.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::Action;

use super::super::error::Error;
use super::super::flow::Planned;
use super::Rollout;
use super::record::{NEXT_STAGE, pending};
use crate::api::application::SyncState;
use crate::api::conditions;
use crate::api::names;
use crate::api::revision::reference as revision_ref;
use crate::api::revision::{AttemptResult, RevisionPhase};
use crate::controller::with_jitter;
use crate::decisions::rollout::{self, Policy, Step};
use crate::plan::hooks::{self, Next};
use crate::text::bounded;

impl Rollout<'_> {
    /// The running attempt failed (recorded): run its SyncFail hooks first when it has any
    /// ([`Rollout::sync_fail`]), else report the failure, and when to retry.
    pub(super) async fn failed_at_once(&mut self, planned: &Planned, policy: &Policy) -> Result<Action, Error> {
        if let Some(action) = self.sync_fail(planned) {
            return Ok(action);
        }
        let desired = self.rs.attempts.last().and_then(|a| a.desired_state_hash.clone());
        let at =
            rollout::decide(self.rs, desired.as_ref().unwrap_or(&planned.hash), false, true, true, policy, self.now);
        let failure = self.last_failure(policy, None);
        let stalled = matches!(at, Step::Paused);
        failure.report(&self.reconcile(), self.status, stalled);
        self.set_sync(pending(planned), planned);
        Ok(match at {
            Step::Retry { at } => {
                Action::requeue(self.now.duration_until(at).unsigned_abs().max(Duration::from_millis(200)))
            }
            _ => Action::requeue(with_jitter(self.ctx.settings.resync, self.name)),
        })
    }

    /// The running attempt would apply its next stage (a wave, or the first after its PreSync
    /// hooks) but the dependencies are not ready: it waits, and that stage's deadline starts
    /// when it is applied. `None` when the dependencies are ready.
    pub(super) fn hold_stage(&mut self, planned: &Planned) -> Option<Action> {
        let verdict = self.hold?;
        self.rs.phase = RevisionPhase::Progressing;
        self.set_sync(pending(planned), planned);
        crate::decisions::dependencies::report_wait(self.app, self.status, verdict, self.now);
        Some(Action::requeue(with_jitter(self.ctx.settings.resync, self.name)))
    }

    /// A failed attempt with SyncFail hooks to run: it runs them before it ends (`Some`, the
    /// requeue), unless it is running them already, is a self-heal, or has none (`None`).
    pub(super) fn sync_fail(&mut self, planned: &Planned) -> Option<Action> {
        let current = self.rs.attempts.last().and_then(|a| a.hook);
        let Next::Hooks(phase, wave) = hooks::on_failure(&planned.plan, current) else { return None };
        if !self.runs_hooks(planned) {
            return None;
        }
        if let Some(a) = self.rs.attempts.last_mut() {
            a.result = AttemptResult::Running;
            a.finished_at = None;
        }
        self.enter_hooks(phase, wave);
        let failure = self.rs.failure.as_ref().map(|f| format!("{}: {}", f.reason, f.message)).unwrap_or_default();
        let message = bounded(
            &format!("Revision {}: the attempt failed ({failure}); running its SyncFail hooks", self.rev),
            1024,
        );
        self.progressing(&message);
        self.set_sync(pending(planned), planned);
        Some(Action::requeue(NEXT_STAGE))
    }

    /// The attempt is done: everything Healthy, every hook run.
    pub(super) async fn succeed(&mut self, planned: &Planned) -> Action {
        if let Some(a) = self.rs.attempts.last_mut() {
            a.result = AttemptResult::Succeeded;
            a.finished_at = Some(Time(self.now));
        }
        self.rs.phase = RevisionPhase::Healthy;
        self.rs.failure = None;
        // What the attempt applied: a desired state that changed meanwhile is not deployed yet.
        let applied = self.rs.attempts.last().and_then(|a| a.desired_state_hash.clone());
        let behind = applied.as_ref().is_some_and(|h| *h != planned.hash);
        let deployed = self.rs.deployed_desired_state_hash.as_deref();
        if crate::decisions::rollout::repairs_drift(deployed, applied.as_deref(), self.rollback.is_some()) {
            metrics::counter!(crate::metric_names::DRIFT_REPAIRED_TOTAL).increment(1);
        }
        self.rs.deployed_desired_state_hash = Some(applied.unwrap_or_else(|| planned.hash.clone()));
        self.status.last_healthy_revision = Some(self.rev.to_string());
        self.set_sync(SyncState::Synced, planned);
        // The plan against the live state is now the carried-out one: recorded as such, the next
        // drift check (or the replica a shard moves to) finds nothing to write.
        let (plan, desired, hooks) = (planned.plan.clone(), planned.desired.clone(), planned.hooks.clone());
        let large = crate::offload::Size::default().values(desired.iter()).values(hooks.iter()).large();
        let done = crate::offload::offload_if(large, move || crate::plan::carried_out(&plan, &desired, &hooks)).await;
        if let Some(sync) = self.status.sync.as_mut() {
            sync.plan_digest = Some(done.digest);
        }
        let message = format!("Revision {} is Healthy", self.rev);
        conditions::mark_ready(
            &mut self.status.conditions,
            names::reasons::SUCCEEDED,
            &message,
            self.app.metadata.generation,
            self.now,
        );
        self.events.lifecycle(revision_ref(self.ns, self.rev), names::reasons::SUCCEEDED, &message);
        if behind {
            // The newer desired state gets its attempt now, not at the next resync.
            return Action::requeue(NEXT_STAGE);
        }
        Action::requeue(with_jitter(self.ctx.settings.resync, self.name))
    }
}
