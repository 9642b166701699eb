//! `ksync ui`: the dashboard ([`kuvryn_sync::dashboard`]) as a local read-only web server.
//!
//! It reads with the user's kubeconfig, so it shows only what the user may read: a page whose
//! reads are refused says so (the API server's message, HTTP 403) instead of failing. It binds
//! 127.0.0.1:8080 unless `--address` says otherwise; another address serves anyone who can reach
//! it without authentication (with the user's credentials), which a warning says at startup.

use std::net::SocketAddr;

use kuvryn_sync::command::{Error, Result};
use kuvryn_sync::dashboard;
use kuvryn_sync::read::connect::Cluster;

use super::Context;

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

/// Serve until interrupted.
pub async fn run(cluster: &Cluster, args: &UiArgs, ctx: Context) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(args.address)
        .await
        .map_err(|e| Error::Startup(format!("cannot listen on {}: {e}", args.address)))?;
    let bound = listener.local_addr().map_err(|e| Error::Startup(e.to_string()))?;
    if let Some(w) = exposure_warning(bound) {
        eprintln!("{w}");
    }
    let state = dashboard::with_kubeconfig(cluster, ctx.fixed_now, bound.ip().is_loopback()).await;
    let url = format!("http://{bound}/");
    println!("ksync ui: serving {url} (read-only, reading as your kubeconfig's user); Ctrl-C stops");
    if args.open {
        open_browser(&url);
    }
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    dashboard::serve(listener, state, stop).await.map_err(|e| Error::Startup(format!("serving on {bound}: {e}")))
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
}
