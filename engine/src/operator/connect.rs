//! The two chain hops (one per input) around a [`CoProcess`] operator.
//!
//! Both ports live in the same task, so they share the operator through an
//! `Rc<RefCell<_>>`; the runtime never calls them re-entrantly.

use super::{run_probe, CoProcess, Collector, Output};
use crate::job::graph::Probe;
use crate::record::Record;
use crate::runtime::task::{OpSlot, TaskCtx};
use std::cell::RefCell;
use std::marker::PhantomData;
use std::rc::Rc;

struct Core<A, B, O, P> {
    op: P,
    down: Box<dyn Collector<O>>,
    ctx: Rc<TaskCtx>,
    slot: OpSlot,
    probe: Probe,
    ended: [bool; 2],
    seen: u64,
    emitted: u64,
    _in: PhantomData<fn(A, B)>,
}

impl<A, B, O, P: CoProcess<A, B, O>> Core<A, B, O, P> {
    fn end_port(&mut self, port: usize) {
        if std::mem::replace(&mut self.ended[port], true) {
            return;
        }
        if self.ended == [true, true] {
            let prev = self.ctx.enter(self.slot.op);
            let mut out = Output::new(&mut *self.down, &mut self.emitted, &self.ctx, self.slot.op);
            self.op.on_end(&mut out);
            self.ctx.leave(prev);
            self.slot.publish(self.seen, self.emitted);
            self.down.end();
        }
    }

    fn flush(&mut self) {
        self.slot.publish(self.seen, self.emitted);
        self.down.flush();
    }
}

struct First<A, B, O, P>(Rc<RefCell<Core<A, B, O, P>>>);
struct Second<A, B, O, P>(Rc<RefCell<Core<A, B, O, P>>>);

impl<A, B, O, P: CoProcess<A, B, O>> Collector<A> for First<A, B, O, P> {
    fn collect(&mut self, rec: Record<A>) {
        let core = &mut *self.0.borrow_mut();
        core.seen += 1;
        let prev = core.ctx.enter(core.slot.op);
        if !run_probe(&mut core.probe, rec.id, &core.ctx, core.slot.op) {
            core.ctx.leave(prev);
            return;
        }
        let mut out = Output::new(&mut *core.down, &mut core.emitted, &core.ctx, core.slot.op)
            .with_envelope(&rec);
        core.op.process_first(rec, &mut out);
        core.ctx.leave(prev);
    }
    fn flush(&mut self) {
        self.0.borrow_mut().flush();
    }
    fn end(&mut self) {
        self.0.borrow_mut().end_port(0);
    }
}

impl<A, B, O, P: CoProcess<A, B, O>> Collector<B> for Second<A, B, O, P> {
    fn collect(&mut self, rec: Record<B>) {
        let core = &mut *self.0.borrow_mut();
        core.seen += 1;
        let prev = core.ctx.enter(core.slot.op);
        let mut out = Output::new(&mut *core.down, &mut core.emitted, &core.ctx, core.slot.op)
            .with_envelope(&rec);
        core.op.process_second(rec, &mut out);
        core.ctx.leave(prev);
    }
    fn flush(&mut self) {
        self.0.borrow_mut().flush();
    }
    fn end(&mut self) {
        self.0.borrow_mut().end_port(1);
    }
}

/// The two input collectors of a co-operator and the gate of its first input.
pub(crate) type CoPorts<A, B> = (
    Box<dyn Collector<A>>,
    Box<dyn Collector<B>>,
    Box<dyn Fn() -> bool>,
);

pub(crate) fn build_co_ports<A, B, O, P>(
    op: P,
    down: Box<dyn Collector<O>>,
    ctx: Rc<TaskCtx>,
    slot: OpSlot,
    probe: Probe,
) -> CoPorts<A, B>
where
    A: 'static,
    B: 'static,
    O: 'static,
    P: CoProcess<A, B, O>,
{
    let core = Rc::new(RefCell::new(Core {
        op,
        down,
        ctx,
        slot,
        probe,
        ended: [false, false],
        seen: 0,
        emitted: 0,
        _in: PhantomData,
    }));
    let gate = {
        let core = Rc::clone(&core);
        move || {
            let c = core.borrow();
            c.ended[1] || c.op.first_ready()
        }
    };
    (
        Box::new(First(Rc::clone(&core))),
        Box::new(Second(core)),
        Box::new(gate),
    )
}
