//! Manual approval, pure: whether a plan may be applied because someone approved it
//! (`ksync sync`, the `sync.kuvryn.io/approved-plan` annotation).
//!
//! # Contract
//! - An approval names one plan digest. It starts a rollout only while that digest is the plan
//!   the reconcile computed; an approval of another plan ([`Verdict::Stale`]) starts nothing.
//! - A request is used once: when the approval recorded on the Revision is that request (same
//!   digest and time), it starts nothing more.
//! - The recorded approval covers the rest of the rollout it started (retries of a failed
//!   attempt: every attempt from the one it started) only while the desired state is the one it
//!   approved ([`Verdict::Covered`]); once one of them completed it covers nothing, so repairing
//!   later drift needs a new approval.
//! - An approval given before `not_before` (a rollback's `rollback-requested-at`) does not
//!   count; one without a recorded time cannot show it was given after, so it does not count
//!   either. Times are compared as precisely as both records say: `status.approval.time` keeps
//!   microseconds; one recorded in whole seconds (by a manager before 0.7) within the request's
//!   own second counts only when it shows it came at or after the request ([`given_since`]).
//! - A request is the recorded approval only when its time is the recorded one to the
//!   microsecond: the same plan approved again a moment later is a new approval.
//! - A rollback whose target is already live completes on a manual-sync Application only once
//!   an approval given at or after its request started an attempt that succeeded
//!   ([`completed_since`]).
//!
//! Table tests: `testdata/rollout/approval.yaml`.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use serde::Deserialize;

use crate::api::names;
use crate::api::revision::{Approval, Attempt, AttemptResult};

/// `source` of an approval given with `ksync sync`.
pub const MANUAL_SYNC: &str = "ManualSync";
/// `source` of a manual rollback's own approval.
pub const MANUAL_ROLLBACK: &str = "ManualRollback";
/// `user` when nothing recorded who approved (webhooks disabled and no `approved-by`).
pub const UNKNOWN_USER: &str = "unknown";

/// An approval request read from the Application's annotations.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Request {
    /// `sync.kuvryn.io/approved-plan`.
    pub plan: String,
    /// `sync.kuvryn.io/approved-by`.
    #[serde(default)]
    pub by: Option<String>,
    /// `sync.kuvryn.io/approved-at`; `None` when absent or not RFC 3339.
    #[serde(default)]
    pub at: Option<Timestamp>,
}

/// The request on an Application's annotations, if it carries a non-empty `approved-plan`.
pub fn request_of(annotations: &BTreeMap<String, String>) -> Option<Request> {
    let plan = annotations.get(names::annotations::APPROVED_PLAN).map(|p| p.trim()).filter(|p| !p.is_empty())?;
    Some(Request {
        plan: plan.to_string(),
        by: annotations
            .get(names::annotations::APPROVED_BY)
            .map(|b| b.trim())
            .filter(|b| !b.is_empty())
            .map(Into::into),
        at: annotations.get(names::annotations::APPROVED_AT).and_then(|t| parse_time(t)),
    })
}

/// `annotations` without the records the manager's own identity (`manager`) made, or `None`
/// when it made none.
///
/// # Contract
/// An approval is a person's decision, and so is a manual rollback's requester: one recorded
/// under the manager's identity (a forged `.ksync.yaml` entry, a webhook bypassed) never counts.
/// An approval whose `approved-by` is `manager` is removed whole (`approved-plan`, `-by`, `-at`);
/// a rollback request whose `rollback-requested-by` is `manager` keeps its target but loses its
/// record (`rollback-requested-by`, `-at`, `rollback-target-hash`), so it waits for `ksync sync`
/// as a request set by hand does. Table test: `the_managers_own_records_never_count`.
pub fn discount_manager(annotations: &BTreeMap<String, String>, manager: &str) -> Option<BTreeMap<String, String>> {
    use names::annotations as a;
    let by = |k: &str| annotations.get(k).is_some_and(|v| v.trim() == manager);
    let (approval, rollback) = (by(a::APPROVED_BY), by(a::ROLLBACK_REQUESTED_BY));
    if !approval && !rollback {
        return None;
    }
    let mut out = annotations.clone();
    if approval {
        for k in [a::APPROVED_PLAN, a::APPROVED_BY, a::APPROVED_AT] {
            out.remove(k);
        }
    }
    if rollback {
        for k in [a::ROLLBACK_REQUESTED_BY, a::ROLLBACK_REQUESTED_AT, a::ROLLBACK_TARGET_HASH] {
            out.remove(k);
        }
    }
    Some(out)
}

/// An approval or request time from an annotation, as precise as it is written (ksync writes
/// nanoseconds, the webhook whole seconds). `None` when not RFC 3339.
pub fn parse_time(s: &str) -> Option<Timestamp> {
    s.trim().parse().ok()
}

/// `t` to the microsecond, as `status.approval.time` keeps it: what is recorded is then the
/// same in memory as once read back.
pub fn recorded_time(t: Timestamp) -> Timestamp {
    let micros = t.as_microsecond();
    Timestamp::from_microsecond(micros).unwrap_or(t)
}

/// How `ksync` writes `approved-at` and `rollback-requested-at`: to the nanosecond, always
/// nine digits, so a record the webhook wrote instead ([`webhook_time`]) is told from it.
pub fn client_time(t: Timestamp) -> String {
    jiff::fmt::strtime::format("%Y-%m-%dT%H:%M:%S%.9fZ", t).unwrap_or_else(|_| t.to_string())
}

/// How the admission webhook records `approved-at` and `rollback-requested-at`: to the
/// microsecond, always six digits, as `status.approval.time` keeps it.
pub fn webhook_time(t: Timestamp) -> String {
    jiff::fmt::strtime::format("%Y-%m-%dT%H:%M:%S%.6fZ", t).unwrap_or_else(|_| t.to_string())
}

/// `t` to the precision of the record `recorded`, in microseconds: whole seconds for a record
/// a manager before 0.7 made, microseconds otherwise.
fn at_precision_of(recorded: Timestamp, t: Timestamp) -> i64 {
    if recorded.subsec_nanosecond() == 0 { t.as_second() * 1_000_000 } else { t.as_microsecond() }
}

/// Whether the request time `at` is the recorded time `recorded`, as precisely as it was recorded.
fn same_time(recorded: Timestamp, at: Timestamp) -> bool {
    at_precision_of(recorded, recorded) == at_precision_of(recorded, at)
}

/// What [`judge`] looks at.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Facts {
    /// The request on the Application.
    #[serde(default)]
    pub request: Option<Request>,
    /// The approval recorded on the Revision (`status.approval`).
    #[serde(default)]
    pub recorded: Option<Approval>,
    /// The Revision's attempts, oldest first.
    #[serde(default)]
    pub attempts: Vec<Attempt>,
    /// Digest of the plan computed now.
    pub plan: String,
    /// The desired state computed now (`spec.desiredStateHash`).
    pub desired: String,
    /// Approvals given before this time do not count.
    #[serde(default)]
    pub not_before: Option<Timestamp>,
    /// The time an approval without `approved-at` is recorded under.
    pub now: Timestamp,
}

/// The outcome.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Verdict {
    /// No approval applies.
    None,
    /// The request approves the current plan: record it and start an attempt.
    Approved(Approval),
    /// The recorded approval still covers its rollout (a retry may start).
    Covered,
    /// The request names another plan than the current one: it starts nothing.
    Stale {
        /// The digest approved.
        approved: String,
        /// The digest of the current plan.
        current: String,
    },
    /// The request was given before `not_before`: it starts nothing.
    TooEarly,
    /// A manual rollback's own approval no longer holds: its target changed since the request.
    TargetChanged {
        /// The Revision the rollback chose.
        chosen: String,
    },
}

impl Verdict {
    /// Whether the current plan may be applied.
    pub fn approves(&self) -> bool {
        matches!(self, Verdict::Approved(_) | Verdict::Covered)
    }
}

/// Judge the approval of the current plan (see the module's contract).
pub fn judge(f: &Facts) -> Verdict {
    let used = |r: &Request| {
        f.recorded.as_ref().is_some_and(|a| a.plan_digest == r.plan && r.at.is_none_or(|at| same_time(a.time.0, at)))
    };
    if let Some(a) = &f.recorded
        && a.desired_state_hash.as_deref() == Some(f.desired.as_str())
        && covers(a, &f.attempts)
    {
        return Verdict::Covered;
    }
    let Some(r) = f.request.as_ref().filter(|r| !used(r)) else { return Verdict::None };
    if let Some(nb) = f.not_before
        && r.at.is_none_or(|at| at < nb)
    {
        return Verdict::TooEarly;
    }
    if r.plan != f.plan {
        return Verdict::Stale { approved: r.plan.clone(), current: f.plan.clone() };
    }
    Verdict::Approved(Approval {
        user: r.by.clone().unwrap_or_else(|| UNKNOWN_USER.to_string()),
        time: MicroTime(recorded_time(r.at.unwrap_or(f.now))),
        plan_digest: r.plan.clone(),
        source: Some(MANUAL_SYNC.to_string()),
        desired_state_hash: Some(f.desired.clone()),
        attempt: None,
    })
}

/// Whether the recorded approval `recorded`, given at or after `not_before` (any time when
/// `None`, see [`given_since`]), started an attempt that succeeded. `request` is the approval
/// request on the Application now.
pub fn completed_since(
    recorded: Option<&Approval>,
    attempts: &[Attempt],
    not_before: Option<Timestamp>,
    request: Option<&Request>,
) -> bool {
    recorded.is_some_and(|a| {
        not_before.is_none_or(|nb| given_since(a, nb, request))
            && a.attempt.is_some_and(|n| attempts.iter().any(|t| t.number == n && t.result == AttemptResult::Succeeded))
    })
}

/// Whether the recorded approval `a` was given at or after `not_before`. Its time is recorded
/// to the microsecond (in whole seconds before 0.7), a request's to the nanosecond: within the
/// recorded time's own microsecond (or second) it counts only when it can show it: as a manual
/// rollback's own approval (recorded at its request's time), or as the request still on the
/// Application (same digest and recorded time), whose `approved-at` says more precisely.
pub fn given_since(a: &Approval, not_before: Timestamp, request: Option<&Request>) -> bool {
    let recorded = a.time.0;
    match at_precision_of(recorded, recorded).cmp(&at_precision_of(recorded, not_before)) {
        std::cmp::Ordering::Greater => true,
        std::cmp::Ordering::Less => false,
        std::cmp::Ordering::Equal => {
            a.source.as_deref() == Some(MANUAL_ROLLBACK)
                || request.is_some_and(|r| {
                    r.plan == a.plan_digest && r.at.is_some_and(|at| same_time(recorded, at) && at >= not_before)
                })
        }
    }
}

/// Whether `a` still covers the rollout it started: no attempt since the one it started has
/// completed.
fn covers(a: &Approval, attempts: &[Attempt]) -> bool {
    let Some(first) = a.attempt else { return false };
    let since: Vec<&Attempt> = attempts.iter().filter(|t| t.number >= first).collect();
    !since.is_empty() && since.iter().all(|t| t.result != AttemptResult::Succeeded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    #[test]
    fn the_managers_own_records_never_count() {
        use names::annotations as a;
        let sa = "system:serviceaccount:kuvryn-system:kuvryn-sync";
        let m = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        let approval = [(a::APPROVED_PLAN, "sha256:p"), (a::APPROVED_BY, sa), (a::APPROVED_AT, "2026-12-05T00:00:00Z")];
        let rollback = [
            (a::ROLLBACK_TO, "abcdef0"),
            (a::ROLLBACK_TARGET_REVISION, "web-abcdef0"),
            (a::ROLLBACK_REQUESTED_BY, sa),
            (a::ROLLBACK_REQUESTED_AT, "2026-12-05T00:00:00Z"),
            (a::ROLLBACK_TARGET_HASH, "sha256:t"),
        ];
        let other = ("team.example.com/owner", "x");
        // (name, annotations, what remains; None: nothing discounted)
        type Annotations = BTreeMap<String, String>;
        let cases: Vec<(&str, Annotations, Option<Annotations>)> = vec![
            ("an approval by the manager", m(&[approval[0], approval[1], approval[2], other]), Some(m(&[other]))),
            (
                "a rollback requested by the manager keeps its target, not its record",
                m(&rollback),
                Some(m(&[rollback[0], rollback[1]])),
            ),
            ("a person's approval", m(&[(a::APPROVED_PLAN, "sha256:p"), (a::APPROVED_BY, "alice")]), None),
            ("a person's rollback", m(&[(a::ROLLBACK_TO, "abcdef0"), (a::ROLLBACK_REQUESTED_BY, "alice")]), None),
            ("an approval with no recorded approver", m(&[(a::APPROVED_PLAN, "sha256:p")]), None),
            ("nothing", m(&[other]), None),
        ];
        for (name, annotations, want) in cases {
            assert_eq!(discount_manager(&annotations, sa), want, "{name}");
        }
    }

    #[derive(Deserialize)]
    struct Case {
        name: String,
        facts: Facts,
        want: Verdict,
    }

    #[test]
    fn table() {
        let cases: Vec<Case> = crate::yaml::from_str(include_str!("../../testdata/rollout/approval.yaml")).unwrap();
        assert!(cases.len() >= 10);
        for c in cases {
            assert_eq!(judge(&c.facts), c.want, "{}", c.name);
        }
    }

    #[test]
    fn a_completed_approved_rollout_counts_only_from_its_request_on() {
        let at = |s: &str| s.parse::<Timestamp>().unwrap();
        let approval = |time: &str, attempt: Option<i32>| Approval {
            user: "alice".into(),
            time: MicroTime(at(time)),
            plan_digest: "sha256:P1".into(),
            source: Some(MANUAL_ROLLBACK.into()),
            desired_state_hash: Some("D1".into()),
            attempt,
        };
        let attempt = |number: i32, result: AttemptResult| Attempt {
            number,
            started_at: Time(at("2026-12-02T10:00:00Z")),
            finished_at: None,
            result,
            reason: None,
            plan_digest: None,
            wave: None,
            wave_started_at: None,
            hook: None,
            desired_state_hash: None,
        };
        let done = [attempt(1, AttemptResult::Succeeded), attempt(2, AttemptResult::Succeeded)];
        let request = Some(at("2026-12-02T10:00:00Z"));
        let a = approval("2026-12-02T10:00:00Z", Some(2));
        assert!(completed_since(Some(&a), &done, request, None), "approved at the request and completed");
        assert!(!completed_since(None, &done, request, None), "never approved");
        let before = approval("2026-12-02T09:00:00Z", Some(1));
        assert!(!completed_since(Some(&before), &done, request, None), "approved before the request");
        assert!(completed_since(Some(&before), &done, None, None), "a request without a time takes any approval");
        assert!(
            !completed_since(Some(&approval("2026-12-02T10:00:00Z", None)), &done, request, None),
            "started nothing"
        );
        let running = [attempt(1, AttemptResult::Succeeded), attempt(2, AttemptResult::Running)];
        assert!(!completed_since(Some(&a), &running, request, None), "its attempt still runs");
    }

    /// A time recorded in whole seconds (before 0.7): within the request's second only what
    /// shows it came at or after the request counts. One recorded to the microsecond says itself.
    #[test]
    fn an_approval_of_the_requests_own_second_counts_only_when_it_shows_it_came_after() {
        let at = |s: &str| s.parse::<Timestamp>().unwrap();
        let sync = Approval {
            user: "alice".into(),
            time: MicroTime(at("2026-12-02T10:00:00Z")),
            plan_digest: "sha256:P1".into(),
            source: Some(MANUAL_SYNC.into()),
            desired_state_hash: Some("D1".into()),
            attempt: Some(1),
        };
        let request = |plan: &str, t: &str| Request { plan: plan.into(), by: Some("alice".into()), at: Some(at(t)) };
        let nb = at("2026-12-02T10:00:00.500Z");
        let cases = [
            (
                "given the second after",
                Approval { time: MicroTime(at("2026-12-02T10:00:01Z")), ..sync.clone() },
                None,
                true,
            ),
            (
                "given the second before",
                Approval { time: MicroTime(at("2026-12-02T09:59:59Z")), ..sync.clone() },
                None,
                false,
            ),
            ("same second, nothing says more", sync.clone(), None, false),
            (
                "same second, its request says before",
                sync.clone(),
                Some(request("sha256:P1", "2026-12-02T10:00:00.179Z")),
                false,
            ),
            (
                "same second, its request says after",
                sync.clone(),
                Some(request("sha256:P1", "2026-12-02T10:00:00.900Z")),
                true,
            ),
            (
                "same second, its request says at",
                sync.clone(),
                Some(request("sha256:P1", "2026-12-02T10:00:00.500Z")),
                true,
            ),
            (
                "same second, a request of another plan",
                sync.clone(),
                Some(request("sha256:P2", "2026-12-02T10:00:00.900Z")),
                false,
            ),
            (
                "same second, a request of another second",
                sync.clone(),
                Some(request("sha256:P1", "2026-12-02T10:00:01.100Z")),
                false,
            ),
            (
                "to the microsecond, earlier in the second",
                Approval { time: MicroTime(at("2026-12-02T10:00:00.499999Z")), ..sync.clone() },
                Some(request("sha256:P1", "2026-12-02T10:00:00.900Z")),
                false,
            ),
            (
                "to the microsecond, in the request's own microsecond, nothing says more",
                Approval { time: MicroTime(at("2026-12-02T10:00:00.500Z")), ..sync.clone() },
                None,
                false,
            ),
            (
                "to the microsecond, in the request's own microsecond, its request says after",
                Approval { time: MicroTime(at("2026-12-02T10:00:00.500Z")), ..sync.clone() },
                Some(request("sha256:P1", "2026-12-02T10:00:00.500000900Z")),
                true,
            ),
            (
                "to the microsecond, later in the second",
                Approval { time: MicroTime(at("2026-12-02T10:00:00.600Z")), ..sync.clone() },
                None,
                true,
            ),
            (
                "a manual rollback's own approval, recorded at its request",
                Approval { source: Some(MANUAL_ROLLBACK.into()), ..sync.clone() },
                None,
                true,
            ),
        ];
        for (name, a, r, want) in cases {
            assert_eq!(given_since(&a, nb, r.as_ref()), want, "{name}");
        }
    }

    #[test]
    fn requests_read_from_annotations() {
        let a = |kv: &[(&str, &str)]| kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert_eq!(request_of(&a(&[])), None);
        assert_eq!(request_of(&a(&[(names::annotations::APPROVED_PLAN, " ")])), None);
        let r = request_of(&a(&[
            (names::annotations::APPROVED_PLAN, "sha256:1"),
            (names::annotations::APPROVED_BY, "alice"),
            (names::annotations::APPROVED_AT, "2026-12-02T10:00:00Z"),
        ]))
        .unwrap();
        assert_eq!(r.by.as_deref(), Some("alice"));
        assert_eq!(r.at, Some("2026-12-02T10:00:00Z".parse().unwrap()));
        // Sub-second times (ksync without the webhook) are kept: they order an approval and a
        // rollback request of the same second.
        let fine = request_of(&a(&[
            (names::annotations::APPROVED_PLAN, "sha256:1"),
            (names::annotations::APPROVED_AT, "2026-12-02T10:00:00.999Z"),
        ]));
        assert_eq!(fine.unwrap().at, Some("2026-12-02T10:00:00.999Z".parse().unwrap()));
        let bad = request_of(&a(&[
            (names::annotations::APPROVED_PLAN, "sha256:1"),
            (names::annotations::APPROVED_AT, "yesterday"),
        ]));
        assert_eq!(bad.unwrap().at, None);
    }
}
