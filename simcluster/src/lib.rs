//! simcluster: an in-process Kubernetes API server emulator over HTTP, for Kuvryn Sync's tests,
//! local quickstart and load test. Its fidelity is measured by `conformance/` (exchanges
//! recorded from a real kube-apiserver v1.36.2), which it must reproduce.
#![forbid(unsafe_code)]

pub mod crd;
pub mod errors;
pub mod fieldmanager;
pub mod rbac;
pub mod schema;
pub mod validation;
