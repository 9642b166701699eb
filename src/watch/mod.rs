//! Reading the cluster's shape and changes: API discovery (which kinds exist, and their scope).
//! Per-shard watches and drift triggers come with their issues.

pub mod discovery;
