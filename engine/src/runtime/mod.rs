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
//! the operator that was running (the task context tracks it), and ends the
//! job with [`JobError::OperatorPanicked`] — never a process abort.

pub(crate) mod channel;
pub(crate) mod dead_letter;
pub mod placement;
pub mod probe;
pub(crate) mod source;
pub(crate) mod task;
mod worker;

use crate::error::{JobError, RuntimeError};
use crate::job::graph::{AnySend, Graph, NodeKind, Partitioning};
use crate::job::Job;
use crate::metrics::{JobMetrics, JobReport, OperatorStats, Progress};
use channel::WorkerSignal;
use placement::{Chaining, EdgeShape, NodeShape, Plan};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use dead_letter::json_str;

/// How a job is run on this machine.
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
    /// Directory for files the run creates (dead letters); `None`: a fresh
    /// temporary directory, created only if needed.
    pub run_dir: Option<PathBuf>,
    /// How long an idle worker spins before yielding.
    pub spin: Duration,
    /// How long an idle worker yields before parking.
    pub yield_for: Duration,
    /// Longest a parked worker sleeps before re-checking.
    pub park_max: Duration,
    /// Per-record probes (fault injection); `None` for production runs.
    pub probes: Option<Arc<dyn probe::ProbeFactory>>,
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
}

/// What every thread of a running job shares.
pub(crate) struct JobShared {
    pub(crate) origin: Instant,
    pub(crate) names: Vec<Arc<str>>,
    pub(crate) metrics: JobMetrics,
    pub(crate) dead_letters: dead_letter::DeadLetters,
    cancel: AtomicBool,
    error: Mutex<Option<JobError>>,
    signals: Vec<Arc<WorkerSignal>>,
    /// Engine clock when the last worker finished.
    finished_at: AtomicU64,
}

impl JobShared {
    pub(crate) fn fail(&self, e: JobError) {
        {
            let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
            if slot.is_none() {
                *slot = Some(e);
            }
        }
        self.cancel.store(true, Ordering::SeqCst);
        for s in &self.signals {
            s.wake();
        }
    }

    #[inline]
    pub(crate) fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }
}

/// Ring ends waiting to be taken by the workers that use them, keyed by
/// `(edge, producer instance, consumer instance)`.
type RingEnds = Mutex<HashMap<(usize, usize, usize), AnySend>>;

/// Everything a worker needs to build its tasks.
pub(crate) struct Wiring {
    pub(crate) graph: Arc<Graph>,
    pub(crate) plan: Plan,
    pub(crate) shared: Arc<JobShared>,
    pub(crate) producers: RingEnds,
    pub(crate) consumers: RingEnds,
    pub(crate) signals: Vec<Arc<WorkerSignal>>,
    pub(crate) config: RuntimeConfig,
}

impl Wiring {
    /// The partitioning an edge really has: forward between operators of
    /// different parallelism degrades to rebalance.
    pub(crate) fn partitioning(&self, edge: usize) -> Partitioning {
        let e = &self.graph.edges[edge];
        let (pf, pt) = (
            self.graph.nodes[e.from].parallelism,
            self.graph.nodes[e.to].parallelism,
        );
        match &e.partitioning {
            Partitioning::Forward if pf != pt => Partitioning::Rebalance,
            p => p.clone(),
        }
    }

    /// The `(producer, consumer)` instance pairs that have a ring on `edge`.
    pub(crate) fn lanes(&self, edge: usize) -> Vec<(usize, usize)> {
        let e = &self.graph.edges[edge];
        let (pf, pt) = (
            self.graph.nodes[e.from].parallelism,
            self.graph.nodes[e.to].parallelism,
        );
        if self.partitioning(edge).is_forward() {
            (0..pf).map(|i| (i, i)).collect()
        } else {
            (0..pf).flat_map(|u| (0..pt).map(move |d| (u, d))).collect()
        }
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

/// The shapes placement needs, read off a graph.
pub(crate) fn shapes(graph: &Graph) -> (Vec<NodeShape>, Vec<EdgeShape>) {
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
    threads: Vec<std::thread::JoinHandle<()>>,
    shared: Arc<JobShared>,
    graph: Arc<Graph>,
    tasks: usize,
}

impl Job {
    /// Runs the job to completion on this thread's behalf.
    pub fn run(self, config: &RuntimeConfig) -> Result<JobReport, JobError> {
        self.start(config)?.join()
    }

    /// Starts the job on worker threads and returns at once.
    pub fn start(self, config: &RuntimeConfig) -> Result<JobHandle, JobError> {
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
        let graph = self.graph;
        let (ns, es) = shapes(&graph);
        let plan = placement::place(&ns, &es, requested, config.chaining);
        let signals: Vec<Arc<WorkerSignal>> = (0..plan.workers)
            .map(|_| Arc::new(WorkerSignal::default()))
            .collect();
        let shared = Arc::new(JobShared {
            origin: Instant::now(),
            names: graph.nodes.iter().map(|n| Arc::clone(&n.name)).collect(),
            metrics: JobMetrics::new(
                &graph
                    .nodes
                    .iter()
                    .map(|n| n.parallelism)
                    .collect::<Vec<_>>(),
            ),
            dead_letters: dead_letter::DeadLetters::new(&graph.name, config.run_dir.clone()),
            cancel: AtomicBool::new(false),
            error: Mutex::new(None),
            signals: signals.clone(),
            finished_at: AtomicU64::new(0),
        });
        let tasks = plan.tasks.len();
        let mut wiring = Wiring {
            graph: Arc::clone(&graph),
            plan,
            shared: Arc::clone(&shared),
            producers: Mutex::new(HashMap::new()),
            consumers: Mutex::new(HashMap::new()),
            signals,
            config: config.clone(),
        };
        {
            let mut prod = HashMap::new();
            let mut cons = HashMap::new();
            for (ei, e) in graph.edges.iter().enumerate() {
                if wiring.plan.chained[ei] {
                    continue;
                }
                let kit = graph.nodes[e.from]
                    .out
                    .as_ref()
                    .expect("engine bug: an edge leaves a sink");
                for (u, d) in wiring.lanes(ei) {
                    let (p, c) = kit.ring(config.ring_capacity);
                    prod.insert((ei, u, d), p);
                    cons.insert((ei, u, d), c);
                }
            }
            wiring.producers = Mutex::new(prod);
            wiring.consumers = Mutex::new(cons);
        }
        let wiring = Arc::new(wiring);
        let mut threads = Vec::with_capacity(wiring.plan.workers);
        for (w, &core) in cores.iter().enumerate().take(wiring.plan.workers) {
            let wiring = Arc::clone(&wiring);
            let core = config.pin.then_some(core);
            let spawned = std::thread::Builder::new()
                .name(format!("tandem-w{w}"))
                .spawn(move || worker::run(w, core, wiring));
            match spawned {
                Ok(h) => threads.push(h),
                Err(source) => {
                    shared.fail(JobError::Cancelled);
                    for t in threads {
                        let _ = t.join();
                    }
                    return Err(RuntimeError::Spawn { worker: w, source }.into());
                }
            }
        }
        Ok(JobHandle {
            threads,
            shared,
            graph,
            tasks,
        })
    }
}

impl JobHandle {
    /// Counts published by the operators so far.
    pub fn progress(&self) -> Progress {
        Progress {
            operators: self.stats(),
            dead_letters: self.shared.metrics.dead_letters.load(Ordering::Relaxed),
        }
    }

    fn stats(&self) -> Vec<OperatorStats> {
        self.graph
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let (records, emitted) = self.shared.metrics.node_totals(i);
                OperatorStats {
                    name: n.name.to_string(),
                    parallelism: n.parallelism,
                    records,
                    emitted,
                }
            })
            .collect()
    }

    /// Whether every worker has exited.
    pub fn is_finished(&self) -> bool {
        self.threads.iter().all(|t| t.is_finished())
    }

    /// Asks the job to stop; [`JobHandle::join`] then returns
    /// [`JobError::Cancelled`].
    pub fn cancel(&self) {
        self.shared.fail(JobError::Cancelled);
    }

    /// Waits for the job to end.
    pub fn join(mut self) -> Result<JobReport, JobError> {
        let workers = self.threads.len();
        for (w, t) in std::mem::take(&mut self.threads).into_iter().enumerate() {
            if let Err(p) = t.join() {
                self.shared.fail(JobError::WorkerDied {
                    worker: w,
                    message: worker::panic_message(p.as_ref()),
                });
            }
        }
        let finished = self.shared.finished_at.load(Ordering::Relaxed);
        if let Some(e) = self
            .shared
            .error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            let _ = self.shared.dead_letters.finish();
            return Err(e);
        }
        let dead_letter_path = self
            .shared
            .dead_letters
            .finish()
            .map_err(|(path, source)| JobError::Io {
                operator: "<dead letters>".into(),
                instance: 0,
                context: "flushing the dead-letter file".into(),
                path,
                source,
            })?;
        let operators = self.stats();
        Ok(JobReport {
            operators,
            latency: self.shared.metrics.latency(),
            dead_letters: self.shared.metrics.dead_letters.load(Ordering::Relaxed),
            dead_letter_path,
            elapsed: Duration::from_nanos(finished),
            workers,
            tasks: self.tasks,
        })
    }
}
