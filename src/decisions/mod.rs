//! The rollout's pure decisions, next to [`crate::plan`]: no client, no I/O, table-tested from
//! `testdata/rollout/`. The Application controller reads the cluster and Git, asks these, and
//! performs the writes they return; `ksync` and the admission webhook ask the same questions.
//!
//! - [`rollout`]: what a reconcile does with a planned Revision (start an attempt, wait, retry,
//!   pause, observe), the policies it follows, and whether a desired state is deployed.
//! - [`approval`]: whether a manual-sync plan is approved, and by whom.
//! - [`rollback`]: the rollback request annotations and what they ask.
//! - [`dependencies`]: whether an Application's `dependsOn` are ready.
//! - [`absent`]: whether a plan that may be acted on takes a desired object as absent without
//!   reading it, and the precondition its apply carries.
//! - [`inventory`]: whether a plan that may be acted on takes the managed objects from the
//!   shard's watch cache or lists them as the service account.

pub mod absent;
pub mod approval;
pub mod dependencies;
pub mod inventory;
pub mod rollback;
pub mod rollout;
