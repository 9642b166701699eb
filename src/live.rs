//! Reading the live state a plan compares against, as the Application's service account:
//!
//! - the live object of every desired object (a `GET`; absent means Create);
//! - a server-side dry-run apply of every desired object that exists, with our field manager,
//!   so defaults and normalization come from the API server itself (as fluxcd/pkg `ssa` does);
//!   a `409` lists the conflicting fields and their managers; under conflict policy `adopt` a
//!   forced dry run gives the candidate;
//! - every object labelled as managed by the Application, across every kind in
//!   `status.managedKinds` and every desired kind (metadata only: prune candidates).
//!
//! Nothing here writes: every request is a read or a dry run.

use std::collections::{BTreeMap, BTreeSet};

use futures_util::StreamExt;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::ApiResource;
use serde_json::{Value, json};

use crate::api::common::GroupVersionKind;
use crate::api::names;
use crate::plan::{Conflict, inventory, validate};
use crate::watch::discovery::ClusterScopes;

/// Requests in flight at once per Application.
const CONCURRENCY: usize = 8;
/// Page size of managed-object lists.
const PAGE: u32 = 500;

/// What was read.
#[derive(Debug, Default)]
pub struct Live {
    /// Live objects matching desired ones, by identity.
    pub live: BTreeMap<String, Value>,
    /// Dry-run results, by identity.
    pub dry_run: BTreeMap<String, Value>,
    /// Conflicting fields, by identity.
    pub conflicts: BTreeMap<String, Vec<Conflict>>,
    /// Objects labelled as managed (metadata only, with apiVersion and kind).
    pub managed: Vec<Value>,
    /// Desired objects read whose dry run was spared: only their status moved since a plan
    /// found them unchanged ([`same_but_status`]).
    pub rechecked: BTreeSet<String>,
    /// Desired workloads as they were dry-run, by identity, where their live Pod template
    /// carries the stamp of an earlier version, kept ([`inventory::with_kept_pod_stamp`]): they
    /// must be applied as such ([`with_kept_stamps`]), or the apply would roll them.
    pub kept_stamps: BTreeMap<String, Value>,
}

/// `desired` as it is applied: each object that was dry-run with a kept Pod-template stamp
/// ([`Live::kept_stamps`]) replaced by that object.
///
/// Only the apply needs them: a plan compares the fields `desired` declares, which do not
/// include a kept stamp, with its dry run, so plans, their digests and the desired-state hash
/// are the same with and without.
pub fn with_kept_stamps<'a>(desired: &'a [Value], kept: &BTreeMap<String, Value>) -> std::borrow::Cow<'a, [Value]> {
    if kept.is_empty() {
        return std::borrow::Cow::Borrowed(desired);
    }
    desired.iter().map(|d| kept.get(&validate::identity(d)).unwrap_or(d).clone()).collect()
}

/// Why the live state could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The service account may not do something the plan needs (the API's own message).
    #[error("{0}")]
    Forbidden(String),
    /// The API server refused desired objects (invalid): every one listed.
    #[error("{}", .0.join("; "))]
    Invalid(Vec<String>),
    /// Another API failure (retried with back-off).
    #[error("{0}")]
    Api(#[from] kube::Error),
}

fn what(obj: &Value) -> String {
    crate::api::display::object_of(obj)
}

fn api_for(client: &Client, resource: &ApiResource, namespace: Option<&str>) -> Api<DynamicObject> {
    match namespace {
        Some(ns) if !ns.is_empty() => Api::namespaced_with(client.clone(), ns, resource),
        _ => Api::all_with(client.clone(), resource),
    }
}

fn resource_of<'a>(scopes: &'a ClusterScopes, obj: &Value) -> Option<&'a ApiResource> {
    let av = obj["apiVersion"].as_str()?;
    let version = av.rsplit('/').next()?;
    scopes.resource(validate::group_of(av), version, obj["kind"].as_str()?)
}

/// The conflicts of a `409` apply: each cause's field and the manager its message names
/// (`conflict with "kubectl" using v1`).
pub fn conflicts_of(status: &kube::core::Status) -> Vec<Conflict> {
    let mut out: Vec<Conflict> = status
        .details
        .iter()
        .flat_map(|d| d.causes.iter())
        .filter(|c| c.reason == "FieldManagerConflict" || c.message.starts_with("conflict with"))
        .map(|c| Conflict { field: c.field.clone(), manager: manager_of(&c.message) })
        .collect();
    out.sort();
    out.dedup();
    out
}

fn manager_of(message: &str) -> String {
    let rest = message.trim_start_matches("conflict with").trim_start();
    if let Some(quoted) = rest.strip_prefix('"') {
        let mut out = String::new();
        let mut chars = quoted.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => out.extend(chars.next()),
                '"' => return out,
                c => out.push(c),
            }
        }
        out
    } else {
        rest.split_whitespace().next().unwrap_or_default().to_string()
    }
}

fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}

enum One {
    Absent,
    /// `spared`: not dry-run, only its status moved since a plan found it unchanged.
    Present {
        live: Value,
        dry_run: Option<Value>,
        conflicts: Vec<Conflict>,
        spared: bool,
        /// `desired` with the Pod-template stamp of an earlier version kept, as dry-run.
        kept: Option<Value>,
    },
}

/// The live object of `desired`, if there is one.
async fn get(client: &Client, resource: &ApiResource, desired: &Value) -> Result<Option<Value>, Error> {
    let ns = desired["metadata"]["namespace"].as_str();
    let name = desired["metadata"]["name"].as_str().unwrap_or_default();
    match api_for(client, resource, ns).get_opt(name).await {
        Ok(o) => Ok(o.map(|o| serde_json::to_value(o).unwrap_or_default())),
        Err(kube::Error::Api(s)) if s.code == 403 => {
            Err(Error::Forbidden(format!("reading {}: {}", what(desired), s.message)))
        }
        // A namespace that does not exist yet holds nothing.
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// `desired` against its `live` object: dry-run, unless only its status moved since `prior`.
async fn judge(
    client: &Client,
    resource: &ApiResource,
    desired: &Value,
    adopt: bool,
    prior: Option<&Value>,
    live: Value,
) -> Result<One, Error> {
    let ns = desired["metadata"]["namespace"].as_str();
    let name = desired["metadata"]["name"].as_str().unwrap_or_default();
    let api = api_for(client, resource, ns);
    let kept = inventory::with_kept_pod_stamp(desired, &live);
    let desired = kept.as_ref().unwrap_or(desired);
    if prior.is_some_and(|p| same_but_status(desired, p, &live)) {
        let dry_run = Some(live.clone());
        return Ok(One::Present { live, dry_run, conflicts: Vec::new(), spared: true, kept });
    }
    let params = PatchParams::apply(names::FIELD_MANAGER).dry_run();
    let (dry_run, conflicts) = match api.patch(name, &params, &Patch::Apply(desired)).await {
        Ok(o) => (Some(serde_json::to_value(o).unwrap_or_default()), Vec::new()),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let conflicts = conflicts_of(&s);
            let forced = if adopt {
                match api.patch(name, &params.clone().force(), &Patch::Apply(desired)).await {
                    Ok(o) => Some(serde_json::to_value(o).unwrap_or_default()),
                    Err(e) => return Err(refused(desired, e)),
                }
            } else {
                None
            };
            (forced, conflicts)
        }
        Err(e) => return Err(refused(desired, e)),
    };
    Ok(One::Present { live, dry_run, conflicts, spared: false, kept })
}

/// The objects of `to_read` read, and dry-run unless every one of them is found as
/// `status.sync.unchanged` (`vouched`) records: then none is ([`unchanged_digest`]).
async fn vouched_or_judged(
    client: &Client,
    scopes: &ClusterScopes,
    to_read: Vec<&Value>,
    adopt: bool,
    vouched: &str,
) -> Vec<(String, Result<One, Error>)> {
    let gets: Vec<_> = to_read
        .into_iter()
        .map(|d| async move {
            let read = match resource_of(scopes, d) {
                None => Ok(None),
                Some(r) => get(client, r, d).await,
            };
            (d, read)
        })
        .collect();
    let got: Vec<(&Value, Result<Option<Value>, Error>)> =
        futures_util::stream::iter(gets).buffer_unordered(CONCURRENCY).collect().await;
    let contents: Option<BTreeMap<String, [u8; 32]>> =
        got.iter().map(|(d, r)| Some((validate::identity(d), content(d, r.as_ref().ok()?.as_ref()?)))).collect();
    if contents.is_some_and(|c| unchanged_digest(&c) == vouched) {
        return got
            .into_iter()
            .filter_map(|(d, r)| {
                let live = r.ok()??;
                let kept = inventory::with_kept_pod_stamp(d, &live);
                let dry_run = Some(live.clone());
                Some((
                    validate::identity(d),
                    Ok(One::Present { live, dry_run, conflicts: Vec::new(), spared: true, kept }),
                ))
            })
            .collect();
    }
    judged(client, scopes, adopt, &BTreeMap::new(), got.into_iter().map(|(d, r)| (d, Some(r)))).await
}

/// Each object of `objects` judged ([`judge`]) against its live object: the one given, or read
/// (`GET`) when none is given. `prior` spares dry runs as [`Earlier::prior`] says.
async fn judged<'a>(
    client: &Client,
    scopes: &ClusterScopes,
    adopt: bool,
    prior: &BTreeMap<String, Value>,
    objects: impl Iterator<Item = (&'a Value, Option<Result<Option<Value>, Error>>)>,
) -> Vec<(String, Result<One, Error>)> {
    let judged: Vec<_> = objects
        .map(|(d, read)| async move {
            let id = validate::identity(d);
            let Some(res) = resource_of(scopes, d) else { return (id, Ok(One::Absent)) };
            let read = match read {
                Some(read) => read,
                None => get(client, res, d).await,
            };
            let one = match read {
                Ok(Some(live)) => judge(client, res, d, adopt, prior.get(&id), live).await,
                Ok(None) => Ok(One::Absent),
                Err(e) => Err(e),
            };
            (id, one)
        })
        .collect();
    futures_util::stream::iter(judged).buffer_unordered(CONCURRENCY).collect().await
}

fn refused(desired: &Value, e: kube::Error) -> Error {
    match e {
        kube::Error::Api(s) if s.code == 403 => {
            Error::Forbidden(format!("dry-run apply of {}: {}", what(desired), s.message))
        }
        kube::Error::Api(s) if matches!(s.code, 400 | 422) => {
            Error::Invalid(vec![format!("{}: the API server refused it: {}", what(desired), s.message)])
        }
        e => Error::Api(e),
    }
}

/// What earlier plans found unchanged, to spare reads and dry runs ([`read_desired`]).
#[derive(Clone, Copy)]
struct Earlier<'a> {
    /// Objects not read: their live object is the one given, and, as it was found unchanged,
    /// so is its dry run.
    known: &'a BTreeMap<String, std::sync::Arc<Value>>,
    /// Objects read, and not dry-run when only their status moved since this live object
    /// ([`same_but_status`]).
    prior: &'a BTreeMap<String, Value>,
    /// With nothing known or prior: every object is read first, and none is dry-run if they
    /// match this digest ([`unchanged_digest`]).
    vouched: Option<&'a str>,
    /// Objects taken as absent without reading them ([`crate::decisions::absent`]).
    presumed: &'a BTreeSet<String>,
}

/// Read the live objects and dry-run results of `desired`, sparing what `earlier` allows.
/// Objects of kinds the cluster does not serve yet (a CRD in the same plan) are absent.
async fn read_desired(
    client: &Client,
    scopes: &ClusterScopes,
    desired: &[Value],
    adopt: bool,
    earlier: Earlier<'_>,
    out: &mut Live,
) -> Result<(), Error> {
    let Earlier { known, prior, vouched, presumed } = earlier;
    let mut to_read = Vec::new();
    for d in desired {
        let id = validate::identity(d);
        if presumed.contains(&id) {
            continue;
        }
        match known.get(&id) {
            Some(live) => {
                if let Some(k) = inventory::with_kept_pod_stamp(d, live) {
                    out.kept_stamps.insert(id.clone(), k);
                }
                out.live.insert(id.clone(), Value::clone(live));
                out.dry_run.insert(id, Value::clone(live));
            }
            None => to_read.push(d),
        }
    }
    metrics::counter!(crate::metric_names::DESIRED_READS_TOTAL, crate::metric_names::label::SOURCE => "unchanged")
        .increment(known.len() as u64);
    metrics::counter!(crate::metric_names::DESIRED_READS_TOTAL, crate::metric_names::label::SOURCE => "api")
        .increment(to_read.len() as u64);
    metrics::counter!(crate::metric_names::DESIRED_READS_TOTAL, crate::metric_names::label::SOURCE => "presumed_absent")
        .increment(presumed.len() as u64);
    let results: Vec<(String, Result<One, Error>)> = match vouched {
        Some(vouched) if known.is_empty() && prior.is_empty() => {
            vouched_or_judged(client, scopes, to_read, adopt, vouched).await
        }
        _ => judged(client, scopes, adopt, prior, to_read.into_iter().map(|d| (d, None))).await,
    };
    let spared = results.iter().filter(|(_, r)| matches!(r, Ok(One::Present { spared: true, .. }))).count();
    metrics::counter!(crate::metric_names::DRY_RUNS_SPARED_TOTAL).increment(spared as u64);
    let mut invalid = Vec::new();
    let mut first_error = None;
    for (id, r) in results {
        match r {
            Ok(One::Absent) => {}
            Ok(One::Present { live, dry_run, conflicts, spared, kept }) => {
                if spared {
                    out.rechecked.insert(id.clone());
                }
                if let Some(k) = kept {
                    out.kept_stamps.insert(id.clone(), k);
                }
                out.live.insert(id.clone(), live);
                if let Some(d) = dry_run {
                    out.dry_run.insert(id.clone(), d);
                }
                if !conflicts.is_empty() {
                    out.conflicts.insert(id, conflicts);
                }
            }
            Err(Error::Invalid(v)) => invalid.extend(v),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    if !invalid.is_empty() {
        invalid.sort();
        return Err(Error::Invalid(invalid));
    }
    Ok(())
}

/// The kinds to search for managed objects: `status.managedKinds` and the desired kinds, one
/// version per group and kind (the recorded one first).
pub fn kinds_to_search(managed_kinds: &[GroupVersionKind], desired: &[Value]) -> Vec<GroupVersionKind> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    let desired_kinds = desired.iter().filter_map(|o| {
        let av = o["apiVersion"].as_str()?;
        Some(GroupVersionKind {
            group: validate::group_of(av).to_string(),
            version: av.rsplit('/').next()?.to_string(),
            kind: o["kind"].as_str()?.to_string(),
        })
    });
    for k in managed_kinds.iter().cloned().chain(desired_kinds) {
        if seen.insert((k.group.clone(), k.kind.clone())) {
            out.push(k);
        }
    }
    out.sort_by(|a, b| (&a.group, &a.kind).cmp(&(&b.group, &b.kind)));
    out
}

async fn list_meta(
    api: &Api<DynamicObject>,
    selector: &str,
    out: &mut Vec<Value>,
    r: &ApiResource,
) -> kube::Result<()> {
    let mut params = ListParams::default().labels(selector).limit(PAGE);
    loop {
        let page = api.list_metadata(&params).await?;
        for item in page.items {
            out.push(json!({"apiVersion": r.api_version, "kind": r.kind, "metadata": item.metadata}));
        }
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => params = params.continue_token(&c),
            _ => return Ok(()),
        }
    }
}

/// How long a kind a service account may not list across the cluster is listed namespace by
/// namespace without asking the cluster-wide list again (RBAC may be granted later).
const NARROW_FOR: std::time::Duration = std::time::Duration::from_secs(300);

/// How long a service account's successful list of a kind (across the cluster, or in a
/// namespace) lets a plan that may be acted on take that kind's managed objects from the shard's
/// watch cache instead of listing again ([`crate::decisions::inventory`]): a permission taken
/// away is noticed by the next list, this long after the last one at most.
pub const TRUST_LIST_FOR: std::time::Duration = std::time::Duration::from_secs(300);

/// (service account, group, kind, namespace: `None` across the cluster).
type ListKey = (String, String, String, Option<String>);

/// What each service account was answered when it listed a kind: the cluster-wide lists refused
/// (403), so that the next plans list in each namespace at once instead of being refused first,
/// one request fewer per kind and plan; and the lists it was allowed, across the cluster or in a
/// namespace, so that a plan may take the kind from the watch cache
/// ([`ListAnswers::listed`]). The last answer per key is kept, and forgotten once too old.
#[derive(Default)]
pub struct ListAnswers {
    /// When the list was answered, and whether it was allowed.
    answers: std::sync::Mutex<std::collections::HashMap<ListKey, (std::time::Instant, bool)>>,
}

impl ListAnswers {
    fn key(who: &str, r: &ApiResource, ns: Option<&str>) -> ListKey {
        (who.to_string(), r.group.clone(), r.kind.clone(), ns.map(str::to_string))
    }

    /// Whether the last answer to `key` was `allowed` less than `within` ago; an answer older
    /// than that is forgotten.
    fn answered(
        answers: &mut std::collections::HashMap<ListKey, (std::time::Instant, bool)>,
        key: &ListKey,
        allowed: bool,
        within: std::time::Duration,
    ) -> bool {
        match answers.get(key) {
            Some((at, _)) if at.elapsed() >= within => {
                answers.remove(key);
                false
            }
            Some((_, was)) => *was == allowed,
            None => false,
        }
    }

    /// Whether `who` was refused the cluster-wide list of `r` less than [`NARROW_FOR`] ago.
    fn refused(&self, who: &str, r: &ApiResource) -> bool {
        let mut answers = self.answers.lock().expect("list answers lock");
        Self::answered(&mut answers, &Self::key(who, r, None), false, NARROW_FOR)
    }

    /// `who` was refused the list of `r` across the cluster (`ns` `None`) or in `ns`.
    fn note_refused(&self, who: &str, r: &ApiResource, ns: Option<&str>) {
        self.note(who, r, ns, false);
    }

    /// `who` listed `r` across the cluster (`ns` `None`) or in `ns`.
    fn note_allowed(&self, who: &str, r: &ApiResource, ns: Option<&str>) {
        self.note(who, r, ns, true);
    }

    fn note(&self, who: &str, r: &ApiResource, ns: Option<&str>, allowed: bool) {
        let key = Self::key(who, r, ns);
        self.answers.lock().expect("list answers lock").insert(key, (std::time::Instant::now(), allowed));
    }

    /// What `who` was answered, less than [`TRUST_LIST_FOR`] ago, when it listed `r` where a
    /// plan searching `namespaces` looks: across the cluster, or (a namespaced kind) in each of
    /// `namespaces`.
    pub fn listed(
        &self,
        who: &str,
        r: &ApiResource,
        namespaced: bool,
        namespaces: &BTreeSet<String>,
    ) -> crate::decisions::inventory::Listed {
        use crate::decisions::inventory::Listed;
        let mut answers = self.answers.lock().expect("list answers lock");
        let mut allowed = |ns: Option<&str>| Self::answered(&mut answers, &Self::key(who, r, ns), true, TRUST_LIST_FOR);
        if allowed(None) {
            Listed::Everywhere
        } else if namespaced && !namespaces.is_empty() && namespaces.iter().all(|ns| allowed(Some(ns))) {
            Listed::InEach
        } else {
            Listed::Unknown
        }
    }
}

/// Where managed objects are looked for: across the cluster, or, for a namespaced kind the
/// service account may not list there, in each of `namespaces`. `answers` remembers the
/// answers to the lists of the service account it names.
#[derive(Clone, Copy)]
pub struct Search<'a> {
    /// The namespaces to list in when the cluster-wide list is refused.
    pub namespaces: &'a BTreeSet<String>,
    /// Answers remembered, and the service account (`namespace/name`) they are about.
    pub answers: Option<(&'a ListAnswers, &'a str)>,
}

/// Where a kind's managed objects can be found without a request: a watch cache's answer (with
/// apiVersion and kind), or `None` to list them.
pub type Cached<'a> = &'a (dyn Fn(&ApiResource) -> Option<Vec<Value>> + Sync);

/// No cache: every kind is listed.
pub fn uncached(_: &ApiResource) -> Option<Vec<Value>> {
    None
}

/// Every object labelled with `selector` across `kinds`, from `cached` where it answers, else
/// listed: namespaced kinds across the cluster, or, when the service account may not, in each
/// of `namespaces`.
pub async fn read_managed(
    client: &Client,
    scopes: &ClusterScopes,
    kinds: &[GroupVersionKind],
    selector: &str,
    search: Search<'_>,
    cached: Cached<'_>,
    out: &mut Live,
) -> Result<(), Error> {
    let namespaces = search.namespaces;
    let requests: Vec<_> = kinds
        .iter()
        .map(|k| async move {
            let mut found = Vec::new();
            let Some(r) = scopes.resource(&k.group, &k.version, &k.kind) else { return Ok(found) };
            if let Some(found) = cached(r) {
                metrics::counter!(crate::metric_names::INVENTORY_READS_TOTAL, crate::metric_names::label::SOURCE => "cache").increment(1);
                return Ok(found);
            }
            metrics::counter!(crate::metric_names::INVENTORY_READS_TOTAL, crate::metric_names::label::SOURCE => "api").increment(1);
            let namespaced = crate::plan::validate::Scopes::namespaced(scopes, &k.group, &k.kind).unwrap_or(true);
            let all = Api::<DynamicObject>::all_with(client.clone(), r);
            // Refused across the cluster a moment ago: straight to the namespaces.
            let narrow = namespaced && search.answers.is_some_and(|(n, who)| n.refused(who, r));
            if !narrow {
                match list_meta(&all, selector, &mut found, r).await {
                    Ok(()) => {
                        if let Some((n, who)) = search.answers {
                            n.note_allowed(who, r, None);
                        }
                        return Ok(found);
                    }
                    Err(kube::Error::Api(s)) if s.code == 403 && namespaced => {
                        if let Some((n, who)) = search.answers {
                            n.note_refused(who, r, None);
                        }
                    }
                    Err(kube::Error::Api(s)) if s.code == 403 => {
                        return Err(Error::Forbidden(format!("listing {} managed objects: {}", k.kind, s.message)));
                    }
                    // A kind that is no longer served holds nothing.
                    Err(kube::Error::Api(s)) if s.code == 404 => return Ok(found),
                    Err(e) => return Err(e.into()),
                }
            }
            for ns in namespaces {
                let api = Api::<DynamicObject>::namespaced_with(client.clone(), ns, r);
                match list_meta(&api, selector, &mut found, r).await {
                    Ok(()) => {
                        if let Some((n, who)) = search.answers {
                            n.note_allowed(who, r, Some(ns));
                        }
                    }
                    // A kind that is no longer served holds nothing.
                    Err(kube::Error::Api(s)) if s.code == 404 => return Ok(found),
                    Err(e @ kube::Error::Api(_)) if matches!(&e, kube::Error::Api(s) if s.code == 403) => {
                        if let Some((n, who)) = search.answers {
                            n.note_refused(who, r, Some(ns));
                        }
                        return Err(Error::Forbidden(format!(
                            "listing {} managed objects in {ns}: {}",
                            k.kind,
                            api_message(&e)
                        )));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Ok(found)
        })
        .collect();
    let lists: Vec<Result<Vec<Value>, Error>> =
        futures_util::stream::iter(requests).buffer_unordered(CONCURRENCY).collect().await;
    for l in lists {
        out.managed.extend(l?);
    }
    Ok(())
}

/// What a read of the desired objects may spare, given the managed objects found (with their
/// resourceVersions). Identity → the live object a plan found unchanged, packed JSON ([`crate::packed`]).
#[derive(Default)]
pub struct Spare {
    /// Not read at all: planned against the kept object.
    pub skip: BTreeMap<String, crate::packed::Packed>,
    /// Read, and not dry-run if only their status moved since.
    pub recheck: BTreeMap<String, crate::packed::Packed>,
}

/// Which desired objects need no read, or no dry run ([`Spare`]).
pub type Skip<'a> = &'a (dyn Fn(&[Value]) -> Spare + Sync);

/// What a plan needs read: its desired objects, and the Application's managed objects (their
/// kinds and label selector).
#[derive(Clone, Copy)]
pub struct Needed<'a> {
    pub desired: &'a [Value],
    pub managed_kinds: &'a [GroupVersionKind],
    pub selector: &'a str,
    /// `conflictPolicy: Adopt`: conflicts are fields to take over.
    pub adopt: bool,
    /// `status.sync.unchanged`'s digest, when nothing of this Application is kept in memory
    /// (a replica that took it over or restarted): if the objects read match it, none is
    /// dry-run.
    pub vouched: Option<&'a str>,
    /// Desired objects taken as absent without a `GET` ([`crate::decisions::absent`]).
    pub presumed: &'a BTreeSet<String>,
}

/// Read everything the plan needs (managed objects from `cached` where it answers). With
/// `skip`, the managed objects are read first and the desired objects `skip` names are not
/// read.
pub async fn read(
    client: &Client,
    scopes: &ClusterScopes,
    needed: Needed<'_>,
    search: Search<'_>,
    cached: Cached<'_>,
    skip: Option<Skip<'_>>,
) -> Result<Live, Error> {
    let Needed { desired, managed_kinds, selector, adopt, vouched, presumed } = needed;
    let mut out = Live::default();
    let kinds = kinds_to_search(managed_kinds, desired);
    match skip {
        Some(skip) => {
            read_managed(client, scopes, &kinds, selector, search, cached, &mut out).await?;
            let spare = skip(&out.managed);
            // Parsed off the runtime when large (an Application's objects can be tens of
            // megabytes); one that does not parse is read (and dry-run) instead.
            let text: usize = spare.skip.values().chain(spare.recheck.values()).map(|p| p.text_len()).sum();
            let large = crate::offload::Size::default().bytes(text).large();
            let (known, prior) = crate::offload::offload_if(large, move || {
                let parse = |packed: crate::packed::Packed| packed.parse::<Value>();
                let known: BTreeMap<_, _> = spare
                    .skip
                    .into_iter()
                    .filter_map(|(id, packed)| Some((id, std::sync::Arc::new(parse(packed)?))))
                    .collect();
                let prior: BTreeMap<_, _> =
                    spare.recheck.into_iter().filter_map(|(id, packed)| Some((id, parse(packed)?))).collect();
                (known, prior)
            })
            .await;
            let earlier = Earlier { known: &known, prior: &prior, vouched: None, presumed };
            read_desired(client, scopes, desired, adopt, earlier, &mut out).await?;
        }
        None => {
            let earlier = Earlier { known: &BTreeMap::new(), prior: &BTreeMap::new(), vouched, presumed };
            read_desired(client, scopes, desired, adopt, earlier, &mut out).await?;
            read_managed(client, scopes, &kinds, selector, search, cached, &mut out).await?;
        }
    }
    Ok(out)
}

/// Whether `live`, read now, differs from `kept` (the live object a plan found unchanged for
/// `desired`, without `metadata.managedFields`) only where a server-side dry run of `desired`
/// cannot come out differently: its `status`, its `metadata.resourceVersion` and
/// `managedFields`, and annotations `desired` does not declare (a controller's bookkeeping,
/// such as a Deployment's `deployment.kubernetes.io/revision`).
///
/// Contract: true only if everything else (the spec or data, labels, every annotation `desired`
/// declares, `generation`, `uid`, owners, finalizers, deletion) is equal. A dry run's result over
/// the fields `desired` declares is the desired object merged into, and defaulted from, exactly
/// those; `status` is not written by an apply of the main resource, and no default derives from
/// an annotation. Ownership alone (`managedFields`) cannot make a no-op apply conflict: a
/// conflict needs a value to change.
pub fn same_but_status(desired: &Value, kept: &Value, live: &Value) -> bool {
    comparable(desired, kept) == comparable(desired, live)
}

/// `obj` (a live object of `desired`) as [`same_but_status`] compares it: without `status`,
/// `metadata.resourceVersion`, `metadata.managedFields` and the annotations `desired` does not
/// declare.
fn comparable(desired: &Value, obj: &Value) -> Value {
    let declared = desired["metadata"]["annotations"].as_object();
    let mut o = obj.clone();
    if let Some(top) = o.as_object_mut() {
        top.remove("status");
        if let Some(meta) = top.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("resourceVersion");
            meta.remove("managedFields");
            if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
                a.retain(|k, _| declared.is_some_and(|d| d.contains_key(k)));
                if a.is_empty() {
                    meta.remove("annotations");
                }
            }
        }
    }
    o
}

/// A digest of `desired` and its live object `live` as [`same_but_status`] compares it: equal
/// for the same desired object and a live object that differs from the other only where
/// [`same_but_status`] allows.
pub fn content(desired: &Value, live: &Value) -> [u8; 32] {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    // serde_json's maps are ordered: the same object prints the same.
    h.update(desired.to_string());
    h.update([0]);
    h.update(comparable(desired, live).to_string());
    h.finalize().into()
}

/// One digest (`sha256:<hex>`) over the [`content`] of each of an Application's desired
/// objects, by identity: what `status.sync.unchanged` records.
pub fn unchanged_digest<'a>(contents: impl IntoIterator<Item = (&'a String, &'a [u8; 32])>) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for (id, c) in contents {
        h.update(id);
        h.update([0]);
        h.update(c);
    }
    format!("sha256:{}", crate::plan::revision::hex(&h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_remembered_per_service_account_and_kind() {
        let answers = ListAnswers::default();
        let (cm, deploy) = (resource("", "ConfigMap"), resource("apps", "Deployment"));
        assert!(!answers.refused("a/deployer", &cm));
        answers.note_refused("a/deployer", &cm, None);
        // (service account, kind, refused)
        let cases = [("a/deployer", &cm, true), ("b/deployer", &cm, false), ("a/deployer", &deploy, false)];
        for (who, r, refused) in cases {
            assert_eq!(answers.refused(who, r), refused, "{who} {}", r.kind);
        }
        // A refusal older than NARROW_FOR is asked again.
        answers
            .answers
            .lock()
            .unwrap()
            .insert(ListAnswers::key("a/deployer", &cm, None), (std::time::Instant::now() - NARROW_FOR, false));
        assert!(!answers.refused("a/deployer", &cm));
        assert!(answers.answers.lock().unwrap().is_empty(), "an expired refusal is forgotten");
    }

    fn resource(group: &str, kind: &str) -> ApiResource {
        let api_version = if group.is_empty() { "v1".to_string() } else { format!("{group}/v1") };
        ApiResource {
            group: group.into(),
            version: "v1".into(),
            api_version,
            kind: kind.into(),
            plural: format!("{}s", kind.to_lowercase()),
        }
    }

    #[test]
    fn a_kind_counts_as_listed_where_the_service_account_listed_it_lately_and_was_not_refused_since() {
        use crate::decisions::inventory::Listed::{Everywhere, InEach, Unknown};
        let cm = resource("", "ConfigMap");
        let searched = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<BTreeSet<_>>();
        let a = ListAnswers::default();
        assert_eq!(a.listed("a/deployer", &cm, true, &searched(&["a"])), Unknown, "never listed");
        a.note_allowed("a/deployer", &cm, Some("a"));
        // (service account, namespaced, namespaces searched) → listed
        let cases = [
            ("a/deployer", true, &["a"][..], InEach),
            ("a/deployer", true, &["a", "b"][..], Unknown),
            ("b/deployer", true, &["a"][..], Unknown),
            // A cluster-scoped kind is only ever listed across the cluster.
            ("a/deployer", false, &["a"][..], Unknown),
            ("a/deployer", true, &[][..], Unknown),
        ];
        for (who, namespaced, ns, want) in cases {
            assert_eq!(a.listed(who, &cm, namespaced, &searched(ns)), want, "{who} {namespaced} {ns:?}");
        }
        a.note_allowed("a/deployer", &cm, None);
        assert_eq!(a.listed("a/deployer", &cm, true, &searched(&["a", "b"])), Everywhere);
        assert_eq!(a.listed("a/deployer", &cm, false, &searched(&[])), Everywhere);
        // A refusal takes back what the earlier list showed.
        a.note_refused("a/deployer", &cm, None);
        assert_eq!(a.listed("a/deployer", &cm, true, &searched(&["a"])), InEach);
        a.note_refused("a/deployer", &cm, Some("a"));
        assert_eq!(a.listed("a/deployer", &cm, true, &searched(&["a"])), Unknown);
        // A list older than TRUST_LIST_FOR says nothing any more, and is forgotten.
        let key = ListAnswers::key("a/deployer", &cm, Some("a"));
        a.answers.lock().unwrap().insert(key.clone(), (std::time::Instant::now() - TRUST_LIST_FOR, true));
        assert_eq!(a.listed("a/deployer", &cm, true, &searched(&["a"])), Unknown);
        assert!(!a.answers.lock().unwrap().contains_key(&key), "an expired list is forgotten");
    }

    use kube::core::response::{StatusCause, StatusDetails};

    #[test]
    fn conflicts_name_each_field_and_its_manager() {
        let status = kube::core::Status {
            code: 409,
            message: "Apply failed with 2 conflicts".into(),
            details: Some(StatusDetails {
                causes: vec![
                    StatusCause {
                        reason: "FieldManagerConflict".into(),
                        message: "conflict with \"kubectl-edit\" using v1".into(),
                        field: ".data.b".into(),
                    },
                    StatusCause {
                        reason: "FieldManagerConflict".into(),
                        message: "conflict with \"helm\"".into(),
                        field: ".data.a".into(),
                    },
                ],
                name: "a".into(),
                group: String::new(),
                kind: "configmaps".into(),
                uid: String::new(),
                retry_after_seconds: 0,
            }),
            ..Default::default()
        };
        assert_eq!(
            conflicts_of(&status),
            vec![
                Conflict { field: ".data.a".into(), manager: "helm".into() },
                Conflict { field: ".data.b".into(), manager: "kubectl-edit".into() },
            ]
        );
        assert_eq!(manager_of(r#"conflict with "a \"b\"" with subresource "status""#), r#"a "b""#);
    }

    #[test]
    fn searched_kinds_are_the_inventory_and_the_desired_kinds() {
        let inv = vec![GroupVersionKind { group: "apps".into(), version: "v1".into(), kind: "Deployment".into() }];
        let desired = vec![
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}),
        ];
        let kinds = kinds_to_search(&inv, &desired);
        let names: Vec<_> = kinds.iter().map(|k| format!("{}/{}/{}", k.group, k.version, k.kind)).collect();
        assert_eq!(names, vec!["/v1/ConfigMap", "apps/v1/Deployment"]);
    }
}
