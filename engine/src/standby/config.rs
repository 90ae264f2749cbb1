//! How a job's standbys are configured.

use std::time::Duration;

/// How a standby keeps up with its primary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum StandbyMode {
    /// The standby waits; the primary publishes recovery points (snapshots
    /// of its state) at an interval; on takeover the standby restores the
    /// newest and replays the log from there.
    #[default]
    Warm,
    /// The standby follows the determinant log into its own state with its
    /// output suppressed (up to what every consumer acknowledged); on
    /// takeover it only replays the few chunks in between.
    Hot,
}

/// Where the incarnations (primary and standbys) of a backed-up chain run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Isolation {
    /// On the job's worker threads: a standby survives a panic, a stall or
    /// a cut input of its primary.
    #[default]
    Thread,
    /// Each incarnation's operators in a child process of their own (the
    /// same executable started again; see [`crate::is_incarnation_process`]):
    /// a standby also survives the primary's process dying (`kill -9`,
    /// `abort()`, a segfault, the OOM killer). The chain's input and output
    /// types need a [`crate::standby::Codec`] ([`crate::JobBuilder::codec`]).
    Process,
}

/// Active standby (BQBS) for the operators built after
/// [`crate::Stream::standby`].
#[derive(Clone, Debug)]
pub struct StandbyConfig {
    /// Warm or hot.
    pub mode: StandbyMode,
    /// A primary that shows no sign of life for this long, while its
    /// thread is stuck (not merely descheduled), has stalled. The standby
    /// may wait longer on a machine whose scheduling it has seen to be
    /// noisier (at most 8 × this).
    pub heartbeat_timeout: Duration,
    /// How often the primary of a stateful operator publishes a recovery
    /// point (a snapshot of its state); a stateless one publishes its
    /// position every millisecond or at this interval, whichever is
    /// shorter.
    pub snapshot_interval: Duration,
    /// How often it publishes one while a warm standby follows the
    /// points: each is then a delta over the point the
    /// standby's copy is at, applied by the standby as it comes
    /// ([`crate::state::delta`]), so points can be frequent — and the
    /// fewer records a takeover replays.
    pub delta_interval: Duration,
    /// A warm standby follows the recovery points: it keeps a copy of the
    /// chain's state (under process isolation, in its child process), brought forward by each point's
    /// delta ([`crate::state::delta`]), so that a takeover restores
    /// nothing and replays only the records since the newest point. Off
    /// by default: while the newest point is a delta, only the standby
    /// that holds the copy can take over from it — a primary and its
    /// following standby failing together, or a new primary failing
    /// before its first (whole) point is published, fail the attempt,
    /// loudly, where a standby that does not follow would restore the
    /// newest point (restart-all recovers the attempt where checkpoints
    /// are configured).
    pub follow: bool,
    /// Bytes of each buffer queue (one per upstream instance and operator
    /// instance); a full queue backpressures its upstream. Queues live in
    /// `<run dir>/standby-<attempt>/`, or without a run directory under
    /// `/dev/shm` (memory-backed: a disk-backed mapping pays for the
    /// kernel's writeback of its dirty pages in latency).
    pub queue_memory: u64,
    /// A backed-up chain whose input is a source instance of its own
    /// (forward, the source feeding nothing else) runs that source itself
    /// and logs only how many records each chunk took: the source is the
    /// queue, nothing is copied, and a takeover replays the records from a
    /// fresh instance of the source, sought to the recovery point
    /// ([`crate::Source::seek`] — override it where the source can jump).
    /// `false`: the source writes into a buffer queue like any upstream.
    pub replay_sources: bool,
    /// Write each record into its buffer queue encoded (its `Codec`), and
    /// decode it again in each reader, rather than move the record itself
    /// into a typed slot beside the queue that the readers clone it from
    /// (the default: one write, no encode or decode). The encoded form is
    /// what a standby in another process will need.
    pub encoded_queues: bool,
    /// Where incarnations run (threads, or a child process each).
    pub isolation: Isolation,
    /// Process isolation: the arguments each child is started with (the
    /// program is always this executable); `None`: this process's own.
    pub child_args: Option<Vec<std::ffi::OsString>>,
}

impl Default for StandbyConfig {
    fn default() -> Self {
        StandbyConfig {
            mode: StandbyMode::Warm,
            heartbeat_timeout: Duration::from_millis(5),
            snapshot_interval: Duration::from_millis(200),
            // A takeover replays what came since the newest point: at
            // 250 k records/s a 10 ms interval took a thread-isolated
            // keyed takeover from 2.9 ms to 0.5 ms, and cost q5 at full
            // rate ~2 % (points then come as fast as the standby applies
            // them, whatever the interval).
            delta_interval: Duration::from_millis(10),
            follow: false,
            queue_memory: 16 << 20,
            replay_sources: true,
            encoded_queues: false,
            isolation: Isolation::Thread,
            child_args: None,
        }
    }
}
