//! The manager's HTTP endpoints on one port: `/metrics` (Prometheus), `/healthz` (the process
//! and its runtime respond) and `/readyz` (connected to the API server and, when sharded, a
//! member of the replica set).

use std::net::SocketAddr;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::sync::watch;

/// Serve until `shutdown`. `ready` is `Ok` while the replica is ready; otherwise `/readyz`
/// answers 503 with the reason.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: PrometheusHandle,
    ready: watch::Receiver<Result<(), String>>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(move || std::future::ready(metrics.render())))
        .route("/healthz", get(|| std::future::ready("ok")))
        .route(
            "/readyz",
            get(move || {
                let answer = match &*ready.borrow() {
                    Ok(()) => (StatusCode::OK, "ok".to_string()),
                    Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}")),
                };
                std::future::ready(answer)
            }),
        );
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await
}

/// Bind `addr` (so a busy port fails at start-up, not later).
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}
