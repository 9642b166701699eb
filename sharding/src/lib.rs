//! Sharding for Kuvryn Sync, the pure part: which shard an Application belongs to, and which
//! controller replica owns each shard. No Kubernetes, no I/O; shard-Lease ownership, membership and
//! fencing build on this.
//!
//! - [`shard_of`] ([`ring`]): an Application's `namespace/name` to one of a fixed number of shards,
//!   by jump consistent hash over the first 8 bytes of SHA-256. Stable across platforms and Rust
//!   versions; golden tests pin the values.
//! - [`assign()`] and [`owned_by`] ([`mod@assign`]): every shard to exactly one live replica, by
//!   rendezvous hashing of (shard, replica) with bounded loads, so loads differ by at most one; a
//!   replica joining or leaving moves its own share of the shards plus a measured, bounded extra.
//!
//! `docs/sharding.md` has the design, the measured balance and movement, and how to reproduce
//! them (`cargo run --release -p sharding --example balance`).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod assign;
pub mod ring;

pub use assign::{assign, owned_by, score};
pub use ring::{MAX_SHARDS, application_key, jump, key_hash, shard_of};
