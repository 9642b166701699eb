//! Orphaned shards: a shard whose Lease has no live holder has no replica reconciling its
//! Applications. The leader looks every Lease duration and reports a shard that has stayed
//! without a live holder for twice the Lease duration (a hand-over, where one replica releases
//! and another acquires, takes less): the gauge `ksync_shards_orphaned`, and `Ready=Unknown`
//! with reason `ShardOrphaned` on each of the shard's Applications (the next owner's first
//! status write replaces it).
//!
//! The leader also deletes the membership Lease of a replica that is gone: one not renewed for
//! twice its duration ([`gone_members`]), deleted with its `uid` and `resourceVersion` as
//! preconditions, so a replica that renews it at that moment keeps it.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::api::application::Application;
use crate::api::conditions;
use crate::api::names;

/// The field manager of orphan reports.
pub const MANAGER: &str = "kuvryn-sync-sharding";

/// Which of `shards` shards have no live owner at `now`: no Lease, no holder, or a Lease not
/// renewed for twice its duration (a normal hand-over takes less).
pub fn orphaned(leases: &[Lease], prefix: &str, shards: u32, now: Timestamp) -> Vec<u32> {
    (0..shards)
        .filter(|k| {
            let name = sharding::coordinator::Coordinator::shard_lease(prefix, *k);
            let Some(spec) = leases.iter().find(|l| l.name_any() == name).and_then(|l| l.spec.as_ref()) else {
                return true;
            };
            if spec.holder_identity.as_deref().is_none_or(str::is_empty) {
                return true;
            }
            let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15));
            match &spec.renew_time {
                Some(t) => {
                    t.0.checked_add(jiff::SignedDuration::from_secs(2 * duration)).is_ok_and(|until| until < now)
                }
                None => true,
            }
        })
        .collect()
}

/// The membership Leases not renewed for twice their duration at `now` (their replicas are gone:
/// a live one renews every third of the duration), with their uid and resourceVersion.
pub fn gone_members(leases: &[Lease], now: Timestamp) -> Vec<(String, String, String)> {
    leases
        .iter()
        .filter(|l| {
            let Some(spec) = l.spec.as_ref() else { return true };
            let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15));
            spec.renew_time.as_ref().is_none_or(|t| {
                t.0.checked_add(jiff::SignedDuration::from_secs(2 * duration)).is_ok_and(|until| until < now)
            })
        })
        .filter_map(|l| Some((l.metadata.name.clone()?, l.metadata.uid.clone()?, l.metadata.resource_version.clone()?)))
        .collect()
}

/// Which shards have stayed without a live owner for at least `grace`, as seen by this process
/// (its own monotonic clock: a hand-over or a fresh start, where Leases are missing or released
/// for a moment, is not reported).
#[derive(Debug, Default)]
pub struct Grace {
    since: std::collections::BTreeMap<u32, std::time::Instant>,
}

impl Grace {
    /// `candidates` are without a live owner at `now`: those that have been for `grace`.
    pub fn lasting(&mut self, candidates: &[u32], now: std::time::Instant, grace: Duration) -> Vec<u32> {
        self.since.retain(|k, _| candidates.contains(k));
        candidates
            .iter()
            .filter(|k| now.duration_since(*self.since.entry(**k).or_insert(now)) >= grace)
            .copied()
            .collect()
    }
}

/// Report orphaned shards until `shutdown`.
pub async fn run(
    client: Client,
    lease_namespace: String,
    prefix: String,
    shards: u32,
    every: Duration,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let mut grace = Grace::default();
    loop {
        if let Err(e) = round(&client, &lease_namespace, &prefix, shards, &mut grace, 2 * every).await {
            tracing::warn!(error = %e, "checking for orphaned shards");
        }
        tokio::select! {
            _ = &mut shutdown => return,
            _ = tokio::time::sleep(every) => {}
        }
    }
}

async fn round(
    client: &Client,
    ns: &str,
    prefix: &str,
    shards: u32,
    grace: &mut Grace,
    lasting: Duration,
) -> Result<(), kube::Error> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let members =
        leases.list(&ListParams::default().labels(&format!("{}=member", sharding::lease::ROLE_LABEL))).await?;
    for (name, uid, rv) in gone_members(&members.items, Timestamp::now()) {
        let precondition = kube::api::Preconditions { uid: Some(uid), resource_version: Some(rv) };
        let params = kube::api::DeleteParams { preconditions: Some(precondition), ..Default::default() };
        match leases.delete(&name, &params).await {
            Ok(_) => tracing::info!(lease = %name, "deleted the membership Lease of a replica that is gone"),
            // Renewed or deleted meanwhile.
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    let list = leases.list(&ListParams::default().labels(&format!("{}=shard", sharding::lease::ROLE_LABEL))).await?;
    let now = Timestamp::now();
    let orphans = grace.lasting(&orphaned(&list.items, prefix, shards, now), std::time::Instant::now(), lasting);
    metrics::gauge!(crate::metric_names::SHARDS_ORPHANED).set(orphans.len() as f64);
    let apps: Api<Application> = Api::all(client.clone());
    for k in orphans {
        let selected = apps.list(&ListParams::default().labels(&format!("{}={k}", names::labels::SHARD))).await?;
        for app in selected.items {
            let ready = app.status.as_ref().and_then(|s| conditions::get(&s.conditions, names::conditions::READY));
            if ready.is_some_and(|c| c.reason == names::reasons::SHARD_ORPHANED) {
                continue;
            }
            let message = format!(
                "shard {k} has no live owner: no replica reconciles this Application until one takes the shard's Lease"
            );
            let condition = json!({"type": names::conditions::READY, "status": "Unknown",
                "reason": names::reasons::SHARD_ORPHANED, "message": message,
                "lastTransitionTime": now.to_string(), "observedGeneration": app.metadata.generation});
            let api: Api<Application> = Api::namespaced(client.clone(), &app.namespace().unwrap_or_default());
            let patch =
                json!({"apiVersion": names::API_VERSION, "kind": "Application", "status": {"conditions": [condition]}});
            api.patch_status(&app.name_any(), &PatchParams::apply(MANAGER).force(), &Patch::Apply(patch)).await?;
            tracing::warn!(application = %app.name_any(), namespace = ?app.namespace(), shard = k, "shard orphaned");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

    fn lease(k: u32, holder: Option<&str>, renewed: &str) -> Lease {
        Lease {
            metadata: ObjectMeta { name: Some(format!("p-shard-{k}")), ..Default::default() },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                lease_duration_seconds: Some(10),
                renew_time: Some(MicroTime(renewed.parse().unwrap())),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn missing_released_and_stale_leases_are_orphans() {
        let now: Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        let leases = vec![
            lease(0, Some("a"), "2026-01-01T00:00:55Z"), // live
            lease(1, None, "2026-01-01T00:00:59Z"),      // released
            lease(2, Some("b"), "2026-01-01T00:00:30Z"), // 30 s old, duration 10 s
            lease(3, Some("b"), "2026-01-01T00:00:45Z"), // within twice its duration: a hand-over
        ];
        assert_eq!(orphaned(&leases, "p", 5, now), vec![1, 2, 4]);
    }

    #[test]
    fn membership_leases_not_renewed_for_twice_their_duration_are_gone() {
        let now: Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        let member = |name: &str, renewed: Option<&str>| {
            let mut l = lease(0, Some(name), renewed.unwrap_or("2026-01-01T00:00:59Z"));
            l.metadata.name = Some(format!("p-member-{name}"));
            l.metadata.uid = Some(format!("uid-{name}"));
            l.metadata.resource_version = Some("7".into());
            if renewed.is_none() {
                l.spec.as_mut().unwrap().renew_time = None;
            }
            l
        };
        let leases = vec![
            member("live", Some("2026-01-01T00:00:55Z")),
            member("late", Some("2026-01-01T00:00:45Z")), // expired, within twice its duration
            member("gone", Some("2026-01-01T00:00:30Z")), // 30 s old, duration 10 s
            member("never", None),
        ];
        let gone: Vec<(String, String, String)> = gone_members(&leases, now);
        assert_eq!(
            gone,
            [
                ("p-member-gone".to_string(), "uid-gone".to_string(), "7".to_string()),
                ("p-member-never".to_string(), "uid-never".to_string(), "7".to_string())
            ]
        );
    }

    #[test]
    fn only_shards_unowned_for_the_whole_grace_are_reported() {
        let t0 = std::time::Instant::now();
        let s = Duration::from_secs(1);
        let mut g = Grace::default();
        assert!(g.lasting(&[1, 2], t0, 6 * s).is_empty());
        assert_eq!(g.lasting(&[1, 2], t0 + 6 * s, 6 * s), vec![1, 2]);
        // Shard 2 was taken (a hand-over), then released again: its wait starts over.
        assert_eq!(g.lasting(&[1], t0 + 7 * s, 6 * s), vec![1]);
        assert_eq!(g.lasting(&[1, 2], t0 + 8 * s, 6 * s), vec![1]);
        assert_eq!(g.lasting(&[1, 2], t0 + 14 * s, 6 * s), vec![1, 2]);
    }
}
