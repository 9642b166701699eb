//! Services: defaulting, the allocation step of the real service REST storage (cluster IPs from
//! 10.96.0.0/12, node ports from 30000-32767, IP family fields of a single-stack IPv4 cluster)
//! and validation.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use serde_json::{Map, Value, json};

use super::field::{self, child, index};
use super::names::{self, NameRule, validate_object_meta, validate_object_meta_update};
use crate::errors::Cause;

/// The service cluster IP range.
pub const SERVICE_CIDR: &str = "10.96.0.0/12";
const CIDR_BASE: u32 = 0x0A60_0000;
const CIDR_SIZE: u32 = 1 << 20;
/// The NodePort range (inclusive).
pub const NODE_PORT_RANGE: (i64, i64) = (30000, 32767);

fn spec_str<'a>(obj: &'a Value, k: &str) -> &'a str {
    obj.get("spec").and_then(|s| s.get(k)).and_then(Value::as_str).unwrap_or("")
}

fn svc_type(obj: &Value) -> &str {
    let t = spec_str(obj, "type");
    if t.is_empty() { "ClusterIP" } else { t }
}

fn needs_cluster_ip(obj: &Value) -> bool {
    svc_type(obj) != "ExternalName"
}

fn needs_node_port(obj: &Value) -> bool {
    match svc_type(obj) {
        "NodePort" => true,
        "LoadBalancer" => obj.pointer("/spec/allocateLoadBalancerNodePorts").and_then(Value::as_bool) != Some(false),
        _ => false,
    }
}

fn is_headless(obj: &Value) -> bool {
    spec_str(obj, "clusterIP") == "None"
}

fn ports(obj: &Value) -> Vec<Value> {
    obj.pointer("/spec/ports").and_then(Value::as_array).cloned().unwrap_or_default()
}

fn spec_mut(obj: &mut Value) -> Option<&mut Map<String, Value>> {
    let o = obj.as_object_mut()?;
    if !o.get("spec").is_some_and(Value::is_object) {
        o.insert("spec".into(), json!({}));
    }
    o.get_mut("spec").and_then(Value::as_object_mut)
}

/// `SetDefaults_Service`.
pub(crate) fn default_service(obj: &mut Value) {
    let Some(spec) = spec_mut(obj) else { return };
    if spec.get("sessionAffinity").and_then(Value::as_str).is_none_or(str::is_empty) {
        spec.insert("sessionAffinity".into(), json!("None"));
    }
    if spec.get("sessionAffinity").and_then(Value::as_str) == Some("None") {
        spec.remove("sessionAffinityConfig");
    }
    if spec.get("type").and_then(Value::as_str).is_none_or(str::is_empty) {
        spec.insert("type".into(), json!("ClusterIP"));
    }
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            if p.get("protocol").and_then(Value::as_str).is_none_or(str::is_empty) {
                p.insert("protocol".into(), json!("TCP"));
            }
            let tp = p.get("targetPort");
            if tp.is_none_or(|t| t.is_null() || *t == 0 || *t == "") {
                let port = p.get("port").cloned().unwrap_or(json!(0));
                p.insert("targetPort".into(), port);
            }
        }
    }
    let ty = spec.get("type").and_then(Value::as_str).unwrap_or("").to_string();
    let has_external_ips = spec.get("externalIPs").and_then(Value::as_array).is_some_and(|a| !a.is_empty());
    let externally_accessible = ty == "LoadBalancer" || ty == "NodePort" || (ty == "ClusterIP" && has_external_ips);
    if externally_accessible && spec.get("externalTrafficPolicy").and_then(Value::as_str).is_none_or(str::is_empty) {
        spec.insert("externalTrafficPolicy".into(), json!("Cluster"));
    }
    if spec.get("internalTrafficPolicy").is_none_or(Value::is_null)
        && matches!(ty.as_str(), "NodePort" | "LoadBalancer" | "ClusterIP")
    {
        spec.insert("internalTrafficPolicy".into(), json!("Cluster"));
    }
    if ty == "LoadBalancer" && spec.get("allocateLoadBalancerNodePorts").is_none_or(Value::is_null) {
        spec.insert("allocateLoadBalancerNodePorts".into(), json!(true));
    }
}

/// Service `PrepareForCreate`: empty status (`{loadBalancer: {}}`).
pub(crate) fn prepare_service_create(obj: &mut Value) {
    if let Some(o) = obj.as_object_mut() {
        o.insert("status".into(), json!({"loadBalancer": {}}));
    }
}

/// Service `PrepareForUpdate` (main resource): status kept; node ports released when the new
/// type needs none and they were left as they were.
pub(crate) fn prepare_service_update(obj: &mut Value, old: &Value) {
    let drop_node_ports = needs_node_port(old) && !needs_node_port(obj) && {
        let np = |o: &Value| ports(o).iter().map(|p| p.get("nodePort").cloned()).collect::<Vec<_>>();
        np(obj) == np(old)
    };
    if let Some(o) = obj.as_object_mut() {
        o.insert("status".into(), old.get("status").cloned().unwrap_or_else(|| json!({"loadBalancer": {}})));
    }
    if drop_node_ports && let Some(ps) = obj.pointer_mut("/spec/ports").and_then(Value::as_array_mut) {
        for p in ps.iter_mut().filter_map(Value::as_object_mut) {
            p.remove("nodePort");
        }
    }
}

/// The cluster IPs a stored Service holds (for building the `used` set of [`allocate_service`]).
pub fn service_cluster_ips(obj: &Value) -> Vec<String> {
    let mut out: Vec<String> = obj
        .pointer("/spec/clusterIPs")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect())
        .unwrap_or_default();
    let single = spec_str(obj, "clusterIP");
    if !single.is_empty() && !out.iter().any(|ip| ip == single) {
        out.push(single.to_string());
    }
    out.retain(|ip| ip != "None");
    out
}

/// The node ports a stored Service holds (ports' `nodePort`s and `healthCheckNodePort`).
pub fn service_node_ports(obj: &Value) -> Vec<i64> {
    let mut out: Vec<i64> = ports(obj).iter().filter_map(|p| p.get("nodePort").and_then(Value::as_i64)).collect();
    if let Some(hc) = obj.pointer("/spec/healthCheckNodePort").and_then(Value::as_i64) {
        out.push(hc);
    }
    out.retain(|p| *p != 0);
    out
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A free IP of 10.96.0.0/12 (neither the network nor the broadcast address, nor one in
/// `used`), picked pseudo-randomly from `seed` (same inputs, same IP); `None` when full.
pub fn allocate_cluster_ip(used: &BTreeSet<String>, seed: u64) -> Option<String> {
    let usable = CIDR_SIZE - 2;
    let start = (splitmix(seed) % u64::from(usable)) as u32;
    (0..usable)
        .map(|i| (start + i) % usable + 1)
        .map(|off| Ipv4Addr::from(CIDR_BASE + off).to_string())
        .find(|ip| !used.contains(ip))
}

/// A free node port of 30000-32767 not in `used`, picked pseudo-randomly from `seed`.
pub fn allocate_node_port(used: &BTreeSet<i64>, seed: u64) -> Option<i64> {
    let (lo, hi) = NODE_PORT_RANGE;
    let size = (hi - lo + 1) as u64;
    let start = splitmix(seed) % size;
    (0..size).map(|i| lo + ((start + i) % size) as i64).find(|p| !used.contains(p))
}

fn in_cidr(ip: &str) -> Option<bool> {
    let addr: Ipv4Addr = ip.parse().ok()?;
    let n = u32::from(addr);
    Some(n > CIDR_BASE && n < CIDR_BASE + CIDR_SIZE - 1)
}

fn string_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect())
        .unwrap_or_default()
}

/// The allocation step of the service storage (`beginCreate` / `beginUpdate`), run after
/// defaulting and before validation, on create (`old` = `None`) and update:
/// - on update, values the client left out are patched from `old` (clusterIP(s) and node ports
///   by port name), as upstream `patchAllocatedValues`;
/// - `clusterIP` / `clusterIPs` kept in sync (`clusterIP: None` gives `clusterIPs: ["None"]`);
/// - `ipFamilyPolicy` (`SingleStack`; `RequireDualStack` for selector-less headless services)
///   and `ipFamilies` (`["IPv4"]`) initialized, except for ExternalName services;
/// - a cluster IP allocated when needed, node ports for NodePort/LoadBalancer services.
///
/// `used_ips` / `used_node_ports` hold what *other* Services hold ([`service_cluster_ips`],
/// [`service_node_ports`]); `seed` makes the choice (pass anything random or a counter).
/// Errors are the causes of a 422 (requested IP or port taken or outside its range,
/// dual-stack requests on this single-stack cluster).
pub fn allocate_service(
    obj: &mut Value,
    old: Option<&Value>,
    used_ips: &BTreeSet<String>,
    used_node_ports: &BTreeSet<i64>,
    seed: u64,
) -> Result<(), Vec<Cause>> {
    if let Some(old) = old {
        patch_allocated_values(obj, old);
    }
    normalize_cluster_ips(obj, old);
    let mut errs = Vec::new();
    let ext_name = !needs_cluster_ip(obj);
    let headless = is_headless(obj);
    let has_selector = obj.pointer("/spec/selector").and_then(Value::as_object).is_some_and(|m| !m.is_empty());
    let Some(spec) = spec_mut(obj) else { return Ok(()) };
    if ext_name {
        // ExternalName services hold no IP family fields.
        spec.remove("ipFamilies");
        spec.remove("ipFamilyPolicy");
    } else {
        let policy = spec.get("ipFamilyPolicy").and_then(Value::as_str).unwrap_or("").to_string();
        let policy = if policy.is_empty() {
            if headless && !has_selector { "RequireDualStack".to_string() } else { "SingleStack".to_string() }
        } else {
            policy
        };
        if policy == "RequireDualStack" && (!headless || has_selector) {
            errs.push(field::invalid_str(
                "spec.ipFamilyPolicy",
                &policy,
                "this cluster is not configured for dual-stack services",
            ));
        }
        let families = string_list(spec.get("ipFamilies"));
        for (i, f) in families.iter().enumerate() {
            if f != "IPv4" {
                errs.push(field::invalid_str(&index("spec.ipFamilies", i), f, "not configured on this cluster"));
            }
        }
        spec.insert("ipFamilyPolicy".into(), json!(policy));
        spec.insert("ipFamilies".into(), json!(["IPv4"]));
    }
    // Cluster IPs.
    let ips = string_list(spec.get("clusterIPs"));
    if !ext_name && !headless {
        if ips.is_empty() {
            match allocate_cluster_ip(used_ips, seed) {
                Some(ip) => {
                    spec.insert("clusterIP".into(), json!(ip));
                    spec.insert("clusterIPs".into(), json!([ip]));
                }
                None => errs.push(Cause::new(
                    "InternalError",
                    "Internal error: failed to allocate a serviceIP: range is full",
                    "spec.clusterIPs",
                )),
            }
        } else if old.is_none_or(|o| service_cluster_ips(o).first() != ips.first()) {
            let ip = &ips[0];
            let why = match in_cidr(ip) {
                None => None,
                Some(false) => Some(format!(
                    "the provided IP ({ip}) is not in the valid range. The range of valid IPs is {SERVICE_CIDR}"
                )),
                Some(true) if used_ips.contains(ip) => Some("provided IP is already allocated".to_string()),
                Some(true) => None,
            };
            if let Some(why) = why {
                errs.push(field::invalid(
                    "spec.clusterIPs",
                    &json!(ips),
                    &format!("failed to allocate IP {ip}: {why}"),
                ));
            }
        }
    }
    // Node ports.
    let wants_node_ports = match spec.get("type").and_then(Value::as_str).unwrap_or("ClusterIP") {
        "NodePort" => true,
        "LoadBalancer" => spec.get("allocateLoadBalancerNodePorts").and_then(Value::as_bool) != Some(false),
        _ => false,
    };
    if wants_node_ports {
        let old_ports: BTreeSet<i64> = old.map(service_node_ports).unwrap_or_default().into_iter().collect();
        let mut taken: BTreeSet<i64> = used_node_ports.clone();
        if let Some(ps) = spec.get("ports").and_then(Value::as_array) {
            taken.extend(ps.iter().filter_map(|p| p.get("nodePort").and_then(Value::as_i64)).filter(|p| *p != 0));
        }
        let mut n = 0u64;
        if let Some(ps) = spec.get_mut("ports").and_then(Value::as_array_mut) {
            for (i, p) in ps.iter_mut().enumerate() {
                let Some(p) = p.as_object_mut() else { continue };
                match p.get("nodePort").and_then(Value::as_i64).filter(|np| *np != 0) {
                    Some(np) if !old_ports.contains(&np) => {
                        let why = if !(NODE_PORT_RANGE.0..=NODE_PORT_RANGE.1).contains(&np) {
                            Some(format!(
                                "provided port is not in the valid range. The range of valid ports is {}-{}",
                                NODE_PORT_RANGE.0, NODE_PORT_RANGE.1
                            ))
                        } else if used_node_ports.contains(&np) {
                            Some("provided port is already allocated".to_string())
                        } else {
                            None
                        };
                        if let Some(why) = why {
                            errs.push(field::invalid_int(&child(&index("spec.ports", i), "nodePort"), np, &why));
                        }
                    }
                    Some(_) => {}
                    None => {
                        n += 1;
                        match allocate_node_port(&taken, seed.wrapping_add(n)) {
                            Some(np) => {
                                taken.insert(np);
                                p.insert("nodePort".into(), json!(np));
                            }
                            None => errs.push(Cause::new(
                                "InternalError",
                                "Internal error: failed to allocate a nodePort: range is full",
                                "spec.ports",
                            )),
                        }
                    }
                }
            }
        }
    }
    if errs.is_empty() { Ok(()) } else { Err(errs) }
}

fn patch_allocated_values(obj: &mut Value, old: &Value) {
    if needs_cluster_ip(old) && needs_cluster_ip(obj) {
        let old_ip = spec_str(old, "clusterIP").to_string();
        let old_ips = old.pointer("/spec/clusterIPs").cloned();
        if let Some(spec) = spec_mut(obj) {
            if spec.get("clusterIP").and_then(Value::as_str).is_none_or(str::is_empty) && !old_ip.is_empty() {
                spec.insert("clusterIP".into(), json!(old_ip));
            }
            let empty = spec.get("clusterIPs").and_then(Value::as_array).is_none_or(Vec::is_empty);
            if let Some(old_ips) = old_ips.filter(|v| v.as_array().is_some_and(|a| !a.is_empty()))
                && empty
            {
                spec.insert("clusterIPs".into(), old_ips);
            }
        }
    }
    if needs_node_port(old) && needs_node_port(obj) {
        let used_old: BTreeSet<i64> = service_node_ports(old).into_iter().collect();
        let used_new: BTreeSet<i64> = service_node_ports(obj).into_iter().collect();
        let used: BTreeSet<i64> = used_old.intersection(&used_new).copied().collect();
        let by_name: Vec<(String, i64)> = ports(old)
            .iter()
            .map(|p| {
                let name = p.get("name").and_then(Value::as_str).unwrap_or("").to_string();
                (name, p.get("nodePort").and_then(Value::as_i64).unwrap_or(0))
            })
            .collect();
        if let Some(ps) = obj.pointer_mut("/spec/ports").and_then(Value::as_array_mut) {
            for p in ps.iter_mut().filter_map(Value::as_object_mut) {
                if p.get("nodePort").and_then(Value::as_i64).unwrap_or(0) != 0 {
                    continue;
                }
                let name = p.get("name").and_then(Value::as_str).unwrap_or("");
                let old_val = by_name.iter().rev().find(|(n, _)| n == name).map(|(_, v)| *v).unwrap_or(0);
                if old_val != 0 && !used.contains(&old_val) {
                    p.insert("nodePort".into(), json!(old_val));
                }
            }
        }
    }
    if let (Some(hc), Some(spec)) = (old.pointer("/spec/healthCheckNodePort").cloned(), spec_mut(obj))
        && spec.get("healthCheckNodePort").and_then(Value::as_i64).unwrap_or(0) == 0
        && spec.get("type").and_then(Value::as_str) == Some("LoadBalancer")
        && spec.get("externalTrafficPolicy").and_then(Value::as_str) == Some("Local")
    {
        spec.insert("healthCheckNodePort".into(), hc);
    }
}

/// Upstream `NormalizeClusterIPs`.
fn normalize_cluster_ips(obj: &mut Value, old: Option<&Value>) {
    let new_ip = spec_str(obj, "clusterIP").to_string();
    let new_ips = string_list(obj.pointer("/spec/clusterIPs"));
    let Some(spec) = spec_mut(obj) else { return };
    let Some(old) = old else {
        if !new_ip.is_empty() && new_ips.is_empty() {
            spec.insert("clusterIPs".into(), json!([new_ip]));
        }
        return;
    };
    let old_ip = spec_str(old, "clusterIP").to_string();
    let old_ips = string_list(old.pointer("/spec/clusterIPs"));
    let mut ips = new_ips;
    if !old_ips.is_empty() && ips.is_empty() && old_ip == new_ip {
        ips = old_ips.clone();
        spec.insert("clusterIPs".into(), json!(ips));
    }
    if old_ip != new_ip {
        if !old_ip.is_empty() && new_ip.is_empty() && old_ips == ips {
            spec.remove("clusterIPs");
        }
        if !new_ip.is_empty() && old_ips == ips {
            spec.insert("clusterIPs".into(), json!([new_ip]));
        }
    }
}

fn validate_port_num(path: &str, v: i64) -> Option<Cause> {
    (!(1..=65535).contains(&v)).then(|| field::invalid_int(path, v, "must be between 1 and 65535, inclusive"))
}

fn port_name_errors(name: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if name.len() > 15 {
        errs.push("must be no more than 15 characters".to_string());
    }
    if name.is_empty() || !name.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-') {
        errs.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".to_string());
    }
    if !name.bytes().any(|c| c.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)".to_string());
    }
    if name.contains("--") {
        errs.push("must not contain consecutive hyphens".to_string());
    }
    if name.starts_with('-') || name.ends_with('-') {
        errs.push("must not begin or end with a hyphen".to_string());
    }
    errs
}

/// `ValidatePortNumOrName`.
pub(crate) fn validate_port_num_or_name(path: &str, v: Option<&Value>) -> Vec<Cause> {
    match v {
        Some(Value::Number(n)) => validate_port_num(path, n.as_i64().unwrap_or(0)).into_iter().collect(),
        Some(Value::String(s)) => port_name_errors(s).into_iter().map(|m| field::invalid_str(path, s, &m)).collect(),
        _ => validate_port_num(path, 0).into_iter().collect(),
    }
}

const PROTOCOLS: &[&str] = &["SCTP", "TCP", "UDP"];

pub(crate) fn validate_service(obj: &Value) -> Vec<Cause> {
    let mut errs = validate_object_meta(obj, true, NameRule::Dns1035, true);
    let ty = spec_str(obj, "type");
    let headless = is_headless(obj);
    let ps = ports(obj);
    if ps.is_empty() && !headless && ty != "ExternalName" {
        errs.push(field::required("spec.ports", ""));
    }
    match ty {
        "ClusterIP" | "NodePort" | "LoadBalancer" => {}
        "ExternalName" => {
            let en = spec_str(obj, "externalName");
            if en.is_empty() {
                errs.push(field::required("spec.externalName", ""));
            } else {
                let trimmed = en.strip_suffix('.').unwrap_or(en);
                let msgs = names::dns1123_subdomain(trimmed);
                if !msgs.is_empty() {
                    errs.push(field::invalid_str("spec.externalName", trimmed, &msgs.join(",")));
                } else if trimmed.split('.').count() < 2 {
                    errs.push(field::invalid_str(
                        "spec.externalName",
                        trimmed,
                        "should be a domain with at least two segments separated by dots",
                    ));
                }
            }
        }
        "" => errs.push(field::required("spec.type", "")),
        other => errs.push(field::not_supported(
            "spec.type",
            &json!(other),
            &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"],
        )),
    }
    let require_name = ps.len() > 1;
    let mut names_seen: Vec<String> = Vec::new();
    for (i, p) in ps.iter().enumerate() {
        let pp = index("spec.ports", i);
        let name = p.get("name").and_then(Value::as_str).unwrap_or("");
        if require_name && name.is_empty() {
            errs.push(field::required(&child(&pp, "name"), ""));
        } else if !name.is_empty() {
            for m in names::dns1123_label(name) {
                errs.push(field::invalid_str(&child(&pp, "name"), name, &m));
            }
            if names_seen.iter().any(|n| n == name) {
                errs.push(field::duplicate(&child(&pp, "name"), &json!(name)));
            } else {
                names_seen.push(name.to_string());
            }
        }
        errs.extend(validate_port_num(&child(&pp, "port"), p.get("port").and_then(Value::as_i64).unwrap_or(0)));
        match p.get("protocol").and_then(Value::as_str).unwrap_or("") {
            "" => errs.push(field::required(&child(&pp, "protocol"), "")),
            proto if !PROTOCOLS.contains(&proto) => {
                errs.push(field::not_supported(&child(&pp, "protocol"), &json!(proto), PROTOCOLS))
            }
            _ => {}
        }
        errs.extend(validate_port_num_or_name(&child(&pp, "targetPort"), p.get("targetPort")));
        if let Some(ap) = p.get("appProtocol").and_then(Value::as_str) {
            for m in names::qualified_name(ap) {
                errs.push(field::invalid_str(&child(&pp, "appProtocol"), ap, &m));
            }
        }
    }
    match spec_str(obj, "sessionAffinity") {
        "None" | "ClientIP" => {}
        "" => errs.push(field::required("spec.sessionAffinity", "")),
        other => errs.push(field::not_supported("spec.sessionAffinity", &json!(other), &["ClientIP", "None"])),
    }
    // Cluster IPs.
    let ips = string_list(obj.pointer("/spec/clusterIPs"));
    let ip = spec_str(obj, "clusterIP");
    if ty == "ExternalName" {
        if !ip.is_empty() || !ips.is_empty() {
            errs.push(field::forbidden("spec.clusterIPs", "may not be set for ExternalName services"));
        }
    } else {
        if !ips.is_empty() && ips[0] != ip {
            errs.push(field::invalid("spec.clusterIPs", &json!(ips), "first value must match `clusterIP`"));
        }
        for (i, v) in ips.iter().enumerate() {
            if v == "None" {
                if i > 0 || ips.len() > 1 {
                    errs.push(field::invalid_str(
                        &index("spec.clusterIPs", i),
                        v,
                        "'None' must be the first and only value",
                    ));
                }
            } else if v.parse::<std::net::IpAddr>().is_err() {
                errs.push(field::invalid_str(
                    &index("spec.clusterIPs", i),
                    v,
                    "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                ));
            }
        }
    }
    if ty == "ClusterIP" {
        for (i, p) in ps.iter().enumerate() {
            if p.get("nodePort").and_then(Value::as_i64).unwrap_or(0) != 0 {
                errs.push(field::forbidden(
                    &child(&index("spec.ports", i), "nodePort"),
                    "may not be used when `type` is 'ClusterIP'",
                ));
            }
        }
    }
    // Duplicate (protocol, port) pairs.
    let mut seen: Vec<(String, i64)> = Vec::new();
    for (i, p) in ps.iter().enumerate() {
        let key = (
            p.get("protocol").and_then(Value::as_str).unwrap_or("").to_string(),
            p.get("port").and_then(Value::as_i64).unwrap_or(0),
        );
        if seen.contains(&key) {
            errs.push(Cause::new(
                "FieldValueDuplicate",
                format!(
                    "Duplicate value: {{\"Name\":\"\",\"Protocol\":\"{}\",\"AppProtocol\":null,\"Port\":{},\"TargetPort\":0,\"NodePort\":0}}",
                    key.0, key.1
                ),
                index("spec.ports", i),
            ));
        } else {
            seen.push(key);
        }
    }
    // Node ports: unique per protocol.
    let mut node_seen: Vec<(String, i64)> = Vec::new();
    for (i, p) in ps.iter().enumerate() {
        let np = p.get("nodePort").and_then(Value::as_i64).unwrap_or(0);
        if np == 0 {
            continue;
        }
        let key = (p.get("protocol").and_then(Value::as_str).unwrap_or("").to_string(), np);
        if node_seen.contains(&key) {
            errs.push(field::duplicate(&child(&index("spec.ports", i), "nodePort"), &json!(np)));
        } else {
            node_seen.push(key);
        }
    }
    errs.extend(names::validate_labels(obj.pointer("/spec/selector"), "spec.selector"));
    if let Some(p) = obj.pointer("/spec/ipFamilyPolicy").and_then(Value::as_str)
        && !["SingleStack", "PreferDualStack", "RequireDualStack"].contains(&p)
    {
        errs.push(field::not_supported(
            "spec.ipFamilyPolicy",
            &json!(p),
            &["PreferDualStack", "RequireDualStack", "SingleStack"],
        ));
    }
    for (k, allowed) in
        [("externalTrafficPolicy", ["Cluster", "Local"]), ("internalTrafficPolicy", ["Cluster", "Local"])]
    {
        if let Some(v) = obj.pointer(&format!("/spec/{k}")).and_then(Value::as_str)
            && !allowed.contains(&v)
        {
            errs.push(field::not_supported(&format!("spec.{k}"), &json!(v), &allowed));
        }
    }
    errs
}

pub(crate) fn validate_service_update(obj: &Value, old: &Value) -> Vec<Cause> {
    let mut errs = validate_object_meta_update(obj, old);
    if svc_type(obj) != "ExternalName" && svc_type(old) != "ExternalName" && !(is_headless(obj) && is_headless(old)) {
        let old_ips = string_list(old.pointer("/spec/clusterIPs"));
        let new_ips = string_list(obj.pointer("/spec/clusterIPs"));
        let shown = json!(new_ips);
        let path0 = index("spec.clusterIPs", 0);
        if old_ips.len() == new_ips.len() {
            for (i, ip) in old_ips.iter().enumerate() {
                if *ip != new_ips[i] {
                    errs.push(field::invalid(&index("spec.clusterIPs", i), &shown, "may not change once set"));
                }
            }
        } else if old_ips.len() > new_ips.len() {
            if new_ips.is_empty() {
                errs.push(field::invalid(&path0, &shown, "primary clusterIP can not be unset"));
            }
            if !old_ips.is_empty() && !new_ips.is_empty() && new_ips[0] != old_ips[0] {
                errs.push(field::invalid(&path0, &shown, "may not change once set"));
            }
            if new_ips.len() == 1 && spec_str(obj, "ipFamilyPolicy") != "SingleStack" {
                errs.push(field::invalid(
                    &path0,
                    &shown,
                    "`ipFamilyPolicy` must be set to 'SingleStack' when releasing the secondary clusterIP",
                ));
            }
        } else if !old_ips.is_empty() && new_ips[0] != old_ips[0] {
            errs.push(field::invalid(&path0, &shown, "may not change once set"));
        }
        let old_f = string_list(old.pointer("/spec/ipFamilies"));
        let new_f = string_list(obj.pointer("/spec/ipFamilies"));
        if !old_f.is_empty() && !new_f.is_empty() && old_f[0] != new_f[0] {
            errs.push(field::invalid(&index("spec.ipFamilies", 0), &json!(new_f), "may not change once set"));
        }
    }
    errs.extend(validate_service(obj));
    errs
}
