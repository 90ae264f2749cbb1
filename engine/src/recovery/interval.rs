//! Adaptive checkpoint interval.
//!
//! Seed `003_…` §3.1 sketches an interval that grows with √(state size) and
//! with `1 / (1 − failure_rate)²`. Its shape is right in one respect — the
//! cost of a checkpoint enters under a square root — but wrong in the other:
//! it checkpoints *less* often as failures become *more* frequent, which
//! lengthens the replay after each failure. Tandem uses the first-order
//! optimum of Young (1974) and Daly (2006) instead, which has the same
//! square-root dependence on cost and the right one on failures:
//!
//! ```text
//! interval = √(2 · C · MTBF),   clamped to [min, max]
//!   C    = checkpoint cost = state_bytes / write_rate   (seconds of work per checkpoint)
//!   MTBF = observed_time / failures                      (mean time between failures)
//! ```
//!
//! With no failure observed yet, MTBF is unbounded and the interval is
//! `max`; with no state (C = 0) it is `min`.

use std::time::Duration;

/// Inputs of the adaptive interval, all observed by the caller.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IntervalInputs {
    /// Bytes a checkpoint writes.
    pub state_bytes: u64,
    /// Measured write rate of checkpoints, bytes per second.
    pub write_bytes_per_sec: f64,
    /// Failures observed in `observed`.
    pub failures: u32,
    /// How long the job has been observed.
    pub observed: Duration,
}

/// The Young–Daly interval for `inputs`, clamped to `[min, max]`.
pub fn adaptive_interval(inputs: &IntervalInputs, min: Duration, max: Duration) -> Duration {
    let (min, max) = if min <= max { (min, max) } else { (max, min) };
    if inputs.failures == 0 {
        return max;
    }
    if inputs.state_bytes == 0 || inputs.write_bytes_per_sec.is_nan() {
        return min;
    }
    let cost = inputs.state_bytes as f64 / inputs.write_bytes_per_sec.max(1.0);
    let mtbf = inputs.observed.as_secs_f64() / inputs.failures as f64;
    let t = (2.0 * cost * mtbf).sqrt();
    Duration::from_secs_f64(t.clamp(min.as_secs_f64(), max.as_secs_f64()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_millis(100);
    const MAX: Duration = Duration::from_secs(60);

    fn inputs(state_mb: u64, failures: u32, observed_s: u64) -> IntervalInputs {
        IntervalInputs {
            state_bytes: state_mb << 20,
            write_bytes_per_sec: (1u64 << 30) as f64, // 1 GiB/s
            failures,
            observed: Duration::from_secs(observed_s),
        }
    }

    #[test]
    fn young_daly_value_for_a_known_case() {
        // C = 512 MiB / 1 GiB/s = 0.5 s; MTBF = 3600 s / 4 = 900 s;
        // √(2 · 0.5 · 900) = 30 s.
        let t = adaptive_interval(&inputs(512, 4, 3600), MIN, MAX);
        assert!((t.as_secs_f64() - 30.0).abs() < 1e-9, "{t:?}");
    }

    #[test]
    fn more_frequent_failures_shorten_the_interval() {
        let rare = adaptive_interval(&inputs(256, 1, 3600), MIN, MAX);
        let often = adaptive_interval(&inputs(256, 16, 3600), MIN, MAX);
        assert!(often < rare);
        // Quadrupling the failure rate halves the interval.
        let a = adaptive_interval(&inputs(64, 2, 3600), MIN, MAX).as_secs_f64();
        let b = adaptive_interval(&inputs(64, 8, 3600), MIN, MAX).as_secs_f64();
        assert!((a / b - 2.0).abs() < 1e-9);
    }

    #[test]
    fn larger_state_lengthens_the_interval() {
        let small = adaptive_interval(&inputs(16, 4, 3600), MIN, MAX);
        let large = adaptive_interval(&inputs(1024, 4, 3600), MIN, MAX);
        assert!(large > small);
    }

    #[test]
    fn no_failures_means_max_and_no_state_means_min() {
        assert_eq!(adaptive_interval(&inputs(512, 0, 3600), MIN, MAX), MAX);
        assert_eq!(adaptive_interval(&inputs(0, 3, 3600), MIN, MAX), MIN);
    }

    #[test]
    fn results_stay_within_bounds() {
        assert_eq!(
            adaptive_interval(&inputs(1 << 20, 1, 1 << 30), MIN, MAX),
            MAX
        );
        assert_eq!(adaptive_interval(&inputs(1, 1000, 1), MIN, MAX), MIN);
        // Swapped bounds are tolerated.
        assert_eq!(adaptive_interval(&inputs(1, 1000, 1), MAX, MIN), MIN);
    }
}
