//! The rollout's record-keeping, at the bottom of the rollout: what an attempt, its health and
//! the plan's sync state leave on the Revision's and the Application's status, and the Events
//! they tell. Nothing here calls up into the rollout's stages.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::events::EventType;
use serde_json::Value;

use super::super::Reconcile;
use super::super::flow::{Failure, Planned, reason_const, redact};
use super::super::replica::unchanged;
use super::Rollout;
use crate::api::application::{HealthSummary, ResourceRef, SyncState, UnchangedDigest};
use crate::api::common::GroupVersionKind;
use crate::api::conditions;
use crate::api::names;
use crate::api::revision::reference as revision_ref;
use crate::api::revision::{self as rev, AttemptResult, HookPhase, RevisionHealth, RevisionPhase};
use crate::decisions::rollout::{self, Policy, is_deployed};
use crate::health;
use crate::plan::{Action as PlanAction, validate};
use crate::text::bounded;

pub(super) use crate::decisions::rollout::HEALTH_POLL;

/// Most drifted resources listed on the Application.
pub(super) const MAX_DRIFTED: usize = 50;

/// How soon a reconcile goes on after a stage changed.
pub(super) const NEXT_STAGE: Duration = Duration::from_millis(200);

pub(super) fn reference(e: &crate::plan::Entry) -> ResourceRef {
    ResourceRef {
        group: e.group.clone(),
        kind: e.kind.clone(),
        namespace: (!e.namespace.is_empty()).then(|| e.namespace.clone()),
        name: e.name.clone(),
    }
}

pub(super) fn describe(r: &ResourceRef) -> String {
    crate::api::display::object(&r.kind, r.namespace.as_deref(), &r.name)
}

pub(super) fn gvk_of(obj: &Value) -> Option<GroupVersionKind> {
    let av = obj["apiVersion"].as_str()?;
    Some(GroupVersionKind {
        group: validate::group_of(av).to_string(),
        version: av.rsplit('/').next()?.to_string(),
        kind: obj["kind"].as_str()?.to_string(),
    })
}

/// The sync state before the plan is applied: OutOfSync when it would change something.
pub(super) fn pending(planned: &Planned) -> SyncState {
    if planned.plan.changes() { SyncState::OutOfSync } else { SyncState::Synced }
}

impl Rollout<'_> {
    /// `Reconciling=True`, reason `Progressing`, with `message` (bounded).
    pub(super) fn progressing(&mut self, message: &str) {
        let message = bounded(message, 1024);
        let generation = self.app.metadata.generation;
        conditions::mark_reconciling(
            &mut self.status.conditions,
            names::reasons::PROGRESSING,
            &message,
            generation,
            self.now,
        );
    }

    /// Mark the running attempt failed.
    pub(super) fn fail_attempt(&mut self, reason: &str, message: String, retryable: bool) {
        if let Some(a) = self.rs.attempts.last_mut()
            && a.result == AttemptResult::Running
        {
            a.result = AttemptResult::Failed;
            a.finished_at = Some(Time(self.now));
            a.reason = Some(reason.to_string());
        }
        self.rs.phase = RevisionPhase::Failed;
        let no_target = crate::decisions::rollback::no_target(self.app, self.status, self.rev);
        let message = redact(&format!("{message}{no_target}"), &self.secrets);
        self.rs.failure =
            Some(rev::Failure { reason: reason.to_string(), message: bounded(&message, 4096), retryable });
    }

    /// The Revision's failure as reported on the Application, with the attempt count and the
    /// next retry.
    pub(super) fn last_failure(&self, policy: &Policy, next: Option<Timestamp>) -> Failure {
        let f = self.rs.failure.clone().unwrap_or_else(|| rev::Failure {
            reason: names::reasons::APPLY_FAILURE.to_string(),
            message: "the last attempt failed".to_string(),
            retryable: true,
        });
        let desired = self.rs.attempts.last().and_then(|a| a.desired_state_hash.as_deref());
        let failures = rollout::consecutive_failures(&self.rs.attempts, desired);
        let suffix = rollout::attempts_note(failures, policy, next);
        Failure {
            reason: reason_const(&f.reason),
            message: bounded(&format!("{}{suffix}", f.message), 4096),
            retryable: f.retryable,
        }
    }

    /// Counts the Application's managed kinds from what exists.
    pub(super) fn record_kinds(&mut self, planned: &Planned, live: &BTreeMap<String, Value>, managed_left: &[Value]) {
        let mut kinds: BTreeSet<(String, String, String)> = BTreeSet::new();
        for o in live.values().chain(managed_left.iter()) {
            if let Some(k) = gvk_of(o) {
                kinds.insert((k.group, k.kind, k.version));
            }
        }
        // Desired objects just applied are in `live`; keep recorded kinds that the lists could
        // not see (a kind no longer served) out.
        let _ = planned;
        let mut seen = BTreeSet::new();
        self.status.managed_kinds = kinds
            .into_iter()
            .filter(|(g, k, _)| seen.insert((g.clone(), k.clone())))
            .map(|(group, kind, version)| GroupVersionKind { group, version, kind })
            .collect();
    }

    pub(super) fn record_health(&mut self, summary: &health::Summary) {
        self.rs.health = Some(RevisionHealth {
            status: summary.status,
            healthy: summary.healthy,
            progressing: summary.progressing,
            degraded: summary.degraded,
            message: (!summary.message.is_empty()).then(|| bounded(&summary.message, 1024)),
        });
        self.status.health = Some(HealthSummary {
            status: summary.status,
            message: (!summary.message.is_empty()).then(|| bounded(&summary.message, 1024)),
        });
    }

    pub(super) fn set_sync(&mut self, state: SyncState, planned: &Planned) {
        let sync = self.status.sync.get_or_insert_with(Default::default);
        sync.status = state;
        sync.plan_digest = Some(planned.plan.digest.clone());
        sync.drifted = if state == SyncState::Drifted {
            planned
                .plan
                .entries
                .iter()
                .filter(|e| !e.is_hook() && e.action != PlanAction::Unchanged)
                .take(MAX_DRIFTED)
                .map(reference)
                .collect()
        } else {
            Vec::new()
        };
        self.vouch = state == SyncState::Synced;
    }

    /// `status.sync.unchanged` from what the plans kept ([`unchanged::vouch`]), once the plan
    /// found the Application `Synced` ([`Rollout::vouch`]) and the status is written for
    /// something else: the record is never a write of its own, so it is not computed (every
    /// desired object serialized again) for a drift check that writes nothing.
    ///
    /// It is set only when every desired object is kept. Otherwise what was recorded stays: a
    /// replica that takes the Application over checks it against the objects it reads, so an
    /// older record costs at most their dry runs, and a write is not spent on clearing it. The
    /// same digest keeps its time, so a real check of an object again writes nothing. A check
    /// time that cannot be told records nothing: a record never claims a later check than the
    /// real one.
    pub(super) fn record_unchanged(&mut self, planned: &Planned) {
        if self.old.same_but_unchanged(self.status) {
            return;
        }
        let known = self.ctx.unchanged.get(&format!("{}/{}", self.ns, self.name));
        let Some((digest, checked)) = unchanged::vouch(&known, &planned.desired) else { return };
        let Some(sync) = self.status.sync.as_mut() else { return };
        if sync.unchanged.as_ref().is_some_and(|u| u.digest == digest) {
            return;
        }
        let Ok(age) = jiff::SignedDuration::try_from(checked.elapsed()) else { return };
        let Ok(checked_at) = Timestamp::now().checked_sub(age) else { return };
        sync.unchanged = Some(UnchangedDigest { digest, checked_at: checked_at.to_string() });
    }

    /// Whether this reconcile notices drift of the deployed desired state anew
    /// ([`rollout::drift_is_new`]).
    pub(super) fn drift_is_new(&self, planned: &Planned) -> bool {
        let before = self.old.sync.as_ref().map_or(SyncState::Unknown, |s| s.status);
        let deployed = self.rollback.is_none() && is_deployed(self.rs, &planned.hash);
        let failures = rollout::consecutive_failures(&self.rs.attempts, Some(&planned.hash));
        rollout::drift_is_new(deployed, planned.plan.changes(), before, failures)
    }

    /// When to look again at a rollout waiting for health until `deadline`, `watched` when
    /// every resource it waits for is in a running watch of the shard
    /// ([`rollout::health_poll`]; over budget when this reconcile's HealthChecks went over
    /// theirs, [`health::cel::Budget`]).
    pub(super) fn health_poll(&self, watched: bool, deadline: Timestamp) -> Duration {
        let until = self.now.duration_until(deadline).unsigned_abs();
        let until = if deadline > self.now { until } else { Duration::ZERO };
        rollout::health_poll(self.cel.exhausted(), watched, until)
    }

    /// `now + spec.health.timeout`: the deadline of a stage that starts now.
    pub(super) fn health_deadline(&self, policy: &Policy) -> Timestamp {
        let timeout = jiff::SignedDuration::try_from(policy.health_timeout).unwrap_or(jiff::SignedDuration::MAX);
        self.now.checked_add(timeout).unwrap_or(Timestamp::MAX)
    }

    /// A `Progressing` Event about the running attempt: `Revision R attempt N: {message}`.
    pub(super) fn wave_event(&self, message: &str) {
        self.attempt_event(EventType::Normal, names::reasons::PROGRESSING, message);
    }

    pub(super) fn attempt_event(&self, type_: EventType, reason: &str, message: &str) {
        let related = revision_ref(self.ns, self.rev);
        let number = self.rs.attempts.last().map(|a| a.number).unwrap_or(1);
        let note = format!("Revision {} attempt {number}: {message}", self.rev);
        self.events.tell(Some(related.clone()), type_, reason, &note);
    }

    /// Whether this attempt runs hooks: not when it repairs drift of a deployed desired state
    /// (self-heal), but on a rollback to one.
    pub(super) fn runs_hooks(&self, planned: &Planned) -> bool {
        self.rollback.is_some() || !crate::decisions::rollout::is_deployed(self.rs, &planned.hash)
    }

    /// Record that the attempt now runs the hooks of `phase` at `wave`.
    pub(super) fn enter_hooks(&mut self, phase: HookPhase, wave: i32) {
        if let Some(a) = self.rs.attempts.last_mut() {
            a.hook = Some(phase);
            a.wave = Some(wave);
            a.wave_started_at = Some(Time(self.now));
        }
        self.rs.phase = RevisionPhase::Progressing;
    }
}

impl<'a> Rollout<'a> {
    /// What this reconcile started from.
    pub(super) fn reconcile(&self) -> Reconcile<'a> {
        Reconcile {
            ctx: self.ctx,
            app: self.app,
            ns: self.ns,
            name: self.name,
            old: self.old,
            now: self.now,
            events: self.events,
            policy: self.policy,
        }
    }
}
