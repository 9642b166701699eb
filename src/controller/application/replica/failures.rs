//! How many reconciles of each Application failed in a row, for the retry backoff.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::runtime::reflector::ObjectRef;

use crate::api::application::Application;

/// Reconciles of each Application failed in a row.
#[derive(Default)]
pub(crate) struct Failures(Mutex<HashMap<ObjectRef<Application>, u32>>);

impl Failures {
    /// A reconcile of `app` failed: how many in a row now.
    pub(crate) fn failed(&self, app: ObjectRef<Application>) -> u32 {
        let mut failures = self.0.lock().expect("failures lock");
        let n = failures.entry(app).or_default();
        *n = n.saturating_add(1);
        *n
    }

    /// A reconcile of `app` succeeded: the count starts again.
    pub(crate) fn succeeded(&self, app: &ObjectRef<Application>) {
        self.0.lock().expect("failures lock").remove(app);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_count_in_a_row_per_application() {
        let failures = Failures::default();
        let (a, b) = (ObjectRef::new("a").within("ns"), ObjectRef::new("b").within("ns"));
        assert_eq!(failures.failed(a.clone()), 1);
        assert_eq!(failures.failed(a.clone()), 2);
        assert_eq!(failures.failed(b.clone()), 1, "another Application counts apart");
        failures.succeeded(&a);
        assert_eq!(failures.failed(a), 1, "a success starts the count again");
    }
}
