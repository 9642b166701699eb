//! Fault injection and the audit log, for tests of how clients behave when the API server
//! misbehaves, and of who wrote what when.
//!
//! Faults: requests matching a rule (verb, group, resource, namespace, name, user; unset fields
//! match anything) fail N times, or with a probability, with 429 (and `Retry-After`), 500, 503 or
//! 504, get added latency, or have their connection reset. Open watches can be dropped (all, or
//! those of one resource), history compacted (old resourceVersions get 410 Expired), and the
//! whole server paused (requests hang) and resumed. Library calls on [`crate::SimCluster`] and
//! HTTP endpoints under `/simcluster/v1/` (see `docs/simcluster.md`).
//!
//! Audit: every request that changes state (create, update, patch, delete, deletecollection, on
//! objects and subresources) is recorded with time, user, groups, impersonating user, verb,
//! resource, namespace, name, field manager, HTTP code and resulting resourceVersion.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, watch};

/// What a matching request gets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "type")]
pub enum FaultAction {
    /// An error status: 429 (with `Retry-After: 1`), 500, 503 or 504.
    Status {
        /// HTTP code.
        code: u16,
    },
    /// Delay the request, then serve it.
    Latency {
        /// Milliseconds.
        millis: u64,
    },
    /// Close the connection without an answer.
    Reset,
}

/// A fault rule.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FaultRule {
    /// Verb (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, ...).
    pub verb: Option<String>,
    /// API group ("" for core).
    pub group: Option<String>,
    /// Resource (plural), optionally with `/subresource`.
    pub resource: Option<String>,
    /// Namespace.
    pub namespace: Option<String>,
    /// Object name.
    pub name: Option<String>,
    /// User name (after impersonation).
    pub user: Option<String>,
    /// What happens.
    pub action: Option<FaultAction>,
    /// Apply this many times, then drop the rule (unset: until cleared).
    pub times: Option<u32>,
    /// Apply with this probability (0..1; unset: always).
    pub probability: Option<f64>,
}

/// The attributes a rule matches on.
pub struct RequestAttributes<'a> {
    /// Verb.
    pub verb: &'a str,
    /// Group.
    pub group: &'a str,
    /// Resource, or `resource/subresource`.
    pub resource: &'a str,
    /// Namespace.
    pub namespace: &'a str,
    /// Name.
    pub name: &'a str,
    /// User.
    pub user: &'a str,
}

impl FaultRule {
    fn matches(&self, a: &RequestAttributes<'_>) -> bool {
        let m = |f: &Option<String>, v: &str| f.as_deref().is_none_or(|f| f == v);
        m(&self.verb, a.verb)
            && m(&self.group, a.group)
            && m(&self.resource, a.resource)
            && m(&self.namespace, a.namespace)
            && m(&self.name, a.name)
            && m(&self.user, a.user)
    }
}

/// One audited write.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEvent {
    /// When the request was served (RFC 3339 with microseconds).
    pub time: String,
    /// The user the request acted as.
    pub user: String,
    /// Its groups.
    pub groups: Vec<String>,
    /// The authenticated user when it impersonated another.
    pub impersonated_by: Option<String>,
    /// Verb.
    pub verb: String,
    /// Group.
    pub group: String,
    /// Resource (plural), with `/subresource` when there is one.
    pub resource: String,
    /// Namespace.
    pub namespace: String,
    /// Name (empty for collections).
    pub name: String,
    /// `fieldManager` of the request.
    pub field_manager: String,
    /// HTTP status code.
    pub code: u16,
    /// The resourceVersion the write produced, if any.
    pub resource_version: String,
}

/// Most audit events kept (oldest dropped).
pub const AUDIT_LIMIT: usize = 200_000;

/// Fault and audit state.
pub struct Faults {
    rules: Mutex<Vec<FaultRule>>,
    paused: watch::Sender<bool>,
    /// Tells open watches to end: `None` all, `Some("group/resource")` those of one resource.
    pub drop_watches: broadcast::Sender<Option<String>>,
    audit: Mutex<VecDeque<AuditEvent>>,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            rules: Mutex::new(Vec::new()),
            paused: watch::channel(false).0,
            drop_watches: broadcast::channel(16).0,
            audit: Mutex::new(VecDeque::new()),
        }
    }
}

impl Faults {
    /// Add a rule.
    pub fn add(&self, rule: FaultRule) {
        self.rules.lock().unwrap_or_else(|p| p.into_inner()).push(rule);
    }

    /// Remove every rule.
    pub fn clear(&self) {
        self.rules.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// The action for a request, if a rule fires (consuming one of its `times`).
    pub fn check(&self, a: &RequestAttributes<'_>) -> Option<FaultAction> {
        let mut rules = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        let idx = rules.iter().position(|r| {
            r.matches(a) && r.probability.is_none_or(|p| (uuid::Uuid::new_v4().as_u128() % 1_000_000) as f64 / 1e6 < p)
        })?;
        let action = rules[idx].action.clone().unwrap_or(FaultAction::Status { code: 500 });
        if let Some(t) = rules[idx].times.as_mut() {
            *t = t.saturating_sub(1);
            if *t == 0 {
                rules.remove(idx);
            }
        }
        Some(action)
    }

    /// Pause (requests hang) or resume.
    pub fn set_paused(&self, paused: bool) {
        self.paused.send_replace(paused);
    }

    /// Wait while paused.
    pub async fn wait_unpaused(&self) {
        let mut rx = self.paused.subscribe();
        while *rx.borrow_and_update() {
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// End open watches (all, or those of `group/resource`).
    pub fn drop_watches(&self, key: Option<String>) {
        let _ = self.drop_watches.send(key);
    }

    /// Record a write.
    pub fn audit(&self, e: AuditEvent) {
        let mut a = self.audit.lock().unwrap_or_else(|p| p.into_inner());
        a.push_back(e);
        while a.len() > AUDIT_LIMIT {
            a.pop_front();
        }
    }

    /// The audit log, oldest first.
    pub fn audit_log(&self) -> Vec<AuditEvent> {
        self.audit.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect()
    }
}

/// The delay of a latency fault.
pub fn latency(millis: u64) -> Duration {
    Duration::from_millis(millis)
}
