//! Redeploy requests this replica announced (their Event told) and has not yet recorded in the
//! Application's `status.lastHandledRedeployAt`: the next status write records them.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::runtime::reflector::ObjectRef;

use crate::api::application::Application;

/// The request (`redeploy-requested-at`) announced for each Application.
#[derive(Default)]
pub(crate) struct Redeploys(Mutex<HashMap<ObjectRef<Application>, String>>);

impl Redeploys {
    /// The request announced for `app` and not recorded yet.
    pub(crate) fn announced(&self, app: &ObjectRef<Application>) -> Option<String> {
        self.0.lock().expect("redeploys lock").get(app).cloned()
    }

    /// The request `at` of `app` was announced.
    pub(crate) fn announce(&self, app: ObjectRef<Application>, at: &str) {
        self.0.lock().expect("redeploys lock").insert(app, at.to_string());
    }

    /// A status write of `app` recorded `handled`: the request announced is forgotten when it
    /// is that one (a later request stays).
    pub(crate) fn recorded(&self, app: &ObjectRef<Application>, handled: Option<&String>) {
        let mut redeploys = self.0.lock().expect("redeploys lock");
        if redeploys.get(app) == handled {
            redeploys.remove(app);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_announced_request_is_forgotten_only_once_recorded() {
        let redeploys = Redeploys::default();
        let app = ObjectRef::new("a").within("ns");
        redeploys.announce(app.clone(), "t2");
        redeploys.recorded(&app, Some(&"t1".to_string()));
        assert_eq!(redeploys.announced(&app).as_deref(), Some("t2"), "an older request recorded keeps it");
        redeploys.recorded(&app, Some(&"t2".to_string()));
        assert_eq!(redeploys.announced(&app), None);
    }
}
