//! Notification sinks: one loopback HTTP server per provider, started by a test, that checks
//! each request against the provider's documented shape (content type, JSON structure, the
//! webhook's HMAC signature), answers as the provider documents (scriptable: `429` with
//! `Retry-After`, `5xx`), and records what it got.
//!
//! A request that breaks the shape is answered `400` and recorded in [`Sink::problems`], so a
//! test fails on it instead of waiting.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

/// Which provider a sink plays.
#[derive(Clone, Debug)]
pub enum Kind {
    /// Slack incoming webhook: answers `200 ok`.
    Slack,
    /// Teams Workflows webhook: answers `202`.
    Teams,
    /// Discord: answers `204`.
    Discord,
    /// The signed webhook, verified with this key: answers `200`.
    Webhook {
        /// The HMAC key (the Secret's `token`).
        key: String,
    },
    /// Alertmanager `/api/v2/alerts`: answers `200`.
    Alertmanager,
}

/// A scripted answer (used before the default, the provider's success).
#[derive(Clone, Debug)]
pub enum Reply {
    /// `429` with `Retry-After: <seconds>`.
    TooMany(u64),
    /// This status (`500`, `503`, ...), with `Retry-After` seconds when set.
    Status(u16, Option<u64>),
}

/// One request received.
#[derive(Clone, Debug)]
pub struct Received {
    /// When it came.
    pub at: Instant,
    /// Its URL path.
    pub path: String,
    /// Its headers (names lower-case).
    pub headers: Vec<(String, String)>,
    /// Its body.
    pub body: String,
    /// The status it was answered.
    pub status: u16,
}

#[derive(Default)]
struct State {
    script: VecDeque<Reply>,
    received: Vec<Received>,
    problems: Vec<String>,
}

/// A running sink; stops when dropped.
pub struct Sink {
    /// Its URL (`http://127.0.0.1:<port>/<path>`): a Secret's `address`.
    pub url: String,
    kind: Kind,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Sink {
    /// Start a sink of `kind` whose URL path is `path` (put a marker in it: a webhook URL is a
    /// secret, and must appear in no payload).
    pub async fn start(kind: Kind, path: &str) -> Sink {
        let state = Arc::new(Mutex::new(State::default()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("binding a sink");
        let port = listener.local_addr().unwrap().port();
        let (k, s) = (kind.clone(), state.clone());
        let app = axum::Router::new().fallback(move |uri: axum::http::Uri, headers: HeaderMap, body: Bytes| {
            let (k, s) = (k.clone(), s.clone());
            async move { answer(&k, &s, uri.path(), &headers, &body) }
        });
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Sink { url: format!("http://127.0.0.1:{port}/{}", path.trim_start_matches('/')), kind, state, task }
    }

    /// Answer the next requests with `replies`, in order, then as the provider does.
    pub fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.state.lock().unwrap().script.extend(replies);
    }

    /// Every request received.
    pub fn received(&self) -> Vec<Received> {
        self.state.lock().unwrap().received.clone()
    }

    /// The bodies of the requests answered with success (the deliveries), as JSON.
    pub fn delivered(&self) -> Vec<Value> {
        self.received()
            .into_iter()
            .filter(|r| (200..300).contains(&r.status))
            .map(|r| serde_json::from_str(&r.body).unwrap())
            .collect()
    }

    /// Requests that broke the documented shape, and why.
    pub fn problems(&self) -> Vec<String> {
        self.state.lock().unwrap().problems.clone()
    }

    /// Which provider it plays.
    pub fn kind(&self) -> &Kind {
        &self.kind
    }
}

fn answer(kind: &Kind, state: &Mutex<State>, path: &str, headers: &HeaderMap, body: &Bytes) -> Response {
    let text = String::from_utf8_lossy(body).to_string();
    let mut st = state.lock().unwrap();
    let record = |st: &mut State, status: u16| {
        st.received.push(Received {
            at: Instant::now(),
            path: path.to_string(),
            headers: headers
                .iter()
                .map(|(n, v)| (n.as_str().to_string(), v.to_str().unwrap_or_default().to_string()))
                .collect(),
            body: text.clone(),
            status,
        });
    };
    if let Err(problem) = check(kind, path, headers, body) {
        st.problems.push(problem.clone());
        record(&mut st, 400);
        return (StatusCode::BAD_REQUEST, problem).into_response();
    }
    match st.script.pop_front() {
        Some(Reply::TooMany(secs)) => {
            record(&mut st, 429);
            (StatusCode::TOO_MANY_REQUESTS, [("Retry-After", secs.to_string())], "rate_limited").into_response()
        }
        Some(Reply::Status(code, retry_after)) => {
            record(&mut st, code);
            let status = StatusCode::from_u16(code).unwrap();
            // Echoes the path, as proxies' error pages do: a webhook URL's secret part.
            let text = format!("unavailable: {path}");
            match retry_after {
                Some(secs) => (status, [("Retry-After", secs.to_string())], text).into_response(),
                None => (status, text).into_response(),
            }
        }
        None => {
            let (status, text) = match kind {
                Kind::Slack => (200, "ok"),
                Kind::Teams => (202, ""),
                Kind::Discord => (204, ""),
                Kind::Webhook { .. } | Kind::Alertmanager => (200, ""),
            };
            record(&mut st, status);
            (StatusCode::from_u16(status).unwrap(), text).into_response()
        }
    }
}

/// The provider's documented request shape.
fn check(kind: &Kind, path: &str, headers: &HeaderMap, body: &[u8]) -> Result<(), String> {
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    if !header("content-type").starts_with("application/json") {
        return Err(format!("content-type {:?}", header("content-type")));
    }
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let need = |ok: bool, what: &str| if ok { Ok(()) } else { Err(format!("{what}: {v}")) };
    match kind {
        Kind::Slack => {
            need(v["text"].is_string(), "Slack: no text")?;
            need(v["attachments"].as_array().is_some_and(|a| !a.is_empty()), "Slack: no attachments")
        }
        Kind::Teams => {
            need(v["type"] == "message", "Teams: type is not message")?;
            let a = &v["attachments"][0];
            need(a["contentType"] == "application/vnd.microsoft.card.adaptive", "Teams: contentType")?;
            need(a["content"]["type"] == "AdaptiveCard", "Teams: not an AdaptiveCard")?;
            need(a["content"]["body"].is_array(), "Teams: card without body")
        }
        Kind::Discord => {
            let e = &v["embeds"][0];
            need(e["title"].as_str().is_some_and(|t| t.chars().count() <= 256), "Discord: embed title")?;
            need(e["description"].as_str().is_some_and(|t| t.chars().count() <= 4096), "Discord: description")
        }
        Kind::Webhook { key } => {
            let ts = header("x-ksync-timestamp");
            let sig = header("x-ksync-signature");
            need(!header("x-ksync-delivery").is_empty(), "Webhook: no X-Ksync-Delivery")?;
            let now = jiff::Timestamp::now().as_second();
            let age = ts.parse::<i64>().map(|t| (now - t).abs()).unwrap_or(i64::MAX);
            need(age <= 300, "Webhook: timestamp not recent")?;
            let hex = sig.strip_prefix("sha256=").ok_or_else(|| format!("Webhook: signature {sig:?}"))?;
            let bytes: Vec<u8> =
                (0..hex.len() / 2).filter_map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()).collect();
            let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes()).unwrap();
            mac.update(ts.as_bytes());
            mac.update(b".");
            mac.update(body);
            mac.verify_slice(&bytes).map_err(|_| "Webhook: bad signature".to_string())?;
            need(v["application"].is_string() && v["reason"].is_string(), "Webhook: fields")
        }
        Kind::Alertmanager => {
            need(path == "/api/v2/alerts" || path.ends_with("/api/v2/alerts"), "Alertmanager: path")?;
            let a = &v[0];
            need(v.as_array().is_some_and(|a| a.len() == 1), "Alertmanager: not an array of one")?;
            need(a["labels"]["alertname"].is_string(), "Alertmanager: no alertname")?;
            need(a["startsAt"].is_string(), "Alertmanager: no startsAt")
        }
    }
}
