//! Shared bits of benchmark output: HDR summaries and JSON reports.

use serde::Serialize;
use tandem::LatencyHistogram;

/// Latency percentiles in nanoseconds, as written to JSON reports.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct LatencyNs {
    /// Smallest sample.
    pub min: u64,
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Largest sample.
    pub max: u64,
    /// Number of samples.
    pub samples: u64,
}

impl From<&LatencyHistogram> for LatencyNs {
    fn from(h: &LatencyHistogram) -> Self {
        LatencyNs {
            min: h.min(),
            p50: h.quantile(0.50),
            p99: h.quantile(0.99),
            p999: h.quantile(0.999),
            max: h.max(),
            samples: h.len(),
        }
    }
}

/// Formats nanoseconds for people (ns, µs, ms or s).
pub fn fmt_ns(ns: u64) -> String {
    match ns {
        0..=9_999 => format!("{ns} ns"),
        10_000..=9_999_999 => format!("{:.1} µs", ns as f64 / 1e3),
        10_000_000..=9_999_999_999 => format!("{:.1} ms", ns as f64 / 1e6),
        _ => format!("{:.2} s", ns as f64 / 1e9),
    }
}

/// Writes `value` as pretty JSON to `path`.
pub fn write_json<T: Serialize>(path: &std::path::Path, value: &T) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text + "\n")
        .map_err(|e| anyhow::anyhow!("writing report {}: {e}", path.display()))
}
