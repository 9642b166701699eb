//! Which Repositories a push names: Git URLs compared by host and path (scheme, user, port,
//! trailing `.git` and `/` and host case aside, so `git@host:org/repo.git`,
//! `ssh://git@host/org/repo` and `https://host/org/repo` are one repository), and refs compared
//! to the Repository's branch or tag. Pure.

use crate::api::repository::{RepositorySpec, RepositoryType};

/// The comparable form of a Git URL: `host/path`, host lower-cased, port, scheme, user,
/// trailing `/` and `.git` dropped; `None` for what is not a Git URL.
///
/// The port is dropped because one host serves the same repository over HTTPS and SSH on
/// different ports; a match still needs the Repository's own token to verify the push.
pub fn normalize(url: &str) -> Option<String> {
    let url = url.trim();
    let (host, path) = if let Some((scheme, rest)) = url.split_once("://") {
        if scheme.is_empty() || !scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c)) {
            return None;
        }
        if scheme.eq_ignore_ascii_case("file") {
            return Some(format!("file:{}", trim_path(rest)));
        }
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        // `[::1]:22` keeps its brackets; `host:22` loses the port.
        let host = match host.rsplit_once(':') {
            Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) && !h.is_empty() => h,
            _ => host,
        };
        (host, path)
    } else {
        // scp-like `user@host:path` (or `host:path`).
        let (authority, path) = url.split_once(':')?;
        if authority.contains('/') || path.starts_with("//") {
            return None;
        }
        (authority.rsplit_once('@').map_or(authority, |(_, h)| h), path)
    };
    if host.is_empty() {
        return None;
    }
    let path = trim_path(path);
    if path.is_empty() {
        return None;
    }
    Some(format!("{}/{}", host.to_ascii_lowercase(), path))
}

fn trim_path(path: &str) -> &str {
    let path = path.trim_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path);
    path.trim_end_matches('/')
}

/// A pushed ref in full form: `refs/heads/main`, `refs/tags/v1`; a bare name (the generic form's
/// `main`) is a branch.
pub fn full_ref(pushed: &str) -> String {
    if pushed.starts_with("refs/") { pushed.to_string() } else { format!("refs/heads/{pushed}") }
}

/// Whether a push of `urls` moving `refs` names the Repository of `spec`: a Git Repository
/// following a branch or tag (a pinned commit, Helm and OCI Repositories never match) whose URL
/// is one of `urls` and whose branch or tag is one of `refs`.
pub fn names(spec: &RepositorySpec, urls: &[String], refs: &[String]) -> bool {
    if spec.type_ != RepositoryType::Git {
        return false;
    }
    let Some(r) = &spec.reference else { return false };
    let wanted = match (&r.branch, &r.tag) {
        (Some(b), _) => format!("refs/heads/{b}"),
        (None, Some(t)) => format!("refs/tags/{t}"),
        _ => return false,
    };
    let Some(own) = normalize(&spec.url) else { return false };
    urls.iter().any(|u| normalize(u).as_deref() == Some(own.as_str()))
        && refs.iter().any(|pushed| full_ref(pushed) == wanted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::repository::GitRef;

    #[test]
    fn urls_of_one_repository_compare_equal() {
        let same = [
            "https://github.com/org/repo",
            "https://github.com/org/repo.git",
            "https://github.com/org/repo/",
            "https://GitHub.com/org/repo",
            "http://github.com/org/repo",
            "https://user@github.com/org/repo.git",
            "ssh://git@github.com/org/repo.git",
            "ssh://git@github.com:22/org/repo",
            "git@github.com:org/repo.git",
            "github.com:org/repo",
            "git://github.com/org/repo",
        ];
        for u in same {
            assert_eq!(normalize(u).as_deref(), Some("github.com/org/repo"), "{u}");
        }
        let other = [
            "https://github.com/org/repo2",
            "https://github.com/other/repo",
            "https://gitlab.com/org/repo",
            "https://github.com/org/repo/sub",
        ];
        for u in other {
            assert_ne!(normalize(u).as_deref(), Some("github.com/org/repo"), "{u}");
        }
        // The path keeps its case (hosts serve case-sensitive paths).
        assert_ne!(normalize("https://h/Org/Repo"), normalize("https://h/org/repo"));
        for bad in ["", "not a url", "https://", "https:///x", "git@host:", "/local/path"] {
            assert_eq!(normalize(bad), None, "{bad:?}");
        }
        assert_eq!(normalize("file:///srv/git/repo.git").as_deref(), Some("file:srv/git/repo"));
        assert_eq!(normalize("git://127.0.0.1:9418/platform").as_deref(), Some("127.0.0.1/platform"));
    }

    fn spec(url: &str, branch: Option<&str>, tag: Option<&str>, commit: Option<&str>) -> RepositorySpec {
        serde_json::from_value(serde_json::json!({
            "url": url,
            "ref": GitRef { branch: branch.map(Into::into), tag: tag.map(Into::into), commit: commit.map(Into::into) },
        }))
        .unwrap()
    }

    #[test]
    fn refs_name_the_branch_or_tag_followed() {
        let urls = vec!["https://github.com/org/repo.git".to_string()];
        let refs = |r: &[&str]| r.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let main = spec("git@github.com:org/repo.git", Some("main"), None, None);
        let cases: &[(&RepositorySpec, &[&str], bool)] = &[
            (&main, &["refs/heads/main"], true),
            (&main, &["main"], true),
            (&main, &["refs/heads/dev"], false),
            (&main, &["refs/tags/main"], false),
            (&main, &["refs/heads/dev", "refs/heads/main"], true),
            (&main, &[], false),
        ];
        for (s, r, want) in cases {
            assert_eq!(names(s, &urls, &refs(r)), *want, "{r:?}");
        }
        let tag = spec("https://github.com/org/repo", None, Some("v1"), None);
        assert!(names(&tag, &urls, &refs(&["refs/tags/v1"])));
        assert!(!names(&tag, &urls, &refs(&["refs/heads/v1", "v1"])));
        let pinned = spec("https://github.com/org/repo", None, None, Some("0123abcd"));
        assert!(!names(&pinned, &urls, &refs(&["refs/heads/main", "0123abcd"])), "a pinned commit never moves");
        assert!(!names(&main, &["https://github.com/org/other".into()], &refs(&["refs/heads/main"])));
        let mut helm = spec("https://github.com/org/repo", Some("main"), None, None);
        helm.type_ = RepositoryType::Helm;
        assert!(!names(&helm, &urls, &refs(&["refs/heads/main"])), "Helm and OCI Repositories are polled");
    }
}
