//! A manager's Prometheus metrics, scraped from its `/metrics` endpoint.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

/// The samples of `/metrics` on `port`: (name, labels) to value.
pub type Samples = BTreeMap<(String, BTreeMap<String, String>), f64>;

/// Scrape `/metrics` on 127.0.0.1:`port` once (`None` when it does not answer).
pub fn scrape(port: u16) -> Option<Samples> {
    let script = format!(
        "import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:{port}/metrics').read().decode())"
    );
    let out = Command::new("python3").args(["-c", &script]).output().ok()?;
    out.status.success().then_some(())?;
    let mut samples = Samples::new();
    for line in String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let (series, value) = line.rsplit_once(' ')?;
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => {
                let labels = rest.trim_end_matches('}').split("\",").filter(|l| !l.is_empty()).map(|l| {
                    let (k, v) = l.split_once('=').expect("label");
                    (k.to_string(), v.trim_matches('"').to_string())
                });
                (name, labels.collect())
            }
            None => (series, BTreeMap::new()),
        };
        samples.insert((name.to_string(), labels), value.parse().ok()?);
    }
    Some(samples)
}

/// The value of `name` with exactly `labels` (0 when it is not published).
pub fn value(samples: &Samples, name: &str, labels: &[(&str, &str)]) -> f64 {
    let labels = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    samples.get(&(name.to_string(), labels)).copied().unwrap_or(0.0)
}

/// Scrape until `check` holds (the gauges are published every 5 s), then return the samples;
/// panics with the last ones after a minute.
pub async fn metrics_until(port: u16, what: &str, check: impl Fn(&Samples) -> bool) -> Samples {
    let end = std::time::Instant::now() + Duration::from_secs(60);
    let mut last = None;
    while std::time::Instant::now() < end {
        if let Some(samples) = scrape(port) {
            if check(&samples) {
                return samples;
            }
            last = Some(samples);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let shown: Vec<String> = last
        .iter()
        .flatten()
        .filter(|((name, _), _)| {
            name.starts_with("ksync_drift") || name.starts_with("ksync_reconciles") || name == "ksync_applications"
        })
        .map(|((name, labels), v)| format!("{name}{labels:?} {v}"))
        .collect();
    panic!("timed out after 60s waiting for {what}; last metrics:\n{}", shown.join("\n"));
}
