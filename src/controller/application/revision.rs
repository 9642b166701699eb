//! The Revision stage: the Revision of an Application's identity (created when missing), the
//! previous one superseded, and history retention.

use crate::api::revision::reference as revision_ref;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::Reconcile;
use super::error::Error;
use super::flow::Source;
use super::replica::{Context, fenced};
use crate::api::application::{Application, ApplicationStatus, SyncState, SyncStatus};
use crate::api::conditions;
use crate::api::names;
use crate::api::revision::{self as rev, Revision, RevisionPhase, RevisionSource, RevisionSpec};
use crate::plan::inventory;

/// Step 3: the Revision of this identity, created when missing (with `hash`, its desired
/// state's, when it rendered). `new` (the Application does not desire it yet: a new commit or
/// spec) tries the create first, since the Revision rarely exists then, and reads it only when
/// the create finds it (409); otherwise it is read first.
async fn ensure_revision(
    r: &Reconcile<'_>,
    rev_name: &str,
    source: &Source,
    new: bool,
    hash: Option<&str>,
) -> Result<Revision, Error> {
    let Reconcile { ctx, app, ns, events, .. } = *r;
    let api: Api<Revision> = Api::namespaced(ctx.client.clone(), ns);
    let name = app.name_any();
    if !new {
        if let Some(r) = ctx.revisions.get(&ctx.client, ns, &name, rev_name) {
            return Ok(r);
        }
        if let Some(r) = api.get_opt(rev_name).await? {
            ctx.revisions.keep(&r);
            return Ok(r);
        }
    }
    let rev = Revision {
        metadata: ObjectMeta {
            name: Some(rev_name.to_string()),
            namespace: Some(ns.to_string()),
            labels: Some(
                [
                    (names::labels::APPLICATION.to_string(), name.clone()),
                    (names::labels::MANAGED_BY.to_string(), names::labels::MANAGED_BY_VALUE.to_string()),
                ]
                .into(),
            ),
            annotations: Some([(names::annotations::CREATED_AT.to_string(), Timestamp::now().to_string())].into()),
            owner_references: Some(vec![OwnerReference {
                api_version: names::API_VERSION.to_string(),
                kind: "Application".to_string(),
                name: name.clone(),
                uid: app.uid().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            ..Default::default()
        },
        spec: RevisionSpec {
            application: name,
            source: RevisionSource {
                repository: source.repository.clone(),
                url: source.url.clone(),
                reference: source.reference.clone(),
                commit: source.commit.clone(),
                path: app.spec.source.path.clone(),
            },
            render: app.spec.source.render.clone(),
            service_account_name: app.spec.service_account_name.clone(),
            charts: source.charts.versions(),
            desired_state_hash: hash.map(str::to_string),
        },
        status: None,
    };
    match ctx.writer(&ctx.client, ns, &rev.spec.application).create(Some(ns), &PostParams::default(), &rev).await {
        Ok(created) => {
            ctx.revisions.keep(&created);
            let short = &source.commit[..source.commit.len().min(12)];
            let subject =
                ctx.cache.commit_subject(&source.url, &source.credentials, &source.commit).await.unwrap_or_default();
            let note = if subject.is_empty() {
                format!("Revision {rev_name} for commit {short}")
            } else {
                format!("Revision {rev_name} for commit {short}: {subject}")
            };
            events.lifecycle(revision_ref(ns, rev_name), names::events::NEW_REVISION, &note);
            Ok(created)
        }
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let r = api.get(rev_name).await?;
            ctx.revisions.keep(&r);
            Ok(r)
        }
        Err(e) => Err(e.into()),
    }
}

/// A Revision no longer desired whose attempt is still running: the attempt ends, `Failed` with
/// reason `Superseded`, so no Revision stays `Progressing` forever.
pub(super) async fn supersede(
    ctx: &Context,
    app: &Application,
    ns: &str,
    previous: &str,
    by: &str,
) -> Result<(), Error> {
    let api: Api<Revision> = Api::namespaced(ctx.client.clone(), ns);
    let Some(rev) = api.get_opt(previous).await? else { return Ok(()) };
    let mut rs = rev.status.clone().unwrap_or_default();
    let Some(last) = rs.attempts.last_mut().filter(|a| a.result == rev::AttemptResult::Running) else {
        return Ok(());
    };
    last.result = rev::AttemptResult::Failed;
    last.finished_at = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now()));
    last.reason = Some(names::reasons::SUPERSEDED.to_string());
    rs.phase = RevisionPhase::Failed;
    rs.failure = Some(rev::Failure {
        reason: names::reasons::SUPERSEDED.to_string(),
        message: format!("superseded by Revision {by} before its rollout completed"),
        retryable: false,
    });
    crate::api::revision_conditions::set(&mut rs, false, Timestamp::now());
    ctx.revisions.forget(ns, &app.name_any());
    ctx.writer(&ctx.client, ns, &app.name_any())
        .patch_status::<Revision, _>(
            Some(ns),
            previous,
            &PatchParams::apply(names::STATUS_FIELD_MANAGER).force(),
            &Patch::Apply(json!({"apiVersion": names::API_VERSION, "kind": "Revision", "status": rs})),
        )
        .await?;
    Ok(())
}

/// Delete Revisions beyond the history limit, oldest first (never `current`, never held ones).
pub(super) async fn retain_history(
    ctx: &Context,
    application: &Application,
    ns: &str,
    current: &str,
    limit: i32,
) -> Result<(), Error> {
    let app = &application.name_any();
    let api: Api<Revision> = Api::namespaced(ctx.client.clone(), ns);
    let writer = ctx.writer(&ctx.client, ns, app);
    let list = api.list(&ListParams::default().labels(&format!("{}={app}", names::labels::APPLICATION))).await?;
    let kept: Vec<inventory::Kept> = list
        .items
        .iter()
        .filter(|r| r.spec.application == *app)
        .map(|r| inventory::Kept {
            name: r.name_any(),
            created: r
                .annotations()
                .get(names::annotations::CREATED_AT)
                .and_then(|a| a.parse().ok())
                .or_else(|| r.metadata.creation_timestamp.as_ref().map(|t| t.0))
                .unwrap_or_default(),
            held: r.status.as_ref().is_some_and(|s| conditions::is_true(&s.conditions, names::conditions::ROLLED_BACK)),
        })
        .collect();
    for name in inventory::expired(&kept, current, usize::try_from(limit).unwrap_or(1)) {
        match writer.delete::<Revision>(Some(ns), &name, &DeleteParams::default()).await {
            Ok(_) => tracing::info!(revision = %name, namespace = %ns, "history limit: deleted Revision"),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Step 3: the Revision `rev_name` of `source`, created when missing (`new`: the Application
/// does not desire it yet; `hash`: its desired state, planned early), the Revision desired
/// before superseded, and the Application's status pointed at it.
pub(super) async fn enter(
    r: &Reconcile<'_>,
    status: &mut ApplicationStatus,
    source: &Source,
    rev_name: &str,
    new: bool,
    hash: Option<&str>,
) -> Result<Revision, Error> {
    let Reconcile { ctx, app, ns, .. } = *r;
    let rev = ensure_revision(r, rev_name, source, new, hash).await?;
    if let Some(previous) = status.desired_revision.clone().filter(|p| p != rev_name) {
        supersede(ctx, app, ns, &previous, rev_name).await?;
    }
    if status.desired_revision.as_deref() != Some(rev_name) {
        status.sync = Some(SyncStatus {
            status: SyncState::Unknown,
            revision: Some(rev_name.to_string()),
            commit: Some(source.commit.clone()),
            drifted: Vec::new(),
            plan_digest: None,
            unchanged: None,
        });
    }
    status.desired_revision = Some(rev_name.to_string());
    Ok(rev)
}

/// `spec.desiredStateHash` of `rev` set to `hash` (a Revision desired before its plan was made,
/// or whose desired state changed).
pub(super) async fn record_desired_hash(r: &Reconcile<'_>, rev: &Revision, hash: &str) -> Result<(), Error> {
    let Reconcile { ctx, ns, name, .. } = *r;
    if rev.spec.desired_state_hash.as_deref() == Some(hash) {
        return Ok(());
    }
    ctx.revisions.forget(ns, name);
    ctx.writer(&ctx.client, ns, name)
        .patch::<Revision, _>(
            Some(ns),
            &rev.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"desiredStateHash": hash}})),
        )
        .await?;
    Ok(())
}

/// Revision `rev`'s status `rs` stored when it differs from `old`, its conditions set first
/// (`retrying`: a failure is retried, not stalled).
pub(super) async fn store_status(
    r: &Reconcile<'_>,
    rev: &str,
    old: &rev::RevisionStatus,
    rs: &mut rev::RevisionStatus,
    retrying: bool,
) -> Result<(), Error> {
    let Reconcile { ctx, app, ns, now, .. } = *r;
    crate::api::revision_conditions::set(rs, retrying, now);
    if rs == old {
        return Ok(());
    }
    fenced(ctx, app)?;
    // Forgotten first: a failed write may still have landed.
    ctx.revisions.forget(ns, &app.name_any());
    let written = ctx
        .writer(&ctx.client, ns, &app.name_any())
        .patch_status::<Revision, _>(
            Some(ns),
            rev,
            &PatchParams::apply(names::STATUS_FIELD_MANAGER).force(),
            &Patch::Apply(json!({"apiVersion": names::API_VERSION, "kind": "Revision", "status": &*rs})),
        )
        .await?;
    ctx.revisions.keep(&written);
    Ok(())
}
