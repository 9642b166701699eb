//! Forced redeploys, pure: the request an Application carries
//! ([`names::annotations::REDEPLOY_REQUESTED_AT`]) checked and normalized ([`parse`]), and put
//! into the pod templates of its workloads ([`inject`]) the way `kubectl rollout restart` does
//! (`kubectl.kubernetes.io/restartedAt`).
//!
//! # Guarantees
//! - The value that reaches the tenant's objects is never the annotation's text: it is an RFC 3339
//!   time re-formatted by the controller (UTC, `Z`), at most [`MAX_VALUE_BYTES`] long.
//! - Only Deployments, StatefulSets and DaemonSets (`apps`) with a `spec.template` object are
//!   touched, and only `spec.template.metadata.annotations`; an object whose template metadata
//!   or annotations are not objects is left alone (validation or the API server reports it).
//! - The same request and objects give the same result (the desired-state hash stays stable).

use serde_json::{Map, Value};

use crate::api::names;

/// Longest annotation value accepted (an RFC 3339 time with nanoseconds and an offset is 35).
pub const MAX_VALUE_BYTES: usize = 64;

/// The kinds (group `apps`) a redeploy restarts.
pub const WORKLOAD_KINDS: [&str; 3] = ["Deployment", "StatefulSet", "DaemonSet"];

/// The redeploy request among an Application's annotations
/// ([`names::annotations::REDEPLOY_REQUESTED_AT`]), normalized ([`parse`]); `Err`: the
/// message of a bad one.
pub fn requested(annotations: &std::collections::BTreeMap<String, String>) -> Result<Option<String>, String> {
    annotations.get(names::annotations::REDEPLOY_REQUESTED_AT).map(|v| parse(v)).transpose()
}

/// Check a [`names::annotations::REDEPLOY_REQUESTED_AT`] value: an RFC 3339 time
/// (`YYYY-MM-DDTHH:MM:SS`, optional fraction of 1 to 9 digits, then `Z` or `±HH:MM`), a real
/// date, at most [`MAX_VALUE_BYTES`] bytes. Returns it normalized to UTC (`Z`), or why not
/// (the value quoted, cut to [`MAX_VALUE_BYTES`] characters).
pub fn parse(value: &str) -> Result<String, String> {
    let shown: String = value.chars().take(MAX_VALUE_BYTES).collect();
    let ellipsis = if shown.len() < value.len() { "..." } else { "" };
    let invalid = |why: &str| {
        format!(
            "annotation {} is {shown:?}{ellipsis}: {why}; set an RFC 3339 time such as 2026-01-02T15:04:05Z (ksync redeploy does)",
            names::annotations::REDEPLOY_REQUESTED_AT
        )
    };
    if value.len() > MAX_VALUE_BYTES {
        return Err(invalid(&format!("longer than {MAX_VALUE_BYTES} bytes")));
    }
    if !rfc3339_shape(value.as_bytes()) {
        return Err(invalid("not an RFC 3339 time"));
    }
    match value.parse::<jiff::Timestamp>() {
        Ok(t) => Ok(t.to_string()),
        Err(e) => Err(invalid(&format!("not a valid time ({e})"))),
    }
}

/// `YYYY-MM-DDTHH:MM:SS[.F{1,9}](Z|+HH:MM|-HH:MM)`, digits where digits go (ranges are left to
/// the parser).
fn rfc3339_shape(b: &[u8]) -> bool {
    let digits = |s: &[u8]| !s.is_empty() && s.iter().all(u8::is_ascii_digit);
    if b.len() < 20
        || !digits(&b[0..4])
        || b[4] != b'-'
        || !digits(&b[5..7])
        || b[7] != b'-'
        || !digits(&b[8..10])
        || b[10] != b'T'
        || !digits(&b[11..13])
        || b[13] != b':'
        || !digits(&b[14..16])
        || b[16] != b':'
        || !digits(&b[17..19])
    {
        return false;
    }
    let mut rest = &b[19..];
    if rest.first() == Some(&b'.') {
        let n = rest[1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if !(1..=9).contains(&n) {
            return false;
        }
        rest = &rest[1 + n..];
    }
    match rest {
        [b'Z'] => true,
        [sign, h1, h2, b':', m1, m2] => (*sign == b'+' || *sign == b'-') && digits(&[*h1, *h2, *m1, *m2]),
        _ => false,
    }
}

/// Whether `obj` is a workload a redeploy restarts.
pub fn restartable(obj: &Value) -> bool {
    obj["apiVersion"].as_str().is_some_and(|v| v.starts_with("apps/"))
        && obj["kind"].as_str().is_some_and(|k| WORKLOAD_KINDS.contains(&k))
}

/// Set `kubectl.kubernetes.io/restartedAt: at` in the pod template of every restartable object
/// of `objects` (see the module guarantees); returns them as `Kind namespace/name`, in order.
/// `at` is a value [`parse`] returned.
pub fn inject(objects: &mut [Value], at: &str) -> Vec<String> {
    let mut restarted = Vec::new();
    for o in objects.iter_mut().filter(|o| restartable(o)) {
        let what = describe(o);
        let Some(template) = o.get_mut("spec").and_then(|s| s.get_mut("template")).and_then(Value::as_object_mut)
        else {
            continue;
        };
        let metadata = template.entry("metadata").or_insert_with(|| Value::Object(Map::new()));
        if metadata.is_null() {
            *metadata = Value::Object(Map::new());
        }
        let Some(metadata) = metadata.as_object_mut() else { continue };
        let annotations = metadata.entry("annotations").or_insert_with(|| Value::Object(Map::new()));
        if annotations.is_null() {
            *annotations = Value::Object(Map::new());
        }
        let Some(annotations) = annotations.as_object_mut() else { continue };
        annotations.insert(names::annotations::RESTARTED_AT.to_string(), Value::String(at.to_string()));
        restarted.push(what);
    }
    restarted
}

fn describe(o: &Value) -> String {
    crate::api::display::object_of(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rfc3339_times_are_accepted_and_normalized_to_utc() {
        for (value, want) in [
            ("2026-12-02T15:04:05Z", "2026-12-02T15:04:05Z"),
            ("2026-12-02T15:04:05.123Z", "2026-12-02T15:04:05.123Z"),
            ("2026-12-02T15:04:05.123456789Z", "2026-12-02T15:04:05.123456789Z"),
            ("2026-12-02T17:04:05+02:00", "2026-12-02T15:04:05Z"),
            ("2026-12-02T10:04:05-05:00", "2026-12-02T15:04:05Z"),
        ] {
            assert_eq!(parse(value).as_deref(), Ok(want), "{value}");
        }
    }

    #[test]
    fn anything_else_is_refused_naming_the_annotation_and_the_value() {
        for value in [
            "",
            "now",
            "yesterday at noon",
            "2026-12-02",
            "2026-12-02 15:04:05Z",
            "2026-12-02t15:04:05z",
            "2026-12-02T15:04:05",
            "2026-12-02T15:04:05.Z",
            "2026-12-02T15:04:05.1234567890Z",
            "2026-12-02T15:04:05Z[Europe/Paris]",
            "2026-12-02T15:04:05+0200",
            "2026-13-02T15:04:05Z",
            "2026-02-30T15:04:05Z",
            "2026-12-02T25:04:05Z",
            "2026-12-02T15:04:05Z; rm -rf /",
            "２026-12-02T15:04:05Z",
            "\u{0}026-12-02T15:04:05Z",
        ] {
            let e = parse(value).expect_err(value);
            assert!(e.contains(names::annotations::REDEPLOY_REQUESTED_AT), "{e}");
            assert!(e.contains(&format!("{value:?}")), "{e}");
        }
        let long = "9".repeat(10_000);
        let e = parse(&long).unwrap_err();
        assert!(e.contains("longer than 64 bytes") && e.len() < 300, "{e}");
    }

    #[test]
    fn only_the_pod_templates_of_apps_workloads_get_restarted_at() {
        let at = "2026-12-02T15:04:05Z";
        let mut objects = vec![
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "a"},
                   "spec": {"template": {"metadata": {"labels": {"app": "web"}, "annotations": {"x": "y"}}}}}),
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "namespace": "a"},
                   "spec": {"template": {"spec": {}}}}),
            json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": "a"},
                   "spec": {"template": {"metadata": {"annotations": null}}}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "a"}}),
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "a"},
                   "spec": {"template": {"metadata": {}}}}),
            json!({"apiVersion": "example.com/v1", "kind": "Deployment", "metadata": {"name": "not-apps"},
                   "spec": {"template": {"metadata": {}}}}),
            // Malformed: left alone, never a panic.
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "no-template"}, "spec": {}}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "odd"},
                   "spec": {"template": {"metadata": "text"}}}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "odd2"},
                   "spec": {"template": {"metadata": {"annotations": []}}}}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "odd3"}, "spec": "text"}),
        ];
        let before = objects.clone();
        let restarted = inject(&mut objects, at);
        assert_eq!(restarted, ["Deployment a/web", "StatefulSet a/db", "DaemonSet a/agent"]);
        let ann = |o: &Value| o["spec"]["template"]["metadata"]["annotations"].clone();
        assert_eq!(ann(&objects[0]), json!({"x": "y", "kubectl.kubernetes.io/restartedAt": at}));
        assert_eq!(objects[0]["spec"]["template"]["metadata"]["labels"], json!({"app": "web"}));
        assert_eq!(ann(&objects[1]), json!({"kubectl.kubernetes.io/restartedAt": at}));
        assert_eq!(ann(&objects[2]), json!({"kubectl.kubernetes.io/restartedAt": at}));
        assert_eq!(objects[3..], before[3..]);
        // Again: the same objects (idempotent).
        let once = objects.clone();
        inject(&mut objects, at);
        assert_eq!(objects, once);
    }
}
