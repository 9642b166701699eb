//! The dashboard: read-only web pages of Applications (one with its plan, history and resource
//! graph) and Repositories, served by `ksync ui` on the user's kubeconfig and by the manager
//! (`--dashboard-bind-address`) on each request's bearer token.
//!
//! [`routes`] answers the pages (rendered by [`web`]); [`watch`] watches Applications and tells
//! the Applications page when to redraw its table (server-sent events). Everything shown is read
//! as the user through [`crate::read`], so a page whose reads are refused says so (the API
//! server's message, HTTP 403) instead of failing.
//!
//! Served by the manager ([`serve_with_tokens`]), every request reads with the bearer token it
//! carries ([`auth`]), a browser signs in by pasting one ([`session`]), and a request without one
//! reads nothing.

pub mod auth;
pub mod routes;
pub mod session;
pub mod watch;
pub mod web;

use std::sync::Arc;

/// Whether a request naming `host` (its `Host` header) may be served. On a loopback address
/// (`loopback_only`) only loopback names are: `localhost`, `127.x.x.x` and `[::1]`, with any
/// port. A page of another site whose name was made to resolve to 127.0.0.1 (DNS rebinding)
/// sends its own name, and is refused, so no web page the user visits can read the cluster
/// through the dashboard (as `kubectl proxy --accept-hosts` does by default).
pub fn host_allowed(host: Option<&str>, loopback_only: bool) -> bool {
    if !loopback_only {
        return true;
    }
    let Some(host) = host else { return false };
    let name = match host.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((ip, _)) => return ip.parse::<std::net::Ipv6Addr>().is_ok_and(|ip| ip.is_loopback()),
            None => return false,
        },
        None => match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => host,
        },
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
}

/// The dashboard of `ksync ui`: every page read with `cluster`'s (the user's kubeconfig's)
/// credentials, Applications watched for the live table from now on. Ages count from
/// `fixed_now` if given; `loopback_only`: see [`host_allowed`].
pub async fn with_kubeconfig(
    cluster: &crate::read::connect::Cluster,
    fixed_now: Option<jiff::Timestamp>,
    loopback_only: bool,
) -> Arc<routes::State> {
    let changes = watch::start(cluster.clone()).await;
    let access = routes::Access::Kubeconfig { cluster: cluster.clone(), changes };
    Arc::new(routes::State::new(access, fixed_now, loopback_only))
}

/// Serve the dashboard of `state` on `listener` until `stop` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<routes::State>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, routes::router(state)).with_graceful_shutdown(stop).await
}

/// Serve the dashboard on `listener` for the manager until `stop` completes: each request reads
/// with its own bearer token on the API server of `base`, whose credentials are never used
/// ([`auth`]). `proxy_header`: the header an authenticating proxy puts the user's token in.
pub async fn serve_with_tokens(
    listener: tokio::net::TcpListener,
    base: kube::Config,
    proxy_header: Option<axum::http::HeaderName>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let loopback_only = listener.local_addr()?.ip().is_loopback();
    let access = routes::Access::Tokens(auth::Tokens::new(base, proxy_header));
    let state = Arc::new(routes::State::new(access, None, loopback_only));
    serve(listener, state, stop).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_a_loopback_address_only_loopback_host_names_are_served() {
        // (Host header, loopback_only, served)
        let cases = [
            (Some("localhost:8080"), true, true),
            (Some("LOCALHOST"), true, true),
            (Some("127.0.0.1:8080"), true, true),
            (Some("127.8.9.1"), true, true),
            (Some("[::1]:8080"), true, true),
            (Some("evil.example:8080"), true, false),
            (Some("evil.example"), true, false),
            (Some("localhost.evil.example"), true, false),
            (Some("10.0.0.1:8080"), true, false),
            (Some("[::1"), true, false),
            (Some("[fe80::1]:8080"), true, false),
            (None, true, false),
            (Some("evil.example"), false, true),
            (None, false, true),
        ];
        for (host, loopback_only, served) in cases {
            assert_eq!(host_allowed(host, loopback_only), served, "{host:?} {loopback_only}");
        }
    }
}
