//! Validation of the desired state before anything touches the cluster.
//!
//! - every object has `apiVersion`, `kind` and a valid `metadata.name`;
//! - no two objects share group, kind, namespace and name;
//! - a namespaced object without a namespace gets the destination namespace; a namespace is a
//!   valid namespace name;
//! - namespaced objects must be in the destination namespace or one of
//!   `spec.destination.allowedNamespaces` (`*` matches any run of characters);
//! - cluster-scoped objects must be of a kind in `spec.destination.clusterResources`;
//! - a kind must be known to the cluster (discovery) or defined by a CustomResourceDefinition in
//!   the same desired state;
//! - `sync.kuvryn.io/sync-wave`, when set, is an integer ([`super::wave_of`]);
//! - hook annotations (`sync.kuvryn.io/hook`, `sync.kuvryn.io/hook-delete-policy` and Helm's)
//!   name known phases and policies ([`super::hooks`]); hooks are validated like every other
//!   object, namespace rules included;
//! - limits on the number of objects and on the size of each.
//!
//! Every problem is listed (sorted, deduplicated), not just the first: the Application reports
//! `ValidationFailure` with all of them and nothing is applied.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::api::application::Destination;

/// What the cluster serves: (group, kind) → namespaced.
pub trait Scopes {
    /// `Some(true)` for a namespaced kind, `Some(false)` for a cluster-scoped one, `None` when
    /// the cluster does not serve it.
    fn namespaced(&self, group: &str, kind: &str) -> Option<bool>;
}

impl Scopes for BTreeMap<(String, String), bool> {
    fn namespaced(&self, group: &str, kind: &str) -> Option<bool> {
        self.get(&(group.to_string(), kind.to_string())).copied()
    }
}

/// Limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most objects in one desired state.
    pub max_objects: usize,
    /// Most bytes of one object (JSON); the API server's own limit is about 1.5 MiB.
    pub max_object_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_objects: 10_000, max_object_bytes: 1024 * 1024 }
    }
}

/// The group of an `apiVersion` (`""` for the core group).
pub fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("")
}

/// `group/kind/namespace/name`, the identity of an object.
pub fn identity(obj: &Value) -> String {
    let av = obj["apiVersion"].as_str().unwrap_or_default();
    format!(
        "{}/{}/{}/{}",
        group_of(av),
        obj["kind"].as_str().unwrap_or_default(),
        obj["metadata"]["namespace"].as_str().unwrap_or_default(),
        obj["metadata"]["name"].as_str().unwrap_or_default()
    )
}

/// `*` matches any run of characters. Greedy, going back only to the last `*` seen: at most
/// `pattern.len() × s.len()` steps. (Trying every split at every `*` took exponential time: 31
/// stars against a long namespace, both written by a tenant, never returned.) Bytes are
/// compared: a literal of valid UTF-8 can only match on character boundaries.
fn glob(pattern: &str, s: &str) -> bool {
    let (p, s) = (pattern.as_bytes(), s.as_bytes());
    let (mut pi, mut si) = (0, 0);
    // After the last `*`: where the pattern resumes and where in `s` that attempt started.
    let mut retry: Option<(usize, usize)> = None;
    while si < s.len() {
        if p.get(pi) == Some(&b'*') {
            pi += 1;
            retry = Some((pi, si));
        } else if p.get(pi) == Some(&s[si]) {
            pi += 1;
            si += 1;
        } else if let Some((rp, rs)) = retry {
            // Let the last `*` take one more byte and try again.
            pi = rp;
            si = rs + 1;
            retry = Some((rp, rs + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&b| b == b'*')
}

/// Whether `ns` is a valid namespace name: a DNS-1123 label (lowercase letters, digits and
/// `-`, starting and ending with a letter or digit, at most 63 characters). Anything else could
/// change the request path it goes into (`team-a/../kube-system` matches the pattern `team-*`).
fn valid_namespace(ns: &str) -> bool {
    let b = ns.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

fn name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("metadata.name is missing")
    } else if name.len() > 253 {
        Some("metadata.name is longer than 253 characters")
    } else if name == "." || name == ".." || name.contains('/') || name.contains('%') {
        Some("metadata.name may not be '.', '..' or contain '/' or '%'")
    } else {
        None
    }
}

/// Validate `objects` for `destination`; on success return them with namespaces filled in.
pub fn validate(
    objects: &[Value],
    destination: &Destination,
    scopes: &dyn Scopes,
    limits: Limits,
) -> Result<Vec<Value>, Vec<String>> {
    let mut problems = BTreeSet::new();
    if objects.len() > limits.max_objects {
        problems.insert(format!(
            "the desired state has {} objects, more than the limit of {}",
            objects.len(),
            limits.max_objects
        ));
    }
    // Kinds defined by CustomResourceDefinitions in the same desired state.
    let mut defined: BTreeMap<(String, String), bool> = BTreeMap::new();
    for o in objects {
        if o["apiVersion"].as_str().is_some_and(|av| group_of(av) == "apiextensions.k8s.io")
            && o["kind"] == "CustomResourceDefinition"
            && let (Some(g), Some(k)) = (o["spec"]["group"].as_str(), o["spec"]["names"]["kind"].as_str())
        {
            defined.insert((g.to_string(), k.to_string()), o["spec"]["scope"] != "Cluster");
        }
    }
    let mut out = Vec::with_capacity(objects.len());
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (i, o) in objects.iter().enumerate() {
        let at = |msg: String| {
            let name = o["metadata"]["name"].as_str().unwrap_or("");
            let kind = o["kind"].as_str().unwrap_or("");
            match (kind.is_empty(), name.is_empty()) {
                (true, true) => format!("object #{}: {msg}", i + 1),
                (false, true) => format!("{kind} #{}: {msg}", i + 1),
                (true, false) => format!("object {name}: {msg}"),
                (false, false) => format!("{kind} {name}: {msg}"),
            }
        };
        if !o.is_object() {
            problems.insert(format!("object #{}: not an object", i + 1));
            continue;
        }
        let av = o["apiVersion"].as_str().unwrap_or_default();
        let kind = o["kind"].as_str().unwrap_or_default();
        if av.is_empty() {
            problems.insert(at("apiVersion is missing".into()));
        }
        if kind.is_empty() {
            problems.insert(at("kind is missing".into()));
        }
        let name = o["metadata"]["name"].as_str().unwrap_or_default();
        if let Some(p) = name_problem(name) {
            problems.insert(at(p.into()));
        }
        if let Err(p) = super::wave_of(o) {
            problems.insert(at(p));
        }
        for p in super::hooks::problems(o) {
            problems.insert(at(p));
        }
        let size = serde_json::to_vec(o).map(|v| v.len()).unwrap_or(0);
        if size > limits.max_object_bytes {
            problems.insert(at(format!("{size} bytes, more than the limit of {}", limits.max_object_bytes)));
        }
        if av.is_empty() || kind.is_empty() {
            continue;
        }
        let group = group_of(av);
        let namespaced =
            scopes.namespaced(group, kind).or_else(|| defined.get(&(group.to_string(), kind.to_string())).copied());
        let mut obj = o.clone();
        match namespaced {
            None => {
                problems.insert(at(format!(
                    "kind {kind} of {av} is not served by the cluster nor defined by a CustomResourceDefinition in the desired state"
                )));
            }
            Some(true) => {
                let ns = o["metadata"]["namespace"].as_str().unwrap_or_default();
                let ns = if ns.is_empty() {
                    obj["metadata"]["namespace"] = Value::String(destination.namespace.clone());
                    destination.namespace.as_str()
                } else {
                    ns
                };
                let allowed = ns == destination.namespace || destination.allowed_namespaces.iter().any(|p| glob(p, ns));
                if !valid_namespace(ns) {
                    problems.insert(at(format!(
                        "metadata.namespace {:?} is not a namespace name (lowercase letters, digits and '-', at most 63)",
                        crate::text::bounded(ns, 80)
                    )));
                } else if !allowed {
                    problems.insert(at(format!(
                        "namespace {ns:?} is outside the destination ({}{})",
                        destination.namespace,
                        if destination.allowed_namespaces.is_empty() {
                            String::new()
                        } else {
                            format!(", allowed: {}", destination.allowed_namespaces.join(", "))
                        }
                    )));
                }
            }
            Some(false) => {
                if let Some(m) = obj["metadata"].as_object_mut() {
                    // A namespace on a cluster-scoped object is ignored by the API server; drop it
                    // so identities are stable.
                    m.remove("namespace");
                }
                let allowed = destination
                    .cluster_resources
                    .iter()
                    .any(|gk| gk.group == group && (gk.kind == "*" || gk.kind == kind));
                if !allowed {
                    problems.insert(at(format!(
                        "cluster-scoped {kind} ({}) is not in spec.destination.clusterResources",
                        if group.is_empty() { "core" } else { group }
                    )));
                }
            }
        }
        let id = identity(&obj);
        if let Some(first) = seen.insert(id.clone(), i) {
            problems.insert(at(format!("declared twice (objects #{} and #{})", first + 1, i + 1)));
        }
        out.push(obj);
    }
    if problems.is_empty() { Ok(out) } else { Err(problems.into_iter().collect()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    struct Case {
        name: String,
        destination: Destination,
        objects: Vec<Value>,
        #[serde(default)]
        problems: Vec<String>,
        #[serde(default)]
        namespaces: Vec<String>,
    }

    fn scopes() -> BTreeMap<(String, String), bool> {
        [
            ("", "ConfigMap", true),
            ("", "Namespace", false),
            ("apps", "Deployment", true),
            ("rbac.authorization.k8s.io", "ClusterRole", false),
            ("apiextensions.k8s.io", "CustomResourceDefinition", false),
        ]
        .into_iter()
        .map(|(g, k, n)| ((g.to_string(), k.to_string()), n))
        .collect()
    }

    #[test]
    fn table() {
        let cases: Vec<Case> = crate::yaml::from_str(include_str!("../../testdata/plan/validate.yaml")).unwrap();
        assert!(cases.len() >= 8);
        for c in cases {
            match validate(&c.objects, &c.destination, &scopes(), Limits::default()) {
                Ok(objs) => {
                    assert!(c.problems.is_empty(), "{}: expected problems {:?}", c.name, c.problems);
                    let ns: Vec<String> =
                        objs.iter().map(|o| o["metadata"]["namespace"].as_str().unwrap_or("").to_string()).collect();
                    if !c.namespaces.is_empty() {
                        assert_eq!(ns, c.namespaces, "{}", c.name);
                    }
                }
                Err(p) => assert_eq!(p, c.problems, "{}", c.name),
            }
        }
    }

    #[test]
    fn limits() {
        let d = Destination { namespace: "a".into(), ..Default::default() };
        let cm = |i: usize| serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("c{i}")}});
        let objs: Vec<Value> = (0..3).map(cm).collect();
        let e = validate(&objs, &d, &scopes(), Limits { max_objects: 2, max_object_bytes: 1 << 20 }).unwrap_err();
        assert_eq!(e, ["the desired state has 3 objects, more than the limit of 2"]);
        let e = validate(&objs[..1], &d, &scopes(), Limits { max_objects: 10, max_object_bytes: 10 }).unwrap_err();
        assert!(e[0].starts_with("ConfigMap c0: ") && e[0].contains("more than the limit of 10"), "{e:?}");
    }

    /// The recursive matcher this replaced: the oracle for [`glob`].
    fn glob_reference(pattern: &str, s: &str) -> bool {
        match pattern.split_once('*') {
            None => pattern == s,
            Some((head, rest)) => {
                let Some(after) = s.strip_prefix(head) else { return false };
                (0..=after.len()).any(|i| after.is_char_boundary(i) && glob_reference(rest, &after[i..]))
            }
        }
    }

    /// See: issue 18 (fuzz harness). 31 stars (the longest pattern the schema allows) against a
    /// 253-byte namespace: the recursive matcher did not return within minutes.
    #[test]
    fn glob_time_is_polynomial() {
        let pattern = format!("{}b", "*a".repeat(31));
        let ns = "a".repeat(253);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(glob(&pattern, &ns)));
        assert_eq!(rx.recv_timeout(std::time::Duration::from_secs(10)), Ok(false));
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config {
            failure_persistence: None,
            rng_seed: proptest::test_runner::RngSeed::Fixed(18),
            ..Default::default()
        })]

        /// Same answers as the reference on short strings over a small alphabet (so matches
        /// happen), with multi-byte characters.
        #[test]
        fn glob_agrees_with_the_reference(pattern in "[ab*é-]{0,8}", s in "[abé-]{0,10}") {
            proptest::prop_assert_eq!(glob(&pattern, &s), glob_reference(&pattern, &s));
        }
    }

    #[test]
    fn globs() {
        assert!(glob("team-*", "team-a"));
        assert!(glob("*", "anything"));
        assert!(glob("a*b*c", "axxbyyc"));
        assert!(!glob("team-*", "other"));
        assert!(!glob("a*b", "ac"));
        assert!(glob("a**", "a"));
        assert!(glob("", ""));
        assert!(!glob("", "a"));
        assert!(glob("*-prod", "team-a-prod-prod"));
    }
}
