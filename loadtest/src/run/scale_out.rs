//! The scale-out run (`--scale-out`): the same work on one replica, then on all of them, at the
//! same per-replica API budget.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use futures_util::{StreamExt, TryStreamExt};
use kube::api::{Api, PostParams};
use kuvryn_sync::api::application::Application;

use super::Fleet;
use crate::fleet::AppDef;
use crate::observe::{AppSeen, key};
use crate::report::{Batch, ScaleOut};
use crate::{Error, Result};

/// How long the replicas' reconcile count must stay still to call them quiet.
const QUIET: Duration = Duration::from_secs(3);

impl Fleet {
    /// Converge every other Application on the one replica running, start the others and wait
    /// until they split the shards and the Applications that moved are reconciled, then converge
    /// the rest on all of them.
    pub(super) async fn scale_out(&mut self) -> Result<()> {
        let first: Vec<AppDef> = self.apps.iter().step_by(2).cloned().collect();
        let second: Vec<AppDef> = self.apps.iter().skip(1).step_by(2).cloned().collect();
        let many = self.args.replicas;

        self.phase("scale-out: 1 replica");
        let one = self.converge_batch(&first, 1).await?;
        self.snapshot("after the batch on 1 replica");

        self.phase("scale-out: the others join");
        let joined_s = self.start_replicas(many).await?;
        let quiet_at = self.quiet().await?;
        let joined_quiet_s = joined_s + quiet_at;

        self.phase(&format!("scale-out: {many} replicas"));
        let all = self.converge_batch(&second, many).await?;
        self.snapshot(&format!("after the batch on {many} replicas"));

        let ratio = if one.per_s > 0.0 { all.per_s / one.per_s } else { 0.0 };
        say!(
            "scale-out: {:.1} Applications per second on 1 replica, {:.1} on {many}: ratio {ratio:.2}",
            one.per_s,
            all.per_s
        );
        self.report.requests_per_app = merged_per_app(&[&one, &all]);
        self.report.scale_out =
            Some(ScaleOut { budget_qps: self.args.kube_api_qps, one, many: all, joined_s: joined_quiet_s, ratio });
        Ok(())
    }

    /// Create `defs` and wait until every one is Synced, Healthy and Ready, on `replicas`
    /// replicas.
    async fn converge_batch(&mut self, defs: &[AppDef], replicas: usize) -> Result<Batch> {
        let requests_before = self.replica_requests().await;
        let writes_before = self.controller_writes();
        let cpu_before = self.replica_cpu_s();
        let first = Instant::now();
        let created: HashSet<String> = futures_util::stream::iter(defs.to_vec())
            .map(|def| {
                let api: Api<Application> = Api::namespaced(self.client.clone(), &def.namespace);
                async move {
                    let app: Application = serde_json::from_value(def.object()).expect("an Application");
                    api.create(&PostParams::default(), &app).await?;
                    Ok::<_, Error>(key(&def.namespace, &def.name))
                }
            })
            .buffer_unordered(self.args.create_concurrency.max(1))
            .try_collect()
            .await?;
        let create_s = first.elapsed().as_secs_f64();
        say!("{} Applications created in {create_s:.1} s", created.len());
        let deadline = first + self.args.timeout;
        let total = created.len();
        let mut last_said = Instant::now();
        let done = self
            .app_seen
            .until(deadline, |j| {
                let latest = j.latest();
                let ready = created.iter().filter(|k| latest.get(*k).is_some_and(|(_, s)| s.converged())).count();
                if last_said.elapsed() > Duration::from_secs(10) {
                    last_said = Instant::now();
                    say!("{ready}/{total} converged after {:.0} s", first.elapsed().as_secs_f64());
                }
                (ready == total).then(Instant::now)
            })
            .await
            .ok_or_else(|| {
                Error::Timeout(self.args.timeout, format!("{total} Applications to converge on {replicas} replicas"))
            })?;
        let all_ready_s = done.duration_since(first).as_secs_f64();
        let phase = format!("scale-out on {replicas}");
        self.against_floor(&phase, defs, all_ready_s);
        let writes = self.writes(&writes_before, first, done, defs.len());
        self.report.writes.insert(phase, writes);
        let requests = match (requests_before, self.replica_requests().await) {
            (Some(before), Some(after)) => super::grown(&before, &after),
            _ => BTreeMap::new(),
        };
        #[allow(clippy::cast_precision_loss)]
        let (n, sum) = (total.max(1) as f64, requests.values().sum::<u64>() as f64);
        let cpu_s = self.replica_cpu_s() - cpu_before;
        let per_app: Vec<Duration> = created
            .iter()
            .filter_map(|k| self.app_seen.first_since(k, first, AppSeen::converged))
            .map(|at| at.saturating_duration_since(first))
            .collect();
        say!("{total} converged on {replicas} replicas {all_ready_s:.1} s after the first create");
        Ok(Batch {
            replicas,
            apps: total,
            create_s,
            all_ready_s,
            per_s: n / all_ready_s.max(1e-3),
            ready: crate::stats::Summary::of(&per_app),
            requests_per_app: sum / n,
            requests,
            cpu_ms_per_app: cpu_s * 1e3 / n,
        })
    }

    /// Wait until no replica has reconciled anything for [`QUIET`]; the seconds that took.
    async fn quiet(&mut self) -> Result<f64> {
        let start = Instant::now();
        let deadline = start + Duration::from_secs(300);
        let (mut last, mut since) = (self.replica_metric("ksync_reconciles_total"), Instant::now());
        while Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let now = self.replica_metric("ksync_reconciles_total");
            if now != last {
                (last, since) = (now, Instant::now());
            } else if since.elapsed() >= QUIET {
                let took = since.duration_since(start).as_secs_f64();
                say!("the replicas were quiet {took:.1} s after splitting the shards");
                return Ok(took);
            }
        }
        Err(Error::Timeout(deadline - start, "the replicas to stop reconciling after the others joined".into()))
    }
}

/// The requests of several batches per Application of all of them, by `verb resource`, and in
/// all under [`super::ALL`].
fn merged_per_app(batches: &[&Batch]) -> BTreeMap<String, f64> {
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for b in batches {
        for (what, n) in &b.requests {
            *counts.entry(what.clone()).or_default() += n;
        }
    }
    super::requests_per_app(&BTreeMap::new(), &counts, batches.iter().map(|b| b.apps).sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_of_batches_are_per_application_of_all() {
        let batch =
            |apps, n| Batch { apps, requests: [("patch configmaps".to_string(), n)].into(), ..Batch::default() };
        let per = merged_per_app(&[&batch(10, 30), &batch(20, 60)]);
        assert_eq!((per["patch configmaps"], per[super::super::ALL]), (3.0, 3.0));
    }
}
