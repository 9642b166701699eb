//! `Revision`: one resolved deployment attempt of an Application — source identity, render
//! settings, bounded plan, health summary, attempts, approval and failure classification.
//! Written only by the controller; bounded and redacted so it suits CLIs, Events and dashboards.
//!
//! Its `Ready`, `Reconciling` and `Stalled` conditions follow its phase
//! ([`super::revision_conditions`]). Not yet implemented (never written by the controller):
//! `status.plan.warnings` (always empty).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, MicroTime, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::application::{Render, ResourceRef};
use super::common::{HealthStatus, conditions_schema};

/// Most plan entries kept on a Revision; the rest are counted in the summary and `truncated` set.
pub const MAX_PLAN_ENTRIES: usize = 500;
/// Most attempts kept on a Revision (the oldest are dropped; `number` keeps counting).
pub const MAX_ATTEMPTS_KEPT: usize = 20;

/// One resolved deployment attempt of an Application. Its name is the Application's name and a
/// short hash of the Revision identity (Application, commit, path, render settings, service
/// account), so the same identity always maps to the same Revision.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "sync.kuvryn.io",
    version = "v1alpha1",
    kind = "Revision",
    doc = "One resolved deployment attempt of an Application: source identity, plan, health, attempts, approval.",
    namespaced,
    status = "RevisionStatus",
    shortname = "rev",
    category = "ksync",
    printcolumn(name = "Application", type_ = "string", json_path = ".spec.application"),
    printcolumn(name = "Commit", type_ = "string", json_path = ".spec.source.commit"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Failure", type_ = "string", json_path = ".status.failure.reason", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    selectable = ".spec.application",
    selectable = ".spec.source.commit"
)]
#[serde(rename_all = "camelCase")]
pub struct RevisionSpec {
    /// The Application (same namespace).
    #[schemars(length(min = 1, max = 63))]
    pub application: String,
    /// Source identity.
    pub source: RevisionSource,
    /// Render settings used.
    #[serde(default)]
    pub render: Render,
    /// The service account the rollout acts as.
    #[schemars(length(min = 1, max = 253))]
    pub service_account_name: String,
    /// The chart dependencies pulled for the render (from Helm repositories and OCI
    /// registries): part of the Revision's identity, so a new release within a version range is
    /// a Revision of its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub charts: Vec<ChartVersion>,
    /// Digest of the latest rendered desired state (`sha256:<hex>`); follows every render,
    /// including drift checks that deploy nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 80))]
    pub desired_state_hash: Option<String>,
}

/// Source identity of a Revision.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RevisionSource {
    /// The Repository.
    #[schemars(length(min = 1, max = 253))]
    pub repository: String,
    /// Its URL (never with credentials).
    #[schemars(length(max = 2048))]
    pub url: String,
    /// The ref that resolved to `commit` (`branch/main`, `tag/v1`, or a commit).
    #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 300))]
    pub reference: Option<String>,
    /// The full commit id; for a Helm or OCI Repository's chart, its exact version.
    #[schemars(length(min = 1, max = 128))]
    pub commit: String,
    /// The source path.
    #[schemars(length(max = 512))]
    pub path: String,
}

/// Lifecycle phase of a Revision.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
pub enum RevisionPhase {
    /// Rendering, validating and computing the plan.
    #[default]
    Planning,
    /// Manual sync: the plan waits for `ksync sync` (or a manual rollback's own approval).
    AwaitingApproval,
    /// Applying and pruning.
    Applying,
    /// Applied; waiting for Progressing resources (until `spec.health.timeout`).
    Progressing,
    /// The rollout completed and every resource is Healthy.
    Healthy,
    /// The rollout failed (see `status.failure`), or the Revision was rolled back from (held).
    Failed,
}

/// Observed state of a Revision.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RevisionStatus {
    /// The `metadata.generation` this status reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `Reconciling` and `Stalled`, following the phase (`Ready=True` when Healthy;
    /// `Stalled=True` on a failure not retried), and `RolledBack` on a held Revision.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// Lifecycle phase.
    #[serde(default)]
    pub phase: RevisionPhase,
    /// The bounded plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<Plan>,
    /// Health summary of the managed resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<RevisionHealth>,
    /// Attempts, oldest first (the latest 20 are kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub attempts: Vec<Attempt>,
    /// The Revision that was Healthy before this one was first attempted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub previous_healthy_revision: Option<String>,
    /// Failure classification of the latest failed attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
    /// The approval the rollout ran under (`ksync sync`, or a manual rollback's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Approval>,
    /// Digest of the desired state the last completed, Healthy rollout deployed, or that was found
    /// already live while reconciling this Revision outside a rollback: what a manual rollback's
    /// approval is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 80))]
    pub deployed_desired_state_hash: Option<String>,
}

/// The plan: what applying this Revision does, computed before any mutation.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// Digest of the full plan (`sha256:<hex>`): what an approval names.
    #[schemars(length(max = 80))]
    pub digest: String,
    /// Counts over every entry, including those not kept.
    pub summary: PlanSummary,
    /// Entries in apply order (the first 500).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 500))]
    pub entries: Vec<PlanEntry>,
    /// Entries were dropped to stay within the bound.
    #[serde(default)]
    pub truncated: bool,
    /// Plan-wide warnings. Not yet implemented: always empty (each entry's `warning` is written).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(max = 1024)))]
    pub warnings: Vec<String>,
}

/// Plan counts.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PlanSummary {
    /// Objects to create.
    pub create: i32,
    /// Objects to update.
    pub update: i32,
    /// Objects already as desired (including prune-skipped ones).
    pub unchanged: i32,
    /// Objects to delete (prune).
    pub delete: i32,
    /// Sync hooks (`sync.kuvryn.io/hook`, or Helm's `helm.sh/hook`), run or skipped: not counted
    /// above.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub hooks: i32,
}

/// Plan action of one object.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
pub enum PlanAction {
    /// Does not exist yet.
    Create,
    /// Exists and differs in fields we manage.
    Update,
    /// Exists as desired (or was skipped by prune; see `warning`).
    #[default]
    Unchanged,
    /// Managed, no longer desired, pruned.
    Delete,
    /// A sync hook that is not run (`spec.strategy.hooks: false`, or a Helm hook of a kind Kuvryn
    /// Sync does not run); `warning` says why.
    Skip,
}

/// The phase of a rollout a sync hook runs in (`sync.kuvryn.io/hook`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, schemars::JsonSchema)]
pub enum HookPhase {
    /// Before anything of the plan is applied.
    PreSync,
    /// With the wave application: created with the objects of its wave.
    Sync,
    /// Once every object is Healthy.
    PostSync,
    /// When the attempt fails.
    SyncFail,
}

impl HookPhase {
    /// Every phase, in rollout order.
    pub const ALL: [HookPhase; 4] = [HookPhase::PreSync, HookPhase::Sync, HookPhase::PostSync, HookPhase::SyncFail];

    /// Its name, as written in `sync.kuvryn.io/hook`.
    pub fn as_str(self) -> &'static str {
        match self {
            HookPhase::PreSync => "PreSync",
            HookPhase::Sync => "Sync",
            HookPhase::PostSync => "PostSync",
            HookPhase::SyncFail => "SyncFail",
        }
    }
}

impl std::fmt::Display for HookPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One object in the plan.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PlanEntry {
    /// The object.
    #[serde(flatten)]
    pub resource: ResourceRef,
    /// API version applied.
    #[schemars(length(max = 63))]
    pub version: String,
    /// What happens to it.
    pub action: PlanAction,
    /// Rollout wave (`sync.kuvryn.io/sync-wave`; 0, omitted, when absent or when
    /// `spec.strategy.waves` is false).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub wave: i32,
    /// The phase this object runs in when it is a sync hook (omitted for ordinary objects): a
    /// hook is created fresh each rollout and is not part of the managed inventory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook: Option<HookPhase>,
    /// Changed field paths (`spec.template.spec.containers[name=api].image`), the first 32.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(max = 512)))]
    pub fields: Vec<String>,
    /// Why the action is not what it seems (for example a prune skip).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub warning: Option<String>,
    /// Ownership conflicts that block the apply under conflict policy `fail`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub conflicts: Vec<FieldOwner>,
    /// Fields taken over under conflict policy `adopt`, with their previous manager.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub adopted: Vec<FieldOwner>,
    /// A CustomResourceDefinition from a Helm chart's `crds/` folder: applied in the first wave,
    /// before every other object of the chart, and never pruned (omitted when false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub chart_crd: bool,
}

fn is_zero(v: &i32) -> bool {
    *v == 0
}

/// A pulled chart dependency.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ChartVersion {
    /// The chart's name.
    #[schemars(length(max = 253))]
    pub name: String,
    /// The Helm repository or OCI registry.
    #[schemars(length(max = 512))]
    pub repository: String,
    /// The exact version pulled.
    #[schemars(length(max = 128))]
    pub version: String,
    /// `sha256:<hex>` of the chart archive.
    #[schemars(length(max = 80))]
    pub digest: String,
}

/// A field and the manager that owns (or owned) it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct FieldOwner {
    /// Field path.
    #[schemars(length(max = 512))]
    pub field: String,
    /// Field manager.
    #[schemars(length(max = 128))]
    pub manager: String,
}

/// Health summary of a Revision's resources.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RevisionHealth {
    /// Overall health.
    pub status: HealthStatus,
    /// Healthy resources.
    #[serde(default)]
    pub healthy: i32,
    /// Progressing resources.
    #[serde(default)]
    pub progressing: i32,
    /// Degraded resources.
    #[serde(default)]
    pub degraded: i32,
    /// One line on the first non-Healthy resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub message: Option<String>,
}

/// One attempt at rolling a Revision out.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Attempt {
    /// 1-based attempt number.
    #[schemars(range(min = 1))]
    pub number: i32,
    /// Start time.
    pub started_at: Time,
    /// End time, once finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
    /// Outcome.
    pub result: AttemptResult,
    /// Failure reason of a failed attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub reason: Option<String>,
    /// Plan digest applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 80))]
    pub plan_digest: Option<String>,
    /// The wave applied last, when the plan has several (`sync.kuvryn.io/sync-wave`): the
    /// attempt waits for it, and every lower wave, to be Healthy before applying the next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wave: Option<i32>,
    /// When that wave was applied: its health wait counts from here against
    /// `spec.health.timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wave_started_at: Option<Time>,
    /// The hook phase the attempt is running (`PreSync`, `PostSync`, `SyncFail`); `wave` is then
    /// the wave of that phase's hooks and `waveStartedAt` when they were created. Omitted while
    /// the attempt applies its waves (Sync hooks run with them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook: Option<HookPhase>,
    /// The desired state this attempt deploys (`spec.desiredStateHash` as it started): what its
    /// success records as deployed, so a desired state that changed during the attempt gets an
    /// attempt of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 80))]
    pub desired_state_hash: Option<String>,
}

/// Outcome of an attempt.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
pub enum AttemptResult {
    /// Under way.
    #[default]
    Running,
    /// Completed Healthy.
    Succeeded,
    /// Failed (see the Revision's `failure`).
    Failed,
}

/// Failure classification.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Failure {
    /// SourceFailure, RenderFailure, ValidationFailure, ApplyConflict, ApplyFailure,
    /// PruneFailure, HealthTimeout or Degraded.
    #[schemars(length(max = 128))]
    pub reason: String,
    /// Bounded, redacted explanation.
    #[schemars(length(max = 4096))]
    pub message: String,
    /// Whether retrying can help (a failed fetch can; invalid desired state cannot).
    #[serde(default)]
    pub retryable: bool,
}

/// An approval of a plan: recorded when the rollout it approves starts.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Approval {
    /// Who approved (`sync.kuvryn.io/approved-by`); `unknown` when nothing recorded it.
    #[schemars(length(max = 256))]
    pub user: String,
    /// When (`sync.kuvryn.io/approved-at`), or when the controller took the approval if
    /// nothing recorded it; to the microsecond, so a second approval of the same plan within
    /// one second is told from the first.
    pub time: MicroTime,
    /// The plan digest approved.
    #[schemars(length(max = 80))]
    pub plan_digest: String,
    /// `ManualSync` or `ManualRollback`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub source: Option<String>,
    /// The desired state the approved plan deploys (`spec.desiredStateHash` then): the approval
    /// covers the rest of its rollout, retries included, only while it stays the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 80))]
    pub desired_state_hash: Option<String>,
    /// The attempt it started: it covers that attempt and its retries until one completes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<i32>,
}

/// A reference to the Revision `name` in `ns`, for Events about it (no uid or resourceVersion,
/// so it is stable).
pub fn reference(ns: &str, name: &str) -> k8s_openapi::api::core::v1::ObjectReference {
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(super::names::API_VERSION.to_string()),
        kind: Some("Revision".to_string()),
        name: Some(name.to_string()),
        namespace: Some(ns.to_string()),
        ..Default::default()
    }
}
