//! The supervisor: runs attempts of a job, coordinates their checkpoints,
//! and restarts them from the last complete checkpoint when one fails.
//!
//! ## Checkpoints
//!
//! Every `interval` (one checkpoint in flight at a time, at least
//! `min_pause` after the previous one ended) the supervisor stores the next
//! checkpoint id in the attempt's `trigger`; every source partition injects
//! a barrier with that id into its chain at its next poll and acknowledges
//! with its position. Barriers flow with the records; operators align them
//! (`channel::RingInput`, the co-operator hops), snapshot their state, and
//! acknowledge; sinks pre-commit. Once every operator instance has
//! acknowledged — or had finished before the barrier could reach it — the
//! snapshots go to the [`SnapshotStore`]'s I/O thread, which writes them
//! through io_uring while the data path runs on; when the manifest is
//! durable, the supervisor commits the sinks' staged output (phase two).
//!
//! ## Recovery (restart-all)
//!
//! A failure is a panic in operator code, a cut input channel, an I/O
//! error, or a worker without a heartbeat for longer than the timeout.
//! The supervisor then stops every worker of the attempt (a stalled one is
//! abandoned: it is fenced by its attempt's cancel flag and number), asks
//! the [`RestartStrategy`](crate::recovery::restart::RestartStrategy), and
//! starts a new attempt from the last complete checkpoint: operator state
//! mapped from its files, sources rewound to their positions, sinks'
//! uncommitted output discarded. Recovery figures are measured per fault.

use super::coord::{Event, InstanceRestore, Restore, SinkTally};
use super::{lanes, worker, JobShared, RuntimeConfig, Wiring};
use crate::checkpoint::{
    self, FileEntry, Manifest, OperatorSnapshot, Pending, Position, SnapshotBytes, SnapshotStore,
};
use crate::error::{JobError, RuntimeError};
use crate::job::graph::{Graph, NodeKind};
use crate::metrics::{CheckpointStats, JobMetrics, JobReport, RecoveryRecord, StandbyStats};
use crate::operator::{Committer, FINAL_EPOCH};
use crate::recovery::interval::{adaptive_interval, IntervalInputs};
use crate::recovery::restart::Decision;
use crate::runtime::channel::WorkerSignal;
use crate::runtime::dead_letter::DeadLetters;
use crate::runtime::placement::Plan;
use crate::runtime::CheckpointMode;
use crate::standby::group::{Group, StandbyRun};
use crossbeam_utils::CachePadded;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The pseudo-operator whose file lists the instances that had finished.
pub(crate) const JOB_META: &str = "~job";

type Key = (usize, usize);

/// One run of the job's workers.
struct Attempt {
    number: u32,
    shared: Arc<JobShared>,
    threads: Vec<JoinHandle<()>>,
    exited: Vec<bool>,
    built: usize,
    /// Instances whose task has ended.
    finished: HashSet<Key>,
}

struct Acked {
    state: Option<SnapshotBytes>,
    position: Option<u64>,
    written: Option<u64>,
}

struct InFlight {
    id: u64,
    savepoint: bool,
    started: Instant,
    acks: HashMap<Key, Acked>,
}

struct Writing {
    id: u64,
    pending: Pending,
    finished: HashSet<Key>,
    written: HashMap<Key, u64>,
    savepoint: bool,
}

/// The last checkpoint known complete: what a restart restores.
struct Completed {
    id: u64,
    manifest: Manifest,
    /// Sink counts at its barrier, valid in `attempt` only.
    written: HashMap<Key, u64>,
    attempt: u32,
}

/// The checkpoint coordinator's state.
struct Coordinator {
    store: SnapshotStore,
    /// A directory the engine created (removed when the job succeeds).
    temp_dir: Option<PathBuf>,
    mode: CheckpointMode,
    interval: Duration,
    adaptive: Option<(Duration, Duration)>,
    timeout: Duration,
    min_pause: Duration,
    tolerable: u32,
    next_id: u64,
    in_flight: Option<InFlight>,
    writing: Option<Writing>,
    last_trigger: Option<Instant>,
    last_end: Option<Instant>,
    consecutive_failures: u32,
    savepoint_waiters: Vec<mpsc::Sender<Result<PathBuf, JobError>>>,
    stats: CheckpointStats,
    write_secs: f64,
}

/// A recovery being measured.
struct OpenRecovery {
    record: RecoveryRecord,
    failed_at: u64,
    detected_at: u64,
    attempt: u32,
}

pub(crate) struct Supervisor {
    graph: Arc<Graph>,
    plan: Plan,
    config: RuntimeConfig,
    cores: Vec<usize>,
    origin: Instant,
    names: Vec<Arc<str>>,
    metrics: Arc<JobMetrics>,
    dead_letters: Arc<DeadLetters>,
    pacing_start: Arc<OnceLock<u64>>,
    tx: mpsc::Sender<Event>,
    rx: mpsc::Receiver<Event>,
    attempt: Attempt,
    coord: Option<Coordinator>,
    committers: HashMap<Key, Box<dyn Committer>>,
    last_complete: Option<Completed>,
    failures: Vec<Duration>,
    recovery: Vec<RecoveryRecord>,
    open: Option<OpenRecovery>,
    duplicates: u64,
    /// Per task: its `(node, instance)` members.
    members: Vec<Vec<Key>>,
    sources: Vec<Key>,
    sinks: Vec<Key>,
    all: Vec<Key>,
    transactional: HashSet<Key>,
    heartbeats: bool,
    cancelled: bool,
    /// The worker found stalled, while its attempt is being stopped.
    stalled_worker: Option<usize>,
    /// The checkpoint the job started from, and newer ones passed over.
    restored_from: Option<(u64, Vec<String>)>,
    standby_stats: Option<StandbyStats>,
}

fn now_ns(origin: Instant) -> u64 {
    origin.elapsed().as_nanos() as u64
}

impl Supervisor {
    /// Validates what can be validated up front, starts the first attempt,
    /// and returns the supervisor (to run on its own thread) with what the
    /// handle keeps.
    #[allow(clippy::type_complexity)]
    pub(crate) fn new(
        graph: Arc<Graph>,
        plan: Plan,
        config: RuntimeConfig,
        cores: Vec<usize>,
    ) -> Result<(Self, (mpsc::Sender<Event>, Arc<JobMetrics>)), JobError> {
        let parallelism: Vec<usize> = graph.nodes.iter().map(|n| n.parallelism).collect();
        let metrics = Arc::new(JobMetrics::new(&parallelism));
        let mut all = Vec::new();
        let mut sources = Vec::new();
        let mut sinks = Vec::new();
        for (i, n) in graph.nodes.iter().enumerate() {
            for k in 0..n.parallelism {
                all.push((i, k));
                match n.kind {
                    NodeKind::Source { .. } => sources.push((i, k)),
                    NodeKind::Sink(_) => sinks.push((i, k)),
                    _ => {}
                }
            }
        }
        let members = plan
            .tasks
            .iter()
            .map(|t| t.members.iter().map(|&m| (m, t.instance)).collect())
            .collect();
        validate_standby(&graph, &config)?;
        let coord = match &config.checkpoint {
            Some(c) => Some(Coordinator::open(c, &config, &graph.name)?),
            None => None,
        };
        let restore = match &config.restore_from {
            Some(p) => Some(load_restore_point(p)?),
            None => None,
        };
        let (tx, rx) = mpsc::channel();
        let origin = Instant::now();
        let mut sup = Supervisor {
            names: graph.nodes.iter().map(|n| Arc::clone(&n.name)).collect(),
            dead_letters: Arc::new(DeadLetters::new(&graph.name, config.run_dir.clone())),
            heartbeats: !matches!(
                config.restart,
                crate::recovery::restart::RestartStrategy::None
            ),
            graph,
            plan,
            config,
            cores,
            origin,
            metrics: Arc::clone(&metrics),
            pacing_start: Arc::new(OnceLock::new()),
            tx: tx.clone(),
            rx,
            attempt: Attempt {
                number: 0,
                shared: Arc::new(placeholder_shared(origin, &tx)),
                threads: Vec::new(),
                exited: Vec::new(),
                built: 0,
                finished: HashSet::new(),
            },
            coord,
            committers: HashMap::new(),
            last_complete: None,
            failures: Vec::new(),
            recovery: Vec::new(),
            open: None,
            duplicates: 0,
            members,
            sources,
            sinks,
            all,
            transactional: HashSet::new(),
            cancelled: false,
            stalled_worker: None,
            restored_from: None,
            standby_stats: None,
        };
        if let (Some(c), Some((m, _))) = (&mut sup.coord, &restore) {
            c.next_id = c.next_id.max(m.id + 1);
        }
        let restore = match restore {
            Some((m, skipped)) => {
                sup.restored_from = Some((m.id, skipped));
                Some(Arc::new(build_restore(&m, &sup.graph)?))
            }
            None => None,
        };
        let targets = HashMap::new();
        sup.attempt = sup.spawn(0, restore, &targets)?;
        Ok((sup, (tx, metrics)))
    }

    /// Wires and starts the workers of attempt `number`.
    fn spawn(
        &self,
        number: u32,
        restore: Option<Arc<Restore>>,
        targets: &HashMap<Key, u64>,
    ) -> Result<Attempt, JobError> {
        let workers = self.plan.workers;
        let signals: Vec<Arc<WorkerSignal>> = (0..workers)
            .map(|_| Arc::new(WorkerSignal::default()))
            .collect();
        let sinks = self
            .sinks
            .iter()
            .map(|k| (*k, Arc::new(SinkTally::new(*targets.get(k).unwrap_or(&0)))))
            .collect();
        let standby = self.standby_run(number)?;
        let shared = Arc::new(JobShared {
            origin: self.origin,
            names: self.names.clone(),
            metrics: Arc::clone(&self.metrics),
            dead_letters: Arc::clone(&self.dead_letters),
            attempt: number,
            cancel: AtomicBool::new(false),
            error: Mutex::new(None),
            failed_at: AtomicU64::new(0),
            fault_tuple: Mutex::new(None),
            stalls: Mutex::new(Vec::new()),
            signals: signals.clone(),
            finished_at: AtomicU64::new(0),
            events: self.tx.clone(),
            trigger: AtomicU64::new(0),
            exactly_once: self
                .coord
                .as_ref()
                .is_none_or(|c| c.mode == CheckpointMode::ExactlyOnce),
            restore,
            beats: (0..workers)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
            released_at: (0..workers)
                .map(|_| CachePadded::new(AtomicU64::new(u64::MAX)))
                .collect(),
            workers: (0..workers)
                .map(|_| CachePadded::new(Default::default()))
                .collect(),
            next_key: AtomicU64::new(0),
            sinks,
            pacing_start: Arc::clone(&self.pacing_start),
            standby: standby.clone(),
        });
        let has_standby = |n: usize| standby.as_ref().is_some_and(|s| s.group(n, 0).is_some());
        let mut producers = HashMap::new();
        let mut consumers = HashMap::new();
        for (ei, e) in self.graph.edges.iter().enumerate() {
            // Edges of an operator with a standby: buffer queues in, rings
            // of each incarnation's own out.
            if self.plan.chained[ei] || has_standby(e.from) || has_standby(e.to) {
                continue;
            }
            let kit = self.graph.nodes[e.from]
                .out
                .as_ref()
                .expect("engine bug: an edge leaves a sink");
            for (u, d) in lanes(&self.graph, ei) {
                let (p, c) = kit.ring(self.config.ring_capacity);
                producers.insert((ei, u, d), p);
                consumers.insert((ei, u, d), c);
            }
        }
        let wiring = Arc::new(Wiring {
            graph: Arc::clone(&self.graph),
            plan: self.plan.clone(),
            shared: Arc::clone(&shared),
            producers: Mutex::new(producers),
            consumers: Mutex::new(consumers),
            signals,
            config: self.config.clone(),
        });
        let mut threads = Vec::with_capacity(workers);
        for (w, &core) in self.cores.iter().enumerate().take(workers) {
            let wiring = Arc::clone(&wiring);
            let core = self.config.pin.then_some(core);
            let spawned = std::thread::Builder::new()
                .name(format!("tandem-w{w}"))
                .spawn(move || worker::run(w, core, wiring));
            match spawned {
                Ok(h) => threads.push(h),
                Err(source) => {
                    shared.stop();
                    for t in threads {
                        let _ = t.join();
                    }
                    return Err(RuntimeError::Spawn { worker: w, source }.into());
                }
            }
        }
        Ok(Attempt {
            number,
            shared,
            threads,
            exited: vec![false; workers],
            built: 0,
            finished: HashSet::new(),
        })
    }

    /// The standby groups of attempt `number` (`None` when no operator
    /// runs with a standby).
    fn standby_run(&self, number: u32) -> Result<Option<Arc<StandbyRun>>, JobError> {
        let Some(cfg) = &self.config.standby else {
            return Ok(None);
        };
        let nodes: Vec<usize> = (0..self.graph.nodes.len())
            .filter(|&n| self.graph.nodes[n].standby.is_some())
            .collect();
        if nodes.is_empty() {
            return Ok(None);
        }
        let (dir, temp) = match &self.config.run_dir {
            Some(d) => (d.join(format!("standby-{number}")), false),
            // Memory-backed when the machine has it: the kernel writes a
            // disk-backed mapping's dirty pages back, and a write to a page
            // under writeback waits for the disk (milliseconds).
            None => (
                {
                    sweep_stale_standby_dirs(&memory_dir());
                    memory_dir()
                }
                .join(format!(
                    "tandem-standby-{}-{}-{number}",
                    std::process::id(),
                    self.origin.elapsed().as_nanos()
                )),
                true,
            ),
        };
        let io = |e: std::io::Error| JobError::Io {
            operator: "<standby>".into(),
            instance: 0,
            context: "creating the standby directory".into(),
            path: Some(dir.clone()),
            source: e,
        };
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(io)?;
        }
        std::fs::create_dir_all(&dir).map_err(io)?;
        let workers = self.plan.workers;
        let worker_of = |n: usize, i: usize| {
            self.plan.worker_of_task[self
                .plan
                .task_of(n, i)
                .expect("engine bug: node instance without a task")]
        };
        let mut groups = HashMap::new();
        let now = now_ns(self.origin);
        for &n in &nodes {
            let ein = self
                .graph
                .edges
                .iter()
                .position(|e| e.to == n)
                .expect("validated: one input");
            for i in 0..self.graph.nodes[n].parallelism {
                let upstream: Vec<usize> = lanes(&self.graph, ein)
                    .into_iter()
                    .filter(|&(_, d)| d == i)
                    .map(|(u, _)| u)
                    .collect();
                let mut consumers = Vec::new();
                for (ej, e) in self.graph.edges.iter().enumerate() {
                    if e.from != n {
                        continue;
                    }
                    for (u, d) in lanes(&self.graph, ej) {
                        if u == i {
                            consumers.push((ej, e.to, d, worker_of(e.to, d)));
                        }
                    }
                }
                let pw = worker_of(n, i);
                let g = Group::create(
                    n,
                    i,
                    Arc::clone(&self.names[n]),
                    upstream,
                    consumers,
                    pw,
                    (pw + 1) % workers,
                    workers,
                    cfg,
                    &dir,
                    now,
                )
                .map_err(|e| JobError::Io {
                    operator: self.names[n].to_string(),
                    instance: i,
                    context: "creating the standby's buffer queue".into(),
                    path: Some(dir.clone()),
                    source: std::io::Error::other(e.to_string()),
                })?;
                groups.insert((n, i), Arc::new(g));
            }
        }
        Ok(Some(Arc::new(StandbyRun {
            live: AtomicUsize::new(groups.len()),
            groups,
            log: Default::default(),
            inbox: (0..workers).map(|_| Mutex::new(Vec::new())).collect(),
            pending: (0..workers).map(|_| AtomicBool::new(false)).collect(),
            dir,
            temp,
        })))
    }

    /// The supervisor loop; returns the job's outcome.
    pub(crate) fn run(mut self) -> Result<JobReport, JobError> {
        let outcome = self.run_loop();
        // Whatever happened, no worker of ours outlives the job unfenced.
        self.attempt.shared.stop();
        if let Some(c) = &mut self.coord {
            for w in c.savepoint_waiters.drain(..) {
                let _ = w.send(Err(JobError::Cancelled));
            }
        }
        outcome
    }

    fn run_loop(&mut self) -> Result<JobReport, JobError> {
        loop {
            let wait = self.next_wake();
            match self.rx.recv_timeout(wait) {
                Ok(e) => self.handle(e),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    unreachable!("the supervisor holds a sender")
                }
            }
            while let Ok(e) = self.rx.try_recv() {
                self.handle(e);
            }
            if let Some(outcome) = self.tick()? {
                return Ok(outcome);
            }
        }
    }

    fn next_wake(&self) -> Duration {
        let mut d = Duration::from_millis(50);
        if self.heartbeats {
            d = d.min(
                (self.config.heartbeat_timeout / 20)
                    .clamp(Duration::from_micros(500), Duration::from_millis(5)),
            );
        }
        if self.open.is_some() {
            d = d.min(Duration::from_millis(1));
        }
        if let Some(c) = &self.coord {
            if c.writing.is_some() || c.in_flight.is_some() {
                d = d.min(Duration::from_millis(1));
            } else if c.in_flight.is_none() {
                d = d.min(c.until_due());
            }
        }
        d.max(Duration::from_micros(100))
    }

    fn handle(&mut self, e: Event) {
        let current = self.attempt.number;
        match e {
            Event::Ack {
                attempt,
                id,
                node,
                instance,
                state,
                position,
                written,
            } if attempt == current => {
                if let Some(f) = self.coord.as_mut().and_then(|c| c.in_flight.as_mut()) {
                    if f.id == id {
                        f.acks.insert(
                            (node, instance),
                            Acked {
                                state,
                                position,
                                written,
                            },
                        );
                    }
                }
            }
            Event::Decline {
                attempt,
                id,
                node,
                instance,
                reason,
            } if attempt == current => {
                if let Some(c) = &mut self.coord {
                    if c.in_flight.as_ref().is_some_and(|f| f.id == id) {
                        c.in_flight = None;
                        c.failed(format!(
                            "checkpoint {id}: operator `{}` instance {instance} declined: {reason}",
                            self.names[node]
                        ));
                    }
                }
            }
            Event::TaskDone { attempt, task } if attempt == current => {
                self.attempt
                    .finished
                    .extend(self.members[task].iter().copied());
            }
            Event::Built { attempt } if attempt == current => self.attempt.built += 1,
            // The tick looks at the attempt's error.
            Event::Failed { attempt } if attempt == current => {}
            Event::WorkerExit { attempt, worker } if attempt == current => {
                self.attempt.exited[worker] = true;
            }
            Event::Committer {
                attempt,
                node,
                instance,
                committer,
            } if attempt == current => {
                self.transactional.insert((node, instance));
                self.committers.insert((node, instance), committer);
            }
            Event::Savepoint { reply } => match &mut self.coord {
                Some(c) => c.savepoint_waiters.push(reply),
                None => {
                    let _ = reply.send(Err(JobError::Incompatible {
                        id: 0,
                        reason: "savepoints need checkpointing to be configured".into(),
                    }));
                }
            },
            Event::Cancel => {
                self.cancelled = true;
                self.attempt.shared.fail(JobError::Cancelled);
            }
            // Events of earlier attempts: fenced off.
            _ => {}
        }
    }

    /// Periodic work; `Some` when the job is over.
    fn tick(&mut self) -> Result<Option<JobReport>, JobError> {
        let now = now_ns(self.origin);
        if self.attempt.shared.has_error() {
            self.on_failure()?;
            return Ok(None);
        }
        if self.heartbeats && self.attempt.built == self.attempt.exited.len() {
            let timeout = self.config.heartbeat_timeout.as_nanos() as u64;
            for (w, b) in self.attempt.shared.beats.iter().enumerate() {
                let b = b.load(Ordering::Relaxed);
                if b != 0 && !self.attempt.exited[w] && now.saturating_sub(b) > timeout {
                    self.stalled(w, b, now);
                    self.on_failure()?;
                    return Ok(None);
                }
            }
        }
        if self.attempt.exited.iter().all(|&e| e) && !self.attempt.shared.has_error() {
            return self.on_success().map(Some);
        }
        self.coordinate()?;
        self.measure_recovery(now);
        Ok(None)
    }

    /// Declares worker `w` stalled since `since`.
    fn stalled(&mut self, w: usize, since: u64, now: u64) {
        let shared = &self.attempt.shared;
        let (operator, instance) = match shared.stall_note() {
            Some(n) if n.worker == w => {
                shared.note_fault_tuple(Some(n.tuple));
                (self.names[n.op].to_string(), n.instance)
            }
            _ => {
                // No probe said who: name the chains the worker runs.
                let mut names = Vec::new();
                let mut inst = 0;
                for (t, &wk) in self.plan.worker_of_task.iter().enumerate() {
                    if wk == w {
                        inst = self.plan.tasks[t].instance;
                        names.extend(
                            self.plan.tasks[t]
                                .members
                                .iter()
                                .map(|&m| self.names[m].to_string()),
                        );
                    }
                }
                (names.join("+"), inst)
            }
        };
        shared.failed_at.store(since.max(1), Ordering::SeqCst);
        self.stalled_worker = Some(w);
        shared.fail(JobError::Stalled {
            operator,
            instance,
            millis: (now - since) / 1_000_000,
        });
    }

    fn coordinate(&mut self) -> Result<(), JobError> {
        let Some(c) = &mut self.coord else {
            return Ok(());
        };
        // Durable? Then publish the outcome and commit the sinks.
        if let Some(w) = &mut c.writing {
            if let Some(r) = w.pending.try_wait() {
                let w = c.writing.take().expect("checked above");
                match r {
                    Ok(p) => {
                        let secs = p.write_time.as_secs_f64();
                        let bytes = p.manifest.payload_bytes();
                        c.published(w.id, &p);
                        c.consecutive_failures = 0;
                        c.last_end = Some(Instant::now());
                        if let Some((min, max)) = c.adaptive {
                            let observed = self.origin.elapsed();
                            c.interval = adaptive_interval(
                                &IntervalInputs {
                                    state_bytes: bytes,
                                    write_bytes_per_sec: bytes as f64 / secs.max(1e-9),
                                    failures: self.failures.len() as u32,
                                    observed,
                                },
                                min,
                                max,
                            );
                        }
                        if w.savepoint {
                            let dir = p.manifest.dir.clone();
                            for r in c.savepoint_waiters.drain(..) {
                                let _ = r.send(Ok(dir.clone()));
                            }
                        }
                        commit_all(&mut self.committers, &self.names, w.id, &w.finished)?;
                        self.last_complete = Some(Completed {
                            id: w.id,
                            manifest: p.manifest,
                            written: w.written,
                            attempt: self.attempt.number,
                        });
                    }
                    Err(e) => {
                        if w.savepoint {
                            for r in c.savepoint_waiters.drain(..) {
                                let _ = r.send(Err(JobError::Checkpoint(
                                    checkpoint::CheckpointError::WriterGone,
                                )));
                            }
                        }
                        c.failed(format!("checkpoint {}: {e}", w.id));
                    }
                }
            }
        }
        // Every instance acknowledged or finished?
        if let Some(f) = &c.in_flight {
            let done = self
                .all
                .iter()
                .all(|k| f.acks.contains_key(k) || self.attempt.finished.contains(k));
            if done {
                // Phase one must be durable everywhere before the checkpoint
                // can be published (a sink may stage asynchronously): until
                // then, look again at the next tick — never block the loop.
                let id = f.id;
                let mut all_prepared = true;
                for (&(node, instance), cm) in self.committers.iter_mut() {
                    let ready = cm.prepared(id).map_err(|source| JobError::Io {
                        operator: self.names[node].to_string(),
                        instance,
                        context: format!("staging the output of checkpoint {id}"),
                        path: None,
                        source,
                    })?;
                    all_prepared &= ready;
                }
                if !all_prepared {
                    return Ok(());
                }
                let f = c.in_flight.take().expect("checked above");
                c.submit(
                    f,
                    &self.all,
                    &self.attempt.finished,
                    &self.names,
                    &self.sources,
                );
            } else if f.started.elapsed() > c.timeout {
                let id = f.id;
                c.in_flight = None;
                c.failed(format!(
                    "checkpoint {id} timed out after {} ms",
                    c.timeout.as_millis()
                ));
            }
        }
        if c.consecutive_failures > c.tolerable {
            return Err(JobError::CheckpointsFailing {
                failures: c.consecutive_failures,
                last: c.stats.last_failure.clone().unwrap_or_default(),
            });
        }
        // Time for the next one?
        let sources_live = self
            .sources
            .iter()
            .any(|k| !self.attempt.finished.contains(k));
        let all_built = self.attempt.built == self.attempt.exited.len();
        if c.in_flight.is_none()
            && c.writing.is_none()
            && all_built
            && sources_live
            && (c.until_due().is_zero() || !c.savepoint_waiters.is_empty())
        {
            let id = c.next_id;
            c.next_id += 1;
            c.last_trigger = Some(Instant::now());
            c.in_flight = Some(InFlight {
                id,
                savepoint: !c.savepoint_waiters.is_empty(),
                started: Instant::now(),
                acks: HashMap::new(),
            });
            self.attempt.shared.trigger.store(id, Ordering::Release);
        }
        Ok(())
    }

    fn measure_recovery(&mut self, now: u64) {
        let Some(o) = &mut self.open else { return };
        if o.attempt != self.attempt.number {
            return;
        }
        let shared = &self.attempt.shared;
        if o.record.restore_us.is_none() && self.attempt.built == self.attempt.exited.len() {
            o.record.restore_us = Some(now.saturating_sub(o.detected_at) / 1000);
        }
        let mut first = u64::MAX;
        let mut caught = 0u64;
        let mut all_caught = true;
        for t in shared.sinks.values() {
            let f = t.first_at.load(Ordering::Relaxed);
            if f != 0 {
                first = first.min(f);
            }
            if t.target.load(Ordering::Relaxed) > 0 {
                let c = t.caught_at.load(Ordering::Relaxed);
                if c == 0 {
                    all_caught = false;
                } else {
                    caught = caught.max(c);
                }
            }
        }
        if o.record.first_output_us.is_none() && first != u64::MAX {
            o.record.first_output_us = Some(first.saturating_sub(o.failed_at) / 1000);
        }
        if all_caught && o.record.first_output_us.is_some() {
            let at = if caught == 0 { first } else { caught };
            o.record.caught_up_us = Some(at.saturating_sub(o.failed_at) / 1000);
        }
        if o.record.restore_us.is_some()
            && o.record.first_output_us.is_some()
            && o.record.caught_up_us.is_some()
        {
            let o = self.open.take().expect("checked above");
            self.recovery.push(o.record);
        }
    }

    /// Stops the attempt's workers: waits briefly for each (a running
    /// worker sees the cancel flag within one poll), abandons a stalled one
    /// at once (it is fenced by the cancel flag and its attempt number).
    fn stop_attempt(&mut self, stalled: Option<usize>) {
        self.attempt.shared.stop();
        let deadline = Instant::now() + Duration::from_millis(100);
        for (w, t) in std::mem::take(&mut self.attempt.threads)
            .into_iter()
            .enumerate()
        {
            if Some(w) == stalled {
                continue;
            }
            while !t.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_micros(100));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }

    fn on_failure(&mut self) -> Result<(), JobError> {
        let detected_at = now_ns(self.origin);
        let shared = Arc::clone(&self.attempt.shared);
        let err = shared.take_error().unwrap_or(JobError::Cancelled);
        let stalled = self.stalled_worker.take();
        self.stop_attempt(stalled);
        // Where everyone stood when it stopped.
        let sink_written: HashMap<Key, u64> = shared
            .sinks
            .iter()
            .map(|(k, t)| (*k, t.written.load(Ordering::Relaxed)))
            .collect();
        let source_pos: HashMap<Key, u64> = self
            .sources
            .iter()
            .map(|&(n, i)| {
                (
                    (n, i),
                    self.metrics.counters[n][i].records.load(Ordering::Relaxed),
                )
            })
            .collect();
        if self.cancelled || matches!(err, JobError::Cancelled) {
            return Err(JobError::Cancelled);
        }
        let failed_at = match shared.failed_at.load(Ordering::SeqCst) {
            0 => detected_at,
            t => t,
        };
        // A recovery still being measured ends here.
        if let Some(o) = self.open.take() {
            self.recovery.push(o.record);
        }
        // A checkpoint being written is complete: let it land and commit.
        if let Some(c) = &mut self.coord {
            c.in_flight = None;
            if let Some(w) = c.writing.take() {
                let id = w.id;
                match w.pending.wait() {
                    Ok(p) => {
                        c.published(id, &p);
                        commit_all(&mut self.committers, &self.names, id, &w.finished)?;
                        self.last_complete = Some(Completed {
                            id,
                            manifest: p.manifest,
                            written: w.written,
                            attempt: self.attempt.number,
                        });
                    }
                    Err(e) => c.failed(format!("checkpoint {id}: {e}")),
                }
            }
        }
        self.failures.push(Duration::from_nanos(detected_at));
        let delay = match self.config.restart.decide(&self.failures) {
            Decision::Restart { after } => after,
            Decision::GiveUp { reason } => {
                if self.failures.len() == 1
                    && matches!(
                        self.config.restart,
                        crate::recovery::restart::RestartStrategy::None
                    )
                {
                    return Err(err);
                }
                return Err(JobError::GaveUp {
                    reason,
                    cause: Box::new(err),
                });
            }
        };
        let mut record = RecoveryRecord {
            operator: err.operator().unwrap_or("").to_string(),
            instance: error_instance(&err),
            cause: err.to_string(),
            tuple_id: shared.fault_tuple(),
            detect_us: detected_at.saturating_sub(failed_at) / 1000,
            restore_us: None,
            first_output_us: None,
            caught_up_us: None,
            replayed_tuples: 0,
            restored_checkpoint: None,
            skipped_checkpoints: Vec::new(),
            unprovoked: false,
            evidence: None,
        };
        std::thread::sleep(delay);
        // What to restore: the last complete checkpoint, verified; an older
        // retained one if it is damaged.
        let (restore, restored_id) = self.restore_point(&mut record)?;
        record.restored_checkpoint = restored_id;
        // Sinks' counts at the restored checkpoint, in the failed attempt.
        let at_restore = |k: &Key| -> u64 {
            match &self.last_complete {
                Some(c) if Some(c.id) == restored_id && c.attempt == self.attempt.number => {
                    *c.written.get(k).unwrap_or(&0)
                }
                _ => 0,
            }
        };
        let mut targets = HashMap::new();
        for k in &self.sinks {
            let redo = sink_written[k].saturating_sub(at_restore(k));
            if !self.transactional.contains(k) {
                self.duplicates += redo;
            }
            let finished = restore
                .as_ref()
                .and_then(|r| r.instances.get(k))
                .is_some_and(|i| i.finished);
            targets.insert(*k, if finished { 0 } else { redo });
        }
        record.replayed_tuples = self
            .sources
            .iter()
            .map(|k| {
                let from = restore
                    .as_ref()
                    .and_then(|r| r.instances.get(k))
                    .and_then(|i| i.position)
                    .unwrap_or(0);
                source_pos[k].saturating_sub(from)
            })
            .sum();
        self.committers.clear();
        let number = self.attempt.number + 1;
        self.attempt = self.spawn(number, restore, &targets)?;
        self.open = Some(OpenRecovery {
            record,
            failed_at,
            detected_at,
            attempt: number,
        });
        Ok(())
    }

    /// The checkpoint a restart restores, mapped and verified.
    fn restore_point(
        &mut self,
        record: &mut RecoveryRecord,
    ) -> Result<(Option<Arc<Restore>>, Option<u64>), JobError> {
        let Some(done) = &self.last_complete else {
            return Ok((None, None));
        };
        match build_restore(&done.manifest, &self.graph) {
            Ok(r) => return Ok((Some(Arc::new(r)), Some(done.id))),
            Err(e) => record
                .skipped_checkpoints
                .push(format!("checkpoint {}: {e}", done.id)),
        }
        let bad = done.id;
        if let Some(c) = &self.coord {
            let latest = c.store.latest_valid()?;
            for s in latest.skipped {
                if s.id != bad {
                    record
                        .skipped_checkpoints
                        .push(format!("checkpoint {}: {}", s.id, s.error));
                }
            }
            if let Some(m) = latest.checkpoint.filter(|m| m.id < bad) {
                let id = m.id;
                let r = build_restore(&m, &self.graph)?;
                self.last_complete = Some(Completed {
                    id,
                    manifest: m,
                    written: HashMap::new(),
                    attempt: u32::MAX,
                });
                return Ok((Some(Arc::new(r)), Some(id)));
            }
        }
        self.last_complete = None;
        Ok((None, None))
    }

    fn on_success(&mut self) -> Result<JobReport, JobError> {
        for t in std::mem::take(&mut self.attempt.threads) {
            let _ = t.join();
        }
        // A checkpoint still being written lands first, then everything the
        // sinks staged after their last barrier becomes visible.
        let mut stats = CheckpointStats::default();
        let mut dir = None;
        if let Some(c) = &mut self.coord {
            if let Some(w) = c.writing.take() {
                if let Ok(p) = w.pending.wait() {
                    c.published(w.id, &p);
                    commit_all(&mut self.committers, &self.names, w.id, &w.finished)?;
                }
            }
            stats = c.stats.clone();
            dir = Some(c.store.dir().to_path_buf());
        }
        // The job completed: everything the sinks staged in this attempt is
        // output — the final epochs, and the epochs of a checkpoint that was
        // still in flight when the input ended.
        for (&(node, instance), c) in self.committers.iter_mut() {
            c.commit_final().map_err(|source| JobError::Io {
                operator: self.names[node].to_string(),
                instance,
                context: "committing the output at the end of the job".into(),
                path: None,
                source,
            })?;
        }
        if let Some(o) = self.open.take() {
            self.recovery.push(o.record);
        }
        if let Some(sb) = &self.attempt.shared.standby {
            // Nothing the standby groups owed may be missing from a job
            // that ends successfully.
            let mut groups: Vec<_> = sb.groups.values().collect();
            groups.sort_by_key(|g| (g.node, g.instance));
            for g in groups {
                g.check_complete(&self.names)?;
            }
            let mut takeovers = std::mem::take(&mut *sb.log.lock());
            takeovers.sort_by_key(|t| t.fault_at);
            let stats = self.standby_stats.get_or_insert_with(Default::default);
            stats.groups = sb.groups.len();
            stats.takeovers += takeovers.len() as u64;
            stats.standby_failures += sb.log.standby_failures.load(Ordering::Relaxed);
            for g in sb.groups.values() {
                stats.queue_bytes_peak = stats
                    .queue_bytes_peak
                    .max(g.queue_peak.load(Ordering::Relaxed));
                stats.snapshots_published += g.snapshots.load(Ordering::Relaxed);
            }
            for t in takeovers {
                let mut r = t.record;
                let since = |at: u64| at.saturating_sub(t.fault_at) / 1000;
                r.first_output_us = t.sink_at.or(t.accepted_at).map(since);
                r.caught_up_us = t.caught_up_at.map(since);
                self.recovery.push(r);
            }
        }
        let dead_letter_path =
            self.dead_letters
                .finish()
                .map_err(|(path, source)| JobError::Io {
                    operator: "<dead letters>".into(),
                    instance: 0,
                    context: "flushing the dead-letter file".into(),
                    path,
                    source,
                })?;
        if let Some(c) = self.coord.take() {
            let temp = c.temp_dir.clone();
            drop(c);
            if let Some(t) = temp {
                let _ = std::fs::remove_dir_all(t);
                dir = None;
            }
        }
        stats.dir = dir;
        Ok(JobReport {
            operators: super::operator_stats(&self.graph, &self.metrics),
            latency: self.metrics.latency(),
            dead_letters: self.metrics.dead_letters.load(Ordering::Relaxed),
            dead_letter_path,
            elapsed: Duration::from_nanos(self.attempt.shared.finished_at.load(Ordering::Relaxed)),
            workers: self.plan.workers,
            tasks: self.plan.tasks.len(),
            recovery: std::mem::take(&mut self.recovery),
            checkpoints: stats,
            duplicates_emitted: self.duplicates,
            restarts: self.attempt.number,
            restored_from: self.restored_from.as_ref().map(|r| r.0),
            restore_skipped: self
                .restored_from
                .as_mut()
                .map(|r| std::mem::take(&mut r.1))
                .unwrap_or_default(),
            standby: self.standby_stats.take(),
        })
    }
}

/// Phase two for checkpoint `id`: every sink's output staged under it, and
/// the final epoch of the sinks in `finished`.
fn commit_all(
    committers: &mut HashMap<Key, Box<dyn Committer>>,
    names: &[Arc<str>],
    id: u64,
    finished: &HashSet<Key>,
) -> Result<(), JobError> {
    for (&(node, instance), c) in committers.iter_mut() {
        let mut r = c.commit(id);
        if r.is_ok() && id != FINAL_EPOCH && finished.contains(&(node, instance)) {
            r = c.commit(FINAL_EPOCH);
        }
        r.map_err(|source| JobError::Io {
            operator: names[node].to_string(),
            instance,
            context: format!("committing the output of checkpoint {id}"),
            path: None,
            source,
        })?;
    }
    Ok(())
}

fn error_instance(e: &JobError) -> usize {
    match e {
        JobError::OperatorPanicked { instance, .. }
        | JobError::Io { instance, .. }
        | JobError::ChannelCut { instance, .. }
        | JobError::Stalled { instance, .. }
        | JobError::Restore { instance, .. }
        | JobError::SourceSeek { instance, .. } => *instance,
        _ => 0,
    }
}

impl Coordinator {
    fn open(
        c: &super::CheckpointConfig,
        config: &RuntimeConfig,
        job: &str,
    ) -> Result<Self, JobError> {
        let (dir, temp_dir) = match (&c.dir, &config.run_dir) {
            (Some(d), _) => (d.clone(), None),
            (None, Some(r)) => (r.join("checkpoints"), None),
            (None, None) => {
                let stamp = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos());
                let safe: String = job
                    .chars()
                    .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
                    .collect();
                let t = std::env::temp_dir().join(format!(
                    "tandem-{safe}-{}-{stamp}-checkpoints",
                    std::process::id()
                ));
                (t.clone(), Some(t))
            }
        };
        let store = SnapshotStore::open(&dir, c.retain)?;
        let next_id = store.list()?.iter().map(|l| l.id).max().unwrap_or(0) + 1;
        let interval = match c.adaptive {
            Some((_, max)) => max,
            None => c.interval,
        };
        Ok(Coordinator {
            store,
            temp_dir,
            mode: c.mode,
            interval,
            adaptive: c.adaptive,
            timeout: c.timeout,
            min_pause: c.min_pause,
            tolerable: c.tolerable_failures,
            next_id,
            in_flight: None,
            writing: None,
            // The first checkpoint comes an interval after the start.
            last_trigger: Some(Instant::now()),
            last_end: None,
            consecutive_failures: 0,
            savepoint_waiters: Vec::new(),
            stats: CheckpointStats::default(),
            write_secs: 0.0,
        })
    }

    /// Time until the next checkpoint may start.
    fn until_due(&self) -> Duration {
        let now = Instant::now();
        let mut due = self.last_trigger.map_or(now, |t| t + self.interval);
        if let Some(e) = self.last_end {
            due = due.max(e + self.min_pause);
        }
        due.saturating_duration_since(now)
    }

    /// Counts checkpoint `id`, now durable and published.
    fn published(&mut self, id: u64, p: &checkpoint::Published) {
        self.stats.completed += 1;
        self.stats.bytes += p.manifest.payload_bytes();
        self.write_secs += p.write_time.as_secs_f64();
        self.stats.write_mbps = self.stats.bytes as f64 / 1e6 / self.write_secs.max(1e-9);
        self.stats.last_completed = Some(id);
    }

    fn failed(&mut self, why: String) {
        self.consecutive_failures += 1;
        self.stats.failed += 1;
        self.stats.last_failure = Some(why);
        self.last_end = Some(Instant::now());
    }

    /// All acknowledged: hand the snapshots to the I/O thread.
    fn submit(
        &mut self,
        mut f: InFlight,
        all: &[Key],
        finished_now: &HashSet<Key>,
        names: &[Arc<str>],
        sources: &[Key],
    ) {
        let mut snapshots = Vec::new();
        let mut finished = HashSet::new();
        let mut written = HashMap::new();
        let is_source: HashSet<Key> = sources.iter().copied().collect();
        for &k in all {
            let (node, instance) = k;
            match f.acks.remove(&k) {
                Some(a) => {
                    if let Some(w) = a.written {
                        written.insert(k, w);
                    }
                    let positions: Vec<Position> = a
                        .position
                        .map(|p| Position {
                            partition: instance as u32,
                            next_seq: p,
                        })
                        .into_iter()
                        .collect();
                    if a.state.is_some() || is_source.contains(&k) {
                        snapshots.push(OperatorSnapshot {
                            operator: names[node].to_string(),
                            instance: instance as u32,
                            positions,
                            bytes: a.state.unwrap_or_default(),
                        });
                    }
                }
                None => {
                    debug_assert!(finished_now.contains(&k));
                    finished.insert(k);
                }
            }
        }
        let mut list: Vec<(String, u32)> = finished
            .iter()
            .map(|&(n, i)| (names[n].to_string(), i as u32))
            .collect();
        list.sort();
        match checkpoint::serialize(&list, 64 + 32 * list.len()) {
            Ok(bytes) => snapshots.push(OperatorSnapshot {
                operator: JOB_META.to_string(),
                instance: 0,
                positions: Vec::new(),
                bytes,
            }),
            Err(e) => {
                self.failed(format!("checkpoint {}: {e}", f.id));
                return;
            }
        }
        let pending = if f.savepoint {
            self.store.save_savepoint(f.id, snapshots)
        } else {
            self.store.submit(f.id, snapshots)
        };
        self.writing = Some(Writing {
            id: f.id,
            pending,
            finished,
            written,
            savepoint: f.savepoint,
        });
    }
}

/// Reads what `path` names: a savepoint directory, a manifest file, or a
/// checkpoint directory (its newest valid checkpoint).
/// Also returns the newer checkpoints passed over, and why.
fn load_restore_point(path: &Path) -> Result<(Manifest, Vec<String>), JobError> {
    if path.is_file() {
        let m = Manifest::load(path)?;
        return Ok((m, Vec::new()));
    }
    if path.join("manifest.json").is_file() {
        return Ok((checkpoint::open_savepoint(path)?, Vec::new()));
    }
    // A checkpoint directory: read it without starting a writer on it.
    let mut ids: Vec<_> = checkpoint::list(path)?
        .into_iter()
        .filter(|l| l.kind == checkpoint::SnapshotKind::Checkpoint)
        .collect();
    ids.sort_by_key(|l| std::cmp::Reverse(l.id));
    let mut errors = Vec::new();
    for l in ids {
        match Manifest::load(&l.manifest_path).and_then(|m| m.verify().map(|()| m)) {
            Ok(m) => return Ok((m, errors)),
            Err(e) => errors.push(format!("checkpoint {}: {e}", l.id)),
        }
    }
    Err(JobError::Incompatible {
        id: 0,
        reason: format!(
            "{} holds no valid checkpoint{}",
            path.display(),
            if errors.is_empty() {
                String::new()
            } else {
                format!(" ({})", errors.join("; "))
            }
        ),
    })
}

/// Maps and verifies every file of `m` and matches it to the job's
/// operators.
fn build_restore(m: &Manifest, graph: &Graph) -> Result<Restore, JobError> {
    let node_of: HashMap<&str, usize> = graph
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (&*n.name, i))
        .collect();
    let mut r = Restore {
        checkpoint: m.id,
        instances: HashMap::new(),
    };
    let locate = |e: &FileEntry| -> Result<Key, JobError> {
        let Some(&node) = node_of.get(e.operator.as_str()) else {
            return Err(JobError::Incompatible {
                id: m.id,
                reason: format!(
                    "it has state of operator `{}`, which the job lacks",
                    e.operator
                ),
            });
        };
        let p = graph.nodes[node].parallelism;
        if e.instance as usize >= p {
            return Err(JobError::Incompatible {
                id: m.id,
                reason: format!(
                    "it has instance {} of `{}`, which runs with parallelism {p} (rescaling is not supported)",
                    e.instance, e.operator
                ),
            });
        }
        Ok((node, e.instance as usize))
    };
    for e in &m.files {
        let file = m.open(e)?;
        if e.operator == JOB_META {
            let list = checkpoint::access::<Vec<(String, u32)>>(file.payload())?;
            for item in list.iter() {
                let fe = FileEntry {
                    operator: item.0.to_string(),
                    instance: item.1.to_native(),
                    ..e.clone()
                };
                let k = locate(&fe)?;
                r.instances.entry(k).or_default().finished = true;
            }
            continue;
        }
        let k = locate(e)?;
        let slot: &mut InstanceRestore = r.instances.entry(k).or_default();
        slot.position = e.positions.first().map(|p| p.next_seq);
        if file.header().payload_len > 0 {
            slot.state = Some(Arc::new(file));
        }
    }
    Ok(r)
}

/// A stand-in for the attempt field before the first attempt starts.
/// Where files that are only ever mapped go when the user named no run
/// directory: `/dev/shm` (tmpfs) if there is one, else the temp dir.
fn memory_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// Removes `tandem-standby-<pid>-…` directories in `dir` whose process is
/// gone (killed before it could clean up: on tmpfs they hold memory).
fn sweep_stale_standby_dirs(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("tandem-standby-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Standby operators must fit the engine's protocol (checked before
/// anything runs).
fn validate_standby(graph: &Graph, config: &RuntimeConfig) -> Result<(), JobError> {
    if config.standby.is_none() {
        return Ok(());
    }
    let has = |n: usize| graph.nodes[n].standby.is_some();
    let err = |n: usize, why: &str| -> JobError {
        RuntimeError::Standby(format!("operator `{}`: {why}", graph.nodes[n].name)).into()
    };
    for (n, node) in graph.nodes.iter().enumerate() {
        if !has(n) {
            continue;
        }
        if config.checkpoint.is_some() {
            return Err(err(
                n,
                "checkpoints and standbys are not combined yet: use one strategy",
            ));
        }
        if !matches!(node.kind, NodeKind::Unary(_)) {
            return Err(err(n, "only one-input operators can have a standby"));
        }
        for e in &graph.edges {
            if e.to == n && has(e.from) {
                return Err(err(
                    n,
                    "its upstream operator has a standby too (not supported)",
                ));
            }
        }
        if graph.edges.iter().filter(|e| e.to == n).count() != 1 {
            return Err(err(n, "it must have exactly one input"));
        }
    }
    Ok(())
}

fn placeholder_shared(origin: Instant, tx: &mpsc::Sender<Event>) -> JobShared {
    JobShared {
        origin,
        names: Vec::new(),
        metrics: Arc::new(JobMetrics::new(&[])),
        dead_letters: Arc::new(DeadLetters::new("", None)),
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
        standby: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standby_directories_of_dead_processes_are_swept_and_live_ones_kept() {
        let root = std::env::temp_dir().join(format!("tandem-sweep-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        // PIDs above the kernel's maximum (4194304) never exist.
        let dead = root.join("tandem-standby-4194399-1-0");
        let live = root.join(format!("tandem-standby-{}-1-0", std::process::id()));
        let other = root.join("unrelated");
        for d in [&dead, &live, &other] {
            std::fs::create_dir_all(d).unwrap();
        }
        sweep_stale_standby_dirs(&root);
        assert!(!dead.exists());
        assert!(live.exists() && other.exists());
        std::fs::remove_dir_all(root).unwrap();
    }
}
