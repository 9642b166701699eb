//! The rollout's decisions, pure: what a reconcile does with a planned Revision given its
//! attempts, whether its desired state is deployed, the sync policy and the failure policy.

use std::time::Duration;

use jiff::Timestamp;
use kube::ResourceExt;

use crate::api::application::{Application, ApplicationStatus, SyncState};
use crate::api::names;
use crate::api::revision::{Attempt, AttemptResult, MAX_ATTEMPTS_KEPT, RevisionStatus};

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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

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
}
