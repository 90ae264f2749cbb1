//! The port of one incarnation of a standby group: a standby until it
//! claims an epoch, then the primary (the protocol is in [`super::group`]).
//!
//! Both read the group's buffer queues through the incarnation's own reader
//! slot, one determinant-log entry (one chunk) at a time: the primary
//! appends entries when it reaches the log's end, a new primary and a hot
//! standby follow the entries already there.
//!
//! This module has the chunk loop and the primary's end; [`next`] what
//! comes next (the logged entry, or the chunk or tick a primary chooses
//! and logs); [`point`] the primary's recovery points; [`standby`] the standby's side and the
//! takeover.

use super::group::{Doing, Group, NONE};
use super::kit::{decode, ChainBuild, Entry, KIND_TYPED};
use crate::checkpoint::StateCapture;
use crate::error::JobError;
use crate::operator::ChunkId;
use crate::operator::Collector;
use crate::record::{Nanos, Record};
use crate::runtime::align::Alignment;
use crate::runtime::channel::forward_time;
use crate::runtime::graph::downcast;
use crate::runtime::lanes::LaneClock;
use crate::runtime::probe::run_probe;
use crate::runtime::task::{Poll, Port, TaskCtx};
use crate::standby::codec::Codec;
use crate::standby::decide::Detector;
use crate::standby::detlog::Det;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;

mod next;
mod point;
pub(crate) mod source_lane;
mod standby;

use source_lane::{SourceLane, SourceSpec};

type BoxCollector<T> = Box<dyn Collector<T>>;

/// Inputs a live primary takes from one lane per chunk.
const CHUNK: u64 = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Standby,
    Primary {
        epoch: u64,
    },
    /// The last lane ended: its end marker is on its way to every ring.
    Ending {
        epoch: u64,
    },
    Over,
}

/// Why processing stopped short.
enum Stop {
    /// The epoch is over: a standby took over.
    Fenced,
    /// The operator failed (the task reports it).
    Failed,
}

/// A recovery point being taken: published once every consumer has
/// acknowledged every chunk before it.
struct Pending {
    seq: u64,
    pos: Vec<u64>,
    align: Alignment,
    clock: LaneClock,
    build: point::Build,
}

/// One input of a chunk, as copied out of its queue.
pub(crate) enum Item<T> {
    Rec(Record<T>),
    /// The lane's watermark.
    Wm(u64),
    /// The lane's producer went idle.
    Idle,
}

/// The port of one incarnation (see the module docs).
pub(crate) struct Incarnation<T> {
    group: Arc<Group>,
    inc: u64,
    slot: usize,
    ctx: Rc<TaskCtx>,
    build: ChainBuild,
    chain: Option<BoxCollector<T>>,
    phase: Phase,
    /// The epoch whose primary this standby backs up.
    backs: u64,
    /// The next determinant-log entry to process.
    seq: u64,
    pos: Vec<u64>,
    ended: Vec<bool>,
    live: usize,
    /// Checkpoint barriers over the lanes, as of entry `seq`.
    align: Alignment,
    /// Event time over the lanes, as of entry `seq`.
    clock: LaneClock,
    /// The id of the barrier entry copied out last.
    barrier: u64,
    attached: bool,
    rr: usize,
    buf: Vec<Item<T>>,
    /// A fenced predecessor's reader slot, until its cursor is reclaimed.
    reclaim: Option<(u64, usize)>,
    pending: Option<Pending>,
    next_point: Nanos,
    takeover: Option<usize>,
    /// The takeover sinks watch for, and when it was claimed.
    watch: Option<(usize, Nanos)>,
    backlog: Vec<u64>,
    caught_up: bool,
    detector: Detector,
    /// A hot standby that fell behind starts again only from a point newer
    /// than this.
    hot_after: Option<u64>,
    /// When a hot standby that fell behind may restore a point again.
    hot_backoff: HotBackoff,
    /// The lane is a replayed source (the group has no queue).
    src: Option<SourceLane<T>>,
    /// Per lane: its queue's typed slots (`None`: records are encoded).
    typed: Vec<Option<Arc<super::slots::TypedSlots<T>>>>,
    /// The log was full at this poll: the next one takes a point.
    log_full: bool,
    /// A chunk the primary chose and has not logged yet (a tick went
    /// first).
    chosen: Option<Det>,
    /// The first primary's child died while its chain was built (process
    /// isolation): raised at its first poll, where its role answers the
    /// failure with a takeover — as it would a death a moment later.
    died: Option<Box<dyn std::any::Any + Send>>,
}

impl<T: crate::Data + Codec + Sync> Incarnation<T> {
    pub(crate) fn new(
        group: Arc<Group>,
        inc: u64,
        primary: bool,
        build: ChainBuild,
        ctx: &Rc<TaskCtx>,
        source: Option<SourceSpec>,
    ) -> Self {
        let lanes = group.lanes();
        let slot = group.slot_of(inc).unwrap_or(NONE);
        let mut me = Incarnation {
            slot,
            ctx: Rc::clone(ctx),
            build,
            chain: None,
            phase: Phase::Standby,
            backs: 0,
            seq: 0,
            // Where the group's input starts (a restored source's position).
            pos: (0..lanes).map(|l| group.covered(l)).collect(),
            ended: vec![false; lanes],
            live: lanes,
            align: Alignment::new(lanes),
            clock: LaneClock::new(lanes),
            barrier: 0,
            attached: false,
            rr: 0,
            buf: Vec::with_capacity(CHUNK as usize),
            reclaim: None,
            pending: None,
            next_point: 0,
            takeover: None,
            watch: None,
            backlog: vec![0; lanes],
            caught_up: true,
            detector: Detector::new(group.timeout_ns),
            hot_after: None,
            hot_backoff: HotBackoff::default(),
            src: source.map(SourceLane::new),
            typed: (0..lanes).map(|l| group.typed_slots::<T>(l)).collect(),
            log_full: false,
            chosen: None,
            died: None,
            inc,
            group,
        };
        if slot == NONE {
            me.fail("engine bug: an incarnation without a reader slot".into());
            me.phase = Phase::Over;
            return me;
        }
        if primary {
            // The first primary: epoch 1, from the start of every queue.
            me.open_source();
            let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                me.build_chain(None);
                me.learn_stateless();
            }));
            match built {
                Ok(()) => {}
                // Its child died (killed, or crashed) while the chain was
                // built and asked about its state: the primary's failure,
                // which its standby answers.
                Err(p) if p.is::<crate::runtime::panic::ProcessDied>() => me.died = Some(p),
                Err(p) => std::panic::resume_unwind(p),
            }
            me.attach();
            me.phase = Phase::Primary { epoch: 1 };
            me.ctx.epoch.set(1);
            me.group.primary_task.store(me.ctx.key, Ordering::Release);
            me.group.lock().ready = true;
        } else {
            me.backs = me.group.live.current();
            me.ctx.muted.set(true);
        }
        me
    }

    fn build_chain(&mut self, state: Option<Vec<u8>>) {
        // Restoring a large state takes a while: not a stall.
        let ctx = Rc::clone(&self.ctx);
        let c = ctx.long(|| (self.build)(state));
        self.chain = Some(downcast::<BoxCollector<T>>(c, "standby chain"));
    }

    /// Whether the chain keeps state, told to the group (it decides how
    /// often points are taken, and whether they carry a state): by the
    /// first primary whose chain was built.
    fn learn_stateless(&mut self) {
        if self.group.stateless_known.load(Ordering::Acquire) {
            return;
        }
        let Some(mut chain) = self.chain.take() else {
            return;
        };
        let stateless = self.chain_capture(&mut chain, false).is_none();
        self.chain = Some(chain);
        self.group.stateless.store(stateless, Ordering::Release);
        self.group.stateless_known.store(true, Ordering::Release);
    }

    /// Drops the chain (a large state takes a while: not a stall).
    fn drop_chain(&mut self) {
        let chain = self.chain.take();
        self.ctx.long(move || drop(chain));
    }

    /// The chain's state now (`None`: stateless; see
    /// [`crate::runtime::chain::frame::capture`] for `frame`), reporting a failure.
    fn chain_capture(&self, chain: &mut BoxCollector<T>, frame: bool) -> Option<StateCapture> {
        let mut parts = Vec::with_capacity(self.group.chain.len());
        match chain.snapshot_chain(&mut parts) {
            Ok(()) => crate::runtime::chain::frame::capture(parts, self.group.chain.len(), frame),
            Err(e) => {
                self.fail(format!("standby snapshot: {e}"));
                None
            }
        }
    }

    /// The chain's state for a recovery point (`None`: no point now — it
    /// failed, or the operator of a chain of one has no state to stand
    /// for). A longer chain's point always has its frame: an operator
    /// without a state there restores none.
    fn chain_snapshot(&self, chain: &mut BoxCollector<T>) -> Option<StateCapture> {
        self.chain_capture(chain, true)
    }

    fn attach(&mut self) -> bool {
        for (l, q) in self.group.queues.iter().enumerate() {
            if !q.attach(self.slot, self.pos[l]) {
                for q in &self.group.queues[..l] {
                    q.release(self.slot);
                }
                self.attached = false;
                return false;
            }
        }
        self.attached = true;
        true
    }

    fn detach(&mut self) {
        if std::mem::replace(&mut self.attached, false) {
            for q in &self.group.queues {
                q.release(self.slot);
            }
        }
    }

    /// Takes position `pos` of every lane and the barrier alignment there
    /// (a recovery point's): lanes whose end entry lies before it have
    /// ended.
    fn place(&mut self, seq: u64, pos: Vec<u64>, align: Alignment, clock: LaneClock) {
        self.seq = seq;
        self.pos = pos;
        self.align = align;
        self.clock = clock;
        self.chosen = None;
        self.live = self.pos.len();
        for l in 0..self.pos.len() {
            // (A replayed source's end takes no position: a point never
            // lies past it.)
            self.ended[l] = self.group.end_pos[l].load(Ordering::Acquire) < self.pos[l];
            if self.ended[l] {
                self.live -= 1;
            }
        }
        self.open_source();
    }

    #[inline]
    fn doing(&self, d: Doing) {
        if self.phase != Phase::Standby {
            self.group.doing.store(d as u32, Ordering::Relaxed);
        }
    }

    fn fail(&self, what: String) {
        self.ctx.fail(JobError::Io {
            operator: self.group.name.to_string(),
            instance: self.group.instance,
            context: "standby".into(),
            path: None,
            source: std::io::Error::other(what),
        });
    }

    fn over(&mut self) -> Poll {
        self.phase = Phase::Over;
        Poll::Done
    }

    fn log_of(&self) -> &crate::runtime::JobShared {
        &self.ctx.shared
    }

    /// Reads queue entries of lane `l` inside the reader's copying mark:
    /// for a primary (`epoch`), only while its epoch holds — a successor
    /// may reclaim its cursor once it is fenced (see `bq`).
    fn reading<R>(
        &self,
        l: usize,
        epoch: Option<u64>,
        f: impl FnOnce(&crate::standby::bq::BufferQueue) -> R,
    ) -> Option<R> {
        let q = &self.group.queues[l];
        let Some(e) = epoch else {
            return Some(f(q));
        };
        q.enter(self.slot);
        let r = (self.group.live.current() == e).then(|| f(q));
        q.leave(self.slot);
        r
    }

    /// Processes up to `budget` inputs, entry by entry of the log: as the
    /// primary of `epoch` (appending entries past the log's end), or as a
    /// hot standby (`epoch` `None`: only logged entries below `limit`, and
    /// never the end that would end the operator).
    fn process(&mut self, budget: u64, epoch: Option<u64>, limit: u64) -> Result<u64, Stop> {
        let mut moved = 0u64;
        while moved < budget && self.ctx.blocked.get() == 0 && self.live > 0 && self.seq < limit {
            let Some(det) = self.next_entry(budget - moved, epoch)? else {
                break;
            };
            if epoch.is_none() && matches!(det, Det::End { .. }) && self.live == 1 {
                // A hot standby never ends the operator: the primary does.
                break;
            }
            if let Det::Tick { ms } = det {
                self.run_tick(ms)?;
                continue;
            }
            if !self.copy_chunk(det, epoch)? {
                // A replayed source has not produced the logged records
                // yet.
                break;
            }
            moved += self.run_chunk(det)?;
        }
        Ok(moved)
    }

    /// Copies the inputs of chunk `det` out of its queue into `self.buf`
    /// (for a primary, inside its copying mark), checking them against the
    /// entry; `false`: a replayed source has not produced them yet.
    fn copy_chunk(&mut self, det: Det, epoch: Option<u64>) -> Result<bool, Stop> {
        self.doing(Doing::Copying);
        if self.src.is_some() {
            return self.take_from_source(det);
        }
        let (l, n, seq) = (det.lane(), det.len(), self.seq);
        let first = self.pos[l];
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        let mut barrier = 0;
        let typed = self.typed.get(l).and_then(|t| t.as_deref());
        let copied = self.reading(l, epoch, |q| {
            for p in first..first + n {
                let Some(e) = q.get(p) else {
                    return Err((false, format!(
                        "determinant log entry {seq} takes positions {first}..{} of {}, which holds {}..{}",
                        first + n,
                        q.path().display(),
                        q.head(),
                        q.tail()
                    )));
                };
                if let Err(why) = e.verify() {
                    return Err((true, format!("buffer queue {}: {why}", q.path().display())));
                }
                let entry = match (e.bytes, typed) {
                    // The record itself, in the queue's typed slot.
                    ([KIND_TYPED], Some(t)) => match t.get(p) {
                        Some(r) if r.id.0 == e.tuple_id => Ok(Entry::Data(r)),
                        _ => {
                            return Err((true, format!(
                                "buffer queue {} position {p}: its typed slot does not hold tuple {:#x}",
                                q.path().display(),
                                e.tuple_id
                            )))
                        }
                    },
                    _ => decode::<T>(e.tuple_id, e.bytes),
                };
                match (entry, det) {
                    (Ok(Entry::Data(r)), Det::Chunk { .. }) => buf.push(Item::Rec(r)),
                    (Ok(Entry::Watermark(wm)), Det::Chunk { .. }) => buf.push(Item::Wm(wm)),
                    (Ok(Entry::Idle), Det::Chunk { .. }) => buf.push(Item::Idle),
                    (Ok(Entry::End), Det::End { .. }) => {}
                    (Ok(Entry::Barrier(id)), Det::Barrier { .. }) => barrier = id,
                    (Ok(_), _) => {
                        return Err((false, format!(
                            "determinant log entry {seq} ({det:?}) disagrees with position {p} of {}",
                            q.path().display()
                        )))
                    }
                    (Err(why), _) => {
                        return Err((false, format!(
                            "buffer queue {} position {p}: {why}",
                            q.path().display()
                        )))
                    }
                }
            }
            Ok(())
        });
        self.buf = buf;
        self.barrier = barrier;
        match copied {
            None => Err(Stop::Fenced),
            Some(Err((true, why))) => {
                // The group's own record of its input is damaged: no
                // takeover can replay it (every one would read the same
                // bytes). The attempt fails — restart-all from the last
                // checkpoint, or the job's error naming the queue.
                self.ctx.shared.fail(JobError::Io {
                    operator: self.group.name.to_string(),
                    instance: self.group.instance,
                    context: "reading the standby's buffer queue".into(),
                    path: None,
                    source: std::io::Error::new(std::io::ErrorKind::InvalidData, why),
                });
                Err(Stop::Failed)
            }
            Some(Err((false, why))) => {
                self.fail(why);
                Err(Stop::Failed)
            }
            Some(Ok(())) => Ok(true),
        }
    }

    /// Runs the copied chunk `det` through the chain between its marks
    /// (the end entry of the last lane ends the operator; a barrier entry
    /// that completes an alignment passes the barrier down the chain, where
    /// the operator snapshots and acknowledges it); returns the inputs it
    /// consumed.
    fn run_chunk(&mut self, det: Det) -> Result<u64, Stop> {
        self.doing(Doing::Operator);
        let (l, n, seq) = (det.lane(), self.consumes(det), self.seq);
        let first = self.pos[l];
        let chain = self
            .chain
            .as_mut()
            .expect("a reading incarnation has its chain");
        chain.open_chunk(ChunkId {
            seq,
            first,
            n: n as u32,
            lane: l as u16,
        });
        let mut src = self.src.as_mut();
        self.ctx.lane.set(l as u32);
        self.ctx.lane_wm.set(self.clock.lane(l));
        for item in self.buf.drain(..) {
            let r = match item {
                Item::Rec(r) => {
                    self.clock.on_data(l);
                    r
                }
                Item::Wm(wm) => {
                    let f = self.clock.on_watermark(l, wm);
                    self.ctx.lane_wm.set(self.clock.lane(l));
                    forward_time(f, &mut **chain);
                    continue;
                }
                Item::Idle => {
                    let f = self.clock.on_idle(l);
                    forward_time(f, &mut **chain);
                    continue;
                }
            };
            if let Some(s) = &mut src {
                // The source's own fault injection, before its record
                // enters the chain.
                let prev = self.ctx.enter(s.spec.node);
                let go = run_probe(&mut s.spec.probe, r.id, &self.ctx, s.spec.node);
                self.ctx.leave(prev);
                if !go {
                    return Err(Stop::Failed);
                }
            }
            chain.collect(r);
            // A sign of life inside a long poll (see `Detector`).
            self.ctx.tick();
            if self.ctx.has_failure() {
                // A cut input: nothing after the record it cut is
                // processed, so what was emitted is a prefix of the
                // chunk's outputs (the consumers' cut counts on it).
                return Err(Stop::Failed);
            }
        }
        self.pos[l] = first + n;
        if let Some(q) = self.group.queues.get(l) {
            q.advance(self.slot, first + n);
        }
        if let Some(s) = &src {
            if !self.ctx.muted.get() {
                // The source's position, as its own port publishes it.
                let c = &self.ctx.shared.metrics.counters[s.spec.node][s.spec.info.instance];
                c.records.store(first + n, Ordering::Relaxed);
                c.emitted.store(first + n, Ordering::Relaxed);
            }
        }
        self.seq += 1;
        match det {
            Det::Barrier { .. } => {
                if let Some(id) = self.align.on_barrier(l, self.barrier, &self.ended) {
                    if let Some(s) = &src {
                        // The source's acknowledgement: its position.
                        if self.ctx.wants_snapshot(id) {
                            self.ctx.ack(s.spec.node, id, None, Some(first), None);
                        }
                    }
                    chain.barrier(id);
                }
            }
            Det::End { .. } => {
                if src.is_some() {
                    self.group.end_pos[l].store(first, Ordering::Release);
                }
                self.ended[l] = true;
                self.live -= 1;
                if let Some(id) = self.align.try_complete(&self.ended) {
                    chain.barrier(id);
                }
                if self.live > 0 {
                    let f = self.clock.on_end(l);
                    forward_time(f, &mut **chain);
                }
                if self.live == 0 {
                    // Its end-of-stream outputs, the last chunk's mark, the
                    // end.
                    chain.end();
                    return Ok(n);
                }
            }
            Det::Chunk { .. } => {}
            Det::Tick { .. } => unreachable!("ticks run in run_tick"),
        }
        chain.close_chunk();
        Ok(n)
    }

    fn poll_primary(&mut self, epoch: u64, now: Nanos, budget: usize) -> Poll {
        self.try_reclaim();
        self.points(now, epoch);
        self.doing(Doing::Between);
        if self.ctx.has_failure() {
            return Poll::Progress;
        }
        let moved = match self.process(budget as u64, Some(epoch), u64::MAX) {
            Ok(n) => {
                self.doing(Doing::Between);
                n
            }
            Err(Stop::Fenced) => {
                // A standby took over while this one was stalled.
                self.ctx.fenced.set(true);
                return self.over();
            }
            Err(Stop::Failed) => return Poll::Progress,
        };
        if !self.caught_up
            && self
                .pos
                .iter()
                .zip(&self.backlog)
                .zip(&self.ended)
                .all(|((p, b), e)| p >= b || *e)
        {
            self.caught_up = true;
            self.group.replaying.store(false, Ordering::Release);
            if let Some(k) = self.takeover {
                if let Some(t) = self.standby_log().lock().get_mut(k) {
                    t.caught_up_at = Some(now);
                }
            }
        }
        if let Some((k, at)) = self.watch {
            // Nothing of the new primary's first outputs reached a sink
            // within 200 ms (all filtered out downstream): stop looking.
            if now > at + 200_000_000 {
                self.standby_log().unwatch(k);
                self.watch = None;
            }
        }
        if self.live == 0 {
            self.phase = Phase::Ending { epoch };
            return self.poll_ending(epoch);
        }
        if moved > 0 || self.building() || std::mem::take(&mut self.log_full) {
            Poll::Progress
        } else {
            Poll::Idle {
                wake_at: self.src.as_ref().and_then(|s| s.wake_at),
            }
        }
    }

    /// The end marker is in the chain's rings once nothing is left in an
    /// overflow: then the group is done.
    fn poll_ending(&mut self, epoch: u64) -> Poll {
        self.doing(Doing::Ending);
        if let Some(c) = &mut self.chain {
            c.flush();
        }
        if self.ctx.blocked.get() > 0 {
            return Poll::Idle { wake_at: None };
        }
        if !self.group.mark_done(&self.ctx.shared, epoch) {
            self.ctx.fenced.set(true);
        }
        self.over()
    }

    fn standby_log(&self) -> &super::run::StandbyLog {
        &self
            .log_of()
            .standby
            .as_ref()
            .expect("a standby group runs in a standby run")
            .log
    }

    fn try_reclaim(&mut self) {
        if let Some((inc, slot)) = self.reclaim {
            if self.group.reclaim(inc, slot) {
                self.reclaim = None;
            }
        }
    }
}

impl<T> Drop for Incarnation<T> {
    fn drop(&mut self) {
        if self.slot != NONE {
            self.group.free_slot(&self.ctx.shared, self.inc);
        }
    }
}

impl<T: crate::Data + Codec + Sync> Port for Incarnation<T> {
    fn poll(&mut self, budget: usize) -> Poll {
        if let Some(p) = self.died.take() {
            std::panic::resume_unwind(p);
        }
        let now = self.ctx.clock.now();
        match self.phase {
            Phase::Standby => self.poll_standby(now, budget),
            Phase::Primary { epoch } => self.poll_primary(epoch, now, budget),
            Phase::Ending { epoch } => self.poll_ending(epoch),
            Phase::Over => Poll::Done,
        }
    }

    fn flush(&mut self) {
        if let Some(c) = &mut self.chain {
            c.flush();
        }
    }

    fn debug(&self) -> String {
        format!(
            "incarnation {} of {}[{}]: {:?} seq {} (log point {}) pos {:?} ended {:?} aligning {} blocked {} acked_min {} queues {:?}",
            self.inc,
            self.group.name,
            self.group.instance,
            self.phase,
            self.seq,
            self.group.point_seq.load(Ordering::Acquire),
            self.pos,
            self.ended,
            self.align.aligning(),
            self.ctx.blocked.get(),
            self.group.acked_min_seq(),
            self.group
                .queues
                .iter()
                .map(|q| (
                    q.head(),
                    q.tail(),
                    q.covered(),
                    (0..crate::standby::bq::MAX_READERS)
                        .map(|r| q.reader_cursor(r) as i64)
                        .collect::<Vec<_>>()
                ))
                .collect::<Vec<_>>()
        )
    }
}

/// How long a hot standby that fell behind waits before it restores a
/// point and follows again. Restoring is the whole state (seconds of a core
/// for a large one); a standby that cannot keep up with its primary's pace
/// would otherwise let go, restore, fall behind and let go again, starving
/// the primaries it shares cores with. Each time it falls behind soon after
/// starting, it waits twice as long (from one point interval up to
/// [`HotBackoff::MAX`]), as a warm standby meanwhile; having kept up for
/// [`HotBackoff::KEPT_UP`] waits, it starts over from one interval.
#[derive(Debug, Default)]
pub(super) struct HotBackoff {
    /// When it last started following.
    started_at: Nanos,
    /// Its current wait (0: none yet).
    wait: Nanos,
    /// It does not start before this.
    until: Nanos,
}

impl HotBackoff {
    /// The longest wait.
    const MAX: Nanos = 30_000 * crate::runtime::task::MS;
    /// Following this many times its wait without falling behind resets the
    /// wait.
    const KEPT_UP: Nanos = 8;

    /// Whether it may start following at `now`.
    pub(super) fn may_start(&self, now: Nanos) -> bool {
        now >= self.until
    }

    /// It started following at `now`.
    pub(super) fn started(&mut self, now: Nanos) {
        self.started_at = now;
    }

    /// It fell behind at `now`, its group taking points `every`.
    pub(super) fn fell_behind(&mut self, now: Nanos, every: std::time::Duration) {
        let first = (every.as_nanos() as Nanos).clamp(crate::runtime::task::MS, Self::MAX);
        if now.saturating_sub(self.started_at) > Self::KEPT_UP.saturating_mul(self.wait.max(first))
        {
            self.wait = 0;
        }
        self.wait = if self.wait == 0 {
            first
        } else {
            self.wait.saturating_mul(2).min(Self::MAX)
        };
        self.until = now.saturating_add(self.wait);
    }
}

#[cfg(test)]
mod hot_backoff_tests {
    use super::HotBackoff;
    use std::time::Duration;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_hot_standby_that_keeps_falling_behind_waits_longer_each_time() {
        let mut b = HotBackoff::default();
        assert!(b.may_start(0));
        let every = Duration::from_millis(100);
        let mut now = 1_000 * MS;
        let mut waits = Vec::new();
        for _ in 0..12 {
            b.started(now);
            now += 10 * MS; // behind again soon after starting
            b.fell_behind(now, every);
            assert!(!b.may_start(now));
            let mut wait = 0;
            while !b.may_start(now + wait) {
                wait += MS;
            }
            waits.push(wait / MS);
            now += wait;
        }
        assert_eq!(&waits[..4], &[100, 200, 400, 800]);
        assert_eq!(*waits.last().unwrap(), 30_000, "{waits:?}");
    }

    #[test]
    fn a_hot_standby_that_kept_up_a_long_while_waits_one_interval_again() {
        let mut b = HotBackoff::default();
        let every = Duration::from_millis(100);
        for i in 0..5 {
            b.started(i * 10_000 * MS);
            b.fell_behind(i * 10_000 * MS + MS, every);
        }
        // Kept up for a minute: a burst, not a pace it cannot hold.
        b.started(100_000 * MS);
        b.fell_behind(160_000 * MS, every);
        assert!(b.may_start(160_100 * MS));
        assert!(!b.may_start(160_099 * MS));
    }
}
