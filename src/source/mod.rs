//! The Git source: one shared object cache per process, fetched with gix.
//!
//! - [`url`]: remote URL normalization (one bare repository per normalized URL and credential
//!   identity).
//! - [`git`]: the blocking gix operations (fetch, resolve, read a file).
//! - [`checkout`]: materializing the tree of (commit, path) into a directory, with path safety
//!   checks and size limits.
//! - [`discovery`]: reading `.ksync.yaml` Application definitions.
//! - [`cache`]: [`GitCache`], the process-wide cache: single-flight fetches, the size-bounded
//!   cache of materialized trees, metrics.
//!
//! Credentials come from the Secret a Repository references ([`Credentials`]); they are handed
//! to gix through a credentials callback or private key files that live only for one operation,
//! and never reach status, Events, logs, error messages or the cache directory names. Cached
//! content is only served to credentials of the same values as those that fetched it (see
//! [`cache`]), and nothing of the controller's own (SSH agent, keys, configuration) is ever used.

pub mod cache;
pub mod checkout;
pub mod discovery;
pub mod git;
pub mod local;
pub mod secret;
pub mod url;

pub use cache::{CacheConfig, GitCache};
pub use checkout::{Checkout, Limits};

use std::fmt;

/// What to resolve: a branch, a tag, or a commit (full or abbreviated hex).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Reference {
    /// A branch name (`main`), looked up as `refs/heads/<name>`.
    Branch(String),
    /// A tag name (`v1.2.0`), annotated or lightweight, looked up as `refs/tags/<name>`.
    Tag(String),
    /// A commit id, 7 to 40 hex digits.
    Commit(String),
}

impl Reference {
    /// From a Repository's `spec.ref`.
    pub fn from_git_ref(r: &crate::api::repository::GitRef) -> Option<Reference> {
        match (&r.branch, &r.tag, &r.commit) {
            (Some(b), _, _) => Some(Reference::Branch(b.clone())),
            (_, Some(t), _) => Some(Reference::Tag(t.clone())),
            (_, _, Some(c)) => Some(Reference::Commit(c.to_ascii_lowercase())),
            _ => None,
        }
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reference::Branch(b) => write!(f, "branch/{b}"),
            Reference::Tag(t) => write!(f, "tag/{t}"),
            Reference::Commit(c) => write!(f, "commit/{c}"),
        }
    }
}

/// Credentials for one remote, from a Secret. `Debug` never prints the values.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Credentials {
    /// HTTPS user name (`username`).
    pub username: Option<String>,
    /// HTTPS password or token (`password`).
    pub password: Option<String>,
    /// SSH private key (`identity`).
    pub identity: Option<Vec<u8>>,
    /// SSH known hosts (`known_hosts`).
    pub known_hosts: Option<Vec<u8>>,
    /// PEM CA bundle trusted for HTTPS besides the system roots (`ca.crt`).
    pub ca_cert: Option<Vec<u8>>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username.as_ref().map(|_| "<set>"))
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("identity", &self.identity.as_ref().map(|_| "<redacted>"))
            .field("known_hosts", &self.known_hosts.as_ref().map(|_| "<set>"))
            .field("ca_cert", &self.ca_cert.as_ref().map(|_| "<set>"))
            .finish()
    }
}

impl Credentials {
    /// From a Secret's data (`username`, `password`, `identity`, `known_hosts`, `ca.crt`).
    pub fn from_secret_data(data: &std::collections::BTreeMap<String, Vec<u8>>) -> Credentials {
        let text = |k: &str| data.get(k).map(|v| String::from_utf8_lossy(v).trim_end_matches(['\n', '\r']).to_string());
        Credentials {
            username: text("username"),
            password: text("password"),
            identity: data.get("identity").cloned(),
            known_hosts: data.get("known_hosts").cloned(),
            ca_cert: data.get("ca.crt").cloned(),
        }
    }

    /// Every value, in one unambiguous encoding (each field tagged and length-prefixed): what
    /// [`GitCache`] digests, with a key of its own, into the credential identity its bare
    /// repositories are keyed by. Every field counts, `known_hosts` and `ca.crt` too: they decide
    /// which server is trusted to be the remote.
    pub(crate) fn material(&self) -> Vec<u8> {
        let fields: [(u8, Option<&[u8]>); 5] = [
            (b'u', self.username.as_deref().map(str::as_bytes)),
            (b'p', self.password.as_deref().map(str::as_bytes)),
            (b'i', self.identity.as_deref()),
            (b'k', self.known_hosts.as_deref()),
            (b'c', self.ca_cert.as_deref()),
        ];
        let mut out = Vec::new();
        for (tag, value) in fields {
            out.push(tag);
            match value {
                None => out.push(0),
                Some(v) => {
                    out.push(1);
                    out.extend_from_slice(&(v.len() as u64).to_be_bytes());
                    out.extend_from_slice(v);
                }
            }
        }
        out
    }

    /// Whether the Secret gives no way to authenticate (no password, no SSH identity).
    pub fn is_anonymous(&self) -> bool {
        self.password.is_none() && self.identity.is_none()
    }

    /// Remove every secret value from `message` (error texts from the transport may echo them).
    pub fn redact(&self, message: &str) -> String {
        let identity = self.identity.as_deref().map(String::from_utf8_lossy);
        crate::redact::redact(message, self.password.as_deref().into_iter().chain(identity.as_deref()))
    }
}

/// Why a source operation failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The branch, tag or commit does not exist on the remote (retrying cannot help until Git
    /// changes).
    #[error("{0}")]
    NotFound(String),
    /// The remote refused the credentials, or needs some that were not given.
    #[error("{0}")]
    Auth(String),
    /// Something the source cannot do: submodules, dumb HTTP, an unsupported URL.
    #[error("{0}")]
    Unsupported(String),
    /// A path that leaves the checkout, a symlink pointing outside, an invalid name.
    #[error("{0}")]
    UnsafePath(String),
    /// The tree is larger than the configured limits.
    #[error("{0}")]
    TooLarge(String),
    /// The network operation did not finish in time.
    #[error("{0}")]
    Timeout(String),
    /// A network or server failure worth retrying.
    #[error("{0}")]
    Transport(String),
    /// A local failure (disk, corrupt cache).
    #[error("{0}")]
    Internal(String),
}

impl Error {
    /// Whether trying again later can succeed without a change in Git or in the Repository.
    pub fn retryable(&self) -> bool {
        matches!(self, Error::Transport(_) | Error::Timeout(_) | Error::Internal(_) | Error::Auth(_))
    }

    /// A short label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::NotFound(_) => "not_found",
            Error::Auth(_) => "auth",
            Error::Unsupported(_) => "unsupported",
            Error::UnsafePath(_) => "unsafe_path",
            Error::TooLarge(_) => "too_large",
            Error::Timeout(_) => "timeout",
            Error::Transport(_) => "transport",
            Error::Internal(_) => "internal",
        }
    }
}

/// The result type of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `spec.source.revision` as a reference: hex of 7 to 40 digits is a commit, anything else a
/// branch (then a tag when no branch has that name).
pub fn references_of(revision: &str) -> Vec<Reference> {
    let r = revision.trim();
    if (7..=40).contains(&r.len()) && r.bytes().all(|b| b.is_ascii_hexdigit()) {
        vec![Reference::Commit(r.to_ascii_lowercase())]
    } else if let Some(tag) = r.strip_prefix("refs/tags/") {
        vec![Reference::Tag(tag.to_string())]
    } else {
        let branch = r.strip_prefix("refs/heads/").unwrap_or(r);
        vec![Reference::Branch(branch.to_string()), Reference::Tag(branch.to_string())]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::repository::GitRef;

    #[test]
    fn source_revisions_are_commits_branches_or_tags() {
        assert_eq!(references_of("0123abc"), vec![Reference::Commit("0123abc".into())]);
        assert_eq!(references_of("ABCDEF0123"), vec![Reference::Commit("abcdef0123".into())]);
        assert_eq!(references_of("main"), vec![Reference::Branch("main".into()), Reference::Tag("main".into())]);
        assert_eq!(references_of("refs/tags/v1.2.0"), vec![Reference::Tag("v1.2.0".into())]);
        assert_eq!(
            references_of("refs/heads/release"),
            vec![Reference::Branch("release".into()), Reference::Tag("release".into())]
        );
        // Too short to be a commit.
        assert_eq!(references_of("cafe"), vec![Reference::Branch("cafe".into()), Reference::Tag("cafe".into())]);
    }

    #[test]
    fn references_from_the_spec() {
        let r = |branch: Option<&str>, tag: Option<&str>, commit: Option<&str>| {
            Reference::from_git_ref(&GitRef {
                branch: branch.map(String::from),
                tag: tag.map(String::from),
                commit: commit.map(String::from),
            })
        };
        assert_eq!(r(Some("main"), None, None), Some(Reference::Branch("main".into())));
        assert_eq!(r(None, Some("v1.2.0"), None), Some(Reference::Tag("v1.2.0".into())));
        assert_eq!(r(None, None, Some("ABCDEF1")), Some(Reference::Commit("abcdef1".into())));
        assert_eq!(r(None, None, None), None);
        assert_eq!(Reference::Tag("v1".into()).to_string(), "tag/v1");
        assert_eq!(Reference::Commit("abc1234".into()).to_string(), "commit/abc1234");
    }

    #[test]
    fn credentials_never_print_and_are_redacted() {
        let data = [
            ("username", "deploy"),
            ("password", "hunter2-token"),
            ("identity", "-----BEGIN KEY-----\nAAAAB3NzaC1yc2EAAAADAQABAAABAQC7\n-----END KEY-----\n"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
        .collect();
        let c = Credentials::from_secret_data(&data);
        let debug = format!("{c:?}");
        assert!(!debug.contains("hunter2") && !debug.contains("AAAAB3"), "{debug}");
        let msg = c.redact("auth failed for deploy:hunter2-token with key AAAAB3NzaC1yc2EAAAADAQABAAABAQC7");
        assert!(!msg.contains("hunter2-token") && !msg.contains("AAAAB3NzaC1yc2EAAAADAQABAAABAQC7"), "{msg}");
    }
}
