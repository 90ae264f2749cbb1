//! The two chain hops (one per input) around a [`CoProcess`] operator.
//!
//! Both ports live in the same task, so they share the operator through an
//! `Rc<RefCell<_>>`; the runtime never calls them re-entrantly.
//!
//! Barrier alignment across the two inputs: the barrier is forwarded (and
//! the state snapshotted) once both inputs delivered it, or the other one
//! ended. In exactly-once mode the input that delivered first is *held*: a
//! flag the ports feeding it check, so its records after the barrier wait
//! upstream until the other input catches up.
//!
//! One exception: while the operator is not ready for its first input
//! ([`CoProcess::first_ready`]), the second input is never held. The
//! first input's records ahead of its barrier may be waiting for exactly
//! the side records behind the second input's barrier — holding it would
//! stall the job until the checkpoint timed out. The second input is read
//! on instead, and if a record comes past its barrier before the first
//! input's barrier arrives, the checkpoint is declined (its cut would
//! include side records the sources' positions do not) and its barrier
//! forwarded, so the operators downstream align on without it.

use crate::operator::{CoProcess, Collector, Output};
use crate::record::Record;
use crate::runtime::channel::forward_time;
use crate::runtime::graph::{BuildCx, Probe};
use crate::runtime::lanes::{Forward, LaneClock};
use crate::runtime::probe::run_probe;
use crate::runtime::task::{Hold, OpSlot, TaskCtx};
use std::cell::{Cell, RefCell};
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
    /// Restored as finished: the end hook already ran.
    finished: bool,
    /// The barrier being aligned (0: none) and which inputs delivered it.
    aligning: u64,
    delivered: [bool; 2],
    /// The second input delivered the barrier being aligned while the
    /// operator was not ready for its first input, and was not held.
    side_unheld: bool,
    forwarded: u64,
    holds: [Hold; 2],
    /// Event time over the two inputs (each one lane here).
    clock: LaneClock,
    _in: PhantomData<fn(A, B)>,
}

impl<A, B, O, P: CoProcess<A, B, O>> Core<A, B, O, P> {
    fn watermark(&mut self, port: usize, wm: u64) {
        let f = self.clock.on_watermark(port, wm);
        self.time(f);
    }

    fn idle(&mut self, port: usize) {
        let f = self.clock.on_idle(port);
        self.time(f);
    }

    /// What the two inputs' clocks decided, published and forwarded.
    fn time(&mut self, f: Forward) {
        if let Forward::Watermark(wm) | Forward::IdleAt(wm) = f {
            self.slot.watermark(wm);
        }
        forward_time(f, &mut *self.down);
    }

    fn end_port(&mut self, port: usize) {
        if std::mem::replace(&mut self.ended[port], true) {
            return;
        }
        if !self.ended[1 - port] {
            let f = self.clock.on_end(port);
            forward_time(f, &mut *self.down);
        }
        // The other input waiting on this one's barrier need not wait now.
        if self.aligning != 0 && self.delivered[1 - port] {
            self.complete();
        }
        if self.ended == [true, true] {
            if !self.finished {
                let prev = self.ctx.enter(self.slot.op);
                let mut out =
                    Output::new(&mut *self.down, &mut self.emitted, &*self.ctx, self.slot.op);
                self.op.on_end(&mut out);
                self.ctx.leave(prev);
            }
            self.slot.publish(self.seen, self.emitted);
            self.down.end();
        }
    }

    fn barrier(&mut self, port: usize, id: u64) {
        if id <= self.forwarded || id < self.aligning {
            return;
        }
        if id > self.aligning {
            self.aligning = id;
            self.delivered = [false, false];
            self.side_unheld = false;
            self.holds.iter().for_each(|h| h.set(false));
        }
        self.delivered[port] = true;
        if self.delivered[1 - port] || self.ended[1 - port] {
            self.complete();
        } else if self.ctx.exactly_once() {
            if port == 1 && !self.op.first_ready() {
                self.side_unheld = true;
            } else {
                self.holds[port].set(true);
            }
        }
    }

    /// A record of the second input arrived: if it came past the barrier
    /// being aligned on an input that was not held, the checkpoint cannot
    /// be consistent here (see the module docs).
    fn side_record(&mut self) {
        if self.side_unheld && self.aligning != 0 {
            let id = self.reset_alignment();
            self.ctx.decline(
                self.slot.op,
                id,
                "a co-operator not yet ready for its first input read its side input past \
                 the barrier"
                    .to_string(),
            );
            self.down.barrier(id);
        }
    }

    /// Ends the alignment in progress; returns its barrier.
    fn reset_alignment(&mut self) -> u64 {
        let id = std::mem::replace(&mut self.aligning, 0);
        self.forwarded = id;
        self.delivered = [false, false];
        self.side_unheld = false;
        self.holds.iter().for_each(|h| h.set(false));
        id
    }

    fn complete(&mut self) {
        let id = self.reset_alignment();
        let prev = self.ctx.enter(self.slot.op);
        let state = self.op.snapshot_state();
        self.ctx.leave(prev);
        match state {
            Ok(state) => self
                .ctx
                .ack(self.slot.op, id, state.map(Into::into), None, None),
            Err(e) => self.ctx.decline(self.slot.op, id, e.to_string()),
        }
        self.down.barrier(id);
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
        let mut out = Output::new(&mut *core.down, &mut core.emitted, &*core.ctx, core.slot.op)
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
    fn barrier(&mut self, id: u64) {
        self.0.borrow_mut().barrier(0, id);
    }
    fn watermark(&mut self, wm: u64) {
        self.0.borrow_mut().watermark(0, wm);
    }
    fn idle(&mut self) {
        self.0.borrow_mut().idle(0);
    }
}

impl<A, B, O, P: CoProcess<A, B, O>> Collector<B> for Second<A, B, O, P> {
    fn collect(&mut self, rec: Record<B>) {
        let core = &mut *self.0.borrow_mut();
        core.side_record();
        core.seen += 1;
        let prev = core.ctx.enter(core.slot.op);
        // The second input's records are the operator's records too: they
        // name the record a failure happens on, and faults are injected
        // before them as before the first input's.
        if !run_probe(&mut core.probe, rec.id, &core.ctx, core.slot.op) {
            core.ctx.leave(prev);
            return;
        }
        let mut out = Output::new(&mut *core.down, &mut core.emitted, &*core.ctx, core.slot.op)
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
    fn barrier(&mut self, id: u64) {
        self.0.borrow_mut().barrier(1, id);
    }
    fn watermark(&mut self, wm: u64) {
        self.0.borrow_mut().watermark(1, wm);
    }
    fn idle(&mut self) {
        self.0.borrow_mut().idle(1);
    }
}

/// The two input collectors of a co-operator, the readiness check of its
/// first input, and the holds of its two inputs.
pub(crate) struct CoPorts<A, B> {
    pub(crate) first: Box<dyn Collector<A>>,
    pub(crate) second: Box<dyn Collector<B>>,
    pub(crate) ready: Box<dyn Fn() -> bool>,
    pub(crate) holds: [Hold; 2],
}

pub(crate) fn build_co_ports<A, B, O, P>(
    mut op: P,
    down: Box<dyn Collector<O>>,
    cx: BuildCx,
) -> CoPorts<A, B>
where
    A: 'static,
    B: 'static,
    O: 'static,
    P: CoProcess<A, B, O>,
{
    let finished = cx.restore_state(|payload| op.restore_state(payload));
    let holds = [Rc::new(Cell::new(false)), Rc::new(Cell::new(false))];
    let core = Rc::new(RefCell::new(Core {
        op,
        down,
        ctx: cx.ctx,
        slot: cx.slot,
        probe: cx.probe,
        ended: [false, false],
        seen: 0,
        emitted: 0,
        finished,
        aligning: 0,
        delivered: [false, false],
        side_unheld: false,
        forwarded: 0,
        holds: holds.clone(),
        clock: LaneClock::new(2),
        _in: PhantomData,
    }));
    let ready = {
        let core = Rc::clone(&core);
        move || {
            let c = core.borrow();
            c.ended[1] || c.op.first_ready()
        }
    };
    CoPorts {
        first: Box::new(First(Rc::clone(&core))),
        second: Box::new(Second(core)),
        ready: Box::new(ready),
        holds,
    }
}
