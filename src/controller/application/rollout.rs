//! The rollout's decisions, pure: what a reconcile does with a planned Revision given its
//! attempts, whether its desired state is deployed, the sync policy and the failure policy.

use std::time::Duration;

use jiff::Timestamp;

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

/// What to do.
#[derive(Clone, Debug, PartialEq, Eq)]
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

/// Failed attempts since the last one that succeeded.
pub fn consecutive_failures(attempts: &[Attempt]) -> u32 {
    attempts.iter().rev().take_while(|a| a.result == AttemptResult::Failed).count() as u32
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

/// Decide. `deployed`: the Revision's `deployedDesiredStateHash` is the current desired state;
/// `drifted`: the plan would change something; `approved`: an approval covers this plan
/// ([`super::approval`]): it may be applied on a manual-sync Application, and it repairs drift
/// without `selfHeal`.
pub fn decide(
    status: &RevisionStatus,
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
    let failures = consecutive_failures(&status.attempts);
    if failures == 0 {
        return Step::Start { number: next };
    }
    if failures >= policy.max_attempts.max(1) {
        return Step::Paused;
    }
    let finished = status.attempts.last().and_then(|a| a.finished_at.as_ref()).map(|t| t.0).unwrap_or(now);
    let delay = jiff::SignedDuration::try_from(backoff(policy, failures)).unwrap_or(jiff::SignedDuration::MAX);
    let at = finished.checked_add(delay).unwrap_or(Timestamp::MAX);
    if now < at { Step::Retry { at } } else { Step::Start { number: next } }
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
            desired_state_hash: None,
        }
    }

    fn with(attempts: Vec<Attempt>) -> RevisionStatus {
        RevisionStatus { attempts, ..Default::default() }
    }

    const NOW: &str = "2026-01-01T00:10:00Z";

    #[test]
    fn a_new_desired_state_starts_the_first_attempt() {
        assert_eq!(decide(&with(vec![]), false, true, false, &policy(), t(NOW)), Step::Start { number: 1 });
        // Nothing to change still needs a completed rollout (health), once.
        assert_eq!(decide(&with(vec![]), false, false, false, &policy(), t(NOW)), Step::Start { number: 1 });
    }

    #[test]
    fn a_running_attempt_is_watched_until_the_health_timeout() {
        let s = with(vec![attempt(1, AttemptResult::Running, "2026-01-01T00:08:00Z", None)]);
        assert_eq!(
            decide(&s, false, true, false, &policy(), t(NOW)),
            Step::Watch { number: 1, deadline: t("2026-01-01T00:13:00Z") }
        );
        // A later wave: its own timeout, from when it was applied.
        let mut waves = attempt(1, AttemptResult::Running, "2026-01-01T00:08:00Z", None);
        waves.wave = Some(2);
        waves.wave_started_at = Some(Time(t("2026-01-01T00:09:30Z")));
        assert_eq!(
            decide(&with(vec![waves]), false, true, false, &policy(), t(NOW)),
            Step::Watch { number: 1, deadline: t("2026-01-01T00:14:30Z") }
        );
    }

    #[test]
    fn deployed_state_is_observed_and_drift_is_repaired_only_with_self_heal() {
        let s = with(vec![attempt(1, AttemptResult::Succeeded, "2026-01-01T00:00:00Z", Some("2026-01-01T00:01:00Z"))]);
        assert_eq!(decide(&s, true, false, false, &policy(), t(NOW)), Step::Observe);
        assert_eq!(decide(&s, true, true, false, &policy(), t(NOW)), Step::Observe);
        let heal = Policy { self_heal: true, ..policy() };
        assert_eq!(decide(&s, true, true, false, &heal, t(NOW)), Step::Start { number: 2 });
        // The same desired state changed under the Revision (new valuesFrom): a rollout.
        assert_eq!(decide(&s, false, true, false, &policy(), t(NOW)), Step::Start { number: 2 });
    }

    #[test]
    fn manual_sync_waits_for_approval() {
        let manual = Policy { automatic: false, ..policy() };
        assert_eq!(decide(&with(vec![]), false, true, false, &manual, t(NOW)), Step::AwaitApproval);
        let s = with(vec![attempt(1, AttemptResult::Succeeded, "2026-01-01T00:00:00Z", Some("2026-01-01T00:01:00Z"))]);
        assert_eq!(decide(&s, true, true, false, &manual, t(NOW)), Step::Observe);
        // Approved: the plan is applied, and drift is repaired even without selfHeal.
        assert_eq!(decide(&with(vec![]), false, true, true, &manual, t(NOW)), Step::Start { number: 1 });
        assert_eq!(decide(&s, true, true, true, &manual, t(NOW)), Step::Start { number: 2 });
        assert_eq!(decide(&s, true, false, true, &manual, t(NOW)), Step::Observe, "nothing to repair");
        // An approved retry still backs off.
        let failed =
            with(vec![attempt(1, AttemptResult::Failed, "2026-01-01T00:09:00Z", Some("2026-01-01T00:09:55Z"))]);
        assert_eq!(decide(&failed, false, true, true, &manual, t(NOW)), Step::Retry { at: t("2026-01-01T00:10:05Z") });
    }

    #[test]
    fn failures_back_off_then_pause() {
        let one = with(vec![attempt(1, AttemptResult::Failed, "2026-01-01T00:09:00Z", Some("2026-01-01T00:09:55Z"))]);
        assert_eq!(decide(&one, false, true, false, &policy(), t(NOW)), Step::Retry { at: t("2026-01-01T00:10:05Z") });
        assert_eq!(decide(&one, false, true, false, &policy(), t("2026-01-01T00:10:05Z")), Step::Start { number: 2 });
        let two = with(vec![
            attempt(1, AttemptResult::Failed, "2026-01-01T00:00:00Z", Some("2026-01-01T00:01:00Z")),
            attempt(2, AttemptResult::Failed, "2026-01-01T00:09:00Z", Some("2026-01-01T00:09:50Z")),
        ]);
        // The second retry waits 20 s.
        assert_eq!(decide(&two, false, true, false, &policy(), t(NOW)), Step::Retry { at: t("2026-01-01T00:10:10Z") });
        let three = with(vec![
            attempt(1, AttemptResult::Failed, "2026-01-01T00:00:00Z", Some("2026-01-01T00:01:00Z")),
            attempt(2, AttemptResult::Failed, "2026-01-01T00:02:00Z", Some("2026-01-01T00:03:00Z")),
            attempt(3, AttemptResult::Failed, "2026-01-01T00:04:00Z", Some("2026-01-01T00:05:00Z")),
        ]);
        assert_eq!(decide(&three, false, true, false, &policy(), t(NOW)), Step::Paused);
        // A success resets the count.
        let mut healed = three.clone();
        healed.attempts.push(attempt(
            4,
            AttemptResult::Succeeded,
            "2026-01-01T00:06:00Z",
            Some("2026-01-01T00:07:00Z"),
        ));
        healed.attempts.push(attempt(5, AttemptResult::Failed, "2026-01-01T00:08:00Z", Some("2026-01-01T00:09:00Z")));
        assert_eq!(consecutive_failures(&healed.attempts), 1);
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
