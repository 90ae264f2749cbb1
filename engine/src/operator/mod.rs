//! Operators: the user-facing traits and the engine's wrappers around them.
//!
//! An operator instance lives on exactly one worker thread for its whole life:
//! it is *built there* by a factory (which must be `Send + Sync`), so the
//! instance itself need not be `Send` and may use `Rc`, `Cell` and friends.
//! Nothing an operator owns crosses a core; only records do, through the
//! rings of [`crate::queue`].
//!
//! Generic shapes, as in timely-dataflow:
//! - [`Process`] — one input, one output; `map`, `filter` and `flat_map` are
//!   small adapters over it.
//! - [`KeyedProcess`] — one keyed input with per-key state kept by the engine.
//! - [`CoProcess`] — two inputs (`connect`), e.g. a broadcast side stream.
//! - [`Sink`] — consumes records; the engine measures end-to-end latency there.
//!
//! Inside a task, operators are *chained*: an operator's [`Output`] calls the
//! next operator directly, with no queue in between. Every hop of a chain is
//! an `Collector`, the engine-internal push interface.
//!
//! Lifecycle hooks have default no-op bodies; `on_end` is called exactly once,
//! after the last record of every input, and may still emit.

pub mod broadcast;
mod filter;
mod flat_map;
mod map;
pub mod source;
mod tee;

pub use filter::Filter;
pub use flat_map::FlatMap;
pub use map::Map;

pub(crate) use tee::{Null, Tee};

use crate::checkpoint::{CheckpointError, SnapshotBytes, StateCapture};
use crate::record::{Nanos, Record, TupleId};
use std::fmt::Display;
use std::sync::Arc;

/// The tuple ID of the record the calling operator is processing, when
/// called from an operator's code (a `map` or `filter` closure, an
/// `aggregate` or `reduce` function, a [`Process`] …) while it handles a
/// record; `None` elsewhere (in `on_end`, outside a job).
///
/// For operators whose closures have no [`Output`] to ask
/// ([`Output::tuple_id`]). It costs only its caller: the engine notes each
/// record for its failure reports anyway (a panic in an operator's code is
/// reported with the record it happened on).
///
/// ```
/// use tandem::{IterSource, JobBuilder, RuntimeConfig};
///
/// let job = JobBuilder::new("ids");
/// job.source("n", |_| IterSource((0..3u64).map(|n| (n, n))))
///     .map("with-id", |n: u64| (n, tandem::operator::current_record().map(|t| t.seq())))
///     .for_each("check", |r| assert_eq!(r.value.1, Some(r.value.0)));
/// job.build()?.run(&RuntimeConfig::default().cores(1))?;
/// # Ok::<(), tandem::JobError>(())
/// ```
pub fn current_record() -> Option<TupleId> {
    CURRENT_RECORD.get().and_then(|answer| answer())
}

/// How the runtime answers [`current_record`]: set once per process, when
/// the first job starts (operators sit below the runtime that runs them).
static CURRENT_RECORD: std::sync::OnceLock<fn() -> Option<TupleId>> = std::sync::OnceLock::new();

/// The runtime's answer to [`current_record`] (the first call sets it).
pub(crate) fn answer_current_record(answer: fn() -> Option<TupleId>) {
    let _ = CURRENT_RECORD.set(answer);
}

/// Who an operator instance is: handed to every operator factory.
#[derive(Clone, Debug)]
pub struct OperatorInfo {
    /// The operator's unique name in the job.
    pub name: Arc<str>,
    /// This instance's index, `0..parallelism`.
    pub instance: usize,
    /// How many instances the operator has.
    pub parallelism: usize,
    /// Which run of the job this is: 0, then one more after every restart.
    pub attempt: u32,
    /// The checkpoint this instance is restored from, if any.
    pub restored: Option<Restored>,
}

/// What an operator factory learns about the checkpoint its instance is
/// restored from (the engine restores the state itself; a sink uses this to
/// settle its transactions).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Restored {
    /// The checkpoint (or savepoint) id.
    pub checkpoint: u64,
    /// Whether the instance had already finished (consumed all its input
    /// and ran its end-of-stream hooks) in that checkpoint: it will see no
    /// record and its end hooks are not run again.
    pub finished: bool,
    /// Restored at a lower parallelism than the checkpoint was taken at:
    /// the old instances, gone now, whose output this instance settles (a
    /// sink's staged transactions), each with whether it had finished in
    /// the checkpoint. Old instance `i` goes to new instance
    /// `i % parallelism`. Empty otherwise.
    pub adopted: Vec<(usize, bool)>,
}

/// A chunk of a standby operator's input — inputs `first .. first + n` of
/// its input lane `lane`, entry `seq` of its determinant log — as the
/// operator announces it to its chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ChunkId {
    pub(crate) seq: u64,
    pub(crate) first: u64,
    pub(crate) n: u32,
    pub(crate) lane: u16,
}

/// The push interface between chained operators (engine-internal).
///
/// `collect` hands one record over; `flush` asks every queue at the end of the
/// chain to publish what it staged (and retry what did not fit); `end` is
/// called once when no input will ever arrive again.
pub(crate) trait Collector<T> {
    fn collect(&mut self, rec: Record<T>);
    fn flush(&mut self);
    fn end(&mut self);
    /// Checkpoint barrier `id` passes this hop: every record before it has
    /// been handed over, none after it. An operator snapshots its state,
    /// acknowledges, and forwards the barrier.
    fn barrier(&mut self, id: u64);
    /// Event time (see [`crate::time`]): no record after this one on this
    /// hop's input has an event time below `wm`, late records excepted.
    /// Operators forward it; an event-time operator first takes what it
    /// releases and fires its timers.
    fn watermark(&mut self, wm: u64);
    /// Every input of this hop has gone idle (see [`crate::time`]):
    /// forwarded, so that an operator downstream with other inputs does not
    /// wait for this one's watermark.
    fn idle(&mut self);
    /// Processing time (nanoseconds on the job's clock) reached `now`: an
    /// operator with processing-time timers (a [`crate::time::TimedProcess`],
    /// always the head of its chain, as it is keyed) fires those due.
    /// Others ignore it. A standby group's port passes it where its
    /// determinant log says; others when the clock's millisecond changes.
    fn processing_time(&mut self, _now: u64) {}
    /// Standby protocol (an operator with a standby): the outputs that
    /// follow, up to [`close_chunk`](Self::close_chunk) (or the end), are
    /// those of chunk `id` of the operator's input. Operators forward it;
    /// ring senders count what they send for it.
    fn open_chunk(&mut self, _id: ChunkId) {}
    /// Standby protocol: the open chunk's outputs are all emitted; ring
    /// senders put its trailing mark on every lane.
    fn close_chunk(&mut self) {}
    /// Standby protocol: the states of this hop's operator and of every
    /// operator chained after it, for the standby (warm mode), appended to
    /// `parts` as `(node, state)` in chain order (`None`: stateless). Ring
    /// senders end a chain and add nothing.
    fn snapshot_chain(&mut self, _parts: &mut ChainParts) -> Result<(), CheckpointError> {
        Ok(())
    }
    /// Standby protocol: returns once every output of what was handed to
    /// this chain so far has reached its end. A chain whose operators run
    /// in another process (process isolation) waits for their answers; a
    /// chain of calls has nothing to wait for. A hot standby settles its
    /// chain before it goes live, so that what it computed muted is never
    /// sent as the new primary's.
    fn settle(&mut self) {}
    /// Standby protocol (a warm standby that follows its primary's
    /// recovery points, [`crate::state::delta`]): brings the states of
    /// this hop's operator and of those chained after it to a newer
    /// point's — `parts` by node, each whole or a delta over the state
    /// held now. `Ok(false)`: an operator here cannot follow (its state
    /// restores only whole, into a fresh operator); the standby then
    /// restores at the takeover instead. Ring senders end a chain.
    fn follow_point(&mut self, _parts: &mut FollowParts) -> Result<bool, CheckpointError> {
        Ok(true)
    }
    /// Standby protocol: a chain that followed recovery points goes live:
    /// what the points left to install (an event-time operator's waiting
    /// records and timers) is installed now.
    fn install_followed(&mut self) {}
}

/// A recovery point's states by node, for [`Collector::follow_point`].
pub(crate) type FollowParts = std::collections::HashMap<usize, Vec<u8>>;

/// The states of a backed-up chain's operators, `(node, state)` in chain
/// order (see [`Collector::snapshot_chain`]).
pub(crate) type ChainParts = Vec<(usize, Option<StateCapture>)>;

/// A one-input operator.
///
/// ```
/// use tandem::{Output, Process, Record};
///
/// /// Emits a running count of the records seen by this instance.
/// #[derive(Default)]
/// struct Count(u64);
///
/// impl Process<String, u64> for Count {
///     fn process(&mut self, _rec: Record<String>, out: &mut Output<'_, u64>) {
///         self.0 += 1;
///         out.emit(self.0);
///     }
/// }
/// ```
pub trait Process<I, O>: 'static {
    /// Handles one record; emits any number of outputs.
    fn process(&mut self, rec: Record<I>, out: &mut Output<'_, O>);
    /// Called once after the last input record.
    fn on_end(&mut self, _out: &mut Output<'_, O>) {}
    /// The operator's own state at a checkpoint, archived with
    /// [`crate::checkpoint::serialize`]; `None` (the default) for an
    /// operator that keeps nothing across records.
    fn snapshot_state(&mut self) -> Result<Option<SnapshotBytes>, CheckpointError> {
        Ok(None)
    }
    /// Restores what [`snapshot_state`](Self::snapshot_state) archived (the
    /// payload's checksum is verified; use
    /// [`crate::checkpoint::access`] to read it).
    fn restore_state(&mut self, _payload: &[u8]) -> Result<(), CheckpointError> {
        Ok(())
    }
    /// How this state is restored at another parallelism than the
    /// checkpoint's (see [`Redistribution`]); by default such a restore is
    /// refused, naming the operator, if any instance had a state.
    fn redistribution() -> Redistribution
    where
        Self: Sized,
    {
        Redistribution::Refuse
    }
}

/// How an operator's own state ([`Process::snapshot_state`],
/// [`CoProcess::snapshot_state`]) is restored when a checkpoint or
/// savepoint taken at one parallelism is restored at another (keyed state
/// is always redistributed by key).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Redistribution {
    /// The restore is refused, naming the operator, when any instance had a
    /// state: the engine cannot split opaque bytes among another number of
    /// instances.
    #[default]
    Refuse,
    /// Every instance holds the same state (Flink's broadcast state): each
    /// new instance restores a copy of instance 0's (or, were it finished,
    /// of the first that had one).
    Replicate,
}

/// A keyed operator: the engine keeps one `State` per key and hands the
/// record's state to every call.
///
/// ```
/// use tandem::{KeyedProcess, Output, Record};
///
/// /// Counts records per key and emits `(key, count)` at end of stream.
/// struct CountPerKey;
///
/// impl KeyedProcess<u32, u32, (u32, u64)> for CountPerKey {
///     type State = u64;
///     fn process(&mut self, _k: &u32, n: &mut u64, _r: Record<u32>, _o: &mut Output<'_, (u32, u64)>) {
///         *n += 1;
///     }
///     fn on_end(&mut self, k: &u32, n: &mut u64, out: &mut Output<'_, (u32, u64)>) {
///         out.emit((*k, *n));
///     }
/// }
/// ```
pub trait KeyedProcess<K, T, O>: 'static {
    /// Per-key state, created with `Default` on a key's first record.
    /// `Clone`: while a snapshot of the state is archived, the first write
    /// to a key keeps a copy of its old state (see [`crate::state`]).
    type State: Default + Clone + 'static;
    /// Handles one record of `key`.
    fn process(
        &mut self,
        key: &K,
        state: &mut Self::State,
        rec: Record<T>,
        out: &mut Output<'_, O>,
    );
    /// Called once per key after the last input record.
    fn on_end(&mut self, _key: &K, _state: &mut Self::State, _out: &mut Output<'_, O>) {}
}

/// A two-input operator, built by `connect`.
///
/// `first_ready` lets the operator hold back its first input until the second
/// has delivered what the first needs (a broadcast mapping, a rule set):
/// while it returns `false` the runtime does not read the first input, so its
/// records wait in their ring — bounded, with backpressure upstream — instead
/// of in an unbounded buffer. Once the second input has ended, the first is
/// read regardless. Readiness is a latch: once `first_ready` has returned
/// `true`, the runtime may stop asking.
///
/// The second input must not depend on the first one's progress (in the
/// paper pipeline it comes from its own source): if both descend from the
/// same task, a held first input fills its ring, stalls that task, and the
/// second input never arrives.
pub trait CoProcess<A, B, O>: 'static {
    /// Handles one record of the first input.
    fn process_first(&mut self, rec: Record<A>, out: &mut Output<'_, O>);
    /// Handles one record of the second input.
    fn process_second(&mut self, rec: Record<B>, out: &mut Output<'_, O>);
    /// Whether the first input may be read now.
    fn first_ready(&self) -> bool {
        true
    }
    /// Called once after both inputs ended.
    fn on_end(&mut self, _out: &mut Output<'_, O>) {}
    /// The operator's state at a checkpoint (see
    /// [`Process::snapshot_state`]).
    fn snapshot_state(&mut self) -> Result<Option<SnapshotBytes>, CheckpointError> {
        Ok(None)
    }
    /// Restores what [`snapshot_state`](Self::snapshot_state) archived.
    fn restore_state(&mut self, _payload: &[u8]) -> Result<(), CheckpointError> {
        Ok(())
    }
    /// How this state is restored at another parallelism (see
    /// [`Process::redistribution`]).
    fn redistribution() -> Redistribution
    where
        Self: Sized,
    {
        Redistribution::Refuse
    }
}

/// Where records leave the job.
///
/// Errors returned here end the job with [`crate::JobError::Io`] naming the
/// sink; nothing is silently dropped.
pub trait Sink<T>: 'static {
    /// Consumes one record.
    fn write(&mut self, rec: Record<T>) -> std::io::Result<()>;
    /// Called once after the last record; flush and close here.
    fn finish(&mut self) -> std::io::Result<()> {
        Ok(())
    }
    /// Phase one of a two-phase commit: checkpoint barrier `checkpoint`
    /// reached this sink. Make everything written since the previous
    /// barrier durable, staged under `checkpoint`, not yet visible. After
    /// [`finish`](Self::finish) the engine calls it once more with
    /// [`FINAL_EPOCH`] for the output after the last barrier.
    fn pre_commit(&mut self, _checkpoint: u64) -> std::io::Result<()> {
        Ok(())
    }
    /// The handle that performs phase two, off the data path, when a
    /// checkpoint completes. `None` (the default): the sink is not
    /// transactional; what it writes is visible at once, and records it
    /// writes again after a restart are counted as duplicates. Such a
    /// sink must still have handed every record before the barrier to its
    /// destination when [`pre_commit`](Self::pre_commit) returns: a restart
    /// from that checkpoint does not produce them again, so records it
    /// still buffered there would be lost with the failed attempt.
    fn committer(&self) -> Option<Box<dyn Committer>> {
        None
    }
}

/// The epoch id of a sink's output after its last checkpoint barrier; it is
/// committed when the job completes (or by the first checkpoint that records
/// the sink as finished).
pub const FINAL_EPOCH: u64 = u64::MAX;

/// Phase two of a transactional sink: makes staged output visible. Called
/// by the checkpoint coordinator, on its own thread.
pub trait Committer: Send + 'static {
    /// Whether the output pre-committed under `checkpoint` is durable yet
    /// (must not block). The supervisor publishes a checkpoint only once
    /// every sink says so, so a published checkpoint never names output a
    /// crash could still lose. A sink that stages asynchronously must
    /// implement it; the default suits sinks whose `pre_commit` is
    /// synchronous.
    fn prepared(&mut self, _checkpoint: u64) -> std::io::Result<bool> {
        Ok(true)
    }
    /// Makes the output pre-committed under `checkpoint` visible (idempotent;
    /// nothing staged under that id is not an error).
    fn commit(&mut self, checkpoint: u64) -> std::io::Result<()>;
    /// The job completed: makes everything this sink instance pre-committed
    /// in this run visible — the final epoch, and epochs of checkpoints
    /// that were still in flight when the input ended. The default commits
    /// [`FINAL_EPOCH`]; a sink that may have staged other epochs must
    /// commit those too.
    fn commit_final(&mut self) -> std::io::Result<()> {
        self.commit(FINAL_EPOCH)
    }
    /// Waits until nothing this instance handed to a background thread of
    /// its own still touches the destination, and reports whether all of
    /// it landed: a sink whose [`commit`](Self::commit) only hands the
    /// work over returns here the failure of any commit since the last
    /// `settle`. The supervisor calls it after
    /// [`commit_final`](Self::commit_final), before the job may report
    /// success — an error fails the attempt, as a failed commit does (the
    /// restart strategy decides; with none left the job fails naming the
    /// sink) — and once more when the job ends, for every attempt's sinks,
    /// so the job never returns with its output still changing. The
    /// default suits sinks without such a thread.
    fn settle(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What an operator emits into. Emitted records inherit the envelope (tuple
/// ID, event time, ingest stamp) of the record being processed.
pub struct Output<'a, O> {
    pub(crate) down: &'a mut dyn Collector<O>,
    pub(crate) id: TupleId,
    pub(crate) event_time: u64,
    pub(crate) ingest: Nanos,
    pub(crate) emitted: &'a mut u64,
    pub(crate) task: &'a dyn DeadLetters,
    pub(crate) op: usize,
}

/// Where an [`Output`] sends the records its operator gives up on: the
/// runtime's dead-letter file (engine-internal; the task implements it).
pub(crate) trait DeadLetters {
    /// Keeps record `id` of operator `op` with `reason` and its bytes.
    fn dead_letter(&self, op: usize, id: TupleId, reason: &str, payload: &[u8]);
}

impl<'a, O> Output<'a, O> {
    pub(crate) fn new(
        down: &'a mut dyn Collector<O>,
        emitted: &'a mut u64,
        task: &'a dyn DeadLetters,
        op: usize,
    ) -> Self {
        Output {
            down,
            id: TupleId::NONE,
            event_time: 0,
            ingest: Record::<()>::NO_INGEST,
            emitted,
            task,
            op,
        }
    }

    #[inline]
    pub(crate) fn with_envelope<T>(mut self, rec: &Record<T>) -> Self {
        self.id = rec.id;
        self.event_time = rec.event_time;
        self.ingest = rec.ingest;
        self
    }

    /// Emits `value` in the envelope of the record being processed.
    #[inline]
    pub fn emit(&mut self, value: O) {
        *self.emitted += 1;
        self.down.collect(Record {
            id: self.id,
            event_time: self.event_time,
            ingest: self.ingest,
            value,
        });
    }

    /// Emits a record with an envelope of the operator's choosing.
    #[inline]
    pub fn emit_record(&mut self, rec: Record<O>) {
        *self.emitted += 1;
        self.down.collect(rec);
    }

    /// The tuple ID of the record being processed ([`TupleId::NONE`] in
    /// `on_end`).
    pub fn tuple_id(&self) -> TupleId {
        self.id
    }

    /// The event time of the record being processed.
    pub fn event_time(&self) -> u64 {
        self.event_time
    }

    /// Sends the record being processed to the job's dead-letter file with a
    /// reason, instead of failing the job. The record is counted and kept,
    /// never silently dropped.
    pub fn dead_letter(&mut self, reason: impl Display, payload: &[u8]) {
        self.task
            .dead_letter(self.op, self.id, &reason.to_string(), payload);
    }
}
