//! `Application`: a deployable unit — source, identity it acts as, destination constraints, sync
//! policy, health timeout, history, failure policy, dependencies and deletion policy.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::common::{
    GroupKind, GroupVersionKind, HealthStatus, LocalObjectReference, conditions_schema, duration_schema,
    preserve_unknown_object,
};

/// A deployable unit rendered from a Repository path and kept in sync with it.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "sync.kuvryn.io",
    version = "v1alpha1",
    kind = "Application",
    doc = "A deployable unit rendered from a Repository path, applied with Server-Side Apply and kept in sync.",
    namespaced,
    status = "ApplicationStatus",
    shortname = "app",
    category = "ksync",
    printcolumn(name = "Sync", type_ = "string", json_path = ".status.sync.status"),
    printcolumn(name = "Health", type_ = "string", json_path = ".status.health.status"),
    printcolumn(name = "Revision", type_ = "string", json_path = ".status.sync.revision"),
    printcolumn(name = "Ready", type_ = "string", json_path = r#".status.conditions[?(@.type=="Ready")].status"#),
    printcolumn(name = "Status", type_ = "string", json_path = r#".status.conditions[?(@.type=="Ready")].message"#, priority = 1),
    printcolumn(name = "Dependencies", type_ = "string", json_path = r#".status.conditions[?(@.type=="DependenciesReady")].message"#, priority = 1),
    printcolumn(name = "Suspended", type_ = "boolean", json_path = ".spec.suspend", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    selectable = ".spec.source.repository",
    validation = Rule::new("self.metadata.name.size() <= 63").message("Application names are at most 63 characters (they label every Revision)"),
    validation = Rule::new("!has(self.spec.dependsOn) || self.spec.dependsOn.all(d, d.name != self.metadata.name)").message("an Application cannot depend on itself")
)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSpec {
    /// Where the desired state comes from and how it is rendered.
    pub source: ApplicationSource,

    /// The ServiceAccount, in the Application's namespace, that Kuvryn Sync impersonates to read,
    /// apply and prune. Kuvryn Sync never falls back to its own permissions.
    #[schemars(length(min = 1, max = 253))]
    pub service_account_name: String,

    /// Destination namespace constraints.
    pub destination: Destination,

    /// Automatic apply, pruning, self-heal and conflict handling.
    #[serde(default)]
    pub sync: SyncPolicy,

    /// Health observation.
    #[serde(default)]
    pub health: HealthPolicy,

    /// Bounded Revision history.
    #[serde(default)]
    pub history: HistoryPolicy,

    /// What a failed rollout does: pause (retry within `maxAttempts`) or roll back.
    #[serde(default)]
    pub failure_policy: FailurePolicy,

    /// Applications in the same namespace that must be Healthy, at the revision they want, before
    /// this one's rollout starts (reading live state and planning included); a rollout under way
    /// or a self-heal checks them again before it applies. Reported in `DependenciesReady`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub depends_on: Vec<LocalObjectReference>,

    /// Rollout strategy: waves and hooks. Part of what a manual rollback's approval is bound to.
    #[serde(default)]
    pub strategy: Strategy,

    /// What deleting the Application does to the resources it manages.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,

    /// Stop reconciling: no planning, apply, prune or self-heal; health is no longer observed.
    #[serde(default)]
    pub suspend: bool,
}

/// The source of an Application.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSource {
    /// A Repository in the Application's namespace.
    #[schemars(length(min = 1, max = 253))]
    pub repository: String,

    /// Optional override of the Repository's ref: a branch, tag or commit of the same repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub revision: Option<String>,

    /// Repository-relative directory holding the manifests, kustomization or chart.
    #[serde(default = "default_path")]
    #[schemars(length(min = 1, max = 512))]
    #[x_kube(validation = Rule::new("!self.startsWith('/') && !self.matches('(^|/)[.][.](/|$)')").message("path must be repository-relative and stay inside the checkout"))]
    pub path: String,

    /// The renderer.
    #[serde(default)]
    pub render: Render,
}

fn default_path() -> String {
    ".".into()
}

/// Renderer settings.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.helm) || !has(self.type) || self.type == 'Helm'").message("helm settings need render type Helm"))]
pub struct Render {
    /// `Yaml` (every .yaml/.yml/.json under the path), `Kustomize` or `Helm`. Unset: chosen
    /// from the path's content at each commit, as Argo CD does: `Helm` when it holds
    /// `Chart.yaml` (or `helm` settings are given), `Kustomize` when it holds
    /// `kustomization.yaml`, `kustomization.yml` or `Kustomization`, `Yaml` otherwise.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<RenderType>,
    /// Helm settings (type `Helm` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub helm: Option<HelmRender>,
}

/// `Yaml` (every .yaml/.yml/.json under the path), `Kustomize` or `Helm`. Unset: chosen from
/// the path at each commit: `Helm` when it holds `Chart.yaml` (or `helm` settings are given),
/// `Kustomize` when it holds a kustomization, `Yaml` otherwise.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
pub enum RenderType {
    /// Plain YAML/JSON manifests.
    #[default]
    Yaml,
    /// `kustomize build` of the path.
    Kustomize,
    /// `helm template` of the chart at the path.
    Helm,
}

/// Helm render settings.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HelmRender {
    /// Release name; defaults to the Application's name. Helm's rule for release names: at
    /// most 53 characters, lowercase letters, digits, `-` and `.`, each dot-separated part
    /// starting and ending with a letter or digit (so never a flag of `helm`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 53))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')").message("releaseName must be a Helm release name: at most 53 characters, lowercase letters, digits, '-' and '.', each dot-separated part starting and ending with a letter or digit"))]
    pub release_name: Option<String>,
    /// Inline values, merged over the chart's values.yaml.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_object")]
    pub values: Option<serde_json::Map<String, serde_json::Value>>,
    /// Values files from Secrets or ConfigMaps in the Application's namespace, read as the
    /// Application's service account, or from Git Repositories of the namespace (at the commit
    /// each observes), merged in order before `values`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub values_from: Vec<ValuesReference>,
    /// Credentials of the Helm repositories and OCI registries the chart's dependencies are
    /// pulled from, by URL prefix (the longest matching prefix wins).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub credentials: Vec<ChartCredentials>,
}

/// Credentials for the chart repositories under one URL prefix.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ChartCredentials {
    /// A repository URL prefix: `https://charts.example.com`, `oci://registry.example.com/team`.
    /// A dependency whose repository starts with it uses this Secret.
    #[schemars(length(min = 1, max = 512))]
    #[x_kube(validation = Rule::new("self.startsWith('https://') || self.startsWith('http://') || self.startsWith('oci://')").message("url must start with https://, http:// or oci://"))]
    pub url: String,
    /// A Secret in the Application's namespace, read as its service account: `username`,
    /// `password` and, for a private CA, `ca.crt`.
    pub secret_ref: LocalObjectReference,
}

/// A values file in a Secret, a ConfigMap or a Git Repository.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.kind != 'Repository' || (!self.key.startsWith('/') && !self.key.matches('(^|/)[.][.](/|$)'))").message("a Repository values file's key is a repository-relative path inside the checkout"))]
pub struct ValuesReference {
    /// `Secret` or `ConfigMap`.
    pub kind: ValuesKind,
    /// Object name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Data key holding a YAML values document; for `kind: Repository`, the repository-relative
    /// path of the values file.
    #[serde(default = "default_values_key")]
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
    /// A missing object or key is not an error.
    #[serde(default)]
    pub optional: bool,
}

fn default_values_key() -> String {
    "values.yaml".into()
}

/// Kind of a values source.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
pub enum ValuesKind {
    /// A Secret.
    #[default]
    Secret,
    /// A ConfigMap.
    ConfigMap,
    /// A file of a Git Repository in the Application's namespace, at the commit the Repository
    /// observes: `name` is the Repository, `key` the repository-relative path of the file.
    Repository,
}

impl ValuesReference {
    /// Whether it names a file of a Git Repository.
    pub fn is_repository(&self) -> bool {
        self.kind == ValuesKind::Repository
    }

    /// Whether `repository` (same namespace) is one this reference reads from.
    pub fn reads(&self, repository: &str) -> bool {
        self.is_repository() && self.name == repository
    }
}

impl ApplicationSpec {
    /// Whether the Application reads anything of the Repository `name` (same namespace): its
    /// source, or a values file.
    pub fn uses_repository(&self, name: &str) -> bool {
        self.source.repository == name
            || self.source.render.helm.as_ref().is_some_and(|h| h.values_from.iter().any(|v| v.reads(name)))
    }
}

/// Destination namespace constraints.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Destination {
    /// Namespace given to namespaced objects that name none.
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub namespace: String,
    /// Namespaces the Application may write namespaced objects to (`*` matches any run of
    /// characters). Empty: only `namespace`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 64),
        inner(length(min = 1, max = 63), regex(pattern = r"^[a-z0-9*]([-a-z0-9*]*[a-z0-9*])?$"))
    )]
    pub allowed_namespaces: Vec<String>,
    /// Cluster-scoped kinds the Application may manage (`kind: "*"` for a whole group). Empty:
    /// none; cluster-scoped objects in the desired state fail validation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub cluster_resources: Vec<GroupKind>,
}

/// Sync policy.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SyncPolicy {
    /// Apply new plans without approval. With `false`, each plan that deploys a new desired
    /// state (or, with `selfHeal`, repairs drift) waits for `ksync sync`.
    #[serde(default = "yes")]
    pub automatic: bool,
    /// Delete previously managed resources that left the desired state.
    #[serde(default)]
    pub prune: bool,
    /// Correct live drift through the plan/apply path; without it drift is only reported.
    #[serde(default)]
    pub self_heal: bool,
    /// Ownership conflicts under Server-Side Apply: `fail` blocks, `adopt` takes the fields.
    #[serde(default)]
    pub conflict_policy: ConflictPolicy,
}

impl Default for SyncPolicy {
    fn default() -> Self {
        Self { automatic: true, prune: false, self_heal: false, conflict_policy: ConflictPolicy::Fail }
    }
}

fn yes() -> bool {
    true
}

/// Conflict policy.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ConflictPolicy {
    /// Block the rollout on a conflict; nothing is forced.
    #[default]
    Fail,
    /// Force-take conflicting fields; the plan lists each with its previous manager.
    Adopt,
}

/// Health observation settings.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HealthPolicy {
    /// How long a rollout waits for Progressing resources before it fails with HealthTimeout.
    #[serde(default = "default_health_timeout")]
    #[schemars(schema_with = "duration_schema")]
    pub timeout: String,
}

impl Default for HealthPolicy {
    fn default() -> Self {
        Self { timeout: default_health_timeout() }
    }
}

fn default_health_timeout() -> String {
    "5m".into()
}

/// Revision history settings.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HistoryPolicy {
    /// Revisions kept per Application (held Revisions do not count).
    #[serde(default = "default_history_limit")]
    #[schemars(range(min = 1, max = 100))]
    pub limit: i32,
}

impl Default for HistoryPolicy {
    fn default() -> Self {
        Self { limit: default_history_limit() }
    }
}

fn default_history_limit() -> i32 {
    10
}

/// Failure policy.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FailurePolicy {
    /// `pause`: keep the failed Revision and retry it within `maxAttempts`; `rollback`: return
    /// to the previous healthy Revision as the Revision fails (`pause` without one).
    #[serde(default)]
    pub action: FailureAction,
    /// Attempts of one Revision before it is given up.
    #[serde(default = "default_max_attempts")]
    #[schemars(range(min = 1, max = 20))]
    pub max_attempts: i32,
    /// Delay between attempts.
    #[serde(default)]
    pub backoff: Backoff,
}

impl Default for FailurePolicy {
    fn default() -> Self {
        Self { action: FailureAction::Pause, max_attempts: default_max_attempts(), backoff: Backoff::default() }
    }
}

fn default_max_attempts() -> i32 {
    3
}

/// Failure action.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum FailureAction {
    /// Stop and retry the same Revision within `maxAttempts`.
    #[default]
    Pause,
    /// Roll back to the previous healthy Revision as the Revision fails; without one, `Pause`.
    Rollback,
}

/// Exponential backoff between attempts.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Backoff {
    /// First delay.
    #[serde(default = "default_backoff_duration")]
    #[schemars(schema_with = "duration_schema")]
    pub duration: String,
    /// Multiplier per attempt.
    #[serde(default = "default_backoff_factor")]
    #[schemars(range(min = 1, max = 10))]
    pub factor: i32,
    /// Longest delay.
    #[serde(default = "default_backoff_max")]
    #[schemars(schema_with = "duration_schema")]
    pub max_duration: String,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            duration: default_backoff_duration(),
            factor: default_backoff_factor(),
            max_duration: default_backoff_max(),
        }
    }
}

fn default_backoff_duration() -> String {
    "10s".into()
}
fn default_backoff_factor() -> i32 {
    2
}
fn default_backoff_max() -> String {
    "5m".into()
}

/// Rollout strategy.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Strategy {
    /// Apply in waves (`sync.kuvryn.io/sync-wave`), each Healthy before the next; `false`
    /// applies everything in one group (still in kind order), every object in wave 0.
    #[serde(default = "yes")]
    pub waves: bool,
    /// Run sync hooks (`sync.kuvryn.io/hook`, or Helm's `helm.sh/hook`) at their stage of each
    /// rollout; `false`: hook objects are not created at all, and their plan entries say so.
    #[serde(default = "yes")]
    pub hooks: bool,
}

impl Default for Strategy {
    fn default() -> Self {
        Self { waves: true, hooks: true }
    }
}

/// Deletion policy.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
pub enum DeletionPolicy {
    /// Deleting the Application leaves its resources in place (labels are kept).
    #[default]
    Orphan,
    /// Deleting the Application deletes its managed resources, high-risk kinds included, except
    /// those annotated `sync.kuvryn.io/prune: disabled`, Namespaces holding objects it does not
    /// delete, and CustomResourceDefinitions with custom resources it does not delete.
    DeleteManagedResources,
}

/// Observed state of an Application.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationStatus {
    /// The `metadata.generation` this status reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `Reconciling`, `Stalled`, and `DependenciesReady` with `spec.dependsOn`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// Convergence: do live resources match the rendered desired state?
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<SyncStatus>,
    /// Operational health of the managed resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthSummary>,
    /// The Revision the Application currently wants deployed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub desired_revision: Option<String>,
    /// The last Revision whose rollout completed Healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub last_healthy_revision: Option<String>,
    /// Every kind the Application has applied and still manages: prune searches these by label.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 512))]
    pub managed_kinds: Vec<GroupVersionKind>,
    /// Why the Application is not Healthy: the most specific evidence found in the resource graph
    /// (see docs/diagnosis.md). Absent when Healthy, or when no evidence is found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnosis: Option<Diagnosis>,
    /// The last `sync.kuvryn.io/reconcile-requested-at` value handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub last_handled_reconcile_at: Option<String>,
    /// The last `sync.kuvryn.io/redeploy-requested-at` the controller took up, normalized to
    /// UTC: the value its desired state puts in workloads' `kubectl.kubernetes.io/restartedAt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub last_handled_redeploy_at: Option<String>,
}

/// Sync state.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, schemars::JsonSchema,
)]
pub enum SyncState {
    /// Live resources match the desired state of the desired Revision.
    Synced,
    /// The desired Revision is not (fully) deployed.
    OutOfSync,
    /// The desired Revision was deployed and live state has since drifted from it.
    Drifted,
    /// Not compared yet.
    #[default]
    Unknown,
}

impl ApplicationStatus {
    /// Whether `self` and `other` differ in nothing but `sync.unchanged`. That record rides
    /// along with a status write made for something else and is never a write of its own: a
    /// drift check that finds nothing to change writes nothing, even when an object's harmless
    /// change (a label the desired object does not declare) moved the digest.
    pub fn same_but_unchanged(&self, other: &ApplicationStatus) -> bool {
        match (self.sync.as_ref(), other.sync.as_ref()) {
            (Some(a), Some(b)) if a.unchanged != b.unchanged => {
                let mut same = other.clone();
                if let Some(sync) = same.sync.as_mut() {
                    sync.unchanged.clone_from(&a.unchanged);
                }
                same == *self
            }
            _ => self == other,
        }
    }
}

impl SyncState {
    /// Every state.
    pub const ALL: [SyncState; 4] = [SyncState::Synced, SyncState::OutOfSync, SyncState::Drifted, SyncState::Unknown];

    /// Its name, as serialized in `status.sync.status`.
    pub fn as_str(self) -> &'static str {
        match self {
            SyncState::Synced => "Synced",
            SyncState::OutOfSync => "OutOfSync",
            SyncState::Drifted => "Drifted",
            SyncState::Unknown => "Unknown",
        }
    }
}

/// `status.sync`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SyncStatus {
    /// Synced, OutOfSync, Drifted or Unknown.
    pub status: SyncState,
    /// The Revision compared against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub revision: Option<String>,
    /// Its commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub commit: Option<String>,
    /// Drifted resources, bounded (the first 50 in plan order).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50))]
    pub drifted: Vec<ResourceRef>,
    /// Digest of the plan the last reconcile computed against the live state: what
    /// `ksync sync` approves (`sync.kuvryn.io/approved-plan`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 80))]
    pub plan_digest: Option<String>,
    /// What the last plans found unchanged, for a replica that takes the Application over (or
    /// restarts): it reads the objects and, where they still match, does not dry-run them again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unchanged: Option<UnchangedDigest>,
}

/// `status.sync.unchanged`: every desired object, and the live object a plan found it
/// unchanged against, as one digest.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct UnchangedDigest {
    /// `sha256:<hex>` over each desired object and its live object without `status`,
    /// `metadata.resourceVersion`, `metadata.managedFields` and the annotations the desired
    /// object does not declare.
    #[schemars(length(max = 80))]
    pub digest: String,
    /// When a server-side dry run last confirmed the oldest of them (RFC 3339).
    #[schemars(length(max = 40))]
    pub checked_at: String,
}

/// `status.health`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HealthSummary {
    /// Healthy, Progressing, Degraded or Unknown.
    pub status: HealthStatus,
    /// A one-line explanation when not Healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub message: Option<String>,
}

/// A resource, identified as the plan and the diagnosis print it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRef {
    /// API group; empty for core.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 253))]
    pub group: String,
    /// Kind.
    #[schemars(length(max = 63))]
    pub kind: String,
    /// Namespace; absent for cluster-scoped objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub namespace: Option<String>,
    /// Name.
    #[schemars(length(max = 253))]
    pub name: String,
}

/// `status.diagnosis`: the root cause the resource graph walk found.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Diagnosis {
    /// The unhealthy managed resource the walk started from.
    pub resource: ResourceRef,
    /// The evidence: ImagePullBackOff, CrashLoopBackOff, Unschedulable, PendingClaim,
    /// MissingSecret, NoReadyEndpoints, JobFailed, ...
    #[schemars(length(max = 128))]
    pub reason: String,
    /// Human-readable explanation (one line, bounded, redacted).
    #[schemars(length(max = 1024))]
    pub message: String,
    /// The graph path from `resource` to the evidence, one step per edge.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub path: Vec<DiagnosisStep>,
}

/// One edge of a diagnosis path.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DiagnosisStep {
    /// Edge type: Owns, Selects, Endpoints, Routes, Scales, Binds, Mounts, Uses, RunsAs.
    #[schemars(length(max = 32))]
    pub edge: String,
    /// The object the edge leads to.
    pub resource: ResourceRef,
    /// The object does not exist (a missing Secret, ConfigMap, claim...).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub missing: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unchanged_record_alone_is_no_write() {
        let record = |d: &str| Some(UnchangedDigest { digest: d.into(), checked_at: "2026-12-06T00:00:00Z".into() });
        let status = |state: SyncState, unchanged: Option<UnchangedDigest>| ApplicationStatus {
            sync: Some(SyncStatus { status: state, unchanged, ..Default::default() }),
            ..Default::default()
        };
        // (old, new, the same but the record: no write)
        let cases = [
            (status(SyncState::Synced, record("a")), status(SyncState::Synced, record("b")), true),
            (status(SyncState::Synced, None), status(SyncState::Synced, record("b")), true),
            (status(SyncState::Synced, record("a")), status(SyncState::Synced, record("a")), true),
            // Something else changed too: written, the record with it.
            (status(SyncState::Drifted, record("a")), status(SyncState::Synced, record("b")), false),
            (status(SyncState::Drifted, None), status(SyncState::Synced, record("b")), false),
            (status(SyncState::Drifted, record("a")), status(SyncState::Synced, record("a")), false),
            (ApplicationStatus::default(), status(SyncState::Synced, record("a")), false),
        ];
        for (old, new, same) in cases {
            assert_eq!(old.same_but_unchanged(&new), same, "{old:?} -> {new:?}");
        }
    }
}
