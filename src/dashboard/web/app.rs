//! The page of one Application (`/applications/{ns}/{name}`): status, conditions, health and
//! its root cause (`status.diagnosis`), drifted objects, the plan of the desired Revision (as
//! `ksync plan` prints it) and the history of Revisions with attempts and approvals (as
//! `ksync history` prints it).

use std::fmt::Write as _;

use jiff::Timestamp;
use kube::ResourceExt;

use super::{app_href, badge, escape, fields, page, text_or_dash};
use crate::api::application::Application;
use crate::api::display;
use crate::api::revision::Revision;
use crate::view::apps::{health_of, sync_name, sync_of};
use crate::view::{Palette, age_of, health_name, history, plan};

/// What the page shows besides the Application.
pub struct Detail<'a> {
    /// The Application.
    pub app: &'a Application,
    /// Its desired Revision, if it could be read.
    pub desired: Option<&'a Revision>,
    /// Why the desired Revision could not be read (a 403), shown in place of the plan.
    pub desired_error: Option<&'a str>,
    /// Its Revisions (any order; shown newest first).
    pub revisions: &'a [Revision],
    /// Why the Revisions could not be listed (a 403), shown in their place.
    pub revisions_error: Option<&'a str>,
}

/// The whole page.
pub fn render(d: &Detail<'_>, now: Timestamp) -> String {
    let app = d.app;
    let ns = app.namespace().unwrap_or_default();
    let name = app.name_any();
    let status = app.status.clone().unwrap_or_default();
    let sync = sync_name(sync_of(app));
    let health = health_name(health_of(app));
    let src = &app.spec.source;
    let mut body = format!(
        "<p class=\"crumbs\"><a href=\"/\">Applications</a> / {ns_e}</p><h1>{name_e}</h1>\
         <p><a class=\"button\" href=\"{graph}\">Resource graph</a></p>",
        ns_e = escape(&ns),
        name_e = escape(&name),
        graph = escape(&format!("{}/graph", app_href(&ns, &name))),
    );
    let sync_status = status.sync.clone().unwrap_or_default();
    body.push_str(&fields(&[
        ("Sync", format!("<span id=\"sync\">{}</span>", badge(sync))),
        ("Health", format!("<span id=\"health\">{}</span>", badge(health))),
        ("Health message", text_or_dash(status.health.as_ref().and_then(|h| h.message.as_deref()).unwrap_or(""))),
        ("Repository", escape(&src.repository)),
        ("Path", text_or_dash(&src.path)),
        ("Revision", text_or_dash(sync_status.revision.as_deref().unwrap_or(""))),
        ("Commit", format!("<code>{}</code>", text_or_dash(sync_status.commit.as_deref().unwrap_or("")))),
        ("Desired Revision", text_or_dash(status.desired_revision.as_deref().unwrap_or(""))),
        ("Last healthy Revision", text_or_dash(status.last_healthy_revision.as_deref().unwrap_or(""))),
        ("Age", escape(&age_of(app.metadata.creation_timestamp.as_ref(), now))),
    ]));

    body.push_str("<h2>Root cause</h2>");
    match &status.diagnosis {
        Some(diag) => {
            let _ = write!(
                body,
                "<div class=\"rootcause\" id=\"root-cause\"><p><strong>{}</strong>: <span class=\"bad\">{}</span>: {}</p>",
                escape(&display::resource(&diag.resource)),
                escape(&diag.reason),
                escape(&diag.message)
            );
            if !diag.path.is_empty() {
                body.push_str("<ol class=\"path\">");
                let _ = write!(body, "<li>{}</li>", escape(&display::resource(&diag.resource)));
                for step in &diag.path {
                    let missing = if step.missing { " <span class=\"bad\">(missing)</span>" } else { "" };
                    let _ = write!(
                        body,
                        "<li>{} → {}{missing}</li>",
                        escape(&step.edge),
                        escape(&display::resource(&step.resource))
                    );
                }
                body.push_str("</ol>");
            }
            body.push_str("</div>");
        }
        None => body.push_str("<p class=\"dim\">No diagnosis: nothing unhealthy was traced.</p>"),
    }

    body.push_str("<h2>Conditions</h2>");
    if status.conditions.is_empty() {
        body.push_str("<p class=\"dim\">None yet.</p>");
    } else {
        body.push_str(
            "<table><thead><tr><th>Type</th><th>Status</th><th>Reason</th><th>Age</th><th>Message</th></tr></thead><tbody>",
        );
        for c in &status.conditions {
            let _ = write!(
                body,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"msg\">{}</td></tr>",
                escape(&c.type_),
                badge(&c.status),
                escape(&c.reason),
                escape(&age_of(Some(&c.last_transition_time), now)),
                text_or_dash(&c.message)
            );
        }
        body.push_str("</tbody></table>");
    }

    body.push_str("<h2>Drifted objects</h2>");
    if sync_status.drifted.is_empty() {
        body.push_str("<p class=\"dim\">None.</p>");
    } else {
        body.push_str("<ul id=\"drifted\">");
        for r in &sync_status.drifted {
            let _ = write!(body, "<li>{}</li>", escape(&display::resource(r)));
        }
        body.push_str("</ul>");
    }

    body.push_str("<h2>Plan</h2>");
    match (d.desired_error, d.desired) {
        (Some(e), _) => {
            let _ = write!(body, "<p class=\"error\">{}</p>", escape(e));
        }
        (None, Some(rev)) => {
            let _ = write!(body, "<pre id=\"plan\">{}</pre>", escape(&plan::render(rev, Palette::PLAIN)));
        }
        (None, None) => body.push_str("<p class=\"dim\">No desired Revision yet.</p>"),
    }

    body.push_str("<h2>History</h2>");
    match (d.revisions_error, history::table(d.revisions, Some(app), now, Palette::PLAIN)) {
        (Some(e), _) => {
            let _ = write!(body, "<p class=\"error\">{}</p>", escape(e));
        }
        (None, t) if t.is_empty() => body.push_str("<p class=\"dim\">No Revisions.</p>"),
        (None, t) => {
            let _ = write!(body, "<pre id=\"history\">{}</pre>", escape(&t));
        }
    }
    page(&format!("{ns}/{name}"), &body, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_root_cause_and_drift_are_shown_escaped() {
        let app: Application = serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "<script>x</script>", "namespace": "team-a", "creationTimestamp": "2026-03-01T11:00:00Z"},
            "spec": {"source": {"repository": "platform", "path": "web"}, "serviceAccountName": "deployer",
                     "destination": {"namespace": "team-a"}},
            "status": {
                "health": {"status": "Degraded", "message": "ConfigMap team-a/<flags> is missing"},
                "sync": {"status": "Drifted", "drifted": [{"group": "", "kind": "ConfigMap", "namespace": "team-a", "name": "x<y"}]},
                "diagnosis": {"resource": {"group": "apps", "kind": "Deployment", "namespace": "team-a", "name": "web"},
                              "reason": "MissingConfigMap", "message": "ConfigMap team-a/flags does not exist",
                              "path": [{"edge": "Mounts", "resource": {"group": "", "kind": "ConfigMap", "namespace": "team-a", "name": "flags"}, "missing": true}]},
                "conditions": [{"type": "Ready", "status": "False", "reason": "Degraded", "message": "<i>bad</i>",
                                "lastTransitionTime": "2026-03-01T11:30:00Z"}],
            },
        }))
        .unwrap();
        let p = render(
            &Detail {
                app: &app,
                desired: None,
                desired_error: Some("revisions is <forbidden>"),
                revisions: &[],
                revisions_error: None,
            },
            "2026-03-01T12:00:00Z".parse().unwrap(),
        );
        assert!(!p.contains("<script>x"), "{p}");
        assert!(!p.contains("<i>bad"), "{p}");
        assert!(p.contains("MissingConfigMap"));
        assert!(p.contains("<p class=\"error\">revisions is &lt;forbidden&gt;</p>"), "{p}");
        assert!(p.contains("Mounts → ConfigMap team-a/flags <span class=\"bad\">(missing)</span>"), "{p}");
        assert!(p.contains("ConfigMap team-a/x&lt;y"), "{p}");
        assert!(p.contains("/applications/team-a/%3Cscript%3Ex%3C%2Fscript%3E/graph"), "{p}");
    }
}
