//! What deleting an Application deletes (`deletionPolicy: DeleteManagedResources`): which of its
//! managed objects it deletes, which it keeps, and why. Pure: the finalizer lists, this decides.
//!
//! # Contract
//!
//! [`decide`] deletes every managed object (high-risk kinds included, as the spec says), except:
//!
//! - objects annotated `sync.kuvryn.io/prune: disabled` (the spec keeps them);
//! - a **Namespace** that would take with it anything this deletion does not delete: an object of
//!   another Application, an unmanaged object, or one of the Application's own that is kept. Not
//!   counted: what the platform puts in every namespace ([`namespace_default`]: the
//!   `kube-root-ca.crt` ConfigMap, the `default` ServiceAccount, OpenShift's
//!   `openshift-service-ca.crt` ConfigMap), objects already being
//!   deleted, objects the garbage collector deletes with their owners (every owner is deleted
//!   here, already being deleted, or, for a namespaced owner, no longer in the namespace), an
//!   `Endpoints` object whose Service of the same name is deleted here, and kinds that are not
//!   content ([`is_content`]: Events, PodMetrics);
//! - a **CustomResourceDefinition** one of whose custom resources (in any namespace) is not
//!   deleted here by the same rules (deleting a CRD deletes every object of its kind);
//! - a Namespace or CRD whose contents could not all be listed ([`Contents::unlisted`]): what
//!   cannot be shown to hold nothing else is kept.
//!
//! A Namespace or CRD already being deleted is not kept (nothing done here keeps or loses
//! anything), and its contents are not needed.
//!
//! Each kept object comes with why, naming up to [`NAMED`] of the objects that keep it. Keeping
//! is not a failure: the finalizer deletes the rest and lets the Application go, and the kept
//! objects are reported (a `PruneSkipped` Warning Event).
//!
//! # Assumptions
//!
//! The contents were listed just before the deletes, as the Application's service account,
//! without the Application's own labelled objects (those are in [`Inputs::managed`]). Something
//! created in a Namespace between that list and its delete is not seen; the window is one
//! reconcile.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::Value;

use super::validate::{self, Scopes};
use crate::api::names::annotations;

/// How many of the objects keeping a Namespace or CRD its reason names.
pub const NAMED: usize = 3;

/// Kinds that are not content of a namespace: records about other objects, which go with
/// them and hold no state of their own (core and `events.k8s.io` Events, which also expire
/// after an hour), and `metrics.k8s.io` PodMetrics (a view of running Pods, served by an
/// aggregated API that is often unavailable). They are neither listed nor counted.
pub const NOT_CONTENT: &[(&str, &str)] = &[("", "Event"), ("events.k8s.io", "Event"), ("metrics.k8s.io", "PodMetrics")];

/// Whether objects of `group`/`kind` count as content of a namespace (see [`NOT_CONTENT`]).
pub fn is_content(group: &str, kind: &str) -> bool {
    !NOT_CONTENT.iter().any(|(g, k)| *g == group && *k == kind)
}

/// What the platform itself puts in every namespace, and makes again in any namespace: the
/// `kube-root-ca.crt` ConfigMap and the `default` ServiceAccount (kube-controller-manager's
/// root-ca-cert publisher and serviceaccounts controller), and on control planes built from
/// OpenShift's tree (OpenShift, MicroShift) the `openshift-service-ca.crt` ConfigMap (its
/// service-ca publisher). Anything else a platform adds to every namespace keeps a Namespace.
pub fn namespace_default(obj: &Value) -> bool {
    let av = obj["apiVersion"].as_str().unwrap_or_default();
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    validate::group_of(av).is_empty()
        && matches!(
            (obj["kind"].as_str().unwrap_or_default(), name),
            ("ConfigMap", "kube-root-ca.crt" | "openshift-service-ca.crt") | ("ServiceAccount", "default")
        )
}

/// Whether `obj`, found in a container's contents (listed without the Application's own
/// objects), keeps its container whatever else the container holds: not a namespace default,
/// not being deleted, owned by nothing, and not an `Endpoints` object. The finalizer may stop
/// listing a container once it found one (and then says so in [`Contents::unlisted`]).
pub fn keeps_its_container(obj: &Value) -> bool {
    let meta = &obj["metadata"];
    !namespace_default(obj)
        && meta["deletionTimestamp"].is_null()
        && meta["ownerReferences"].as_array().is_none_or(Vec::is_empty)
        && !(obj["kind"] == "Endpoints"
            && validate::group_of(obj["apiVersion"].as_str().unwrap_or_default()).is_empty())
}

/// What a managed Namespace holds, or which custom resources of a managed CRD exist, besides the
/// Application's own labelled objects.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Contents {
    /// The objects found (metadata, with `apiVersion` and `kind`).
    pub objects: Vec<Value>,
    /// What was not listed, each saying why (a kind the service account may not list, listing
    /// stopped early). Anything here keeps the container.
    pub unlisted: Vec<String>,
}

/// The kind a managed CustomResourceDefinition defines, and its custom resources.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Definition {
    /// Its group.
    pub group: String,
    /// Its kind.
    pub kind: String,
    /// Its custom resources, in every namespace.
    pub contents: Contents,
}

/// What [`decide`] decides from.
pub struct Inputs<'a> {
    /// Every object labelled as managed by the Application, as listed (metadata with
    /// `apiVersion` and `kind`), opted-out ones included.
    pub managed: &'a [Value],
    /// The contents of each managed Namespace, by name. A managed Namespace missing here is kept.
    pub namespaces: &'a BTreeMap<String, Contents>,
    /// The kind and custom resources of each managed CRD, by the CRD's name. A managed CRD
    /// missing here is kept.
    pub definitions: &'a BTreeMap<String, Definition>,
    /// Which kinds are namespaced (an owner of a namespaced kind that is not in the namespace is
    /// gone).
    pub scopes: &'a dyn Scopes,
}

/// A managed object that is not deleted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kept {
    /// Its identity (`group/kind/namespace/name`).
    pub identity: String,
    /// `Kind namespace/name`.
    pub what: String,
    /// Why it is kept.
    pub why: String,
}

impl fmt::Display for Kept {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.what, self.why)
    }
}

/// The decision.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Deletion {
    /// The managed objects to delete, in identity order.
    pub delete: Vec<Value>,
    /// The managed objects kept, in identity order.
    pub kept: Vec<Kept>,
}

/// `Kind namespace/name`, or `Kind name`.
pub fn describe(obj: &Value) -> String {
    crate::api::display::object_of(obj)
}

fn opted_out(obj: &Value) -> bool {
    obj["metadata"]["annotations"][annotations::PRUNE] == annotations::PRUNE_DISABLED
}

fn group_kind(obj: &Value) -> (&str, &str) {
    (validate::group_of(obj["apiVersion"].as_str().unwrap_or_default()), obj["kind"].as_str().unwrap_or_default())
}

fn is_namespace(obj: &Value) -> bool {
    group_kind(obj) == ("", "Namespace")
}

fn is_crd(obj: &Value) -> bool {
    group_kind(obj) == ("apiextensions.k8s.io", "CustomResourceDefinition")
}

fn uid(obj: &Value) -> Option<&str> {
    obj["metadata"]["uid"].as_str().filter(|u| !u.is_empty())
}

fn name_of(obj: &Value) -> &str {
    obj["metadata"]["name"].as_str().unwrap_or_default()
}

fn namespace_of(obj: &Value) -> &str {
    obj["metadata"]["namespace"].as_str().unwrap_or_default()
}

/// Who an object in a container's contents is, as its reason names it.
fn blocker(obj: &Value) -> String {
    let who = describe(obj);
    if opted_out(obj) {
        format!("{who} (annotated {}: {})", annotations::PRUNE, annotations::PRUNE_DISABLED)
    } else {
        match obj["metadata"]["annotations"][annotations::APPLICATION].as_str() {
            Some(app) if !app.is_empty() => format!("{who} (Application {app})"),
            _ => who,
        }
    }
}

/// The objects of `objects` that nothing here deletes: what keeps their container. `doomed`:
/// the identities deleted here; `present`: for a Namespace, the uids of everything in it (an
/// owner of a namespaced kind not among them is gone).
fn blockers<'v>(
    objects: &[&'v Value],
    doomed: &BTreeSet<String>,
    doomed_uids: &BTreeSet<String>,
    present: Option<&BTreeSet<&str>>,
    scopes: &dyn Scopes,
) -> Vec<&'v Value> {
    // Owners deleted here or on their way: their dependents go with them (the garbage
    // collector), unless the owner is deleted with the `orphan` finalizer, which leaves them.
    let mut going: BTreeSet<String> = doomed_uids.clone();
    let being_deleted = |o: &Value| !o["metadata"]["deletionTimestamp"].is_null();
    let orphans = |o: &Value| o["metadata"]["finalizers"].as_array().is_some_and(|f| f.iter().any(|f| f == "orphan"));
    let gone_owner = |r: &Value, going: &BTreeSet<String>| {
        let owner_uid = r["uid"].as_str().unwrap_or_default();
        if going.contains(owner_uid) {
            return true;
        }
        let group = validate::group_of(r["apiVersion"].as_str().unwrap_or_default());
        let kind = r["kind"].as_str().unwrap_or_default();
        present.is_some_and(|p| scopes.namespaced(group, kind) == Some(true) && !p.contains(owner_uid))
    };
    let endpoints_of_doomed_service = |o: &Value| {
        group_kind(o) == ("", "Endpoints") && doomed.contains(&format!("/Service/{}/{}", namespace_of(o), name_of(o)))
    };
    let mut goes: BTreeSet<usize> = BTreeSet::new();
    // Dependents of dependents: until nothing changes (as deep as the ownership chains).
    loop {
        let before = goes.len();
        for (i, o) in objects.iter().enumerate() {
            if goes.contains(&i) || namespace_default(o) {
                continue;
            }
            let owners = o["metadata"]["ownerReferences"].as_array().filter(|a| !a.is_empty());
            let goes_too = being_deleted(o)
                || doomed.contains(&validate::identity(o))
                || uid(o).is_some_and(|u| doomed_uids.contains(u))
                || endpoints_of_doomed_service(o)
                || owners.is_some_and(|rs| rs.iter().all(|r| gone_owner(r, &going)));
            if goes_too {
                goes.insert(i);
                if let Some(u) = uid(o)
                    && !orphans(o)
                {
                    going.insert(u.to_string());
                }
            }
        }
        if goes.len() == before {
            break;
        }
    }
    objects.iter().enumerate().filter(|(i, o)| !goes.contains(i) && !namespace_default(o)).map(|(_, o)| *o).collect()
}

fn named(blockers: &[&Value]) -> String {
    let mut names: Vec<String> = blockers.iter().map(|o| blocker(o)).collect();
    names.sort();
    names.dedup();
    let more = names.len().saturating_sub(NAMED);
    names.truncate(NAMED);
    let mut s = names.join(", ");
    if more > 0 {
        s.push_str(&format!(" and {more} more"));
    }
    s
}

/// Why the container `c` must be kept, if it must.
fn keep_container(
    c: &Value,
    inputs: &Inputs<'_>,
    managed: &[&Value],
    doomed: &BTreeSet<String>,
    doomed_uids: &BTreeSet<String>,
) -> Option<String> {
    let name = name_of(c);
    if !c["metadata"]["deletionTimestamp"].is_null() {
        // Already on its way: nothing done here keeps or loses anything.
        return None;
    }
    let (contents, own, present, held, unprovable) = if is_namespace(c) {
        let Some(contents) = inputs.namespaces.get(name) else {
            return Some("what it holds was not listed".into());
        };
        let own: Vec<&Value> = managed.iter().copied().filter(|o| namespace_of(o) == name).collect();
        let present: BTreeSet<&str> = contents.objects.iter().chain(own.iter().copied()).filter_map(uid).collect();
        (
            contents,
            own,
            Some(present),
            "it holds what this Application does not delete",
            "it cannot be shown to hold nothing else",
        )
    } else {
        let Some(d) = inputs.definitions.get(name) else {
            return Some("its custom resources were not listed".into());
        };
        let own: Vec<&Value> =
            managed.iter().copied().filter(|o| group_kind(o) == (d.group.as_str(), d.kind.as_str())).collect();
        (
            &d.contents,
            own,
            None,
            "custom resources this Application does not delete exist",
            "its custom resources cannot all be listed",
        )
    };
    let objects: Vec<&Value> = contents
        .objects
        .iter()
        .filter(|o| {
            let (g, k) = group_kind(o);
            is_content(g, k)
        })
        .chain(own)
        .collect();
    let found = blockers(&objects, doomed, doomed_uids, present.as_ref(), inputs.scopes);
    let unlisted = contents.unlisted.join("; ");
    match (found.is_empty(), unlisted.is_empty()) {
        (true, true) => None,
        (false, true) => Some(format!("{held}: {}", named(&found))),
        (false, false) => Some(format!("{held}: {} (not all listed: {unlisted})", named(&found))),
        (true, false) => Some(format!("{unprovable}: {unlisted}")),
    }
}

/// Decide what deleting the Application deletes (see the module's contract).
pub fn decide(inputs: &Inputs<'_>) -> Deletion {
    // One object may be listed twice (two versions of its kind): an opt-out on either wins.
    let mut by_id: BTreeMap<String, &Value> = BTreeMap::new();
    for o in inputs.managed {
        let id = validate::identity(o);
        match by_id.get(&id) {
            Some(seen) if opted_out(seen) => {}
            _ => {
                by_id.insert(id, o);
            }
        }
    }
    let managed: Vec<&Value> = by_id.values().copied().collect();
    let mut kept: BTreeMap<String, Kept> = BTreeMap::new();
    for (id, o) in &by_id {
        if opted_out(o) {
            let why = format!("annotated {}: {}", annotations::PRUNE, annotations::PRUNE_DISABLED);
            kept.insert(id.clone(), Kept { identity: id.clone(), what: describe(o), why });
        }
    }
    // Keeping a container can keep another (an owner in one, dependents in the other): until
    // nothing changes.
    loop {
        let doomed: BTreeSet<String> = by_id.keys().filter(|id| !kept.contains_key(*id)).cloned().collect();
        let doomed_uids: BTreeSet<String> = doomed.iter().filter_map(|id| uid(by_id[id])).map(str::to_string).collect();
        let mut changed = false;
        for id in &doomed {
            let c = by_id[id];
            if !(is_namespace(c) || is_crd(c)) {
                continue;
            }
            if let Some(why) = keep_container(c, inputs, &managed, &doomed, &doomed_uids) {
                kept.insert(id.clone(), Kept { identity: id.clone(), what: describe(c), why });
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    Deletion {
        delete: by_id.iter().filter(|(id, _)| !kept.contains_key(*id)).map(|(_, o)| (*o).clone()).collect(),
        kept: kept.into_values().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    /// One case of `testdata/plan/deletion.yaml`.
    #[derive(Deserialize)]
    struct Case {
        name: String,
        #[serde(default)]
        managed: Vec<Value>,
        /// Contents by Namespace name.
        #[serde(default)]
        namespaces: BTreeMap<String, Listed>,
        /// Kind and custom resources by CRD name.
        #[serde(default)]
        definitions: BTreeMap<String, Listed>,
        want: Want,
    }

    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct Listed {
        group: String,
        kind: String,
        objects: Vec<Value>,
        unlisted: Vec<String>,
    }

    impl Listed {
        fn contents(&self) -> Contents {
            Contents { objects: self.objects.clone(), unlisted: self.unlisted.clone() }
        }
    }

    #[derive(Deserialize, Debug, PartialEq)]
    struct Want {
        #[serde(default)]
        delete: Vec<String>,
        #[serde(default)]
        kept: Vec<String>,
    }

    fn scopes() -> BTreeMap<(String, String), bool> {
        [
            ("", "ConfigMap", true),
            ("", "Service", true),
            ("", "Endpoints", true),
            ("", "Pod", true),
            ("", "PersistentVolumeClaim", true),
            ("", "ServiceAccount", true),
            ("apps", "Deployment", true),
            ("apps", "ReplicaSet", true),
            ("example.com", "Widget", true),
            ("", "Namespace", false),
            ("", "Node", false),
            ("apiextensions.k8s.io", "CustomResourceDefinition", false),
        ]
        .into_iter()
        .map(|(g, k, n)| ((g.to_string(), k.to_string()), n))
        .collect()
    }

    #[test]
    fn table() {
        let cases: Vec<Case> = crate::yaml::from_str(include_str!("../../testdata/plan/deletion.yaml"))
            .expect("testdata/plan/deletion.yaml");
        assert!(cases.len() >= 10, "{} cases", cases.len());
        let scopes = scopes();
        for c in cases {
            let namespaces = c.namespaces.iter().map(|(n, l)| (n.clone(), l.contents())).collect();
            let definitions = c
                .definitions
                .iter()
                .map(|(n, l)| {
                    (n.clone(), Definition { group: l.group.clone(), kind: l.kind.clone(), contents: l.contents() })
                })
                .collect();
            let d = decide(&Inputs {
                managed: &c.managed,
                namespaces: &namespaces,
                definitions: &definitions,
                scopes: &scopes,
            });
            let got = Want {
                delete: d.delete.iter().map(validate::identity).collect(),
                kept: d.kept.iter().map(|k| format!("{} -- {}", k.identity, k.why)).collect(),
            };
            assert_eq!(got, c.want, "{}", c.name);
        }
    }

    #[test]
    fn what_keeps_a_container_whatever_else_it_holds() {
        let o = |v: Value| v;
        let cases = [
            (
                "an unowned ConfigMap",
                o(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})),
                true,
            ),
            (
                "kube-root-ca.crt",
                o(
                    serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kube-root-ca.crt"}}),
                ),
                false,
            ),
            (
                "OpenShift's service CA",
                o(
                    serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "openshift-service-ca.crt"}}),
                ),
                false,
            ),
            (
                "the default ServiceAccount",
                o(serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}})),
                false,
            ),
            (
                "another ServiceAccount",
                o(serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "builder"}})),
                true,
            ),
            (
                "an owned Pod",
                o(
                    serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "ownerReferences": [{"uid": "u"}]}}),
                ),
                false,
            ),
            (
                "a Pod being deleted",
                o(
                    serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "deletionTimestamp": "2026-01-01T00:00:00Z"}}),
                ),
                false,
            ),
            (
                "Endpoints",
                o(serde_json::json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "web"}})),
                false,
            ),
            (
                "a Widget named like a default",
                o(
                    serde_json::json!({"apiVersion": "example.com/v1", "kind": "ConfigMap", "metadata": {"name": "kube-root-ca.crt"}}),
                ),
                true,
            ),
        ];
        for (what, obj, want) in cases {
            assert_eq!(keeps_its_container(&obj), want, "{what}");
        }
        assert!(!is_content("", "Event") && !is_content("events.k8s.io", "Event") && is_content("", "ConfigMap"));
    }
}
