//! The runtime: one pinned worker thread per core, each polling the tasks
//! placed on it; rings between tasks; supervision of panics and failures.
//!
//! Life of a job:
//! 1. [`placement`] decides which operators chain into tasks and which worker
//!    runs each task (a pure function of graph shape and core count).
//! 2. Every ring is allocated up front on the calling thread (one per
//!    producer/consumer instance pair of each unchained edge).
//! 3. One thread per worker starts, pins itself, takes its ring ends and
//!    *builds its own tasks* — operator instances are created on the core
//!    that runs them and never move.
//! 4. Workers poll their tasks round robin. A worker with nothing to do spins
//!    briefly, then yields, then parks; producers wake a parked worker when
//!    they publish into one of its rings (`channel::WorkerSignal`).
//! 5. End-of-stream flows through the rings as an `End` message; a task is
//!    done when all its inputs ended and its outputs are flushed; a worker
//!    exits when its tasks are done.
//!
//! A panic in operator code is caught at the task boundary, attributed to
//! the operator that was running (the task context tracks it), and fails
//! the *attempt* with [`JobError::OperatorPanicked`] — never a process
//! abort. A supervisor thread (`runtime/supervisor.rs`) watches every attempt: it
//! runs the checkpoint coordinator (barriers, acknowledgements, durable
//! snapshots, sink commits), detects stalls by heartbeat, and on a failure
//! stops every worker, restores the last complete checkpoint and starts
//! the next attempt — or ends the job, as the [`crate::RestartStrategy`] decides.
//!
//! This file holds what every part of an attempt shares (`JobShared`: the
//! names, counters, heartbeats, task-poll marks, the error, the standby
//! run); a running job's handle and watch are `handle.rs`'s, what a worker
//! builds its tasks from is `wiring.rs`'s. The modules' order is in
//! `lib.rs` ("Layers inside `runtime/`").

pub(crate) mod align;
mod background;
pub(crate) mod chain;
pub(crate) mod channel;
pub(crate) mod config;
pub(crate) mod coord;
pub(crate) mod dead_letter;
pub(crate) mod graph;
mod handle;
pub(crate) mod kit;
pub(crate) mod lanes;
pub mod panic;
pub mod placement;
pub mod probe;
pub(crate) mod signal;
pub(crate) mod source;
pub(crate) mod standby;
mod supervisor;
pub(crate) mod task;
pub(crate) mod wiring;
mod worker;

use crate::error::JobError;
use crate::metrics::JobMetrics;
use crate::record::{Nanos, TupleId};
use coord::{Event, Restore, SinkTally};
use crossbeam_utils::CachePadded;
use signal::WorkerSignal;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

pub use config::{CheckpointConfig, CheckpointMode, Replicate, RuntimeConfig};
pub use dead_letter::json_str;

/// Where and when a stall began (written by a stalling probe).
#[derive(Clone, Copy, Debug)]
pub(crate) struct StallNote {
    pub(crate) op: usize,
    pub(crate) instance: usize,
    pub(crate) tuple: TupleId,
    /// The worker it stalls.
    pub(crate) worker: usize,
    /// Engine nanoseconds when it began, and when it ends.
    pub(crate) at: Nanos,
    pub(crate) until: Nanos,
    /// A takeover was attributed to it.
    pub(crate) taken: bool,
}

/// A worker's task-poll marks (written around every task poll; read by a
/// standby judging a silent primary on this worker).
#[derive(Debug, Default)]
pub(crate) struct WorkerLive {
    /// The key of the task being polled (0: none).
    pub(crate) polling: AtomicU64,
    /// Engine nanoseconds when that poll began (when none: when the last
    /// one ended, or the worker last went round its loop).
    pub(crate) since: AtomicU64,
    /// The worker thread's kernel id (0: not started).
    pub(crate) tid: std::sync::atomic::AtomicI32,
    /// Engine nanoseconds until which the worker publishes no heartbeat
    /// (an injected [`probe::ProbeAction::MuteHeartbeat`]; 0: never muted).
    pub(crate) mute_until: AtomicU64,
    /// The operator whose code the polled task runs now, as
    /// `node << 32 | instance` (shared with the worker's task contexts,
    /// which mark it as they enter an operator): what a stall of the
    /// worker names.
    pub(crate) op: Arc<AtomicU64>,
}

/// [`WorkerLive::op`]'s mark of operator `node`'s instance `instance`.
#[inline]
pub(crate) fn op_mark(node: usize, instance: usize) -> u64 {
    ((node as u64) << 32) | (instance as u64 & 0xffff_ffff)
}

/// What every thread of one attempt of a job shares.
pub(crate) struct JobShared {
    pub(crate) origin: crate::sys::clock::Origin,
    pub(crate) panic_output: panic::PanicOutput,
    pub(crate) names: Vec<Arc<str>>,
    pub(crate) metrics: Arc<JobMetrics>,
    pub(crate) dead_letters: Arc<dead_letter::DeadLetters>,
    /// Where keyed state lives on disk (`None`: in memory).
    pub(crate) disk: Option<Arc<crate::state::disk::DiskPlace>>,
    /// 0 for the first run, one more per restart.
    pub(crate) attempt: u32,
    cancel: AtomicBool,
    error: Mutex<Option<JobError>>,
    /// Engine clock when the attempt failed (0: it has not).
    pub(crate) failed_at: AtomicU64,
    fault_tuple: Mutex<task::Blame>,
    stalls: Mutex<Vec<StallNote>>,
    pub(crate) signals: Vec<Arc<WorkerSignal>>,
    /// Engine clock when the last worker finished.
    pub(crate) finished_at: AtomicU64,
    /// To the supervisor.
    pub(crate) events: mpsc::Sender<Event>,
    /// The newest checkpoint sources are asked to inject (0: none yet).
    pub(crate) trigger: AtomicU64,
    /// The newest checkpoint of the store known complete (0: none), which
    /// a state's next checkpoint may be a delta over.
    pub(crate) completed: AtomicU64,
    /// A savepoint in flight (its states are whole; 0: none).
    pub(crate) whole_at: AtomicU64,
    /// Incremental checkpoints' bounds (`None`: every checkpoint whole).
    pub(crate) incremental: Option<crate::state::delta::Incremental>,
    pub(crate) exactly_once: bool,
    /// The checkpoint this attempt restores.
    pub(crate) restore: Option<Arc<Restore>>,
    /// Per worker: engine clock of its last sign of life (0: building).
    pub(crate) beats: Vec<CachePadded<AtomicU64>>,
    /// Per worker, for standby stall detection: the engine clock when it
    /// last came out of a long synchronous operation (a snapshot, a
    /// restore, a build), `u64::MAX` while it is in one. A primary on that
    /// worker is stale only once the timeout has passed since both its
    /// last heartbeat and this.
    pub(crate) released_at: Vec<CachePadded<AtomicU64>>,
    /// Per worker: its task-poll marks.
    pub(crate) workers: Vec<CachePadded<WorkerLive>>,
    /// Task keys handed out (a task's key is never 0).
    pub(crate) next_key: AtomicU64,
    /// Per sink instance `(node, instance)`.
    pub(crate) sinks: HashMap<(usize, usize), Arc<SinkTally>>,
    /// The pacing schedule's start, shared by partitions and attempts.
    pub(crate) pacing_start: Arc<OnceLock<Nanos>>,
    /// The aligned source partitions' watermarks (see
    /// [`crate::time::Watermarks::max_drift`]).
    pub(crate) source_clocks: source::SourceClocks,
    /// Standby groups of this attempt (`None`: no operator has a standby).
    pub(crate) standby: Option<Arc<crate::runtime::standby::run::StandbyRun>>,
    /// The job's probes (fault injection), for the seams off the data path.
    pub(crate) probes: Option<Arc<dyn probe::ProbeFactory>>,
    /// The job's build fence, shared by all its attempts (see
    /// [`JobShared::build`]).
    pub(crate) build_fence: Arc<RwLock<()>>,
}

impl JobShared {
    pub(crate) fn fail(&self, e: JobError) {
        {
            let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
            if slot.is_none() {
                *slot = Some(e);
                let now = self.origin.elapsed_ns();
                let _ = self.failed_at.compare_exchange(
                    0,
                    now.max(1),
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                );
            }
        }
        self.cancel.store(true, Ordering::SeqCst);
        for s in &self.signals {
            s.wake();
        }
        self.send(Event::Failed {
            attempt: self.attempt,
        });
    }

    /// Whether worker `worker` publishes its heartbeats at `now` (it does
    /// unless a probe muted them).
    #[inline]
    pub(crate) fn beating(&self, worker: usize, now: Nanos) -> bool {
        self.workers
            .get(worker)
            .is_none_or(|w| w.mute_until.load(Ordering::Relaxed) <= now)
    }

    /// Mutes worker `worker`'s heartbeats until `until`.
    pub(crate) fn mute(&self, worker: usize, until: Nanos) {
        if let Some(w) = self.workers.get(worker) {
            w.mute_until.fetch_max(until, Ordering::Relaxed);
        }
    }

    pub(crate) fn take_error(&self) -> Option<JobError> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    pub(crate) fn has_error(&self) -> bool {
        self.error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    /// Stops the attempt's workers without an error (the supervisor ends
    /// it).
    pub(crate) fn stop(&self) {
        self.cancel.store(true, Ordering::SeqCst);
        for s in &self.signals {
            s.wake();
        }
    }

    #[inline]
    pub(crate) fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }

    /// Runs `build` (operator factories: user code, which may open files
    /// a sink's successor settles) unless the attempt is stopped; `None`
    /// if it is. The check and the build hold the fence's read side, and
    /// the supervisor takes the write side after stopping an attempt and
    /// before starting the next (or returning the job): a worker of a
    /// stopped attempt that was slow to start — abandoned, it cannot be
    /// joined — either finished its build before the next attempt began
    /// or never starts one. Without it, a late sink factory of a dead
    /// attempt settled the output directory after its successor had (the
    /// two-phase-commit sink's open deletes staged epochs past the
    /// checkpoint it restores), or ran after the job had returned.
    pub(crate) fn build<R>(&self, build: impl FnOnce() -> R) -> Option<R> {
        let _read = self.build_fence.read().unwrap_or_else(|p| p.into_inner());
        if self.cancel.load(Ordering::SeqCst) {
            return None;
        }
        Some(build())
    }

    pub(crate) fn send(&self, e: Event) {
        // Fails only once the supervisor is gone: nobody is listening.
        let _ = self.events.send(e);
    }

    /// The attempt's first failure was blamed on `b` (a later one's blame
    /// changes nothing).
    pub(crate) fn note_fault_tuple(&self, b: task::Blame) {
        if b.tuple.is_some() || b.injected {
            let mut g = self.fault_tuple.lock().unwrap_or_else(|p| p.into_inner());
            if g.tuple.is_none() && !g.injected {
                *g = b;
            }
        }
    }

    /// What the attempt's first failure was blamed on.
    pub(crate) fn fault_tuple(&self) -> task::Blame {
        *self.fault_tuple.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A probe stalls `(op, instance)` on `worker` from `at` for `d` on
    /// record `tuple`.
    pub(crate) fn note_stall(
        &self,
        op: usize,
        instance: usize,
        tuple: TupleId,
        worker: usize,
        at: Nanos,
        d: Duration,
    ) {
        let mut v = self.stalls.lock().unwrap_or_else(|p| p.into_inner());
        v.retain(|n| !n.taken && n.until.saturating_add(1_000_000_000) > at);
        v.push(StallNote {
            op,
            instance,
            tuple,
            worker,
            at,
            until: at.saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
            taken: false,
        });
    }

    /// The injected stall that explains a silence of `(op, instance)` that
    /// began at `silence` and was judged at `now`: one of its own that
    /// overlaps it, not attributed yet. It is attributed from now on.
    pub(crate) fn take_stall(
        &self,
        ops: &[usize],
        instance: usize,
        silence: Nanos,
        now: Nanos,
    ) -> Option<StallNote> {
        let mut v = self.stalls.lock().unwrap_or_else(|p| p.into_inner());
        let n = v.iter_mut().find(|n| {
            !n.taken
                && ops.contains(&n.op)
                && n.instance == instance
                && n.at <= now
                && n.until.saturating_add(1_000_000) >= silence
        })?;
        n.taken = true;
        Some(*n)
    }

    /// Asks worker `w` to build standby incarnation `inc` of `(node,
    /// instance)`.
    pub(crate) fn request_standby(&self, w: usize, node: usize, instance: usize, inc: u64) {
        if let Some(sb) = &self.standby {
            sb.inbox[w]
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((node, instance, inc));
            sb.pending[w].store(true, Ordering::Release);
            self.signals[w].wake();
        }
    }

    /// The newest injected stall.
    pub(crate) fn stall_note(&self) -> Option<StallNote> {
        self.stalls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .last()
            .copied()
    }
}

/// The shared state of an incarnation's child (process isolation): the
/// job's names and counters, one worker, no supervisor listening. The
/// child's chain reports through its replies, not through this.
pub(crate) fn child_shared(
    origin: crate::sys::clock::Origin,
    graph: &crate::runtime::graph::Graph,
) -> JobShared {
    let (tx, _rx) = mpsc::channel();
    let mut s = placeholder_shared(origin, &tx);
    s.names = graph.nodes.iter().map(|n| Arc::clone(&n.name)).collect();
    let par: Vec<usize> = graph.nodes.iter().map(|n| n.parallelism).collect();
    s.metrics = Arc::new(JobMetrics::new(&par));
    s.cancel = AtomicBool::new(false);
    s.beats = vec![Default::default()];
    s.released_at = vec![Default::default()];
    s.workers = vec![Default::default()];
    s
}

/// A stand-in for the attempt field before the first attempt starts.
pub(crate) fn placeholder_shared(
    origin: crate::sys::clock::Origin,
    tx: &mpsc::Sender<Event>,
) -> JobShared {
    JobShared {
        panic_output: Default::default(),
        origin,
        names: Vec::new(),
        metrics: Arc::new(JobMetrics::new(&[])),
        dead_letters: Arc::new(dead_letter::DeadLetters::new("", None)),
        disk: None,
        attempt: 0,
        cancel: AtomicBool::new(true),
        error: Mutex::new(None),
        failed_at: AtomicU64::new(0),
        fault_tuple: Mutex::new(task::Blame::default()),
        stalls: Mutex::new(Vec::new()),
        signals: Vec::new(),
        finished_at: AtomicU64::new(0),
        events: tx.clone(),
        trigger: AtomicU64::new(0),
        completed: AtomicU64::new(0),
        whole_at: AtomicU64::new(0),
        incremental: None,
        exactly_once: true,
        restore: None,
        beats: Vec::new(),
        released_at: Vec::new(),
        workers: Vec::new(),
        next_key: AtomicU64::new(0),
        sinks: HashMap::new(),
        pacing_start: Arc::new(OnceLock::new()),
        source_clocks: crate::runtime::source::SourceClocks::none(),
        standby: None,
        probes: None,
        build_fence: Arc::default(),
    }
}

pub(crate) use handle::{check_start, operator_stats, start};
pub use handle::{restore_point, JobHandle, JobWatch};
