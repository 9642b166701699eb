//! Labels every Application with its shard (`sync.kuvryn.io/shard`), so the replica owning the
//! shard sees it through its label-selected watch.
//!
//! - The leader (singleton work) watches only the Applications whose label names no shard of this
//!   count ([`unassigned`]: no label yet, a larger count's, or not a shard at all), and labels
//!   them. It neither lists nor keeps the whole fleet: a new leader that did, at 10,000
//!   Applications, loaded the API server for 20 s just as the survivors of a SIGKILL were taking
//!   over the dead replica's shards.
//! - A label naming another valid shard (a tenant's edit, or a smaller count's) puts the
//!   Application in that shard's watch, whose owner corrects it before anything else
//!   ([`crate::controller::application`], `reconcile_tracked`), its write fenced by that shard.
//!
//! Both write through [`relabel`].

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
use crate::apply::Writer;

/// The field manager of the shard label.
pub const MANAGER: &str = "kuvryn-sync-sharding";

struct Ctx {
    client: Client,
    shards: u32,
}

/// The label selector of the Applications whose shard label names no shard of `shards`: without
/// one, or with any other value (`notin` selects Applications without the label too).
pub fn unassigned(shards: u32) -> String {
    let all: Vec<String> = (0..shards.max(1)).map(|k| k.to_string()).collect();
    format!("{} notin ({})", names::labels::SHARD, all.join(","))
}

/// The shard of Application `ns/name` among `shards`.
pub fn shard_of(ns: &str, name: &str, shards: u32) -> u32 {
    sharding::ring::shard_of(&sharding::ring::application_key(ns, name), shards.max(1))
}

/// Give Application `ns/name` the label of shard `shard`, through `writer` (and its fence).
pub async fn relabel(writer: &Writer, ns: &str, name: &str, shard: u32) -> kube::Result<()> {
    let patch = json!({"metadata": {"labels": {names::labels::SHARD: shard.to_string()}}});
    let params = PatchParams { field_manager: Some(MANAGER.to_string()), ..Default::default() };
    writer.patch::<Application, _>(Some(ns), name, &params, &Patch::Merge(&patch)).await?;
    tracing::debug!(application = %name, namespace = %ns, shard, "labelled with its shard");
    Ok(())
}

/// Label Applications until `shutdown`.
pub async fn run(client: Client, shards: u32, shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static) {
    let apps: Api<PartialObjectMeta<Application>> = Api::all(client.clone());
    // Names and labels are all it needs, of the Applications it has to label only.
    let (store, writer) = reflector::store::<PartialObjectMeta<Application>>();
    let stream = watcher(apps, watcher::Config::default().labels(&unassigned(shards)))
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
    let want = shard_of(&ns, &name, ctx.shards);
    if app.labels().get(names::labels::SHARD) == Some(&want.to_string()) {
        return Ok(Action::await_change());
    }
    // The client is fenced by the leader Lease already.
    relabel(&Writer::new(ctx.client.clone(), None), &ns, &name, want).await?;
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_leader_selects_the_applications_without_a_shard_of_the_count() {
        assert_eq!(unassigned(1), "sync.kuvryn.io/shard notin (0)");
        assert_eq!(unassigned(4), "sync.kuvryn.io/shard notin (0,1,2,3)");
        assert_eq!(unassigned(0), unassigned(1), "no count is one shard");
        // The largest count `--shards` takes: a 20 KB query, within the API server's limits.
        assert!(unassigned(4096).len() < 20_000);
    }
}
