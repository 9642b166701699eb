//! Commit-status APIs of GitHub, GitLab, Gitea/Forgejo and Bitbucket Cloud, on loopback: a real
//! HTTP server per test that checks each request as the host documents it (method, path, auth
//! header, JSON fields and allowed states), records what it accepted, answers with the host's
//! statuses (201, 401 for a wrong token, 422/400 for a bad body, GitLab's 400 for a repeated
//! state), and can be told to answer 429 with `Retry-After` or a 5xx first.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// Which host's API the server plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Host {
    /// `POST /repos/{owner}/{repo}/statuses/{sha}`, `Authorization: Bearer|token`.
    GitHub,
    /// `POST /api/v4/projects/{id}/statuses/{sha}`, `PRIVATE-TOKEN`.
    GitLab,
    /// `POST /api/v1/repos/{owner}/{repo}/statuses/{sha}`, `Authorization: token|Bearer`.
    Gitea,
    /// `POST /2.0/repositories/{workspace}/{slug}/commit/{sha}/statuses/build`, basic or bearer.
    Bitbucket,
}

/// One status the server accepted.
#[derive(Clone, Debug, PartialEq)]
pub struct Status {
    /// The repository as the path named it (`owner/name`, or GitLab's decoded project path).
    pub repository: String,
    /// The commit.
    pub commit: String,
    /// The state, as the host names it.
    pub state: String,
    /// The status's name (`context`, GitLab's `name`, Bitbucket's `key`).
    pub context: String,
    /// Its description.
    pub description: String,
    /// The whole body.
    pub body: Value,
}

#[derive(Default)]
struct Shared {
    accepted: Vec<Status>,
    refused: Vec<(u16, String)>,
    /// Every request's raw text (headers and body), to search for what must never be sent.
    raw: Vec<String>,
    script: VecDeque<(u16, Option<u64>)>,
    /// GitLab: the state of each (commit, name), which only moves forwards.
    current: BTreeMap<(String, String), String>,
}

/// A running fake host API.
pub struct GitHost {
    host: Host,
    addr: SocketAddr,
    shared: Arc<Mutex<Shared>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl GitHost {
    /// Serve `host`'s status API on 127.0.0.1, accepting `token` (and, for Bitbucket's basic
    /// auth, `username`).
    pub fn start(host: Host, token: &str, username: Option<&str>) -> GitHost {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let auth = Auth { token: token.to_string(), username: username.map(str::to_string) };
        let state = shared.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                let app =
                    axum::Router::new().fallback(move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                        let (state, auth) = (state.clone(), auth.clone());
                        async move { handle(host, &auth, &state, &method, &uri, &headers, &body) }
                    });
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(async move {
                        let _ = stopped.await;
                    })
                    .await;
            });
        });
        GitHost { host, addr, shared, stop: Some(stop), thread: Some(thread) }
    }

    /// The API base URL to put in the provider Secret's `address`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Which host it plays.
    pub fn host(&self) -> Host {
        self.host
    }

    /// The statuses accepted so far, in order.
    pub fn statuses(&self) -> Vec<Status> {
        self.shared.lock().expect("lock").accepted.clone()
    }

    /// The requests refused so far: status and why.
    pub fn refused(&self) -> Vec<(u16, String)> {
        self.shared.lock().expect("lock").refused.clone()
    }

    /// Every request received, headers and body as text.
    pub fn raw(&self) -> Vec<String> {
        self.shared.lock().expect("lock").raw.clone()
    }

    /// Answer the next request with `status` (and `Retry-After: seconds`) instead of handling it.
    pub fn answer_next(&self, status: u16, retry_after: Option<u64>) {
        self.shared.lock().expect("lock").script.push_back((status, retry_after));
    }
}

impl Drop for GitHost {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[derive(Clone)]
struct Auth {
    token: String,
    username: Option<String>,
}

fn json_response(status: StatusCode, body: Value) -> Response {
    (status, [(axum::http::header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default()
}

fn refuse(shared: &Mutex<Shared>, status: StatusCode, why: String) -> Response {
    shared.lock().expect("lock").refused.push((status.as_u16(), why.clone()));
    json_response(status, json!({"message": why}))
}

fn handle(
    host: Host,
    auth: &Auth,
    shared: &Mutex<Shared>,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &Bytes,
) -> Response {
    {
        let mut s = shared.lock().expect("lock");
        let mut raw = format!("{method} {uri}\n");
        for (k, v) in headers {
            raw.push_str(&format!("{k}: {}\n", v.to_str().unwrap_or_default()));
        }
        raw.push_str(&String::from_utf8_lossy(body));
        s.raw.push(raw);
        if let Some((status, retry)) = s.script.pop_front() {
            let status = StatusCode::from_u16(status).expect("status");
            let mut response = json_response(status, json!({"message": "scripted"}));
            if let Some(secs) = retry {
                response.headers_mut().insert("retry-after", secs.to_string().parse().expect("header"));
            }
            return response;
        }
    }
    if method != Method::POST {
        return refuse(shared, StatusCode::METHOD_NOT_ALLOWED, format!("{method} is not POST"));
    }
    let path = uri.path();
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let route = match (host, parts.as_slice()) {
        (Host::GitHub, ["repos", o, r, "statuses", sha]) => Some((format!("{o}/{r}"), *sha)),
        (Host::Gitea, ["api", "v1", "repos", o, r, "statuses", sha]) => Some((format!("{o}/{r}"), *sha)),
        (Host::GitLab, ["api", "v4", "projects", id, "statuses", sha]) => Some((id.replace("%2F", "/"), *sha)),
        (Host::Bitbucket, ["2.0", "repositories", w, s, "commit", sha, "statuses", "build"]) => {
            Some((format!("{w}/{s}"), *sha))
        }
        _ => None,
    };
    let Some((repository, sha)) = route else {
        return refuse(shared, StatusCode::NOT_FOUND, format!("no such endpoint: {path}"));
    };
    if !(sha.len() == 40 && sha.bytes().all(|b| b.is_ascii_hexdigit())) {
        return refuse(shared, StatusCode::UNPROCESSABLE_ENTITY, format!("{sha} is not a commit"));
    }
    let authorized = match host {
        Host::GitHub => {
            header(headers, "authorization") == format!("Bearer {}", auth.token)
                || header(headers, "authorization") == format!("token {}", auth.token)
        }
        Host::Gitea => {
            header(headers, "authorization") == format!("token {}", auth.token)
                || header(headers, "authorization") == format!("Bearer {}", auth.token)
        }
        Host::GitLab => header(headers, "private-token") == auth.token,
        Host::Bitbucket => {
            use base64::Engine;
            let basic = auth.username.as_ref().map(|u| {
                format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{u}:{}", auth.token)))
            });
            let given = header(headers, "authorization");
            Some(given) == basic.as_deref() || given == format!("Bearer {}", auth.token)
        }
    };
    if !authorized {
        return refuse(shared, StatusCode::UNAUTHORIZED, "Bad credentials".into());
    }
    if host == Host::GitHub && !header(headers, "accept").contains("application/vnd.github") {
        return refuse(shared, StatusCode::UNSUPPORTED_MEDIA_TYPE, "Accept must be application/vnd.github+json".into());
    }
    if !header(headers, "content-type").starts_with("application/json") {
        return refuse(shared, StatusCode::UNSUPPORTED_MEDIA_TYPE, "the body must be JSON".into());
    }
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return refuse(shared, StatusCode::BAD_REQUEST, "Problems parsing JSON".into());
    };
    let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    let (states, name_key): (&[&str], &str) = match host {
        Host::GitHub => (&["error", "failure", "pending", "success"], "context"),
        Host::Gitea => (&["pending", "success", "error", "failure", "warning"], "context"),
        Host::GitLab => (&["pending", "running", "success", "failed", "canceled", "skipped"], "name"),
        Host::Bitbucket => (&["INPROGRESS", "SUCCESSFUL", "FAILED", "STOPPED"], "key"),
    };
    let Some(state) = text("state").filter(|s| states.contains(&s.as_str())) else {
        return refuse(shared, StatusCode::UNPROCESSABLE_ENTITY, format!("state must be one of {states:?}"));
    };
    let context = text(name_key).unwrap_or_else(|| "default".into());
    let description = text("description").unwrap_or_default();
    if host == Host::GitHub && description.chars().count() > 140 {
        return refuse(
            shared,
            StatusCode::UNPROCESSABLE_ENTITY,
            "description is too long (maximum is 140 characters)".into(),
        );
    }
    if host == Host::Bitbucket && (text("url").is_none() || context.len() > 40) {
        return refuse(shared, StatusCode::BAD_REQUEST, "key (at most 40 characters) and url are required".into());
    }
    let mut s = shared.lock().expect("lock");
    if host == Host::GitLab {
        let key = (sha.to_string(), context.clone());
        if let Some(now) = s.current.get(&key).filter(|now| **now == state) {
            let why = format!("Cannot transition status via :{state} from :{now}");
            drop(s);
            return refuse(shared, StatusCode::BAD_REQUEST, why);
        }
        s.current.insert(key, state.clone());
    }
    s.accepted.push(Status {
        repository,
        commit: sha.to_string(),
        state: state.clone(),
        context: context.clone(),
        description,
        body: v.clone(),
    });
    json_response(StatusCode::CREATED, json!({"id": s.accepted.len(), "state": state, "context": context}))
}
