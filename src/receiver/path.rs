//! A receiver's endpoint path: a digest of where its token is and what it is, so the path
//! names neither the Repository nor the token, Repositories naming the same Secret share it,
//! and a token rotation moves it. Pure.

use sha2::{Digest, Sha256};

/// The shortest token accepted (bytes): a shorter one is guessable by brute force.
pub const MIN_TOKEN_BYTES: usize = 16;

/// The key of the receiver Secret holding the token.
pub const TOKEN_KEY: &str = "token";

/// The prefix of every receiver path.
pub const PREFIX: &str = "/hook/";

/// `/hook/` and the first 40 hex digits of
/// `sha256("kuvryn-sync receiver\0" + namespace + "\0" + secret + "\0" + token)`.
pub fn of(namespace: &str, secret: &str, token: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(b"kuvryn-sync receiver\0");
    h.update(namespace.as_bytes());
    h.update(b"\0");
    h.update(secret.as_bytes());
    h.update(b"\0");
    h.update(token);
    let hex: String = h.finalize().iter().take(20).map(|b| format!("{b:02x}")).collect();
    format!("{PREFIX}{hex}")
}

/// The token of a receiver Secret's data (its `token` key, one trailing newline dropped as
/// `echo` leaves it), or why there is none usable. The message never contains the token.
pub fn token(secret_name: &str, data: Option<&std::collections::BTreeMap<String, Vec<u8>>>) -> Result<Vec<u8>, String> {
    let Some(raw) = data.and_then(|d| d.get(TOKEN_KEY)) else {
        return Err(format!(
            "the receiver Secret {secret_name:?} (spec.receiver.secretRef) does not exist in the Repository's \
             namespace or has no `{TOKEN_KEY}` key: no receiver path"
        ));
    };
    let mut t = raw.clone();
    if t.ends_with(b"\n") {
        t.pop();
        if t.ends_with(b"\r") {
            t.pop();
        }
    }
    if t.len() < MIN_TOKEN_BYTES {
        return Err(format!(
            "the `{TOKEN_KEY}` of the receiver Secret {secret_name:?} is shorter than {MIN_TOKEN_BYTES} bytes: no \
             receiver path"
        ));
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_depends_on_namespace_secret_and_token_and_reveals_none() {
        let p = of("team-a", "hook", b"0123456789abcdef");
        assert!(p.starts_with("/hook/") && p.len() == 6 + 40, "{p}");
        assert!(p[6..].chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(p, of("team-a", "hook", b"0123456789abcdef"), "stable");
        assert_ne!(p, of("team-b", "hook", b"0123456789abcdef"));
        assert_ne!(p, of("team-a", "hook2", b"0123456789abcdef"));
        assert_ne!(p, of("team-a", "hook", b"0123456789abcdeF"), "a rotation moves it");
        // The separators keep fields apart (Kubernetes names hold no NUL): ("ab", "c") is not
        // ("a", "bc").
        assert_ne!(of("ab", "c", b"t"), of("a", "bc", b"t"));
        assert!(!p.contains("team-a") && !p.contains("hook2") && !p.contains("0123"));
    }

    #[test]
    fn tokens_are_read_and_checked() {
        let data = |v: &[u8]| std::collections::BTreeMap::from([(TOKEN_KEY.to_string(), v.to_vec())]);
        assert_eq!(token("s", Some(&data(b"0123456789abcdef\n"))).unwrap(), b"0123456789abcdef");
        assert_eq!(token("s", Some(&data(b"0123456789abcdef\r\n"))).unwrap(), b"0123456789abcdef");
        let short = token("s", Some(&data(b"short-secret\n"))).unwrap_err();
        assert!(short.contains("shorter than 16") && !short.contains("short-secret"), "{short}");
        assert!(token("s", None).unwrap_err().contains("does not exist"));
        assert!(token("s", Some(&Default::default())).unwrap_err().contains("no `token`"));
    }
}
