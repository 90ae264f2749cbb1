//! Asynchronous I/O (Flink's `AsyncDataStream`): a function per record
//! run on helper threads, up to `capacity` at once, its results emitted in
//! the records' order or as they complete.
//!
//! Every record's request is answered before anything that follows the
//! record on the operator's output: the requests in flight are awaited
//! (and their results emitted) at the end of each batch the operator is
//! handed, before a barrier, a watermark or the end of the input passes,
//! before a standby's chunk closes and before its state is taken. So no
//! request is in flight at a checkpoint or across a standby's chunk: a
//! restore or a takeover re-issues exactly the requests of the records it
//! replays, and none is lost or answered twice. (Flink instead keeps the
//! requests in flight in the checkpoint; here a barrier waits for at most
//! one round of them.) Under a standby's log results leave in the
//! records' order even in unordered mode, so that a replay repeats the
//! primary's output.
//!
//! A request that takes longer than the timeout fails the operator, naming
//! the record, as a panic of the function does: the job's recovery
//! re-issues it. Waiting for a request is the engine's own long step, not
//! a stall of the worker.

use crate::operator::{Collector, Output};
use crate::record::{Nanos, Record, TupleId};
use crate::runtime::graph::{BuildCx, Probe};
use crate::runtime::probe::run_probe;
use crate::runtime::task::{OpSlot, TaskCtx};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How an asynchronous operator issues and answers its requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AsyncIo {
    /// Requests in flight at most (each on a helper thread of its own).
    pub capacity: usize,
    /// A request not answered within this fails the operator.
    pub timeout: Duration,
    /// Results in the records' order (`true`), or as they complete.
    pub ordered: bool,
}

impl AsyncIo {
    /// Results in the records' order (Flink's `orderedWait`).
    pub fn ordered(capacity: usize, timeout: Duration) -> Self {
        AsyncIo {
            capacity: capacity.max(1),
            timeout,
            ordered: true,
        }
    }

    /// Results as they complete (Flink's `unorderedWait`).
    pub fn unordered(capacity: usize, timeout: Duration) -> Self {
        AsyncIo {
            ordered: false,
            ..AsyncIo::ordered(capacity, timeout)
        }
    }
}

/// A request's answer: its number and the function's result (`Err`: it
/// panicked, with the message).
type Answer<U> = (u64, Result<U, String>);

/// A record waiting for its answer.
struct InFlight<U> {
    n: u64,
    id: TupleId,
    event_time: u64,
    ingest: Nanos,
    sent_at: Instant,
    answer: Option<Result<U, String>>,
}

pub(crate) struct AsyncOp<T, U> {
    io: AsyncIo,
    requests: Option<mpsc::Sender<(u64, T)>>,
    answers: mpsc::Receiver<Answer<U>>,
    in_flight: VecDeque<InFlight<U>>,
    next: u64,
    /// A standby's log drives this hop: results in the records' order.
    logged: bool,
    down: Box<dyn Collector<U>>,
    ctx: Rc<TaskCtx>,
    slot: OpSlot,
    probe: Probe,
    seen: u64,
    emitted: u64,
}

impl<T: Send + 'static, U: Send + 'static> AsyncOp<T, U> {
    pub(crate) fn new(
        io: AsyncIo,
        f: Arc<dyn Fn(T) -> U + Send + Sync>,
        down: Box<dyn Collector<U>>,
        cx: BuildCx,
    ) -> Self {
        // Stateless; a restore says only whether the instance had finished
        // (nothing is in flight at a checkpoint).
        let _ = cx.restore_state(|_| Ok(()));
        let (req_tx, req_rx) = mpsc::channel::<(u64, T)>();
        let (ans_tx, ans_rx) = mpsc::channel::<Answer<U>>();
        let req_rx = Arc::new(std::sync::Mutex::new(req_rx));
        let name = format!("tandem-async-{}", cx.info.name);
        for _ in 0..io.capacity {
            let (rx, tx, f) = (Arc::clone(&req_rx), ans_tx.clone(), Arc::clone(&f));
            // A helper that cannot start leaves fewer in flight; with none
            // at all the first request times out and says so.
            let _ = std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || loop {
                    let job = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                    let Ok((n, value)) = job else { return };
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(value)))
                        .map_err(|p| crate::runtime::panic::panic_message(p.as_ref()));
                    if tx.send((n, r)).is_err() {
                        return;
                    }
                });
        }
        AsyncOp {
            io,
            requests: Some(req_tx),
            answers: ans_rx,
            in_flight: VecDeque::with_capacity(io.capacity),
            next: 0,
            logged: false,
            down,
            ctx: cx.ctx,
            slot: cx.slot,
            probe: cx.probe,
            seen: 0,
            emitted: 0,
        }
    }

    /// Takes the answers that have come, without waiting.
    fn take_answers(&mut self) {
        while let Ok((n, r)) = self.answers.try_recv() {
            self.file(n, r);
        }
    }

    /// Files request `n`'s answer (one of an earlier, failed incarnation's
    /// helpers cannot answer here: its channel went with it).
    fn file(&mut self, n: u64, r: Result<U, String>) {
        if let Some(f) = self.in_flight.iter_mut().find(|f| f.n == n) {
            f.answer = Some(r);
        }
    }

    /// Emits what may leave now: in order, the answered front; unordered,
    /// every answered request. Fails the operator on a request that
    /// panicked.
    fn emit_ready(&mut self) {
        let ordered = self.io.ordered || self.logged;
        let mut i = 0;
        while i < self.in_flight.len() {
            if self.in_flight[i].answer.is_none() {
                if ordered {
                    break;
                }
                i += 1;
                continue;
            }
            let f = self.in_flight.remove(i).expect("in range");
            let value = match f.answer.expect("checked") {
                Ok(v) => v,
                Err(m) => panic!("asynchronous request for record {:?} failed: {m}", f.id),
            };
            let mut out = Output::new(&mut *self.down, &mut self.emitted, &*self.ctx, self.slot.op);
            out.emit_record(Record {
                id: f.id,
                event_time: f.event_time,
                ingest: f.ingest,
                value,
            });
        }
    }

    /// Waits until fewer than `room` requests are in flight, emitting what
    /// comes back.
    fn wait_below(&mut self, room: usize) {
        self.take_answers();
        self.emit_ready();
        while self.in_flight.len() >= room.max(1) {
            // The oldest request's deadline: the first that can time out.
            let oldest = self
                .in_flight
                .iter()
                .filter(|f| f.answer.is_none())
                .map(|f| (f.sent_at, f.id))
                .min_by_key(|(at, _)| *at);
            let Some((sent_at, id)) = oldest else {
                self.emit_ready();
                continue;
            };
            let left = (sent_at + self.io.timeout).saturating_duration_since(Instant::now());
            let got = self.ctx.long(|| self.answers.recv_timeout(left));
            match got {
                Ok((n, r)) => self.file(n, r),
                Err(mpsc::RecvTimeoutError::Timeout) => panic!(
                    "asynchronous request for record {id:?} timed out after {} ms",
                    self.io.timeout.as_millis()
                ),
                Err(mpsc::RecvTimeoutError::Disconnected) => panic!(
                    "asynchronous request for record {id:?}: no helper thread is left to run it"
                ),
            }
            self.take_answers();
            self.emit_ready();
        }
    }

    /// Every request answered and its result emitted.
    fn drain(&mut self) {
        let prev = self.ctx.enter(self.slot.op);
        self.wait_below(1);
        self.ctx.leave(prev);
    }
}

impl<T: Send + 'static, U: Send + 'static> Collector<T> for AsyncOp<T, U> {
    fn collect(&mut self, rec: Record<T>) {
        self.seen += 1;
        let prev = self.ctx.enter(self.slot.op);
        if !run_probe(&mut self.probe, rec.id, &self.ctx, self.slot.op) {
            self.ctx.leave(prev);
            return;
        }
        self.wait_below(self.io.capacity);
        let n = self.next;
        self.next += 1;
        self.in_flight.push_back(InFlight {
            n,
            id: rec.id,
            event_time: rec.event_time,
            ingest: rec.ingest,
            sent_at: Instant::now(),
            answer: None,
        });
        if let Some(tx) = &self.requests {
            // The helpers hold the receiver until this operator drops it.
            let _ = tx.send((n, rec.value));
        }
        self.ctx.leave(prev);
    }

    fn flush(&mut self) {
        self.drain();
        self.slot.publish(self.seen, self.emitted);
        self.down.flush();
    }

    fn end(&mut self) {
        self.drain();
        // The helpers end once the requests stop.
        self.requests = None;
        self.slot.publish(self.seen, self.emitted);
        self.down.end();
    }

    fn barrier(&mut self, id: u64) {
        self.drain();
        // Stateless: nothing of its own in the checkpoint.
        super::pass_barrier(&self.ctx, self.slot.op, id, || Ok(None), &mut *self.down);
    }

    fn watermark(&mut self, wm: u64) {
        self.drain();
        self.slot.watermark(wm);
        self.down.watermark(wm);
    }

    fn idle(&mut self) {
        self.down.idle();
    }

    fn processing_time(&mut self, now: u64) {
        self.down.processing_time(now);
    }

    fn open_chunk(&mut self, id: crate::operator::ChunkId) {
        self.logged = true;
        self.down.open_chunk(id);
    }

    fn close_chunk(&mut self) {
        self.drain();
        self.down.close_chunk();
    }

    fn snapshot_chain(
        &mut self,
        parts: &mut crate::operator::ChainParts,
    ) -> Result<(), crate::checkpoint::CheckpointError> {
        self.drain();
        parts.push((self.slot.op, None));
        self.down.snapshot_chain(parts)
    }

    fn follow_point(
        &mut self,
        parts: &mut crate::operator::FollowParts,
    ) -> Result<bool, crate::checkpoint::CheckpointError> {
        self.down.follow_point(parts)
    }

    fn install_followed(&mut self) {
        self.down.install_followed();
    }

    fn settle(&mut self) {
        self.drain();
        self.down.settle();
    }
}
