//! The state-size axis: recovery against the size of the keyed state,
//! from the `restore` runs.

use super::median;
use crate::plan;
use serde::Serialize;

/// Recovery against the size of the keyed state (`restore` runs).
#[derive(Serialize)]
pub struct StateSizes {
    pub rows: Vec<StateRow>,
}

#[derive(Serialize)]
pub struct StateRow {
    pub state_mb: u64,
    /// `restore` runs (each figure their median).
    pub runs: usize,
    pub keys: u64,
    pub config: String,
    /// Fault → first output (median, and the runs' range).
    pub first_output_ms: f64,
    pub first_output_range_ms: [f64; 2],
    /// Fault → the sink back where it was (median of the runs that
    /// measured it).
    pub caught_up_ms: Option<f64>,
    /// The restore (restart-all: detection → every worker restored; a
    /// takeover: the standby's restore of the point, or of nothing).
    pub restore_ms: f64,
    /// Records replayed after the fault (median).
    pub replayed: u64,
    /// What a restart-all's restore read, MB.
    pub restored_mb: Option<f64>,
    /// The whole `restore` report.
    pub report: crate::runs::RestoreReport,
}

pub fn state_sizes(done: &[(plan::StateSpec, crate::runs::RestoreReport)]) -> StateSizes {
    let rows = done
        .iter()
        .map(|(s, r)| {
            let firsts: Vec<f64> = r.per_run.iter().map(|x| x.first_output_ms).collect();
            let lo = firsts.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = firsts.iter().copied().fold(0.0, f64::max);
            let replayed =
                median(r.per_run.iter().map(|x| x.replayed as f64).collect()).unwrap_or(0.0) as u64;
            StateRow {
                state_mb: s.mb,
                runs: r.runs,
                keys: r.keys,
                config: s.config.key.clone(),
                first_output_ms: r.first_output_ms,
                first_output_range_ms: [lo, hi],
                caught_up_ms: r.caught_up_ms,
                restore_ms: r.restore_ms,
                replayed,
                restored_mb: r.state_bytes.map(|b| b as f64 / 1e6),
                report: r.clone(),
            }
        })
        .collect();
    StateSizes { rows }
}
