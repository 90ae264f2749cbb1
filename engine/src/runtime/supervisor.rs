//! The supervisor: runs attempts of a job, coordinates their checkpoints,
//! and restarts them from the last complete checkpoint when one fails.
//!
//! Its loop ([`Supervisor::run`]) takes the workers' events, looks at the
//! attempt's error and heartbeats, and does the periodic work of each
//! responsibility, each in its own module:
//!
//! - [`attempt`] — starting an attempt's workers, stalls, restarts;
//! - [`checkpoints`] — the checkpoint coordinator and the sinks' commits;
//! - [`finish`] — the end: success, or a stop with a savepoint;
//! - [`measure`] — recovery figures per fault;
//! - [`regions`] — the failover regions an attempt runs;
//! - [`restore`] — reading the checkpoint a restart or the job starts from;
//! - [`standbys`] — the standby groups of an attempt.
//!
//! The job runs as *regions* ([`Region`]): with [`Failover::Full`](crate::Failover::Full) one, the
//! whole job; with [`Failover::Region`](crate::Failover::Region) one per failover region of the
//! graph ([`Graph::regions`]). Each region runs as attempts of its own —
//! its tasks on threads of their own, numbered from one job-wide sequence
//! (an attempt number fences a stopped attempt's sinks, dead letters and
//! standby files) — so a region's failure stops and restarts that region
//! alone, from its state and source positions in the last complete
//! checkpoint. Checkpoints stay job-wide: one barrier id triggered in every
//! region, complete once every instance of every region acknowledged.

mod attempt;
mod checkpoints;
mod commits;
mod finish;
mod measure;
mod regions;
mod restore;
mod standbys;

use super::coord::Event;
#[cfg(test)]
pub(super) use super::placeholder_shared as test_shared;
use super::RuntimeConfig;
use crate::error::JobError;
use crate::metrics::{JobMetrics, JobReport, RecoveryRecord, StandbyStats};
use crate::operator::Committer;
use crate::runtime::dead_letter::DeadLetters;
use crate::runtime::graph::{Graph, NodeKind};
use crate::runtime::placement::Plan;
use crate::standby::decide::Evidence;
use attempt::Attempt;
use checkpoints::{Acked, Completed, Coordinator};
use measure::OpenRecovery;
use regions::{regions, Region};
use restore::{build_restore, refuse_unrestorable};
pub(in crate::runtime) use restore::{check_restore, load_restore_point, pin_sources};
use standbys::validate_standby;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, OnceLock};
use std::time::Duration;

/// The pseudo-operator whose file lists the instances that had finished.
pub(crate) const JOB_META: &str = "~job";
/// The pseudo-operator whose file lists every operator's parallelism when
/// the checkpoint was taken (what a restore at another one redistributes
/// from).
pub(crate) const JOB_SHAPE: &str = crate::checkpoint::manifest::SHAPE_ENTRY;

type Key = (usize, usize);

pub(crate) struct Supervisor {
    graph: Arc<Graph>,
    plan: Plan,
    config: RuntimeConfig,
    cores: Vec<usize>,
    origin: crate::sys::clock::Origin,
    names: Vec<Arc<str>>,
    metrics: Arc<JobMetrics>,
    dead_letters: Arc<DeadLetters>,
    /// The disk state backend's place, when the job chose it.
    disk: Option<Arc<crate::state::disk::DiskPlace>>,
    pacing_start: Arc<OnceLock<u64>>,
    tx: mpsc::Sender<Event>,
    rx: mpsc::Receiver<Event>,
    /// The current attempt of each region.
    attempts: Vec<Attempt>,
    regions: Vec<Region>,
    /// The region of each operator instance.
    region_of: HashMap<Key, usize>,
    /// The number the next attempt of any region gets.
    next_attempt: u32,
    /// Restarts so far, of the job or of a region.
    restarts: u32,
    coord: Option<Coordinator>,
    committers: HashMap<Key, Box<dyn Committer>>,
    /// The committers of stopped attempts: never called to commit again,
    /// but settled before the job returns (see [`Committer::settle`]).
    retired: Vec<Box<dyn Committer>>,
    last_complete: Option<Completed>,
    /// The attempt "crashed" around a checkpoint's publication: the
    /// restart reads the store, as a new process would, instead of
    /// trusting what this one last saw complete.
    restore_from_store: bool,
    failures: Vec<Duration>,
    /// The checkpoint whose crash around its publication was counted as a
    /// failure already (every region stops for it; see `echoes`).
    counted_crash: Option<u64>,
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
    /// The worker found stalled (with its region), while its attempt is
    /// being stopped.
    stalled_worker: Option<(usize, usize)>,
    /// What the stall watch saw of the worker it declared stalled.
    stall_evidence: Option<Evidence>,
    /// The checkpoint the job started from, and newer ones passed over.
    /// Once the job has ended: how long it ran, µs (published in its
    /// last status).
    ended_after_us: Option<u64>,
    restored_from: Option<(crate::metrics::RestorePoint, Vec<String>)>,
    standby_stats: Option<StandbyStats>,
    /// When the last [`crate::JobStatus`] was published.
    status_at: u64,
    /// Shared with every attempt's workers: see `JobShared::build`.
    build_fence: Arc<std::sync::RwLock<()>>,
    /// The savepoint the job stops with, once durable
    /// (`JobHandle::stop_with_savepoint`).
    stopping: Option<std::path::PathBuf>,
}

pub(super) fn now_ns(origin: crate::sys::clock::Origin) -> u64 {
    origin.elapsed_ns()
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
        restore: Option<(crate::checkpoint::Manifest, Vec<String>)>,
    ) -> Result<(Self, (mpsc::Sender<Event>, Arc<JobMetrics>)), JobError> {
        // What killed runs left where this job keeps its files: their
        // scratch directories, whose locks died with them (sys::scratch).
        crate::sys::scratch::sweep_usual();
        crate::sys::scratch::sweep(&standbys::memory_dir());
        if let Some(d) = &config.run_dir {
            crate::sys::scratch::sweep(d);
        }
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
        validate_standby(&graph, &plan, &config)?;
        let regions = regions(&graph, &plan, config.failover);
        let region_of = regions
            .iter()
            .enumerate()
            .flat_map(|(r, g)| g.keys.iter().map(move |&k| (k, r)))
            .collect();
        let disk = match &config.state_backend {
            crate::state::StateBackend::Disk(d) => Some(Arc::new(
                crate::state::disk::DiskPlace::open(d, config.run_dir.as_deref())?,
            )),
            crate::state::StateBackend::Memory => None,
        };
        let coord = match &config.checkpoint {
            Some(c) => Some(Coordinator::open(c, &config)?),
            None => None,
        };
        let (tx, rx) = mpsc::channel();
        // The engine clock's origin: the one live readers see too.
        let origin = metrics.origin;
        let mut sup = Supervisor {
            names: graph.nodes.iter().map(|n| Arc::clone(&n.name)).collect(),
            dead_letters: Arc::new(DeadLetters::new(&graph.name, config.run_dir.clone())),
            disk,
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
            status_at: 0,
            pacing_start: Arc::new(OnceLock::new()),
            tx: tx.clone(),
            rx,
            attempts: Vec::new(),
            regions,
            region_of,
            next_attempt: 0,
            restarts: 0,
            coord,
            committers: HashMap::new(),
            retired: Vec::new(),
            last_complete: None,
            restore_from_store: false,
            failures: Vec::new(),
            counted_crash: None,
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
            stall_evidence: None,
            restored_from: None,
            ended_after_us: None,
            standby_stats: None,
            build_fence: Arc::default(),
            stopping: None,
        };
        if let (Some(c), Some((m, _))) = (&mut sup.coord, &restore) {
            c.next_id = c.next_id.max(m.id + 1);
        }
        let restore = match restore {
            Some((m, skipped)) => {
                sup.restored_from = Some((m.restore_point(), skipped));
                let r = Arc::new(build_restore(&m, &sup.graph, sup.store_dir().as_deref())?);
                refuse_unrestorable(&r, &m, &sup.graph, &sup.plan, &sup.config)?;
                // Until this run completes a checkpoint of its own, a
                // restart restores the one it started from — not nothing.
                sup.last_complete = Some(Completed {
                    id: m.id,
                    manifest: m,
                    written: HashMap::new(),
                    attempts: Vec::new(),
                });
                Some(r)
            }
            None => None,
        };
        let targets = HashMap::new();
        for r in 0..sup.regions.len() {
            let number = sup.next_attempt;
            sup.next_attempt += 1;
            match sup.spawn(r, number, restore.clone(), &targets) {
                Ok(a) => sup.attempts.push(a),
                Err(e) => {
                    // The regions already started stop before the error
                    // is returned: nothing of the job outlives it.
                    for r in 0..sup.attempts.len() {
                        sup.stop_attempt(r, None);
                    }
                    return Err(e);
                }
            }
        }
        Ok((sup, (tx, metrics)))
    }

    /// The supervisor loop; returns the job's outcome.
    pub(crate) fn run(mut self) -> Result<JobReport, JobError> {
        let mut outcome = self.run_loop();
        // Whatever happened, no worker of ours outlives the job unfenced,
        // and none builds an operator once it has returned (one that
        // could not be waited for makes a success an error: its factory
        // may still touch the job's output).
        for a in &self.attempts {
            a.shared.stop();
            if let Some(s) = &a.shared.standby {
                // Not left to the last owner's drop: an abandoned worker
                // may hold the run for as long as the process lives.
                s.remove_files();
            }
        }
        if let Err(e) = self.await_builds() {
            if outcome.is_ok() {
                outcome = Err(e);
            }
        }
        if let Err(e) = self.settle_sinks() {
            if outcome.is_ok() {
                outcome = Err(e);
            }
        }
        if self.ended_after_us.is_none() {
            // A job that failed: a watcher's last look says so, and how
            // long it ran.
            self.ended_after_us = Some(now_ns(self.origin) / 1000);
            self.publish_status();
        }
        if outcome.is_err() {
            self.dead_letters.discard();
        }
        if let Some(mut c) = self.coord.take() {
            for w in c.savepoint_waiters.drain(..) {
                let _ = w.send(Err(JobError::EndedBeforeSavepoint));
            }
            // Checkpoints in a directory of the engine's own choosing are
            // of no use once the job is over, whether it succeeded or not:
            // dropping `c` ends the store's thread, then removes them.
            drop(c);
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

    /// The region whose current attempt is `number` (`None`: a stopped
    /// attempt's, fenced off).
    fn current(&self, number: u32) -> Option<usize> {
        self.attempts.iter().position(|a| a.number == number)
    }

    fn handle(&mut self, e: Event) {
        let region = match &e {
            Event::Ack { attempt, .. }
            | Event::Decline { attempt, .. }
            | Event::TaskDone { attempt, .. }
            | Event::Built { attempt }
            | Event::Failed { attempt }
            | Event::WorkerExit { attempt, .. }
            | Event::Committer { attempt, .. } => self.current(*attempt),
            Event::Savepoint { .. } | Event::StopWithSavepoint { .. } | Event::Cancel => None,
        };
        match e {
            Event::Ack {
                id,
                node,
                instance,
                state,
                position,
                written,
                epoch,
                ..
            } if region.is_some() => {
                if let Some(f) = self.coord.as_mut().and_then(|c| c.in_flight.as_mut()) {
                    // A fenced primary of a standby group that wakes up late
                    // never replaces its successor's acknowledgement.
                    let newer = f
                        .acks
                        .get(&(node, instance))
                        .is_some_and(|a| a.epoch > epoch);
                    if f.id == id && !newer {
                        f.acks.insert(
                            (node, instance),
                            Acked {
                                state,
                                position,
                                written,
                                epoch,
                            },
                        );
                    }
                }
            }
            Event::Decline {
                id,
                node,
                instance,
                reason,
                ..
            } if region.is_some() => {
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
            Event::TaskDone { task, .. } if region.is_some() => {
                let r = region.expect("checked");
                self.attempts[r]
                    .finished
                    .extend(self.members[task].iter().copied());
            }
            Event::Built { .. } if region.is_some() => {
                self.attempts[region.expect("checked")].built += 1
            }
            // The tick looks at the attempt's error.
            Event::Failed { .. } if region.is_some() => {}
            Event::WorkerExit { worker, .. } if region.is_some() => {
                self.attempts[region.expect("checked")].exited[worker] = true;
            }
            Event::Committer {
                node,
                instance,
                committer,
                ..
            } if region.is_some() => {
                self.transactional.insert((node, instance));
                self.committers.insert((node, instance), committer);
            }
            Event::Savepoint { reply } => match &mut self.coord {
                Some(c) => c.savepoint_waiters.push(reply),
                None => {
                    let _ = reply.send(Err(JobError::NoSavepoint {
                        reason: "savepoints need checkpointing to be configured".into(),
                    }));
                }
            },
            Event::StopWithSavepoint { reply } => match &mut self.coord {
                // The engine's own checkpoint directory goes with the job.
                Some(c) if c.temp_dir.is_some() => {
                    let _ = reply.send(Err(JobError::NoSavepoint {
                        reason:
                            "stopping with a savepoint needs a checkpoint directory that \
                                 outlives the job (CheckpointConfig::dir or RuntimeConfig::run_dir)"
                                .into(),
                    }));
                }
                Some(c) => {
                    c.stop_at_savepoint = true;
                    c.savepoint_waiters.push(reply);
                }
                None => {
                    let _ = reply.send(Err(JobError::NoSavepoint {
                        reason: "stopping with a savepoint needs checkpointing to be configured"
                            .into(),
                    }));
                }
            },
            Event::Cancel => {
                self.cancelled = true;
                for a in &self.attempts {
                    a.shared.fail(JobError::Cancelled);
                }
            }
            // A stopped attempt's sink built late: its committer commits
            // nothing, but its sync thread is waited for at the end.
            Event::Committer { committer, .. } => self.retired.push(committer),
            // Events of earlier attempts: fenced off.
            _ => {}
        }
    }

    /// Periodic work; `Some` when the job is over.
    fn tick(&mut self) -> Result<Option<JobReport>, JobError> {
        if self.stopping.is_some() {
            return self.on_stopped().map(Some);
        }
        let now = now_ns(self.origin);
        if let Some(r) = self.attempts.iter().position(|a| a.shared.has_error()) {
            self.on_failure(r)?;
            return Ok(None);
        }
        for r in 0..self.attempts.len() {
            if !self.attempts[r].all_built() {
                continue;
            }
            let silent = self.watch_workers(r, now);
            let stalled = if self.heartbeats {
                silent
                    .iter()
                    .enumerate()
                    .find_map(|(w, s)| s.map(|b| (w, b)))
            } else {
                self.unwatchable(r, &silent)
            };
            if let Some((w, (b, evidence))) = stalled {
                self.stalled(r, w, b, evidence, now);
                self.on_failure(r)?;
                return Ok(None);
            }
        }
        if self.attempts.iter().all(|a| a.exited.iter().all(|&e| e)) {
            return self.on_success();
        }
        self.coordinate()?;
        if self.stopping.is_some() {
            return self.on_stopped().map(Some);
        }
        self.measure_recovery(now);
        if now.saturating_sub(self.status_at) >= crate::metrics::STATUS_PUBLISH_NS {
            self.status_at = now;
            self.publish_status();
        }
        Ok(None)
    }

    /// A watch of one worker's silence: for restart-all, at the runtime's
    /// heartbeat timeout; without a restart strategy, only as the last
    /// resort ([`Self::unwatchable`]).
    pub(super) fn worker_detector(&self) -> crate::standby::decide::Detector {
        use crate::standby::decide::{base_timeout, Detector, Watched};
        let kind = if self.heartbeats {
            Watched::Worker
        } else {
            Watched::LastResort
        };
        let configured = self.config.heartbeat_timeout.as_nanos() as u64;
        Detector::new(base_timeout(kind, configured))
    }

    /// Judges each running worker's silence by the engine's one stall rule
    /// (`standby::decide::judge`, through each worker's detector): its
    /// heartbeat, where its task-poll marks say it is, and what its thread
    /// did. Per worker: its last heartbeat if it is stalled.
    fn watch_workers(&mut self, region: usize, now: u64) -> Vec<Option<(u64, Evidence)>> {
        use crate::standby::decide::{Observation, Verdict, WorkerAt};
        let attempt = &mut self.attempts[region];
        let shared = &attempt.shared;
        let mut silent = vec![None; shared.beats.len()];
        for (w, b) in shared.beats.iter().enumerate() {
            let b = b.load(Ordering::Relaxed);
            if attempt.exited[w] {
                continue;
            }
            let o = Observation {
                now,
                beat: b,
                progress: 0,
                // A long step of the engine's own (a snapshot, a restore):
                // not checked.
                long_step: b == 0,
            };
            let look = || {
                let Some(l) = shared.workers.get(w) else {
                    return (WorkerAt::Between { since: 0 }, None);
                };
                let since = l.since.load(Ordering::Acquire);
                let at = if l.polling.load(Ordering::Acquire) == 0 {
                    WorkerAt::Between { since }
                } else {
                    // Any task of the worker: restart-all answers for them all.
                    WorkerAt::Primary { since }
                };
                let tid = l.tid.load(Ordering::Acquire);
                (at, crate::sys::thread::sample(tid, now))
            };
            if let Some(d) = attempt.watch.get_mut(w) {
                if let Verdict::Stalled(e) = d.observe(o, look) {
                    silent[w] = Some((b, e));
                }
            }
        }
        silent
    }

    /// Without a restart strategy nothing restarts the workers; but
    /// standbys are tasks on them. A stuck worker (a stall that never
    /// ends) whose standby group's standby sits on a stuck worker too — or
    /// every worker stuck — means no standby can run to take over, and the
    /// job would hang: the worker (and its silence) to fail the attempt
    /// with instead, naming the stall. `silent`: the workers' watch.
    fn unwatchable(
        &self,
        region: usize,
        silent: &[Option<(u64, Evidence)>],
    ) -> Option<(usize, (u64, Evidence))> {
        let attempt = &self.attempts[region];
        let sb = attempt.shared.standby.as_ref()?;
        let beats = &attempt.shared.beats;
        let silent = |w: usize| -> Option<(usize, (u64, Evidence))> {
            silent.get(w).copied().flatten().map(|b| (w, b))
        };
        let live: Vec<usize> = (0..beats.len()).filter(|&w| !attempt.exited[w]).collect();
        if !live.is_empty() && live.iter().all(|&w| silent(w).is_some()) {
            // The worker an injected stall holds, if one does.
            let noted = attempt.shared.stall_note().map(|n| n.worker);
            let w = live
                .iter()
                .copied()
                .find(|&w| Some(w) == noted)
                .unwrap_or(live[0]);
            return silent(w);
        }
        let mut groups: Vec<_> = sb.groups.values().collect();
        groups.sort_by_key(|g| (g.node, g.instance));
        groups.into_iter().find_map(|g| {
            if g.done.load(Ordering::Acquire) {
                return None;
            }
            let primary = silent(g.reader_workers[0].load(Ordering::Acquire))?;
            let standby = g.standby_worker.load(Ordering::Acquire);
            (standby == crate::runtime::standby::group::NONE || silent(standby).is_some())
                .then_some(primary)
        })
    }
}
