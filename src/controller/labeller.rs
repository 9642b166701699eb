//! Labels every Application with its shard (`sync.kuvryn.io/shard`), so the replica owning the
//! shard sees it through its label-selected watch. Singleton work: it runs on the elected leader.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use kube::api::{Api, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher::{self, watcher};
use kube::runtime::{WatchStreamExt, reflector};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::api::application::Application;
use crate::api::names;

/// The field manager of the shard label.
pub const MANAGER: &str = "kuvryn-sync-sharding";

struct Ctx {
    client: Client,
    shards: u32,
}

/// Label Applications until `shutdown`.
pub async fn run(client: Client, shards: u32, shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static) {
    let apps: Api<PartialObjectMeta<Application>> = Api::all(client.clone());
    // Names and labels are all it needs: the leader holds every Application of the cluster, so
    // it keeps their metadata only, without managedFields.
    let (store, writer) = reflector::store::<PartialObjectMeta<Application>>();
    let stream = watcher(apps, watcher::Config::default())
        .default_backoff()
        .modify(|a| a.metadata.managed_fields = None)
        .reflect(writer)
        .applied_objects();
    Controller::for_stream(stream, store)
        .trigger_backoff(super::EachWatchBacksOff)
        .graceful_shutdown_on(shutdown)
        .run(
            reconcile,
            |_, _: &kube::Error, _| Action::requeue(Duration::from_secs(5)),
            Arc::new(Ctx { client, shards }),
        )
        .for_each(|_| async {})
        .await;
}

async fn reconcile(app: Arc<PartialObjectMeta<Application>>, ctx: Arc<Ctx>) -> Result<Action, kube::Error> {
    let ns = app.namespace().unwrap_or_default();
    let name = app.name_any();
    let want = sharding::ring::shard_of(&sharding::ring::application_key(&ns, &name), ctx.shards.max(1)).to_string();
    if app.labels().get(names::labels::SHARD) == Some(&want) {
        return Ok(Action::await_change());
    }
    let api: Api<Application> = Api::namespaced(ctx.client.clone(), &ns);
    let patch = json!({"metadata": {"labels": {names::labels::SHARD: want}}});
    let params = PatchParams { field_manager: Some(MANAGER.to_string()), ..Default::default() };
    api.patch(&name, &params, &Patch::Merge(&patch)).await?;
    tracing::debug!(application = %name, namespace = %ns, shard = %want, "labelled with its shard");
    Ok(Action::await_change())
}
