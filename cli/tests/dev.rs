//! The local quickstart end to end: the real `ksync dev` binary as a child process, read from
//! its output the way a user reads it. It must reach all-Healthy; the commands it prints must
//! work; a commit to its repository must roll out; a hand edit must be repaired on the
//! Application with selfHeal and reported as Drifted on the one without; Ctrl-C (SIGINT) must
//! stop it with status 0, leaving nothing listening and no child process. A second start on the
//! same state directory reuses the repository and deploys its latest commit; killed with
//! SIGKILL, it still leaves no child process.
//!
//! `KSYNC_BIN` runs another `ksync` binary than the one Cargo built for this test (as in
//! `tests/cli.rs`: several checkouts may share a target directory). Both the quickstart's
//! replicas and its `bin/ksync` are that binary.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;
use kuvryn_sync::api::Application;
use kuvryn_sync::api::application::SyncState;
use testkit::{Tools, eventually, git_cmd, run, temp_dir};

/// How long the quickstart may take to reach all-Healthy in a debug build on a busy machine.
const READY: Duration = Duration::from_secs(180);
const WAIT: Duration = Duration::from_secs(90);

fn ksync_bin() -> PathBuf {
    std::env::var_os("KSYNC_BIN").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_ksync")), PathBuf::from)
}

/// A running `ksync dev`, its output lines as they come.
struct Dev {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Dev {
    fn start(state: &Path, tools: &Tools) -> Dev {
        let mut child = Command::new(ksync_bin())
            .args(["dev", "--port", "0", "--color", "never", "--state-dir"])
            .arg(state)
            .env("KSYNC_TOOLS_BIN", &tools.bin)
            .env_remove("RUST_LOG")
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("ksync dev");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                eprintln!("ksync dev | {line}");
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Dev { child, lines, seen: Vec::new() }
    }

    /// The first line (from now on) for which `pick` returns Some.
    fn wait_for<T>(&mut self, what: &str, deadline: Duration, mut pick: impl FnMut(&str) -> Option<T>) -> T {
        let end = Instant::now() + deadline;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if let Some(v) = pick(&line) {
                        return v;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => panic!("timed out after {deadline:?} waiting for {what}"),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    panic!("ksync dev ended ({:?}) before {what}", self.child.try_wait())
                }
            }
        }
    }

    /// Every line so far (and those still buffered).
    fn all(&mut self) -> String {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
        self.seen.join("\n")
    }

    /// Every line, once the output has ended (after the process exited).
    fn rest_of_output(&mut self) -> String {
        let end = Instant::now() + Duration::from_secs(10);
        while let Ok(line) = self.lines.recv_timeout(end.saturating_duration_since(Instant::now())) {
            self.seen.push(line);
        }
        self.seen.join("\n")
    }

    /// The processes `ksync dev` started and that still run.
    fn children(&self) -> Vec<u32> {
        let mut out = Vec::new();
        for task in std::fs::read_dir(format!("/proc/{}/task", self.child.id())).into_iter().flatten().flatten() {
            let list = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            out.extend(list.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
        }
        out
    }

    /// SIGINT, as Ctrl-C in a terminal; the exit status.
    fn interrupt(&mut self) -> std::process::ExitStatus {
        let pid = rustix::process::Pid::from_child(&self.child);
        rustix::process::kill_process(pid, rustix::process::Signal::INT).expect("SIGINT");
        let end = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(Instant::now() < end, "ksync dev did not stop within 60s of SIGINT");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `127.0.0.1` port after `prefix` in `line`.
fn port_after(line: &str, prefix: &str) -> Option<u16> {
    let rest = &line[line.find(prefix)? + prefix.len()..];
    rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

fn listening(port: u16) -> bool {
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    TcpStream::connect_timeout(&addr, Duration::from_millis(300)).is_ok()
}

/// `bash -c script` in `dir`, as a user would type it after `source env.sh`.
fn shell(dir: &Path, script: &str) -> String {
    run(Command::new("bash").arg("-c").arg(script).current_dir(dir).env_remove("KUBECONFIG"))
}

fn short(commit: &str) -> &str {
    &commit[..12]
}

async fn app(client: &kube::Client, name: &str) -> Option<Application> {
    Api::<Application>::namespaced(client.clone(), "quickstart").get(name).await.ok()
}

async fn replicas(client: &kube::Client, name: &str) -> Option<i32> {
    Api::<Deployment>::namespaced(client.clone(), "quickstart").get(name).await.ok()?.spec.replicas
}

fn sync_of(a: &Application) -> Option<SyncState> {
    Some(a.status.as_ref()?.sync.as_ref()?.status)
}

#[test]
fn the_quickstart_deploys_rolls_out_a_commit_heals_and_reports_drift_and_stops_cleanly() {
    let tools = Tools::get();
    let state = temp_dir("dev");
    let mut dev = Dev::start(state.path(), &tools);

    // Start: the ports it listens on, then all-Healthy.
    let api_port = dev.wait_for("the API server line", READY, |l| {
        l.contains("API server (simcluster").then(|| port_after(l, "at http://127.0.0.1:")).flatten()
    });
    let git_port = dev.wait_for("the Git server line", READY, |l| port_after(l, "Git server at git://127.0.0.1:"));
    let ready = dev.wait_for("all-Healthy", READY, |l| {
        l.contains("All 3 Applications are Synced and Healthy at commit").then(|| l.to_string())
    });
    // The next steps follow the first all-Healthy line, ending with where they are saved.
    dev.wait_for("the next steps", WAIT, |l| l.contains("next-steps.txt").then_some(()));
    let output = dev.all();
    let metrics_ports: Vec<u16> = output
        .lines()
        .filter(|l| l.contains(" started: pid "))
        .filter_map(|l| port_after(l, "metrics http://127.0.0.1:"))
        .collect();
    assert_eq!(metrics_ports.len(), 2, "two replicas with metrics:\n{output}");
    for (what, port) in [("API server", api_port), ("Git server", git_port)]
        .into_iter()
        .chain(metrics_ports.iter().map(|p| ("metrics", *p)))
    {
        assert!(listening(port), "{what} on {port} should listen while running");
    }
    for step in ["discovered", "planned:", "is Healthy", "What to try next", "source ", "git push", "kubectl scale"] {
        assert!(output.contains(step), "{step:?} missing from the output:\n{output}");
    }
    let children = dev.children();
    assert!(children.len() >= 3, "two replicas and git daemon run as children: {children:?}");
    eprintln!("{ready}");

    // The printed commands work: `source env.sh`, then kubectl and ksync.
    let env = state.path().join("env.sh");
    let got = shell(state.path(), &format!("source {} && kubectl get app && ksync apps", env.display()));
    for name in ["web", "api", "greeter"] {
        assert!(got.contains(name), "{name} missing from kubectl get app / ksync apps:\n{got}");
    }
    assert!(got.matches("Healthy").count() >= 6, "{got}");

    let runtime = testkit::runtime();
    let client = runtime.block_on(async {
        let kubeconfig = kube::config::Kubeconfig::read_from(state.path().join("kubeconfig")).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
        kube::Client::try_from(config).unwrap()
    });

    // A commit to the working copy it printed rolls out.
    let repo = state.path().join("repo");
    let deployment = repo.join("apps/web/deployment.yaml");
    let text = std::fs::read_to_string(&deployment).unwrap();
    std::fs::write(&deployment, text.replace("replicas: 2", "replicas: 3")).unwrap();
    run(git_cmd(&repo).args(["commit", "--quiet", "-am", "web: 3 replicas"]));
    run(git_cmd(&repo).args(["push", "--quiet"]));
    let commit = run(git_cmd(&repo).args(["rev-parse", "HEAD"])).trim().to_string();
    let want = format!("All 3 Applications are Synced and Healthy at commit {}", short(&commit));
    dev.wait_for("the commit to roll out", READY, |l| l.contains(&want).then_some(()));
    runtime.block_on(async {
        assert_eq!(replicas(&client, "web").await, Some(3));
        let web = app(&client, "web").await.unwrap();
        assert_eq!(web.status.unwrap().sync.unwrap().commit.as_deref(), Some(commit.as_str()));
    });

    // A hand edit (kubectl, its own field manager) of web, which has selfHeal: put back.
    let kubectl =
        |args: &[&str]| run(tools.kubectl(state.path()).env("KUBECONFIG", state.path().join("kubeconfig")).args(args));
    kubectl(&["scale", "deployment", "web", "--replicas=5"]);
    runtime.block_on(async {
        eventually("web's drift to be repaired", WAIT, || async {
            (replicas(&client, "web").await == Some(3)
                && app(&client, "web").await.as_ref().and_then(sync_of) == Some(SyncState::Synced))
            .then_some(())
        })
        .await;
    });
    // The same on api, which has no selfHeal: reported as Drifted, left in place.
    kubectl(&["scale", "deployment", "api", "--replicas=5"]);
    runtime.block_on(async {
        eventually("api to be reported Drifted", WAIT, || async {
            (app(&client, "api").await.as_ref().and_then(sync_of) == Some(SyncState::Drifted)).then_some(())
        })
        .await;
        assert_eq!(replicas(&client, "api").await, Some(5), "a drift without selfHeal is left in place");
    });
    dev.wait_for("the live log to report api Drifted", WAIT, |l| {
        (l.contains(" api ") && l.contains("Drifted")).then_some(())
    });
    drop(client);
    drop(runtime);

    // Ctrl-C: exit 0, nothing listening, no child left.
    let status = dev.interrupt();
    let output = dev.rest_of_output();
    assert!(status.success(), "ksync dev exited with {status} after SIGINT:\n{output}");
    assert!(output.contains("Stopped: nothing is left running"), "{output}");
    for port in [api_port, git_port].into_iter().chain(metrics_ports.iter().copied()) {
        assert!(!listening(port), "port {port} still accepts connections after ksync dev stopped");
    }
    for pid in children {
        assert!(!alive(pid), "a child still runs after ksync dev stopped:\n{}", describe(pid));
    }

    // Again on the same state: the repository (with the commit above) is reused and deployed.
    let mut again = Dev::start(state.path(), &tools);
    again.wait_for("the working copy to be reused", READY, |l| l.contains("kept from the last run").then_some(()));
    again.wait_for("all-Healthy at the last commit", READY, |l| l.contains(&want).then_some(()));
    // Killed outright (no chance to clean up), it still leaves no child behind: each one gets
    // SIGTERM from the kernel when its parent dies.
    let children = again.children();
    assert!(children.len() >= 3, "{children:?}");
    again.child.kill().unwrap();
    again.child.wait().unwrap();
    let end = Instant::now() + Duration::from_secs(30);
    while children.iter().any(|pid| alive(*pid)) {
        if Instant::now() > end {
            let left: Vec<String> = children.iter().filter(|pid| alive(**pid)).map(|pid| describe(*pid)).collect();
            panic!(
                "30s after ksync dev was SIGKILLed, its children still run:\n{}\n{}",
                left.join("\n"),
                replica_logs(state.path())
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `pid`'s state and command line, for a failure message.
fn describe(pid: u32) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    format!("  {pid}: {stat} :: {cmdline}")
}

/// The last lines of each replica's log under `state`, for a failure message.
fn replica_logs(state: &Path) -> String {
    let mut out = String::new();
    for entry in std::fs::read_dir(state.join("logs")).into_iter().flatten().flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        out += &format!("--- {} (last 40 lines)\n", entry.path().display());
        out += &lines[lines.len().saturating_sub(40)..].join("\n");
        out += "\n";
    }
    out
}

/// Whether process `pid` exists and is not a zombie.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().next()) != Some("Z"))
}
