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

use super::{Error, Limits, Request, Tools, process};

/// Render the chart of `req`.
pub async fn render(tools: &Tools, req: &Request<'_>, limits: &Limits) -> Result<Vec<Value>, Error> {
    if !req.dir.join("Chart.yaml").is_file() {
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
    let args = template_args(&release, req.namespace, &files);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let env = [
        ("HELM_CACHE_HOME", std::path::Path::new("helm-cache")),
        ("HELM_CONFIG_HOME", std::path::Path::new("helm-config")),
        ("HELM_DATA_HOME", std::path::Path::new("helm-data")),
    ];
    let out = process::run(&tools.helm, &args, req.dir, &env, limits, "helm template").await?;
    super::parse_output(out.stdout, "helm", "helm template output").await
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
/// `--`, then the release name and the chart (`.`), so neither can be taken for a flag.
pub fn template_args(release: &str, namespace: &str, values_files: &[String]) -> Vec<String> {
    let mut args = vec!["template".to_string(), format!("--namespace={namespace}")];
    args.extend(values_files.iter().map(|f| format!("--values={f}")));
    args.extend(["--".to_string(), release.to_string(), ".".to_string()]);
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
        let args = template_args("web", "team-a", &["/tmp/v-0.json".into(), "/tmp/v-1.json".into()]);
        assert_eq!(
            args,
            ["template", "--namespace=team-a", "--values=/tmp/v-0.json", "--values=/tmp/v-1.json", "--", "web", "."]
        );
    }
}
