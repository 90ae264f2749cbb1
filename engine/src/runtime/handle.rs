//! A running job, as its embedder holds it ([`JobHandle`]: progress,
//! status, latency, a savepoint, cancel, join) and as other threads watch
//! it ([`JobWatch`]); starting one ([`start`]: placement, the supervisor's
//! thread).

use crate::error::{JobError, RuntimeError};
use crate::metrics::{JobMetrics, JobReport, OperatorStats, Progress};
use crate::runtime::coord::Event;
use crate::runtime::graph::Graph;
use crate::runtime::wiring::{check_ring_memory, shapes};
use crate::runtime::{panic, placement, supervisor, RuntimeConfig};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};

/// A running job.
pub struct JobHandle {
    supervisor: Option<std::thread::JoinHandle<Result<JobReport, JobError>>>,
    events: mpsc::Sender<Event>,
    metrics: Arc<JobMetrics>,
    graph: Arc<Graph>,
}

/// What a start of `graph` on `config` works from, checked: the cores,
/// the restore point (its sources' partitions fixing their instance
/// counts), the job as planned.
struct Prepared {
    graph: Arc<Graph>,
    plan: placement::Plan,
    restore: Option<(crate::checkpoint::Manifest, Vec<String>)>,
    cores: Vec<usize>,
}

fn prepare(graph: Arc<Graph>, config: &RuntimeConfig) -> Result<Prepared, JobError> {
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
    // A restore point read first: its sources' partitions fix their
    // instance counts (`pin_sources`) before the job is planned.
    let restore = match &config.restore_from {
        Some(p) => Some(supervisor::load_restore_point(p)?),
        None => None,
    };
    let graph = match &restore {
        Some((m, _)) => supervisor::pin_sources(&graph, m)?,
        None => graph,
    };
    check_ring_memory(&graph, config)?;
    let (ns, es) = shapes(
        &graph,
        config.standby.is_some(),
        config.standby.as_ref().is_some_and(|s| s.replay_sources),
    );
    let plan = placement::place(&ns, &es, requested, config.chaining);
    Ok(Prepared {
        graph,
        plan,
        restore,
        cores: cores[..requested.min(cores.len())].to_vec(),
    })
}

/// Checks what starting `graph` on `config` refuses before any work —
/// the cores, the restore point and whether the job can restore it — and
/// starts nothing (see [`crate::Job::check_start`]).
pub(crate) fn check_start(
    graph: Arc<Graph>,
    config: &RuntimeConfig,
) -> Result<Option<crate::metrics::RestorePoint>, JobError> {
    let p = prepare(graph, config)?;
    let Some((m, _)) = &p.restore else {
        return Ok(None);
    };
    supervisor::check_restore(m, &p.graph, &p.plan, config)?;
    Ok(Some(m.restore_point()))
}

/// Starts `graph` on worker threads (see [`crate::Job::start`]).
pub(crate) fn start(graph: Arc<Graph>, config: &RuntimeConfig) -> Result<JobHandle, JobError> {
    let Prepared {
        graph,
        plan,
        restore,
        cores,
    } = prepare(graph, config)?;
    panic::install_hook();
    let (sup, handle_parts) =
        supervisor::Supervisor::new(Arc::clone(&graph), plan, config.clone(), cores, restore)?;
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

    /// Stops the job with a savepoint (Flink's stop-with-savepoint): takes
    /// one as [`savepoint`](Self::savepoint) does and, once it is durable
    /// and the output its barrier closes is committed, stops every task
    /// without ending its input — no end-of-input firing, no summary —
    /// and returns the savepoint's directory. [`join`](Self::join) then
    /// returns the report, its `stopped_at` set. The output staged after
    /// the savepoint's barrier is never committed: a job started from the
    /// savepoint ([`crate::RuntimeConfig::restore_from`]) writes it, so
    /// the two runs' committed output is exactly one run's. (A sink that
    /// is not two-phase-commit has written it already, as after any
    /// restart.)
    pub fn stop_with_savepoint(&self) -> Result<PathBuf, JobError> {
        let (reply, rx) = mpsc::channel();
        self.events
            .send(Event::StopWithSavepoint { reply })
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

    /// The job's operators and the edges between them, as built: what a
    /// picture of the job draws.
    pub fn shape(&self) -> crate::metrics::JobShape {
        use crate::runtime::graph::{NodeKind, Partitioning};
        crate::metrics::JobShape {
            operators: self
                .graph
                .nodes
                .iter()
                .map(|n| crate::metrics::OperatorShape {
                    name: n.name.to_string(),
                    parallelism: n.parallelism,
                    source: matches!(n.kind, NodeKind::Source { .. }),
                    sink: n.out.is_none(),
                    standby: n.standby.is_some(),
                })
                .collect(),
            edges: self
                .graph
                .edges
                .iter()
                .map(|e| crate::metrics::EdgeShape {
                    from: e.from,
                    to: e.to,
                    exchange: match e.partitioning {
                        Partitioning::Forward => "forward",
                        Partitioning::Rebalance => "rebalance",
                        Partitioning::Broadcast => "broadcast",
                        Partitioning::Hash(_) => "hash",
                    },
                })
                .collect(),
        }
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
            let instances = metrics.node_instances(i);
            let (records, emitted) = instances
                .iter()
                .fold((0, 0), |(r, e), &(ri, ei)| (r + ri, e + ei));
            OperatorStats {
                name: n.name.to_string(),
                parallelism: n.parallelism,
                records,
                emitted,
                instances,
                time: metrics.node_times(i),
                source: matches!(n.kind, crate::runtime::graph::NodeKind::Source { .. }),
                sink: n.out.is_none(),
            }
        })
        .collect()
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
