//! A replica's own account of its work, from its Prometheus `/metrics`: API requests, time spent
//! waiting for its API budget, reconciles and their durations.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The series the report keeps, summed over their labels (a histogram's or summary's `_sum` and
/// `_count` are series of their own).
pub const KEPT: &[&str] = &[
    "ksync_api_requests_total",
    "ksync_api_throttle_seconds_sum",
    "ksync_api_throttle_seconds_count",
    "ksync_reconciles_total",
    "ksync_reconcile_duration_seconds_sum",
    "ksync_reconcile_duration_seconds_count",
    "ksync_reconcile_queue_seconds_sum",
    "ksync_render_cache_requests_total",
    "ksync_lease_renewal_gap_seconds_count",
    "ksync_lease_renewals_late_total",
];

/// Sum every sample of each [`KEPT`] series in Prometheus text exposition `text`, and count
/// `ksync_reconciles_total` and `ksync_render_cache_requests_total` by `result` as
/// `name{result}`, and `ksync_api_requests_total` by `verb` as `name{verb}`.
pub fn parse(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else { continue };
        let Ok(value) = value.trim().parse::<f64>() else { continue };
        let (name, labels) = series.split_once('{').unwrap_or((series, ""));
        if !KEPT.contains(&name) {
            continue;
        }
        *out.entry(name.to_string()).or_insert(0.0) += value;
        let by = if name == "ksync_api_requests_total" { "verb=\"" } else { "result=\"" };
        if matches!(name, "ksync_reconciles_total" | "ksync_render_cache_requests_total" | "ksync_api_requests_total")
            && let Some(result) = labels.split(',').find_map(|l| l.strip_prefix(by))
        {
            let result = result.trim_end_matches('}').trim_end_matches('"');
            *out.entry(format!("{name}{{{result}}}")).or_insert(0.0) += value;
        }
    }
    out
}

/// GET `http://127.0.0.1:<port>/metrics` (plain HTTP/1.0; the exporter closes the connection).
pub fn scrape(port: u16) -> Option<BTreeMap<String, f64>> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200")
        .then(|| parse(body))
        .or_else(|| head.starts_with("HTTP/1.0 200").then(|| parse(body)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_series_over_labels() {
        let text = "# TYPE ksync_api_requests_total counter\n\
            ksync_api_requests_total{verb=\"get\"} 10\n\
            ksync_api_requests_total{verb=\"patch\"} 5\n\
            ksync_api_throttle_seconds{quantile=\"0.5\"} 0.1\n\
            ksync_api_throttle_seconds_sum 12.5\n\
            ksync_api_throttle_seconds_count 40\n\
            ksync_reconciles_total{result=\"ok\"} 7\n\
            ksync_reconciles_total{result=\"not_owner\"} 2\n\
            ksync_render_cache_requests_total{result=\"miss\"} 4\n\
            other_total 3\n";
        let m = parse(text);
        assert_eq!(m["ksync_api_requests_total"], 15.0);
        assert_eq!(m["ksync_api_throttle_seconds_sum"], 12.5);
        assert_eq!(m["ksync_api_throttle_seconds_count"], 40.0);
        assert_eq!(m["ksync_reconciles_total"], 9.0);
        assert_eq!(m["ksync_reconciles_total{not_owner}"], 2.0);
        assert!(!m.contains_key("other_total"));
        assert_eq!(m["ksync_render_cache_requests_total{miss}"], 4.0);
        assert!(!m.contains_key("ksync_api_throttle_seconds"));
    }
}
