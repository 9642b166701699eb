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
    let auth = match crate::controller::repository::chart_auth(&ctx.client, ns, repo.spec.secret_ref.as_ref()).await? {
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

/// The dependencies of a chart rendered with Helm, made present: pulled from their Helm
/// repositories and OCI registries with the credentials the Application names (read as its
/// service account), or materialized from the same repository (`file://`). A failed pull is a
/// retryable `RenderFailure` naming the chart, before anything is applied.
async fn charts(
    app: &Application,
    ctx: &Context,
    ns: &str,
    url: &str,
    credentials: &crate::source::Credentials,
    commit: &str,
    fresh_for: Duration,
) -> Result<Result<Charts, Failure>, Error> {
    let fail =
        |message: String, retryable: bool| Ok(Err(Failure::new(names::reasons::RENDER_FAILURE, message, retryable)));
    let source = &app.spec.source;
    if source.render.type_.is_some_and(|t| t != RenderType::Helm) {
        return Ok(Ok(Charts::default()));
    }
    let checkout = match ctx.cache.checkout(url, credentials, commit, &source.path).await {
        Ok(c) => c,
        Err(e) => return Ok(Err(Failure::new(names::reasons::SOURCE_FAILURE, e.to_string(), e.retryable()))),
    };
    let dir = checkout.path();
    if render::renderer_of(&source.render, dir) != RenderType::Helm {
        return Ok(Ok(Charts::default()));
    }
    let read = |file: &str| -> Option<String> {
        let path = dir.join(file);
        std::fs::symlink_metadata(&path).ok().filter(|m| m.is_file() && m.len() <= 1024 * 1024)?;
        std::fs::read_to_string(path).ok()
    };
    let Some(chart_yaml) = read("Chart.yaml") else { return Ok(Ok(Charts::default())) };
    let wanted =
        match chart::wanted(&source.path, &chart_yaml, read("Chart.lock").as_deref(), |n| chart::vendored(dir, n)) {
            Ok(w) => w,
            Err(message) => return fail(message, false),
        };
    let mut out = Charts::default();
    let granted = source.render.helm.as_ref().map(|h| h.credentials.as_slice()).unwrap_or_default();
    for w in wanted {
        match w.origin {
            chart::Origin::File(path) => match ctx.cache.checkout(url, credentials, commit, &path).await {
                Ok(c) if c.path().join("Chart.yaml").is_file() => out.local.push((w.name.clone(), c)),
                Ok(_) => return fail(format!("dependency {:?} (file://): {path} holds no Chart.yaml", w.name), false),
                Err(e) => return fail(format!("dependency {:?} (file://{path}): {e}", w.name), e.retryable()),
            },
            chart::Origin::Remote { repository, version, exact } => {
                let auth = match granted
                    .iter()
                    .filter(|g| repository.starts_with(g.url.trim_end_matches('/')))
                    .max_by_key(|g| g.url.len())
                {
                    None => render::pull::Auth::default(),
                    Some(g) => match read_auth(ctx, app, ns, &g.secret_ref.name).await {
                        Ok(a) => a,
                        Err(message) => {
                            return fail(format!("dependency {:?} from {repository}: {message}", w.name), true);
                        }
                    },
                };
                out.secrets.extend(auth.password.iter().cloned());
                match ctx.renderer.charts().pull(&repository, &w.name, &version, exact, &auth, fresh_for).await {
                    Ok(p) => out.pulled.push(p),
                    Err(message) => return fail(message, true),
                }
            }
        }
    }
    Ok(Ok(out))
}

/// The credentials in the Secret `name` (`username`, `password`, `ca.crt`), read as the
/// Application's service account.
async fn read_auth(ctx: &Context, app: &Application, ns: &str, name: &str) -> Result<render::pull::Auth, String> {
    let sa = ctx.client_for(ns, &app.spec.service_account_name).map_err(|e| e.to_string())?;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(sa, ns);
    let secret = match secrets.get_opt(name).await {
        Ok(Some(s)) => s,
        Ok(None) => return Err(format!("Secret {name} does not exist")),
        Err(kube::Error::Api(e)) if e.code == 403 => {
            return Err(format!("the Application's service account may not read Secret {name}"));
        }
        Err(e) => return Err(format!("reading Secret {name}: {e}")),
    };
    let data = secret.data.unwrap_or_default();
    let text = |k: &str| data.get(k).map(|v| String::from_utf8_lossy(&v.0).trim_end_matches('\n').to_string());
    Ok(render::pull::Auth {
        username: text("username"),
        password: text("password"),
        ca: data.get("ca.crt").map(|v| v.0.clone()),
    })
}
