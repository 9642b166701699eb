//! simcluster: an in-process Kubernetes API server emulator over HTTP, for tests, the local
//! quickstart and the load test. It must reproduce the exchanges recorded from a real
//! kube-apiserver (`simcluster/conformance/`). Filled in by the simcluster issue.
#![forbid(unsafe_code)]
