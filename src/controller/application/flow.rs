//! What passes from one stage of a reconcile to the next: the resolved source, the desired
//! state, the plan, and a failure to report. Data only, so every stage can take it without
//! taking another stage.

use std::sync::Arc;

use kube::runtime::events::EventType;
use kube::{Client, ResourceExt};

use crate::api::application::ApplicationStatus;
use crate::api::conditions;
use crate::api::names;
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
    /// The chart dependencies made present for a Helm render.
    pub(super) charts: Charts,
}

/// A Helm chart's dependencies, made present: pulled archives (recorded on the Revision, part
/// of its identity) and `file://` charts of the same repository, materialized.
#[derive(Clone, Default)]
pub(super) struct Charts {
    /// The chart itself, from a Helm or OCI Repository (no Git checkout then).
    pub(super) source_chart: Option<Arc<crate::render::pull::Pulled>>,
    /// The dependencies of a chart in Git.
    pub(super) present: crate::render::dependencies::Present,
}

impl Charts {
    /// As the Revision records them: the source chart first.
    pub(super) fn versions(&self) -> Vec<rev::ChartVersion> {
        self.source_chart
            .iter()
            .chain(&self.present.pulled)
            .map(|p| rev::ChartVersion {
                name: p.name.clone(),
                repository: p.repository.clone(),
                version: p.version.clone(),
                digest: p.digest.clone(),
            })
            .collect()
    }
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
    /// Desired workloads whose live Pod template keeps the stamp of an earlier version, as they
    /// are applied ([`crate::live::with_kept_stamps`]).
    pub(super) kept_stamps: std::collections::BTreeMap<String, Value>,
    /// Objects labelled as managed (metadata only).
    pub(super) managed: Vec<Value>,
    pub(super) adopt: bool,
    /// Secret values (from `valuesFrom` and desired Secrets): never in a message.
    pub(super) secrets: Vec<String>,
    /// Made from lists as the service account, not from watch caches: what a rollout writes and
    /// prunes may be decided from it.
    pub(super) fresh: bool,
    /// Desired objects taken as absent without reading them: their applies carry the
    /// create-only precondition ([`crate::decisions::absent`]).
    pub(super) presumed: std::collections::BTreeSet<String>,
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

    /// Report this failure on the Application: `Ready=False` (and `Stalled` when `stalled`), a
    /// Warning Event when the message changed, a log line.
    pub(super) fn report(&self, r: &super::Reconcile<'_>, status: &mut ApplicationStatus, stalled: bool) {
        let super::Reconcile { app, old, now, .. } = *r;
        let generation = app.metadata.generation;
        let previous = conditions::get(&old.conditions, names::conditions::READY).map(|c| c.message.clone());
        if stalled {
            conditions::mark_stalled(&mut status.conditions, self.reason, &self.message, generation, now);
        } else {
            conditions::mark_failed(&mut status.conditions, self.reason, &self.message, generation, now);
        }
        if previous.as_deref() != Some(self.message.as_str()) {
            let ns = app.namespace().unwrap_or_default();
            let related = status.desired_revision.as_deref().map(|r| crate::api::revision::reference(&ns, r));
            r.events.tell(related, EventType::Warning, self.reason, &self.message);
        }
        tracing::info!(application = %app.name_any(), namespace = ?app.namespace(), reason = self.reason, message = %self.message, "application not ready");
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
