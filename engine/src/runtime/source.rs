//! The port that drives a source partition: assigns tuple IDs, stamps
//! ingest times, paces a rate-limited source and ends the chain at the end.

use super::probe::run_probe;
use super::task::{Gate, OpSlot, Poll, Port, TaskCtx};
use crate::error::JobError;
use crate::operator::source::{Source, SourcePoll};
use crate::operator::Collector;
use crate::record::{Nanos, Record, TupleId};
use crate::runtime::graph::{BuildCx, Probe};
use crate::time::{WatermarkGen, Watermarks};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

/// Releases record `k` of a partition at `start + k * interval`.
///
/// The ingest stamp of a paced record is its *scheduled* release time, so a
/// pipeline that falls behind shows the delay in its latency figures. The
/// schedule's start is shared by every partition and kept across restarts:
/// a partition rewound to record `k` finds it overdue and replays as fast as
/// the pipeline allows, as a source with a backlog would.
pub(crate) struct Pacer {
    interval_ns: f64,
    start: Option<Nanos>,
    origin: Arc<OnceLock<Nanos>>,
}

impl Pacer {
    pub(crate) fn new(records_per_sec: f64, origin: Arc<OnceLock<Nanos>>) -> Self {
        Pacer {
            interval_ns: 1e9 / records_per_sec,
            start: None,
            origin,
        }
    }

    #[inline]
    pub(crate) fn due(&mut self, k: u64, now: Nanos) -> Nanos {
        let start = *self
            .start
            .get_or_insert_with(|| *self.origin.get_or_init(|| now));
        // Saturating: at an absurdly slow rate a record is due never (at
        // the end of time), not at a sum that wrapped into the past.
        start.saturating_add((k as f64 * self.interval_ns) as u64)
    }
}

pub(crate) struct SourcePort<T> {
    src: Box<dyn Source<T>>,
    partition: u32,
    seq: u64,
    target: Box<dyn Collector<T>>,
    ctx: Rc<TaskCtx>,
    pacer: Option<Pacer>,
    gate: Option<Rc<Gate>>,
    slot: OpSlot,
    probe: Probe,
    ended: bool,
    /// Restored as finished: send nothing but the end of stream.
    restored_finished: bool,
    /// Restored as finished without a position on record: its count is
    /// what an earlier attempt of this run published (not 0).
    count_unknown: bool,
    /// The newest checkpoint barrier injected.
    last_barrier: u64,
    /// A paced partition's next record, polled but not due yet: polling
    /// ahead finds the end of the input at once, not an interval later.
    held: Option<(T, u64)>,
    /// Event time: the partition's watermark strategy and generator.
    watermarks: Option<Watermarks>,
    gen: WatermarkGen,
    /// A restored partition sends its last watermark before any record.
    resend: bool,
    /// Since when the source has had nothing (for the idle timeout), and
    /// whether it said it is idle.
    quiet_since: Option<Nanos>,
    idle: bool,
}

/// The watermarks of the job's aligned source partitions (see
/// [`Watermarks::max_drift`]), by job-wide partition number: `u64::MAX`
/// for a partition that is not aligned, is idle, or has ended.
pub(crate) struct SourceClocks {
    wm: Vec<crossbeam_utils::CachePadded<std::sync::atomic::AtomicU64>>,
}

impl SourceClocks {
    /// Every aligned partition of an instance `runs` keeps at 0 (it holds
    /// the others back until its first watermark), the others out of the
    /// way (a partition of another failover region runs on threads of its
    /// own, and is aligned only with its region's).
    pub(crate) fn new(
        graph: &crate::runtime::graph::Graph,
        runs: impl Fn(usize, usize) -> bool,
    ) -> Self {
        let mut wm = Vec::new();
        for (node, n) in graph.nodes.iter().enumerate() {
            if let crate::runtime::graph::NodeKind::Source {
                watermarks,
                first_partition,
                ..
            } = &n.kind
            {
                let aligned = watermarks.is_some_and(|w| w.drift_ns().is_some());
                let end = *first_partition as usize + n.parallelism;
                if wm.len() < end {
                    wm.resize_with(end, || {
                        crossbeam_utils::CachePadded::new(std::sync::atomic::AtomicU64::new(
                            u64::MAX,
                        ))
                    });
                }
                if aligned {
                    let first = *first_partition as usize;
                    for (i, w) in wm[first..end].iter().enumerate() {
                        if runs(node, i) {
                            w.store(0, Ordering::Relaxed);
                        }
                    }
                }
            }
        }
        SourceClocks { wm }
    }

    /// No aligned partition.
    pub(crate) fn none() -> Self {
        SourceClocks { wm: Vec::new() }
    }

    fn publish(&self, partition: u32, wm: u64) {
        if let Some(w) = self.wm.get(partition as usize) {
            w.store(wm, Ordering::Release);
        }
    }

    /// The slowest aligned partition's watermark (`u64::MAX`: none holds
    /// back).
    fn min(&self) -> u64 {
        self.wm
            .iter()
            .map(|w| w.load(Ordering::Acquire))
            .min()
            .unwrap_or(u64::MAX)
    }
}

/// How long a partition held back by alignment waits before it looks again.
const ALIGN_WAIT: Nanos = 200_000;

impl<T: 'static> SourcePort<T> {
    pub(crate) fn new(
        mut src: Box<dyn Source<T>>,
        target: Box<dyn Collector<T>>,
        pacer: Option<Pacer>,
        gate: Option<Rc<Gate>>,
        watermarks: Option<Watermarks>,
        first_partition: u32,
        cx: BuildCx,
    ) -> Self {
        let mut gen = WatermarkGen::default();
        if watermarks.is_some() {
            cx.restore_state(|payload| {
                gen = WatermarkGen::from_bytes(payload)
                    .map_err(crate::checkpoint::CheckpointError::ChainFrame)?;
                Ok(())
            });
        }
        let mut seq = 0;
        let mut restored_finished = false;
        let mut count_unknown = false;
        if let Some(r) = &cx.restore {
            restored_finished = r.finished;
            count_unknown = r.finished && r.position.is_none();
            seq = r.position.unwrap_or(0);
            if !r.finished && seq > 0 {
                if let Err(reason) = src.seek(seq) {
                    cx.ctx.fail(JobError::SourceSeek {
                        operator: cx.info.name.to_string(),
                        instance: cx.info.instance,
                        position: seq,
                        source: reason,
                    });
                }
            }
        }
        SourcePort {
            src,
            // Job-wide: no two sources' records share a tuple ID.
            partition: first_partition + cx.slot.instance as u32,
            seq,
            target,
            ctx: cx.ctx,
            pacer,
            gate,
            slot: cx.slot,
            probe: cx.probe,
            ended: false,
            restored_finished,
            count_unknown,
            last_barrier: 0,
            held: None,
            watermarks,
            resend: gen.sent > 0,
            gen,
            quiet_since: None,
            idle: false,
        }
    }

    /// Injects the newest checkpoint barrier the coordinator asked for, if
    /// this partition has not injected it yet: the partition's position is
    /// the acknowledgement, the barrier goes down the chain.
    #[inline]
    fn inject_barrier(&mut self) {
        let t = self.ctx.shared.trigger.load(Ordering::Acquire);
        if t > self.last_barrier {
            self.last_barrier = t;
            // A partition with watermarks keeps its generator's state with
            // its position.
            let state = self.watermarks.map(|_| {
                crate::checkpoint::StateCapture::Bytes(
                    crate::checkpoint::SnapshotBytes::from_payload(&self.gen.to_bytes()),
                )
            });
            self.ctx.ack(self.slot.op, t, state, Some(self.seq), None);
            self.target.barrier(t);
        }
    }

    /// The source had nothing: past the idle timeout, it says it is idle
    /// (once); until then it wakes when the timeout is due.
    fn quiet(&mut self, now: Nanos) -> Poll {
        let Some(timeout) = self.watermarks.and_then(|w| w.idle_timeout()) else {
            return Poll::Idle { wake_at: None };
        };
        let since = *self.quiet_since.get_or_insert(now);
        let due = since.saturating_add(u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX));
        if now >= due {
            if !std::mem::replace(&mut self.idle, true) {
                self.target.idle();
                // An idle partition holds no aligned one back.
                self.ctx
                    .shared
                    .source_clocks
                    .publish(self.partition, u64::MAX);
            }
            Poll::Idle { wake_at: None }
        } else {
            Poll::Idle { wake_at: Some(due) }
        }
    }

    /// Whether alignment holds this partition back: its watermark is more
    /// than the drift ahead of the slowest aligned partition's.
    fn held_back(&self) -> bool {
        let Some(drift) = self.watermarks.and_then(|w| w.drift_ns()) else {
            return false;
        };
        self.gen.sent > self.ctx.shared.source_clocks.min().saturating_add(drift)
    }

    fn end(&mut self) -> Poll {
        self.ended = true;
        self.ctx
            .shared
            .source_clocks
            .publish(self.partition, u64::MAX);
        if !self.restored_finished {
            self.inject_barrier();
        }
        if !self.count_unknown {
            self.slot.publish_position(self.seq);
        }
        self.target.end();
        Poll::Done
    }
}

impl<T: 'static> Port for SourcePort<T> {
    fn poll(&mut self, budget: usize) -> Poll {
        if self.ended {
            return Poll::Done;
        }
        if self.restored_finished {
            return self.end();
        }
        // Barriers go out even while the gate is closed: the co-operator
        // behind it aligns them without reading records.
        self.inject_barrier();
        // A chained co-operator is not ready for this input yet, or holds it
        // while aligning a barrier.
        if self.gate.as_ref().is_some_and(|g| !g.is_open()) {
            return Poll::Idle { wake_at: None };
        }
        // Operators chained after the source judge its records by its own
        // watermark.
        self.ctx.lane.set(0);
        if std::mem::take(&mut self.resend) {
            self.target.watermark(self.gen.sent);
            self.slot.watermark(self.gen.sent);
        }
        self.ctx.lane_wm.set(self.gen.sent);
        let mut now = self.ctx.clock.now();
        if !self.idle && self.watermarks.is_some_and(|w| w.drift_ns().is_some()) {
            // Where it stands, also before its first record after a
            // restore (every partition starts an attempt at 0).
            self.ctx
                .shared
                .source_clocks
                .publish(self.partition, self.gen.sent);
        }
        if self.held_back() {
            return Poll::Idle {
                wake_at: Some(now + ALIGN_WAIT),
            };
        }
        let mut moved = 0;
        let mut outcome = None;
        // Stop early when an output ring is full: what this poll already
        // produced waits in the (bounded) overflow until the ring drains.
        while moved < budget && self.ctx.blocked.get() == 0 {
            let (value, event_time) = match self.held.take() {
                Some(v) => v,
                None => {
                    let prev = self.ctx.enter(self.slot.op);
                    let next = self.src.poll_next();
                    self.ctx.leave(prev);
                    match next {
                        SourcePoll::Ready { value, event_time } => (value, event_time),
                        SourcePoll::Pending => {
                            outcome = Some(self.quiet(now));
                            break;
                        }
                        SourcePoll::End => return self.end(),
                    }
                }
            };
            let ingest = match &mut self.pacer {
                Some(p) => {
                    let due = p.due(self.seq, now);
                    if due > now {
                        now = self.ctx.clock.now();
                        if due > now {
                            // Released when due; its position (`seq`) is
                            // not taken until then, so a checkpoint before
                            // covers it as not yet read.
                            self.held = Some((value, event_time));
                            outcome = Some(Poll::Idle { wake_at: Some(due) });
                            break;
                        }
                    }
                    due
                }
                None => now,
            };
            let id = TupleId::new(self.partition, self.seq);
            self.seq += 1;
            moved += 1;
            let prev = self.ctx.enter(self.slot.op);
            let go = run_probe(&mut self.probe, id, &self.ctx, self.slot.op);
            self.ctx.leave(prev);
            if !go {
                break;
            }
            if self.idle {
                self.idle = false;
                if self.watermarks.is_some_and(|w| w.drift_ns().is_some()) {
                    self.ctx
                        .shared
                        .source_clocks
                        .publish(self.partition, self.gen.sent);
                }
            }
            self.quiet_since = None;
            self.target.collect(Record {
                id,
                event_time,
                ingest,
                value,
            });
            if let Some(spec) = &self.watermarks {
                if let Some(wm) = self.gen.on_record(spec, id.seq(), event_time) {
                    self.target.watermark(wm);
                    self.slot.watermark(wm);
                    self.ctx.lane_wm.set(wm);
                    if spec.drift_ns().is_some() {
                        self.ctx.shared.source_clocks.publish(self.partition, wm);
                        if self.held_back() {
                            outcome = Some(Poll::Idle {
                                wake_at: Some(now + ALIGN_WAIT),
                            });
                            break;
                        }
                    }
                }
            }
        }
        self.slot.publish_position(self.seq);
        match outcome {
            Some(idle) if moved == 0 => idle,
            _ => Poll::Progress,
        }
    }

    fn flush(&mut self) {
        self.target.flush();
    }
}
