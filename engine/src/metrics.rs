//! Measurement: per-operator counters and end-to-end latency histograms.
//!
//! Hot paths count in plain integers owned by one operator instance and
//! *publish* them (a relaxed store into a cache-padded slot) when their task
//! flushes, so a progress reader never contends with the data path. Latency
//! is recorded into one HDR histogram per sink instance and merged into the
//! job's histogram when that sink ends.

use crossbeam_utils::CachePadded;
use hdrhistogram::Histogram;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

mod recovery;
pub use recovery::{RecoveryCause, RecoveryKind, RecoveryRecord};

/// Highest latency a histogram tracks exactly (larger values saturate): 10 min.
const MAX_TRACKABLE_NS: u64 = 600_000_000_000;

/// An HDR histogram of nanosecond latencies, 3 significant digits.
#[derive(Clone, Debug)]
pub struct LatencyHistogram(Histogram<u64>);

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistogram {
    /// An empty histogram covering 1 ns … 10 min at 3 significant digits.
    pub fn new() -> Self {
        LatencyHistogram(
            Histogram::new_with_bounds(1, MAX_TRACKABLE_NS, 3).expect("static bounds are valid"),
        )
    }

    /// Records one latency (values beyond the range saturate).
    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.0.saturating_record(ns.max(1));
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        // Same bounds on both sides, so `add` cannot fail.
        let _ = self.0.add(&other.0);
    }

    /// The samples recorded since `earlier`, an older copy of this
    /// cumulative histogram (an interval of a live reader).
    pub fn since(&self, earlier: &LatencyHistogram) -> LatencyHistogram {
        let mut d = self.clone();
        // `earlier` holds a subset of `self`'s samples; should it not (a
        // copy of another histogram), what cannot be taken is left.
        if d.0.subtract(&earlier.0).is_err() {
            return self.clone();
        }
        d
    }

    /// Forgets every sample.
    pub fn clear(&mut self) {
        self.0.reset();
    }

    /// Number of samples.
    pub fn len(&self) -> u64 {
        self.0.len()
    }

    /// Whether there are no samples.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value at quantile `q` (0.0 ..= 1.0), in ns; 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.0.is_empty() {
            0
        } else {
            self.0.value_at_quantile(q)
        }
    }

    /// Smallest sample in ns (0 when empty).
    pub fn min(&self) -> u64 {
        if self.0.is_empty() {
            0
        } else {
            self.0.min()
        }
    }

    /// Largest sample in ns (0 when empty).
    pub fn max(&self) -> u64 {
        self.0.max()
    }

    /// Mean in ns.
    pub fn mean(&self) -> f64 {
        self.0.mean()
    }

    /// The underlying HDR histogram.
    pub fn inner(&self) -> &Histogram<u64> {
        &self.0
    }
}

/// Counters of one operator instance, on their own cache line.
#[derive(Default, Debug)]
pub(crate) struct InstanceCounters {
    /// Records received (for a source: records produced).
    pub(crate) records: AtomicU64,
    /// Records emitted downstream.
    pub(crate) emitted: AtomicU64,
    /// Nanoseconds the task running it spent in polls that did work.
    pub(crate) busy_ns: AtomicU64,
    /// Nanoseconds the task running it could not pass its output on (a
    /// ring downstream full).
    pub(crate) backpressured_ns: AtomicU64,
    /// Its input watermark, event-time nanoseconds (0: none yet;
    /// `u64::MAX`: its input ended).
    pub(crate) watermark: AtomicU64,
    /// Checkpoint barriers its task's input aligned, the nanoseconds that
    /// took in all (first lane's barrier → last lane's), and the newest's.
    pub(crate) alignments: AtomicU64,
    pub(crate) alignment_ns: AtomicU64,
    pub(crate) alignment_last_ns: AtomicU64,
}

/// Everything the tasks of a job publish while it runs.
pub(crate) struct JobMetrics {
    /// `[node][instance]`.
    pub(crate) counters: Vec<Vec<CachePadded<InstanceCounters>>>,
    /// Sinks merge what they measured into it when they end, and every
    /// [`LATENCY_PUBLISH_NS`] while someone watches (`watchers`).
    latency: Mutex<LatencyHistogram>,
    /// Live [`crate::JobWatch`]es: while there are none, a sink keeps its
    /// histogram to itself until it ends (a merge walks every bucket).
    pub(crate) watchers: AtomicU64,
    pub(crate) dead_letters: AtomicU64,
    /// The supervisor's figures, published every [`STATUS_PUBLISH_NS`].
    status: Mutex<JobStatus>,
    /// The job's start: the engine clock's origin.
    pub(crate) origin: crate::sys::clock::Origin,
}

/// How often a sink merges its latency histogram into the job's (10 ms:
/// a live reader's interval is accurate to that).
pub(crate) const LATENCY_PUBLISH_NS: u64 = 10_000_000;

/// How often the supervisor publishes a [`JobStatus`].
pub(crate) const STATUS_PUBLISH_NS: u64 = 10_000_000;

/// What a running job has done beyond its operators' counts — checkpoints,
/// recoveries, standbys — as its supervisor last published it (every
/// 10 ms; see [`crate::JobHandle::status`]). Counts cover every attempt.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobStatus {
    /// Checkpoints triggered at the sources.
    pub checkpoints_started: u64,
    /// Checkpoints made durable.
    pub checkpoints_completed: u64,
    /// Checkpoints abandoned (timeout, declined, write error).
    pub checkpoints_failed: u64,
    /// Completed checkpoints that took longer than the interval.
    pub checkpoints_late: u64,
    /// The newest completed checkpoint's duration, trigger → durable
    /// manifest, microseconds.
    pub checkpoint_last_duration_us: Option<u64>,
    /// Restarts (attempts after the first).
    pub restarts: u32,
    /// Standbys that took over.
    pub takeovers: u64,
    /// The newest recovery whose first output is known: fault → first
    /// output of the recovered operator (takeover) or job (restart), µs.
    pub last_recovery_first_output_us: Option<u64>,
    /// Operator instances running with a standby.
    pub standby_groups: usize,
    /// Bytes the buffer queues hold now, over every group.
    pub standby_queue_bytes: u64,
    /// Inputs the buffer queues hold now, over every group: what the
    /// standbys would replay were every primary to fail now (their lag).
    pub standby_queue_entries: u64,
    /// Recovery points the primaries published so far, whole and deltas,
    /// over every group.
    pub standby_points_published: u64,
    /// Recovery points following standbys applied to their copies so far
    /// (`StandbyConfig::follow`), over every group.
    pub standby_points_followed: u64,
    /// Bytes the completed checkpoints wrote, payloads and key indexes.
    pub checkpoint_bytes: u64,
    /// Bytes the newest completed checkpoint wrote.
    pub checkpoint_last_bytes: Option<u64>,
    /// Recoveries so far by kind and cause — `((kind, cause), count)`,
    /// [`RecoveryKind::name`] and [`RecoveryCause::name`] — the one under
    /// way included, and whether no fault explains them (`unprovoked`).
    pub recoveries: Vec<RecoveryCount>,
    /// Each standby group (an operator instance with a standby), in the
    /// order of its operator and instance.
    pub standby: Vec<GroupStatus>,
    /// The newest completed checkpoints (up to [`RECENT`]), newest first.
    pub recent_checkpoints: Vec<RecentCheckpoint>,
    /// The job's recovery history, in the order of the faults, the one
    /// under way included (figures still being measured are `None`):
    /// every recovery of an injected fault (the newest [`INJECTED_KEPT`]),
    /// and the newest [`RECENT`] others — older ones are in
    /// [`recoveries`](Self::recoveries)' counts only.
    pub recent_recoveries: Vec<RecoveryRecord>,
    /// Once the job has ended: how long it ran, microseconds (what its
    /// report says; a watcher's clock runs on).
    pub ended_after_us: Option<u64>,
}

/// How many checkpoints, and recoveries of no injected fault, [`JobStatus`]
/// lists.
pub const RECENT: usize = 20;

/// How many recoveries of injected faults [`JobStatus`] lists at most.
pub const INJECTED_KEPT: usize = 200;

/// A completed checkpoint ([`JobStatus::recent_checkpoints`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecentCheckpoint {
    /// Its id.
    pub id: u64,
    /// Bytes written (payloads and key indexes).
    pub bytes: u64,
    /// Whether its files include a delta.
    pub delta: bool,
    /// Trigger → durable manifest, microseconds.
    pub duration_us: u64,
}

/// A job's operators and edges ([`crate::JobWatch::shape`]).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct JobShape {
    /// In the order they were added (a topological order).
    pub operators: Vec<OperatorShape>,
    /// Every edge between them.
    pub edges: Vec<EdgeShape>,
}

/// One operator of a [`JobShape`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct OperatorShape {
    /// Its name.
    pub name: String,
    /// Its instances.
    pub parallelism: usize,
    /// A source (no input).
    pub source: bool,
    /// A sink (no output).
    pub sink: bool,
    /// Built with `.standby()`: it runs with a standby when the job has a
    /// `StandbyConfig`.
    pub standby: bool,
}

/// One edge of a [`JobShape`]: operator indexes, and how records cross it
/// (`forward`, `rebalance`, `broadcast` or `hash`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct EdgeShape {
    /// The producing operator's index.
    pub from: usize,
    /// The consuming operator's index.
    pub to: usize,
    /// `forward`, `rebalance`, `broadcast` or `hash`.
    pub exchange: &'static str,
}

/// Recoveries of one kind and cause ([`JobStatus::recoveries`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryCount {
    /// [`RecoveryKind::name`].
    pub kind: &'static str,
    /// [`RecoveryCause::name`].
    pub cause: &'static str,
    /// No fault the job injected explains them (`RecoveryRecord::unprovoked`).
    pub unprovoked: bool,
    /// How many.
    pub count: u64,
}

/// One standby group as the supervisor last saw it ([`JobStatus::standby`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupStatus {
    /// The backed-up chain's head.
    pub operator: String,
    /// Every operator of the backed-up chain, in order (a source the chain
    /// replays first).
    pub chain: Vec<String>,
    /// Its instance.
    pub instance: usize,
    /// Inputs its buffer queues hold (a chain that replays its source
    /// holds none).
    pub queue_entries: u64,
    /// Bytes its buffer queues hold.
    pub queue_bytes: u64,
    /// Inputs past its newest recovery point: what a takeover now would
    /// replay (or still has to process), over its lanes.
    pub lag_records: u64,
    /// Time since its newest recovery point was published (or since the
    /// group started, before the first), microseconds.
    pub point_age_us: u64,
}

impl JobMetrics {
    pub(crate) fn new(parallelism: &[usize]) -> Self {
        JobMetrics {
            counters: parallelism
                .iter()
                .map(|&p| (0..p).map(|_| CachePadded::default()).collect())
                .collect(),
            latency: Mutex::new(LatencyHistogram::new()),
            watchers: AtomicU64::new(0),
            dead_letters: AtomicU64::new(0),
            status: Mutex::new(JobStatus::default()),
            origin: crate::sys::clock::Origin::now(),
        }
    }

    pub(crate) fn publish_status(&self, s: JobStatus) {
        *self.status.lock().unwrap_or_else(|p| p.into_inner()) = s;
    }

    pub(crate) fn status(&self) -> JobStatus {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(crate) fn merge_latency(&self, h: &LatencyHistogram) {
        let mut g = self.latency.lock().unwrap_or_else(|p| p.into_inner());
        g.merge(h);
    }

    pub(crate) fn latency(&self) -> LatencyHistogram {
        self.latency
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Per instance of `node`: (records, emitted), as [`OperatorStats`].
    pub(crate) fn node_instances(&self, node: usize) -> Vec<(u64, u64)> {
        self.counters[node]
            .iter()
            .map(|c| {
                (
                    c.records.load(Ordering::Relaxed),
                    c.emitted.load(Ordering::Relaxed),
                )
            })
            .collect()
    }

    /// Per instance of `node`: its task's time, its watermark and its
    /// alignments, as [`OperatorStats::time`].
    pub(crate) fn node_times(&self, node: usize) -> Vec<InstanceTime> {
        self.counters[node]
            .iter()
            .map(|c| {
                let wm = c.watermark.load(Ordering::Relaxed);
                InstanceTime {
                    busy_ns: c.busy_ns.load(Ordering::Relaxed),
                    backpressured_ns: c.backpressured_ns.load(Ordering::Relaxed),
                    watermark: (wm != 0).then_some(wm),
                    alignments: c.alignments.load(Ordering::Relaxed),
                    alignment_ns: c.alignment_ns.load(Ordering::Relaxed),
                    alignment_last_ns: c.alignment_last_ns.load(Ordering::Relaxed),
                }
            })
            .collect()
    }
}

/// Counts of one operator over the whole job (all instances).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorStats {
    /// The operator's name.
    pub name: String,
    /// Its parallelism.
    pub parallelism: usize,
    /// Records received, over every attempt and incarnation (a record
    /// replayed after a recovery counts again); for a source: its
    /// position, the records it produced, each once.
    pub records: u64,
    /// Records emitted downstream (counted as `records`).
    pub emitted: u64,
    /// Per instance: (`records`, `emitted`) of that instance alone.
    pub instances: Vec<(u64, u64)>,
    /// Per instance: where its task's time went, its watermark, its
    /// checkpoint alignments.
    pub time: Vec<InstanceTime>,
    /// Whether it is a source.
    pub source: bool,
    /// Whether it is a sink (it emits nothing).
    pub sink: bool,
}

/// Where the time of the task running an operator instance went, and the
/// instance's event time ([`OperatorStats::time`]). The times are its
/// task's — an operator chained with others shares them — over every
/// attempt; a standby's own work is not counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InstanceTime {
    /// Nanoseconds in polls that did work (Flink's busy time).
    pub busy_ns: u64,
    /// Nanoseconds its output was blocked by a full ring downstream
    /// (Flink's backpressured time).
    pub backpressured_ns: u64,
    /// Its input watermark, event-time nanoseconds: `None` before the
    /// first, `Some(u64::MAX)` once its input ended.
    pub watermark: Option<u64>,
    /// Checkpoint barriers its task's input aligned (every lane's barrier
    /// in, or its lane ended).
    pub alignments: u64,
    /// Nanoseconds those alignments took, first lane's barrier → last's.
    pub alignment_ns: u64,
    /// The newest alignment's nanoseconds.
    pub alignment_last_ns: u64,
}

/// A live view of a running job.
#[derive(Clone, Debug)]
pub struct Progress {
    /// Per operator, in the order they were added to the job.
    pub operators: Vec<OperatorStats>,
    /// Records sent to the dead-letter file so far.
    pub dead_letters: u64,
}

impl Progress {
    /// Stats of the operator called `name`.
    pub fn operator(&self, name: &str) -> Option<&OperatorStats> {
        self.operators.iter().find(|o| o.name == name)
    }

    /// The newest watermark any source instance published (one whose
    /// input ended left aside): what the other operators' watermarks lag
    /// behind.
    pub fn newest_source_watermark(&self) -> Option<u64> {
        self.operators
            .iter()
            .filter(|o| o.source)
            .flat_map(|o| o.time.iter().filter_map(|t| t.watermark))
            .filter(|&w| w != u64::MAX)
            .max()
    }
}

/// What a completed job reports.
#[derive(Clone, Debug)]
pub struct JobReport {
    /// Per-operator counts, in the order operators were added.
    pub operators: Vec<OperatorStats>,
    /// The savepoint the job stopped with
    /// ([`crate::JobHandle::stop_with_savepoint`]; `None`: it ran to its
    /// end).
    pub stopped_at: Option<std::path::PathBuf>,
    /// End-to-end latency (source release → sink) over all sinks.
    pub latency: LatencyHistogram,
    /// Records sent to the dead-letter file.
    pub dead_letters: u64,
    /// The dead-letter file, if any record was sent there.
    pub dead_letter_path: Option<std::path::PathBuf>,
    /// Wall time from start to the last task's end.
    pub elapsed: std::time::Duration,
    /// Worker threads (cores) the job ran on.
    pub workers: usize,
    /// Tasks (chains of operators) the job was split into.
    pub tasks: usize,
    /// One entry per failure recovered from, in the order they happened.
    pub recovery: Vec<RecoveryRecord>,
    /// What the checkpoints cost.
    pub checkpoints: CheckpointStats,
    /// Records non-transactional sinks wrote again after restarts (what
    /// they had written after the restored checkpoint before the failure).
    pub duplicates_emitted: u64,
    /// Restarts (attempts after the first).
    pub restarts: u32,
    /// The checkpoint or savepoint the job started from
    /// ([`crate::RuntimeConfig::restore_from`]): its kind, id, directory
    /// and time.
    pub restored_from: Option<RestorePoint>,
    /// Newer checkpoints in that directory passed over because they did not
    /// verify, with the reason.
    pub restore_skipped: Vec<String>,
    /// What the standbys did and cost (`None`: no operator had one).
    pub standby: Option<StandbyStats>,
}

/// Whether a restore point is a retained checkpoint or a savepoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestoreKind {
    /// A periodic checkpoint (`DIR/manifest-<id>.json`).
    Checkpoint,
    /// A savepoint (`DIR/sp-<id>/`).
    Savepoint,
}

/// The checkpoint or savepoint a job started from, as the job's report
/// names it ([`JobReport::restored_from`]; `Display`:
/// `savepoint 3 (DIR/sp-3, taken 2026-12-07T23:59:01.234Z)`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestorePoint {
    /// Checkpoint or savepoint.
    pub kind: RestoreKind,
    /// Its id.
    pub id: u64,
    /// When it was written, milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// Its manifest's directory: the savepoint's own, or the checkpoint
    /// directory that holds `manifest-<id>.json`.
    pub dir: std::path::PathBuf,
}

impl std::fmt::Display for RestorePoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (kind, at) = match self.kind {
            RestoreKind::Checkpoint => (
                "checkpoint",
                self.dir.join(format!("manifest-{}.json", self.id)),
            ),
            RestoreKind::Savepoint => ("savepoint", self.dir.clone()),
        };
        write!(
            f,
            "{kind} {} ({}, taken {})",
            self.id,
            at.display(),
            crate::sys::utc::rfc3339_ms(self.created_at_ms)
        )
    }
}

/// Figures of a run's standby groups (all attempts).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StandbyStats {
    /// Operator instances that ran with a standby (one group per instance
    /// of each backed-up chain).
    pub groups: usize,
    /// The backed-up chains: the operators each standby runs, by name,
    /// head first (`["flatmap", "filter"]`), in graph order.
    pub chains: Vec<Vec<String>>,
    /// Standbys that took over (one per entry in `recovery`).
    pub takeovers: u64,
    /// Standbys that failed themselves (and were replaced).
    pub standby_failures: u64,
    /// Largest number of bytes one group's buffer queues held at once.
    pub queue_bytes_peak: u64,
    /// Warm snapshots published to standbys.
    pub snapshots_published: u64,
    /// Of those, the deltas over the point the standby's copy was at
    /// ([`crate::state::delta`]).
    pub delta_snapshots_published: u64,
    /// Recovery points warm standbys brought their copies to: by a delta,
    /// or rebuilt from a whole point.
    pub points_followed: u64,
    /// Of those, rebuilt from a whole point.
    pub points_followed_whole: u64,
    /// Times a hot standby fell behind its primary and let go of its state,
    /// running warm until it started again: it computes only while its
    /// worker's own tasks rest, so on a saturated worker it is warm.
    pub hot_fell_behind: u64,
    /// Groups whose first standby ran on a worker the job's own tasks left
    /// idle (hot standbys go there first).
    pub standbys_on_idle_workers: usize,
    /// Process isolation: every incarnation's child process, with how it
    /// ended and what it cost, in the order they ended.
    pub children: Vec<crate::ChildRecord>,
}

/// Checkpoint figures of a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CheckpointStats {
    /// Checkpoints (and savepoints) made durable.
    pub completed: u64,
    /// Checkpoints abandoned (timeout, declined, write error).
    pub failed: u64,
    /// Checkpoints started (triggered at the sources). Every one of them
    /// is `completed`, `failed` or `pending`: none goes missing.
    pub started: u64,
    /// Checkpoints neither complete nor failed when they stopped mattering:
    /// in flight when a failure stopped the attempt, or when the job ended.
    pub pending: u64,
    /// Completed checkpoints that took longer than the interval from their
    /// trigger to their durable manifest, so the next one started late.
    pub late: u64,
    /// Each completed checkpoint's duration, trigger → durable manifest,
    /// in microseconds, in the order they completed.
    pub durations_us: Vec<u64>,
    /// Bytes written: payloads and their key indexes (a `key_by`
    /// operator's archives carry one, ~4 bytes a key: see
    /// `crate::state`'s lazy restore).
    pub bytes: u64,
    /// Bytes written by the first completed checkpoint.
    pub first_bytes: u64,
    /// Bytes written by every completed checkpoint but the first (with
    /// incremental checkpoints, mostly deltas).
    pub bytes_after_first: u64,
    /// Payload bytes the newest completed checkpoint's whole archives
    /// hold: the last full materialization of every state it restores.
    pub state_bytes_final: u64,
    /// Payload bytes a restore of the newest completed checkpoint reads
    /// (whole archives and the deltas after them).
    pub restore_bytes_final: u64,
    /// Completed checkpoints whose files include a delta.
    pub incremental: u64,
    /// Each completed checkpoint's bytes written (payloads and key
    /// indexes), and whether its files include a delta, in the order they
    /// completed.
    pub sizes: Vec<CheckpointSize>,
    /// Payload bytes over the time the I/O thread spent writing them.
    pub write_mbps: f64,
    /// The newest complete checkpoint.
    pub last_completed: Option<u64>,
    /// Why the last failed one failed.
    pub last_failure: Option<String>,
    /// Where they are (`None` when they were in a temporary directory,
    /// removed at the end).
    pub dir: Option<std::path::PathBuf>,
}

/// What one completed checkpoint wrote ([`CheckpointStats::sizes`]); a
/// benchmark's JSON report gives it as is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CheckpointSize {
    /// The checkpoint.
    pub id: u64,
    /// Bytes written: payloads and key indexes.
    pub bytes: u64,
    /// Whether its files include a delta (else every state is whole).
    pub delta: bool,
}

impl CheckpointStats {
    /// The `q`-quantile (0.0–1.0) of the completed checkpoints' durations
    /// in microseconds (nearest rank; `None` without any).
    pub fn duration_quantile_us(&self, q: f64) -> Option<u64> {
        let mut d = self.durations_us.clone();
        if d.is_empty() {
            return None;
        }
        d.sort_unstable();
        let rank = (q.clamp(0.0, 1.0) * d.len() as f64).ceil() as usize;
        Some(d[rank.saturating_sub(1).min(d.len() - 1)])
    }
}

impl JobReport {
    /// Stats of the operator called `name`.
    pub fn operator(&self, name: &str) -> Option<&OperatorStats> {
        self.operators.iter().find(|o| o.name == name)
    }

    /// Input records the sources produced (each once, replays excluded).
    pub fn source_records(&self) -> u64 {
        self.operators
            .iter()
            .filter(|o| o.source)
            .map(|o| o.records)
            .sum()
    }

    /// Recoveries of faults the job's fault injection made.
    pub fn injected_recoveries(&self) -> usize {
        self.recovery
            .iter()
            .filter(|r| r.reason == RecoveryCause::Injected)
            .count()
    }

    /// Recoveries no injected fault and no failure explains (each names
    /// its evidence).
    pub fn unprovoked_recoveries(&self) -> usize {
        self.recovery.iter().filter(|r| r.unprovoked).count()
    }

    /// Throughput: the sources' records over the job's elapsed time
    /// (records per second; 0 for a job that took no measurable time).
    pub fn throughput(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.source_records() as f64 / secs
        } else {
            0.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_duration_quantiles_are_nearest_rank() {
        let s = CheckpointStats {
            durations_us: vec![50, 10, 40, 20, 30],
            ..Default::default()
        };
        assert_eq!(s.duration_quantile_us(0.5), Some(30));
        assert_eq!(s.duration_quantile_us(0.99), Some(50));
        assert_eq!(s.duration_quantile_us(0.0), Some(10));
        assert_eq!(CheckpointStats::default().duration_quantile_us(0.5), None);
    }

    #[test]
    fn merged_histogram_holds_samples_of_both() {
        let mut a = LatencyHistogram::new();
        let mut b = LatencyHistogram::new();
        for v in 1..=100 {
            a.record(v * 1000);
        }
        b.record(5_000_000);
        a.merge(&b);
        assert_eq!(a.len(), 101);
        assert!(a.max() >= 5_000_000);
        assert!(a.quantile(0.5) >= 49_000 && a.quantile(0.5) <= 52_000);
    }
}
