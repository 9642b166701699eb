//! The deployment controller (see the module documentation of [`crate::kcm`]), as
//! kube-controller-manager's `deployment_controller.go`, `sync.go`, `rolling.go`,
//! `recreate.go` and `progress.go`: it claims the ReplicaSets its selector matches, creates the
//! new ReplicaSet of the current template (`<name>-<pod-template-hash>`, revision and replica
//! annotations, `ScalingReplicaSet` Events), rolls out with maxSurge/maxUnavailable (or
//! Recreate), scales proportionally, handles paused Deployments, cleans up old ReplicaSets
//! beyond `revisionHistoryLimit`, and writes the status with the Available and Progressing
//! conditions (including `ProgressDeadlineExceeded`, checked against the clock on every pass).
//! The revision annotation is written through the status subresource, as the real controller
//! does.

use std::cmp::Ordering;
use std::sync::LazyLock;

use serde_json::{Value, json};

use super::replicaset::util::{
    Backoff, controlled_by, controller_of, controller_ref, deleting, error_message, int, name, namespace, not_found,
    selector_is_empty, selector_matches,
};
use crate::client::{Client, path};
use crate::errors::ApiError;

#[path = "deployment_util.rs"]
pub mod util;

use util::{
    annotation, condition, deployment_complete, deployment_progressing, deployment_timed_out, get_condition,
    has_progress_deadline, max_surge, max_unavailable, remove_condition, replicas, revision, set_condition,
    set_deployment_revision, set_new_rs_annotations, set_replicas_annotations, spec_count, status_count, template_key,
    terminating_count,
};

const COMPONENT: &str = "deployment-controller";

static BACKOFF: LazyLock<Backoff> = LazyLock::new(Backoff::new);

type R<T> = Result<T, ApiError>;

/// One reconcile pass over every object this controller owns.
pub async fn reconcile(client: Client) {
    let Ok(deployments) = client.list(&path("apps/v1", "deployments", "", "", ""), "").await else { return };
    if deployments.is_empty() {
        return;
    }
    let Ok(rss) = client.list(&path("apps/v1", "replicasets", "", "", ""), "").await else { return };
    let mut candidates = Candidates::default();
    // List items carry no kind/apiVersion; Events and ownerReferences need them.
    for rs in rss.into_iter().map(with_kind) {
        candidates.add(rs);
    }
    for d in deployments {
        let d = with_kind_d(d);
        let key = d["metadata"]["uid"].as_str().unwrap_or_default().to_string();
        if !BACKOFF.ready(&key) {
            continue;
        }
        let mine = candidates.of(&key, namespace(&d));
        let mut dc = Dc { client: &client, d, rss: vec![], new: None };
        match dc.sync(mine).await {
            Ok(()) => BACKOFF.succeeded(&key),
            // A conflict only means a newer version to work from: the next pass retries.
            Err(e) if e.code() == 409 => {}
            Err(_) => BACKOFF.failed(&key),
        }
    }
}

/// The ReplicaSets a Deployment may claim ([`Dc::claim_replica_sets`] skips those another
/// object controls): its own, by controller uid, and the orphans of its namespace. Handing each
/// Deployment only these, rather than every ReplicaSet of its namespace, keeps a pass linear in
/// the ReplicaSets (with 200 Deployments a namespace, a pass over 10,000 copied 2,000,000).
#[derive(Default)]
struct Candidates {
    by_controller: std::collections::HashMap<String, Vec<Value>>,
    orphans: std::collections::HashMap<String, Vec<Value>>,
}

impl Candidates {
    fn add(&mut self, rs: Value) {
        match controller_of(&rs).map(|r| r["uid"].as_str()) {
            Some(Some(uid)) => self.by_controller.entry(uid.to_string()).or_default().push(rs),
            // A controller reference without a uid matches no Deployment.
            Some(None) => {}
            None => self.orphans.entry(namespace(&rs).to_string()).or_default().push(rs),
        }
    }

    /// What the Deployment with `uid` in `ns` may claim (its own are taken: uids are unique).
    fn of(&mut self, uid: &str, ns: &str) -> Vec<Value> {
        let mut out = self.by_controller.remove(uid).unwrap_or_default();
        out.extend(self.orphans.get(ns).into_iter().flatten().cloned());
        out
    }
}

/// One Deployment being synced: the Deployment as last written, its ReplicaSets and which of
/// them is the new one.
struct Dc<'a> {
    client: &'a Client,
    d: Value,
    rss: Vec<Value>,
    new: Option<usize>,
}

fn by_creation(a: &Value, b: &Value) -> Ordering {
    let t = |r: &Value| r["metadata"]["creationTimestamp"].as_str().unwrap_or_default().to_string();
    t(a).cmp(&t(b)).then_with(|| name(a).cmp(name(b)))
}

impl Dc<'_> {
    fn ns(&self) -> String {
        namespace(&self.d).to_string()
    }

    fn want(&self) -> i64 {
        replicas(&self.d)
    }

    fn old_idx(&self) -> Vec<usize> {
        (0..self.rss.len()).filter(|i| Some(*i) != self.new).collect()
    }

    fn all(&self) -> Vec<&Value> {
        self.rss.iter().collect()
    }

    fn new_rs(&self) -> Option<&Value> {
        self.new.map(|i| &self.rss[i])
    }

    async fn sync(&mut self, in_ns: Vec<Value>) -> R<()> {
        // apps/v1 validation rejects empty selectors; never select every Pod.
        if selector_is_empty(&self.d["spec"]["selector"]) || !self.d["spec"]["selector"].is_object() {
            return Ok(());
        }
        self.rss = self.claim_replica_sets(in_ns).await;
        if deleting(&self.d) {
            self.get_all_and_sync_revision(false).await?;
            return self.sync_deployment_status().await;
        }
        self.check_paused_conditions().await?;
        if self.d["spec"]["paused"] == json!(true) {
            return self.sync_scale().await;
        }
        if self.is_scaling_event().await? {
            return self.sync_scale().await;
        }
        match self.d["spec"]["strategy"]["type"].as_str() {
            Some("Recreate") => self.rollout_recreate().await,
            Some("RollingUpdate") => self.rollout_rolling().await,
            _ => Ok(()),
        }
    }

    /// `ClaimReplicaSets`: the ReplicaSets this Deployment controls and selects; orphans it
    /// selects are adopted, controlled ones it no longer selects released.
    async fn claim_replica_sets(&self, in_ns: Vec<Value>) -> Vec<Value> {
        let uid = &self.d["metadata"]["uid"];
        let sel = &self.d["spec"]["selector"];
        let mut out = Vec::new();
        for rs in in_ns {
            let selected = selector_matches(sel, &rs["metadata"]["labels"]);
            let rs_path = path("apps/v1", "replicasets", namespace(&rs), name(&rs), "");
            if controlled_by(&rs, uid) {
                if selected {
                    out.push(rs);
                } else if !deleting(&self.d) {
                    let patch = super::replicaset::util::release_patch(&rs, uid);
                    let _ = self.client.strategic_patch(&rs_path, &patch).await;
                }
            } else if controller_of(&rs).is_none() && selected && !deleting(&self.d) && !deleting(&rs) {
                let patch =
                    super::replicaset::util::adopt_patch(&rs, &controller_ref(&self.d, "apps/v1", "Deployment"));
                if let Ok(adopted) = self.client.strategic_patch(&rs_path, &patch).await {
                    out.push(with_kind(adopted));
                }
            }
        }
        out
    }

    async fn update_status(&mut self) -> R<()> {
        let p = path("apps/v1", "deployments", &self.ns(), name(&self.d), "status");
        let updated = self.client.update(&p, &self.d).await?;
        self.d = with_kind_d(updated);
        Ok(())
    }

    async fn update_rs(&mut self, i: usize, rs: Value) -> R<()> {
        let p = path("apps/v1", "replicasets", &self.ns(), name(&rs), "");
        let updated = self.client.update(&p, &rs).await?;
        self.rss[i] = with_kind(updated);
        Ok(())
    }

    async fn event(&self, type_: &str, reason: &str, message: &str) {
        self.client.event(&self.d, type_, reason, message, COMPONENT).await;
    }

    /// `getAllReplicaSetsAndSyncRevision`: find (or create) the new ReplicaSet, keeping its
    /// annotations and the Deployment's revision in step.
    async fn get_all_and_sync_revision(&mut self, create: bool) -> R<()> {
        self.rss.sort_by(by_creation);
        let want = template_key(&self.d["spec"]["template"]);
        self.new = self.rss.iter().position(|rs| template_key(&rs["spec"]["template"]) == want);
        let max_old = self.old_idx().iter().map(|i| revision(&self.rss[*i])).max().unwrap_or(0);
        let new_revision = max_old + 1;
        if let Some(i) = self.new {
            let mut copy = self.rss[i].clone();
            let annotations_updated = set_new_rs_annotations(&self.d, &mut copy, new_revision, true);
            let min_ready = int(&self.d["spec"]["minReadySeconds"], 0);
            if annotations_updated || int(&copy["spec"]["minReadySeconds"], 0) != min_ready {
                set_min_ready(&mut copy, min_ready);
                return self.update_rs(i, copy).await;
            }
            let rev = annotation(&copy, util::REVISION).unwrap_or_default().to_string();
            let mut needs_update = set_deployment_revision(&mut self.d, &rev);
            if has_progress_deadline(&self.d) && get_condition(&self.d["status"], "Progressing").is_none() {
                let msg = format!("Found new replica set \"{}\"", name(&copy));
                set_condition(&mut self.d["status"], condition("Progressing", "True", "FoundNewReplicaSet", &msg));
                needs_update = true;
            }
            if needs_update {
                self.update_status().await?;
            }
            return Ok(());
        }
        if !create {
            return Ok(());
        }
        self.create_new_rs(new_revision).await
    }

    async fn create_new_rs(&mut self, new_revision: i64) -> R<()> {
        let d = &self.d;
        let collision = d["status"]["collisionCount"].as_i64();
        let mut template = d["spec"]["template"].clone();
        let hash = util::compute_hash(&template, collision);
        if !template["metadata"]["labels"].is_object() {
            template["metadata"]["labels"] = json!({});
        }
        template["metadata"]["labels"][util::HASH_LABEL] = json!(hash);
        let mut selector = d["spec"]["selector"].clone();
        if !selector["matchLabels"].is_object() {
            selector["matchLabels"] = json!({});
        }
        selector["matchLabels"][util::HASH_LABEL] = json!(hash);
        let rs_name = format!("{}-{}", name(d), hash);
        let mut rs = json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {
                "name": rs_name, "namespace": namespace(d),
                "labels": template["metadata"]["labels"].clone(),
                "ownerReferences": [controller_ref(d, "apps/v1", "Deployment")],
            },
            "spec": {"replicas": 0, "selector": selector, "template": template},
        });
        set_min_ready(&mut rs, int(&d["spec"]["minReadySeconds"], 0));
        let mut all: Vec<&Value> = self.all();
        all.push(&rs);
        let Some(count) = new_rs_new_replicas(d, &all, &rs) else { return Ok(()) };
        rs["spec"]["replicas"] = json!(count);
        set_new_rs_annotations(d, &mut rs, new_revision, false);

        let ns = self.ns();
        let (created, already_exists) =
            match self.client.create(&path("apps/v1", "replicasets", &ns, "", ""), &rs).await {
                Ok(created) => (with_kind(created), false),
                Err(e) if e.code() == 409 => {
                    let existing = self.client.get(&path("apps/v1", "replicasets", &ns, &rs_name, "")).await?;
                    if controlled_by(&existing, &self.d["metadata"]["uid"])
                        && template_key(&existing["spec"]["template"]) == template_key(&self.d["spec"]["template"])
                    {
                        (with_kind(existing), true)
                    } else {
                        // A hash collision: bump collisionCount and retry with another name.
                        self.d["status"]["collisionCount"] = json!(collision.unwrap_or(0) + 1);
                        let _ = self.update_status().await;
                        return Err(e);
                    }
                }
                Err(e) => {
                    let msg = format!("Failed to create new replica set \"{rs_name}\": {}", error_message(&e));
                    if has_progress_deadline(&self.d) {
                        set_condition(
                            &mut self.d["status"],
                            condition("Progressing", "False", "ReplicaSetCreateError", &msg),
                        );
                        let _ = self.update_status().await;
                    }
                    self.event("Warning", "ReplicaSetCreateError", &msg).await;
                    return Err(e);
                }
            };
        if !already_exists && count > 0 {
            let msg = format!("Scaled up replica set {} from 0 to {count}", name(&created));
            self.event("Normal", "ScalingReplicaSet", &msg).await;
        }
        let mut needs_update = set_deployment_revision(&mut self.d, &new_revision.to_string());
        if !already_exists && has_progress_deadline(&self.d) {
            let msg = format!("Created new replica set \"{}\"", name(&created));
            set_condition(&mut self.d["status"], condition("Progressing", "True", "NewReplicaSetCreated", &msg));
            needs_update = true;
        }
        self.rss.push(created);
        self.new = Some(self.rss.len() - 1);
        if needs_update {
            self.update_status().await?;
        }
        Ok(())
    }

    /// `checkPausedConditions`: Progressing Unknown DeploymentPaused / DeploymentResumed.
    async fn check_paused_conditions(&mut self) -> R<()> {
        if !has_progress_deadline(&self.d) {
            return Ok(());
        }
        let cond = get_condition(&self.d["status"], "Progressing");
        if cond.is_some_and(|c| c["reason"] == "ProgressDeadlineExceeded") {
            return Ok(());
        }
        let paused_cond = cond.is_some_and(|c| c["reason"] == "DeploymentPaused");
        let paused = self.d["spec"]["paused"] == json!(true);
        let c = if paused && !paused_cond {
            condition("Progressing", "Unknown", "DeploymentPaused", "Deployment is paused")
        } else if !paused && paused_cond {
            condition("Progressing", "Unknown", "DeploymentResumed", "Deployment is resumed")
        } else {
            return Ok(());
        };
        set_condition(&mut self.d["status"], c);
        self.update_status().await
    }

    /// `isScalingEvent`: an active ReplicaSet was sized for another replica count.
    async fn is_scaling_event(&mut self) -> R<bool> {
        self.get_all_and_sync_revision(false).await?;
        let want = self.want();
        Ok(self.rss.iter().filter(|rs| replicas(rs) > 0).any(|rs| {
            annotation(rs, util::DESIRED_REPLICAS).and_then(|s| s.parse::<i64>().ok()).is_some_and(|n| n != want)
        }))
    }

    /// `sync`: scale (paused Deployments and scaling events), clean up, write the status.
    async fn sync_scale(&mut self) -> R<()> {
        self.get_all_and_sync_revision(false).await?;
        self.scale().await?;
        if self.d["spec"]["paused"] == json!(true) {
            self.cleanup().await?;
        }
        self.sync_deployment_status().await
    }

    /// `scaleReplicaSetAndRecordEvent`.
    async fn scale_and_record(&mut self, i: usize, to: i64) -> R<bool> {
        if replicas(&self.rss[i]) == to {
            return Ok(false);
        }
        let up = replicas(&self.rss[i]) < to;
        self.scale_rs(i, to, up).await
    }

    /// `scaleReplicaSet`: size and replica annotations, a `ScalingReplicaSet` Event when the
    /// size changed.
    async fn scale_rs(&mut self, i: usize, to: i64, up: bool) -> R<bool> {
        let rs = &self.rss[i];
        let from = replicas(rs);
        let (want, max) = (self.want(), self.want() + max_surge(&self.d));
        let size_changes = from != to;
        if !size_changes && !util::replicas_annotations_need_update(rs, want, max) {
            return Ok(false);
        }
        let mut copy = rs.clone();
        copy["spec"]["replicas"] = json!(to);
        set_replicas_annotations(&mut copy, want, max);
        self.update_rs(i, copy).await?;
        if !size_changes {
            return Ok(false);
        }
        let msg =
            format!("Scaled {} replica set {} from {from} to {to}", if up { "up" } else { "down" }, name(&self.rss[i]));
        self.event("Normal", "ScalingReplicaSet", &msg).await;
        Ok(true)
    }

    /// `scale`: one active (or the latest) ReplicaSet takes the whole count; a saturated new
    /// ReplicaSet empties the old ones; otherwise replicas are added or removed proportionally.
    async fn scale(&mut self) -> R<()> {
        let want = self.want();
        let mut olds = self.old_idx();
        olds.sort_by(|a, b| by_creation(&self.rss[*b], &self.rss[*a]));
        let mut candidates = olds.clone();
        candidates.extend(self.new);
        let active: Vec<usize> = candidates.iter().copied().filter(|i| replicas(&self.rss[*i]) > 0).collect();
        let target = match active.len() {
            0 => self.new.or(olds.first().copied()),
            1 => Some(active[0]),
            _ => None,
        };
        if let Some(i) = target {
            if replicas(&self.rss[i]) != want {
                self.scale_and_record(i, want).await?;
            }
            return Ok(());
        }
        if let Some(n) = self.new
            && is_saturated(&self.d, &self.rss[n])
        {
            for i in self.old_idx() {
                if replicas(&self.rss[i]) > 0 {
                    self.scale_and_record(i, 0).await?;
                }
            }
            return Ok(());
        }
        if self.d["spec"]["strategy"]["type"] != "RollingUpdate" {
            return Ok(());
        }
        let mut active = active;
        let all_replicas: i64 = active.iter().map(|i| replicas(&self.rss[*i])).sum();
        let allowed = if want > 0 { want + max_surge(&self.d) } else { 0 };
        let to_add = allowed - all_replicas;
        let size_then_age = |a: &usize, b: &usize, newer_first: bool| {
            let (ra, rb) = (&self.rss[*a], &self.rss[*b]);
            replicas(rb)
                .cmp(&replicas(ra))
                .then_with(|| if newer_first { by_creation(rb, ra) } else { by_creation(ra, rb) })
        };
        match to_add.cmp(&0) {
            Ordering::Greater => active.sort_by(|a, b| size_then_age(a, b, true)),
            Ordering::Less => active.sort_by(|a, b| size_then_age(a, b, false)),
            Ordering::Equal => {}
        }
        let mut added = 0;
        let mut sizes = Vec::new();
        for i in &active {
            let rs = &self.rss[*i];
            if to_add != 0 {
                let p = proportion(rs, &self.d, to_add, added);
                sizes.push(replicas(rs) + p);
                added += p;
            } else {
                sizes.push(replicas(rs));
            }
        }
        for (k, i) in active.iter().enumerate() {
            if k == 0 && to_add != 0 {
                sizes[0] = (sizes[0] + to_add - added).max(0);
            }
            self.scale_rs(*i, sizes[k], to_add > 0).await?;
        }
        Ok(())
    }

    /// `cleanupDeployment`: delete the oldest empty ReplicaSets beyond `revisionHistoryLimit`.
    async fn cleanup(&mut self) -> R<()> {
        let Some(limit) = self.d["spec"]["revisionHistoryLimit"].as_i64() else { return Ok(()) };
        if limit == i32::MAX as i64 {
            return Ok(());
        }
        let mut alive: Vec<usize> = self.old_idx().into_iter().filter(|i| !deleting(&self.rss[*i])).collect();
        let diff = alive.len() as i64 - limit;
        if diff <= 0 {
            return Ok(());
        }
        alive.sort_by(|a, b| {
            let (ra, rb) = (&self.rss[*a], &self.rss[*b]);
            revision(ra).cmp(&revision(rb)).then_with(|| by_creation(ra, rb))
        });
        for i in alive.into_iter().take(diff as usize) {
            let rs = &self.rss[i];
            if int(&rs["status"]["replicas"], 0) != 0
                || replicas(rs) != 0
                || int(&rs["metadata"]["generation"], 0) > int(&rs["status"]["observedGeneration"], 0)
            {
                continue;
            }
            let p = path("apps/v1", "replicasets", namespace(rs), name(rs), "");
            match self.client.delete(&p, None, None).await {
                Ok(_) => {}
                Err(e) if not_found(&e) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// `rolloutRolling`.
    async fn rollout_rolling(&mut self) -> R<()> {
        self.get_all_and_sync_revision(true).await?;
        let Some(n) = self.new else { return Ok(()) };
        if self.reconcile_new_rs(n).await? {
            return self.sync_rollout_status().await;
        }
        if self.reconcile_old_rss(n).await? {
            return self.sync_rollout_status().await;
        }
        if deployment_complete(&self.d, &self.d["status"]) {
            self.cleanup().await?;
        }
        self.sync_rollout_status().await
    }

    /// `reconcileNewReplicaSet`: scale the new ReplicaSet up as far as maxSurge allows (or down
    /// to the Deployment's count).
    async fn reconcile_new_rs(&mut self, n: usize) -> R<bool> {
        let want = self.want();
        let have = replicas(&self.rss[n]);
        if have == want {
            return Ok(false);
        }
        if have > want {
            return self.scale_and_record(n, want).await;
        }
        let Some(count) = new_rs_new_replicas(&self.d, &self.all(), &self.rss[n]) else { return Ok(false) };
        self.scale_and_record(n, count).await
    }

    /// `reconcileOldReplicaSets`: scale old ReplicaSets down as far as maxUnavailable allows,
    /// unhealthy replicas first.
    async fn reconcile_old_rss(&mut self, n: usize) -> R<bool> {
        let mut olds: Vec<usize> = self.old_idx().into_iter().filter(|i| replicas(&self.rss[*i]) > 0).collect();
        let old_pods: i64 = olds.iter().map(|i| replicas(&self.rss[*i])).sum();
        if old_pods == 0 {
            return Ok(false);
        }
        let all_pods = spec_count(&self.all());
        let min_available = self.want() - max_unavailable(&self.d);
        let new_unavailable = replicas(&self.rss[n]) - int(&self.rss[n]["status"]["availableReplicas"], 0);
        let max_scaled_down = all_pods - min_available - new_unavailable;
        if max_scaled_down <= 0 {
            return Ok(false);
        }
        olds.sort_by(|a, b| by_creation(&self.rss[*a], &self.rss[*b]));
        // cleanupUnhealthyReplicas
        let mut cleaned = 0;
        for &i in &olds {
            if cleaned >= max_scaled_down {
                break;
            }
            let rs = &self.rss[i];
            let (have, available) = (replicas(rs), int(&rs["status"]["availableReplicas"], 0));
            if have == 0 || have == available {
                continue;
            }
            let down = (max_scaled_down - cleaned).min(have - available);
            let to = have - down;
            if to > have {
                return Ok(false);
            }
            if self.scale_and_record(i, to).await.is_err() {
                return Ok(false);
            }
            cleaned += down;
        }
        // scaleDownOldReplicaSetsForRollingUpdate
        let mut scaled = 0;
        let mut with_new = olds.clone();
        with_new.push(n);
        let available: i64 = with_new.iter().map(|i| int(&self.rss[*i]["status"]["availableReplicas"], 0)).sum();
        if available > min_available {
            let total = available - min_available;
            for &i in &olds {
                if scaled >= total {
                    break;
                }
                let have = replicas(&self.rss[i]);
                if have == 0 {
                    continue;
                }
                let down = have.min(total - scaled);
                if self.scale_and_record(i, have - down).await.is_err() {
                    return Ok(false);
                }
                scaled += down;
            }
        }
        Ok(cleaned + scaled > 0)
    }

    /// `rolloutRecreate`: old ReplicaSets to zero, wait for their Pods to go, then the new one.
    async fn rollout_recreate(&mut self) -> R<()> {
        self.get_all_and_sync_revision(false).await?;
        let mut scaled_down = false;
        for i in self.old_idx() {
            if replicas(&self.rss[i]) > 0 && self.scale_and_record(i, 0).await? {
                scaled_down = true;
            }
        }
        if scaled_down || self.old_pods_running().await? {
            return self.sync_rollout_status().await;
        }
        if self.new.is_none() {
            self.get_all_and_sync_revision(true).await?;
        }
        if let Some(n) = self.new {
            let want = self.want();
            self.scale_and_record(n, want).await?;
        }
        if deployment_complete(&self.d, &self.d["status"]) {
            self.cleanup().await?;
        }
        self.sync_rollout_status().await
    }

    /// `oldPodsRunning`: old ReplicaSets still report replicas, or own unfinished Pods.
    async fn old_pods_running(&self) -> R<bool> {
        let olds: Vec<&Value> = self.old_idx().into_iter().map(|i| &self.rss[i]).collect();
        if status_count(&olds, "replicas") > 0 {
            return Ok(true);
        }
        let pods = self.client.list(&path("v1", "pods", &self.ns(), "", ""), "").await?;
        Ok(pods.iter().any(|p| {
            selector_matches(&self.d["spec"]["selector"], &p["metadata"]["labels"])
                && olds.iter().any(|rs| controlled_by(p, &rs["metadata"]["uid"]))
                && !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
        }))
    }

    /// `calculateStatus`: the counts over all ReplicaSets and the Available condition.
    fn calculate_status(&self) -> Value {
        let all = self.all();
        let available = status_count(&all, "availableReplicas");
        let unavailable = (spec_count(&all) - available).max(0);
        let mut s = serde_json::Map::new();
        let mut put = |k: &str, v: i64| {
            if v != 0 {
                s.insert(k.into(), json!(v));
            }
        };
        put("observedGeneration", int(&self.d["metadata"]["generation"], 0));
        put("replicas", status_count(&all, "replicas"));
        put("updatedReplicas", self.new_rs().map(|rs| int(&rs["status"]["replicas"], 0)).unwrap_or(0));
        put("readyReplicas", status_count(&all, "readyReplicas"));
        put("availableReplicas", available);
        put("unavailableReplicas", unavailable);
        if let Some(t) = terminating_count(&all) {
            s.insert("terminatingReplicas".into(), json!(t));
        }
        if let Some(c) = self.d["status"].get("conditions").filter(|c| c.is_array()) {
            s.insert("conditions".into(), c.clone());
        }
        if let Some(c) = self.d["status"].get("collisionCount").filter(|c| c.is_number()) {
            s.insert("collisionCount".into(), c.clone());
        }
        let mut status = Value::Object(s);
        if available >= self.want() - max_unavailable(&self.d) {
            let c = condition("Available", "True", "MinimumReplicasAvailable", "Deployment has minimum availability.");
            set_condition(&mut status, c);
        } else {
            let c = condition(
                "Available",
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.",
            );
            set_condition(&mut status, c);
        }
        status
    }

    /// `syncDeploymentStatus`.
    async fn sync_deployment_status(&mut self) -> R<()> {
        let status = self.calculate_status();
        if status == self.d["status"] {
            return Ok(());
        }
        self.d["status"] = status;
        self.update_status().await
    }

    /// `syncRolloutStatus`: the status with the Progressing condition (complete, progressing,
    /// or timed out against `progressDeadlineSeconds`) and ReplicaSet failures.
    async fn sync_rollout_status(&mut self) -> R<()> {
        let mut status = self.calculate_status();
        let d = &self.d;
        if !has_progress_deadline(d) {
            remove_condition(&mut status, "Progressing");
        }
        let current = get_condition(&d["status"], "Progressing").cloned();
        let complete_before = int(&status["replicas"], 0) == int(&status["updatedReplicas"], 0)
            && current.as_ref().is_some_and(|c| c["reason"] == "NewReplicaSetAvailable");
        let what = match self.new_rs() {
            Some(rs) => format!("ReplicaSet \"{}\"", name(rs)),
            None => format!("Deployment \"{}\"", name(d)),
        };
        if has_progress_deadline(d) && !complete_before {
            if deployment_complete(d, &status) {
                let msg = format!("{what} has successfully progressed.");
                set_condition(&mut status, condition("Progressing", "True", "NewReplicaSetAvailable", &msg));
            } else if deployment_progressing(d, &status) {
                let msg = format!("{what} is progressing.");
                let mut c = condition("Progressing", "True", "ReplicaSetUpdated", &msg);
                if let Some(cur) = &current {
                    if cur["status"] == "True" {
                        c["lastTransitionTime"] = cur["lastTransitionTime"].clone();
                    }
                    remove_condition(&mut status, "Progressing");
                }
                set_condition(&mut status, c);
            } else if deployment_timed_out(d, &status) {
                let msg = format!("{what} has timed out progressing.");
                set_condition(&mut status, condition("Progressing", "False", "ProgressDeadlineExceeded", &msg));
            }
        }
        match self.replica_failure() {
            Some(c) => set_condition(&mut status, c),
            None => remove_condition(&mut status, "ReplicaFailure"),
        }
        if status == self.d["status"] {
            return Ok(());
        }
        self.d["status"] = status;
        self.update_status().await
    }

    /// `getReplicaFailures`: the new ReplicaSet's ReplicaFailure condition, else an old one's.
    fn replica_failure(&self) -> Option<Value> {
        let failure = |rs: &Value| {
            rs["status"]["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == "ReplicaFailure").map(
                |c| {
                    json!({
                        "type": "ReplicaFailure", "status": c["status"], "lastUpdateTime": c["lastTransitionTime"],
                        "lastTransitionTime": c["lastTransitionTime"], "reason": c["reason"], "message": c["message"],
                    })
                },
            )
        };
        if let Some(c) = self.new_rs().and_then(failure) {
            return Some(c);
        }
        self.rss.iter().find_map(failure)
    }
}

/// `NewRSNewReplicas`: how far the new ReplicaSet may grow now.
fn new_rs_new_replicas(d: &Value, all: &[&Value], new: &Value) -> Option<i64> {
    let want = replicas(d);
    match d["spec"]["strategy"]["type"].as_str() {
        Some("RollingUpdate") => {
            let surge = util::scaled_value(&d["spec"]["strategy"]["rollingUpdate"]["maxSurge"], want, true)?;
            let current = spec_count(all);
            let max_total = want + surge;
            if current >= max_total {
                return Some(replicas(new));
            }
            let up = (max_total - current).min(want - replicas(new));
            Some(replicas(new) + up)
        }
        Some("Recreate") => Some(want),
        _ => None,
    }
}

/// `IsSaturated`: the new ReplicaSet is sized for, and has available, the whole count.
fn is_saturated(d: &Value, rs: &Value) -> bool {
    let want = replicas(d);
    annotation(rs, util::DESIRED_REPLICAS).and_then(|s| s.parse::<i64>().ok()) == Some(want)
        && replicas(rs) == want
        && int(&rs["status"]["availableReplicas"], 0) == want
}

/// `GetReplicaSetProportion`.
fn proportion(rs: &Value, d: &Value, to_add: i64, added: i64) -> i64 {
    if replicas(rs) == 0 || to_add == 0 || to_add == added {
        return 0;
    }
    let fraction = {
        let want = replicas(d);
        if want == 0 {
            -replicas(rs)
        } else {
            let max_now = want + max_surge(d);
            let mut before = annotation(rs, util::MAX_REPLICAS).and_then(|s| s.parse::<i64>().ok()).unwrap_or(0);
            if before == 0 {
                before = int(&d["status"]["replicas"], 0);
            }
            if before == 0 {
                replicas(rs)
            } else {
                ((replicas(rs) * max_now) as f64 / before as f64).round() as i64 - replicas(rs)
            }
        }
    };
    let allowed = to_add - added;
    if to_add > 0 { fraction.min(allowed) } else { fraction.max(allowed) }
}

fn set_min_ready(rs: &mut Value, seconds: i64) {
    if seconds > 0 {
        rs["spec"]["minReadySeconds"] = json!(seconds);
    } else if let Some(s) = rs["spec"].as_object_mut() {
        s.remove("minReadySeconds");
    }
}

/// A ReplicaSet with its kind and apiVersion (list items have none; Events need them).
fn with_kind(mut rs: Value) -> Value {
    rs["kind"] = json!("ReplicaSet");
    rs["apiVersion"] = json!("apps/v1");
    rs
}

/// A Deployment with its kind and apiVersion.
fn with_kind_d(mut d: Value) -> Value {
    d["kind"] = json!("Deployment");
    d["apiVersion"] = json!("apps/v1");
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rs(replicas: i64, max: &str) -> Value {
        json!({"metadata": {"annotations": {util::MAX_REPLICAS: max}}, "spec": {"replicas": replicas}})
    }

    #[test]
    fn new_replicas_respect_surge() {
        let d = json!({"spec": {"replicas": 2, "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}}});
        let old = json!({"spec": {"replicas": 2}});
        let new = json!({"spec": {"replicas": 0}});
        assert_eq!(new_rs_new_replicas(&d, &[&old, &new], &new), Some(1));
        let new = json!({"spec": {"replicas": 0}});
        assert_eq!(new_rs_new_replicas(&d, &[&new], &new), Some(2));
    }

    #[test]
    fn proportions() {
        let d = json!({"spec": {"replicas": 20, "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 3, "maxUnavailable": 0}}}});
        // 10 -> 20 replicas: a ReplicaSet sized 5 of max 13 grows to round(5*23/13) = 9.
        assert_eq!(proportion(&rs(5, "13"), &d, 10, 0), 4);
        assert_eq!(proportion(&rs(5, "13"), &d, 2, 0), 2);
    }

    #[test]
    fn a_deployment_is_handed_its_own_replica_sets_and_its_namespace_orphans_only() {
        let owned = |name: &str, ns: &str, uid: Option<&str>| {
            let mut refs = json!([{"kind": "Deployment", "name": "x", "controller": true}]);
            if let Some(uid) = uid {
                refs[0]["uid"] = json!(uid);
            }
            json!({"metadata": {"name": name, "namespace": ns, "ownerReferences": refs}})
        };
        let orphan = |name: &str, ns: &str| json!({"metadata": {"name": name, "namespace": ns}});
        let mut c = Candidates::default();
        for rs in [
            owned("mine", "a", Some("u1")),
            owned("another's", "a", Some("u2")),
            owned("no uid", "a", None),
            orphan("orphan", "a"),
            orphan("elsewhere", "b"),
            // Owned by u1 though in another namespace: the claim decides (as before).
            owned("mine too", "b", Some("u1")),
        ] {
            c.add(rs);
        }
        let names = |v: Vec<Value>| v.iter().map(|r| name(r).to_string()).collect::<Vec<_>>();
        // (case, uid, namespace, handed)
        let cases: [(&str, &str, &str, &[&str]); 3] = [
            ("its own and the orphans", "u1", "a", &["mine", "mine too", "orphan"]),
            ("another Deployment of the namespace", "u2", "a", &["another's", "orphan"]),
            ("a Deployment with none", "u3", "b", &["elsewhere"]),
        ];
        for (case, uid, ns, want) in cases {
            assert_eq!(names(c.of(uid, ns)), *want, "{case}");
        }
    }
}

#[cfg(test)]
mod live {
    use std::sync::Arc;

    use serde_json::{Value, json};

    use crate::client::{Client, path};

    async fn pass(kcm: &Client) {
        super::reconcile(kcm.clone()).await;
        super::super::replicaset::reconcile(kcm.clone()).await;
    }

    fn rv(state: &crate::state::State) -> u64 {
        state.store.lock().rv()
    }

    /// A new Deployment gets its ReplicaSet, Pods, Events and status, and settled passes write
    /// nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rollout_settles_without_spinning() {
        let state = Arc::new(crate::state::State::new(crate::state::Config { kubelet: false, ..Default::default() }));
        let c = Client::new(state.clone(), "test");
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "t1"}});
        c.create(&path("v1", "namespaces", "", "", ""), &ns).await.unwrap();
        let d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "app", "image": "x:1"}]}}}});
        c.create(&path("apps/v1", "deployments", "t1", "", ""), &d).await.unwrap();
        let kcm = Client::new(state.clone(), "kube-controller-manager");
        for _ in 0..4 {
            pass(&kcm).await;
        }
        let settled = rv(&state);
        pass(&kcm).await;
        assert_eq!(rv(&state), settled, "a settled pass writes nothing");

        let rss = c.list(&path("apps/v1", "replicasets", "t1", "", ""), "").await.unwrap();
        assert_eq!(rss.len(), 1);
        assert_eq!(rss[0]["metadata"]["annotations"]["deployment.kubernetes.io/max-replicas"], "3");
        assert_eq!(rss[0]["status"]["replicas"], 2);
        let pods = c.list(&path("v1", "pods", "t1", "", ""), "").await.unwrap();
        assert_eq!(pods.len(), 2);
        let dep = c.get(&path("apps/v1", "deployments", "t1", "web", "")).await.unwrap();
        assert_eq!(dep["metadata"]["annotations"]["deployment.kubernetes.io/revision"], "1");
        let reasons: Vec<Value> =
            dep["status"]["conditions"].as_array().unwrap().iter().map(|c| c["reason"].clone()).collect();
        assert_eq!(reasons, vec![json!("MinimumReplicasUnavailable"), json!("ReplicaSetUpdated")]);
        let events = c.list(&path("v1", "events", "t1", "", ""), "").await.unwrap();
        let mut got: Vec<String> = events
            .iter()
            .map(|e| format!("{}/{}", e["involvedObject"]["kind"].as_str().unwrap(), e["reason"].as_str().unwrap()))
            .collect();
        got.sort();
        assert_eq!(got, ["Deployment/ScalingReplicaSet", "ReplicaSet/SuccessfulCreate", "ReplicaSet/SuccessfulCreate"]);
    }
}
