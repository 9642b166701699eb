//! Headless Chromium (Debian's package, or the copy `scripts/install-tools` unpacks) for the
//! dashboard's browser tests: finding it, and a page kept open over the DevTools protocol.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use super::temp_dir;

/// How long one Chromium run may take on a loaded 2-core machine.
pub const BROWSER: Duration = Duration::from_secs(120);

/// Debian's `chromium` on PATH (or scripts/install-tools' tools/bin/chromium there); the test fails,
/// saying how to install it, without it.
pub fn chromium() -> PathBuf {
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("chromium"))
        .find(|p| p.is_file());
    found.unwrap_or_else(|| {
        panic!(
            "chromium is missing: this test drives the dashboard in headless Chromium. Run scripts/install-tools \
             (as root it runs `apt-get install chromium`; as any other user it unpacks Debian's chromium into \
             tools/chromium) and put its tools/bin on PATH, or install Debian's chromium package yourself"
        )
    })
}

/// A page kept open in headless Chromium and driven over the DevTools protocol on a pipe
/// (`--remote-debugging-pipe`: JSON messages, each ended by a NUL byte; Chromium reads fd 3
/// and writes fd 4, here two FIFOs), so the test sees the page change after it loaded.
pub struct LivePage {
    child: Child,
    to: std::fs::File,
    from: std::sync::mpsc::Receiver<serde_json::Value>,
    session: String,
    next: u64,
    _dir: tempfile::TempDir,
}

impl LivePage {
    /// Start `browser` headless and open `url` in a new page.
    pub fn open(browser: &Path, url: &str) -> LivePage {
        let dir = temp_dir("chromium-live");
        let (to_path, from_path) = (dir.path().join("in"), dir.path().join("out"));
        for p in [&to_path, &from_path] {
            let ok = Command::new("mkfifo").arg(p).status().expect("mkfifo").success();
            assert!(ok, "mkfifo {}", p.display());
        }
        let script = r#"exec "$0" --headless=new --no-sandbox --disable-gpu --remote-debugging-pipe \
            --user-data-dir="$1" --window-size=1280,900 about:blank 3<"$2" 4>"$3""#;
        let child = Command::new("bash")
            .args(["-c", script])
            .arg(browser)
            .arg(dir.path().join("profile"))
            .arg(&to_path)
            .arg(&from_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromium");
        // In the order the shell opens them: each open waits for the other end.
        let to = std::fs::OpenOptions::new().write(true).open(&to_path).expect("the pipe to chromium");
        let mut from = std::fs::File::open(&from_path).expect("the pipe from chromium");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut pending = Vec::new();
            let mut buf = [0u8; 65536];
            while let Ok(n) = from.read(&mut buf) {
                if n == 0 {
                    return;
                }
                pending.extend_from_slice(&buf[..n]);
                while let Some(end) = pending.iter().position(|b| *b == 0) {
                    let message: Vec<u8> = pending.drain(..=end).collect();
                    if let Ok(v) = serde_json::from_slice(&message[..end])
                        && tx.send(v).is_err()
                    {
                        return;
                    }
                }
            }
        });
        let mut page = LivePage { child, to, from: rx, session: String::new(), next: 0, _dir: dir };
        let target = page.call("Target.createTarget", json!({"url": url}), false);
        let target = target["targetId"].as_str().expect("targetId").to_string();
        let attached = page.call("Target.attachToTarget", json!({"targetId": target, "flatten": true}), false);
        page.session = attached["sessionId"].as_str().expect("sessionId").to_string();
        page
    }

    /// Send `method` (to the page's session when `in_page`) and wait for its result.
    pub fn call(&mut self, method: &str, params: serde_json::Value, in_page: bool) -> serde_json::Value {
        self.next += 1;
        let id = self.next;
        let mut message = json!({"id": id, "method": method, "params": params});
        if in_page {
            message["sessionId"] = json!(self.session);
        }
        let mut bytes = serde_json::to_vec(&message).unwrap();
        bytes.push(0);
        self.to.write_all(&bytes).expect("writing to chromium");
        let end = Instant::now() + BROWSER;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let m = self.from.recv_timeout(left).unwrap_or_else(|_| panic!("no answer to {method} from chromium"));
            if m["id"] == id {
                assert!(m.get("error").is_none(), "{method}: {m}");
                return m["result"].clone();
            }
        }
    }

    /// The text of the element `id`, empty while it is not there.
    pub fn text_of(&mut self, id: &str) -> String {
        let expression = format!("(document.getElementById('{id}') || {{innerText: ''}}).innerText");
        let r = self.call("Runtime.evaluate", json!({"expression": expression, "returnByValue": true}), true);
        r["result"]["value"].as_str().unwrap_or_default().to_string()
    }
}

impl Drop for LivePage {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl LivePage {
    /// Evaluate `expression` in the page; its value.
    pub fn eval(&mut self, expression: &str) -> serde_json::Value {
        let r = self.call("Runtime.evaluate", json!({"expression": expression, "returnByValue": true}), true);
        r["result"]["value"].clone()
    }
}

/// Read the event stream `stream` (an open `GET /events`, its read timeout short) until it
/// announces `event`, calling `touch` (a change that should cause one) before each read; what was
/// read.
pub fn wait_for_event(
    stream: &mut std::net::TcpStream,
    event: &str,
    deadline: Duration,
    mut touch: impl FnMut(),
) -> String {
    let mut seen = String::new();
    let want = format!("event: {event}");
    super::wait_for(&format!("an `{event}` event after a change"), deadline, || {
        touch();
        let mut buf = [0u8; 4096];
        if let Ok(n) = stream.read(&mut buf) {
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        seen.contains(&want).then_some(())
    });
    seen
}
