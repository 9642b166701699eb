//! The source stage: the commit an Application deploys (its Repository's, or
//! `spec.source.revision` resolved at most once per the Repository's interval), made present in
//! the shared Git cache with the Repository's credentials.

use std::sync::Arc;
use std::time::Duration;

use kube::api::Api;

use super::error::Error;
use super::flow::{Charts, Failure, Source};
use super::replica::Context;
use crate::api::application::{Application, RenderType};
use crate::api::names;
use crate::api::repository::Repository;
use crate::render::{self, chart};
use crate::source::Reference;

/// Step 2. The outer error is an API failure to retry; the inner one is reported. `pinned`: a
/// commit to resolve instead of the spec's (a rollback's target, or the Revision a hold keeps
/// running).
pub(super) async fn resolve_source(
    app: &Application,
    ctx: &Context,
    ns: &str,
    pinned: Option<&str>,
) -> Result<Result<Source, Failure>, Error> {
    let fail =
        |message: String, retryable: bool| Ok(Err(Failure::new(names::reasons::SOURCE_FAILURE, message, retryable)));
    let repos: Api<Repository> = Api::namespaced(ctx.client.clone(), ns);
    let repo_name = &app.spec.source.repository;
    // From the watch when it has it (a Repository change triggers its Applications after the
    // store has it); a miss asks the API server (created a moment ago, or no watch running).
    let repo = match ctx.cached_repository(ns, repo_name) {
        Some(r) => Some(r),
        None => repos.get_opt(repo_name).await?.map(Arc::new),
    };
    let Some(repo) = repo else {
        return fail(format!("Repository {repo_name:?} does not exist in namespace {ns}"), true);
    };
    if repo.spec.is_chart() {
        return chart_source(app, ctx, ns, &repo, pinned).await;
    }
    let credentials =
        match crate::source::secret::of_repository(&ctx.client, ns, repo.spec.secret_ref.as_ref(), &repo.spec.url)
            .await?
        {
            Ok(c) => c,
            Err(message) => return fail(format!("Repository {repo_name}: {message}"), true),
        };
    let url = repo.spec.url.clone();
    let timeout = crate::api::duration::parse(&repo.spec.timeout).unwrap_or(Duration::from_secs(60));
    let revision = pinned.map(str::to_string).or_else(|| app.spec.source.revision.clone());
    let (reference, commit) = match &revision {
        None => match repo.status.as_ref().and_then(|s| s.revision.as_ref()) {
            Some(r) => (Some(r.reference.clone()), r.commit.clone()),
            None => {
                return fail(format!("Repository {repo_name} has not resolved {} yet", repo.spec.following()), true);
            }
        },
        Some(revision) => {
            let interval = crate::api::duration::parse(&repo.spec.interval).unwrap_or(Duration::from_secs(60));
            let key = (url.clone(), ctx.cache.credential_id(&credentials), revision.clone());
            match ctx.resolved.recent(&key, interval.mul_f64(0.9)) {
                Some(commit) => (Some(revision.clone()), commit),
                None => {
                    let mut last = None;
                    let mut found = None;
                    for reference in crate::source::references_of(revision) {
                        match ctx.cache.resolve(&url, &reference, &credentials, timeout).await {
                            Ok(r) => {
                                found = Some(r.commit);
                                break;
                            }
                            Err(e) => last = Some(e),
                        }
                    }
                    match (found, last) {
                        (Some(commit), _) => {
                            ctx.resolved.remember(key, &commit);
                            (Some(revision.clone()), commit)
                        }
                        (None, Some(e)) => {
                            let message = credentials.redact(&format!("spec.source.revision {revision:?}: {e}"));
                            return fail(message, e.retryable());
                        }
                        (None, None) => return fail(format!("spec.source.revision {revision:?} is empty"), false),
                    }
                }
            }
        }
    };
    // Present in this replica's cache (no network when it already is).
    if let Err(e) = ctx.cache.resolve(&url, &Reference::Commit(commit.clone()), &credentials, timeout).await {
        return fail(credentials.redact(&format!("fetching commit {commit}: {e}")), e.retryable());
    }
    let fresh_for = crate::api::duration::parse(&repo.spec.interval).unwrap_or(Duration::from_secs(60)).mul_f64(0.9);
    let charts = match charts(app, ctx, ns, &url, &credentials, &commit, fresh_for).await? {
        Ok(c) => c,
        Err(failure) => return Ok(Err(failure)),
    };
    Ok(Ok(Source { repository: repo_name.clone(), url, credentials, reference, commit, charts }))
}

/// The chart of a Helm or OCI Repository: the version its status follows (or
/// `spec.source.revision`, a version or range, or `pinned`, an exact version), pulled with the
/// Repository's credentials (from the shared cache when present).
async fn chart_source(
    app: &Application,
    ctx: &Context,
    ns: &str,
    repo: &Repository,
    pinned: Option<&str>,
) -> Result<Result<Source, Failure>, Error> {
    let fail =
        |message: String, retryable: bool| Ok(Err(Failure::new(names::reasons::SOURCE_FAILURE, message, retryable)));
    let repo_name = &app.spec.source.repository;
    let Some(chart) = &repo.spec.chart else { return fail(format!("Repository {repo_name} names no chart"), false) };
    let version = match pinned.map(str::to_string).or_else(|| app.spec.source.revision.clone()) {
        Some(v) => v,
        None => match repo.status.as_ref().and_then(|s| s.revision.as_ref()) {
            Some(r) => r.commit.clone(),
            None => {
                return fail(format!("Repository {repo_name} has not resolved {} yet", repo.spec.following()), true);
            }
        },
    };
    let auth =
        match crate::controller::repository::chart_auth(&ctx.client, ns, repo.spec.secret_ref.as_ref(), &repo.spec.url)
            .await?
        {
            Ok(a) => a,
            Err(message) => return fail(format!("Repository {repo_name}: {message}"), true),
        };
    let interval = crate::api::duration::parse(&repo.spec.interval).unwrap_or(Duration::from_secs(60));
    let exact = chart::is_exact(&version);
    let pulled = match ctx
        .renderer
        .charts()
        .pull(&repo.spec.url, &chart.name, &version, exact, &auth, interval.mul_f64(0.9))
        .await
    {
        Ok(p) => p,
        Err(message) => return Ok(Err(Failure::new(names::reasons::RENDER_FAILURE, message, true))),
    };
    Ok(Ok(Source {
        repository: repo_name.clone(),
        url: repo.spec.url.clone(),
        credentials: Default::default(),
        reference: Some(repo.spec.following()),
        commit: pulled.version.clone(),
        charts: Charts { source_chart: Some(pulled), ..Default::default() },
    }))
}

/// The dependencies of a chart rendered with Helm, made present ([`render::dependencies`]): a
/// failed pull is a retryable `RenderFailure` naming the chart, before anything is applied.
async fn charts(
    app: &Application,
    ctx: &Context,
    ns: &str,
    url: &str,
    credentials: &crate::source::Credentials,
    commit: &str,
    fresh_for: Duration,
) -> Result<Result<Charts, Failure>, Error> {
    let source = &app.spec.source;
    if source.render.type_.is_some_and(|t| t != RenderType::Helm) {
        return Ok(Ok(Charts::default()));
    }
    // A checkout refused here (a symlink out of it) fails the desired state of the Revision
    // instead, where it is recorded: nothing to pull for it.
    let Ok(checkout) = ctx.cache.checkout(url, credentials, commit, &source.path).await else {
        return Ok(Ok(Charts::default()));
    };
    if render::renderer_of(&source.render, checkout.path()) != RenderType::Helm {
        return Ok(Ok(Charts::default()));
    }
    let sa = ctx.client_for(ns, &app.spec.service_account_name)?;
    let git = render::dependencies::Git { cache: &ctx.cache, url, credentials, commit };
    match render::dependencies::make_present(ctx.renderer.charts(), &git, &sa, ns, source, checkout.path(), fresh_for)
        .await
    {
        Ok(present) => Ok(Ok(Charts { source_chart: None, present })),
        Err(f) => Ok(Err(Failure::new(names::reasons::RENDER_FAILURE, f.message, f.retryable))),
    }
}
