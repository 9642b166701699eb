//! `.ksync.yaml`: the Application definitions a Repository declares. Pure parsing and
//! validation; the Repository controller reads the files from Git and applies the result.
//!
//! A file holds one Application object, or an `applications:` list of them. Each needs
//! `metadata.name`; `apiVersion`/`kind`, when given, must be `sync.kuvryn.io/v1alpha1`
//! `Application`; `metadata.namespace`, when given, must be the Repository's; only `name`,
//! `namespace`, `labels` and `annotations` are read from `metadata`; unknown fields anywhere
//! are an error (a typo must not silently change a deployment). Names are unique across all
//! files of a Repository.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::api::application::ApplicationSpec;
use crate::api::names;

/// The file name every config path must have.
pub const FILE_NAME: &str = ".ksync.yaml";

/// One Application declared in Git.
#[derive(Clone, Debug, PartialEq)]
pub struct Declared {
    /// Its name.
    pub name: String,
    /// The config file that declares it (repository-relative).
    pub file: String,
    /// Labels from the file.
    pub labels: BTreeMap<String, String>,
    /// Annotations from the file.
    pub annotations: BTreeMap<String, String>,
    /// The spec, as written (the API server defaults it).
    pub spec: Value,
}

/// A problem with the config files: the file and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {message}")]
pub struct ConfigError {
    /// The repository-relative file.
    pub file: String,
    /// What is wrong.
    pub message: String,
}

fn err(file: &str, message: impl Into<String>) -> ConfigError {
    ConfigError { file: file.to_string(), message: message.into() }
}

/// Check a configured path (`spec.applicationConfigPaths` entry): repository-relative, inside
/// the checkout, named `.ksync.yaml`. Returns it cleaned.
pub fn check_config_path(path: &str) -> Result<String, ConfigError> {
    let clean = super::checkout::clean_relative_path(path).map_err(|e| err(path, e.to_string()))?;
    let name = clean.rsplit('/').next().unwrap_or_default();
    if name != FILE_NAME {
        return Err(err(path, format!("a config path must name a file called {FILE_NAME}")));
    }
    Ok(clean)
}

/// Parse one file.
pub fn parse_file(file: &str, content: &[u8], namespace: &str, repository: &str) -> Result<Vec<Declared>, ConfigError> {
    let text = std::str::from_utf8(content).map_err(|_| err(file, "not UTF-8 text"))?;
    let doc: Value = crate::yaml::from_str(text).map_err(|e| err(file, format!("invalid YAML: {e}")))?;
    let items: Vec<(String, Value)> = match doc {
        Value::Null => return Err(err(file, "the file is empty: declare an Application or an applications: list")),
        Value::Object(mut map) if map.contains_key("applications") => {
            let list = map.remove("applications").unwrap_or_default();
            if let Some(extra) = map.keys().next() {
                return Err(err(file, format!("unknown top-level field {extra:?} next to applications")));
            }
            match list {
                Value::Array(items) => {
                    items.into_iter().enumerate().map(|(i, v)| (format!("applications[{i}]"), v)).collect()
                }
                Value::Null => Vec::new(),
                _ => return Err(err(file, "applications must be a list")),
            }
        }
        Value::Object(map) => vec![(String::new(), Value::Object(map))],
        _ => return Err(err(file, "expected an Application object or an applications: list")),
    };
    items.into_iter().map(|(at, v)| parse_one(file, &at, v, namespace, repository)).collect()
}

fn parse_one(file: &str, at: &str, v: Value, namespace: &str, repository: &str) -> Result<Declared, ConfigError> {
    let here = |m: String| if at.is_empty() { err(file, m) } else { err(file, format!("{at}: {m}")) };
    let Value::Object(mut obj) = v else { return Err(here("expected an Application object".into())) };
    if let Some(av) = obj.remove("apiVersion")
        && av != names::API_VERSION
    {
        return Err(here(format!("apiVersion must be {}, not {av}", names::API_VERSION)));
    }
    if let Some(kind) = obj.remove("kind")
        && kind != "Application"
    {
        return Err(here(format!("kind must be Application, not {kind}")));
    }
    let metadata = obj.remove("metadata").unwrap_or_default();
    let mut spec = obj.remove("spec").ok_or_else(|| here("spec is missing".into()))?;
    // `spec.source.repository` defaults to the Repository that declares the Application.
    if let Some(source) = spec.get_mut("source").and_then(Value::as_object_mut) {
        source.entry("repository").or_insert_with(|| Value::String(repository.to_string()));
    }
    if let Some(extra) = obj.keys().next() {
        return Err(here(format!("unknown field {extra:?}")));
    }
    let Value::Object(mut meta) = metadata else { return Err(here("metadata.name is missing".into())) };
    let name = match meta.remove("name") {
        Some(Value::String(n)) => n,
        _ => return Err(here("metadata.name is missing".into())),
    };
    if let Some(msg) = invalid_name(&name) {
        return Err(here(format!("metadata.name {name:?}: {msg}")));
    }
    if let Some(ns) = meta.remove("namespace")
        && ns != namespace
    {
        return Err(here(format!(
            "Application {name}: metadata.namespace must be the Repository's namespace {namespace:?} (or left out), not {ns}"
        )));
    }
    let string_map = |field: &str, v: Option<Value>| -> Result<BTreeMap<String, String>, ConfigError> {
        match v {
            None | Some(Value::Null) => Ok(BTreeMap::new()),
            Some(v) => serde_json::from_value(v)
                .map_err(|_| here(format!("Application {name}: metadata.{field} must map strings to strings"))),
        }
    };
    let labels = string_map("labels", meta.remove("labels"))?;
    let annotations = string_map("annotations", meta.remove("annotations"))?;
    if let Some(extra) = meta.keys().next() {
        return Err(here(format!("Application {name}: unsupported metadata field {extra:?}")));
    }
    for reserved in [names::labels::REPOSITORY, names::labels::SHARD] {
        if labels.contains_key(reserved) {
            return Err(here(format!("Application {name}: label {reserved} is set by Kuvryn Sync")));
        }
    }
    let refused: Vec<String> = annotations
        .keys()
        .filter_map(|k| refused_annotation(k).map(|why| format!("annotation {k} cannot be declared in Git: {why}")))
        .collect();
    if !refused.is_empty() {
        return Err(here(format!("Application {name}: {}", refused.join("; "))));
    }
    let typed: ApplicationSpec =
        serde_json::from_value(spec.clone()).map_err(|e| here(format!("Application {name}: invalid spec: {e}")))?;
    let round = serde_json::to_value(&typed).map_err(|e| here(format!("Application {name}: {e}")))?;
    if let Some(path) = unknown_field(&spec, &round, "spec") {
        return Err(here(format!("Application {name}: unknown field {path}")));
    }
    Ok(Declared { name, file: file.to_string(), labels, annotations, spec })
}

/// The first field of `input` that the typed round trip dropped (an unknown field).
fn unknown_field(input: &Value, round: &Value, path: &str) -> Option<String> {
    match (input, round) {
        (Value::Object(a), Value::Object(b)) => a.iter().find_map(|(k, v)| match b.get(k) {
            None => Some(format!("{path}.{k}")),
            Some(w) => unknown_field(v, w, &format!("{path}.{k}")),
        }),
        (Value::Array(a), Value::Array(b)) => {
            a.iter().zip(b).enumerate().find_map(|(i, (v, w))| unknown_field(v, w, &format!("{path}[{i}]")))
        }
        _ => None,
    }
}

/// Why annotation `key` may not be declared in `.ksync.yaml`, or `None` when Git may set it.
///
/// # Contract
/// What Git declares is written by the manager, so Git never carries a person's decision: the
/// approval family (`sync.kuvryn.io/approved-*`: `ksync sync`), the rollback family
/// (`sync.kuvryn.io/rollback-*`: `ksync rollback`, or a failure policy) and a forced redeploy
/// (`sync.kuvryn.io/redeploy-requested-at`: `ksync redeploy`) are refused, whole prefixes at
/// once so that no member added later slips through; so is `discovered-from`, which Kuvryn Sync
/// sets. Every other annotation, `reconcile-requested-at` included (it asks for a reconcile of
/// what Git already declares, and approves nothing), is Git's to set. Table test:
/// `refused_annotations`.
pub fn refused_annotation(key: &str) -> Option<&'static str> {
    use names::annotations as a;
    if key == a::DISCOVERED_FROM {
        Some("Kuvryn Sync sets it")
    } else if key.starts_with(a::APPROVAL_PREFIX) {
        Some("an approval is a person's decision (ksync sync), never a commit's")
    } else if key.starts_with(a::ROLLBACK_PREFIX) {
        Some("a rollback request is a person's decision (ksync rollback) or a failure policy's, never a commit's")
    } else if key == a::REDEPLOY_REQUESTED_AT {
        Some("a forced redeploy is a person's request (ksync redeploy), never a commit's")
    } else {
        None
    }
}

fn invalid_name(name: &str) -> Option<&'static str> {
    if name.is_empty() || name.len() > 63 {
        return Some("must be 1 to 63 characters");
    }
    let ok = name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    (!ok).then_some("must be a lowercase RFC 1123 name (a-z, 0-9, '-', '.'; alphanumeric at both ends)")
}

/// Parse every file and check that names are unique across them. `files` are (path,
/// content) in configuration order; a missing file is an error the caller reports before.
pub fn parse_all(files: &[(String, Vec<u8>)], namespace: &str, repository: &str) -> Result<Vec<Declared>, ConfigError> {
    let mut out: Vec<Declared> = Vec::new();
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for (file, content) in files {
        for d in parse_file(file, content, namespace, repository)? {
            if let Some(first) = seen.get(&d.name) {
                return Err(err(
                    file,
                    format!("Application {} is declared twice (also in {first}): names must be unique", d.name),
                ));
            }
            seen.insert(d.name.clone(), file.clone());
            out.push(d);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: &str = "spec:\n  source:\n    repository: platform\n    path: apps/web\n  serviceAccountName: deployer\n  destination:\n    namespace: web\n";

    fn parse(text: &str) -> Result<Vec<Declared>, ConfigError> {
        parse_file(".ksync.yaml", text.as_bytes(), "team-a", "platform")
    }

    #[test]
    fn single_object() {
        let text = format!(
            "apiVersion: sync.kuvryn.io/v1alpha1\nkind: Application\nmetadata:\n  name: web\n  labels: {{tier: front}}\n{SPEC}"
        );
        let apps = parse(&text).unwrap();
        assert_eq!(apps.len(), 1);
        assert_eq!(apps[0].name, "web");
        assert_eq!(apps[0].labels["tier"], "front");
        assert_eq!(apps[0].spec["source"]["path"], "apps/web");
    }

    #[test]
    fn the_repository_is_the_default_source() {
        let apps = parse("metadata: {name: web}\nspec: {source: {path: apps/web}, serviceAccountName: sa, destination: {namespace: web}}\n").unwrap();
        assert_eq!(apps[0].spec["source"]["repository"], "platform");
    }

    #[test]
    fn list() {
        let item = |n: &str| {
            format!(
                "- metadata: {{name: {n}}}\n  spec: {{source: {{repository: r, path: p}}, serviceAccountName: sa, destination: {{namespace: d}}}}\n"
            )
        };
        let text = format!("applications:\n{}{}", item("a"), item("b"));
        let apps = parse(&text).unwrap();
        assert_eq!(apps.iter().map(|a| a.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(parse("applications: []\n").unwrap(), Vec::new());
    }

    #[test]
    fn invalid_files() {
        let cases: Vec<(String, &str)> = vec![
            ("".into(), "empty"),
            ("applications: {a: 1}\n".into(), "must be a list"),
            ("applications: []\nextra: 1\n".into(), "unknown top-level field"),
            ("key: [unclosed\n".into(), "invalid YAML"),
            ("a: 1\na: 2\n".into(), "invalid YAML"),
            (format!("metadata: {{name: web}}\n{SPEC}  bogus: 1\n"), "unknown field spec.bogus"),
            (format!("metadata: {{name: web}}\n{SPEC}").replace("path:", "pth:"), "unknown field spec.source.pth"),
            (format!("metadata: {{name: Web}}\n{SPEC}"), "lowercase"),
            (format!("metadata: {{}}\n{SPEC}"), "metadata.name is missing"),
            (format!("metadata: {{name: web, namespace: other}}\n{SPEC}"), "Repository's namespace"),
            (format!("kind: Repository\nmetadata: {{name: web}}\n{SPEC}"), "kind must be Application"),
            (format!("apiVersion: v1\nmetadata: {{name: web}}\n{SPEC}"), "apiVersion must be"),
            ("metadata: {name: web}\n".into(), "spec is missing"),
            (
                format!("metadata: {{name: web, labels: {{sync.kuvryn.io/repository: x}}}}\n{SPEC}"),
                "set by Kuvryn Sync",
            ),
            (format!("metadata: {{name: web, uid: x}}\n{SPEC}"), "unsupported metadata field"),
            ("metadata: {name: web}\nspec: {source: 3}\n".into(), "invalid spec"),
            (format!("metadata: {{name: web}}\nstatus: {{}}\n{SPEC}"), "unknown field \"status\""),
        ];
        for (text, want) in cases {
            let e = parse(&text).unwrap_err();
            assert_eq!(e.file, ".ksync.yaml");
            assert!(e.to_string().contains(want), "{text:?}: got {e}, want {want:?}");
        }
    }

    #[test]
    fn refused_annotations() {
        use names::annotations as a;
        let refused = [
            a::DISCOVERED_FROM,
            a::APPROVED_PLAN,
            a::APPROVED_BY,
            a::APPROVED_AT,
            "sync.kuvryn.io/approved-anything",
            a::ROLLBACK_TO,
            a::ROLLBACK_FROM,
            a::ROLLBACK_KIND,
            a::ROLLBACK_TARGET_REVISION,
            a::ROLLBACK_REQUESTED_BY,
            a::ROLLBACK_REQUESTED_AT,
            a::ROLLBACK_TARGET_HASH,
            "sync.kuvryn.io/rollback-anything",
            a::REDEPLOY_REQUESTED_AT,
        ];
        for key in refused {
            assert!(refused_annotation(key).is_some(), "{key} must be refused");
            let text = format!("metadata: {{name: web, annotations: {{{key}: x}}}}\n{SPEC}");
            let e = parse(&text).unwrap_err();
            assert!(e.message.contains(&format!("annotation {key} cannot be declared in Git")), "{e}");
        }
        let allowed = [
            a::RECONCILE_REQUESTED_AT,
            "team.example.com/owner",
            "sync.kuvryn.io/approved",
            "example.com/approved-plan",
        ];
        for key in allowed {
            assert_eq!(refused_annotation(key), None, "{key}");
            let text = format!("metadata: {{name: web, annotations: {{{key}: x}}}}\n{SPEC}");
            assert_eq!(parse(&text).unwrap()[0].annotations[key], "x");
        }
    }

    #[test]
    fn names_unique_across_files() {
        let one = format!("metadata: {{name: web}}\n{SPEC}");
        let files = vec![
            ("a/.ksync.yaml".to_string(), one.clone().into_bytes()),
            ("b/.ksync.yaml".to_string(), one.into_bytes()),
        ];
        let e = parse_all(&files, "team-a", "platform").unwrap_err();
        assert_eq!(e.file, "b/.ksync.yaml");
        assert!(e.message.contains("declared twice (also in a/.ksync.yaml)"), "{e}");
    }

    #[test]
    fn config_paths() {
        assert_eq!(check_config_path(".ksync.yaml").unwrap(), ".ksync.yaml");
        assert_eq!(check_config_path("./teams/a/.ksync.yaml").unwrap(), "teams/a/.ksync.yaml");
        for (bad, want) in [
            ("/etc/.ksync.yaml", "repository-relative"),
            ("../.ksync.yaml", "leaves the checkout"),
            ("a/../../.ksync.yaml", "leaves the checkout"),
            ("teams/ksync.yaml", "called .ksync.yaml"),
            ("teams/.ksync.yml", "called .ksync.yaml"),
        ] {
            let e = check_config_path(bad).unwrap_err();
            assert!(e.message.contains(want), "{bad}: {e}");
        }
    }
}
