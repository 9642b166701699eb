//! Remote URL normalization: every spelling of one remote maps to one bare repository in the
//! cache (one per credential identity, see [`super::cache`]). Scheme and host are lower-cased,
//! default ports, a trailing `/` and `.git` dropped, scp-like `user@host:path` becomes
//! `ssh://user@host/path`, and a password in the URL is refused (credentials belong in a Secret).

use sha2::{Digest, Sha256};

use super::{Error, Result};

/// A normalized remote.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Remote {
    /// The URL gix connects to (scp-like forms rewritten to `ssh://`).
    pub url: String,
    /// The normalized identity of the remote (the cache key).
    pub key: String,
    /// `https`, `http`, `ssh`, `git` or `file`.
    pub scheme: String,
}

impl Remote {
    /// Parse and normalize `raw`.
    pub fn parse(raw: &str) -> Result<Remote> {
        let raw = raw.trim();
        let (scheme, rest) = match raw.split_once("://") {
            Some((s, r)) => (s.to_ascii_lowercase(), r.to_string()),
            None => match scp_like(raw) {
                Some((authority, path)) => ("ssh".to_string(), format!("{authority}/{path}")),
                None => {
                    return Err(Error::Unsupported(format!(
                        "unsupported Git URL {raw:?}: use https://, http://, ssh://, git://, file:// or user@host:path"
                    )));
                }
            },
        };
        if !matches!(scheme.as_str(), "https" | "http" | "ssh" | "git" | "file") {
            return Err(Error::Unsupported(format!(
                "unsupported Git URL scheme {scheme:?}: use https, http, ssh, git or file"
            )));
        }
        if scheme == "file" {
            let path = rest.trim_end_matches('/');
            let key_path = path.strip_suffix(".git").unwrap_or(path);
            return Ok(Remote { url: format!("file://{path}"), key: format!("file://{key_path}"), scheme });
        }
        let (authority, path) = rest.split_once('/').unwrap_or((rest.as_str(), ""));
        let (user, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        if user.is_some_and(|u| u.contains(':')) {
            return Err(Error::Unsupported(
                "the Git URL carries a password: reference a Secret in spec.secretRef instead".into(),
            ));
        }
        if hostport.is_empty() {
            return Err(Error::Unsupported(format!("Git URL {raw:?} has no host")));
        }
        let hostport = hostport.to_ascii_lowercase();
        let default_port = match scheme.as_str() {
            "https" => ":443",
            "http" => ":80",
            "ssh" => ":22",
            _ => ":9418",
        };
        let hostport = hostport.strip_suffix(default_port).unwrap_or(&hostport).to_string();
        let path = path.trim_end_matches('/');
        let key_path = path.strip_suffix(".git").unwrap_or(path);
        // HTTP user names are dropped from the key (credentials come from the Secret); an SSH
        // user is part of the identity.
        let user_part = match (scheme.as_str(), user) {
            ("ssh", Some(u)) => format!("{u}@"),
            _ => String::new(),
        };
        let url_user = match user {
            Some(u) if scheme == "ssh" => format!("{u}@"),
            _ => String::new(),
        };
        Ok(Remote {
            url: format!("{scheme}://{url_user}{hostport}/{path}"),
            key: format!("{scheme}://{user_part}{hostport}/{key_path}"),
            scheme,
        })
    }

    /// The directory name of this remote's bare repository for the credentials whose identity
    /// is `credential_id` (see [`super::cache`]): readable, and unique by a hash of the key and
    /// the identity. Never contains credentials (the key has none, the identity is a keyed
    /// digest).
    pub fn dir_name(&self, credential_id: &str) -> String {
        let digest = Sha256::digest(self.key.as_bytes());
        let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
        let readable: String = self
            .key
            .split("://")
            .nth(1)
            .unwrap_or_default()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c.to_ascii_lowercase() } else { '-' })
            .collect();
        let readable = readable.trim_matches('-');
        let readable: String = readable.chars().rev().take(48).collect::<Vec<_>>().into_iter().rev().collect();
        format!("{}-{hex}-{credential_id}.git", readable.trim_matches('-'))
    }
}

/// Whether a credentials Secret whose `sync.kuvryn.io/git-urls` annotation is `allowed` may be
/// sent to `remote`.
///
/// # Contract
/// `allowed` lists URL prefixes, separated by commas or whitespace; an entry that does not parse
/// as a Git URL allows nothing. `remote` is allowed when an entry has its scheme, host and port
/// (and, for SSH, its user) and a path that is the remote's path or one of its parent directories,
/// compared as normalized keys ([`Remote::parse`]: case of scheme and host, default ports, a
/// trailing `/` or `.git` do not matter). So `https://git.example.com/team-a` allows
/// `https://git.example.com/team-a/app.git`, not `https://git.example.com/team-ab/app` nor
/// `http://git.example.com/team-a/app`; `https://git.example.com` allows the whole host. There
/// are no wildcards. Table test: `git_urls_allow_their_prefixes_only`.
pub fn allowed_by(remote: &Remote, allowed: &str) -> bool {
    allowed.split(|c: char| c == ',' || c.is_whitespace()).filter(|e| !e.is_empty()).any(|entry| {
        let Ok(prefix) = Remote::parse(entry) else { return false };
        prefix.scheme == remote.scheme
            && (remote.key == prefix.key
                || remote.key.strip_prefix(prefix.key.trim_end_matches('/')).is_some_and(|rest| rest.starts_with('/')))
    })
}

/// `user@host:path` (not `C:\...`, not a URL).
fn scp_like(raw: &str) -> Option<(String, String)> {
    let (authority, path) = raw.split_once(':')?;
    if authority.is_empty() || authority.contains('/') || path.starts_with("//") || authority.len() == 1 {
        return None;
    }
    Some((authority.to_string(), path.trim_start_matches('/').to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_of_one_remote_share_a_key() {
        let keys: Vec<String> = [
            "https://GitHub.com/org/repo.git",
            "https://github.com:443/org/repo",
            "https://github.com/org/repo/",
            "HTTPS://github.com/org/repo.git/",
            "https://user@github.com/org/repo",
        ]
        .iter()
        .map(|u| Remote::parse(u).unwrap().key)
        .collect();
        assert!(keys.iter().all(|k| k == "https://github.com/org/repo"), "{keys:?}");
    }

    #[test]
    fn scp_like_is_ssh() {
        let r = Remote::parse("git@github.com:org/repo.git").unwrap();
        assert_eq!(r.url, "ssh://git@github.com/org/repo.git");
        assert_eq!(r.key, Remote::parse("ssh://git@github.com:22/org/repo").unwrap().key);
        assert_ne!(r.key, Remote::parse("ssh://other@github.com/org/repo").unwrap().key);
    }

    #[test]
    fn other_remotes_differ() {
        let a = Remote::parse("https://github.com/org/repo").unwrap();
        let b = Remote::parse("https://github.com/org/repo2").unwrap();
        let c = Remote::parse("http://github.com/org/repo").unwrap();
        assert_ne!(a.key, b.key);
        assert_ne!(a.key, c.key);
        assert_ne!(a.dir_name("c0ffee"), b.dir_name("c0ffee"));
        assert_ne!(a.dir_name("c0ffee"), a.dir_name("decade"));
    }

    #[test]
    fn refused() {
        for bad in ["ftp://x/y", "https://user:hunter22@host/repo", "not a url", "https:///repo"] {
            let e = Remote::parse(bad).unwrap_err();
            assert!(!e.to_string().contains("hunter22"), "{e}");
        }
    }

    #[test]
    fn git_urls_allow_their_prefixes_only() {
        let allowed =
            "https://Git.Example.com/team-a/, ssh://git@git.example.com:22/team-a\n  https://other.example.com:8443";
        let yes = [
            "https://git.example.com/team-a/app.git",
            "https://git.example.com/team-a/app",
            "https://git.example.com/team-a",
            "https://git.example.com:443/team-a/sub/app/",
            "https://user@git.example.com/team-a/app",
            "git@git.example.com:team-a/app.git",
            "ssh://git@git.example.com/team-a/app",
            "https://other.example.com:8443/anything",
        ];
        let no = [
            "https://git.example.com/team-ab/app",
            "https://git.example.com/team-b/app",
            "https://git.example.com/",
            "http://git.example.com/team-a/app",
            "https://evil.example.com/team-a/app",
            "https://git.example.com.evil.example/team-a/app",
            "https://git.example.com:8443/team-a/app",
            "ssh://other@git.example.com/team-a/app",
            "git://git.example.com/team-a/app",
            "https://other.example.com/anything",
        ];
        for url in yes {
            assert!(allowed_by(&Remote::parse(url).unwrap(), allowed), "{url} must be allowed");
        }
        for url in no {
            assert!(!allowed_by(&Remote::parse(url).unwrap(), allowed), "{url} must not be allowed");
        }
        let any = Remote::parse("https://git.example.com/team-a/app").unwrap();
        for nothing in ["", " , ", "not a url", "team-a", "*"] {
            assert!(!allowed_by(&any, nothing), "{nothing:?}");
        }
    }

    #[test]
    fn dir_names_are_plain() {
        let d = Remote::parse("https://user@git.example.com:8443/a/b c.git").unwrap().dir_name("c0ffee");
        assert!(d.ends_with(".git"));
        assert!(d.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-'), "{d}");
        assert!(!d.contains("user"));
        let f = Remote::parse("file:///tmp/x/repo.git").unwrap();
        assert_eq!(f.url, "file:///tmp/x/repo.git");
    }
}
