//! The dashboard's routes: each reads as the user, hands the objects to a page of
//! [`crate::cli::view::web`], and answers its HTML; a failed read answers the error page with the
//! matching status (403 when the API server refused, 404 when not found, 502 otherwise).

use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, RawQuery, State as Shared};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use futures_util::Stream;
use kube::api::ListParams;
use tokio::sync::watch;

use crate::api::application::Application;
use crate::api::names;
use crate::api::repository::Repository;
use crate::api::revision::Revision;
use crate::cli::Error;
use crate::cli::ksync::connect::Cluster;
use crate::cli::ksync::{Context, graph, read};
use crate::cli::view::web::{self, apps::Filters, escape};

/// What every route needs.
pub struct State {
    /// The user's client; its namespace is the one listed when the user may not list all.
    pub cluster: Cluster,
    /// The time ages count from.
    pub ctx: Context,
    /// Changes whenever an Application does ([`super::watch`]).
    pub changes: watch::Receiver<u64>,
    /// Served on a loopback address: only loopback `Host` names are answered
    /// ([`super::host_allowed`]).
    pub loopback_only: bool,
}

type App = Arc<State>;

/// The routes.
pub fn router(state: App) -> Router {
    Router::new()
        .route("/", get(applications))
        .route("/fragments/applications", get(applications_fragment))
        .route("/events", get(events))
        .route("/applications/{ns}/{name}", get(application))
        .route("/applications/{ns}/{name}/graph", get(application_graph))
        .route("/repositories", get(repositories))
        .layer(axum::middleware::from_fn_with_state(state.clone(), only_allowed_hosts))
        .with_state(state)
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
/// kubeconfig's namespace with a note (HTML) saying so.
async fn list_visible<K: read::Kind>(cluster: &Cluster, plural: &str) -> Result<(Vec<K>, String), Error> {
    match read::list::<K>(cluster, true, &ListParams::default()).await {
        Ok(items) => Ok((read::typed(&items), String::new())),
        Err(Error::Forbidden { message, .. }) => {
            let items = read::list::<K>(cluster, false, &ListParams::default()).await?;
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

async fn applications(Shared(s): Shared<App>, RawQuery(q): RawQuery) -> Response {
    let filters = Filters::parse(q.as_deref().unwrap_or(""));
    match list_visible::<Application>(&s.cluster, "Applications").await {
        Ok((apps, note)) => Html(web::apps::render(&apps, &filters, &note, s.ctx.now())).into_response(),
        Err(e) => failure(&e),
    }
}

async fn applications_fragment(Shared(s): Shared<App>, RawQuery(q): RawQuery) -> Response {
    let filters = Filters::parse(q.as_deref().unwrap_or(""));
    match list_visible::<Application>(&s.cluster, "Applications").await {
        Ok((apps, _)) => Html(web::apps::table(&apps, &filters, s.ctx.now())).into_response(),
        Err(e) => {
            let status =
                if matches!(e, Error::Forbidden { .. }) { StatusCode::FORBIDDEN } else { StatusCode::BAD_GATEWAY };
            (status, Html(format!("<p class=\"error\">{}</p>", escape(&e.to_string())))).into_response()
        }
    }
}

/// Server-sent events: `applications` whenever an Application changes.
async fn events(Shared(s): Shared<App>) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let mut rx = s.changes.clone();
    rx.mark_unchanged();
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.changed().await.ok()?;
        let n = *rx.borrow_and_update();
        Some((Ok(Event::default().event("applications").data(n.to_string())), rx))
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

async fn application(Shared(s): Shared<App>, Path((ns, name)): Path<(String, String)>) -> Response {
    let cluster = in_namespace(&s.cluster, &ns);
    let app = match read::get::<Application>(&cluster, &name).await {
        Ok(a) => a.typed,
        Err(e) => return failure(&e),
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
    Html(web::app::render(&detail, s.ctx.now())).into_response()
}

async fn application_graph(Shared(s): Shared<App>, Path((ns, name)): Path<(String, String)>) -> Response {
    // `graph::read`'s future is not `Send` for every lifetime (its concurrent reads borrow the
    // plan entries), which axum's handlers must be: it runs on a blocking thread that drives it
    // with the runtime's handle.
    let cluster = in_namespace(&s.cluster, &ns);
    let handle = tokio::runtime::Handle::current();
    let (n, c) = (name.clone(), cluster);
    let read = tokio::task::spawn_blocking(move || handle.block_on(async move { graph::read(&c, &n).await }));
    match read.await {
        Ok(Ok(data)) => Html(web::graph::render(&data.view(), &ns, &name)).into_response(),
        Ok(Err(e)) => failure(&e),
        Err(e) => failure(&Error::Unavailable(format!("reading the graph: {e}"))),
    }
}

async fn repositories(Shared(s): Shared<App>) -> Response {
    match list_visible::<Repository>(&s.cluster, "Repositories").await {
        Ok((repos, note)) => {
            ([(header::CACHE_CONTROL, "no-store")], Html(web::repos::render(&repos, &note, s.ctx.now())))
                .into_response()
        }
        Err(e) => failure(&e),
    }
}
