//! The pure decision of the Repository controller: given the Applications declared in Git and
//! those that exist, what to apply and what to delete, and what blocks the change.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

use crate::api::names;
use crate::source::discovery::Declared;

/// An existing Application, as the decision needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct Existing {
    /// Name.
    pub name: String,
    /// Its `sync.kuvryn.io/repository` label.
    pub repository: Option<String>,
    /// Its `sync.kuvryn.io/discovered-from` annotation.
    pub discovered_from: Option<String>,
}

/// What to do for one commit.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct DiscoveryPlan {
    /// Application objects to apply (Server-Side Apply), in name order.
    pub apply: Vec<Value>,
    /// Names of Applications this Repository created that Git no longer declares.
    pub delete: Vec<String>,
    /// Names that exist but were created some other way: the commit is refused.
    pub conflicts: Vec<String>,
}

/// Decide. `repository` and `namespace` are the Repository's.
pub fn plan(repository: &str, namespace: &str, declared: &[Declared], existing: &[Existing]) -> DiscoveryPlan {
    let by_name: BTreeMap<&str, &Existing> = existing.iter().map(|e| (e.name.as_str(), e)).collect();
    let mut out = DiscoveryPlan::default();
    let mut declared: Vec<&Declared> = declared.iter().collect();
    declared.sort_by(|a, b| a.name.cmp(&b.name));
    for d in &declared {
        if let Some(e) = by_name.get(d.name.as_str())
            && e.repository.as_deref() != Some(repository)
        {
            let owner = match &e.repository {
                Some(other) => format!("Repository {other}"),
                None => "applied directly, not from Git".to_string(),
            };
            out.conflicts.push(format!("{} ({owner})", d.name));
            continue;
        }
        out.apply.push(object(repository, namespace, d));
    }
    let mut delete: Vec<String> = existing
        .iter()
        .filter(|e| e.repository.as_deref() == Some(repository) && e.discovered_from.is_some())
        .filter(|e| !declared.iter().any(|d| d.name == e.name))
        .map(|e| e.name.clone())
        .collect();
    delete.sort();
    out.delete = delete;
    out
}

/// The Application object to apply for a declared one.
pub fn object(repository: &str, namespace: &str, d: &Declared) -> Value {
    let mut labels = d.labels.clone();
    labels.insert(names::labels::REPOSITORY.to_string(), repository.to_string());
    let mut annotations = d.annotations.clone();
    annotations.insert(names::annotations::DISCOVERED_FROM.to_string(), d.file.clone());
    json!({
        "apiVersion": names::API_VERSION,
        "kind": "Application",
        "metadata": {"name": d.name, "namespace": namespace, "labels": labels, "annotations": annotations},
        "spec": d.spec,
    })
}

/// What of a discovered Application the Repository controller owns and reacts to: its spec
/// (through `metadata.generation`), labels and annotations, and whether it is being deleted.
/// Not its status, finalizers or `resourceVersion`: an Application's own progress changes
/// those many times per rollout, and re-syncing the Repository for each change would
/// re-apply every Application it declares.
pub fn fingerprint(meta: &ObjectMeta) -> String {
    json!({
        "generation": meta.generation,
        "labels": meta.labels,
        "annotations": meta.annotations,
        "deleting": meta.deletion_timestamp.is_some(),
    })
    .to_string()
}

/// An Application as the Repository controller last applied it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    body: Value,
    left: String,
}

impl Applied {
    /// `body` was applied, and the API server answered with an object of metadata `result`.
    pub fn new(body: &Value, result: &ObjectMeta) -> Applied {
        Applied { body: body.clone(), left: fingerprint(result) }
    }

    /// Whether applying `body` again to the object whose metadata is `live` would change
    /// nothing, so the apply (and its dry run) can be skipped.
    ///
    /// # Contract
    ///
    /// True only if `body` is exactly what was applied and nothing the Repository owns changed
    /// since: `live` has the generation, labels and annotations the apply left, and is not
    /// being deleted. A person's edit of the spec (a new generation), a label or annotation
    /// changed by anyone, or another body (a new commit) makes it false, and the apply runs.
    pub fn unchanged(&self, body: &Value, live: &ObjectMeta) -> bool {
        live.deletion_timestamp.is_none() && &self.body == body && self.left == fingerprint(live)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn declared(name: &str, file: &str) -> Declared {
        Declared {
            name: name.into(),
            file: file.into(),
            labels: Default::default(),
            annotations: Default::default(),
            spec: json!({"source": {"repository": "r", "path": name}}),
        }
    }

    fn existing(name: &str, repo: Option<&str>) -> Existing {
        Existing {
            name: name.into(),
            repository: repo.map(String::from),
            discovered_from: repo.map(|_| ".ksync.yaml".to_string()),
        }
    }

    #[test]
    fn creates_updates_and_deletes_only_its_own() {
        let d = [declared("web", ".ksync.yaml"), declared("api", "teams/.ksync.yaml")];
        let e = [
            existing("web", Some("platform")),
            existing("old", Some("platform")),
            existing("manual", None),
            existing("theirs", Some("other")),
        ];
        let p = plan("platform", "team-a", &d, &e);
        let names: Vec<&str> = p.apply.iter().map(|o| o["metadata"]["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["api", "web"]);
        assert_eq!(p.delete, ["old"]);
        assert!(p.conflicts.is_empty());
        assert_eq!(p.apply[0]["metadata"]["labels"][names::labels::REPOSITORY], "platform");
        assert_eq!(p.apply[0]["metadata"]["annotations"][names::annotations::DISCOVERED_FROM], "teams/.ksync.yaml");
        assert_eq!(p.apply[0]["metadata"]["namespace"], "team-a");
    }

    #[test]
    fn never_takes_over_an_application_it_did_not_create() {
        let d = [declared("manual", ".ksync.yaml"), declared("theirs", ".ksync.yaml")];
        let e = [existing("manual", None), existing("theirs", Some("other"))];
        let p = plan("platform", "team-a", &d, &e);
        assert_eq!(p.conflicts, ["manual (applied directly, not from Git)", "theirs (Repository other)"]);
        assert!(p.apply.is_empty());
        assert!(p.delete.is_empty());
    }

    #[test]
    fn a_labelled_application_without_the_annotation_is_not_deleted() {
        let e = [Existing { name: "hand".into(), repository: Some("platform".into()), discovered_from: None }];
        assert!(plan("platform", "ns", &[], &e).delete.is_empty());
    }

    #[test]
    fn an_apply_is_skipped_only_when_nothing_git_owns_changed() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let body = object("r", "ns", &declared("a", ".ksync.yaml"));
        let applied_meta = ObjectMeta {
            generation: Some(3),
            resource_version: Some("10".into()),
            labels: Some([(names::labels::REPOSITORY.to_string(), "r".to_string())].into()),
            annotations: Some([(names::annotations::DISCOVERED_FROM.to_string(), ".ksync.yaml".to_string())].into()),
            ..Default::default()
        };
        let applied = Applied::new(&body, &applied_meta);
        let with = |f: &dyn Fn(&mut ObjectMeta)| {
            let mut m = applied_meta.clone();
            f(&mut m);
            m
        };
        let mut other_body = body.clone();
        other_body["spec"]["path"] = json!("elsewhere");
        let cases: Vec<(&str, &Value, ObjectMeta, bool)> = vec![
            ("as applied", &body, applied_meta.clone(), true),
            (
                "its status and finalizers moved on",
                &body,
                with(&|m| {
                    m.resource_version = Some("99".into());
                    m.finalizers = Some(vec!["f".into()]);
                }),
                true,
            ),
            ("a new commit's body", &other_body, applied_meta.clone(), false),
            ("its spec edited by hand", &body, with(&|m| m.generation = Some(4)), false),
            ("a label removed", &body, with(&|m| m.labels = None), false),
            (
                "an annotation added",
                &body,
                with(&|m| {
                    m.annotations.get_or_insert_default().insert("x".into(), "y".into());
                }),
                false,
            ),
            ("being deleted", &body, with(&|m| m.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH))), false),
        ];
        for (what, b, live, want) in cases {
            assert_eq!(applied.unchanged(b, &live), want, "{what}");
        }
    }
}
