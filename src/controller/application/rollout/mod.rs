//! One reconcile's rollout work on a planned Revision: start an attempt (apply, prune), watch
//! its health until the timeout, retry or pause after failures, and once deployed observe
//! health and drift. Decisions come from [`crate::decisions::rollout`]; this module does the I/O
//! and keeps the Revision's and the Application's status.
//!
//! One `impl Rollout` over these files, bottom up; a method calls only methods of its own file
//! or of a lower row (the test command checks it with `scripts/import-graph --calls-down`):
//!
//! 1. `record.rs`: what an attempt, its health and the sync state leave on the statuses, and the
//!    Events they tell.
//! 2. `summary.rs`: the managed resources' health, read and summarized (with `diagnosis.rs`);
//!    `applying.rs`: one group of objects applied (prune runs with the last wave);
//!    `observed.rs`: the first look after an apply, awaiting the workloads' controllers.
//! 3. `end.rs`: how an attempt ends (failed after its SyncFail hooks, held, succeeded).
//! 4. `stages.rs`: the order of an attempt's stages (sync hooks and waves).
//! 5. This file: the step the Revision is at ([`Rollout::run`]), an attempt's start, drift.

mod applying;
mod diagnosis;
mod end;
mod observed;
mod record;
mod stages;
mod summary;

use record::{describe, pending, reference};

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use serde_json::Value;

use super::Reconcile;
use super::error::Error;
use super::flow::{Failure, Planned};
use super::replica::Context;
use crate::api::application::{Application, ApplicationStatus, SyncState};
use crate::api::common::HealthStatus;
use crate::api::conditions;
use crate::api::names;
use crate::api::revision::reference as revision_ref;
use crate::api::revision::{self as rev, Attempt, AttemptResult, RevisionPhase, RevisionStatus};
use crate::controller::with_jitter;
use crate::decisions::approval;
use crate::decisions::rollout::{self, Policy, Step, is_deployed};
use crate::health;
use crate::text::bounded;

/// The rollout work of one reconcile.
pub(super) struct Rollout<'a> {
    pub ctx: &'a Context,
    pub app: &'a Application,
    pub ns: &'a str,
    pub name: &'a str,
    pub rev: &'a str,
    pub old: &'a ApplicationStatus,
    pub status: &'a mut ApplicationStatus,
    pub rs: &'a mut RevisionStatus,
    pub now: Timestamp,
    /// The Events the reconcile tells.
    pub events: &'a super::events::Events,
    /// The Application's rollout policy.
    pub policy: &'a Policy,
    /// Strings no message may show (Secret values).
    pub secrets: Vec<String>,
    /// The dependencies are not ready: nothing is applied (no attempt starts, no next wave).
    pub hold: Option<&'a crate::decisions::dependencies::Verdict>,
    /// The pending rollback request this reconcile deploys the target of.
    pub rollback: Option<&'a crate::decisions::rollback::Request>,
    /// What this reconcile may still spend on HealthCheck expressions.
    pub cel: health::cel::Budget,
    /// The plan found the Application `Synced`: `status.sync.unchanged` may be recorded if the
    /// status is written for something else ([`Rollout::record_unchanged`]).
    pub vouch: bool,
    /// This reconcile applied a group whose health has not had its first look yet
    /// ([`Rollout::first_look`]).
    pub applied: bool,
}

impl<'a> Rollout<'a> {
    /// The rollout of Revision `rev` (whose status is being built as `rs`) in reconcile `r`.
    pub(super) fn new(
        r: &Reconcile<'a>,
        rev: &'a str,
        status: &'a mut ApplicationStatus,
        rs: &'a mut RevisionStatus,
        hold: Option<&'a crate::decisions::dependencies::Verdict>,
        rollback: Option<&'a crate::decisions::rollback::Request>,
    ) -> Rollout<'a> {
        Rollout {
            ctx: r.ctx,
            app: r.app,
            ns: r.ns,
            name: r.name,
            rev,
            old: r.old,
            status,
            rs,
            now: r.now,
            events: r.events,
            policy: r.policy,
            secrets: Vec::new(),
            hold,
            rollback,
            cel: health::cel::Budget::per_reconcile(),
            vouch: false,
            applied: false,
        }
    }

    /// Step 8 on `planned` (of `commit`): recorded on the Revision and the Application, then the
    /// step the Revision is at ([`Rollout::run`]). Returns what to do next and whether the
    /// Revision is now deployed, Healthy and done.
    pub(super) async fn deploy(mut self, planned: Planned, commit: &str) -> Result<(Action, bool), Error> {
        // Until an attempt starts, the plan it would apply; from then on, the plan the last
        // attempt applied (set as it starts), which drift checks leave alone.
        if self.rs.attempts.is_empty() || self.rs.plan.is_none() {
            self.rs.plan = Some(planned.stored.clone());
        }
        let mut sync = self.status.sync.clone().unwrap_or_default();
        sync.revision = Some(self.rev.to_string());
        sync.commit = Some(commit.to_string());
        self.status.sync = Some(sync);
        self.secrets = planned.secrets.clone();
        let hash = planned.hash.clone();
        let action = self.run(&planned).await?;
        if self.vouch {
            self.record_unchanged(&planned);
        }
        let healthy = self.rs.phase == RevisionPhase::Healthy
            && is_deployed(self.rs, &hash)
            && self.status.last_healthy_revision.as_deref() == Some(self.rev)
            && self.rs.attempts.last().is_none_or(|a| a.result != AttemptResult::Running);
        Ok((action, healthy))
    }

    /// Run the step the Revision is at. An attempt starts only on a plan made from a fresh list
    /// (`planned.fresh`): otherwise nothing is written and `Err(Error::Stale)` asks for one.
    pub async fn run(&mut self, planned: &Planned) -> Result<Action, Error> {
        let policy = self.policy.clone();
        let changes = planned.plan.changes();
        // A failed attempt running its SyncFail hooks keeps its failure.
        let sync_fail = self.rs.attempts.last().is_some_and(|a| {
            a.result == AttemptResult::Running && a.hook == Some(crate::api::revision::HookPhase::SyncFail)
        });
        let failed = rollout::consecutive_failures(&self.rs.attempts, Some(&planned.hash)) > 0;
        self.rs.failure = self.rs.failure.take().filter(|_| sync_fail || failed);
        let (step, approval) = rollout::step(&rollout::Situation {
            app: self.app,
            old: self.old,
            revision: self.rev,
            status: self.rs,
            desired: &planned.hash,
            plan_digest: &planned.plan.digest,
            changes: planned.plan.changes(),
            now: self.now,
            rollback: self.rollback,
            policy: self.policy,
        });
        if let Some(verdict) = self.hold
            && matches!(step, Step::Start { .. })
        {
            return self.wait_for_dependencies(planned, &planned.live, changes, verdict).await;
        }
        if matches!(step, Step::Start { .. }) && !planned.fresh {
            return Err(Error::Stale);
        }
        // Before the attempt is recorded: its own start is not a failure of the desired state.
        let new_drift = self.drift_is_new(planned);
        let mut live = planned.live.clone();
        let mut managed_left: Vec<Value> = planned.managed.clone();
        // The inventory is what exists: recomputed every time from the cluster.
        self.record_kinds(planned, &live, &managed_left);
        let deadline = match step {
            Step::AwaitApproval => {
                self.rs.phase = RevisionPhase::AwaitingApproval;
                // The plan shown for approval (`ksync plan`, `ksync sync`) is the one waiting.
                self.rs.plan = Some(planned.stored.clone());
                self.set_sync(pending(planned), planned);
                let mut message = format!(
                    "Revision {} waits for approval (spec.sync.automatic is false): {}; approve plan {} with ksync sync",
                    self.rev,
                    counts(&planned.stored),
                    planned.plan.digest
                );
                if let Some(why) = unused(&approval) {
                    message = format!("{message}; {why}");
                }
                conditions::mark_waiting(
                    &mut self.status.conditions,
                    names::reasons::AWAITING_APPROVAL,
                    &message,
                    self.app.metadata.generation,
                    self.now,
                );
                if let Some(why) = unused(&approval) {
                    let changed = matches!(approval, approval::Verdict::TargetChanged { .. });
                    self.approval_stale(&why, changed).await;
                }
                self.observe_health(planned, &live, false).await;
                return Ok(Action::requeue(with_jitter(self.ctx.settings.resync, self.name)));
            }
            Step::Retry { at } => {
                self.rs.phase = RevisionPhase::Failed;
                self.set_sync(pending(planned), planned);
                let failure = self.last_failure(&policy, Some(at));
                failure.report(&self.reconcile(), self.status, false);
                // Between attempts the evidence moves on (a crash loop backs off): kept current.
                let pods = self.pods_of(planned, &live, None).await;
                let summary = self.summarize(planned, &live, &pods, true, None).await;
                self.status.diagnosis = diagnosis::diagnose(planned, &live, &summary).await;
                let wait = self.now.duration_until(at).unsigned_abs();
                return Ok(Action::requeue(wait.max(Duration::from_millis(200))));
            }
            Step::Paused => {
                self.rs.phase = RevisionPhase::Failed;
                self.set_sync(pending(planned), planned);
                let failure = self.last_failure(&policy, None);
                failure.report(&self.reconcile(), self.status, true);
                self.observe_health(planned, &live, false).await;
                return Ok(Action::requeue(with_jitter(self.ctx.settings.resync, self.name)));
            }
            Step::Observe => {
                return self.observe(planned, &live, changes).await;
            }
            Step::Watch { deadline, .. } => deadline,
            Step::Start { number } => {
                if let approval::Verdict::Approved(a) = approval {
                    if a.source.as_deref() == Some(approval::MANUAL_ROLLBACK) {
                        let note = format!(
                            "Revision {}: the rollback requested by {} approves plan {}",
                            self.rev, a.user, a.plan_digest
                        );
                        let related = revision_ref(self.ns, self.rev);
                        let reason = names::events::ROLLBACK_APPROVED;
                        self.events.tell(Some(related.clone()), EventType::Normal, reason, &note);
                    }
                    self.rs.approval = Some(rev::Approval { attempt: Some(number), ..a });
                }
                let started = self.start(number, planned, &policy, &mut live, &mut managed_left).await?;
                if new_drift {
                    // A self-heal (or an approved repair) of drift no reconcile reported yet.
                    metrics::counter!(crate::metric_names::DRIFT_DETECTED_TOTAL).increment(1);
                }
                match started {
                    Some(deadline) => deadline,
                    None => return self.failed_at_once(planned, &policy).await,
                }
            }
        };
        self.watch(planned, &mut live, &mut managed_left, deadline, &policy).await
    }

    /// An attempt would start but the dependencies are not ready: a deployed desired state is
    /// observed (a self-heal waits), anything else waits without an attempt.
    async fn wait_for_dependencies(
        &mut self,
        planned: &Planned,
        live: &BTreeMap<String, Value>,
        changes: bool,
        verdict: &crate::decisions::dependencies::Verdict,
    ) -> Result<Action, Error> {
        if is_deployed(self.rs, &planned.hash) {
            return self.observe(planned, live, changes).await;
        }
        self.set_sync(pending(planned), planned);
        self.observe_health(planned, live, false).await;
        crate::decisions::dependencies::report_wait(self.app, self.status, verdict, self.now);
        Ok(Action::requeue(with_jitter(self.ctx.settings.resync, self.name)))
    }

    /// An approval request starts nothing (`why`): an `ApprovalStale` Event, and a
    /// `RollbackTargetChanged` Warning when a rollback's target `changed`, once per message.
    async fn approval_stale(&self, why: &str, changed: bool) {
        let ready = |c: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition]| {
            c.iter().find(|c| c.type_ == names::conditions::READY).map(|c| c.message.clone())
        };
        if ready(&self.old.conditions) == ready(&self.status.conditions) {
            return;
        }
        let related = revision_ref(self.ns, self.rev);
        let message = format!("Revision {}: {why}", self.rev);
        self.events.tell(Some(related.clone()), EventType::Normal, names::events::APPROVAL_STALE, &message);
        if changed {
            let reason = names::events::ROLLBACK_TARGET_CHANGED;
            self.events.tell(Some(related.clone()), EventType::Warning, reason, &message);
        }
    }

    /// Start attempt `number`: apply and prune. `Some(deadline)` when the attempt is running,
    /// `None` when it failed (recorded).
    async fn start(
        &mut self,
        number: i32,
        planned: &Planned,
        policy: &Policy,
        live: &mut BTreeMap<String, Value>,
        managed_left: &mut Vec<Value>,
    ) -> Result<Option<Timestamp>, Error> {
        let previous = self.status.last_healthy_revision.clone().filter(|r| r != self.rev);
        if previous.is_some() {
            self.rs.previous_healthy_revision = previous;
        }
        rollout::push(
            &mut self.rs.attempts,
            Attempt {
                number,
                started_at: Time(self.now),
                finished_at: None,
                result: AttemptResult::Running,
                reason: None,
                plan_digest: Some(planned.plan.digest.clone()),
                wave: None,
                wave_started_at: None,
                hook: None,
                desired_state_hash: Some(planned.hash.clone()),
            },
        );
        // The plan this attempt applies stays on the Revision: later drift checks do not replace it.
        self.rs.plan = Some(planned.stored.clone());
        self.rs.phase = RevisionPhase::Applying;
        let approved_by = match &self.rs.approval {
            Some(a) if a.attempt == Some(number) => format!(" (plan {} approved by {})", a.plan_digest, a.user),
            Some(a) if a.attempt.is_some_and(|n| n < number) && !policy.automatic => {
                format!(" (under the approval of {})", a.user)
            }
            _ => String::new(),
        };
        self.events.lifecycle(
            revision_ref(self.ns, self.rev),
            names::reasons::PROGRESSING,
            &format!("Revision {} attempt {number}: applying {}{}", self.rev, counts(&planned.stored), approved_by),
        );
        // Conflict policy fail: conflicts block the rollout; nothing is forced.
        let blocking: Vec<String> = planned
            .plan
            .entries
            .iter()
            .filter(|e| !e.conflicts.is_empty() && !planned.adopt)
            .flat_map(|e| {
                let what = describe(&reference(e));
                e.conflicts.iter().map(move |c| format!("{what}: {} is owned by {:?}", c.field, c.manager))
            })
            .collect();
        if !blocking.is_empty() {
            let message = format!(
                "conflict policy fail: {} field{} owned by other managers; resolve them or set spec.sync.conflictPolicy: adopt: {}",
                blocking.len(),
                if blocking.len() == 1 { " is" } else { "s are" },
                blocking.join("; ")
            );
            self.fail_attempt(names::reasons::APPLY_CONFLICT, message, true);
            return Ok(None);
        }
        // Fencing: ownership is checked before the writes, and again by the writer before each
        // request is sent.
        super::replica::fenced(self.ctx, self.app)?;
        self.begin(planned, policy, live, managed_left).await
    }

    /// The desired state is deployed: health and drift.
    async fn observe(
        &mut self,
        planned: &Planned,
        live: &BTreeMap<String, Value>,
        changes: bool,
    ) -> Result<Action, Error> {
        self.rs.phase = RevisionPhase::Healthy;
        self.rs.failure = None;
        if self.drift_is_new(planned) {
            metrics::counter!(crate::metric_names::DRIFT_DETECTED_TOTAL).increment(1);
        }
        if changes {
            self.set_sync(SyncState::Drifted, planned);
        } else {
            self.set_sync(SyncState::Synced, planned);
        }
        let drifted = self.status.sync.as_ref().map(|s| s.drifted.clone()).unwrap_or_default();
        let before = self.old.sync.as_ref().map(|s| s.drifted.clone()).unwrap_or_default();
        if changes && drifted != before {
            let sync = &self.app.spec.sync;
            let why = match (sync.self_heal, self.hold.is_some(), sync.automatic) {
                (false, _, _) => "left in place: spec.sync.selfHeal is off; ksync sync repairs it",
                (true, true, _) => "self-heal waits for spec.dependsOn",
                (true, false, false) => "self-heal waits for approval (spec.sync.automatic is false): ksync sync",
                (true, false, true) => "self-heal repairs it",
            };
            let message = bounded(
                &format!(
                    "Revision {}: live state differs from what it deployed ({why}): {}",
                    self.rev,
                    drifted.iter().map(describe).collect::<Vec<_>>().join(", ")
                ),
                1024,
            );
            let related = revision_ref(self.ns, self.rev);
            self.events.tell(Some(related.clone()), EventType::Warning, names::events::DRIFTED, &message);
        }
        let summary = self.observe_health(planned, live, true).await;
        let drift = if changes {
            format!("; drifted: {}", drifted.iter().map(describe).collect::<Vec<_>>().join(", "))
        } else {
            String::new()
        };
        match summary.status {
            HealthStatus::Degraded => {
                let failure = Failure::new(names::reasons::DEGRADED, summary.message.clone(), true);
                failure.report(&self.reconcile(), self.status, false);
            }
            HealthStatus::Healthy => {
                // Deployed and Healthy: the last healthy Revision (again, if a status write
                // recording it was lost, or after a rollback to it).
                self.status.last_healthy_revision = Some(self.rev.to_string());
                let message = bounded(&format!("Revision {} is Healthy{drift}", self.rev), 1024);
                conditions::mark_ready(
                    &mut self.status.conditions,
                    names::reasons::SUCCEEDED,
                    &message,
                    self.app.metadata.generation,
                    self.now,
                );
            }
            _ => {
                let message = bounded(&format!("Revision {}: {}{drift}", self.rev, summary.message), 1024);
                self.progressing(&message);
            }
        }
        // Deployments, StatefulSets and DaemonSets trigger a reconcile as they change; everything
        // else is looked at again at the resync interval.
        Ok(Action::requeue(with_jitter(self.ctx.settings.resync, self.name)))
    }
}

/// Why an approval request on the Application starts nothing, if it does not.
fn unused(v: &approval::Verdict) -> Option<String> {
    match v {
        approval::Verdict::Stale { approved, current } => Some(format!(
            "the approval of plan {approved} is stale: the current plan is {current} (review it with ksync plan, approve it with ksync sync)"
        )),
        approval::Verdict::TooEarly => Some("an approval given before the rollback request does not count".to_string()),
        approval::Verdict::TargetChanged { chosen } => Some(format!(
            "the rollback request does not approve it: the target changed since it was requested (Revision {chosen}, its deployed desired state, spec.sync or spec.strategy); review the plan with ksync plan and approve it with ksync sync"
        )),
        _ => None,
    }
}

fn counts(p: &rev::Plan) -> String {
    let s = &p.summary;
    let hooks =
        if s.hooks > 0 { format!(", {} hook{}", s.hooks, if s.hooks == 1 { "" } else { "s" }) } else { String::new() };
    format!("{} to create, {} to update, {} to delete, {} unchanged{hooks}", s.create, s.update, s.delete, s.unchanged)
}
