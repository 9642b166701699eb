//! Helm: the real `helm template` on the chart at the source path. Release name from the
//! settings (default: the Application's name), the destination namespace, values from
//! `valuesFrom` (in order) then inline `values`. No network: chart dependencies must be vendored
//! under `charts/` in the repository. Hooks are rendered as objects, never run.

use serde_json::Value;

use super::{Error, Limits, Request, Tools, objects_of, process};

/// Render the chart of `req`.
pub async fn render(tools: &Tools, req: &Request<'_>, limits: &Limits) -> Result<Vec<Value>, Error> {
    if !req.dir.join("Chart.yaml").is_file() {
        return Err(Error::Failed {
            message: "no Chart.yaml at the source path (render type Helm)".into(),
            retryable: false,
        });
    }
    let helm = req.render.helm.clone().unwrap_or_default();
    let release = helm.release_name.clone().unwrap_or_else(|| req.application.to_string());
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
    let mut args = vec!["template", release.as_str(), ".", "--namespace", req.namespace];
    for f in &files {
        args.push("--values");
        args.push(f);
    }
    let env = [
        ("HELM_CACHE_HOME", std::path::Path::new("helm-cache")),
        ("HELM_CONFIG_HOME", std::path::Path::new("helm-config")),
        ("HELM_DATA_HOME", std::path::Path::new("helm-data")),
    ];
    let out = process::run(&tools.helm, &args, req.dir, &env, limits, "helm template").await?;
    let text = String::from_utf8(out.stdout).map_err(|_| Error::Internal("helm printed non-UTF-8 output".into()))?;
    let docs: Vec<Value> = crate::yaml::from_str_multiple(&text)
        .map_err(|e| Error::Failed { message: format!("helm template output: {e}"), retryable: false })?;
    objects_of(docs, "helm template output")
}
