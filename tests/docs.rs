//! `docs/api.md` documents every field of every kind: a field added to the types without a line
//! in the reference fails here.

use serde_json::Value;

fn paths(schema: &Value, prefix: &str, out: &mut Vec<String>) {
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (name, sub) in props {
            let path = if prefix.is_empty() { name.clone() } else { format!("{prefix}.{name}") };
            out.push(path.clone());
            // Standard conditions and free-form Helm values are documented as a whole.
            if name == "conditions" || name == "values" {
                continue;
            }
            paths(sub, &path, out);
            if let Some(items) = sub.get("items") {
                let mut inner = Vec::new();
                paths(items, "", &mut inner);
                out.extend(inner.into_iter().map(|p| format!("{path}[].{p}")));
            }
        }
    }
}

#[test]
fn api_reference_covers_every_field() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/api.md")).unwrap();
    let mut missing = Vec::new();
    for manifest in kuvryn_sync::api::crd::manifests() {
        let kind = manifest["spec"]["names"]["kind"].as_str().unwrap();
        let section = doc.split(&format!("\n## {kind}\n")).nth(1).unwrap_or_else(|| panic!("no section for {kind}"));
        let section = section.split("\n## ").next().unwrap();
        let schema = &manifest["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let mut all = Vec::new();
        for top in ["spec", "status"] {
            paths(&schema["properties"][top], top, &mut all);
        }
        for path in all {
            // A nested field may be documented on the row of one of its ancestors, which then names
            // it in backticks (`status.plan.entries` lists `group`, `kind`, ...).
            let documented = section.contains(&format!("`{path}`")) || {
                let field = path.rsplit(['.']).next().unwrap();
                let mut ancestors = Vec::new();
                let mut rest = path.as_str();
                while let Some((parent, _)) = rest.rsplit_once('.') {
                    ancestors.push(parent.to_string());
                    ancestors.push(parent.trim_end_matches("[]").replace("[]", ""));
                    rest = parent;
                }
                section.lines().any(|l| {
                    l.contains(&format!("`{field}`")) && ancestors.iter().any(|a| l.contains(&format!("`{a}`")))
                })
            };
            if !documented {
                missing.push(format!("{kind}: {path}"));
            }
        }
    }
    assert!(missing.is_empty(), "docs/api.md does not document: {missing:#?}");
}

/// What every mention of a feature that is designed but not built must say, word for word.
const MARK: &str = "Not yet implemented";

/// Features that are documented (the design) but not built yet, as the words that mention them
/// (matched case-insensitively, whitespace collapsed). Every paragraph, list item or table row of
/// `docs/*.md`, `README.md` and `deploy/README.md`, and every CRD description (`crds/*.yaml` and
/// `crds/schemas/`), that mentions one must also say [`MARK`]. A fenced code block (an example)
/// passes when it, or the text block right before or after it, says it.
///
/// This list is what later work shrinks: when a feature lands, remove its words here together
/// with the "Not yet implemented" notes on it in the docs and the doc comments of `src/api/`
/// (then regenerate `crds/`). Words chosen to avoid names that are also real today: Flux's
/// `DependencyNotReady` reason appears in `health.md`, and simcluster has no "admission webhooks".
const NOT_YET_IMPLEMENTED: &[&str] = &[
    // Plan-wide warnings (only each entry's `warning` is written).
    "plan.warnings",
    "plan-wide warnings",
    // An image in a registry.
    "published image",
];

/// Words of [`NOT_YET_IMPLEMENTED`] a whole doc may use unmarked, with the reason beside each
/// (none today).
const EXEMPT: &[(&str, &[&str])] = &[];

/// CRD fields of features not built yet whose own description must say [`MARK`] (what
/// `kubectl explain` shows for them), whatever words it uses: `kind` and a path of properties
/// (`[]` for list items; the empty path is the kind itself). Shrinks with [`NOT_YET_IMPLEMENTED`].
const NOT_YET_IMPLEMENTED_FIELDS: &[(&str, &str)] = &[("Revision", "status.plan.warnings")];

fn collapse(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn unbuilt_named(text: &str) -> Vec<&'static str> {
    let lower = text.to_lowercase();
    NOT_YET_IMPLEMENTED.iter().copied().filter(|t| lower.contains(&t.to_lowercase())).collect()
}

/// A Markdown file as the units a reader takes in one piece: paragraphs, list items (with their
/// continuation lines) and table rows (headings skipped), each with whitespace collapsed. A fenced
/// code block is one unit, with the text blocks right before and after it as its context.
fn units(markdown: &str) -> Vec<(String, Vec<String>)> {
    let mut blocks: Vec<(bool, Vec<&str>)> = Vec::new();
    let mut current: Vec<&str> = Vec::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            if fenced {
                current.push(line);
                blocks.push((true, std::mem::take(&mut current)));
            } else {
                if !current.is_empty() {
                    blocks.push((false, std::mem::take(&mut current)));
                }
                current.push(line);
            }
            fenced = !fenced;
        } else if fenced || !line.trim().is_empty() {
            current.push(line);
        } else if !current.is_empty() {
            blocks.push((false, std::mem::take(&mut current)));
        }
    }
    if !current.is_empty() {
        blocks.push((fenced, current));
    }
    let mut out = Vec::new();
    for (i, (code, lines)) in blocks.iter().enumerate() {
        if *code {
            let context = [i.checked_sub(1), Some(i + 1)]
                .into_iter()
                .flatten()
                .filter_map(|j| blocks.get(j))
                .map(|(_, l)| collapse(&l.join("\n")))
                .collect();
            out.push((collapse(&lines.join("\n")), context));
            continue;
        }
        let mut unit: Vec<&str> = Vec::new();
        for line in lines {
            let t = line.trim_start();
            let starts_item = t.starts_with('|')
                || t.starts_with("- ")
                || t.starts_with("* ")
                || t.split_once(". ").is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
            if (t.starts_with('#') || starts_item) && !unit.is_empty() {
                out.push((collapse(&unit.join("\n")), Vec::new()));
                unit.clear();
            }
            if t.starts_with('#') {
                continue;
            }
            unit.push(line);
            if t.starts_with('|') {
                out.push((collapse(&unit.join("\n")), Vec::new()));
                unit.clear();
            }
        }
        if !unit.is_empty() {
            out.push((collapse(&unit.join("\n")), Vec::new()));
        }
    }
    out
}

fn descriptions(v: &Value, path: &str, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(m) => {
            for (k, sub) in m {
                match (k.as_str(), sub) {
                    ("description", Value::String(d)) => out.push((path.to_string(), collapse(d))),
                    _ => descriptions(sub, &format!("{path}/{k}"), out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| descriptions(i, path, out)),
        _ => {}
    }
}

fn field<'a>(schema: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').filter(|p| !p.is_empty()).try_fold(schema, |s, part| match part.strip_suffix("[]") {
        Some(name) => s.get("properties")?.get(name)?.get("items"),
        None => s.get("properties")?.get(part),
    })
}

#[test]
fn unbuilt_features_are_marked_not_yet_implemented_everywhere_they_are_described() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut unmarked = Vec::new();

    let mut docs: Vec<_> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    docs.extend([root.join("README.md"), root.join("deploy/README.md")]);
    for file in &docs {
        let text = std::fs::read_to_string(file).unwrap();
        let name = file.strip_prefix(root).unwrap().display();
        for (unit, context) in units(&text) {
            let exempt = EXEMPT.iter().find(|(f, _)| name.to_string() == *f).map_or(&[][..], |(_, w)| *w);
            let named: Vec<_> = unbuilt_named(&unit).into_iter().filter(|w| !exempt.contains(w)).collect();
            if !named.is_empty() && !unit.contains(MARK) && !context.iter().any(|c| c.contains(MARK)) {
                unmarked.push(format!("{name}: {named:?} in: {unit}"));
            }
        }
    }

    let mut crds: Vec<_> = std::fs::read_dir(root.join("crds")).unwrap().map(|e| e.unwrap().path()).collect();
    let schemas = root.join("crds/schemas/sync.kuvryn.io");
    crds.extend(std::fs::read_dir(schemas).unwrap().map(|e| e.unwrap().path()));
    crds.retain(|p| p.extension().is_some_and(|e| e == "yaml" || e == "json"));
    crds.sort();
    assert!(crds.len() >= 8, "CRDs and their schemas not found: {crds:?}");
    let mut checked = 0;
    for file in &crds {
        let text = std::fs::read_to_string(file).unwrap();
        let doc: Value = if file.extension().is_some_and(|e| e == "json") {
            serde_json::from_str(&text).unwrap()
        } else {
            kuvryn_sync::yaml::from_str(&text).unwrap()
        };
        let name = file.strip_prefix(root).unwrap().display();
        let mut all = Vec::new();
        descriptions(&doc, "", &mut all);
        for (path, d) in all {
            let named = unbuilt_named(&d);
            if !named.is_empty() && !d.contains(MARK) {
                unmarked.push(format!("{name} {path}: {named:?} in: {d}"));
            }
        }
        let Some(kind) = doc.pointer("/spec/names/kind").and_then(Value::as_str) else { continue };
        let schema = &doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        for (_, path) in NOT_YET_IMPLEMENTED_FIELDS.iter().filter(|(k, _)| *k == kind) {
            checked += 1;
            let d = field(schema, path).and_then(|f| f.get("description")).and_then(Value::as_str);
            match d.map(collapse) {
                Some(d) if d.contains(MARK) => {}
                other => unmarked.push(format!("{name}: {kind} {path:?}: description {other:?}")),
            }
        }
    }
    assert_eq!(checked, NOT_YET_IMPLEMENTED_FIELDS.len(), "a listed kind has no CRD in crds/");
    assert!(
        unmarked.is_empty(),
        "these describe a feature that is not built as if it were; say \"{MARK}\" there \
         (in src/api/ doc comments, then regenerate crds/): {unmarked:#?}"
    );
}

/// Every metric the manager publishes is documented for users (its meaning and labels).
#[test]
fn every_metric_is_documented() {
    let docs: String = std::fs::read_dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "md"))
        .map(|e| std::fs::read_to_string(e.path()).expect("a doc"))
        .collect();
    let missing: Vec<_> = kuvryn_sync::metric_names::ALL.iter().filter(|n| !docs.contains(&format!("`{n}`"))).collect();
    assert!(missing.is_empty(), "metrics no page of docs/ names: {missing:?}");
}
