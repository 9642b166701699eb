//! Latency summaries: nearest-rank percentiles over measured durations.

use std::time::Duration;

use serde::Serialize;

/// Percentiles of a set of durations, in seconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Measurements.
    pub count: usize,
    /// Smallest.
    pub min: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
    /// Arithmetic mean.
    pub mean: f64,
}

/// The nearest-rank `p`-th percentile (`0 < p <= 100`) of sorted `values`: the smallest value
/// with at least `p`% of the values at or below it. `None` for no values.
pub fn percentile(sorted: &[Duration], p: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    // Nearest rank: ceil(p/100 · n), 1-based. The float is at most n, so the cast is exact.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    Some(sorted[rank.min(sorted.len()) - 1])
}

impl Summary {
    /// The summary of `values` (any order); all zero for none.
    pub fn of(values: &[Duration]) -> Summary {
        let mut sorted = values.to_vec();
        sorted.sort();
        let secs = |p: f64| percentile(&sorted, p).map_or(0.0, |d| d.as_secs_f64());
        let total: Duration = sorted.iter().sum();
        #[allow(clippy::cast_precision_loss)] // counts far below 2^52
        let mean = if sorted.is_empty() { 0.0 } else { total.as_secs_f64() / sorted.len() as f64 };
        Summary {
            count: sorted.len(),
            min: sorted.first().map_or(0.0, Duration::as_secs_f64),
            p50: secs(50.0),
            p90: secs(90.0),
            p99: secs(99.0),
            max: sorted.last().map_or(0.0, Duration::as_secs_f64),
            mean,
        }
    }

    /// `p50 / p90 / p99 / max` in milliseconds, for a table cell.
    pub fn cell_ms(&self) -> String {
        if self.count == 0 {
            return "—".into();
        }
        format!("{:.0} / {:.0} / {:.0} / {:.0} ms", self.p50 * 1e3, self.p90 * 1e3, self.p99 * 1e3, self.max * 1e3)
    }

    /// `p50 / p90 / p99 / max` in seconds, for a table cell.
    pub fn cell_s(&self) -> String {
        if self.count == 0 {
            return "—".into();
        }
        format!("{:.1} / {:.1} / {:.1} / {:.1} s", self.p50, self.p90, self.p99, self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|m| Duration::from_millis(*m)).collect()
    }

    #[test]
    fn nearest_rank_percentiles() {
        let values = ms(&(1..=100).collect::<Vec<_>>());
        assert_eq!(percentile(&values, 50.0), Some(Duration::from_millis(50)));
        assert_eq!(percentile(&values, 99.0), Some(Duration::from_millis(99)));
        assert_eq!(percentile(&values, 100.0), Some(Duration::from_millis(100)));
        // Few values: p99 is the largest, p50 the lower middle.
        let few = ms(&[10, 20, 30, 40]);
        assert_eq!(percentile(&few, 99.0), Some(Duration::from_millis(40)));
        assert_eq!(percentile(&few, 50.0), Some(Duration::from_millis(20)));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn summary_sorts_and_handles_empty() {
        let s = Summary::of(&ms(&[300, 100, 200]));
        assert_eq!((s.count, s.min, s.p50, s.max), (3, 0.1, 0.2, 0.3));
        assert!((s.mean - 0.2).abs() < 1e-9);
        assert_eq!(s.cell_ms(), "200 / 300 / 300 / 300 ms");
        assert_eq!(Summary::of(&[]), Summary::default());
        assert_eq!(Summary::default().cell_s(), "—");
    }
}
