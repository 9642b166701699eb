//! `sync.kuvryn.io/rollback-target-hash`: what a manual rollback approves.
//!
//! The admission webhook records it when a rollback request names a Revision
//! (`rollback-target-revision`) whose `status.deployedDesiredStateHash` is set; the controller
//! computes it again from the same inputs to check that the approval still holds. Both call
//! [`rollback_target_hash`], so they agree by construction.
//!
//! Guarantees: pure and deterministic; the serialization is canonical (a fixed struct with
//! fixed field order, serialized by `serde_json`), so the value only changes when one of its
//! inputs does. Inputs, as the spec lists them: the Revision's deployed desired state hash,
//! `spec.sync`'s prune, conflict policy and self-heal, and `spec.strategy` (waves, hooks).
//! `spec.sync.automatic` is left out: the spec names the three policy fields that change what a
//! rollout does, and whether a plan needs approval is not one of them.

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::api::application::{ConflictPolicy, Strategy, SyncPolicy};

/// The canonical form hashed. Changing it changes every recorded hash: requests recorded before
/// would then wait for `ksync sync`, as the spec says a stale target does.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Canonical<'a> {
    deployed_desired_state_hash: &'a str,
    sync: CanonicalSync,
    strategy: &'a Strategy,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CanonicalSync {
    prune: bool,
    self_heal: bool,
    conflict_policy: ConflictPolicy,
}

/// `sha256:<hex>` over the canonical serialization of the target Revision's
/// `status.deployedDesiredStateHash` and the Application's `spec.sync` and `spec.strategy`.
pub fn rollback_target_hash(deployed_desired_state_hash: &str, sync: &SyncPolicy, strategy: &Strategy) -> String {
    let canonical = Canonical {
        deployed_desired_state_hash,
        sync: CanonicalSync { prune: sync.prune, self_heal: sync.self_heal, conflict_policy: sync.conflict_policy },
        strategy,
    };
    // Serializing plain bools, strings and a unit enum cannot fail.
    let bytes = serde_json::to_vec(&canonical).unwrap_or_default();
    let digest = Sha256::digest(&bytes);
    let mut hex = String::with_capacity(64);
    for b in digest {
        hex.push_str(&format!("{b:02x}"));
    }
    format!("sha256:{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    struct Case {
        name: String,
        deployed: String,
        #[serde(default)]
        sync: SyncPolicy,
        #[serde(default)]
        strategy: Strategy,
        want: String,
    }

    /// `testdata/webhook/target_hash.yaml`: fixed hashes (a change to the canonical form shows up
    /// here), equal hashes where only `automatic` differs, different ones for every other field.
    #[test]
    fn target_hash_table() {
        let cases: Vec<Case> =
            crate::yaml::from_str(include_str!("../../testdata/webhook/target_hash.yaml")).expect("target_hash.yaml");
        let mut failures = Vec::new();
        for c in &cases {
            let got = rollback_target_hash(&c.deployed, &c.sync, &c.strategy);
            if got != c.want {
                failures.push(format!("{}: got {got}, want {}", c.name, c.want));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn every_input_but_automatic_changes_the_hash() {
        let base = rollback_target_hash("sha256:aa", &SyncPolicy::default(), &Strategy::default());
        let sync = |f: fn(&mut SyncPolicy)| {
            let mut s = SyncPolicy::default();
            f(&mut s);
            rollback_target_hash("sha256:aa", &s, &Strategy::default())
        };
        assert_ne!(base, rollback_target_hash("sha256:ab", &SyncPolicy::default(), &Strategy::default()));
        assert_ne!(base, sync(|s| s.prune = true));
        assert_ne!(base, sync(|s| s.self_heal = true));
        assert_ne!(base, sync(|s| s.conflict_policy = ConflictPolicy::Adopt));
        assert_eq!(base, sync(|s| s.automatic = false));
        let strategy = Strategy { waves: false, hooks: true };
        assert_ne!(base, rollback_target_hash("sha256:aa", &SyncPolicy::default(), &strategy));
        let strategy = Strategy { waves: true, hooks: false };
        assert_ne!(base, rollback_target_hash("sha256:aa", &SyncPolicy::default(), &strategy));
        assert!(base.starts_with("sha256:") && base.len() == 7 + 64);
    }
}
