//! `ksync app NAME`: one Application in detail — source, sync and health, the desired and the
//! last healthy Revision, the diagnosis when it is not Healthy, conditions, and the managed
//! resources with their health.

use jiff::Timestamp;
use kube::ResourceExt;

use kuvryn_sync::api::application::{Application, RenderType, ResourceRef};
use kuvryn_sync::api::common::HealthStatus;
use kuvryn_sync::api::display::{self, qualified_kind};
use kuvryn_sync::api::revision::{AttemptResult, PlanAction, PlanEntry, Revision, RevisionPhase};
use kuvryn_sync::read::live::Live;
use kuvryn_sync::view::apps::{health_of, sync_name, sync_of, sync_tone};
use kuvryn_sync::view::{
    Cell, Palette, Table, Tone, age_of, attempts_of, conditions_table, fields, health_name, health_tone, phase_name,
    phase_of, phase_tone, short_commit,
};

/// A managed resource and its health.
#[derive(Clone, Debug, PartialEq)]
pub struct ResourceHealth {
    /// The resource.
    pub resource: ResourceRef,
    /// Its health.
    pub health: HealthStatus,
    /// Why it is not Healthy (empty when it is).
    pub message: String,
}

/// The health of the resource of `entry`, by the product's health rules ([`kuvryn_sync::health`]).
/// A missing resource is Degraded, except one the plan still has to create while the Revision
/// (in `phase`) has not been applied: that one is Unknown, "not created yet". A resource that
/// could not be read is Unknown, saying why.
pub fn resource_health(
    entry: &PlanEntry,
    live: &Live,
    phase: RevisionPhase,
    rules: Option<&kuvryn_sync::health::cel::Rules>,
) -> ResourceHealth {
    let applied = matches!(phase, RevisionPhase::Applying | RevisionPhase::Progressing | RevisionPhase::Healthy);
    let (health, message) = match live {
        Live::Found(obj) => {
            let a = match rules {
                Some(r) => kuvryn_sync::health::assess_with(r, obj),
                None => kuvryn_sync::health::assess(obj),
            };
            (a.status, a.message)
        }
        Live::Missing if entry.action == PlanAction::Create && !applied => {
            (HealthStatus::Unknown, "not created yet".to_string())
        }
        Live::Missing => (HealthStatus::Degraded, "missing".to_string()),
        Live::Unreadable(why) => (HealthStatus::Unknown, why.clone()),
    };
    ResourceHealth { resource: entry.resource.clone(), health, message }
}

/// Everything `ksync app NAME` shows.
#[derive(Clone, Copy, Debug)]
pub struct Detail<'a> {
    /// The Application.
    pub app: &'a Application,
    /// Its desired Revision (`status.desiredRevision`), when it exists.
    pub desired: Option<&'a Revision>,
    /// Its last healthy Revision (`status.lastHealthyRevision`), when it exists.
    pub last_healthy: Option<&'a Revision>,
    /// The Revision whose plan listed the managed resources, and their health; None when no
    /// Revision has a plan yet.
    pub resources: Option<(&'a str, &'a [ResourceHealth])>,
}

fn revision_line(name: Option<&str>, rev: Option<&Revision>, palette: Palette) -> String {
    let Some(name) = name else { return kuvryn_sync::view::NONE.to_string() };
    let Some(rev) = rev else { return format!("{name} (not found)") };
    let phase = phase_of(rev);
    let attempts = attempts_of(rev);
    let attempts = match attempts {
        0 => String::new(),
        1 => ", 1 attempt".to_string(),
        n => format!(", {n} attempts"),
    };
    // A rollout in waves says which one it is at.
    let running = rev.status.as_ref().and_then(|s| s.attempts.last()).filter(|a| a.result == AttemptResult::Running);
    let wave = running.and_then(|a| a.wave).map(|w| format!(", at wave {w}")).unwrap_or_default();
    format!(
        "{name} (commit {}, {}{attempts}{wave})",
        short_commit(&rev.spec.source.commit),
        palette.paint(phase_tone(phase), phase_name(phase))
    )
}

/// The detail view.
pub fn render(d: Detail<'_>, now: Timestamp, palette: Palette) -> String {
    let app = d.app;
    let spec = &app.spec;
    let status = app.status.clone().unwrap_or_default();
    let mut rows: Vec<(&str, String)> = vec![
        ("Name", app.name_any()),
        ("Namespace", app.namespace().unwrap_or_default()),
        ("Age", age_of(app.metadata.creation_timestamp.as_ref(), now)),
        ("Repository", spec.source.repository.clone()),
    ];
    if let Some(rev) = &spec.source.revision {
        rows.push(("Source revision", format!("{rev} (overrides the Repository's ref)")));
    }
    rows.push(("Path", spec.source.path.clone()));
    let render = match spec.source.render.type_ {
        None if spec.source.render.helm.is_none() => "chosen from the path (Helm, Kustomize or Yaml)".to_string(),
        Some(RenderType::Yaml) => "Yaml".to_string(),
        Some(RenderType::Kustomize) => "Kustomize".to_string(),
        None | Some(RenderType::Helm) => {
            let release = spec.source.render.helm.as_ref().and_then(|h| h.release_name.clone());
            format!("Helm (release {})", release.unwrap_or_else(|| app.name_any()))
        }
    };
    rows.push(("Render", render));
    rows.push(("Service account", spec.service_account_name.clone()));
    rows.push(("Destination", spec.destination.namespace.clone()));
    let mut policy = vec![if spec.sync.automatic { "automatic" } else { "manual" }];
    if spec.sync.prune {
        policy.push("prune");
    }
    if spec.sync.self_heal {
        policy.push("self-heal");
    }
    let conflicts = match spec.sync.conflict_policy {
        kuvryn_sync::api::application::ConflictPolicy::Fail => "conflicts: fail",
        kuvryn_sync::api::application::ConflictPolicy::Adopt => "conflicts: adopt",
    };
    policy.push(conflicts);
    rows.push(("Sync policy", policy.join(", ")));
    if !spec.depends_on.is_empty() {
        rows.push(("Depends on", spec.depends_on.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join(", ")));
        if let Some(c) = kuvryn_sync::api::conditions::get(
            &status.conditions,
            kuvryn_sync::api::names::conditions::DEPENDENCIES_READY,
        ) && c.status != "True"
        {
            rows.push((
                "Waits for",
                format!("{}: {}", palette.paint(Tone::Warn, &c.reason), kuvryn_sync::view::one_line(&c.message)),
            ));
        }
    }
    if spec.suspend {
        rows.push(("Suspended", palette.paint(Tone::Warn, "true")));
    }
    let sync = sync_of(app);
    let mut sync_text = palette.paint(sync_tone(sync), sync_name(sync));
    if let Some(s) = &status.sync {
        match (&s.revision, &s.commit) {
            (Some(r), Some(c)) => sync_text.push_str(&format!(" (Revision {r}, commit {})", short_commit(c))),
            (Some(r), None) => sync_text.push_str(&format!(" (Revision {r})")),
            (None, Some(c)) => sync_text.push_str(&format!(" (commit {})", short_commit(c))),
            (None, None) => {}
        }
    }
    rows.push(("Sync", sync_text));
    let health = health_of(app);
    rows.push(("Health", palette.paint(health_tone(health), health_name(health))));
    rows.push(("Desired Revision", revision_line(status.desired_revision.as_deref(), d.desired, palette)));
    if let Some(f) = d.desired.and_then(|r| r.status.as_ref()).and_then(|s| s.failure.as_ref()) {
        rows.push(("Failure", format!("{}: {}", palette.paint(Tone::Bad, &f.reason), f.message)));
    }
    rows.push(("Last healthy", revision_line(status.last_healthy_revision.as_deref(), d.last_healthy, palette)));
    let mut out = fields(&rows, "");

    if health != HealthStatus::Healthy
        && (status.diagnosis.is_some() || status.health.as_ref().is_some_and(|h| h.message.is_some()))
    {
        out.push_str("\nDiagnosis:\n");
        if let Some(m) = status.health.as_ref().and_then(|h| h.message.as_deref()) {
            out.push_str(&format!("  {}\n", kuvryn_sync::view::one_line(m)));
        }
        if let Some(diag) = &status.diagnosis {
            out.push_str(&format!(
                "  Root cause: {}: {}: {}\n",
                display::resource(&diag.resource),
                palette.paint(Tone::Bad, &diag.reason),
                kuvryn_sync::view::one_line(&diag.message)
            ));
            for step in &diag.path {
                let missing = if step.missing { " (missing)" } else { "" };
                out.push_str(&format!("    {} -> {}{missing}\n", step.edge, display::resource(&step.resource)));
            }
        }
    }

    if let Some(s) = &status.sync
        && !s.drifted.is_empty()
    {
        out.push_str("\nDrifted:\n");
        for r in &s.drifted {
            out.push_str(&format!("  {}\n", display::resource(r)));
        }
    }

    if !status.conditions.is_empty() {
        out.push_str("\nConditions:\n");
        out.push_str(&conditions_table(&status.conditions, now, palette, "  "));
    }

    match d.resources {
        None => out.push_str("\nResources: none recorded yet (no Revision has a plan)\n"),
        Some((rev, [])) => out.push_str(&format!("\nResources (Revision {rev}): none\n")),
        Some((rev, list)) => {
            out.push_str(&format!("\nResources (Revision {rev}):\n"));
            let mut t = Table::new(["KIND", "NAMESPACE", "NAME", "HEALTH", "MESSAGE"]);
            for r in list {
                t.row(vec![
                    Cell::plain(qualified_kind(&r.resource.group, &r.resource.kind)),
                    Cell::plain(r.resource.namespace.clone().unwrap_or_default()),
                    Cell::plain(r.resource.name.clone()),
                    Cell::new(health_name(r.health), health_tone(r.health)),
                    Cell::plain(r.message.clone()),
                ]);
            }
            out.push_str(&t.render(palette, "  "));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(kind: &str, action: PlanAction) -> PlanEntry {
        serde_json::from_value(json!({"kind": kind, "namespace": "a", "name": "x", "version": "v1",
                                      "action": action}))
        .unwrap()
    }

    #[test]
    fn missing_resources_are_degraded_once_applied() {
        let create = entry("ConfigMap", PlanAction::Create);
        let update = entry("ConfigMap", PlanAction::Update);
        let h = |e: &PlanEntry, live: &Live, p: RevisionPhase| {
            let r = resource_health(e, live, p, None);
            (r.health, r.message)
        };
        assert_eq!(
            h(&create, &Live::Missing, RevisionPhase::AwaitingApproval),
            (HealthStatus::Unknown, "not created yet".into())
        );
        assert_eq!(h(&create, &Live::Missing, RevisionPhase::Progressing), (HealthStatus::Degraded, "missing".into()));
        assert_eq!(h(&update, &Live::Missing, RevisionPhase::Planning), (HealthStatus::Degraded, "missing".into()));
        assert_eq!(
            h(&update, &Live::Unreadable("forbidden".into()), RevisionPhase::Healthy),
            (HealthStatus::Unknown, "forbidden".into())
        );
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}});
        assert_eq!(h(&update, &Live::Found(cm), RevisionPhase::Healthy), (HealthStatus::Healthy, String::new()));
        let stalled = json!({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "x"},
                             "status": {"conditions": [{"type": "Stalled", "status": "True", "reason": "Broken", "message": "no"}]}});
        assert_eq!(h(&update, &Live::Found(stalled), RevisionPhase::Healthy).0, HealthStatus::Degraded);
    }

    /// How a root cause and its path through the graph are shown.
    #[test]
    fn the_diagnosis_shows_the_root_cause_and_its_path() {
        let app: Application = serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "web", "namespace": "a"},
            "spec": {"source": {"repository": "r", "path": "."}, "serviceAccountName": "deployer", "destination": {"namespace": "a"}},
            "status": {
                "health": {"status": "Degraded", "message": "ConfigMap a/flags is missing"},
                "diagnosis": {
                    "resource": {"group": "apps", "kind": "Deployment", "namespace": "a", "name": "web"},
                    "reason": "MissingConfigMap", "message": "ConfigMap flags, used by Deployment web, does not exist",
                    "path": [{"edge": "Uses", "resource": {"kind": "ConfigMap", "namespace": "a", "name": "flags"}, "missing": true}],
                },
            },
        }))
        .unwrap();
        let d = Detail { app: &app, desired: None, last_healthy: None, resources: None };
        let out = render(d, "2026-03-01T12:00:00Z".parse().unwrap(), Palette { enabled: false });
        assert!(
            out.contains(
                "Diagnosis:\n  ConfigMap a/flags is missing\n  Root cause: Deployment.apps a/web: MissingConfigMap: ConfigMap flags, used by Deployment web, does not exist\n    Uses -> ConfigMap a/flags (missing)\n"
            ),
            "{out}"
        );
    }

    #[test]
    fn a_rollout_in_waves_says_which_wave_it_is_at() {
        let rev = |result: &str, wave: Option<i32>| -> Revision {
            serde_json::from_value(json!({
                "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Revision", "metadata": {"name": "web-1", "namespace": "a"},
                "spec": {"application": "web", "source": {"repository": "r", "url": "git://example/r", "commit": "0123456789abcdef", "path": "."},
                         "serviceAccountName": "deployer"},
                "status": {"phase": "Progressing", "attempts": [{"number": 1, "startedAt": "2026-03-01T12:00:00Z",
                           "result": result, "wave": wave}]},
            }))
            .unwrap()
        };
        let line = |r: &Revision| revision_line(Some("web-1"), Some(r), Palette { enabled: false });
        let commit = kuvryn_sync::view::short_commit("0123456789abcdef");
        let plain = format!("web-1 (commit {commit}, Progressing, 1 attempt)");
        assert_eq!(
            line(&rev("Running", Some(2))),
            format!("web-1 (commit {commit}, Progressing, 1 attempt, at wave 2)")
        );
        assert_eq!(line(&rev("Running", None)), plain);
        assert_eq!(line(&rev("Succeeded", Some(2))), plain, "a finished attempt is at no wave");
    }

    /// What an Application waits for, with the message the controller writes.
    #[test]
    fn a_dependent_says_what_it_waits_for() {
        use kuvryn_sync::decisions::dependencies::{Node, verdict};
        let nodes = [("db".to_string(), Node { waiting: Some("it is Progressing".into()), ..Default::default() })];
        let v = verdict(&nodes.into_iter().collect(), "web", &["db".to_string()], |_| None);
        let app: Application = serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "web", "namespace": "a"},
            "spec": {"source": {"repository": "r", "path": "."}, "serviceAccountName": "deployer",
                     "destination": {"namespace": "a"}, "dependsOn": [{"name": "db"}]},
            "status": {"conditions": [{"type": "DependenciesReady", "status": "False", "reason": v.reason(),
                                       "message": v.message(), "lastTransitionTime": "2026-03-01T12:00:00Z"}]},
        }))
        .unwrap();
        let d = Detail { app: &app, desired: None, last_healthy: None, resources: None };
        let out = render(d, "2026-03-01T12:00:00Z".parse().unwrap(), Palette { enabled: false });
        assert!(out.contains("Depends on:        db\n"), "{out}");
        assert!(out.contains("Waits for:         DependencyNotReady: waiting for db (it is Progressing)\n"), "{out}");
    }
}
