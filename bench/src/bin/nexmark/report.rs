//! The JSON report `--report FILE` writes.

use serde::Serialize;
use tandem_bench::report::LatencyNs;

#[derive(Serialize)]
pub(crate) struct Report {
    pub(crate) query: &'static str,
    pub(crate) events: u64,
    pub(crate) events_per_sec: f64,
    pub(crate) events_per_sec_per_core: f64,
    /// CPU time of the whole process (user + system) while the job ran.
    pub(crate) cpu_seconds: f64,
    /// Events per CPU-second: the per-core figure of a run whose cores
    /// were not all busy, or were shared.
    pub(crate) events_per_cpu_second: f64,
    /// Event time the events span, seconds (`events / rate`).
    pub(crate) event_time_s: f64,
    /// Per window operator, the results it fired (one per key and window;
    /// `max` of q5 one per window), every attempt counted.
    pub(crate) windows_fired: std::collections::BTreeMap<String, u64>,
    pub(crate) cores: usize,
    pub(crate) latency_ns: LatencyNs,
    pub(crate) records_out: u64,
    pub(crate) late_records: u64,
    pub(crate) elapsed_ms: f64,
    pub(crate) strategy: String,
    pub(crate) standby: Option<String>,
    pub(crate) faults_fired: u64,
    pub(crate) recoveries: usize,
    /// Recoveries of injected faults.
    pub(crate) injected_recoveries: usize,
    /// Recoveries no fault and no failure explains (stall verdicts).
    pub(crate) unprovoked_recoveries: usize,
    /// Every recovery, in order, with its cause.
    /// Checkpoints completed, and those with a delta among their files.
    pub(crate) checkpoints_completed: u64,
    pub(crate) checkpoints_incremental: u64,
    /// Payload bytes the first completed checkpoint wrote, and all the
    /// others together.
    pub(crate) checkpoint_bytes_first: u64,
    pub(crate) checkpoint_bytes_after_first: u64,
    /// The newest checkpoint's last full materialization of the state,
    /// and what a restore of it reads.
    pub(crate) state_bytes_final: u64,
    pub(crate) restore_bytes_final: u64,
    /// Each completed checkpoint's bytes, whole or a delta.
    pub(crate) checkpoint_sizes: Vec<tandem::metrics::CheckpointSize>,
    pub(crate) recovery: Vec<RecoveryJson>,
}

/// One recovery in the JSON report.
#[derive(Serialize)]
pub(crate) struct RecoveryJson {
    pub(crate) kind: &'static str,
    pub(crate) operator: String,
    pub(crate) instance: usize,
    pub(crate) tuple_id: Option<String>,
    /// `injected`, `panic`, `process died`, `stuck-kill`, `stall`, `other`.
    pub(crate) reason: &'static str,
    pub(crate) unprovoked: bool,
    pub(crate) cause: String,
    pub(crate) evidence: Option<String>,
    pub(crate) detect_us: u64,
    pub(crate) first_output_us: Option<u64>,
}
