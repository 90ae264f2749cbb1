//! What tasks tell the supervisor, and what the supervisor hands the tasks
//! of a restarted attempt.
//!
//! Tasks report over one `mpsc` channel (acknowledged barriers with their
//! snapshots, finished tasks, built and exited workers, failures, sink
//! committers). Every event carries the attempt it belongs to: a worker of a
//! stopped attempt that wakes up late (a stalled thread cannot be killed) is
//! fenced off by that number.

use crate::checkpoint::{SnapshotBytes, SnapshotFile};
use crate::error::JobError;
use crate::operator::Committer;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{mpsc, Arc};

/// A message to the supervisor.
pub(crate) enum Event {
    /// An operator instance passed checkpoint barrier `id`.
    Ack {
        attempt: u32,
        id: u64,
        node: usize,
        instance: usize,
        /// Its state (operators that keep some).
        state: Option<SnapshotBytes>,
        /// Its next sequence number (sources).
        position: Option<u64>,
        /// Records consumed in this attempt (sinks).
        written: Option<u64>,
        /// The epoch of the standby group's primary that acknowledged (0:
        /// an operator without a standby).
        epoch: u64,
    },
    /// An operator instance could not snapshot its state for `id`.
    Decline {
        attempt: u32,
        id: u64,
        node: usize,
        instance: usize,
        reason: String,
    },
    /// Every operator of a task has ended.
    TaskDone { attempt: u32, task: usize },
    /// A worker built its tasks (restored its state) and starts polling.
    Built { attempt: u32 },
    /// A worker thread is about to exit.
    WorkerExit { attempt: u32, worker: usize },
    /// Something failed; the error is in the attempt's shared state.
    Failed { attempt: u32 },
    /// A transactional sink instance's phase-two handle.
    Committer {
        attempt: u32,
        node: usize,
        instance: usize,
        committer: Box<dyn Committer>,
    },
    /// The handle asks for a savepoint.
    Savepoint {
        reply: mpsc::Sender<Result<PathBuf, JobError>>,
    },
    /// The handle asks for a savepoint, and for the job to stop once it is
    /// durable (`JobHandle::stop_with_savepoint`).
    StopWithSavepoint {
        reply: mpsc::Sender<Result<PathBuf, JobError>>,
    },
    /// The handle cancels the job.
    Cancel,
}

/// What one sink instance publishes for the supervisor's recovery figures.
#[derive(Debug)]
pub(crate) struct SinkTally {
    /// Records consumed in this attempt (published per flush).
    pub(crate) written: AtomicU64,
    /// Engine clock at the first record of this attempt (0: none yet).
    pub(crate) first_at: AtomicU64,
    /// Records to consume in this attempt to be back where the instance was
    /// when the previous attempt failed.
    pub(crate) target: AtomicU64,
    /// Engine clock when `written` reached `target` (0: not yet).
    pub(crate) caught_at: AtomicU64,
}

impl SinkTally {
    pub(crate) fn new(target: u64) -> Self {
        SinkTally {
            written: AtomicU64::new(0),
            first_at: AtomicU64::new(0),
            target: AtomicU64::new(target),
            caught_at: AtomicU64::new(0),
        }
    }
}

/// What one operator instance gets back from a checkpoint.
#[derive(Clone, Debug, Default)]
pub(crate) struct InstanceRestore {
    /// Its snapshot file, mapped and verified.
    pub(crate) state: Option<Arc<SnapshotFile>>,
    /// For an incremental snapshot: the files a restore reads before
    /// `state`, oldest first (the last whole one, then deltas).
    pub(crate) chain: Vec<Arc<SnapshotFile>>,
    /// A keyed state's chain read lazily (every link has a key index):
    /// the whole archive, then the deltas after it, the snapshot itself
    /// last; `state` and `chain` are then empty.
    pub(crate) lazy: Vec<Arc<crate::checkpoint::LazySnapshot>>,
    /// It had finished.
    pub(crate) finished: bool,
    /// Its next sequence number (sources).
    pub(crate) position: Option<u64>,
    /// Restored at another parallelism than the checkpoint's, a keyed
    /// state: the old instances' states whose key ranges overlap this
    /// instance's, each a chain (the last whole archive, then deltas, the
    /// snapshot last), of which it keeps the keys it owns now.
    pub(crate) parts: Vec<Vec<Arc<SnapshotFile>>>,
    /// A sink's: the old instances whose output this instance settles,
    /// as they are gone at the new parallelism (each with whether it had
    /// finished).
    pub(crate) adopted: Vec<(usize, bool)>,
}

/// A checkpoint, ready for the tasks of a new attempt.
#[derive(Debug, Default)]
pub(crate) struct Restore {
    pub(crate) checkpoint: u64,
    /// By `(node, instance)`; an instance not listed starts empty.
    pub(crate) instances: HashMap<(usize, usize), InstanceRestore>,
    /// A checkpoint of the job's own store: the next checkpoint's deltas
    /// may apply over it.
    pub(crate) of_store: bool,
}
