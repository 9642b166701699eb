//! Reading the cluster's shape and changes: API discovery (which kinds exist, and their scope)
//! and the per-shard, metadata-only watches of managed objects that trigger drift checks.

pub mod discovery;
pub mod managed;
pub mod pods;
pub mod shelf;
