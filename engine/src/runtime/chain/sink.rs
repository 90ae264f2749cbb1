//! The chain hop around a [`Sink`]: counts records and measures end-to-end
//! latency (engine clock now − the record's ingest stamp) into a per-task HDR
//! histogram, merged into the job's when the sink ends (or is dropped with
//! its attempt) and, while a [`crate::JobWatch`] exists, every 10 ms.
//!
//! The clock is read once per batch, not per record: ingest stamps are
//! buffered and all get the same "now" at the next flush. That can only
//! *over*state latency (by at most one batch), never understate it.
//!
//! Checkpoints: at a barrier the sink pre-commits (phase one) and
//! acknowledges with the number of records it consumed in this attempt;
//! after its last record it pre-commits [`FINAL_EPOCH`]. Its
//! [`SinkTally`] tells the supervisor when it produced its first record
//! after a restart and when it got back to where it was before the fault.

use crate::metrics::{LatencyHistogram, LATENCY_PUBLISH_NS};
use crate::operator::{Collector, Sink, FINAL_EPOCH};
use crate::record::Record;
use crate::runtime::coord::{Event, SinkTally};
use crate::runtime::graph::{BuildCx, Probe};
use crate::runtime::probe::run_probe;
use crate::runtime::task::{OpSlot, TaskCtx};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;

const STAMP_BATCH: usize = 256;

pub(crate) struct SinkOp<T, S> {
    sink: S,
    ctx: Rc<TaskCtx>,
    slot: OpSlot,
    probe: Probe,
    stamps: Vec<u64>,
    hist: LatencyHistogram,
    /// When `hist` was last merged into the job's (engine clock).
    merged_at: u64,
    merged: bool,
    seen: u64,
    /// Records handed to the sink in this attempt.
    written: u64,
    failed: bool,
    /// Restored as finished: its output is complete and committed.
    finished: bool,
    tally: Option<Arc<SinkTally>>,
    caught_up: bool,
    _t: std::marker::PhantomData<fn(T)>,
}

impl<T, S: Sink<T>> SinkOp<T, S> {
    pub(crate) fn new(sink: S, cx: BuildCx) -> Self {
        let shared = &cx.ctx.shared;
        let tally = shared.sinks.get(&(cx.slot.op, cx.slot.instance)).cloned();
        if let Some(c) = sink.committer() {
            let _ = shared.events.send(Event::Committer {
                attempt: shared.attempt,
                node: cx.slot.op,
                instance: cx.slot.instance,
                committer: c,
            });
        }
        SinkOp {
            sink,
            finished: cx.restore.as_ref().is_some_and(|r| r.finished),
            ctx: cx.ctx,
            slot: cx.slot,
            probe: cx.probe,
            stamps: Vec::with_capacity(STAMP_BATCH),
            hist: LatencyHistogram::new(),
            merged_at: 0,
            merged: false,
            seen: 0,
            written: 0,
            failed: false,
            tally,
            caught_up: false,
            _t: std::marker::PhantomData,
        }
    }

    fn record_latencies(&mut self) {
        if self.stamps.is_empty() {
            return;
        }
        let now = self.ctx.clock.now();
        for &s in &self.stamps {
            self.hist.record(now.saturating_sub(s));
        }
        self.stamps.clear();
        if now.saturating_sub(self.merged_at) >= LATENCY_PUBLISH_NS
            && self.ctx.shared.metrics.watchers.load(Ordering::Relaxed) > 0
        {
            self.merge_latency(now);
        }
    }

    /// Hands what was measured since the last merge to the job's histogram.
    fn merge_latency(&mut self, now: u64) {
        if !self.hist.is_empty() {
            self.ctx.shared.metrics.merge_latency(&self.hist);
            self.hist.clear();
        }
        self.merged_at = now;
    }

    fn publish(&mut self) {
        self.slot.publish(self.seen, 0);
        if let Some(t) = &self.tally {
            t.written.store(self.written, Ordering::Relaxed);
            if !self.caught_up && self.written >= t.target.load(Ordering::Relaxed) {
                self.caught_up = true;
                t.caught_at
                    .store(self.ctx.clock.now().max(1), Ordering::Relaxed);
            }
        }
    }
}

impl<T, S> Drop for SinkOp<T, S> {
    fn drop(&mut self) {
        // A sink of an attempt that was stopped never ends: keep what it
        // measured.
        if !self.merged {
            self.ctx.shared.metrics.merge_latency(&self.hist);
        }
    }
}

impl<T, S: Sink<T>> Collector<T> for SinkOp<T, S> {
    #[inline]
    fn collect(&mut self, rec: Record<T>) {
        if self.seen == 0 {
            if let Some(t) = &self.tally {
                t.first_at
                    .store(self.ctx.clock.now().max(1), Ordering::Relaxed);
            }
        }
        self.seen += 1;
        if let Some(sb) = &self.ctx.shared.standby {
            // A standby took over: is this one of its first outputs?
            if sb.log.watching.load(Ordering::Relaxed) > 0 {
                sb.log.sink_saw(rec.id, self.ctx.clock.now());
            }
        }
        if rec.ingest != Record::<T>::NO_INGEST {
            self.stamps.push(rec.ingest);
            if self.stamps.len() == STAMP_BATCH {
                self.record_latencies();
            }
        }
        // Fencing: a worker of a stopped attempt that wakes up late (a
        // stalled thread cannot be killed) writes nothing more.
        if self.failed || self.ctx.shared.cancelled() {
            return;
        }
        let prev = self.ctx.enter(self.slot.op);
        if !run_probe(&mut self.probe, rec.id, &self.ctx, self.slot.op) {
            self.ctx.leave(prev);
            return;
        }
        match self.sink.write(rec) {
            Ok(()) => {
                self.written += 1;
                if let Some(t) = &self.tally {
                    // Exact at all times: a restart counts what was written.
                    t.written.store(self.written, Ordering::Relaxed);
                }
            }
            Err(e) => {
                self.failed = true;
                self.ctx.fail_io(self.slot.op, "sink write failed", None, e);
            }
        }
        self.ctx.leave(prev);
    }

    fn flush(&mut self) {
        self.record_latencies();
        self.publish();
    }

    fn end(&mut self) {
        self.record_latencies();
        self.publish();
        let prev = self.ctx.enter(self.slot.op);
        // A stopped attempt's sink stages nothing (see `barrier`).
        if !self.failed && !self.finished && !self.ctx.shared.cancelled() {
            let sink = &mut self.sink;
            let r = self.ctx.long(|| {
                sink.finish()
                    .map_err(|e| ("sink finish failed", e))
                    .and_then(|()| {
                        sink.pre_commit(FINAL_EPOCH)
                            .map_err(|e| ("sink pre-commit of the final epoch failed", e))
                    })
            });
            if let Err((what, e)) = r {
                self.failed = true;
                self.ctx.fail_io(self.slot.op, what, None, e);
            }
        }
        self.ctx.leave(prev);
        self.ctx.shared.metrics.merge_latency(&self.hist);
        self.merged = true;
    }

    // A sink has no event time of its own to pass on.
    fn watermark(&mut self, wm: u64) {
        self.slot.watermark(wm);
    }

    fn idle(&mut self) {}

    fn barrier(&mut self, id: u64) {
        self.record_latencies();
        self.publish();
        // Fencing, as for writes: a worker of a stopped attempt that wakes
        // up late pre-commits nothing — its successor's sink has settled
        // the staged output already, and a late epoch could be taken for
        // one its checkpoint covers.
        if self.failed || self.ctx.shared.cancelled() {
            return;
        }
        let prev = self.ctx.enter(self.slot.op);
        let r = self.sink.pre_commit(id);
        self.ctx.leave(prev);
        match r {
            Ok(()) => self
                .ctx
                .ack(self.slot.op, id, None, None, Some(self.written)),
            Err(e) => {
                self.failed = true;
                self.ctx
                    .fail_io(self.slot.op, "sink pre-commit failed", None, e);
            }
        }
    }
}
