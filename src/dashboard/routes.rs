//! The dashboard's routes: each reads as the user, hands the objects to a page of
//! [`crate::dashboard::web`], and answers its HTML; a failed read answers the error page with the
//! matching status (403 when the API server refused, 404 when not found, 502 otherwise).
//!
//! Who "the user" is depends on [`Access`]: `ksync ui`'s kubeconfig, or, served by the manager,
//! the token each request carries ([`super::auth`]); then a request without one gets the sign-in
//! form and reads nothing, and `/login` and `/logout` are routed too.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRequestParts, Path, RawQuery, State as Shared};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::Stream;
use kube::api::ListParams;
use tokio::sync::{Semaphore, watch};

use super::auth::{self, Tokens};
use crate::api::application::Application;
use crate::api::names;
use crate::api::repository::Repository;
use crate::api::revision::Revision;
use crate::command::Error;
use crate::dashboard::web::{self, apps::Filters, escape};
use crate::read::connect::Cluster;
use crate::read::{self, graph};

/// Whose credentials the pages read with.
pub enum Access {
    /// `ksync ui`: the user's kubeconfig, and one watch of Applications for every page.
    Kubeconfig {
        /// The user's client; its namespace is the one listed when the user may not list all.
        cluster: Cluster,
        /// Changes whenever an Application does ([`super::watch`]).
        changes: watch::Receiver<u64>,
    },
    /// Served by the manager: the token of each request, and a watch per open event stream.
    Tokens(Tokens),
}

/// Most event streams open at once (each holds a watch on the API server when served by the
/// manager); more are refused with 503 and the browser tries again.
pub const MAX_STREAMS: usize = 256;
/// Most event streams open at once with one token (a user's tabs); more are refused with 429.
pub const MAX_STREAMS_PER_TOKEN: usize = 8;

/// What every route needs.
pub struct State {
    /// Whose credentials the pages read with.
    pub access: Access,
    /// A fixed "now" for ages (`ksync ui` under `KSYNC_NOW`); None: the current time.
    pub fixed_now: Option<jiff::Timestamp>,
    /// Served on a loopback address: only loopback `Host` names are answered
    /// ([`super::host_allowed`]).
    pub loopback_only: bool,
    /// Permits of open event streams ([`MAX_STREAMS`]).
    pub streams: Arc<Semaphore>,
    /// Open event streams per token hash ([`MAX_STREAMS_PER_TOKEN`]).
    pub per_token: Arc<std::sync::Mutex<std::collections::HashMap<[u8; 32], usize>>>,
}

/// One token's open event stream, counted until dropped.
pub struct TokenStream {
    key: [u8; 32],
    open: Arc<std::sync::Mutex<std::collections::HashMap<[u8; 32], usize>>>,
}

impl TokenStream {
    /// Count a stream of the token hashed `key` in `open`, unless it already has
    /// [`MAX_STREAMS_PER_TOKEN`].
    pub fn open(
        open: &Arc<std::sync::Mutex<std::collections::HashMap<[u8; 32], usize>>>,
        key: [u8; 32],
    ) -> Option<TokenStream> {
        let mut map = open.lock().expect("streams lock");
        let n = map.entry(key).or_default();
        if *n >= MAX_STREAMS_PER_TOKEN {
            return None;
        }
        *n += 1;
        Some(TokenStream { key, open: open.clone() })
    }
}

impl Drop for TokenStream {
    fn drop(&mut self) {
        let mut map = self.open.lock().expect("streams lock");
        if let Some(n) = map.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.key);
            }
        }
    }
}

impl State {
    /// The state of a dashboard reading with `access`.
    pub fn new(access: Access, fixed_now: Option<jiff::Timestamp>, loopback_only: bool) -> State {
        State {
            access,
            fixed_now,
            loopback_only,
            streams: Arc::new(Semaphore::new(MAX_STREAMS)),
            per_token: Default::default(),
        }
    }
}

impl State {
    /// The time ages count from.
    fn now(&self) -> jiff::Timestamp {
        self.fixed_now.unwrap_or_else(jiff::Timestamp::now)
    }
}

type App = Arc<State>;

/// The routes.
pub fn router(state: App) -> Router {
    let mut routes = Router::new()
        .route("/", get(applications))
        .route("/fragments/applications", get(applications_fragment))
        .route("/events", get(events))
        .route("/applications/{ns}/{name}", get(application))
        .route("/applications/{ns}/{name}/graph", get(application_graph))
        .route("/repositories", get(repositories));
    if matches!(state.access, Access::Tokens(_)) {
        routes = routes
            .route("/login", get(sign_in_form).post(sign_in))
            .route("/logout", post(sign_out))
            .layer(axum::middleware::from_fn(super::session::add_sign_out));
    }
    routes
        .layer(axum::middleware::map_response(security_headers))
        .layer(axum::middleware::from_fn_with_state(state.clone(), only_allowed_hosts))
        .with_state(state)
}

/// Headers of every answer: the [content security policy](web::content_security_policy), no
/// caching (a page is what one user may read: no cache may hand it to another), no MIME sniffing,
/// no referrer to other sites (paths name namespaces and Applications; `same-origin`, since with
/// `no-referrer` browsers send `Origin: null` on the sign-in form's post).
async fn security_headers(mut response: Response) -> Response {
    static CSP: std::sync::LazyLock<HeaderValue> = std::sync::LazyLock::new(|| {
        HeaderValue::from_str(&web::content_security_policy()).expect("the policy is a header value")
    });
    let h = response.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, CSP.clone());
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    response
}

/// The user a request reads as.
pub struct User {
    /// A client with the user's credentials.
    pub cluster: Cluster,
    /// The token it carries (served by the manager), and where it came from.
    pub token: Option<(String, auth::Source)>,
}

impl FromRequestParts<App> for User {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, s: &App) -> Result<User, Response> {
        match &s.access {
            Access::Kubeconfig { cluster, .. } => Ok(User { cluster: cluster.clone(), token: None }),
            Access::Tokens(tokens) => {
                let Some((token, source)) = auth::token(&parts.headers, tokens.proxy_header.as_ref()) else {
                    let next = parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
                    return Err(super::session::form(StatusCode::UNAUTHORIZED, next, "", &[]));
                };
                let namespace = auth::cookie(&parts.headers, auth::NAMESPACE_COOKIE)
                    .filter(|n| auth::namespace_name(n))
                    .unwrap_or_else(|| "default".to_string());
                let cluster = tokens.cluster(&token, &namespace).map_err(|e| failure(&e))?;
                Ok(User { cluster, token: Some((token, source)) })
            }
        }
    }
}

impl State {
    /// The error page for `e` read as `user`. Served by the manager, a token the API server did
    /// not accept (expired, revoked, made up) gets the sign-in form again, and its cookie is
    /// removed.
    fn failure(&self, user: &User, e: &Error, headers: &HeaderMap) -> Response {
        if let (Error::Unauthorized { .. }, Access::Tokens(tokens), Some((token, source))) =
            (e, &self.access, &user.token)
        {
            tokens.forget(token);
            let clear = if *source == auth::Source::Cookie {
                auth::sign_out_cookies(super::session::secure(headers)).to_vec()
            } else {
                Vec::new()
            };
            let message =
                "The API server did not accept this token (it may have expired or been revoked): sign in again.";
            return super::session::form(StatusCode::UNAUTHORIZED, "/", message, &clear);
        }
        failure(e)
    }
}

/// Refuses (421 Misdirected Request) a request whose `Host` the dashboard does not answer
/// ([`super::host_allowed`]).
async fn only_allowed_hosts(
    Shared(s): Shared<App>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let host = request.headers().get(header::HOST).and_then(|h| h.to_str().ok());
    if super::host_allowed(host, s.loopback_only) {
        return next.run(request).await;
    }
    let message = "this dashboard answers only requests to localhost, 127.0.0.1 or [::1]";
    (StatusCode::MISDIRECTED_REQUEST, Html(web::error_page("421 Misdirected Request", message))).into_response()
}

/// The error page for `e`, with its status.
fn failure(e: &Error) -> Response {
    let status = match e {
        Error::Forbidden { .. } => StatusCode::FORBIDDEN,
        Error::Unauthorized { .. } => StatusCode::UNAUTHORIZED,
        Error::NotFound { .. } => StatusCode::NOT_FOUND,
        _ => StatusCode::BAD_GATEWAY,
    };
    let title = format!("{} {}", status.as_u16(), status.canonical_reason().unwrap_or(""));
    (status, Html(web::error_page(&title, &e.to_string()))).into_response()
}

/// `cluster` acting in namespace `ns`.
fn in_namespace(cluster: &Cluster, ns: &str) -> Cluster {
    Cluster { namespace: ns.to_string(), ..cluster.clone() }
}

/// Objects of every namespace, or, when the user may not list them cluster-wide, of the
/// namespace `filters` name, else of the user's namespace, with a note (HTML) saying so.
async fn list_visible<K: read::Kind>(
    cluster: &Cluster,
    plural: &str,
    filters: Option<&Filters>,
) -> Result<(Vec<K>, String), Error> {
    match read::list::<K>(cluster, true, &ListParams::default()).await {
        Ok(items) => Ok((read::typed(&items), String::new())),
        Err(Error::Forbidden { message, .. }) => {
            let cluster = match filters.map(|f| f.namespace.as_str()).filter(|n| !n.is_empty()) {
                Some(ns) => in_namespace(cluster, ns),
                None => cluster.clone(),
            };
            let items = read::list::<K>(&cluster, false, &ListParams::default()).await?;
            let note = format!(
                "<p class=\"error\" id=\"forbidden\">You may not list {plural} in every namespace ({}): \
                 showing namespace {} only.</p>",
                escape(&message),
                escape(&cluster.namespace)
            );
            Ok((read::typed(&items), note))
        }
        Err(e) => Err(e),
    }
}

async fn applications(Shared(s): Shared<App>, user: User, headers: HeaderMap, RawQuery(q): RawQuery) -> Response {
    let filters = Filters::parse(q.as_deref().unwrap_or(""));
    match list_visible::<Application>(&user.cluster, "Applications", Some(&filters)).await {
        Ok((apps, note)) => Html(web::apps::render(&apps, &filters, &note, s.now())).into_response(),
        Err(e) => s.failure(&user, &e, &headers),
    }
}

async fn applications_fragment(Shared(s): Shared<App>, user: User, RawQuery(q): RawQuery) -> Response {
    let filters = Filters::parse(q.as_deref().unwrap_or(""));
    match list_visible::<Application>(&user.cluster, "Applications", Some(&filters)).await {
        Ok((apps, _)) => Html(web::apps::table(&apps, &filters, s.now())).into_response(),
        Err(e) => {
            let status = match e {
                Error::Forbidden { .. } => StatusCode::FORBIDDEN,
                Error::Unauthorized { .. } => StatusCode::UNAUTHORIZED,
                _ => StatusCode::BAD_GATEWAY,
            };
            (status, Html(format!("<p class=\"error\">{}</p>", escape(&e.to_string())))).into_response()
        }
    }
}

/// Server-sent events: `applications` whenever an Application changes. Served by the manager,
/// each stream watches as its user, until the browser goes away or the API server stops
/// accepting the token.
///
/// # Contract
/// Served by the manager, a stream opens only for a token the API server accepts
/// ([`Tokens::verify`], before any watch): another gets 401 and the sign-in form, and costs no
/// watch. At most [`MAX_STREAMS_PER_TOKEN`] streams per token (429 past them) and
/// [`MAX_STREAMS`] in all (503) are open at once; a stream ends when its watch is refused with
/// 401 ([`super::watch::start`]).
async fn events(Shared(s): Shared<App>, user: User, headers: HeaderMap) -> Response {
    let mut counted = None;
    if let (Access::Tokens(tokens), Some((token, _))) = (&s.access, &user.token) {
        if let Err(e) = tokens.verify(token).await {
            return s.failure(&user, &e, &headers);
        }
        match TokenStream::open(&s.per_token, auth::token_key(token)) {
            Some(c) => counted = Some(c),
            None => {
                let message = "too many open event streams for this token; close a tab";
                return (StatusCode::TOO_MANY_REQUESTS, [(header::RETRY_AFTER, "30")], message).into_response();
            }
        }
    }
    let Ok(permit) = s.streams.clone().try_acquire_owned() else {
        let message = "too many open event streams; the page tries again";
        return (StatusCode::SERVICE_UNAVAILABLE, [(header::RETRY_AFTER, "10")], message).into_response();
    };
    let mut rx = match &s.access {
        Access::Kubeconfig { changes, .. } => changes.clone(),
        Access::Tokens(_) => super::watch::start(user.cluster).await,
    };
    rx.mark_unchanged();
    Sse::new(changes_stream(rx, (permit, counted))).keep_alive(KeepAlive::default()).into_response()
}

/// What an open stream holds until it ends: its permit, and its token's count.
type Held = (tokio::sync::OwnedSemaphorePermit, Option<TokenStream>);

fn changes_stream(rx: watch::Receiver<u64>, held: Held) -> impl Stream<Item = Result<Event, Infallible>> {
    futures_util::stream::unfold((rx, held), |(mut rx, held)| async move {
        rx.changed().await.ok()?;
        let n = *rx.borrow_and_update();
        Some((Ok(Event::default().event("applications").data(n.to_string())), (rx, held)))
    })
}

async fn application(
    Shared(s): Shared<App>,
    user: User,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    let cluster = in_namespace(&user.cluster, &ns);
    let app = match read::get::<Application>(&cluster, &name).await {
        Ok(a) => a.typed,
        Err(e) => return s.failure(&user, &e, &headers),
    };
    let (desired, desired_error) = match app.status.as_ref().and_then(|st| st.desired_revision.as_deref()) {
        Some(rev) => match read::get_opt::<Revision>(&cluster, rev).await {
            Ok(r) => (r.map(|r| r.typed), None),
            Err(e) => (None, Some(e.to_string())),
        },
        None => (None, None),
    };
    let params = ListParams::default().labels(&format!("{}={name}", names::labels::APPLICATION));
    let (revisions, revisions_error) = match read::list::<Revision>(&cluster, false, &params).await {
        Ok(revs) => {
            (revs.into_iter().map(|r| r.typed).filter(|r| r.spec.application == name).collect::<Vec<_>>(), None)
        }
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    let detail = web::app::Detail {
        app: &app,
        desired: desired.as_ref(),
        desired_error: desired_error.as_deref(),
        revisions: &revisions,
        revisions_error: revisions_error.as_deref(),
    };
    Html(web::app::render(&detail, s.now())).into_response()
}

async fn application_graph(
    Shared(s): Shared<App>,
    user: User,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    let cluster = in_namespace(&user.cluster, &ns);
    match graph::read(&cluster, &name).await {
        Ok(data) => Html(web::graph::render(&data.view(), &ns, &name)).into_response(),
        Err(e) => s.failure(&user, &e, &headers),
    }
}

async fn repositories(Shared(s): Shared<App>, user: User, headers: HeaderMap) -> Response {
    match list_visible::<Repository>(&user.cluster, "Repositories", None).await {
        Ok((repos, note)) => Html(web::repos::render(&repos, &note, s.now())).into_response(),
        Err(e) => s.failure(&user, &e, &headers),
    }
}

async fn sign_in_form(RawQuery(q): RawQuery) -> Response {
    let next = form_urlencoded::parse(q.as_deref().unwrap_or("").as_bytes())
        .find(|(k, _)| k == "next")
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| "/".into());
    super::session::form(StatusCode::OK, auth::local_path(&next), "", &[])
}

async fn sign_in(Shared(s): Shared<App>, headers: HeaderMap, body: Bytes) -> Response {
    let Access::Tokens(tokens) = &s.access else { return StatusCode::NOT_FOUND.into_response() };
    super::session::sign_in(tokens, &headers, &body).await
}

async fn sign_out(headers: HeaderMap) -> Response {
    super::session::sign_out(&headers)
}
