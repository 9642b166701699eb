//! The persistentvolume controller (see the module documentation of [`crate::kcm`]): the
//! PersistentVolume binder and the pvc-protection / pv-protection controllers, as
//! kube-controller-manager v1.36 runs them, without any provisioner.
//!
//! - Admission ([`admit_create`], called from the create strategy after the field manager ran,
//!   so never in managedFields): `kubernetes.io/pvc-protection` / `kubernetes.io/pv-protection`
//!   finalizers on new claims and volumes.
//! - Status strategy ([`prepare_status_update`]): a PersistentVolume's
//!   `lastPhaseTransitionTime` follows its phase.
//! - Volumes: unbound ones become `Available`; a volume whose bound claim is gone becomes
//!   `Released` (kept with its `claimRef` under `Retain`, deleted under `Delete`).
//! - Claims: an unbound claim is bound statically to the smallest Available volume that fits
//!   (class, access modes, volume mode, size, selector): the volume gets `claimRef` and the
//!   `pv.kubernetes.io/bound-by-controller` annotation, then phase `Bound`; the claim gets
//!   `volumeName` and the `bind-completed` / `bound-by-controller` annotations, then status
//!   `Bound` with the volume's access modes and capacity. Without a volume: a `FailedBinding`
//!   Event (again at most every 15 s, the claim resync period), or the class's provisioning
//!   Events. A bound claim whose volume disappeared is `Lost`.
//! - Protection: a deleted claim loses its finalizer once no scheduled, running Pod uses it; a
//!   deleted volume once it is not `Bound`.
//! - Default class: the DefaultStorageClass admission plugin ([`admit_default_class`]) gives a
//!   new claim without a class (no `storageClassName`, no beta annotation) the default
//!   StorageClass (annotation `storageclass.kubernetes.io/is-default-class: "true"`, the newest
//!   if several); the binder does the same for older claims once a default class exists
//!   (retroactive default class assignment).
//! - Dynamic provisioning: for a claim of a class with `volumeBindingMode: Immediate` and no
//!   fitting volume, the binder sets the `volume.kubernetes.io/storage-provisioner` (and beta)
//!   annotations to the class's provisioner and records `ExternalProvisioning`; an external
//!   provisioner (here [`crate::kcm::provisioner`], with `simcluster --storage-provisioner`)
//!   then creates a volume pre-bound to the claim, which the binder binds.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::client::{Client, path};

/// The Event source.
pub const COMPONENT: &str = "persistentvolume-controller";
/// The finalizer protecting claims in use.
pub const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";
/// The finalizer protecting bound volumes.
pub const PV_PROTECTION: &str = "kubernetes.io/pv-protection";

const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// How often an unchanged unbound claim is synced again (and its Event repeated).
const CLAIM_RESYNC: Duration = Duration::from_secs(15);

/// The StorageObjectInUseProtection admission plugin: the protection finalizer on a new claim
/// (`persistentvolumeclaims`) or volume (`persistentvolumes`) of the core group.
pub fn admit_create(group: &str, resource: &str, obj: &mut Value) {
    let finalizer = match (group, resource) {
        ("", "persistentvolumeclaims") => PVC_PROTECTION,
        ("", "persistentvolumes") => PV_PROTECTION,
        _ => return,
    };
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else { return };
    let list = meta.entry("finalizers").or_insert_with(|| json!([]));
    if list.is_null() {
        *list = json!([]);
    }
    if let Some(a) = list.as_array_mut()
        && !a.iter().any(|f| f.as_str() == Some(finalizer))
    {
        a.push(json!(finalizer));
    }
}

/// The default-class annotation of a StorageClass.
pub const ANN_DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";
const ANN_BETA_DEFAULT_CLASS: &str = "storageclass.beta.kubernetes.io/is-default-class";
const ANN_BETA_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
/// The claim annotation naming the provisioner expected to create its volume.
pub const ANN_STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
const ANN_BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";

/// The default StorageClass (`GetDefaultClass`): among classes annotated as default, the newest
/// (then the first by name).
pub fn default_class(classes: &[&Value]) -> Option<String> {
    let is_default = |c: &&&Value| {
        let a = &c["metadata"]["annotations"];
        a[ANN_DEFAULT_CLASS] == "true" || a[ANN_BETA_DEFAULT_CLASS] == "true"
    };
    let mut defaults: Vec<&&Value> = classes.iter().filter(is_default).collect();
    defaults.sort_by(|a, b| {
        let created = |c: &Value| c["metadata"]["creationTimestamp"].as_str().unwrap_or_default().to_string();
        created(b).cmp(&created(a)).then_with(|| name(a).cmp(name(b)))
    });
    defaults.first().map(|c| name(c).to_string())
}

/// Whether a claim names a class (an empty `storageClassName` counts: it asks for none).
fn claim_has_class(c: &Value) -> bool {
    c["spec"]["storageClassName"].is_string() || annotation(c, ANN_BETA_CLASS).is_some()
}

/// The DefaultStorageClass admission plugin, on claim creation.
pub fn admit_default_class(state: &crate::state::State, claim: &mut Value) {
    if claim_has_class(claim) {
        return;
    }
    let class = {
        let txn = state.store.lock();
        default_class(&txn.all("storage.k8s.io/storageclasses"))
    };
    if let Some(class) = class
        && let Some(spec) = claim.get_mut("spec").and_then(Value::as_object_mut)
    {
        spec.insert("storageClassName".into(), json!(class));
    }
}

/// The PersistentVolume status strategy: a phase change without a new
/// `lastPhaseTransitionTime` from the client stamps the current time; an unchanged phase keeps
/// the stored time when the client sent none.
pub fn prepare_status_update(group: &str, resource: &str, new: &mut Value, old: &Value) {
    if !(group.is_empty() && resource == "persistentvolumes" && new.is_object()) {
        return;
    }
    let old_phase = &old["status"]["phase"];
    let old_time = &old["status"]["lastPhaseTransitionTime"];
    let Some(status) = new.get_mut("status").and_then(Value::as_object_mut) else { return };
    let new_phase = status.get("phase").cloned().unwrap_or(Value::Null);
    let new_time = status.get("lastPhaseTransitionTime").cloned().unwrap_or(Value::Null);
    if new_phase == *old_phase {
        if new_time.is_null() && !old_time.is_null() {
            status.insert("lastPhaseTransitionTime".into(), old_time.clone());
        }
    } else if new_time.is_null() || new_time == *old_time {
        status.insert("lastPhaseTransitionTime".into(), json!(crate::api::now()));
    }
}

/// When each claim last got its "no volume" Event (by claim uid and reason).
fn last_events() -> &'static Mutex<HashMap<String, Instant>> {
    static LAST: OnceLock<Mutex<HashMap<String, Instant>>> = OnceLock::new();
    LAST.get_or_init(|| Mutex::new(HashMap::new()))
}

/// One reconcile pass over every object this controller owns.
pub async fn reconcile(client: Client) {
    let Ok(volumes) = client.list("/api/v1/persistentvolumes", "").await else { return };
    let Ok(claims) = client.list("/api/v1/persistentvolumeclaims", "").await else { return };
    let mut volumes: Vec<Value> = volumes.into_iter().map(|v| typed(v, "PersistentVolume")).collect();
    let claims: Vec<Value> = claims.into_iter().map(|c| typed(c, "PersistentVolumeClaim")).collect();

    // Forget Event times of claims that are gone.
    // (The map is process-wide and several servers may run in one process: keys are scoped.)
    let scope = std::sync::Arc::as_ptr(client.state()) as usize;
    if let Ok(mut last) = last_events().lock() {
        let prefix = format!("{scope}/");
        last.retain(|k, _| k.strip_prefix(&prefix).is_none_or(|rest| claims.iter().any(|c| rest.starts_with(uid(c)))));
    }

    protect_claims(&client, &claims).await;
    protect_volumes(&client, &volumes).await;

    for v in volumes.iter_mut() {
        if let Some(updated) = sync_volume(&client, v, &claims).await {
            *v = updated;
        }
    }
    for c in &claims {
        if is_deleting(c) && !has_finalizer(c, PVC_PROTECTION) {
            continue;
        }
        sync_claim(&client, c, &mut volumes).await;
    }
}

fn typed(mut obj: Value, kind: &str) -> Value {
    if let Some(m) = obj.as_object_mut() {
        m.insert("apiVersion".into(), json!("v1"));
        m.insert("kind".into(), json!(kind));
    }
    obj
}

fn name(obj: &Value) -> &str {
    obj["metadata"]["name"].as_str().unwrap_or_default()
}

fn namespace(obj: &Value) -> &str {
    obj["metadata"]["namespace"].as_str().unwrap_or_default()
}

fn uid(obj: &Value) -> &str {
    obj["metadata"]["uid"].as_str().unwrap_or_default()
}

fn is_deleting(obj: &Value) -> bool {
    obj["metadata"]["deletionTimestamp"].is_string()
}

fn has_finalizer(obj: &Value, f: &str) -> bool {
    obj["metadata"]["finalizers"].as_array().is_some_and(|a| a.iter().any(|x| x.as_str() == Some(f)))
}

fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj["metadata"]["annotations"][key].as_str()
}

fn set_annotation(obj: &mut Value, key: &str, value: &str) {
    if !obj["metadata"]["annotations"].is_object() {
        obj["metadata"]["annotations"] = json!({});
    }
    obj["metadata"]["annotations"][key] = json!(value);
}

fn volume_path(v: &Value, sub: &str) -> String {
    path("v1", "persistentvolumes", "", name(v), sub)
}

fn claim_path(c: &Value, sub: &str) -> String {
    path("v1", "persistentvolumeclaims", namespace(c), name(c), sub)
}

async fn put(client: &Client, p: &str, obj: &Value, kind: &str) -> Option<Value> {
    client.update(p, obj).await.ok().map(|o| typed(o, kind))
}

async fn remove_finalizer(client: &Client, obj: &Value, p: &str, f: &str) {
    let mut updated = obj.clone();
    if let Some(a) = updated["metadata"]["finalizers"].as_array_mut() {
        a.retain(|x| x.as_str() != Some(f));
    }
    let _ = client.update(p, &updated).await;
}

/// pvc-protection: the finalizer on every live claim; released from a deleted claim no
/// scheduled, unfinished Pod uses.
async fn protect_claims(client: &Client, claims: &[Value]) {
    let deleting: Vec<&Value> = claims.iter().filter(|c| is_deleting(c) && has_finalizer(c, PVC_PROTECTION)).collect();
    let pods = if deleting.is_empty() { vec![] } else { client.list("/api/v1/pods", "").await.unwrap_or_default() };
    for c in claims {
        if is_deleting(c) {
            if !has_finalizer(c, PVC_PROTECTION) {
                continue;
            }
            let used = pods.iter().any(|p| {
                namespace(p) == namespace(c)
                    && p["spec"]["nodeName"].as_str().is_some_and(|n| !n.is_empty())
                    && !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
                    && p["spec"]["volumes"].as_array().is_some_and(|vs| {
                        vs.iter().any(|v| {
                            v["persistentVolumeClaim"]["claimName"].as_str() == Some(name(c))
                                || (v["ephemeral"].is_object()
                                    && format!("{}-{}", name(p), v["name"].as_str().unwrap_or_default()) == name(c))
                        })
                    })
            });
            if !used {
                remove_finalizer(client, c, &claim_path(c, ""), PVC_PROTECTION).await;
            }
        } else if !has_finalizer(c, PVC_PROTECTION) {
            let mut updated = c.clone();
            let mut fs = updated["metadata"]["finalizers"].as_array().cloned().unwrap_or_default();
            fs.push(json!(PVC_PROTECTION));
            updated["metadata"]["finalizers"] = json!(fs);
            let _ = client.update(&claim_path(c, ""), &updated).await;
        }
    }
}

/// pv-protection: the finalizer on every live volume; released from a deleted volume that is
/// not Bound.
async fn protect_volumes(client: &Client, volumes: &[Value]) {
    for v in volumes {
        if is_deleting(v) {
            if has_finalizer(v, PV_PROTECTION) && v["status"]["phase"] != "Bound" {
                remove_finalizer(client, v, &volume_path(v, ""), PV_PROTECTION).await;
            }
        } else if !has_finalizer(v, PV_PROTECTION) {
            let mut updated = v.clone();
            let mut fs = updated["metadata"]["finalizers"].as_array().cloned().unwrap_or_default();
            fs.push(json!(PV_PROTECTION));
            updated["metadata"]["finalizers"] = json!(fs);
            let _ = client.update(&volume_path(v, ""), &updated).await;
        }
    }
}

/// Set a volume's phase through its status (the strategy stamps the transition time).
async fn set_volume_phase(client: &Client, v: &Value, phase: &str) -> Option<Value> {
    if v["status"]["phase"] == phase {
        return Some(v.clone());
    }
    let mut updated = v.clone();
    if !updated["status"].is_object() {
        updated["status"] = json!({});
    }
    updated["status"]["phase"] = json!(phase);
    put(client, &volume_path(v, "status"), &updated, "PersistentVolume").await
}

/// A claim's status phase (with the volume's access modes and capacity once Bound).
async fn set_claim_status(client: &Client, c: &Value, phase: &str, volume: Option<&Value>) -> Option<Value> {
    let mut status = c["status"].as_object().cloned().unwrap_or_default();
    status.insert("phase".into(), json!(phase));
    if let Some(v) = volume {
        for (k, from) in [("accessModes", &v["spec"]["accessModes"]), ("capacity", &v["spec"]["capacity"])] {
            if from.is_null() {
                status.remove(k);
            } else {
                status.insert(k.into(), from.clone());
            }
        }
    }
    let status = json!(status);
    if c["status"] == status {
        return Some(c.clone());
    }
    let mut updated = c.clone();
    updated["status"] = status;
    put(client, &claim_path(c, "status"), &updated, "PersistentVolumeClaim").await
}

fn claim_ref_matches(v: &Value, c: &Value) -> bool {
    let r = &v["spec"]["claimRef"];
    r["name"].as_str() == Some(name(c))
        && r["namespace"].as_str() == Some(namespace(c))
        && r["uid"].as_str().is_none_or(|u| u.is_empty() || u == uid(c))
}

/// The volume side: Available when unbound, Released when its claim is gone.
async fn sync_volume(client: &Client, v: &Value, claims: &[Value]) -> Option<Value> {
    if is_deleting(v) && !has_finalizer(v, PV_PROTECTION) {
        return None;
    }
    let r = &v["spec"]["claimRef"];
    if !r.is_object() {
        return set_volume_phase(client, v, "Available").await;
    }
    if r["uid"].as_str().is_none_or(str::is_empty) {
        // Pre-bound to a claim that does not exist yet.
        return set_volume_phase(client, v, "Available").await;
    }
    let claim = claims.iter().find(|c| {
        name(c) == r["name"].as_str().unwrap_or_default()
            && namespace(c) == r["namespace"].as_str().unwrap_or_default()
            && r["uid"].as_str() == Some(uid(c))
    });
    match claim {
        Some(c) => {
            let volume_name = c["spec"]["volumeName"].as_str().unwrap_or_default();
            if volume_name == name(v) {
                return set_volume_phase(client, v, "Bound").await;
            }
            if !volume_name.is_empty() && annotation(v, ANN_BOUND_BY_CONTROLLER).is_some() {
                // The claim went to another volume: undo the controller's half-binding.
                let mut updated = v.clone();
                if let Some(s) = updated["spec"].as_object_mut() {
                    s.remove("claimRef");
                }
                if let Some(a) = updated["metadata"]["annotations"].as_object_mut() {
                    a.remove(ANN_BOUND_BY_CONTROLLER);
                }
                let updated = put(client, &volume_path(v, ""), &updated, "PersistentVolume").await?;
                return set_volume_phase(client, &updated, "Available").await;
            }
            None
        }
        None => {
            if matches!(v["status"]["phase"].as_str(), Some("Released" | "Failed")) {
                return None;
            }
            let updated = set_volume_phase(client, v, "Released").await?;
            if updated["spec"]["persistentVolumeReclaimPolicy"] == "Delete" {
                let _ = client.delete(&volume_path(&updated, ""), None, None).await;
            }
            Some(updated)
        }
    }
}

/// Storage (as bytes) from a quantity string; `None` when unparsable.
fn quantity(v: &Value) -> Option<f64> {
    super::quantity::quantity(v.as_str()?)
}

fn claim_class(c: &Value) -> &str {
    c["spec"]["storageClassName"]
        .as_str()
        .or_else(|| annotation(c, "volume.beta.kubernetes.io/storage-class"))
        .unwrap_or_default()
}

fn volume_class(v: &Value) -> &str {
    v["spec"]["storageClassName"]
        .as_str()
        .or_else(|| annotation(v, "volume.beta.kubernetes.io/storage-class"))
        .unwrap_or_default()
}

/// Whether a volume satisfies the claim's class, modes, size and selector.
fn fits(v: &Value, c: &Value) -> bool {
    if volume_class(v) != claim_class(c) {
        return false;
    }
    let modes = |x: &Value| -> Vec<String> {
        x.as_array().map(|a| a.iter().filter_map(|m| m.as_str().map(String::from)).collect()).unwrap_or_default()
    };
    let have = modes(&v["spec"]["accessModes"]);
    if !modes(&c["spec"]["accessModes"]).iter().all(|m| have.contains(m)) {
        return false;
    }
    let mode = |x: &Value| x.as_str().unwrap_or("Filesystem").to_string();
    if mode(&v["spec"]["volumeMode"]) != mode(&c["spec"]["volumeMode"]) {
        return false;
    }
    let want = quantity(&c["spec"]["resources"]["requests"]["storage"]).unwrap_or(0.0);
    if quantity(&v["spec"]["capacity"]["storage"]).unwrap_or(0.0) < want {
        return false;
    }
    if let Some(sel) = c["spec"]["selector"].as_object() {
        let labels = crate::selectors::labels_of(v);
        if let Some(ml) = sel.get("matchLabels").and_then(Value::as_object)
            && !ml.iter().all(|(k, val)| val.as_str() == labels.get(k).map(String::as_str))
        {
            return false;
        }
        for e in sel.get("matchExpressions").and_then(Value::as_array).into_iter().flatten() {
            let key = e["key"].as_str().unwrap_or_default();
            let values = modes(&e["values"]);
            let ok = match e["operator"].as_str().unwrap_or_default() {
                "In" => labels.get(key).is_some_and(|l| values.contains(l)),
                "NotIn" => labels.get(key).is_none_or(|l| !values.contains(l)),
                "Exists" => labels.contains_key(key),
                "DoesNotExist" => !labels.contains_key(key),
                _ => false,
            };
            if !ok {
                return false;
            }
        }
    }
    true
}

/// The volume to bind: the one pre-bound to the claim, else the smallest Available fit.
fn find_volume<'a>(c: &Value, volumes: &'a [Value]) -> Option<&'a Value> {
    let live = volumes.iter().filter(|v| !is_deleting(v));
    if let Some(v) = live.clone().find(|v| claim_ref_matches(v, c)) {
        return Some(v);
    }
    live.filter(|v| v["status"]["phase"] == "Available" && !v["spec"]["claimRef"].is_object() && fits(v, c)).min_by(
        |a, b| {
            let q = |v: &Value| quantity(&v["spec"]["capacity"]["storage"]).unwrap_or(0.0);
            q(a).total_cmp(&q(b))
        },
    )
}

/// An Event about an unbindable claim, at most once per claim resync period.
async fn throttled_event(client: &Client, c: &Value, type_: &str, reason: &str, message: &str) {
    let key = format!("{}/{}/{reason}", std::sync::Arc::as_ptr(client.state()) as usize, uid(c));
    {
        let Ok(mut last) = last_events().lock() else { return };
        if last.get(&key).is_some_and(|t| t.elapsed() < CLAIM_RESYNC) {
            return;
        }
        last.insert(key, Instant::now());
    }
    client.event(c, type_, reason, message, COMPONENT).await;
}

/// Bind `v` to `c`: the volume's claimRef (and phase Bound), then the claim's volumeName,
/// annotations and status.
async fn bind(client: &Client, c: &Value, v: &Value) -> Option<Value> {
    let mut v = v.clone();
    let r = &v["spec"]["claimRef"];
    let bound = r["uid"].as_str() == Some(uid(c)) && r["name"].as_str() == Some(name(c));
    if !bound {
        let mut updated = v.clone();
        if !r.is_object() {
            set_annotation(&mut updated, ANN_BOUND_BY_CONTROLLER, "yes");
        }
        updated["spec"]["claimRef"] = json!({
            "kind": "PersistentVolumeClaim", "namespace": namespace(c), "name": name(c), "uid": uid(c),
            "apiVersion": "v1", "resourceVersion": c["metadata"]["resourceVersion"],
        });
        v = put(client, &volume_path(&v, ""), &updated, "PersistentVolume").await?;
    }
    let v = set_volume_phase(client, &v, "Bound").await?;
    let mut c = c.clone();
    let by_controller = c["spec"]["volumeName"].as_str().is_none_or(str::is_empty);
    if c["spec"]["volumeName"].as_str() != Some(name(&v)) || annotation(&c, ANN_BIND_COMPLETED).is_none() {
        let mut updated = c.clone();
        updated["spec"]["volumeName"] = json!(name(&v));
        set_annotation(&mut updated, ANN_BIND_COMPLETED, "yes");
        if by_controller {
            set_annotation(&mut updated, ANN_BOUND_BY_CONTROLLER, "yes");
        }
        c = put(client, &claim_path(&c, ""), &updated, "PersistentVolumeClaim").await?;
    }
    set_claim_status(client, &c, "Bound", Some(&v)).await?;
    Some(v)
}

/// The claim side of the binder.
async fn sync_claim(client: &Client, c: &Value, volumes: &mut [Value]) {
    let volume_name = c["spec"]["volumeName"].as_str().unwrap_or_default().to_string();
    if volume_name.is_empty() && !claim_has_class(c) {
        // Retroactive default class assignment.
        let class = {
            let txn = client.state().store.lock();
            default_class(&txn.all("storage.k8s.io/storageclasses"))
        };
        if let Some(class) = class {
            let mut updated = c.clone();
            updated["spec"]["storageClassName"] = json!(class);
            let _ = client.update(&claim_path(c, ""), &updated).await;
            return;
        }
    }
    if annotation(c, ANN_BIND_COMPLETED).is_none() {
        // Unbound (or pre-bound by the user to a volume).
        let found = if volume_name.is_empty() {
            find_volume(c, volumes).map(|v| name(v).to_string())
        } else {
            volumes
                .iter()
                .find(|v| name(v) == volume_name && (!v["spec"]["claimRef"].is_object() || claim_ref_matches(v, c)))
                .map(|v| name(v).to_string())
        };
        let Some(found) = found else {
            if !volume_name.is_empty() {
                // The volume named by the claim is missing or bound elsewhere: wait.
                let _ = set_claim_status(client, c, "Pending", None).await;
                return;
            }
            no_volume(client, c).await;
            return;
        };
        if let Some(i) = volumes.iter().position(|v| name(v) == found)
            && let Some(updated) = bind(client, c, &volumes[i]).await
        {
            volumes[i] = updated;
        }
        return;
    }
    // Bound claim: its volume must still be there and point back.
    let Some(i) = volumes.iter().position(|v| name(v) == volume_name) else {
        if c["status"]["phase"] != "Lost" {
            let _ = set_claim_status(client, c, "Lost", None).await;
            client
                .event(
                    c,
                    "Warning",
                    "ClaimLost",
                    "Bound claim has lost its PersistentVolume. Data on the volume is lost!",
                    COMPONENT,
                )
                .await;
        }
        return;
    };
    let v = &volumes[i];
    if !v["spec"]["claimRef"].is_object() || claim_ref_matches(v, c) {
        if let Some(updated) = bind(client, c, v).await {
            volumes[i] = updated;
        }
    } else if c["status"]["phase"] != "Lost" {
        let _ = set_claim_status(client, c, "Lost", None).await;
        client
            .event(
                c,
                "Warning",
                "ClaimMisbound",
                "Two claims are bound to the same volume, this one is bound incorrectly",
                COMPONENT,
            )
            .await;
    }
}

/// No volume fits: the claim stays Pending, with the Event of its class.
async fn no_volume(client: &Client, c: &Value) {
    let Some(c) = set_claim_status(client, c, "Pending", None).await else { return };
    let class = claim_class(&c).to_string();
    if class.is_empty() {
        throttled_event(
            client,
            &c,
            "Normal",
            "FailedBinding",
            "no persistent volumes available for this claim and no storage class is set",
        )
        .await;
        return;
    }
    match client.get(&path("storage.k8s.io/v1", "storageclasses", "", &class, "")).await {
        Err(_) => {
            let msg = format!("storageclass.storage.k8s.io \"{class}\" not found");
            throttled_event(client, &c, "Warning", "ProvisioningFailed", &msg).await;
        }
        Ok(sc) if sc["volumeBindingMode"] == "WaitForFirstConsumer" => {
            let msg = "waiting for first consumer to be created before binding";
            throttled_event(client, &c, "Normal", "WaitForFirstConsumer", msg).await;
        }
        Ok(sc) => {
            let provisioner = sc["provisioner"].as_str().unwrap_or_default();
            // setClaimProvisioner: the annotations external provisioners look for.
            let c = if annotation(&c, ANN_STORAGE_PROVISIONER) == Some(provisioner) {
                c
            } else {
                let mut updated = c.clone();
                set_annotation(&mut updated, ANN_BETA_STORAGE_PROVISIONER, provisioner);
                set_annotation(&mut updated, ANN_STORAGE_PROVISIONER, provisioner);
                let Some(c) = put(client, &claim_path(&c, ""), &updated, "PersistentVolumeClaim").await else { return };
                c
            };
            let msg = format!(
                "Waiting for a volume to be created either by the external provisioner '{provisioner}' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered."
            );
            throttled_event(client, &c, "Normal", "ExternalProvisioning", &msg).await;
        }
    }
}
