//! `ksync ui`: the dashboard, a local read-only web server.
//!
//! It reads with the user's kubeconfig, so it shows only what the user may read: a page whose
//! reads are refused says so (the API server's message, HTTP 403) instead of failing. It binds
//! 127.0.0.1:8080 unless `--address` says otherwise; another address serves anyone who can reach
//! it without authentication (with the user's credentials), which a warning says at startup.
//!
//! [`routes`] answers the pages (rendered by [`crate::cli::view::web`]); [`watch`] watches
//! Applications and tells the Applications page when to redraw its table (server-sent events).
//!
//! The manager serves the same pages when asked (`--dashboard-bind-address`, [`serve_with_tokens`]):
//! then every request reads with the bearer token it carries ([`auth`]), a browser signs in by
//! pasting one ([`session`]), and a request without one reads nothing.

pub mod auth;
pub mod routes;
pub mod session;
pub mod watch;

use std::net::SocketAddr;
use std::sync::Arc;

use super::Context;
use super::connect::Cluster;
use crate::cli::{Error, Result};

/// The address served when `--address` is not given.
pub const DEFAULT_ADDRESS: &str = "127.0.0.1:8080";

/// Flags of `ksync ui`.
#[derive(Clone, Debug, clap::Args)]
pub struct UiArgs {
    /// Address to serve on. A non-loopback address serves the dashboard, read with your
    /// credentials, to anyone who can reach it, without authentication.
    #[arg(long, value_name = "HOST:PORT", default_value = DEFAULT_ADDRESS)]
    pub address: SocketAddr,
    /// Open the dashboard in a browser (`$BROWSER`, else `xdg-open`).
    #[arg(long)]
    pub open: bool,
}

/// The warning printed when serving on a non-loopback address; None for a loopback one.
pub fn exposure_warning(address: SocketAddr) -> Option<String> {
    (!address.ip().is_loopback()).then(|| {
        format!(
            "warning: serving on {address}, not a loopback address: anyone who can reach it sees what your \
             credentials may read, without authentication"
        )
    })
}

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

/// Serve until interrupted.
pub async fn run(cluster: &Cluster, args: &UiArgs, ctx: Context) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(args.address)
        .await
        .map_err(|e| Error::Startup(format!("cannot listen on {}: {e}", args.address)))?;
    let bound = listener.local_addr().map_err(|e| Error::Startup(e.to_string()))?;
    if let Some(w) = exposure_warning(bound) {
        eprintln!("{w}");
    }
    let changes = watch::start(cluster.clone()).await;
    let loopback_only = bound.ip().is_loopback();
    let access = routes::Access::Kubeconfig { cluster: cluster.clone(), changes };
    let state = Arc::new(routes::State::new(access, ctx, loopback_only));
    let url = format!("http://{bound}/");
    println!("ksync ui: serving {url} (read-only, reading as your kubeconfig's user); Ctrl-C stops");
    if args.open {
        open_browser(&url);
    }
    axum::serve(listener, routes::router(state))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|e| Error::Startup(format!("serving on {bound}: {e}")))
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
    let ctx = Context { fixed_now: None, palette: crate::cli::view::Palette::PLAIN, terminal: false };
    let access = routes::Access::Tokens(auth::Tokens::new(base, proxy_header));
    let state = Arc::new(routes::State::new(access, ctx, loopback_only));
    axum::serve(listener, routes::router(state)).with_graceful_shutdown(stop).await
}

/// Start a browser on `url`; a failure is only reported.
fn open_browser(url: &str) {
    let program = std::env::var("BROWSER").ok().filter(|b| !b.is_empty()).unwrap_or_else(|| "xdg-open".into());
    if let Err(e) = std::process::Command::new(&program)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
    {
        eprintln!("warning: could not start {program} to open {url}: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_non_loopback_address_is_warned_about() {
        assert!(exposure_warning("127.0.0.1:8080".parse().unwrap()).is_none());
        assert!(exposure_warning("[::1]:8080".parse().unwrap()).is_none());
        let w = exposure_warning("0.0.0.0:8080".parse().unwrap()).unwrap();
        assert!(w.contains("without authentication"), "{w}");
    }

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
