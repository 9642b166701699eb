//! What the last plans found unchanged, so a drift check does not read it again.
//!
//! For every Application, each desired object a plan found `Unchanged` (no conflict) is kept
//! with a digest of the desired object and the live object it was compared with, whose
//! `metadata.resourceVersion` says which state of the object that was. A drift check (its
//! inventory from the shard's watch caches, which carry every managed object's
//! resourceVersion) then skips the `GET` and the server-side dry run of an object when
//! [`split`] says nothing about it can have changed, and plans against the kept live
//! object. An idle Application costs no request per resync.
//!
//! Bounded: [`MAX_BYTES`] of kept live objects per replica (the least recently used
//! Applications go first, and are then read in full, as before). A kept object is compact JSON
//! text, deflated ([`Packed`]: about a third of the text), parsed again only when a check skips
//! its read: as a parsed `Value` it would take about four times the text's memory (every key
//! and string its own allocation).

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::packed::Packed;
use crate::plan::{Action, Plan, validate};

/// Bytes of kept live objects per replica (about 40,000 objects of 1.5 KiB).
pub const MAX_BYTES: u64 = 64 * 1024 * 1024;

/// How long an object checked by a real read may be trusted without another. Defaults the API
/// server adds, admission and CRD schemas can change without the object changing; after this
/// the next drift check reads it again.
pub const TRUST_FOR: Duration = Duration::from_secs(3600);

/// One object a plan found unchanged.
#[derive(Clone, Debug)]
pub struct Known {
    /// [`digest`] of the desired object it was compared as.
    pub digest: u64,
    /// The live object's `metadata.resourceVersion`: which state of it was compared.
    pub resource_version: Box<str>,
    /// The live object it was compared with, without `metadata.managedFields`, as packed JSON.
    pub live: Packed,
    /// When a real read (`GET` and dry run) last found it unchanged.
    pub checked: Instant,
    /// [`crate::live::content`] of the desired object and the live object.
    pub content: [u8; 32],
}

/// A desired object's digest: any change to it (a new commit, new values) changes it.
pub fn digest(desired: &Value) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    // serde_json's maps are ordered: the same object prints the same.
    desired.to_string().hash(&mut h);
    h.finish()
}

fn resource_version(obj: &Value) -> Option<&str> {
    obj["metadata"]["resourceVersion"].as_str().filter(|rv| !rv.is_empty())
}

/// The kinds whose every change outside `metadata` and `status` moves `metadata.generation`:
/// their only other field is `spec`, and the API server increments the generation on any
/// change to it (apps/v1's registry strategies).
pub const GENERATION_COVERS_SPEC: [(&str, &str); 3] =
    [("apps", "Deployment"), ("apps", "StatefulSet"), ("apps", "DaemonSet")];

/// The kept objects of `desired`, split: those whose read can be skipped (planned against the
/// kept live object, packed JSON that the caller parses off the runtime), and those that are
/// read but may have their dry run spared ([`crate::live::same_but_status`]).
///
/// Contract: an object is skipped only when all of these hold:
/// - it was kept ([`Known`]) for this Application;
/// - its desired object is the one kept ([`digest`] equal);
/// - a real read found it unchanged less than [`TRUST_FOR`] before `now`;
/// - the watch cache has it (`cached`: identity → the cached object) either at the very
///   resourceVersion of the kept live object (every write to an object, by anyone, moves its
///   resourceVersion), or, for a kind of [`GENERATION_COVERS_SPEC`] whose cached copy carries
///   its status, with metadata that [`crate::live::same_but_status`] holds the same as the kept
///   one's (the same `generation`, so the same spec). It is then planned against the kept
///   object with the cached metadata and status, and kept so ([`status_moved`]).
///
/// Anything else (no watch for its kind, not labelled yet, an edit, a new commit) is read; of
/// those, the second part holds the [`recheckable`] ones.
pub fn split(
    known: &BTreeMap<String, Known>,
    desired: &[Value],
    cached: &BTreeMap<String, &Value>,
    now: Instant,
) -> (BTreeMap<String, Known>, BTreeMap<String, Known>) {
    let (mut skip, mut recheck) = (BTreeMap::new(), BTreeMap::new());
    for (id, d, k) in recheckable(known, desired, now) {
        let seen = cached.get(&id).copied();
        if seen.is_some_and(|c| resource_version(c) == Some(&*k.resource_version)) {
            skip.insert(id, k);
        } else if let Some(moved) = seen.and_then(|c| status_moved(d, &k, c)) {
            skip.insert(id, moved);
        } else {
            recheck.insert(id, k);
        }
    }
    (skip, recheck)
}

/// `k` with its live object's metadata and status taken from `seen` (the watch cache's copy of
/// the object, at another resourceVersion), when only they can have moved: `desired` is of a
/// [`GENERATION_COVERS_SPEC`] kind, `seen` carries its status, and the kept object with them
/// is what [`crate::live::same_but_status`] holds the same (equal `generation`, labels,
/// declared annotations, owners, no deletion). The trust ([`Known::checked`]) is not renewed.
fn status_moved(desired: &Value, k: &Known, seen: &Value) -> Option<Known> {
    let group = validate::group_of(desired["apiVersion"].as_str()?);
    let kind = desired["kind"].as_str()?;
    if !GENERATION_COVERS_SPEC.contains(&(group, kind)) {
        return None;
    }
    let status = seen.get("status")?;
    resource_version(seen)?;
    let kept: Value = k.live.parse()?;
    let mut now = kept.clone();
    now["metadata"] = seen["metadata"].clone();
    now["status"] = status.clone();
    if !crate::live::same_but_status(desired, &kept, &now) {
        return None;
    }
    Some(Known {
        resource_version: resource_version(&now)?.into(),
        live: Packed::of(&WithoutManagedFields(&now))?,
        ..k.clone()
    })
}

/// The kept objects whose verdict may still hold, with their desired objects: kept with a
/// resourceVersion for the same desired object ([`digest`] equal), and really checked less than
/// [`TRUST_FOR`] before `now`. Those the watch cache shows unchanged are skipped ([`split`]); the
/// others are read (`GET`), and if the read finds only what [`crate::live::same_but_status`]
/// allows changed, the kept verdict (unchanged, no conflict) still holds and their dry run is
/// spared.
fn recheckable<'a>(
    known: &BTreeMap<String, Known>,
    desired: &'a [Value],
    now: Instant,
) -> Vec<(String, &'a Value, Known)> {
    let mut out = Vec::new();
    for d in desired {
        let id = validate::identity(d);
        let Some(k) = known.get(&id) else { continue };
        if !k.resource_version.is_empty()
            && k.digest == digest(d)
            && now.saturating_duration_since(k.checked) < TRUST_FOR
        {
            out.push((id, d, k.clone()));
        }
    }
    out
}

/// What to keep after a plan of `desired`: each object it found unchanged without conflict,
/// compared with `live`. `skipped` objects keep when they were last really checked.
///
/// `rechecked` objects (read, their dry run spared by [`crate::live::same_but_status`]) are kept as read,
/// with when they were last really checked: a spared dry run does not renew the trust.
pub fn to_keep(
    desired: &[Value],
    plan: &Plan,
    live: &BTreeMap<String, Value>,
    skipped: &BTreeMap<String, Known>,
    rechecked: &BTreeMap<String, Known>,
    now: Instant,
) -> BTreeMap<String, Known> {
    let unchanged: std::collections::BTreeSet<String> = plan
        .entries
        .iter()
        .filter(|e| e.hook.is_none() && e.action == Action::Unchanged && e.conflicts.is_empty())
        .map(|e| e.identity())
        .collect();
    let mut out = BTreeMap::new();
    for d in desired {
        let id = validate::identity(d);
        if !unchanged.contains(&id) {
            continue;
        }
        let Some(l) = live.get(&id).filter(|l| resource_version(l).is_some()) else { continue };
        let known = match (skipped.get(&id), rechecked.get(&id)) {
            (Some(k), _) => k.clone(),
            (None, Some(k)) => known(d, l, k.checked),
            (None, None) => known(d, l, now),
        };
        out.insert(id, known);
    }
    out
}

/// What to keep after an attempt applied `objects` (identity → the object the apply returned)
/// of `desired`: applying the same desired object again would change nothing, so each is kept
/// as if a plan had just found it unchanged, compared with what the apply returned. The next
/// look at the attempt then reads only what changed since (a Deployment's status), not every
/// object it has just written.
pub fn applied(desired: &[Value], objects: &BTreeMap<String, Value>, now: Instant) -> BTreeMap<String, Known> {
    let mut out = BTreeMap::new();
    for d in desired {
        let id = validate::identity(d);
        let Some(l) = objects.get(&id).filter(|l| resource_version(l).is_some()) else { continue };
        out.insert(id, known(d, l, now));
    }
    out
}

/// `live` (which has a resourceVersion), compared with `desired` at `checked`, as kept: without
/// `metadata.managedFields`, often its largest part, which nothing planned from a kept object
/// reads (conflicts come from dry runs, which a skipped object does not get).
/// `desired`, found unchanged against `live` by a real read at `checked`.
pub fn known(desired: &Value, live: &Value, checked: Instant) -> Known {
    Known {
        digest: digest(desired),
        resource_version: resource_version(live).unwrap_or_default().into(),
        live: Packed::of(&WithoutManagedFields(live)).unwrap_or_else(|| Packed::from_text("")),
        checked,
        content: crate::live::content(desired, live),
    }
}

/// What `status.sync.unchanged` records of `known` for `desired`: the digest of every desired
/// object with the live object it was found unchanged against, and when the oldest of them was
/// really checked. `None` unless every desired object is kept for this very desired object.
///
/// Contract: a replica that reads the objects again and finds the same digest
/// ([`crate::live::unchanged_digest`]) holds what [`crate::live::same_but_status`] would hold
/// of each: nothing a dry run could find differently has changed since.
pub fn vouch(known: &BTreeMap<String, Known>, desired: &[Value]) -> Option<(String, Instant)> {
    let mut contents = BTreeMap::new();
    let mut oldest: Option<Instant> = None;
    for d in desired {
        let id = validate::identity(d);
        let k = known.get(&id).filter(|k| k.digest == digest(d))?;
        oldest = Some(oldest.map_or(k.checked, |o| o.min(k.checked)));
        contents.insert(id, k.content);
    }
    Some((crate::live::unchanged_digest(&contents), oldest?))
}

/// An object printed without `metadata.managedFields`, and without copying it first (this
/// runs on the runtime after an apply, for every object applied).
struct WithoutManagedFields<'a>(&'a Value);

impl serde::Serialize for WithoutManagedFields<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let Value::Object(top) = self.0 else { return self.0.serialize(s) };
        let mut map = s.serialize_map(Some(top.len()))?;
        for (k, v) in top {
            match v {
                Value::Object(meta) if k == "metadata" => {
                    map.serialize_entry(k, &MetadataWithout(meta))?;
                }
                _ => map.serialize_entry(k, v)?,
            }
        }
        map.end()
    }
}

struct MetadataWithout<'a>(&'a serde_json::Map<String, Value>);

impl serde::Serialize for MetadataWithout<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(None)?;
        for (k, v) in self.0.iter().filter(|(k, _)| *k != "managedFields") {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// The kept objects of every Application of this replica.
pub struct Unchanged {
    cache: moka::sync::Cache<String, Arc<BTreeMap<String, Known>>>,
}

impl Default for Unchanged {
    fn default() -> Self {
        Unchanged::new(MAX_BYTES)
    }
}

fn weight(known: &BTreeMap<String, Known>) -> u32 {
    let bytes: usize = known.iter().map(|(id, k)| id.len() + k.resource_version.len() + k.live.len()).sum();
    u32::try_from(bytes).unwrap_or(u32::MAX)
}

impl Unchanged {
    /// At most `max_bytes` of kept live objects.
    pub fn new(max_bytes: u64) -> Self {
        let cache = moka::sync::Cache::builder()
            .max_capacity(max_bytes)
            .weigher(|_: &String, v: &Arc<BTreeMap<String, Known>>| weight(v))
            .build();
        Unchanged { cache }
    }

    /// What is kept for Application `app` (`namespace/name`).
    pub fn get(&self, app: &str) -> Arc<BTreeMap<String, Known>> {
        self.cache.get(app).unwrap_or_default()
    }

    /// Keep `more` for `app` as well, in place of what was kept of the same objects.
    pub fn add(&self, app: &str, more: BTreeMap<String, Known>) {
        if more.is_empty() {
            return;
        }
        let mut known = BTreeMap::clone(&self.get(app));
        known.extend(more);
        self.set(app, known);
    }

    /// Keep `known` for `app`, in place of what was kept.
    pub fn set(&self, app: &str, known: BTreeMap<String, Known>) {
        if known.is_empty() {
            self.cache.invalidate(app);
        } else {
            self.cache.insert(app.to_string(), Arc::new(known));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::same_but_status;
    use serde_json::json;

    #[test]
    fn the_recorded_digest_matches_objects_read_again_only_where_a_dry_run_could_not_differ() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}, "data": {"k": "v"}});
        let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a", "namespace": "ns"}, "spec": {"ports": [{"port": 80}]}});
        let live = |d: &Value, rv: &str| {
            let mut l = d.clone();
            l["metadata"]["resourceVersion"] = json!(rv);
            l["metadata"]["uid"] = json!("u");
            l
        };
        let now = Instant::now();
        let desired = vec![cm.clone(), svc.clone()];
        let kept: BTreeMap<String, Known> =
            desired.iter().map(|d| (validate::identity(d), known(d, &live(d, "1"), now))).collect();
        let (recorded, oldest) = vouch(&kept, &desired).expect("every desired object is kept");
        assert_eq!(oldest, now);
        // What a replica reads later: (the ConfigMap read, the digest is the recorded one)
        let with = |f: &dyn Fn(&mut Value)| {
            let mut l = live(&cm, "7");
            f(&mut l);
            l
        };
        let cases: Vec<(&str, Value, bool)> = vec![
            ("only the resourceVersion moved", with(&|_| {}), true),
            ("only its status", with(&|l| l["status"] = json!({"x": 1})), true),
            ("an annotation it does not declare", with(&|l| l["metadata"]["annotations"] = json!({"x": "y"})), true),
            ("its data edited", with(&|l| l["data"]["k"] = json!("edited")), false),
            ("a label added", with(&|l| l["metadata"]["labels"] = json!({"x": "y"})), false),
            ("recreated", with(&|l| l["metadata"]["uid"] = json!("other")), false),
        ];
        for (what, read, same) in cases {
            let contents: BTreeMap<String, [u8; 32]> = [
                (validate::identity(&cm), crate::live::content(&cm, &read)),
                (validate::identity(&svc), crate::live::content(&svc, &live(&svc, "9"))),
            ]
            .into();
            assert_eq!(crate::live::unchanged_digest(&contents) == recorded, same, "{what}");
            // The same verdict as the per-object comparison a kept object gets.
            assert_eq!(same_but_status(&cm, &live(&cm, "1"), &read), same, "{what}");
        }
        // Not every desired object kept, or a desired object changed: nothing to record.
        let mut partial = kept.clone();
        partial.remove(&validate::identity(&svc));
        assert!(vouch(&partial, &desired).is_none());
        let mut changed = cm.clone();
        changed["data"]["k"] = json!("new");
        assert!(vouch(&kept, &[changed, svc.clone()]).is_none());
    }

    /// The skipped part of [`split`], as the read gets it.
    fn skippable(
        known: &BTreeMap<String, Known>,
        desired: &[Value],
        cached: &BTreeMap<String, Value>,
        now: Instant,
    ) -> BTreeMap<String, Arc<str>> {
        let cached = cached.iter().map(|(id, v)| (id.clone(), v)).collect();
        let cached = &cached;
        split(known, desired, cached, now).0.into_iter().map(|(id, k)| (id, k.live.text().into())).collect()
    }

    fn cm(data: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "n"}, "data": {"k": data}})
    }

    fn live(rv: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "n", "resourceVersion": rv}, "data": {"k": "1"}})
    }

    #[test]
    fn an_object_is_skipped_only_when_nothing_about_it_can_have_changed() {
        let id = validate::identity(&cm("1"));
        let now = Instant::now();
        let kept = |rv: &str, desired: &Value, age: Duration| {
            BTreeMap::from([(id.clone(), known(desired, &live(rv), now - age))])
        };
        let cached = |rv: Option<&str>| rv.map(|rv| BTreeMap::from([(id.clone(), live(rv))])).unwrap_or_default();
        let fresh = Duration::from_secs(10);
        // (case, kept, desired now, resourceVersion in the watch cache, skipped)
        let cases = [
            ("unchanged", Some(kept("7", &cm("1"), fresh)), cm("1"), Some("7"), true),
            ("edited since: the resourceVersion moved", Some(kept("7", &cm("1"), fresh)), cm("1"), Some("8"), false),
            ("a new desired object", Some(kept("7", &cm("1"), fresh)), cm("2"), Some("7"), false),
            ("not in a watch cache", Some(kept("7", &cm("1"), fresh)), cm("1"), None, false),
            ("never planned", None, cm("1"), Some("7"), false),
            ("checked too long ago", Some(kept("7", &cm("1"), TRUST_FOR)), cm("1"), Some("7"), false),
            ("kept without a resourceVersion", Some(kept("", &cm("1"), fresh)), cm("1"), Some(""), false),
        ];
        for (case, kept, desired, rv, skipped) in cases {
            let got = skippable(&kept.unwrap_or_default(), &[desired], &cached(rv), now);
            assert_eq!(got.contains_key(&id), skipped, "{case}");
        }
    }

    fn deployment(image: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "namespace": "n", "annotations": {"team": "a"}},
               "spec": {"replicas": 0, "template": {"spec": {"containers": [{"name": "app", "image": image}]}}}})
    }

    /// The Deployment as an apply returned it: the desired fields, defaults, server metadata.
    fn applied_deployment() -> Value {
        let mut d = deployment("app:1");
        d["metadata"]["resourceVersion"] = json!("7");
        d["metadata"]["generation"] = json!(1);
        d["metadata"]["uid"] = json!("u-1");
        d["spec"]["strategy"] = json!({"type": "RollingUpdate"});
        d["status"] = json!({});
        d
    }

    #[test]
    fn a_dry_run_is_spared_only_when_nothing_but_the_status_moved() {
        let kept = applied_deployment();
        let edit = |f: &dyn Fn(&mut Value)| {
            let mut live = applied_deployment();
            live["metadata"]["resourceVersion"] = json!("9");
            f(&mut live);
            live
        };
        // (case, live read now, spared)
        let cases: Vec<(&str, Value, bool)> = vec![
            ("nothing moved but the resourceVersion", edit(&|_| {}), true),
            (
                "the deployment controller wrote the status, its revision annotation and its managedFields",
                edit(&|l| {
                    l["status"] =
                        json!({"observedGeneration": 1, "conditions": [{"type": "Available", "status": "True"}]});
                    l["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = json!("1");
                    l["metadata"]["managedFields"] =
                        json!([{"manager": "kube-controller-manager", "subresource": "status"}]);
                }),
                true,
            ),
            (
                "a hand edit of the spec",
                edit(&|l| l["spec"]["template"]["spec"]["containers"][0]["image"] = json!("app:2")),
                false,
            ),
            ("a hand edit of a default", edit(&|l| l["spec"]["strategy"]["type"] = json!("Recreate")), false),
            ("a new generation", edit(&|l| l["metadata"]["generation"] = json!(2)), false),
            (
                "an annotation the desired object declares",
                edit(&|l| l["metadata"]["annotations"]["team"] = json!("b")),
                false,
            ),
            ("a label added", edit(&|l| l["metadata"]["labels"] = json!({"x": "y"})), false),
            ("deleted and created again", edit(&|l| l["metadata"]["uid"] = json!("u-2")), false),
            ("being deleted", edit(&|l| l["metadata"]["deletionTimestamp"] = json!("2026-12-04T00:00:00Z")), false),
            ("a finalizer added", edit(&|l| l["metadata"]["finalizers"] = json!(["x"])), false),
        ];
        for (case, live, spared) in cases {
            assert_eq!(same_but_status(&deployment("app:1"), &kept, &live), spared, "{case}");
        }
        // Annotations the desired object does not declare are compared when it declares none.
        let mut bare = deployment("app:1");
        bare["metadata"].as_object_mut().unwrap().remove("annotations");
        let mut kept_bare = applied_deployment();
        kept_bare["metadata"].as_object_mut().unwrap().remove("annotations");
        let mut live = kept_bare.clone();
        live["metadata"]["annotations"] = json!({"deployment.kubernetes.io/revision": "1"});
        assert!(same_but_status(&bare, &kept_bare, &live));
    }

    #[test]
    fn a_workload_whose_status_alone_moved_is_planned_from_the_watch_cache() {
        let desired = deployment("app:1");
        let id = validate::identity(&desired);
        let checked = Instant::now() - Duration::from_secs(60);
        let kept = BTreeMap::from([(id.clone(), known(&desired, &applied_deployment(), checked))]);
        // The watch cache's copy: metadata and status, no spec.
        let seen = |f: &dyn Fn(&mut Value)| {
            let a = applied_deployment();
            let mut c = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": a["metadata"].clone(),
                               "status": {"observedGeneration": 1, "availableReplicas": 0,
                                          "conditions": [{"type": "Available", "status": "True"}]}});
            c["metadata"]["resourceVersion"] = json!("9");
            f(&mut c);
            c
        };
        // (case, cached copy, skipped)
        let cases: Vec<(&str, Value, bool)> = vec![
            ("its status moved", seen(&|_| {}), true),
            (
                "its status and an annotation it does not declare",
                seen(&|c| c["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = json!("1")),
                true,
            ),
            ("a new generation: its spec may have changed", seen(&|c| c["metadata"]["generation"] = json!(2)), false),
            ("a label added", seen(&|c| c["metadata"]["labels"] = json!({"x": "y"})), false),
            ("an annotation it declares", seen(&|c| c["metadata"]["annotations"]["team"] = json!("b")), false),
            ("deleted and created again", seen(&|c| c["metadata"]["uid"] = json!("u-2")), false),
            ("being deleted", seen(&|c| c["metadata"]["deletionTimestamp"] = json!("2026-12-04T00:00:00Z")), false),
            ("a metadata-only store: no status", seen(&|c| drop(c.as_object_mut().unwrap().remove("status"))), false),
            (
                "no resourceVersion",
                seen(&|c| drop(c["metadata"].as_object_mut().unwrap().remove("resourceVersion"))),
                false,
            ),
        ];
        for (case, cached, skipped) in cases {
            let (skip, recheck) =
                split(&kept, std::slice::from_ref(&desired), &BTreeMap::from([(id.clone(), &cached)]), Instant::now());
            assert_eq!(skip.contains_key(&id), skipped, "{case}");
            assert_eq!(recheck.contains_key(&id), !skipped, "{case}");
            let Some(k) = skip.get(&id) else { continue };
            let live: Value = k.live.parse().unwrap();
            assert_eq!(live["status"], cached["status"], "{case}: the cached status");
            assert_eq!(live["spec"], applied_deployment()["spec"], "{case}: the kept spec");
            assert_eq!(&*k.resource_version, "9", "{case}");
            assert_eq!(
                (k.checked, k.content, k.digest),
                (kept[&id].checked, kept[&id].content, kept[&id].digest),
                "{case}"
            );
        }
        // Another kind: a new resourceVersion says nothing of the rest of it.
        let mut cm_seen = live("8");
        cm_seen["status"] = json!({});
        let cm_kept = BTreeMap::from([(validate::identity(&cm("1")), known(&cm("1"), &live("7"), checked))]);
        let cm_cached = BTreeMap::from([(validate::identity(&cm("1")), &cm_seen)]);
        assert!(split(&cm_kept, &[cm("1")], &cm_cached, Instant::now()).0.is_empty(), "a ConfigMap is read");
    }

    #[test]
    fn only_objects_kept_for_the_same_desired_object_and_trusted_are_recheckable() {
        let id = validate::identity(&cm("1"));
        let now = Instant::now();
        let kept = |rv: &str, age: Duration| BTreeMap::from([(id.clone(), known(&cm("1"), &live(rv), now - age))]);
        let fresh = Duration::from_secs(10);
        // (case, kept, desired now, recheckable)
        let cases = [
            ("kept", kept("7", fresh), cm("1"), true),
            ("a new desired object", kept("7", fresh), cm("2"), false),
            ("checked too long ago", kept("7", TRUST_FOR), cm("1"), false),
            ("kept without a resourceVersion", kept("", fresh), cm("1"), false),
            ("never planned", BTreeMap::new(), cm("1"), false),
        ];
        for (case, kept, desired, expected) in cases {
            let found = recheckable(&kept, &[desired], now).iter().any(|(i, _, _)| *i == id);
            assert_eq!(found, expected, "{case}");
        }
        // Kept again as read, with when it was last really checked.
        let earlier = now - Duration::from_secs(60);
        let rechecked = BTreeMap::from([(id.clone(), known(&cm("1"), &live("7"), earlier))]);
        let live_map = BTreeMap::from([(id.clone(), live("9"))]);
        let plan = crate::plan::build(
            &[cm("1")],
            &crate::plan::Inputs { live: live_map.clone(), dry_run: live_map.clone(), ..Default::default() },
        );
        let out = to_keep(&[cm("1")], &plan, &live_map, &BTreeMap::new(), &rechecked, now);
        assert_eq!(out[&id].checked, earlier);
        assert_eq!(&*out[&id].resource_version, "9");
    }

    fn plan_of(action: Action, conflicts: Vec<crate::plan::Conflict>) -> Plan {
        let desired = [cm("1")];
        let live = BTreeMap::from([(validate::identity(&cm("1")), live("7"))]);
        let dry_run = match action {
            Action::Update => BTreeMap::from([(validate::identity(&cm("1")), cm("changed"))]),
            _ => BTreeMap::new(),
        };
        let inputs = crate::plan::Inputs {
            live: if action == Action::Create { BTreeMap::new() } else { live },
            dry_run,
            conflicts: if conflicts.is_empty() {
                BTreeMap::new()
            } else {
                BTreeMap::from([(validate::identity(&cm("1")), conflicts)])
            },
            ..Default::default()
        };
        crate::plan::build(&desired, &inputs)
    }

    #[test]
    fn applied_objects_are_kept_as_the_apply_returned_them() {
        let now = Instant::now();
        let id = validate::identity(&cm("1"));
        // (case, objects the apply returned, kept)
        let cases = [
            ("applied", BTreeMap::from([(id.clone(), live("8"))]), true),
            ("not applied (pruned, or another wave)", BTreeMap::new(), false),
            ("returned without a resourceVersion", BTreeMap::from([(id.clone(), live(""))]), false),
        ];
        for (case, objects, kept) in cases {
            let out = applied(&[cm("1")], &objects, now);
            assert_eq!(out.contains_key(&id), kept, "{case}");
        }
        // Then skipped while the watch cache has it at that resourceVersion, and read once it moved.
        let out = applied(&[cm("1")], &BTreeMap::from([(id.clone(), live("8"))]), now);
        let at = |rv: &str| BTreeMap::from([(id.clone(), live(rv))]);
        assert!(skippable(&out, &[cm("1")], &at("8"), now).contains_key(&id));
        assert!(!skippable(&out, &[cm("1")], &at("9"), now).contains_key(&id));
        // Kept with what a plan kept of the Application's other objects.
        let store = Unchanged::default();
        let other = "v1/ConfigMap/n/other".to_string();
        store.set("n/app", BTreeMap::from([(other.clone(), out[&id].clone())]));
        store.add("n/app", out);
        assert_eq!(store.get("n/app").len(), 2);
    }

    #[test]
    fn kept_objects_lose_their_managed_fields_only() {
        let now = Instant::now();
        let id = validate::identity(&cm("1"));
        let mut returned = live("8");
        returned["metadata"]["managedFields"] = json!([{"manager": "kuvryn-sync", "fieldsV1": {"f:data": {}}}]);
        let plan = crate::plan::build(
            &[cm("1")],
            &crate::plan::Inputs { live: BTreeMap::from([(id.clone(), returned.clone())]), ..Default::default() },
        );
        let live_map = BTreeMap::from([(id.clone(), returned.clone())]);
        let objects = BTreeMap::from([(id.clone(), returned)]);
        for (how, out) in [
            ("kept by a plan", to_keep(&[cm("1")], &plan, &live_map, &BTreeMap::new(), &BTreeMap::new(), now)),
            ("kept after an apply", applied(&[cm("1")], &objects, now)),
        ] {
            let kept: Value = out[&id].live.parse().expect("kept as JSON");
            assert!(kept["metadata"].get("managedFields").is_none(), "{how}: {kept}");
            assert_eq!(kept, live("8"), "{how}: everything else is kept");
            // And it is what a skipped read is planned against.
            let skipped = skippable(&out, &[cm("1")], &BTreeMap::from([(id.clone(), live("8"))]), now);
            assert_eq!(serde_json::from_str::<Value>(&skipped[&id]).unwrap(), live("8"), "{how}");
        }
    }

    #[test]
    fn only_objects_found_unchanged_without_conflict_are_kept() {
        let now = Instant::now();
        let id = validate::identity(&cm("1"));
        let live_map = BTreeMap::from([(id.clone(), live("7"))]);
        let conflict = crate::plan::Conflict { field: ".data.k".into(), manager: "kubectl".into() };
        // (case, plan, kept)
        let cases = [
            ("unchanged", plan_of(Action::Unchanged, vec![]), true),
            ("to update", plan_of(Action::Update, vec![]), false),
            ("to create", plan_of(Action::Create, vec![]), false),
            ("unchanged with a conflict", plan_of(Action::Unchanged, vec![conflict]), false),
        ];
        for (case, plan, kept) in cases {
            let out = to_keep(&[cm("1")], &plan, &live_map, &BTreeMap::new(), &BTreeMap::new(), now);
            assert_eq!(out.contains_key(&id), kept, "{case}: {:?}", plan.entries);
        }
        // A skipped object keeps when it was really checked.
        let earlier = now - Duration::from_secs(60);
        let skipped = BTreeMap::from([(id.clone(), known(&cm("1"), &live("7"), earlier))]);
        let out = to_keep(&[cm("1")], &plan_of(Action::Unchanged, vec![]), &live_map, &skipped, &BTreeMap::new(), now);
        assert_eq!(out[&id].checked, earlier);
    }
}
