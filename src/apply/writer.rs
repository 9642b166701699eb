//! The one way a reconcile writes: every request of a [`Writer`] carries the fence of the
//! Application's shard ([`crate::client::Fenced`]), checked by the client immediately before the
//! request is sent and bounding how long it may take. Reads go through [`Writer::client`]
//! unfenced: a read by a replica that lost its shard changes nothing.
//!
//! # Contract
//! - A request is never sent once the fence is closed, however long it waited for the request
//!   budget; the call returns a [`kube::Error`] for which [`crate::client::is_fence_error`] holds.
//! - A request sent while the fence is open is abandoned when the fence's deadline passes before
//!   the API server answers (same error).
//! - Without a fence (one replica owning every shard) requests are sent as they come.

use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::Request;
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::client::Fenced;

/// A client whose writes are fenced.
#[derive(Clone)]
pub struct Writer {
    client: Client,
    fence: Option<Fenced>,
}

impl Writer {
    /// Writes with `client`, fenced by `fence` when there is one.
    pub fn new(client: Client, fence: Option<Fenced>) -> Writer {
        Writer { client, fence }
    }

    /// The client, for reads.
    pub fn client(&self) -> &Client {
        &self.client
    }

    async fn send<T: DeserializeOwned>(
        &self,
        request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
    ) -> kube::Result<T> {
        let mut request = request.map_err(kube::Error::BuildRequest)?;
        if let Some(f) = &self.fence {
            request.extensions_mut().insert(f.clone());
        }
        self.client.request(request).await
    }

    /// Server-Side Apply of `obj` as `name` of `resource` (in `namespace` when namespaced).
    pub async fn apply(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        obj: &Value,
        params: &PatchParams,
    ) -> kube::Result<DynamicObject> {
        let url = DynamicObject::url_path(resource, namespace);
        self.send(Request::new(url).patch(name, params, &Patch::Apply(obj))).await
    }

    /// Delete `name` of `resource`; the API server's answer (the object, or a Status) is
    /// dropped.
    pub async fn delete_dynamic(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        params: &DeleteParams,
    ) -> kube::Result<()> {
        let url = DynamicObject::url_path(resource, namespace);
        self.send::<Value>(Request::new(url).delete(name, params)).await.map(drop)
    }

    /// Create `obj` as a new object of `resource` (in `namespace` when namespaced): a POST,
    /// refused by the API server when the name is taken.
    pub async fn create_dynamic(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        obj: &Value,
        params: &PostParams,
    ) -> kube::Result<Value> {
        let url = DynamicObject::url_path(resource, namespace);
        let body = serde_json::to_vec(obj).map_err(kube::Error::SerdeError)?;
        self.send(Request::new(url).create(params, body)).await
    }

    /// Patch `name` of kind `K`.
    pub async fn patch<K, P>(
        &self,
        namespace: Option<&str>,
        name: &str,
        params: &PatchParams,
        patch: &Patch<P>,
    ) -> kube::Result<K>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
        P: Serialize + std::fmt::Debug,
    {
        self.send(Request::new(K::url_path(&(), namespace)).patch(name, params, patch)).await
    }

    /// Patch the status of `name` of kind `K`.
    pub async fn patch_status<K, P>(
        &self,
        namespace: Option<&str>,
        name: &str,
        params: &PatchParams,
        patch: &Patch<P>,
    ) -> kube::Result<K>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
        P: Serialize + std::fmt::Debug,
    {
        self.send(Request::new(K::url_path(&(), namespace)).patch_subresource("status", name, params, patch)).await
    }

    /// Create `obj` of kind `K`.
    pub async fn create<K>(&self, namespace: Option<&str>, params: &PostParams, obj: &K) -> kube::Result<K>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned + Serialize,
    {
        let body = serde_json::to_vec(obj).map_err(kube::Error::SerdeError)?;
        self.send(Request::new(K::url_path(&(), namespace)).create(params, body)).await
    }

    /// Delete `name` of kind `K`.
    pub async fn delete<K>(&self, namespace: Option<&str>, name: &str, params: &DeleteParams) -> kube::Result<()>
    where
        K: Resource<DynamicType = ()>,
    {
        self.send::<Value>(Request::new(K::url_path(&(), namespace)).delete(name, params)).await.map(drop)
    }
}
