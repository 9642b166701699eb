//! What the endpointslice and endpoints controllers share: which Pods a Service selects and
//! which of them are endpoints, port resolution, and the
//! `endpoints.kubernetes.io/last-change-trigger-time` tracker.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use jiff::Timestamp;
use serde_json::{Value, json};

/// The trigger-time annotation on EndpointSlices and Endpoints.
pub const TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";
/// The label of headless Services' EndpointSlices and Endpoints.
pub const HEADLESS: &str = "service.kubernetes.io/headless";

/// A consistent read of everything both controllers look at.
pub struct Snapshot {
    /// Services.
    pub services: Vec<Value>,
    /// Pods, by namespace.
    pub pods: BTreeMap<String, Vec<Value>>,
    /// Node zones (`topology.kubernetes.io/zone`), by Node name.
    pub zones: HashMap<String, String>,
    /// EndpointSlices.
    pub slices: Vec<Value>,
    /// v1 Endpoints.
    pub endpoints: Vec<Value>,
    /// Indexes into the lists above by namespace and name (EndpointSlices by the name of
    /// their Service): a pass looks each Service's up instead of scanning every one, which made
    /// it quadratic (10,000 Services: 10^8 comparisons).
    services_at: HashMap<(String, String), usize>,
    endpoints_at: HashMap<(String, String), usize>,
    slices_of: HashMap<(String, String), Vec<usize>>,
}

/// The label naming an EndpointSlice's Service.
pub const SERVICE_NAME: &str = "kubernetes.io/service-name";

fn key_of(o: &Value) -> (String, String) {
    (namespace(o).to_string(), name(o).to_string())
}

impl Snapshot {
    /// Read the store.
    /// Only the namespaces in `client`'s scope are read (see [`crate::client::Client::scoped`]).
    pub fn read(client: &crate::client::Client) -> Snapshot {
        let txn = client.state().store.lock();
        let in_scope = |o: &&Value| client.in_scope(o["metadata"]["namespace"].as_str().unwrap_or_default());
        let mut pods: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for p in txn.all("/pods").into_iter().filter(in_scope) {
            let ns = p["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
            pods.entry(ns).or_default().push(p.clone());
        }
        for list in pods.values_mut() {
            list.sort_by(|a, b| name(a).cmp(name(b)));
        }
        let zones = txn
            .all("/nodes")
            .into_iter()
            .filter_map(|n| {
                let zone = n["metadata"]["labels"]["topology.kubernetes.io/zone"].as_str()?;
                Some((name(n).to_string(), zone.to_string()))
            })
            .collect();
        let services: Vec<Value> = txn.all("/services").into_iter().filter(in_scope).cloned().collect();
        let slices: Vec<Value> =
            txn.all("discovery.k8s.io/endpointslices").into_iter().filter(in_scope).cloned().collect();
        let endpoints: Vec<Value> = txn.all("/endpoints").into_iter().filter(in_scope).cloned().collect();
        let mut slices_of: HashMap<(String, String), Vec<usize>> = HashMap::new();
        for (i, s) in slices.iter().enumerate() {
            if let Some(svc) = s["metadata"]["labels"][SERVICE_NAME].as_str() {
                slices_of.entry((namespace(s).to_string(), svc.to_string())).or_default().push(i);
            }
        }
        Snapshot {
            services_at: services.iter().enumerate().map(|(i, o)| (key_of(o), i)).collect(),
            endpoints_at: endpoints.iter().enumerate().map(|(i, o)| (key_of(o), i)).collect(),
            slices_of,
            services,
            pods,
            zones,
            slices,
            endpoints,
        }
    }

    /// The Service `namespace/name`, if it exists.
    pub fn service(&self, namespace: &str, name: &str) -> Option<&Value> {
        self.services_at.get(&(namespace.to_string(), name.to_string())).map(|i| &self.services[*i])
    }

    /// The Endpoints `namespace/name`, if they exist.
    pub fn endpoints_named(&self, namespace: &str, name: &str) -> Option<&Value> {
        self.endpoints_at.get(&(namespace.to_string(), name.to_string())).map(|i| &self.endpoints[*i])
    }

    /// The EndpointSlices of `namespace` labelled with the Service name `service`.
    pub fn slices_labelled(&self, namespace: &str, service: &str) -> impl Iterator<Item = &Value> {
        self.slices_of
            .get(&(namespace.to_string(), service.to_string()))
            .into_iter()
            .flatten()
            .map(|i| &self.slices[*i])
    }

    /// The Pods a Service's selector matches (all of them, whatever their state).
    pub fn selected_pods(&self, svc: &Value) -> Vec<&Value> {
        let Some(selector) = service_selector(svc) else { return vec![] };
        let ns = namespace(svc);
        self.pods
            .get(ns)
            .map(|ps| {
                ps.iter().filter(|p| selector.iter().all(|(k, v)| p["metadata"]["labels"][k.as_str()] == *v)).collect()
            })
            .unwrap_or_default()
    }
}

/// `metadata.name`.
pub fn name(o: &Value) -> &str {
    o["metadata"]["name"].as_str().unwrap_or_default()
}

/// `metadata.namespace`.
pub fn namespace(o: &Value) -> &str {
    o["metadata"]["namespace"].as_str().unwrap_or_default()
}

/// The selector of a Service the controllers manage endpoints for: a non-empty
/// `spec.selector`, and not an ExternalName Service.
pub fn service_selector(svc: &Value) -> Option<&serde_json::Map<String, Value>> {
    if svc["spec"]["type"] == "ExternalName" {
        return None;
    }
    svc["spec"]["selector"].as_object().filter(|m| !m.is_empty())
}

/// Whether a Service is headless (`clusterIP: None`).
pub fn is_headless(svc: &Value) -> bool {
    svc["spec"]["clusterIP"] == "None"
}

/// Pod Ready condition is True.
pub fn pod_ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

/// `metadata.deletionTimestamp` is set.
pub fn terminating(pod: &Value) -> bool {
    pod["metadata"]["deletionTimestamp"].is_string()
}

/// `ShouldPodBeInEndpoints`: not terminal (Succeeded/Failed), has an IP, and (unless
/// `include_terminating`) not terminating.
pub fn pod_is_endpoint(pod: &Value, include_terminating: bool) -> bool {
    if matches!(pod["status"]["phase"].as_str(), Some("Succeeded" | "Failed")) {
        return false;
    }
    let has_ip = pod["status"]["podIP"].as_str().is_some_and(|s| !s.is_empty())
        || pod["status"]["podIPs"].as_array().is_some_and(|a| !a.is_empty());
    has_ip && (include_terminating || !terminating(pod))
}

/// Whether an IP address string belongs to `family` (`IPv4` / `IPv6`).
fn ip_of_family(ip: &str, family: &str) -> bool {
    match family {
        "IPv6" => ip.contains(':'),
        _ => !ip.contains(':') && !ip.is_empty(),
    }
}

/// The Pod's IP of an address family.
pub fn pod_ip(pod: &Value, family: &str) -> Option<String> {
    let from_list = pod["status"]["podIPs"]
        .as_array()
        .and_then(|a| a.iter().filter_map(|i| i["ip"].as_str()).find(|ip| ip_of_family(ip, family)).map(String::from));
    from_list.or_else(|| pod["status"]["podIP"].as_str().filter(|ip| ip_of_family(ip, family)).map(String::from))
}

/// The address families of a Service (`spec.ipFamilies`, IPv4 when unset).
pub fn service_families(svc: &Value) -> Vec<String> {
    let f: Vec<String> = crate::api::strings(&svc["spec"]["ipFamilies"]);
    if f.is_empty() { vec!["IPv4".into()] } else { f }
}

/// `podutil.FindPort`: a Service port's target on a Pod (a named targetPort is looked up in
/// the containers' ports with the same protocol).
pub fn find_port(pod: &Value, svc_port: &Value) -> Option<i64> {
    let protocol = svc_port["protocol"].as_str().unwrap_or("TCP");
    match &svc_port["targetPort"] {
        Value::String(name) => {
            if let Ok(n) = name.parse::<i64>() {
                return Some(n);
            }
            let containers = pod["spec"]["containers"].as_array().into_iter().flatten().chain(
                pod["spec"]["initContainers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|c| c["restartPolicy"] == "Always"),
            );
            for c in containers {
                for p in c["ports"].as_array().into_iter().flatten() {
                    if p["name"] == name.as_str() && p["protocol"].as_str().unwrap_or("TCP") == protocol {
                        return p["containerPort"].as_i64();
                    }
                }
            }
            None
        }
        Value::Number(n) => n.as_i64(),
        _ => svc_port["port"].as_i64(),
    }
}

/// The target reference of a Pod endpoint.
pub fn target_ref(pod: &Value) -> Value {
    json!({"kind": "Pod", "namespace": namespace(pod), "name": name(pod), "uid": pod["metadata"]["uid"]})
}

/// `ShouldSetHostname`: the Pod's hostname is published when its subdomain is the Service.
pub fn hostname_for(pod: &Value, svc: &Value) -> Option<String> {
    let h = pod["spec"]["hostname"].as_str().filter(|h| !h.is_empty())?;
    (pod["spec"]["subdomain"].as_str() == Some(name(svc)) && namespace(pod) == namespace(svc)).then(|| h.to_string())
}

/// The labels of a Service's endpoints objects: the Service's own labels minus `reserved`,
/// the headless label when headless, then `extra`.
pub fn endpoint_labels(svc: &Value, reserved: &[&str], extra: &[(&str, &str)]) -> serde_json::Map<String, Value> {
    let mut labels = svc["metadata"]["labels"].as_object().cloned().unwrap_or_default();
    labels.retain(|k, _| !reserved.contains(&k.as_str()) && k != HEADLESS);
    if is_headless(svc) {
        labels.insert(HEADLESS.into(), json!(""));
    }
    for (k, v) in extra {
        labels.insert((*k).into(), json!(v));
    }
    labels
}

fn parse_time(v: &Value) -> Option<Timestamp> {
    v.as_str().and_then(|s| s.parse::<Timestamp>().ok())
}

/// A time as Go's `RFC3339Nano` in UTC (trailing zero fractions dropped).
pub fn format_time(t: Timestamp) -> String {
    // jiff prints UTC timestamps with the shortest exact fraction, as Go's RFC3339Nano does.
    t.to_string()
}

/// What the tracker remembers of one Service.
#[derive(Clone, Debug, Default)]
pub struct TriggerState {
    pods: HashMap<String, Timestamp>,
    service: Option<Timestamp>,
}

/// `TriggerTimeTracker`: per Service, the trigger times (Pod Ready transition times, Service
/// creation) seen at the last sync; a sync's trigger time is the earliest that changed since,
/// or the Service's creation for a Service seen the first time; none (the annotation is
/// removed) when nothing changed, e.g. when the change was a Pod deletion.
#[derive(Default)]
pub struct TriggerTracker {
    states: Mutex<HashMap<String, TriggerState>>,
}

impl TriggerTracker {
    /// The trigger time of a sync of `svc` over `pods`, and the state to [`commit`] once the
    /// sync's writes succeeded.
    ///
    /// [`commit`]: TriggerTracker::commit
    pub fn compute(&self, scope: usize, svc: &Value, pods: &[&Value]) -> (Option<Timestamp>, TriggerState) {
        let uid = key(scope, svc);
        let old = self.states.lock().unwrap_or_else(|p| p.into_inner()).get(&uid).cloned();
        let known = old.is_some();
        let old = old.unwrap_or_default();
        let mut min: Option<Timestamp> = None;
        let mut state = TriggerState::default();
        for pod in pods {
            let ready = pod["status"]["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
                .and_then(|c| parse_time(&c["lastTransitionTime"]));
            if let Some(t) = ready {
                if old.pods.get(name(pod)).is_none_or(|prev| t > *prev) {
                    min = Some(min.map_or(t, |m| m.min(t)));
                }
                state.pods.insert(name(pod).to_string(), t);
            }
        }
        let created = parse_time(&svc["metadata"]["creationTimestamp"]);
        if let Some(t) = created
            && old.service.is_none_or(|prev| t > prev)
        {
            min = Some(min.map_or(t, |m| m.min(t)));
        }
        state.service = created;
        if !known {
            return (created, state);
        }
        (min, state)
    }

    /// Remember a sync's state.
    pub fn commit(&self, scope: usize, svc: &Value, state: TriggerState) {
        self.states.lock().unwrap_or_else(|p| p.into_inner()).insert(key(scope, svc), state);
    }

    /// Forget Services of this server (`scope`) that are gone.
    pub fn retain(&self, scope: usize, uids: &std::collections::HashSet<String>) {
        let prefix = format!("{scope}/");
        self.states
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|k, _| k.strip_prefix(&prefix).is_none_or(|uid| uids.contains(uid)));
    }
}

/// Set or remove the trigger-time annotation in an object's metadata.
pub fn set_trigger_annotation(obj: &mut Value, time: Option<Timestamp>) {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else { return };
    match time {
        Some(t) => {
            let ann = meta.entry("annotations").or_insert_with(|| json!({}));
            if !ann.is_object() {
                *ann = json!({});
            }
            ann[TRIGGER_TIME] = json!(format_time(t));
        }
        None => {
            if let Some(ann) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
                ann.remove(TRIGGER_TIME);
                if ann.is_empty() {
                    meta.remove("annotations");
                }
            }
        }
    }
}

/// The tracker is process-wide; several servers may run in one process (tests), so states are
/// keyed by server and Service uid.
fn key(scope: usize, svc: &Value) -> String {
    format!("{scope}/{}", svc["metadata"]["uid"].as_str().unwrap_or_default())
}

/// The server a client talks to, as a tracker scope.
pub fn scope(client: &crate::client::Client) -> usize {
    std::sync::Arc::as_ptr(client.state()) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_format_like_go_rfc3339nano() {
        let t: Timestamp = "2026-01-01T00:00:02Z".parse().unwrap();
        assert_eq!(format_time(t), "2026-01-01T00:00:02Z");
        let t: Timestamp = "2026-01-01T00:00:02.500Z".parse().unwrap();
        assert_eq!(format_time(t), "2026-01-01T00:00:02.5Z");
    }

    #[test]
    fn tracker_reports_changes_only() {
        let tr = TriggerTracker::default();
        let svc = json!({"metadata": {"uid": "u", "creationTimestamp": "2026-01-01T00:00:00Z"}});
        let (t, s) = tr.compute(0, &svc, &[]);
        assert_eq!(t.map(format_time).as_deref(), Some("2026-01-01T00:00:00Z"));
        tr.commit(0, &svc, s);
        let pod = json!({"metadata": {"name": "a"}, "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:02Z"}]}});
        let (t, s) = tr.compute(0, &svc, &[&pod]);
        assert_eq!(t.map(format_time).as_deref(), Some("2026-01-01T00:00:02Z"));
        tr.commit(0, &svc, s);
        let (t, _) = tr.compute(0, &svc, &[&pod]);
        assert!(t.is_none());
    }

    #[test]
    fn named_target_ports_resolve_by_protocol() {
        let pod =
            json!({"spec": {"containers": [{"ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]}]}});
        assert_eq!(find_port(&pod, &json!({"port": 80, "targetPort": "http", "protocol": "TCP"})), Some(8080));
        assert_eq!(find_port(&pod, &json!({"port": 80, "targetPort": "http", "protocol": "UDP"})), None);
        assert_eq!(find_port(&pod, &json!({"port": 80, "targetPort": 9090})), Some(9090));
    }
}
