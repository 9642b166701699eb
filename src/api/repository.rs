//! `Repository`: a Git desired-state source and the GitOps entry point for Applications.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::common::{LocalObjectReference, conditions_schema, duration_schema};

/// The default `.ksync.yaml` path (the repository root).
pub const DEFAULT_CONFIG_PATH: &str = ".ksync.yaml";

/// A Git source. Kuvryn Sync resolves `spec.ref` to a commit, records it in `status.revision`,
/// then reads the configured `.ksync.yaml` files and keeps the Applications they declare.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "sync.kuvryn.io",
    version = "v1alpha1",
    kind = "Repository",
    doc = "A Git desired-state source: resolved to a commit, read for .ksync.yaml Application definitions.",
    namespaced,
    status = "RepositoryStatus",
    shortname = "repo",
    category = "ksync",
    printcolumn(name = "URL", type_ = "string", json_path = ".spec.url"),
    printcolumn(name = "Revision", type_ = "string", json_path = ".status.revision.commit"),
    printcolumn(name = "Ready", type_ = "string", json_path = r#".status.conditions[?(@.type=="Ready")].status"#),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].message"#,
        priority = 1
    ),
    printcolumn(name = "Suspended", type_ = "boolean", json_path = ".spec.suspend", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    selectable = ".spec.url"
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.type == 'Git' ? has(self.ref) && !has(self.chart) : has(self.chart) && !has(self.ref)").message("a Git Repository sets ref (and no chart); a Helm or OCI Repository sets chart (and no ref)"))]
#[x_kube(validation = Rule::new("self.type == 'Git' || !has(self.receiver)").message("receiver is for Git Repositories: a Helm or OCI Repository is polled at its interval"))]
#[x_kube(validation = Rule::new("self.type != 'Helm' || self.url.matches('^https?://')").message("a Helm Repository's url is the https:// (or http://) URL of a chart repository index"))]
#[x_kube(validation = Rule::new("self.type != 'OCI' || self.url.startsWith('oci://')").message("an OCI Repository's url is an oci:// registry path"))]
pub struct RepositorySpec {
    /// What the Repository holds: `Git` (a Git repository, the default), `Helm` (a Helm chart
    /// repository, by its index URL) or `OCI` (charts in an OCI registry).
    #[serde(rename = "type", default)]
    pub type_: RepositoryType,

    /// Git URL: `https://`, `http://`, `ssh://`, scp-like `user@host:path`, `git://` or `file://`
    /// (a path on the controller's disk: refused unless the manager runs with
    /// `--allow-local-repositories`). For `type: Helm`, the chart repository's `https://` URL
    /// (where its `index.yaml` is); for `type: OCI`, the registry path holding the chart
    /// (`oci://registry.example.com/charts`). Credentials never go in the URL: use `secretRef`.
    #[schemars(length(min = 1, max = 2048))]
    #[x_kube(validation = Rule::new("self.matches('^(https?|ssh|git|file|oci)://') || self.matches('^[A-Za-z0-9._-]+@[^/:]+:')").message("url must be an https, http, ssh, git, file or oci URL, or scp-like user@host:path"))]
    #[x_kube(validation = Rule::new("!self.matches('^https?://[^/]*@')").message("url must not carry credentials: reference a Secret in spec.secretRef"))]
    pub url: String,

    /// The Git ref to follow (type `Git` only): exactly one of `branch`, `tag` or `commit`.
    #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<GitRef>,

    /// The chart to follow (types `Helm` and `OCI` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chart: Option<ChartRef>,

    /// A Secret in the Repository's namespace with the credentials: `username` and `password` (a
    /// token goes in `password`) for HTTPS; `identity` (private key) and `known_hosts` for SSH;
    /// optionally `ca.crt` for a private certificate authority. Only the reference is stored here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,

    /// How often the ref is resolved again (jittered).
    #[serde(default = "default_interval")]
    #[schemars(schema_with = "duration_schema")]
    pub interval: String,

    /// Timeout of each Git operation (fetch, resolve).
    #[serde(default = "default_timeout")]
    #[schemars(schema_with = "duration_schema")]
    pub timeout: String,

    /// Repository-relative paths of the `.ksync.yaml` files to read. Each must stay inside the
    /// checkout and be named `.ksync.yaml`.
    #[serde(default = "default_config_paths")]
    #[schemars(length(min = 1, max = 64), inner(length(min = 1, max = 512)))]
    #[x_kube(validation = Rule::new("self.all(p, p.matches('^([^/]+/)*[.]ksync[.]yaml$'))").message("each applicationConfigPaths entry must be repository-relative (no leading /) and name a file called .ksync.yaml"))]
    #[x_kube(validation = Rule::new("self.all(p, !p.matches('(^|/)[.][.](/|$)'))").message("applicationConfigPaths entries must stay inside the checkout (no .. segments)"))]
    pub application_config_paths: Vec<String>,

    /// Stop reconciling this Repository (no fetches, no Application changes).
    #[serde(default)]
    pub suspend: bool,

    /// Fetch as soon as the Git host reports a push (`docs/receivers.md`): the manager's
    /// receiver endpoint, at the path `status.receiver.path`, verifies each push with the token
    /// of this Secret and fetches the Repositories whose URL and ref it names. Git Repositories
    /// only; polling at `interval` goes on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receiver: Option<Receiver>,
}

/// A push receiver of a Repository.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Receiver {
    /// A Secret of this namespace whose `token` (at least 16 bytes) is the webhook secret given
    /// to the Git host (HMAC key, or GitLab's token). Repositories naming the same Secret share one
    /// endpoint path.
    pub secret_ref: LocalObjectReference,
}

/// What a Repository holds.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
pub enum RepositoryType {
    /// A Git repository.
    #[default]
    Git,
    /// A Helm chart repository (`index.yaml` over HTTPS).
    Helm,
    /// Helm charts in an OCI registry.
    #[serde(rename = "OCI")]
    Oci,
}

/// A chart of a Helm or OCI Repository, and the versions to follow.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ChartRef {
    /// The chart's name.
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$"))]
    pub name: String,
    /// A version (`1.2.3`) or a semver range (`~1.2`, `>=1.0.0 <2.0.0`); the newest release in
    /// it is followed, found again at every interval.
    #[serde(default = "any_version")]
    #[schemars(length(min = 1, max = 128))]
    #[x_kube(validation = Rule::new("!self.startsWith('-')").message("version must be a version or a semver range"))]
    pub version: String,
}

fn any_version() -> String {
    "*".into()
}

/// The Git ref to follow. Exactly one field is set.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[x_kube(validation = Rule::new("(has(self.branch) ? 1 : 0) + (has(self.tag) ? 1 : 0) + (has(self.commit) ? 1 : 0) == 1").message("exactly one of branch, tag or commit must be set"))]
pub struct GitRef {
    /// A branch name, followed to its newest commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub branch: Option<String>,
    /// A tag (annotated or lightweight).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub tag: Option<String>,
    /// A full or abbreviated commit id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9a-f]{7,64}$"))]
    pub commit: Option<String>,
}

impl GitRef {
    /// The ref as users read it: `branch/main`, `tag/v1.2.0` or the commit.
    pub fn display(&self) -> String {
        match (&self.branch, &self.tag, &self.commit) {
            (Some(b), _, _) => format!("branch/{b}"),
            (_, Some(t), _) => format!("tag/{t}"),
            (_, _, Some(c)) => c.clone(),
            _ => String::new(),
        }
    }
}

impl RepositorySpec {
    /// What the Repository follows as users read it: `branch/main`, `tag/v1.2.0`, a commit, or
    /// `chart web ~1.2`.
    pub fn following(&self) -> String {
        match (&self.reference, &self.chart) {
            (Some(r), _) => r.display(),
            (None, Some(c)) => format!("chart {} {}", c.name, c.version),
            (None, None) => String::new(),
        }
    }

    /// Whether it holds charts (type `Helm` or `OCI`) rather than Git.
    pub fn is_chart(&self) -> bool {
        self.type_ != RepositoryType::Git
    }
}

fn default_interval() -> String {
    "1m".into()
}
fn default_timeout() -> String {
    "60s".into()
}
fn default_config_paths() -> Vec<String> {
    vec![super::repository::DEFAULT_CONFIG_PATH.into()]
}

/// Observed state of a Repository.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RepositoryStatus {
    /// The `metadata.generation` this status reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `Reconciling`, `Stalled` and `SourceReady`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// The observed revision: the ref and the commit it resolved to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<ObservedRevision>,
    /// What the `.ksync.yaml` files of the observed revision declared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applications: Option<DiscoveredApplications>,
    /// The last `sync.kuvryn.io/reconcile-requested-at` value handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub last_handled_reconcile_at: Option<String>,
    /// The push receiver, once its Secret is read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receiver: Option<ReceiverStatus>,
}

/// Where the Git host sends pushes for this Repository.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReceiverStatus {
    /// The path on the manager's receiver endpoint (`/hook/` and a digest of the namespace, the
    /// Secret's name and its token: it names neither the Repository nor the token).
    #[schemars(length(max = 128))]
    pub path: String,
}

/// A resolved ref.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ObservedRevision {
    /// The ref as written in the spec (`branch/main`, `tag/v1`, or a commit).
    #[schemars(length(max = 300))]
    #[serde(rename = "ref")]
    pub reference: String,
    /// The full commit id; for a Helm or OCI Repository, the chart version followed.
    #[schemars(length(max = 128))]
    pub commit: String,
    /// When this commit was fetched (a later fetch that finds the same commit changes nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetched_at: Option<Time>,
}

/// Applications declared by the observed revision.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveredApplications {
    /// How many Applications the files declare.
    pub discovered: i32,
    /// The `.ksync.yaml` files read.
    #[serde(default)]
    #[schemars(length(max = 64), inner(length(max = 512)))]
    pub files: Vec<String>,
}
