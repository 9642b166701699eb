//! The dashboard served by the real manager process (`ksync-controller run
//! --dashboard-bind-address`), on simcluster and on a real kube-apiserver: every request reads
//! with the bearer token it carries and nothing else.
//!
//! - No token, or one the API server refuses: the sign-in form (401), and no page shows an object.
//! - A token that may read every namespace sees both namespaces' Applications; a token of one
//!   namespace (sent in an authenticating proxy's header, or pasted into the sign-in form) sees
//!   its namespace with a note and gets 403 elsewhere, although the manager itself may read
//!   everything.
//! - The sign-in form: checks the token with the API server, sets HttpOnly SameSite=Strict
//!   cookies (Secure except on a loopback name), refuses a post from another site and a redirect
//!   to another site; signing out removes the cookies.
//! - The live event stream watches as the user; only GET is routed; no token reaches the log.
//! - In headless Chromium: the sign-in form, pasting a token, the Applications page, a script
//!   injected into it refused by the content security policy, signing out.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kuvryn_sync::api::application::Application;
use serde_json::json;
use testkit::browser::{LivePage, chromium};
use testkit::manager::Manager;
use testkit::replica::token;
use testkit::{Cluster, apply_as, free_port, install_crds, wait_for};

const A: &str = "dash-a";
const B: &str = "dash-b";
const WAIT: Duration = Duration::from_secs(90);
const PROXY_HEADER: &str = "X-Forwarded-Access-Token";

/// An answer: status, headers (lower-case names) and body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    fn cookies(&self) -> Vec<&str> {
        self.headers.iter().filter(|(k, _)| k == "set-cookie").map(|(_, v)| v.as_str()).collect()
    }
}

/// `method path` over HTTP/1.1 to the dashboard on 127.0.0.1:`port`, with `headers` (a `Host`
/// of `dash.example` unless one is given) and `body`; None when nothing answers.
fn try_send(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Option<Answer> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(60))).ok()?;
    let mut request = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        request.push_str("Host: dash.example\r\n");
    }
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() {
        request.push_str("Content-Type: application/x-www-form-urlencoded\r\n");
    }
    request.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    s.write_all(request.as_bytes()).ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let mut lines = head.lines();
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Some(Answer { status, headers, body: body.to_string() })
}

fn send(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Answer {
    try_send(port, method, path, headers, body).unwrap_or_else(|| panic!("{method} {path}: no answer"))
}

fn get(port: u16, path: &str, headers: &[(&str, &str)]) -> Answer {
    send(port, "GET", path, headers, "")
}

/// Namespaces A and B with an Application each (suspended: the manager leaves them alone), and
/// two ServiceAccounts of A: `viewer`, who may read Applications, Revisions and Repositories in
/// every namespace, and `reader`, who may read them in A only. Their tokens.
async fn setup(client: &kube::Client) -> (String, String) {
    install_crds(client).await;
    let read = json!([{"apiGroups": ["sync.kuvryn.io"], "resources": ["applications", "revisions", "repositories"],
                       "verbs": ["get", "list", "watch"]}]);
    let objects = [
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": A}}),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": B}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "viewer", "namespace": A}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader", "namespace": A}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": "dash-viewer"}, "rules": read}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "dash-viewer"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "dash-viewer"},
               "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": A}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": "dash-reader", "namespace": A}, "rules": read}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "dash-reader", "namespace": A},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "dash-reader"},
               "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": A}]}),
    ];
    for obj in &objects {
        apply_as(client, "test", obj).await;
    }
    for (ns, name) in [(A, "web"), (B, "api")] {
        apply_as(
            client,
            "test",
            &json!({"apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
                    "metadata": {"name": name, "namespace": ns},
                    "spec": {"source": {"repository": "platform", "path": name}, "serviceAccountName": "deployer",
                             "destination": {"namespace": ns}, "suspend": true}}),
        )
        .await;
    }
    (token(client, A, "viewer").await, token(client, A, "reader").await)
}

fn the_manager_serves_the_dashboard_only_to_requests_with_a_token(cluster: Cluster) {
    let runtime = testkit::runtime();
    let client = runtime.block_on(cluster.client());
    let (viewer, reader) = runtime.block_on(setup(&client));
    let port = free_port();
    // 0.0.0.0, as the chart binds it: any Host is answered, and cookies are Secure but on
    // loopback names.
    let manager = Manager::start(
        &cluster,
        &["--dashboard-bind-address", &format!("0.0.0.0:{port}"), "--dashboard-token-header", PROXY_HEADER],
        &[("ENABLE_WEBHOOKS", "false")],
    );
    wait_for("the dashboard to answer", WAIT, || {
        assert!(!manager.stderr().contains("the dashboard stopped"), "{}", manager.stderr());
        (try_send(port, "GET", "/login", &[], "")?.status == 200).then_some(())
    });
    let bearer = |t: &str| format!("Bearer {t}");

    // No token: the sign-in form, and nothing read.
    for path in ["/", "/applications/dash-a/web", "/applications/dash-a/web/graph", "/repositories"] {
        let a = get(port, path, &[]);
        assert_eq!(a.status, 401, "{path}: {}", a.body);
        assert!(a.body.contains("id=\"login\""), "{path}: no sign-in form:\n{}", a.body);
        assert!(!a.body.contains("data-name="), "{path}: an object shown without a token:\n{}", a.body);
        assert!(a.body.contains(&format!("name=\"next\" value=\"{path}\"")), "{path}: {}", a.body);
    }
    for path in ["/events", "/fragments/applications"] {
        assert_eq!(get(port, path, &[]).status, 401, "{path}");
    }
    // A token the API server does not accept.
    let a = get(port, "/", &[("Authorization", "Bearer made-up.token")]);
    assert_eq!(a.status, 401, "{}", a.body);
    assert!(a.body.contains("did not accept this token"), "{}", a.body);
    assert!(!a.body.contains("data-name="), "{}", a.body);

    // The viewer reads every namespace.
    let a = get(port, "/", &[("Authorization", &bearer(&viewer))]);
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(a.body.contains("data-name=\"web\"") && a.body.contains("data-name=\"api\""), "{}", a.body);
    assert!(!a.body.contains("id=\"forbidden\""), "{}", a.body);
    assert_eq!(get(port, "/applications/dash-b/api", &[("Authorization", &bearer(&viewer))]).status, 200);

    // The reader, through the proxy's header: namespace A with a note, 403 in B, though the
    // manager may read everything.
    let a = get(port, "/?namespace=dash-a", &[(PROXY_HEADER, &reader)]);
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(a.body.contains("id=\"forbidden\"") && a.body.contains("showing namespace dash-a only"), "{}", a.body);
    assert!(a.body.contains("data-name=\"web\"") && !a.body.contains("data-name=\"api\""), "{}", a.body);
    let a = get(port, "/applications/dash-b/api", &[(PROXY_HEADER, &reader)]);
    assert_eq!(a.status, 403, "{}", a.body);
    assert!(a.body.contains("system:serviceaccount:dash-a:reader"), "not refused as the reader:\n{}", a.body);
    assert_eq!(get(port, "/applications/dash-a/web", &[(PROXY_HEADER, &reader)]).status, 200);

    // Signing in with the form: checked, then cookies, then back where the browser was going.
    let form = |token: &str, next: &str| {
        let token: String = form_encode(token);
        format!("token={token}&namespace=&next={}", form_encode(next))
    };
    let same_site = [("Origin", "https://dash.example")];
    let a = send(port, "POST", "/login", &same_site, &form("made-up.token", "/"));
    assert_eq!(a.status, 401, "{}", a.body);
    assert!(a.cookies().is_empty(), "{:?}", a.cookies());
    let a = send(port, "POST", "/login", &[("Origin", "https://evil.example")], &form(&reader, "/"));
    assert_eq!(a.status, 403, "a post from another site: {}", a.body);
    assert!(a.cookies().is_empty(), "{:?}", a.cookies());
    let a = send(port, "POST", "/login", &same_site, &form(&reader, "//evil.example/"));
    assert_eq!((a.status, a.header("location")), (303, Some("/")), "{}", a.body);
    let a = send(port, "POST", "/login", &same_site, &form(&reader, "/applications/dash-a/web"));
    assert_eq!((a.status, a.header("location")), (303, Some("/applications/dash-a/web")), "{}", a.body);
    let cookies = a.cookies();
    assert_eq!(cookies.len(), 2, "{cookies:?}");
    for c in &cookies {
        assert!(c.contains("HttpOnly") && c.contains("SameSite=Strict") && c.contains("; Secure"), "{c}");
    }
    // The namespace is the ServiceAccount's when none was given.
    assert!(cookies.iter().any(|c| c.starts_with("ksync-namespace=dash-a;")), "{cookies:?}");
    let cookie: String = cookies.iter().map(|c| c.split(';').next().unwrap()).collect::<Vec<_>>().join("; ");
    let a = get(port, "/", &[("Cookie", &cookie)]);
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(a.body.contains("showing namespace dash-a only") && a.body.contains("data-name=\"web\""), "{}", a.body);
    assert!(a.body.contains("id=\"signout\""), "no sign-out button:\n{}", a.body);
    // On a loopback name (kubectl port-forward) the cookies are not Secure.
    let local = [("Host", "localhost"), ("Origin", "http://localhost")];
    let a = send(port, "POST", "/login", &local, &form(&reader, "/"));
    assert_eq!(a.status, 303, "{}", a.body);
    assert!(a.cookies().iter().all(|c| !c.contains("Secure")), "{:?}", a.cookies());
    // A cookie whose token the API server refuses: the form again, and the cookie removed.
    let a = get(port, "/", &[("Cookie", "ksync-token=made-up.token")]);
    assert_eq!(a.status, 401, "{}", a.body);
    assert!(a.cookies().iter().any(|c| c.starts_with("ksync-token=;") && c.contains("Max-Age=0")), "{:?}", a.cookies());
    // Signing out removes both cookies.
    let a = send(port, "POST", "/logout", &[("Cookie", &cookie), ("Origin", "https://dash.example")], "");
    assert_eq!((a.status, a.header("location")), (303, Some("/login")));
    assert!(a.cookies().iter().filter(|c| c.contains("Max-Age=0")).count() == 2, "{:?}", a.cookies());

    // Read-only: nothing but GET (and the sign-in form's posts) is routed.
    for (method, path) in [("POST", "/"), ("PUT", "/applications/dash-a/web"), ("DELETE", "/applications/dash-a/web")] {
        let a = send(port, method, path, &[("Authorization", &bearer(&viewer))], "");
        assert_eq!(a.status, 405, "{method} {path}: {}", a.body);
    }

    // The event stream watches as its user: a change of an Application the viewer may read.
    let mut events = TcpStream::connect(("127.0.0.1", port)).unwrap();
    events.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(events, "GET /events HTTP/1.1\r\nHost: dash.example\r\nAuthorization: Bearer {viewer}\r\n\r\n").unwrap();
    let apps: Api<Application> = Api::namespaced(client.clone(), B);
    let mut touched = 0;
    let seen = testkit::browser::wait_for_event(&mut events, "applications", WAIT, || {
        touched += 1;
        let patch = json!({"metadata": {"labels": {"touched": touched.to_string()}}});
        runtime.block_on(apps.patch("api", &PatchParams::default(), &Patch::Merge(&patch))).unwrap();
    });
    assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");
    drop(events);

    // In a browser: the form, a pasted token, the Applications page, signing out.
    let browser = chromium();
    let mut page = LivePage::open(&browser, &format!("http://localhost:{port}/"));
    wait_for("the sign-in form", WAIT, || (page.eval("!!document.getElementById('login')") == true).then_some(()));
    sign_in_screenshot(&mut page);
    page.eval(&format!(
        "document.getElementById('token').value = {}; document.getElementById('login').submit(); true",
        json!(viewer)
    ));
    wait_for("the Applications page after signing in", WAIT, || {
        let text = page.text_of("live");
        (text.contains("web") && text.contains("api")).then_some(())
    });
    assert_eq!(page.eval("document.cookie"), json!(""), "a script can read the sign-in cookies");
    // The content security policy: a script put into the page (as a tenant's string would be,
    // were it not escaped) does not run; the page's own script does (the table is live).
    let injected = "(() => { const s = document.createElement('script'); s.textContent = 'window.injected = 1'; \
                    document.body.appendChild(s); return window.injected === undefined; })()";
    assert_eq!(page.eval(injected), json!(true), "an injected inline script ran");
    assert!(page.text_of("live-status").starts_with("Live:"), "{}", page.text_of("live-status"));
    page.eval("document.getElementById('signout').submit(); true");
    wait_for("the sign-in form after signing out", WAIT, || {
        (page.eval("!!document.getElementById('login')") == true).then_some(())
    });
    drop(page);
    let a = get(port, "/", &[("Host", "localhost")]);
    assert_eq!(a.status, 401);

    // No token was logged.
    let log = manager.stderr();
    for t in [&viewer, &reader] {
        assert!(!log.contains(t.as_str()), "a token in the manager's log");
    }
    assert!(log.contains("serving the dashboard"), "{log}");
}

/// An event stream of the dashboard on `port`, opened with `headers`: the connection (kept
/// open) and the status of its answer.
fn open_stream(port: u16, headers: &[(&str, &str)]) -> (TcpStream, u16) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut request = "GET /events HTTP/1.1\r\nHost: dash.example\r\n".to_string();
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    s.write_all(request.as_bytes()).unwrap();
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        assert_eq!(s.read(&mut byte).expect("an answer"), 1, "closed before a status line");
        line.push(byte[0]);
    }
    let status = String::from_utf8_lossy(&line).split(' ').nth(1).and_then(|c| c.parse().ok()).expect("a status");
    (s, status)
}

// See: issue 44 (trust boundaries, round two).
/// The dashboard costs nothing to someone without a valid token: an event stream with a made-up
/// token is refused (401) before any watch, twenty of them leave no retrying watch behind, and
/// one token holds at most 8 streams at once.
fn event_streams_need_a_token_the_api_server_accepts(cluster: Cluster) {
    let runtime = testkit::runtime();
    let client = runtime.block_on(cluster.client());
    let (viewer, _) = runtime.block_on(setup(&client));
    let port = free_port();
    let manager = Manager::start(
        &cluster,
        &["--dashboard-bind-address", &format!("0.0.0.0:{port}")],
        &[("ENABLE_WEBHOOKS", "false")],
    );
    wait_for("the dashboard to answer", WAIT, || {
        (try_send(port, "GET", "/login", &[], "")?.status == 200).then_some(())
    });
    let mut refused = Vec::new();
    for i in 0..20 {
        let (s, status) = open_stream(port, &[("Authorization", &format!("Bearer bogus-{i}"))]);
        assert_eq!(status, 401, "a made-up token opened an event stream");
        refused.push(s);
    }
    let (cookie_stream, status) = open_stream(port, &[("Cookie", "ksync-token=bogus")]);
    assert_eq!(status, 401);
    drop(cookie_stream);
    // Eight streams of one valid token, not nine.
    let bearer = format!("Bearer {viewer}");
    let mut open: Vec<TcpStream> = (0..8)
        .map(|n| {
            let (s, status) = open_stream(port, &[("Authorization", &bearer)]);
            assert_eq!(status, 200, "stream {n}");
            s
        })
        .collect();
    assert_eq!(open_stream(port, &[("Authorization", &bearer)]).1, 429, "a ninth stream of one token");
    // One closed, one more may open (once the server noticed: at its next keep-alive).
    drop(open.pop());
    wait_for("a stream's place freed", WAIT, || {
        let (s, status) = open_stream(port, &[("Authorization", &bearer)]);
        (status == 200).then_some(s)
    });
    let log = manager.stderr();
    assert!(!log.contains("watching Applications"), "a watch ran for a refused token:\n{log}");
    assert!(!log.contains("bogus"), "{log}");
}

/// The sign-in page's screenshot: a 1280x900 PNG with content, kept in `KSYNC_UI_SCREENSHOTS`
/// when set (how docs/images/dashboard-signin.png was made).
fn sign_in_screenshot(page: &mut LivePage) {
    use base64::Engine;
    let metrics = json!({"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": false});
    page.call("Emulation.setDeviceMetricsOverride", metrics, true);
    let shot = page.call("Page.captureScreenshot", json!({"format": "png"}), true);
    let bytes = base64::engine::general_purpose::STANDARD.decode(shot["data"].as_str().expect("data")).unwrap();
    if let Some(dir) = std::env::var_os("KSYNC_UI_SCREENSHOTS") {
        std::fs::write(std::path::Path::new(&dir).join("dashboard-signin.png"), &bytes).unwrap();
    }
    let mut reader = png::Decoder::new(std::io::Cursor::new(bytes)).read_info().expect("PNG header");
    let mut buf = vec![0; reader.output_buffer_size().expect("size")];
    let info = reader.next_frame(&mut buf).expect("PNG data");
    assert_eq!((info.width, info.height), (1280, 900), "the sign-in page's screenshot size");
    let channels = info.color_type.samples();
    let colours: std::collections::BTreeSet<&[u8]> = buf[..info.buffer_size()].chunks(channels).collect();
    assert!(colours.len() > 8, "the sign-in page's screenshot is blank ({} colours)", colours.len());
}

/// `s` as an `application/x-www-form-urlencoded` value.
fn form_encode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

testkit::both!(
    the_manager_serves_the_dashboard_only_to_requests_with_a_token,
    event_streams_need_a_token_the_api_server_accepts
);
