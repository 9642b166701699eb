//! The admission webhook's decisions, pure: which Revision a request must be checked against,
//! whether that Revision is an acceptable rollback target, and which recorded annotations the
//! stored Application carries (recorded from the request, restored from the old object, or
//! removed). Table-tested from `testdata/webhook/record.yaml`.
//!
//! Guarantees:
//! - `rollback-requested-by`, `rollback-requested-at` and `rollback-target-hash` are written only
//!   here, from the authenticated request, when the request's identity (`rollback-to`,
//!   `rollback-target-revision`, `rollback-kind`) differs from the old object's (a CREATE has no
//!   old object, so a request on a new Application is recorded too). On every other change they
//!   are restored from the old object: a forged value is put back, a removed one is put back, and
//!   one the old object lacked is removed.
//! - A request is removed by removing its identity: with none of `rollback-to`,
//!   `rollback-target-revision` and `rollback-kind` left, the recorded annotations are removed
//!   too (nothing remains to vouch for).
//! - `approved-by` and `approved-at` likewise follow `approved-plan`: recorded when it changes
//!   (removed when it is removed), restored from the old object otherwise.
//! - Every other annotation is left exactly as the request has it.

use std::collections::BTreeMap;

use crate::api::names::annotations as a;
use crate::api::revision::Revision;

/// An object's `metadata.annotations`.
pub type Annotations = BTreeMap<String, String>;

/// The authenticated request: who and when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requester {
    /// `request.userInfo.username`.
    pub username: String,
    /// The time the webhook handled the request, RFC 3339 (seconds, UTC).
    pub at: String,
}

/// The annotations naming a rollback request; a change to any of them is a new request.
pub const REQUEST_IDENTITY: [&str; 3] = [a::ROLLBACK_TO, a::ROLLBACK_TARGET_REVISION, a::ROLLBACK_KIND];
/// The annotations the webhook records for a rollback request.
pub const REQUEST_RECORD: [&str; 3] = [a::ROLLBACK_REQUESTED_BY, a::ROLLBACK_REQUESTED_AT, a::ROLLBACK_TARGET_HASH];
/// The annotations the webhook records for an approval.
pub const APPROVAL_RECORD: [&str; 2] = [a::APPROVED_BY, a::APPROVED_AT];

fn identity(m: Option<&Annotations>) -> [Option<&str>; 3] {
    REQUEST_IDENTITY.map(|k| m.and_then(|m| m.get(k)).map(String::as_str))
}

/// Whether `new` carries a rollback request whose identity differs from `old`'s (`old` is
/// `None` on CREATE): the request is then recorded anew.
pub fn request_changed(old: Option<&Annotations>, new: &Annotations) -> bool {
    let now = identity(Some(new));
    now.iter().any(Option::is_some) && now != identity(old)
}

/// The Revision a request must be checked against: `rollback-target-revision` of a request that
/// changed. An unchanged request is not checked again (its Revision may since have been
/// deleted by retention, and the Application must stay writable).
pub fn target_to_check<'a>(old: Option<&Annotations>, new: &'a Annotations) -> Option<&'a str> {
    if request_changed(old, new) { new.get(a::ROLLBACK_TARGET_REVISION).map(String::as_str) } else { None }
}

/// Why a chosen Revision is refused (the denial message), or its
/// `status.deployedDesiredStateHash` (`None` when it has none: no `rollback-target-hash` is
/// recorded then). `revision` is the Revision named `target` in the Application's namespace, if
/// it exists.
pub fn check_target(
    application: &str,
    rollback_to: Option<&str>,
    target: &str,
    revision: Option<&Revision>,
) -> Result<Option<String>, String> {
    use kube::ResourceExt as _;
    let what = format!("{} {target:?}", a::ROLLBACK_TARGET_REVISION);
    let Some(rev) = revision else {
        return Err(format!("{what}: Revision {target:?} does not exist in this namespace"));
    };
    let label = rev.labels().get(crate::api::names::labels::APPLICATION).map(String::as_str);
    let owners: Vec<&str> = rev
        .owner_references()
        .iter()
        .filter(|o| o.kind == "Application" && o.api_version.starts_with(crate::api::names::GROUP))
        .map(|o| o.name.as_str())
        .collect();
    let belongs_elsewhere = rev.spec.application != application
        || label.is_some_and(|l| l != application)
        || owners.iter().any(|o| *o != application);
    if belongs_elsewhere {
        let other = if rev.spec.application != application {
            rev.spec.application.as_str()
        } else {
            label.filter(|l| *l != application).or_else(|| owners.into_iter().find(|o| *o != application)).unwrap_or("")
        };
        return Err(format!(
            "{what}: Revision {target:?} belongs to Application {other:?}, not to Application {application:?}"
        ));
    }
    let Some(to) = rollback_to else {
        return Err(format!("{what}: the request names no {} (the commit the Revision must be of)", a::ROLLBACK_TO));
    };
    if rev.spec.source.commit != to {
        return Err(format!(
            "{what}: Revision {target:?} is of commit {:?}, not of {} {to:?}",
            rev.spec.source.commit,
            a::ROLLBACK_TO
        ));
    }
    Ok(rev.status.as_ref().and_then(|s| s.deployed_desired_state_hash.clone()))
}

/// The denial of a rollback request naming a Revision the requester may not read: one answer,
/// whatever the Revision, so that it tells nothing of a namespace's Revisions to someone who
/// may not read them.
pub fn unreadable_target(namespace: &str) -> String {
    format!(
        "{}: you may not read Revisions in namespace {namespace:?}; a rollback names a Revision you can read (ksync history)",
        a::ROLLBACK_TARGET_REVISION
    )
}

/// The annotations the stored Application must carry: `new` with the recorded annotations
/// recorded from `who`, restored from `old`, or removed (see the module's guarantees).
/// `target_hash` is the `rollback-target-hash` of a changed request (ignored otherwise).
pub fn record(old: Option<&Annotations>, new: &Annotations, who: &Requester, target_hash: Option<&str>) -> Annotations {
    let mut out = new.clone();
    let restore = |out: &mut Annotations, keys: &[&str]| {
        for k in keys {
            match old.and_then(|o| o.get(*k)) {
                Some(v) => out.insert((*k).to_string(), v.clone()),
                None => out.remove(*k),
            };
        }
    };
    let remove = |out: &mut Annotations, keys: &[&str]| {
        for k in keys {
            out.remove(*k);
        }
    };

    if identity(Some(new)).iter().all(Option::is_none) {
        remove(&mut out, &REQUEST_RECORD);
    } else if request_changed(old, new) {
        out.insert(a::ROLLBACK_REQUESTED_BY.into(), who.username.clone());
        out.insert(a::ROLLBACK_REQUESTED_AT.into(), who.at.clone());
        match target_hash.filter(|_| new.contains_key(a::ROLLBACK_TARGET_REVISION)) {
            Some(h) => out.insert(a::ROLLBACK_TARGET_HASH.into(), h.to_string()),
            None => out.remove(a::ROLLBACK_TARGET_HASH),
        };
    } else {
        restore(&mut out, &REQUEST_RECORD);
    }

    let plan = |m: Option<&Annotations>| m.and_then(|m| m.get(a::APPROVED_PLAN)).cloned();
    match (plan(Some(new)), plan(old)) {
        (None, _) => remove(&mut out, &APPROVAL_RECORD),
        (Some(now), before) if Some(&now) != before.as_ref() => {
            out.insert(a::APPROVED_BY.into(), who.username.clone());
            out.insert(a::APPROVED_AT.into(), who.at.clone());
        }
        _ => restore(&mut out, &APPROVAL_RECORD),
    }
    out
}

/// The manager, as the webhook recognises it in a request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Manager {
    /// The manager's own username, when it runs as a service account
    /// (`system:serviceaccount:...`). A manager run with a person's credentials (`ksync dev`, a
    /// kubeconfig on a laptop) cannot be told from that person by name, so it is `None` then.
    pub username: Option<String>,
    /// The field managers only the manager writes Applications with.
    pub field_managers: Vec<String>,
}

/// Why a request must be refused because the manager itself would make a person's decision with
/// it, or `None`.
///
/// # Contract
/// A request makes a decision when it sets or changes `approved-plan` to a non-empty value (a
/// new approval), or makes a new rollback request (its identity changed, [`request_changed`])
/// that is not a failure policy's (`rollback-kind: automatic` without `rollback-target-revision`,
/// which the controller writes itself and which approves nothing). Such a request is refused when
/// its author is the manager: its own username ([`Manager::username`]), or one of its field
/// managers (the Repository controller applies what `.ksync.yaml` declares with one). Removing
/// an approval or a request, and every other change, is never refused here. Table test:
/// `the_manager_never_decides`.
pub fn manager_decides(
    old: Option<&Annotations>,
    new: &Annotations,
    username: &str,
    field_manager: Option<&str>,
    manager: &Manager,
) -> Option<String> {
    let by_manager = manager.username.as_deref() == Some(username)
        || field_manager.is_some_and(|f| manager.field_managers.iter().any(|m| m == f));
    if !by_manager {
        return None;
    }
    fn plan(m: Option<&Annotations>) -> Option<&str> {
        m.and_then(|m| m.get(a::APPROVED_PLAN)).map(|p| p.trim()).filter(|p| !p.is_empty())
    }
    if let Some(p) = plan(Some(new))
        && plan(old) != Some(p)
    {
        return Some(format!(
            "{} is a person's approval (ksync sync): the manager's own identity cannot give one (is it declared in .ksync.yaml?)",
            a::APPROVED_PLAN
        ));
    }
    let automatic = new.get(a::ROLLBACK_KIND).map(String::as_str) == Some(a::ROLLBACK_KIND_AUTOMATIC)
        && !new.contains_key(a::ROLLBACK_TARGET_REVISION);
    if request_changed(old, new) && !automatic {
        return Some(format!(
            "{}: a manual rollback is a person's request (ksync rollback): the manager's own identity cannot make one (is it declared in .ksync.yaml?)",
            a::ROLLBACK_TO
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manager_never_decides() {
        let m = |pairs: &[(&str, &str)]| -> Annotations {
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        let manager = Manager {
            username: Some("system:serviceaccount:kuvryn-system:kuvryn-sync".into()),
            field_managers: vec!["kuvryn-sync-repository".into()],
        };
        let sa = "system:serviceaccount:kuvryn-system:kuvryn-sync";
        let approve = m(&[(a::APPROVED_PLAN, "sha256:p")]);
        let manual = m(&[(a::ROLLBACK_TO, "abcdef0"), (a::ROLLBACK_TARGET_REVISION, "web-abcdef0")]);
        let automatic = m(&[(a::ROLLBACK_TO, "abcdef0"), (a::ROLLBACK_KIND, a::ROLLBACK_KIND_AUTOMATIC)]);
        let forged_automatic = m(&[
            (a::ROLLBACK_TO, "abcdef0"),
            (a::ROLLBACK_KIND, a::ROLLBACK_KIND_AUTOMATIC),
            (a::ROLLBACK_TARGET_REVISION, "web-abcdef0"),
        ]);
        let none = Annotations::new();
        // (name, old, new, username, field manager, refused)
        type Case<'a> = (&'a str, Option<&'a Annotations>, &'a Annotations, &'a str, Option<&'a str>, bool);
        let cases: Vec<Case> = vec![
            ("an approval by the manager's account", None, &approve, sa, None, true),
            (
                "an approval applied by the Repository controller",
                Some(&none),
                &approve,
                "admin",
                Some("kuvryn-sync-repository"),
                true,
            ),
            ("an approval by a person", Some(&none), &approve, "alice", Some("ksync"), false),
            ("an unchanged approval kept by the manager", Some(&approve), &approve, sa, None, false),
            ("an approval removed by the manager", Some(&approve), &none, sa, None, false),
            ("a manual rollback by the manager's account", Some(&none), &manual, sa, None, true),
            ("a manual rollback applied from Git", None, &manual, "admin", Some("kuvryn-sync-repository"), true),
            ("a manual rollback by a person", Some(&none), &manual, "alice", None, false),
            ("a failure policy's rollback", Some(&none), &automatic, sa, None, false),
            ("an automatic kind naming a chosen Revision", Some(&none), &forged_automatic, sa, None, true),
            ("a rollback request removed by the manager", Some(&manual), &none, sa, None, false),
            (
                "another user with the same field manager name elsewhere",
                Some(&none),
                &approve,
                "bob",
                Some("kubectl"),
                false,
            ),
        ];
        for (name, old, new, user, fm, refused) in cases {
            assert_eq!(manager_decides(old, new, user, fm, &manager).is_some(), refused, "{name}");
        }
        // A manager run with a person's credentials is recognised by its field managers only.
        let dev = Manager { username: None, field_managers: manager.field_managers.clone() };
        assert!(manager_decides(None, &approve, "admin", None, &dev).is_none());
        assert!(manager_decides(None, &approve, "admin", Some("kuvryn-sync-repository"), &dev).is_some());
    }

    #[derive(serde::Deserialize)]
    struct Case {
        name: String,
        /// `None`: a CREATE.
        #[serde(default)]
        old: Option<Annotations>,
        new: Annotations,
        #[serde(default)]
        target_hash: Option<String>,
        want: Annotations,
    }

    /// Short names in the table: `to` for `sync.kuvryn.io/rollback-to`, `by` for
    /// `sync.kuvryn.io/rollback-requested-by`, and so on.
    fn expand(m: &Annotations) -> Annotations {
        m.iter()
            .map(|(k, v)| {
                let k = match k.as_str() {
                    "to" => a::ROLLBACK_TO,
                    "from" => a::ROLLBACK_FROM,
                    "kind" => a::ROLLBACK_KIND,
                    "target" => a::ROLLBACK_TARGET_REVISION,
                    "by" => a::ROLLBACK_REQUESTED_BY,
                    "at" => a::ROLLBACK_REQUESTED_AT,
                    "hash" => a::ROLLBACK_TARGET_HASH,
                    "plan" => a::APPROVED_PLAN,
                    "approved-by" => a::APPROVED_BY,
                    "approved-at" => a::APPROVED_AT,
                    other => other,
                };
                (k.to_string(), v.clone())
            })
            .collect()
    }

    #[test]
    fn record_table() {
        let cases: Vec<Case> =
            crate::yaml::from_str(include_str!("../../testdata/webhook/record.yaml")).expect("record.yaml");
        let who = Requester { username: "alice".into(), at: "2026-12-02T03:00:00Z".into() };
        let mut failures = Vec::new();
        for c in &cases {
            let old = c.old.as_ref().map(expand);
            let got = record(old.as_ref(), &expand(&c.new), &who, c.target_hash.as_deref());
            if got != expand(&c.want) {
                failures.push(format!("{}:\n  got  {got:?}\n  want {:?}", c.name, expand(&c.want)));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    fn revision(app: &str, label: Option<&str>, commit: &str, deployed: Option<&str>) -> Revision {
        let mut v = serde_json::json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Revision",
            "metadata": {"name": "web-abc", "namespace": "team"},
            "spec": {"application": app, "source": {"repository": "r", "url": "u", "commit": commit, "path": "p"},
                     "serviceAccountName": "deployer"},
            "status": {"deployedDesiredStateHash": deployed},
        });
        if let Some(l) = label {
            v["metadata"]["labels"] = serde_json::json!({crate::api::names::labels::APPLICATION: l});
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn target_checks_name_what_is_wrong() {
        let c = "c0ffee1";
        let ok = revision("web", Some("web"), c, Some("sha256:d"));
        assert_eq!(check_target("web", Some(c), "web-abc", Some(&ok)), Ok(Some("sha256:d".into())));
        let never = revision("web", Some("web"), c, None);
        assert_eq!(check_target("web", Some(c), "web-abc", Some(&never)), Ok(None));
        let missing = check_target("web", Some(c), "web-abc", None).unwrap_err();
        assert!(missing.contains("does not exist"), "{missing}");
        let other = check_target("web", Some(c), "web-abc", Some(&revision("api", Some("api"), c, None))).unwrap_err();
        assert!(other.contains("belongs to Application \"api\""), "{other}");
        let relabelled =
            check_target("web", Some(c), "web-abc", Some(&revision("web", Some("api"), c, None))).unwrap_err();
        assert!(relabelled.contains("belongs to Application \"api\""), "{relabelled}");
        let commit = check_target("web", Some("beef"), "web-abc", Some(&ok)).unwrap_err();
        assert!(commit.contains("is of commit \"c0ffee1\", not of sync.kuvryn.io/rollback-to \"beef\""), "{commit}");
        let no_to = check_target("web", None, "web-abc", Some(&ok)).unwrap_err();
        assert!(no_to.contains("names no sync.kuvryn.io/rollback-to"), "{no_to}");
    }

    #[test]
    fn only_a_changed_request_is_checked() {
        let m = |pairs: &[(&str, &str)]| -> Annotations {
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        let req = m(&[(a::ROLLBACK_TO, "c1"), (a::ROLLBACK_TARGET_REVISION, "web-1")]);
        assert_eq!(target_to_check(None, &req), Some("web-1"));
        assert_eq!(target_to_check(Some(&req), &req), None);
        let moved = m(&[(a::ROLLBACK_TO, "c1"), (a::ROLLBACK_TARGET_REVISION, "web-2")]);
        assert_eq!(target_to_check(Some(&req), &moved), Some("web-2"));
        assert_eq!(target_to_check(None, &m(&[(a::ROLLBACK_TO, "c1")])), None);
    }
}
