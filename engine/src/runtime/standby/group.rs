//! A standby group at run time: one instance of an operator with a standby
//! — its buffer queues and determinant log, the liveness cell its primary
//! and standby share, its recovery points, its consumers' progress, and
//! who plays which role.
//!
//! ## Roles
//!
//! Roles are played by *incarnations*: the first primary is incarnation 0,
//! the first standby 1, and every standby started later (after a takeover,
//! or after a standby failed) the next number. Each incarnation has its own
//! rings to the consumers (a stalled old primary keeps its ring ends; they
//! are simply never read again) and its own reader slot in the queues,
//! which nobody else uses until the incarnation is gone.
//!
//! ## The data path
//!
//! Upstream writes each input once into the group's buffer queue of its
//! lane ([`super::sender`]: the record itself into the typed slot beside
//! its position, [`super::slots`], or its encoded bytes). A chain right
//! after a source of its own has no queue: its one lane is the source,
//! replayed ([`super::incarnation::source_lane`]). The primary takes the
//! lanes in chunks, and
//! logs each choice in the determinant log ([`crate::standby::detlog`]) *before* it
//! processes the chunk. Around each chunk's outputs it tells its chain the
//! chunk's identity; the ring senders at the chain's end follow the
//! outputs with a mark carrying the chunk's number and how many outputs
//! that ring got for it ([`crate::runtime::channel::Mark`]), and start
//! each primary's stream with a resume mark. A consumer
//! ([`super::fenced`]) follows the marks with a
//! [`crate::standby::decide::Tracker`]: it knows which
//! chunks it has completely, acknowledges them (per lane: the queue
//! positions; and the chunk number), and remembers their output counts.
//!
//! ## Recovery points
//!
//! A *recovery point* is `(chunk number, per-lane queue positions, state)`
//! — for a stateful operator the state's snapshot, for a stateless one
//! nothing. The primary takes one between chunks at an interval (or when
//! a queue is full of entries no point covers) and publishes it only once
//! every consumer has acknowledged every chunk before it, so that no
//! consumer will ever need an output from before a point. Queue entries
//! below the newest point (and below every reader's cursor) may be
//! evicted; consumers forget counts of chunks below it.
//!
//! ## Takeover
//!
//! 1. The standby finds the primary's epoch failed (a panic or cut input,
//!    reported at once — for a panic from inside the panic hook, before
//!    any printing) or judges it stuck ([`crate::standby::decide::Detector`]), and
//!    claims the next epoch with a compare-and-swap: the old primary is
//!    fenced from that moment (its log appends, points and end-of-stream
//!    are refused; its rings are never read again; its queue cursor is
//!    reclaimed as soon as it is not copying entries out).
//! 2. It starts from the newest recovery point — or, a hot standby, from
//!    its own state when that is not older — and walks the determinant log
//!    from there: every logged chunk again, in the logged order, with the
//!    same numbers, inputs and outputs; past the log's end it chooses (and
//!    logs) chunks itself. Nothing waits for the consumers.
//! 3. Each consumer notices the new epoch at its next poll, stops reading
//!    the old primary's ring, keeps its cut (what it had of the chunk that
//!    was arriving), and reads the new primary's stream: it drops the
//!    chunks it has, the outputs of a partly received chunk it has, and
//!    checks that each repeated chunk has the output count it had the
//!    first time. A replay that starts after a chunk it has not completed,
//!    or repeats one differently, fails the job
//!    ([`crate::standby::decide::Diverged`]): never a silent loss.
//! 4. A new standby is started on another worker.
//!
//! ## End of stream
//!
//! The end of each input lane is a queue entry, so it is logged and
//! replayed like the rest: the operator's end-of-stream outputs belong to
//! the chunk of the last lane's end entry and are repeated, counted and
//! deduplicated like any other. A primary is *done* only when its end
//! marker is in every ring (nothing left in an overflow); until then it
//! can be taken over, and after it the standby stops watching — a done
//! primary is never taken over for its silence.
//!
//! ## Checkpoint barriers
//!
//! With checkpoints on (`recovery::compose` has the whole composition),
//! upstream writes a barrier into every lane's queue in order with the
//! records. The primary takes a barrier entry as a chunk of its own
//! (logged, so every replay repeats it), aligns the barriers of its lanes
//! like any operator — in exactly-once mode a lane that delivered one is
//! not read until every lane has — and when the alignment completes passes
//! the barrier down its chain inside that chunk: the operator snapshots
//! and acknowledges (with its epoch), the ring senders put the barrier on
//! every ring before the chunk's mark. Recovery points keep the alignment
//! in progress, so a replay from one knows which lanes had delivered the
//! barrier. A hot standby aligns along but neither snapshots nor sends; a
//! new primary that replays a barrier acknowledges it again (if it is
//! still in flight) and sends it again — consumers align over the groups'
//! rings and take a barrier at or below the last they forwarded as stale.
//!
//! ## Every wait ends
//!
//! - *Upstream waits for queue space* (the queue holds `window` entries the
//!   primary has not read, or is full): the primary reads, and a queue
//!   full of entries no point covers makes it take a point at once; the
//!   point is published once the consumers acknowledge the chunks before
//!   it, and a chunk is acknowledged as soon as its closing mark reaches
//!   the consumer — sent right after the chunk's outputs and published at
//!   the end of the primary's poll, never waiting for more input. If the
//!   primary is gone, its successor reads from the point on.
//! - *A lane is held for a barrier's alignment* (exactly-once): the other
//!   lanes deliver it — every upstream instance writes each barrier into
//!   every lane — or end; meanwhile the held lane's upstream is
//!   backpressured as behind a full ring, and points are still taken (they
//!   keep the alignment), so queues of the lanes being read still evict.
//! - *A pending point waits for acknowledgements*: consumers read their
//!   rings whenever they are polled (a sink always drains), so the
//!   acknowledgements come; a consumer that ended no longer counts.
//! - *The log is full*: cannot happen before the queues are (see
//!   [`crate::standby::detlog`]); were it to, the primary takes a point and waits
//!   like upstream does.
//! - *A hot standby falls behind*: it holds the queues back only up to half
//!   a queue, then lets go and waits (warm) for a newer point.
//! - *A consumer waits for the new primary's ring*: the ring exists once
//!   the new primary's chain is built, in the same poll as the claim.
//! - *A successor waits to reclaim a fenced reader's cursor*: the fenced
//!   reader marks only the copying of one chunk, which never blocks; the
//!   mark clears when its thread next runs.
//! - *A new standby waits for a free reader slot* (all taken by old
//!   primaries stalled past their takeover): a slot frees when one of them
//!   ends, and the standby is started then.
//! - *A done-to-be primary waits for ring space for its last outputs*: its
//!   consumers read on.
//!
//! Each of these is exercised by a test at the smallest queue and ring
//! sizes at full rate (`engine/tests/standby.rs`); the log's fencing is
//! model-checked (`engine/tests/loom_detlog.rs`).
//!
//! ## The end-of-run check
//!
//! When the job completes, [`Group::check_complete`] verifies, per
//! consumer and lane, that the consumer received the stream's end and
//! acknowledged every input the queue says was produced (up to and
//! including the end entry). A job whose standby machinery lost anything
//! fails with [`JobError::StandbyIncomplete`] instead of succeeding.

use crate::error::JobError;
use crate::record::Nanos;
use crate::runtime::align::Alignment;
use crate::runtime::graph::AnySend;
use crate::standby::bq::{BqConfig, BufferQueue, MAX_READERS};
use crate::standby::config::{StandbyConfig, StandbyMode};
use crate::standby::detlog::DetLog;
use crate::standby::epoch::LivenessFile;
use crate::standby::exchange::SnapshotExchange;

mod failures;
mod points;
mod roles;

pub(crate) use failures::{Fault, Faults};
pub(crate) use roles::standby_worker;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// One consumer of the group's output: an instance of a downstream
/// operator, on one edge.
pub(crate) struct ConsumerLane {
    pub(crate) edge: usize,
    /// The consuming operator.
    pub(crate) node: usize,
    pub(crate) instance: usize,
    pub(crate) worker: usize,
    /// Per input lane of the group: inputs below it have all their outputs
    /// at this consumer.
    pub(crate) acked: Vec<AtomicU64>,
    /// Chunks below this have all their outputs at this consumer.
    pub(crate) acked_seq: AtomicU64,
    /// It received the end of the group's output (shared with the
    /// primaries' ring senders, which stop sending it anything then).
    pub(crate) ended: Arc<AtomicBool>,
}

/// Where a replay may start (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Point {
    /// The first chunk after the point.
    pub(crate) seq: u64,
    /// Its state is a delta over the state at the point of this chunk
    /// (0: whole).
    pub(crate) base: u64,
    /// Per lane: the first queue position after the point.
    pub(crate) pos: Vec<u64>,
    /// The snapshot exchange's publication holding the state (0: none).
    pub(crate) xseq: u64,
    /// Checkpoint barriers over the lanes at the point: a replay that
    /// starts here while one was aligning knows which lanes delivered it.
    pub(crate) align: Alignment,
    /// The lanes' watermarks at the point: a replay that starts here
    /// judges its first records as the primary did.
    pub(crate) clock: crate::runtime::lanes::LaneClock,
}

/// The standby incarnation of a group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StandbyRole {
    pub(crate) inc: u64,
    pub(crate) worker: usize,
    pub(crate) slot: usize,
}

pub(crate) struct Inner {
    pub(crate) primary: u64,
    pub(crate) primary_epoch: u64,
    pub(crate) primary_worker: usize,
    pub(crate) primary_slot: usize,
    /// The primary of `primary_epoch` has built its chain (its rings
    /// exist): consumers may follow it, a hot standby may start.
    pub(crate) ready: bool,
    pub(crate) standby: Option<StandbyRole>,
    /// A standby is owed but no reader slot was free.
    want_standby: bool,
    pub(crate) next_incarnation: u64,
    /// Reader slot owners (incarnations), until they are dropped.
    owners: [Option<u64>; MAX_READERS],
    /// Consumer ends of incarnations' rings, by (consumer, incarnation).
    pub(crate) rings: HashMap<(usize, u64), AnySend>,
    point: Point,
    /// Snapshot exchange (stateful operators), created at the first
    /// publication and replaced by a larger one when the state outgrows
    /// its slots.
    exchange: Option<Arc<SnapshotExchange>>,
    /// A larger exchange made for a state staged but not yet published.
    spare: Option<Arc<SnapshotExchange>>,
    exchanges_made: u32,
    /// Index into the job's standby log of the newest takeover.
    pub(crate) takeover: Option<usize>,
    /// Standbys of this group that failed.
    standby_failures: u32,
}

/// A standby group (see the module docs).
pub(crate) struct Group {
    pub(crate) node: usize,
    pub(crate) instance: usize,
    /// The head's name (the group's files and reports use it).
    pub(crate) name: Arc<str>,
    /// The backed-up chain: the head (`node`) and the one-input operators
    /// chained after it, in graph order; each incarnation runs all of them.
    pub(crate) chain: Vec<usize>,
    /// The chain's operators' names, in `chain`'s order.
    pub(crate) chain_names: Vec<Arc<str>>,
    /// The source the chain replays as its one lane (no queue; see
    /// `incarnation/source_lane.rs`).
    pub(crate) source: Option<usize>,
    /// The liveness cell, in a file of its own beside the queues (so that
    /// an incarnation in another process can map it).
    pub(crate) live: LivenessFile,
    /// Per input lane (upstream instance, in lane order).
    pub(crate) queues: Vec<BufferQueue>,
    /// Per queue: its typed slots (a `slots::TypedSlots<T>` for the
    /// chain's input type), made by the first of upstream and the
    /// incarnations to need them — unless records are encoded.
    typed: Vec<std::sync::OnceLock<Arc<dyn std::any::Any + Send + Sync>>>,
    /// Records go into the queues encoded (`StandbyConfig::encoded_queues`).
    encoded: bool,
    pub(crate) log: DetLog,
    /// Each lane's input edge and upstream instance (a union's group has
    /// the lanes of every input edge, in edge order).
    pub(crate) upstream: Vec<(usize, usize)>,
    pub(crate) consumers: Vec<ConsumerLane>,
    /// The newest recovery point's chunk and positions (also in `inner`).
    pub(crate) point_seq: AtomicU64,
    /// When the newest recovery point was published (the group's start
    /// before the first), on [`crate::sys::clock::monotonic_ns`]: its age
    /// is the standby's lag in time.
    pub(crate) point_at: AtomicU64,
    /// A warm standby follows the recovery points
    /// ([`crate::state::delta`]); under process isolation its child
    /// applies them.
    pub(crate) follows: bool,
    /// The point (its chunk) the standby's followed copy of the chain's
    /// state is at (0: none): the primary's next point may be a delta
    /// over it.
    pub(crate) applied: AtomicU64,
    /// The point (its chunk) the following standby is bringing its copy
    /// to (0: none): the primary's next point may be a delta over it, and
    /// is taken after it is reached (unless a queue needs one now) — a
    /// standby bringing a large state up to date is not handed a whole
    /// point again before it is done.
    pub(crate) following_to: AtomicU64,
    /// The base of the point the primary is building (0: none, or whole):
    /// a standby at that base waits for it rather than move to an older
    /// point the delta could no longer apply over. These three are
    /// written and read under the group's lock.
    pub(crate) base_in_flight: AtomicU64,
    /// The chunk the current primary's stream starts at (a consumer still
    /// reading an older stream keeps the counts from here on).
    pub(crate) start_seq: AtomicU64,
    point_pos: Vec<AtomicU64>,
    /// Per lane: the position of its end-of-input entry (`u64::MAX`: not
    /// written yet).
    pub(crate) end_pos: Vec<AtomicU64>,
    /// The chain keeps no state (known once `stateless_known`).
    pub(crate) stateless: AtomicBool,
    /// `stateless` is known: a primary's chain was built (the first
    /// primary's, or — when its child died while it was built — its
    /// successor's).
    pub(crate) stateless_known: AtomicBool,
    /// A queue writer found its queue full of entries no point covers: the
    /// primary takes one at once.
    pub(crate) point_wanted: AtomicBool,
    /// Workers the queue writers wake: the primary's and a hot standby's.
    pub(crate) reader_workers: [AtomicUsize; 2],
    /// The current primary's reader slot in the queues.
    pub(crate) primary_slot: AtomicUsize,
    /// The current primary's task (its worker's task-poll marks name it).
    pub(crate) primary_task: AtomicU64,
    /// What the current primary is doing (a [`Doing`] code; evidence for a
    /// stall verdict).
    pub(crate) doing: AtomicU32,
    /// The current primary's progress: its epoch (low 24 bits) above the
    /// count of inputs it processed (low 40 bits); on its own cache line,
    /// written per input, read by the standby.
    pub(crate) progress: crossbeam_utils::CachePadded<AtomicU64>,
    /// The failure being reported, noted before the epoch is marked
    /// failed, and the record the last failed primary failed on.
    pub(crate) faults: Mutex<Faults>,
    /// The standby's worker (`NONE`: no standby).
    pub(crate) standby_worker: AtomicUsize,
    pub(crate) mode: StandbyMode,
    pub(crate) timeout_ns: u64,
    pub(crate) point_every: Duration,
    /// The interval while a standby follows the points (see `follows`).
    pub(crate) delta_every: Duration,
    pub(crate) workers: usize,
    dir: PathBuf,
    pub(crate) inner: Mutex<Inner>,
    pub(crate) queue_peak: AtomicU64,
    pub(crate) snapshots: AtomicU64,
    /// Of those, deltas over the point the following standby was at.
    pub(crate) delta_snapshots: AtomicU64,
    /// Points the following standby brought its copy to, and of those
    /// the whole ones it rebuilt it from.
    pub(crate) followed: AtomicU64,
    pub(crate) followed_whole: AtomicU64,
    /// Times a hot standby of the group fell behind its primary and let
    /// go of its state (warm until it starts again).
    pub(crate) hot_fell_behind: AtomicU64,
    /// Its first standby runs on a worker the job's own tasks leave idle.
    pub(crate) standby_on_idle: bool,
    /// The workers the job's own tasks leave idle (where hot standbys go,
    /// [`standby_worker`]).
    pub(crate) idle_workers: Vec<usize>,
    /// The primary's end marker is in every ring: nothing is owed.
    pub(crate) done: AtomicBool,
    /// A new primary is replaying what its predecessor had processed (set
    /// at the claim, cleared once it caught up with the queues).
    pub(crate) replaying: AtomicBool,
    /// Standbys kept failing ([`failures::MAX_STANDBY_FAILURES`]): none is started
    /// any more, and a failure of the primary is restart-all.
    pub(crate) standbys_gone: AtomicBool,
    /// The group failed its attempt because a failed primary had no
    /// standby left (see `failures`).
    pub(crate) gave_up: AtomicBool,
}

/// No worker.
pub(crate) const NONE: usize = usize::MAX;

/// Slot bytes of a group's first snapshot exchange.
const FIRST_EXCHANGE: usize = 64 << 10;

/// What a primary is doing, as it tells its standby (evidence only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Doing {
    Between = 0,
    Snapshot = 1,
    Publishing = 2,
    Choosing = 3,
    Copying = 4,
    Operator = 5,
    Ending = 6,
    Restoring = 7,
}

impl Doing {
    pub(crate) fn name(code: u32) -> &'static str {
        match code {
            0 => "between steps",
            1 => "taking a snapshot",
            2 => "publishing a recovery point",
            3 => "choosing a chunk",
            4 => "copying a chunk out of its queue",
            5 => "in the operator",
            6 => "ending",
            7 => "restoring",
            _ => "?",
        }
    }
}

impl Group {
    /// Bytes of the files a group with `lanes` queued input lanes creates
    /// at once: a buffer queue per lane, the determinant log, and the first
    /// snapshot exchange a stateful primary makes (a state whose archive
    /// outgrows it gets a larger one, six times the archive, while it
    /// runs). A group that replays a source has no queue and a log of one
    /// queue's slots.
    pub(crate) fn files_len(
        lanes: usize,
        cfg: &StandbyConfig,
    ) -> Result<u64, crate::standby::bq::BqError> {
        let q = Self::queue_config(cfg)?;
        let queues = q.file_len().saturating_mul(lanes as u64);
        let log = crate::standby::detlog::file_len(q.slots.saturating_mul(lanes.max(1) as u64));
        let exchange = SnapshotExchange::file_len(FIRST_EXCHANGE);
        // The liveness cell's file takes a page.
        Ok(queues
            .saturating_add(log)
            .saturating_add(exchange)
            .saturating_add(4096))
    }

    /// Bytes of one input lane's buffer queue file.
    pub(crate) fn queue_file_len(cfg: &StandbyConfig) -> Result<u64, crate::standby::bq::BqError> {
        Ok(Self::queue_config(cfg)?.file_len())
    }

    fn queue_config(cfg: &StandbyConfig) -> Result<BqConfig, crate::standby::bq::BqError> {
        BqConfig::for_memory(cfg.queue_memory.max(64 << 10), 64, MAX_READERS as u32)
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn create(
        node: usize,
        instance: usize,
        name: Arc<str>,
        upstream: Vec<(usize, usize)>,
        consumers: Vec<(usize, usize, usize, usize)>,
        primary_worker: usize,
        standby_worker: usize,
        workers: usize,
        cfg: &StandbyConfig,
        dir: &Path,
        now: Nanos,
        source: Option<(usize, u64)>,
    ) -> Result<Self, crate::standby::bq::BqError> {
        let qcfg = Self::queue_config(cfg)?;
        let live = LivenessFile::create(dir.join(format!("{name}-{instance}.live")), now.max(1))?;
        let mut queues = Vec::with_capacity(upstream.len());
        // A replayed source's lane has no queue.
        for &(e, u) in upstream.iter().filter(|_| source.is_none()) {
            let q =
                BufferQueue::create(dir.join(format!("{name}-{instance}-from-{e}-{u}.bq")), qcfg)?;
            for r in 0..MAX_READERS {
                q.release(r);
            }
            queues.push(q);
        }
        let lanes = upstream.len();
        // Every log entry consumes at least one queue position, and both
        // are kept from the newest point on: the log never fills first. A
        // replayed source's log may (it then asks for a point, as a full
        // queue does): one queue's worth of entries, each up to a chunk.
        let log = DetLog::create(
            dir.join(format!("{name}-{instance}.log")),
            lanes as u32,
            if source.is_some() {
                qcfg.slots
            } else {
                queues.iter().map(|q| q.config().slots).sum::<u64>()
            },
        )?;
        // Where the input starts: a restored source's position.
        let start = source.map_or(0, |(_, at)| at);
        let mut owners = [None; MAX_READERS];
        owners[0] = Some(0);
        owners[1] = Some(1);
        Ok(Group {
            node,
            instance,
            live,
            consumers: consumers
                .into_iter()
                .map(|(edge, node, instance, worker)| ConsumerLane {
                    edge,
                    node,
                    instance,
                    worker,
                    acked: (0..lanes).map(|_| AtomicU64::new(0)).collect(),
                    acked_seq: AtomicU64::new(0),
                    ended: Arc::new(AtomicBool::new(false)),
                })
                .collect(),
            point_seq: AtomicU64::new(0),
            point_at: AtomicU64::new(crate::sys::clock::monotonic_ns()),
            follows: cfg.follow && cfg.mode == StandbyMode::Warm,
            applied: AtomicU64::new(0),
            following_to: AtomicU64::new(0),
            base_in_flight: AtomicU64::new(0),
            start_seq: AtomicU64::new(0),
            point_pos: (0..lanes).map(|_| AtomicU64::new(start)).collect(),
            end_pos: (0..lanes).map(|_| AtomicU64::new(u64::MAX)).collect(),
            stateless: AtomicBool::new(false),
            stateless_known: AtomicBool::new(false),
            point_wanted: AtomicBool::new(false),
            reader_workers: [
                AtomicUsize::new(primary_worker),
                AtomicUsize::new(if cfg.mode == StandbyMode::Hot {
                    standby_worker
                } else {
                    NONE
                }),
            ],
            primary_slot: AtomicUsize::new(0),
            primary_task: AtomicU64::new(0),
            progress: Default::default(),
            doing: AtomicU32::new(Doing::Between as u32),
            faults: Mutex::new(Faults::default()),
            standby_worker: AtomicUsize::new(standby_worker),
            mode: cfg.mode,
            timeout_ns: (cfg.heartbeat_timeout.as_nanos() as u64).max(1),
            point_every: cfg.snapshot_interval,
            delta_every: cfg.delta_interval,
            workers,
            dir: dir.to_path_buf(),
            inner: Mutex::new(Inner {
                primary: 0,
                primary_epoch: 1,
                primary_worker,
                primary_slot: 0,
                // Once the first primary has built its chain.
                ready: false,
                standby: Some(StandbyRole {
                    inc: 1,
                    worker: standby_worker,
                    slot: 1,
                }),
                want_standby: false,
                next_incarnation: 2,
                owners,
                rings: HashMap::new(),
                point: Point {
                    seq: 0,
                    base: 0,
                    pos: vec![start; lanes],
                    xseq: 0,
                    align: Alignment::new(lanes),
                    clock: crate::runtime::lanes::LaneClock::new(lanes),
                },
                exchange: None,
                spare: None,
                exchanges_made: 0,
                takeover: None,
                standby_failures: 0,
            }),
            done: AtomicBool::new(false),
            replaying: AtomicBool::new(false),
            standbys_gone: AtomicBool::new(false),
            gave_up: AtomicBool::new(false),
            typed: queues.iter().map(|_| Default::default()).collect(),
            encoded: cfg.encoded_queues,
            queues,
            log,
            upstream,
            chain: vec![node],
            chain_names: vec![Arc::clone(&name)],
            source: source.map(|(s, _)| s),
            queue_peak: AtomicU64::new(0),
            snapshots: AtomicU64::new(0),
            delta_snapshots: AtomicU64::new(0),
            followed: AtomicU64::new(0),
            followed_whole: AtomicU64::new(0),
            hot_fell_behind: AtomicU64::new(0),
            standby_on_idle: false,
            idle_workers: Vec::new(),
            name,
        })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn lanes(&self) -> usize {
        self.upstream.len()
    }

    /// The typed slots of lane `lane`'s queue (`None`: records are encoded,
    /// or the lane has no queue).
    pub(crate) fn typed_slots<T: crate::Data + Sync>(
        &self,
        lane: usize,
    ) -> Option<Arc<super::slots::TypedSlots<T>>> {
        if self.encoded {
            return None;
        }
        let q = self.queues.get(lane)?;
        let any = self.typed[lane]
            .get_or_init(|| Arc::new(super::slots::TypedSlots::<T>::new(q.config().slots)));
        Some(
            Arc::clone(any)
                .downcast::<super::slots::TypedSlots<T>>()
                .expect("engine bug: a group's typed slots of another type"),
        )
    }

    /// The operators the group runs: the replayed source (if any), then
    /// the chain.
    pub(crate) fn members(&self) -> Vec<usize> {
        self.source.iter().chain(&self.chain).copied().collect()
    }

    /// The end-of-run check (see the module docs): every consumer received
    /// the end, and acknowledged every input of every lane.
    pub(crate) fn check_complete(&self, names: &[Arc<str>]) -> Result<(), JobError> {
        for c in &self.consumers {
            let ended = c.ended.load(Ordering::Acquire);
            for (l, a) in c.acked.iter().enumerate() {
                let end = self.end_pos[l].load(Ordering::Acquire);
                let produced = match (end, self.queues.get(l)) {
                    (u64::MAX, q) => q.map_or(0, |q| q.tail()),
                    // A replayed source's end takes no position.
                    (end, None) => end,
                    (end, Some(_)) => end + 1,
                };
                let accepted = a.load(Ordering::Acquire);
                if !ended || end == u64::MAX || accepted != produced {
                    return Err(JobError::StandbyIncomplete {
                        operator: self.name.to_string(),
                        instance: self.instance,
                        lane: l,
                        upstream: self.upstream[l].1,
                        consumer: format!(
                            "{}[{}]",
                            names.get(c.node).map_or("?", |n| &**n),
                            c.instance
                        ),
                        accepted,
                        produced,
                        ended,
                    });
                }
            }
        }
        Ok(())
    }

    /// Bytes the buffer queues hold now; raises the recorded peak.
    pub(crate) fn note_queue_bytes(&self) {
        self.queue_peak
            .fetch_max(self.queue_bytes(), Ordering::Relaxed);
    }

    /// Bytes the buffer queues hold now.
    pub(crate) fn queue_bytes(&self) -> u64 {
        self.queues
            .iter()
            .map(|q| q.arena_used() + 32 * (q.tail() - q.head()))
            .sum()
    }

    /// Inputs the buffer queues hold now.
    pub(crate) fn queue_entries(&self) -> u64 {
        self.queues.iter().map(|q| q.tail() - q.head()).sum()
    }

    /// Inputs past the newest recovery point, over the lanes: a queue's
    /// written entries, or — for a chain that replays its source — the
    /// source's position `source_position` (what its instance published).
    pub(crate) fn lag_records(&self, source_position: u64) -> u64 {
        if self.source.is_some() {
            return source_position.saturating_sub(self.covered(0));
        }
        self.queues
            .iter()
            .enumerate()
            .map(|(l, q)| q.tail().saturating_sub(self.covered(l)))
            .sum()
    }

    /// Where the group stands (for a diagnostic dump).
    pub(crate) fn debug_state(&self) -> String {
        let g = self.lock();
        format!(
            "done {} epoch {} failed {} primary inc {} epoch {} worker {} ready {} standby {:?} want {} owners {:?} point seq {} standby failures {}",
                        self.done.load(Ordering::Acquire),
            self.live.current(),
            self.live.failed(),
            g.primary,
            g.primary_epoch,
            g.primary_worker,
            g.ready,
            g.standby,
            g.want_standby,
            g.owners,
            g.point.seq,
            g.standby_failures
        )
    }

    /// Removes the group's files (the attempt removes its whole directory;
    /// tests make groups of their own).
    #[cfg(test)]
    pub(crate) fn remove_files(&self) {
        for q in &self.queues {
            let _ = std::fs::remove_file(q.path());
        }
        let _ = std::fs::remove_file(self.log.path());
        let _ = std::fs::remove_file(self.live.path());
        let g = self.lock();
        for x in g.exchange.iter().chain(&g.spare) {
            let _ = std::fs::remove_file(x.path());
        }
    }
}

#[cfg(test)]
mod tests;
