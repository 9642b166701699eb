//! Reading Kuvryn Sync's objects as a user, with the user's credentials: the small API that
//! `ksync` (the `cli/` package) and the [dashboard](crate::dashboard) share.
//!
//! - [`connect`]: find the cluster as kubectl does, and turn API errors into what to tell the
//!   user ([`crate::command::Error`]).
//! - this module: get and list Applications, Revisions (which hold the plans) and Repositories,
//!   each as the API server sent it (printed by `-o json|yaml`, so fields this client does not
//!   know survive) and as its Rust type (read by the views).
//! - [`live`]: the managed resources of a plan, read live; [`healthchecks`]: the HealthChecks
//!   that judge them; [`graph`]: the resource graph and its diagnosis.
//!
//! Approving a plan and requesting a rollback are writes of annotations whose rules are in
//! [`crate::decisions`]; the commands that write them are `ksync`'s own.

pub mod connect;
pub mod graph;
pub mod healthchecks;
pub mod live;

use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::ApiResource;
use serde::de::DeserializeOwned;
use serde_json::Value;

use self::connect::{Cluster, Request};
use crate::command::{Error, Result};

/// An object, typed and raw.
#[derive(Clone, Debug)]
pub struct Object<K> {
    /// As the views read it.
    pub typed: K,
    /// As the API server sent it.
    pub raw: Value,
}

/// Our kinds: a namespaced resource with a static type.
pub trait Kind: kube::Resource<DynamicType = ()> + DeserializeOwned + Clone {}
impl<K: kube::Resource<DynamicType = ()> + DeserializeOwned + Clone> Kind for K {}

fn resource<K: Kind>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

/// Both halves of an object the API server sent (`raw`, JSON). List and watch items may come
/// without `apiVersion` and `kind`: they are filled in from `ar`.
pub fn decode<K: Kind>(mut raw: Value, ar: &ApiResource) -> Result<Object<K>> {
    if let Some(obj) = raw.as_object_mut() {
        obj.entry("apiVersion").or_insert_with(|| Value::String(ar.api_version.clone()));
        obj.entry("kind").or_insert_with(|| Value::String(ar.kind.clone()));
    }
    let name = raw["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let typed = serde_json::from_value(raw.clone())
        .map_err(|e| Error::Unavailable(format!("{} \"{name}\" could not be read: {e}", ar.kind)))?;
    Ok(Object { typed, raw })
}

/// [`decode`] of an object kube-rs decoded as a [`DynamicObject`].
pub fn decode_dynamic<K: Kind>(obj: DynamicObject, ar: &ApiResource) -> Result<Object<K>> {
    decode(serde_json::to_value(&obj).map_err(|e| Error::Output(e.to_string()))?, ar)
}

/// Read `name` in the cluster's namespace; None when it does not exist.
pub async fn get_opt<K: Kind>(cluster: &Cluster, name: &str) -> Result<Option<Object<K>>> {
    let ar = resource::<K>();
    let ns = cluster.namespace.as_str();
    let api: Api<DynamicObject> = Api::namespaced_with(cluster.client.clone(), ns, &ar);
    match api.get(name).await {
        Ok(obj) => decode_dynamic(obj, &ar).map(Some),
        Err(e) => match cluster.error(e, Request::Get { kind: &ar.kind, name, namespace: ns }) {
            Error::NotFound { .. } => Ok(None),
            e => Err(e),
        },
    }
}

/// Read `name` in the cluster's namespace; NotFound when it does not exist.
pub async fn get<K: Kind>(cluster: &Cluster, name: &str) -> Result<Object<K>> {
    get_opt(cluster, name).await?.ok_or_else(|| Error::NotFound {
        kind: resource::<K>().kind,
        name: name.to_string(),
        namespace: cluster.namespace.clone(),
    })
}

/// List in the cluster's namespace, or in all of them; sorted by namespace and name.
pub async fn list<K: Kind>(cluster: &Cluster, all_namespaces: bool, params: &ListParams) -> Result<Vec<Object<K>>> {
    let ar = resource::<K>();
    let api: Api<DynamicObject> = if all_namespaces {
        Api::all_with(cluster.client.clone(), &ar)
    } else {
        Api::namespaced_with(cluster.client.clone(), &cluster.namespace, &ar)
    };
    let what = format!("{} {}", ar.api_version, ar.plural);
    let list = api.list(params).await.map_err(|e| cluster.error(e, Request::List { what: &what }))?;
    let mut items = list.items.into_iter().map(|o| decode_dynamic(o, &ar)).collect::<Result<Vec<Object<K>>>>()?;
    items.sort_by_key(|o| (o.typed.namespace(), o.typed.name_any()));
    Ok(items)
}

/// The typed halves.
pub fn typed<K: Clone>(objects: &[Object<K>]) -> Vec<K> {
    objects.iter().map(|o| o.typed.clone()).collect()
}

/// The raw halves.
pub fn raw<K>(objects: &[Object<K>]) -> Vec<Value> {
    objects.iter().map(|o| o.raw.clone()).collect()
}
