//! Helpers the statefulset and daemonset controllers share: owner references, label selectors,
//! Pod states, ControllerRevision hashes and history.

use serde_json::{Value, json};

use crate::client::{Client, path};
use crate::errors::ApiError;

/// `metadata.namespace`.
pub(crate) fn ns_of(obj: &Value) -> &str {
    obj["metadata"]["namespace"].as_str().unwrap_or_default()
}

/// `metadata.name`.
pub(crate) fn name_of(obj: &Value) -> &str {
    obj["metadata"]["name"].as_str().unwrap_or_default()
}

/// `metadata.uid`.
pub(crate) fn uid_of(obj: &Value) -> &str {
    obj["metadata"]["uid"].as_str().unwrap_or_default()
}

/// A list item with `kind` and `apiVersion` set (built-in list items carry neither).
pub(crate) fn with_kind(mut obj: Value, api_version: &str, kind: &str) -> Value {
    if let Some(m) = obj.as_object_mut() {
        m.insert("apiVersion".into(), json!(api_version));
        m.insert("kind".into(), json!(kind));
    }
    obj
}

/// Whether `obj` has a controller ownerReference to `uid`.
pub(crate) fn controlled_by(obj: &Value, uid: &str) -> bool {
    obj["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| refs.iter().any(|r| r["controller"] == json!(true) && r["uid"].as_str() == Some(uid)))
}

/// The controller ownerReference to `owner`.
pub(crate) fn controller_ref(owner: &Value, api_version: &str, kind: &str) -> Value {
    json!({
        "apiVersion": api_version, "kind": kind, "name": name_of(owner), "uid": uid_of(owner),
        "controller": true, "blockOwnerDeletion": true,
    })
}

use crate::kcm::replicaset::util::selector_matches;

/// Whether the Pod is being deleted.
pub(crate) fn is_terminating(pod: &Value) -> bool {
    pod["metadata"]["deletionTimestamp"].is_string()
}

/// `status.phase`.
pub(crate) fn phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or_default()
}

/// The Pod's `Ready` condition, if `True`.
fn ready_condition(pod: &Value) -> Option<&Value> {
    pod["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// `podutil.IsPodReady`.
pub(crate) fn is_ready(pod: &Value) -> bool {
    ready_condition(pod).is_some()
}

/// `podutil.IsPodAvailable`: Ready for at least `min_ready_seconds`.
pub(crate) fn is_available(pod: &Value, min_ready_seconds: i64) -> bool {
    let Some(c) = ready_condition(pod) else { return false };
    if min_ready_seconds <= 0 {
        return true;
    }
    let Some(t) = c["lastTransitionTime"].as_str().and_then(|t| t.parse::<jiff::Timestamp>().ok()) else {
        return false;
    };
    t.as_second() + min_ready_seconds <= jiff::Timestamp::now().as_second()
}

/// Running and Ready.
pub(crate) fn is_running_and_ready(pod: &Value) -> bool {
    phase(pod) == "Running" && is_ready(pod)
}

/// Succeeded or Failed.
pub(crate) fn is_finished(pod: &Value) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

/// 32-bit FNV-1a.
fn fnv32a(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in bytes {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// A hash of `value` and a collision count, spelled as Kubernetes spells controller hashes
/// (`rand.SafeEncodeString` of the decimal FNV-1a sum).
pub(crate) fn hash_of(value: &Value, collision_count: i64) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut bytes = serde_json::to_vec(value).unwrap_or_default();
    if collision_count > 0 {
        bytes.extend_from_slice(collision_count.to_string().as_bytes());
    }
    fnv32a(&bytes).to_string().bytes().map(|b| ALPHANUMS[b as usize % ALPHANUMS.len()] as char).collect()
}

/// The ControllerRevision `data` of a workload: its template with `$patch: replace`.
pub(crate) fn revision_data(owner: &Value) -> Value {
    let mut template = owner["spec"]["template"].clone();
    if let Some(m) = template.as_object_mut() {
        m.insert("$patch".into(), json!("replace"));
    }
    json!({"spec": {"template": template}})
}

/// The pod template a ControllerRevision holds.
pub(crate) fn revision_template(revision: &Value) -> Value {
    let mut t = revision["data"]["spec"]["template"].clone();
    if let Some(m) = t.as_object_mut() {
        m.remove("$patch");
    }
    t
}

/// `revision` of a ControllerRevision.
pub(crate) fn revision_number(cr: &Value) -> i64 {
    cr["revision"].as_i64().unwrap_or(0)
}

/// The ControllerRevisions controlled by `owner`, oldest revision first.
pub(crate) async fn owned_revisions(client: &Client, owner: &Value) -> Result<Vec<Value>, ApiError> {
    let all = client.list(&path("apps/v1", "controllerrevisions", ns_of(owner), "", ""), "").await?;
    let mut revs: Vec<Value> = all.into_iter().filter(|r| controlled_by(r, uid_of(owner))).collect();
    revs.sort_by(|a, b| revision_number(a).cmp(&revision_number(b)).then_with(|| name_of(a).cmp(name_of(b))));
    Ok(revs)
}

/// What the update revision of a workload should look like.
pub(crate) struct WantedRevision {
    /// ControllerRevision name.
    pub name: String,
    /// Its labels.
    pub labels: Value,
    /// Its data.
    pub data: Value,
}

/// The update revision: an existing revision with the same data (renumbered to be the newest
/// when it is not), else a new one. `revisions` are the owner's, oldest first; `wanted` is
/// called with the collision count to retry with when a name is taken by different data.
/// Returns the revision and the collision count used.
pub(crate) async fn ensure_revision(
    client: &Client,
    owner: &Value,
    owner_kind: &str,
    revisions: &[Value],
    mut collision_count: i64,
    wanted: impl Fn(i64) -> WantedRevision,
) -> Result<(Value, i64), ApiError> {
    let ns = ns_of(owner).to_string();
    let next = revisions.iter().map(revision_number).max().unwrap_or(0) + 1;
    let first = wanted(collision_count);
    if let Some(eq) = revisions.iter().rev().find(|r| r["data"] == first.data) {
        if revisions.last().is_some_and(|l| name_of(l) == name_of(eq)) {
            return Ok((eq.clone(), collision_count));
        }
        let mut cr = with_kind(eq.clone(), "apps/v1", "ControllerRevision");
        cr["revision"] = json!(next);
        let updated = client.update(&path("apps/v1", "controllerrevisions", &ns, name_of(eq), ""), &cr).await?;
        return Ok((updated, collision_count));
    }
    for _ in 0..10 {
        let w = wanted(collision_count);
        let cr = json!({
            "apiVersion": "apps/v1", "kind": "ControllerRevision",
            "metadata": {
                "name": w.name, "namespace": ns, "labels": w.labels,
                "ownerReferences": [controller_ref(owner, "apps/v1", owner_kind)],
            },
            "data": w.data,
            "revision": next,
        });
        match client.create(&path("apps/v1", "controllerrevisions", &ns, "", ""), &cr).await {
            Ok(created) => return Ok((created, collision_count)),
            Err(ApiError::Status { code: 409, .. }) => {
                let existing = client.get(&path("apps/v1", "controllerrevisions", &ns, &w.name, "")).await?;
                if existing["data"] == w.data && controlled_by(&existing, uid_of(owner)) {
                    return Ok((existing, collision_count));
                }
                collision_count += 1;
            }
            Err(e) => return Err(e),
        }
    }
    Err(ApiError::internal("too many ControllerRevision hash collisions"))
}

/// Delete the oldest revisions beyond `spec.revisionHistoryLimit` (default 10) that no live
/// Pod or status revision uses.
pub(crate) async fn truncate_history(client: &Client, owner: &Value, revisions: &[Value], live: &[String]) {
    let limit = owner["spec"]["revisionHistoryLimit"].as_i64().unwrap_or(10).max(0) as usize;
    let old: Vec<&Value> = revisions.iter().filter(|r| !live.iter().any(|l| l == name_of(r))).collect();
    if old.len() <= limit {
        return;
    }
    for r in &old[..old.len() - limit] {
        let _ = client.delete(&path("apps/v1", "controllerrevisions", ns_of(r), name_of(r), ""), None, None).await;
    }
}

/// The Pods controlled by `owner` that its selector still selects.
pub(crate) async fn owned_pods(client: &Client, owner: &Value) -> Result<Vec<Value>, ApiError> {
    let pods = client.list(&path("v1", "pods", ns_of(owner), "", ""), "").await?;
    let selector = &owner["spec"]["selector"];
    Ok(pods
        .into_iter()
        .filter(|p| controlled_by(p, uid_of(owner)) && selector_matches(selector, &p["metadata"]["labels"]))
        .collect())
}

/// A Pod body from a template: labels, annotations and finalizers of the template metadata,
/// `generateName: <owner>-`, the controller reference and the template spec.
pub(crate) fn pod_from_template(template: &Value, owner: &Value, owner_kind: &str) -> Value {
    let mut meta = serde_json::Map::new();
    meta.insert("generateName".into(), json!(format!("{}-", name_of(owner))));
    meta.insert("namespace".into(), json!(ns_of(owner)));
    for k in ["labels", "annotations", "finalizers"] {
        if let Some(v) = template["metadata"].get(k).filter(|v| !v.is_null()) {
            meta.insert(k.into(), v.clone());
        }
    }
    if !meta.contains_key("labels") {
        meta.insert("labels".into(), json!({}));
    }
    meta.insert("ownerReferences".into(), json!([controller_ref(owner, "apps/v1", owner_kind)]));
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"].clone()})
}
