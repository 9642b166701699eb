//! The kubelet's per-Pod state machine, pure: [`PodSim::step`] moves every container through
//! pull, create, start, ready, exit and back-off at a given clock time, returns the Events a real
//! kubelet would record, and [`PodSim::status`] renders the Pod status it would write. No I/O:
//! ConfigMaps, Secrets and PersistentVolumeClaims are looked up through [`Lookup`].

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::state::Timing;

/// Annotation prefix of the per-Pod delay overrides (`simcluster.kuvryn.io/pull-ms`, ...).
pub const ANNOTATION_PREFIX: &str = "simcluster.kuvryn.io/";
/// Container env var: the container exits with this code after its run time.
pub const ENV_EXIT_CODE: &str = "SIMCLUSTER_EXIT_CODE";
/// Container env var: how long the container runs before it exits (ms).
pub const ENV_RUN_MS: &str = "SIMCLUSTER_RUN_MS";
/// Container env var `true`: the container is OOM-killed (exit code 137) after its run time.
pub const ENV_OOM_KILLED: &str = "SIMCLUSTER_OOM_KILLED";
/// Container env var `false`: the container runs but never becomes ready.
pub const ENV_READY: &str = "SIMCLUSTER_READY";

/// How long a transient state (`ErrImagePull`, a just-terminated container) shows before the
/// kubelet's next sync moves on: a fifth of the first back-off, 50 ms to 1 s.
fn sync_ms(t: &Timing) -> u64 {
    (t.backoff_ms / 5).clamp(50, 1000)
}

/// The Pod's timing: the global one with its `simcluster.kuvryn.io/<name>-ms` annotations
/// applied (`schedule`, `pull`, `start`, `ready`, `run`, `backoff`, `backoff-max`); the
/// back-off is at least [`MIN_BACKOFF_MS`] and `backoff_max_ms` at least `backoff_ms`.
pub fn timing_for(base: &Timing, pod: &Value) -> Timing {
    let mut t = base.clone();
    let ann = &pod["metadata"]["annotations"];
    let get = |k: &str| ann[format!("{ANNOTATION_PREFIX}{k}-ms")].as_str().and_then(|v| v.trim().parse::<u64>().ok());
    for (k, slot) in [
        ("schedule", &mut t.schedule_ms),
        ("pull", &mut t.pull_ms),
        ("start", &mut t.start_ms),
        ("ready", &mut t.ready_ms),
        ("run", &mut t.run_ms),
        ("backoff", &mut t.backoff_ms),
        ("backoff-max", &mut t.backoff_max_ms),
    ] {
        if let Some(v) = get(k) {
            *slot = v;
        }
    }
    // A zero back-off would make a failing container spin.
    t.backoff_ms = t.backoff_ms.max(MIN_BACKOFF_MS);
    t.backoff_max_ms = t.backoff_max_ms.max(t.backoff_ms);
    t
}

/// The shortest back-off (a smaller `backoff_ms` is raised to it).
pub const MIN_BACKOFF_MS: u64 = 50;

/// Object lookups the kubelet needs (`configmaps`, `secrets`, `persistentvolumeclaims`).
pub trait Lookup {
    /// The object, if it exists.
    fn get(&self, resource: &str, namespace: &str, name: &str) -> Option<Value>;
}

/// An Event the kubelet records about the Pod.
#[derive(Clone, Debug, PartialEq)]
pub struct Ev {
    /// `Normal` or `Warning`.
    pub type_: &'static str,
    /// Reason.
    pub reason: &'static str,
    /// Message.
    pub message: String,
    /// `spec.containers{app}` for container events.
    pub field_path: Option<String>,
}

/// Go's `time.Duration` string of whole milliseconds (`500ms`, `10s`, `1m20s`, `5m0s`).
pub fn go_duration(ms: u64) -> String {
    if ms == 0 {
        return "0s".into();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (h, m, s, rest) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    let secs = if rest == 0 { format!("{s}s") } else { format!("{s}.{}s", format!("{rest:03}").trim_end_matches('0')) };
    match (h, m) {
        (0, 0) => secs,
        (0, m) => format!("{m}m{secs}"),
        (h, m) => format!("{h}h{m}m{secs}"),
    }
}

/// RFC 3339 (seconds) of a clock time in ms.
pub fn rfc3339(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms).map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()).unwrap_or_default()
}

fn hex_digest(parts: &[&str]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether pulling `image` fails: its registry host ends in `.invalid` or its tag is
/// `nonexistent`.
pub fn pull_fails(image: &str) -> bool {
    let (name, _) = image.split_once('@').unwrap_or((image, ""));
    let host = name.split('/').next().unwrap_or_default();
    let has_host = name.contains('/') && (host.contains('.') || host.contains(':') || host == "localhost");
    let last = name.rsplit('/').next().unwrap_or_default();
    let tag = last.split_once(':').map(|(_, t)| t).unwrap_or_default();
    (has_host && host.split(':').next().unwrap_or_default().ends_with(".invalid")) || tag == "nonexistent"
}

/// An image reference as the container runtime reports it: `nginx` →
/// `docker.io/library/nginx:latest`, `org/app:1` → `docker.io/org/app:1`.
pub fn normalize_image(image: &str) -> String {
    let first = image.split('/').next().unwrap_or_default();
    let has_host = image.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    let mut full = if has_host {
        image.to_string()
    } else if image.contains('/') {
        format!("docker.io/{image}")
    } else {
        format!("docker.io/library/{image}")
    };
    let last = full.rsplit('/').next().unwrap_or_default();
    if !last.contains(':') && !last.contains('@') {
        full.push_str(":latest");
    }
    full
}

/// The repository of an image reference (without tag or digest).
fn repository(image: &str) -> &str {
    let name = image.split('@').next().unwrap_or(image);
    match name.rfind(':') {
        Some(i) if !name[i..].contains('/') => &name[..i],
        _ => name,
    }
}

/// What the Pod spec asks of one container.
#[derive(Clone, Debug)]
struct Behaviour {
    exit_code: Option<i64>,
    oom: bool,
    never_ready: bool,
    run_ms: Option<u64>,
    pull_policy: String,
    probe: Option<Value>,
}

impl Behaviour {
    fn of(c: &Value) -> Behaviour {
        let env = |name: &str| {
            c["env"].as_array().into_iter().flatten().find(|e| e["name"] == name).and_then(|e| e["value"].as_str())
        };
        let image = c["image"].as_str().unwrap_or_default();
        let default_policy = if image.ends_with(":latest") || !image.rsplit('/').next().unwrap_or("").contains(':') {
            "Always"
        } else {
            "IfNotPresent"
        };
        Behaviour {
            exit_code: env(ENV_EXIT_CODE).and_then(|v| v.trim().parse().ok()),
            oom: env(ENV_OOM_KILLED).is_some_and(|v| v.eq_ignore_ascii_case("true")),
            never_ready: env(ENV_READY).is_some_and(|v| v.eq_ignore_ascii_case("false")),
            run_ms: env(ENV_RUN_MS).and_then(|v| v.trim().parse().ok()),
            pull_policy: c["imagePullPolicy"].as_str().unwrap_or(default_policy).to_string(),
            probe: c.get("readinessProbe").filter(|p| p.is_object()).cloned(),
        }
    }
}

/// Where a container is.
#[derive(Clone, Debug, PartialEq)]
enum Stage {
    /// Not tried yet (waits for volumes or earlier init containers).
    Waiting,
    Pulling {
        since: i64,
        until: i64,
    },
    /// `ErrImagePull` (or `ErrImageNeverPull`) until the next sync.
    PullFailed {
        until: i64,
        reason: &'static str,
        message: String,
    },
    PullBackOff {
        until: i64,
        message: String,
    },
    ConfigError {
        retry: i64,
        message: String,
    },
    Starting {
        until: i64,
    },
    Running {
        since: i64,
        ready: bool,
        ready_at: Option<i64>,
        exit_at: Option<i64>,
        probe_event: Option<i64>,
    },
    /// Terminated and about to be restarted (shown until the next sync).
    Exited {
        until: i64,
        term: Value,
    },
    CrashBackOff {
        until: i64,
        message: String,
    },
    /// Terminated for good.
    Done {
        term: Value,
        code: i64,
    },
}

#[derive(Clone, Debug)]
struct Container {
    name: String,
    image: String,
    init: bool,
    /// An init container with `restartPolicy: Always`.
    sidecar: bool,
    spec: Value,
    b: Behaviour,
    stage: Stage,
    restarts: u32,
    last_term: Option<Value>,
    crash_backoff: u64,
    pull_backoff: u64,
    pulled_once: bool,
}

impl Container {
    fn field_path(&self) -> String {
        if self.init {
            format!("spec.initContainers{{{}}}", self.name)
        } else {
            format!("spec.containers{{{}}}", self.name)
        }
    }

    fn id(&self, uid: &str) -> String {
        format!("containerd://{}", hex_digest(&[uid, &self.name, &self.restarts.to_string()]))
    }

    fn running(&self) -> bool {
        matches!(self.stage, Stage::Running { .. })
    }

    fn succeeded(&self) -> bool {
        matches!(self.stage, Stage::Done { code: 0, .. })
    }
}

/// One Pod as its kubelet sees it.
#[derive(Clone, Debug)]
pub struct PodSim {
    namespace: String,
    name: String,
    uid: String,
    restart_policy: String,
    timing: Timing,
    containers: Vec<Container>,
    volumes: Vec<Value>,
    /// Why volumes cannot be mounted, and when to retry (and record FailedMount again).
    mount: Option<(String, i64)>,
    mount_backoff: u64,
    /// `status.startTime`.
    pub start_time: String,
    /// `status.podIP`.
    pub pod_ip: String,
}

impl PodSim {
    /// A Pod first seen by its kubelet at `now` (ms), with the IP it is given.
    pub fn new(pod: &Value, base: &Timing, now: i64, pod_ip: String) -> PodSim {
        let timing = timing_for(base, pod);
        let spec = &pod["spec"];
        let mut containers = Vec::new();
        for (key, init) in [("initContainers", true), ("containers", false)] {
            for c in spec[key].as_array().into_iter().flatten() {
                containers.push(Container {
                    name: c["name"].as_str().unwrap_or_default().to_string(),
                    image: c["image"].as_str().unwrap_or_default().to_string(),
                    init,
                    sidecar: init && c["restartPolicy"] == "Always",
                    spec: c.clone(),
                    b: Behaviour::of(c),
                    stage: Stage::Waiting,
                    restarts: 0,
                    last_term: None,
                    crash_backoff: timing.backoff_ms,
                    pull_backoff: timing.backoff_ms,
                    pulled_once: false,
                });
            }
        }
        PodSim {
            namespace: pod["metadata"]["namespace"].as_str().unwrap_or_default().to_string(),
            name: pod["metadata"]["name"].as_str().unwrap_or_default().to_string(),
            uid: pod["metadata"]["uid"].as_str().unwrap_or_default().to_string(),
            restart_policy: spec["restartPolicy"].as_str().unwrap_or("Always").to_string(),
            containers,
            volumes: spec["volumes"].as_array().cloned().unwrap_or_default(),
            mount: None,
            mount_backoff: timing.backoff_ms,
            timing,
            start_time: rfc3339(now),
            pod_ip,
        }
    }

    fn pod_ref(&self) -> String {
        format!("{}_{}({})", self.name, self.namespace, self.uid)
    }

    /// Re-check missing ConfigMaps, Secrets and claims now (one of them changed).
    pub fn poke(&mut self, now: i64) {
        if let Some((_, retry)) = &mut self.mount {
            *retry = (*retry).min(now);
        }
        for c in &mut self.containers {
            if let Stage::ConfigError { retry, .. } = &mut c.stage {
                *retry = (*retry).min(now);
            }
        }
    }

    /// Whether the Pod waits for a ConfigMap, Secret or claim to appear.
    pub fn blocked(&self) -> bool {
        self.mount.is_some() || self.containers.iter().any(|c| matches!(c.stage, Stage::ConfigError { .. }))
    }

    /// The earliest time something happens by itself.
    pub fn next_deadline(&self) -> Option<i64> {
        if self.terminal() {
            return None;
        }
        let mut times: Vec<i64> = Vec::new();
        if let Some((_, retry)) = &self.mount {
            times.push(*retry);
        }
        for c in &self.containers {
            match &c.stage {
                Stage::Pulling { until, .. }
                | Stage::PullFailed { until, .. }
                | Stage::PullBackOff { until, .. }
                | Stage::Starting { until }
                | Stage::Exited { until, .. }
                | Stage::CrashBackOff { until, .. } => times.push(*until),
                Stage::ConfigError { retry, .. } => times.push(*retry),
                Stage::Running { ready_at, exit_at, probe_event, .. } => {
                    times.extend([*ready_at, *exit_at, *probe_event].into_iter().flatten())
                }
                Stage::Waiting | Stage::Done { .. } => {}
            }
        }
        times.into_iter().min()
    }

    /// Whether the Pod has reached Succeeded or Failed.
    pub fn terminal(&self) -> bool {
        matches!(self.phase(), "Succeeded" | "Failed")
    }

    /// Advance to `now`: every transition due, in order; the Events recorded on the way.
    /// `images` is the Node's image cache.
    pub fn step(&mut self, now: i64, lookup: &dyn Lookup, images: &mut HashSet<String>) -> Vec<Ev> {
        let mut events = Vec::new();
        if self.terminal() {
            return events;
        }
        // Volumes first: no container starts before every volume can be mounted.
        if self.containers.iter().all(|c| c.stage == Stage::Waiting) {
            let due = self.mount.as_ref().is_none_or(|(_, retry)| *retry <= now);
            if due {
                match self.volume_error(lookup) {
                    Some(message) => {
                        events.push(Ev {
                            type_: "Warning",
                            reason: "FailedMount",
                            message: message.clone(),
                            field_path: None,
                        });
                        self.mount = Some((message, now + self.mount_backoff as i64));
                        self.mount_backoff = (self.mount_backoff * 2).min(self.timing.backoff_max_ms);
                        return events;
                    }
                    None => self.mount = None,
                }
            } else {
                return events;
            }
        }
        for _ in 0..64 {
            let before = events.len();
            let mut changed = false;
            let mut inits_done = true;
            for i in 0..self.containers.len() {
                if self.containers[i].init {
                    if !inits_done {
                        break;
                    }
                    changed |= self.advance(i, now, lookup, images, &mut events);
                    let c = &self.containers[i];
                    let ok = if c.sidecar { c.running() } else { c.succeeded() };
                    inits_done &= ok;
                } else if inits_done {
                    changed |= self.advance(i, now, lookup, images, &mut events);
                }
            }
            if !changed && events.len() == before {
                break;
            }
        }
        events
    }

    fn volume_error(&self, lookup: &dyn Lookup) -> Option<String> {
        let ns = &self.namespace;
        for v in &self.volumes {
            let vname = v["name"].as_str().unwrap_or_default();
            let setup = |what: &str, name: &str| {
                format!("MountVolume.SetUp failed for volume \"{vname}\" : {what} \"{name}\" not found")
            };
            if let Some(cm) = v.get("configMap") {
                let name = cm["name"].as_str().unwrap_or_default();
                if cm["optional"] != true && lookup.get("configmaps", ns, name).is_none() {
                    return Some(setup("configmap", name));
                }
            }
            if let Some(s) = v.get("secret") {
                let name = s["secretName"].as_str().unwrap_or_default();
                if s["optional"] != true && lookup.get("secrets", ns, name).is_none() {
                    return Some(setup("secret", name));
                }
            }
            for src in v["projected"]["sources"].as_array().into_iter().flatten() {
                for (key, res, what) in [("configMap", "configmaps", "configmap"), ("secret", "secrets", "secret")] {
                    if let Some(r) = src.get(key) {
                        let name = r["name"].as_str().unwrap_or_default();
                        if r["optional"] != true && lookup.get(res, ns, name).is_none() {
                            return Some(setup(what, name));
                        }
                    }
                }
            }
            if let Some(claim) = v["persistentVolumeClaim"]["claimName"].as_str() {
                let prefix = format!(
                    "Unable to attach or mount volumes: unmounted volumes=[{vname}], unattached volumes=[], failed to process volumes=[{vname}]: error processing PVC {ns}/{claim}"
                );
                match lookup.get("persistentvolumeclaims", ns, claim) {
                    None => {
                        return Some(format!(
                            "{prefix}: failed to fetch PVC from API server: persistentvolumeclaims \"{claim}\" not found"
                        ));
                    }
                    Some(pvc) if pvc["status"]["phase"] != "Bound" => {
                        return Some(format!("{prefix}: PVC is not bound"));
                    }
                    Some(_) => {}
                }
            }
        }
        None
    }

    fn config_error(&self, c: &Container, lookup: &dyn Lookup) -> Option<String> {
        let ns = &self.namespace;
        for e in c.spec["env"].as_array().into_iter().flatten() {
            for (key, res, kind, what) in [
                ("configMapKeyRef", "configmaps", "ConfigMap", "configmap"),
                ("secretKeyRef", "secrets", "Secret", "secret"),
            ] {
                let r = &e["valueFrom"][key];
                if !r.is_object() || r["optional"] == true {
                    continue;
                }
                let name = r["name"].as_str().unwrap_or_default();
                let k = r["key"].as_str().unwrap_or_default();
                match lookup.get(res, ns, name) {
                    None => return Some(format!("{what} \"{name}\" not found")),
                    Some(o) if o["data"].get(k).is_none() && o["binaryData"].get(k).is_none() => {
                        return Some(format!("couldn't find key {k} in {kind} {ns}/{name}"));
                    }
                    Some(_) => {}
                }
            }
        }
        for e in c.spec["envFrom"].as_array().into_iter().flatten() {
            for (key, res, what) in [("configMapRef", "configmaps", "configmap"), ("secretRef", "secrets", "secret")] {
                let r = &e[key];
                if !r.is_object() || r["optional"] == true {
                    continue;
                }
                let name = r["name"].as_str().unwrap_or_default();
                if lookup.get(res, ns, name).is_none() {
                    return Some(format!("{what} \"{name}\" not found"));
                }
            }
        }
        None
    }

    /// Whether a container that exited with `code` is restarted.
    fn restarts(&self, c: &Container, code: i64) -> bool {
        if c.sidecar {
            return true;
        }
        match self.restart_policy.as_str() {
            "Never" => false,
            "OnFailure" => code != 0,
            _ => !c.init || code != 0,
        }
    }

    /// The exit of a running container: (exit code, reason), or `None` if it runs forever.
    fn exit_of(&self, c: &Container) -> Option<(i64, &'static str)> {
        if c.b.oom {
            return Some((137, "OOMKilled"));
        }
        if let Some(code) = c.b.exit_code {
            return Some((code, if code == 0 { "Completed" } else { "Error" }));
        }
        if c.init && !c.sidecar || self.restart_policy != "Always" {
            return Some((0, "Completed"));
        }
        None
    }

    /// One transition of container `i` if one is due; whether something changed.
    fn advance(
        &mut self,
        i: usize,
        now: i64,
        lookup: &dyn Lookup,
        images: &mut HashSet<String>,
        ev: &mut Vec<Ev>,
    ) -> bool {
        let t = self.timing.clone();
        let c = self.containers[i].clone();
        let fp = Some(c.field_path());
        let mut push = |type_: &'static str, reason: &'static str, message: String| {
            ev.push(Ev { type_, reason, message, field_path: fp.clone() })
        };
        let image = &c.image;
        let next = match &c.stage {
            Stage::Waiting => {
                let present = images.contains(image);
                match c.b.pull_policy.as_str() {
                    "Never" if !present => {
                        let message = format!("Container image \"{image}\" is not present with pull policy of Never");
                        push("Warning", "ErrImageNeverPull", message.clone());
                        Stage::PullFailed { until: now + sync_ms(&t) as i64, reason: "ErrImageNeverPull", message }
                    }
                    "Always" => {
                        push("Normal", "Pulling", format!("Pulling image \"{image}\""));
                        Stage::Pulling { since: now, until: now + t.pull_ms as i64 }
                    }
                    _ if !present => {
                        push("Normal", "Pulling", format!("Pulling image \"{image}\""));
                        Stage::Pulling { since: now, until: now + t.pull_ms as i64 }
                    }
                    _ => {
                        push("Normal", "Pulled", format!("Container image \"{image}\" already present on machine"));
                        self.configure(&c, now, lookup, &mut push)
                    }
                }
            }
            Stage::Pulling { since, until } if *until <= now => {
                if pull_fails(image) {
                    let err = format!(
                        "rpc error: code = NotFound desc = failed to pull and unpack image \"{image}\": failed to resolve reference \"{image}\": {image}: not found"
                    );
                    push("Warning", "Failed", format!("Failed to pull image \"{image}\": {err}"));
                    push("Warning", "Failed", "Error: ErrImagePull".to_string());
                    Stage::PullFailed { until: now + sync_ms(&t) as i64, reason: "ErrImagePull", message: err }
                } else {
                    images.insert(image.clone());
                    let took = go_duration((now - since).max(0) as u64);
                    let size = 10_000_000 + u64::from_str_radix(&hex_digest(&[image])[..6], 16).unwrap_or(0);
                    push(
                        "Normal",
                        "Pulled",
                        format!(
                            "Successfully pulled image \"{image}\" in {took} ({took} including waiting). Image size: {size} bytes."
                        ),
                    );
                    self.containers[i].pulled_once = true;
                    self.configure(&c, now, lookup, &mut push)
                }
            }
            Stage::PullFailed { until, reason, message } if *until <= now => {
                let backoff = self.containers[i].pull_backoff;
                self.containers[i].pull_backoff = (backoff * 2).min(t.backoff_max_ms);
                if *reason == "ErrImageNeverPull" {
                    // Checked again after the back-off, still ErrImageNeverPull.
                    Stage::PullFailed { until: now + backoff as i64, reason, message: message.clone() }
                } else {
                    push("Normal", "BackOff", format!("Back-off pulling image \"{image}\""));
                    push("Warning", "Failed", "Error: ImagePullBackOff".to_string());
                    Stage::PullBackOff {
                        until: now + backoff as i64,
                        message: format!("Back-off pulling image \"{image}\": ErrImagePull: {message}"),
                    }
                }
            }
            Stage::PullBackOff { until, .. } if *until <= now => Stage::Waiting,
            Stage::ConfigError { retry, .. } if *retry <= now => self.configure(&c, now, lookup, &mut push),
            Stage::Starting { until } if *until <= now => {
                push("Normal", "Created", format!("Created container: {}", c.name));
                push("Normal", "Started", format!("Started container {}", c.name));
                let run = c.b.run_ms.unwrap_or(t.run_ms) as i64;
                let exit_at = self.exit_of(&c).map(|_| now + run);
                let ready_at =
                    if c.b.never_ready || c.init && !c.sidecar { None } else { Some(now + t.ready_ms as i64) };
                let probe_event =
                    if c.b.never_ready && c.b.probe.is_some() { Some(now + t.ready_ms as i64) } else { None };
                Stage::Running { since: now, ready: false, ready_at, exit_at, probe_event }
            }
            Stage::Running { since, ready, ready_at, exit_at, probe_event } => {
                if let Some(at) = exit_at.filter(|at| *at <= now) {
                    let (code, reason) = self.exit_of(&c).unwrap_or((0, "Completed"));
                    let term = json!({"exitCode": code, "reason": reason, "startedAt": rfc3339(*since),
                                      "finishedAt": rfc3339(at), "containerID": c.id(&self.uid)});
                    if self.restarts(&c, code) {
                        Stage::Exited { until: now + sync_ms(&t) as i64, term }
                    } else {
                        Stage::Done { term, code }
                    }
                } else if let Some(at) = probe_event.filter(|at| *at <= now) {
                    push(
                        "Warning",
                        "Unhealthy",
                        format!("Readiness probe failed: {}", probe_failure(&c, &self.pod_ip)),
                    );
                    let period = c.b.probe.as_ref().and_then(|p| p["periodSeconds"].as_i64()).unwrap_or(10).max(1);
                    Stage::Running {
                        since: *since,
                        ready: *ready,
                        ready_at: *ready_at,
                        exit_at: *exit_at,
                        probe_event: Some(at + period * 1000),
                    }
                } else if ready_at.is_some_and(|at| at <= now) {
                    Stage::Running {
                        since: *since,
                        ready: true,
                        ready_at: None,
                        exit_at: *exit_at,
                        probe_event: *probe_event,
                    }
                } else {
                    return false;
                }
            }
            Stage::Exited { until, term } if *until <= now => {
                self.containers[i].last_term = Some(term.clone());
                if c.restarts == 0 {
                    // The first restart is immediate; back-off starts with the second.
                    self.containers[i].restarts += 1;
                    Stage::Waiting
                } else {
                    let backoff = self.containers[i].crash_backoff;
                    self.containers[i].crash_backoff = (backoff * 2).min(t.backoff_max_ms);
                    push(
                        "Warning",
                        "BackOff",
                        format!("Back-off restarting failed container {} in pod {}", c.name, self.pod_ref()),
                    );
                    Stage::CrashBackOff {
                        until: now + backoff as i64,
                        message: format!(
                            "back-off {} restarting failed container={} pod={}",
                            go_duration(backoff),
                            c.name,
                            self.pod_ref()
                        ),
                    }
                }
            }
            Stage::CrashBackOff { until, .. } if *until <= now => {
                self.containers[i].restarts += 1;
                Stage::Waiting
            }
            _ => return false,
        };
        let changed = next != self.containers[i].stage;
        self.containers[i].stage = next;
        changed
    }

    /// After the image is there: the container's config (env), then creation.
    fn configure(
        &self,
        c: &Container,
        now: i64,
        lookup: &dyn Lookup,
        push: &mut impl FnMut(&'static str, &'static str, String),
    ) -> Stage {
        match self.config_error(c, lookup) {
            Some(message) => {
                push("Warning", "Failed", format!("Error: {message}"));
                Stage::ConfigError { retry: now + self.timing.backoff_ms as i64, message }
            }
            None => Stage::Starting { until: now + self.timing.start_ms as i64 },
        }
    }

    /// The Pod phase, as the kubelet's `getPhase` computes it.
    pub fn phase(&self) -> &'static str {
        let inits: Vec<&Container> = self.containers.iter().filter(|c| c.init && !c.sidecar).collect();
        if inits.iter().any(|c| matches!(c.stage, Stage::Done { code, .. } if code != 0)) {
            return "Failed";
        }
        if !inits.iter().all(|c| c.succeeded()) {
            return "Pending";
        }
        let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
        for c in self.containers.iter().filter(|c| !c.init) {
            match &c.stage {
                Stage::Running { .. } => running += 1,
                Stage::Done { code, .. } => {
                    stopped += 1;
                    if *code == 0 {
                        succeeded += 1;
                    }
                }
                Stage::Exited { .. } => stopped += 1,
                _ if c.last_term.is_some() => stopped += 1,
                _ => waiting += 1,
            }
        }
        if waiting > 0 {
            "Pending"
        } else if running > 0 {
            "Running"
        } else if stopped > 0 {
            if self.restart_policy == "Always" {
                "Running"
            } else if stopped == succeeded {
                "Succeeded"
            } else if self.restart_policy == "OnFailure" {
                "Running"
            } else {
                "Failed"
            }
        } else {
            "Pending"
        }
    }

    fn container_ready(&self, c: &Container, node_ready: bool) -> bool {
        node_ready && matches!(c.stage, Stage::Running { ready: true, .. })
    }

    /// The status the kubelet writes (merge-patched: lists replace the old ones). `current` is
    /// the Pod as stored (its conditions keep their lastTransitionTime when unchanged).
    pub fn status(&self, now: i64, node_ready: bool, host_ip: &str, host_network: bool, current: &Value) -> Value {
        let phase = self.phase();
        let terminal = matches!(phase, "Succeeded" | "Failed");
        let mains: Vec<&Container> = self.containers.iter().filter(|c| !c.init).collect();
        let unready: Vec<&str> =
            mains.iter().filter(|c| !self.container_ready(c, node_ready)).map(|c| c.name.as_str()).collect();
        let uninit: Vec<&str> = self
            .containers
            .iter()
            .filter(|c| c.init && !(if c.sidecar { c.running() } else { c.succeeded() }))
            .map(|c| c.name.as_str())
            .collect();
        let old = current["status"]["conditions"].as_array().cloned().unwrap_or_default();
        let now_s = rfc3339(now);
        let cond = |type_: &str, ok: bool, reason: Option<&str>, message: Option<String>| {
            let status = if ok { "True" } else { "False" };
            let ltt = old
                .iter()
                .find(|c| c["type"] == type_ && c["status"] == status)
                .and_then(|c| c["lastTransitionTime"].as_str().map(String::from))
                .unwrap_or_else(|| now_s.clone());
            let mut c = json!({"type": type_, "status": status, "lastProbeTime": null, "lastTransitionTime": ltt});
            if let Some(r) = reason {
                c["reason"] = json!(r);
            }
            if let Some(m) = message {
                c["message"] = json!(m);
            }
            c
        };
        let list = |names: &[&str]| format!("[{}]", names.join(" "));
        let mut conditions = vec![cond("PodReadyToStartContainers", !terminal, None, None)];
        if terminal {
            conditions.push(cond("Initialized", uninit.is_empty(), Some("PodCompleted"), None));
            conditions.push(cond("Ready", false, Some("PodCompleted"), None));
            conditions.push(cond("ContainersReady", false, Some("PodCompleted"), None));
        } else {
            if uninit.is_empty() {
                conditions.push(cond("Initialized", true, None, None));
            } else {
                let m = format!("containers with incomplete status: {}", list(&uninit));
                conditions.push(cond("Initialized", false, Some("ContainersNotInitialized"), Some(m)));
            }
            if unready.is_empty() {
                conditions.push(cond("Ready", true, None, None));
                conditions.push(cond("ContainersReady", true, None, None));
            } else {
                let m = format!("containers with unready status: {}", list(&unready));
                conditions.push(cond("Ready", false, Some("ContainersNotReady"), Some(m.clone())));
                conditions.push(cond("ContainersReady", false, Some("ContainersNotReady"), Some(m)));
            }
        }
        conditions.extend(old.iter().filter(|c| c["type"] == "PodScheduled").cloned());
        let pod_ip = if host_network { host_ip.to_string() } else { self.pod_ip.clone() };
        let mut status = json!({
            "phase": phase,
            "conditions": conditions,
            "hostIP": host_ip, "hostIPs": [{"ip": host_ip}],
            "podIP": pod_ip, "podIPs": [{"ip": pod_ip}],
            "startTime": self.start_time,
            "containerStatuses": mains.iter().map(|c| self.container_status(c, node_ready, uninit.is_empty())).collect::<Vec<_>>(),
        });
        if self.containers.iter().any(|c| c.init) {
            status["initContainerStatuses"] =
                self.containers.iter().filter(|c| c.init).map(|c| self.container_status(c, node_ready, true)).collect();
        }
        status
    }

    fn container_status(&self, c: &Container, node_ready: bool, inits_done: bool) -> Value {
        let waiting = |reason: &str, message: Option<&String>| match message {
            Some(m) => json!({"waiting": {"reason": reason, "message": m}}),
            None => json!({"waiting": {"reason": reason}}),
        };
        let id = c.id(&self.uid);
        let (state, created) = match &c.stage {
            Stage::Waiting if !inits_done || c.init && self.mount.is_some() => {
                (waiting("PodInitializing", None), false)
            }
            Stage::Waiting | Stage::Pulling { .. } | Stage::Starting { .. } => {
                (waiting("ContainerCreating", None), false)
            }
            Stage::PullFailed { reason, message, .. } => (waiting(reason, Some(message)), false),
            Stage::PullBackOff { message, .. } => (waiting("ImagePullBackOff", Some(message)), false),
            Stage::ConfigError { message, .. } => (waiting("CreateContainerConfigError", Some(message)), false),
            Stage::Running { since, .. } => (json!({"running": {"startedAt": rfc3339(*since)}}), true),
            Stage::Exited { term, .. } | Stage::Done { term, .. } => (json!({"terminated": term}), true),
            Stage::CrashBackOff { message, .. } => (waiting("CrashLoopBackOff", Some(message)), false),
        };
        let last = c.last_term.as_ref().map(|t| json!({"terminated": t})).unwrap_or_else(|| json!({}));
        let ever_created = created || c.last_term.is_some();
        let image = normalize_image(&c.image);
        let image_id = if ever_created || c.pulled_once {
            format!("{}@sha256:{}", repository(&image), hex_digest(&[&image]))
        } else {
            String::new()
        };
        let mut s = json!({
            "name": c.name,
            "state": state,
            "lastState": last,
            "ready": self.container_ready(c, node_ready),
            "restartCount": c.restarts,
            "image": image,
            "imageID": image_id,
            "started": c.running(),
        });
        if created {
            s["containerID"] = json!(id);
        } else if let Some(t) = &c.last_term {
            s["containerID"] = t["containerID"].clone();
        }
        s
    }
}

/// The message of a failing readiness probe, by probe type.
fn probe_failure(c: &Container, pod_ip: &str) -> String {
    let p = c.b.probe.as_ref().cloned().unwrap_or(Value::Null);
    let port = |v: &Value| match &v["port"] {
        Value::Number(n) => n.to_string(),
        Value::String(s) => c.spec["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|cp| cp["name"] == s.as_str())
            .map(|cp| cp["containerPort"].to_string())
            .unwrap_or_else(|| s.clone()),
        _ => "80".into(),
    };
    if p["httpGet"].is_object() {
        "HTTP probe failed with statuscode: 503".to_string()
    } else if p["tcpSocket"].is_object() {
        format!("dial tcp {pod_ip}:{}: connect: connection refused", port(&p["tcpSocket"]))
    } else if p["grpc"].is_object() {
        format!("timeout: failed to connect service \"{pod_ip}:{}\" within 1s", port(&p["grpc"]))
    } else {
        String::new()
    }
}

impl PodSim {
    /// The running containers: (name, field path), for `Killing` Events.
    pub fn running_containers(&self) -> Vec<(String, String)> {
        self.containers.iter().filter(|c| c.running()).map(|c| (c.name.clone(), c.field_path())).collect()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[derive(Default)]
    struct Objects(HashMap<(String, String), Value>);

    impl Lookup for Objects {
        fn get(&self, resource: &str, _namespace: &str, name: &str) -> Option<Value> {
            self.0.get(&(resource.to_string(), name.to_string())).cloned()
        }
    }

    fn pod(containers: Value, restart_policy: &str) -> Value {
        json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
               "spec": {"restartPolicy": restart_policy, "containers": containers}})
    }

    /// Step at every deadline until `until`; all Events.
    fn run(sim: &mut PodSim, from: i64, until: i64, lookup: &dyn Lookup) -> Vec<Ev> {
        let mut images = HashSet::new();
        let mut now = from;
        let mut events = sim.step(now, lookup, &mut images);
        while let Some(next) = sim.next_deadline() {
            if next > until {
                break;
            }
            now = next.max(now);
            events.extend(sim.step(now, lookup, &mut images));
        }
        events
    }

    fn reasons(events: &[Ev]) -> Vec<&str> {
        events.iter().map(|e| e.reason).collect()
    }

    #[test]
    fn durations_read_as_go_prints_them() {
        assert_eq!(go_duration(0), "0s");
        assert_eq!(go_duration(500), "500ms");
        assert_eq!(go_duration(10_000), "10s");
        assert_eq!(go_duration(1_500), "1.5s");
        assert_eq!(go_duration(80_000), "1m20s");
        assert_eq!(go_duration(300_000), "5m0s");
    }

    #[test]
    fn images_as_the_runtime_reports_them() {
        assert_eq!(normalize_image("nginx"), "docker.io/library/nginx:latest");
        assert_eq!(normalize_image("nginx:1.25"), "docker.io/library/nginx:1.25");
        assert_eq!(normalize_image("org/app:1"), "docker.io/org/app:1");
        assert_eq!(normalize_image("registry.example.com/web:1.0"), "registry.example.com/web:1.0");
        assert_eq!(normalize_image("localhost:5000/app"), "localhost:5000/app:latest");
        assert_eq!(repository("localhost:5000/app:1"), "localhost:5000/app");
    }

    #[test]
    fn failing_images() {
        assert!(pull_fails("registry.invalid/app:1"));
        assert!(pull_fails("registry.invalid:5000/app"));
        assert!(pull_fails("nginx:nonexistent"));
        assert!(!pull_fails("registry.example.com/app:1"));
        assert!(!pull_fails("nginx"));
    }

    #[test]
    fn a_container_starts_and_becomes_ready() {
        let p = pod(json!([{"name": "app", "image": "r.example.com/a:1"}]), "Always");
        let mut sim = PodSim::new(&p, &Timing::default(), 0, "10.244.1.2".into());
        let events = run(&mut sim, 0, 10_000, &Objects::default());
        assert_eq!(reasons(&events), ["Pulling", "Pulled", "Created", "Started"]);
        assert_eq!(sim.phase(), "Running");
        let st = sim.status(0, true, "172.18.0.2", false, &p);
        assert_eq!(st["containerStatuses"][0]["ready"], true);
        let types: Vec<&str> =
            st["conditions"].as_array().unwrap().iter().map(|c| c["type"].as_str().unwrap()).collect();
        assert_eq!(types, ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady"]);
        // A not-ready Node makes it unready.
        let st = sim.status(0, false, "172.18.0.2", false, &p);
        assert_eq!(st["conditions"][2]["reason"], "ContainersNotReady");
        assert_eq!(sim.next_deadline(), None);
    }

    #[test]
    fn a_crash_loop_backs_off_doubling() {
        let p = pod(
            json!([{"name": "app", "image": "r.example.com/a:1", "env": [{"name": ENV_EXIT_CODE, "value": "2"}]}]),
            "Always",
        );
        let mut sim = PodSim::new(&p, &Timing::default(), 0, "10.244.1.2".into());
        // run 200, sync 100, immediate restart, run 200, sync 100, back-off 500, run 200, sync, back-off 1000.
        let events = run(&mut sim, 0, 1_500, &Objects::default());
        assert_eq!(events.iter().filter(|e| e.reason == "BackOff").count(), 2);
        let st = sim.status(1_500, true, "h", false, &p);
        let c = &st["containerStatuses"][0];
        assert_eq!(c["state"]["waiting"]["reason"], "CrashLoopBackOff");
        assert_eq!(c["state"]["waiting"]["message"], "back-off 1s restarting failed container=app pod=p_ns(u1)");
        assert_eq!(c["restartCount"], 2);
        assert_eq!(c["lastState"]["terminated"]["exitCode"], 2);
        assert_eq!(st["phase"], "Running");
    }

    #[test]
    fn never_restarted_exits_decide_the_phase() {
        let ok = pod(json!([{"name": "a", "image": "r.example.com/a:1"}]), "Never");
        let mut sim = PodSim::new(&ok, &Timing::default(), 0, "ip".into());
        run(&mut sim, 0, 10_000, &Objects::default());
        assert_eq!(sim.phase(), "Succeeded");
        let bad = pod(
            json!([{"name": "a", "image": "r.example.com/a:1", "env": [{"name": ENV_EXIT_CODE, "value": "1"}]}]),
            "Never",
        );
        let mut sim = PodSim::new(&bad, &Timing::default(), 0, "ip".into());
        run(&mut sim, 0, 10_000, &Objects::default());
        assert_eq!(sim.phase(), "Failed");
        let st = sim.status(10_000, true, "h", false, &bad);
        assert_eq!(st["containerStatuses"][0]["state"]["terminated"]["reason"], "Error");
        assert_eq!(st["conditions"][2]["reason"], "PodCompleted");
    }

    #[test]
    fn a_missing_config_map_blocks_until_poked() {
        let p = pod(
            json!([{"name": "a", "image": "r.example.com/a:1",
                    "envFrom": [{"configMapRef": {"name": "cfg"}}]}]),
            "Always",
        );
        let mut sim = PodSim::new(&p, &Timing::default(), 0, "ip".into());
        let mut objects = Objects::default();
        let mut images = HashSet::new();
        let events = sim.step(0, &objects, &mut images);
        assert_eq!(events.last().unwrap().message, "Error: configmap \"cfg\" not found");
        assert!(sim.blocked());
        objects.0.insert(("configmaps".into(), "cfg".into()), json!({}));
        sim.poke(10);
        let events = sim.step(10, &objects, &mut images);
        assert_eq!(reasons(&events), ["Created", "Started"]);
        assert!(!sim.blocked());
    }
}
