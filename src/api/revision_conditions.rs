//! A Revision's kstatus conditions (`Ready`, `Reconciling`, `Stalled`), derived from its phase,
//! its failure and its hold, so that `kubectl wait --for=condition=Ready revision/NAME` and kstatus
//! readers (Flux's, cli-utils') tell a Revision's outcome without knowing its phases.
//!
//! Contract of [`set`]:
//! - `Planning`, `Applying`, `Progressing`: `Reconciling=True` and `Ready=Unknown`, reason
//!   `Progressing`;
//! - `AwaitingApproval`: `Ready=False`, reason `AwaitingApproval`; neither `Reconciling` nor
//!   `Stalled` (nothing happens until someone approves);
//! - `Healthy`: `Ready=True`, reason `Succeeded`;
//! - `Failed` and held (a `RolledBack` condition): `Stalled=True` and `Ready=False`, reason
//!   `RolledBack` and the hold's message;
//! - `Failed` otherwise: `Ready=False` with `status.failure`'s reason and message, and
//!   `Reconciling=True` when another attempt is scheduled (`retrying`), else `Stalled=True`.
//!
//! Messages depend only on the phase, the attempt number, the plan digest and the failure, so a
//! reconcile that changes nothing else writes nothing.

use k8s_openapi::jiff::Timestamp;

use super::conditions;
use super::names::{conditions as types, reasons};
use super::revision::{RevisionPhase, RevisionStatus};

/// Set `rs`'s `Ready`, `Reconciling` and `Stalled` (see the module contract); `retrying`: a failed
/// Revision's next attempt is scheduled. `RolledBack` and any other condition are left alone.
pub fn set(rs: &mut RevisionStatus, retrying: bool, now: Timestamp) {
    let generation = rs.observed_generation;
    let attempt = rs.attempts.last().map(|a| a.number);
    let of_attempt = |what: &str| match attempt {
        Some(n) => format!("attempt {n}: {what}"),
        None => what.to_string(),
    };
    let conditions = &mut rs.conditions;
    match rs.phase {
        RevisionPhase::Planning => {
            conditions::mark_reconciling(conditions, reasons::PROGRESSING, "rendering and planning", generation, now);
        }
        RevisionPhase::Applying => {
            conditions::mark_reconciling(conditions, reasons::PROGRESSING, &of_attempt("applying"), generation, now);
        }
        RevisionPhase::Progressing => {
            let message = of_attempt("applied, waiting for its resources to become Healthy");
            conditions::mark_reconciling(conditions, reasons::PROGRESSING, &message, generation, now);
        }
        RevisionPhase::AwaitingApproval => {
            let message = match rs.plan.as_ref().map(|p| p.digest.as_str()).filter(|d| !d.is_empty()) {
                Some(digest) => format!("plan {digest} waits for approval (ksync sync)"),
                None => "the plan waits for approval (ksync sync)".to_string(),
            };
            conditions::mark_waiting(conditions, reasons::AWAITING_APPROVAL, &message, generation, now);
        }
        RevisionPhase::Healthy => {
            let message = of_attempt("completed, every resource is Healthy");
            conditions::mark_ready(conditions, reasons::SUCCEEDED, &message, generation, now);
        }
        RevisionPhase::Failed => {
            if conditions::is_true(conditions, types::ROLLED_BACK) {
                let message = conditions::get(conditions, types::ROLLED_BACK).map(|c| c.message.clone());
                conditions::mark_stalled(
                    conditions,
                    reasons::ROLLED_BACK,
                    &message.unwrap_or_default(),
                    generation,
                    now,
                );
                return;
            }
            let (reason, message) = match &rs.failure {
                Some(f) => (f.reason.clone(), f.message.clone()),
                None => (
                    rs.attempts.last().and_then(|a| a.reason.clone()).unwrap_or_else(|| "Failed".to_string()),
                    "the rollout failed".to_string(),
                ),
            };
            if retrying {
                conditions::mark_failed(conditions, &reason, &message, generation, now);
            } else {
                conditions::mark_stalled(conditions, &reason, &message, generation, now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::conditions::Status;
    use crate::api::revision::{Attempt, AttemptResult, Failure, Plan};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn attempt(number: i32) -> Attempt {
        serde_json::from_value(serde_json::json!({
            "number": number, "startedAt": "2027-01-15T08:00:00Z", "result": "Running",
        }))
        .unwrap()
    }

    fn status(phase: RevisionPhase) -> RevisionStatus {
        RevisionStatus { observed_generation: Some(2), phase, attempts: vec![attempt(3)], ..Default::default() }
    }

    /// (type, status, reason) of one condition.
    type Seen = (String, String, String);

    /// One case: name, status before, `retrying`, the conditions after, `Ready`'s message.
    type Case = (&'static str, RevisionStatus, bool, Vec<Seen>, &'static str);

    /// (type, status, reason) of every condition, in order.
    fn seen(rs: &RevisionStatus) -> Vec<Seen> {
        rs.conditions.iter().map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone())).collect()
    }

    fn c(type_: &str, status: &str, reason: &str) -> Seen {
        (type_.to_string(), status.to_string(), reason.to_string())
    }

    fn failure(reason: &str) -> Option<Failure> {
        Some(Failure { reason: reason.into(), message: format!("{reason}: why"), retryable: true })
    }

    #[test]
    fn each_phase_sets_ready_reconciling_and_stalled() {
        let held = || {
            let mut rs = status(RevisionPhase::Failed);
            rs.failure = failure("Degraded");
            conditions::set(
                &mut rs.conditions,
                types::ROLLED_BACK,
                Status::True,
                reasons::MANUAL_ROLLBACK,
                "rolled back to Revision web-1",
                Some(2),
                t(0),
            );
            rs
        };
        let awaiting = || {
            let mut rs = status(RevisionPhase::AwaitingApproval);
            rs.plan = Some(Plan { digest: "sha256:abc".into(), ..Default::default() });
            rs
        };
        let failed = |reason: &str| RevisionStatus { failure: failure(reason), ..status(RevisionPhase::Failed) };
        #[rustfmt::skip]
        let cases: Vec<Case> = vec![
            ("planning", status(RevisionPhase::Planning), false,
                vec![c("Ready", "Unknown", "Progressing"), c("Reconciling", "True", "Progressing")], "rendering and planning"),
            ("applying", status(RevisionPhase::Applying), false,
                vec![c("Ready", "Unknown", "Progressing"), c("Reconciling", "True", "Progressing")], "attempt 3: applying"),
            ("progressing", status(RevisionPhase::Progressing), false,
                vec![c("Ready", "Unknown", "Progressing"), c("Reconciling", "True", "Progressing")],
                "attempt 3: applied, waiting for its resources to become Healthy"),
            ("awaiting approval", awaiting(), false,
                vec![c("Ready", "False", "AwaitingApproval")], "plan sha256:abc waits for approval (ksync sync)"),
            ("healthy", status(RevisionPhase::Healthy), false,
                vec![c("Ready", "True", "Succeeded")], "attempt 3: completed, every resource is Healthy"),
            ("failed, retried", failed("HealthTimeout"), true,
                vec![c("Ready", "False", "HealthTimeout"), c("Reconciling", "True", "HealthTimeout")], "HealthTimeout: why"),
            ("failed, not retried", failed("ValidationFailure"), false,
                vec![c("Ready", "False", "ValidationFailure"), c("Stalled", "True", "ValidationFailure")], "ValidationFailure: why"),
            ("superseded", failed("Superseded"), false,
                vec![c("Ready", "False", "Superseded"), c("Stalled", "True", "Superseded")], "Superseded: why"),
            // A hold is final even when the failure it holds was being retried.
            ("held", held(), true,
                vec![c("Ready", "False", "RolledBack"), c("RolledBack", "True", "ManualRollback"), c("Stalled", "True", "RolledBack")],
                "rolled back to Revision web-1"),
        ];
        for (name, mut rs, retrying, want, message) in cases {
            set(&mut rs, retrying, t(10));
            assert_eq!(seen(&rs), want, "{name}");
            let ready = conditions::get(&rs.conditions, types::READY).unwrap();
            assert_eq!(ready.message, message, "{name}");
            assert!(rs.conditions.iter().all(|c| c.observed_generation == Some(2)), "{name}");
        }
    }

    #[test]
    fn a_phase_change_replaces_the_other_kstatus_conditions_and_a_repeat_changes_nothing() {
        let mut rs = status(RevisionPhase::Progressing);
        set(&mut rs, false, t(0));
        rs.phase = RevisionPhase::Failed;
        rs.failure = failure("Degraded");
        set(&mut rs, false, t(10));
        assert_eq!(seen(&rs), vec![c("Ready", "False", "Degraded"), c("Stalled", "True", "Degraded")]);
        // The next attempt starts: Stalled goes, Reconciling comes back.
        rs.phase = RevisionPhase::Applying;
        rs.attempts.push(Attempt { number: 4, result: AttemptResult::Running, ..attempt(4) });
        set(&mut rs, false, t(20));
        assert_eq!(seen(&rs), vec![c("Ready", "Unknown", "Progressing"), c("Reconciling", "True", "Progressing")]);
        // Nothing moved: the same conditions, transition times kept.
        let before = rs.clone();
        set(&mut rs, false, t(30));
        assert_eq!(rs, before);
        assert_eq!(conditions::get(&rs.conditions, types::READY).unwrap().last_transition_time, Time(t(20)));
    }
}
