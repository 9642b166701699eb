//! The load-test harness: thousands of Applications, several replicas, injected faults, and the
//! reports in `docs/`. Filled in by the load-test issue.
#![forbid(unsafe_code)]
