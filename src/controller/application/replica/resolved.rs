//! The commit each `spec.source.revision` last resolved to, so it is resolved at most once per
//! its Repository's interval.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What a resolved `spec.source.revision` is remembered by: (URL, credential identity of the
/// Repository's Secret, revision). With the identity, one tenant never learns the commit another
/// tenant's credentials resolved.
pub(crate) type ResolvedKey = (String, String, String);

/// Each key's last commit, with when it was resolved.
#[derive(Default)]
pub(crate) struct Resolved(Mutex<HashMap<ResolvedKey, (Instant, String)>>);

impl Resolved {
    /// The commit `key` resolved to less than `within` ago.
    pub(crate) fn recent(&self, key: &ResolvedKey, within: Duration) -> Option<String> {
        let resolved = self.0.lock().expect("resolved lock");
        resolved.get(key).filter(|(at, _)| at.elapsed() < within).map(|(_, commit)| commit.clone())
    }

    /// `key` resolved to `commit` now.
    pub(crate) fn remember(&self, key: ResolvedKey, commit: &str) {
        self.0.lock().expect("resolved lock").insert(key, (Instant::now(), commit.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_is_remembered_per_credentials_for_a_while() {
        let resolved = Resolved::default();
        let key = |creds: &str| ("https://git.example/a".to_string(), creds.to_string(), "main".to_string());
        resolved.remember(key("tenant-a"), "abc");
        assert_eq!(resolved.recent(&key("tenant-a"), Duration::from_secs(60)).as_deref(), Some("abc"));
        assert_eq!(resolved.recent(&key("tenant-b"), Duration::from_secs(60)), None, "other credentials resolve apart");
        assert_eq!(resolved.recent(&key("tenant-a"), Duration::ZERO), None, "older than the interval");
    }
}
