//! The Kubernetes clients a replica makes requests with: one QPS/burst budget shared by all of
//! them (`--kube-api-qps`, `--kube-api-burst`), bounded retries of `429 Too Many Requests`, and
//! request metrics.
//!
//! The API server, not our CPU, is the first limit at scale: the budget keeps one replica from
//! flooding it. A request waits for a token before it is sent (in the tower service's
//! `poll_ready`, so the client's queue waits, not the caller's thread). Lease renewals use a
//! client without the budget: a busy replica must never lose its shards for want of a token.
//! Shard Lease renewals have a client of their own, built and driven on their own thread
//! ([`sharding::thread`]), so they share neither the budget, nor a connection pool, nor a
//! runtime with the fleet's requests.
//!
//! An API server with API Priority and Fairness (on by default since Kubernetes 1.20) protects
//! itself, per flow and fairly, and says so on every response with the
//! `X-Kubernetes-PF-FlowSchema-UID` header. A client-side bucket in front of it only adds waiting:
//! after a leader died, the survivor's 850 requests waited 10 to 15 s for tokens. So unless
//! `--kube-api-qps` is given, the budget ([`Budget::until_priority_and_fairness`]) is lifted for
//! every client of the replica at the first response carrying that header, as client-go and
//! controller-runtime do. The server then answers overload with 429 and `Retry-After`, which
//! [`TooManyRequests`] retries a few times; each retry waits for the budget and passes the fence
//! again.
//!
//! Fencing: a request carrying a [`Fenced`] extension (every write a reconcile makes, see
//! [`crate::apply::Writer`]) is checked in [`tower::Service::call`], after the budget let it go
//! and immediately before it is sent: when the fence is closed it is never sent
//! ([`FenceClosed`]), and otherwise it must complete before the fence's deadline
//! ([`FenceDeadline`]), so a replica that lost its shard cannot land a write queued earlier. The
//! deadline is read again when it passes: a renewal that landed meanwhile moves it (the Lease was
//! held throughout, so the write still lands within the holding), while a fence closed by then
//! abandons the request.
//!
//! Metrics: `ksync_api_requests_total{verb}` (verb as in audit logs: get, list, watch, create,
//! update, patch, delete; `dry_run` for dry-run requests) and `ksync_api_throttle_seconds`
//! (time spent waiting for a token).

use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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
    /// Whether the budget is lifted once the API server shows it applies API Priority and
    /// Fairness (the `--kube-api-qps` default); `false` keeps it whatever the server does.
    pub until_priority_and_fairness: bool,
}

impl Default for Budget {
    fn default() -> Self {
        Budget { qps: 50.0, burst: 100, until_priority_and_fairness: false }
    }
}

/// The response header by which an API server with API Priority and Fairness names the flow
/// schema that classified the request.
pub const FLOW_SCHEMA_HEADER: &str = "x-kubernetes-pf-flowschema-uid";

/// The token bucket of a limited budget.
struct Bucket {
    rate: DefaultDirectRateLimiter,
    until_priority_and_fairness: bool,
    lifted: AtomicBool,
}

impl Bucket {
    fn applies(&self) -> bool {
        !self.lifted.load(Ordering::Relaxed)
    }

    /// Lifts the bucket when it yields to API Priority and Fairness and `headers` show it.
    fn observe(&self, headers: &http::HeaderMap) {
        if self.until_priority_and_fairness
            && self.applies()
            && headers.contains_key(FLOW_SCHEMA_HEADER)
            && !self.lifted.swap(true, Ordering::Relaxed)
        {
            metrics::gauge!(crate::metric_names::API_BUDGET_QPS).set(0.0);
            tracing::info!(
                "the API server applies API Priority and Fairness: requests are no longer held to a client-side budget (--kube-api-qps keeps one)"
            );
        }
    }
}

/// A shared budget (cheap to clone); a tower [`tower::Layer`] for [`kube::client::ClientBuilder`].
#[derive(Clone, Default)]
pub struct Limiter(Option<Arc<Bucket>>);

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.limits() { "Limiter(limited)" } else { "Limiter(unlimited)" })
    }
}

impl Limiter {
    /// A budget of `budget`.
    pub fn new(budget: Budget) -> Limiter {
        if budget.qps <= 0.0 || !budget.qps.is_finite() {
            metrics::gauge!(crate::metric_names::API_BUDGET_QPS).set(0.0);
            return Limiter(None);
        }
        let period = Duration::from_secs_f64(1.0 / budget.qps).max(Duration::from_nanos(1));
        let burst = NonZeroU32::new(budget.burst.max(1)).unwrap_or(NonZeroU32::MIN);
        let quota = Quota::with_period(period).map(|q| q.allow_burst(burst));
        metrics::gauge!(crate::metric_names::API_BUDGET_QPS).set(if quota.is_some() { budget.qps } else { 0.0 });
        Limiter(quota.map(|q| {
            Arc::new(Bucket {
                rate: RateLimiter::direct(q),
                until_priority_and_fairness: budget.until_priority_and_fairness,
                lifted: AtomicBool::new(false),
            })
        }))
    }

    /// No budget.
    pub fn unlimited() -> Limiter {
        Limiter(None)
    }

    /// Whether requests still wait for tokens.
    pub fn limits(&self) -> bool {
        self.0.as_ref().is_some_and(|b| b.applies())
    }

    /// A client for `config` whose requests draw on this budget and whose `429 Too Many
    /// Requests` answers are retried a few times ([`TooManyRequests`]); kube's own retries are
    /// off ([`without_retries`]).
    pub fn client(&self, config: kube::Config) -> Result<kube::Client, kube::Error> {
        let limiter = self.clone();
        let layers = tower::layer::layer_fn(move |inner| stack(&limiter, TooManyRequests::default(), inner));
        Ok(kube::client::ClientBuilder::try_from(without_retries(config))?.with_layer(&layers).build())
    }

    /// [`Limiter::client`] whose every write (create, update, patch, delete) carries `fence`,
    /// unless it carries a fence of its own: the leader's singleton work, which must land
    /// nothing once another replica may lead. Reads and watches are not fenced.
    pub fn fenced_client(&self, config: kube::Config, fence: Fenced) -> Result<kube::Client, kube::Error> {
        let limiter = self.clone();
        let layers = tower::layer::layer_fn(move |inner| FenceWrites {
            inner: stack(&limiter, TooManyRequests::default(), inner),
            fence: fence.clone(),
        });
        Ok(kube::client::ClientBuilder::try_from(without_retries(config))?.with_layer(&layers).build())
    }
}

/// Puts a fence on every write that has none ([`Limiter::fenced_client`]); above the retries,
/// so that each retry passes the fence again.
#[derive(Clone)]
pub struct FenceWrites<S> {
    inner: S,
    fence: Fenced,
}

/// Whether `method` changes state (what [`FenceWrites`] fences).
pub fn is_write(method: &http::Method) -> bool {
    matches!(*method, http::Method::POST | http::Method::PUT | http::Method::PATCH | http::Method::DELETE)
}

impl<S, B> tower::Service<http::Request<B>> for FenceWrites<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        if is_write(request.method()) && request.extensions().get::<Fenced>().is_none() {
            request.extensions_mut().insert(self.fence.clone());
        }
        self.inner.call(request)
    }
}

/// The service [`Limiter::client`] wraps around kube's: `retry` above the budget and the fence,
/// so that each retry waits for a token and passes the fence again (`Retry` needs a cloneable
/// service below it, hence the buffer).
pub fn stack<S, R>(
    limiter: &Limiter,
    retry: TooManyRequests,
    inner: S,
) -> impl tower::Service<
    http::Request<kube::client::Body>,
    Response = http::Response<R>,
    Error = BoxError,
    Future = impl Future<Output = Result<http::Response<R>, BoxError>> + Send + use<S, R>,
> + Clone
+ Send
+ use<S, R>
where
    S: tower::Service<http::Request<kube::client::Body>, Response = http::Response<R>> + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    R: Send + 'static,
{
    use tower::Layer;
    let limited = limiter.layer(inner);
    tower::retry::RetryLayer::new(retry).layer(tower::buffer::Buffer::new(limited, 1024))
}

/// Retries a request the API server answered `429 Too Many Requests` (API Priority and
/// Fairness rejected it before doing anything), after the `Retry-After` it names.
///
/// Contract: only 429 is retried, never 5xx (a broken aggregated API answering 503 must fail
/// the step, not hold it); at most [`TooManyRequests::RETRIES`] times; each wait is
/// `Retry-After` (1 s when absent or unreadable) capped at [`TooManyRequests::MAX_WAIT`]; a
/// retry is a new request to the layers below, so it waits for the budget and is refused once
/// its fence closed.
#[derive(Clone, Copy, Debug)]
pub struct TooManyRequests {
    left: u32,
    max_wait: Duration,
}

impl TooManyRequests {
    /// Retries of one request.
    pub const RETRIES: u32 = 5;
    /// The longest wait before a retry, whatever `Retry-After` says.
    pub const MAX_WAIT: Duration = Duration::from_secs(10);

    /// The policy with waits capped at `max_wait` instead of [`Self::MAX_WAIT`].
    pub fn with_max_wait(max_wait: Duration) -> TooManyRequests {
        TooManyRequests { left: Self::RETRIES, max_wait }
    }

    /// How long to wait before retrying an answer with these `headers`.
    pub fn wait_of(&self, headers: &http::HeaderMap) -> Duration {
        headers
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(Duration::from_secs(1), Duration::from_secs)
            .min(self.max_wait)
    }
}

impl Default for TooManyRequests {
    fn default() -> Self {
        TooManyRequests::with_max_wait(Self::MAX_WAIT)
    }
}

impl<Res> tower::retry::Policy<http::Request<kube::client::Body>, http::Response<Res>, BoxError> for TooManyRequests {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        _request: &mut http::Request<kube::client::Body>,
        result: &mut Result<http::Response<Res>, BoxError>,
    ) -> Option<Self::Future> {
        match result {
            Ok(response) if response.status() == http::StatusCode::TOO_MANY_REQUESTS && self.left > 0 => {
                self.left -= 1;
                metrics::counter!(crate::metric_names::API_RETRIES_TOTAL).increment(1);
                Some(tokio::time::sleep(self.wait_of(response.headers())))
            }
            _ => None,
        }
    }

    fn clone_request(
        &mut self,
        request: &http::Request<kube::client::Body>,
    ) -> Option<http::Request<kube::client::Body>> {
        let mut copy = http::Request::new(request.body().try_clone()?);
        *copy.method_mut() = request.method().clone();
        *copy.uri_mut() = request.uri().clone();
        *copy.version_mut() = request.version();
        *copy.headers_mut() = request.headers().clone();
        *copy.extensions_mut() = request.extensions().clone();
        Some(copy)
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

impl<S, B, R> tower::Service<http::Request<B>> for Limited<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    R: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if !self.permitted {
            if let Some(bucket) = self.limiter.0.clone().filter(|b| b.applies()) {
                let wait = self.wait.get_or_insert_with(|| {
                    Box::pin(async move {
                        let started = Instant::now();
                        bucket.rate.until_ready().await;
                        metrics::histogram!(crate::metric_names::API_THROTTLE_SECONDS)
                            .record(started.elapsed().as_secs_f64());
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
        let fence = request.extensions().get::<Fenced>().cloned();
        let deadline = match fence.map(|f| {
            let until = f.until();
            (f, until)
        }) {
            None => None,
            Some((f, Some(until))) => Some((f, until)),
            Some((_, None)) => {
                metrics::counter!(crate::metric_names::FENCED_REQUESTS_TOTAL, crate::metric_names::label::RESULT => "closed").increment(1);
                return Box::pin(std::future::ready(Err(Box::new(FenceClosed) as BoxError)));
            }
        };
        metrics::counter!(crate::metric_names::API_REQUESTS_TOTAL, crate::metric_names::label::VERB => verb_of(&request)).increment(1);
        let sent = self.inner.call(request);
        let bucket = self.limiter.0.clone();
        Box::pin(async move {
            let answered = match deadline {
                None => sent.await.map_err(Into::into),
                Some((fence, until)) => within_fence(sent, &fence, until).await,
            };
            if let (Some(bucket), Ok(response)) = (&bucket, &answered) {
                bucket.observe(response.headers());
            }
            answered
        })
    }
}

/// `sent`'s answer if it comes before `fence`'s deadline (first `until`). When the deadline
/// passes, the fence is read again: a later deadline (the Lease was renewed meanwhile, so it was
/// held throughout) is waited for in turn; a closed fence, or the same deadline, abandons the
/// request ([`FenceDeadline`]).
async fn within_fence<F, R, E>(sent: F, fence: &Fenced, mut until: Instant) -> Result<R, BoxError>
where
    F: Future<Output = Result<R, E>>,
    E: Into<BoxError>,
{
    tokio::pin!(sent);
    loop {
        match tokio::time::timeout_at(until.into(), &mut sent).await {
            Ok(r) => return r.map_err(Into::into),
            Err(_) => match fence.until() {
                Some(later) if later > until => until = later,
                _ => {
                    metrics::counter!(crate::metric_names::FENCED_REQUESTS_TOTAL, crate::metric_names::label::RESULT => "deadline")
                        .increment(1);
                    return Err(Box::new(FenceDeadline) as BoxError);
                }
            },
        }
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

    type Answer = http::Response<()>;
    /// Statuses a scripted server answers with, and their `Retry-After`.
    type Script = &'static [(u16, Option<&'static str>)];

    /// An inner service counting the requests it was given; each answers after `delay`.
    fn counting(
        delay: Duration,
    ) -> (
        Arc<std::sync::atomic::AtomicUsize>,
        impl tower::Service<
            http::Request<()>,
            Response = Answer,
            Error = BoxError,
            Future = impl Future<Output = Result<Answer, BoxError>> + Send + 'static,
        >,
    ) {
        let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = sent.clone();
        let svc = tower::service_fn(move |_r: http::Request<()>| {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move {
                tokio::time::sleep(delay).await;
                Ok::<_, BoxError>(http::Response::new(()))
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
        // A deadline 100 ms away that no renewal moves.
        let soon = || {
            let at = Instant::now() + Duration::from_millis(100);
            Fenced::new(move || Some(at))
        };
        // The first read gives 100 ms; every later one what `then` says (a renewal landed, or
        // the Lease was lost).
        let moving = |then: Option<Duration>| {
            let first = std::sync::OnceLock::new();
            let reads = std::sync::atomic::AtomicUsize::new(0);
            Fenced::new(move || {
                let first = *first.get_or_init(|| Instant::now() + Duration::from_millis(100));
                match reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
                    0 => Some(first),
                    _ => then.map(|d| first + d),
                }
            })
        };
        let cases: Vec<(&str, Option<Fenced>, Duration, usize, &str)> = vec![
            ("no fence: a read or an unfenced write", None, Duration::ZERO, 1, "ok"),
            ("open", Some(open()), Duration::ZERO, 1, "ok"),
            ("closed", Some(closed()), Duration::ZERO, 0, "closed"),
            ("deadline already passed", Some(past()), Duration::ZERO, 0, "closed"),
            ("the server answers after the deadline", Some(soon()), Duration::from_secs(30), 1, "deadline"),
            (
                "renewed while in flight: the later deadline",
                Some(moving(Some(Duration::from_secs(60)))),
                Duration::from_millis(400),
                1,
                "ok",
            ),
            (
                "renewed, but answered after the later deadline too",
                Some(moving(Some(Duration::from_millis(100)))),
                Duration::from_secs(30),
                1,
                "deadline",
            ),
            ("closed while in flight", Some(moving(None)), Duration::from_millis(400), 1, "deadline"),
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
                Ok(_) => "ok",
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
        let limiter = Limiter::new(Budget { qps: 5.0, burst: 1, ..Budget::default() });
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
        let limiter = Limiter::new(Budget { qps: 2.0, burst: 2, ..Budget::default() });
        let l = &limiter.0.as_ref().unwrap().rate;
        // The burst is available at once; the next token comes after 1/qps.
        assert!(l.check().is_ok());
        assert!(l.check().is_ok());
        assert!(l.check().is_err(), "a third request within the burst window must wait");
        let started = Instant::now();
        l.until_ready().await;
        assert!(started.elapsed() >= Duration::from_millis(100), "waited {:?}", started.elapsed());
        assert!(Limiter::new(Budget { qps: 0.0, burst: 1, ..Budget::default() }).0.is_none());
    }

    /// The default budget yields to API Priority and Fairness, an explicit one never does: one
    /// row per (budget, does the answer carry the flow-schema header, still limited after?).
    #[tokio::test]
    async fn the_default_budget_is_lifted_by_an_api_server_with_priority_and_fairness() {
        use tower::{Layer, Service, ServiceExt};
        let yielding = Budget { until_priority_and_fairness: true, ..Budget::default() };
        let explicit = Budget::default();
        let cases = [
            ("default budget, APF server", yielding, true, false),
            ("default budget, server without APF", yielding, false, true),
            ("explicit budget, APF server", explicit, true, true),
            ("explicit budget, server without APF", explicit, false, true),
        ];
        for (what, budget, header, want_limited) in cases {
            let limiter = Limiter::new(budget);
            assert!(limiter.limits(), "{what}: limited before any answer");
            let inner = tower::service_fn(move |_r: http::Request<()>| async move {
                let mut response = http::Response::new(());
                if header {
                    response.headers_mut().insert(FLOW_SCHEMA_HEADER, http::HeaderValue::from_static("uid"));
                }
                Ok::<_, BoxError>(response)
            });
            let mut svc = limiter.layer(inner);
            svc.ready().await.unwrap().call(req("GET", "/api/v1/namespaces/a/configmaps/x")).await.unwrap();
            assert_eq!(limiter.limits(), want_limited, "{what}");
            // Every client of the replica shares the budget, so all of them are lifted.
            assert_eq!(limiter.clone().limits(), want_limited, "{what}: a clone");
        }
    }

    /// A server answering each request from a script of statuses (the last repeats), counting
    /// what it was sent, behind the stack [`Limiter::client`] builds.
    fn scripted<F: Fn() + Clone + Send + 'static>(
        limiter: Limiter,
        statuses: Script,
        on_send: F,
    ) -> (
        Arc<std::sync::atomic::AtomicUsize>,
        impl tower::Service<http::Request<kube::client::Body>, Response = http::Response<()>, Error = BoxError> + use<F>,
    ) {
        let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = sent.clone();
        let inner = tower::service_fn(move |_r: http::Request<kube::client::Body>| {
            let n = seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            on_send();
            let (code, retry_after) = statuses[n.min(statuses.len() - 1)];
            async move {
                let mut response = http::Response::new(());
                *response.status_mut() = http::StatusCode::from_u16(code).unwrap();
                if let Some(after) = retry_after {
                    response.headers_mut().insert(http::header::RETRY_AFTER, http::HeaderValue::from_static(after));
                }
                Ok::<_, BoxError>(response)
            }
        });
        // Waits of at most 10 ms keep the table quick; `wait_of` is tested on its own.
        (sent, stack(&limiter, TooManyRequests::with_max_wait(Duration::from_millis(10)), inner))
    }

    fn body_request(fence: Option<Fenced>) -> http::Request<kube::client::Body> {
        let mut r = http::Request::builder()
            .method("PATCH")
            .uri("/api/v1/namespaces/a/configmaps/x")
            .body(kube::client::Body::from(b"{}".to_vec()))
            .unwrap();
        if let Some(f) = fence {
            r.extensions_mut().insert(f);
        }
        r
    }

    /// The contract of [`TooManyRequests`], one row per case: (answers, requests sent, final
    /// status).
    #[tokio::test]
    async fn only_too_many_requests_is_retried_a_few_times_after_retry_after() {
        use tower::ServiceExt;
        let max = TooManyRequests::RETRIES as usize + 1;
        let cases: Vec<(&str, Script, usize, u16)> = vec![
            ("answered", &[(200, None)], 1, 200),
            ("429 once, then answered", &[(429, Some("1")), (200, None)], 2, 200),
            ("429 without Retry-After", &[(429, None), (200, None)], 2, 200),
            ("429 every time: given up", &[(429, Some("1"))], max, 429),
            ("503 is not retried", &[(503, None), (200, None)], 1, 503),
            ("504 is not retried", &[(504, None), (200, None)], 1, 504),
            ("409 is not retried", &[(409, None), (200, None)], 1, 409),
        ];
        for (what, statuses, want_sent, want_status) in cases {
            let (sent, svc) = scripted(Limiter::unlimited(), statuses, || {});
            let got = svc.oneshot(body_request(None)).await.unwrap();
            assert_eq!(
                (sent.load(std::sync::atomic::Ordering::SeqCst), got.status().as_u16()),
                (want_sent, want_status),
                "{what}"
            );
        }
        let policy = TooManyRequests::default();
        let wait = |v: &'static str| {
            let mut h = http::HeaderMap::new();
            h.insert(http::header::RETRY_AFTER, http::HeaderValue::from_static(v));
            policy.wait_of(&h)
        };
        assert_eq!(wait("2"), Duration::from_secs(2));
        assert_eq!(wait("86400"), TooManyRequests::MAX_WAIT, "a server cannot park a request for a day");
        assert_eq!(wait("Wed, 21 Oct 2026 07:28:00 GMT"), Duration::from_secs(1));
        assert_eq!(policy.wait_of(&http::HeaderMap::new()), Duration::from_secs(1));
    }

    /// A retry passes the fence again: a fence that closed while the server answered 429 (or
    /// during `Retry-After`) stops it.
    #[tokio::test]
    async fn a_retry_after_the_fence_closed_is_not_sent() {
        use tower::ServiceExt;
        let open = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let o = open.clone();
        let fence = Fenced::new(move || {
            o.load(std::sync::atomic::Ordering::SeqCst).then(|| Instant::now() + Duration::from_secs(60))
        });
        let close = open.clone();
        let (sent, svc) = scripted(Limiter::unlimited(), &[(429, Some("1")), (200, None)], move || {
            close.store(false, std::sync::atomic::Ordering::SeqCst)
        });
        let got = svc.oneshot(body_request(Some(fence))).await;
        assert!(got.is_err_and(|e| e.is::<FenceClosed>()));
        assert_eq!(sent.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
