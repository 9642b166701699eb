//! A Helm chart's dependencies as its `Chart.yaml` and `Chart.lock` declare them: which to pull
//! (`https://` Helm repositories and `oci://` registries), at which version (the lock's, else the
//! range), which are local (`file://`, inside the repository) and which are vendored under
//! `charts/` already. Pure, apart from [`vendored`] looking into `charts/`.

use std::path::Path;

use serde::Deserialize;

/// One dependency to make present under `charts/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted {
    /// The chart's name.
    pub name: String,
    /// Where it comes from.
    pub origin: Origin,
}

/// Where a dependency comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A Helm repository (`https://…`, its index) or an OCI registry (`oci://host/path`), at an
    /// exact version (from `Chart.lock`) or a version range (`~1.2`, `>=1.0 <2`).
    Remote {
        /// The repository URL as the chart names it.
        repository: String,
        /// The version or range.
        version: String,
        /// Whether `version` is exact (from `Chart.lock`, or a plain version).
        exact: bool,
    },
    /// A chart in the same repository: its repository-relative path.
    File(String),
}

#[derive(Deserialize)]
struct Declared {
    #[serde(default)]
    dependencies: Vec<Dependency>,
}

#[derive(Deserialize)]
struct Dependency {
    name: String,
    #[serde(default)]
    version: String,
    #[serde(default)]
    repository: String,
}

/// Most dependencies of one chart.
pub const MAX_DEPENDENCIES: usize = 64;

/// The dependencies of the chart at the repository-relative `chart_path`, from its
/// `Chart.yaml` text and its `Chart.lock` text (when there is one), leaving out those
/// `is_vendored` says `charts/` holds already. An error names what is wrong: a dependency with
/// no repository that is not vendored, a `file://` path leaving the repository, an unsupported
/// scheme.
pub fn wanted(
    chart_path: &str,
    chart_yaml: &str,
    chart_lock: Option<&str>,
    is_vendored: impl Fn(&str) -> bool,
) -> Result<Vec<Wanted>, String> {
    let declared: Declared = crate::yaml::from_str(chart_yaml)
        .map_err(|e| format!("Chart.yaml: {}", crate::text::bounded(&e.to_string(), 300)))?;
    let locked: Option<Declared> = match chart_lock {
        Some(text) => Some(
            crate::yaml::from_str(text)
                .map_err(|e| format!("Chart.lock: {}", crate::text::bounded(&e.to_string(), 300)))?,
        ),
        None => None,
    };
    if declared.dependencies.len() > MAX_DEPENDENCIES {
        return Err(format!("Chart.yaml lists more than {MAX_DEPENDENCIES} dependencies"));
    }
    let mut out = Vec::new();
    for d in &declared.dependencies {
        if is_vendored(&d.name) {
            continue;
        }
        let what = format!("dependency {:?}", crate::text::bounded(&d.name, 64));
        if d.name.is_empty() || d.name.contains(['/', '\\']) || d.name.starts_with('.') || d.name.starts_with('-') {
            return Err(format!("{what}: not a chart name"));
        }
        let repo = d.repository.trim();
        if let Some(rel) = repo.strip_prefix("file://") {
            let path = inside_repository(chart_path, rel).map_err(|e| format!("{what} ({repo}): {e}"))?;
            out.push(Wanted { name: d.name.clone(), origin: Origin::File(path) });
            continue;
        }
        if !(repo.starts_with("https://") || repo.starts_with("oci://") || repo.starts_with("http://")) {
            let why = if repo.is_empty() {
                "has no repository and is not vendored under charts/".to_string()
            } else {
                format!(
                    "repository {repo:?}: only https://, http://, oci:// and file:// are supported (a repository alias such as @name is not)"
                )
            };
            return Err(format!("{what} {why}"));
        }
        let pinned = locked
            .as_ref()
            .and_then(|l| l.dependencies.iter().find(|l| l.name == d.name && l.repository.trim() == repo))
            .map(|l| l.version.clone());
        let (version, exact) = match pinned {
            Some(v) => (v, true),
            None => (d.version.trim().to_string(), is_exact(d.version.trim())),
        };
        if version.is_empty() {
            return Err(format!("{what}: no version"));
        }
        if version.starts_with('-') || version.len() > 128 {
            return Err(format!("{what}: version {:?} is not a version or range", crate::text::bounded(&version, 64)));
        }
        out.push(Wanted {
            name: d.name.clone(),
            origin: Origin::Remote { repository: repo.to_string(), version, exact },
        });
    }
    Ok(out)
}

/// Whether `v` names one version (`1.2.3`, `v1.2.3-rc.1`) rather than a range.
pub fn is_exact(v: &str) -> bool {
    let v = v.strip_prefix('v').unwrap_or(v);
    let core = v.split(['-', '+']).next().unwrap_or_default();
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3 && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// The repository-relative path of `rel` (a `file://` dependency) seen from the chart at
/// `chart_path`; an error when it leaves the repository.
pub fn inside_repository(chart_path: &str, rel: &str) -> Result<String, String> {
    if rel.starts_with('/') {
        return Err("an absolute path is outside the repository".into());
    }
    let mut parts: Vec<&str> = chart_path.split('/').filter(|p| !p.is_empty() && *p != ".").collect();
    for p in rel.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err("leaves the repository".into());
                }
            }
            p => parts.push(p),
        }
    }
    Ok(if parts.is_empty() { ".".to_string() } else { parts.join("/") })
}

/// Whether the chart directory `dir` holds `name` under `charts/` already: a directory of that
/// name, or an archive `name-<version>.tgz`.
pub fn vendored(dir: &Path, name: &str) -> bool {
    let charts = dir.join("charts");
    if charts.join(name).join("Chart.yaml").is_file() {
        return true;
    }
    let Ok(entries) = std::fs::read_dir(&charts) else { return false };
    entries.flatten().any(|e| {
        let file = e.file_name();
        let file = file.to_string_lossy();
        file.strip_prefix(name)
            .and_then(|rest| rest.strip_prefix('-'))
            .is_some_and(|rest| rest.ends_with(".tgz") && rest.starts_with(|c: char| c.is_ascii_digit() || c == 'v'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_come_from_the_lock_else_the_range() {
        let chart = "apiVersion: v2\nname: app\nversion: 1.0.0\ndependencies:\n- {name: redis, version: ~1.2, repository: https://charts.example.com}\n- {name: db, version: 2.0.1, repository: oci://registry.example.com/charts}\n- {name: common, version: 0.1.0, repository: file://../common}\n- {name: kept, version: 1.0.0, repository: https://charts.example.com}\n";
        let lock = "dependencies:\n- {name: redis, repository: https://charts.example.com, version: 1.2.3}\ndigest: sha256:00\n";
        let got = wanted("apps/app", chart, Some(lock), |n| n == "kept").unwrap();
        let remote = |repository: &str, version: &str, exact| Origin::Remote {
            repository: repository.into(),
            version: version.into(),
            exact,
        };
        assert_eq!(
            got,
            [
                Wanted { name: "redis".into(), origin: remote("https://charts.example.com", "1.2.3", true) },
                Wanted { name: "db".into(), origin: remote("oci://registry.example.com/charts", "2.0.1", true) },
                Wanted { name: "common".into(), origin: Origin::File("apps/common".into()) },
            ]
        );
        let unlocked = wanted("apps/app", chart, None, |n| n == "kept").unwrap();
        assert_eq!(unlocked[0].origin, remote("https://charts.example.com", "~1.2", false));
    }

    #[test]
    fn a_dependency_is_refused_when_it_leaves_the_repository_or_cannot_be_pulled() {
        let dep = |repo: &str| {
            format!(
                "apiVersion: v2\nname: app\nversion: 1.0.0\ndependencies:\n- {{name: x, version: 1.0.0, repository: {repo:?}}}\n"
            )
        };
        for (path, repo, why) in [
            ("chart", "file://../../", "leaves the repository"),
            (".", "file://..", "leaves the repository"),
            ("a/b", "file://../../../etc", "leaves the repository"),
            ("chart", "file:///etc", "absolute path"),
            ("chart", "", "has no repository and is not vendored"),
            ("chart", "@stable", "only https://"),
            ("chart", "s3://bucket", "only https://"),
        ] {
            let e = wanted(path, &dep(repo), None, |_| false).expect_err(repo);
            assert!(e.contains(why), "{path} {repo}: {e}");
        }
        assert_eq!(inside_repository("a/b", "../c").unwrap(), "a/c");
        assert_eq!(inside_repository("a", "..").unwrap(), ".");
        let flag = "apiVersion: v2\nname: app\nversion: 1.0.0\ndependencies:\n- {name: x, version: --set=a, repository: https://h}\n";
        assert!(wanted(".", flag, None, |_| false).unwrap_err().contains("not a version"));
        let name = "apiVersion: v2\nname: app\nversion: 1.0.0\ndependencies:\n- {name: ../x, version: 1.0.0, repository: https://h}\n";
        assert!(wanted(".", name, None, |_| false).unwrap_err().contains("not a chart name"));
    }

    #[test]
    fn exact_versions_and_ranges() {
        for (v, exact) in [
            ("1.2.3", true),
            ("v1.2.3", true),
            ("1.2.3-rc.1", true),
            ("~1.2", false),
            ("1.2", false),
            (">=1.0.0 <2.0.0", false),
            ("*", false),
            ("1.2.x", false),
        ] {
            assert_eq!(is_exact(v), exact, "{v}");
        }
    }

    #[test]
    fn vendored_charts_are_found_by_directory_or_archive() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("charts/redis")).unwrap();
        std::fs::write(d.path().join("charts/redis/Chart.yaml"), "name: redis").unwrap();
        std::fs::write(d.path().join("charts/db-2.0.1.tgz"), "").unwrap();
        assert!(vendored(d.path(), "redis"));
        assert!(vendored(d.path(), "db"));
        assert!(!vendored(d.path(), "d"));
        assert!(!vendored(d.path(), "common"));
    }
}
