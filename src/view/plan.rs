//! `ksync plan NAME`: the stored plan of a Revision, entry by entry with the changed field
//! paths, conflicts, adopted fields and warnings, then a summary line.

use kube::ResourceExt;

use super::{Palette, Tone, fields, phase_name, phase_of, phase_tone};
use crate::api::display;
use crate::api::revision::{MAX_PLAN_ENTRIES, Plan, PlanAction, PlanEntry, PlanSummary, Revision};

/// The symbol, word and colour of an action.
pub fn action_style(a: PlanAction) -> (&'static str, &'static str, Tone) {
    match a {
        PlanAction::Create => ("+", "create", Tone::Good),
        PlanAction::Update => ("~", "update", Tone::Warn),
        PlanAction::Delete => ("-", "delete", Tone::Bad),
        PlanAction::Unchanged => ("=", "unchanged", Tone::Dim),
        PlanAction::Skip => ("!", "skip", Tone::Dim),
    }
}

/// `Plan: 2 to create, 1 to update, 0 to delete, 3 unchanged` (`, 2 hooks` when there are).
pub fn summary_line(s: &PlanSummary) -> String {
    let hooks = match s.hooks {
        0 => String::new(),
        1 => ", 1 hook".to_string(),
        n => format!(", {n} hooks"),
    };
    format!(
        "Plan: {} to create, {} to update, {} to delete, {} unchanged{hooks}",
        s.create, s.update, s.delete, s.unchanged
    )
}

/// One entry: the action, the object with its wave or hook phase, then the changed field paths,
/// conflicts, adopted fields and the warning, each on its own line.
pub fn entry(e: &PlanEntry, palette: Palette) -> String {
    let width = "unchanged".len();
    // Detail lines start under the resource: "  " + symbol + " " + action + "  ".
    let sub = " ".repeat(2 + 1 + 1 + width + 2);
    let mut out = String::new();
    let (symbol, word, tone) = action_style(e.action);
    let wave = match (e.wave, e.hook, e.chart_crd) {
        (0, None, true) => " (chart CRD)".to_string(),
        (w, None, true) => format!(" (chart CRD, wave {w})"),
        (0, None, false) => String::new(),
        (w, None, false) => format!(" (wave {w})"),
        (0, Some(h), _) => format!(" ({h} hook)"),
        (w, Some(h), _) => format!(" ({h} hook, wave {w})"),
    };
    let head = format!("{symbol} {word:<width$}");
    out.push_str(&format!("  {}  {}{wave}\n", palette.paint(tone, &head), display::resource(&e.resource)));
    for f in &e.fields {
        out.push_str(&format!("{sub}{f}\n"));
    }
    for c in &e.conflicts {
        let text = format!("conflict: {} (owned by {})", c.field, c.manager);
        out.push_str(&format!("{sub}{}\n", palette.paint(Tone::Bad, &text)));
    }
    for a in &e.adopted {
        let text = format!("adopted: {} (from {})", a.field, a.manager);
        out.push_str(&format!("{sub}{}\n", palette.paint(Tone::Warn, &text)));
    }
    if let Some(w) = &e.warning {
        let text = format!("warning: {}", super::one_line(w));
        out.push_str(&format!("{sub}{}\n", palette.paint(Tone::Warn, &text)));
    }
    out
}

/// The entries, warnings and summary of a plan.
pub fn entries(plan: &Plan, palette: Palette) -> String {
    let mut out = String::new();
    for e in &plan.entries {
        out.push_str(&entry(e, palette));
    }
    if plan.entries.is_empty() {
        out.push_str("  (no objects)\n");
    }
    if plan.truncated {
        out.push_str(&format!(
            "  ... more entries were not kept: a Revision stores the first {MAX_PLAN_ENTRIES}; the summary counts all\n"
        ));
    }
    if !plan.warnings.is_empty() {
        out.push_str("\nWarnings:\n");
        for w in &plan.warnings {
            out.push_str(&format!("  {}\n", palette.paint(Tone::Warn, &format!("! {}", super::one_line(w)))));
        }
    }
    out.push('\n');
    out.push_str(&palette.paint(Tone::Bold, &summary_line(&plan.summary)));
    out.push('\n');
    out
}

/// The plan view of `rev`: which Revision and source it is, then [`entries`], or why there is
/// no plan yet.
pub fn render(rev: &Revision, palette: Palette) -> String {
    let status = rev.status.clone().unwrap_or_default();
    let phase = phase_of(rev);
    let src = &rev.spec.source;
    let mut commit = src.commit.clone();
    if let Some(r) = &src.reference {
        commit.push_str(&format!(" ({r})"));
    }
    let mut rows: Vec<(&str, String)> = vec![
        ("Application", format!("{}/{}", rev.namespace().unwrap_or_default(), rev.spec.application)),
        ("Revision", format!("{} ({})", rev.name_any(), palette.paint(phase_tone(phase), phase_name(phase)))),
        ("Repository", src.repository.clone()),
        ("Commit", commit),
        ("Path", src.path.clone()),
    ];
    if let Some(p) = &status.plan {
        rows.push(("Digest", p.digest.clone()));
    }
    if let Some(a) = &status.approval {
        rows.push(("Approved by", format!("{} ({})", a.user, a.time.0)));
    }
    if let Some(f) = &status.failure {
        rows.push(("Failure", format!("{}: {}", palette.paint(Tone::Bad, &f.reason), f.message)));
    }
    let mut out = fields(&rows, "");
    out.push('\n');
    match &status.plan {
        Some(plan) => out.push_str(&entries(plan, palette)),
        None => out.push_str(&format!("No plan stored yet (phase {}).\n", phase_name(phase))),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn entries_show_fields_conflicts_and_the_summary() {
        let plan: Plan = serde_json::from_value(json!({
            "digest": "sha256:00",
            "summary": {"create": 1, "update": 1, "unchanged": 1, "delete": 1},
            "entries": [
                {"group": "apiextensions.k8s.io", "kind": "CustomResourceDefinition", "name": "widgets.example.com",
                 "version": "v1", "action": "Create", "wave": -1, "chartCrd": true},
                {"kind": "ConfigMap", "namespace": "a", "name": "new", "version": "v1", "action": "Create"},
                {"group": "apps", "kind": "Deployment", "namespace": "a", "name": "web", "version": "v1",
                 "action": "Update", "wave": 2, "fields": ["spec.replicas"],
                 "conflicts": [{"field": "spec.replicas", "manager": "kubectl-edit"}]},
                {"kind": "Secret", "namespace": "a", "name": "creds", "version": "v1", "action": "Unchanged",
                 "warning": "not pruned: Secrets are high-risk"},
                {"kind": "Namespace", "name": "old", "version": "v1", "action": "Delete"},
            ],
            "warnings": ["adopted 1 field"],
        }))
        .unwrap();
        assert_eq!(
            entries(&plan, Palette::PLAIN),
            "  + create     CustomResourceDefinition.apiextensions.k8s.io widgets.example.com (chart CRD, wave -1)\n\
             \x20 + create     ConfigMap a/new\n\
             \x20 ~ update     Deployment.apps a/web (wave 2)\n\
             \x20              spec.replicas\n\
             \x20              conflict: spec.replicas (owned by kubectl-edit)\n\
             \x20 = unchanged  Secret a/creds\n\
             \x20              warning: not pruned: Secrets are high-risk\n\
             \x20 - delete     Namespace old\n\
             \nWarnings:\n\
             \x20 ! adopted 1 field\n\
             \nPlan: 1 to create, 1 to update, 1 to delete, 1 unchanged\n"
        );
    }
}
