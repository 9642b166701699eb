//! The receiver's HTTP handling: one request from its path to its [`Outcome`], guards first
//! (method, buckets, path, size), then each candidate's Secret and signature, replays, the
//! push, and the triggers.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, Uri, header};
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};

use super::limits::Limits;
use super::outcome::Outcome;
use super::verify::{EventKind, Provider, Verdict};
use super::{matching, path, push, verify};
use crate::api::names;
use crate::api::repository::Repository;

/// The largest body read (1 MiB); a larger one is refused before any verification.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// How long a receiver Secret's token is reused before it is read again.
const TOKEN_TTL: Duration = Duration::from_secs(10);

/// What every request shares.
pub struct Shared {
    /// Every Repository, as the replica's watch sees it.
    pub repos: Store<Repository>,
    /// Reads receiver Secrets and writes triggers.
    pub client: Client,
    /// Buckets and deliveries seen.
    pub limits: Limits,
    /// Tokens by (namespace, Secret); `None` for a Secret without a usable one.
    tokens: moka::sync::Cache<(String, String), Option<Arc<Vec<u8>>>>,
}

impl Shared {
    /// Shared state of a receiver.
    pub fn new(repos: Store<Repository>, client: Client, limits: Limits) -> Shared {
        let tokens = moka::sync::Cache::builder().max_capacity(10_000).time_to_live(TOKEN_TTL).build();
        Shared { repos, client, limits, tokens }
    }

    /// The token of the Secret `name` of `ns`, read as the manager (cached briefly); `None`
    /// when missing or unusable. The Secret is always of the Repository's own namespace.
    async fn token(&self, ns: &str, name: &str) -> Option<Arc<Vec<u8>>> {
        let key = (ns.to_string(), name.to_string());
        if let Some(t) = self.tokens.get(&key) {
            return t;
        }
        let api: Api<Secret> = Api::namespaced(self.client.clone(), ns);
        let token = match api.get_opt(name).await {
            Ok(secret) => {
                let data = secret.and_then(|s| s.data).map(|d| d.into_iter().map(|(k, v)| (k, v.0)).collect());
                path::token(name, data.as_ref()).ok().map(Arc::new)
            }
            Err(e) => {
                // Not cached: the next delivery reads again.
                tracing::warn!(namespace = %ns, error = %e, "receiver: reading a receiver Secret failed");
                return None;
            }
        };
        self.tokens.insert(key, token.clone());
        token
    }
}

/// The handler of every path: counts the outcome and answers it.
pub async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let provider = Provider::detect(&headers);
    let outcome = decide(&shared, &method, uri.path(), provider, &headers, body).await;
    metrics::counter!(
        crate::metric_names::RECEIVER_REQUESTS_TOTAL,
        crate::metric_names::label::PROVIDER => Provider::label(provider),
        crate::metric_names::label::RESULT => outcome.label(),
    )
    .increment(1);
    let mut response = (
        outcome.status(),
        [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))],
        outcome.body().to_string(),
    )
        .into_response();
    if let Outcome::RateLimited(seconds) = outcome {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    if outcome == Outcome::MethodNotAllowed {
        response.headers_mut().insert(header::ALLOW, HeaderValue::from_static("POST"));
    }
    response
}

/// One request, top to bottom. Each guard refuses before the costlier steps after it.
async fn decide(
    shared: &Shared,
    method: &Method,
    path: &str,
    provider: Option<Provider>,
    headers: &HeaderMap,
    body: Body,
) -> Outcome {
    if method != Method::POST {
        return Outcome::MethodNotAllowed;
    }
    if let Err(wait) = shared.limits.global() {
        return Outcome::RateLimited(wait);
    }
    // Candidates: the Repositories the controller gave this path (an in-memory scan, no
    // request to the API server).
    let candidates: Vec<Arc<Repository>> = if path.starts_with(path::PREFIX) {
        shared
            .repos
            .state()
            .into_iter()
            .filter(|r| r.spec.receiver.is_some())
            .filter(|r| r.status.as_ref().and_then(|s| s.receiver.as_ref()).is_some_and(|rs| rs.path == path))
            .collect()
    } else {
        Vec::new()
    };
    if candidates.is_empty() {
        return Outcome::NotFound;
    }
    if let Err(wait) = shared.limits.path(path) {
        return Outcome::RateLimited(wait);
    }
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Outcome::TooLarge;
    }
    let Ok(body) = axum::body::to_bytes(body, MAX_BODY_BYTES).await else {
        return Outcome::TooLarge;
    };
    let Some(provider) = provider else { return Outcome::Unauthorized };

    // Each candidate verifies with its own Secret, of its own namespace.
    let now = jiff::Timestamp::now().as_second();
    let mut verified = Vec::new();
    let mut stale = false;
    for repo in candidates {
        let (Some(ns), Some(receiver)) = (repo.namespace(), repo.spec.receiver.as_ref()) else { continue };
        let Some(token) = shared.token(&ns, &receiver.secret_ref.name).await else { continue };
        match verify::verify(provider, headers, &body, &token, now) {
            Verdict::Valid => verified.push(repo),
            Verdict::Stale => stale = true,
            Verdict::Invalid => {}
        }
    }
    if verified.is_empty() {
        return if stale { Outcome::Replayed } else { Outcome::Unauthorized };
    }
    // Claimed only once verified: nobody without the token can burn a delivery id.
    let label = Provider::label(Some(provider));
    let delivery = provider.delivery(headers);
    if let Some(d) = &delivery
        && !shared.limits.claim(path, label, d)
    {
        return Outcome::Replayed;
    }
    let outcome = act(shared, provider, headers, &body, &verified).await;
    if outcome == Outcome::Unavailable
        && let Some(d) = &delivery
    {
        shared.limits.release(path, label, d);
    }
    outcome
}

/// A verified request: read the push and trigger the verified candidates it names.
async fn act(
    shared: &Shared,
    provider: Provider,
    headers: &HeaderMap,
    body: &[u8],
    verified: &[Arc<Repository>],
) -> Outcome {
    match provider.event(headers) {
        EventKind::Push => {}
        EventKind::Ping => return Outcome::Ignored("ping"),
        EventKind::Other => return Outcome::Ignored("not a push"),
    }
    let Ok(pushed) = push::parse(provider, body) else { return Outcome::Malformed };
    let targets: Vec<&Arc<Repository>> =
        verified.iter().filter(|r| matching::names(&r.spec, &pushed.urls, &pushed.refs)).collect();
    if targets.is_empty() {
        return Outcome::Ignored("no Repository follows this URL and ref");
    }
    let (mut triggered, mut pending) = (0, 0);
    for repo in targets {
        match trigger(&shared.client, repo).await {
            Ok(true) => triggered += 1,
            Ok(false) => pending += 1,
            Err(e) => {
                tracing::warn!(namespace = ?repo.namespace(), repository = %repo.name_any(), error = %e, "receiver: requesting a fetch failed");
                return Outcome::Unavailable;
            }
        }
    }
    metrics::counter!(crate::metric_names::RECEIVER_TRIGGERED_TOTAL).increment(triggered as u64);
    tracing::info!(
        provider = Provider::label(Some(provider)),
        commits = ?pushed.commits,
        triggered,
        pending,
        "receiver: push accepted"
    );
    Outcome::Accepted { triggered, pending }
}

/// Whether `repo` has a fetch request its controller has not handled yet: a second one would
/// cost nothing more than the pending one.
pub fn pending(repo: &Repository) -> bool {
    let requested = repo.annotations().get(names::annotations::RECONCILE_REQUESTED_AT);
    let handled = repo.status.as_ref().and_then(|s| s.last_handled_reconcile_at.as_ref());
    requested.is_some() && requested != handled
}

/// Ask the leader's Repository controller to fetch `repo` now, unless a request is pending:
/// true when the annotation was written.
async fn trigger(client: &Client, repo: &Repository) -> Result<bool, kube::Error> {
    if pending(repo) {
        return Ok(false);
    }
    let api: Api<Repository> = Api::namespaced(client.clone(), &repo.namespace().unwrap_or_default());
    let now = jiff::Timestamp::now().to_string();
    let patch = serde_json::json!({"metadata": {"annotations": {names::annotations::RECONCILE_REQUESTED_AT: now}}});
    api.patch_metadata(&repo.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(requested: Option<&str>, handled: Option<&str>) -> Repository {
        let mut r: Repository = serde_json::from_value(serde_json::json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Repository",
            "metadata": {"name": "r", "namespace": "n"},
            "spec": {"url": "https://h/o/r", "ref": {"branch": "main"}},
            "status": {"lastHandledReconcileAt": handled},
        }))
        .unwrap();
        if let Some(at) = requested {
            r.annotations_mut().insert(names::annotations::RECONCILE_REQUESTED_AT.into(), at.into());
        }
        r
    }

    #[test]
    fn a_request_not_yet_handled_is_pending_and_coalesces() {
        assert!(!pending(&repo(None, None)), "never asked");
        assert!(!pending(&repo(Some("t1"), Some("t1"))), "handled");
        assert!(pending(&repo(Some("t2"), Some("t1"))), "asked again, not handled yet");
        assert!(pending(&repo(Some("t1"), None)), "asked, never handled");
    }
}
