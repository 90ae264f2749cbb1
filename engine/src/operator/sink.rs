//! The chain hop around a [`Sink`]: counts records and measures end-to-end
//! latency (engine clock now − the record's ingest stamp) into a per-task HDR
//! histogram, merged into the job's when the sink ends.
//!
//! The clock is read once per batch, not per record: ingest stamps are
//! buffered and all get the same "now" at the next flush. That can only
//! *over*state latency (by at most one batch), never understate it.

use super::{run_probe, Collector, Sink};
use crate::job::graph::Probe;
use crate::metrics::LatencyHistogram;
use crate::record::Record;
use crate::runtime::task::{OpSlot, TaskCtx};
use std::rc::Rc;

const STAMP_BATCH: usize = 256;

pub(crate) struct SinkOp<T, S> {
    sink: S,
    ctx: Rc<TaskCtx>,
    slot: OpSlot,
    probe: Probe,
    stamps: Vec<u64>,
    hist: LatencyHistogram,
    seen: u64,
    failed: bool,
    _t: std::marker::PhantomData<fn(T)>,
}

impl<T, S: Sink<T>> SinkOp<T, S> {
    pub(crate) fn new(sink: S, ctx: Rc<TaskCtx>, slot: OpSlot, probe: Probe) -> Self {
        SinkOp {
            sink,
            ctx,
            slot,
            probe,
            stamps: Vec::with_capacity(STAMP_BATCH),
            hist: LatencyHistogram::new(),
            seen: 0,
            failed: false,
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
    }
}

impl<T, S: Sink<T>> Collector<T> for SinkOp<T, S> {
    #[inline]
    fn collect(&mut self, rec: Record<T>) {
        self.seen += 1;
        if rec.ingest != Record::<T>::NO_INGEST {
            self.stamps.push(rec.ingest);
            if self.stamps.len() == STAMP_BATCH {
                self.record_latencies();
            }
        }
        if self.failed {
            return;
        }
        let prev = self.ctx.enter(self.slot.op);
        if !run_probe(&mut self.probe, rec.id, &self.ctx, self.slot.op) {
            self.ctx.leave(prev);
            return;
        }
        if let Err(e) = self.sink.write(rec) {
            self.failed = true;
            self.ctx.fail_io(self.slot.op, "sink write failed", None, e);
        }
        self.ctx.leave(prev);
    }

    fn flush(&mut self) {
        self.record_latencies();
        self.slot.publish(self.seen, 0);
    }

    fn end(&mut self) {
        self.record_latencies();
        self.slot.publish(self.seen, 0);
        let prev = self.ctx.enter(self.slot.op);
        if !self.failed {
            if let Err(e) = self.sink.finish() {
                self.ctx
                    .fail_io(self.slot.op, "sink finish failed", None, e);
            }
        }
        self.ctx.leave(prev);
        self.ctx.shared.metrics.merge_latency(&self.hist);
    }
}
