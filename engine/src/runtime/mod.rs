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

pub(crate) mod align;
mod background;
pub(crate) mod chain;
pub(crate) mod channel;
pub(crate) mod config;
pub(crate) mod coord;
pub(crate) mod dead_letter;
pub(crate) mod graph;
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
mod worker;

use crate::error::{JobError, RuntimeError};
use crate::metrics::{JobMetrics, JobReport, OperatorStats, Progress};
use crate::record::{Nanos, TupleId};
use crate::runtime::graph::{AnySend, Graph, NodeKind, Partitioning};
use channel::WorkerSignal;
use coord::{Event, Restore, SinkTally};
use crossbeam_utils::CachePadded;
use placement::{EdgeShape, NodeShape, Plan};
use std::collections::HashMap;
use std::path::PathBuf;
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
}

/// What every thread of one attempt of a job shares.
pub(crate) struct JobShared {
    pub(crate) origin: crate::sys::clock::Origin,
    pub(crate) panic_output: panic::PanicOutput,
    pub(crate) names: Vec<Arc<str>>,
    pub(crate) metrics: Arc<JobMetrics>,
    pub(crate) dead_letters: Arc<dead_letter::DeadLetters>,
    /// 0 for the first run, one more per restart.
    pub(crate) attempt: u32,
    cancel: AtomicBool,
    error: Mutex<Option<JobError>>,
    /// Engine clock when the attempt failed (0: it has not).
    pub(crate) failed_at: AtomicU64,
    fault_tuple: Mutex<Option<TupleId>>,
    stalls: Mutex<Vec<StallNote>>,
    pub(crate) signals: Vec<Arc<WorkerSignal>>,
    /// Engine clock when the last worker finished.
    pub(crate) finished_at: AtomicU64,
    /// To the supervisor.
    pub(crate) events: mpsc::Sender<Event>,
    /// The newest checkpoint sources are asked to inject (0: none yet).
    pub(crate) trigger: AtomicU64,
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

    pub(crate) fn note_fault_tuple(&self, t: Option<TupleId>) {
        if t.is_some() {
            let mut g = self.fault_tuple.lock().unwrap_or_else(|p| p.into_inner());
            if g.is_none() {
                *g = t;
            }
        }
    }

    pub(crate) fn fault_tuple(&self) -> Option<TupleId> {
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

/// Ring ends waiting to be taken by the workers that use them, keyed by
/// `(edge, producer instance, consumer instance)`.
type RingEnds = Mutex<HashMap<(usize, usize, usize), AnySend>>;

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
        attempt: 0,
        cancel: AtomicBool::new(true),
        error: Mutex::new(None),
        failed_at: AtomicU64::new(0),
        fault_tuple: Mutex::new(None),
        stalls: Mutex::new(Vec::new()),
        signals: Vec::new(),
        finished_at: AtomicU64::new(0),
        events: tx.clone(),
        trigger: AtomicU64::new(0),
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

/// Everything a worker needs to build its tasks.
pub(crate) struct Wiring {
    pub(crate) graph: Arc<Graph>,
    pub(crate) plan: Plan,
    pub(crate) shared: Arc<JobShared>,
    pub(crate) producers: RingEnds,
    pub(crate) consumers: RingEnds,
    pub(crate) signals: Vec<Arc<WorkerSignal>>,
    pub(crate) config: RuntimeConfig,
    /// What a role beyond the core's builds into the workers' tasks (the
    /// standby groups of the attempt, if any).
    pub(crate) roles: Option<Arc<dyn worker::wire::WireRoles>>,
}

impl Wiring {
    /// The partitioning an edge really has: forward between operators of
    /// different parallelism degrades to rebalance.
    pub(crate) fn partitioning(&self, edge: usize) -> Partitioning {
        partitioning(&self.graph, edge)
    }

    /// The `(producer, consumer)` instance pairs that have a ring on `edge`.
    pub(crate) fn lanes(&self, edge: usize) -> Vec<(usize, usize)> {
        lanes(&self.graph, edge)
    }

    /// The worker that runs instance `instance` of `node`.
    pub(crate) fn worker_of(&self, node: usize, instance: usize) -> usize {
        let t = self
            .plan
            .task_of(node, instance)
            .expect("engine bug: node instance without a task");
        self.plan.worker_of_task[t]
    }
}

fn partitioning(graph: &Graph, edge: usize) -> Partitioning {
    let e = &graph.edges[edge];
    let (pf, pt) = (
        graph.nodes[e.from].parallelism,
        graph.nodes[e.to].parallelism,
    );
    match &e.partitioning {
        Partitioning::Forward if pf != pt => Partitioning::Rebalance,
        p => p.clone(),
    }
}

/// Refuses a job whose rings between tasks — allocated whole when each
/// attempt starts: a parallelism of `p` on both sides of a key-partitioned
/// edge makes `p²` of them — would not fit the memory this process may
/// still take (half of it: the records, state and the rest need room too).
/// Checked before placement, which chains some forward edges (a ring
/// fewer each): an upper bound.
fn check_ring_memory(graph: &Graph, config: &RuntimeConfig) -> Result<(), JobError> {
    let Some(available) = crate::sys::limits::available_memory() else {
        return Ok(());
    };
    let mut needed = 0u64;
    let mut rings = 0u64;
    for (ei, e) in graph.edges.iter().enumerate() {
        let Some(kit) = graph.nodes[e.from].out.as_ref() else {
            continue;
        };
        let n = lane_count(graph, ei);
        rings = rings.saturating_add(n);
        needed = needed.saturating_add(n.saturating_mul(kit.ring_bytes(config.ring_capacity)));
    }
    if needed > available / 2 {
        return Err(RuntimeError::InsufficientMemory {
            what: format!(
                "the {rings} rings between this job's tasks ({} slots each)",
                config.ring_capacity
            ),
            needed,
            available,
            hint: "lower the parallelism or the ring capacity".into(),
        }
        .into());
    }
    Ok(())
}

/// What [`RuntimeConfig::restore_from`]`(path)` would start from: the
/// checkpoint's manifest (a savepoint directory's, a manifest file's, or
/// the newest valid checkpoint of a checkpoint directory), and the newer
/// checkpoints passed over with why. For checks before a job starts, such
/// as whether its sources can reach the positions the manifest holds
/// ([`crate::checkpoint::FileEntry::positions`]).
pub fn restore_point(
    path: &std::path::Path,
) -> Result<(crate::checkpoint::Manifest, Vec<String>), JobError> {
    supervisor::load_restore_point(path)
}

/// How many lanes [`lanes`] lists for `edge`, without listing them.
fn lane_count(graph: &Graph, edge: usize) -> u64 {
    let e = &graph.edges[edge];
    let (pf, pt) = (
        graph.nodes[e.from].parallelism as u64,
        graph.nodes[e.to].parallelism as u64,
    );
    if partitioning(graph, edge).is_forward() {
        pf
    } else {
        pf.saturating_mul(pt)
    }
}

fn lanes(graph: &Graph, edge: usize) -> Vec<(usize, usize)> {
    let e = &graph.edges[edge];
    let (pf, pt) = (
        graph.nodes[e.from].parallelism,
        graph.nodes[e.to].parallelism,
    );
    if partitioning(graph, edge).is_forward() {
        (0..pf).map(|i| (i, i)).collect()
    } else {
        (0..pf).flat_map(|u| (0..pt).map(move |d| (u, d))).collect()
    }
}

/// The shapes placement needs, read off a graph.
/// With `standby`, operators marked for one head (or join) backed-up chains
/// (and, with `replay_sources`, take the source before them in as their
/// queue).
pub(crate) fn shapes(
    graph: &Graph,
    standby: bool,
    replay_sources: bool,
) -> (Vec<NodeShape>, Vec<EdgeShape>) {
    let mut inputs = vec![0; graph.nodes.len()];
    for e in &graph.edges {
        inputs[e.to] += 1;
    }
    let nodes = graph
        .nodes
        .iter()
        .zip(&inputs)
        .map(|(n, &i)| NodeShape {
            parallelism: n.parallelism,
            inputs: i,
            binary: matches!(n.kind, NodeKind::Binary(_)),
            standby: standby && n.standby.is_some(),
            sink: matches!(n.kind, NodeKind::Sink(_)),
            // A source with watermarks is not replayed in place (its
            // idleness is a matter of time, not of its records): its
            // chain's queue holds them.
            source: standby
                && replay_sources
                && matches!(
                    n.kind,
                    NodeKind::Source {
                        watermarks: None,
                        ..
                    }
                ),
        })
        .collect();
    let edges = graph
        .edges
        .iter()
        .map(|e| EdgeShape {
            from: e.from,
            to: e.to,
            port: e.port,
            forward: e.partitioning.is_forward(),
        })
        .collect();
    (nodes, edges)
}

/// A running job.
pub struct JobHandle {
    supervisor: Option<std::thread::JoinHandle<Result<JobReport, JobError>>>,
    events: mpsc::Sender<Event>,
    metrics: Arc<JobMetrics>,
    graph: Arc<Graph>,
}

/// Starts `graph` on worker threads (see [`crate::Job::start`]).
pub(crate) fn start(graph: Arc<Graph>, config: &RuntimeConfig) -> Result<JobHandle, JobError> {
    let cores = crate::sys::affinity::available_cores();
    let requested = config.cores.unwrap_or(cores.len());
    if requested == 0 {
        return Err(RuntimeError::ZeroCores.into());
    }
    if requested > cores.len() {
        return Err(RuntimeError::InsufficientCpus {
            required: requested,
            available: cores.len(),
        }
        .into());
    }
    panic::install_hook();
    check_ring_memory(&graph, config)?;
    let (ns, es) = shapes(
        &graph,
        config.standby.is_some(),
        config.standby.as_ref().is_some_and(|s| s.replay_sources),
    );
    let plan = placement::place(&ns, &es, requested, config.chaining);
    let (sup, handle_parts) = supervisor::Supervisor::new(
        Arc::clone(&graph),
        plan,
        config.clone(),
        cores[..requested.min(cores.len())].to_vec(),
    )?;
    let (events, metrics) = handle_parts;
    let supervisor = std::thread::Builder::new()
        .name("tandem-supervisor".into())
        .spawn(move || sup.run())
        .map_err(|source| RuntimeError::Spawn {
            worker: usize::MAX,
            source,
        })?;
    Ok(JobHandle {
        supervisor: Some(supervisor),
        events,
        metrics,
        graph,
    })
}

impl JobHandle {
    /// Counts published by the operators so far.
    pub fn progress(&self) -> Progress {
        Progress {
            operators: self.stats(),
            dead_letters: self.metrics.dead_letters.load(Ordering::Relaxed),
        }
    }

    fn stats(&self) -> Vec<OperatorStats> {
        operator_stats(&self.graph, &self.metrics)
    }

    /// Checkpoints, recoveries and standbys so far (see [`JobWatch::status`]).
    pub fn status(&self) -> crate::JobStatus {
        self.metrics.status()
    }

    /// End-to-end latency so far (see [`JobWatch::latency`]; without a
    /// live watch, the sinks publish theirs only when they end).
    pub fn latency(&self) -> crate::LatencyHistogram {
        self.metrics.latency()
    }

    /// A read-only view of the running job that other threads may keep
    /// (a metrics exporter, an interval log): it reads what the job
    /// publishes anyway and touches no data path.
    pub fn watch(&self) -> JobWatch {
        JobWatch {
            _watching: Arc::new(Watching::new(&self.metrics)),
            metrics: Arc::clone(&self.metrics),
            graph: Arc::clone(&self.graph),
        }
    }

    /// Whether the job has ended (completed, failed or cancelled).
    pub fn is_finished(&self) -> bool {
        self.supervisor.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Asks the job to stop; [`JobHandle::join`] then returns
    /// [`JobError::Cancelled`].
    pub fn cancel(&self) {
        let _ = self.events.send(Event::Cancel);
    }

    /// Takes a savepoint now (a checkpoint that retention never deletes,
    /// in `<checkpoint dir>/sp-<id>/`) and returns its directory once it is
    /// durable. Needs checkpointing to be configured. A job that ends
    /// (completes, fails or is cancelled) before a savepoint is durable
    /// answers [`JobError::EndedBeforeSavepoint`]; one that lands as the
    /// job ends is returned.
    pub fn savepoint(&self) -> Result<PathBuf, JobError> {
        let (reply, rx) = mpsc::channel();
        self.events
            .send(Event::Savepoint { reply })
            .map_err(|_| JobError::EndedBeforeSavepoint)?;
        rx.recv().map_err(|_| JobError::EndedBeforeSavepoint)?
    }

    /// Waits for the job to end.
    pub fn join(mut self) -> Result<JobReport, JobError> {
        match self.supervisor.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(p)) => Err(JobError::WorkerDied {
                worker: usize::MAX,
                message: format!("supervisor: {}", panic::panic_message(p.as_ref())),
            }),
            None => Err(JobError::Cancelled),
        }
    }
}

/// What a running job publishes, readable from any thread
/// ([`JobHandle::watch`]); it outlives the job, keeping its last figures.
#[derive(Clone)]
pub struct JobWatch {
    /// Counts this watch (and its clones) in `metrics.watchers`.
    _watching: Arc<Watching>,
    metrics: Arc<JobMetrics>,
    graph: Arc<Graph>,
}

/// While it lives, the sinks publish their latency every 10 ms.
struct Watching(Arc<JobMetrics>);

impl Watching {
    fn new(m: &Arc<JobMetrics>) -> Self {
        m.watchers.fetch_add(1, Ordering::Relaxed);
        Watching(Arc::clone(m))
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        self.0.watchers.fetch_sub(1, Ordering::Relaxed);
    }
}

impl JobWatch {
    /// The job's name.
    pub fn job_name(&self) -> &str {
        &self.graph.name
    }

    /// Time since the job started: the engine clock, which recovery
    /// records' `fault_at_us` are on.
    pub fn elapsed(&self) -> std::time::Duration {
        self.metrics.origin.elapsed()
    }

    /// Counts published by the operators so far.
    pub fn progress(&self) -> Progress {
        Progress {
            operators: operator_stats(&self.graph, &self.metrics),
            dead_letters: self.metrics.dead_letters.load(Ordering::Relaxed),
        }
    }

    /// Checkpoints, recoveries and standbys so far, as the supervisor last
    /// published them (every 10 ms).
    pub fn status(&self) -> crate::JobStatus {
        self.metrics.status()
    }

    /// End-to-end latency measured so far, over all sinks: while a watch
    /// exists and records flow, each sink merges what it measured every
    /// 10 ms (and the rest when it ends), so this lags by about that.
    /// Subtract an earlier copy for an interval
    /// ([`crate::LatencyHistogram::since`]).
    pub fn latency(&self) -> crate::LatencyHistogram {
        self.metrics.latency()
    }
}

impl Drop for JobHandle {
    fn drop(&mut self) {
        if let Some(t) = self.supervisor.take() {
            let _ = self.events.send(Event::Cancel);
            let _ = t.join();
        }
    }
}

pub(crate) fn operator_stats(graph: &Graph, metrics: &JobMetrics) -> Vec<OperatorStats> {
    graph
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let (records, emitted) = metrics.node_totals(i);
            OperatorStats {
                name: n.name.to_string(),
                parallelism: n.parallelism,
                records,
                emitted,
                source: matches!(n.kind, crate::runtime::graph::NodeKind::Source { .. }),
            }
        })
        .collect()
}
