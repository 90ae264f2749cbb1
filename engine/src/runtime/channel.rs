//! Edges between tasks: SPSC rings carrying [`Msg`]s, the sending side that
//! routes records to lanes (forward, hash, broadcast, rebalance), the
//! receiving side that drains lanes into a chain (waking a parked worker
//! through its [`WorkerSignal`]).
//!
//! One ring per (producer instance, consumer instance) pair: every ring has
//! exactly one writer thread and one reader thread, so the single-producer
//! single-consumer ring of [`crate::queue::spsc`] is all an edge needs.
//!
//! Batching: a sender *stages* records into its ring and publishes them with
//! one release store per batch (or at the end of a task poll); the receiver
//! takes them with one acquire load and publishes the freed slots once per
//! chunk.

use super::align::{AlignTimer, Alignment};
use super::graph::Fencing;
use super::lanes::{Forward, LaneClock};
use super::task::{Gate, Poll, Port, TaskCtx};
use crate::operator::{ChunkId, Collector};
use crate::queue::spsc::{Consumer, Full, Producer};
use crate::record::Record;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// What travels on a ring.
#[derive(Debug)]
pub(crate) enum Msg<T> {
    /// A record.
    Data(Record<T>),
    /// The producer will send nothing more.
    End,
    /// Checkpoint barrier: every record of this producer before it belongs
    /// to checkpoint `id`, none after it.
    Barrier(u64),
    /// Event time: no record after this one on this ring has an event time
    /// below the watermark, late records excepted (see `crate::time`).
    Watermark(u64),
    /// The producer has gone idle (see `crate::time`).
    Idle,
    /// Standby protocol (only on edges leaving an operator with a standby;
    /// see `runtime/standby/group.rs`): this primary's stream starts at chunk `seq`.
    Resume(u64),
    /// Standby protocol: the data since the previous mark are the outputs
    /// of chunk `mark.seq` for this consumer.
    Chunk(Mark),
}

/// A chunk's trailing mark on one ring: its identity and the number of
/// outputs this ring carried for it (packed into 32 bytes, no larger than
/// a small record, so marks do not widen the ring's slots).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mark {
    pub(crate) id: ChunkId,
    pub(crate) count: u32,
}

pub(crate) use super::signal::WorkerSignal;

/// How a sender picks the lane(s) of a record.
pub(crate) enum Route<T> {
    /// One lane (same instance downstream).
    Forward,
    /// Round robin over all lanes.
    Rebalance(usize),
    /// Every lane gets a copy.
    Broadcast,
    /// The lane is chosen by the record's key hash.
    Hash(Arc<dyn Fn(&T) -> u64 + Send + Sync>),
}

impl<T: 'static> Route<T> {
    /// The route of an edge with `partitioning` over `lanes` lanes, for
    /// producer instance `instance` (rebalance starts at its own lane).
    pub(crate) fn of(
        partitioning: &crate::runtime::graph::Partitioning,
        instance: usize,
        lanes: usize,
    ) -> Self {
        use crate::runtime::graph::Partitioning;
        match partitioning {
            Partitioning::Forward => Route::Forward,
            Partitioning::Rebalance => Route::Rebalance(instance % lanes.max(1)),
            Partitioning::Broadcast => Route::Broadcast,
            Partitioning::Hash(h) => Route::Hash(
                h.downcast_ref::<crate::runtime::graph::HashFn<T>>()
                    .expect("engine bug: hash function of the wrong type")
                    .clone(),
            ),
        }
    }

    /// The lane of `value` among `lanes`; `None` for broadcast (every
    /// lane).
    #[inline]
    pub(crate) fn pick(&mut self, value: &T, lanes: usize) -> Option<usize> {
        match self {
            Route::Forward => Some(0),
            Route::Hash(h) => Some(lane_of(h(value), lanes)),
            Route::Rebalance(next) => {
                let lane = *next;
                *next = (lane + 1) % lanes;
                Some(lane)
            }
            Route::Broadcast => None,
        }
    }
}

/// Maps a 64-bit hash onto `n` lanes (multiply-shift: uniform, no division).
#[inline]
/// Stable 64-bit hash of a key (FxHash, then the SplitMix64 finalizer so the
/// high bits used for lane selection are well mixed). Identical in every run.
pub fn key_hash<K: std::hash::Hash + ?Sized>(key: &K) -> u64 {
    use std::hash::Hasher;
    let mut h = rustc_hash::FxHasher::default();
    key.hash(&mut h);
    let mut z = h.finish();
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The instance (of `parallelism`) that owns `key` after a `key_by`: the
/// one whose range of key hashes holds its hash: instance `i` of `n` owns
/// the hashes `h` with `h * n / 2^64 == i`.
pub fn key_instance<K: std::hash::Hash + ?Sized>(key: &K, parallelism: usize) -> usize {
    lane_of(key_hash(key), parallelism)
}

pub(crate) fn lane_of(hash: u64, n: usize) -> usize {
    ((hash as u128 * n as u128) >> 64) as usize
}

struct Lane<T> {
    tx: Producer<Msg<T>>,
    overflow: VecDeque<Msg<T>>,
    signal: Arc<WorkerSignal>,
    /// Set once the lane's consumer has received the end of this stream
    /// from an earlier primary (see [`Fencing`]); `None`: a plain edge.
    gone: Option<Arc<AtomicBool>>,
}

impl<T> Lane<T> {
    /// Whether nobody will read this lane again. Looked at only when the
    /// ring is full, never per record.
    fn gone(&self) -> bool {
        self.gone
            .as_ref()
            .is_some_and(|g| g.load(Ordering::Acquire))
    }

    /// Lets go of what waits for a gone lane: it is owed to no one (see
    /// [`Fencing`]), and the task is no longer blocked on it.
    fn forget(&mut self, blocked: &std::cell::Cell<usize>) {
        self.overflow.clear();
        blocked.set(blocked.get() - 1);
    }
}

/// The producer side of an edge, as the last hop of a chain.
pub(crate) struct RingSender<T> {
    lanes: Vec<Lane<T>>,
    route: Route<T>,
    ctx: Rc<TaskCtx>,
    batch: usize,
    ended: bool,
    /// A hot standby computes with its output suppressed: while set,
    /// nothing is sent.
    suppress: Option<Rc<std::cell::Cell<bool>>>,
    /// Standby protocol: the chunk whose outputs are being sent.
    open: Option<ChunkId>,
    /// Per lane: outputs of the open chunk sent.
    counts: Vec<u32>,
    /// The stream's resume mark was sent.
    resumed: bool,
}

impl<T: Clone + 'static> RingSender<T> {
    /// An incarnation's sender (see [`Fencing`]).
    pub(crate) fn fenced(mut self, f: Fencing) -> Self {
        debug_assert_eq!(f.gone.len(), self.lanes.len());
        self.suppress = Some(f.muted);
        for (l, g) in self.lanes.iter_mut().zip(f.gone) {
            l.gone = Some(g);
        }
        self
    }

    #[inline]
    fn muted(&self) -> bool {
        self.suppress.as_ref().is_some_and(|f| f.get())
    }

    pub(crate) fn new(
        lanes: Vec<(Producer<Msg<T>>, Arc<WorkerSignal>)>,
        route: Route<T>,
        ctx: Rc<TaskCtx>,
        batch: usize,
    ) -> Self {
        let n = lanes.len();
        RingSender {
            open: None,
            counts: vec![0; n],
            resumed: false,
            lanes: lanes
                .into_iter()
                .map(|(tx, signal)| Lane {
                    tx,
                    overflow: VecDeque::new(),
                    signal,
                    gone: None,
                })
                .collect(),
            route,
            ctx,
            batch: batch.max(1),
            ended: false,
            suppress: None,
        }
    }

    #[inline]
    fn send_data(&mut self, lane: usize, rec: Record<T>) {
        if self.open.is_some() {
            self.counts[lane] = self.counts[lane].wrapping_add(1);
        }
        self.send(lane, Msg::Data(rec));
    }

    /// Queues `msg` behind a full ring. Growing a large overflow copies
    /// it (milliseconds for the end-of-stream output of a large keyed
    /// state): a long step, not a stall.
    fn overflow(&mut self, lane: usize, msg: Msg<T>) {
        let ctx = &self.ctx;
        let l = &mut self.lanes[lane];
        if l.gone() {
            // `msg` with the rest.
            l.forget(&ctx.blocked);
            return;
        }
        let o = &mut l.overflow;
        if o.len() == o.capacity() {
            ctx.long(|| o.reserve(o.len().max(64)));
        }
        o.push_back(msg);
    }

    #[inline]
    fn send(&mut self, lane: usize, msg: Msg<T>) {
        if !self.lanes[lane].overflow.is_empty() {
            self.overflow(lane, msg);
            return;
        }
        let l = &mut self.lanes[lane];
        match l.tx.stage(msg) {
            Ok(()) => {
                if l.tx.staged() >= self.batch {
                    l.tx.commit();
                    l.signal.notify();
                }
            }
            Err(Full(msg)) => {
                if l.tx.commit() > 0 {
                    l.signal.notify();
                }
                if let Err(Full(msg)) = l.tx.stage(msg) {
                    if l.gone() {
                        return;
                    }
                    self.ctx.blocked.set(self.ctx.blocked.get() + 1);
                    self.overflow(lane, msg);
                }
            }
        }
    }
}

impl<T: Clone + 'static> Collector<T> for RingSender<T> {
    #[inline]
    fn collect(&mut self, rec: Record<T>) {
        if self.suppress.is_some() && self.muted() {
            return;
        }
        let n = self.lanes.len();
        match self.route.pick(&rec.value, n) {
            Some(lane) => self.send_data(lane, rec),
            None => {
                for lane in 0..n - 1 {
                    self.send_data(lane, rec.clone());
                }
                self.send_data(n - 1, rec);
            }
        }
    }

    fn flush(&mut self) {
        for l in &mut self.lanes {
            if !l.overflow.is_empty() && l.gone() {
                l.forget(&self.ctx.blocked);
            }
            if !l.overflow.is_empty() {
                while let Some(m) = l.overflow.pop_front() {
                    if let Err(Full(m)) = l.tx.stage(m) {
                        l.overflow.push_front(m);
                        break;
                    }
                }
                if l.overflow.is_empty() {
                    self.ctx.blocked.set(self.ctx.blocked.get() - 1);
                }
            }
            if l.tx.commit() > 0 {
                l.signal.notify();
            }
        }
    }

    fn end(&mut self) {
        if self.muted() || self.ended {
            return;
        }
        // The last chunk's outputs (end-of-stream emissions) are closed
        // before the end.
        self.close_chunk();
        self.ended = true;
        for lane in 0..self.lanes.len() {
            self.send(lane, Msg::End);
        }
        self.flush();
    }

    fn barrier(&mut self, id: u64) {
        // A hot standby's barriers are its primary's to send.
        if self.ended || self.muted() {
            return;
        }
        // Every lane gets the barrier, published at once so that alignment
        // downstream does not wait for a batch to fill.
        for lane in 0..self.lanes.len() {
            self.send(lane, Msg::Barrier(id));
        }
        self.flush();
    }

    fn watermark(&mut self, wm: u64) {
        // A hot standby's watermarks are its primary's to send.
        if self.ended || self.muted() {
            return;
        }
        for lane in 0..self.lanes.len() {
            self.send(lane, Msg::Watermark(wm));
        }
    }

    fn idle(&mut self) {
        if self.ended || self.muted() {
            return;
        }
        for lane in 0..self.lanes.len() {
            self.send(lane, Msg::Idle);
        }
        self.flush();
    }

    fn open_chunk(&mut self, id: ChunkId) {
        if self.ended || self.muted() {
            return;
        }
        if !std::mem::replace(&mut self.resumed, true) {
            for l in 0..self.lanes.len() {
                self.send(l, Msg::Resume(id.seq));
            }
        }
        self.counts.fill(0);
        self.open = Some(id);
    }

    fn close_chunk(&mut self) {
        if self.ended || self.muted() {
            return;
        }
        if let Some(id) = self.open.take() {
            for l in 0..self.lanes.len() {
                let count = self.counts[l];
                self.send(l, Msg::Chunk(Mark { id, count }));
            }
        }
    }
}

/// Records taken from a ring per step before the task re-checks
/// backpressure and its gate.
const CHUNK: usize = 64;

/// The consumer side of an edge: drains one ring per upstream instance into
/// the chain, and ends the chain once every upstream instance has ended.
///
/// Barrier alignment ([`super::align`]): when lane `i` delivers barrier `n`, the barrier is
/// forwarded into the chain once every lane has delivered `n` or ended. In
/// exactly-once mode lane `i` is not read meanwhile (its records after the
/// barrier belong to the next checkpoint and wait in their ring — bounded,
/// with backpressure upstream); in at-least-once mode it is read on, and
/// those records end up both in the snapshot and in the replay after a
/// restore. A newer barrier abandons an older one still aligning (the
/// coordinator gave up on it: a source may skip it).
pub(crate) struct RingInput<T> {
    rings: Vec<Consumer<Msg<T>>>,
    /// Per ring: the producer's worker, woken when slots are freed (it may
    /// have parked while its output was full).
    producers: Vec<Arc<WorkerSignal>>,
    ended: Vec<bool>,
    live: usize,
    next: usize,
    target: Box<dyn Collector<T>>,
    gate: Option<Rc<Gate>>,
    ctx: Rc<TaskCtx>,
    align: Alignment,
    timer: AlignTimer,
    clock: LaneClock,
}

/// Applies what a lane's clock decided to the chain.
pub(crate) fn forward_time<T>(f: Forward, target: &mut dyn Collector<T>) {
    match f {
        Forward::Nothing => {}
        Forward::Watermark(wm) => target.watermark(wm),
        Forward::Idle => target.idle(),
        Forward::IdleAt(wm) => {
            target.watermark(wm);
            target.idle();
        }
    }
}

impl<T> RingInput<T> {
    pub(crate) fn new(
        rings: Vec<(Consumer<Msg<T>>, Arc<WorkerSignal>)>,
        target: Box<dyn Collector<T>>,
        gate: Option<Rc<Gate>>,
        ctx: Rc<TaskCtx>,
    ) -> Self {
        let n = rings.len();
        let (rings, producers) = rings.into_iter().unzip();
        RingInput {
            rings,
            producers,
            ended: vec![false; n],
            live: n,
            next: 0,
            target,
            gate,
            ctx,
            align: Alignment::new(n),
            timer: AlignTimer::default(),
            clock: LaneClock::new(n),
        }
    }

    fn on_barrier(&mut self, lane: usize, id: u64) {
        self.timer.on_barrier(&self.align, id, self.ctx.clock.now());
        if let Some(id) = self.align.on_barrier(lane, id, &self.ended) {
            self.forward(id);
        }
    }

    fn try_complete(&mut self) {
        if let Some(id) = self.align.try_complete(&self.ended) {
            self.forward(id);
        }
    }

    fn forward(&mut self, id: u64) {
        if let Some(ns) = self.timer.forwarded(id, self.ctx.clock.now()) {
            self.ctx.aligned(ns);
        }
        self.target.barrier(id);
    }
}

impl<T> Port for RingInput<T> {
    fn processing_time(&mut self, now: crate::record::Nanos) {
        if self.live > 0 {
            self.target.processing_time(now);
        }
    }

    fn poll(&mut self, budget: usize) -> Poll {
        if self.live == 0 {
            return Poll::Done;
        }
        let n = self.rings.len();
        let mut moved = 0usize;
        let mut idle_rounds = 0;
        // Visit lanes round robin, a chunk at a time, until the budget is
        // spent, every lane is empty, or the chain pushes back.
        while moved < budget && idle_rounds < n {
            if let Some(g) = &self.gate {
                if !g.is_open() {
                    break;
                }
            }
            if self.ctx.blocked.get() > 0 {
                break;
            }
            let i = self.next;
            self.next = (i + 1) % n;
            if self.ended[i] || (self.ctx.exactly_once() && self.align.holds(i)) {
                idle_rounds += 1;
                continue;
            }
            let target = &mut self.target;
            let clock = &mut self.clock;
            let ctx = &self.ctx;
            ctx.lane.set(i as u32);
            ctx.lane_wm.set(clock.lane(i));
            let mut got_end = false;
            let mut barrier = None;
            let take = CHUNK.min(budget - moved);
            let k = self.rings[i].pop_batch_until(take, |m| match m {
                Msg::Data(r) => {
                    clock.on_data(i);
                    target.collect(r);
                    true
                }
                Msg::Watermark(wm) => {
                    let f = clock.on_watermark(i, wm);
                    ctx.lane_wm.set(clock.lane(i));
                    forward_time(f, &mut **target);
                    true
                }
                Msg::Idle => {
                    let f = clock.on_idle(i);
                    forward_time(f, &mut **target);
                    true
                }
                Msg::End => {
                    got_end = true;
                    false
                }
                Msg::Barrier(id) => {
                    barrier = Some(id);
                    false
                }
                // Only on edges that leave an operator with a standby, which
                // are read by the standby's fenced input (`runtime/standby/fenced.rs`).
                Msg::Chunk(_) | Msg::Resume(_) => true,
            });
            moved += k;
            if k > 0 {
                self.producers[i].notify();
            }
            if let Some(id) = barrier {
                self.on_barrier(i, id);
            }
            if got_end {
                self.ended[i] = true;
                self.live -= 1;
                self.try_complete();
                if self.live > 0 {
                    let f = self.clock.on_end(i);
                    forward_time(f, &mut *self.target);
                }
            }
            if k == 0 {
                idle_rounds += 1;
            } else {
                idle_rounds = 0;
            }
        }
        if self.live == 0 {
            self.target.end();
            return Poll::Done;
        }
        if moved > 0 {
            Poll::Progress
        } else {
            Poll::Idle { wake_at: None }
        }
    }

    fn flush(&mut self) {
        self.target.flush();
    }
}
