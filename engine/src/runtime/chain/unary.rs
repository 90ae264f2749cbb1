//! The chain hop around a one-input [`Process`] operator.

use crate::operator::{Collector, Output, Process};
use crate::record::Record;
use crate::runtime::graph::{BuildCx, Probe};
use crate::runtime::probe::run_probe;
use crate::runtime::task::{OpSlot, TaskCtx};
use std::marker::PhantomData;
use std::rc::Rc;

pub(crate) struct ProcessOp<I, O, P> {
    op: P,
    down: Box<dyn Collector<O>>,
    ctx: Rc<TaskCtx>,
    slot: OpSlot,
    probe: Probe,
    seen: u64,
    emitted: u64,
    /// Restored as finished: its end hook already ran before the checkpoint.
    finished: bool,
    _in: PhantomData<fn(I)>,
}

impl<I, O, P: Process<I, O>> ProcessOp<I, O, P> {
    /// Builds the hop and restores the operator's state if the instance is
    /// restored from a checkpoint (a failure is reported through the task).
    pub(crate) fn new(mut op: P, down: Box<dyn Collector<O>>, cx: BuildCx) -> Self {
        let finished = cx.restore_state(|payload| op.restore_state(payload));
        ProcessOp {
            op,
            down,
            ctx: cx.ctx,
            slot: cx.slot,
            probe: cx.probe,
            seen: 0,
            emitted: 0,
            finished,
            _in: PhantomData,
        }
    }
}

impl<I, O, P: Process<I, O>> Collector<I> for ProcessOp<I, O, P> {
    #[inline]
    fn collect(&mut self, rec: Record<I>) {
        self.seen += 1;
        let prev = self.ctx.enter(self.slot.op);
        if !run_probe(&mut self.probe, rec.id, &self.ctx, self.slot.op) {
            self.ctx.leave(prev);
            return;
        }
        let out = Output::new(&mut *self.down, &mut self.emitted, &*self.ctx, self.slot.op)
            .with_envelope(&rec);
        let mut out = out;
        self.op.process(rec, &mut out);
        self.ctx.leave(prev);
    }

    fn flush(&mut self) {
        self.slot.publish(self.seen, self.emitted);
        self.down.flush();
    }

    fn end(&mut self) {
        if !self.finished {
            let prev = self.ctx.enter(self.slot.op);
            let mut out = Output::new(&mut *self.down, &mut self.emitted, &*self.ctx, self.slot.op);
            self.op.on_end(&mut out);
            self.ctx.leave(prev);
        }
        self.slot.publish(self.seen, self.emitted);
        self.down.end();
    }

    fn watermark(&mut self, wm: u64) {
        self.slot.watermark(wm);
        self.down.watermark(wm);
    }

    fn idle(&mut self) {
        self.down.idle();
    }

    fn open_chunk(&mut self, id: crate::operator::ChunkId) {
        self.down.open_chunk(id);
    }

    fn close_chunk(&mut self) {
        self.down.close_chunk();
    }

    fn snapshot_chain(
        &mut self,
        parts: &mut crate::operator::ChainParts,
    ) -> Result<(), crate::checkpoint::CheckpointError> {
        let prev = self.ctx.enter(self.slot.op);
        let state = self.op.snapshot_state();
        self.ctx.leave(prev);
        parts.push((self.slot.op, state?.map(Into::into)));
        self.down.snapshot_chain(parts)
    }

    fn follow_point(
        &mut self,
        parts: &mut crate::operator::FollowParts,
    ) -> Result<bool, crate::checkpoint::CheckpointError> {
        // The user's own state restores only into a fresh operator.
        if parts.contains_key(&self.slot.op) {
            return Ok(false);
        }
        self.down.follow_point(parts)
    }

    fn install_followed(&mut self) {
        self.down.install_followed();
    }

    fn barrier(&mut self, id: u64) {
        let (ctx, node, op) = (&self.ctx, self.slot.op, &mut self.op);
        let capture = || {
            let prev = ctx.enter(node);
            let state = ctx.long(|| op.snapshot_state());
            ctx.leave(prev);
            state.map(|s| s.map(Into::into))
        };
        super::pass_barrier(ctx, node, id, capture, &mut *self.down);
    }
}
