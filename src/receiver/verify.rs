//! Who sent a request, and whether it is signed with a token: each Git host's own scheme
//! (HMAC-SHA256 of the body, or GitLab's token header) and the generic form's signed
//! timestamp. Constant-time compares only. Pure: headers and body in, a verdict out.

use hmac::{Hmac, Mac};
use http::HeaderMap;
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// How old a generic request's signed timestamp may be (and how far in the future).
pub const GENERIC_MAX_AGE_SECONDS: i64 = 300;

/// The sender of a request, told from its headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Provider {
    /// GitHub (`X-GitHub-Event`, `X-Hub-Signature-256`).
    GitHub,
    /// GitLab (`X-Gitlab-Event`, `X-Gitlab-Token`).
    GitLab,
    /// Gitea or Forgejo (`X-Gitea-Signature` / `X-Forgejo-Signature`).
    Gitea,
    /// Bitbucket Cloud or Data Center (`X-Event-Key`, `X-Hub-Signature`).
    Bitbucket,
    /// Kuvryn Sync's generic form (`X-Ksync-Signature`, `X-Ksync-Timestamp`).
    Generic,
}

impl Provider {
    /// The sender of a request; `None` when no known header is there. Gitea and Forgejo also
    /// send GitHub's headers, so they are told first.
    pub fn detect(headers: &HeaderMap) -> Option<Provider> {
        let has = |h: &str| headers.contains_key(h);
        if has("x-ksync-signature") {
            Some(Provider::Generic)
        } else if has("x-gitea-signature")
            || has("x-forgejo-signature")
            || has("x-gitea-event")
            || has("x-forgejo-event")
        {
            Some(Provider::Gitea)
        } else if has("x-gitlab-event") || has("x-gitlab-token") {
            Some(Provider::GitLab)
        } else if has("x-github-event") || has("x-hub-signature-256") {
            Some(Provider::GitHub)
        } else if has("x-event-key") {
            Some(Provider::Bitbucket)
        } else {
            None
        }
    }

    /// The metric label.
    pub fn label(provider: Option<Provider>) -> &'static str {
        match provider {
            Some(Provider::GitHub) => "github",
            Some(Provider::GitLab) => "gitlab",
            Some(Provider::Gitea) => "gitea",
            Some(Provider::Bitbucket) => "bitbucket",
            Some(Provider::Generic) => "generic",
            None => "unknown",
        }
    }

    /// The id the sender gives each delivery (the same on a replay), if any.
    pub fn delivery(self, headers: &HeaderMap) -> Option<String> {
        let names: &[&str] = match self {
            Provider::GitHub => &["x-github-delivery"],
            Provider::Gitea => &["x-gitea-delivery", "x-forgejo-delivery"],
            Provider::GitLab => &["x-gitlab-event-uuid"],
            Provider::Bitbucket => &["x-request-uuid", "x-request-id", "x-hook-uuid"],
            Provider::Generic => &["x-ksync-delivery"],
        };
        names.iter().find_map(|n| header(headers, n)).map(|v| v.chars().take(128).collect())
    }

    /// What the request reports.
    pub fn event(self, headers: &HeaderMap) -> EventKind {
        let value = |names: &[&str]| names.iter().find_map(|n| header(headers, n)).unwrap_or_default();
        match self {
            Provider::GitHub => match value(&["x-github-event"]) {
                "push" => EventKind::Push,
                "ping" => EventKind::Ping,
                _ => EventKind::Other,
            },
            Provider::Gitea => match value(&["x-gitea-event", "x-forgejo-event", "x-github-event"]) {
                "push" => EventKind::Push,
                "ping" => EventKind::Ping,
                _ => EventKind::Other,
            },
            Provider::GitLab => match value(&["x-gitlab-event"]) {
                "Push Hook" | "Tag Push Hook" | "System Hook" => EventKind::Push,
                _ => EventKind::Other,
            },
            Provider::Bitbucket => match value(&["x-event-key"]) {
                "repo:push" | "repo:refs_changed" => EventKind::Push,
                "diagnostics:ping" => EventKind::Ping,
                _ => EventKind::Other,
            },
            Provider::Generic => EventKind::Push,
        }
    }
}

/// What a verified request reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// Refs moved.
    Push,
    /// A test delivery (GitHub's `ping`, Bitbucket's `diagnostics:ping`).
    Ping,
    /// Something else (issues, merge requests...): acknowledged, ignored.
    Other,
}

/// How verification ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Signed with the token.
    Valid,
    /// No signature, or not this token's.
    Invalid,
    /// The generic form's timestamp is older (or newer) than [`GENERIC_MAX_AGE_SECONDS`]: a replay.
    Stale,
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim)
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

/// Whether `signature` (hex) is the HMAC-SHA256 of `parts` under `token`, compared in constant time.
fn hmac_ok(token: &[u8], parts: &[&[u8]], signature: Option<&str>) -> bool {
    let Some(expected) = signature.and_then(decode_hex) else { return false };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(token) else { return false };
    for p in parts {
        mac.update(p);
    }
    mac.verify_slice(&expected).is_ok()
}

/// Whether the request of `provider` is signed with `token`; `now` is the Unix time in seconds.
pub fn verify(provider: Provider, headers: &HeaderMap, body: &[u8], token: &[u8], now: i64) -> Verdict {
    let prefixed = |name: &str| header(headers, name).and_then(|v| v.strip_prefix("sha256="));
    let ok = match provider {
        Provider::GitHub => hmac_ok(token, &[body], prefixed("x-hub-signature-256")),
        Provider::Bitbucket => hmac_ok(token, &[body], prefixed("x-hub-signature")),
        Provider::Gitea => {
            let sig = header(headers, "x-gitea-signature").or_else(|| header(headers, "x-forgejo-signature"));
            hmac_ok(token, &[body], sig)
        }
        Provider::GitLab => header(headers, "x-gitlab-token").is_some_and(|t| bool::from(t.as_bytes().ct_eq(token))),
        Provider::Generic => {
            let Some(ts) = header(headers, "x-ksync-timestamp") else { return Verdict::Invalid };
            if !hmac_ok(token, &[ts.as_bytes(), b".", body], prefixed("x-ksync-signature")) {
                return Verdict::Invalid;
            }
            // Checked only once signed: the age of an unsigned timestamp says nothing.
            return match ts.parse::<i64>() {
                Ok(t) if (now - t).abs() <= GENERIC_MAX_AGE_SECONDS => Verdict::Valid,
                _ => Verdict::Stale,
            };
        }
    };
    if ok { Verdict::Valid } else { Verdict::Invalid }
}

/// The hex HMAC-SHA256 of `parts` under `token` (for senders: tests, `docs/receivers.md`).
pub fn sign(token: &[u8], parts: &[&[u8]]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(token).expect("HMAC takes any key length");
    for p in parts {
        mac.update(p);
    }
    mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &[u8] = b"0123456789abcdef-token";
    const BODY: &[u8] = br#"{"ref":"refs/heads/main"}"#;
    const NOW: i64 = 1_800_000_000;

    /// Header pairs of one test request.
    type Pairs<'a> = Vec<(&'a str, &'a str)>;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(http::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
        }
        h
    }

    #[test]
    fn each_host_is_told_from_its_headers() {
        let cases: Vec<(Pairs, Option<Provider>)> = vec![
            (vec![("X-GitHub-Event", "push")], Some(Provider::GitHub)),
            (vec![("X-GitHub-Event", "push"), ("X-Gitea-Event", "push")], Some(Provider::Gitea)),
            (vec![("X-Forgejo-Signature", "ab")], Some(Provider::Gitea)),
            (vec![("X-Gitlab-Event", "Push Hook")], Some(Provider::GitLab)),
            (vec![("X-Event-Key", "repo:push")], Some(Provider::Bitbucket)),
            (vec![("X-Ksync-Signature", "sha256=00")], Some(Provider::Generic)),
            (vec![("Content-Type", "application/json")], None),
        ];
        for (h, want) in cases {
            assert_eq!(Provider::detect(&headers(&h)), want, "{h:?}");
        }
    }

    #[test]
    fn signatures_verify_only_with_the_token() {
        let good = sign(TOKEN, &[BODY]);
        let bad = sign(b"another-token-0123456789", &[BODY]);
        let gh = format!("sha256={good}");
        let gh_bad = format!("sha256={bad}");
        let ts = NOW.to_string();
        let generic = format!("sha256={}", sign(TOKEN, &[ts.as_bytes(), b".", BODY]));
        let old = (NOW - 301).to_string();
        let generic_old = format!("sha256={}", sign(TOKEN, &[old.as_bytes(), b".", BODY]));
        let token = std::str::from_utf8(TOKEN).unwrap();
        let cases: Vec<(Provider, Pairs, Verdict)> = vec![
            (Provider::GitHub, vec![("x-hub-signature-256", &gh)], Verdict::Valid),
            (Provider::GitHub, vec![("x-hub-signature-256", &gh_bad)], Verdict::Invalid),
            (Provider::GitHub, vec![("x-hub-signature-256", &good)], Verdict::Invalid),
            (Provider::GitHub, vec![("x-hub-signature-256", "sha256=zz")], Verdict::Invalid),
            (Provider::GitHub, vec![], Verdict::Invalid),
            (Provider::Bitbucket, vec![("x-hub-signature", &gh)], Verdict::Valid),
            (Provider::Bitbucket, vec![("x-hub-signature-256", &gh)], Verdict::Invalid),
            (Provider::Gitea, vec![("x-gitea-signature", &good)], Verdict::Valid),
            (Provider::Gitea, vec![("x-forgejo-signature", &good)], Verdict::Valid),
            (Provider::Gitea, vec![("x-gitea-signature", &bad)], Verdict::Invalid),
            (Provider::GitLab, vec![("x-gitlab-token", token)], Verdict::Valid),
            (Provider::GitLab, vec![("x-gitlab-token", "0123456789abcdef-tokeN")], Verdict::Invalid),
            (Provider::GitLab, vec![("x-gitlab-token", "0123456789abcdef")], Verdict::Invalid),
            (Provider::GitLab, vec![], Verdict::Invalid),
            (Provider::Generic, vec![("x-ksync-timestamp", &ts), ("x-ksync-signature", &generic)], Verdict::Valid),
            (Provider::Generic, vec![("x-ksync-timestamp", &old), ("x-ksync-signature", &generic_old)], Verdict::Stale),
            // The timestamp is signed: changing it breaks the signature.
            (Provider::Generic, vec![("x-ksync-timestamp", &old), ("x-ksync-signature", &generic)], Verdict::Invalid),
            (Provider::Generic, vec![("x-ksync-signature", &generic)], Verdict::Invalid),
            (Provider::Generic, vec![("x-ksync-timestamp", &ts), ("x-ksync-signature", &gh)], Verdict::Invalid),
        ];
        for (provider, h, want) in cases {
            assert_eq!(verify(provider, &headers(&h), BODY, TOKEN, NOW), want, "{provider:?} {h:?}");
        }
        // Another body under the same signature fails.
        assert_eq!(
            verify(Provider::GitHub, &headers(&[("x-hub-signature-256", &gh)]), b"{}", TOKEN, NOW),
            Verdict::Invalid
        );
    }

    #[test]
    fn deliveries_and_events_are_read_per_host() {
        let h = headers(&[("X-GitHub-Event", "ping"), ("X-GitHub-Delivery", "d-1")]);
        assert_eq!(Provider::GitHub.delivery(&h).as_deref(), Some("d-1"));
        assert_eq!(Provider::GitHub.event(&h), EventKind::Ping);
        let h = headers(&[("X-Gitlab-Event", "Tag Push Hook"), ("X-Gitlab-Event-UUID", "u")]);
        assert_eq!(
            (Provider::GitLab.event(&h), Provider::GitLab.delivery(&h).as_deref()),
            (EventKind::Push, Some("u"))
        );
        let h = headers(&[("X-Event-Key", "repo:refs_changed"), ("X-Request-Id", "r")]);
        assert_eq!(
            (Provider::Bitbucket.event(&h), Provider::Bitbucket.delivery(&h).as_deref()),
            (EventKind::Push, Some("r"))
        );
        let h = headers(&[("X-Gitea-Event", "issues"), ("X-Gitea-Delivery", "g")]);
        assert_eq!((Provider::Gitea.event(&h), Provider::Gitea.delivery(&h).as_deref()), (EventKind::Other, Some("g")));
        assert_eq!(Provider::Generic.delivery(&headers(&[])), None);
    }
}
