//! Sharding for Kuvryn Sync: the shard ring (Applications to shards, pure), shard-Lease ownership
//! and membership (kube I/O), and fencing. Filled in by the sharding issue.
#![forbid(unsafe_code)]
