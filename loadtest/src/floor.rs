//! The floor a run is measured against: the server's sustained Server-Side Apply rate for
//! objects like the fleet's, measured in the same run before the fleet (`run/floor.rs`), and
//! each converging phase as a ratio to it. Pure: the ramp's decision and the ratio.
//!
//! The ratio of a phase is
//!
//! ```text
//! ratio = time to converge ÷ (writes the phase needs ÷ floor rate)
//! ```
//!
//! where the writes the phase needs are the objects Git declares for its Applications (one
//! apply each: `--objects` ConfigMap, or ConfigMap, Service and Deployment), and the floor rate
//! is the best rate the calibration reached. 1 would be a controller that did nothing but those
//! applies, back to back, at the server's best concurrency; everything else it writes (the
//! Applications' status, Revisions, Events) and the cluster's own controllers' writes
//! (ReplicaSets, Pods, EndpointSlices) are part of what makes it larger.

use serde::Serialize;

/// Concurrent writers tried, in order, until the rate stops improving ([`keep_ramping`]).
pub const RAMP: &[usize] = &[1, 2, 4, 8, 16, 32, 64, 128];

/// A step must beat the best rate before it by this factor for the ramp to go on.
pub const GAIN: f64 = 1.10;

/// One step of the ramp: `concurrency` writers applying new objects for a fixed time.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Step {
    /// Concurrent writers.
    pub concurrency: usize,
    /// Applies that succeeded.
    pub writes: usize,
    /// Applies that failed (not counted in the rate).
    pub errors: usize,
    /// From the first apply sent to the last answered, seconds.
    pub seconds: f64,
    /// `writes` over `seconds`.
    pub per_s: f64,
}

/// The calibration's result.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Floor {
    /// The scratch namespace it wrote in (removed after).
    pub namespace: String,
    /// Objects per apply round: the kinds of `--objects`.
    pub kinds: Vec<String>,
    /// Every step, in order.
    pub steps: Vec<Step>,
    /// The best step's rate: the floor rate, applies per second.
    pub per_s: f64,
    /// The best step's concurrency.
    pub concurrency: usize,
    /// How long removing the scratch namespace took, seconds (`None`: still there when the fleet
    /// started).
    pub removed_s: Option<f64>,
}

/// The best step: the highest rate.
pub fn best(steps: &[Step]) -> Option<&Step> {
    steps.iter().max_by(|a, b| a.per_s.total_cmp(&b.per_s))
}

/// Steps in a row that may fail to improve before the ramp stops: one step on a shared machine
/// can be slow for reasons of its own.
pub const PATIENCE: usize = 2;

/// Whether to try the next concurrency: a step improves when it beats every step before it by
/// [`GAIN`] (the first always does); the ramp goes on until [`PATIENCE`] steps in a row did not.
pub fn keep_ramping(steps: &[Step]) -> bool {
    let mut improved = (0..steps.len()).filter(|&i| best(&steps[..i]).is_none_or(|b| steps[i].per_s >= b.per_s * GAIN));
    match improved.next_back() {
        None => true,
        Some(i) => steps.len() - 1 - i < PATIENCE,
    }
}

/// A converging phase against the floor.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Ratio {
    /// Applies the phase needs: the objects Git declares for its Applications.
    pub writes_needed: usize,
    /// `writes_needed` ÷ the floor rate: the fastest the server could take them, seconds.
    pub floor_s: f64,
    /// The phase's time to converge, seconds.
    pub took_s: f64,
    /// `took_s` ÷ `floor_s`.
    pub ratio: f64,
}

/// The ratio of a phase that took `took_s` and needed `writes_needed` applies, at `per_s`;
/// `None` without a rate or writes.
pub fn ratio(took_s: f64, writes_needed: usize, per_s: f64) -> Option<Ratio> {
    if per_s <= 0.0 || writes_needed == 0 {
        return None;
    }
    #[allow(clippy::cast_precision_loss)]
    let floor_s = writes_needed as f64 / per_s;
    Some(Ratio { writes_needed, floor_s, took_s, ratio: took_s / floor_s })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(concurrency: usize, per_s: f64) -> Step {
        Step { concurrency, per_s, ..Default::default() }
    }

    #[test]
    fn the_ramp_stops_when_the_rate_stops_improving() {
        assert!(keep_ramping(&[]));
        assert!(keep_ramping(&[step(1, 100.0)]));
        assert!(keep_ramping(&[step(1, 100.0), step(2, 180.0)]));
        // One step that is not better (5 % is not enough) is given another chance.
        assert!(keep_ramping(&[step(1, 100.0), step(2, 180.0), step(4, 189.0)]));
        assert!(keep_ramping(&[step(1, 100.0), step(2, 80.0), step(4, 300.0)]));
        // Two in a row, even when the second beats the one before it.
        assert!(!keep_ramping(&[step(1, 100.0), step(2, 300.0), step(4, 150.0), step(8, 290.0)]));
        assert!(!keep_ramping(&[step(1, 100.0), step(2, 180.0), step(4, 189.0), step(8, 170.0)]));
        assert_eq!(best(&[step(1, 100.0), step(2, 300.0), step(4, 150.0)]).unwrap().concurrency, 2);
    }

    #[test]
    fn the_ratio_is_time_over_writes_at_the_floor_rate() {
        // 3,000 applies at 500 per second: 6 s at best; 30 s is 5 times that.
        let r = ratio(30.0, 3000, 500.0).unwrap();
        assert_eq!((r.floor_s, r.ratio), (6.0, 5.0));
        assert!(ratio(30.0, 3000, 0.0).is_none());
        assert!(ratio(30.0, 0, 500.0).is_none());
    }
}
