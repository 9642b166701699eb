//! Helm: the real `helm template` on the chart at the source path. Release name from the
//! settings (default: the Application's name), the destination namespace, values from
//! `valuesFrom` (in order) then inline `values`. No network: chart dependencies must be vendored
//! under `charts/` in the repository. Hooks are rendered as objects, never run.
//!
//! The release name is checked against Helm's rule before helm runs ([`check_release_name`]:
//! the CRD checks `releaseName` too, but not a defaulted name, nor Applications stored before
//! the rule), and positional arguments come after `--` ([`template_args`]), so nothing from
//! the Application is ever read as a flag of helm.

use serde_json::Value;

use std::path::Path;

use super::{Capabilities, Dependency, Error, Limits, Request, Tools, process};
use crate::api::names::annotations;

/// Render the chart of `req`.
pub async fn render(tools: &Tools, req: &Request<'_>, limits: &Limits) -> Result<Vec<Value>, Error> {
    if req.packaged.is_none() && !req.dir.join("Chart.yaml").is_file() {
        return Err(Error::Failed {
            message: "no Chart.yaml at the source path (render type Helm)".into(),
            retryable: false,
        });
    }
    let helm = req.render.helm.clone().unwrap_or_default();
    let release = match &helm.release_name {
        Some(name) => {
            check_release_name(name).map_err(|why| {
                Error::Invalid(format!("spec.source.render.helm.releaseName {:?} {why}", shown(name)))
            })?;
            name.clone()
        }
        None => {
            check_release_name(req.application).map_err(|why| {
                Error::Invalid(format!(
                    "the Application's name {:?}, the default Helm release name, {why}: set spec.source.render.helm.releaseName",
                    shown(req.application)
                ))
            })?;
            req.application.to_string()
        }
    };
    let values_dir = tempfile::Builder::new()
        .prefix("ksync-values-")
        .tempdir()
        .map_err(|e| Error::Internal(format!("values directory: {e}")))?;
    let mut files = Vec::new();
    let inline = helm.values.clone().map(Value::Object);
    for (i, v) in req.values_from.iter().chain(inline.iter()).enumerate() {
        let path = values_dir.path().join(format!("values-{i}.json"));
        std::fs::write(&path, serde_json::to_vec(v).unwrap_or_default())
            .map_err(|e| Error::Internal(format!("writing values: {e}")))?;
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600));
        files.push(path.to_string_lossy().to_string());
    }
    // With dependencies to add, the chart is rendered from a scratch copy whose `charts/`
    // holds them: the checkout is shared and never written.
    let scratch;
    let mut chart = ".".to_string();
    let chart_dir = if let Some(p) = &req.packaged {
        scratch = tempfile::Builder::new()
            .prefix("ksync-chart-")
            .tempdir()
            .map_err(|e| Error::Internal(format!("chart directory: {e}")))?;
        chart = format!("{}-{}.tgz", p.name, p.version);
        std::fs::write(scratch.path().join(&chart), &p.archive)
            .map_err(|e| Error::Internal(format!("writing the chart archive: {e}")))?;
        scratch.path().to_path_buf()
    } else if req.dependencies.is_empty() {
        req.dir.to_path_buf()
    } else {
        scratch = tempfile::Builder::new()
            .prefix("ksync-chart-")
            .tempdir()
            .map_err(|e| Error::Internal(format!("chart directory: {e}")))?;
        let dir = scratch.path().join("chart");
        let (from, to, deps) = (req.dir.to_path_buf(), dir.clone(), req.dependencies.clone());
        crate::offload::offload(move || with_dependencies(&from, &to, &deps))
            .await
            .map_err(|e| Error::Internal(format!("preparing the chart's dependencies: {e}")))?;
        dir
    };
    let req = &Request { dir: &chart_dir, ..req.clone() };
    let mut capabilities = req.capabilities.as_deref().cloned().unwrap_or_default();
    let (mut crds, mut objects) = template(tools, req, limits, &release, &chart, &files, &capabilities).await?;
    // `helm install` creates a chart's CRDs before it renders the templates, so a template
    // guarded by `.Capabilities.APIVersions.Has` on a kind the chart defines renders it. The
    // same here: the kinds the chart's CRDs define count as served, in a second render.
    let defined = defined_api_versions(&crds);
    if !defined.is_subset(&capabilities.api_versions) {
        capabilities.api_versions.extend(defined);
        (crds, objects) = template(tools, req, limits, &release, &chart, &files, &capabilities).await?;
    }
    for crd in &mut crds {
        mark_chart_crd(crd);
    }
    crds.extend(objects);
    Ok(crds)
}

/// Copy the chart at `from` to `to` and put `deps` under its `charts/`: a pulled archive as
/// `<name>-<version>.tgz`, a local chart as the directory `<name>`. Symbolic links are copied as
/// links (the checkout holds only links that stay inside it).
fn with_dependencies(from: &Path, to: &Path, deps: &[Dependency]) -> std::io::Result<()> {
    copy_tree(from, to)?;
    let charts = to.join("charts");
    std::fs::create_dir_all(&charts)?;
    for d in deps {
        match d {
            Dependency::Pulled(p) => std::fs::write(charts.join(format!("{}-{}.tgz", p.name, p.version)), &p.archive)?,
            Dependency::Local { name, dir, .. } => copy_tree(dir, &charts.join(name))?,
        }
    }
    Ok(())
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type()?;
        if kind.is_dir() {
            copy_tree(&src, &dst)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src)?, &dst)?;
        } else {
            std::fs::copy(&src, &dst)?;
        }
    }
    Ok(())
}

/// One `helm template` run: the objects of the chart's `crds/` folders (its dependencies'
/// included) and the templates', apart.
async fn template(
    tools: &Tools,
    req: &Request<'_>,
    limits: &Limits,
    release: &str,
    chart: &str,
    values_files: &[String],
    capabilities: &Capabilities,
) -> Result<(Vec<Value>, Vec<Value>), Error> {
    let args = template_args(release, chart, req.namespace, values_files, capabilities);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let env = [
        ("HELM_CACHE_HOME", std::path::Path::new("helm-cache")),
        ("HELM_CONFIG_HOME", std::path::Path::new("helm-config")),
        ("HELM_DATA_HOME", std::path::Path::new("helm-data")),
    ];
    let out = process::run(&tools.helm, &args, req.dir, &env, limits, "helm template").await?;
    let text = String::from_utf8(out.stdout).map_err(|_| Error::Internal("helm printed non-UTF-8 output".into()))?;
    let (crds, templates) = split_crds(&text);
    let (crds, templates) = (crds.to_string(), templates.to_string());
    let crds = super::parse_output(crds.into_bytes(), "helm", "helm template output (crds/)").await?;
    let templates = super::parse_output(templates.into_bytes(), "helm", "helm template output").await?;
    let mut decoded = super::Decoded::default();
    decoded.add(&crds)?;
    decoded.add(&templates)?;
    Ok((crds, templates))
}

/// `helm template --include-crds` output split into the chart's `crds/` files (printed first,
/// each after `# Source: <chart>/crds/...` or `<chart>/charts/<dependency>/crds/...`) and the
/// rendered templates. Pure.
pub fn split_crds(text: &str) -> (&str, &str) {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if let Some(source) = line.trim_end().strip_prefix("# Source: ")
            && !is_crd_source(source)
        {
            // The template's document starts at the `---` before its `# Source:` line.
            let start = text[..offset].rfind("---").unwrap_or(offset);
            return text.split_at(start);
        }
        offset += line.len();
    }
    (text, "")
}

/// Whether a `# Source:` path names a file of a chart's `crds/` folder:
/// `<chart>(/charts/<dependency>)*/crds/...`.
fn is_crd_source(path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').collect();
    let mut i = 1;
    while i + 1 < parts.len() && parts[i] == "charts" {
        i += 2;
    }
    parts.len() > i + 1 && parts[i] == "crds"
}

/// The `group/version` and `group/version/Kind` the CustomResourceDefinitions among `crds`
/// serve.
fn defined_api_versions(crds: &[Value]) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    for crd in crds.iter().filter(|o| o["kind"] == "CustomResourceDefinition") {
        let (Some(group), Some(kind)) = (crd["spec"]["group"].as_str(), crd["spec"]["names"]["kind"].as_str()) else {
            continue;
        };
        for v in crd["spec"]["versions"].as_array().into_iter().flatten() {
            if let Some(version) = v["name"].as_str().filter(|_| v["served"] != false) {
                out.insert(format!("{group}/{version}"));
                out.insert(format!("{group}/{version}/{kind}"));
            }
        }
    }
    out
}

/// Annotate an object of a chart's `crds/` folder ([`annotations::CHART_CRD`]): the plan lists
/// it as such and applies it before every other object of the chart.
fn mark_chart_crd(obj: &mut Value) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        let a = meta.entry("annotations").or_insert_with(|| Value::Object(Default::default()));
        if !a.is_object() {
            *a = Value::Object(Default::default());
        }
        a.as_object_mut().expect("annotations object").insert(annotations::CHART_CRD.into(), "true".into());
    }
}

/// Most characters in a Helm release name (Helm's `maxReleaseNameLen`).
pub const MAX_RELEASE_NAME: usize = 53;

/// Helm's rule for release names (`chartutil.ValidateReleaseName`): at most 53 characters
/// matching `^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`: dot-separated
/// parts of lowercase letters, digits and `-`, each starting and ending with a letter or
/// digit. So a valid name never starts with `-`. The error says why not, as the end of a
/// sentence.
pub fn check_release_name(name: &str) -> Result<(), String> {
    const RULE: &str =
        "lowercase letters, digits, '-' and '.', each dot-separated part starting and ending with a letter or digit";
    if name.len() > MAX_RELEASE_NAME {
        return Err(format!("is not a Helm release name: longer than {MAX_RELEASE_NAME} characters"));
    }
    let part_ok = |p: &str| {
        let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
        !p.is_empty()
            && p.bytes().all(|c| alnum(c) || c == b'-')
            && p.bytes().next().is_some_and(alnum)
            && p.bytes().last().is_some_and(alnum)
    };
    if name.split('.').all(part_ok) { Ok(()) } else { Err(format!("is not a Helm release name ({RULE})")) }
}

/// The arguments of `helm template`: options (with their values attached by `=`), then
/// `--`, then the release name and the chart (`.`, or a packaged chart's archive), so neither
/// can be taken for a flag. The
/// chart's CRDs are included, and `.Capabilities` answer from `capabilities`.
pub fn template_args(
    release: &str,
    chart: &str,
    namespace: &str,
    values_files: &[String],
    capabilities: &Capabilities,
) -> Vec<String> {
    let mut args = vec!["template".to_string(), format!("--namespace={namespace}"), "--include-crds".to_string()];
    if let Some(v) = &capabilities.kube_version {
        args.push(format!("--kube-version={v}"));
    }
    args.extend(capabilities.api_versions.iter().map(|v| format!("--api-versions={v}")));
    args.extend(values_files.iter().map(|f| format!("--values={f}")));
    args.extend(["--".to_string(), release.to_string(), chart.to_string()]);
    args
}

/// A name for an error message: at most 64 characters.
fn shown(name: &str) -> String {
    if name.chars().count() > 64 {
        format!("{}...", name.chars().take(64).collect::<String>())
    } else {
        name.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_names_follow_helms_rule() {
        let longest = "a".repeat(53);
        for ok in ["web", "x", "1web", "web-2", "web.v2", "a.b.c", "0", longest.as_str()] {
            assert_eq!(check_release_name(ok), Ok(()), "{ok:?}");
        }
        let too_long = "a".repeat(54);
        for bad in [
            "",
            "--set-file=x=/proc/1/environ",
            "-web",
            "web-",
            "Web",
            "my_app",
            "web..v2",
            ".web",
            "web.",
            "web.-x",
            "w eb",
            "wéb",
            too_long.as_str(),
        ] {
            let e = check_release_name(bad).expect_err(bad);
            assert!(e.starts_with("is not a Helm release name"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn positional_arguments_of_helm_come_after_a_double_dash() {
        let caps = Capabilities {
            kube_version: Some("v1.36.2".into()),
            api_versions: ["v1".to_string(), "apps/v1/Deployment".to_string()].into(),
        };
        let args = template_args("web", ".", "team-a", &["/tmp/v-0.json".into(), "/tmp/v-1.json".into()], &caps);
        assert_eq!(
            args,
            [
                "template",
                "--namespace=team-a",
                "--include-crds",
                "--kube-version=v1.36.2",
                "--api-versions=apps/v1/Deployment",
                "--api-versions=v1",
                "--values=/tmp/v-0.json",
                "--values=/tmp/v-1.json",
                "--",
                "web",
                "."
            ]
        );
    }

    #[test]
    fn the_crds_section_ends_at_the_first_template() {
        let text = "---\n# Source: web/crds/a.yaml\nkind: CustomResourceDefinition\n---\nkind: CustomResourceDefinition\n\n---\n# Source: web/charts/db/crds/b.yaml\nkind: CustomResourceDefinition\n\n---\n# Source: web/templates/crds/cm.yaml\nkind: ConfigMap\n---\n# Source: web/charts/db/templates/x.yaml\nkind: Secret\n";
        let (crds, templates) = split_crds(text);
        assert_eq!(crds.matches("CustomResourceDefinition").count(), 3, "{crds}");
        assert!(templates.starts_with("---\n# Source: web/templates/crds/cm.yaml"), "{templates}");
        assert!(!templates.contains("CustomResourceDefinition"), "{templates}");
        assert_eq!(
            split_crds("---\n# Source: web/templates/a.yaml\nkind: A\n"),
            ("", "---\n# Source: web/templates/a.yaml\nkind: A\n")
        );
        assert_eq!(split_crds("---\n# Source: web/crds/a.yaml\nkind: A\n").1, "");
        for (path, crd) in [
            ("web/crds/a.yaml", true),
            ("web/crds/sub/a.yaml", true),
            ("web/charts/db/crds/a.yaml", true),
            ("web/charts/db/charts/x/crds/a.yaml", true),
            ("web/templates/crds/a.yaml", false),
            ("web/charts/crds/templates/a.yaml", false),
            ("web/crds", false),
            ("crds/a.yaml", false),
        ] {
            assert_eq!(is_crd_source(path), crd, "{path}");
        }
    }

    #[test]
    fn a_charts_crds_define_api_versions() {
        let crd = serde_json::json!({"kind": "CustomResourceDefinition", "spec": {"group": "example.com",
            "names": {"kind": "Widget"}, "versions": [{"name": "v1", "served": true}, {"name": "v0", "served": false}]}});
        let got: Vec<String> = defined_api_versions(&[crd]).into_iter().collect();
        assert_eq!(got, ["example.com/v1", "example.com/v1/Widget"]);
    }
}
