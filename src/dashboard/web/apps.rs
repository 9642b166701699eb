//! The Applications page (`/`): a filter form and a table, one row per Application, with the
//! columns of `ksync apps -A -o wide` that matter at a glance. The table is also served alone
//! (the fragment the page's script swaps in when Applications change).

use std::fmt::Write as _;

use jiff::Timestamp;
use kube::ResourceExt;

use super::{app_href, badge, escape, page, text_or_dash};
use crate::api::application::Application;
use crate::view::apps::{health_of, sync_name, sync_of};
use crate::view::{age_of, health_name, ready_message, short_commit};

/// The filters, from the query string (`?namespace=&repository=&sync=&health=`); an empty
/// value does not filter.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filters {
    /// Exact namespace.
    pub namespace: String,
    /// Exact `spec.source.repository`.
    pub repository: String,
    /// Sync state name (`Synced`, `OutOfSync`, `Drifted`, `Unknown`).
    pub sync: String,
    /// Health name (`Healthy`, `Progressing`, `Degraded`, `Unknown`).
    pub health: String,
}

impl Filters {
    /// From a raw query string; unknown keys are ignored.
    pub fn parse(query: &str) -> Filters {
        let mut f = Filters::default();
        for (k, v) in form_urlencoded::parse(query.as_bytes()) {
            let v = v.trim().to_string();
            match k.as_ref() {
                "namespace" => f.namespace = v,
                "repository" => f.repository = v,
                "sync" => f.sync = v,
                "health" => f.health = v,
                _ => {}
            }
        }
        f
    }

    /// Whether `app` passes every filter that is set.
    pub fn keeps(&self, app: &Application) -> bool {
        let ok = |want: &str, have: &str| want.is_empty() || want == have;
        ok(&self.namespace, &app.namespace().unwrap_or_default())
            && ok(&self.repository, &app.spec.source.repository)
            && ok(&self.sync, sync_name(sync_of(app)))
            && ok(&self.health, health_name(health_of(app)))
    }

    /// As a query string (for the fragment the script fetches).
    pub fn query(&self) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        for (k, v) in [
            ("namespace", &self.namespace),
            ("repository", &self.repository),
            ("sync", &self.sync),
            ("health", &self.health),
        ] {
            if !v.is_empty() {
                q.append_pair(k, v);
            }
        }
        q.finish()
    }
}

/// The `<table>` of the Applications `filters` keeps, sorted by namespace and name.
pub fn table(apps: &[Application], filters: &Filters, now: Timestamp) -> String {
    let mut sorted: Vec<&Application> = apps.iter().filter(|a| filters.keeps(a)).collect();
    sorted.sort_by_key(|a| (a.namespace(), a.name_any()));
    let mut out = String::from(
        "<table id=\"applications\"><thead><tr><th>Namespace</th><th>Name</th><th>Repository</th>\
         <th>Sync</th><th>Health</th><th>Revision</th><th>Commit</th><th>Age</th><th>Message</th></tr></thead><tbody>",
    );
    for app in &sorted {
        let ns = app.namespace().unwrap_or_default();
        let name = app.name_any();
        let status = app.status.clone().unwrap_or_default();
        let sync = sync_name(sync_of(app));
        let health = health_name(health_of(app));
        let revision = status.sync.as_ref().and_then(|s| s.revision.clone()).or(status.desired_revision.clone());
        let commit = status.sync.as_ref().and_then(|s| s.commit.clone()).unwrap_or_default();
        let mut message = ready_message(&status.conditions);
        if message.is_empty() {
            message = status.health.as_ref().and_then(|h| h.message.clone()).unwrap_or_default();
        }
        let _ = write!(
            out,
            "<tr data-namespace=\"{ns_e}\" data-name=\"{name_e}\" data-health=\"{health}\" data-sync=\"{sync}\">\
             <td>{ns_e}</td><td><a href=\"{href}\">{name_e}</a></td><td>{repo}</td><td>{sb}</td><td>{hb}</td>\
             <td>{rev}</td><td><code>{commit}</code></td><td>{age}</td><td class=\"msg\">{msg}</td></tr>",
            ns_e = escape(&ns),
            name_e = escape(&name),
            href = escape(&app_href(&ns, &name)),
            repo = escape(&app.spec.source.repository),
            sb = badge(sync),
            hb = badge(health),
            rev = text_or_dash(&revision.unwrap_or_default()),
            commit = escape(short_commit(&commit)),
            age = escape(&age_of(app.metadata.creation_timestamp.as_ref(), now)),
            msg = text_or_dash(&message),
        );
    }
    out.push_str("</tbody></table>");
    if sorted.is_empty() {
        let what = if apps.is_empty() { "No Applications found." } else { "No Application matches the filters." };
        let _ = write!(out, "<p class=\"empty\">{what}</p>");
    }
    out
}

fn select(name: &str, label: &str, options: &[String], chosen: &str) -> String {
    let mut out = format!("<label>{label} <select name=\"{name}\"><option value=\"\">all</option>");
    for o in options {
        let sel = if o == chosen { " selected" } else { "" };
        let _ = write!(out, "<option value=\"{v}\"{sel}>{v}</option>", v = escape(o));
    }
    out.push_str("</select></label>");
    out
}

/// The whole page: the filter form (choices from the Applications read), `note` (a notice,
/// HTML, e.g. that only one namespace could be listed) and the table; the script keeps the
/// table current.
pub fn render(apps: &[Application], filters: &Filters, note: &str, now: Timestamp) -> String {
    let mut namespaces: Vec<String> = apps.iter().filter_map(|a| a.namespace()).collect();
    let mut repos: Vec<String> = apps.iter().map(|a| a.spec.source.repository.clone()).collect();
    for (v, want) in [(&mut namespaces, &filters.namespace), (&mut repos, &filters.repository)] {
        if !want.is_empty() {
            v.push(want.clone());
        }
        v.sort();
        v.dedup();
    }
    let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let form = format!(
        "<form class=\"filters\" method=\"get\" action=\"/\">{}{}{}{}<button type=\"submit\">Filter</button> \
         <a href=\"/\">clear</a></form>",
        select("namespace", "Namespace", &namespaces, &filters.namespace),
        select("repository", "Repository", &repos, &filters.repository),
        select("sync", "Sync", &words(&["Synced", "OutOfSync", "Drifted", "Unknown"]), &filters.sync),
        select("health", "Health", &words(&["Healthy", "Progressing", "Degraded", "Unknown"]), &filters.health),
    );
    let body = format!(
        "<h1>Applications</h1>{form}{note}<div id=\"live\" data-fragment=\"/fragments/applications?{q}\">{t}</div>\
         <p class=\"dim\" id=\"live-status\">Live: the table is redrawn when an Application changes.</p>",
        q = escape(&filters.query()),
        t = table(apps, filters, now),
    );
    page("Applications", &body, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn app(ns: &str, name: &str, repo: &str, health: &str) -> Application {
        serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Application",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": "2026-03-01T11:00:00Z"},
            "spec": {"source": {"repository": repo, "path": name}, "serviceAccountName": "deployer",
                     "destination": {"namespace": ns}},
            "status": {"health": {"status": health, "message": "<img src=x onerror=alert(1)>"},
                       "sync": {"status": "Synced", "revision": "r-1", "commit": "0123456789abcdef"}},
        }))
        .unwrap()
    }

    fn now() -> Timestamp {
        "2026-03-01T12:00:00Z".parse().unwrap()
    }

    #[test]
    fn filters_come_from_the_query_and_keep_matching_rows() {
        let f = Filters::parse("namespace=team-a&health=Degraded&other=1&sync=");
        assert_eq!(f, Filters { namespace: "team-a".into(), health: "Degraded".into(), ..Filters::default() });
        assert_eq!(f.query(), "namespace=team-a&health=Degraded");
        let apps = vec![
            app("team-a", "web", "platform", "Degraded"),
            app("team-a", "api", "platform", "Healthy"),
            app("team-b", "web", "platform", "Degraded"),
        ];
        let t = table(&apps, &f, now());
        assert_eq!(t.matches("<tr data-").count(), 1, "{t}");
        assert!(t.contains("data-namespace=\"team-a\" data-name=\"web\" data-health=\"Degraded\""), "{t}");
        let none = table(&apps, &Filters::parse("repository=other"), now());
        assert!(none.contains("No Application matches the filters."));
        assert!(table(&[], &Filters::default(), now()).contains("No Applications found."));
    }

    #[test]
    fn names_and_messages_from_the_cluster_are_escaped() {
        let apps = vec![app("team-a", "<script>alert(1)</script>", "<b>repo</b>", "Degraded")];
        let p = render(&apps, &Filters::parse("repository=%3Cb%3Erepo%3C%2Fb%3E"), "", now());
        assert!(!p.contains("<script>alert"), "{p}");
        assert!(!p.contains("<img"), "{p}");
        assert!(!p.contains("<b>repo"), "{p}");
        assert!(p.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(p.contains("/applications/team-a/%3Cscript%3Ealert%281%29%3C%2Fscript%3E"), "{p}");
        // The chosen filter value is selected in the form, escaped.
        assert!(p.contains("<option value=\"&lt;b&gt;repo&lt;/b&gt;\" selected>"), "{p}");
    }
}
