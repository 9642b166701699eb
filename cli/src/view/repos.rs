//! `ksync repos`: one row per Repository.

use jiff::Timestamp;
use kube::ResourceExt;

use kuvryn_sync::api::repository::Repository;
use kuvryn_sync::view::{Cell, Palette, Table, age_of, ready_cell, ready_message, short_commit};

/// Which columns to print.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Columns {
    /// Add NAMESPACE first (`-A`).
    pub namespace: bool,
    /// `-o wide`: add APPLICATIONS (how many the `.ksync.yaml` files declare), SUSPENDED and
    /// MESSAGE (the `Ready` condition's message).
    pub wide: bool,
}

/// The table: NAMESPACE (with `-A`), NAME, URL, REF (as the spec writes it, a commit shortened),
/// COMMIT (the observed one), READY, AGE, [wide: APPLICATIONS, SUSPENDED, MESSAGE], sorted by namespace and
/// name. Empty when there are no Repositories.
pub fn table(repos: &[Repository], columns: Columns, now: Timestamp, palette: Palette) -> String {
    if repos.is_empty() {
        return String::new();
    }
    let mut header = Vec::new();
    if columns.namespace {
        header.push("NAMESPACE");
    }
    header.extend(["NAME", "URL", "REF", "COMMIT", "READY", "AGE"]);
    if columns.wide {
        header.extend(["APPLICATIONS", "SUSPENDED", "MESSAGE"]);
    }
    let mut t = Table::new(header);
    let mut sorted: Vec<&Repository> = repos.iter().collect();
    sorted.sort_by_key(|r| (r.namespace(), r.name_any()));
    for repo in sorted {
        let status = repo.status.clone().unwrap_or_default();
        let mut row = Vec::new();
        if columns.namespace {
            row.push(Cell::plain(repo.namespace().unwrap_or_default()));
        }
        let commit = status.revision.as_ref().map(|r| r.commit.clone()).unwrap_or_default();
        row.extend([
            Cell::plain(repo.name_any()),
            Cell::plain(repo.spec.url.clone()),
            Cell::plain(match repo.spec.reference.as_ref() {
                Some(r) if r.branch.is_none() && r.tag.is_none() => {
                    r.commit.as_deref().map(short_commit).unwrap_or_default().to_string()
                }
                _ => repo.spec.following(),
            }),
            // A chart Repository's revision is the chart version followed (never shortened).
            Cell::plain(if repo.spec.is_chart() { commit.clone() } else { short_commit(&commit).to_string() }),
            ready_cell(&status.conditions),
            Cell::plain(age_of(repo.metadata.creation_timestamp.as_ref(), now)),
        ]);
        if columns.wide {
            row.extend([
                Cell::plain(status.applications.as_ref().map(|a| a.discovered.to_string()).unwrap_or_default()),
                Cell::plain(repo.spec.suspend.to_string()),
                Cell::plain(ready_message(&status.conditions)),
            ]);
        }
        t.row(row);
    }
    t.render(palette, "")
}
