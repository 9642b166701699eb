//! The stages of an attempt, in order, and the I/O of its sync hooks. Which stage comes next is
//! decided by [`crate::plan::hooks`] (pure); this file runs it and records it on the attempt,
//! so each reconcile resumes where the last one stopped:
//!
//! 1. **PreSync hooks**, wave by wave (`Attempt::hook` is `PreSync`, `wave` the hooks' wave).
//!    Nothing of the plan is applied before they all succeeded.
//! 2. **The waves**: the lowest applied, each later one only once every object of the waves
//!    before it is Healthy (`Attempt::wave` is the wave applied last, `waveStartedAt` when).
//!    Sync hooks are created with the wave they are in and waited for with it. A wave that
//!    degrades or times out fails the attempt, naming it; later waves are never applied.
//! 3. **PostSync hooks** once everything is Healthy, wave by wave; then the attempt succeeded.
//! 4. **SyncFail hooks** when the attempt fails (at any stage but their own): the attempt keeps
//!    running (`hook: SyncFail`, with its failure recorded) until they are done, then fails with
//!    the failure that started them.
//!
//! Every stage has the whole `spec.health.timeout`, from when it started (`waveStartedAt`).
//! A self-heal (the desired state is deployed already) runs no hooks, only the drifted objects.
//!
//! # Hooks
//! - A hook is created (POST, never applied) as the Application's service account through the
//!   shard fence, with [`names::annotations::HOOK_RUN`] naming the run; an object of an earlier
//!   run is deleted first (`BeforeHookCreation`, the default; waited for until gone), and
//!   without that policy it fails the attempt.
//! - An object under a hook's name that is not this Application's hook
//!   ([`hooks::ours`]) is never deleted nor taken for the hook: the attempt fails naming it.
//! - `HookSucceeded` and `HookFailed` are applied when the hook's stage ends (all its hooks done,
//!   or one failed).

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams, Preconditions, PropagationPolicy};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use serde_json::Value;
use tracing::Instrument as _;

use super::super::error::Error;
use super::super::flow::Planned;
use super::Rollout;
use super::record::{HEALTH_POLL, NEXT_STAGE, describe, pending, reference};
use crate::api::application::SyncState;
use crate::api::common::HealthStatus;
use crate::api::names;
use crate::api::revision::{AttemptResult, HookPhase, RevisionPhase};
use crate::decisions::rollout::Policy;
use crate::plan::hooks::{self, Completion, Next};
use crate::plan::{Entry, validate};

/// One hook of a stage, as found (or created) this reconcile.
struct Ran {
    entry: Entry,
    /// Where it is.
    completion: Completion,
    /// The object of this run, when it exists (for the delete policies).
    live: Option<Value>,
}

/// A stage's hooks, and whether they are done.
struct Stage {
    ran: Vec<Ran>,
}

impl Stage {
    /// The first failed hook, else the first still running, else success.
    fn verdict(&self, phase: HookPhase) -> Completion {
        let what = |r: &Ran| format!("{phase} hook {}", describe(&reference(&r.entry)));
        if let Some(r) = self.ran.iter().find(|r| matches!(r.completion, Completion::Failed(_))) {
            let Completion::Failed(why) = &r.completion else { unreachable!("matched above") };
            return Completion::Failed(format!("{} failed: {why}", what(r)));
        }
        if let Some(r) = self.ran.iter().find(|r| matches!(r.completion, Completion::Running(_))) {
            let Completion::Running(why) = &r.completion else { unreachable!("matched above") };
            return Completion::Running(format!("{}: {why}", what(r)));
        }
        Completion::Succeeded
    }
}

/// The plan's waves, lowest first, when it has several; `None` when it is one group.
fn waves_of(planned: &Planned) -> Option<Vec<i32>> {
    let waves = planned.plan.waves();
    (waves.len() > 1).then_some(waves)
}

impl Rollout<'_> {
    /// The first stage of a new attempt: its PreSync hooks, else its first wave. `Some(deadline)`
    /// when the attempt is running, `None` when it failed (recorded).
    pub(super) async fn begin(
        &mut self,
        planned: &Planned,
        policy: &Policy,
        live: &mut BTreeMap<String, Value>,
        managed_left: &mut Vec<Value>,
    ) -> Result<Option<Timestamp>, Error> {
        if self.runs_hooks(planned)
            && let Next::Hooks(phase, wave) = hooks::first(&planned.plan)
        {
            self.enter_hooks(phase, wave);
            return Ok(Some(self.health_deadline(policy)));
        }
        self.begin_waves(planned, policy, live, managed_left).await
    }

    /// Apply the first wave (or the one group).
    async fn begin_waves(
        &mut self,
        planned: &Planned,
        policy: &Policy,
        live: &mut BTreeMap<String, Value>,
        managed_left: &mut Vec<Value>,
    ) -> Result<Option<Timestamp>, Error> {
        let waves = waves_of(planned);
        let first = waves.as_ref().and_then(|w| w.first().copied());
        if let Some(a) = self.rs.attempts.last_mut() {
            a.hook = None;
            a.wave = first;
            a.wave_started_at = Some(Time(self.now));
        }
        let last = waves.as_ref().is_none_or(|w| w.len() == 1);
        if !self.apply_group(planned, first, last, live, managed_left).await? {
            return Ok(None);
        }
        Ok(Some(self.health_deadline(policy)))
    }

    /// A running attempt, at the stage it recorded.
    pub(super) async fn watch(
        &mut self,
        planned: &Planned,
        live: &mut BTreeMap<String, Value>,
        managed_left: &mut Vec<Value>,
        deadline: Timestamp,
        policy: &Policy,
    ) -> Result<Action, Error> {
        match self.rs.attempts.last().and_then(|a| a.hook) {
            Some(phase) if phase != HookPhase::Sync => {
                self.watch_hooks(phase, planned, live, managed_left, deadline, policy).await
            }
            _ => self.watch_waves(planned, live, managed_left, deadline, policy).await,
        }
    }

    /// The hooks of a hook phase: wait for them, then go on to the next stage.
    async fn watch_hooks(
        &mut self,
        phase: HookPhase,
        planned: &Planned,
        live: &mut BTreeMap<String, Value>,
        managed_left: &mut Vec<Value>,
        deadline: Timestamp,
        policy: &Policy,
    ) -> Result<Action, Error> {
        let wave = self.rs.attempts.last().and_then(|a| a.wave).unwrap_or(0);
        let entries: Vec<Entry> = hooks::of_stage(&planned.plan, phase, wave).cloned().collect();
        let stage = self.run_hooks(planned, phase, &entries).await?;
        let verdict = stage.verdict(phase);
        let ended = |m: String| match phase {
            HookPhase::SyncFail => Err(m),
            _ => Ok(m),
        };
        let failure = match verdict {
            Completion::Running(why) if self.now < deadline => {
                self.rs.phase = RevisionPhase::Progressing;
                let message = format!("Revision {}: {phase} hooks (wave {wave}): waiting for {why}", self.rev);
                if phase != HookPhase::SyncFail {
                    self.set_sync(pending(planned), planned);
                    self.progressing(&message);
                }
                return Ok(Action::requeue(HEALTH_POLL));
            }
            Completion::Running(why) => {
                self.end_hooks(planned, phase, &stage, false).await;
                ended(format!("{why}: not done within spec.health.timeout ({})", self.app.spec.health.timeout))
                    .map(|m| (names::reasons::HEALTH_TIMEOUT, m))
            }
            Completion::Failed(why) => {
                self.end_hooks(planned, phase, &stage, false).await;
                ended(why).map(|m| (names::reasons::DEGRADED, m))
            }
            Completion::Succeeded => {
                let next = hooks::after(&planned.plan, phase, wave);
                // The waves wait for the dependencies; the hooks stay as they are until then.
                if matches!(next, Next::Waves)
                    && let Some(action) = self.hold_stage(planned)
                {
                    return Ok(action);
                }
                self.end_hooks(planned, phase, &stage, true).await;
                return match next {
                    Next::Hooks(p, w) => {
                        self.enter_hooks(p, w);
                        Ok(Action::requeue(NEXT_STAGE))
                    }
                    Next::Waves => {
                        // The first wave is written from a plan made from fresh lists only.
                        if !planned.fresh {
                            return Err(Error::Stale);
                        }
                        super::super::replica::fenced(self.ctx, self.app)?;
                        match self.begin_waves(planned, policy, live, managed_left).await? {
                            Some(_) => Ok(Action::requeue(NEXT_STAGE)),
                            None => self.failed_at_once(planned, policy).await,
                        }
                    }
                    Next::Done if phase == HookPhase::SyncFail => self.end_sync_fail(planned, policy).await,
                    Next::Done => Ok(self.succeed(planned).await),
                };
            }
        };
        match failure {
            Ok((reason, message)) => {
                self.fail_attempt(reason, message, true);
                self.failed_at_once(planned, policy).await
            }
            // A SyncFail hook that failed or timed out: the attempt fails as it was going to.
            Err(_) => self.end_sync_fail(planned, policy).await,
        }
    }

    /// The SyncFail hooks are done (or failed, or timed out): the attempt fails with the failure
    /// that started them.
    async fn end_sync_fail(&mut self, planned: &Planned, policy: &Policy) -> Result<Action, Error> {
        if let Some(a) = self.rs.attempts.last_mut() {
            a.result = AttemptResult::Failed;
            a.finished_at = Some(Time(self.now));
        }
        self.rs.phase = RevisionPhase::Failed;
        self.failed_at_once(planned, policy).await
    }

    /// The waves: Healthy applies the next wave (or, after the last, goes on to the PostSync
    /// hooks or completes the attempt), Degraded fails it, Progressing waits until `deadline`.
    async fn watch_waves(
        &mut self,
        planned: &Planned,
        live: &mut BTreeMap<String, Value>,
        managed_left: &mut Vec<Value>,
        mut deadline: Timestamp,
        policy: &Policy,
    ) -> Result<Action, Error> {
        let waves = waves_of(planned);
        if waves.is_none() && self.rs.attempts.last().is_some_and(|a| a.wave.is_some()) {
            // Waves were turned off (or the plan lost them) mid-attempt: the rest in one group,
            // with a new health deadline.
            if !planned.fresh {
                return Err(Error::Stale);
            }
            super::super::replica::fenced(self.ctx, self.app)?;
            if let Some(a) = self.rs.attempts.last_mut() {
                a.wave = None;
                a.wave_started_at = Some(Time(self.now));
            }
            if !self.apply_group(planned, None, true, live, managed_left).await? {
                return self.failed_at_once(planned, policy).await;
            }
            deadline = self.health_deadline(policy);
        }
        loop {
            // The wave applied last; every object up to it is waited for.
            let upto = waves.as_ref().and(self.rs.attempts.last().and_then(|a| a.wave));
            // The attempt's health wait (one look per reconcile).
            let span = tracing::info_span!("health", wave = ?upto, status = tracing::field::Empty);
            let pods = self.pods_of(planned, live, upto).instrument(span.clone()).await;
            let summary = self.summarize(planned, live, &pods, false, upto).instrument(span.clone()).await;
            span.record("status", tracing::field::debug(summary.status));
            self.record_health(&summary);
            // The Sync hooks of the waves applied so far.
            let sync: Vec<Entry> = if self.runs_hooks(planned) {
                planned
                    .plan
                    .entries
                    .iter()
                    .filter(|e| e.hook == Some(HookPhase::Sync) && e.action == crate::plan::Action::Create)
                    .filter(|e| upto.is_none_or(|w| e.wave <= w))
                    .cloned()
                    .collect()
            } else {
                Vec::new()
            };
            let stage = self.run_hooks(planned, HookPhase::Sync, &sync).await?;
            let (status, message) = match (stage.verdict(HookPhase::Sync), summary.status) {
                (Completion::Failed(m), _) => (HealthStatus::Degraded, m),
                (Completion::Running(m), HealthStatus::Healthy) => (HealthStatus::Progressing, m),
                _ => (summary.status, summary.message.clone()),
            };
            let in_wave = |m: String| match upto {
                Some(w) => format!("wave {w}: {m}"),
                None => m,
            };
            let next = waves.as_ref().zip(upto).and_then(|(ws, w)| ws.iter().copied().find(|x| *x > w));
            match status {
                HealthStatus::Healthy if next.is_some() => {
                    let (Some(done), Some(next)) = (upto, next) else { unreachable!("checked above") };
                    if let Some(action) = self.hold_stage(planned) {
                        return Ok(action);
                    }
                    // The next wave is written from a plan made from fresh lists only.
                    if !planned.fresh {
                        return Err(Error::Stale);
                    }
                    self.wave_event(&format!("wave {done} is Healthy"));
                    super::super::replica::fenced(self.ctx, self.app)?;
                    if let Some(a) = self.rs.attempts.last_mut() {
                        a.wave = Some(next);
                        a.wave_started_at = Some(Time(self.now));
                    }
                    let last = waves.as_ref().and_then(|w| w.last()) == Some(&next);
                    if !self.apply_group(planned, Some(next), last, live, managed_left).await? {
                        return self.failed_at_once(planned, policy).await;
                    }
                    deadline = self.health_deadline(policy);
                }
                HealthStatus::Healthy => {
                    self.status.diagnosis = None;
                    self.end_hooks(planned, HookPhase::Sync, &stage, true).await;
                    let next = if self.runs_hooks(planned) { hooks::after_waves(&planned.plan) } else { Next::Done };
                    return match next {
                        Next::Hooks(phase, wave) => {
                            self.enter_hooks(phase, wave);
                            Ok(Action::requeue(NEXT_STAGE))
                        }
                        _ => Ok(self.succeed(planned).await),
                    };
                }
                HealthStatus::Degraded | HealthStatus::Progressing | HealthStatus::Unknown
                    if status == HealthStatus::Degraded || self.now >= deadline =>
                {
                    self.end_hooks(planned, HookPhase::Sync, &stage, false).await;
                    self.status.diagnosis = super::diagnosis::diagnose(planned, live, &summary).await;
                    let (reason, message) = if status == HealthStatus::Degraded {
                        (names::reasons::DEGRADED, in_wave(format!("the rollout degraded: {message}")))
                    } else {
                        (
                            names::reasons::HEALTH_TIMEOUT,
                            in_wave(format!(
                                "not Healthy within spec.health.timeout ({}): {message}",
                                self.app.spec.health.timeout
                            )),
                        )
                    };
                    self.fail_attempt(reason, message, true);
                    self.set_sync(pending(planned), planned);
                    return self.failed_at_once(planned, policy).await;
                }
                _ => {
                    let waited: Vec<&Entry> = planned
                        .plan
                        .entries
                        .iter()
                        .filter(|e| e.action != crate::plan::Action::Delete && e.warnings.is_empty() && !e.is_hook())
                        .filter(|e| upto.is_none_or(|w| e.wave <= w))
                        .collect();
                    // Just applied: its workloads' controllers observe it within a moment (no
                    // Sync hooks: looking again would run them again).
                    if stage.ran.is_empty() && self.first_look(&waited, live).await {
                        continue;
                    }
                    // On its way, within its deadline: no cause to name yet.
                    self.status.diagnosis = None;
                    self.rs.phase = RevisionPhase::Progressing;
                    self.set_sync(SyncState::Synced, planned);
                    let message = format!("Revision {}: {}", self.rev, in_wave(format!("waiting for {message}")));
                    self.progressing(&message);
                    let hooks_done = stage.ran.iter().all(|r| !matches!(r.completion, Completion::Running(_)));
                    let watched = hooks_done && self.all_watched(waited.into_iter());
                    return Ok(Action::requeue(self.health_poll(watched, deadline)));
                }
            }
        }
    }

    /// Whether every resource of `entries` (those a health wait looks at) is in a running,
    /// synced watch of this Application's shard: then a change of any of them, or of their
    /// Pods, triggers a reconcile, and the wait need not poll. Cluster-scoped objects count as
    /// not watched.
    fn all_watched<'e>(&self, mut entries: impl Iterator<Item = &'e crate::plan::Entry>) -> bool {
        let shard = self.ctx.fence.is_some().then(|| super::super::replica::shard_of(self.ctx, self.ns, self.name));
        entries.all(|e| {
            !e.namespace.is_empty()
                && self.ctx.inventory.holds(shard, &e.group, &e.kind, &e.namespace, &e.name) == Some(true)
        })
    }

    /// Whether the hook object `live` is done ([`hooks::completion`]); with a HealthCheck, judged
    /// on the tenant pool within this reconcile's budget, as the managed resources are.
    async fn hook_completion(
        &mut self,
        live: &Value,
        check: &Option<std::sync::Arc<crate::health::cel::Rules>>,
    ) -> Completion {
        let Some(rules) = check.clone() else { return hooks::completion(live, None) };
        let live = live.clone();
        let mut budget =
            std::mem::replace(&mut self.cel, crate::health::cel::Budget::new(0, std::time::Duration::ZERO));
        let (completion, budget) = crate::offload::tenant(move || {
            let completion = hooks::completion_within(&live, Some(&rules), &mut budget);
            (completion, budget)
        })
        .await;
        self.cel = budget;
        completion
    }

    /// Bring the hooks `entries` of `phase` to this run: found (this run's object), created
    /// fresh, or an earlier run's object deleted first; and where each one is.
    async fn run_hooks(&mut self, planned: &Planned, phase: HookPhase, entries: &[Entry]) -> Result<Stage, Error> {
        let mut ran = Vec::new();
        if entries.is_empty() {
            return Ok(Stage { ran });
        }
        super::super::replica::fenced(self.ctx, self.app)?;
        let number = self.rs.attempts.last().map(|a| a.number).unwrap_or(1);
        let run = hooks::run_id(self.rev, number, phase);
        let id = crate::plan::inventory::application_id(self.ns, self.name);
        let writer = self.ctx.writer(&planned.sa, self.ns, self.name);
        for e in entries {
            let what = describe(&reference(e));
            let ident = e.identity();
            let Some(desired) = planned.hooks.iter().find(|h| validate::identity(h) == ident) else { continue };
            let failed = |why: String| Ran { entry: e.clone(), completion: Completion::Failed(why), live: None };
            let Some(resource) = planned.scopes.resource(&e.group, &e.version, &e.kind).cloned() else {
                ran.push(failed(format!("the cluster does not serve {} {}", e.version, e.kind)));
                continue;
            };
            let ns = (!e.namespace.is_empty()).then_some(e.namespace.as_str());
            let api: Api<DynamicObject> = match ns {
                Some(ns) => Api::namespaced_with(planned.sa.clone(), ns, &resource),
                None => Api::all_with(planned.sa.clone(), &resource),
            };
            let found = match api.get_opt(&e.name).await {
                Ok(f) => f.and_then(|o| serde_json::to_value(o).ok()),
                Err(kube::Error::Api(s)) if (400..500).contains(&s.code) && s.code != 429 => {
                    ran.push(failed(format!("reading {what} as the Application's service account: {}", s.message)));
                    continue;
                }
                Err(err) => return Err(err.into()),
            };
            // The HealthCheck for the hook's kind; for a cluster-scoped one, in the Application's namespace.
            let check = self.ctx.healthchecks().rules_for(ns.unwrap_or(self.ns), &e.group, &e.kind);
            let completion = match &found {
                Some(l) if hooks::of_run(l, &run) && hooks::ours(l, &id) => self.hook_completion(l, &check).await,
                // Never delete, nor wait for, what is not this Application's hook.
                Some(_) if !found.as_ref().is_some_and(|l| hooks::ours(l, &id)) => {
                    ran.push(failed(format!(
                        "{what} exists and is not a hook of this Application; it is left alone (rename the hook or remove the object)"
                    )));
                    continue;
                }
                Some(l) if !l["metadata"]["deletionTimestamp"].is_null() => {
                    Completion::Running(format!("waiting for the previous run's {what} to be deleted"))
                }
                Some(l) => {
                    let policies = hooks::delete_policies(desired).unwrap_or_default();
                    if !policies.contains(&hooks::DeletePolicy::BeforeHookCreation) {
                        ran.push(failed(format!(
                            "{what} exists from an earlier run, and its delete policy has no BeforeHookCreation; delete it, or add BeforeHookCreation"
                        )));
                        continue;
                    }
                    delete_hook(&writer, &resource, ns, l).await?;
                    Completion::Running(format!("waiting for the previous run's {what} to be deleted"))
                }
                None => {
                    let mut obj = desired.clone();
                    obj["metadata"]["annotations"][names::annotations::HOOK_RUN] = Value::String(run.clone());
                    let params =
                        PostParams { field_manager: Some(names::FIELD_MANAGER.to_string()), ..Default::default() };
                    match writer.create_dynamic(&resource, ns, &obj, &params).await {
                        Ok(created) => {
                            self.wave_event(&format!("{phase} hook {what}: created"));
                            let c = self.hook_completion(&created, &check).await;
                            ran.push(Ran { entry: e.clone(), completion: c, live: Some(created) });
                            continue;
                        }
                        Err(kube::Error::Api(s)) if s.code == 409 => {
                            Completion::Running(format!("{what} to be created"))
                        }
                        Err(kube::Error::Api(s)) if (400..500).contains(&s.code) && s.code != 429 => {
                            ran.push(failed(format!(
                                "creating {what} as the Application's service account: {}",
                                s.message
                            )));
                            continue;
                        }
                        Err(err) => return Err(err.into()),
                    }
                }
            };
            let live = found.filter(|l| hooks::of_run(l, &run));
            ran.push(Ran { entry: e.clone(), completion, live });
        }
        Ok(Stage { ran })
    }

    /// A stage ended (`succeeded`, or failed): an Event for each hook, and the delete policies
    /// applied to this run's objects. A failed delete is only logged: the hook ran.
    async fn end_hooks(&mut self, planned: &Planned, phase: HookPhase, stage: &Stage, succeeded: bool) {
        let writer = self.ctx.writer(&planned.sa, self.ns, self.name);
        for r in &stage.ran {
            let what = describe(&reference(&r.entry));
            match &r.completion {
                Completion::Succeeded => self.wave_event(&format!("{phase} hook {what} succeeded")),
                Completion::Failed(why) => {
                    let m = format!("{phase} hook {what} failed: {why}");
                    self.attempt_event(EventType::Warning, names::events::HOOK_FAILED, &m);
                }
                Completion::Running(why) if !succeeded => {
                    let m = format!("{phase} hook {what} was not done within spec.health.timeout: {why}");
                    self.attempt_event(EventType::Warning, names::events::HOOK_FAILED, &m);
                }
                Completion::Running(_) => {}
            }
            let Some(live) = &r.live else { continue };
            let policies = hooks::delete_policies(live).unwrap_or_default();
            let delete = match &r.completion {
                Completion::Succeeded => hooks::delete_when_done(&policies, true),
                Completion::Failed(_) => hooks::delete_when_done(&policies, false),
                // Not done when the stage ended: it failed the stage (timeout) or was cut short.
                Completion::Running(_) => !succeeded && hooks::delete_when_done(&policies, false),
            };
            if !delete {
                continue;
            }
            let Some(resource) = planned.scopes.resource(&r.entry.group, &r.entry.version, &r.entry.kind).cloned()
            else {
                continue;
            };
            let ns = (!r.entry.namespace.is_empty()).then_some(r.entry.namespace.as_str());
            if let Err(err) = delete_hook(&writer, &resource, ns, live).await {
                tracing::warn!(error = %err, hook = %what, "deleting a hook by its delete policy");
            }
        }
    }
}

/// Delete the hook object `live` (conditional on its `uid`; its Pods go in the background).
/// Already gone is fine.
async fn delete_hook(
    writer: &crate::apply::Writer,
    resource: &kube::api::ApiResource,
    ns: Option<&str>,
    live: &Value,
) -> Result<(), Error> {
    let name = live["metadata"]["name"].as_str().unwrap_or_default();
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        preconditions: Some(Preconditions {
            uid: live["metadata"]["uid"].as_str().map(str::to_string),
            resource_version: None,
        }),
        ..Default::default()
    };
    match writer.delete_dynamic(resource, ns, name, &params).await {
        Ok(()) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        Err(err) => Err(err.into()),
    }
}
