//! API discovery: which kinds the cluster serves, whether each is namespaced (for validation,
//! [`crate::plan::validate::Scopes`]) and the resource to address each served version by (for
//! reading live objects and applying). A kind missing from a snapshot (for example a CRD
//! installed a moment ago) is looked up again by the caller refreshing the snapshot.
//!
//! Discovery runs group by group: one unavailable API group (an aggregated API whose backend is
//! down answers 503, `metrics.k8s.io` being the usual one) keeps its last good answer, or is left
//! out if it never had one, instead of failing the whole snapshot. [`Snapshots`] keeps the
//! current snapshot and refreshes it with one discovery at a time while readers go on using the
//! previous one.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use kube::Client;
use kube::core::ApiResource;

/// How long one API group's discovery may take before it counts as failed (and keeps its last
/// good answer).
pub const GROUP_TIMEOUT: Duration = Duration::from_secs(10);

/// API groups discovered at once.
const GROUPS_AT_ONCE: usize = 8;

/// What discovery found for one API group: its versions, preferred first, each with its
/// resources.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Group {
    versions: Vec<(String, Vec<Served>)>,
}

/// One resource of a group version.
#[derive(Clone, Debug, PartialEq)]
struct Served {
    resource: ApiResource,
    namespaced: bool,
    /// It answers `list` (discovery names the verb).
    listable: bool,
}

impl Group {
    /// A group from its versions' resource lists (`/apis/<group>/<version>`, or `/api/v1` for
    /// the core group), `preferred` first. Subresources are left out.
    pub fn from_lists(preferred: Option<&str>, lists: Vec<(String, APIResourceList)>) -> Group {
        let mut versions: Vec<(String, Vec<Served>)> = lists
            .into_iter()
            .map(|(version, list)| {
                let (group, _) = split_group_version(&list.group_version);
                let resources = list
                    .resources
                    .iter()
                    .filter(|r| !r.name.contains('/'))
                    .map(|r| {
                        let resource = ApiResource {
                            group: r.group.clone().unwrap_or_else(|| group.to_string()),
                            version: r.version.clone().unwrap_or_else(|| version.clone()),
                            api_version: list.group_version.clone(),
                            kind: r.kind.clone(),
                            plural: r.name.clone(),
                        };
                        Served { resource, namespaced: r.namespaced, listable: r.verbs.iter().any(|v| v == "list") }
                    })
                    .collect();
                (version, resources)
            })
            .collect();
        // Stable: the preferred version first, the others in the server's order.
        versions.sort_by_key(|(v, _)| Some(v.as_str()) != preferred);
        Group { versions }
    }
}

fn split_group_version(gv: &str) -> (&str, &str) {
    gv.split_once('/').unwrap_or(("", gv))
}

/// A snapshot of the served kinds.
#[derive(Clone, Debug, Default)]
pub struct ClusterScopes {
    /// (group, kind) → namespaced.
    kinds: BTreeMap<(String, String), bool>,
    /// (group, version, kind) → the resource.
    resources: BTreeMap<(String, String, String), ApiResource>,
    /// What each group answered last ("" is the core group).
    groups: BTreeMap<String, Group>,
    /// Groups whose discovery failed this time, with the error: their answer is the previous
    /// snapshot's, if there was one.
    failed: BTreeMap<String, String>,
    /// The server's `gitVersion` (`/version`), when it answered.
    server_version: Option<String>,
}

impl PartialEq for ClusterScopes {
    fn eq(&self, other: &Self) -> bool {
        self.kinds == other.kinds
            && self.resources.len() == other.resources.len()
            && self.resources.iter().zip(other.resources.iter()).all(|(a, b)| a.0 == b.0 && a.1.plural == b.1.plural)
    }
}

impl ClusterScopes {
    /// Run discovery (every group, preferred and other versions). Fails only when the list of
    /// groups cannot be read; a group that fails is left out ([`ClusterScopes::failed`]).
    pub async fn discover(client: &Client) -> Result<ClusterScopes, kube::Error> {
        Self::refresh(client, None).await
    }

    /// Run discovery again, group by group: a group that fails keeps its answer from
    /// `previous`. Fails only when the list of groups (`/api`, `/apis`) cannot be read.
    pub async fn refresh(client: &Client, previous: Option<&ClusterScopes>) -> Result<ClusterScopes, kube::Error> {
        let mut found: BTreeMap<String, Result<Group, String>> = BTreeMap::new();
        let core = client.list_core_api_versions().await?;
        let mut lists = Vec::new();
        let mut failure = None;
        for v in &core.versions {
            match client.list_core_api_resources(v).await {
                Ok(list) => lists.push((v.clone(), list)),
                Err(e) => failure = Some(e.to_string()),
            }
        }
        found.insert(String::new(), failure.map_or_else(|| Ok(Group::from_lists(Some("v1"), lists)), Err));
        // Groups are asked concurrently, each bounded: an aggregated API that accepts the
        // connection and never answers must not hold up the snapshot (and so every reconcile).
        let answers: Vec<(String, Result<Group, String>)> =
            futures_util::stream::iter(client.list_api_groups().await?.groups)
                .map(|g| async move {
                    let ask = async {
                        let mut lists = Vec::new();
                        for v in &g.versions {
                            match client.list_api_group_resources(&v.group_version).await {
                                Ok(list) => lists.push((v.version.clone(), list)),
                                Err(e) => return Err(format!("{}: {e}", v.group_version)),
                            }
                        }
                        let preferred = g.preferred_version.as_ref().map(|v| v.version.as_str());
                        Ok(Group::from_lists(preferred, lists))
                    };
                    let answer = tokio::time::timeout(GROUP_TIMEOUT, ask)
                        .await
                        .unwrap_or_else(|_| Err(format!("no answer within {}s", GROUP_TIMEOUT.as_secs())));
                    (g.name.clone(), answer)
                })
                .buffer_unordered(GROUPS_AT_ONCE)
                .collect()
                .await;
        found.extend(answers);
        let mut scopes = Self::merge(previous, found);
        scopes.server_version = match client.apiserver_version().await {
            Ok(v) => Some(v.git_version),
            Err(e) => {
                tracing::warn!(error = %e, "reading the API server's version failed");
                previous.and_then(|p| p.server_version.clone())
            }
        };
        for (group, error) in &scopes.failed {
            let kept = previous.is_some_and(|p| p.groups.contains_key(group));
            tracing::warn!(group = %group, error = %error, kept_last_answer = kept, "discovery of an API group failed");
        }
        Ok(scopes)
    }

    /// A snapshot from what each listed group answered this time (`found`): a group that
    /// failed keeps its answer from `previous` if it had one, and is left out otherwise; a
    /// group not listed any more is gone. Every failure is kept in [`ClusterScopes::failed`].
    pub fn merge(previous: Option<&ClusterScopes>, found: BTreeMap<String, Result<Group, String>>) -> ClusterScopes {
        let mut groups = BTreeMap::new();
        let mut failed = BTreeMap::new();
        for (name, answer) in found {
            match answer {
                Ok(g) => {
                    groups.insert(name, g);
                }
                Err(e) => {
                    if let Some(g) = previous.and_then(|p| p.groups.get(&name)) {
                        groups.insert(name.clone(), g.clone());
                    }
                    failed.insert(name, e);
                }
            }
        }
        let mut kinds = BTreeMap::new();
        let mut resources = BTreeMap::new();
        for g in groups.values() {
            // The preferred version comes first: its scope wins for the kind.
            for (_, rs) in &g.versions {
                for Served { resource: r, namespaced, .. } in rs {
                    kinds.entry((r.group.clone(), r.kind.clone())).or_insert(*namespaced);
                    resources.insert((r.group.clone(), r.version.clone(), r.kind.clone()), r.clone());
                }
            }
        }
        ClusterScopes { kinds, resources, groups, failed, server_version: None }
    }

    /// What Helm's `.Capabilities` answer for this cluster: its version and every served
    /// `group/version` and `group/version/Kind` (`v1` and `v1/Pod` for the core group), as
    /// `helm install` would find them.
    pub fn capabilities(&self) -> crate::render::Capabilities {
        let mut api_versions = std::collections::BTreeSet::new();
        for g in self.groups.values() {
            for (_, rs) in &g.versions {
                for Served { resource: r, .. } in rs {
                    api_versions.insert(r.api_version.clone());
                    api_versions.insert(format!("{}/{}", r.api_version, r.kind));
                }
            }
        }
        crate::render::Capabilities { kube_version: self.server_version.clone(), api_versions }
    }

    /// How many kinds are known.
    pub fn len(&self) -> usize {
        self.kinds.len()
    }

    /// Whether no kind is known.
    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    /// The resource serving `group/version` `kind`, when the cluster serves it.
    pub fn resource(&self, group: &str, version: &str, kind: &str) -> Option<&ApiResource> {
        self.resources.get(&(group.to_string(), version.to_string(), kind.to_string()))
    }

    /// Every namespaced kind that answers `list`, once, in its preferred version (in group and
    /// kind order): what a namespace can hold.
    pub fn namespaced_listable(&self) -> Vec<&ApiResource> {
        let mut seen = std::collections::BTreeSet::new();
        let mut out = Vec::new();
        for (_, rs) in self.groups.values().flat_map(|g| g.versions.iter()) {
            for s in rs.iter().filter(|s| s.namespaced && s.listable) {
                if seen.insert((&s.resource.group, &s.resource.kind)) {
                    out.push(&s.resource);
                }
            }
        }
        out.sort_by(|a, b| (&a.group, &a.kind).cmp(&(&b.group, &b.kind)));
        out
    }

    /// The resource `plural` of `group` in its preferred served version (a CustomResourceDefinition
    /// named `<plural>.<group>` defines it), when the cluster serves it.
    pub fn by_plural(&self, group: &str, plural: &str) -> Option<&ApiResource> {
        let g = self.groups.get(group)?;
        g.versions.iter().flat_map(|(_, rs)| rs.iter()).map(|s| &s.resource).find(|r| r.plural == plural)
    }

    /// The groups whose discovery failed in the run that made this snapshot, with the error
    /// ("" is the core group). Each one still has its previous answer, if it had one.
    pub fn failed(&self) -> &BTreeMap<String, String> {
        &self.failed
    }
}

impl crate::plan::validate::Scopes for ClusterScopes {
    fn namespaced(&self, group: &str, kind: &str) -> Option<bool> {
        self.kinds.get(&(group.to_string(), kind.to_string())).copied()
    }
}

/// The current discovery snapshot of one client, refreshed one discovery at a time.
///
/// # Guarantees
///
/// - A reader that does not ask for a refresh gets the current snapshot at once: no lock is
///   held while discovery runs, so reconciles never wait behind a slow or failing discovery
///   (only the very first read, with no snapshot yet, waits for one).
/// - **Single flight**: callers that ask for a refresh at the same time wait for one discovery
///   and share it; one that started after they asked counts as theirs.
/// - A failing group keeps its last good answer ([`ClusterScopes::refresh`]); if the group list
///   itself cannot be read, the caller gets the error and the snapshot stays as it was.
#[derive(Default)]
pub struct Snapshots {
    current: std::sync::Mutex<Option<(Instant, Arc<ClusterScopes>)>>,
    refreshing: tokio::sync::Mutex<()>,
}

impl Snapshots {
    fn current(&self) -> Option<(Instant, Arc<ClusterScopes>)> {
        self.current.lock().expect("discovery snapshot lock").clone()
    }

    /// The current snapshot; with `refresh`, a new one unless the current one is younger than
    /// `fresh_for` (a CRD installed a moment ago). Discovers first if there is none.
    pub async fn get(
        &self,
        client: &Client,
        refresh: bool,
        fresh_for: Duration,
    ) -> Result<Arc<ClusterScopes>, kube::Error> {
        match self.current() {
            Some((at, s)) if !refresh || at.elapsed() < fresh_for => Ok(s),
            _ => self.refresh(client).await,
        }
    }

    /// A snapshot made by a discovery that started after this call.
    pub async fn refresh(&self, client: &Client) -> Result<Arc<ClusterScopes>, kube::Error> {
        let asked = Instant::now();
        let _one = self.refreshing.lock().await;
        let previous = self.current();
        if let Some((at, s)) = &previous
            && *at >= asked
        {
            return Ok(s.clone());
        }
        let started = Instant::now();
        let s = Arc::new(ClusterScopes::refresh(client, previous.as_ref().map(|(_, s)| &**s)).await?);
        *self.current.lock().expect("discovery snapshot lock") = Some((started, s.clone()));
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::validate::Scopes;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource;

    fn list(gv: &str, resources: &[(&str, &str, bool)]) -> APIResourceList {
        APIResourceList {
            group_version: gv.into(),
            resources: resources
                .iter()
                .map(|(name, kind, namespaced)| APIResource {
                    name: (*name).into(),
                    kind: (*kind).into(),
                    namespaced: *namespaced,
                    singular_name: String::new(),
                    verbs: vec!["get".into()],
                    ..Default::default()
                })
                .collect(),
        }
    }

    fn group(gv: &str, resources: &[(&str, &str, bool)]) -> Group {
        let (_, version) = split_group_version(gv);
        Group::from_lists(Some(version), vec![(version.to_string(), list(gv, resources))])
    }

    fn found(answers: Vec<(&str, Result<Group, &str>)>) -> BTreeMap<String, Result<Group, String>> {
        answers.into_iter().map(|(n, a)| (n.to_string(), a.map_err(str::to_string))).collect()
    }

    // See: issue 18, item 8. One unavailable aggregated API must not take the others with it.
    #[test]
    fn a_failing_group_keeps_its_last_good_answer() {
        let core = || group("v1", &[("configmaps", "ConfigMap", true), ("pods/status", "Pod", true)]);
        let metrics = || group("metrics.k8s.io/v1beta1", &[("pods", "PodMetrics", true)]);
        let first = ClusterScopes::merge(None, found(vec![("", Ok(core())), ("metrics.k8s.io", Ok(metrics()))]));
        assert_eq!(first.namespaced("metrics.k8s.io", "PodMetrics"), Some(true));
        assert_eq!(first.resource("", "v1", "ConfigMap").map(|r| r.plural.as_str()), Some("configmaps"));
        assert!(first.failed().is_empty());

        // metrics.k8s.io answers 503: its previous answer stays, the rest is fresh.
        let apps = group("apps/v1", &[("deployments", "Deployment", true)]);
        let second = ClusterScopes::merge(
            Some(&first),
            found(vec![("", Ok(core())), ("apps", Ok(apps)), ("metrics.k8s.io", Err("503 service unavailable"))]),
        );
        assert_eq!(second.namespaced("metrics.k8s.io", "PodMetrics"), Some(true));
        assert_eq!(second.namespaced("apps", "Deployment"), Some(true));
        assert_eq!(second.failed().get("metrics.k8s.io").map(String::as_str), Some("503 service unavailable"));

        // Never answered: left out, everything else is there.
        let fresh = ClusterScopes::merge(None, found(vec![("", Ok(core())), ("metrics.k8s.io", Err("503"))]));
        assert_eq!(fresh.namespaced("metrics.k8s.io", "PodMetrics"), None);
        assert_eq!(fresh.namespaced("", "ConfigMap"), Some(true));
        assert_eq!(fresh.len(), 1, "subresources are not kinds");

        // It answers again: the new answer replaces the kept one. A group no longer listed is gone.
        let metrics_v2 = group("metrics.k8s.io/v1beta1", &[("nodes", "NodeMetrics", false)]);
        let third =
            ClusterScopes::merge(Some(&second), found(vec![("", Ok(core())), ("metrics.k8s.io", Ok(metrics_v2))]));
        assert_eq!(third.namespaced("metrics.k8s.io", "PodMetrics"), None);
        assert_eq!(third.namespaced("metrics.k8s.io", "NodeMetrics"), Some(false));
        assert_eq!(third.namespaced("apps", "Deployment"), None);
        assert!(third.failed().is_empty());
    }

    #[test]
    fn what_a_namespace_can_hold_is_every_namespaced_kind_that_answers_list_once() {
        let with_verbs = |gv: &str, resources: &[(&str, &str, bool, &[&str])]| APIResourceList {
            group_version: gv.into(),
            resources: resources
                .iter()
                .map(|(name, kind, namespaced, verbs)| APIResource {
                    name: (*name).into(),
                    kind: (*kind).into(),
                    namespaced: *namespaced,
                    verbs: verbs.iter().map(|v| v.to_string()).collect(),
                    ..Default::default()
                })
                .collect(),
        };
        let all: &[&str] = &["create", "delete", "get", "list", "watch"];
        let core = Group::from_lists(
            Some("v1"),
            vec![(
                "v1".into(),
                with_verbs(
                    "v1",
                    &[
                        ("configmaps", "ConfigMap", true, all),
                        ("bindings", "Binding", true, &["create"]),
                        ("namespaces", "Namespace", false, all),
                        ("pods/log", "Pod", true, &["get"]),
                    ],
                ),
            )],
        );
        let widgets = Group::from_lists(
            Some("v2"),
            vec![
                ("v1".into(), with_verbs("example.com/v1", &[("widgets", "Widget", true, all)])),
                ("v2".into(), with_verbs("example.com/v2", &[("widgets", "Widget", true, all)])),
            ],
        );
        let s = ClusterScopes::merge(None, found(vec![("", Ok(core)), ("example.com", Ok(widgets))]));
        let kinds: Vec<String> =
            s.namespaced_listable().iter().map(|r| format!("{}/{}", r.api_version, r.kind)).collect();
        assert_eq!(kinds, vec!["v1/ConfigMap", "example.com/v2/Widget"]);
        assert_eq!(s.by_plural("example.com", "widgets").map(|r| r.version.as_str()), Some("v2"));
        assert_eq!(s.by_plural("", "namespaces").map(|r| r.kind.as_str()), Some("Namespace"));
        assert_eq!(s.by_plural("example.com", "gadgets"), None);
    }

    #[test]
    fn the_preferred_version_decides_a_kinds_scope_and_every_version_is_addressable() {
        let g = Group::from_lists(
            Some("v2"),
            vec![
                ("v1".into(), list("example.com/v1", &[("widgets", "Widget", false)])),
                ("v2".into(), list("example.com/v2", &[("widgets", "Widget", true)])),
            ],
        );
        let s = ClusterScopes::merge(None, found(vec![("example.com", Ok(g))]));
        assert_eq!(s.namespaced("example.com", "Widget"), Some(true));
        assert_eq!(s.resource("example.com", "v1", "Widget").map(|r| r.api_version.as_str()), Some("example.com/v1"));
        assert_eq!(s.resource("example.com", "v2", "Widget").map(|r| r.plural.as_str()), Some("widgets"));
    }
}
