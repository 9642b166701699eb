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
