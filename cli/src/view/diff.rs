//! `ksync diff`: what deploying a revision would do, as the plan in apply order with a unified
//! diff under each object that would change. Pure: the preview comes in read and planned
//! ([`crate::commands::diff`]).
//!
//! Contract (table-tested below):
//! - both sides of a diff are normalized the same way: the fields the API server manages
//!   (`metadata.managedFields`, `resourceVersion`, `uid`, `creationTimestamp`, `generation`,
//!   `selfLink`) and `status` are removed, so a diff shows only what the apply changes;
//! - a Secret's `data` and `stringData` values are never shown: each is `***`, or
//!   `*** (before)` and `*** (after)` when it changes; its last-applied-configuration
//!   annotation is masked the same way;
//! - every other line is redacted of the preview's secret values (Helm `valuesFrom` Secrets
//!   and desired Secrets) with [`kuvryn_sync::redact::redact`], whatever object carries them.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use kuvryn_sync::api::display;
use kuvryn_sync::api::revision::{PlanAction, PlanEntry, PlanSummary};
use kuvryn_sync::view::plan::{entry, summary_line};
use kuvryn_sync::view::{Cell, Palette, Table, Tone, fields, one_line};

/// What was previewed: a revision of the Repository, or a local directory.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Source {
    /// The Repository.
    pub repository: String,
    /// The branch, tag or commit asked for (or the Application's own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// The commit it resolved to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The local checkout (`--path`) rendered instead of a commit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local: Option<String>,
    /// The path in it (`spec.source.path`).
    pub path: String,
}

/// One entry of the plan, with the object before and after (either absent for a create or a
/// delete, both for an unchanged object or a hook that is not shown).
#[derive(Clone, Debug, PartialEq)]
pub struct Previewed {
    /// The plan entry, as a Revision would store it.
    pub entry: PlanEntry,
    /// The live object.
    pub before: Option<Value>,
    /// The object as the apply would leave it (the server's dry run), or the desired object.
    pub after: Option<Value>,
}

/// What deploying would do to one Application.
#[derive(Clone, Debug, PartialEq)]
pub struct Preview {
    /// `namespace/name`.
    pub application: String,
    /// What was rendered.
    pub source: Source,
    /// Every entry, in apply order (deletes last).
    pub entries: Vec<Previewed>,
    /// Counts per action.
    pub summary: PlanSummary,
    /// Values never shown.
    pub secrets: Vec<String>,
}

impl Preview {
    /// Whether applying would change an object (hooks aside: they run each rollout).
    pub fn changes(&self) -> bool {
        self.summary.create + self.summary.update + self.summary.delete > 0
    }
}

/// The outcome of one Application: its preview, or why there is none.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Rendered and planned.
    Preview(Preview),
    /// What failed (the message is redacted already).
    Failed {
        /// `namespace/name`.
        application: String,
        /// Why.
        message: String,
    },
}

impl Outcome {
    /// `namespace/name`.
    pub fn application(&self) -> &str {
        match self {
            Outcome::Preview(p) => &p.application,
            Outcome::Failed { application, .. } => application,
        }
    }
}

/// Server-managed metadata removed before comparing.
const SERVER_MANAGED: [&str; 6] =
    ["managedFields", "resourceVersion", "uid", "creationTimestamp", "generation", "selfLink"];

/// The annotation `kubectl apply` keeps a copy of the object in (a Secret's values too).
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// `obj` without what the API server manages and without `status`.
pub fn normalize(obj: &Value) -> Value {
    let mut out = obj.clone();
    if let Some(map) = out.as_object_mut() {
        map.remove("status");
        if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
            for f in SERVER_MANAGED {
                meta.remove(f);
            }
            if meta.get("annotations").and_then(Value::as_object).is_some_and(Map::is_empty) {
                meta.remove("annotations");
            }
        }
    }
    out
}

fn is_secret(obj: &Value) -> bool {
    obj["apiVersion"] == "v1" && obj["kind"] == "Secret"
}

/// A Secret's values masked on both sides (see the module contract); other objects unchanged.
pub fn mask_secrets(before: Option<&Value>, after: Option<&Value>) -> (Option<Value>, Option<Value>) {
    let secret = before.is_some_and(is_secret) || after.is_some_and(is_secret);
    let (mut b, mut a) = (before.cloned(), after.cloned());
    if !secret {
        return (b, a);
    }
    let value_at = |o: &Option<Value>, field: &str, key: &str| -> Option<Value> {
        match field {
            "annotations" => o.as_ref()?["metadata"]["annotations"].get(key).cloned(),
            _ => o.as_ref()?.get(field)?.get(key).cloned(),
        }
    };
    let keys = |o: &Option<Value>, field: &str| -> BTreeSet<String> {
        let map = match (o, field) {
            (Some(v), "annotations") => v["metadata"]["annotations"].as_object(),
            (Some(v), f) => v.get(f).and_then(Value::as_object),
            (None, _) => None,
        };
        map.map(|m| m.keys().cloned().collect()).unwrap_or_default()
    };
    for field in ["data", "stringData", "annotations"] {
        let mut all = keys(&b, field);
        all.extend(keys(&a, field));
        for key in all {
            if field == "annotations" && key != LAST_APPLIED {
                continue;
            }
            let (old, new) = (value_at(&b, field, &key), value_at(&a, field, &key));
            let (old_mask, new_mask) = if old.is_some() && new.is_some() && old != new {
                ("*** (before)", "*** (after)")
            } else {
                ("***", "***")
            };
            for (side, mask, present) in [(&mut b, old_mask, old.is_some()), (&mut a, new_mask, new.is_some())] {
                let Some(obj) = side.as_mut().filter(|_| present) else { continue };
                let slot = if field == "annotations" {
                    &mut obj["metadata"]["annotations"][key.as_str()]
                } else {
                    &mut obj[field][key.as_str()]
                };
                *slot = Value::String(mask.to_string());
            }
        }
    }
    (b, a)
}

/// The unified diff of `before` and `after` (normalized, Secrets masked, redacted of
/// `secrets`), labelled with `what`; empty when they are the same.
pub fn object_diff(what: &str, before: Option<&Value>, after: Option<&Value>, secrets: &[String]) -> String {
    let (b, a) = (before.map(normalize), after.map(normalize));
    let (b, a) = mask_secrets(b.as_ref(), a.as_ref());
    let yaml = |v: &Option<Value>| match v {
        Some(v) => kuvryn_sync::yaml::to_string(v).unwrap_or_else(|e| format!("# not printable: {e}\n")),
        None => String::new(),
    };
    let (old, new) = (yaml(&b), yaml(&a));
    if old == new {
        return String::new();
    }
    let old_label = if b.is_some() { format!("{what} (live)") } else { "/dev/null".to_string() };
    let new_label = if a.is_some() { format!("{what} (after apply)") } else { "/dev/null".to_string() };
    let text = similar::TextDiff::from_lines(&old, &new)
        .unified_diff()
        .context_radius(3)
        .header(&old_label, &new_label)
        .to_string();
    kuvryn_sync::redact::redact(&text, secrets.iter().map(String::as_str))
}

/// `diff` with its lines coloured (removed red, added green, hunk headers dim) and indented.
fn paint_diff(diff: &str, indent: &str, palette: Palette) -> String {
    let mut out = String::new();
    for line in diff.lines() {
        let tone = if line.starts_with("+++") || line.starts_with("---") {
            Tone::Bold
        } else if line.starts_with('+') {
            Tone::Good
        } else if line.starts_with('-') {
            Tone::Bad
        } else if line.starts_with("@@") {
            Tone::Dim
        } else {
            Tone::Plain
        };
        out.push_str(&format!("{indent}{}\n", palette.paint(tone, line)));
    }
    out
}

fn source_rows(p: &Preview) -> Vec<(&'static str, String)> {
    let s = &p.source;
    let mut rows = vec![("Application", p.application.clone()), ("Repository", s.repository.clone())];
    match (&s.local, &s.commit) {
        (Some(dir), _) => rows.push(("Local", format!("{dir} (not pushed)"))),
        (None, Some(c)) => rows.push((
            "Commit",
            match &s.reference {
                Some(r) if r != c => format!("{c} ({r})"),
                _ => c.clone(),
            },
        )),
        (None, None) => {}
    }
    rows.push(("Path", s.path.clone()));
    rows
}

/// The text of one preview: where it comes from, each entry in apply order with its diff, and
/// the summary.
pub fn render(p: &Preview, palette: Palette) -> String {
    let mut out = fields(&source_rows(p), "");
    out.push('\n');
    for e in &p.entries {
        out.push_str(&entry(&e.entry, palette));
        if matches!(e.entry.action, PlanAction::Create | PlanAction::Update | PlanAction::Delete) {
            let what = display::resource(&e.entry.resource);
            let diff = object_diff(&what, e.before.as_ref(), e.after.as_ref(), &p.secrets);
            out.push_str(&paint_diff(&diff, "      ", palette));
        }
    }
    if p.entries.is_empty() {
        out.push_str("  (no objects)\n");
    }
    out.push('\n');
    out.push_str(&palette.paint(Tone::Bold, &summary_line(&p.summary)));
    out.push('\n');
    if !p.changes() {
        out.push_str("Nothing would change.\n");
    }
    out
}

/// One row per Application: the counts, and whether it would change or failed.
pub fn summary_table(outcomes: &[Outcome], palette: Palette) -> String {
    let mut t = Table::new(["APPLICATION", "CREATE", "UPDATE", "DELETE", "UNCHANGED", "RESULT"]);
    for o in outcomes {
        match o {
            Outcome::Preview(p) => {
                let s = &p.summary;
                let result = if p.changes() {
                    Cell::new("would change", Tone::Warn)
                } else {
                    Cell::new("no change", Tone::Good)
                };
                t.row(vec![
                    p.application.clone().into(),
                    s.create.to_string().into(),
                    s.update.to_string().into(),
                    s.delete.to_string().into(),
                    s.unchanged.to_string().into(),
                    result,
                ]);
            }
            Outcome::Failed { application, message } => {
                t.row(vec![
                    application.clone().into(),
                    "".into(),
                    "".into(),
                    "".into(),
                    "".into(),
                    Cell::new(format!("error: {}", one_line(message)), Tone::Bad),
                ]);
            }
        }
    }
    t.render(palette, "")
}

/// `-o json`: the preview with each entry's diff as text (no colour).
pub fn json(o: &Outcome) -> Value {
    match o {
        Outcome::Failed { application, message } => json!({"application": application, "error": message}),
        Outcome::Preview(p) => {
            let entries: Vec<Value> = p
                .entries
                .iter()
                .map(|e| {
                    let mut v = serde_json::to_value(&e.entry).unwrap_or(Value::Null);
                    if matches!(e.entry.action, PlanAction::Create | PlanAction::Update | PlanAction::Delete) {
                        let what = display::resource(&e.entry.resource);
                        v["diff"] = Value::String(object_diff(&what, e.before.as_ref(), e.after.as_ref(), &p.secrets));
                    }
                    v
                })
                .collect();
            json!({
                "application": p.application,
                "source": p.source,
                "changes": p.changes(),
                "summary": p.summary,
                "entries": entries,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kuvryn_sync::api::application::ResourceRef;

    fn cm(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings", "namespace": "a", "uid": "u-1", "resourceVersion": "7",
                "creationTimestamp": "2026-12-04T10:00:00Z", "managedFields": [{"manager": "ksync"}]},
            "data": data})
    }

    fn secret(data: Value, last_applied: Option<&str>) -> Value {
        let mut s = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": "a"},
            "data": data});
        if let Some(l) = last_applied {
            s["metadata"]["annotations"] = json!({LAST_APPLIED: l, "team": "x"});
        }
        s
    }

    #[test]
    fn server_managed_fields_and_status_are_not_compared() {
        let live = {
            let mut l = cm(json!({"color": "blue"}));
            l["status"] = json!({"x": 1});
            l
        };
        let mut after = cm(json!({"color": "blue"}));
        after["metadata"]["resourceVersion"] = json!("8");
        after["metadata"]["managedFields"] = json!([{"manager": "other"}]);
        assert_eq!(object_diff("ConfigMap a/settings", Some(&live), Some(&after), &[]), "");
        let n = normalize(&live);
        assert!(n.get("status").is_none());
        for f in SERVER_MANAGED {
            assert!(n["metadata"].get(f).is_none(), "{f}");
        }
    }

    #[test]
    fn a_change_is_a_unified_diff_labelled_with_the_object() {
        let diff = object_diff(
            "ConfigMap a/settings",
            Some(&cm(json!({"color": "blue", "size": "m"}))),
            Some(&cm(json!({"color": "green", "size": "m"}))),
            &[],
        );
        assert!(
            diff.starts_with("--- ConfigMap a/settings (live)\n+++ ConfigMap a/settings (after apply)\n@@"),
            "{diff}"
        );
        assert!(diff.contains("\n-  color: blue\n+  color: green\n"), "{diff}");
        assert!(diff.contains("\n   size: m\n"), "unchanged context is kept: {diff}");
        let created = object_diff("ConfigMap a/settings", None, Some(&cm(json!({"a": "1"}))), &[]);
        assert!(created.starts_with("--- /dev/null\n+++ ConfigMap a/settings (after apply)\n"), "{created}");
        assert!(!created.lines().skip(2).any(|l| l.starts_with('-')), "{created}");
        let deleted = object_diff("ConfigMap a/settings", Some(&cm(json!({"a": "1"}))), None, &[]);
        assert!(deleted.starts_with("--- ConfigMap a/settings (live)\n+++ /dev/null\n"), "{deleted}");
    }

    /// (before, after, what each side's `data.password` shows)
    #[test]
    fn secret_values_are_never_shown() {
        let (old, new) = ("c2VjcmV0LW9uZQ==", "c2VjcmV0LXR3bw==");
        type Case = (Option<Value>, Option<Value>, Option<&'static str>, Option<&'static str>);
        let cases: [Case; 4] = [
            (
                Some(secret(json!({"password": old}), None)),
                Some(secret(json!({"password": new}), None)),
                Some("*** (before)"),
                Some("*** (after)"),
            ),
            (
                Some(secret(json!({"password": old}), None)),
                Some(secret(json!({"password": old}), None)),
                Some("***"),
                Some("***"),
            ),
            (None, Some(secret(json!({"password": new}), None)), None, Some("***")),
            (Some(secret(json!({"password": old}), None)), None, Some("***"), None),
        ];
        for (before, after, want_before, want_after) in cases {
            let (b, a) = mask_secrets(before.as_ref(), after.as_ref());
            assert_eq!(b.as_ref().and_then(|b| b["data"]["password"].as_str()), want_before);
            assert_eq!(a.as_ref().and_then(|a| a["data"]["password"].as_str()), want_after);
            let diff = object_diff("Secret a/creds", before.as_ref(), after.as_ref(), &[]);
            assert!(!diff.contains(old) && !diff.contains(new), "{diff}");
        }
        // The copy kubectl keeps in an annotation is masked; other annotations are not.
        let live = secret(json!({"password": old}), Some(&format!("{{\"data\":{{\"password\":\"{old}\"}}}}")));
        let (b, _) = mask_secrets(Some(&live), None);
        let b = b.unwrap();
        assert_eq!(b["metadata"]["annotations"][LAST_APPLIED], "***");
        assert_eq!(b["metadata"]["annotations"]["team"], "x");
        // A ConfigMap is left alone by the mask, but a known secret value is redacted anywhere.
        let leaked = object_diff(
            "ConfigMap a/settings",
            None,
            Some(&cm(json!({"token": "from-a-values-secret"}))),
            &["from-a-values-secret".to_string()],
        );
        assert!(!leaked.contains("from-a-values-secret") && leaked.contains(kuvryn_sync::redact::REDACTED), "{leaked}");
    }

    fn preview(entries: Vec<Previewed>, summary: PlanSummary) -> Preview {
        Preview {
            application: "a/web".into(),
            source: Source {
                repository: "platform".into(),
                reference: Some("feature".into()),
                commit: Some("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b".into()),
                local: None,
                path: "web".into(),
            },
            entries,
            summary,
            secrets: Vec::new(),
        }
    }

    fn entry_of(action: PlanAction, name: &str, wave: i32) -> PlanEntry {
        PlanEntry {
            resource: ResourceRef {
                group: String::new(),
                kind: "ConfigMap".into(),
                namespace: Some("a".into()),
                name: name.into(),
            },
            version: "v1".into(),
            action,
            wave,
            ..Default::default()
        }
    }

    #[test]
    fn the_preview_lists_entries_in_order_with_their_diffs() {
        let mut update = entry_of(PlanAction::Update, "settings", 1);
        update.fields = vec!["data.color".into()];
        let mut kept = entry_of(PlanAction::Unchanged, "old", 0);
        kept.warning = Some("not pruned: prune is off".into());
        let p = preview(
            vec![
                Previewed {
                    entry: update,
                    before: Some(cm(json!({"color": "blue"}))),
                    after: Some(cm(json!({"color": "green"}))),
                },
                Previewed { entry: kept, before: None, after: None },
            ],
            PlanSummary { update: 1, unchanged: 1, ..Default::default() },
        );
        let text = render(&p, Palette::PLAIN);
        assert_eq!(
            text,
            "Application:  a/web\n\
             Repository:   platform\n\
             Commit:       9f86d081884c7d659a2feaa0c55ad015a3bf4f1b (feature)\n\
             Path:         web\n\
             \n\
             \x20 ~ update     ConfigMap a/settings (wave 1)\n\
             \x20              data.color\n\
             \x20     --- ConfigMap a/settings (live)\n\
             \x20     +++ ConfigMap a/settings (after apply)\n\
             \x20     @@ -1,6 +1,6 @@\n\
             \x20      apiVersion: v1\n\
             \x20      data:\n\
             \x20     -  color: blue\n\
             \x20     +  color: green\n\
             \x20      kind: ConfigMap\n\
             \x20      metadata:\n\
             \x20        name: settings\n\
             \x20 = unchanged  ConfigMap a/old\n\
             \x20              warning: not pruned: prune is off\n\
             \n\
             Plan: 0 to create, 1 to update, 0 to delete, 1 unchanged\n"
        );
        assert!(p.changes());
        let j = json(&Outcome::Preview(p.clone()));
        assert_eq!(j["changes"], true);
        assert!(j["entries"][0]["diff"].as_str().unwrap().contains("+  color: green"));
        assert!(j["entries"][1].get("diff").is_none(), "unchanged entries carry no diff");
        let none = preview(Vec::new(), PlanSummary::default());
        assert!(
            render(&none, Palette::PLAIN)
                .ends_with("Plan: 0 to create, 0 to update, 0 to delete, 0 unchanged\nNothing would change.\n")
        );
    }

    #[test]
    fn the_summary_table_has_a_row_per_application() {
        let ok = preview(Vec::new(), PlanSummary { unchanged: 3, ..Default::default() });
        let mut changed = preview(Vec::new(), PlanSummary { create: 1, unchanged: 2, ..Default::default() });
        changed.application = "a/api".into();
        let outcomes = vec![
            Outcome::Preview(ok),
            Outcome::Preview(changed),
            Outcome::Failed { application: "a/broken".into(), message: "render failed:\nno chart".into() },
        ];
        assert_eq!(
            summary_table(&outcomes, Palette::PLAIN),
            "APPLICATION   CREATE   UPDATE   DELETE   UNCHANGED   RESULT\n\
             a/web         0        0        0        3           no change\n\
             a/api         1        0        0        2           would change\n\
             a/broken      -        -        -        -           error: render failed: no chart\n"
        );
    }
}
