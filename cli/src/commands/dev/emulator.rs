//! The API server `ksync dev` runs in its own process, behind an interface.
//!
//! The emulator (simcluster) is test and quickstart machinery: this library does not depend on
//! it, so the manager binary `ksync-controller` never links it. The `ksync` binary (the `ksync`
//! package in `cli/`) implements [`Emulator`] with simcluster and hands it to
//! [`crate::commands::main_with`].

use std::future::Future;
use std::pin::Pin;

/// A running API server, stopped by [`Server::stop`] or when dropped.
pub trait Server: Send {
    /// Stop serving.
    fn stop(&mut self);
}

/// An API server that has started.
pub struct Started {
    /// Its base URL, `http://127.0.0.1:PORT`.
    pub url: String,
    /// The bearer token of its admin user (written to the quickstart's kubeconfig).
    pub admin_token: String,
    /// How many simulated Nodes run Pods.
    pub nodes: usize,
    /// The server itself; dropping it stops it.
    pub server: Box<dyn Server>,
}

/// The future [`Emulator::start`] returns.
pub type Starting<'a> = Pin<Box<dyn Future<Output = std::io::Result<Started>> + Send + 'a>>;

/// Starts the quickstart's API server on `127.0.0.1:port` (0: a free port), with Pods that pull,
/// start and become ready within a few seconds so a rollout can be watched.
pub trait Emulator: Sync {
    /// Start serving.
    fn start(&self, port: u16) -> Starting<'_>;
}
