//! The string formats kube-openapi's default registry checks (`strfmt.Default`).

use base64::Engine as _;

fn re(pattern: &str, s: &str) -> bool {
    regex(pattern).is_none_or(|r| r.is_match(s))
}

/// Most compiled patterns kept; past it the cache starts over (schemas' patterns are few).
const MAX_PATTERNS: usize = 4096;

/// `pattern` compiled (`None`: not a valid regex), kept by its text: every write of a custom
/// resource checks its schema's patterns, and compiling them each time was a large part of an
/// update's cost at 10,000 Applications.
pub(crate) fn regex(pattern: &str) -> Option<regex::Regex> {
    use std::collections::HashMap;
    use std::sync::{LazyLock, Mutex};
    static PATTERNS: LazyLock<Mutex<HashMap<String, Option<regex::Regex>>>> = LazyLock::new(Default::default);
    if let Some(r) = PATTERNS.lock().unwrap_or_else(|e| e.into_inner()).get(pattern) {
        return r.clone();
    }
    let compiled = regex::Regex::new(pattern).ok();
    let mut patterns = PATTERNS.lock().unwrap_or_else(|e| e.into_inner());
    if patterns.len() >= MAX_PATTERNS {
        patterns.clear();
    }
    patterns.insert(pattern.to_string(), compiled.clone());
    compiled
}

/// Whether `s` is valid for `format`; `None` for formats the registry does not know (not checked).
pub(crate) fn check(format: &str, s: &str) -> Option<bool> {
    Some(match format {
        "date-time" | "datetime" => is_date_time(s),
        "date" => re(r"^\d{4}-\d{2}-\d{2}$", s) && valid_ymd(&s[..10]),
        "duration" => is_duration(s),
        "byte" => base64::engine::general_purpose::STANDARD.decode(s).is_ok(),
        "uuid" => re(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$", s),
        "uuid3" => re(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$", s),
        "uuid4" => re(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$", s),
        "uuid5" => re(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$", s),
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::Ipv6Addr>().is_ok(),
        "cidr" => is_cidr(s),
        "mac" => re(r"^([0-9A-Fa-f]{2}[:-]){5}([0-9A-Fa-f]{2})$|^([0-9A-Fa-f]{4}\.){2}([0-9A-Fa-f]{4})$", s),
        "hostname" => {
            s.len() <= 255 && re(r"^[a-zA-Z0-9]([-a-zA-Z0-9]{0,62})?(\.[a-zA-Z0-9]([-a-zA-Z0-9]{0,62})?)*\.?$", s)
        }
        "email" => re(r"^[^@\s]+@[^@\s]+$", s),
        "uri" => !s.is_empty() && !s.contains(char::is_whitespace),
        "hexcolor" => re(r"^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$", s),
        "rgbcolor" => re(r"^rgb\(\s*\d{1,3}%?\s*,\s*\d{1,3}%?\s*,\s*\d{1,3}%?\s*\)$", s),
        "isbn" | "isbn10" | "isbn13" => re(r"^[0-9Xx-]{10,17}$", s),
        "creditcard" => re(r"^[0-9 -]{12,23}$", s),
        "ssn" => re(r"^\d{3}[- ]?\d{2}[- ]?\d{4}$", s),
        "bsonobjectid" => re(r"^[0-9a-fA-F]{24}$", s),
        "password" => true,
        _ => return None,
    })
}

fn valid_ymd(d: &str) -> bool {
    d.parse::<jiff::civil::Date>().is_ok()
}

fn is_date_time(s: &str) -> bool {
    re(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:?\d{2})?$", s)
        && valid_ymd(&s[..10])
        && s[11..13].parse::<u32>().is_ok_and(|h| h < 24)
        && s[14..16].parse::<u32>().is_ok_and(|m| m < 60)
        && s[17..19].parse::<u32>().is_ok_and(|x| x < 61)
}

fn is_duration(s: &str) -> bool {
    re(r"^[-+]?(\d+(\.\d+)?\s*(ns|us|µs|ms|s|m|h|d|w))+$", s.trim())
}

fn is_cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else { return false };
    let Ok(bits) = bits.parse::<u8>() else { return false };
    if let Ok(_v4) = ip.parse::<std::net::Ipv4Addr>() {
        bits <= 32
    } else if let Ok(_v6) = ip.parse::<std::net::Ipv6Addr>() {
        bits <= 128
    } else {
        false
    }
}
