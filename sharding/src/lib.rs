//! Sharding for Kuvryn Sync: which shard an Application belongs to and which replica owns each
//! shard (pure), and the Leases that make that ownership real (kube I/O), with fencing.
//!
//! - [`shard_of`] ([`ring`]): an Application's `namespace/name` to one of a fixed number of shards,
//!   by jump consistent hash over the first 8 bytes of SHA-256. Stable across platforms and Rust
//!   versions; golden tests pin the values.
//! - [`assign()`] and [`owned_by`] ([`mod@assign`]): every shard to exactly one live replica, by
//!   rendezvous hashing of (shard, replica) with bounded loads, so loads differ by at most one; a
//!   replica joining or leaving moves its own share of the shards plus a measured, bounded extra.
//! - [`count`]: whether a replica may take part with its shard count (every replica must use
//!   the same one), a pure decision from the Leases it sees.
//! - [`lease`]: acquiring, renewing and releasing `coordination.k8s.io` Leases, with expiry judged
//!   on the local monotonic clock (clock skew between replicas does not matter) and epochs.
//! - [`coordinator`]: one replica's membership Lease, the shard Leases assigned to it, the work
//!   started and drained with them, and the [`coordinator::Fence`] every write checks.
//! - [`leader`]: leader election for singleton work.
//! - [`thread`]: the OS thread and runtime of its own that Lease renewals run on, and their client.
//!
//! `docs/sharding.md` has the design, the measured balance and movement, and how to reproduce
//! them (`cargo run --release -p sharding --example balance`).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod assign;
pub mod coordinator;
pub mod count;
pub mod leader;
pub mod lease;
pub mod ring;
pub mod thread;

pub use assign::{assign, owned_by, score};
pub use ring::{MAX_SHARDS, application_key, jump, key_hash, shard_of};
