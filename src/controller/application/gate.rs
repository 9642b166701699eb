//! The `spec.dependsOn` stage: the `DependenciesReady` condition from this replica's view of the
//! dependencies ([`super::dependency_watch`], decisions in [`crate::decisions::dependencies`]), and how a
//! reconcile that must wait reports it. The wait is not an attempt: nothing is recorded on a
//! Revision and no health timeout runs.

use kube::ResourceExt;
use kube::runtime::events::EventType;

use super::Reconcile;
use crate::api::application::ApplicationStatus;
use crate::api::conditions::{self, Status};
use crate::api::names;
use crate::decisions::dependencies::Verdict;

/// What the dependencies allow.
pub(super) enum Gate {
    /// No `spec.dependsOn`.
    Free,
    /// The watch has not listed the Applications yet: look again in a moment.
    Unknown,
    /// The verdict (recorded in `DependenciesReady`).
    Checked(Verdict),
}

/// Check `app`'s dependencies and record `DependenciesReady` on `status` (removed without
/// `spec.dependsOn`); an Event when the verdict's reason changes.
pub(super) async fn check(r: &Reconcile<'_>, status: &mut ApplicationStatus) -> Gate {
    let Reconcile { ctx, app, old, now, events, .. } = *r;
    if app.spec.depends_on.is_empty() {
        conditions::remove(&mut status.conditions, names::conditions::DEPENDENCIES_READY);
        return Gate::Free;
    }
    let ns = app.namespace().unwrap_or_default();
    let commit_of = |repo: &str| {
        let r = ctx.cached_repository(&ns, repo)?;
        r.status.as_ref()?.revision.as_ref().map(|r| r.commit.clone())
    };
    let Some(verdict) = ctx.dependencies.verdict(&ctx.client, app, commit_of).await else {
        return Gate::Unknown;
    };
    let state = if verdict.ready() { Status::True } else { Status::False };
    conditions::set(
        &mut status.conditions,
        names::conditions::DEPENDENCIES_READY,
        state,
        verdict.reason(),
        verdict.message(),
        app.metadata.generation,
        now,
    );
    let before = conditions::get(&old.conditions, names::conditions::DEPENDENCIES_READY);
    let changed = before.is_none_or(|c| c.status != state.as_str() || c.reason != verdict.reason());
    // The first verdict that lets the rollout go is not news; every wait, and its end, is.
    if changed && !(before.is_none() && verdict.ready()) {
        let type_ = if matches!(verdict, Verdict::Cycle(_)) { EventType::Warning } else { EventType::Normal };
        events.tell(None, type_, verdict.reason(), verdict.message());
    }
    Gate::Checked(verdict)
}
