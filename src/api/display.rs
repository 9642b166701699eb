//! How messages, Events, logs and the CLI name an object: `Kind namespace/name`, or `Kind name`
//! when it is cluster-scoped; with the group, `Kind.group` (`Deployment.apps team-a/web`) where
//! two kinds could share a name (the views and the resource graph). One helper for all of them.

use serde_json::Value;

use super::application::ResourceRef;

/// `Kind namespace/name`, or `Kind name` when `namespace` is empty or absent.
pub fn object(kind: &str, namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) if !ns.is_empty() => format!("{kind} {ns}/{name}"),
        _ => format!("{kind} {name}"),
    }
}

/// [`object`] of a manifest or live object (its `kind` and `metadata`).
pub fn object_of(obj: &Value) -> String {
    object(
        obj["kind"].as_str().unwrap_or_default(),
        obj["metadata"]["namespace"].as_str(),
        obj["metadata"]["name"].as_str().unwrap_or_default(),
    )
}

/// `Kind.group`, or `Kind` for the core group.
pub fn qualified_kind(group: &str, kind: &str) -> String {
    if group.is_empty() { kind.to_string() } else { format!("{kind}.{group}") }
}

/// [`object`] of a [`ResourceRef`], its kind qualified by the group: `Deployment.apps team-a/web`,
/// or `Namespace team-a` when cluster-scoped.
pub fn resource(r: &ResourceRef) -> String {
    object(&qualified_kind(&r.group, &r.kind), r.namespace.as_deref(), &r.name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn objects_are_named_one_way() {
        let cases = [
            ("ConfigMap", Some("team-a"), "web", "ConfigMap team-a/web"),
            ("Namespace", None, "team-a", "Namespace team-a"),
            ("ClusterRole", Some(""), "view", "ClusterRole view"),
        ];
        for (kind, ns, name, want) in cases {
            assert_eq!(object(kind, ns, name), want);
        }
        let cm = json!({"kind": "ConfigMap", "metadata": {"namespace": "team-a", "name": "web"}});
        assert_eq!(object_of(&cm), "ConfigMap team-a/web");
        assert_eq!(object_of(&json!({"kind": "Namespace", "metadata": {"name": "x"}})), "Namespace x");
        assert_eq!(qualified_kind("apps", "Deployment"), "Deployment.apps");
        assert_eq!(qualified_kind("", "Service"), "Service");
        let r = |group: &str, ns: Option<&str>| ResourceRef {
            group: group.into(),
            kind: "Thing".into(),
            namespace: ns.map(String::from),
            name: "x".into(),
        };
        assert_eq!(resource(&r("", Some("a"))), "Thing a/x");
        assert_eq!(resource(&r("apps", Some("a"))), "Thing.apps a/x");
        assert_eq!(resource(&r("", None)), "Thing x");
    }
}
