//! Shared bits of benchmark output: HDR summaries and JSON reports.

use serde::Serialize;
use std::path::Path;
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
    /// Mean (ns, rounded).
    pub mean: u64,
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
            mean: h.mean().round() as u64,
            samples: h.len(),
        }
    }
}

/// The median of `xs` (at least one value): the middle one, or the mean
/// of the middle two.
pub fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let mid = xs.len() / 2;
    if xs.len() % 2 == 1 {
        xs[mid]
    } else {
        (xs[mid - 1] + xs[mid]) / 2.0
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

/// Formats a byte count for people (B, KB, MB or GB; powers of 1000).
pub fn fmt_bytes(b: u64) -> String {
    match b {
        0..=9_999 => format!("{b} B"),
        10_000..=9_999_999 => format!("{:.1} KB", b as f64 / 1e3),
        10_000_000..=9_999_999_999 => format!("{:.1} MB", b as f64 / 1e6),
        _ => format!("{:.2} GB", b as f64 / 1e9),
    }
}

/// The completed checkpoints' sizes in a line: `whole` or `Δ` each, the
/// first `shown` of them, then how many more and the largest delta.
pub fn checkpoint_sizes_line(s: &[tandem::metrics::CheckpointSize], shown: usize) -> String {
    let mut parts: Vec<String> = s
        .iter()
        .take(shown)
        .map(|c| {
            format!(
                "{} {}",
                fmt_bytes(c.bytes),
                if c.delta { "Δ" } else { "whole" }
            )
        })
        .collect();
    if s.len() > shown {
        let rest = &s[shown..];
        let deltas = rest.iter().filter(|c| c.delta).count();
        let max = rest.iter().filter(|c| c.delta).map(|c| c.bytes).max();
        parts.push(format!(
            "… {} more ({deltas} Δ{})",
            rest.len(),
            max.map_or(String::new(), |m| format!(", the largest {}", fmt_bytes(m)))
        ));
    }
    parts.join(", ")
}

/// The line saying which checkpoint or savepoint a job started from
/// (`started from savepoint 3 (…, taken …)`), and the newer ones it
/// passed over; `None` for a job that started fresh.
pub fn restored_line(report: &tandem::JobReport) -> Option<String> {
    let from = report.restored_from.as_ref()?;
    Some(format!(
        "started from {from}{}",
        if report.restore_skipped.is_empty() {
            String::new()
        } else {
            format!(
                " (newer ones skipped: {})",
                report.restore_skipped.join("; ")
            )
        }
    ))
}

/// Writes `value` as pretty JSON to `path` (flag `flag` names it in
/// errors) by the output discipline ([`crate::paths`]): checked, written
/// into a file beside it (removed again if the run fails or is interrupted
/// meanwhile), flushed to disk, then renamed over `path` — a reader sees
/// the old report or the whole new one, and a failed write leaves `path`
/// as it was. Through a symlink, the file it names is replaced, not the
/// link; a device or FIFO is refused, never replaced.
pub fn write_json<T: Serialize>(flag: &str, path: &Path, value: &T) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value)? + "\n";
    crate::paths::write_file(flag, path, text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_replaces_the_old_one_whole_and_leaves_nothing_beside_it() {
        let dir = std::env::temp_dir().join(format!("tandem-report-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("r.json");
        std::fs::write(&p, "old").unwrap();
        write_json("--report", &p, &[1, 2]).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "[\n  1,\n  2\n]\n");
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["r.json"]);
        // Into a missing directory: an error naming the report, nothing made.
        let e = write_json("--report", &dir.join("missing/r.json"), &1).unwrap_err();
        assert!(e.to_string().contains("--report"), "{e}");
        assert!(e.to_string().contains("missing/r.json"), "{e}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
