//! Writing a plan to the cluster, as the Application's service account: Server-Side Apply of the
//! objects to create or update, in plan order, and deletes of the objects to prune, in reverse
//! apply order.
//!
//! - One field manager for objects ([`names::FIELD_MANAGER`]); conflicts are forced only under
//!   conflict policy `adopt` (the plan lists what was taken and from whom).
//! - CustomResourceDefinitions are applied first and waited for until `Established`; kinds
//!   they define are resolved again through discovery before their objects are applied. A kind
//!   the snapshot does not have (defined by a CRD an earlier wave applied) is looked up in a
//!   fresh discovery before the apply gives up on it.
//! - The first refusal stops the apply and is returned with the API server's own message; the
//!   controller never retries a write with its own permissions.
//! - Every write goes through a [`Writer`]: it is sent only while the shard's fence is open.
//! - A prune deletes only the object it listed: the delete carries its `uid` and
//!   `resourceVersion` as preconditions. When the object changed since the list, it is read
//!   again and deleted only if it is the same object (same `uid`) and still the Application's to
//!   prune ([`crate::plan::inventory::prunable_by`]); an object re-created under the same name,
//!   taken by another Application or opted out of pruning meanwhile is left alone.

mod writer;

pub use writer::Writer;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, DeleteParams, PatchParams, Preconditions, PropagationPolicy};
use serde_json::Value;

use crate::api::names;
use crate::plan::{Action, Plan, validate};
use crate::watch::discovery::ClusterScopes;

/// How long applied CustomResourceDefinitions may take to become Established.
pub const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a write failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server refused a write (forbidden, invalid, conflict): its message, naming the
    /// object.
    #[error("{0}")]
    Refused(String),
    /// Another field manager owns a field the apply would set (conflict policy `fail`).
    #[error("{0}")]
    Conflict(String),
    /// The kind of an object is not served (its CRD did not become Established).
    #[error("{0}")]
    Unserved(String),
    /// An object applied as presumed absent exists: the API server refused the create-only
    /// precondition ([`crate::decisions::absent`]). Nothing of it was written.
    #[error("{0}")]
    Exists(String),
    /// Any other API failure (retried).
    #[error("{0}")]
    Api(#[from] kube::Error),
}

/// What a write did.
#[derive(Debug, Default)]
pub struct Applied {
    /// The objects as the API server returned them after the apply, by identity.
    pub objects: BTreeMap<String, Value>,
    /// Identities of the objects deleted.
    pub deleted: Vec<String>,
}

fn what(obj: &Value) -> String {
    crate::api::display::object_of(obj)
}

/// The resource serving `obj` and its namespace (`None` for cluster-scoped objects).
fn resource_of<'a>(scopes: &ClusterScopes, obj: &'a Value) -> Option<(ApiResource, Option<&'a str>)> {
    let av = obj["apiVersion"].as_str()?;
    let version = av.rsplit('/').next()?;
    let resource = scopes.resource(validate::group_of(av), version, obj["kind"].as_str()?)?;
    let ns = obj["metadata"]["namespace"].as_str().filter(|ns| !ns.is_empty());
    Some((resource.clone(), ns))
}

/// How [`apply`] writes: whether it takes conflicting fields, and which objects it creates only.
#[derive(Debug, Clone, Copy)]
pub struct Mode<'a> {
    /// Take the fields another manager owns (conflict policy `adopt`).
    pub force: bool,
    /// Identities of the objects presumed absent ([`crate::decisions::absent`]): each is applied
    /// with the create-only precondition, and a refusal of it is [`Error::Exists`].
    pub create_only: &'a BTreeSet<String>,
}

/// `obj` with the create-only precondition: no stored object has this `resourceVersion`.
fn create_only(obj: &Value) -> Value {
    let mut obj = obj.clone();
    obj["metadata"]["resourceVersion"] = Value::from(crate::decisions::absent::PRECONDITION);
    obj
}

/// The error of a refused `action` on `obj`; `presumed` when it was applied create-only.
fn refused(action: &str, obj: &Value, presumed: bool, e: kube::Error) -> Error {
    match e {
        // It exists (refused for the precondition, or for a field another manager owns): read
        // and planned as it is, by the next plan.
        kube::Error::Api(s) if s.code == 409 && presumed => {
            Error::Exists(format!("{action} {}: {}", what(obj), s.message))
        }
        kube::Error::Api(s) if s.code == 409 => Error::Conflict(format!("{action} {}: {}", what(obj), s.message)),
        kube::Error::Api(s) if (400..500).contains(&s.code) && s.code != 429 => {
            Error::Refused(format!("{action} {}: {}", what(obj), s.message))
        }
        e => Error::Api(e),
    }
}

fn is_crd(obj: &Value) -> bool {
    obj["kind"] == "CustomResourceDefinition"
        && obj["apiVersion"].as_str().is_some_and(|av| av.starts_with("apiextensions.k8s.io/"))
}

/// Wait until the CRD `name` is Established, with `client` (the controller's own identity:
/// reading a CRD's status is not a write).
async fn established(client: &Client, name: &str, deadline: Instant) -> Result<(), Error> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    loop {
        let crd = crds.get_opt(name).await?;
        let ok = crd
            .and_then(|c| c.status)
            .and_then(|s| s.conditions)
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Established" && c.status == "True"));
        if ok {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Error::Unserved(format!(
                "CustomResourceDefinition {name} did not become Established within {ESTABLISH_TIMEOUT:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Apply the Create and Update entries of `plan` (objects from `desired`, by identity) with
/// `sa`, in plan order, as `mode` says. `observer` reads CRD status; `rediscover` refreshes
/// discovery after CRDs are Established.
pub async fn apply<F, Fut>(
    sa: &Writer,
    observer: &Client,
    scopes: &ClusterScopes,
    rediscover: F,
    plan: &Plan,
    desired: &[Value],
    mode: Mode<'_>,
) -> Result<Applied, Error>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<std::sync::Arc<ClusterScopes>, kube::Error>>,
{
    let by_id: BTreeMap<String, &Value> = desired.iter().map(|o| (validate::identity(o), o)).collect();
    let mut params = PatchParams::apply(names::FIELD_MANAGER);
    if mode.force {
        params = params.force();
    }
    let mut out = Applied::default();
    let mut current: Option<std::sync::Arc<ClusterScopes>> = None;
    let mut crds_pending: Vec<String> = Vec::new();
    for e in plan.entries.iter().filter(|e| matches!(e.action, Action::Create | Action::Update)) {
        let id = e.identity();
        let Some(obj) = by_id.get(&id).copied() else { continue };
        if !is_crd(obj) && !crds_pending.is_empty() {
            // Objects after the CRDs may be of kinds they define.
            let deadline = Instant::now() + ESTABLISH_TIMEOUT;
            for name in std::mem::take(&mut crds_pending) {
                established(observer, &name, deadline).await?;
            }
            current = Some(rediscover().await?);
        }
        let mut found = resource_of(current.as_deref().unwrap_or(scopes), obj);
        if found.is_none() && current.is_none() {
            // A kind defined by a CRD an earlier wave applied, after the snapshot was taken.
            current = Some(rediscover().await?);
            found = resource_of(current.as_deref().unwrap_or(scopes), obj);
        }
        let Some((resource, ns)) = found else {
            return Err(Error::Unserved(format!(
                "{}: the cluster does not serve {} {}",
                what(obj),
                obj["apiVersion"].as_str().unwrap_or_default(),
                e.kind
            )));
        };
        let presumed = mode.create_only.contains(&id);
        let sent = if presumed { std::borrow::Cow::Owned(create_only(obj)) } else { std::borrow::Cow::Borrowed(obj) };
        let applied = sa
            .apply(&resource, ns, &e.name, &sent, &params)
            .await
            .map_err(|err| refused("applying", obj, presumed, err))?;
        if is_crd(obj) {
            crds_pending.push(e.name.clone());
        }
        out.objects.insert(id, serde_json::to_value(applied).unwrap_or_default());
    }
    let deadline = Instant::now() + ESTABLISH_TIMEOUT;
    for name in crds_pending {
        established(observer, &name, deadline).await?;
    }
    Ok(out)
}

/// How many times a prune reads an object again after it changed since the list.
const PRUNE_REREADS: usize = 3;

/// What a prune did with one object.
#[derive(Debug, PartialEq, Eq)]
enum Pruned {
    /// Deleted, or already gone.
    Deleted,
    /// Left alone: `why`.
    Kept(String),
}

/// Delete the Delete entries of `plan` (in plan order: reverse apply order) with `sa`. `listed`
/// holds the objects as listed (by identity): the `uid` and `resourceVersion` each delete is
/// conditional on. `prunable` says whether an object read again is still the Application's to
/// prune. Objects already gone are fine; objects left alone are returned with why.
pub async fn prune(
    sa: &Writer,
    scopes: &ClusterScopes,
    plan: &Plan,
    listed: &BTreeMap<String, Value>,
    prunable: &(dyn Fn(&Value) -> bool + Sync),
    out: &mut Applied,
) -> Result<Vec<String>, Error> {
    let mut kept = Vec::new();
    for e in plan.entries.iter().filter(|e| e.action == Action::Delete) {
        let api_version = if e.group.is_empty() { e.version.clone() } else { format!("{}/{}", e.group, e.version) };
        let id = e.identity();
        let obj = serde_json::json!({"apiVersion": api_version, "kind": e.kind,
            "metadata": {"name": e.name, "namespace": e.namespace}});
        let Some((resource, ns)) = resource_of(scopes, &obj) else { continue };
        let Some(seen) = listed.get(&id) else {
            // Never delete what was not listed: its uid is the precondition.
            kept.push(format!("{}: not in the list the plan was made from", what(&obj)));
            continue;
        };
        match prune_one(sa, &resource, ns, &e.name, seen, prunable)
            .await
            .map_err(|err| refused("deleting", &obj, false, err))?
        {
            Pruned::Deleted => out.deleted.push(id),
            Pruned::Kept(why) => kept.push(format!("{}: {why}", what(&obj))),
        }
    }
    Ok(kept)
}

/// Delete one listed object, conditional on its `uid` and `resourceVersion`; read it again when it
/// changed since.
async fn prune_one(
    sa: &Writer,
    resource: &ApiResource,
    ns: Option<&str>,
    name: &str,
    listed: &Value,
    prunable: &(dyn Fn(&Value) -> bool + Sync),
) -> Result<Pruned, kube::Error> {
    let uid = listed["metadata"]["uid"].as_str().map(str::to_string);
    let mut rv = listed["metadata"]["resourceVersion"].as_str().map(str::to_string);
    if uid.is_none() {
        return Ok(Pruned::Kept("listed without a uid".into()));
    }
    for _ in 0..PRUNE_REREADS {
        let params = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            preconditions: Some(Preconditions { uid: uid.clone(), resource_version: rv.clone() }),
            ..Default::default()
        };
        match sa.delete_dynamic(resource, ns, name, &params).await {
            Ok(()) => return Ok(Pruned::Deleted),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Pruned::Deleted),
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e),
        }
        // Changed since the list (a precondition failed): is it still the same object, and ours?
        let api: Api<kube::api::DynamicObject> = match ns {
            Some(ns) => Api::namespaced_with(sa.client().clone(), ns, resource),
            None => Api::all_with(sa.client().clone(), resource),
        };
        let Some(now) = api.get_opt(name).await? else { return Ok(Pruned::Deleted) };
        let now = serde_json::to_value(now).unwrap_or_default();
        if now["metadata"]["uid"].as_str() != uid.as_deref() {
            return Ok(Pruned::Kept("re-created since it was listed (another uid)".into()));
        }
        if !prunable(&now) {
            return Ok(Pruned::Kept("no longer this Application's to prune".into()));
        }
        rv = now["metadata"]["resourceVersion"].as_str().map(str::to_string);
    }
    Ok(Pruned::Kept(format!("changed {PRUNE_REREADS} times while being pruned; tried again at the next rollout")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_refused_create_only_apply_says_the_object_exists_and_nothing_else_does() {
        let status = |code: u16, causes: Value| {
            let s: kube::core::Status = serde_json::from_value(json!({
                "status": "Failure", "message": "refused", "reason": "Conflict", "code": code,
                "details": {"name": "a", "kind": "configmaps", "causes": causes},
            }))
            .unwrap();
            kube::Error::Api(s.boxed())
        };
        let field = || json!([{"reason": "FieldManagerConflict", "message": "conflict with \"kubectl\"", "field": ".data.color"}]);
        let none = || json!([]);
        let cm = |rv: Option<&str>| {
            let mut o = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "n"}});
            if let Some(rv) = rv {
                o["metadata"]["resourceVersion"] = json!(rv);
            }
            o
        };
        let git_precondition = cm(Some(crate::decisions::absent::PRECONDITION));
        // (case, object, presumed, error) → the kind of answer
        let cases = [
            ("presumed, refused for the precondition", &cm(None), true, status(409, none()), "exists"),
            ("presumed, refused for a field another manager owns", &cm(None), true, status(409, field()), "exists"),
            ("read before, a field conflict", &cm(None), false, status(409, field()), "conflict"),
            ("read before, at another resourceVersion", &cm(Some("42")), false, status(409, none()), "conflict"),
            ("read before, Git's own resourceVersion \"1\"", &git_precondition, false, status(409, none()), "conflict"),
            ("presumed, invalid", &cm(None), true, status(422, none()), "refused"),
            ("presumed, the server failed", &cm(None), true, status(500, none()), "api"),
        ];
        for (case, obj, presumed, e, want) in cases {
            let got = match refused("applying", obj, presumed, e) {
                Error::Exists(_) => "exists",
                Error::Conflict(_) => "conflict",
                Error::Refused(_) => "refused",
                Error::Unserved(_) => "unserved",
                Error::Api(_) => "api",
            };
            assert_eq!(got, want, "{case}");
        }
    }
}
