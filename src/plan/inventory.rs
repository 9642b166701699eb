//! How managed objects are marked as belonging to an Application, and which Revisions history
//! retention removes. Pure.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::api::names::{annotations, labels};

/// The value of `sync.kuvryn.io/application-id` for the Application `namespace/name`: 20 hex
/// digits of sha256, so it fits a label value (63 characters) whatever the names' lengths.
pub fn application_id(namespace: &str, name: &str) -> String {
    let digest = Sha256::digest(format!("{namespace}/{name}").as_bytes());
    digest.iter().take(10).map(|b| format!("{b:02x}")).collect()
}

/// The label selector that finds every object the Application manages.
pub fn selector(namespace: &str, name: &str) -> String {
    format!("{}={}", labels::APPLICATION_ID, application_id(namespace, name))
}

/// The label selector that finds every object the Application does not manage: without its id
/// label, or with another Application's.
pub fn not_selector(namespace: &str, name: &str) -> String {
    format!("{}!={}", labels::APPLICATION_ID, application_id(namespace, name))
}

/// Add the labels and annotation every managed object carries: `app.kubernetes.io/managed-by`,
/// the Application id, the shard, and `sync.kuvryn.io/application: namespace/name`.
pub fn stamp(obj: &mut Value, namespace: &str, name: &str, shard: &str) {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else { return };
    let labels_v = meta.entry("labels").or_insert_with(|| json!({}));
    if !labels_v.is_object() {
        *labels_v = json!({});
    }
    let l = labels_v.as_object_mut().expect("labels object");
    l.insert(labels::MANAGED_BY.into(), json!(labels::MANAGED_BY_VALUE));
    l.insert(labels::APPLICATION_ID.into(), json!(application_id(namespace, name)));
    l.insert(labels::SHARD.into(), json!(shard));
    let ann_v = meta.entry("annotations").or_insert_with(|| json!({}));
    if !ann_v.is_object() {
        *ann_v = json!({});
    }
    ann_v
        .as_object_mut()
        .expect("annotations object")
        .insert(annotations::APPLICATION.into(), json!(format!("{namespace}/{name}")));
}

/// `desired` with the Pod-template stamp of earlier versions kept where `live` carries it, or
/// `None` when there is nothing to keep.
///
/// # Contract
/// Managed objects are stamped in their own metadata only ([`stamp`]): a Pod template is never
/// stamped, so adopting a workload, or an Application rename, changes nothing Pods are made
/// from and restarts none. Earlier versions put [`labels::POD_OF`] and the
/// `sync.kuvryn.io/application` annotation into the Pod template of every Deployment,
/// StatefulSet and DaemonSet (`apps`) they applied; this field manager owns them there, so an
/// apply without them would remove them, change the template and roll every such workload once.
/// So when the live template of such a workload carries either one and `desired` does not
/// declare it, the live value is copied, verbatim, into `desired` (it is planned, dry-run and
/// applied with it, and never seen as drift); nothing reads it. Workloads never stamped are
/// never given it. Table test: `the_stamp_of_earlier_versions_is_kept_and_never_added`.
pub fn with_kept_pod_stamp(desired: &Value, live: &Value) -> Option<Value> {
    let workload = |o: &Value| {
        o["apiVersion"].as_str().is_some_and(|v| v.starts_with("apps/"))
            && matches!(o["kind"].as_str(), Some("Deployment" | "StatefulSet" | "DaemonSet"))
    };
    if !workload(desired) || !workload(live) {
        return None;
    }
    let live_meta = live.pointer("/spec/template/metadata")?;
    let kept: Vec<(&str, &str, &Value)> = [("labels", labels::POD_OF), ("annotations", annotations::APPLICATION)]
        .into_iter()
        .filter_map(|(field, key)| Some((field, key, live_meta[field].get(key).filter(|v| v.is_string())?)))
        .filter(|(field, key, _)| {
            desired.pointer("/spec/template/metadata").is_none_or(|m| m[*field].get(*key).is_none())
        })
        .collect();
    if kept.is_empty() {
        return None;
    }
    let mut out = desired.clone();
    let template = out.pointer_mut("/spec/template").and_then(Value::as_object_mut)?;
    let meta = template.entry("metadata").or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    for (field, key, value) in kept {
        let map = meta.as_object_mut().expect("metadata object").entry(field).or_insert_with(|| json!({}));
        if !map.is_object() {
            *map = json!({});
        }
        map.as_object_mut().expect("object").insert(key.into(), value.clone());
    }
    Some(out)
}

/// Mark a sync hook as created by the Application `namespace/name`:
/// `app.kubernetes.io/managed-by`, [`labels::HOOK_OF`] with the Application id, and
/// `sync.kuvryn.io/application`. It gets neither the Application id label nor the shard label, so
/// it is never in the managed inventory: never pruned, never checked for drift, never deleted
/// with the Application.
pub fn stamp_hook(obj: &mut Value, namespace: &str, name: &str) {
    stamp(obj, namespace, name, "");
    if let Some(l) = obj["metadata"]["labels"].as_object_mut() {
        l.remove(labels::APPLICATION_ID);
        l.remove(labels::SHARD);
        l.insert(labels::HOOK_OF.into(), json!(application_id(namespace, name)));
    }
}

/// Whether `obj`, read again just before it is deleted, is still the Application
/// `namespace/name`'s to prune or delete.
///
/// Contract: only when it carries the Application's id label and is not opted out of pruning
/// (`sync.kuvryn.io/prune: disabled`). An object relabelled by another Application, stripped of
/// its labels or opted out since the plan was made is never deleted.
pub fn prunable_by(obj: &Value, namespace: &str, name: &str) -> bool {
    let meta = &obj["metadata"];
    meta["labels"][labels::APPLICATION_ID].as_str() == Some(application_id(namespace, name).as_str())
        && meta["annotations"][annotations::PRUNE].as_str() != Some(annotations::PRUNE_DISABLED)
}

/// `Kind namespace/name` (or `Kind name`) of an identity `group/Kind/namespace/name`: how
/// messages name an object.
pub fn describe(id: &str) -> String {
    let mut parts = id.splitn(4, '/');
    let (_group, kind, ns, name) = (
        parts.next(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    crate::api::display::object(kind, Some(ns), name)
}

/// The objects of `live` (by identity) that carry another Application's identity: (identity,
/// that Application as `namespace/name`), in identity order.
///
/// Contract: an object is another Application's when its `sync.kuvryn.io/application`
/// annotation names an Application other than `namespace/name`. Objects without the annotation
/// (made by hand or by another tool) are nobody's: their fields are governed by the conflict
/// policy. Whether the other Application still exists is the caller's to check.
pub fn claimed_by_others(
    live: &std::collections::BTreeMap<String, Value>,
    namespace: &str,
    name: &str,
) -> Vec<(String, String)> {
    let ours = format!("{namespace}/{name}");
    live.iter()
        .filter_map(|(id, o)| {
            let owner = o["metadata"]["annotations"][annotations::APPLICATION].as_str()?;
            (!owner.is_empty() && owner != ours).then(|| (id.clone(), owner.to_string()))
        })
        .collect()
}

/// How the Application an object's annotation names was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// It exists.
    Found,
    /// It does not exist.
    Missing,
    /// It is in another namespace, which the reading Application's service account may not read.
    Unreadable,
}

/// Whether an object carrying another Application's identity is refused ([`claimed_by_others`]).
///
/// # Contract
/// The annotation is written by whoever may write the object, so the answer must not tell them
/// whether an Application they cannot see exists: an Application of the object's reader's own
/// namespace is looked up as the controller, one of another namespace as the reading
/// Application's service account, and one that account may not read is refused as if it
/// existed (with the same message). Only a missing Application frees the object (its objects
/// were orphaned and may be taken over). Table test: `claims_tell_nothing_of_unreadable_namespaces`.
pub fn claim(lookup: Lookup) -> bool {
    match lookup {
        Lookup::Found | Lookup::Unreadable => true,
        Lookup::Missing => false,
    }
}

/// One Revision as history retention sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kept {
    /// Its name.
    pub name: String,
    /// When it was created (sub-second: `sync.kuvryn.io/created-at`, else
    /// `metadata.creationTimestamp`).
    pub created: jiff::Timestamp,
    /// Held by a rollback (never deleted, not counted).
    pub held: bool,
}

/// The Revisions to delete so that at most `limit` remain besides held ones and `current`
/// (the desired Revision, never deleted): oldest first.
pub fn expired(revisions: &[Kept], current: &str, limit: usize) -> Vec<String> {
    let mut counted: Vec<&Kept> = revisions.iter().filter(|r| !r.held).collect();
    counted.sort_by(|a, b| (&a.created, &a.name).cmp(&(&b.created, &b.name)));
    let mut excess = counted.len().saturating_sub(limit.max(1));
    let mut out = Vec::new();
    for r in counted {
        if excess == 0 {
            break;
        }
        if r.name == current {
            continue;
        }
        out.push(r.name.clone());
        excess -= 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_tell_nothing_of_unreadable_namespaces() {
        for (lookup, refused) in [(Lookup::Found, true), (Lookup::Unreadable, true), (Lookup::Missing, false)] {
            assert_eq!(claim(lookup), refused, "{lookup:?}");
        }
    }

    #[test]
    fn messages_name_an_object_as_kind_and_namespace_slash_name() {
        // (identity, described)
        let cases = [
            ("/ConfigMap/team-a/web-config", "ConfigMap team-a/web-config"),
            ("apps/Deployment/team-a/web", "Deployment team-a/web"),
            ("rbac.authorization.k8s.io/ClusterRole//viewer", "ClusterRole viewer"),
            ("apps/Deployment/team-a/a/b", "Deployment team-a/a/b"),
        ];
        for (id, want) in cases {
            assert_eq!(describe(id), want, "{id}");
        }
    }

    /// Hooks stay out of the inventory: not found by its selector, never prunable.
    #[test]
    fn hooks_are_not_inventory() {
        let mut hook = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "migrate",
                              "labels": {labels::APPLICATION_ID: "forged"}}});
        stamp_hook(&mut hook, "shop", "web");
        let l = &hook["metadata"]["labels"];
        assert!(l[labels::APPLICATION_ID].is_null() && l[labels::SHARD].is_null(), "{l}");
        assert_eq!(l[labels::HOOK_OF], application_id("shop", "web"));
        assert!(!prunable_by(&hook, "shop", "web"));
        assert!(crate::plan::hooks::ours(&hook, &application_id("shop", "web")));
    }

    fn kept(name: &str, created: &str, held: bool) -> Kept {
        Kept { name: name.into(), created: created.parse().unwrap(), held }
    }

    #[test]
    fn application_id_is_a_short_stable_label_value() {
        let id = application_id("team-a", "web");
        assert_eq!(id.len(), 20);
        assert_eq!(id, application_id("team-a", "web"));
        assert_ne!(id, application_id("team-a", "web2"));
        assert_ne!(application_id("a-b", "c"), application_id("a", "b-c"));
        let long = "x".repeat(253);
        assert_eq!(application_id(&long, &long).len(), 20);
    }

    #[test]
    fn only_objects_still_labelled_for_the_application_and_not_opted_out_are_prunable() {
        let id = application_id("ns", "app");
        let other = application_id("ns", "other");
        let obj =
            |labels: Value, annotations: Value| json!({"metadata": {"labels": labels, "annotations": annotations}});
        let cases = [
            ("labelled, no annotations", obj(json!({labels::APPLICATION_ID: id}), json!(null)), true),
            (
                "labelled, prune enabled",
                obj(json!({labels::APPLICATION_ID: id}), json!({annotations::PRUNE: "enabled"})),
                true,
            ),
            (
                "labelled, opted out",
                obj(json!({labels::APPLICATION_ID: id}), json!({annotations::PRUNE: annotations::PRUNE_DISABLED})),
                false,
            ),
            ("another Application's", obj(json!({labels::APPLICATION_ID: other}), json!(null)), false),
            ("labels removed", obj(json!(null), json!(null)), false),
            ("no metadata", json!({}), false),
        ];
        for (what, o, want) in cases {
            assert_eq!(prunable_by(&o, "ns", "app"), want, "{what}");
        }
    }

    #[test]
    fn objects_carrying_another_applications_identity_are_claimed() {
        let with = |owner: Value| json!({"metadata": {"annotations": {annotations::APPLICATION: owner}}});
        let live: std::collections::BTreeMap<String, Value> = [
            ("/ConfigMap/ns/ours", with(json!("ns/app"))),
            ("/ConfigMap/ns/theirs", with(json!("ns/other"))),
            ("/ConfigMap/ns/other-namespace", with(json!("team-b/app"))),
            ("/ConfigMap/ns/by-hand", json!({"metadata": {"annotations": {"note": "x"}}})),
            ("/ConfigMap/ns/bare", json!({"metadata": {}})),
            ("/ConfigMap/ns/empty", with(json!(""))),
            ("/ConfigMap/ns/not-a-string", with(json!(3))),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(
            claimed_by_others(&live, "ns", "app"),
            vec![
                ("/ConfigMap/ns/other-namespace".to_string(), "team-b/app".to_string()),
                ("/ConfigMap/ns/theirs".to_string(), "ns/other".to_string()),
            ]
        );
    }

    #[test]
    fn stamp_adds_labels_and_annotation_and_keeps_the_rest() {
        let mut o = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "labels": {"team": "x"}, "annotations": null}});
        stamp(&mut o, "ns", "app", "3");
        assert_eq!(o["metadata"]["labels"]["team"], "x");
        assert_eq!(o["metadata"]["labels"][labels::MANAGED_BY], "kuvryn-sync");
        assert_eq!(o["metadata"]["labels"][labels::SHARD], "3");
        assert_eq!(o["metadata"]["labels"][labels::APPLICATION_ID], application_id("ns", "app"));
        assert_eq!(o["metadata"]["annotations"][annotations::APPLICATION], "ns/app");
        assert_eq!(selector("ns", "app"), format!("sync.kuvryn.io/application-id={}", application_id("ns", "app")));
        assert_eq!(
            not_selector("ns", "app"),
            format!("sync.kuvryn.io/application-id!={}", application_id("ns", "app"))
        );
    }

    #[test]
    fn workload_pod_templates_are_never_stamped() {
        for (kind, api_version, template) in [
            ("Deployment", "apps/v1", json!({"metadata": {"labels": {"app": "w"}}})),
            ("StatefulSet", "apps/v1", json!({"spec": {}})),
            ("DaemonSet", "apps/v1", json!({"metadata": {"labels": null, "annotations": "x"}})),
            ("Job", "batch/v1", json!({"metadata": {}})),
            ("Deployment", "example.com/v1", json!({"metadata": {}})),
        ] {
            let mut o = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "w"}, "spec": {"template": template}});
            stamp(&mut o, "ns", "app", "1");
            assert_eq!(o["spec"]["template"], template, "{kind} {api_version}: the template is as desired");
            assert_eq!(o["metadata"]["labels"][labels::APPLICATION_ID], application_id("ns", "app"), "{kind}");
        }
    }

    #[test]
    fn the_stamp_of_earlier_versions_is_kept_and_never_added() {
        let old = application_id("ns", "old");
        let workload = |kind: &str, api_version: &str, template_meta: Value| {
            json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "w", "namespace": "ns"},
                   "spec": {"template": {"metadata": template_meta, "spec": {"containers": []}}}})
        };
        let desired_meta = json!({"labels": {"app": "w"}});
        let stamped = json!({"labels": {"app": "w", labels::POD_OF: old}, "annotations": {annotations::APPLICATION: "ns/old", "note": "n"}});
        let with_both =
            json!({"labels": {"app": "w", labels::POD_OF: old}, "annotations": {annotations::APPLICATION: "ns/old"}});
        // (what, desired, live, the desired template metadata to apply; None: desired as it is)
        let cases = [
            (
                "stamped by an earlier version: kept verbatim",
                workload("Deployment", "apps/v1", desired_meta.clone()),
                workload("Deployment", "apps/v1", stamped.clone()),
                Some(with_both.clone()),
            ),
            (
                "StatefulSet",
                workload("StatefulSet", "apps/v1", desired_meta.clone()),
                workload("StatefulSet", "apps/v1", stamped.clone()),
                Some(with_both.clone()),
            ),
            (
                "only the label",
                workload("DaemonSet", "apps/v1", desired_meta.clone()),
                workload("DaemonSet", "apps/v1", json!({"labels": {labels::POD_OF: old}})),
                Some(json!({"labels": {"app": "w", labels::POD_OF: old}})),
            ),
            (
                "desired without template metadata",
                workload("Deployment", "apps/v1", Value::Null),
                workload("Deployment", "apps/v1", json!({"annotations": {annotations::APPLICATION: "ns/old"}})),
                Some(json!({"annotations": {annotations::APPLICATION: "ns/old"}})),
            ),
            (
                "never stamped (adopted from another tool)",
                workload("Deployment", "apps/v1", desired_meta.clone()),
                workload(
                    "Deployment",
                    "apps/v1",
                    json!({"labels": {"app": "w", "argocd.argoproj.io/instance": "web"}}),
                ),
                None,
            ),
            (
                "desired declares its own value",
                workload(
                    "Deployment",
                    "apps/v1",
                    json!({"labels": {labels::POD_OF: "mine"}, "annotations": {annotations::APPLICATION: "a/b"}}),
                ),
                workload("Deployment", "apps/v1", stamped.clone()),
                None,
            ),
            (
                "a Job",
                workload("Job", "batch/v1", desired_meta.clone()),
                workload("Job", "batch/v1", stamped.clone()),
                None,
            ),
            (
                "another group",
                workload("Deployment", "example.com/v1", desired_meta.clone()),
                workload("Deployment", "example.com/v1", stamped.clone()),
                None,
            ),
            (
                "not a string",
                workload("Deployment", "apps/v1", desired_meta.clone()),
                workload("Deployment", "apps/v1", json!({"labels": {labels::POD_OF: 3}})),
                None,
            ),
        ];
        for (what, desired, live, want) in cases {
            let got = with_kept_pod_stamp(&desired, &live);
            assert_eq!(got.as_ref().map(|o| o["spec"]["template"]["metadata"].clone()), want, "{what}");
            if let Some(o) = got {
                let (mut a, mut b) = (o.clone(), desired.clone());
                a["spec"]["template"]["metadata"] = Value::Null;
                b["spec"]["template"]["metadata"] = Value::Null;
                assert_eq!(a, b, "{what}: nothing else changes");
            }
        }
    }

    #[test]
    fn retention_deletes_the_oldest_beyond_the_limit() {
        let revs = vec![
            kept("r3", "2026-01-03T00:00:00Z", false),
            kept("r1", "2026-01-01T00:00:00Z", false),
            kept("r2", "2026-01-02T00:00:00Z", false),
            kept("r4", "2026-01-04T00:00:00Z", false),
        ];
        assert_eq!(expired(&revs, "r4", 2), vec!["r1", "r2"]);
        assert_eq!(expired(&revs, "r4", 10), Vec::<String>::new());
        // The desired Revision is never deleted, even when it is the oldest.
        assert_eq!(expired(&revs, "r1", 2), vec!["r2", "r3"]);
        // Sub-second order wins over names.
        let same_second = vec![kept("b", "2026-01-01T00:00:00.2Z", false), kept("a", "2026-01-01T00:00:00.9Z", false)];
        assert_eq!(expired(&same_second, "a", 1), vec!["b"]);
    }

    #[test]
    fn held_revisions_are_neither_deleted_nor_counted() {
        let revs = vec![
            kept("old-held", "2026-01-01T00:00:00Z", true),
            kept("r2", "2026-01-02T00:00:00Z", false),
            kept("r3", "2026-01-03T00:00:00Z", false),
        ];
        assert_eq!(expired(&revs, "r3", 2), Vec::<String>::new());
        assert_eq!(expired(&revs, "r3", 1), vec!["r2"]);
    }
}
