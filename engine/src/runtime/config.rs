//! How a job is run: the runtime's configuration (cores, pinning, rings,
//! checkpoints, restarts, standbys, probes, panic output), given to
//! [`crate::Job::run`] and [`crate::Job::start`].

use crate::recovery::restart::{Failover, RestartStrategy};
use crate::runtime::placement::Chaining;
use crate::runtime::{panic, probe};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Whether barriers are aligned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckpointMode {
    /// Operators with several input channels wait for the barrier on all of
    /// them before snapshotting (a channel that delivered it is not read
    /// meanwhile): every record is reflected exactly once in the state.
    ExactlyOnce,
    /// No waiting: records that overtake the barrier on one channel are in
    /// the snapshot *and* replayed after a restore (lower latency, possible
    /// duplicates).
    AtLeastOnce,
}

/// Periodic checkpoints (Flink's knobs, same names).
#[derive(Clone, Debug)]
pub struct CheckpointConfig {
    /// Time between the starts of two checkpoints.
    pub interval: Duration,
    /// Barrier alignment.
    pub mode: CheckpointMode,
    /// A checkpoint not acknowledged by every operator within this time is
    /// abandoned (and counts as failed).
    pub timeout: Duration,
    /// Consecutive failed checkpoints tolerated; one more fails the job.
    /// A checkpoint declined because a standby took over during it does
    /// not count: it is the mark of a recovered failure, not a failing
    /// checkpoint.
    pub tolerable_failures: u32,
    /// Least time between the end of one checkpoint and the start of the
    /// next.
    pub min_pause: Duration,
    /// Where checkpoints go (`None`: `<run dir>/checkpoints`, or a fresh
    /// temporary directory removed when the job ends, whether it succeeded or
    /// not).
    pub dir: Option<PathBuf>,
    /// Checkpoints kept (savepoints are never removed).
    pub retain: usize,
    /// Adapt the interval to the failure rate and the checkpoint cost
    /// within `[min, max]` ([`crate::recovery::interval`]).
    pub adaptive: Option<(Duration, Duration)>,
    /// Copies every checkpoint off the host before it is published and
    /// its output committed ([`crate::checkpoint::replicate`]).
    pub replicate: Option<Replicate>,
    /// Incremental checkpoints: a keyed state writes what changed since
    /// the previous completed checkpoint, whole again once the chain
    /// reaches these bounds ([`crate::state::delta`]); `None`: every
    /// checkpoint writes every state whole. On by default.
    pub incremental: Option<crate::state::delta::Incremental>,
}

/// A [`Replicator`](crate::checkpoint::Replicator) in a
/// [`CheckpointConfig`] (`Debug` by name only).
#[derive(Clone)]
pub struct Replicate(pub std::sync::Arc<dyn crate::checkpoint::Replicator>);

impl std::fmt::Debug for Replicate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Replicate(..)")
    }
}

impl CheckpointConfig {
    /// Exactly-once checkpoints every `interval`, with the other knobs at
    /// their defaults: timeout 60 s, 3 tolerable failures, no minimum
    /// pause, the last 3 kept.
    pub fn every(interval: Duration) -> Self {
        CheckpointConfig {
            interval,
            mode: CheckpointMode::ExactlyOnce,
            timeout: Duration::from_secs(60),
            tolerable_failures: 3,
            min_pause: Duration::ZERO,
            dir: None,
            retain: crate::checkpoint::DEFAULT_RETAIN,
            adaptive: None,
            replicate: None,
            incremental: Some(crate::state::delta::Incremental::default()),
        }
    }

    /// Copies every checkpoint off the host with `r` before it counts.
    pub fn replicate(mut self, r: std::sync::Arc<dyn crate::checkpoint::Replicator>) -> Self {
        self.replicate = Some(Replicate(r));
        self
    }
}

/// How a job is run on this machine.
///
/// ```
/// use std::time::Duration;
/// use tandem::{CheckpointConfig, Failover, RestartStrategy, RuntimeConfig, StandbyConfig};
///
/// // Two cores; a checkpoint every 500 ms; on a failure the failed task's
/// // region restarts (up to 10 times); operators marked `.standby()` get
/// // an active standby.
/// let config = RuntimeConfig::default()
///     .cores(2)
///     .checkpoint(CheckpointConfig::every(Duration::from_millis(500)))
///     .restart(RestartStrategy::FixedDelay { attempts: 10, delay: Duration::ZERO })
///     .failover(Failover::Region)
///     .standby(StandbyConfig::default());
/// assert_eq!(config.failover, Failover::Region);
/// ```
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// Cores to use (`None`: every core the process may run on).
    pub cores: Option<usize>,
    /// Operator chaining policy.
    pub chaining: Chaining,
    /// Slots per ring (rounded up to a power of two).
    pub ring_capacity: usize,
    /// Records a sender stages before publishing them as one batch.
    pub batch: usize,
    /// Records a task moves per input per poll before yielding to the next.
    pub budget: usize,
    /// Pin each worker thread to its core.
    pub pin: bool,
    /// Directory for files the run creates (dead letters, checkpoints);
    /// `None`: a fresh temporary directory, created only if needed.
    pub run_dir: Option<PathBuf>,
    /// How long an idle worker spins before yielding.
    pub spin: Duration,
    /// How long an idle worker yields before parking.
    pub yield_for: Duration,
    /// Longest a parked worker sleeps before re-checking.
    pub park_max: Duration,
    /// Per-record probes (fault injection); `None` for production runs.
    pub probes: Option<Arc<dyn probe::ProbeFactory>>,
    /// Periodic checkpoints (`None`: none).
    pub checkpoint: Option<CheckpointConfig>,
    /// What to do when an operator fails.
    pub restart: RestartStrategy,
    /// What a restart restarts: the whole job, or the failed task's
    /// region ([`Failover`]).
    pub failover: Failover,
    /// A worker that shows no sign of life for this long has stalled (a
    /// failure). Checked only when the restart strategy may restart; it must
    /// exceed the longest synchronous snapshot of one task.
    pub heartbeat_timeout: Duration,
    /// Start from this checkpoint or savepoint: a savepoint directory, a
    /// manifest file, or a checkpoint directory (its newest valid one).
    pub restore_from: Option<PathBuf>,
    /// Active standbys for the operators built after
    /// [`crate::Stream::standby`] (`None`: those run without one).
    pub standby: Option<crate::standby::StandbyConfig>,
    /// Who prints an operator's panic, and on which thread.
    pub panic_output: panic::PanicOutput,
    /// Where the keyed operators' state lives: in memory (the default), or
    /// on local disk behind a bounded cache, for state larger than memory
    /// ([`crate::state::disk`]).
    pub state_backend: crate::state::StateBackend,
}

impl std::fmt::Debug for dyn probe::ProbeFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProbeFactory")
    }
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            cores: None,
            chaining: Chaining::Auto,
            ring_capacity: 1024,
            batch: 64,
            budget: 256,
            pin: true,
            run_dir: None,
            spin: Duration::from_micros(50),
            yield_for: Duration::from_micros(500),
            park_max: Duration::from_millis(1),
            probes: None,
            checkpoint: None,
            restart: RestartStrategy::None,
            failover: Failover::Full,
            heartbeat_timeout: Duration::from_millis(100),
            restore_from: None,
            standby: None,
            panic_output: panic::PanicOutput::Chained,
            state_backend: crate::state::StateBackend::Memory,
        }
    }
}

impl RuntimeConfig {
    /// Uses at most `n` cores.
    pub fn cores(mut self, n: usize) -> Self {
        self.cores = Some(n);
        self
    }
    /// Sets the chaining policy.
    pub fn chaining(mut self, c: Chaining) -> Self {
        self.chaining = c;
        self
    }
    /// Sets the ring capacity.
    pub fn ring_capacity(mut self, n: usize) -> Self {
        self.ring_capacity = n.max(2);
        self
    }
    /// Sets the sender batch size.
    pub fn batch(mut self, n: usize) -> Self {
        self.batch = n.max(1);
        self
    }
    /// Keeps keyed state in `backend` (see [`RuntimeConfig::state_backend`]).
    pub fn state_backend(mut self, backend: crate::state::StateBackend) -> Self {
        self.state_backend = backend;
        self
    }
    /// Pins (or not) worker threads.
    pub fn pin(mut self, pin: bool) -> Self {
        self.pin = pin;
        self
    }
    /// Installs per-record probes (see [`probe`]).
    pub fn probes(mut self, probes: Arc<dyn probe::ProbeFactory>) -> Self {
        self.probes = Some(probes);
        self
    }
    /// Sets the run directory.
    pub fn run_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.run_dir = Some(dir.into());
        self
    }
    /// Takes periodic checkpoints.
    pub fn checkpoint(mut self, c: CheckpointConfig) -> Self {
        self.checkpoint = Some(c);
        self
    }
    /// Sets the restart strategy.
    pub fn restart(mut self, s: RestartStrategy) -> Self {
        self.restart = s;
        self
    }
    /// Restarts only the failed task's region ([`Failover::Region`]) or
    /// the whole job.
    pub fn failover(mut self, f: Failover) -> Self {
        self.failover = f;
        self
    }
    /// Sets the heartbeat timeout.
    pub fn heartbeat_timeout(mut self, d: Duration) -> Self {
        self.heartbeat_timeout = d;
        self
    }
    /// Runs standbys for the operators built after
    /// [`crate::Stream::standby`].
    pub fn standby(mut self, s: crate::standby::StandbyConfig) -> Self {
        self.standby = Some(s);
        self
    }
    /// Sets who prints an operator's panic (see [`panic::PanicOutput`]).
    pub fn panic_output(mut self, p: panic::PanicOutput) -> Self {
        self.panic_output = p;
        self
    }
    /// Starts from a checkpoint or savepoint.
    pub fn restore_from(mut self, path: impl Into<PathBuf>) -> Self {
        self.restore_from = Some(path.into());
        self
    }
}
