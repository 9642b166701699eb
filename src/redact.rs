//! One redaction rule for every secret value a message could echo: Repository credentials,
//! Helm `valuesFrom` Secrets and the desired state's Secrets. Pure.

/// What a secret value is replaced with.
pub const REDACTED: &str = "<redacted>";

/// Values shorter than this are left alone: one or two characters would match everywhere and
/// leave no message readable.
pub const MIN_LEN: usize = 3;

/// Lines of a multi-line value (a private key, a certificate) at least this long are removed on
/// their own too: tools echo such values line by line.
pub const MIN_LINE: usize = 16;

/// `message` with every value of `secrets` replaced by [`REDACTED`].
///
/// Contract (table-tested):
/// - longest values first, so a value containing another one is removed whole, never leaving
///   the rest of it visible;
/// - every line of a multi-line value that is at least [`MIN_LINE`] characters long is removed
///   as well, wherever it appears;
/// - values shorter than [`MIN_LEN`] characters are not redacted;
/// - the same list gives the same result whatever its order.
pub fn redact<'a>(message: &str, secrets: impl IntoIterator<Item = &'a str>) -> String {
    let mut values: Vec<&str> = Vec::new();
    for s in secrets {
        values.push(s);
        if s.contains('\n') {
            values.extend(s.lines().map(str::trim).filter(|l| l.len() >= MIN_LINE));
        }
    }
    values.retain(|v| v.len() >= MIN_LEN);
    // Longest first, then by content, so the order of `secrets` never matters.
    values.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    values.dedup();
    values.iter().fold(message.to_string(), |m, v| m.replace(v, REDACTED))
}

/// Every string a message must not show: desired Secrets' values.
pub fn secret_strings(objects: &[serde_json::Value]) -> Vec<String> {
    use base64::Engine;
    let mut out = Vec::new();
    for o in objects.iter().filter(|o| o["kind"] == "Secret" && o["apiVersion"] == "v1") {
        if let Some(data) = o["data"].as_object() {
            for v in data.values().filter_map(serde_json::Value::as_str) {
                if let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(v) {
                    out.push(String::from_utf8_lossy(&bytes).to_string());
                }
                out.push(v.to_string());
            }
        }
        if let Some(data) = o["stringData"].as_object() {
            out.extend(data.values().filter_map(serde_json::Value::as_str).map(str::to_string));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_secret_value_is_removed_whole() {
        let key = "-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nshort\n-----END KEY-----";
        let cases: &[(&str, &str, &[&str], &str)] = &[
            ("nothing to redact", "all fine", &[], "all fine"),
            ("a value", "auth failed for hunter2", &["hunter2"], "auth failed for <redacted>"),
            ("every occurrence", "a=s3cr3t b=s3cr3t", &["s3cr3t"], "a=<redacted> b=<redacted>"),
            (
                "a value inside a longer one: the longer goes whole",
                "token tok-123456-extra and tok-123456",
                &["tok-123456", "tok-123456-extra"],
                "token <redacted> and <redacted>",
            ),
            (
                "the same, listed the other way round",
                "token tok-123456-extra and tok-123456",
                &["tok-123456-extra", "tok-123456"],
                "token <redacted> and <redacted>",
            ),
            ("three characters are redacted", "pin abc", &["abc"], "pin <redacted>"),
            ("two are not", "a b ab", &["ab"], "a b ab"),
            ("the empty value is not", "text", &[""], "text"),
            (
                "a key echoed line by line",
                "ssh: bad key line MIIEvQIBADANBgkqhkiG9w0BAQEFAASC",
                &[key],
                "ssh: bad key line <redacted>",
            ),
            ("a key echoed whole", &format!("got {key} back"), &[key], "got <redacted> back"),
            ("non-ASCII", "mot de passe: pässwörd!", &["pässwörd"], "mot de passe: <redacted>!"),
        ];
        for (what, message, secrets, want) in cases {
            assert_eq!(redact(message, secrets.iter().copied()), *want, "{what}");
        }
    }
}
