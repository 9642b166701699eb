//! Watching Applications for the live Applications page: a kube-rs watcher (as the user) bumps
//! a counter on every change; each open page's event stream (`/events`) waits on it.
//!
//! Applications are watched in every namespace, or, when the user may not list them cluster-wide,
//! in the user's namespace. The watch ends when every receiver is gone (the manager-served
//! dashboard starts one per open event stream, as that stream's user), and when the API server
//! refuses the user's credentials (401: an expired or revoked token is not retried, and the
//! receiver sees the sender gone, which ends its event stream). Other watch errors are retried
//! with backoff; the pages still read the API server themselves on every request, so a failing
//! watch only stops the live redraws.

use futures_util::StreamExt;
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::ApiResource;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;

use crate::api::application::Application;
use crate::read::connect::Cluster;

/// Start watching; the receiver's value changes whenever an Application does.
pub async fn start(cluster: Cluster) -> watch::Receiver<u64> {
    let (tx, rx) = watch::channel(0u64);
    let ar = ApiResource::erase::<Application>(&());
    let all: Api<DynamicObject> = Api::all_with(cluster.client.clone(), &ar);
    let api = match all.list_metadata(&ListParams::default().limit(1)).await {
        Err(kube::Error::Api(s)) if s.code == 401 => return rx,
        Err(kube::Error::Api(s)) if s.code == 403 => {
            Api::namespaced_with(cluster.client.clone(), &cluster.namespace, &ar)
        }
        _ => all,
    };
    tokio::spawn(async move {
        let mut stream = watcher(api, watcher::Config::default()).default_backoff().boxed();
        loop {
            let event = tokio::select! {
                _ = tx.closed() => return,
                event = stream.next() => event,
            };
            let Some(event) = event else { return };
            match event {
                Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone) => {
                    tx.send_modify(|n| *n += 1);
                }
                Ok(_) => {}
                Err(e) if unauthorized(&e) => return,
                Err(e) => tracing::warn!(error = %e, "watching Applications; retrying"),
            }
        }
    });
    rx
}

/// Whether the API server refused the watch's credentials.
fn unauthorized(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code == 401,
        watcher::Error::WatchError(s) => s.code == 401,
        _ => false,
    }
}
