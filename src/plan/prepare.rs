//! The desired state as an Application deploys it, from its validated objects: the sync hooks
//! split off, every other object stamped as managed by the Application, a redeploy request put
//! into the workloads' pod templates, and the desired-state hash. Pure: the controller's
//! desired-state stage and `ksync diff` both use it, so a preview is what a rollout would apply.

use serde_json::Value;

use super::{hooks, inventory, redeploy, revision};

/// The desired state of one Application.
#[derive(Debug, Clone, PartialEq)]
pub struct Prepared {
    /// The objects, stamped as managed (hooks are not among them).
    pub objects: Vec<Value>,
    /// The sync hooks, stamped as the Application's hooks.
    pub hooks: Vec<Value>,
    /// The desired-state hash over the objects and hooks.
    pub hash: String,
    /// The workloads a redeploy restarts (`Kind namespace/name`).
    pub restarted: Vec<String>,
}

/// Prepare `validated` (objects that passed [`super::validate::validate`]) for the Application
/// `namespace/name` in `shard`; `redeploy`: a value [`redeploy::parse`] returned.
pub fn prepare(validated: Vec<Value>, namespace: &str, name: &str, shard: &str, redeploy: Option<&str>) -> Prepared {
    // Hooks are split off after validation: they pass the same checks as every object.
    let (mut hooks, mut objects): (Vec<Value>, Vec<Value>) =
        validated.into_iter().partition(|o| !matches!(hooks::hooked(o), Ok(hooks::Hooked::No)));
    for o in &mut objects {
        inventory::stamp(o, namespace, name, shard);
    }
    for h in &mut hooks {
        inventory::stamp_hook(h, namespace, name);
    }
    // A redeploy: the workloads' pod templates carry the request (never the hooks'), so the
    // desired state, and its hash, change with it.
    let restarted = redeploy.map(|at| redeploy::inject(&mut objects, at)).unwrap_or_default();
    // A changed hook is a new desired state (a rollout runs it).
    let all: Vec<Value> = objects.iter().chain(&hooks).cloned().collect();
    let hash = revision::desired_state_hash(&all);
    Prepared { objects, hooks, hash, restarted }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::names;
    use serde_json::json;

    #[test]
    fn hooks_are_split_objects_stamped_and_a_redeploy_changes_the_hash() {
        let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "a"},
            "spec": {"template": {"metadata": {}, "spec": {}}}});
        let hook = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "migrate", "namespace": "a", "annotations": {"sync.kuvryn.io/hook": "PreSync"}}});
        let plain = prepare(vec![deploy.clone(), hook.clone()], "a", "web", "3", None);
        assert_eq!(plain.objects.len(), 1);
        assert_eq!(plain.hooks.len(), 1);
        assert_eq!(plain.objects[0]["metadata"]["labels"][names::labels::SHARD], "3");
        assert!(plain.restarted.is_empty());
        let restarted = prepare(vec![deploy, hook], "a", "web", "3", Some("2026-12-04T10:00:00Z"));
        assert_eq!(restarted.restarted, vec!["Deployment a/web".to_string()]);
        assert_ne!(plain.hash, restarted.hash, "a redeploy is a new desired state");
        assert_eq!(
            restarted.objects[0]["spec"]["template"]["metadata"]["annotations"][names::annotations::RESTARTED_AT],
            "2026-12-04T10:00:00Z"
        );
        assert!(restarted.hooks[0]["spec"].is_null(), "hooks are never restarted");
    }
}
