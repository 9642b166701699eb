//! What the commit-status providers share: the state a lifecycle Event means for its commit, the
//! status's name and description, and the repository on the host. Pure.

use super::super::message::Message;
use crate::api::names;
use crate::api::notification::Severity;

/// The longest description sent (GitHub refuses more than 140 characters).
pub const MAX_DESCRIPTION: usize = 140;

/// A commit's deployment state, as the hosts' status APIs name them in their own words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// A Revision of the commit exists and waits or rolls out.
    Pending,
    /// Applied and Healthy.
    Success,
    /// Its rollout failed (any Warning lifecycle Event about it).
    Failure,
}

/// The state `msg` means for its commit, or `None` for an Event that says nothing of one
/// (a discovery, an approval going stale).
///
/// # Contract
/// A Warning is a failure; `Succeeded` and `RollbackCompleted` (the commit rolled back to is
/// deployed and Healthy) are successes; `NewRevision`, `Progressing` and `RollbackApproved`
/// (a rollout of the commit starts) are pending; nothing else sets a state. Table test:
/// `states_follow_the_lifecycle`.
pub fn state(msg: &Message) -> Option<State> {
    if msg.severity == Severity::Warning {
        return Some(State::Failure);
    }
    match msg.reason.as_str() {
        names::reasons::SUCCEEDED | names::reasons::ROLLBACK_COMPLETED => Some(State::Success),
        names::events::NEW_REVISION | names::reasons::PROGRESSING | names::events::ROLLBACK_APPROVED => {
            Some(State::Pending)
        }
        _ => None,
    }
}

/// Whether a `state` of an Event that happened at `happened` (Unix seconds) is news no more
/// because the Revision's latest attempt finished at `finished` (Unix seconds; `None` while it
/// runs or before the first), so the commit's success or failure is, or is about to be, on the
/// host. Hosts keep the last state written (GitHub, Gitea, Bitbucket), so a pending that arrives
/// after its success would show a deployed commit as still deploying.
///
/// # Contract
/// Only a pending is ever superseded, and only by an attempt that finished in the second of the
/// Event or later (times are kept to the second): an Event of a new attempt, such as a rollback
/// back to this Revision, comes after its last finish and is sent. Table test:
/// `a_pending_is_superseded_only_by_a_later_finish`.
pub fn superseded(state: State, happened: i64, finished: Option<i64>) -> bool {
    state == State::Pending && finished.is_some_and(|f| f >= happened)
}

/// The status's name on the commit: one per Application, so a commit deployed by several
/// Applications shows each.
pub fn context(msg: &Message) -> String {
    format!("kuvryn-sync/{}/{}", msg.namespace, msg.application)
}

/// `Reason: message`, at most [`MAX_DESCRIPTION`] characters.
pub fn description(msg: &Message) -> String {
    let full = format!("{}: {}", msg.reason, msg.message);
    if full.chars().count() <= MAX_DESCRIPTION {
        return full;
    }
    let mut cut: String = full.chars().take(MAX_DESCRIPTION - 1).collect();
    cut.push('…');
    cut
}

/// The repository's path on the host (`owner/name`, a GitLab `group/sub/project`): `configured`
/// when set, else the path of the Application's Repository URL (`https://host/owner/name.git`,
/// `ssh://git@host/owner/name`, `git@host:owner/name.git`).
pub fn repository(configured: Option<&str>, msg: &Message) -> Result<String, String> {
    if let Some(r) = configured {
        return Ok(r.trim_matches('/').to_string());
    }
    let url =
        msg.source_url.as_deref().ok_or("the Event's Revision has no Repository URL: set spec.provider.repository")?;
    let path = match url.split_once("://") {
        Some((_, rest)) => rest.split_once('/').map(|(_, p)| p).unwrap_or_default(),
        // scp-like user@host:path
        None => url.split_once(':').map(|(_, p)| p).unwrap_or_default(),
    };
    let path = path.trim_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path);
    if path.split('/').filter(|s| !s.is_empty()).count() < 2 {
        return Err(format!("cannot tell the repository from {url:?}: set spec.provider.repository"));
    }
    Ok(path.to_string())
}

/// `owner/name` split in two (GitHub, Gitea, Bitbucket have exactly two segments).
pub fn owner_and_name(path: &str) -> Result<(&str, &str), String> {
    match path.split_once('/') {
        Some((o, n)) if !o.is_empty() && !n.is_empty() && !n.contains('/') => Ok((o, n)),
        _ => Err(format!("repository {path:?} must be owner/name")),
    }
}

/// The commit to write on, checked to be a hex object id (it becomes part of a URL).
pub fn commit(msg: &Message) -> Result<&str, String> {
    let c = msg.commit.as_deref().ok_or("the Event's Revision has no commit")?;
    if (7..=64).contains(&c.len()) && c.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(c)
    } else {
        Err(format!("{c:?} is not a commit id"))
    }
}

/// The API base URL: the Secret's `address`, else the host's public API.
pub fn base(address: Option<&str>, public: Option<&str>, host: &str) -> Result<String, String> {
    address
        .or(public)
        .map(|a| a.trim_end_matches('/').to_string())
        .ok_or_else(|| format!("{host} has no public API: set address in the provider Secret"))
}

/// Percent-encode one path segment (a GitLab project path, `/` included, is one segment).
pub fn segment(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// A segment of a path that must not escape it: owner, name and commit are checked here
/// because they come from a tenant's Repository URL or Notification.
pub fn safe(s: &str) -> Result<&str, String> {
    let ok = !s.is_empty()
        && s != "."
        && s != ".."
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok { Ok(s) } else { Err(format!("{s:?} is not a repository owner or name")) }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn message(severity: Severity, reason: &str) -> Message {
        Message {
            event: "0b8e4a3c".into(),
            namespace: "team-a".into(),
            application: "web".into(),
            severity,
            reason: reason.into(),
            message: "applied 3 objects".into(),
            revision: Some("web-1a2b3c4d5e".into()),
            commit: Some("2c26b46b68ffc68ff99b453c1d30413413422d70".into()),
            source_url: Some("https://github.example/acme/shop.git".into()),
            at: "2026-12-05T12:00:00Z".into(),
            sent: 0,
        }
    }

    #[test]
    fn states_follow_the_lifecycle() {
        use Severity::{Normal, Warning};
        let cases = [
            (Normal, "NewRevision", Some(State::Pending)),
            (Normal, "Progressing", Some(State::Pending)),
            (Normal, "RollbackApproved", Some(State::Pending)),
            (Normal, "Succeeded", Some(State::Success)),
            (Normal, "RollbackCompleted", Some(State::Success)),
            (Warning, "HealthTimeout", Some(State::Failure)),
            (Warning, "ApplyFailure", Some(State::Failure)),
            (Warning, "HookFailed", Some(State::Failure)),
            (Normal, "DiscoveryChanged", None),
            (Normal, "ApprovalStale", None),
        ];
        for (severity, reason, want) in cases {
            assert_eq!(state(&message(severity, reason)), want, "{reason}");
        }
    }

    #[test]
    fn a_pending_is_superseded_only_by_a_later_finish() {
        let cases = [
            (State::Pending, 100, Some(100), true),
            (State::Pending, 100, Some(105), true),
            (State::Pending, 100, Some(99), false),
            (State::Pending, 100, None, false),
            (State::Success, 100, Some(105), false),
            (State::Failure, 100, Some(105), false),
        ];
        for (state, happened, finished, want) in cases {
            assert_eq!(superseded(state, happened, finished), want, "{state:?} at {happened}, finished {finished:?}");
        }
    }

    #[test]
    fn the_repository_comes_from_the_url_unless_configured() {
        let mut m = message(Severity::Normal, "Succeeded");
        let cases = [
            ("https://github.example/acme/shop.git", Ok("acme/shop")),
            ("https://gitlab.example/group/sub/project", Ok("group/sub/project")),
            ("ssh://git@github.example/acme/shop.git", Ok("acme/shop")),
            ("git@github.example:acme/shop.git", Ok("acme/shop")),
            ("https://github.example/shop", Err(())),
        ];
        for (url, want) in cases {
            m.source_url = Some(url.into());
            assert_eq!(repository(None, &m).map_err(|_| ()), want.map(String::from), "{url}");
        }
        assert_eq!(repository(Some("/other/repo/"), &m).unwrap(), "other/repo");
        m.source_url = None;
        assert!(repository(None, &m).unwrap_err().contains("set spec.provider.repository"));
    }

    #[test]
    fn path_parts_cannot_escape_the_api() {
        for bad in ["..", ".", "a/b", "a?b", "a#b", "", "a%2Fb"] {
            assert!(safe(bad).is_err(), "{bad}");
        }
        assert_eq!(safe("shop.web-2_x").unwrap(), "shop.web-2_x");
        let mut m = message(Severity::Normal, "Succeeded");
        m.commit = Some("../../admin".into());
        assert!(commit(&m).is_err());
        assert_eq!(segment("group/sub project"), "group%2Fsub%20project");
        assert!(owner_and_name("a/b/c").is_err());
    }

    #[test]
    fn descriptions_are_bounded() {
        let mut m = message(Severity::Warning, "HealthTimeout");
        m.message = "x".repeat(1000);
        let d = description(&m);
        assert_eq!(d.chars().count(), MAX_DESCRIPTION);
        assert!(d.starts_with("HealthTimeout: xxx") && d.ends_with('…'));
    }
}
