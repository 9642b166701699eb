//! The resources the server serves: the built-in ones of a real v1.36 kube-apiserver
//! (`data/builtin-discovery.json`, extracted from the recorded aggregated discovery) and those
//! registered by CustomResourceDefinitions. Renders legacy and aggregated discovery documents.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock, RwLock};

use base64::Engine;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// A subresource of a resource.
#[derive(Clone, Debug, PartialEq)]
pub struct Subresource {
    /// `status`, `scale`, `binding`, ...
    pub name: String,
    /// Group of the response kind (empty: the resource's own group).
    pub group: String,
    /// Version of the response kind (empty: the resource's own version).
    pub version: String,
    /// Response kind.
    pub kind: String,
    /// Verbs.
    pub verbs: Vec<String>,
}

/// One served resource at one version.
#[derive(Clone, Debug, PartialEq)]
pub struct ResourceType {
    /// API group (empty for core).
    pub group: String,
    /// Version.
    pub version: String,
    /// Plural resource name.
    pub resource: String,
    /// Singular name.
    pub singular: String,
    /// Kind.
    pub kind: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Verbs.
    pub verbs: Vec<String>,
    /// Short names.
    pub short_names: Vec<String>,
    /// Categories.
    pub categories: Vec<String>,
    /// Subresources.
    pub subresources: Vec<Subresource>,
    /// Served by a CustomResourceDefinition.
    pub custom: bool,
}

impl ResourceType {
    /// `group/version`, or `v1` for core.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    /// Storage key: group and resource (all versions of a resource share storage).
    pub fn key(&self) -> String {
        // events.k8s.io Events and core Events are one resource in two shapes.
        if self.group == "events.k8s.io" && self.resource == "events" {
            return "/events".into();
        }
        format!("{}/{}", self.group, self.resource)
    }

    /// `<Kind>List`.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// Whether a verb is served.
    pub fn has_verb(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }

    /// A subresource by name.
    pub fn subresource(&self, name: &str) -> Option<&Subresource> {
        self.subresources.iter().find(|s| s.name == name)
    }

    /// Whether objects are persisted (and so get a storageVersionHash).
    fn stored(&self) -> bool {
        self.has_verb("create") && self.has_verb("get")
    }

    /// The storage version hash the real server publishes: base64 of the first 8 bytes of
    /// sha256("group/version/kind").
    pub fn storage_version_hash(&self) -> String {
        // Resources stored under another group or version hash that one.
        let (group, version) = match (self.group.as_str(), self.resource.as_str()) {
            ("events.k8s.io", "events") => ("", "v1"),
            ("apiextensions.k8s.io", "customresourcedefinitions") => ("apiextensions.k8s.io", "v1beta1"),
            (g, _) => (g, self.version.as_str()),
        };
        let digest = Sha256::digest(format!("{group}/{version}/{}", self.kind).as_bytes());
        base64::engine::general_purpose::STANDARD.encode(&digest[..8])
    }

    /// The legacy discovery entries (resource and its subresources).
    pub fn legacy_entries(&self) -> Vec<Value> {
        let mut main = json!({
            "name": self.resource,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": self.verbs,
        });
        if !self.short_names.is_empty() {
            main["shortNames"] = json!(self.short_names);
        }
        if !self.categories.is_empty() {
            main["categories"] = json!(self.categories);
        }
        if self.stored() {
            main["storageVersionHash"] = json!(self.storage_version_hash());
        }
        let mut out = vec![main];
        for s in &self.subresources {
            let mut e = json!({
                "name": format!("{}/{}", self.resource, s.name),
                "singularName": "",
                "namespaced": self.namespaced,
                "kind": s.kind,
                "verbs": s.verbs,
            });
            if !s.group.is_empty() || !s.version.is_empty() {
                e["group"] = json!(s.group);
                e["version"] = json!(s.version);
            }
            out.push(e);
        }
        out
    }

    /// The aggregated discovery entry.
    pub fn aggregated_entry(&self) -> Value {
        let mut e = json!({
            "resource": self.resource,
            "responseKind": if self.custom {
                json!({"group": self.group, "version": self.version, "kind": self.kind})
            } else {
                json!({"group": "", "version": "", "kind": self.kind})
            },
            "scope": if self.namespaced { "Namespaced" } else { "Cluster" },
            "singularResource": self.singular,
            "verbs": self.verbs,
        });
        if !self.short_names.is_empty() {
            e["shortNames"] = json!(self.short_names);
        }
        if !self.categories.is_empty() {
            e["categories"] = json!(self.categories);
        }
        if !self.subresources.is_empty() {
            e["subresources"] = Value::Array(
                self.subresources
                    .iter()
                    .map(|s| {
                        let (g, v) = if self.custom && s.group.is_empty() {
                            (self.group.as_str(), self.version.as_str())
                        } else {
                            (s.group.as_str(), s.version.as_str())
                        };
                        json!({"subresource": s.name,
                               "responseKind": {"group": g, "version": v, "kind": s.kind},
                               "verbs": s.verbs})
                    })
                    .collect(),
            );
        }
        e
    }
}

/// A group version and its resources, in discovery order.
#[derive(Clone, Debug)]
pub struct GroupVersion {
    /// Group (empty for core).
    pub group: String,
    /// Version.
    pub version: String,
    /// Resources, sorted by name.
    pub resources: Vec<Arc<ResourceType>>,
}

/// Every served resource.
pub struct Registry {
    builtin: Vec<GroupVersion>,
    custom: RwLock<BTreeMap<String, Vec<GroupVersion>>>,
}

static BUILTIN: LazyLock<Vec<GroupVersion>> = LazyLock::new(load_builtin);

fn strings(v: &Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(String::from)).collect()).unwrap_or_default()
}

fn load_builtin() -> Vec<GroupVersion> {
    let data: Value =
        serde_json::from_str(include_str!("../data/builtin-discovery.json")).expect("builtin-discovery.json is valid");
    let mut out = Vec::new();
    let items = data["core"]["items"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(data["groups"]["items"].as_array().into_iter().flatten());
    for item in items {
        let group = item["metadata"]["name"].as_str().unwrap_or_default().to_string();
        for v in item["versions"].as_array().into_iter().flatten() {
            let version = v["version"].as_str().unwrap_or_default().to_string();
            let mut resources = Vec::new();
            for r in v["resources"].as_array().into_iter().flatten() {
                resources.push(Arc::new(resource_from_aggregated(&group, &version, r, false)));
            }
            out.push(GroupVersion { group: group.clone(), version, resources });
        }
    }
    out
}

/// Build a [`ResourceType`] from an aggregated-discovery resource entry.
pub fn resource_from_aggregated(group: &str, version: &str, r: &Value, custom: bool) -> ResourceType {
    ResourceType {
        group: group.to_string(),
        version: version.to_string(),
        resource: r["resource"].as_str().unwrap_or_default().to_string(),
        singular: r["singularResource"].as_str().unwrap_or_default().to_string(),
        kind: r["responseKind"]["kind"].as_str().unwrap_or_default().to_string(),
        namespaced: r["scope"] == "Namespaced",
        verbs: strings(&r["verbs"]),
        short_names: strings(&r["shortNames"]),
        categories: strings(&r["categories"]),
        subresources: r["subresources"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| Subresource {
                name: s["subresource"].as_str().unwrap_or_default().to_string(),
                group: s["responseKind"]["group"].as_str().unwrap_or_default().to_string(),
                version: s["responseKind"]["version"].as_str().unwrap_or_default().to_string(),
                kind: s["responseKind"]["kind"].as_str().unwrap_or_default().to_string(),
                verbs: strings(&s["verbs"]),
            })
            .collect(),
        custom,
    }
}

impl Default for Registry {
    fn default() -> Self {
        Registry { builtin: BUILTIN.clone(), custom: RwLock::new(BTreeMap::new()) }
    }
}

impl Registry {
    /// Every group version: built-in ones first (core first), then custom groups by name.
    pub fn group_versions(&self) -> Vec<GroupVersion> {
        let mut out = self.builtin.clone();
        let custom = self.custom.read().expect("registry lock");
        let mut merged: BTreeMap<(String, String), GroupVersion> = BTreeMap::new();
        for gvs in custom.values() {
            for gv in gvs {
                let e = merged.entry((gv.group.clone(), gv.version.clone())).or_insert_with(|| GroupVersion {
                    group: gv.group.clone(),
                    version: gv.version.clone(),
                    resources: vec![],
                });
                e.resources.extend(gv.resources.iter().cloned());
            }
        }
        for (_, mut gv) in merged {
            gv.resources.sort_by(|a, b| a.resource.cmp(&b.resource));
            out.push(gv);
        }
        out
    }

    /// Groups with their versions in preference order (core excluded).
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for gv in self.group_versions() {
            if gv.group.is_empty() {
                continue;
            }
            match out.iter_mut().find(|(g, _)| *g == gv.group) {
                Some((_, vs)) => {
                    if !vs.contains(&gv.version) {
                        vs.push(gv.version)
                    }
                }
                None => out.push((gv.group, vec![gv.version])),
            }
        }
        out
    }

    /// The resources of one group version, if served.
    pub fn group_version(&self, group: &str, version: &str) -> Option<GroupVersion> {
        self.group_versions().into_iter().find(|gv| gv.group == group && gv.version == version)
    }

    /// Whether a group is served at all.
    pub fn has_group(&self, group: &str) -> bool {
        self.group_versions().iter().any(|gv| gv.group == group)
    }

    /// Find a resource by group, version and plural name.
    pub fn find(&self, group: &str, version: &str, resource: &str) -> Option<Arc<ResourceType>> {
        if let Some(gv) = self.builtin.iter().find(|gv| gv.group == group && gv.version == version)
            && let Some(r) = gv.resources.iter().find(|r| r.resource == resource)
        {
            return Some(r.clone());
        }
        let custom = self.custom.read().expect("registry lock");
        custom
            .values()
            .flatten()
            .filter(|gv| gv.group == group && gv.version == version)
            .flat_map(|gv| gv.resources.iter())
            .find(|r| r.resource == resource)
            .cloned()
    }

    /// Find a resource by apiVersion and kind.
    pub fn find_kind(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceType>> {
        let (group, version) = split_api_version(api_version);
        self.group_versions()
            .into_iter()
            .filter(|gv| gv.group == group && gv.version == version)
            .flat_map(|gv| gv.resources)
            .find(|r| r.kind == kind)
    }

    /// Register (or replace) the resources of a CRD, keyed by the CRD's name.
    pub fn set_custom(&self, crd_name: &str, resources: Vec<ResourceType>) {
        let mut by_version: BTreeMap<String, GroupVersion> = BTreeMap::new();
        for r in resources {
            by_version
                .entry(r.version.clone())
                .or_insert_with(|| GroupVersion {
                    group: r.group.clone(),
                    version: r.version.clone(),
                    resources: vec![],
                })
                .resources
                .push(Arc::new(r));
        }
        self.custom.write().expect("registry lock").insert(crd_name.to_string(), by_version.into_values().collect());
    }

    /// Remove a CRD's resources.
    pub fn remove_custom(&self, crd_name: &str) {
        self.custom.write().expect("registry lock").remove(crd_name);
    }
}

/// Split `group/version` (or `v1`) into group and version.
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}
