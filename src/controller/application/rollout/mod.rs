//! One reconcile's rollout work on a planned Revision: start an attempt (apply, prune), watch
//! its health until the timeout, retry or pause after failures, and once deployed observe
//! health and drift. Decisions come from [`crate::decisions::rollout::decide`]; this file does the I/O and
//! keeps the Revision and Application status.
//!
//! The order of an attempt's stages (sync hooks and waves) is in [`stages`]; this file
//! applies one group of objects ([`Rollout::apply_group`]; prune runs with the last wave) and
//! keeps the Revision's and the Application's status.

mod diagnosis;
mod stages;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use serde_json::Value;
use tracing::Instrument as _;

use super::Reconcile;
use super::error::Error;
use super::flow::{Failure, Planned, reason_const, redact};
use super::replica::Context;
use crate::api::application::{Application, ApplicationStatus, HealthSummary, ResourceRef, SyncState};
use crate::api::common::{GroupVersionKind, HealthStatus};
use crate::api::conditions;
use crate::api::names;
use crate::api::revision::reference as revision_ref;
use crate::api::revision::{self as rev, Attempt, AttemptResult, RevisionHealth, RevisionPhase, RevisionStatus};
use crate::apply;
use crate::controller::with_jitter;
use crate::decisions::approval;
use crate::decisions::rollout::{self, Policy, Step, is_deployed, policy_of};
use crate::health;
use crate::plan::{Action as PlanAction, validate};
use crate::text::bounded;

/// How often a rollout waiting for health looks again.
pub(super) const HEALTH_POLL: Duration = Duration::from_secs(2);

/// How soon a rollout's health is looked at again after its HealthChecks went over the
/// per-reconcile budget ([`health::cel::Budget`]): every look spends the budget again, on
/// objects that will not get cheaper by the next poll.
pub(super) const OVER_BUDGET_POLL: Duration = Duration::from_secs(30);
/// Most drifted resources listed on the Application.
const MAX_DRIFTED: usize = 50;

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
    /// Strings no message may show (Secret values).
    pub secrets: Vec<String>,
    /// The dependencies are not ready: nothing is applied (no attempt starts, no next wave).
    pub hold: Option<&'a crate::decisions::dependencies::Verdict>,
    /// The pending rollback request this reconcile deploys the target of.
    pub rollback: Option<&'a crate::decisions::rollback::Request>,
    /// What this reconcile may still spend on HealthCheck expressions.
    pub cel: health::cel::Budget,
}

/// A managed resource to judge, owned so that it can go to the tenant pool.
struct Resource {
    group: String,
    kind: String,
    namespace: String,
    name: String,
    /// `group/kind/namespace/name`, the key of `live` and of the Pods.
    id: String,
    /// The live object when a HealthCheck judges it (else read from the caller's map).
    live: Option<Value>,
    check: Option<std::sync::Arc<health::cel::Rules>>,
}

/// `resources` as the health core sees them; a live object not carried is looked up in `live`.
fn observe<'a>(
    resources: &'a [Resource],
    live: &'a BTreeMap<String, Value>,
    pods: &'a BTreeMap<String, Vec<Value>>,
    pods_degrade: bool,
) -> Vec<health::Observed<'a>> {
    resources
        .iter()
        .map(|r| health::Observed {
            group: &r.group,
            kind: &r.kind,
            namespace: &r.namespace,
            name: &r.name,
            live: r.live.as_ref().or_else(|| live.get(&r.id)),
            pods: pods.get(&r.id).map(Vec::as_slice).unwrap_or_default(),
            pods_degrade,
            check: r.check.as_deref(),
        })
        .collect()
}

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

fn gvk_of(obj: &Value) -> Option<GroupVersionKind> {
    let av = obj["apiVersion"].as_str()?;
    Some(GroupVersionKind {
        group: validate::group_of(av).to_string(),
        version: av.rsplit('/').next()?.to_string(),
        kind: obj["kind"].as_str()?.to_string(),
    })
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
            secrets: Vec::new(),
            hold,
            rollback,
            cel: health::cel::Budget::per_reconcile(),
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
        let action = self.run(planned).await?;
        let healthy = self.rs.phase == RevisionPhase::Healthy
            && is_deployed(self.rs, &hash)
            && self.status.last_healthy_revision.as_deref() == Some(self.rev)
            && self.rs.attempts.last().is_none_or(|a| a.result != AttemptResult::Running);
        Ok((action, healthy))
    }

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
        }
    }

    /// Run the step the Revision is at. An attempt starts only on a plan made from a fresh list
    /// (`planned.fresh`): otherwise nothing is written and `Err(Error::Stale)` asks for one.
    pub async fn run(&mut self, planned: Planned) -> Result<Action, Error> {
        let policy = policy_of(self.app);
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
        });
        if let Some(verdict) = self.hold
            && matches!(step, Step::Start { .. })
        {
            return self.wait_for_dependencies(&planned, &planned.live, changes, verdict).await;
        }
        if matches!(step, Step::Start { .. }) && !planned.fresh {
            return Err(Error::Stale);
        }
        // Before the attempt is recorded: its own start is not a failure of the desired state.
        let new_drift = self.drift_is_new(&planned);
        let mut live = planned.live.clone();
        let mut managed_left: Vec<Value> = planned.managed.clone();
        // The inventory is what exists: recomputed every time from the cluster.
        self.record_kinds(&planned, &live, &managed_left);
        let deadline = match step {
            Step::AwaitApproval => {
                self.rs.phase = RevisionPhase::AwaitingApproval;
                // The plan shown for approval (`ksync plan`, `ksync sync`) is the one waiting.
                self.rs.plan = Some(planned.stored.clone());
                self.set_sync(pending(&planned), &planned);
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
                self.observe_health(&planned, &live, false).await;
                return Ok(Action::requeue(with_jitter(self.ctx.settings.resync, self.name)));
            }
            Step::Retry { at } => {
                self.rs.phase = RevisionPhase::Failed;
                self.set_sync(pending(&planned), &planned);
                let failure = self.last_failure(&policy, Some(at));
                failure.report(&self.reconcile(), self.status, false);
                // Between attempts the evidence moves on (a crash loop backs off): kept current.
                let pods = self.pods_of(&planned, &live, None).await;
                let summary = self.summarize(&planned, &live, &pods, true, None).await;
                self.status.diagnosis = diagnosis::diagnose(&planned, &live, &summary).await;
                let wait = self.now.duration_until(at).unsigned_abs();
                return Ok(Action::requeue(wait.max(Duration::from_millis(200))));
            }
            Step::Paused => {
                self.rs.phase = RevisionPhase::Failed;
                self.set_sync(pending(&planned), &planned);
                let failure = self.last_failure(&policy, None);
                failure.report(&self.reconcile(), self.status, true);
                self.observe_health(&planned, &live, false).await;
                return Ok(Action::requeue(with_jitter(self.ctx.settings.resync, self.name)));
            }
            Step::Observe => {
                return self.observe(&planned, &live, changes).await;
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
                let started = self.start(number, &planned, &policy, &mut live, &mut managed_left).await?;
                if new_drift {
                    // A self-heal (or an approved repair) of drift no reconcile reported yet.
                    metrics::counter!(crate::metric_names::DRIFT_DETECTED_TOTAL).increment(1);
                }
                match started {
                    Some(deadline) => deadline,
                    None => return self.failed_at_once(&planned, &policy).await,
                }
            }
        };
        self.watch(&planned, &mut live, &mut managed_left, deadline, &policy).await
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

    /// Counts the Application's managed kinds from what exists.
    fn record_kinds(&mut self, planned: &Planned, live: &BTreeMap<String, Value>, managed_left: &[Value]) {
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

    /// Apply the Create and Update entries of `wave` (all of them when `None`), and prune when
    /// `last`. `false` when the attempt failed (recorded).
    pub(super) async fn apply_group(
        &mut self,
        planned: &Planned,
        wave: Option<i32>,
        last: bool,
        live: &mut BTreeMap<String, Value>,
        managed_left: &mut Vec<Value>,
    ) -> Result<bool, Error> {
        let related = revision_ref(self.ns, self.rev);
        // Hooks are never applied: they are created by their stage ([`stages`]).
        let entries = planned
            .plan
            .entries
            .iter()
            .filter(|e| !e.is_hook() && wave.is_none_or(|w| e.wave == w && e.action != PlanAction::Delete))
            .cloned()
            .collect();
        let group = crate::plan::Plan { entries, digest: planned.plan.digest.clone() };
        if let Some(w) = wave {
            let changes = group.entries.iter().filter(|e| e.action != PlanAction::Unchanged).count();
            let n = group.entries.len();
            self.wave_event(&format!(
                "wave {w}: applying {changes} of its {n} object{}",
                if n == 1 { "" } else { "s" }
            ))
            .await;
        }
        let plan = &group;
        let in_wave = |m: String| match wave {
            Some(w) => format!("wave {w}: {m}"),
            None => m,
        };
        let writer = self.ctx.writer(&planned.sa, self.ns, self.name);
        let rediscover = || self.ctx.rediscover();
        let span = tracing::info_span!("apply", wave = ?wave, objects = plan.entries.len());
        let result =
            apply::apply(&writer, &self.ctx.client, &planned.scopes, rediscover, plan, &planned.desired, planned.adopt)
                .instrument(span)
                .await;
        let mut applied = match result {
            Ok(a) => a,
            Err(apply::Error::Api(e)) => return Err(e.into()),
            Err(apply::Error::Conflict(m)) => {
                self.fail_attempt(names::reasons::APPLY_CONFLICT, in_wave(m), true);
                return Ok(false);
            }
            Err(apply::Error::Refused(m) | apply::Error::Unserved(m)) => {
                self.fail_attempt(
                    names::reasons::APPLY_FAILURE,
                    in_wave(format!("the Application's service account: {m}")),
                    true,
                );
                return Ok(false);
            }
        };
        let kept = super::replica::unchanged::applied(&planned.desired, &applied.objects, std::time::Instant::now());
        self.ctx.unchanged.add(&format!("{}/{}", self.ns, self.name), kept);
        for (id, obj) in std::mem::take(&mut applied.objects) {
            let (group, kind) =
                id.split_once('/').map(|(g, rest)| (g, rest.split('/').next().unwrap_or_default())).unwrap_or_default();
            self.ctx.echoes.applied(group, kind, id.clone(), obj["metadata"]["resourceVersion"].as_str());
            live.insert(id, obj);
        }
        // Record what we now manage before pruning, so a failed prune loses nothing.
        self.record_kinds(planned, live, managed_left);
        if !last {
            self.rs.phase = RevisionPhase::Progressing;
            return Ok(true);
        }
        let scopes = self.ctx.scopes(false).await?;
        // What is pruned was listed as the service account for this rollout (never from a watch
        // cache), and each delete is conditional on the object listed.
        let listed: BTreeMap<String, Value> =
            planned.managed.iter().map(|o| (validate::identity(o), o.clone())).collect();
        let (ns, name) = (self.ns, self.name);
        let prunable = move |o: &Value| crate::plan::inventory::prunable_by(o, ns, name);
        let kept = match apply::prune(&writer, &scopes, &planned.plan, &listed, &prunable, &mut applied)
            .instrument(tracing::info_span!("prune"))
            .await
        {
            Ok(k) => k,
            Err(e) => match e {
                apply::Error::Api(e) => return Err(e.into()),
                apply::Error::Refused(m) | apply::Error::Conflict(m) | apply::Error::Unserved(m) => {
                    self.fail_attempt(
                        names::reasons::PRUNE_FAILURE,
                        format!("the Application's service account: {m}"),
                        true,
                    );
                    return Ok(false);
                }
            },
        };
        let deleted: BTreeSet<&String> = applied.deleted.iter().collect();
        managed_left.retain(|o| !deleted.contains(&validate::identity(o)));
        self.record_kinds(planned, live, managed_left);
        let skipped: Vec<String> = planned
            .plan
            .entries
            .iter()
            .filter(|e| e.warnings.iter().any(|w| w.starts_with("prune skipped")))
            .map(|e| format!("{} ({})", describe(&reference(e)), e.warnings.join("; ")))
            .chain(kept)
            .collect();
        if !skipped.is_empty() {
            self.events.tell(
                Some(related.clone()),
                EventType::Warning,
                names::events::PRUNE_SKIPPED,
                &format!("not pruned: {}", skipped.join(", ")),
            );
        }
        self.rs.phase = RevisionPhase::Progressing;
        Ok(true)
    }

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

    /// Health of the managed resources onto the Application (and the Revision when `deployed`),
    /// with a `HealthDegraded` Event when it turns Degraded.
    #[tracing::instrument(name = "health", skip_all, fields(status = tracing::field::Empty))]
    pub(super) async fn observe_health(
        &mut self,
        planned: &Planned,
        live: &BTreeMap<String, Value>,
        deployed: bool,
    ) -> health::Summary {
        let pods = self.pods_of(planned, live, None).await;
        let summary = self.summarize(planned, live, &pods, deployed, None).await;
        tracing::Span::current().record("status", tracing::field::debug(summary.status));
        if deployed {
            self.record_health(&summary);
        }
        let was = self.old.health.as_ref().map(|h| h.status);
        self.status.health = Some(HealthSummary {
            status: summary.status,
            message: (!summary.message.is_empty()).then(|| bounded(&summary.message, 1024)),
        });
        self.status.diagnosis = diagnosis::diagnose(planned, live, &summary).await;
        if summary.status == HealthStatus::Degraded && was != Some(HealthStatus::Degraded) && deployed {
            let related = revision_ref(self.ns, self.rev);
            let message = match &self.status.diagnosis {
                Some(d) => bounded(&format!("{}; root cause: {}: {}", summary.message, d.reason, d.message), 1024),
                None => summary.message.clone(),
            };
            self.events.tell(Some(related.clone()), EventType::Warning, names::events::HEALTH_DEGRADED, &message);
        }
        summary
    }

    /// The Pods of every workload that is not Healthy, as the service account (evidence of why;
    /// a failed list only means no evidence).
    /// `upto`: only the objects of that wave and lower ones.
    pub(super) async fn pods_of(
        &self,
        planned: &Planned,
        live: &BTreeMap<String, Value>,
        upto: Option<i32>,
    ) -> BTreeMap<String, Vec<Value>> {
        let mut out = BTreeMap::new();
        for e in &planned.plan.entries {
            if e.is_hook() || !health::is_workload(&e.group, &e.kind) || upto.is_some_and(|w| e.wave > w) {
                continue;
            }
            let id = format!("{}/{}/{}/{}", e.group, e.kind, e.namespace, e.name);
            let Some(obj) = live.get(&id) else { continue };
            if health::assess(obj).status == HealthStatus::Healthy || !health::pods_may_explain(obj) {
                continue;
            }
            let Some(labels) = obj["spec"]["selector"]["matchLabels"].as_object().filter(|l| !l.is_empty()) else {
                continue;
            };
            let selector: Vec<String> =
                labels.iter().filter_map(|(k, v)| v.as_str().map(|v| format!("{k}={v}"))).collect();
            let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
                kube::Api::namespaced(planned.sa.clone(), &e.namespace);
            let params = kube::api::ListParams::default().labels(&selector.join(",")).limit(50);
            match pods.list(&params).await {
                Ok(list) => {
                    let values = list.items.into_iter().filter_map(|p| serde_json::to_value(p).ok()).collect();
                    out.insert(id, values);
                }
                Err(err) => tracing::debug!(error = %err, workload = %id, "listing Pods for health evidence"),
            }
        }
        out
    }

    /// The health of the managed resources (up to wave `upto`). Resources of kinds with a
    /// HealthCheck are judged off the runtime, on the tenant pool ([`crate::offload::tenant`]),
    /// charged to this reconcile's [`health::cel::Budget`]: the expressions' work is the
    /// tenant's to size (thousands of objects, quadratic expressions), and on a runtime worker
    /// it held up Lease renewals and every other tenant's reconciles (issue 44, item 3). The
    /// built-in rules cost microseconds an object and run here.
    pub(super) async fn summarize(
        &mut self,
        planned: &Planned,
        live: &BTreeMap<String, Value>,
        pods: &BTreeMap<String, Vec<Value>>,
        pods_degrade: bool,
        upto: Option<i32>,
    ) -> health::Summary {
        let entries: Vec<_> = planned
            .plan
            .entries
            .iter()
            .filter(|e| e.action != PlanAction::Delete && e.warnings.is_empty() && !e.is_hook())
            .filter(|e| upto.is_none_or(|w| e.wave <= w))
            .collect();
        // The HealthCheck for each object's kind in its namespace; for a cluster-scoped object,
        // in the Application's namespace.
        let rules: Vec<_> = entries
            .iter()
            .map(|e| {
                let ns = if e.namespace.is_empty() { self.ns } else { &e.namespace };
                self.ctx.healthchecks().rules_for(ns, &e.group, &e.kind)
            })
            .collect();
        let resources: Vec<Resource> = entries
            .iter()
            .zip(rules)
            .map(|(e, check)| {
                let id = format!("{}/{}/{}/{}", e.group, e.kind, e.namespace, e.name);
                Resource {
                    group: e.group.clone(),
                    kind: e.kind.clone(),
                    namespace: e.namespace.clone(),
                    name: e.name.clone(),
                    // Copied only for the pool: no HealthCheck, no copy.
                    live: live.get(&id).filter(|_| check.is_some()).cloned(),
                    check,
                    id,
                }
            })
            .collect();
        if resources.iter().all(|r| r.check.is_none()) {
            return health::summarize(&observe(&resources, live, pods, pods_degrade));
        }
        // Only the objects a HealthCheck judges go to the pool (the rest are judged there too,
        // by the built-in rules, from the copies of their Pods: few, workloads only).
        let pods: BTreeMap<String, Vec<Value>> = pods.clone();
        let others: BTreeMap<String, Value> = resources
            .iter()
            .filter(|r| r.check.is_none())
            .filter_map(|r| Some((r.id.clone(), live.get(&r.id)?.clone())))
            .collect();
        let mut budget = std::mem::replace(&mut self.cel, health::cel::Budget::new(0, Duration::ZERO));
        let (summary, budget) = crate::offload::tenant(move || {
            let summary = health::summarize_within(&observe(&resources, &others, &pods, pods_degrade), &mut budget);
            (summary, budget)
        })
        .await;
        if budget.exhausted() && !self.cel.exhausted() {
            tracing::info!(spent = budget.spent(), "HealthChecks over the per-reconcile budget");
        }
        self.cel = budget;
        summary
    }

    /// [`HEALTH_POLL`], or [`OVER_BUDGET_POLL`] when this reconcile's HealthChecks went over
    /// their budget.
    pub(super) fn health_poll(&self) -> Duration {
        if self.cel.exhausted() { OVER_BUDGET_POLL } else { HEALTH_POLL }
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

    /// Whether this reconcile notices drift of the deployed desired state anew
    /// ([`rollout::drift_is_new`]).
    fn drift_is_new(&self, planned: &Planned) -> bool {
        let before = self.old.sync.as_ref().map_or(SyncState::Unknown, |s| s.status);
        let deployed = self.rollback.is_none() && is_deployed(self.rs, &planned.hash);
        let failures = rollout::consecutive_failures(&self.rs.attempts, Some(&planned.hash));
        rollout::drift_is_new(deployed, planned.plan.changes(), before, failures)
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

/// The sync state before the plan is applied: OutOfSync when it would change something.
pub(super) fn pending(planned: &Planned) -> SyncState {
    if planned.plan.changes() { SyncState::OutOfSync } else { SyncState::Synced }
}

fn counts(p: &rev::Plan) -> String {
    let s = &p.summary;
    let hooks =
        if s.hooks > 0 { format!(", {} hook{}", s.hooks, if s.hooks == 1 { "" } else { "s" }) } else { String::new() };
    format!("{} to create, {} to update, {} to delete, {} unchanged{hooks}", s.create, s.update, s.delete, s.unchanged)
}
