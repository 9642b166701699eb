//! Pods beyond what they share with templates: the DefaultTolerationSeconds admission (on create
//! and update), the Pod-only spec rules (`activeDeadlineSeconds`, image whitespace,
//! tolerations) and `ValidatePodUpdate`, which allows an update to change only container and
//! init container images, `activeDeadlineSeconds`, added tolerations and scheduling gates
//! removed, refusing anything else with the list of what may change and a diff of the spec.

use serde_json::{Map, Value, json};

use super::field::{self, child, index};
use crate::errors::Cause;

/// The text of kube-apiserver's refusal of other spec changes (`updatablePodSpecFieldsNoResources`).
pub(crate) const UPDATABLE: &str = "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// DefaultTolerationSeconds admission (create and update): a Pod that does not tolerate the
/// `node.kubernetes.io/not-ready` or `unreachable` NoExecute taints gets a 300 s toleration
/// of each, appended.
pub(crate) fn default_tolerations(spec: &mut Map<String, Value>) {
    let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
    if tolerations.is_null() {
        *tolerations = json!([]);
    }
    if let Some(ts) = tolerations.as_array_mut() {
        for key in ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"] {
            let present = ts.iter().any(|t| {
                t.get("key").and_then(Value::as_str).is_none_or(|k| k.is_empty() || k == key)
                    && t.get("effect").and_then(Value::as_str).is_none_or(|e| e.is_empty() || e == "NoExecute")
            });
            if !present {
                ts.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
            }
        }
    }
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// `ValidateTolerations`.
pub(crate) fn validate_tolerations(tolerations: &Value, path: &str) -> Vec<Cause> {
    let mut errs = Vec::new();
    for (i, t) in tolerations.as_array().into_iter().flatten().enumerate() {
        let p = index(path, i);
        let (key, operator, value, effect) =
            (str_of(t, "key"), str_of(t, "operator"), str_of(t, "value"), str_of(t, "effect"));
        if key.is_empty() && operator != "Exists" {
            errs.push(field::invalid_str(
                &child(&p, "operator"),
                operator,
                "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            ));
        }
        if t.get("tolerationSeconds").is_some_and(|s| !s.is_null()) && effect != "NoExecute" {
            errs.push(field::invalid_str(
                &child(&p, "effect"),
                effect,
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            ));
        }
        match operator {
            "" | "Equal" | "Exists" => {
                if operator == "Exists" && !value.is_empty() {
                    errs.push(field::invalid(
                        &child(&p, "operator"),
                        t,
                        "value must be empty when `operator` is 'Exists'",
                    ));
                }
            }
            other => errs.push(field::not_supported(&child(&p, "operator"), &json!(other), &["Equal", "Exists"])),
        }
        if !effect.is_empty() && !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
            errs.push(field::not_supported(
                &child(&p, "effect"),
                &json!(effect),
                &["NoSchedule", "PreferNoSchedule", "NoExecute"],
            ));
        }
    }
    errs
}

/// The Pod-only rules of the spec (`validatePodSpec` and `validateContainersOnlyForPod`
/// beyond what templates share): `activeDeadlineSeconds` in range, images without surrounding
/// whitespace, tolerations.
pub(crate) fn validate_pod_spec(spec: &Value) -> Vec<Cause> {
    let mut errs = Vec::new();
    for list in ["containers", "initContainers"] {
        for (i, c) in spec.get(list).and_then(Value::as_array).into_iter().flatten().enumerate() {
            let image = str_of(c, "image");
            if image.trim() != image {
                errs.push(field::invalid_str(
                    &child(&index(&format!("spec.{list}"), i), "image"),
                    image,
                    "must not have leading or trailing whitespace",
                ));
            }
        }
    }
    if let Some(ads) = spec.get("activeDeadlineSeconds").and_then(Value::as_i64)
        && !(1..=i64::from(i32::MAX)).contains(&ads)
    {
        errs.push(field::invalid_int("spec.activeDeadlineSeconds", ads, "must be between 1 and 2147483647, inclusive"));
    }
    errs.extend(validate_tolerations(spec.get("tolerations").unwrap_or(&Value::Null), "spec.tolerations"));
    errs
}

/// `ValidateContainerUpdates`: the same number of containers (else stop), each with an image.
fn container_updates(new: &Value, old: &Value, list: &str, errs: &mut Vec<Cause>) -> bool {
    let path = format!("spec.{list}");
    let items = |v: &Value| v.get(list).and_then(Value::as_array).cloned().unwrap_or_default();
    let (new_items, old_items) = (items(new), items(old));
    if new_items.len() != old_items.len() {
        errs.push(field::forbidden(&path, "pod updates may not add or remove containers"));
        return false;
    }
    for (i, c) in new_items.iter().enumerate() {
        let image = str_of(c, "image");
        let p = child(&index(&path, i), "image");
        if image.is_empty() {
            errs.push(field::required(&p, ""));
        }
        if image.trim() != image {
            errs.push(field::invalid_str(&p, image, "must not have leading or trailing whitespace"));
        }
    }
    true
}

/// The validation `ValidatePodUpdate` adds to the spec's (causes in its order; it stops early
/// where it does).
pub(crate) fn validate_pod_update(new: &Value, old: &Value) -> Vec<Cause> {
    let (spec, old_spec) = (&new["spec"], &old["spec"]);
    let mut errs = Vec::new();
    for list in ["containers", "initContainers"] {
        if !container_updates(spec, old_spec, list, &mut errs) {
            return errs;
        }
    }
    let ads = spec.get("activeDeadlineSeconds").filter(|v| !v.is_null());
    let old_ads = old_spec.get("activeDeadlineSeconds").and_then(Value::as_i64);
    match (ads, old_ads) {
        (Some(v), _) => {
            let v = v.as_i64().unwrap_or(0);
            if !(0..=i64::from(i32::MAX)).contains(&v) {
                errs.push(field::invalid_int(
                    "spec.activeDeadlineSeconds",
                    v,
                    "must be between 0 and 2147483647, inclusive",
                ));
                return errs;
            }
            if old_ads.is_some_and(|o| o < v) {
                errs.push(field::invalid_int(
                    "spec.activeDeadlineSeconds",
                    v,
                    "must be less than or equal to previous value",
                ));
                return errs;
            }
        }
        (None, Some(_)) => errs.push(field::invalid(
            "spec.activeDeadlineSeconds",
            &Value::Null,
            "must not update from a positive integer to nil value",
        )),
        (None, None) => {}
    }
    errs.extend(only_added_tolerations(spec, old_spec));
    errs.extend(only_deleted_scheduling_gates(spec, old_spec));
    let (munged, old_norm) = (normalized(&munge(spec, old_spec)), normalized(old_spec));
    if munged != old_norm {
        let diff = unified_diff(&pretty(&old_norm), &pretty(&munged));
        errs.push(field::forbidden("spec", &format!("{UPDATABLE}\n{diff}")));
    }
    errs
}

/// `validateOnlyAddedTolerations`: every old toleration is still there (only its
/// `tolerationSeconds` may differ); then the new ones are validated (again).
fn only_added_tolerations(spec: &Value, old_spec: &Value) -> Vec<Cause> {
    let list = |v: &Value| v.get("tolerations").and_then(Value::as_array).cloned().unwrap_or_default();
    let new = list(spec);
    let without_seconds = |t: &Value| {
        let mut t = normalized(t);
        if let Some(m) = t.as_object_mut() {
            m.remove("tolerationSeconds");
        }
        t
    };
    for o in list(old_spec) {
        if !new.iter().any(|n| without_seconds(n) == without_seconds(&o)) {
            return vec![field::forbidden(
                "spec.tolerations",
                "existing toleration can not be modified except its tolerationSeconds",
            )];
        }
    }
    validate_tolerations(spec.get("tolerations").unwrap_or(&Value::Null), "spec.tolerations")
}

/// `validateOnlyDeletedSchedulingGates`.
fn only_deleted_scheduling_gates(spec: &Value, old_spec: &Value) -> Vec<Cause> {
    let names = |v: &Value| -> Vec<String> {
        v.get("schedulingGates")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|g| str_of(g, "name").to_string())
            .collect()
    };
    let old = names(old_spec);
    names(spec)
        .iter()
        .enumerate()
        .filter(|(_, n)| !old.contains(n))
        .map(|(i, n)| {
            field::forbidden(
                &child(&index("spec.schedulingGates", i), "name"),
                &format!("only deletion is allowed, but found new scheduling gate '{n}'"),
            )
        })
        .collect()
}

/// The new spec with what may change taken from the old one (images, `activeDeadlineSeconds`,
/// scheduling gates, tolerations; `terminationGracePeriodSeconds` 1 where it was negative).
fn munge(spec: &Value, old_spec: &Value) -> Value {
    let mut m = spec.clone();
    for list in ["containers", "initContainers"] {
        if let Some(items) = m.get_mut(list).and_then(Value::as_array_mut) {
            for (i, c) in items.iter_mut().enumerate() {
                if let Some(o) = c.as_object_mut() {
                    match old_spec[list][i].get("image") {
                        Some(img) => o.insert("image".into(), img.clone()),
                        None => o.remove("image"),
                    };
                }
            }
        }
    }
    if let Some(o) = m.as_object_mut() {
        for key in ["activeDeadlineSeconds", "schedulingGates", "tolerations"] {
            match old_spec.get(key) {
                Some(v) => o.insert(key.into(), v.clone()),
                None => o.remove(key),
            };
        }
        let old_grace = old_spec.get("terminationGracePeriodSeconds").and_then(Value::as_i64);
        if old_grace.is_some_and(|g| g < 0) && o.get("terminationGracePeriodSeconds").and_then(Value::as_i64) == Some(1)
        {
            o.insert("terminationGracePeriodSeconds".into(), json!(old_grace));
        }
    }
    m
}

/// A value as Go's `Semantic.DeepEqual` sees it: nulls and empty lists are absent.
fn normalized(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null() && !v.as_array().is_some_and(Vec::is_empty))
                .map(|(k, v)| (k.clone(), normalized(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(normalized).collect()),
        other => other.clone(),
    }
}

/// JSON indented by one space, as the real server prints the specs it compares.
fn pretty(v: &Value) -> String {
    use serde::Serialize;
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, serde_json::ser::PrettyFormatter::with_indent(b" "));
    v.serialize(&mut ser).expect("JSON");
    String::from_utf8(out).expect("UTF-8")
}

/// A unified diff with three lines of context and no file names, as go-difflib writes it
/// (`@@ -a,b +c,d @@` hunks; every line ends with a newline).
pub(crate) fn unified_diff(a: &str, b: &str) -> String {
    let a: Vec<&str> = a.lines().collect();
    let b: Vec<&str> = b.lines().collect();
    let ops = opcodes(&a, &b);
    let mut out = String::new();
    for group in grouped(ops, 3) {
        let (first, last) = (group[0], group[group.len() - 1]);
        out.push_str(&format!("@@ -{} +{} @@\n", range(first.1, last.2), range(first.3, last.4)));
        for (tag, i1, i2, j1, j2) in group {
            if tag == 'e' {
                a[i1..i2].iter().for_each(|l| out.push_str(&format!(" {l}\n")));
                continue;
            }
            a[i1..i2].iter().for_each(|l| out.push_str(&format!("-{l}\n")));
            b[j1..j2].iter().for_each(|l| out.push_str(&format!("+{l}\n")));
        }
    }
    out
}

/// difflib's `formatRangeUnified`.
fn range(start: usize, stop: usize) -> String {
    let len = stop - start;
    match len {
        1 => format!("{}", start + 1),
        0 => format!("{start},0"),
        _ => format!("{},{len}", start + 1),
    }
}

type Op = (char, usize, usize, usize, usize);

/// Equal ('e') and changed ('r') ranges from a longest common subsequence of lines.
fn opcodes(a: &[&str], b: &[&str]) -> Vec<Op> {
    let prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..].iter().rev().zip(b[prefix..].iter().rev()).take_while(|(x, y)| x == y).count();
    let (ma, mb) = (&a[prefix..a.len() - suffix], &b[prefix..b.len() - suffix]);
    // lcs[i][j]: the LCS length of ma[i..] and mb[j..].
    let mut lcs = vec![vec![0u32; mb.len() + 1]; ma.len() + 1];
    for i in (0..ma.len()).rev() {
        for j in (0..mb.len()).rev() {
            lcs[i][j] = if ma[i] == mb[j] { lcs[i + 1][j + 1] + 1 } else { lcs[i + 1][j].max(lcs[i][j + 1]) };
        }
    }
    let mut matches = vec![(0, 0, prefix)];
    let (mut i, mut j) = (0, 0);
    while i < ma.len() && j < mb.len() {
        if ma[i] == mb[j] {
            matches.push((prefix + i, prefix + j, 1));
            i += 1;
            j += 1;
        } else if lcs[i + 1][j] >= lcs[i][j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    matches.push((a.len() - suffix, b.len() - suffix, suffix));
    let mut ops = Vec::new();
    let (mut ai, mut bj) = (0, 0);
    for (mi, mj, n) in matches {
        if ai < mi || bj < mj {
            ops.push(('r', ai, mi, bj, mj));
        }
        if n > 0 {
            match ops.last_mut() {
                Some(('e', _, i2, _, j2)) if *i2 == mi && *j2 == mj => {
                    *i2 += n;
                    *j2 += n;
                }
                _ => ops.push(('e', mi, mi + n, mj, mj + n)),
            }
        }
        ai = mi + n;
        bj = mj + n;
    }
    ops
}

/// difflib's `GetGroupedOpCodes(n)`: the changes with `n` lines of context, in hunks.
fn grouped(mut ops: Vec<Op>, n: usize) -> Vec<Vec<Op>> {
    if ops.is_empty() {
        ops.push(('e', 0, 1, 0, 1));
    }
    if let Some(first) = ops.first_mut()
        && first.0 == 'e'
    {
        first.1 = first.1.max(first.2.saturating_sub(n));
        first.3 = first.3.max(first.4.saturating_sub(n));
    }
    if let Some(last) = ops.last_mut()
        && last.0 == 'e'
    {
        last.2 = last.2.min(last.1 + n);
        last.4 = last.4.min(last.3 + n);
    }
    let mut groups = Vec::new();
    let mut group = Vec::new();
    for (tag, mut i1, i2, mut j1, j2) in ops {
        if tag == 'e' && i2 - i1 > 2 * n {
            group.push((tag, i1, i2.min(i1 + n), j1, j2.min(j1 + n)));
            groups.push(std::mem::take(&mut group));
            i1 = i1.max(i2.saturating_sub(n));
            j1 = j1.max(j2.saturating_sub(n));
        }
        group.push((tag, i1, i2, j1, j2));
    }
    if !(group.is_empty() || group.len() == 1 && group[0].0 == 'e') {
        groups.push(group);
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unified_diff_is_difflibs() {
        // What Python's difflib (go-difflib's model) writes for the same input.
        let a = "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\nk\nl\nm\nn";
        let b = "a\nb\nc\nd\nE\nf\ng\nh\ni\nj\nk\nl\nM\nn\no";
        assert_eq!(
            unified_diff(a, b),
            "@@ -2,7 +2,7 @@\n b\n c\n d\n-e\n+E\n f\n g\n h\n@@ -10,5 +10,6 @@\n j\n k\n l\n-m\n+M\n n\n+o\n"
        );
        assert_eq!(unified_diff("x", "x"), "");
        assert_eq!(unified_diff("x", "x\ny"), "@@ -1 +1,2 @@\n x\n+y\n");
        assert_eq!(unified_diff("x\ny", "y"), "@@ -1,2 +1 @@\n-x\n y\n");
    }

    #[test]
    fn only_images_deadlines_and_tolerations_change() {
        let old = json!({"spec": {"containers": [{"name": "c", "image": "a"}], "activeDeadlineSeconds": 30,
                                  "tolerations": [{"key": "k", "operator": "Exists"}]}});
        let mut new = old.clone();
        new["spec"]["containers"][0]["image"] = json!("b");
        new["spec"]["activeDeadlineSeconds"] = json!(20);
        new["spec"]["tolerations"] = json!([{"key": "k", "operator": "Exists"}, {"key": "l", "operator": "Exists"}]);
        assert_eq!(validate_pod_update(&new, &old), vec![]);
        new["spec"]["containers"][0]["env"] = json!([{"name": "A", "value": "1"}]);
        let errs = validate_pod_update(&new, &old);
        assert_eq!(errs.len(), 1);
        assert!(errs[0].message.starts_with(&format!("Forbidden: {UPDATABLE}\n@@ -")), "{}", errs[0].message);
        assert!(errs[0].message.contains("\n+   \"env\": [\n"), "{}", errs[0].message);
    }
}
