//! `ksync ui` in a real browser: the quickstart's `web` and `api` Applications on simcluster and on
//! a real kube-apiserver, deployed by the controllers in-process (`testkit::apps::Env`), `web`
//! without its ConfigMap so that it turns Degraded with a root cause (as in `cli/tests/graph.rs`). The real `ksync`
//! binary serves the dashboard on a free loopback port; headless Chromium (Debian's package,
//! installed by `scripts/install-tools`) loads each page, and the test checks what a person sees
//! in the DOM and that each screenshot is a PNG of the requested size with content on it. The
//! live redraw is watched in a page kept open over the DevTools protocol: an Application created
//! after load appears in it. The event stream, the table fragment, and a user with
//! namespace-only permissions are checked over HTTP too.
//!
//! `KSYNC_UI_SCREENSHOTS=DIR` keeps the screenshots in DIR (how docs/images/ was made).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube::api::{Patch, PatchParams};
use serde_json::json;
use testkit::apps::{Env, WAIT};
use testkit::browser::{BROWSER, LivePage, chromium};
use testkit::{Cluster, eventually, free_port, temp_dir, wait_for};

const NS: &str = "quickstart";
const WIDTH: u32 = 1280;
const HEIGHT: u32 = 900;

fn quickstart(path: &str) -> String {
    std::fs::read_to_string(testkit::repo_root().join("examples/quickstart").join(path)).expect(path)
}

/// `ksync ui` running as a child process, killed on drop.
struct Ui {
    child: Child,
    port: u16,
    _home: tempfile::TempDir,
}

impl Ui {
    fn start(kubeconfig: &Path) -> Ui {
        let home = temp_dir("ui-home");
        let port = free_port();
        let child = Command::new(testkit::ksync::bin())
            .env_clear()
            .env("HOME", home.path())
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["-n", NS, "ui", "--address", &format!("127.0.0.1:{port}")])
            .stdin(Stdio::null())
            .spawn()
            .expect("ksync ui");
        let mut ui = Ui { child, port, _home: home };
        wait_for("ksync ui to answer", WAIT, || {
            assert!(ui.child.try_wait().unwrap().is_none(), "ksync ui exited");
            let (status, _) = ui.try_get("/repositories")?;
            (status == 200).then_some(())
        });
        ui
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// GET `path` over HTTP/1.1: status and body; None when not answering yet.
    fn try_get(&self, path: &str) -> Option<(u16, String)> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(60))).ok()?;
        write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        let status = text.split(' ').nth(1)?.parse().ok()?;
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
        Some((status, body))
    }

    fn get(&self, path: &str) -> (u16, String) {
        self.try_get(path).unwrap_or_else(|| panic!("GET {path} got no answer"))
    }
}

impl Drop for Ui {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Run Chromium headless with `args` then `url`, within [`BROWSER`]; its stdout.
fn browse(profile: &Path, args: &[&str], url: &str) -> String {
    let out = tempfile::NamedTempFile::new().unwrap();
    let mut child = Command::new(chromium())
        .args(["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(out.reopen().unwrap())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium");
    let end = Instant::now() + BROWSER;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium {args:?} {url} did not finish in {BROWSER:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "chromium {args:?} {url}: {status}");
    std::fs::read_to_string(out.path()).unwrap()
}

/// The DOM after load, as Chromium serializes it.
fn dom(profile: &Path, url: &str) -> String {
    let d = browse(profile, &["--dump-dom"], url);
    assert!(d.contains("Kuvryn Sync"), "not a dashboard page at {url}:\n{d}");
    d
}

/// What a screenshot holds: its size, how many colours, whether it has the diagnosis red.
struct Shot {
    width: u32,
    height: u32,
    colours: usize,
    red: usize,
}

/// Screenshot `url` into `file` and decode it.
fn screenshot(profile: &Path, url: &str, file: &Path) -> Shot {
    let _ = std::fs::remove_file(file);
    browse(
        profile,
        &[&format!("--screenshot={}", file.display()), &format!("--window-size={WIDTH},{HEIGHT}"), "--hide-scrollbars"],
        url,
    );
    let bytes = std::fs::read(file).unwrap_or_else(|e| panic!("no screenshot of {url} at {}: {e}", file.display()));
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{} is not a PNG", file.display());
    let mut reader = png::Decoder::new(std::io::Cursor::new(bytes)).read_info().expect("PNG header");
    let mut buf = vec![0; reader.output_buffer_size().expect("size")];
    let info = reader.next_frame(&mut buf).expect("PNG data");
    let channels = info.color_type.samples();
    assert_eq!(info.bit_depth, png::BitDepth::Eight, "{}", file.display());
    let mut colours = std::collections::BTreeSet::new();
    let mut red = 0;
    for px in buf[..info.buffer_size()].chunks(channels) {
        let (r, g, b) = (px[0], px[1], px.get(2).copied().unwrap_or(px[0]));
        colours.insert((r, g, b));
        // The diagnosis path's #c62828 and the Degraded badge's #b42318 (anti-aliasing aside).
        if r > 170 && g < 70 && b < 70 {
            red += 1;
        }
    }
    Shot { width: info.width, height: info.height, colours: colours.len(), red }
}

fn check_shot(s: &Shot, what: &str) {
    assert_eq!((s.width, s.height), (WIDTH, HEIGHT), "{what}: screenshot size");
    assert!(s.colours > 8, "{what}: the screenshot is blank ({} colours)", s.colours);
}

/// A kubeconfig acting as the ServiceAccount `deployer` of [`NS`] (it may do anything in the
/// namespace and nothing cluster-wide).
async fn deployer_kubeconfig(cluster: &Cluster, client: &kube::Client, dir: &Path) -> PathBuf {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let sas: kube::Api<ServiceAccount> = kube::Api::namespaced(client.clone(), NS);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec { expiration_seconds: Some(3600), ..Default::default() }),
        ..Default::default()
    };
    let token = sas
        .create_token_request("deployer", &Default::default(), &request)
        .await
        .expect("TokenRequest")
        .status
        .expect("status")
        .token
        .expect("token");
    let path = dir.join("deployer.kubeconfig");
    cluster.write_kubeconfig(&path, Some(&token), None);
    path
}

fn the_dashboard_shows_the_degraded_application_and_its_root_cause_in_a_browser(cluster: Cluster) {
    let browser = chromium();
    eprintln!("using {}", browser.display());
    let runtime = testkit::runtime();
    let env = runtime.block_on(async {
        let env = Env::start(&cluster, NS).await;
        // The quickstart's web without its ConfigMap, and its api (Kustomize).
        let wt = env.repository("platform").await;
        // A short progress deadline, so the Deployment (and the Application) turn Degraded soon.
        let deployment = quickstart("apps/web/deployment.yaml").replacen(
            "  replicas: 2\n",
            "  replicas: 2\n  progressDeadlineSeconds: 5\n",
            1,
        );
        assert!(deployment.contains("progressDeadlineSeconds"), "{deployment}");
        wt.write("apps/web/deployment.yaml", &deployment)
            .write("apps/web/service.yaml", &quickstart("apps/web/service.yaml"));
        for f in ["kustomization.yaml", "base/kustomization.yaml", "base/deployment.yaml", "base/service.yaml"] {
            wt.write(&format!("apps/api/{f}"), &quickstart(&format!("apps/api/{f}")));
        }
        let commit = wt.commit_and_push("the quickstart's web (without its ConfigMap) and api");
        env.refresh("platform", &commit).await;
        env.create_app(
            "web",
            json!({"source": {"repository": "platform", "path": "apps/web"}, "serviceAccountName": "deployer",
                   "destination": {"namespace": NS}, "sync": {"prune": true}, "health": {"timeout": "5s"},
                   "failurePolicy": {"maxAttempts": 1}}),
        )
        .await;
        env.create_app(
            "api",
            json!({"source": {"repository": "platform", "path": "apps/api", "render": {"type": "Kustomize"}},
                   "serviceAccountName": "deployer", "destination": {"namespace": NS}, "sync": {"prune": true}}),
        )
        .await;
        eventually("web Degraded with a root cause", 3 * WAIT, || async {
            let status = env.apps().get("web").await.ok()?.status?;
            let degraded = status.health?.status == kuvryn_sync::api::common::HealthStatus::Degraded;
            (degraded && status.diagnosis?.reason == "MissingConfigMap").then_some(())
        })
        .await;
        eventually("api planned", WAIT, || async {
            env.apps().get("api").await.ok()?.status?.desired_revision.map(|_| ())
        })
        .await;
        env
    });

    let ui = Ui::start(&cluster.kubeconfig());
    let profile = temp_dir("chromium");
    let shots = match std::env::var_os("KSYNC_UI_SCREENSHOTS") {
        Some(d) => PathBuf::from(d),
        None => profile.path().join("shots"),
    };
    std::fs::create_dir_all(&shots).unwrap();

    // `/`: the Degraded Application's row says Degraded; the filter keeps only it.
    let home = dom(profile.path(), &ui.url("/"));
    assert!(
        home.contains("data-namespace=\"quickstart\" data-name=\"web\" data-health=\"Degraded\""),
        "no Degraded row for web:\n{home}"
    );
    assert!(home.contains("data-name=\"api\""), "no row for api:\n{home}");
    let filtered = dom(profile.path(), &ui.url("/?health=Degraded"));
    assert!(filtered.contains("data-name=\"web\"") && !filtered.contains("data-name=\"api\""), "{filtered}");
    let shot = screenshot(profile.path(), &ui.url("/"), &shots.join("dashboard-applications.png"));
    check_shot(&shot, "/");
    assert!(shot.red > 0, "/: no Degraded badge seen in the screenshot");

    // The Application: root cause, conditions, plan, history.
    let page = dom(profile.path(), &ui.url("/applications/quickstart/web"));
    for want in
        ["id=\"root-cause\"", "MissingConfigMap", "ConfigMap quickstart/web-config", "id=\"plan\"", "id=\"history\""]
    {
        assert!(page.contains(want), "{want} missing from the Application page:\n{page}");
    }
    assert!(page.contains("<span id=\"health\"><span class=\"badge bad\">Degraded</span></span>"), "{page}");
    check_shot(
        &screenshot(profile.path(), &ui.url("/applications/quickstart/web"), &shots.join("dashboard-application.png")),
        "the Application page",
    );

    // The graph: the missing ConfigMap is the root cause, on the diagnosis path.
    let graph = dom(profile.path(), &ui.url("/applications/quickstart/web/graph"));
    let root = graph
        .split("<g class=\"node")
        .find(|g| g.contains("data-root-cause=\"true\""))
        .unwrap_or_else(|| panic!("no root-cause node in the graph:\n{graph}"));
    assert!(root.starts_with(" h-missing on-path root-cause"), "{root}");
    assert!(root.contains("data-kind=\"ConfigMap\"") && root.contains("data-name=\"web-config\""), "{root}");
    assert!(root.contains("root cause: MissingConfigMap"), "{root}");
    assert!(graph.contains("data-kind=\"Deployment.apps\"") && graph.contains("class=\"edge hot\""), "{graph}");
    let shot =
        screenshot(profile.path(), &ui.url("/applications/quickstart/web/graph"), &shots.join("dashboard-graph.png"));
    check_shot(&shot, "the graph page");
    assert!(shot.red > 200, "the graph page: the diagnosis path is not drawn in red ({} red pixels)", shot.red);

    // Repositories.
    let repos = dom(profile.path(), &ui.url("/repositories"));
    assert!(repos.contains("data-name=\"platform\" data-ready=\"True\""), "{repos}");
    check_shot(
        &screenshot(profile.path(), &ui.url("/repositories"), &shots.join("dashboard-repositories.png")),
        "/repositories",
    );

    // Not found: a clear page with 404.
    let (status, body) = ui.get("/applications/quickstart/nope");
    assert_eq!(status, 404, "{body}");
    // A page of another site resolved to 127.0.0.1 (DNS rebinding) sends its own Host: refused.
    let mut s = TcpStream::connect(("127.0.0.1", ui.port)).unwrap();
    write!(s, "GET / HTTP/1.1\r\nHost: evil.example:{}\r\nConnection: close\r\n\r\n", ui.port).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 421"), "{answer}");
    assert!(!answer.contains("quickstart"), "{answer}");
    assert!(body.contains("Application &quot;nope&quot; not found in namespace &quot;quickstart&quot;"), "{body}");

    // Live: the event stream announces a change of an Application.
    let mut events = TcpStream::connect(("127.0.0.1", ui.port)).unwrap();
    events.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(events, "GET /events HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut touched = 0;
    testkit::browser::wait_for_event(&mut events, "applications", WAIT, || {
        touched += 1;
        let patch = json!({"metadata": {"labels": {"touched": touched.to_string()}}});
        runtime.block_on(env.apps().patch("api", &PatchParams::default(), &Patch::Merge(&patch))).unwrap();
    });

    // In the browser: an Application created while the page is open appears in its table,
    // without a reload (the page's script fetches the table again on each event).
    let mut live = LivePage::open(&browser, &ui.url("/"));
    wait_for("the open page's table", WAIT, || live.text_of("live").contains("web").then_some(()));
    assert!(!live.text_of("live").contains("late-arrival"), "the new Application is not there yet");
    runtime.block_on(env.create_app(
        "late-arrival",
        json!({"source": {"repository": "platform", "path": "apps/late"}, "serviceAccountName": "deployer",
               "destination": {"namespace": NS}}),
    ));
    wait_for("the new Application drawn in the open page", WAIT, || {
        live.text_of("live").contains("late-arrival").then_some(())
    });
    assert!(live.text_of("live-status").starts_with("Live: updated"), "{}", live.text_of("live-status"));
    drop(live);

    // The table the page's script swaps in on such an event, with the page's filters.
    let (status, fragment) = ui.get("/fragments/applications?health=Degraded");
    assert_eq!(status, 200, "{fragment}");
    assert!(fragment.starts_with("<table id=\"applications\">"), "{fragment}");
    assert!(fragment.contains("data-name=\"web\"") && !fragment.contains("data-name=\"api\""), "{fragment}");

    // A user who may read only the namespace: the Applications of the namespace, and a clear
    // note; another namespace's Application is a 403 page, not a crash.
    let dir = temp_dir("ui-kubeconfig");
    let kubeconfig = runtime.block_on(deployer_kubeconfig(&cluster, &env.client, dir.path()));
    let limited = Ui::start(&kubeconfig);
    let (status, body) = limited.get("/");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("id=\"forbidden\"") && body.contains("showing namespace quickstart only"), "{body}");
    assert!(body.contains("data-name=\"web\""), "{body}");
    let (status, body) = limited.get("/applications/kube-system/web");
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("403 Forbidden") && body.contains("forbidden"), "{body}");
    let forbidden = dom(profile.path(), &limited.url("/applications/kube-system/web"));
    assert!(forbidden.contains("id=\"error\""), "{forbidden}");
    drop(limited);
    drop(ui);
    runtime.block_on(async move { drop(env) });
}

testkit::both!(the_dashboard_shows_the_degraded_application_and_its_root_cause_in_a_browser);
