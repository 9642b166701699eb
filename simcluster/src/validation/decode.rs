//! What the real server rejects while decoding a body (400 BadRequest `<Kind> in version "v1"
//! cannot be handled as a <Kind>: ...`), reproduced for the typed fields whose JSON form is
//! stricter than a string: `metav1.Time` (RFC 3339), `metav1.MicroTime` (exactly six fractional
//! digits) and `[]byte` (standard base64). Also the canonical forms those fields are re-encoded in.

use base64::Engine;

use crate::rbac::go_quote;

/// `time.RFC3339`, the layout of `metav1.Time`.
pub(crate) const RFC3339: &str = "2006-01-02T15:04:05Z07:00";
/// `metav1.RFC3339Micro`, the layout of `metav1.MicroTime`.
pub(crate) const RFC3339_MICRO: &str = "2006-01-02T15:04:05.000000Z07:00";

/// A parsed instant: civil UTC fields plus nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Instant {
    unix: i64,
    nanos: u32,
}

fn days_in(month: i64, year: i64) -> i64 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

impl Instant {
    /// RFC 3339 in UTC with seconds (`metav1.Time`'s JSON form).
    pub(crate) fn format_seconds(self) -> String {
        let (y, mo, d, h, mi, s) = self.civil();
        format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
    }

    /// RFC 3339 in UTC with exactly six fractional digits (`metav1.MicroTime`'s JSON form).
    pub(crate) fn format_micros(self) -> String {
        let (y, mo, d, h, mi, s) = self.civil();
        format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{:06}Z", self.nanos / 1000)
    }

    fn civil(self) -> (i64, i64, i64, i64, i64, i64) {
        let days = self.unix.div_euclid(86400);
        let secs = self.unix.rem_euclid(86400);
        let (y, mo, d) = civil_from_days(days);
        (y, mo, d, secs / 3600, secs % 3600 / 60, secs % 60)
    }
}

fn parse_error(value: &str, layout: &str, value_elem: &str, layout_elem: &str) -> String {
    format!(
        "parsing time {} as {}: cannot parse {} as {}",
        go_quote(value),
        go_quote(layout),
        go_quote(value_elem),
        go_quote(layout_elem)
    )
}

fn range_error(value: &str, what: &str) -> String {
    format!("parsing time {}: {what} out of range", go_quote(value))
}

fn digits(s: &str, n: usize) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < n || !b[..n].iter().all(u8::is_ascii_digit) {
        return None;
    }
    s[..n].parse().ok()
}

/// Go's `time.Parse` for the two layouts above, with Go's error messages.
pub(crate) fn parse_go_time(value: &str, layout: &str) -> Result<Instant, String> {
    let micro = layout == RFC3339_MICRO;
    let mut rest = value;
    // Year "2006".
    let Some(year) = digits(rest, 4) else { return Err(parse_error(value, layout, rest, "2006")) };
    rest = &rest[4..];
    let lit = |rest: &str, l: &str| -> Result<usize, String> {
        if rest.starts_with(l) { Ok(l.len()) } else { Err(parse_error(value, layout, rest, l)) }
    };
    rest = &rest[lit(rest, "-")?..];
    let Some(month) = digits(rest, 2) else { return Err(parse_error(value, layout, rest, "01")) };
    if !(1..=12).contains(&month) {
        return Err(range_error(value, "month"));
    }
    rest = &rest[2..];
    rest = &rest[lit(rest, "-")?..];
    let Some(day) = digits(rest, 2) else { return Err(parse_error(value, layout, rest, "02")) };
    rest = &rest[2..];
    rest = &rest[lit(rest, "T")?..];
    // Hour "15" accepts one or two digits.
    let (hour, used) = match (digits(rest, 2), digits(rest, 1)) {
        (Some(h), _) => (h, 2),
        (None, Some(h)) => (h, 1),
        _ => return Err(parse_error(value, layout, rest, "15")),
    };
    if hour >= 24 {
        return Err(range_error(value, "hour"));
    }
    rest = &rest[used..];
    rest = &rest[lit(rest, ":")?..];
    let Some(minute) = digits(rest, 2) else { return Err(parse_error(value, layout, rest, "04")) };
    if minute >= 60 {
        return Err(range_error(value, "minute"));
    }
    rest = &rest[2..];
    rest = &rest[lit(rest, ":")?..];
    let Some(second) = digits(rest, 2) else { return Err(parse_error(value, layout, rest, "05")) };
    if second >= 60 {
        return Err(range_error(value, "second"));
    }
    rest = &rest[2..];
    let mut nanos: u32 = 0;
    let frac = |f: &str| -> u32 {
        let mut padded = f.chars().take(9).collect::<String>();
        while padded.len() < 9 {
            padded.push('0');
        }
        padded.parse().unwrap_or(0)
    };
    if micro {
        let ok = rest.len() >= 7
            && (rest.starts_with('.') || rest.starts_with(','))
            && rest.as_bytes()[1..7].iter().all(u8::is_ascii_digit);
        if !ok {
            return Err(parse_error(value, layout, rest, ".000000"));
        }
        nanos = frac(&rest[1..7]);
        rest = &rest[7..];
    } else if rest.len() >= 2 && (rest.starts_with('.') || rest.starts_with(',')) && rest.as_bytes()[1].is_ascii_digit()
    {
        let n = 1 + rest[1..].bytes().take_while(u8::is_ascii_digit).count();
        nanos = frac(&rest[1..n]);
        rest = &rest[n..];
    }
    // Zone "Z07:00".
    let offset = if let Some(r) = rest.strip_prefix('Z') {
        rest = r;
        0
    } else {
        let b = rest.as_bytes();
        let ok = b.len() >= 6 && (b[0] == b'+' || b[0] == b'-') && b[3] == b':';
        let (Some(h), Some(m)) =
            (ok.then(|| digits(&rest[1..], 2)).flatten(), ok.then(|| digits(&rest[4..], 2)).flatten())
        else {
            return Err(parse_error(value, layout, rest, "Z07:00"));
        };
        if h > 24 || m > 60 {
            return Err(range_error(value, "time zone offset"));
        }
        let sign = if b[0] == b'-' { -1 } else { 1 };
        rest = &rest[6..];
        sign * (h * 3600 + m * 60)
    };
    if !rest.is_empty() {
        return Err(format!("parsing time {}: extra text: {}", go_quote(value), go_quote(rest)));
    }
    if day < 1 || day > days_in(month, year) {
        return Err(range_error(value, "day"));
    }
    let unix = days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second - offset;
    Ok(Instant { unix, nanos })
}

/// `<Kind> in version "<version>" cannot be handled as a <Kind>: <why>`.
pub(crate) fn decode_message(api_version: &str, kind: &str, why: &str) -> String {
    let version = api_version.rsplit('/').next().unwrap_or(api_version);
    format!("{kind} in version {} cannot be handled as a {kind}: {why}", go_quote(version))
}

/// Go's `base64.StdEncoding.DecodeString`, with its `illegal base64 data at input byte N`.
pub(crate) fn decode_base64(s: &str) -> Result<Vec<u8>, String> {
    let corrupt = |i: usize| format!("illegal base64 data at input byte {i}");
    let val = |c: u8| -> Option<u8> {
        match c {
            b'A'..=b'Z' => Some(c - b'A'),
            b'a'..=b'z' => Some(c - b'a' + 26),
            b'0'..=b'9' => Some(c - b'0' + 52),
            b'+' => Some(62),
            b'/' => Some(63),
            _ => None,
        }
    };
    let src = s.as_bytes();
    let mut out = Vec::with_capacity(src.len() / 4 * 3);
    let mut si = 0;
    loop {
        let mut dbuf = [0u8; 4];
        let mut dlen = 4;
        let mut j = 0;
        while j < 4 {
            if si == src.len() {
                if j == 0 {
                    return Ok(out);
                }
                // Unpadded trailing quantum (StdEncoding requires padding).
                return Err(corrupt(si - j));
            }
            let c = src[si];
            si += 1;
            if let Some(v) = val(c) {
                dbuf[j] = v;
                j += 1;
                continue;
            }
            if c == b'\n' || c == b'\r' {
                continue;
            }
            if c != b'=' {
                return Err(corrupt(si - 1));
            }
            // Padding.
            match j {
                0 | 1 => return Err(corrupt(si - 1)),
                2 => {
                    while si < src.len() && (src[si] == b'\n' || src[si] == b'\r') {
                        si += 1;
                    }
                    if si == src.len() {
                        return Err(corrupt(src.len()));
                    }
                    if src[si] != b'=' {
                        return Err(corrupt(si - 1));
                    }
                    si += 1;
                }
                _ => {}
            }
            while si < src.len() && (src[si] == b'\n' || src[si] == b'\r') {
                si += 1;
            }
            if si < src.len() {
                return Err(corrupt(si));
            }
            dlen = j;
            break;
        }
        let v =
            (u32::from(dbuf[0]) << 18) | (u32::from(dbuf[1]) << 12) | (u32::from(dbuf[2]) << 6) | u32::from(dbuf[3]);
        let bytes = [(v >> 16) as u8, (v >> 8) as u8, v as u8];
        match dlen {
            4 => out.extend_from_slice(&bytes),
            3 => out.extend_from_slice(&bytes[..2]),
            2 => out.push(bytes[0]),
            _ => {}
        }
        if dlen < 4 {
            return Ok(out);
        }
    }
}

/// Standard base64 with padding (Go's re-encoding of `[]byte`).
pub(crate) fn encode_base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
