//! The emulator's control API over HTTP, under the reserved path `/simcluster/v1/` (the same
//! operations as the library calls on [`crate::SimCluster`]):
//!
//! | Request | Effect |
//! |---|---|
//! | `POST /simcluster/v1/faults` with a [`FaultRule`] | add a fault rule |
//! | `DELETE /simcluster/v1/faults` | remove every rule |
//! | `POST /simcluster/v1/watches/drop[?resource=group/resource]` | end open watches |
//! | `POST /simcluster/v1/compact` | forget watch history: older resourceVersions get 410 |
//! | `POST /simcluster/v1/pause`, `POST /simcluster/v1/resume` | hang every request, or serve again |
//! | `POST /simcluster/v1/clock/advance?seconds=N` | move the simulation's clock forward |
//! | `POST /simcluster/v1/pods/{namespace}/{name}/kill` | kill a Pod as if its Node lost it (the deletion's answer) |
//! | `POST /simcluster/v1/nodes/{name}/stop`, `.../start` | stop a Node's simulated kubelet, or start it again |
//! | `POST /simcluster/v1/nodes/{name}/not-ready`, `.../ready` | make its kubelet report `Ready=False`, or `Ready=True` again |
//! | `GET /simcluster/v1/audit` | the audit log (JSON list of [`crate::faults::AuditEvent`]) |
//! | `GET /simcluster/v1/requests` | resource requests (reads too) by client, verb and resource (JSON list of [`crate::faults::RequestCount`]) |
//!
//! Only the cluster admin may use it.

use std::sync::Arc;

use axum::body::Body;
use http::{Method, Response};
use serde_json::json;

use crate::errors::ApiError;
use crate::faults::FaultRule;
use crate::http::Encoding;
use crate::server::{Req, respond};
use crate::state::State;

/// Serve a control request.
pub async fn handle(state: &Arc<State>, req: &Req, rest: &[&str]) -> Result<Response<Body>, ApiError> {
    if !crate::auth::is_admin(&req.user) {
        return Err(ApiError::status(403, "Forbidden", "the simcluster control API is for the cluster admin", None));
    }
    let ok = || respond(200, &json!({"status": "ok"}), Encoding::Json, &[]);
    match (&req.method, rest) {
        (&Method::POST, ["faults"]) => {
            let rule: FaultRule =
                serde_json::from_slice(&req.body).map_err(|e| ApiError::bad_request(format!("fault rule: {e}")))?;
            state.faults.add(rule);
            Ok(ok())
        }
        (&Method::DELETE, ["faults"]) => {
            state.faults.clear();
            Ok(ok())
        }
        (&Method::POST, ["watches", "drop"]) => {
            state.faults.drop_watches(req.q("resource").map(String::from));
            Ok(ok())
        }
        (&Method::POST, ["compact"]) => {
            state.store.lock().compact();
            Ok(ok())
        }
        (&Method::POST, ["pause"]) => {
            state.faults.set_paused(true);
            Ok(ok())
        }
        (&Method::POST, ["resume"]) => {
            state.faults.set_paused(false);
            Ok(ok())
        }
        (&Method::POST, ["clock", "advance"]) => {
            let seconds: f64 = req
                .q("seconds")
                .and_then(|s| s.parse().ok())
                .filter(|s: &f64| s.is_finite() && *s >= 0.0)
                .ok_or_else(|| ApiError::bad_request("clock/advance needs seconds=N (N >= 0)".to_string()))?;
            state.clock.advance(std::time::Duration::from_secs_f64(seconds));
            Ok(respond(200, &json!({"now": state.clock.micro()}), Encoding::Json, &[]))
        }
        (&Method::POST, ["pods", namespace, name, "kill"]) => {
            let deleted = crate::faults::kill_pod_by_worker(state, namespace, name).await?;
            Ok(respond(200, &deleted, Encoding::Json, &[]))
        }
        (&Method::POST, ["nodes", name, action @ ("stop" | "start" | "not-ready" | "ready")]) => {
            match *action {
                "stop" => crate::faults::set_node_stopped(state, name, true),
                "start" => crate::faults::set_node_stopped(state, name, false),
                "not-ready" => crate::faults::set_node_ready(state, name, false),
                _ => crate::faults::set_node_ready(state, name, true),
            }
            Ok(ok())
        }
        (&Method::GET, ["audit"]) => Ok(respond(200, &json!(state.faults.audit_log()), Encoding::Json, &[])),
        (&Method::GET, ["requests"]) => Ok(respond(200, &json!(state.faults.request_counts()), Encoding::Json, &[])),
        _ => Err(ApiError::PageNotFound),
    }
}
