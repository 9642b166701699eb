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
//! Cluster faults: a Pod can be killed (it disappears at once, as if its Node lost it, so its
//! owner replaces it: [`kill_pod`]), a Node's kubelet stopped (no more Lease renewals or status
//! updates, so the node controller marks it `Unknown` after 50 s of the simulation's clock) and
//! started again, or made to report `Ready=False` ([`set_node_stopped`], [`set_node_ready`]).
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
    /// Name (for a create, the created object's; empty for other collection requests).
    pub name: String,
    /// `fieldManager` of the request.
    pub field_manager: String,
    /// HTTP status code.
    pub code: u16,
    /// The resourceVersion the write produced, if any.
    pub resource_version: String,
    /// Whether it was a dry run (`dryRun=All`): nothing was stored.
    pub dry_run: bool,
}

/// Most audit events kept (oldest dropped).
pub const AUDIT_LIMIT: usize = 200_000;

/// How many resource requests one client sent of one `verb resource`, reads included (the
/// audit log keeps writes only).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestCount {
    /// Who sent them: the authenticated user (the impersonator when one impersonated another).
    pub client: String,
    /// Verb (`get`, `list`, `watch`, `create`, `patch`, ...).
    pub verb: String,
    /// Resource (plural), with `/subresource` when there is one.
    pub resource: String,
    /// Whether they were dry runs.
    pub dry_run: bool,
    /// How many.
    pub count: u64,
}

/// The key of a [`RequestCount`]: client, verb, resource, dry run.
type RequestKey = (String, String, String, bool);

/// Fault and audit state.
pub struct Faults {
    rules: Mutex<Vec<FaultRule>>,
    paused: watch::Sender<bool>,
    /// Tells open watches to end: `None` all, `Some("group/resource")` those of one resource.
    pub drop_watches: broadcast::Sender<Option<String>>,
    audit: Mutex<VecDeque<AuditEvent>>,
    /// Bounded by clients × verbs × resources, all finite.
    requests: Mutex<std::collections::BTreeMap<RequestKey, u64>>,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            rules: Mutex::new(Vec::new()),
            paused: watch::channel(false).0,
            drop_watches: broadcast::channel(16).0,
            audit: Mutex::new(VecDeque::new()),
            requests: Mutex::new(std::collections::BTreeMap::new()),
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

    /// How many more times the counted rules fire (those with `times`).
    pub fn times_left(&self) -> u32 {
        self.rules.lock().unwrap_or_else(|p| p.into_inner()).iter().filter_map(|r| r.times).sum()
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

    /// Count one resource request.
    pub fn count_request(&self, client: &str, verb: &str, resource: &str, dry_run: bool) {
        tracing::debug!(client, verb, resource, dry_run, "request");
        let mut r = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        *r.entry((client.to_string(), verb.to_string(), resource.to_string(), dry_run)).or_default() += 1;
    }

    /// Every resource request served so far, counted by client, verb and resource.
    pub fn request_counts(&self) -> Vec<RequestCount> {
        let r = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        r.iter()
            .map(|((client, verb, resource, dry_run), count)| RequestCount {
                client: client.clone(),
                verb: verb.clone(),
                resource: resource.clone(),
                dry_run: *dry_run,
                count: *count,
            })
            .collect()
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

/// The Event reason of a killed Pod.
pub const KILLED_REASON: &str = "Killing";

/// Kill a Pod as if its Node lost it: a Warning `Killing` Event from the kubelet, then deletion
/// with `gracePeriodSeconds: 0`, so the Pod is gone at once (unless a finalizer holds it) and its
/// owner creates a replacement. The request acts with field manager `kubelet` (the emulator has
/// no Node authorizer, so it runs with the in-process admin identity, as the kubelet simulation
/// does). Errors are the API's (404 when the Pod does not exist).
pub async fn kill_pod(
    state: &std::sync::Arc<crate::state::State>,
    namespace: &str,
    name: &str,
) -> Result<serde_json::Value, crate::errors::ApiError> {
    let kubelet = crate::client::Client::new(state.clone(), "kubelet");
    let pod_path = crate::client::path("v1", "pods", namespace, name, "");
    let mut pod = kubelet.get(&pod_path).await?;
    pod["kind"] = serde_json::json!("Pod");
    pod["apiVersion"] = serde_json::json!("v1");
    let containers: Vec<&str> =
        pod["spec"]["containers"].as_array().into_iter().flatten().filter_map(|c| c["name"].as_str()).collect();
    let message = format!("Stopping container {}: killed by the simcluster kill-pod fault", containers.join(", "));
    kubelet.event(&pod, "Warning", KILLED_REASON, &message, "kubelet").await;
    kubelet.delete(&pod_path, Some(0), None).await
}

/// Stop (`true`) or start again (`false`) the simulated kubelet of a Node: a stopped kubelet
/// renews no Lease and writes nothing.
pub fn set_node_stopped(state: &crate::state::State, node: &str, stopped: bool) {
    let mut set = state.node_faults.stopped.lock().unwrap_or_else(|p| p.into_inner());
    if stopped {
        set.insert(node.to_string());
    } else {
        set.remove(node);
    }
}

/// Make a Node's simulated kubelet report `Ready=False` (`ready: false`) or `Ready=True` again.
pub fn set_node_ready(state: &crate::state::State, node: &str, ready: bool) {
    let mut set = state.node_faults.not_ready.lock().unwrap_or_else(|p| p.into_inner());
    if ready {
        set.remove(node);
    } else {
        set.insert(node.to_string());
    }
}

type KillRequest = (String, String, tokio::sync::oneshot::Sender<Result<serde_json::Value, crate::errors::ApiError>>);

/// The kill workers, by cluster (`State::token_key`).
fn killers() -> &'static Mutex<std::collections::HashMap<String, tokio::sync::mpsc::UnboundedSender<KillRequest>>> {
    static KILLERS: std::sync::OnceLock<
        Mutex<std::collections::HashMap<String, tokio::sync::mpsc::UnboundedSender<KillRequest>>>,
    > = std::sync::OnceLock::new();
    KILLERS.get_or_init(Default::default)
}

/// Start the task that serves [`kill_pod_by_worker`] for the control API. (The kill goes
/// through the API, which routes the control request that asked for it: awaiting it there
/// directly would make the request future contain itself.) It ends with [`stop_killer`].
pub fn start_killer(state: &std::sync::Arc<crate::state::State>) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<KillRequest>();
    killers().lock().unwrap_or_else(|p| p.into_inner()).insert(state.token_key.clone(), tx);
    let weak = std::sync::Arc::downgrade(state);
    tokio::spawn(async move {
        while let Some((namespace, name, reply)) = rx.recv().await {
            let Some(state) = weak.upgrade() else { return };
            let _ = reply.send(kill_pod(&state, &namespace, &name).await);
        }
    });
}

/// End the task of [`start_killer`].
pub fn stop_killer(state: &crate::state::State) {
    killers().lock().unwrap_or_else(|p| p.into_inner()).remove(&state.token_key);
}

/// [`kill_pod`], run by the cluster's kill task.
pub async fn kill_pod_by_worker(
    state: &crate::state::State,
    namespace: &str,
    name: &str,
) -> Result<serde_json::Value, crate::errors::ApiError> {
    let (reply, answer) = tokio::sync::oneshot::channel();
    let sender = killers().lock().unwrap_or_else(|p| p.into_inner()).get(&state.token_key).cloned();
    let sent = sender.is_some_and(|s| s.send((namespace.to_string(), name.to_string(), reply)).is_ok());
    if !sent {
        return Err(crate::errors::ApiError::internal("simcluster: the kill task is not running"));
    }
    answer.await.unwrap_or_else(|_| Err(crate::errors::ApiError::internal("simcluster: the kill task ended")))
}
