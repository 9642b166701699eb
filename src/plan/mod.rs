//! The pure planning core, no kube client and no network, table-tested from `testdata/plan/`:
//!
//! - [`validate`]: the desired state is well-formed and inside the Application's destination;
//! - [`diff`]: normalized comparison of desired and live objects (only managed fields);
//! - [`order`]: the static apply order within a wave;
//! - [`hooks`]: sync hooks: their phases, delete policies, Helm's hook annotations, completion,
//!   and the order of an attempt's hook stages;
//! - [`build`]: the deterministic plan and its digest;
//! - [`inventory`]: the labels of managed objects and history retention;
//! - [`deletion`]: what deleting an Application deletes, and what it keeps (Namespaces and
//!   CustomResourceDefinitions holding what it does not manage);
//! - [`redeploy`]: a forced redeploy's request checked, and `restartedAt` put into workloads' pod
//!   templates;
//! - [`revision`]: Revision identity, the desired-state hash and the bounded plan stored on a
//!   Revision;
//! - [`target_hash`]: the fingerprint a manual rollback approves (`rollback-target-hash`).

pub mod deletion;
pub mod diff;
pub mod hooks;
pub mod inventory;
pub mod order;
pub mod prepare;
pub mod redeploy;
pub mod revision;
pub mod target_hash;
pub mod validate;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::api::names;
use crate::api::revision::HookPhase;

/// Most changed paths listed per entry.
pub const MAX_PATHS: usize = 20;

/// What a plan does to one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Action {
    /// Not in the cluster yet.
    Create,
    /// In the cluster and different in the fields Kuvryn Sync manages.
    Update,
    /// In the cluster and the same (or a prune that was skipped).
    Unchanged,
    /// Managed, no longer desired, pruned.
    Delete,
    /// A sync hook that is not run; `warnings` say why.
    Skip,
}

/// A field another manager owns that applying would take (conflict policy `adopt`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Conflict {
    /// The field path.
    pub field: String,
    /// Its previous manager.
    pub manager: String,
}

/// One object of the plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// API group (`""` for core).
    pub group: String,
    /// Kind.
    pub kind: String,
    /// API version (`v1`, `v1beta1`) of the object.
    pub version: String,
    /// Namespace (`""` for cluster-scoped).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// What happens.
    pub action: Action,
    /// Changed field paths (at most [`MAX_PATHS`]; never values).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<String>,
    /// How many changed paths were left out.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub more_changed: usize,
    /// Warnings (for example: prune skipped, and why).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Fields taken from other managers (conflict policy `adopt`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<Conflict>,
    /// The rollout wave ([`wave_of`]; 0 for every entry when waves are off). Left out of the
    /// canonical JSON when 0, so plans without waves keep their digests.
    #[serde(default, skip_serializing_if = "is_wave_zero")]
    pub wave: i32,
    /// The phase of a sync hook ([`hooks`]); `None` for ordinary objects and for Helm hooks that
    /// are never run (action [`Action::Skip`]). Left out of the canonical JSON when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook: Option<HookPhase>,
    /// An object of a Helm chart's `crds/` folder ([`names::annotations::CHART_CRD`]): in the
    /// first wave, whatever its own. Left out of the canonical JSON when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub chart_crd: bool,
}

/// Whether `obj` came from a Helm chart's `crds/` folder.
pub fn is_chart_crd(obj: &Value) -> bool {
    obj["metadata"]["annotations"][names::annotations::CHART_CRD] == "true"
}

impl Entry {
    /// Whether this entry is a sync hook (run or skipped): never applied, pruned or checked for
    /// drift.
    pub fn is_hook(&self) -> bool {
        self.hook.is_some() || self.action == Action::Skip
    }

    /// The object's identity, `group/kind/namespace/name`, as [`validate::identity`] gives it
    /// for the object itself.
    pub fn identity(&self) -> String {
        format!("{}/{}/{}/{}", self.group, self.kind, self.namespace, self.name)
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn is_wave_zero(n: &i32) -> bool {
    *n == 0
}

/// The wave of `obj`: its `sync.kuvryn.io/sync-wave` annotation, an integer (negative allowed,
/// surrounding spaces ignored), 0 when absent. A Helm hook (`helm.sh/hook`) without it is in the
/// wave of its `helm.sh/hook-weight`. A wave applies, and must be Healthy, before the next
/// higher one; prune deletes higher waves first.
pub fn wave_of(obj: &Value) -> Result<i32, String> {
    let a = &obj["metadata"]["annotations"];
    let key = if a[names::annotations::SYNC_WAVE].is_null() && !a[names::annotations::HELM_HOOK].is_null() {
        names::annotations::HELM_HOOK_WEIGHT
    } else {
        names::annotations::SYNC_WAVE
    };
    match &a[key] {
        Value::Null => Ok(0),
        Value::String(s) => s.trim().parse::<i32>().map_err(|_| {
            format!("annotation {key}: {:?} is not a wave (an integer such as -1, 0 or 5)", crate::text::bounded(s, 64))
        }),
        other => Err(format!("annotation {key}: {other} is not a string")),
    }
}

/// A deterministic plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// Entries: applies in apply order, then deletes in reverse apply order.
    pub entries: Vec<Entry>,
    /// sha256 over the canonical JSON of the entries and the desired state hash of the objects
    /// (what they are set to).
    pub digest: String,
}

impl Plan {
    /// The waves of the objects the rollout applies or keeps (not those it deletes), and of
    /// the Sync hooks it runs with them, lowest first.
    pub fn waves(&self) -> Vec<i32> {
        let waves: std::collections::BTreeSet<i32> = self
            .entries
            .iter()
            .filter(|e| e.action != Action::Delete)
            .filter(|e| !e.is_hook() || (e.hook == Some(HookPhase::Sync) && e.action == Action::Create))
            .map(|e| e.wave)
            .collect();
        waves.into_iter().collect()
    }

    /// Whether applying the plan would change an object (hooks aside: they are created each
    /// rollout, and are never drift).
    pub fn changes(&self) -> bool {
        self.entries.iter().any(|e| !e.is_hook() && e.action != Action::Unchanged)
    }

    /// Count of entries per action.
    pub fn counts(&self) -> BTreeMap<Action, usize> {
        let mut m = BTreeMap::new();
        for e in &self.entries {
            *m.entry(e.action).or_insert(0) += 1;
        }
        m
    }
}

/// The inputs of [`build`] besides the objects.
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    /// Live objects matching desired ones, by [`validate::identity`].
    pub live: BTreeMap<String, Value>,
    /// Server-side dry-run results of the desired objects, by identity (optional: the desired
    /// object is compared when missing).
    pub dry_run: BTreeMap<String, Value>,
    /// Live objects labelled as managed by the Application (prune candidates).
    pub managed: Vec<Value>,
    /// Whether pruning is on.
    pub prune: bool,
    /// Conflicting fields per identity (conflict policy `adopt`).
    pub conflicts: BTreeMap<String, Vec<Conflict>>,
    /// Every object in one wave (`spec.strategy.waves: false`).
    pub one_wave: bool,
    /// The desired sync hooks ([`hooks::hooked`] is not `No`), validated: planned apart from
    /// the objects, never compared with live state.
    pub hooks: Vec<Value>,
    /// Whether hooks are run (`spec.strategy.hooks`); when not, their entries are skipped.
    pub run_hooks: bool,
}

/// Kinds prune never deletes: losing them loses data or other workloads' state.
pub fn high_risk(group: &str, kind: &str) -> bool {
    matches!(
        (group, kind),
        ("", "Namespace")
            | ("apiextensions.k8s.io", "CustomResourceDefinition")
            | ("", "PersistentVolumeClaim")
            | ("", "PersistentVolume")
            | ("", "Secret")
    )
}

fn version_of(obj: &Value) -> String {
    let av = obj["apiVersion"].as_str().unwrap_or_default();
    av.rsplit('/').next().unwrap_or_default().to_string()
}

fn key(obj: &Value) -> (String, String, String, String) {
    let av = obj["apiVersion"].as_str().unwrap_or_default();
    (
        validate::group_of(av).to_string(),
        obj["kind"].as_str().unwrap_or_default().to_string(),
        obj["metadata"]["namespace"].as_str().unwrap_or_default().to_string(),
        obj["metadata"]["name"].as_str().unwrap_or_default().to_string(),
    )
}

/// Annotated to be left alone by prune.
fn opted_out(obj: &Value) -> bool {
    obj["metadata"]["annotations"][names::annotations::PRUNE] == names::annotations::PRUNE_DISABLED
}

/// PreSync hooks first, then the waves (with their Sync hooks), PostSync and SyncFail hooks.
fn phase_rank(e: &Entry) -> u8 {
    match e.hook {
        Some(HookPhase::PreSync) => 0,
        None | Some(HookPhase::Sync) => 1,
        Some(HookPhase::PostSync) => 2,
        Some(HookPhase::SyncFail) => 3,
    }
}

fn sort_key(e: &Entry) -> (u8, i32, u8, String, String, String, String) {
    (
        phase_rank(e),
        e.wave,
        order::rank(&e.group, &e.kind, !e.namespace.is_empty()),
        e.group.clone(),
        e.kind.clone(),
        e.namespace.clone(),
        e.name.clone(),
    )
}

/// Build the plan for validated `desired` objects: applies by wave, then by kind
/// ([`order::rank`]); deletes the other way round, higher waves first. The same inputs in any
/// order give a byte-identical plan and digest.
pub fn build(desired: &[Value], inputs: &Inputs) -> Plan {
    // Validation refused bad wave annotations; a pruned object's may be anything.
    let wave = |o: &Value| if inputs.one_wave { 0 } else { wave_of(o).unwrap_or(0) };
    // A chart's CRDs go before every other object of the chart, as `helm install` creates them.
    let first = desired.iter().chain(&inputs.hooks).filter(|o| !is_chart_crd(o)).map(wave).min().unwrap_or(0);
    let wave = |o: &Value| if is_chart_crd(o) { first.min(wave(o)) } else { wave(o) };
    let mut applies = Vec::new();
    let mut wanted = std::collections::BTreeSet::new();
    for d in desired {
        let (group, kind, namespace, name) = key(d);
        let id = validate::identity(d);
        wanted.insert(id.clone());
        let (action, mut changed) = match inputs.live.get(&id) {
            None => (Action::Create, Vec::new()),
            Some(live) => {
                let candidate = inputs.dry_run.get(&id).unwrap_or(d);
                let paths = diff::changed_paths(d, candidate, live);
                if paths.is_empty() { (Action::Unchanged, paths) } else { (Action::Update, paths) }
            }
        };
        let more_changed = changed.len().saturating_sub(MAX_PATHS);
        changed.truncate(MAX_PATHS);
        let mut conflicts = inputs.conflicts.get(&id).cloned().unwrap_or_default();
        conflicts.sort();
        applies.push(Entry {
            group,
            kind,
            version: version_of(d),
            namespace,
            name,
            action,
            changed,
            more_changed,
            warnings: Vec::new(),
            conflicts,
            wave: wave(d),
            hook: None,
            chart_crd: is_chart_crd(d),
        });
    }
    for h in &inputs.hooks {
        let (group, kind, namespace, name) = key(h);
        let (action, hook, warnings) = match hooks::hooked(h) {
            Ok(hooks::Hooked::Run(phase)) if !inputs.run_hooks => {
                (Action::Skip, Some(phase), vec!["not run: spec.strategy.hooks is false".to_string()])
            }
            Ok(hooks::Hooked::Run(phase)) => (Action::Create, Some(phase), Vec::new()),
            Ok(hooks::Hooked::NotRun(why)) => (Action::Skip, None, vec![why]),
            // Validation refused these.
            Ok(hooks::Hooked::No) | Err(_) => continue,
        };
        applies.push(Entry {
            group,
            kind,
            version: version_of(h),
            namespace,
            name,
            action,
            changed: Vec::new(),
            more_changed: 0,
            warnings,
            conflicts: Vec::new(),
            wave: wave(h),
            hook,
            chart_crd: false,
        });
    }
    applies.sort_by_key(sort_key);
    let mut deletes = Vec::new();
    let mut skipped = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    // One object can be listed twice (in two versions of its kind): which copy is used must not
    // depend on list order. An opt-out on either copy wins, then the lowest version.
    let mut managed: Vec<&Value> = inputs.managed.iter().collect();
    managed.sort_by_cached_key(|m| (key(m), !opted_out(m), version_of(m)));
    for m in managed {
        let id = validate::identity(m);
        if wanted.contains(&id) || !seen.insert(id) {
            continue;
        }
        let (group, kind, namespace, name) = key(m);
        let mut e = Entry {
            group,
            kind,
            version: version_of(m),
            namespace,
            name,
            action: Action::Delete,
            changed: Vec::new(),
            more_changed: 0,
            warnings: Vec::new(),
            conflicts: Vec::new(),
            wave: wave(m),
            hook: None,
            chart_crd: is_chart_crd(m),
        };
        if !inputs.prune {
            continue;
        }
        let opted_out = opted_out(m);
        if opted_out || high_risk(&e.group, &e.kind) {
            e.action = Action::Unchanged;
            e.warnings.push(if opted_out {
                format!(
                    "prune skipped: annotated {}: {}",
                    names::annotations::PRUNE,
                    names::annotations::PRUNE_DISABLED
                )
            } else {
                format!("prune skipped: {} is a high-risk kind; delete it by hand once it is no longer needed", e.kind)
            });
            skipped.push(e);
        } else {
            deletes.push(e);
        }
    }
    skipped.sort_by_key(sort_key);
    deletes.sort_by_key(sort_key);
    deletes.reverse();
    let mut entries = applies;
    entries.extend(skipped);
    entries.extend(deletes);
    let digest = digest(&entries, desired, &inputs.hooks);
    Plan { entries, digest }
}

/// sha256 over the canonical JSON of `entries` and the desired state hash of `desired` and
/// `hooks`. The entries name paths, never values: the digest also covers what the objects are
/// set to, so approving one plan never approves other values on the same paths (red to blue
/// after blue to red).
fn digest(entries: &[Entry], desired: &[Value], hooks: &[Value]) -> String {
    let canonical = serde_json::to_vec(entries).unwrap_or_default();
    let objects: Vec<Value> = desired.iter().chain(hooks).cloned().collect();
    let mut h = Sha256::new();
    h.update(&canonical);
    h.update(b"\n");
    h.update(revision::desired_state_hash(&objects).as_bytes());
    format!("sha256:{}", h.finalize().iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// The plan of `desired` once `plan` (built from `desired` and `hooks`) has been carried out:
/// every object it creates or updates live as desired, every object it deletes gone, no field
/// left in conflict; hooks and skipped prunes as they were.
///
/// # Contract
/// Its digest is the digest of a plan computed against the live state right after a
/// successful rollout of `plan`, by a replica that kept nothing ([`build`] with what it reads and
/// dry-runs). A rollout records it as `status.sync.planDigest`, so the next drift check, or the
/// replica a shard moves to, finds the status as it would write it and writes nothing.
pub fn carried_out(plan: &Plan, desired: &[Value], hooks: &[Value]) -> Plan {
    let entries: Vec<Entry> = plan
        .entries
        .iter()
        .filter(|e| e.action != Action::Delete)
        .map(|e| match e.action {
            Action::Create | Action::Update if e.hook.is_none() => Entry {
                action: Action::Unchanged,
                changed: Vec::new(),
                more_changed: 0,
                conflicts: Vec::new(),
                ..e.clone()
            },
            _ => e.clone(),
        })
        .collect();
    let digest = digest(&entries, desired, hooks);
    Plan { entries, digest }
}

#[cfg(test)]
mod tests;
