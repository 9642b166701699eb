//! The Kubernetes clients a replica makes requests with: one QPS/burst budget shared by all of
//! them (`--kube-api-qps`, `--kube-api-burst`), and request metrics.
//!
//! The API server, not our CPU, is the first limit at scale: the budget keeps one replica from
//! flooding it. A request waits for a token before it is sent (in the tower service's
//! `poll_ready`, so the client's queue waits, not the caller's thread). Lease renewals use a
//! client without the budget: a busy replica must never lose its shards for want of a token.
//!
//! Fencing: a request carrying a [`Fenced`] extension (every write a reconcile makes, see
//! [`crate::apply::Writer`]) is checked in [`tower::Service::call`], after the budget let it go
//! and immediately before it is sent: when the fence is closed it is never sent
//! ([`FenceClosed`]), and otherwise it must complete before the fence's deadline
//! ([`FenceDeadline`]), so a replica that lost its shard cannot land a write queued earlier.
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

    /// A client for `config` whose requests draw on this budget (and are never retried by
    /// the client: [`without_retries`]).
    pub fn client(&self, config: kube::Config) -> Result<kube::Client, kube::Error> {
        Ok(kube::client::ClientBuilder::try_from(without_retries(config))?.with_layer(self).build())
    }
}

/// `config` with kube's built-in retries turned off.
///
/// kube's client retries every 429, 503 and 504 up to 15 times, with delays growing to
/// 1,000 s, below this module's layer: one aggregated API answering 503 (a broken
/// metrics-server) held a reconcile for over ten minutes, and retries would go out after the
/// request budget and the shard fence let the first attempt through. The controller retries
/// whole steps instead: reconciles requeue with back-off, Lease rounds run again on schedule.
pub fn without_retries(mut config: kube::Config) -> kube::Config {
    config.default_retry = false;
    config
}

impl<S> tower::Layer<S> for Limiter {
    type Service = Limited<S>;

    fn layer(&self, inner: S) -> Limited<S> {
        Limited { inner, limiter: self.clone(), wait: None, permitted: false }
    }
}

type Wait = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The error type of the client's tower stack.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Until when the writer of a request may write: `None` once its fence is closed. Attached to a
/// request as an [`http::Extensions`] entry; read at the moment the request is sent.
#[derive(Clone)]
pub struct Fenced(Arc<dyn Fn() -> Option<Instant> + Send + Sync>);

impl Fenced {
    /// A fence answering `until` (`None`: closed).
    pub fn new(until: impl Fn() -> Option<Instant> + Send + Sync + 'static) -> Fenced {
        Fenced(Arc::new(until))
    }

    /// Until when a write may complete, `None` when it may not be sent.
    pub fn until(&self) -> Option<Instant> {
        (self.0)().filter(|t| *t > Instant::now())
    }
}

impl std::fmt::Debug for Fenced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Fenced").field(&self.until()).finish()
    }
}

/// A fenced request was not sent: the fence was closed when its turn came.
#[derive(Debug, thiserror::Error)]
#[error("not sent: this replica no longer owns the shard")]
pub struct FenceClosed;

/// A fenced request did not complete before its fence's deadline (it may or may not have been
/// applied; the new owner plans from what it reads).
#[derive(Debug, thiserror::Error)]
#[error("abandoned: the shard's fence ended before the API server answered")]
pub struct FenceDeadline;

/// Whether `e` is a fenced request refused or abandoned by its fence.
pub fn is_fence_error(e: &kube::Error) -> bool {
    match e {
        kube::Error::Service(b) => b.is::<FenceClosed>() || b.is::<FenceDeadline>(),
        _ => false,
    }
}

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
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

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
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        self.permitted = false;
        // The fence is read here, after the budget let the request go: a wait for a token can
        // outlast the shard's Lease.
        let deadline = match request.extensions().get::<Fenced>().map(Fenced::until) {
            None => None,
            Some(Some(until)) => Some(until),
            Some(None) => {
                metrics::counter!("ksync_fenced_requests_total", "result" => "closed").increment(1);
                return Box::pin(std::future::ready(Err(Box::new(FenceClosed) as BoxError)));
            }
        };
        metrics::counter!("ksync_api_requests_total", "verb" => verb_of(&request)).increment(1);
        let sent = self.inner.call(request);
        Box::pin(async move {
            match deadline {
                None => sent.await.map_err(Into::into),
                Some(until) => match tokio::time::timeout_at(until.into(), sent).await {
                    Ok(r) => r.map_err(Into::into),
                    Err(_) => {
                        metrics::counter!("ksync_fenced_requests_total", "result" => "deadline").increment(1);
                        Err(Box::new(FenceDeadline) as BoxError)
                    }
                },
            }
        })
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

    /// An inner service counting the requests it was given; each answers after `delay`.
    fn counting(
        delay: Duration,
    ) -> (
        Arc<std::sync::atomic::AtomicUsize>,
        impl tower::Service<
            http::Request<()>,
            Response = (),
            Error = BoxError,
            Future = impl Future<Output = Result<(), BoxError>> + Send + 'static,
        >,
    ) {
        let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = sent.clone();
        let svc = tower::service_fn(move |_r: http::Request<()>| {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move {
                tokio::time::sleep(delay).await;
                Ok::<(), BoxError>(())
            }
        });
        (sent, svc)
    }

    fn fenced(method: &str, fence: Fenced) -> http::Request<()> {
        let mut r = req(method, "/api/v1/namespaces/a/configmaps/x");
        r.extensions_mut().insert(fence);
        r
    }

    /// The contract of fencing, one row per case: (fence, how long the server takes, sent?,
    /// outcome).
    #[tokio::test]
    async fn a_fenced_request_is_sent_only_while_its_fence_is_open_and_ends_before_it_closes() {
        use tower::{Layer, Service, ServiceExt};
        let open = || Fenced::new(|| Some(Instant::now() + Duration::from_secs(60)));
        let closed = || Fenced::new(|| None);
        let past = || Fenced::new(|| Some(Instant::now() - Duration::from_millis(1)));
        let soon = || Fenced::new(|| Some(Instant::now() + Duration::from_millis(100)));
        let cases: Vec<(&str, Option<Fenced>, Duration, usize, &str)> = vec![
            ("no fence: a read or an unfenced write", None, Duration::ZERO, 1, "ok"),
            ("open", Some(open()), Duration::ZERO, 1, "ok"),
            ("closed", Some(closed()), Duration::ZERO, 0, "closed"),
            ("deadline already passed", Some(past()), Duration::ZERO, 0, "closed"),
            ("the server answers after the deadline", Some(soon()), Duration::from_secs(30), 1, "deadline"),
        ];
        for (what, fence, delay, want_sent, want) in cases {
            let (sent, inner) = counting(delay);
            let mut svc = Limiter::unlimited().layer(inner);
            let request = match fence {
                Some(f) => fenced("PATCH", f),
                None => req("PATCH", "/api/v1/namespaces/a/configmaps/x"),
            };
            let got = svc.ready().await.unwrap().call(request).await;
            let outcome = match &got {
                Ok(()) => "ok",
                Err(e) if e.is::<FenceClosed>() => "closed",
                Err(e) if e.is::<FenceDeadline>() => "deadline",
                Err(_) => "other",
            };
            assert_eq!((outcome, sent.load(std::sync::atomic::Ordering::SeqCst)), (want, want_sent), "{what}");
        }
    }

    /// The fence is read when the budget lets the request go, not when it was queued.
    #[tokio::test]
    async fn a_fence_that_closes_while_the_request_waits_for_a_token_stops_it() {
        use tower::{Layer, Service, ServiceExt};
        let open = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let o = open.clone();
        let fence = Fenced::new(move || {
            o.load(std::sync::atomic::Ordering::SeqCst).then(|| Instant::now() + Duration::from_secs(60))
        });
        let (sent, inner) = counting(Duration::ZERO);
        let limiter = Limiter::new(Budget { qps: 5.0, burst: 1 });
        let mut svc = limiter.layer(inner);
        svc.ready().await.unwrap().call(fenced("PATCH", fence.clone())).await.unwrap();
        // The next token comes in 200 ms: the fence closes meanwhile.
        let waiting = svc.ready();
        open.store(false, std::sync::atomic::Ordering::SeqCst);
        let got = waiting.await.unwrap().call(fenced("PATCH", fence)).await;
        assert!(got.is_err_and(|e| e.is::<FenceClosed>()));
        assert_eq!(sent.load(std::sync::atomic::Ordering::SeqCst), 1);
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
