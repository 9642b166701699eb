//! The manager's HTTP endpoints on one port: `/metrics` (Prometheus), `/healthz` (the process
//! and its runtime respond) and `/readyz` (connected to the API server and, when sharded, a
//! member of the replica set).

use std::net::SocketAddr;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::sync::watch;

/// Serve until `shutdown`. `ready` turns true once the controllers run.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: PrometheusHandle,
    ready: watch::Receiver<bool>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(move || std::future::ready(metrics.render())))
        .route("/healthz", get(|| std::future::ready("ok")))
        .route(
            "/readyz",
            get(move || {
                let ready = *ready.borrow();
                std::future::ready(if ready {
                    (StatusCode::OK, "ok")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "not ready: the controllers are starting")
                })
            }),
        );
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await
}

/// Bind `addr` (so a busy port fails at start-up, not later).
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}
