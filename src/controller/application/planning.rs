//! The plan stage: the live objects and the Application's managed inventory read as its service
//! account (the inventory from the shard's watch caches for a drift check, and for a plan that
//! may be acted on where `decisions::inventory` allows), and the plan.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kube::api::Api;
use kube::core::ApiResource;
use serde_json::{Value, json};

use super::error::Error;
use super::flow::{Desired, Failure, Planned, redact};
use super::replica::unchanged;
use super::replica::{Context, shard_of};
use crate::api::application::Application;
use crate::api::names;
use crate::decisions::absent;
use crate::decisions::inventory as inventory_source;
use crate::live;
use crate::plan::{self, inventory, revision, validate};
use crate::watch::managed::Cached;

/// Steps 6 and 7: read the live state and plan `desired`. `from_cache`: the managed inventory
/// comes from the shard's watch caches (a drift check); such a plan is never acted on
/// (`Planned::fresh`).
pub(super) async fn plan(
    app: &Application,
    ctx: &Context,
    ns: &str,
    name: &str,
    desired: Desired,
    from_cache: bool,
) -> Result<Result<Planned, Failure>, Error> {
    let spec = &app.spec;
    let Desired { objects: desired, hooks, hash, secrets, scopes, sa: sa_client } = desired;
    let fail = |reason: &'static str, message: String, retryable: bool| {
        Ok(Err(Failure::new(reason, redact(&message, &secrets), retryable)))
    };
    let mut namespaces = BTreeSet::from([spec.destination.namespace.clone()]);
    namespaces.extend(desired.iter().filter_map(|o| o["metadata"]["namespace"].as_str()).map(str::to_string));
    let managed_kinds = app.status.as_ref().map(|s| s.managed_kinds.clone()).unwrap_or_default();
    let adopt = spec.sync.conflict_policy == crate::api::application::ConflictPolicy::Adopt;
    for k in live::kinds_to_search(&managed_kinds, &desired) {
        if let Some(resource) = scopes.resource(&k.group, &k.version, &k.kind) {
            // Changes of a kind the controller may watch trigger drift checks at once.
            ctx.kinds.note(resource).await;
        }
    }
    let selector = inventory::selector(ns, name);
    let shard_key = ctx.fence.is_some().then(|| shard_of(ctx, ns, name));
    let who = format!("{ns}/{}", spec.service_account_name);
    let app_key = format!("{ns}/{name}");
    let no_status = Default::default();
    let requested = crate::decisions::rollout::retry_requested(app, app.status.as_ref().unwrap_or(&no_status));
    let known = ctx.unchanged.get(&app_key);
    // A drift check takes every watched kind from the cache; a plan that may be acted on only
    // where the service account's own lists and this replica's writes vouch for it
    // (decisions::inventory).
    let cached = |r: &ApiResource| -> Option<Vec<Value>> {
        if from_cache {
            let found = ctx.inventory.lookup(shard_key, &r.group, &r.kind, &selector)?;
            return Some(found.into_iter().map(|c| as_object(r, c)).collect());
        }
        let namespaced = validate::Scopes::namespaced(&*scopes, &r.group, &r.kind).unwrap_or(true);
        let listed = ctx.list_answers.listed(&who, r, namespaced, &namespaces);
        if !inventory_source::worth_looking(listed, requested) {
            return None;
        }
        let found = ctx.inventory.lookup(shard_key, &r.group, &r.kind, &selector);
        let facts = inventory_source::Facts {
            cache_ready: found.is_some(),
            listed,
            requested,
            own_writes_seen: found.as_deref().is_some_and(|f| own_writes_seen(&known, &managed_kinds, r, f)),
        };
        let searched_only = match inventory_source::source(facts) {
            inventory_source::Source::List => return None,
            inventory_source::Source::Cache { searched_only } => searched_only,
        };
        let in_scope = |c: &Cached| !searched_only || c.meta.namespace.as_ref().is_some_and(|n| namespaces.contains(n));
        Some(found?.into_iter().filter(in_scope).map(|c| as_object(r, c)).collect())
    };
    let search = live::Search { namespaces: &namespaces, answers: Some((&ctx.list_answers, &who)) };
    // A drift check does not read again what nothing can have changed (unchanged.rs), unless
    // an operator asks for a reconcile: that reads everything.
    let kept = if from_cache && !requested { known.clone() } else { Arc::default() };
    let now = std::time::Instant::now();
    let skipped = std::sync::Mutex::new(BTreeMap::new());
    let recheckable = std::sync::Mutex::new(BTreeMap::new());
    let skip = |managed: &[Value]| {
        let cached: BTreeMap<String, &Value> = managed.iter().map(|m| (validate::identity(m), m)).collect();
        let (skip, recheck) = unchanged::split(&kept, &desired, &cached, now);
        let packed =
            |m: &BTreeMap<String, unchanged::Known>| m.iter().map(|(id, k)| (id.clone(), k.live.clone())).collect();
        let spare = live::Spare { skip: packed(&skip), recheck: packed(&recheck) };
        *skipped.lock().expect("skipped lock") = skip;
        *recheckable.lock().expect("recheckable lock") = recheck;
        spare
    };
    // Nothing kept in memory (a replica that took the Application over, or restarted): a drift
    // check reads the objects, and dry-runs none if they are as the last plans found them.
    let vouched =
        if from_cache && !requested && known.is_empty() { vouched(app, now, jiff::Timestamp::now()) } else { None };
    let base = absent::Facts {
        acted_on: !from_cache,
        requested,
        namespaced: true,
        watched: Some(false),
        written_here: false,
        found_existing: ctx.found_existing.contains_key(&app_key),
    };
    let presumed = presumed_absent(ctx, &desired, &scopes, shard_key, &known, base);
    let read = {
        let skip: Option<live::Skip<'_>> = if from_cache && !kept.is_empty() { Some(&skip) } else { None };
        let vouched = vouched.as_ref().map(|(digest, _)| digest.as_str());
        let needed = live::Needed {
            desired: &desired,
            managed_kinds: &managed_kinds,
            selector: &selector,
            adopt,
            vouched,
            presumed: &presumed,
        };
        live::read(&sa_client, &scopes, needed, search, &cached, skip).await
    };
    let skipped = skipped.into_inner().expect("skipped lock");
    let mut rechecked = recheckable.into_inner().expect("recheckable lock");
    let kept_before = kept.clone();
    let live = match read {
        Ok(l) => l,
        Err(live::Error::Forbidden(m)) => {
            return fail(names::reasons::APPLY_FAILURE, format!("the Application's service account: {m}"), true);
        }
        Err(live::Error::Invalid(problems)) => {
            let n = problems.len();
            let message = format!(
                "{n} object{} refused by the API server: {}",
                if n == 1 { " was" } else { "s were" },
                problems.join("; ")
            );
            return fail(names::reasons::VALIDATION_FAILURE, message, false);
        }
        Err(live::Error::Api(e)) => return Err(e.into()),
    };
    rechecked.retain(|id, _| live.rechecked.contains(id));
    if let Some((_, checked)) = vouched {
        for d in desired.iter() {
            let id = validate::identity(d);
            if let (true, Some(l)) = (live.rechecked.contains(&id), live.live.get(&id)) {
                rechecked.entry(id).or_insert_with(|| unchanged::known(d, l, checked));
            }
        }
    }
    // One object, one Application: an object another Application manages is refused, naming
    // it, unless that Application is gone (its objects were orphaned and may be taken over).
    // The annotation naming it is the tenant's to write: another namespace's Application is
    // read as this Application's service account (inventory::claim).
    let mut claimed = Vec::new();
    for (id, other) in inventory::claimed_by_others(&live.live, ns, name) {
        let (other_ns, other_name) = other.split_once('/').unwrap_or(("", other.as_str()));
        let reader = if other_ns == ns { ctx.client.clone() } else { sa_client.clone() };
        let lookup = match Api::<Application>::namespaced(reader, other_ns).get_opt(other_name).await {
            Ok(Some(_)) => inventory::Lookup::Found,
            Ok(None) => inventory::Lookup::Missing,
            Err(kube::Error::Api(s)) if s.code == 403 && other_ns != ns => inventory::Lookup::Unreadable,
            Err(e) => return Err(e.into()),
        };
        if inventory::claim(lookup) {
            claimed.push(format!("{} is managed by Application {other}", inventory::describe(&id)));
        }
    }
    if !claimed.is_empty() {
        let n = claimed.len();
        let message = format!(
            "{n} object{} belong{} to another Application: {}; an object is managed by one Application only (remove it from one of them, or, if that Application is gone, remove the {} annotation from the object)",
            if n == 1 { "" } else { "s" },
            if n == 1 { "s" } else { "" },
            claimed.join("; "),
            names::annotations::APPLICATION
        );
        return fail(names::reasons::VALIDATION_FAILURE, message, false);
    }
    let kept_stamps = live.kept_stamps;
    let inputs = plan::Inputs {
        live: live.live,
        dry_run: live.dry_run,
        managed: live.managed,
        prune: spec.sync.prune,
        conflicts: live.conflicts,
        one_wave: !spec.strategy.waves,
        hooks: hooks.to_vec(),
        run_hooks: spec.strategy.hooks,
    };
    // A plan of thousands of objects (diffs, dry-run comparisons) takes a while: off the runtime
    // when large.
    let large = crate::offload::Size::default()
        .values(desired.iter())
        .values(inputs.live.values())
        .values(inputs.dry_run.values())
        .values(inputs.managed.iter())
        .large();
    let (plan, stored, desired, inputs, keep) = crate::offload::offload_if(large, move || {
        let plan = plan::build(&desired, &inputs);
        let stored = revision::stored(&plan, adopt);
        let keep = unchanged::to_keep(&desired, &plan, &inputs.live, &skipped, &rechecked, now);
        // A drift check that skipped everything kept, each at the resourceVersion kept: what is
        // kept stays as it is (a workload whose status alone moved is kept at its new one).
        let same = from_cache
            && keep.len() == kept_before.len()
            && keep.iter().all(|(id, k)| {
                skipped.contains_key(id)
                    && kept_before.get(id).is_some_and(|before| before.resource_version == k.resource_version)
            });
        (plan, stored, desired, inputs, (!same).then_some(keep))
    })
    .await;
    if let Some(keep) = keep {
        ctx.unchanged.set(&app_key, keep);
    }
    Ok(Ok(Planned {
        hash,
        desired,
        hooks,
        plan,
        stored,
        scopes,
        sa: sa_client,
        live: inputs.live,
        kept_stamps,
        managed: inputs.managed,
        adopt,
        secrets,
        fresh: !from_cache,
        presumed,
    }))
}

/// The identities of the desired objects a plan takes as absent ([`absent::presume_absent`]);
/// `base` holds what is known for all of them.
fn presumed_absent(
    ctx: &Context,
    desired: &[Value],
    scopes: &crate::watch::discovery::ClusterScopes,
    shard: Option<u32>,
    known: &BTreeMap<String, unchanged::Known>,
    base: absent::Facts,
) -> BTreeSet<String> {
    // Most plans (drift checks) take none: nothing per object is looked up for them.
    if !absent::presume_absent(base) {
        return BTreeSet::new();
    }
    let mut out = BTreeSet::new();
    for d in desired {
        let group = validate::group_of(d["apiVersion"].as_str().unwrap_or_default());
        let kind = d["kind"].as_str().unwrap_or_default();
        let (ns, name) = (d["metadata"]["namespace"].as_str(), d["metadata"]["name"].as_str().unwrap_or_default());
        let id = validate::identity(d);
        let facts = absent::Facts {
            namespaced: ns.is_some() && validate::Scopes::namespaced(scopes, group, kind).unwrap_or(false),
            watched: ctx.inventory.holds(shard, group, kind, ns.unwrap_or_default(), name),
            written_here: known.contains_key(&id),
            ..base
        };
        if absent::presume_absent(facts) {
            out.insert(id);
        }
    }
    out
}

/// `status.sync.unchanged` of `app`, with when it was last really checked as an instant of
/// this process (`now` is `wall` on the wall clock).
///
/// Contract: `None` unless the record was checked less than [`unchanged::TRUST_FOR`] before
/// `wall`; a time that cannot be read, that lies in the future (another replica's clock ahead
/// of ours), or that this process's clock cannot express (a machine up for less time than the
/// record's age) is not trusted either. Not trusted, every object is dry-run.
fn vouched(app: &Application, now: std::time::Instant, wall: jiff::Timestamp) -> Option<(String, std::time::Instant)> {
    let u = app.status.as_ref()?.sync.as_ref()?.unchanged.as_ref()?;
    let checked: jiff::Timestamp = u.checked_at.parse().ok()?;
    let age = std::time::Duration::try_from(wall.duration_since(checked)).ok()?;
    if age >= unchanged::TRUST_FOR {
        return None;
    }
    Some((u.digest.clone(), now.checked_sub(age)?))
}

/// A watch cache's object of `r` (its metadata, and its status when the store keeps it),
/// shaped as a listed managed object.
fn as_object(r: &ApiResource, c: Cached) -> Value {
    let mut o = json!({"apiVersion": r.api_version, "kind": r.kind, "metadata": c.meta});
    if let Some(status) = c.status.and_then(|s| serde_json::from_str::<Value>(&s).ok()) {
        o["status"] = status;
    }
    o
}

/// Whether `found` (a watch cache's objects of `r` for the Application) holds every object of
/// that kind the Application's last plans applied or found unchanged here (`known`): the watch
/// has caught up with this replica's own writes.
///
/// Keeping nothing of a kind the Application's status names among its managed kinds
/// (`managed_kinds`) vouches for nothing: what was kept may have been evicted, or this replica
/// has restarted or taken the shard over since the objects were written.
fn own_writes_seen(
    known: &BTreeMap<String, unchanged::Known>,
    managed_kinds: &[crate::api::common::GroupVersionKind],
    r: &ApiResource,
    found: &[Cached],
) -> bool {
    let prefix = format!("{}/{}/", r.group, r.kind);
    let mut kept = known.keys().filter_map(|id| id.strip_prefix(&prefix)).peekable();
    if kept.peek().is_none() {
        return !managed_kinds.iter().any(|k| k.group == r.group && k.kind == r.kind);
    }
    let cached: BTreeSet<(&str, &str)> = found
        .iter()
        .map(|c| (c.meta.namespace.as_deref().unwrap_or_default(), c.meta.name.as_deref().unwrap_or_default()))
        .collect();
    kept.all(|rest| {
        let (ns, name) = rest.split_once('/').unwrap_or(("", rest));
        cached.contains(&(ns, name))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::common::GroupVersionKind;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn a_record_is_trusted_only_within_the_hour_after_its_check() {
        use std::time::Duration;
        let wall: jiff::Timestamp = "2026-12-06T12:00:00Z".parse().unwrap();
        let now = std::time::Instant::now();
        let app = |checked_at: &str| {
            let status =
                json!({"sync": {"status": "Synced", "unchanged": {"digest": "sha256:ab", "checkedAt": checked_at}}});
            super::super::replica::written::test_app("1", status)
        };
        // (checkedAt, how long ago it counts as checked; None: not trusted)
        let cases: &[(&str, Option<u64>)] = &[
            ("2026-12-06T11:50:00Z", Some(600)),
            ("2026-12-06T11:00:01Z", Some(3599)),
            ("2026-12-06T11:00:00Z", None),
            ("2026-12-06T09:00:00Z", None),
            ("2026-12-06T12:00:05Z", None),
            ("yesterday", None),
        ];
        for (checked_at, ago) in cases {
            let got = vouched(&app(checked_at), now, wall);
            let want =
                ago.and_then(|s| now.checked_sub(Duration::from_secs(s))).map(|at| ("sha256:ab".to_string(), at));
            assert_eq!(got, want, "{checked_at}");
        }
        let none = super::super::replica::written::test_app("1", json!({"sync": {"status": "Synced"}}));
        assert_eq!(vouched(&none, now, wall), None);
    }

    #[test]
    fn own_writes_are_seen_only_when_the_cache_holds_every_kept_object_and_something_is_kept() {
        let cm = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let known = |ids: &[&str]| -> BTreeMap<String, unchanged::Known> {
            let k = unchanged::Known {
                digest: 0,
                resource_version: "1".into(),
                live: crate::packed::Packed::from_text("{}"),
                checked: std::time::Instant::now(),
                content: [0; 32],
            };
            ids.iter().map(|id| (id.to_string(), k.clone())).collect()
        };
        let meta = |ns: &str, name: &str| Cached {
            meta: ObjectMeta { namespace: Some(ns.into()), name: Some(name.into()), ..Default::default() },
            status: None,
        };
        let managed = vec![GroupVersionKind { group: String::new(), version: "v1".into(), kind: "ConfigMap".into() }];
        let secret_only = vec![GroupVersionKind { group: String::new(), version: "v1".into(), kind: "Secret".into() }];
        // (kept, the status's managed kinds, the cache) → seen
        type Case<'a> = (&'a [&'a str], &'a [GroupVersionKind], &'a [Cached], bool);
        let cases: [Case; 7] = [
            (&["/ConfigMap/n/a", "/ConfigMap/n/b"], &managed, &[meta("n", "a"), meta("n", "b")], true),
            // The watch has not shown `b`, applied just now.
            (&["/ConfigMap/n/a", "/ConfigMap/n/b"], &managed, &[meta("n", "a")], false),
            (&["/ConfigMap/n/a"], &managed, &[meta("m", "a")], false),
            // Kept objects of other kinds say nothing of this one.
            (&["/Secret/n/s"], &managed, &[], false),
            // Nothing kept of a kind the Application manages: evicted, or written before a
            // restart or a takeover.
            (&[], &managed, &[meta("n", "a")], false),
            // Nothing kept, nothing of the kind deployed: a first rollout has written nothing.
            (&[], &[], &[], true),
            (&["/Secret/n/s"], &secret_only, &[], true),
        ];
        for (kept, managed_kinds, found, want) in cases {
            assert_eq!(own_writes_seen(&known(kept), managed_kinds, &cm, found), want, "{kept:?} {managed_kinds:?}");
        }
    }
}
