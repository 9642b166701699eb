//! The kstatus conventions: deletion and observed generation (shared with the dedicated rules),
//! and the generic rules every kind without dedicated ones follows.

use serde_json::Value;

use super::{Assessment, condition, int, text};

/// Progressing when `metadata.deletionTimestamp` is set, naming the finalizers still pending.
pub(super) fn deletion(obj: &Value) -> Option<Assessment> {
    text(obj, &["metadata", "deletionTimestamp"]).filter(|t| !t.is_empty())?;
    let finalizers: Vec<&str> = super::at(obj, &["metadata", "finalizers"])
        .and_then(Value::as_array)
        .map(|list| list.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    Some(Assessment::progressing(if finalizers.is_empty() {
        "being deleted".to_string()
    } else {
        format!("being deleted, waiting for finalizers {}", finalizers.join(", "))
    }))
}

/// Progressing while `status.observedGeneration` is behind `metadata.generation`. When the object
/// does not report an observed generation, `absent_is_zero` says whether that means "not observed
/// yet" (the workload controllers, which always report it) or "not reported" (kstatus: skip).
pub(super) fn unobserved(obj: &Value, kind: &str, absent_is_zero: bool) -> Option<Assessment> {
    let generation = int(obj, &["metadata", "generation"])?;
    let observed = int(obj, &["status", "observedGeneration"]);
    let behind = match observed {
        Some(observed) => observed < generation,
        None => absent_is_zero,
    };
    if !behind {
        return None;
    }
    let controller = if kind.is_empty() { "the controller".to_string() } else { format!("the {kind} controller") };
    Some(Assessment::progressing(match observed {
        Some(observed) => format!("waiting for {controller} to observe generation {generation} (observed {observed})"),
        None => format!("waiting for {controller} to observe generation {generation}"),
    }))
}

/// The generic rules, for every kind without dedicated ones (deletion is checked before).
pub(super) fn generic(kind: &str, obj: &Value) -> Assessment {
    if let Some(progressing) = unobserved(obj, kind, false) {
        return progressing;
    }
    if let Some(stalled) = condition(obj, "Stalled").filter(|c| c.is_true()) {
        return Assessment::degraded(stalled.describe("stalled"));
    }
    if let Some(reconciling) = condition(obj, "Reconciling").filter(|c| c.is_true()) {
        return Assessment::progressing(reconciling.describe("reconciling"));
    }
    if let Some(ready) = condition(obj, "Ready").filter(|c| !c.is_true()) {
        return Assessment::progressing(ready.describe_as("Ready"));
    }
    Assessment::healthy()
}
