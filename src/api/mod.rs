//! The `sync.kuvryn.io/v1alpha1` API: one module per kind, the names every part of the product
//! uses, the conditions helper and CRD generation. Pure: no client, no I/O.

// kube's `#[kube(printcolumn(name = .., type_ = ..), ..)]` repeats `type_ = "string"` once per
// column, which clippy's duplicated_attributes reads as a duplicate.
#[allow(clippy::duplicated_attributes)]
pub mod application;
pub mod common;
pub mod conditions;
pub mod crd;
pub mod display;
pub mod duration;
#[allow(clippy::duplicated_attributes)]
pub mod healthcheck;
pub mod names;
#[allow(clippy::duplicated_attributes)]
pub mod notification;
#[allow(clippy::duplicated_attributes)]
pub mod repository;
#[allow(clippy::duplicated_attributes)]
pub mod revision;
pub mod revision_conditions;

pub use application::{Application, ApplicationSpec, ApplicationStatus};
pub use healthcheck::{HealthCheck, HealthCheckSpec, HealthCheckStatus};
pub use notification::{Notification, NotificationSpec, NotificationStatus};
pub use repository::{Repository, RepositorySpec, RepositoryStatus};
pub use revision::{Revision, RevisionSpec, RevisionStatus};
