//! The Kubernetes clients a replica makes requests with: one QPS/burst budget shared by all of
//! them (`--kube-api-qps`, `--kube-api-burst`), and request metrics.
//!
//! The API server, not our CPU, is the first limit at scale: the budget keeps one replica from
//! flooding it. A request waits for a token before it is sent (in the tower service's
//! `poll_ready`, so the client's queue waits, not the caller's thread). Lease renewals use a
//! client without the budget: a busy replica must never lose its shards for want of a token.
//!
//! Metrics: `ksync_api_requests_total{verb}` (verb as in audit logs: get, list, watch, create,
//! update, patch, delete; `dry_run` for dry-run requests) and `ksync_api_throttle_seconds`
//! (time spent waiting for a token).

use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

/// Requests per second and burst; `qps <= 0` means no limit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Budget {
    /// Sustained requests per second.
    pub qps: f64,
    /// Requests that may be sent at once after a quiet period.
    pub burst: u32,
}

impl Default for Budget {
    fn default() -> Self {
        Budget { qps: 50.0, burst: 100 }
    }
}

/// A shared budget (cheap to clone); a tower [`tower::Layer`] for [`kube::client::ClientBuilder`].
#[derive(Clone, Default)]
pub struct Limiter(Option<Arc<DefaultDirectRateLimiter>>);

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Limiter(limited)" } else { "Limiter(unlimited)" })
    }
}

impl Limiter {
    /// A budget of `budget`.
    pub fn new(budget: Budget) -> Limiter {
        if budget.qps <= 0.0 || !budget.qps.is_finite() {
            return Limiter(None);
        }
        let period = Duration::from_secs_f64(1.0 / budget.qps).max(Duration::from_nanos(1));
        let burst = NonZeroU32::new(budget.burst.max(1)).unwrap_or(NonZeroU32::MIN);
        let quota = Quota::with_period(period).map(|q| q.allow_burst(burst));
        Limiter(quota.map(|q| Arc::new(RateLimiter::direct(q))))
    }

    /// No budget.
    pub fn unlimited() -> Limiter {
        Limiter(None)
    }

    /// A client for `config` whose requests draw on this budget.
    pub fn client(&self, config: kube::Config) -> Result<kube::Client, kube::Error> {
        Ok(kube::client::ClientBuilder::try_from(config)?.with_layer(self).build())
    }
}

impl<S> tower::Layer<S> for Limiter {
    type Service = Limited<S>;

    fn layer(&self, inner: S) -> Limited<S> {
        Limited { inner, limiter: self.clone(), wait: None, permitted: false }
    }
}

type Wait = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The service [`Limiter`] wraps around the client's stack.
pub struct Limited<S> {
    inner: S,
    limiter: Limiter,
    wait: Option<Wait>,
    permitted: bool,
}

impl<S, B> tower::Service<http::Request<B>> for Limited<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if !self.permitted {
            if let Some(limiter) = self.limiter.0.clone() {
                let wait = self.wait.get_or_insert_with(|| {
                    Box::pin(async move {
                        let started = Instant::now();
                        limiter.until_ready().await;
                        metrics::histogram!("ksync_api_throttle_seconds").record(started.elapsed().as_secs_f64());
                    })
                });
                if wait.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.wait = None;
            }
            self.permitted = true;
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        self.permitted = false;
        metrics::counter!("ksync_api_requests_total", "verb" => verb_of(&request)).increment(1);
        self.inner.call(request)
    }
}

/// Whether `path` addresses a collection (`/api/v1/configmaps`,
/// `/apis/apps/v1/namespaces/a/deployments`) rather than one object.
fn addresses_collection(path: &str) -> bool {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match segments.first() {
        Some(&"api") => segments.get(2..),
        Some(&"apis") => segments.get(3..),
        _ => None,
    };
    match rest.unwrap_or_default() {
        ["namespaces", _, rest @ ..] if !rest.is_empty() => rest.len() == 1,
        rest => rest.len() == 1,
    }
}

/// The audit-log verb of a request (`dry_run` for a dry run).
pub fn verb_of<B>(request: &http::Request<B>) -> &'static str {
    let query = request.uri().query().unwrap_or("");
    let watch = query.split('&').any(|p| p == "watch=true" || p == "watch=1");
    if query.split('&').any(|p| p.starts_with("dryRun=")) {
        return "dry_run";
    }
    match *request.method() {
        http::Method::GET if watch => "watch",
        http::Method::GET if addresses_collection(request.uri().path()) => "list",
        http::Method::GET => "get",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE => "delete",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: &str, uri: &str) -> http::Request<()> {
        http::Request::builder().method(method).uri(uri).body(()).unwrap()
    }

    #[test]
    fn verbs_are_named_as_in_audit_logs() {
        assert_eq!(verb_of(&req("GET", "/api/v1/namespaces/a/configmaps/x")), "get");
        assert_eq!(verb_of(&req("GET", "/api/v1/configmaps?labelSelector=a%3Db&limit=500")), "list");
        assert_eq!(verb_of(&req("GET", "/apis/apps/v1/namespaces/a/deployments")), "list");
        assert_eq!(verb_of(&req("GET", "/apis/apps/v1/namespaces/a/deployments/web")), "get");
        assert_eq!(verb_of(&req("GET", "/api/v1/namespaces")), "list");
        assert_eq!(verb_of(&req("GET", "/api/v1/namespaces/a")), "get");
        assert_eq!(verb_of(&req("GET", "/api/v1/configmaps?watch=true&resourceVersion=1")), "watch");
        assert_eq!(verb_of(&req("PATCH", "/api/v1/namespaces/a/configmaps/x?fieldManager=m")), "patch");
        assert_eq!(verb_of(&req("PATCH", "/api/v1/namespaces/a/configmaps/x?dryRun=All&fieldManager=m")), "dry_run");
        assert_eq!(verb_of(&req("DELETE", "/api/v1/namespaces/a/configmaps/x")), "delete");
        assert_eq!(verb_of(&req("POST", "/api/v1/namespaces/a/configmaps")), "create");
    }

    #[tokio::test]
    async fn the_budget_spaces_requests_after_the_burst() {
        let limiter = Limiter::new(Budget { qps: 2.0, burst: 2 });
        let l = limiter.0.clone().unwrap();
        // The burst is available at once; the next token comes after 1/qps.
        assert!(l.check().is_ok());
        assert!(l.check().is_ok());
        assert!(l.check().is_err(), "a third request within the burst window must wait");
        let started = Instant::now();
        l.until_ready().await;
        assert!(started.elapsed() >= Duration::from_millis(100), "waited {:?}", started.elapsed());
        assert!(Limiter::new(Budget { qps: 0.0, burst: 1 }).0.is_none());
    }
}
