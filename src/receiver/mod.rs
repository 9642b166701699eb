//! Git push receivers (`docs/receivers.md`): an HTTP endpoint every replica serves when
//! `--receiver-bind-address` is set. A Git host posts a push to a Repository's
//! `status.receiver.path`; the receiver verifies it with the token of each Repository having
//! that path (its own Secret, of its own namespace), and asks the Repositories whose URL and
//! ref the push names to fetch now, by writing their `reconcile-requested-at` annotation: the
//! leader's Repository controller fetches, whichever replica got the push.
//!
//! # Guarantees
//! - A request costs no Secret read and no signature work unless its path is some
//!   Repository's and the global and per-path buckets have room; no fetch unless a token
//!   verifies it and its delivery id is new.
//! - A token triggers only the Repositories whose own Secret holds it: tenants cannot trigger
//!   each other's Repositories, and no Secret of another namespace is read.
//! - Tokens never reach responses, logs, status or Events.
//!
//! Pure parts: [`path`], [`verify`], [`push`], [`matching`], [`outcome`]; I/O: [`server`].

pub mod limits;
pub mod matching;
pub mod outcome;
pub mod path;
pub mod push;
pub mod server;
pub mod verify;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use futures_util::StreamExt;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client};

use crate::api::repository::Repository;

/// Bind `address` and serve the receiver there until `stop`, in a task. Errors only when the
/// address cannot be bound.
pub async fn start(
    client: Client,
    address: SocketAddr,
    settings: limits::Settings,
    stop: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(address).await?;
    let bound = listener.local_addr()?;
    let (store, writer) = reflector::store();
    let watch = watcher(Api::<Repository>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .modify(|r| r.metadata.managed_fields = None)
        .reflect(writer)
        .for_each(|_| std::future::ready(()));
    let shared = Arc::new(server::Shared::new(store, client, limits::Limits::new(&settings)));
    let router = axum::Router::new().fallback(server::handle).with_state(shared);
    tokio::spawn(async move {
        let serve = axum::serve(listener, router).with_graceful_shutdown(stop);
        tokio::select! {
            r = serve => if let Err(e) = r { tracing::error!(error = %e, "the receiver stopped") },
            () = watch => {}
        }
    });
    Ok(bound)
}
