//! The quiet window (`--idle`): what the replicas ask of the API server while nothing changes.

use std::collections::BTreeMap;

use super::Fleet;
use crate::Result;
use crate::report::Idle;

/// The resource of the replicas' heartbeat, counted apart.
const LEASES: &str = " leases";

impl Fleet {
    /// Wait `--idle` with nothing changing, then count the replicas' requests (by simcluster)
    /// and every write but the Leases' (by its audit log).
    pub(super) async fn idle(&mut self) -> Result<()> {
        self.phase("idle");
        let window = self.args.idle;
        let before = self.replica_requests().await.unwrap_or_default();
        let from = jiff::Timestamp::now();
        tokio::time::sleep(window).await;
        let after = self.replica_requests().await.unwrap_or_default();
        let to = jiff::Timestamp::now();
        let mut requests = BTreeMap::new();
        let mut lease_requests = 0;
        for (what, d) in super::grown(&before, &after) {
            if what.ends_with(LEASES) {
                lease_requests += d;
            } else {
                requests.insert(what, d);
            }
        }
        let mut writes: BTreeMap<String, usize> = BTreeMap::new();
        for e in self.audit().await.unwrap_or_default() {
            let Ok(at) = e.time.parse::<jiff::Timestamp>() else { continue };
            // The controllers' writes: as their ServiceAccounts or the ones they impersonate
            // (not simcluster's simulated kubelet, nor the load test).
            if at < from || at > to || e.resource == "leases" || !e.user.starts_with("system:serviceaccount:") {
                continue;
            }
            *writes.entry(super::write_kind(&e)).or_default() += 1;
        }
        let resync = self.report.settings.drift_resync_s.max(1.0);
        #[allow(clippy::cast_precision_loss)]
        let (total, apps) = (requests.values().sum::<u64>() as f64, self.apps.len().max(1) as f64);
        let window_s = window.as_secs_f64();
        #[allow(clippy::cast_precision_loss)]
        let writes_per_hour = writes.values().sum::<usize>() as f64 * 3600.0 / window_s.max(1.0);
        let idle = Idle {
            window_s,
            requests_per_app_per_resync: total / apps / (window_s / resync),
            requests,
            lease_requests,
            writes,
            writes_per_hour,
        };
        say!(
            "idle {window_s:.0} s: {:.2} requests per Application per resync, {} Lease requests, {:.0} writes per hour",
            idle.requests_per_app_per_resync,
            idle.lease_requests,
            idle.writes_per_hour
        );
        self.report.idle = Some(idle);
        Ok(())
    }
}
