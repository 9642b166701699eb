#![forbid(unsafe_code)]
//! The `simcluster` binary.

fn main() {}
