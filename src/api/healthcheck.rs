//! `HealthCheck`: CEL health rules for one kind, overriding the built-in and kstatus rules.
//!
//! Evaluated by the Application controllers (`crate::health::cel`); status written by the
//! leader (`crate::controller::healthcheck`). See `docs/health.md`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::common::conditions_schema;

/// Health rules for one kind in this namespace, as CEL expressions over the live object: the
/// expressions see its fields at top level (`status`, `spec`, `metadata`, ...; a missing one is an
/// empty map), as Flux's `healthCheckExprs` do, and the whole object as `self`. Evaluated in
/// order `failed` (Degraded), `inProgress` (Progressing), `current` (Healthy); an object matching
/// none is Progressing, and one being deleted is Progressing first. When several target one kind
/// in a namespace, the oldest applies (then the lowest name); the others are Stalled.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "sync.kuvryn.io",
    version = "v1alpha1",
    kind = "HealthCheck",
    doc = "CEL health rules for one kind in this namespace, overriding the built-in and kstatus rules.",
    namespaced,
    status = "HealthCheckStatus",
    shortname = "hc",
    category = "ksync",
    printcolumn(name = "API Version", type_ = "string", json_path = ".spec.target.apiVersion"),
    printcolumn(name = "Kind", type_ = "string", json_path = ".spec.target.kind"),
    printcolumn(name = "Ready", type_ = "string", json_path = r#".status.conditions[?(@.type=="Ready")].status"#),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheckSpec {
    /// The kind these rules apply to (its group and kind; the version is not compared), for
    /// objects in this namespace (cluster-scoped ones: of Applications in this namespace).
    pub target: HealthCheckTarget,
    /// True when the object is Healthy. Required. A CEL expression giving a bool.
    #[schemars(length(min = 1, max = 4096))]
    #[x_kube(validation = Rule::new("self.matches('[^ \\t\\n]')").message("current must not be blank"))]
    pub current: String,
    /// True while the object is Progressing (checked before `current`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    #[x_kube(validation = Rule::new("self.matches('[^ \\t\\n]')").message("inProgress must not be blank"))]
    pub in_progress: Option<String>,
    /// True when the object is Degraded (checked first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    #[x_kube(validation = Rule::new("self.matches('[^ \\t\\n]')").message("failed must not be blank"))]
    pub failed: Option<String>,
}

/// The target kind.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheckTarget {
    /// `group/version`, or `version` for the core group.
    #[schemars(
        length(min = 1, max = 316),
        regex(
            pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?v[0-9]+((alpha|beta)[0-9]+)?$"
        )
    )]
    pub api_version: String,
    /// Kind.
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[A-Z][A-Za-z0-9]*$"))]
    pub kind: String,
}

/// Observed state of a HealthCheck.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheckStatus {
    /// The `metadata.generation` this status reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` (every expression compiles and applies), or `Stalled` and `Ready=False` with
    /// reason InvalidExpression (the compiler's message) or DuplicateTarget (an older
    /// HealthCheck targets the kind).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
}
