//! `Notification`: a tenant's route from the lifecycle Events of its Applications to a chat, an
//! incident tool or a webhook, or to commit statuses on the Git host. See `docs/notifications.md`.
//!
//! Delivered by the replica owning each Application's shard (`crate::notify`); status written
//! by whichever replica delivered last.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::common::{LocalObjectReference, conditions_schema};

/// Routes the lifecycle Events of chosen Applications of this namespace to a provider. The
/// address and token of the provider are read from a Secret of this namespace, never written
/// here. Observations (`HealthDegraded`, `Drifted`) are not lifecycle transitions and are never
/// sent.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "sync.kuvryn.io",
    version = "v1alpha1",
    kind = "Notification",
    doc = "Routes lifecycle Events of Applications of this namespace to Slack, Teams, Discord, a webhook, Alertmanager, or commit statuses.",
    namespaced,
    status = "NotificationStatus",
    shortname = "ntf",
    category = "ksync",
    printcolumn(name = "Provider", type_ = "string", json_path = ".spec.provider.type"),
    printcolumn(name = "Ready", type_ = "string", json_path = r#".status.conditions[?(@.type=="Ready")].status"#),
    printcolumn(name = "Last Delivery", type_ = "date", json_path = ".status.lastDelivery.at"),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].message"#,
        priority = 1
    ),
    printcolumn(name = "Suspended", type_ = "boolean", json_path = ".spec.suspend", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct NotificationSpec {
    /// Which Applications of this namespace: those named, those matching the selector, or (with
    /// neither) every one.
    #[serde(default)]
    pub applications: ApplicationSelector,

    /// The lowest severity sent: `Normal` (every lifecycle Event, the default) or `Warning`
    /// (failures only).
    #[serde(default)]
    pub severity: Severity,

    /// Only Events of these reasons (`Succeeded`, `HealthTimeout`, `RolledBack`, ...); empty: every
    /// lifecycle reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 128)))]
    pub reasons: Vec<String>,

    /// Where to send them.
    pub provider: Provider,

    /// Send nothing while true (Events of the meantime are not sent later).
    #[serde(default)]
    pub suspend: bool,
}

/// Applications chosen by name or labels.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSelector {
    /// Application names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(min = 1, max = 253)))]
    pub names: Vec<String>,
    /// A label selector over Applications.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

/// The lowest severity sent.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, schemars::JsonSchema)]
pub enum Severity {
    /// Every lifecycle Event.
    #[default]
    Normal,
    /// Warning Events only (failures).
    Warning,
}

/// A provider and its Secret.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.repository) || self.type in ['GitHub', 'GitLab', 'Gitea', 'Bitbucket']").message("repository is set only for the commit-status providers (GitHub, GitLab, Gitea, Bitbucket)"))]
#[x_kube(validation = Rule::new("!has(self.channel) || self.type in ['Slack', 'Discord']").message("channel is set only for Slack and Discord"))]
pub struct Provider {
    /// `Slack`, `Teams`, `Discord`, `Webhook` (JSON, HMAC-signed), `Alertmanager`; or, for
    /// commit statuses, `GitHub`, `GitLab`, `Gitea` (Forgejo too) and `Bitbucket`.
    #[serde(rename = "type")]
    pub type_: ProviderType,
    /// A Secret of this namespace with `address` (the webhook URL; for a Git host, its API base
    /// URL, defaulting to the public service) and, as the provider needs, `token` (bearer token,
    /// HMAC key of `Webhook`), `username` (Bitbucket, Alertmanager basic auth) and `ca.crt`.
    pub secret_ref: LocalObjectReference,
    /// The channel to post to (Slack, Discord), where the webhook allows overriding it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub channel: Option<String>,
    /// Commit statuses: the repository on the host (`owner/name`; a GitLab project path or id;
    /// Bitbucket `workspace/slug`). Default: from the URL of the Application's Repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub repository: Option<String>,
}

/// A provider type.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, schemars::JsonSchema)]
pub enum ProviderType {
    /// A Slack incoming webhook.
    Slack,
    /// A Microsoft Teams incoming webhook (Adaptive Card).
    Teams,
    /// A Discord webhook.
    Discord,
    /// Any HTTPS endpoint: a JSON body signed with HMAC-SHA256.
    Webhook,
    /// Alertmanager's v2 alerts API.
    Alertmanager,
    /// Commit statuses on GitHub.
    GitHub,
    /// Commit statuses on GitLab.
    GitLab,
    /// Commit statuses on Gitea or Forgejo.
    Gitea,
    /// Build statuses on Bitbucket.
    Bitbucket,
}

impl ProviderType {
    /// Whether it writes commit statuses (rather than messages).
    pub fn is_commit_status(self) -> bool {
        matches!(self, ProviderType::GitHub | ProviderType::GitLab | ProviderType::Gitea | ProviderType::Bitbucket)
    }

    /// Its name, as written in `spec.provider.type` (and the `provider` metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderType::Slack => "Slack",
            ProviderType::Teams => "Teams",
            ProviderType::Discord => "Discord",
            ProviderType::Webhook => "Webhook",
            ProviderType::Alertmanager => "Alertmanager",
            ProviderType::GitHub => "GitHub",
            ProviderType::GitLab => "GitLab",
            ProviderType::Gitea => "Gitea",
            ProviderType::Bitbucket => "Bitbucket",
        }
    }
}

/// Observed state of a Notification.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NotificationStatus {
    /// The `metadata.generation` this status reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: `True` while deliveries succeed, `False` with the reason of the last failure.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// The last delivery that succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_delivery: Option<Delivery>,
    /// The last delivery that failed (after its retries).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<Delivery>,
}

/// One delivery of one Event.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Delivery {
    /// When it ended.
    pub at: Time,
    /// The Application the Event is about.
    #[schemars(length(max = 253))]
    pub application: String,
    /// The Event's reason.
    #[schemars(length(max = 128))]
    pub reason: String,
    /// Attempts made.
    pub attempts: u32,
    /// What the provider answered (for a failure: the status and a bounded excerpt; never a
    /// Secret value).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 1024))]
    pub message: String,
}
