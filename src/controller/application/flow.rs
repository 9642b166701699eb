//! What passes from one stage of a reconcile to the next: the resolved source, the desired
//! state, the plan, and a failure to report. Data only, so every stage can take it without
//! taking another stage.

use std::sync::Arc;

use kube::Client;
use serde_json::Value;

use crate::api::revision as rev;
use crate::plan;
use crate::watch::discovery::ClusterScopes;

/// The resolved source of an Application.
pub(super) struct Source {
    pub(super) repository: String,
    pub(super) url: String,
    /// The Repository's credentials: the cache serves only what they fetched.
    pub(super) credentials: crate::source::Credentials,
    pub(super) reference: Option<String>,
    pub(super) commit: String,
}

/// The desired state of an Application at a commit.
#[derive(Clone)]
pub(super) struct Desired {
    /// The objects, validated and stamped as managed by the Application (shared: a drift
    /// check may plan them twice). Sync hooks are not among them.
    pub(super) objects: Arc<Vec<Value>>,
    /// The sync hooks ([`crate::plan::hooks`]), validated like the objects and stamped as the
    /// Application's hooks ([`crate::plan::inventory::stamp_hook`]), not as managed.
    pub(super) hooks: Arc<Vec<Value>>,
    /// Their desired-state hash.
    pub(super) hash: String,
    /// Secret values (from `valuesFrom` and desired Secrets): never in a message.
    pub(super) secrets: Vec<String>,
    /// The discovery snapshot they were validated with.
    pub(super) scopes: Arc<ClusterScopes>,
    /// A client acting as the Application's service account.
    pub(super) sa: Client,
}

/// What planning produced, for the rollout.
pub(super) struct Planned {
    pub(super) hash: String,
    pub(super) desired: Arc<Vec<Value>>,
    /// The sync hooks, as they are created (stamped as the Application's hooks).
    pub(super) hooks: Arc<Vec<Value>>,
    pub(super) plan: plan::Plan,
    pub(super) stored: rev::Plan,
    pub(super) scopes: Arc<ClusterScopes>,
    pub(super) sa: Client,
    /// Live objects of the desired ones, by identity.
    pub(super) live: std::collections::BTreeMap<String, Value>,
    /// Objects labelled as managed (metadata only).
    pub(super) managed: Vec<Value>,
    pub(super) adopt: bool,
    /// Secret values (from `valuesFrom` and desired Secrets): never in a message.
    pub(super) secrets: Vec<String>,
    /// Made from lists as the service account, not from watch caches: what a rollout writes and
    /// prunes may be decided from it.
    pub(super) fresh: bool,
}

/// How a failed step is reported.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Failure {
    pub(super) reason: &'static str,
    pub(super) message: String,
    pub(super) retryable: bool,
}

impl Failure {
    pub(super) fn new(reason: &'static str, message: impl Into<String>, retryable: bool) -> Failure {
        Failure { reason, message: message.into(), retryable }
    }
}

/// The reason constant for a stored reason string.
pub(super) fn reason_const(reason: &str) -> &'static str {
    use crate::api::names::reasons::*;
    [
        SOURCE_FAILURE,
        RENDER_FAILURE,
        VALIDATION_FAILURE,
        APPLY_CONFLICT,
        APPLY_FAILURE,
        PRUNE_FAILURE,
        HEALTH_TIMEOUT,
        DEGRADED,
    ]
    .into_iter()
    .find(|r| *r == reason)
    .unwrap_or(APPLY_FAILURE)
}

/// `message` without any of `secrets` ([`crate::redact::redact`]).
pub(super) fn redact(message: &str, secrets: &[String]) -> String {
    crate::redact::redact(message, secrets.iter().map(String::as_str))
}
