//! The checkpoint coordinator.
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

use super::commits::{commit_all, CommitFailure};
use super::{Key, Supervisor, JOB_META, JOB_SHAPE};
use crate::checkpoint::{
    self, Manifest, OperatorSnapshot, Pending, Position, SnapshotBytes, SnapshotStore,
};
use crate::error::JobError;
use crate::metrics::CheckpointStats;
use crate::recovery::compose::{across_takeover, AcrossTakeover, GroupAtCheckpoint};
use crate::recovery::interval::{adaptive_interval, IntervalInputs};
use crate::runtime::standby::group::Group;
use crate::runtime::CheckpointMode;
use crate::runtime::RuntimeConfig;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

pub(super) struct Acked {
    pub(super) state: Option<SnapshotBytes>,
    pub(super) position: Option<u64>,
    pub(super) written: Option<u64>,
    /// The epoch of the standby group's primary that acknowledged (0: no
    /// standby).
    pub(super) epoch: u64,
}

pub(super) struct InFlight {
    pub(super) id: u64,
    pub(super) savepoint: bool,
    pub(super) started: Instant,
    pub(super) acks: HashMap<Key, Acked>,
    /// The last look found a standby group's acknowledgement from a
    /// replaced primary (declined if the next look agrees).
    pub(super) declining: bool,
}

pub(super) struct Writing {
    /// When its barrier was triggered.
    pub(super) started: Instant,
    pub(super) id: u64,
    pub(super) pending: Pending,
    pub(super) finished: HashSet<Key>,
    pub(super) written: HashMap<Key, u64>,
    pub(super) savepoint: bool,
}

/// The last checkpoint known complete: what a restart restores.
pub(super) struct Completed {
    pub(super) id: u64,
    pub(super) manifest: Manifest,
    /// Sink counts at its barrier, each valid only in the attempt of its
    /// region that acknowledged it.
    pub(super) written: HashMap<Key, u64>,
    /// Those attempts, by region (empty: a checkpoint of an earlier run).
    pub(super) attempts: Vec<u32>,
}

/// The checkpoint coordinator's state.
pub(super) struct Coordinator {
    pub(super) store: SnapshotStore,
    /// A directory the engine chose (no directory was named): removed with
    /// the coordinator, after the store (whose thread ends first), whether
    /// the job succeeded or not — and by the next job's sweep if this
    /// process is killed.
    pub(super) temp_dir: Option<crate::sys::scratch::ScratchDir>,
    pub(super) mode: CheckpointMode,
    pub(super) interval: Duration,
    pub(super) adaptive: Option<(Duration, Duration)>,
    pub(super) timeout: Duration,
    pub(super) min_pause: Duration,
    pub(super) tolerable: u32,
    pub(super) next_id: u64,
    pub(super) in_flight: Option<InFlight>,
    pub(super) writing: Option<Writing>,
    pub(super) last_trigger: Option<Instant>,
    pub(super) last_end: Option<Instant>,
    pub(super) consecutive_failures: u32,
    pub(super) savepoint_waiters: Vec<mpsc::Sender<Result<PathBuf, JobError>>>,
    /// The next savepoint stops the job once it is durable.
    pub(super) stop_at_savepoint: bool,
    pub(super) stats: CheckpointStats,
    pub(super) write_secs: f64,
}

impl Supervisor {
    /// The job's checkpoint directory, if it takes checkpoints.
    pub(super) fn store_dir(&self) -> Option<std::path::PathBuf> {
        self.coord.as_ref().map(|c| c.store.dir().to_path_buf())
    }

    /// After a failure: the checkpoint in flight is abandoned; one being
    /// written is complete, so it lands, its output is committed and it
    /// becomes what the restart restores.
    pub(super) fn land_checkpoint_being_written(&mut self) -> Result<(), JobError> {
        let Some(c) = &mut self.coord else {
            return Ok(());
        };
        if c.in_flight.take().is_some() {
            c.stats.pending += 1;
        }
        let Some(w) = c.writing.take() else {
            return Ok(());
        };
        match w.pending.wait() {
            Ok(p) => {
                if w.savepoint && std::mem::take(&mut c.stop_at_savepoint) {
                    self.stopping = Some(p.manifest.dir.clone());
                }
                c.published(w.id, w.started, &p, w.savepoint);
                // A commit that fails here is retried by the restore (the
                // sinks commit what the restored checkpoint covers).
                self.completed(w.id, w.written, &w.finished, p.manifest);
            }
            Err(checkpoint::CheckpointError::Crashed { id, published }) => {
                self.crashed(id, published)
            }
            Err(e) => c.failed(format!("checkpoint {}: {e}", w.id)),
        }
        Ok(())
    }

    /// Checkpoint `id` is durable with `manifest`: it is what a restart
    /// restores, and the sinks' output staged under it is committed.
    /// `false` when a commit failed: the attempt fails, and the restart
    /// from this checkpoint commits that output (the sinks settle what the
    /// restored checkpoint covers as they open).
    pub(super) fn completed(
        &mut self,
        id: u64,
        written: HashMap<Key, u64>,
        finished: &HashSet<Key>,
        manifest: Manifest,
    ) -> bool {
        if manifest.kind == checkpoint::SnapshotKind::Checkpoint {
            // The next checkpoint's deltas may apply over this one.
            for a in &self.attempts {
                a.shared.completed.store(id, Ordering::Release);
            }
        }
        self.last_complete = Some(Completed {
            id,
            manifest,
            written,
            attempts: self.attempts.iter().map(|a| a.number).collect(),
        });
        let committed = commit_all(
            &mut self.committers,
            &self.names,
            self.config.probes.as_ref(),
            id,
            finished,
        );
        match committed {
            Ok(()) => true,
            Err(f) => {
                self.commit_failed(f, &format!("checkpoint {id}"));
                false
            }
        }
    }

    /// The process "crashed" around checkpoint `id`'s publication: the
    /// attempt ends as a crash would end it, and the restart reads the
    /// store as a new process would.
    pub(super) fn crashed(&mut self, id: u64, published: bool) {
        if let Some(c) = &mut self.coord {
            c.stats.pending += 1;
        }
        self.restore_from_store = true;
        // As a crash of the process: every region restarts.
        for a in &self.attempts {
            a.shared
                .fail(JobError::Checkpoint(checkpoint::CheckpointError::Crashed {
                    id,
                    published,
                }));
        }
    }

    /// The coordinator's periodic work: land a durable checkpoint, submit
    /// or time out the one in flight, start the next when it is due.
    pub(super) fn coordinate(&mut self) -> Result<(), JobError> {
        if self.coord.is_none() {
            return Ok(());
        }
        self.land_durable()?;
        if !self.complete_in_flight()? {
            // Phase one is not durable everywhere yet: look again at the
            // next tick — never block the loop.
            return Ok(());
        }
        let c = self.coord.as_mut().expect("checked above");
        if c.consecutive_failures > c.tolerable {
            return Err(JobError::CheckpointsFailing {
                failures: c.consecutive_failures,
                last: c.stats.last_failure.clone().unwrap_or_default(),
            });
        }
        self.trigger_when_due();
        Ok(())
    }

    /// A checkpoint whose files and manifest are durable: publish the
    /// outcome (savepoint waiters, the adaptive interval) and commit the
    /// sinks.
    fn land_durable(&mut self) -> Result<(), JobError> {
        let Some(c) = &mut self.coord else {
            return Ok(());
        };
        let Some(r) = c.writing.as_mut().and_then(|w| w.pending.try_wait()) else {
            return Ok(());
        };
        let w = c.writing.take().expect("checked above");
        match r {
            Ok(p) => {
                let secs = p.write_time.as_secs_f64();
                let bytes = p.manifest.payload_bytes();
                if w.savepoint && std::mem::take(&mut c.stop_at_savepoint) {
                    self.stopping = Some(p.manifest.dir.clone());
                }
                c.published(w.id, w.started, &p, w.savepoint);
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
                self.completed(w.id, w.written, &w.finished, p.manifest);
            }
            Err(checkpoint::CheckpointError::Crashed { id, published }) => {
                self.crashed(id, published)
            }
            Err(checkpoint::CheckpointError::Replication {
                id,
                source: checkpoint::ReplicationError::Fenced(why),
            }) => {
                // Another process owns this job's state now: stop at once,
                // committing nothing more.
                return Err(JobError::Checkpoint(
                    checkpoint::CheckpointError::Replication {
                        id,
                        source: checkpoint::ReplicationError::Fenced(why),
                    },
                ));
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
        Ok(())
    }

    /// The checkpoint in flight: submitted once every instance acknowledged
    /// (or had finished) and every sink's phase one is durable, failed past
    /// its timeout. `false` while sinks are still staging.
    fn complete_in_flight(&mut self) -> Result<bool, JobError> {
        let Some(c) = &mut self.coord else {
            return Ok(true);
        };
        let Some(f) = &mut c.in_flight else {
            return Ok(true);
        };
        // Standby groups whose output ended count as finished: a new
        // primary's task is not the one the plan placed.
        // (A copy only when a group has ended: this runs every tick while
        // a checkpoint is in flight.)
        let runs: Vec<_> = self
            .attempts
            .iter()
            .filter_map(|a| a.shared.standby.clone())
            .collect();
        let mut finished = match &self.attempts[..] {
            [one] => std::borrow::Cow::Borrowed(&one.finished),
            more => std::borrow::Cow::Owned(
                more.iter()
                    .flat_map(|a| a.finished.iter().copied())
                    .collect::<HashSet<Key>>(),
            ),
        };
        for sb in &runs {
            for g in sb.groups.values() {
                if !g.done.load(Ordering::Acquire) {
                    continue;
                }
                // Every operator of the chain.
                for m in g.members() {
                    if !finished.contains(&(m, g.instance)) {
                        finished.to_mut().insert((m, g.instance));
                    }
                }
            }
        }
        let mut complete = all_acknowledged(&self.all, &f.acks, &finished);
        if complete && !runs.is_empty() {
            let groups: HashMap<Key, &Arc<Group>> = runs
                .iter()
                .flat_map(|sb| sb.groups.iter().map(|(k, g)| (*k, g)))
                .collect();
            let mut keys: Vec<Key> = groups.keys().copied().collect();
            keys.sort_unstable();
            let seen: Vec<GroupAtCheckpoint> = keys
                .iter()
                .map(|k| {
                    let g = &groups[k];
                    let replaying = g.replaying.load(Ordering::Acquire);
                    let done = g.done.load(Ordering::Acquire);
                    GroupAtCheckpoint {
                        acked_epoch: f.acks.get(k).map(|a| a.epoch),
                        current_epoch: g.live.current(),
                        replaying,
                        done,
                    }
                })
                .collect();
            let verdict = across_takeover(&seen);
            let confirmed = std::mem::replace(
                &mut f.declining,
                matches!(verdict, AcrossTakeover::Decline(_)),
            );
            match verdict {
                AcrossTakeover::Complete => {}
                AcrossTakeover::Wait => complete = false,
                // An acknowledgement the new primary sent before it
                // caught up is in the channel by the next tick (the
                // loop drains it first): decline only if the verdict
                // stands then.
                AcrossTakeover::Decline(_) if !confirmed => complete = false,
                AcrossTakeover::Decline(i) => {
                    let (node, instance) = keys[i];
                    let id = f.id;
                    c.in_flight = None;
                    c.overtaken(format!(
                            "checkpoint {id}: declined — `{}` instance {instance} acknowledged it, then its standby took over from past the barrier",
                            self.names[node]
                        ));
                    return Ok(true);
                }
            }
        }
        if !complete {
            if f.started.elapsed() > c.timeout {
                let id = f.id;
                // Who it waited for: the first few instances without an
                // acknowledgement.
                let missing: Vec<String> = self
                    .all
                    .iter()
                    .filter(|k| !f.acks.contains_key(k) && !finished.contains(k))
                    .map(|&(n, i)| format!("`{}` instance {i}", self.names[n]))
                    .collect();
                let waited = match missing.len() {
                    0 => String::new(),
                    n if n <= 4 => format!(" waiting for {}", missing.join(", ")),
                    n => format!(
                        " waiting for {} and {} more",
                        missing[..4].join(", "),
                        n - 4
                    ),
                };
                c.in_flight = None;
                c.failed(format!(
                    "checkpoint {id} timed out after {} ms{waited}",
                    c.timeout.as_millis()
                ));
            }
            return Ok(true);
        }
        // Phase one must be durable everywhere before the checkpoint can be
        // published (a sink may stage asynchronously).
        let id = f.id;
        let mut all_prepared = true;
        let mut failed = None;
        for (&(node, instance), cm) in self.committers.iter_mut() {
            match cm.prepared(id) {
                Ok(ready) => all_prepared &= ready,
                Err(source) => {
                    failed = Some(JobError::Io {
                        operator: self.names[node].to_string(),
                        instance,
                        context: format!("staging the output of checkpoint {id}"),
                        path: None,
                        source,
                    });
                    break;
                }
            }
        }
        if let Some(e) = failed {
            // The sink failed (an earlier epoch's publish too, reported at
            // the first look after it): the checkpoint cannot complete, and
            // the attempt fails as for a failed commit. The checkpoint is
            // one the restart abandons — counted failed, not against the
            // consecutive failures tolerated: the restart strategy counts
            // the sink's failure.
            c.in_flight = None;
            c.overtaken(format!("checkpoint {id}: {e}"));
            let f = CommitFailure {
                error: Box::new(e),
                injected: false,
            };
            self.commit_failed(f, &format!("checkpoint {id}"));
            return Ok(true);
        }
        if !all_prepared {
            return Ok(false);
        }
        let f = c.in_flight.take().expect("checked above");
        c.submit(f, &self.all, &finished, &self.names, &self.sources);
        Ok(true)
    }

    /// Starts the next checkpoint when it is due (or a savepoint is
    /// asked for), none is in flight or being written, every worker has
    /// built its tasks and a source still runs.
    fn trigger_when_due(&mut self) {
        if self.stopping.is_some() {
            return;
        }
        let Some(c) = &mut self.coord else { return };
        let sources_live = self.sources.iter().any(|k| {
            let r = self.region_of[k];
            !self.attempts[r].finished.contains(k)
        });
        let all_built = self.attempts.iter().all(|a| a.all_built());
        if c.in_flight.is_none()
            && c.writing.is_none()
            && all_built
            && sources_live
            && (c.until_due().is_zero() || !c.savepoint_waiters.is_empty())
        {
            let id = c.next_id;
            c.next_id += 1;
            c.stats.started += 1;
            c.last_trigger = Some(Instant::now());
            c.in_flight = Some(InFlight {
                id,
                savepoint: !c.savepoint_waiters.is_empty(),
                started: Instant::now(),
                acks: HashMap::new(),
                declining: false,
            });
            let whole = !c.savepoint_waiters.is_empty();
            for a in &self.attempts {
                if whole {
                    a.shared.whole_at.store(id, Ordering::Release);
                }
                a.shared.trigger.store(id, Ordering::Release);
            }
        }
    }
}

/// Whether checkpoint acknowledgements `acks` cover every instance in
/// `all` that had not `finished` before the barrier could reach it.
pub(super) fn all_acknowledged<V>(
    all: &[Key],
    acks: &HashMap<Key, V>,
    finished: &HashSet<Key>,
) -> bool {
    all.iter()
        .all(|k| acks.contains_key(k) || finished.contains(k))
}

impl Coordinator {
    pub(super) fn open(
        c: &crate::runtime::CheckpointConfig,
        config: &RuntimeConfig,
    ) -> Result<Self, JobError> {
        let (dir, temp_dir) = match (&c.dir, &config.run_dir) {
            (Some(d), _) => (d.clone(), None),
            (None, Some(r)) => (r.join("checkpoints"), None),
            (None, None) => {
                let t =
                    crate::sys::scratch::ScratchDir::unique(&std::env::temp_dir(), "checkpoints")
                        .map_err(|source| crate::checkpoint::CheckpointError::Io {
                        path: std::env::temp_dir(),
                        op: "creating a checkpoint directory",
                        source,
                    })?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        let mut store = SnapshotStore::open_replicated(
            &dir,
            c.retain,
            crate::sys::uring::FileWriter::new(),
            config.probes.as_ref().and_then(|p| p.storage()),
            c.replicate.as_ref().map(|r| std::sync::Arc::clone(&r.0)),
        )?;
        store.record_state_backend(config.state_backend.name());
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
            stop_at_savepoint: false,
            stats: CheckpointStats::default(),
            write_secs: 0.0,
        })
    }

    /// Time until the next checkpoint may start.
    pub(super) fn until_due(&self) -> Duration {
        let now = Instant::now();
        let mut due = self.last_trigger.map_or(now, |t| t + self.interval);
        if let Some(e) = self.last_end {
            due = due.max(e + self.min_pause);
        }
        due.saturating_duration_since(now)
    }

    /// Counts checkpoint `id`, triggered at `started`, now durable and
    /// published.
    /// Checkpoint `id` is durable; if it is a savepoint, whoever waits for
    /// one learns where it is (from every landing: the periodic one, the
    /// landing at a failure and the one at the end of the job).
    pub(super) fn published(
        &mut self,
        id: u64,
        started: Instant,
        p: &checkpoint::Published,
        savepoint: bool,
    ) {
        if savepoint {
            for r in self.savepoint_waiters.drain(..) {
                let _ = r.send(Ok(p.manifest.dir.clone()));
            }
        }
        let took = started.elapsed();
        self.stats.completed += 1;
        self.stats.durations_us.push(took.as_micros() as u64);
        if took > self.interval {
            self.stats.late += 1;
        }
        // What the checkpoint wrote: the payloads and their key indexes.
        let bytes = p
            .manifest
            .payload_bytes()
            .saturating_add(p.manifest.index_bytes());
        self.stats.bytes += bytes;
        if self.stats.completed == 1 {
            self.stats.first_bytes = bytes;
        } else {
            self.stats.bytes_after_first += bytes;
        }
        let m = &p.manifest;
        self.stats.state_bytes_final = m
            .files
            .iter()
            .map(|f| f.chain.first().map_or(f.payload_len, |l| l.payload_len))
            .sum();
        self.stats.restore_bytes_final = m.restore_bytes();
        let delta = m.files.iter().any(|f| f.delta);
        if delta {
            self.stats.incremental += 1;
        }
        self.stats
            .sizes
            .push(crate::metrics::CheckpointSize { id, bytes, delta });
        self.write_secs += p.write_time.as_secs_f64();
        self.stats.write_mbps = self.stats.bytes as f64 / 1e6 / self.write_secs.max(1e-9);
        self.stats.last_completed = Some(id);
    }

    /// A checkpoint failed: one more of the consecutive failures the
    /// configuration tolerates.
    pub(super) fn failed(&mut self, why: String) {
        self.consecutive_failures += 1;
        self.overtaken(why);
    }

    /// A checkpoint a takeover made impossible: counted among the failed
    /// ones, but — like one a restart abandons — not among the
    /// consecutive failures the configuration tolerates. It says nothing
    /// against checkpointing, only that an operator failed and its
    /// standby recovered it; under a burst of failures every checkpoint
    /// may overlap a takeover, and the job must not fail for that.
    pub(super) fn overtaken(&mut self, why: String) {
        self.stats.failed += 1;
        self.stats.last_failure = Some(why);
        self.last_end = Some(Instant::now());
    }

    /// All acknowledged: hand the snapshots to the I/O thread.
    pub(super) fn submit(
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
        // Every operator's parallelism: what a restore at another one
        // redistributes from (the files alone do not say it: a stateless
        // operator's running instances write none).
        let mut shape = vec![0u32; names.len()];
        for &(n, i) in all {
            shape[n] = shape[n].max(i as u32 + 1);
        }
        let shape: Vec<(String, u32)> = names
            .iter()
            .zip(shape)
            .map(|(n, p)| (n.to_string(), p))
            .collect();
        for (operator, list) in [(JOB_META, list), (JOB_SHAPE, shape)] {
            match checkpoint::serialize(&list, 64 + 32 * list.len()) {
                Ok(bytes) => snapshots.push(OperatorSnapshot {
                    operator: operator.to_string(),
                    instance: 0,
                    positions: Vec::new(),
                    bytes,
                }),
                Err(e) => {
                    self.failed(format!("checkpoint {}: {e}", f.id));
                    return;
                }
            }
        }
        let pending = if f.savepoint {
            self.store.save_savepoint(f.id, snapshots)
        } else {
            self.store.submit(f.id, snapshots)
        };
        self.writing = Some(Writing {
            started: f.started,
            id: f.id,
            pending,
            finished,
            written,
            savepoint: f.savepoint,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_is_complete_when_every_instance_acked_or_had_finished() {
        let all = [(0, 0), (0, 1), (1, 0)];
        let mut acks = HashMap::new();
        let mut finished = HashSet::new();
        acks.insert((0, 0), ());
        assert!(!all_acknowledged(&all, &acks, &finished));
        finished.insert((0, 1));
        assert!(!all_acknowledged(&all, &acks, &finished));
        acks.insert((1, 0), ());
        assert!(all_acknowledged(&all, &acks, &finished));
        // An acknowledgement of an instance the job lacks does not count.
        let mut stray = HashMap::new();
        stray.insert((9, 9), ());
        assert!(!all_acknowledged(&all, &stray, &HashSet::new()));
    }
}
