//! What a verified push names: the repository's URLs and the refs that moved (with their new
//! commits), from each host's body. Pure.

use serde_json::Value;

use super::verify::Provider;

/// A push, as the sender describes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Push {
    /// The pushed repository's URLs (clone, SSH, web).
    pub urls: Vec<String>,
    /// The refs that moved (`refs/heads/main`, `refs/tags/v1`; the generic form may say `main`).
    pub refs: Vec<String>,
    /// The new commits, where given (for logs only: the fetch resolves the ref itself).
    pub commits: Vec<String>,
}

/// Why a body is not a push.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    /// Not JSON.
    #[error("the body is not JSON")]
    NotJson,
    /// JSON without the fields a push of this host has.
    #[error("the body names no repository URL and ref")]
    Incomplete,
}

/// The push in `body`, sent by `provider`.
pub fn parse(provider: Provider, body: &[u8]) -> Result<Push, Malformed> {
    let v: Value = serde_json::from_slice(body).map_err(|_| Malformed::NotJson)?;
    let s = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_string);
    let strings = |v: &Value, keys: &[&str]| keys.iter().filter_map(|k| s(&v[*k])).collect::<Vec<_>>();
    let mut push = Push::default();
    match provider {
        Provider::GitHub | Provider::Gitea => {
            push.urls = strings(&v["repository"], &["clone_url", "ssh_url", "git_url", "html_url"]);
            push.refs.extend(s(&v["ref"]));
            push.commits.extend(s(&v["after"]));
        }
        Provider::GitLab => {
            push.urls = strings(&v["project"], &["git_http_url", "git_ssh_url", "web_url"]);
            push.urls.extend(strings(&v["repository"], &["git_http_url", "git_ssh_url", "homepage", "url"]));
            push.refs.extend(s(&v["ref"]));
            push.commits.extend(s(&v["checkout_sha"]).or_else(|| s(&v["after"])));
        }
        Provider::Bitbucket => {
            let repo = &v["repository"];
            push.urls.extend(s(&repo["links"]["html"]["href"]));
            if let Some(name) = s(&repo["full_name"]) {
                push.urls.push(format!("https://bitbucket.org/{name}"));
            }
            for link in repo["links"]["clone"].as_array().into_iter().flatten() {
                push.urls.extend(s(&link["href"]));
            }
            // Cloud: push.changes[].new {type, name, target.hash}.
            for change in v["push"]["changes"].as_array().into_iter().flatten() {
                let new = &change["new"];
                let prefix = match new["type"].as_str() {
                    Some("branch") => "refs/heads/",
                    Some("tag" | "annotated_tag") => "refs/tags/",
                    _ => continue,
                };
                if let Some(name) = s(&new["name"]) {
                    push.refs.push(format!("{prefix}{name}"));
                }
                push.commits.extend(s(&new["target"]["hash"]));
            }
            // Data Center: changes[] {ref.id, toHash}.
            for change in v["changes"].as_array().into_iter().flatten() {
                push.refs.extend(s(&change["ref"]["id"]));
                push.commits.extend(s(&change["toHash"]));
            }
        }
        Provider::Generic => {
            push.urls.extend(s(&v["url"]));
            push.refs.extend(s(&v["ref"]));
            push.commits.extend(s(&v["commit"]));
        }
    }
    if push.urls.is_empty() || push.refs.is_empty() {
        return Err(Malformed::Incomplete);
    }
    Ok(push)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn push(urls: &[&str], refs: &[&str], commits: &[&str]) -> Push {
        let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect();
        Push { urls: v(urls), refs: v(refs), commits: v(commits) }
    }

    #[test]
    fn each_hosts_push_is_read() {
        let cases = vec![
            (
                Provider::GitHub,
                json!({"ref": "refs/heads/main", "after": "abc", "repository": {
                    "clone_url": "https://github.com/o/r.git", "ssh_url": "git@github.com:o/r.git",
                    "git_url": "git://github.com/o/r.git", "html_url": "https://github.com/o/r"}}),
                push(
                    &[
                        "https://github.com/o/r.git",
                        "git@github.com:o/r.git",
                        "git://github.com/o/r.git",
                        "https://github.com/o/r",
                    ],
                    &["refs/heads/main"],
                    &["abc"],
                ),
            ),
            (
                Provider::Gitea,
                json!({"ref": "refs/tags/v1", "after": "def", "repository": {"clone_url": "https://gitea.example/o/r.git"}}),
                push(&["https://gitea.example/o/r.git"], &["refs/tags/v1"], &["def"]),
            ),
            (
                Provider::GitLab,
                json!({"ref": "refs/heads/main", "checkout_sha": "c1", "after": "c2", "project": {
                    "git_http_url": "https://gitlab.com/o/r.git", "git_ssh_url": "git@gitlab.com:o/r.git", "web_url": "https://gitlab.com/o/r"}}),
                push(
                    &["https://gitlab.com/o/r.git", "git@gitlab.com:o/r.git", "https://gitlab.com/o/r"],
                    &["refs/heads/main"],
                    &["c1"],
                ),
            ),
            (
                Provider::Bitbucket,
                json!({"repository": {"full_name": "o/r", "links": {"html": {"href": "https://bitbucket.org/o/r"}}},
                    "push": {"changes": [
                        {"new": {"type": "branch", "name": "main", "target": {"hash": "h1"}}},
                        {"new": null},
                        {"new": {"type": "tag", "name": "v2", "target": {"hash": "h2"}}}]}}),
                push(
                    &["https://bitbucket.org/o/r", "https://bitbucket.org/o/r"],
                    &["refs/heads/main", "refs/tags/v2"],
                    &["h1", "h2"],
                ),
            ),
            (
                Provider::Bitbucket,
                json!({"repository": {"links": {"clone": [{"href": "ssh://git@bb.example:7999/p/r.git", "name": "ssh"},
                    {"href": "https://bb.example/scm/p/r.git", "name": "http"}]}},
                    "changes": [{"ref": {"id": "refs/heads/main"}, "toHash": "t1"}]}),
                push(
                    &["ssh://git@bb.example:7999/p/r.git", "https://bb.example/scm/p/r.git"],
                    &["refs/heads/main"],
                    &["t1"],
                ),
            ),
            (
                Provider::Generic,
                json!({"url": "https://git.example/mono", "ref": "main"}),
                push(&["https://git.example/mono"], &["main"], &[]),
            ),
        ];
        for (provider, body, want) in cases {
            assert_eq!(parse(provider, body.to_string().as_bytes()), Ok(want), "{provider:?}");
        }
    }

    #[test]
    fn what_is_not_a_push_is_malformed() {
        assert_eq!(parse(Provider::GitHub, b"not json"), Err(Malformed::NotJson));
        assert_eq!(parse(Provider::GitHub, b"{}"), Err(Malformed::Incomplete));
        assert_eq!(parse(Provider::Generic, br#"{"url": "https://x/y"}"#), Err(Malformed::Incomplete));
        assert_eq!(parse(Provider::Generic, br#"{"ref": "main"}"#), Err(Malformed::Incomplete));
        assert_eq!(
            parse(Provider::GitLab, br#"{"ref": 5, "project": {"web_url": "https://x/y"}}"#),
            Err(Malformed::Incomplete)
        );
    }
}
