//! Applying one group of the plan's objects (a wave; prune runs with the last) as the
//! Application's service account, through the shard fence.

use std::collections::{BTreeMap, BTreeSet};

use kube::runtime::events::EventType;
use serde_json::Value;
use tracing::Instrument as _;

use super::super::error::Error;
use super::super::flow::Planned;
use super::Rollout;
use super::record::{describe, reference};
use crate::api::names;
use crate::api::revision::RevisionPhase;
use crate::api::revision::reference as revision_ref;
use crate::apply;
use crate::plan::{Action as PlanAction, validate};

impl Rollout<'_> {
    /// Apply the Create and Update entries of `wave` (all of them when `None`), and prune when
    /// `last`. `false` when the attempt failed (recorded).
    pub(super) async fn apply_group(
        &mut self,
        planned: &Planned,
        wave: Option<i32>,
        last: bool,
        live: &mut BTreeMap<String, Value>,
        managed_left: &mut Vec<Value>,
    ) -> Result<bool, Error> {
        let related = revision_ref(self.ns, self.rev);
        // Hooks are never applied: they are created by their stage ([`stages`]).
        let entries = planned
            .plan
            .entries
            .iter()
            .filter(|e| !e.is_hook() && wave.is_none_or(|w| e.wave == w && e.action != PlanAction::Delete))
            .cloned()
            .collect();
        let group = crate::plan::Plan { entries, digest: planned.plan.digest.clone() };
        if let Some(w) = wave {
            let changes = group.entries.iter().filter(|e| e.action != PlanAction::Unchanged).count();
            let n = group.entries.len();
            self.wave_event(&format!(
                "wave {w}: applying {changes} of its {n} object{}",
                if n == 1 { "" } else { "s" }
            ));
        }
        let plan = &group;
        let in_wave = |m: String| match wave {
            Some(w) => format!("wave {w}: {m}"),
            None => m,
        };
        let writer = self.ctx.writer(&planned.sa, self.ns, self.name);
        let rediscover = || self.ctx.rediscover();
        let span = tracing::info_span!("apply", wave = ?wave, objects = plan.entries.len());
        // Workloads stamped by an earlier version keep the stamp (nothing restarts).
        let desired = crate::live::with_kept_stamps(&planned.desired, &planned.kept_stamps);
        // Their watch events may come before the answers are noted below.
        let sending = self.ctx.echoes.sending(
            plan.entries
                .iter()
                .filter(|e| matches!(e.action, PlanAction::Create | PlanAction::Update))
                .map(|e| (e.group.as_str(), e.kind.as_str(), e.identity())),
        );
        // Objects presumed absent are created only if they are.
        let mode = apply::Mode { force: planned.adopt, create_only: &planned.presumed };
        let result = apply::apply(&writer, &self.ctx.client, &planned.scopes, rediscover, plan, &desired, mode)
            .instrument(span)
            .await;
        let mut applied = match result {
            Ok(a) => a,
            Err(apply::Error::Api(e)) => return Err(e.into()),
            Err(apply::Error::Exists(m)) => {
                tracing::info!(application = %self.name, namespace = %self.ns, "{m}: planning again from what is there");
                self.ctx.found_existing.insert(format!("{}/{}", self.ns, self.name), ());
                return Err(Error::Presumed);
            }
            Err(apply::Error::Conflict(m)) => {
                self.fail_attempt(names::reasons::APPLY_CONFLICT, in_wave(m), true);
                return Ok(false);
            }
            Err(apply::Error::Refused(m) | apply::Error::Unserved(m)) => {
                self.fail_attempt(
                    names::reasons::APPLY_FAILURE,
                    in_wave(format!("the Application's service account: {m}")),
                    true,
                );
                return Ok(false);
            }
        };
        let kept =
            super::super::replica::unchanged::applied(&planned.desired, &applied.objects, std::time::Instant::now());
        self.ctx.unchanged.add(&format!("{}/{}", self.ns, self.name), kept);
        for (id, obj) in std::mem::take(&mut applied.objects) {
            let (group, kind) =
                id.split_once('/').map(|(g, rest)| (g, rest.split('/').next().unwrap_or_default())).unwrap_or_default();
            self.ctx.echoes.applied(group, kind, id.clone(), obj["metadata"]["resourceVersion"].as_str());
            live.insert(id, obj);
        }
        drop(sending);
        self.applied = true;
        // Record what we now manage before pruning, so a failed prune loses nothing.
        self.record_kinds(planned, live, managed_left);
        if !last {
            self.rs.phase = RevisionPhase::Progressing;
            return Ok(true);
        }
        let scopes = self.ctx.scopes(false).await?;
        // What is pruned was listed as the service account for this rollout (never from a watch
        // cache), and each delete is conditional on the object listed.
        let listed: BTreeMap<String, Value> =
            planned.managed.iter().map(|o| (validate::identity(o), o.clone())).collect();
        let (ns, name) = (self.ns, self.name);
        let prunable = move |o: &Value| crate::plan::inventory::prunable_by(o, ns, name);
        let kept = match apply::prune(&writer, &scopes, &planned.plan, &listed, &prunable, &mut applied)
            .instrument(tracing::info_span!("prune"))
            .await
        {
            Ok(k) => k,
            Err(e) => match e {
                apply::Error::Api(e) => return Err(e.into()),
                apply::Error::Refused(m)
                | apply::Error::Conflict(m)
                | apply::Error::Unserved(m)
                | apply::Error::Exists(m) => {
                    self.fail_attempt(
                        names::reasons::PRUNE_FAILURE,
                        format!("the Application's service account: {m}"),
                        true,
                    );
                    return Ok(false);
                }
            },
        };
        let deleted: BTreeSet<&String> = applied.deleted.iter().collect();
        managed_left.retain(|o| !deleted.contains(&validate::identity(o)));
        self.record_kinds(planned, live, managed_left);
        let skipped: Vec<String> = planned
            .plan
            .entries
            .iter()
            .filter(|e| e.warnings.iter().any(|w| w.starts_with("prune skipped")))
            .map(|e| format!("{} ({})", describe(&reference(e)), e.warnings.join("; ")))
            .chain(kept)
            .collect();
        if !skipped.is_empty() {
            self.events.tell(
                Some(related.clone()),
                EventType::Warning,
                names::events::PRUNE_SKIPPED,
                &format!("not pruned: {}", skipped.join(", ")),
            );
        }
        self.rs.phase = RevisionPhase::Progressing;
        Ok(true)
    }
}
