//! What a Revision records, computed purely: its deterministic name from the Revision identity,
//! the desired-state hash, and the plan bounded to fit on its status.

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{Action, Plan, validate};
use crate::api::application::{Render, ResourceRef};
use crate::api::revision::{self as rev, FieldOwner, PlanAction, PlanEntry, PlanSummary};
use crate::text::bounded;

/// Most bytes the stored plan may take (entries stop being added beyond it; `truncated` says so).
pub const MAX_PLAN_BYTES: usize = 256 * 1024;

/// The identity of a Revision: a new one for each commit, source path, render settings or
/// service account.
#[derive(Clone, Debug, PartialEq)]
pub struct Identity<'a> {
    /// The Application.
    pub application: &'a str,
    /// The commit.
    pub commit: &'a str,
    /// The source path.
    pub path: &'a str,
    /// Render settings.
    pub render: &'a Render,
    /// The service account.
    pub service_account: &'a str,
    /// A digest of the pulled chart dependencies ([`charts_digest`]); empty when none, which
    /// leaves the name as it was before charts were pulled.
    pub charts: &'a str,
}

/// A digest of pulled charts (name, version, archive digest), in order; empty for none.
pub fn charts_digest(charts: &[crate::api::revision::ChartVersion]) -> String {
    if charts.is_empty() {
        return String::new();
    }
    let mut h = Sha256::new();
    for c in charts {
        for part in [&c.name, &c.repository, &c.version, &c.digest] {
            h.update(part.as_bytes());
            h.update(b"\0");
        }
    }
    hex(&h.finalize())
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `<application>-<10 hex digits of sha256(identity)>`: the same identity, the same name.
pub fn name(id: &Identity<'_>) -> String {
    let mut h = Sha256::new();
    for part in [id.application, id.commit, id.path, id.service_account] {
        h.update(part.as_bytes());
        h.update(b"\0");
    }
    h.update(serde_json::to_vec(id.render).unwrap_or_default());
    if !id.charts.is_empty() {
        h.update(b"\0charts\0");
        h.update(id.charts.as_bytes());
    }
    let digest = hex(&h.finalize());
    format!("{}-{}", id.application, &digest[..10])
}

/// `sha256:<hex>` over the desired objects in identity order (canonical JSON: sorted keys), so
/// render order does not matter. A digest never reveals a value.
pub fn desired_state_hash(objects: &[Value]) -> String {
    let mut sorted: Vec<(String, &Value)> = objects.iter().map(|o| (validate::identity(o), o)).collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let mut h = Sha256::new();
    for (_, o) in sorted {
        h.update(serde_json::to_vec(o).unwrap_or_default());
        h.update(b"\n");
    }
    format!("sha256:{}", hex(&h.finalize()))
}

/// The plan as stored on a Revision: counts over every entry, entries in plan order up to
/// [`rev::MAX_PLAN_ENTRIES`] and [`MAX_PLAN_BYTES`], each field list and string bounded.
/// `adopt`: conflicts are fields taken over (`adopted`), else conflicts that block the apply.
pub fn stored(plan: &Plan, adopt: bool) -> rev::Plan {
    let summary = summary(plan);
    let mut entries = Vec::new();
    let mut bytes = 0usize;
    let mut truncated = false;
    for e in &plan.entries {
        if entries.len() == rev::MAX_PLAN_ENTRIES {
            truncated = true;
            break;
        }
        let entry = stored_entry(e, adopt);
        let size = serde_json::to_vec(&entry).map(|v| v.len()).unwrap_or(0);
        if bytes + size > MAX_PLAN_BYTES {
            truncated = true;
            break;
        }
        bytes += size;
        entries.push(entry);
    }
    rev::Plan { digest: plan.digest.clone(), summary, entries, truncated, warnings: Vec::new() }
}

/// The counts of a plan's actions over every entry (hooks and skipped entries counted as hooks).
pub fn summary(plan: &Plan) -> PlanSummary {
    let mut summary = PlanSummary::default();
    for e in &plan.entries {
        if e.is_hook() {
            summary.hooks += 1;
            continue;
        }
        match e.action {
            Action::Skip => summary.hooks += 1,
            Action::Create => summary.create += 1,
            Action::Update => summary.update += 1,
            Action::Unchanged => summary.unchanged += 1,
            Action::Delete => summary.delete += 1,
        }
    }
    summary
}

/// One entry as a Revision stores it: field lists and strings bounded; `adopt`: conflicts are
/// fields taken over (`adopted`), else conflicts that block the apply.
pub fn stored_entry(e: &super::Entry, adopt: bool) -> PlanEntry {
    let owners: Vec<FieldOwner> = e
        .conflicts
        .iter()
        .take(32)
        .map(|c| FieldOwner { field: bounded(&c.field, 512), manager: bounded(&c.manager, 128) })
        .collect();
    let mut fields: Vec<String> = e.changed.iter().take(32).map(|f| bounded(f, 512)).collect();
    if e.more_changed > 0 && fields.len() < 32 {
        fields.push(format!("... and {} more", e.more_changed));
    }
    PlanEntry {
        resource: ResourceRef {
            group: e.group.clone(),
            kind: e.kind.clone(),
            namespace: (!e.namespace.is_empty()).then(|| e.namespace.clone()),
            name: e.name.clone(),
        },
        version: bounded(&e.version, 63),
        action: match e.action {
            Action::Create => PlanAction::Create,
            Action::Update => PlanAction::Update,
            Action::Unchanged => PlanAction::Unchanged,
            Action::Delete => PlanAction::Delete,
            Action::Skip => PlanAction::Skip,
        },
        wave: e.wave,
        hook: e.hook,
        chart_crd: e.chart_crd,
        fields,
        warning: (!e.warnings.is_empty()).then(|| bounded(&e.warnings.join("; "), 1024)),
        conflicts: if adopt { Vec::new() } else { owners.clone() },
        adopted: if adopt { owners } else { Vec::new() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Inputs, build};
    use serde_json::json;

    #[test]
    fn names_follow_the_identity() {
        let render = Render::default();
        let id = Identity {
            application: "web",
            commit: "abc",
            path: "apps/web",
            render: &render,
            service_account: "sa",
            charts: "",
        };
        let n = name(&id);
        assert!(n.starts_with("web-") && n.len() == 14, "{n}");
        assert_eq!(n, name(&id.clone()));
        assert_ne!(n, name(&Identity { commit: "abd", ..id.clone() }));
        assert_ne!(n, name(&Identity { path: "apps/web2", ..id.clone() }));
        assert_ne!(n, name(&Identity { service_account: "other", ..id.clone() }));
        let pulled = |version: &str| crate::api::revision::ChartVersion {
            name: "redis".into(),
            repository: "https://charts.example.com".into(),
            version: version.into(),
            digest: "sha256:00".into(),
        };
        assert_eq!(charts_digest(&[]), "", "no pulled charts: the name as before");
        let (a, b) = (charts_digest(&[pulled("1.2.3")]), charts_digest(&[pulled("1.2.4")]));
        assert_ne!(name(&Identity { charts: &a, ..id.clone() }), name(&Identity { charts: &b, ..id.clone() }));
        assert_ne!(n, name(&Identity { charts: &a, ..id.clone() }));
        let helm = Render { type_: Some(crate::api::application::RenderType::Helm), helm: None };
        assert_ne!(n, name(&Identity { render: &helm, ..id }));
    }

    #[test]
    fn the_desired_state_hash_ignores_order() {
        let a = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "x"}});
        let b = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b", "namespace": "x"}});
        assert_eq!(desired_state_hash(&[a.clone(), b.clone()]), desired_state_hash(&[b.clone(), a.clone()]));
        assert_ne!(desired_state_hash(std::slice::from_ref(&a)), desired_state_hash(&[a, b]));
    }

    /// A 5,000-object render: the stored plan stays bounded and counts everything.
    #[test]
    fn a_huge_plan_is_stored_bounded() {
        let objects: Vec<Value> = (0..5000)
            .map(|i| {
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": format!("config-with-a-long-name-{i:05}-{}", "x".repeat(150)), "namespace": "team-a"},
                       "data": (0..40).map(|k| (format!("key-{k}-{}", "y".repeat(100)), json!("v"))).collect::<serde_json::Map<_, _>>()})
            })
            .collect();
        let live: std::collections::BTreeMap<String, Value> = objects
            .iter()
            .filter(|o| o["metadata"]["name"].as_str().unwrap().contains("-0"))
            .map(|o| {
                let mut l = o.clone();
                l["data"] = json!({});
                (validate::identity(o), l)
            })
            .collect();
        let plan = build(&objects, &Inputs { live, ..Default::default() });
        let stored = stored(&plan, false);
        let size = serde_json::to_vec(&stored).unwrap().len();
        assert!(size <= MAX_PLAN_BYTES + 4096, "{size} bytes");
        assert!(stored.truncated);
        assert!(stored.entries.len() < 5000);
        assert_eq!(
            stored.summary.create + stored.summary.update + stored.summary.unchanged + stored.summary.delete,
            5000
        );
        assert_eq!(stored.digest, plan.digest);
        assert!(stored.entries.iter().all(|e| e.fields.len() <= 32));
    }
}
