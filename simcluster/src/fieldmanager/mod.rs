//! Server-Side Apply and `managedFields` (fieldsV1) bookkeeping for Update operations, and the
//! non-apply patch types (JSON merge patch, JSON patch, strategic merge patch).
//!
//! Pure functions over `serde_json::Value`, reproducing kube-apiserver v1.36's field manager
//! (structured-merge-diff v4 plus the apiserver's managers: strip of `metadata` bookkeeping
//! fields, "current-operation" merging of Update entries, no-op applies keeping their time,
//! the cap of 10 Update managers, entries sorted by operation, time and name).
//!
//! Callers pass objects as they will be (or were) stored, *after* defaulting; the status (for
//! writes to the main resource) or the spec (for status writes) already stripped as the
//! resource's reset strategy does; `update` must not be called for writes the real server does
//! without a field manager (graceful deletion setting `deletionTimestamp`, `pods/binding`).

mod patch;
mod set;
mod typed;

#[cfg(test)]
mod tests;

use std::cmp::Ordering;

use serde_json::{Map, Value, json};

pub use patch::{PatchError, json_patch, merge_patch, strategic_merge_patch};
pub use set::{FieldSet, path_string};

use crate::schema::TypeNav;
use typed::{compare, ensure_named_fields, fill_zero, merge, prune, to_field_set};

/// How many Update managers an object keeps before the oldest are merged into `ancient-changes`.
pub const MAX_UPDATE_MANAGERS: usize = 10;

/// A managedFields operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    /// Server-side apply.
    Apply,
    /// Any other write (POST, PUT, PATCH other than apply, subresource writes).
    Update,
}

impl Operation {
    /// `Apply` / `Update`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// The manager of a write.
#[derive(Clone, Copy, Debug)]
pub struct Manager<'a> {
    /// `fieldManager`, or the User-Agent's program name.
    pub name: &'a str,
    /// Apply or Update.
    pub operation: Operation,
    /// `status`, `scale`, ... for subresource writes.
    pub subresource: Option<&'a str>,
    /// The apiVersion of the request (`v1`, `apps/v1`).
    pub api_version: &'a str,
    /// The write time, RFC 3339 with seconds (`2026-11-29T10:00:00Z`).
    pub time: &'a str,
}

/// A field another manager owns that an apply would change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// The other manager's name.
    pub manager: String,
    /// Its operation.
    pub operation: Operation,
    /// Its subresource.
    pub subresource: Option<String>,
    /// Its apiVersion.
    pub api_version: String,
    /// The field, e.g. `.data.k1` or `.spec.template.spec.containers[name="app"].image`.
    pub field: String,
}

/// One decoded managedFields entry.
#[derive(Clone, Debug)]
struct Entry {
    manager: String,
    operation: Operation,
    api_version: String,
    time: Option<String>,
    subresource: Option<String>,
    set: FieldSet,
}

impl Entry {
    /// The manager identity (time, fields and, for appliers, apiVersion excluded), as the
    /// JSON string the real server builds, which also orders conflict messages.
    fn identity(&self) -> String {
        identity(&self.manager, self.operation, &self.api_version, self.subresource.as_deref())
    }

    fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("manager".into(), json!(self.manager));
        m.insert("operation".into(), json!(self.operation.as_str()));
        m.insert("apiVersion".into(), json!(self.api_version));
        if let Some(t) = &self.time {
            m.insert("time".into(), json!(t));
        }
        m.insert("fieldsType".into(), json!("FieldsV1"));
        m.insert("fieldsV1".into(), self.set.to_fields_v1());
        if let Some(s) = &self.subresource {
            m.insert("subresource".into(), json!(s));
        }
        Value::Object(m)
    }
}

fn identity(manager: &str, op: Operation, api_version: &str, subresource: Option<&str>) -> String {
    let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let mut s = format!("{{\"manager\":{},\"operation\":{}", q(manager), q(op.as_str()));
    if op == Operation::Update && !api_version.is_empty() {
        s.push_str(&format!(",\"apiVersion\":{}", q(api_version)));
    }
    if let Some(sub) = subresource.filter(|s| !s.is_empty()) {
        s.push_str(&format!(",\"subresource\":{}", q(sub)));
    }
    s.push('}');
    s
}

fn managed_fields_of(obj: Option<&Value>) -> Option<&Vec<Value>> {
    obj?.get("metadata")?.get("managedFields")?.as_array()
}

/// Decode managedFields entries; entries of a repeated identity are merged.
fn decode(entries: &[Value]) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::new();
    for e in entries {
        let Value::Object(m) = e else { continue };
        let s = |k: &str| m.get(k).and_then(Value::as_str).map(str::to_string);
        let operation = match s("operation").as_deref() {
            Some("Apply") => Operation::Apply,
            _ => Operation::Update,
        };
        let set = m.get("fieldsV1").map(FieldSet::from_fields_v1).and_then(Result::ok).unwrap_or_default();
        let entry = Entry {
            manager: s("manager").unwrap_or_default(),
            operation,
            api_version: s("apiVersion").unwrap_or_default(),
            time: s("time"),
            subresource: s("subresource").filter(|x| !x.is_empty()),
            set,
        };
        match out.iter_mut().find(|x| x.identity() == entry.identity()) {
            Some(prev) => prev.set = prev.set.union(&entry.set),
            None => out.push(entry),
        }
    }
    out
}

/// Seconds since the epoch of an RFC 3339 time (None: unparsable, ordered first like nil).
fn seconds(t: Option<&str>) -> i64 {
    t.and_then(|t| t.parse::<jiff::Timestamp>().ok()).map(|ts| ts.as_second()).unwrap_or(0)
}

/// Sort as the real server encodes them: operation, time, manager, apiVersion, subresource.
fn sort_entries(entries: &mut [Entry]) {
    entries.sort_by(|p, q| {
        p.operation
            .as_str()
            .cmp(q.operation.as_str())
            .then_with(|| seconds(p.time.as_deref()).cmp(&seconds(q.time.as_deref())))
            .then_with(|| p.manager.cmp(&q.manager))
            .then_with(|| p.api_version.cmp(&q.api_version))
            .then_with(|| p.subresource.as_deref().unwrap_or("").cmp(q.subresource.as_deref().unwrap_or("")))
    });
}

/// Merge the oldest Update managers into `ancient-changes` buckets beyond the cap.
fn cap_update_managers(entries: &mut Vec<Entry>) {
    let mut updaters: Vec<usize> = (0..entries.len()).filter(|&i| entries[i].operation == Operation::Update).collect();
    if updaters.len() <= MAX_UPDATE_MANAGERS {
        return;
    }
    updaters.sort_by(|&a, &b| {
        let (pa, pb) = (&entries[a], &entries[b]);
        seconds(pa.time.as_deref()).cmp(&seconds(pb.time.as_deref())).then_with(|| pa.identity().cmp(&pb.identity()))
    });
    let mut length = updaters.len();
    let mut first_of_version: Vec<(String, usize)> = Vec::new();
    let mut remove = Vec::new();
    for &i in &updaters {
        if length <= MAX_UPDATE_MANAGERS {
            break;
        }
        let version = entries[i].api_version.clone();
        match first_of_version.iter().find(|(v, _)| *v == version).map(|(_, f)| *f) {
            Some(first) => {
                // The bucket lives in the first entry of this version, renamed.
                entries[first].manager = "ancient-changes".into();
                entries[first].subresource = None;
                entries[first].set = entries[first].set.union(&entries[i].set);
                entries[first].time = entries[i].time.clone();
                remove.push(i);
                length -= 1;
            }
            None => first_of_version.push((version, i)),
        }
    }
    remove.sort_unstable();
    for i in remove.into_iter().rev() {
        entries.remove(i);
    }
}

/// The paths the real server never records: `apiVersion`, `kind`, `metadata` itself and its
/// bookkeeping fields.
fn strip_set() -> FieldSet {
    let mut s = FieldSet::new();
    for p in [&["f:apiVersion"][..], &["f:kind"], &["f:metadata"]] {
        s.insert(&p.iter().map(|x| x.to_string()).collect::<Vec<_>>());
    }
    for f in [
        "name",
        "namespace",
        "creationTimestamp",
        "selfLink",
        "uid",
        "clusterName",
        "generation",
        "managedFields",
        "resourceVersion",
    ] {
        s.insert(&["f:metadata".to_string(), format!("f:{f}")]);
    }
    s
}

fn without_managed_fields(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(md) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        md.remove("managedFields");
    }
    v
}

fn encode_into(obj: &mut Value, mut entries: Vec<Entry>) {
    entries.retain(|e| !e.set.is_empty());
    cap_update_managers(&mut entries);
    sort_entries(&mut entries);
    let Value::Object(root) = obj else { return };
    let md = root.entry("metadata").or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(md) = md else { return };
    if entries.is_empty() {
        md.remove("managedFields");
    } else {
        md.insert("managedFields".into(), Value::Array(entries.iter().map(Entry::to_json).collect()));
    }
}

/// Record an Update-operation write (POST/PUT/PATCH/non-apply, and status writes with
/// subresource "status"): `old` is the stored object before (None on create), `new` the object
/// that will be stored; updates `new["metadata"]["managedFields"]`.
///
/// As the real server: managedFields sent in `new` are used when non-empty (and the write is
/// not to a subresource), otherwise `old`'s; an existing object without any managedFields is
/// not tracked; the fields that changed become the manager's (merged into its entry with the
/// same manager, apiVersion and subresource, whose time is then updated) and leave the other
/// managers' sets, fields removed leave every set.
pub fn update(old: Option<&Value>, new: &mut Value, mgr: &Manager, ty: &TypeNav) {
    let from_new = managed_fields_of(Some(new)).filter(|a| !a.is_empty() && mgr.subresource.is_none());
    let mut entries = match from_new {
        Some(a) => decode(a),
        None => decode(managed_fields_of(old).map(Vec::as_slice).unwrap_or(&[])),
    };
    if old.is_some() && entries.is_empty() {
        if let Some(md) = new.get_mut("metadata").and_then(Value::as_object_mut) {
            md.remove("managedFields");
        }
        return;
    }
    let mut old_c = old.map(without_managed_fields).unwrap_or_else(|| Value::Object(Map::new()));
    let mut new_c = without_managed_fields(new);
    fill_zero(&mut old_c, ty);
    fill_zero(&mut new_c, ty);
    let c = compare(&old_c, &new_c, ty);
    let changed = c.added.union(&c.modified);
    for e in entries.iter_mut() {
        e.set = e.set.difference(&changed).difference(&c.removed);
    }
    let own = changed.difference(&strip_set());
    if !own.is_empty() {
        let id = identity(mgr.name, Operation::Update, mgr.api_version, mgr.subresource);
        let scale = mgr.subresource == Some("scale");
        match entries.iter_mut().find(|e| e.identity() == id) {
            Some(e) => {
                e.set = e.set.union(&own);
                if !scale {
                    e.time = Some(mgr.time.to_string());
                }
            }
            None => entries.push(Entry {
                manager: mgr.name.to_string(),
                operation: Operation::Update,
                api_version: mgr.api_version.to_string(),
                // The scale subresource takes entry times from the parent object only.
                time: (!scale).then(|| mgr.time.to_string()),
                subresource: mgr.subresource.map(str::to_string),
                set: own,
            }),
        }
    }
    encode_into(new, entries);
}

/// Server-side apply: merge the applied configuration into `live` (None: create) following SSA
/// semantics (fields the manager applied before but not now are removed when no other manager
/// owns them; co-ownership of equal values; list-maps merged by key, atomic lists replaced;
/// conflicts unless force), returning the object to store with managedFields set, or the
/// conflicts.
pub fn apply(
    live: Option<&Value>,
    config: &Value,
    mgr: &Manager,
    force: bool,
    ty: &TypeNav,
) -> Result<Value, Vec<Conflict>> {
    let mut entries = decode(managed_fields_of(live).map(Vec::as_slice).unwrap_or(&[]));
    let live_c = live.map(without_managed_fields).unwrap_or_else(|| Value::Object(Map::new()));
    let config_c = without_managed_fields(config);
    let mut merged = merge(Some(&live_c), &config_c, ty);
    let applied = to_field_set(&config_c, ty);
    let id = identity(mgr.name, Operation::Apply, mgr.api_version, mgr.subresource);
    let previous = entries.iter().position(|e| e.identity() == id);
    let last = previous.map(|i| entries[i].set.clone()).unwrap_or_default();
    let previous_time = previous.and_then(|i| entries[i].time.clone());
    if let Some(i) = previous {
        entries.remove(i);
    }

    if !last.is_empty() {
        let mut managed = applied.clone();
        for e in &entries {
            managed = managed.union(&e.set);
        }
        let last_n = ensure_named_fields(&last, ty);
        let managed_n = ensure_named_fields(&managed, ty);
        prune(&mut merged, ty, &last_n, Some(&managed_n));
    }

    let c = compare(&live_c, &merged, ty);
    let changed = c.added.union(&c.modified);
    let mut others: Vec<(usize, FieldSet)> = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let conflict = e.set.intersection(&changed);
        if !conflict.is_empty() {
            others.push((i, conflict));
        }
    }
    if !force && !others.is_empty() {
        let mut out = Vec::new();
        others.sort_by(|a, b| entries[a.0].identity().cmp(&entries[b.0].identity()));
        for (i, set) in &others {
            let e = &entries[*i];
            for p in set.paths() {
                out.push(Conflict {
                    manager: e.manager.clone(),
                    operation: e.operation,
                    subresource: e.subresource.clone(),
                    api_version: e.api_version.clone(),
                    field: path_string(&p),
                });
            }
        }
        return Err(out);
    }
    for (i, set) in &others {
        entries[*i].set = entries[*i].set.difference(set);
    }
    for e in entries.iter_mut() {
        e.set = e.set.difference(&c.removed);
    }

    let noop = live_c == merged;
    let own = applied.difference(&strip_set());
    if !own.is_empty() {
        entries.push(Entry {
            manager: mgr.name.to_string(),
            operation: Operation::Apply,
            api_version: mgr.api_version.to_string(),
            time: if noop { previous_time } else { Some(mgr.time.to_string()) },
            subresource: mgr.subresource.map(str::to_string),
            set: own,
        });
    }
    encode_into(&mut merged, entries);
    Ok(merged)
}

fn print_manager(c: &Conflict) -> String {
    let mut s = serde_json::to_string(&c.manager).unwrap_or_default();
    if let Some(sub) = &c.subresource {
        s.push_str(&format!(" with subresource {}", serde_json::to_string(sub).unwrap_or_default()));
    }
    if c.operation == Operation::Update {
        s.push_str(&format!(" using {}", c.api_version));
    }
    s
}

/// The 409 Status message and causes for conflicts, as the real server words them.
pub fn conflict_status(conflicts: &[Conflict]) -> (String, Vec<Value>) {
    let causes = conflicts
        .iter()
        .map(|c| {
            json!({"reason": "FieldManagerConflict", "message": format!("conflict with {}", print_manager(c)), "field": c.field})
        })
        .collect();
    if conflicts.len() == 1 {
        let c = &conflicts[0];
        return (format!("Apply failed with 1 conflict: conflict with {}: {}", print_manager(c), c.field), causes);
    }
    // Group by manager identity, sorted by it.
    let mut groups: Vec<(String, &Conflict, Vec<&str>)> = Vec::new();
    for c in conflicts {
        let id = identity(&c.manager, c.operation, &c.api_version, c.subresource.as_deref());
        match groups.iter_mut().find(|g| g.0 == id) {
            Some(g) => g.2.push(&c.field),
            None => groups.push((id, c, vec![&c.field])),
        }
    }
    groups.sort_by(|a, b| a.0.cmp(&b.0).then(Ordering::Equal));
    let mut lines = Vec::new();
    for (_, c, fields) in &groups {
        lines.push(format!("conflicts with {}:", print_manager(c)));
        for f in fields {
            lines.push(format!("- {f}"));
        }
    }
    (format!("Apply failed with {} conflicts: {}", conflicts.len(), lines.join("\n")), causes)
}
