//! The chain hop around a [`KeyedProcess`]: owns the per-key state.
//!
//! Records reach an instance already partitioned by the hash of their key
//! (see `runtime::channel`), so every key lives in exactly one instance and
//! its state never crosses a core.

use super::{run_probe, Collector, KeyedProcess, Output};
use crate::job::graph::Probe;
use crate::record::Record;
use crate::runtime::task::{OpSlot, TaskCtx};
use crate::state::KeyedState;
use std::hash::Hash;
use std::rc::Rc;
use std::sync::Arc;

pub(crate) struct KeyedOp<K, T, O, P: KeyedProcess<K, T, O>> {
    op: P,
    key: Arc<dyn Fn(&T) -> K + Send + Sync>,
    state: KeyedState<K, P::State>,
    down: Box<dyn Collector<O>>,
    ctx: Rc<TaskCtx>,
    slot: OpSlot,
    probe: Probe,
    seen: u64,
    emitted: u64,
}

impl<K, T, O, P> KeyedOp<K, T, O, P>
where
    K: Hash + Eq + Clone + 'static,
    P: KeyedProcess<K, T, O>,
{
    pub(crate) fn new(
        op: P,
        key: Arc<dyn Fn(&T) -> K + Send + Sync>,
        down: Box<dyn Collector<O>>,
        ctx: Rc<TaskCtx>,
        slot: OpSlot,
        probe: Probe,
    ) -> Self {
        KeyedOp {
            op,
            key,
            state: KeyedState::default(),
            down,
            ctx,
            slot,
            probe,
            seen: 0,
            emitted: 0,
        }
    }
}

impl<K, T, O, P> Collector<T> for KeyedOp<K, T, O, P>
where
    K: Hash + Eq + Clone + 'static,
    P: KeyedProcess<K, T, O>,
{
    #[inline]
    fn collect(&mut self, rec: Record<T>) {
        self.seen += 1;
        let prev = self.ctx.enter(self.slot.op);
        if !run_probe(&mut self.probe, rec.id, &self.ctx, self.slot.op) {
            self.ctx.leave(prev);
            return;
        }
        let key = (self.key)(&rec.value);
        let state = self.state.get_or_default(&key);
        let mut out = Output::new(&mut *self.down, &mut self.emitted, &self.ctx, self.slot.op)
            .with_envelope(&rec);
        self.op.process(&key, state, rec, &mut out);
        self.ctx.leave(prev);
    }

    fn flush(&mut self) {
        self.slot.publish(self.seen, self.emitted);
        self.down.flush();
    }

    fn end(&mut self) {
        let prev = self.ctx.enter(self.slot.op);
        let mut out = Output::new(&mut *self.down, &mut self.emitted, &self.ctx, self.slot.op);
        for (k, s) in self.state.iter_mut() {
            self.op.on_end(k, s, &mut out);
        }
        self.ctx.leave(prev);
        self.slot.publish(self.seen, self.emitted);
        self.down.end();
    }
}
