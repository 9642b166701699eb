//! The rollout's decisions, pure: what a reconcile does with a planned Revision given its
//! attempts, whether its desired state is deployed, the sync policy and the failure policy.

use std::time::Duration;

use jiff::Timestamp;
use kube::ResourceExt;

use crate::api::application::{Application, ApplicationStatus, SyncState};
use crate::api::names;
use crate::api::revision::{Attempt, AttemptResult, MAX_ATTEMPTS_KEPT, RevisionStatus};
use crate::decisions::{approval, rollback};

/// The policies a decision depends on.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    /// `spec.sync.automatic`.
    pub automatic: bool,
    /// `spec.sync.selfHeal`.
    pub self_heal: bool,
    /// `spec.failurePolicy.maxAttempts`.
    pub max_attempts: u32,
    /// First retry delay.
    pub backoff: Duration,
    /// Factor between retry delays.
    pub factor: u32,
    /// Longest retry delay.
    pub max_backoff: Duration,
    /// `spec.health.timeout`.
    pub health_timeout: Duration,
}

/// The sync and failure policies of `app`, with the spec's defaults for what does not parse.
pub fn policy_of(app: &Application) -> Policy {
    let spec = &app.spec;
    let parse = |s: &str, d: u64| crate::api::duration::parse(s).unwrap_or(Duration::from_secs(d));
    Policy {
        automatic: spec.sync.automatic,
        self_heal: spec.sync.self_heal,
        max_attempts: u32::try_from(spec.failure_policy.max_attempts).unwrap_or(1).max(1),
        backoff: parse(&spec.failure_policy.backoff.duration, 10),
        factor: u32::try_from(spec.failure_policy.backoff.factor).unwrap_or(2).max(1),
        max_backoff: parse(&spec.failure_policy.backoff.max_duration, 300),
        health_timeout: parse(&spec.health.timeout, 300),
    }
}

/// Whether Revision status `rs` deployed the desired state `hash`. (Under a pending rollback,
/// `rollout::step_of` (the controller's) also asks that nothing would change, since going back to a Revision deployed
/// before another one is a rollout, and on manual sync that an approval of it completed.)
pub fn is_deployed(rs: &RevisionStatus, hash: &str) -> bool {
    rs.deployed_desired_state_hash.as_deref() == Some(hash)
}

/// Whether an operator asks to try again now: a new `reconcile-requested-at`.
pub fn retry_requested(app: &Application, old: &ApplicationStatus) -> bool {
    let requested = app.annotations().get(names::annotations::RECONCILE_REQUESTED_AT);
    requested.is_some() && requested != old.last_handled_reconcile_at.as_ref()
}

/// What to do.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Step {
    /// Manual sync: the plan waits for approval.
    AwaitApproval,
    /// Start attempt `number`: apply the plan.
    Start {
        /// The attempt's number.
        number: i32,
    },
    /// Attempt `number` applied its plan (or, with waves, its latest wave): wait for health
    /// until `deadline`.
    Watch {
        /// The attempt's number.
        number: i32,
        /// When the attempt fails with a health timeout.
        deadline: Timestamp,
    },
    /// The last attempt failed; the next starts at `at`.
    Retry {
        /// When.
        at: Timestamp,
    },
    /// Every attempt failed: paused until the desired state changes.
    Paused,
    /// The desired state is deployed: observe health and report drift.
    Observe,
}

/// Failed attempts of desired state `desired` since the last attempt that succeeded. A failure
/// counts against the desired state it tried to deploy (`None`: a render or validation failure,
/// which has none), so a desired state that changes (a redeploy, a `valuesFrom` edit, a render
/// that works again) starts with all its attempts.
pub fn consecutive_failures(attempts: &[Attempt], desired: Option<&str>) -> u32 {
    failed_since_success(attempts, desired).count() as u32
}

fn failed_since_success<'a>(attempts: &'a [Attempt], desired: Option<&'a str>) -> impl Iterator<Item = &'a Attempt> {
    attempts
        .iter()
        .rev()
        .take_while(|a| a.result == AttemptResult::Failed)
        .filter(move |a| a.desired_state_hash.as_deref() == desired)
}

/// When the next attempt at `desired` may start after `failures` of them failed: the backoff
/// from the end of the latest.
fn next_attempt_at(
    attempts: &[Attempt],
    desired: Option<&str>,
    failures: u32,
    policy: &Policy,
    now: Timestamp,
) -> Timestamp {
    let finished =
        failed_since_success(attempts, desired).next().and_then(|a| a.finished_at.as_ref()).map(|t| t.0).unwrap_or(now);
    let delay = jiff::SignedDuration::try_from(backoff(policy, failures)).unwrap_or(jiff::SignedDuration::MAX);
    finished.checked_add(delay).unwrap_or(Timestamp::MAX)
}

/// What the Application's failure message adds about attempts: which one failed and when the
/// next starts (`next`), or that they are used up.
pub fn attempts_note(failures: u32, policy: &Policy, next: Option<Timestamp>) -> String {
    let max = policy.max_attempts.max(1);
    match next {
        Some(at) => format!(" (attempt {failures} of {max}; next attempt at {at})"),
        None if failures >= max => {
            format!(" ({failures} of {max} attempts failed: paused until the desired state changes)")
        }
        None => format!(" (attempt {failures} of {max})"),
    }
}

/// Before a Revision whose rollout is due (not deployed, or a rollback's target) is rendered.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RenderStep {
    /// Render it. A render or validation failure is recorded as failed attempt `attempt`; with
    /// `None` it counts nothing: an attempt is running, or the attempts are used up and the
    /// render only looks for a desired state that works (a success is a new desired state).
    Render {
        /// The attempt a failure is recorded as.
        #[serde(default)]
        attempt: Option<i32>,
    },
    /// Backing off after a render or validation failure: nothing is rendered before `at`.
    Wait {
        /// When the next attempt renders.
        at: Timestamp,
    },
}

/// [`RenderStep`] for a Revision with status `status`. `retry_now`: an operator asked to try
/// again now (`reconcile-requested-at`), which skips the backoff and counts past the pause.
pub fn render_step(status: &RevisionStatus, policy: &Policy, now: Timestamp, retry_now: bool) -> RenderStep {
    let next = status.attempts.last().map(|a| a.number + 1).unwrap_or(1);
    if status.attempts.last().is_some_and(|a| a.result == AttemptResult::Running) {
        return RenderStep::Render { attempt: None };
    }
    let failures = consecutive_failures(&status.attempts, None);
    if failures == 0 || retry_now {
        return RenderStep::Render { attempt: Some(next) };
    }
    if failures >= policy.max_attempts.max(1) {
        return RenderStep::Render { attempt: None };
    }
    let at = next_attempt_at(&status.attempts, None, failures, policy, now);
    if now < at { RenderStep::Wait { at } } else { RenderStep::Render { attempt: Some(next) } }
}

/// The delay before retry `n` (1-based): `backoff × factorⁿ⁻¹`, at most `max_backoff`.
pub fn backoff(policy: &Policy, n: u32) -> Duration {
    let mut d = policy.backoff;
    for _ in 1..n {
        d = d.saturating_mul(policy.factor.max(1));
        if d >= policy.max_backoff {
            return policy.max_backoff;
        }
    }
    d.min(policy.max_backoff)
}

/// Decide for desired state `desired`. `deployed`: the Revision's `deployedDesiredStateHash` is
/// `desired`; `drifted`: the plan would change something; `approved`: an approval covers this
/// plan ([`super::approval`]): it may be applied on a manual-sync Application, and it repairs
/// drift without `selfHeal`. Only failures of `desired` count towards `maxAttempts` and the
/// backoff.
pub fn decide(
    status: &RevisionStatus,
    desired: &str,
    deployed: bool,
    drifted: bool,
    approved: bool,
    policy: &Policy,
    now: Timestamp,
) -> Step {
    let next = status.attempts.last().map(|a| a.number + 1).unwrap_or(1);
    if let Some(a) = status.attempts.last()
        && a.result == AttemptResult::Running
    {
        let timeout = jiff::SignedDuration::try_from(policy.health_timeout).unwrap_or(jiff::SignedDuration::MAX);
        // With waves, each wave has the whole timeout from when it was applied.
        let since = a.wave_started_at.as_ref().unwrap_or(&a.started_at).0;
        let deadline = since.checked_add(timeout).unwrap_or(Timestamp::MAX);
        return Step::Watch { number: a.number, deadline };
    }
    let needs_rollout = !deployed || (drifted && (policy.self_heal || approved));
    if !needs_rollout {
        return Step::Observe;
    }
    if !policy.automatic && !approved {
        return if deployed { Step::Observe } else { Step::AwaitApproval };
    }
    let failures = consecutive_failures(&status.attempts, Some(desired));
    if failures == 0 {
        return Step::Start { number: next };
    }
    if failures >= policy.max_attempts.max(1) {
        return Step::Paused;
    }
    let at = next_attempt_at(&status.attempts, Some(desired), failures, policy, now);
    if now < at { Step::Retry { at } } else { Step::Start { number: next } }
}

/// Whether a reconcile notices drift anew, for `ksync_drift_detected_total`: the desired state
/// is deployed (`deployed`; not a rollback's target), its plan would change something
/// (`drifted`), the Application did not say Drifted already (`before`, its sync state when the
/// reconcile started), and no repair of it has failed since it was deployed (`failures` of this
/// desired state: a retried repair is the same drift). So one drift counts once, whether it is
/// reported (no selfHeal) or repaired at once (selfHeal), however many reconciles see it.
pub fn drift_is_new(deployed: bool, drifted: bool, before: SyncState, failures: u32) -> bool {
    deployed && drifted && before != SyncState::Drifted && failures == 0
}

/// Whether an attempt that succeeded repaired drift, for `ksync_drift_repaired_total`: it
/// applied (`applied`) the desired state that was deployed already (`deployed`), and was not a
/// rollback (which may re-apply a Revision's deployed state too). Drift undone by someone else
/// is not counted.
pub fn repairs_drift(deployed: Option<&str>, applied: Option<&str>, rollback: bool) -> bool {
    !rollback && applied.is_some() && applied == deployed
}

/// Append `attempt`, keeping the last [`MAX_ATTEMPTS_KEPT`].
pub fn push(attempts: &mut Vec<Attempt>, attempt: Attempt) {
    attempts.push(attempt);
    let excess = attempts.len().saturating_sub(MAX_ATTEMPTS_KEPT);
    attempts.drain(..excess);
}

/// What [`step`] decides from: one reconcile's view of a planned Revision.
#[derive(Clone, Copy)]
pub struct Situation<'a> {
    /// The Application, as the reconcile reads it (its approval and retry annotations).
    pub app: &'a Application,
    /// Its status as stored when the reconcile began.
    pub old: &'a ApplicationStatus,
    /// The Revision's name.
    pub revision: &'a str,
    /// The Revision's status.
    pub status: &'a RevisionStatus,
    /// The desired-state hash of the plan.
    pub desired: &'a str,
    /// The plan's digest (what an approval is bound to).
    pub plan_digest: &'a str,
    /// Whether the plan would change anything.
    pub changes: bool,
    /// The reconcile's clock.
    pub now: Timestamp,
    /// A pending, valid rollback request.
    pub rollback: Option<&'a rollback::Request>,
    /// The Application's policy ([`policy_of`]).
    pub policy: &'a Policy,
}

/// The step a reconcile takes on the planned Revision `s.revision`, whose status is `s.status`, with the
/// approval it judged. Under a pending `s.rollback`, approvals given before its request do not
/// count, and its target is deployed only when nothing would change.
pub fn step(s: &Situation) -> (Step, approval::Verdict) {
    let Situation { app, old, status: rs, desired, plan_digest, changes, now, rollback, policy, .. } = *s;
    let not_before = rollback.and_then(|r| r.requested_at);
    let request = approval::request_of(app.annotations());
    // A rollback's target is deployed once nothing would change; on a manual-sync Application
    // also only once an approval given for the rollback completed a rollout of it, even when it
    // was live all along.
    let deployed = is_deployed(rs, desired)
        && rollback.is_none_or(|_| {
            !changes
                && (policy.automatic
                    || approval::completed_since(rs.approval.as_ref(), &rs.attempts, not_before, request.as_ref()))
        });
    let mut verdict = approval::judge(&approval::Facts {
        request,
        recorded: rs.approval.clone(),
        attempts: rs.attempts.clone(),
        plan: plan_digest.to_string(),
        desired: desired.to_string(),
        not_before,
        now,
    });
    if !verdict.approves()
        && let Some(own) = rollback.and_then(|r| rollback_approval(s, r))
    {
        verdict = own;
    }
    let step = decide(rs, desired, deployed, changes, verdict.approves(), policy, now);
    // A new approval of this plan is an operator asking to try again now too.
    let retry_now = retry_requested(app, old) || matches!(verdict, approval::Verdict::Approved(_));
    if matches!(step, Step::Paused | Step::Retry { .. }) && retry_now {
        return (Step::Start { number: rs.attempts.last().map(|a| a.number + 1).unwrap_or(1) }, verdict);
    }
    (step, verdict)
}

/// A manual rollback's own approval ([`crate::decisions::rollback`]): with a recorded requester and chosen
/// Revision, bound to this Revision, to the desired state it deployed and to `spec.sync` and
/// `spec.strategy` at request time (`rollback-target-hash`). `Stale` when the target changed
/// since; `None` when the request is not such a manual rollback.
fn rollback_approval(s: &Situation, r: &rollback::Request) -> Option<approval::Verdict> {
    use rollback::Kind;
    let Situation { app, revision: rev, status: rs, desired, plan_digest, now, .. } = *s;
    let by = r.requested_by.as_ref().filter(|_| r.kind == Kind::Manual)?;
    let chosen = r.target_revision.as_deref()?;
    let deployed = rs.deployed_desired_state_hash.as_deref();
    let bound = chosen == rev
        && deployed == Some(desired)
        && r.target_hash.as_deref()
            == Some(
                crate::plan::target_hash::rollback_target_hash(desired, &app.spec.sync, &app.spec.strategy).as_str(),
            );
    if !bound {
        return Some(approval::Verdict::TargetChanged { chosen: chosen.to_string() });
    }
    Some(approval::Verdict::Approved(crate::api::revision::Approval {
        user: by.clone(),
        time: k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(approval::recorded_time(
            r.requested_at.unwrap_or(now),
        )),
        plan_digest: plan_digest.to_string(),
        source: Some(approval::MANUAL_ROLLBACK.to_string()),
        desired_state_hash: Some(desired.to_string()),
        attempt: None,
    }))
}

/// How often a rollout waiting for health looks again when something it waits for is not
/// watched (a kind this shard has no watch of, a running hook).
pub const HEALTH_POLL: Duration = Duration::from_secs(2);

/// How often it looks again when every resource it waits for is in a running, synced watch of
/// this shard: each change of theirs, or of their Pods, triggers a reconcile at once, so this
/// only covers an event lost with a broken watch.
pub const WATCHED_POLL: Duration = Duration::from_secs(30);

/// How soon a rollout's health is looked at again after its HealthChecks went over the
/// per-reconcile budget: every look spends the budget again, on objects that will not get
/// cheaper by the next poll.
pub const OVER_BUDGET_POLL: Duration = Duration::from_secs(30);

/// The soonest a rollout looks again.
const MIN_POLL: Duration = Duration::from_millis(200);

/// When a rollout waiting for health, `until_deadline` before its health deadline, looks again.
///
/// # Contract
/// - over its HealthChecks' budget: [`OVER_BUDGET_POLL`];
/// - else, everything it waits for `watched` (every resource in a running, synced watch of the
///   shard, no hook running): [`WATCHED_POLL`], since their changes trigger it;
/// - else [`HEALTH_POLL`];
/// - never later than the deadline (the timeout is told when it passes, not a poll after), and
///   never sooner than 200 ms.
///
/// Table test: `a_rollout_waiting_for_watched_resources_polls_rarely_but_not_past_its_deadline`.
pub fn health_poll(over_budget: bool, watched: bool, until_deadline: Duration) -> Duration {
    let poll = if over_budget {
        OVER_BUDGET_POLL
    } else if watched {
        WATCHED_POLL
    } else {
        HEALTH_POLL
    };
    poll.min(until_deadline).max(MIN_POLL)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    #[test]
    fn a_rollout_waiting_for_watched_resources_polls_rarely_but_not_past_its_deadline() {
        let s = Duration::from_secs;
        // (over budget, watched, until the deadline, poll)
        let cases = [
            (false, false, s(600), HEALTH_POLL),
            (false, true, s(600), WATCHED_POLL),
            (true, false, s(600), OVER_BUDGET_POLL),
            (true, true, s(600), OVER_BUDGET_POLL),
            (false, true, s(5), s(5)),
            (false, false, s(1), s(1)),
            (false, true, Duration::ZERO, Duration::from_millis(200)),
        ];
        for (over_budget, watched, until, want) in cases {
            assert_eq!(health_poll(over_budget, watched, until), want, "{over_budget} {watched} {until:?}");
        }
    }

    fn policy() -> Policy {
        Policy {
            automatic: true,
            self_heal: false,
            max_attempts: 3,
            backoff: Duration::from_secs(10),
            factor: 2,
            max_backoff: Duration::from_secs(300),
            health_timeout: Duration::from_secs(300),
        }
    }

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn attempt(number: i32, result: AttemptResult, started: &str, finished: Option<&str>) -> Attempt {
        Attempt {
            number,
            started_at: Time(t(started)),
            finished_at: finished.map(|f| Time(t(f))),
            result,
            reason: None,
            plan_digest: None,
            wave: None,
            wave_started_at: None,
            hook: None,
            desired_state_hash: Some("D1".to_string()),
        }
    }

    fn with(attempts: Vec<Attempt>) -> RevisionStatus {
        RevisionStatus { attempts, ..Default::default() }
    }

    const NOW: &str = "2026-01-01T00:10:00Z";

    #[test]
    fn a_new_desired_state_starts_the_first_attempt() {
        assert_eq!(decide(&with(vec![]), "D1", false, true, false, &policy(), t(NOW)), Step::Start { number: 1 });
        // Nothing to change still needs a completed rollout (health), once.
        assert_eq!(decide(&with(vec![]), "D1", false, false, false, &policy(), t(NOW)), Step::Start { number: 1 });
    }

    #[test]
    fn a_running_attempt_is_watched_until_the_health_timeout() {
        let s = with(vec![attempt(1, AttemptResult::Running, "2026-01-01T00:08:00Z", None)]);
        assert_eq!(
            decide(&s, "D1", false, true, false, &policy(), t(NOW)),
            Step::Watch { number: 1, deadline: t("2026-01-01T00:13:00Z") }
        );
        // A later wave: its own timeout, from when it was applied.
        let mut waves = attempt(1, AttemptResult::Running, "2026-01-01T00:08:00Z", None);
        waves.wave = Some(2);
        waves.wave_started_at = Some(Time(t("2026-01-01T00:09:30Z")));
        assert_eq!(
            decide(&with(vec![waves]), "D1", false, true, false, &policy(), t(NOW)),
            Step::Watch { number: 1, deadline: t("2026-01-01T00:14:30Z") }
        );
    }

    #[test]
    fn deployed_state_is_observed_and_drift_is_repaired_only_with_self_heal() {
        let s = with(vec![attempt(1, AttemptResult::Succeeded, "2026-01-01T00:00:00Z", Some("2026-01-01T00:01:00Z"))]);
        assert_eq!(decide(&s, "D1", true, false, false, &policy(), t(NOW)), Step::Observe);
        assert_eq!(decide(&s, "D1", true, true, false, &policy(), t(NOW)), Step::Observe);
        let heal = Policy { self_heal: true, ..policy() };
        assert_eq!(decide(&s, "D1", true, true, false, &heal, t(NOW)), Step::Start { number: 2 });
        // The same desired state changed under the Revision (new valuesFrom): a rollout.
        assert_eq!(decide(&s, "D1", false, true, false, &policy(), t(NOW)), Step::Start { number: 2 });
    }

    #[test]
    fn drift_counts_once_when_noticed_and_when_repaired() {
        use SyncState::*;
        // Noticed: on a deployed desired state, by the first reconcile that sees it.
        assert!(drift_is_new(true, true, Synced, 0));
        assert!(drift_is_new(true, true, Unknown, 0));
        // Reported already (no selfHeal: the Application says Drifted) or being repaired (a
        // failed self-heal is retried): the same drift.
        assert!(!drift_is_new(true, true, Drifted, 0));
        assert!(!drift_is_new(true, true, OutOfSync, 1));
        // Nothing differs, or the desired state is not deployed yet (a rollout, not drift).
        assert!(!drift_is_new(true, false, Synced, 0));
        assert!(!drift_is_new(false, true, Synced, 0));
        assert!(!drift_is_new(false, true, OutOfSync, 0));
        // Repaired: an attempt re-applied the deployed desired state.
        assert!(repairs_drift(Some("D1"), Some("D1"), false));
        assert!(!repairs_drift(Some("D1"), Some("D2"), false), "a new desired state deployed");
        assert!(!repairs_drift(None, Some("D1"), false), "the first deployment");
        assert!(!repairs_drift(Some("D1"), Some("D1"), true), "a rollback");
        assert!(!repairs_drift(None, None, false));
    }

    #[test]
    fn manual_sync_waits_for_approval() {
        let manual = Policy { automatic: false, ..policy() };
        assert_eq!(decide(&with(vec![]), "D1", false, true, false, &manual, t(NOW)), Step::AwaitApproval);
        let s = with(vec![attempt(1, AttemptResult::Succeeded, "2026-01-01T00:00:00Z", Some("2026-01-01T00:01:00Z"))]);
        assert_eq!(decide(&s, "D1", true, true, false, &manual, t(NOW)), Step::Observe);
        // Approved: the plan is applied, and drift is repaired even without selfHeal.
        assert_eq!(decide(&with(vec![]), "D1", false, true, true, &manual, t(NOW)), Step::Start { number: 1 });
        assert_eq!(decide(&s, "D1", true, true, true, &manual, t(NOW)), Step::Start { number: 2 });
        assert_eq!(decide(&s, "D1", true, false, true, &manual, t(NOW)), Step::Observe, "nothing to repair");
        // An approved retry still backs off.
        let failed =
            with(vec![attempt(1, AttemptResult::Failed, "2026-01-01T00:09:00Z", Some("2026-01-01T00:09:55Z"))]);
        assert_eq!(
            decide(&failed, "D1", false, true, true, &manual, t(NOW)),
            Step::Retry { at: t("2026-01-01T00:10:05Z") }
        );
    }

    #[test]
    fn failures_back_off_then_pause() {
        let one = with(vec![attempt(1, AttemptResult::Failed, "2026-01-01T00:09:00Z", Some("2026-01-01T00:09:55Z"))]);
        assert_eq!(
            decide(&one, "D1", false, true, false, &policy(), t(NOW)),
            Step::Retry { at: t("2026-01-01T00:10:05Z") }
        );
        assert_eq!(
            decide(&one, "D1", false, true, false, &policy(), t("2026-01-01T00:10:05Z")),
            Step::Start { number: 2 }
        );
        let two = with(vec![
            attempt(1, AttemptResult::Failed, "2026-01-01T00:00:00Z", Some("2026-01-01T00:01:00Z")),
            attempt(2, AttemptResult::Failed, "2026-01-01T00:09:00Z", Some("2026-01-01T00:09:50Z")),
        ]);
        // The second retry waits 20 s.
        assert_eq!(
            decide(&two, "D1", false, true, false, &policy(), t(NOW)),
            Step::Retry { at: t("2026-01-01T00:10:10Z") }
        );
        let three = with(vec![
            attempt(1, AttemptResult::Failed, "2026-01-01T00:00:00Z", Some("2026-01-01T00:01:00Z")),
            attempt(2, AttemptResult::Failed, "2026-01-01T00:02:00Z", Some("2026-01-01T00:03:00Z")),
            attempt(3, AttemptResult::Failed, "2026-01-01T00:04:00Z", Some("2026-01-01T00:05:00Z")),
        ]);
        assert_eq!(decide(&three, "D1", false, true, false, &policy(), t(NOW)), Step::Paused);
        // A success resets the count.
        let mut healed = three.clone();
        healed.attempts.push(attempt(
            4,
            AttemptResult::Succeeded,
            "2026-01-01T00:06:00Z",
            Some("2026-01-01T00:07:00Z"),
        ));
        healed.attempts.push(attempt(5, AttemptResult::Failed, "2026-01-01T00:08:00Z", Some("2026-01-01T00:09:00Z")));
        assert_eq!(consecutive_failures(&healed.attempts, Some("D1")), 1);
    }

    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Table {
        failures: Vec<FailuresCase>,
        render: Vec<RenderCase>,
        decide: Vec<DecideCase>,
    }

    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct FailuresCase {
        name: String,
        desired: Option<String>,
        attempts: Vec<Attempt>,
        want: u32,
    }

    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct RenderCase {
        name: String,
        #[serde(default)]
        attempts: Vec<Attempt>,
        now: Timestamp,
        #[serde(default)]
        retry_now: bool,
        want: RenderStep,
    }

    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct DecideCase {
        name: String,
        desired: String,
        attempts: Vec<Attempt>,
        now: Timestamp,
        want: Step,
    }

    #[test]
    fn table() {
        let t: Table = crate::yaml::from_str(include_str!("../../testdata/rollout/attempts.yaml")).unwrap();
        assert!(t.failures.len() >= 3 && t.render.len() >= 10 && t.decide.len() >= 4);
        for c in t.failures {
            assert_eq!(consecutive_failures(&c.attempts, c.desired.as_deref()), c.want, "{}", c.name);
        }
        for c in t.render {
            assert_eq!(render_step(&with(c.attempts), &policy(), c.now, c.retry_now), c.want, "{}", c.name);
        }
        for c in t.decide {
            assert_eq!(
                decide(&with(c.attempts), &c.desired, false, true, false, &policy(), c.now),
                c.want,
                "{}",
                c.name
            );
        }
    }

    #[test]
    fn attempts_are_noted_on_the_failure() {
        let p = policy();
        assert_eq!(attempts_note(1, &p, None), " (attempt 1 of 3)");
        assert_eq!(attempts_note(3, &p, None), " (3 of 3 attempts failed: paused until the desired state changes)");
        assert_eq!(
            attempts_note(2, &p, Some(t("2026-01-01T00:10:05Z"))),
            " (attempt 2 of 3; next attempt at 2026-01-01T00:10:05Z)"
        );
    }

    #[test]
    fn backoff_grows_by_the_factor_up_to_the_maximum() {
        let p = policy();
        assert_eq!(backoff(&p, 1), Duration::from_secs(10));
        assert_eq!(backoff(&p, 2), Duration::from_secs(20));
        assert_eq!(backoff(&p, 3), Duration::from_secs(40));
        assert_eq!(backoff(&p, 10), Duration::from_secs(300));
    }

    #[test]
    fn attempts_are_bounded() {
        let mut v = Vec::new();
        for n in 1..=25 {
            push(&mut v, attempt(n, AttemptResult::Failed, "2026-01-01T00:00:00Z", None));
        }
        assert_eq!(v.len(), MAX_ATTEMPTS_KEPT);
        assert_eq!(v[0].number, 6);
        assert_eq!(v.last().unwrap().number, 25);
    }

    /// A manual rollback's own approval counts only for the Revision it chose, at the desired
    /// state that Revision deployed and the sync settings of the request.
    #[test]
    fn a_manual_rollback_approves_only_the_target_it_chose() {
        let app: Application = serde_json::from_value(serde_json::json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "a", "namespace": "ns"},
            "spec": {"source": {"repository": "repo", "path": "p"}, "serviceAccountName": "sa",
                     "destination": {"namespace": "ns"}, "sync": {"automatic": false}},
        }))
        .unwrap();
        let old = ApplicationStatus::default();
        let deployed = RevisionStatus { deployed_desired_state_hash: Some("D1".into()), ..Default::default() };
        let bound = crate::plan::target_hash::rollback_target_hash("D1", &app.spec.sync, &app.spec.strategy);
        let request = |target: &str, hash: &str| rollback::Request {
            to: "abcdef1".into(),
            kind: rollback::Kind::Manual,
            target_revision: Some(target.into()),
            requested_by: Some("alice".into()),
            requested_at: Some(t(NOW)),
            target_hash: Some(hash.into()),
            ..Default::default()
        };
        // (chosen Revision, bound hash, desired state deployed, approved)
        let cases = [
            ("r1", bound.as_str(), "D1", true),
            ("r0", bound.as_str(), "D1", false),
            ("r1", "another", "D1", false),
            ("r1", bound.as_str(), "D2", false),
        ];
        for (chosen, hash, desired, approved) in cases {
            let r = request(chosen, hash);
            let s = Situation {
                app: &app,
                old: &old,
                revision: "r1",
                status: &deployed,
                desired,
                plan_digest: "P1",
                changes: true,
                now: t(NOW),
                rollback: Some(&r),
                policy: &policy_of(&app),
            };
            let (step, verdict) = step(&s);
            assert_eq!(verdict.approves(), approved, "{chosen} {hash} {desired}: {verdict:?}");
            assert_eq!(matches!(step, Step::Start { .. }), approved, "{chosen} {hash} {desired}: {step:?}");
        }
    }
}
