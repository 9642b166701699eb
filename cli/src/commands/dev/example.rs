//! The example repository `ksync dev` deploys: the files of `examples/quickstart`, compiled into
//! the binary so it works wherever it is run from.

use std::path::Path;

use kuvryn_sync::command::Result;

macro_rules! example_files {
    ($($path:literal),* $(,)?) => {
        &[$(($path, include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/quickstart/", $path)))),*]
    };
}

/// Every file of `examples/quickstart`: (repository-relative path, contents). A unit test
/// checks this is the whole folder.
pub const FILES: &[(&str, &str)] = example_files!(
    ".ksync.yaml",
    "README.md",
    "apps/api/base/deployment.yaml",
    "apps/api/base/kustomization.yaml",
    "apps/api/base/service.yaml",
    "apps/api/kustomization.yaml",
    "apps/greeter/Chart.yaml",
    "apps/greeter/templates/configmap.yaml",
    "apps/greeter/templates/deployment.yaml",
    "apps/greeter/templates/service.yaml",
    "apps/greeter/values.yaml",
    "apps/web/configmap.yaml",
    "apps/web/deployment.yaml",
    "apps/web/service.yaml",
);

/// The namespace the example's Applications and workloads live in.
pub const NAMESPACE: &str = "quickstart";

/// The service account the example's Applications act as.
pub const SERVICE_ACCOUNT: &str = "deployer";

/// The ConfigMap the Helm Application reads values from (created by `ksync dev`, not in Git).
pub const VALUES_CONFIGMAP: &str = "greeter-values";

/// Write the example into `dir` (created).
pub fn write(dir: &Path) -> Result<()> {
    for (path, contents) in FILES {
        let full = dir.join(path);
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent).map_err(|e| super::io_error(parent, e))?;
        }
        std::fs::write(&full, contents).map_err(|e| super::io_error(&full, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use kuvryn_sync::api::application::{Application, RenderType};

    fn on_disk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                on_disk(root, &path, out);
            } else {
                let rel = path.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
                out.insert(rel, std::fs::read_to_string(&path).unwrap());
            }
        }
    }

    #[test]
    fn every_example_file_is_compiled_in() {
        let root = super::super::tools::project_dir().join("examples/quickstart");
        let mut files = BTreeMap::new();
        on_disk(&root, &root, &mut files);
        let embedded: BTreeMap<String, String> = FILES.iter().map(|(p, c)| (p.to_string(), c.to_string())).collect();
        assert_eq!(
            files.keys().collect::<Vec<_>>(),
            embedded.keys().collect::<Vec<_>>(),
            "list every file of examples/quickstart in FILES"
        );
        assert_eq!(files, embedded);
    }

    #[test]
    fn the_example_declares_yaml_kustomize_and_helm_applications_with_self_heal() {
        let (_, text) = FILES.iter().find(|(p, _)| *p == ".ksync.yaml").unwrap();
        let doc: serde_json::Value = kuvryn_sync::yaml::from_str(text).unwrap();
        let apps: Vec<Application> = doc["applications"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                let mut a = a.clone();
                a["spec"]["source"]["repository"] = "quickstart".into();
                serde_json::from_value(a).unwrap()
            })
            .collect();
        let types: Vec<Option<RenderType>> = apps.iter().map(|a| a.spec.source.render.type_).collect();
        assert_eq!(types, [None, Some(RenderType::Kustomize), Some(RenderType::Helm)]);
        assert!(apps.iter().any(|a| a.spec.sync.self_heal));
        assert!(apps.iter().any(|a| !a.spec.sync.self_heal));
        for a in &apps {
            assert_eq!(a.spec.service_account_name, SERVICE_ACCOUNT);
            assert_eq!(a.spec.destination.namespace, NAMESPACE);
        }
        let helm = apps[2].spec.source.render.helm.as_ref().unwrap();
        assert_eq!(helm.values_from[0].name, VALUES_CONFIGMAP);
    }
}
