//! The monorepo commit (`--monorepo-commit`): one commit changing the first Application's
//! path, in the repository every Application deploys from.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube::api::{Api, Patch, PatchParams};
use kuvryn_sync::api::Repository;
use kuvryn_sync::api::names;
use serde_json::json;

use super::Fleet;
use crate::fleet::REPOSITORY;
use crate::observe::key;
use crate::report::Monorepo;
use crate::{Error, Result};

/// Whether a write's object belongs to Application `app`: the object itself, or one named
/// after it (its Revisions `app-…`, its Events `app.…`).
pub fn belongs_to(name: &str, app: &str) -> bool {
    name == app || name.strip_prefix(app).is_some_and(|rest| rest.starts_with(['-', '.']))
}

impl Fleet {
    /// Push the commit, ask every Repository to fetch, and wait until every Application
    /// desires it and has converged; count the renders and the writes on the way.
    pub(super) async fn monorepo(&mut self) -> Result<()> {
        self.phase("monorepo commit");
        let target = self.apps[0].clone();
        let misses = |f: &mut Fleet| f.replica_metric("ksync_render_cache_requests_total{miss}");
        let renders_before = misses(self);
        let from = jiff::Timestamp::now();
        let (path, yaml) = target.files().remove(0);
        let changed = format!("{yaml}  changed: \"yes\"\n");
        let wt = &self.work_tree;
        let commit = tokio::task::block_in_place(|| {
            wt.write(&path, &changed);
            wt.commit_and_push(&format!("change {}", target.name))
        });
        let pushed = Instant::now();
        let token = format!("monorepo-{from}");
        let patch = json!({"metadata": {"annotations": {names::annotations::RECONCILE_REQUESTED_AT: token}}});
        for ns in crate::fleet::namespaces(self.args.namespaces) {
            Api::<Repository>::namespaced(self.client.clone(), &ns)
                .patch(REPOSITORY, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
        let keys: Vec<String> = self.apps.iter().map(|d| key(&d.namespace, &d.name)).collect();
        let deadline = pushed + self.args.timeout;
        let settled = self
            .app_seen
            .until(deadline, |j| {
                let latest = j.latest();
                keys.iter()
                    .all(|k| {
                        latest
                            .get(k)
                            .is_some_and(|(_, s)| s.converged() && s.commit.as_deref() == Some(commit.as_str()))
                    })
                    .then(Instant::now)
            })
            .await
            .ok_or_else(|| Error::Timeout(self.args.timeout, format!("every Application to deploy {commit}")))?;
        // Late writes of the last reconciles.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let renders = misses(self) - renders_before;
        let mut writes: BTreeMap<String, usize> = BTreeMap::new();
        let (mut unaffected, mut unaffected_dry_runs) = (0_usize, 0_usize);
        for e in self.audit().await.unwrap_or_default() {
            let Ok(at) = e.time.parse::<jiff::Timestamp>() else { continue };
            if at < from || e.resource == "leases" || !e.user.starts_with("system:serviceaccount:") {
                continue;
            }
            *writes.entry(super::write_kind(&e)).or_default() += 1;
            if !belongs_to(&e.name, &target.name) && !e.resource.starts_with("repositories") {
                if e.dry_run {
                    unaffected_dry_runs += 1;
                } else {
                    unaffected += 1;
                }
            }
        }
        #[allow(clippy::cast_precision_loss)]
        let per = unaffected as f64 / (self.apps.len().saturating_sub(1).max(1)) as f64;
        let m = Monorepo {
            apps: self.apps.len(),
            settled_s: settled.saturating_duration_since(pushed).as_secs_f64(),
            renders,
            writes,
            unaffected_writes_per_app: per,
            unaffected_dry_runs,
        };
        say!(
            "monorepo commit: settled after {:.1} s, {renders:.0} renders, {per:.2} writes per unaffected Application, {} dry runs",
            m.settled_s,
            m.unaffected_dry_runs
        );
        self.report.monorepo = Some(m);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_told_apart_by_name() {
        assert!(belongs_to("app-0000", "app-0000"));
        assert!(belongs_to("app-0000-3f2a9c1d", "app-0000"));
        assert!(belongs_to("app-0000.18c2f0a1b2c3", "app-0000"));
        assert!(!belongs_to("app-00001", "app-0000"));
        assert!(!belongs_to("app-0001", "app-0000"));
    }
}
