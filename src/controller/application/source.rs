//! The source stage: the commit an Application deploys (its Repository's, or
//! `spec.source.revision` resolved at most once per the Repository's interval), made present in
//! the shared Git cache with the Repository's credentials.

use std::sync::Arc;
use std::time::Duration;

use kube::api::Api;

use super::error::Error;
use super::flow::{Failure, Source};
use super::replica::Context;
use crate::api::application::Application;
use crate::api::names;
use crate::api::repository::Repository;
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
                return fail(
                    format!("Repository {repo_name} has not resolved {} yet", repo.spec.reference.display()),
                    true,
                );
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
    Ok(Ok(Source { repository: repo_name.clone(), url, credentials, reference, commit }))
}
