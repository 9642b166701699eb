//! Rollback, pure: the request on an Application's annotations, which commit a reconcile
//! deploys (the spec's, a rollback's target, or the target a completed rollback holds), and
//! when a rollback completes or is abandoned.
//!
//! # Contract
//! - A request names the commit to roll back to (`rollback-to`, 7 to 40 hex digits). Without it,
//!   or with an unknown `rollback-kind`, the request is invalid and is abandoned, never guessed.
//! - A request that does not say what it rolls back from rolls back from the commit the spec
//!   resolves to.
//! - While a request is pending, the reconcile deploys its target. It completes when the
//!   target's desired state is deployed and Healthy; then every Revision of the commit rolled
//!   back from is held. It is abandoned when the target failed for a reason retrying cannot fix,
//!   or once its attempts are used up; a retryable failure keeps it.
//! - A held Revision is never deployed: while the spec resolves to it, the reconcile keeps the
//!   last healthy Revision running. The hold ends when the spec resolves to another Revision
//!   (a new commit or identity), when the held Revision is deleted or explicitly rolled back to,
//!   and when its commit is the one deployed.
//!
//! Table tests: `testdata/rollout/rollback.yaml`.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::Deserialize;

use crate::api::names::annotations as a;

/// `rollback-kind`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub enum Kind {
    /// `ksync rollback` (the default).
    #[default]
    #[serde(rename = "manual")]
    Manual,
    /// A rollback failure policy.
    #[serde(rename = "automatic")]
    Automatic,
}

/// A rollback request read from the Application's annotations.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    /// The commit to roll back to.
    pub to: String,
    /// The commit rolled back from, when the request says.
    #[serde(default)]
    pub from: Option<String>,
    /// Manual or automatic.
    #[serde(default)]
    pub kind: Kind,
    /// The Revision object a manual rollback chose.
    #[serde(default)]
    pub target_revision: Option<String>,
    /// Who asked.
    #[serde(default)]
    pub requested_by: Option<String>,
    /// When.
    #[serde(default)]
    pub requested_at: Option<Timestamp>,
    /// What the request approves.
    #[serde(default)]
    pub target_hash: Option<String>,
}

/// Whether `s` is a commit as a request may name it.
pub fn is_commit(s: &str) -> bool {
    (7..=40).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The request on `annotations`: `None` when there is none, `Err` (why) when it is invalid.
pub fn request_of(annotations: &BTreeMap<String, String>) -> Option<Result<Request, String>> {
    if !annotations.keys().any(|k| k.starts_with(a::ROLLBACK_PREFIX)) {
        return None;
    }
    let get = |k: &str| annotations.get(k).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
    let Some(to) = get(a::ROLLBACK_TO) else {
        return Some(Err(format!("a rollback request without {}: nothing says what to roll back to", a::ROLLBACK_TO)));
    };
    if !is_commit(&to) {
        return Some(Err(format!("{}: {to:?} is not a commit", a::ROLLBACK_TO)));
    }
    let from = get(a::ROLLBACK_FROM);
    if let Some(f) = from.as_ref().filter(|f| !is_commit(f)) {
        return Some(Err(format!("{}: {f:?} is not a commit", a::ROLLBACK_FROM)));
    }
    let kind = match get(a::ROLLBACK_KIND).as_deref() {
        None | Some(a::ROLLBACK_KIND_MANUAL) => Kind::Manual,
        Some(a::ROLLBACK_KIND_AUTOMATIC) => Kind::Automatic,
        Some(other) => {
            return Some(Err(format!(
                "{}: {other:?} is not {:?} or {:?}",
                a::ROLLBACK_KIND,
                a::ROLLBACK_KIND_MANUAL,
                a::ROLLBACK_KIND_AUTOMATIC
            )));
        }
    };
    Some(Ok(Request {
        to: to.to_ascii_lowercase(),
        from: from.map(|f| f.to_ascii_lowercase()),
        kind,
        target_revision: get(a::ROLLBACK_TARGET_REVISION),
        requested_by: get(a::ROLLBACK_REQUESTED_BY),
        requested_at: get(a::ROLLBACK_REQUESTED_AT).and_then(|t| super::approval::parse_time(&t)),
        target_hash: get(a::ROLLBACK_TARGET_HASH),
    }))
}

/// Whether commit `full` is the one `short` names (a request may abbreviate).
pub fn same_commit(full: &str, short: &str) -> bool {
    !short.is_empty() && full.len() >= short.len() && full[..short.len()].eq_ignore_ascii_case(short)
}

/// What the spec resolves to, as the reconcile sees it.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    /// The commit.
    pub commit: String,
    /// Its Revision is held (a `RolledBack` condition).
    #[serde(default)]
    pub held: bool,
}

/// The last Revision whose rollout completed Healthy.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Running {
    /// Its name.
    pub revision: String,
    /// Its commit.
    pub commit: String,
}

/// Which commit a reconcile deploys.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Target {
    /// The spec's.
    Spec,
    /// The spec's, whose Revision was held: the hold ends (its commit is the one deployed).
    Lift,
    /// A pending rollback's target.
    Rollback {
        /// The commit rolled back to.
        to: String,
        /// The commit rolled back from.
        from: String,
    },
    /// The spec's Revision is held: the last healthy Revision keeps running.
    Hold {
        /// That Revision.
        revision: String,
        /// Its commit.
        commit: String,
    },
}

/// Which commit to deploy, from the pending request, the spec and the running Revision.
pub fn target(request: Option<&Request>, spec: &Spec, running: Option<&Running>) -> Target {
    if let Some(r) = request {
        return Target::Rollback { to: r.to.clone(), from: r.from.clone().unwrap_or_else(|| spec.commit.clone()) };
    }
    if !spec.held {
        return Target::Spec;
    }
    match running {
        Some(r) if same_commit(&spec.commit, &r.commit) => Target::Lift,
        Some(r) => Target::Hold { revision: r.revision.clone(), commit: r.commit.clone() },
        // Nothing else ever ran: there is nothing to hold it for.
        None => Target::Lift,
    }
}

/// The target Revision's state after a reconcile of a pending rollback.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    /// Its current desired state is deployed and Healthy, no attempt running.
    #[serde(default)]
    pub healthy: bool,
    /// Its last failure cannot be fixed by retrying (invalid desired state).
    #[serde(default)]
    pub failed_for_good: bool,
    /// Its attempts are used up (paused).
    #[serde(default)]
    pub paused: bool,
}

/// What becomes of a pending rollback.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    /// Still under way (or retrying): the request stays.
    Pending,
    /// The target runs Healthy: hold the commit rolled back from and remove the request.
    Complete,
    /// It cannot reach its target: remove the request and deploy the spec's commit again.
    Abandon,
}

/// [`Outcome`] of `p`.
pub fn outcome(p: &Progress) -> Outcome {
    if p.healthy {
        Outcome::Complete
    } else if p.failed_for_good || p.paused {
        Outcome::Abandon
    } else {
        Outcome::Pending
    }
}

/// Appended to a failure's message when a rollback failure policy has no earlier healthy
/// Revision to return to (the failure is then handled as under `pause`).
pub const NO_TARGET: &str = "; no previous healthy Revision to roll back to";

/// [`NO_TARGET`] when it applies to Revision `rev` of `app`.
pub fn no_target(
    app: &crate::api::application::Application,
    status: &crate::api::application::ApplicationStatus,
    rev: &str,
) -> &'static str {
    let previous = status.last_healthy_revision.as_deref().is_some_and(|r| r != rev);
    if app.spec.failure_policy.action == crate::api::application::FailureAction::Rollback && !previous {
        NO_TARGET
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct TargetCase {
        name: String,
        #[serde(default)]
        request: Option<Request>,
        spec: Spec,
        #[serde(default)]
        running: Option<Running>,
        want: Target,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct RequestCase {
        name: String,
        annotations: BTreeMap<String, String>,
        want: Option<Result<Request, String>>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct OutcomeCase {
        name: String,
        progress: Progress,
        want: Outcome,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Table {
        requests: Vec<RequestCase>,
        targets: Vec<TargetCase>,
        outcomes: Vec<OutcomeCase>,
    }

    #[test]
    fn table() {
        let t: Table = crate::yaml::from_str(include_str!("../../testdata/rollout/rollback.yaml")).unwrap();
        for c in &t.requests {
            assert_eq!(request_of(&c.annotations), c.want, "{}", c.name);
        }
        for c in &t.targets {
            assert_eq!(target(c.request.as_ref(), &c.spec, c.running.as_ref()), c.want, "{}", c.name);
        }
        for c in &t.outcomes {
            assert_eq!(outcome(&c.progress), c.want, "{}", c.name);
        }
        assert!(t.requests.len() >= 5 && t.targets.len() >= 5 && t.outcomes.len() >= 4);
    }
}
