//! The port that drives a source partition: assigns tuple IDs, stamps
//! ingest times, paces a rate-limited source and ends the chain at the end.

use super::task::{Gate, OpSlot, Poll, Port, TaskCtx};
use crate::job::graph::Probe;
use crate::job::source::{Source, SourcePoll};
use crate::operator::{run_probe, Collector};
use crate::record::{Nanos, Record, TupleId};
use std::rc::Rc;

/// Releases record `k` of a partition at `start + k * interval`.
///
/// The ingest stamp of a paced record is its *scheduled* release time, so a
/// pipeline that falls behind shows the delay in its latency figures.
pub(crate) struct Pacer {
    interval_ns: f64,
    start: Option<Nanos>,
}

impl Pacer {
    pub(crate) fn new(records_per_sec: f64) -> Self {
        Pacer {
            interval_ns: 1e9 / records_per_sec,
            start: None,
        }
    }

    #[inline]
    fn due(&mut self, k: u64, now: Nanos) -> Nanos {
        let start = *self.start.get_or_insert(now);
        start + (k as f64 * self.interval_ns) as u64
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
}

impl<T> SourcePort<T> {
    pub(crate) fn new(
        src: Box<dyn Source<T>>,
        target: Box<dyn Collector<T>>,
        ctx: Rc<TaskCtx>,
        pacer: Option<Pacer>,
        gate: Option<Rc<Gate>>,
        slot: OpSlot,
        probe: Probe,
    ) -> Self {
        SourcePort {
            src,
            partition: slot.instance as u32,
            seq: 0,
            target,
            ctx,
            pacer,
            gate,
            slot,
            probe,
            ended: false,
        }
    }
}

impl<T: 'static> Port for SourcePort<T> {
    fn poll(&mut self, budget: usize) -> Poll {
        if self.ended {
            return Poll::Done;
        }
        // A chained co-operator is not ready for this input yet (the gate is
        // a latch: once open, it stays open, so checking per poll is exact).
        if self.gate.as_ref().is_some_and(|g| !g.is_open()) {
            return Poll::Idle { wake_at: None };
        }
        let mut now = self.ctx.clock.now();
        let mut moved = 0;
        let mut outcome = None;
        // Stop early when an output ring is full: what this poll already
        // produced waits in the (bounded) overflow until the ring drains.
        while moved < budget && self.ctx.blocked.get() == 0 {
            let ingest = match &mut self.pacer {
                Some(p) => {
                    let due = p.due(self.seq, now);
                    if due > now {
                        now = self.ctx.clock.now();
                        if due > now {
                            outcome = Some(Poll::Idle { wake_at: Some(due) });
                            break;
                        }
                    }
                    due
                }
                None => now,
            };
            let prev = self.ctx.enter(self.slot.op);
            let next = self.src.poll_next();
            self.ctx.leave(prev);
            match next {
                SourcePoll::Ready { value, event_time } => {
                    let id = TupleId::new(self.partition, self.seq);
                    self.seq += 1;
                    moved += 1;
                    let prev = self.ctx.enter(self.slot.op);
                    let go = run_probe(&mut self.probe, id, &self.ctx, self.slot.op);
                    self.ctx.leave(prev);
                    if !go {
                        break;
                    }
                    self.target.collect(Record {
                        id,
                        event_time,
                        ingest,
                        value,
                    });
                }
                SourcePoll::Pending => {
                    outcome = Some(Poll::Idle { wake_at: None });
                    break;
                }
                SourcePoll::End => {
                    self.ended = true;
                    self.slot.publish(self.seq, self.seq);
                    self.target.end();
                    return Poll::Done;
                }
            }
        }
        self.slot.publish(self.seq, self.seq);
        match outcome {
            Some(idle) if moved == 0 => idle,
            _ => Poll::Progress,
        }
    }

    fn flush(&mut self) {
        self.target.flush();
    }
}
