//! The Repositories page (`/repositories`): URL, ref, observed commit, Ready.

use std::fmt::Write as _;

use jiff::Timestamp;
use kube::ResourceExt;

use super::{badge, escape, page, text_or_dash};
use crate::api::repository::Repository;
use crate::view::{age_of, ready_message, short_commit};

/// The whole page: one row per Repository, sorted by namespace and name; `note` (HTML) above.
pub fn render(repos: &[Repository], note: &str, now: Timestamp) -> String {
    let mut sorted: Vec<&Repository> = repos.iter().collect();
    sorted.sort_by_key(|r| (r.namespace(), r.name_any()));
    let mut body = format!(
        "<h1>Repositories</h1>{note}<table id=\"repositories\"><thead><tr><th>Namespace</th><th>Name</th><th>URL</th>\
         <th>Ref</th><th>Commit</th><th>Ready</th><th>Age</th><th>Message</th></tr></thead><tbody>"
    );
    for repo in &sorted {
        let status = repo.status.clone().unwrap_or_default();
        let commit = status.revision.as_ref().map(|r| r.commit.clone()).unwrap_or_default();
        let ready = status
            .conditions
            .iter()
            .find(|c| c.type_ == crate::api::names::conditions::READY)
            .map_or("Unknown", |c| c.status.as_str());
        let _ = write!(
            body,
            "<tr data-name=\"{name}\" data-ready=\"{ready_e}\"><td>{ns}</td><td>{name}</td><td><code>{url}</code></td><td>{reference}</td>\
             <td><code>{commit}</code></td><td>{rb}</td><td>{age}</td><td class=\"msg\">{msg}</td></tr>",
            ns = escape(&repo.namespace().unwrap_or_default()),
            name = escape(&repo.name_any()),
            url = escape(&repo.spec.url),
            reference = text_or_dash(&repo.spec.following()),
            commit = text_or_dash(short_commit(&commit)),
            ready_e = escape(ready),
            rb = badge(ready),
            age = escape(&age_of(repo.metadata.creation_timestamp.as_ref(), now)),
            msg = text_or_dash(&ready_message(&status.conditions)),
        );
    }
    body.push_str("</tbody></table>");
    if sorted.is_empty() {
        body.push_str("<p class=\"empty\">No Repositories found.</p>");
    }
    page("Repositories", &body, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rows_show_url_ref_commit_and_ready_escaped() {
        let repo: Repository = serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Repository",
            "metadata": {"name": "platform", "namespace": "team-a", "creationTimestamp": "2026-03-01T11:00:00Z"},
            "spec": {"url": "https://git.example/<x>.git", "ref": {"branch": "main"}},
            "status": {"revision": {"ref": "refs/heads/main", "commit": "0123456789abcdef0123"},
                       "conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded", "message": "fetched",
                                       "lastTransitionTime": "2026-03-01T11:30:00Z"}]},
        }))
        .unwrap();
        let p = render(&[repo], "", "2026-03-01T12:00:00Z".parse().unwrap());
        assert!(p.contains("https://git.example/&lt;x&gt;.git"), "{p}");
        assert!(p.contains("<code>0123456789ab</code>"), "{p}");
        assert!(p.contains("data-ready=\"True\""), "{p}");
        assert!(render(&[], "", "2026-03-01T12:00:00Z".parse().unwrap()).contains("No Repositories found."));
    }
}
