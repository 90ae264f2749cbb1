//! A standby group at run time: one instance of an operator with a standby
//! — its buffer queues, the liveness cell its primary and standby share,
//! the handoff with its consumers, and who plays which role.
//!
//! Roles are played by *incarnations*: the first primary is incarnation 0,
//! the first standby 1, and every standby started later (after a takeover,
//! or after a standby failed) the next number. Each incarnation has its own
//! rings to the consumers (a stalled old primary keeps its ring ends; its
//! rings are simply never read again) and reads the buffer queues through
//! its own reader slot (`incarnation mod 4`).
//!
//! Takeover, in order:
//! 1. The standby sees the primary's epoch fail (a reported panic or cut
//!    channel) or its heartbeat go stale, and claims the next epoch (CAS);
//!    under the group's lock it becomes the primary of that epoch.
//! 2. Every consumer notices the new epoch at its next poll, stops reading
//!    the old primary's ring, and posts its [`Cut`]: what it has received.
//! 3. With every cut posted, the new primary plans the replay
//!    ([`super::decide::plan_replay`]), builds (warm) or unmutes (hot) its
//!    operator, processes the buffer queues from there and goes live.
//!    Consumers drop what they had received already.
//! 4. A new standby is started on another worker.

use super::bq::{BqConfig, BufferQueue};
use super::decide::Cut;
use super::epoch::Liveness;
use super::exchange::SnapshotExchange;
use crate::job::graph::AnySend;
use crate::metrics::RecoveryRecord;
use crate::record::{Nanos, TupleId};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// How a standby keeps up with its primary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum StandbyMode {
    /// The standby parks; the primary publishes snapshots of its state at
    /// an interval; on takeover the standby restores the newest and replays
    /// the buffer queue from the positions it covers.
    #[default]
    Warm,
    /// The standby computes every input into its own state with its output
    /// suppressed (a little behind what the consumers acknowledged); on
    /// takeover it only replays the few inputs in between.
    Hot,
}

/// Active standby (BQBS) for the operators built after
/// [`crate::Stream::standby`].
#[derive(Clone, Debug)]
pub struct StandbyConfig {
    /// Warm or hot.
    pub mode: StandbyMode,
    /// A primary that shows no sign of life for this long has stalled.
    pub heartbeat_timeout: Duration,
    /// Warm mode: how often the primary publishes its state.
    pub snapshot_interval: Duration,
    /// Bytes of each buffer queue (one per upstream instance and operator
    /// instance); a full queue backpressures its upstream. Queues live in
    /// `<run dir>/standby-<attempt>/`, or without a run directory under
    /// `/dev/shm` (memory-backed: a disk-backed mapping pays for the
    /// kernel's writeback of its dirty pages in latency).
    pub queue_memory: u64,
}

impl Default for StandbyConfig {
    fn default() -> Self {
        StandbyConfig {
            mode: StandbyMode::Warm,
            heartbeat_timeout: Duration::from_millis(5),
            snapshot_interval: Duration::from_millis(200),
            queue_memory: 16 << 20,
        }
    }
}

/// One consumer of the group's output: an instance of a downstream
/// operator, on one edge.
pub(crate) struct ConsumerLane {
    pub(crate) edge: usize,
    pub(crate) instance: usize,
    pub(crate) worker: usize,
    /// Per input lane of the group: inputs below it have all their outputs
    /// at this consumer.
    pub(crate) acked: Vec<AtomicU64>,
    pub(crate) ended: AtomicBool,
}

/// What the new primary learns about the fault it replaces.
#[derive(Clone, Debug)]
pub(crate) struct Fault {
    pub(crate) at: Nanos,
    pub(crate) cause: String,
    pub(crate) tuple: Option<TupleId>,
}

pub(crate) struct Inner {
    pub(crate) primary: u64,
    pub(crate) primary_epoch: u64,
    pub(crate) primary_worker: usize,
    pub(crate) standby: Option<(u64, usize)>,
    pub(crate) next_incarnation: u64,
    /// Consumer ends of incarnations' rings, by (consumer, incarnation).
    pub(crate) rings: HashMap<(usize, u64), AnySend>,
    /// Cuts posted by consumers, by consumer: (epoch, cut).
    pub(crate) cuts: HashMap<usize, (u64, Cut)>,
    /// The failure the next takeover answers.
    pub(crate) fault: Option<Fault>,
    /// Snapshot exchange (warm mode), created at the first publication and
    /// replaced by a larger one when the state outgrows its slots.
    pub(crate) exchange: Option<Arc<SnapshotExchange>>,
    exchanges_made: u32,
    /// Index into the job's standby log of the newest takeover.
    pub(crate) takeover: Option<usize>,
    /// The record the last failed primary failed on.
    pub(crate) last_fault_tuple: Option<TupleId>,
}

/// A standby group (see the module docs).
pub(crate) struct Group {
    pub(crate) node: usize,
    pub(crate) instance: usize,
    pub(crate) name: Arc<str>,
    pub(crate) live: Liveness,
    /// Per input lane (upstream instance, in lane order).
    pub(crate) queues: Vec<BufferQueue>,
    /// Upstream instance of each lane.
    pub(crate) upstream: Vec<usize>,
    pub(crate) consumers: Vec<ConsumerLane>,
    /// Per lane: positions the newest published snapshot covers (warm).
    pub(crate) snap_next: Vec<AtomicU64>,
    /// Per lane: the position of its end-of-input entry (`u64::MAX`: not
    /// written yet).
    pub(crate) end_pos: Vec<AtomicU64>,
    /// The operator keeps no state (known once the first primary is built).
    pub(crate) stateless: AtomicBool,
    /// A queue writer found its queue full of uncovered entries: the
    /// primary snapshots at once.
    pub(crate) snapshot_wanted: AtomicBool,
    /// Workers the queue writers wake: the primary's and a hot standby's.
    pub(crate) reader_workers: [AtomicUsize; 2],
    /// The current primary's reader slot in the queues.
    pub(crate) primary_slot: AtomicUsize,
    pub(crate) mode: StandbyMode,
    pub(crate) timeout_ns: u64,
    pub(crate) snapshot_every: Duration,
    pub(crate) workers: usize,
    dir: PathBuf,
    pub(crate) inner: Mutex<Inner>,
    pub(crate) queue_peak: AtomicU64,
    pub(crate) snapshots: AtomicU64,
    /// The primary processed the end of every input.
    pub(crate) finished: AtomicBool,
}

/// No worker.
pub(crate) const NONE: usize = usize::MAX;

impl Group {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn create(
        node: usize,
        instance: usize,
        name: Arc<str>,
        upstream: Vec<usize>,
        consumers: Vec<(usize, usize, usize)>,
        primary_worker: usize,
        standby_worker: usize,
        workers: usize,
        cfg: &StandbyConfig,
        dir: &Path,
        now: Nanos,
    ) -> Result<Self, super::bq::BqError> {
        let qcfg = BqConfig::for_memory(cfg.queue_memory.max(64 << 10), 64, 4)?;
        let mut queues = Vec::with_capacity(upstream.len());
        for &u in &upstream {
            let q = BufferQueue::create(dir.join(format!("{name}-{instance}-from-{u}.bq")), qcfg)?;
            for r in 0..4 {
                q.release(r);
            }
            queues.push(q);
        }
        let lanes = upstream.len();
        Ok(Group {
            node,
            instance,
            live: Liveness::new(now.max(1)),
            consumers: consumers
                .into_iter()
                .map(|(edge, instance, worker)| ConsumerLane {
                    edge,
                    instance,
                    worker,
                    acked: (0..lanes).map(|_| AtomicU64::new(0)).collect(),
                    ended: AtomicBool::new(false),
                })
                .collect(),
            snap_next: (0..lanes).map(|_| AtomicU64::new(0)).collect(),
            end_pos: (0..lanes).map(|_| AtomicU64::new(u64::MAX)).collect(),
            stateless: AtomicBool::new(false),
            snapshot_wanted: AtomicBool::new(false),
            reader_workers: [
                AtomicUsize::new(primary_worker),
                AtomicUsize::new(if cfg.mode == StandbyMode::Hot {
                    standby_worker
                } else {
                    NONE
                }),
            ],
            primary_slot: AtomicUsize::new(0),
            mode: cfg.mode,
            timeout_ns: cfg.heartbeat_timeout.as_nanos() as u64,
            snapshot_every: cfg.snapshot_interval,
            workers,
            dir: dir.to_path_buf(),
            inner: Mutex::new(Inner {
                primary: 0,
                primary_epoch: 1,
                primary_worker,
                standby: Some((1, standby_worker)),
                next_incarnation: 2,
                rings: HashMap::new(),
                cuts: HashMap::new(),
                fault: None,
                exchange: None,
                exchanges_made: 0,
                takeover: None,
                last_fault_tuple: None,
            }),
            finished: AtomicBool::new(false),
            queues,
            upstream,
            name,
            queue_peak: AtomicU64::new(0),
            snapshots: AtomicU64::new(0),
        })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn lanes(&self) -> usize {
        self.queues.len()
    }

    /// Lane `l`: positions below this may be evicted as far as consumers
    /// and the standby's snapshot are concerned.
    pub(crate) fn covered(&self, l: usize) -> u64 {
        let mut c = self
            .consumers
            .iter()
            .filter(|k| !k.ended.load(Ordering::Acquire))
            .map(|k| k.acked[l].load(Ordering::Acquire))
            .min()
            .unwrap_or(u64::MAX);
        // Stateful: a standby restores the newest snapshot (warm takeover,
        // or a new hot standby), so what it covers stays.
        if !self.stateless.load(Ordering::Acquire) {
            c = c.min(self.snap_next[l].load(Ordering::Acquire));
        }
        c
    }

    /// Lane `l`: the inputs every live consumer has all outputs of.
    pub(crate) fn acked_min(&self, l: usize) -> u64 {
        self.consumers
            .iter()
            .filter(|k| !k.ended.load(Ordering::Acquire))
            .map(|k| k.acked[l].load(Ordering::Acquire))
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Registers a new standby incarnation on a worker other than the
    /// primary's when there is one; returns (incarnation, worker).
    pub(crate) fn next_standby(&self, g: &mut Inner) -> (u64, usize) {
        let inc = g.next_incarnation;
        g.next_incarnation += 1;
        let w = (g.primary_worker + 1) % self.workers.max(1);
        g.standby = Some((inc, w));
        if self.mode == StandbyMode::Hot {
            self.reader_workers[1].store(w, Ordering::Release);
        }
        (inc, w)
    }

    /// Publishes a warm snapshot: `positions` per lane, then the state.
    pub(crate) fn publish(&self, positions: &[u64], state: &[u8]) -> std::io::Result<()> {
        let mut bytes = Vec::with_capacity(8 * (positions.len() + 1) + state.len());
        bytes.extend_from_slice(&(positions.len() as u64).to_le_bytes());
        for p in positions {
            bytes.extend_from_slice(&p.to_le_bytes());
        }
        bytes.extend_from_slice(state);
        let mut g = self.lock();
        let fits = g
            .exchange
            .as_ref()
            .is_some_and(|x| x.slot_bytes() >= bytes.len());
        if !fits {
            g.exchanges_made += 1;
            let path = self.dir.join(format!(
                "{}-{}-state-{}.sx",
                self.name, self.instance, g.exchanges_made
            ));
            let x = SnapshotExchange::create(&path, (bytes.len() * 2).max(64 << 10))
                .map_err(std::io::Error::other)?;
            if let Some(old) = g.exchange.replace(Arc::new(x)) {
                let _ = std::fs::remove_file(old.path());
            }
        }
        let x = Arc::clone(g.exchange.as_ref().expect("created above"));
        drop(g);
        match x.publish(&bytes, 0) {
            Ok(_) => {
                for (s, &p) in self.snap_next.iter().zip(positions) {
                    s.store(p, Ordering::Release);
                }
                self.snapshots.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            // Two readers pin the two other slots: skip this one.
            Err(super::exchange::PublishError::Busy) => Ok(()),
            Err(e) => Err(std::io::Error::other(format!("{e:?}"))),
        }
    }

    /// The newest published snapshot: positions per lane and state bytes.
    pub(crate) fn latest_snapshot(&self) -> Option<(Vec<u64>, Vec<u8>)> {
        let x = self.lock().exchange.clone()?;
        let pinned = x.latest()?;
        let b = pinned.bytes;
        let n = u64::from_le_bytes(b.get(0..8)?.try_into().ok()?) as usize;
        if n != self.lanes() || b.len() < 8 * (n + 1) {
            return None;
        }
        let pos = (0..n)
            .map(|i| u64::from_le_bytes(b[8 + 8 * i..16 + 8 * i].try_into().expect("8 bytes")))
            .collect();
        Some((pos, b[8 * (n + 1)..].to_vec()))
    }

    /// Bytes the buffer queues hold now; raises the recorded peak.
    pub(crate) fn note_queue_bytes(&self) {
        let b: u64 = self
            .queues
            .iter()
            .map(|q| q.arena_used() + 32 * (q.tail() - q.head()))
            .sum();
        self.queue_peak.fetch_max(b, Ordering::Relaxed);
    }

    /// The primary is done: standbys stop, idle workers may exit.
    pub(crate) fn finish(&self, shared: &crate::runtime::JobShared) {
        if !self.finished.swap(true, Ordering::AcqRel) {
            if let Some(sb) = &shared.standby {
                sb.live.fetch_sub(1, Ordering::AcqRel);
            }
            for s in &shared.signals {
                s.wake();
            }
        }
    }

    /// Incarnation `inc` failed with `e` at `now`.
    ///
    /// The primary: its epoch is marked failed (the standby wakes and takes
    /// over). A standby: a new one is started. A fenced old primary: nothing.
    /// A record that fails two primaries in a row is not a fault a standby
    /// can mask: the attempt fails with it.
    pub(crate) fn incarnation_failed(
        &self,
        shared: &crate::runtime::JobShared,
        inc: u64,
        e: crate::error::JobError,
        tuple: Option<TupleId>,
        now: Nanos,
    ) {
        let mut g = self.lock();
        if self.finished.load(Ordering::Acquire) {
            return;
        }
        if inc == g.primary {
            if tuple.is_some() && tuple == g.last_fault_tuple {
                drop(g);
                shared.fail(e);
                return;
            }
            g.last_fault_tuple = tuple;
            if self.live.report_failure(g.primary_epoch) {
                g.fault = Some(Fault {
                    at: now,
                    cause: e.to_string(),
                    tuple,
                });
            }
            match g.standby {
                Some((_, w)) => shared.signals[w].wake(),
                None => {
                    let (inc, w) = self.next_standby(&mut g);
                    drop(g);
                    shared.request_standby(w, self.node, self.instance, inc);
                }
            }
        } else if g.standby.is_some_and(|(s, _)| s == inc) {
            if let Some(sb) = &shared.standby {
                sb.log.standby_failures.fetch_add(1, Ordering::Relaxed);
            }
            let (inc, w) = self.next_standby(&mut g);
            drop(g);
            shared.request_standby(w, self.node, self.instance, inc);
        }
    }

    /// Removes the group's files.
    pub(crate) fn remove_files(&self) {
        for q in &self.queues {
            let _ = std::fs::remove_file(q.path());
        }
        if let Some(x) = &self.lock().exchange {
            let _ = std::fs::remove_file(x.path());
        }
    }
}

/// One takeover, as the new primary measured it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Takeover {
    pub(crate) record: RecoveryRecord,
    pub(crate) fault_at: Nanos,
    /// The first output a consumer accepted from the new primary.
    pub(crate) accepted_at: Option<Nanos>,
    /// Tuple IDs of the first outputs consumers accepted (the sink watch).
    pub(crate) first_ids: Vec<TupleId>,
    /// The first of those seen at a sink.
    pub(crate) sink_at: Option<Nanos>,
    pub(crate) caught_up_at: Option<Nanos>,
    /// Sinks still look for `first_ids`.
    pub(crate) watched: bool,
}

/// What every standby group of an attempt reports to, and what sinks watch.
#[derive(Default)]
pub(crate) struct StandbyLog {
    pub(crate) takeovers: Mutex<Vec<Takeover>>,
    /// Takeovers whose first output has not been seen at a sink yet.
    pub(crate) watching: AtomicUsize,
    pub(crate) standby_failures: AtomicU64,
}

/// Outputs of a new primary a consumer reports for the sink watch.
pub(crate) const WATCH_IDS: usize = 16;

impl StandbyLog {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Vec<Takeover>> {
        self.takeovers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A sink received record `id` at `now` while a takeover is watched.
    #[cold]
    pub(crate) fn sink_saw(&self, id: TupleId, now: Nanos) {
        let mut t = self.lock();
        for k in t.iter_mut() {
            if k.watched && k.first_ids.contains(&id) {
                k.sink_at = Some(now);
                k.watched = false;
                self.watching.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// A consumer accepted output `id` of the new primary of takeover `k`.
    pub(crate) fn accepted(&self, k: usize, id: TupleId, now: Nanos) {
        let mut t = self.lock();
        if let Some(k) = t.get_mut(k) {
            k.accepted_at.get_or_insert(now);
            if k.first_ids.len() < WATCH_IDS && k.watched {
                k.first_ids.push(id);
            }
        }
    }

    /// Registers a takeover (watched by the sinks); returns its index.
    pub(crate) fn open(&self, t: Takeover) -> usize {
        let mut v = self.lock();
        v.push(Takeover { watched: true, ..t });
        self.watching.fetch_add(1, Ordering::AcqRel);
        v.len() - 1
    }

    /// Stops watching takeover `k` (nothing of it reached a sink in time).
    pub(crate) fn unwatch(&self, k: usize) {
        let mut v = self.lock();
        if let Some(t) = v.get_mut(k) {
            if std::mem::replace(&mut t.watched, false) {
                self.watching.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

/// The standby groups of one attempt, and what workers and sinks share
/// about them.
pub(crate) struct StandbyRun {
    pub(crate) groups: HashMap<(usize, usize), Arc<Group>>,
    pub(crate) log: StandbyLog,
    /// Per worker: standby incarnations to build, `(node, instance, inc)`.
    pub(crate) inbox: Vec<Mutex<Vec<(usize, usize, u64)>>>,
    pub(crate) pending: Vec<AtomicBool>,
    /// Groups whose primary has not finished.
    pub(crate) live: AtomicUsize,
    pub(crate) dir: PathBuf,
    /// `dir` was made by the engine (removed at the end).
    pub(crate) temp: bool,
}

impl Drop for StandbyRun {
    fn drop(&mut self) {
        self.remove_files();
    }
}

impl StandbyRun {
    pub(crate) fn group(&self, node: usize, instance: usize) -> Option<&Arc<Group>> {
        self.groups.get(&(node, instance))
    }

    /// Removes the groups' files (and the directory if the engine made it).
    pub(crate) fn remove_files(&self) {
        for g in self.groups.values() {
            g.remove_files();
        }
        if self.temp {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            let _ = std::fs::remove_dir(&self.dir);
        }
    }
}
