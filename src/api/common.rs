//! Types shared by several kinds, and schema helpers.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

/// A reference to an object by name in the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct LocalObjectReference {
    /// Name of the object.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// A kind, as `status.managedKinds` and validation record it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema)]
pub struct GroupVersionKind {
    /// API group; empty for the core group.
    #[serde(default)]
    #[schemars(length(max = 253))]
    pub group: String,
    /// API version.
    #[schemars(length(min = 1, max = 63))]
    pub version: String,
    /// Kind.
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
}

/// A group and kind, for allow lists. `kind: "*"` allows every kind of the group.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct GroupKind {
    /// API group; empty for the core group.
    #[serde(default)]
    #[schemars(length(max = 253))]
    pub group: String,
    /// Kind, or `*`.
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
}

/// Operational health, as Applications and Revisions report it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema)]
pub enum HealthStatus {
    /// Every resource is operationally ready.
    Healthy,
    /// Some resource is on its way (rolling out, scaling) and no failure is evident.
    Progressing,
    /// Some resource failed, or a managed resource is missing.
    Degraded,
    /// Not observed yet.
    #[default]
    Unknown,
}

impl HealthStatus {
    /// Every status.
    pub const ALL: [HealthStatus; 4] =
        [HealthStatus::Healthy, HealthStatus::Progressing, HealthStatus::Degraded, HealthStatus::Unknown];

    /// Its name, as serialized in `status.health.status`.
    pub fn as_str(self) -> &'static str {
        match self {
            HealthStatus::Healthy => "Healthy",
            HealthStatus::Progressing => "Progressing",
            HealthStatus::Degraded => "Degraded",
            HealthStatus::Unknown => "Unknown",
        }
    }
}

/// Schema for `status.conditions`: a list-map keyed by `type`, bounded.
pub fn conditions_schema(generator: &mut SchemaGenerator) -> Schema {
    let item = generator.subschema_for::<Condition>();
    json_schema!({
        "type": "array",
        "items": item,
        "maxItems": 16,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
    })
}

/// Schema for free-form objects (Helm values): any JSON object, kept as written.
pub fn preserve_unknown_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// Schema for a duration string (see [`super::duration`]).
pub fn duration_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "pattern": super::duration::PATTERN,
        "maxLength": 32,
    })
}
