//! Routing: which `Notification`s of a namespace an Event is sent to. Pure: the engine gives it
//! what it read ([`Seen`]) and sends to what it returns.
//!
//! # Rules
//! - only Events our controller reported ([`names::FIELD_MANAGER`]) about an Application of
//!   `sync.kuvryn.io` (`regarding`), in the Notification's own namespace;
//! - only lifecycle transitions: the observations [`events::HEALTH_DEGRADED`] and
//!   [`events::DRIFTED`] are never sent (the spec: "Observing a degradation ... sends no
//!   notification");
//! - a Notification that is suspended takes nothing; it takes an Application named in
//!   `spec.applications.names`, or matching `spec.applications.selector`, or (with neither) every
//!   one; an Event at or above `spec.severity`, of one of `spec.reasons` (empty: every reason).

use std::collections::BTreeMap;

use kube::core::{Selector, SelectorExt};

use crate::api::names::{self, events};
use crate::api::notification::{Notification, Severity};

/// Event reasons that are observations, not lifecycle transitions: never sent.
pub const OBSERVATIONS: &[&str] = &[events::HEALTH_DEGRADED, events::DRIFTED];

/// What routing needs of one Event and the Application it is about.
#[derive(Clone, Debug, PartialEq)]
pub struct Seen<'a> {
    /// The Event's `reportingController`.
    pub reporting_controller: &'a str,
    /// The `regarding` object's apiVersion (`sync.kuvryn.io/v1alpha1`) and kind.
    pub regarding_api_version: &'a str,
    pub regarding_kind: &'a str,
    /// The namespace of the Event's `regarding` object.
    pub namespace: &'a str,
    /// The Application's name and labels.
    pub application: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    pub severity: Severity,
    pub reason: &'a str,
}

/// Whether an Event is one we send at all (ours, about an Application, a lifecycle
/// transition), before any Notification is looked at.
pub fn is_lifecycle(seen: &Seen<'_>) -> bool {
    seen.reporting_controller == names::FIELD_MANAGER
        && seen.regarding_kind == "Application"
        && seen.regarding_api_version.split('/').next() == Some(names::GROUP)
        && !OBSERVATIONS.contains(&seen.reason)
}

/// Whether `notification` takes the Event `seen`.
pub fn routes(notification: &Notification, seen: &Seen<'_>) -> bool {
    may_route(notification, seen) && selects(notification, seen)
}

/// [`routes`] but for the Application's labels (not read yet): what the engine checks before
/// it reads the Application, so an Event no Notification wants costs no request.
pub fn may_route(notification: &Notification, seen: &Seen<'_>) -> bool {
    let spec = &notification.spec;
    if spec.suspend || !is_lifecycle(seen) {
        return false;
    }
    if notification.metadata.namespace.as_deref() != Some(seen.namespace) {
        return false;
    }
    if seen.severity < spec.severity {
        return false;
    }
    !(!spec.reasons.is_empty() && !spec.reasons.iter().any(|r| r == seen.reason))
}

/// Whether `notification` chooses the Application of `seen` (by name, labels, or all).
fn selects(notification: &Notification, seen: &Seen<'_>) -> bool {
    let apps = &notification.spec.applications;
    let by_name = apps.names.iter().any(|n| n == seen.application);
    let by_labels = apps.selector.as_ref().is_some_and(|s| match Selector::try_from(s.clone()) {
        Ok(sel) => sel.matches(seen.labels),
        // An invalid selector selects nothing (the API server would refuse the same one).
        Err(_) => false,
    });
    let all = apps.names.is_empty() && apps.selector.is_none();
    all || by_name || by_labels
}

/// The Notifications of `all` that take `seen`, in the order given.
pub fn matching<'n>(all: &'n [Notification], seen: &Seen<'_>) -> Vec<&'n Notification> {
    all.iter().filter(|n| routes(n, seen)).collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

    use super::*;
    use crate::api::common::LocalObjectReference;
    use crate::api::notification::{ApplicationSelector, NotificationSpec, Provider, ProviderType};

    fn ntf() -> Notification {
        let provider = Provider {
            type_: ProviderType::Slack,
            secret_ref: LocalObjectReference { name: "s".into() },
            channel: None,
            repository: None,
        };
        let spec = NotificationSpec {
            applications: ApplicationSelector::default(),
            severity: Severity::Normal,
            reasons: vec![],
            provider,
            suspend: false,
        };
        let mut n = Notification::new("n", spec);
        n.metadata.namespace = Some("team".into());
        n
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn seen<'a>(labels: &'a BTreeMap<String, String>, reason: &'a str, severity: Severity) -> Seen<'a> {
        Seen {
            reporting_controller: names::FIELD_MANAGER,
            regarding_api_version: "sync.kuvryn.io/v1alpha1",
            regarding_kind: "Application",
            namespace: "team",
            application: "web",
            labels,
            severity,
            reason,
        }
    }

    fn selector(labels: &[(&str, &str)], exprs: &[(&str, &str, &[&str])]) -> LabelSelector {
        LabelSelector {
            match_labels: (!labels.is_empty())
                .then(|| labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            match_expressions: (!exprs.is_empty()).then(|| {
                exprs
                    .iter()
                    .map(|(k, op, vs)| LabelSelectorRequirement {
                        key: k.to_string(),
                        operator: op.to_string(),
                        values: Some(vs.iter().map(|v| v.to_string()).collect()),
                    })
                    .collect()
            }),
        }
    }

    #[test]
    fn routes_by_application_severity_and_reason() {
        let tier = labels(&[("tier", "web"), ("env", "prod")]);
        type Edit = fn(&mut Notification);
        // (case, edit of the Notification, reason, severity, routed)
        let cases: Vec<(&str, Edit, &str, Severity, bool)> = vec![
            ("all applications, every reason", |_| {}, "Succeeded", Severity::Normal, true),
            ("a failure", |_| {}, "HealthTimeout", Severity::Warning, true),
            ("suspended", |n| n.spec.suspend = true, "Succeeded", Severity::Normal, false),
            ("named", |n| n.spec.applications.names = vec!["web".into()], "Succeeded", Severity::Normal, true),
            ("named another", |n| n.spec.applications.names = vec!["api".into()], "Succeeded", Severity::Normal, false),
            (
                "matchLabels",
                |n| n.spec.applications.selector = Some(selector(&[("tier", "web")], &[])),
                "Succeeded",
                Severity::Normal,
                true,
            ),
            (
                "matchLabels of another",
                |n| n.spec.applications.selector = Some(selector(&[("tier", "db")], &[])),
                "Succeeded",
                Severity::Normal,
                false,
            ),
            (
                "matchExpressions In",
                |n| n.spec.applications.selector = Some(selector(&[], &[("env", "In", &["prod", "stage"])])),
                "Succeeded",
                Severity::Normal,
                true,
            ),
            (
                "matchExpressions NotIn",
                |n| n.spec.applications.selector = Some(selector(&[], &[("env", "NotIn", &["prod"])])),
                "Succeeded",
                Severity::Normal,
                false,
            ),
            (
                "named another, selected by labels",
                |n| {
                    n.spec.applications.names = vec!["api".into()];
                    n.spec.applications.selector = Some(selector(&[("tier", "web")], &[]));
                },
                "Succeeded",
                Severity::Normal,
                true,
            ),
            ("warnings only, a Normal", |n| n.spec.severity = Severity::Warning, "Succeeded", Severity::Normal, false),
            (
                "warnings only, a Warning",
                |n| n.spec.severity = Severity::Warning,
                "ApplyFailure",
                Severity::Warning,
                true,
            ),
            (
                "reasons, listed",
                |n| n.spec.reasons = vec!["HealthTimeout".into()],
                "HealthTimeout",
                Severity::Warning,
                true,
            ),
            (
                "reasons, not listed",
                |n| n.spec.reasons = vec!["HealthTimeout".into()],
                "Succeeded",
                Severity::Normal,
                false,
            ),
            // Observations are never sent, even when listed.
            ("HealthDegraded", |_| {}, "HealthDegraded", Severity::Warning, false),
            ("Drifted listed", |n| n.spec.reasons = vec!["Drifted".into()], "Drifted", Severity::Warning, false),
            (
                "another namespace",
                |n| n.metadata.namespace = Some("other".into()),
                "Succeeded",
                Severity::Normal,
                false,
            ),
        ];
        for (case, edit, reason, severity, want) in cases {
            let mut n = ntf();
            edit(&mut n);
            assert_eq!(routes(&n, &seen(&tier, reason, severity)), want, "{case}");
        }
    }

    #[test]
    fn only_our_events_about_applications() {
        let l = labels(&[]);
        let n = ntf();
        let mut s = seen(&l, "Succeeded", Severity::Normal);
        assert!(routes(&n, &s));
        s.reporting_controller = "someone-else";
        assert!(!routes(&n, &s), "another controller's Event");
        let mut s = seen(&l, "Succeeded", Severity::Normal);
        s.regarding_kind = "Repository";
        assert!(!routes(&n, &s), "an Event about a Repository");
        let mut s = seen(&l, "Succeeded", Severity::Normal);
        s.regarding_api_version = "other.example.com/v1";
        assert!(!routes(&n, &s), "an Application of another group");
    }

    #[test]
    fn matching_keeps_the_order() {
        let l = labels(&[]);
        let mut a = ntf();
        a.metadata.name = Some("a".into());
        let mut b = ntf();
        b.metadata.name = Some("b".into());
        b.spec.suspend = true;
        let mut c = ntf();
        c.metadata.name = Some("c".into());
        let all = [a, b, c];
        let got: Vec<_> = matching(&all, &seen(&l, "Succeeded", Severity::Normal))
            .into_iter()
            .map(|n| n.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(got, ["a", "c"]);
    }
}
