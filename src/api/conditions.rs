//! The one conditions helper every controller uses (never edit `status.conditions` by hand).
//!
//! Guarantees, after the manner of fluxcd `runtime/conditions`:
//! - [`set`] always records `observedGeneration`;
//! - `lastTransitionTime` moves only when the status, reason or message changes;
//! - conditions keep a stable order: `Ready` first, then the rest by type;
//! - the kstatus helpers ([`mark_ready`], [`mark_reconciling`], [`mark_stalled`],
//!   [`mark_failed`], [`mark_waiting`]) keep `Ready`, `Reconciling` and `Stalled` mutually consistent.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use super::names::conditions::{READY, RECONCILING, STALLED};

/// `status` value of a condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// `"True"`
    True,
    /// `"False"`
    False,
    /// `"Unknown"`
    Unknown,
}

impl Status {
    /// The API string.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::True => "True",
            Status::False => "False",
            Status::Unknown => "Unknown",
        }
    }
}

/// Find a condition by type.
pub fn get<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition exists with status `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    get(conditions, type_).is_some_and(|c| c.status == "True")
}

/// Remove a condition; returns whether one was removed.
pub fn remove(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    before != conditions.len()
}

/// Set (add or replace) a condition.
///
/// `lastTransitionTime` is `now` for a new condition or one whose status, reason or message
/// changed, and kept otherwise. Returns whether anything other than `observedGeneration` changed,
/// so a caller can skip a no-op status write.
pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: Status,
    reason: &str,
    message: &str,
    observed_generation: Option<i64>,
    now: Timestamp,
) -> bool {
    let new = Condition {
        type_: type_.to_string(),
        status: status.as_str().to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        observed_generation,
        last_transition_time: Time(now),
    };
    let changed = match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) => {
            let same =
                existing.status == new.status && existing.reason == new.reason && existing.message == new.message;
            existing.observed_generation = observed_generation;
            if !same {
                *existing = new;
            }
            !same
        }
        None => {
            conditions.push(new);
            true
        }
    };
    sort(conditions);
    changed
}

/// Stable order: `Ready` first, then by type.
fn sort(conditions: &mut [Condition]) {
    conditions.sort_by(|a, b| (a.type_ != READY, &a.type_).cmp(&(b.type_ != READY, &b.type_)));
}

/// `spec.suspend`: `Ready=False` with reason `Suspended` and `message`; `Reconciling` and
/// `Stalled` are removed.
pub fn mark_suspended(conditions: &mut Vec<Condition>, message: &str, generation: Option<i64>, now: Timestamp) {
    mark_waiting(conditions, crate::api::names::reasons::SUSPENDED, message, generation, now);
}

/// Waiting on someone, not working nor stuck (suspended, awaiting approval): `Ready=False`
/// with `reason` and `message`; `Reconciling` and `Stalled` are removed.
pub fn mark_waiting(
    conditions: &mut Vec<Condition>,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
) -> bool {
    kstatus(conditions, Status::False, None, reason, message, generation, now)
}

/// kstatus success: `Ready=True`; `Reconciling` and `Stalled` are removed.
pub fn mark_ready(
    conditions: &mut Vec<Condition>,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
) -> bool {
    kstatus(conditions, Status::True, None, reason, message, generation, now)
}

/// kstatus work in progress: `Reconciling=True`, `Ready=Unknown` with the same reason and
/// message, `Stalled` removed.
pub fn mark_reconciling(
    conditions: &mut Vec<Condition>,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
) -> bool {
    kstatus(conditions, Status::Unknown, Some(RECONCILING), reason, message, generation, now)
}

/// kstatus failure that retrying may fix: `Ready=False`, `Reconciling=True` (the controller
/// keeps trying), `Stalled` removed.
pub fn mark_failed(
    conditions: &mut Vec<Condition>,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
) -> bool {
    kstatus(conditions, Status::False, Some(RECONCILING), reason, message, generation, now)
}

/// kstatus terminal failure: `Stalled=True` and `Ready=False` with the same reason and message,
/// `Reconciling` removed. Use only for what retrying cannot fix (invalid spec, invalid desired
/// state); the object is reconciled again when it changes.
pub fn mark_stalled(
    conditions: &mut Vec<Condition>,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
) -> bool {
    kstatus(conditions, Status::False, Some(STALLED), reason, message, generation, now)
}

/// Set `Ready` to `ready`, set `active` (Reconciling or Stalled, if any) to True with the same
/// reason and message, and remove the other of the two.
fn kstatus(
    conditions: &mut Vec<Condition>,
    ready: Status,
    active: Option<&str>,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
) -> bool {
    let mut changed = false;
    for type_ in [RECONCILING, STALLED] {
        if Some(type_) == active {
            changed |= set(conditions, type_, Status::True, reason, message, generation, now);
        } else {
            changed |= remove(conditions, type_);
        }
    }
    changed | set(conditions, READY, ready, reason, message, generation, now)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    #[test]
    fn set_records_generation_and_moves_transition_time_only_on_change() {
        let mut c = Vec::new();
        assert!(set(&mut c, READY, Status::False, "A", "m", Some(1), t(0)));
        // Same status/reason/message, new generation: not a transition.
        assert!(!set(&mut c, READY, Status::False, "A", "m", Some(2), t(10)));
        assert_eq!(c[0].observed_generation, Some(2));
        assert_eq!(c[0].last_transition_time, Time(t(0)));
        // Message change is a transition.
        assert!(set(&mut c, READY, Status::False, "A", "m2", Some(2), t(20)));
        assert_eq!(c[0].last_transition_time, Time(t(20)));
        // Reason change too.
        assert!(set(&mut c, READY, Status::False, "B", "m2", Some(2), t(30)));
        assert_eq!(c[0].last_transition_time, Time(t(30)));
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn ready_is_first_and_the_rest_sorted() {
        let mut c = Vec::new();
        set(&mut c, "Zeta", Status::True, "r", "", None, t(0));
        set(&mut c, STALLED, Status::True, "r", "", None, t(0));
        set(&mut c, READY, Status::True, "r", "", None, t(0));
        set(&mut c, "DependenciesReady", Status::True, "r", "", None, t(0));
        let types: Vec<_> = c.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, [READY, "DependenciesReady", STALLED, "Zeta"]);
    }

    #[test]
    fn kstatus_helpers_keep_the_three_consistent() {
        let mut c = Vec::new();
        mark_reconciling(&mut c, "Progressing", "fetching", Some(1), t(0));
        assert!(is_true(&c, RECONCILING));
        assert_eq!(get(&c, READY).unwrap().status, "Unknown");

        mark_stalled(&mut c, "ValidationFailure", "bad", Some(1), t(1));
        assert!(is_true(&c, STALLED));
        assert!(get(&c, RECONCILING).is_none());
        assert_eq!(get(&c, READY).unwrap().status, "False");
        assert_eq!(get(&c, READY).unwrap().reason, "ValidationFailure");

        mark_failed(&mut c, "SourceFailure", "timeout", Some(1), t(2));
        assert!(get(&c, STALLED).is_none());
        assert!(is_true(&c, RECONCILING));
        assert_eq!(get(&c, READY).unwrap().status, "False");

        mark_waiting(&mut c, "AwaitingApproval", "approve", Some(1), t(3));
        assert!(get(&c, STALLED).is_none() && get(&c, RECONCILING).is_none());
        assert_eq!(get(&c, READY).unwrap().status, "False");
        assert_eq!(get(&c, READY).unwrap().reason, "AwaitingApproval");

        mark_stalled(&mut c, "ValidationFailure", "bad", Some(1), t(4));
        mark_waiting(&mut c, "Suspended", "off", Some(1), t(5));
        assert!(get(&c, STALLED).is_none());
        assert_eq!(c.len(), 1);

        assert!(mark_ready(&mut c, "Succeeded", "ok", Some(2), t(3)));
        assert_eq!(c.len(), 1);
        assert!(is_true(&c, READY));
        assert!(!mark_ready(&mut c, "Succeeded", "ok", Some(2), t(4)));
    }
}
