//! `ksync notifications`: one row per Notification, its route and its last delivery.

use jiff::Timestamp;
use kube::ResourceExt;

use kuvryn_sync::api::notification::{Delivery, Notification, NotificationSpec, Severity};
use kuvryn_sync::view::{Cell, Palette, Table, age_of, ready_cell, ready_message};

/// Which columns to print.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Columns {
    /// Add NAMESPACE first (`-A`).
    pub namespace: bool,
    /// `-o wide`: add LAST FAILURE, SUSPENDED and MESSAGE (the `Ready` condition's message).
    pub wide: bool,
}

/// The table: NAMESPACE (with `-A`), NAME, PROVIDER, APPLICATIONS (names, the selector, or
/// `*`), EVENTS (severity and reasons), READY, LAST DELIVERY (its age, Application and reason),
/// AGE, [wide: LAST FAILURE, SUSPENDED, MESSAGE], sorted by namespace and name. Empty when
/// there are none.
pub fn table(items: &[Notification], columns: Columns, now: Timestamp, palette: Palette) -> String {
    if items.is_empty() {
        return String::new();
    }
    let mut header = Vec::new();
    if columns.namespace {
        header.push("NAMESPACE");
    }
    header.extend(["NAME", "PROVIDER", "APPLICATIONS", "EVENTS", "READY", "LAST DELIVERY", "AGE"]);
    if columns.wide {
        header.extend(["LAST FAILURE", "SUSPENDED", "MESSAGE"]);
    }
    let mut t = Table::new(header);
    let mut sorted: Vec<&Notification> = items.iter().collect();
    sorted.sort_by_key(|n| (n.namespace(), n.name_any()));
    for n in sorted {
        let status = n.status.clone().unwrap_or_default();
        let mut row = Vec::new();
        if columns.namespace {
            row.push(Cell::plain(n.namespace().unwrap_or_default()));
        }
        row.extend([
            Cell::plain(n.name_any()),
            Cell::plain(n.spec.provider.type_.as_str()),
            Cell::plain(applications(&n.spec)),
            Cell::plain(events(&n.spec)),
            ready_cell(&status.conditions),
            Cell::plain(delivery(status.last_delivery.as_ref(), now)),
            Cell::plain(age_of(n.metadata.creation_timestamp.as_ref(), now)),
        ]);
        if columns.wide {
            row.extend([
                Cell::plain(delivery(status.last_failure.as_ref(), now)),
                Cell::plain(n.spec.suspend.to_string()),
                Cell::plain(ready_message(&status.conditions)),
            ]);
        }
        t.row(row);
    }
    t.render(palette, "")
}

/// `web,api`, the selector as `-l` writes it, both joined by `+`, or `*` for every one.
pub fn applications(spec: &NotificationSpec) -> String {
    let mut parts = Vec::new();
    if !spec.applications.names.is_empty() {
        parts.push(spec.applications.names.join(","));
    }
    if let Some(s) = &spec.applications.selector {
        let mut terms: Vec<String> = s.match_labels.iter().flatten().map(|(k, v)| format!("{k}={v}")).collect();
        for e in s.match_expressions.iter().flatten() {
            let values = e.values.clone().unwrap_or_default().join(",");
            terms.push(match e.operator.as_str() {
                "In" => format!("{} in ({values})", e.key),
                "NotIn" => format!("{} notin ({values})", e.key),
                "Exists" => e.key.clone(),
                "DoesNotExist" => format!("!{}", e.key),
                other => format!("{} {other} ({values})", e.key),
            });
        }
        parts.push(if terms.is_empty() { "*".to_string() } else { terms.join(",") });
    }
    if parts.is_empty() { "*".to_string() } else { parts.join(" + ") }
}

/// `all`, `warnings`, or either with the reasons: `warnings: HealthTimeout,ApplyFailure`.
pub fn events(spec: &NotificationSpec) -> String {
    let severity = match spec.severity {
        Severity::Normal => "all",
        Severity::Warning => "warnings",
    };
    if spec.reasons.is_empty() { severity.to_string() } else { format!("{severity}: {}", spec.reasons.join(",")) }
}

/// `3m web Succeeded`, or empty.
fn delivery(d: Option<&Delivery>, now: Timestamp) -> String {
    d.map(|d| format!("{} {} {}", age_of(Some(&d.at), now), d.application, d.reason)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn notification(name: &str, spec: serde_json::Value, status: serde_json::Value) -> Notification {
        serde_json::from_value(json!({
            "apiVersion": "sync.kuvryn.io/v1alpha1", "kind": "Notification",
            "metadata": {"name": name, "namespace": "team-a", "creationTimestamp": "2026-12-05T10:00:00Z"},
            "spec": spec, "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn routes_and_deliveries_read_at_a_glance() {
        let now: Timestamp = "2026-12-05T12:00:00Z".parse().unwrap();
        let items = [
            notification(
                "chat",
                json!({"provider": {"type": "Slack", "secretRef": {"name": "slack"}},
                       "applications": {"names": ["web", "api"], "selector": {"matchLabels": {"tier": "front"},
                           "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}]}},
                       "severity": "Warning", "reasons": ["HealthTimeout"]}),
                json!({"conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded", "message": "delivered",
                                       "lastTransitionTime": "2026-12-05T11:00:00Z"}],
                       "lastDelivery": {"at": "2026-12-05T11:57:00Z", "application": "web", "reason": "HealthTimeout", "attempts": 1}}),
            ),
            notification("statuses", json!({"provider": {"type": "GitHub", "secretRef": {"name": "gh"}}}), json!({})),
        ];
        let out = table(&items, Columns::default(), now, Palette::default());
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].starts_with("NAME"), "{out}");
        assert!(lines[1].contains("Slack") && lines[1].contains("web,api + tier=front,env in (prod)"), "{out}");
        assert!(lines[1].contains("warnings: HealthTimeout") && lines[1].contains("3m web HealthTimeout"), "{out}");
        assert!(lines[2].contains("GitHub") && lines[2].contains(" * ") && lines[2].contains(" all "), "{out}");
        let wide = table(&items, Columns { namespace: true, wide: true }, now, Palette::default());
        assert!(wide.lines().next().unwrap().contains("LAST FAILURE"), "{wide}");
    }
}
