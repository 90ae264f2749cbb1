//! Attempts and restarts: starting an attempt's workers, declaring a
//! stalled worker, stopping an attempt, and restarting it — the whole job
//! or one region (see the supervisor's module docs) — where a failed
//! attempt's sinks resume, and how the restart is recorded. What its
//! successor restores (the last complete checkpoint, verified, or an
//! older one if it is damaged) is read by `restore.rs`.
//!
//! A failure is a panic in operator code, a cut input channel, an I/O
//! error, or a worker without a heartbeat for longer than the timeout.
//! The supervisor then stops every worker of the attempt — of the failed
//! task's region under [`Failover::Region`](crate::Failover::Region) —
//! (a stalled one is abandoned: it is fenced by its attempt's cancel flag
//! and number), asks
//! the [`RestartStrategy`](crate::recovery::restart::RestartStrategy), and
//! starts a new attempt from the last complete checkpoint: operator state
//! mapped from its files, sources rewound to their positions, sinks'
//! uncommitted output discarded.

use super::measure::{restart_record, OpenRecovery};
use super::{now_ns, Key, Supervisor};
use crate::error::{JobError, RuntimeError};
use crate::recovery::restart::Decision;
use crate::runtime::channel::WorkerSignal;
use crate::runtime::coord::{Restore, SinkTally};
use crate::runtime::wiring::{lanes, Wiring};
use crate::runtime::CheckpointMode;
use crate::runtime::{worker, JobShared};
use crossbeam_utils::CachePadded;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a restart waits for a stopped attempt's worker to finish the
/// operator build it is in (factories normally take microseconds to
/// milliseconds; mapping a large restored state, longer).
pub(super) const BUILD_WAIT: Duration = Duration::from_secs(30);

/// One run of a region's workers (of the job's, with one region).
pub(super) struct Attempt {
    pub(super) number: u32,
    pub(super) shared: Arc<JobShared>,
    /// Its threads, by worker.
    pub(super) threads: Vec<(usize, JoinHandle<()>)>,
    /// Per worker of the plan: whether its thread of this attempt ended
    /// (`true` from the start for a worker that runs nothing of it).
    pub(super) exited: Vec<bool>,
    /// Threads started.
    pub(super) spawned: usize,
    /// Threads that built their tasks.
    pub(super) built: usize,
    /// Instances whose task has ended.
    pub(super) finished: HashSet<Key>,
    /// The watch of each worker's silence (the engine's one stall rule).
    pub(super) watch: Vec<crate::standby::decide::Detector>,
}

impl Attempt {
    /// Whether every thread has built its tasks.
    pub(super) fn all_built(&self) -> bool {
        self.built == self.spawned
    }

    /// Whether every thread has ended.
    pub(super) fn ended(&self) -> bool {
        self.exited.iter().all(|&e| e)
    }
}

impl Supervisor {
    /// Wires and starts the workers of `region`'s attempt `number`.
    pub(super) fn spawn(
        &self,
        region: usize,
        number: u32,
        restore: Option<Arc<Restore>>,
        targets: &HashMap<Key, u64>,
    ) -> Result<Attempt, JobError> {
        let workers = self.plan.workers;
        let signals: Vec<Arc<WorkerSignal>> = (0..workers)
            .map(|_| Arc::new(WorkerSignal::default()))
            .collect();
        let keys = &self.regions[region].keys;
        let sinks = self.regions[region]
            .own(&self.sinks)
            .into_iter()
            .map(|k| (k, Arc::new(SinkTally::new(*targets.get(&k).unwrap_or(&0)))))
            .collect();
        let standby = self.standby_run(region, number, restore.as_deref())?;
        let shared = Arc::new(JobShared {
            origin: self.origin,
            panic_output: self.config.panic_output,
            names: self.names.clone(),
            metrics: Arc::clone(&self.metrics),
            dead_letters: Arc::clone(&self.dead_letters),
            disk: self.disk.clone(),
            attempt: number,
            cancel: AtomicBool::new(false),
            error: Mutex::new(None),
            failed_at: AtomicU64::new(0),
            fault_tuple: Mutex::new(crate::runtime::task::Blame::default()),
            stalls: Mutex::new(Vec::new()),
            signals: signals.clone(),
            finished_at: AtomicU64::new(0),
            events: self.tx.clone(),
            trigger: AtomicU64::new(0),
            completed: AtomicU64::new(
                restore
                    .as_ref()
                    .filter(|r| r.of_store)
                    .map_or(0, |r| r.checkpoint),
            ),
            whole_at: AtomicU64::new(0),
            incremental: self.config.checkpoint.as_ref().and_then(|c| {
                // Deltas only where a copy off the host holds their chains.
                c.incremental
                    .filter(|_| c.replicate.as_ref().is_none_or(|r| r.0.copies_chains()))
            }),
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
            source_clocks: crate::runtime::source::SourceClocks::new(&self.graph, |n, i| {
                keys.contains(&(n, i))
            }),
            standby: standby.clone(),
            probes: self.config.probes.clone(),
            build_fence: Arc::clone(&self.build_fence),
        });
        let backed = |n: usize| standby.as_ref().is_some_and(|s| s.backs(n));
        let head = |n: usize| standby.as_ref().is_some_and(|s| s.heads(n));
        let mut producers = HashMap::new();
        let mut consumers = HashMap::new();
        for (ei, e) in self.graph.edges.iter().enumerate() {
            // Edges of a backed-up chain: buffer queues into its head, rings
            // of each incarnation's own out of it.
            if self.plan.chained[ei] || backed(e.from) || head(e.to) {
                continue;
            }
            // No lane leaves a region: the region's edges are those out
            // of its instances.
            if !(0..self.graph.nodes[e.from].parallelism).any(|u| keys.contains(&(e.from, u))) {
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
            only: self.regions[region].only.clone(),
            roles: shared
                .standby
                .clone()
                .map(|s| s as Arc<dyn crate::runtime::wiring::WireRoles>),
        });
        // The workers with a task of the region — every worker where the
        // region has standby groups (a standby may be placed, or a new
        // one brought up, on any).
        let runs = |w: usize| {
            standby.is_some()
                || self.regions[region]
                    .tasks
                    .iter()
                    .any(|&t| self.plan.worker_of_task[t] == w)
        };
        let mut exited = vec![true; workers];
        let mut threads = Vec::with_capacity(workers);
        for (w, &core) in self.cores.iter().enumerate().take(workers) {
            if self.regions[region].only.is_some() && !runs(w) {
                continue;
            }
            exited[w] = false;
            let wiring = Arc::clone(&wiring);
            let core = self.config.pin.then_some(core);
            let spawned = std::thread::Builder::new()
                .name(format!("tandem-w{w}"))
                .spawn(move || worker::run(w, core, wiring));
            match spawned {
                Ok(h) => threads.push((w, h)),
                Err(source) => {
                    shared.stop();
                    for (_, t) in threads {
                        let _ = t.join();
                    }
                    return Err(RuntimeError::Spawn { worker: w, source }.into());
                }
            }
        }
        Ok(Attempt {
            number,
            shared,
            spawned: threads.len(),
            threads,
            exited,
            built: 0,
            finished: HashSet::new(),
            watch: vec![self.worker_detector(); workers],
        })
    }

    /// Declares worker `w` of `region`'s attempt stalled since `since`.
    pub(super) fn stalled(
        &mut self,
        region: usize,
        w: usize,
        since: u64,
        evidence: crate::standby::decide::Evidence,
        now: u64,
    ) {
        let shared = &self.attempts[region].shared;
        let (operator, instance) = match shared.stall_note() {
            Some(n) if n.worker == w => {
                shared.note_fault_tuple(crate::runtime::task::Blame {
                    tuple: Some(n.tuple),
                    injected: true,
                });
                (self.names[n.op].to_string(), n.instance)
            }
            _ if shared
                .workers
                .get(w)
                .is_some_and(|l| l.polling.load(Ordering::Acquire) != 0) =>
            {
                // Held in a task poll: the operator whose code it runs.
                let m = shared.workers[w].op.load(Ordering::Relaxed);
                let (node, instance) = ((m >> 32) as usize, (m & 0xffff_ffff) as usize);
                match self.names.get(node) {
                    Some(n) => (n.to_string(), instance),
                    None => (String::from("?"), instance),
                }
            }
            _ => {
                // No probe said who, and it is between tasks: name the
                // chains the worker runs.
                let mut names = Vec::new();
                let mut inst = 0;
                for &t in &self.regions[region].tasks {
                    if self.plan.worker_of_task[t] == w {
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
        self.stalled_worker = Some((region, w));
        self.stall_evidence = Some(evidence);
        shared.fail(JobError::Stalled {
            operator,
            instance,
            millis: (now - since) / 1_000_000,
        });
    }

    /// Stops the attempt's workers: waits briefly for each (a running
    /// worker sees the cancel flag within one poll), abandons a stalled one
    /// at once (it is fenced by the cancel flag and its attempt number).
    pub(super) fn stop_attempt(&mut self, region: usize, stalled: Option<usize>) {
        let attempt = &mut self.attempts[region];
        attempt.shared.stop();
        // A worker abandoned below (stalled, or slow to stop) keeps the
        // attempt's standby run alive, and with it, unless removed now,
        // its files in /dev/shm for as long as the process lives.
        if let Some(s) = &attempt.shared.standby {
            s.remove_files();
        }
        let deadline = Instant::now() + Duration::from_millis(100);
        for (w, t) in std::mem::take(&mut attempt.threads) {
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
        if self.disk.is_some() {
            // The failed attempt's stores and caches are freed: their
            // memory goes back before the next attempt fills its own.
            crate::sys::reap::trim_heap_later();
        }
    }

    /// Waits until no worker of a stopped attempt is building operators
    /// (see [`JobShared::build`]); none starts one afterwards. A factory
    /// that has not returned after [`BUILD_WAIT`] fails the job: a restart
    /// beside it could not be trusted.
    pub(super) fn await_builds(&self) -> Result<(), JobError> {
        let deadline = Instant::now() + BUILD_WAIT;
        loop {
            match self.build_fence.try_write() {
                Ok(_) | Err(std::sync::TryLockError::Poisoned(_)) => return Ok(()),
                Err(std::sync::TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_micros(200));
                }
                Err(std::sync::TryLockError::WouldBlock) => {
                    return Err(JobError::BuildOverrun {
                        attempt: self.attempts.iter().map(|a| a.number).max().unwrap_or(0),
                        secs: BUILD_WAIT.as_secs(),
                    })
                }
            }
        }
    }

    /// Whether `err` is a region's share of a failure of the whole job
    /// that another region's stop counted already: a crash around a
    /// checkpoint's publication, or a sink's failed commit. It stops every
    /// region, and is one failure against the restart strategy, not one
    /// per region (a job of three regions would otherwise spend three
    /// restarts of its budget on one crash).
    fn echoes(&mut self, err: &JobError) -> bool {
        match err {
            JobError::Checkpoint(crate::checkpoint::CheckpointError::Crashed { id, .. }) => {
                self.counted_crash.replace(*id) == Some(*id)
            }
            JobError::Io { operator, .. } => operator == super::commits::COMMIT_ECHO,
            _ => false,
        }
    }

    /// `region`'s attempt failed: stops it and, if the restart strategy
    /// says so, starts its next attempt from the last complete checkpoint
    /// (every other region runs on).
    pub(super) fn on_failure(&mut self, region: usize) -> Result<(), JobError> {
        let detected_at = now_ns(self.origin);
        let shared = Arc::clone(&self.attempts[region].shared);
        let err = shared.take_error().unwrap_or(JobError::Cancelled);
        let stalled = match self.stalled_worker.take() {
            Some((r, w)) if r == region => Some(w),
            other => {
                self.stalled_worker = other;
                None
            }
        };
        self.stop_attempt(region, stalled);
        let sources = self.regions[region].own(&self.sources);
        let sinks = self.regions[region].own(&self.sinks);
        // Where everyone stood when it stopped.
        let sink_written: HashMap<Key, u64> = shared
            .sinks
            .iter()
            .map(|(k, t)| (*k, t.written.load(Ordering::Relaxed)))
            .collect();
        let source_pos: HashMap<Key, u64> = sources
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
        // The takeovers of the stopped attempt are recoveries of their own,
        // before this restart.
        if let Some(sb) = shared.standby.clone() {
            self.record_takeovers(&sb);
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
        self.land_checkpoint_being_written()?;
        let echo = self.echoes(&err);
        if !echo {
            self.failures.push(Duration::from_nanos(detected_at));
        }
        if let JobError::SourceSeek { .. } = err {
            // A source that cannot reach the restored position cannot
            // after a restart either: restarting would only repeat it.
            return Err(err);
        }
        let delay = match self.config.restart.decide(&self.failures) {
            // The failure was counted, and the restart decided, when the
            // first region stopped for it.
            _ if echo => Duration::ZERO,
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
        let evidence = self.stall_evidence.take();
        let mut record = restart_record(
            self.config.failover,
            &err,
            shared.fault_tuple(),
            evidence.map(|e| e.to_string()),
            failed_at / 1000,
            detected_at.saturating_sub(failed_at) / 1000,
        );
        std::thread::sleep(delay);
        // What to restore: the last complete checkpoint, verified; an older
        // retained one if it is damaged.
        let (restore, restored_id) = self.restore_point(&mut record)?;
        record.restored_checkpoint = restored_id;
        let (restarted, kept_running) = self.tasks_through(region);
        record.restarted = restarted;
        record.kept_running = kept_running;
        // Sinks' counts at the restored checkpoint, in the failed attempt.
        let number = self.attempts[region].number;
        let at_restore = |k: &Key| -> u64 {
            match &self.last_complete {
                Some(c) if Some(c.id) == restored_id && c.attempts.get(region) == Some(&number) => {
                    *c.written.get(k).unwrap_or(&0)
                }
                _ => 0,
            }
        };
        let sinks: Vec<SinkAtFailure> = sinks
            .iter()
            .map(|k| SinkAtFailure {
                key: *k,
                written: sink_written[k],
                at_restore: at_restore(k),
                transactional: self.transactional.contains(k),
                finished: restore
                    .as_ref()
                    .and_then(|r| r.instances.get(k))
                    .is_some_and(|i| i.finished),
            })
            .collect();
        let (targets, duplicates) = sink_targets(&sinks);
        self.duplicates += duplicates;
        record.replayed_tuples = sources
            .iter()
            .map(|k| {
                let from = restore
                    .as_ref()
                    .and_then(|r| r.instances.get(k))
                    .and_then(|i| i.position);
                replayed(source_pos[k], from)
            })
            .sum();
        for k in self.regions[region].own(self.committers.keys()) {
            let c = self.committers.remove(&k).expect("listed above");
            self.retired.push(c);
        }
        self.await_builds()?;
        let number = self.next_attempt;
        self.next_attempt += 1;
        self.restarts += 1;
        self.attempts[region] = self.spawn(region, number, restore, &targets)?;
        self.open = Some(OpenRecovery {
            record,
            failed_at,
            detected_at,
            attempt: number,
        });
        Ok(())
    }
}

/// A sink's standing when its attempt failed.
#[derive(Clone, Copy, Debug)]
pub(super) struct SinkAtFailure {
    pub(super) key: Key,
    /// Records it had written in the failed attempt.
    pub(super) written: u64,
    /// Records it had written at the barrier of the restored checkpoint
    /// (0 when the checkpoint is from another attempt, or there is none).
    pub(super) at_restore: u64,
    /// Whether its output is committed per checkpoint (then a replay's
    /// repeats are discarded with the uncommitted epochs).
    pub(super) transactional: bool,
    /// Whether the restored checkpoint says it had already finished.
    pub(super) finished: bool,
}

/// Where each sink of the restarted attempt counts itself caught up (the
/// records it redoes; 0 for one that had finished), and how many records
/// non-transactional sinks will emit a second time.
pub(super) fn sink_targets(sinks: &[SinkAtFailure]) -> (HashMap<Key, u64>, u64) {
    let mut targets = HashMap::new();
    let mut duplicates = 0;
    for s in sinks {
        let redo = s.written.saturating_sub(s.at_restore);
        if !s.transactional {
            duplicates += redo;
        }
        targets.insert(s.key, if s.finished { 0 } else { redo });
    }
    (targets, duplicates)
}

/// Inputs a source replays: from its restored position (its start without
/// one) up to where it had read.
pub(super) fn replayed(read: u64, restored_from: Option<u64>) -> u64 {
    read.saturating_sub(restored_from.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sink(
        n: usize,
        written: u64,
        at_restore: u64,
        transactional: bool,
        finished: bool,
    ) -> SinkAtFailure {
        SinkAtFailure {
            key: (n, 0),
            written,
            at_restore,
            transactional,
            finished,
        }
    }

    #[test]
    fn a_plain_sink_counts_what_it_redoes_as_duplicates() {
        let (t, d) = sink_targets(&[sink(1, 100, 40, false, false)]);
        assert_eq!(t[&(1, 0)], 60);
        assert_eq!(d, 60);
    }

    #[test]
    fn a_transactional_sink_redoes_without_duplicates() {
        let (t, d) = sink_targets(&[sink(1, 100, 40, true, false), sink(2, 7, 0, false, false)]);
        assert_eq!(t[&(1, 0)], 60);
        assert_eq!(t[&(2, 0)], 7);
        assert_eq!(d, 7);
    }

    #[test]
    fn a_finished_sink_is_caught_up_at_once_and_never_behind_its_checkpoint() {
        let (t, d) = sink_targets(&[
            sink(1, 100, 100, false, true),
            sink(2, 10, 30, false, false),
        ]);
        assert_eq!(t[&(1, 0)], 0);
        // Counts below the checkpoint's (another attempt's) never underflow.
        assert_eq!(t[&(2, 0)], 0);
        assert_eq!(d, 0);
    }

    #[test]
    fn a_source_replays_from_its_restored_position_or_its_start() {
        assert_eq!(replayed(500, Some(200)), 300);
        assert_eq!(replayed(500, None), 500);
        assert_eq!(replayed(100, Some(200)), 0);
    }
}
