//! The typed pieces of a standby group in the data path:
//!
//! - [`BqSender`] — upstream's output into the group's buffer queues (dual
//!   dispatch: each record is written once; primary and standby both read
//!   it).
//! - [`Incarnation`] — the port of a primary or standby task: reads the
//!   queues, watches the liveness cell, takes over, replays, publishes
//!   snapshots.
//! - [`FencedInput`] — a consumer's input from the group: reads only the
//!   ring of the current epoch's primary and drops what it already has.

use super::codec::Codec;
use super::decide::{plan_replay, Replay, Tracker};
use super::group::{Fault, Group, StandbyMode, Takeover, NONE, WATCH_IDS};
use crate::error::JobError;
use crate::job::graph::{downcast, AnyBox};
use crate::metrics::RecoveryRecord;
use crate::operator::Collector;
use crate::queue::spsc::Consumer;
use crate::record::{Nanos, Record, TupleId};
use crate::runtime::channel::{Msg, Route};
use crate::runtime::task::{Gate, Poll, Port, TaskCtx};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;

type BoxCollector<T> = Box<dyn Collector<T>>;

const KIND_DATA: u8 = 0;
const KIND_END: u8 = 1;
/// Entries read per step.
const CHUNK: usize = 64;
/// The tuple ID of an end-of-input entry.
const END_ID: u64 = u64::MAX;
/// Pushes between evictions.
const EVICT_EVERY: u64 = 256;

fn encode<T: Codec>(buf: &mut Vec<u8>, rec: &Record<T>) {
    buf.clear();
    buf.push(KIND_DATA);
    buf.extend_from_slice(&rec.event_time.to_le_bytes());
    buf.extend_from_slice(&rec.ingest.to_le_bytes());
    rec.value.encode(buf);
}

enum Entry<T> {
    Data(Record<T>),
    End,
}

fn decode<T: Codec>(id: u64, bytes: &[u8]) -> Result<Entry<T>, String> {
    match bytes.first() {
        Some(&KIND_END) => Ok(Entry::End),
        Some(&KIND_DATA) if bytes.len() >= 17 => {
            let u = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().expect("8 bytes"));
            let (value, rest) = T::decode(&bytes[17..]).map_err(|e| e.to_string())?;
            if !rest.is_empty() {
                return Err(format!("{} bytes after the value", rest.len()));
            }
            Ok(Entry::Data(Record {
                id: TupleId(id),
                event_time: u(1),
                ingest: u(9),
                value,
            }))
        }
        Some(k) => Err(format!("entry kind {k} of {} bytes", bytes.len())),
        None => Err("empty entry".into()),
    }
}

/// The type-erased builders for the input side of an operator with a
/// standby (captured where its input type and codec are known).
pub(crate) trait StandbyKit: Send + Sync {
    /// Upstream's collector into the queues `lanes` (group, lane index).
    fn sender(
        &self,
        lanes: Vec<(Arc<Group>, usize)>,
        partitioning: &crate::job::graph::Partitioning,
        ctx: &Rc<TaskCtx>,
        batch: usize,
        window: usize,
    ) -> AnyBox;
    /// The port of incarnation `inc` of `group`.
    fn incarnation(
        &self,
        group: Arc<Group>,
        inc: u64,
        primary: bool,
        build: ChainBuild,
        ctx: &Rc<TaskCtx>,
    ) -> Box<dyn Port>;
}

/// Builds an incarnation's operator chain, restoring the given state.
pub(crate) type ChainBuild = Box<dyn FnMut(Option<Vec<u8>>) -> AnyBox>;

pub(crate) struct SKit<T>(std::marker::PhantomData<fn() -> T>);

impl<T: crate::Data + Codec> SKit<T> {
    pub(crate) fn arc() -> Arc<dyn StandbyKit> {
        Arc::new(SKit::<T>(std::marker::PhantomData))
    }
}

impl<T: crate::Data + Codec> StandbyKit for SKit<T> {
    fn sender(
        &self,
        lanes: Vec<(Arc<Group>, usize)>,
        partitioning: &crate::job::graph::Partitioning,
        ctx: &Rc<TaskCtx>,
        batch: usize,
        window: usize,
    ) -> AnyBox {
        let route = Route::of(partitioning, ctx.instance, lanes.len());
        Box::new(Box::new(BqSender {
            lanes: lanes
                .into_iter()
                .map(|(group, lane)| QLane {
                    group,
                    lane,
                    overflow: VecDeque::new(),
                    unsignalled: 0,
                    read: 0,
                    window: window.max(2) as u64,
                })
                .collect(),
            route,
            ctx: Rc::clone(ctx),
            batch: batch.max(1),
            buf: Vec::with_capacity(256),
            ended: false,
            pushes: 0,
        }) as BoxCollector<T>)
    }

    fn incarnation(
        &self,
        group: Arc<Group>,
        inc: u64,
        primary: bool,
        build: ChainBuild,
        ctx: &Rc<TaskCtx>,
    ) -> Box<dyn Port> {
        Box::new(Incarnation::<T>::new(group, inc, primary, build, ctx))
    }
}

struct QLane {
    group: Arc<Group>,
    lane: usize,
    overflow: VecDeque<(u64, Vec<u8>)>,
    unsignalled: usize,
    /// The primary's cursor, as last read.
    read: u64,
    window: u64,
}

impl QLane {
    fn queue(&self) -> &super::bq::BufferQueue {
        &self.group.queues[self.lane]
    }

    /// Pushes, evicting what the consumers and the standby's snapshot
    /// allow first if the queue is full. Refuses (backpressure) while the
    /// primary is `window` entries behind, as a ring of that size would:
    /// the queue holds what replay needs, not a backlog.
    fn push(&mut self, id: u64, bytes: &[u8]) -> bool {
        let q = &self.group.queues[self.lane];
        let tail = q.tail();
        if tail.saturating_sub(self.read) >= self.window {
            let slot = self.group.primary_slot.load(Ordering::Acquire);
            self.read = q.reader_cursor(slot);
            if tail.saturating_sub(self.read) >= self.window {
                return false;
            }
        }
        let pushed = q.push(id, bytes).is_ok() || {
            q.set_covered(self.group.covered(self.lane));
            q.evict();
            let ok = q.push(id, bytes).is_ok();
            if !ok {
                // Full of what no snapshot covers yet: ask the primary for
                // one now rather than at its interval.
                self.group.snapshot_wanted.store(true, Ordering::Release);
            }
            ok
        };
        if pushed && id == END_ID {
            self.group.end_pos[self.lane].store(tail, Ordering::Release);
        }
        pushed
    }

    fn notify(&mut self, ctx: &TaskCtx) {
        self.unsignalled = 0;
        for w in &self.group.reader_workers {
            let w = w.load(Ordering::Acquire);
            if w != NONE {
                ctx.shared.signals[w].notify();
            }
        }
    }
}

/// Upstream's output into the buffer queues of one or more standby groups
/// (one lane per downstream instance), routed like a ring sender. A full
/// queue keeps the entry in a per-lane overflow and raises the task's
/// `blocked`, exactly as a full ring does.
pub(crate) struct BqSender<T> {
    lanes: Vec<QLane>,
    route: Route<T>,
    ctx: Rc<TaskCtx>,
    batch: usize,
    buf: Vec<u8>,
    ended: bool,
    pushes: u64,
}

impl<T: Codec> BqSender<T> {
    fn send_bytes(&mut self, lane: usize, id: u64) {
        let l = &mut self.lanes[lane];
        if !l.overflow.is_empty() || !l.push(id, &self.buf) {
            if l.overflow.is_empty() {
                self.ctx.blocked.set(self.ctx.blocked.get() + 1);
            }
            l.overflow.push_back((id, self.buf.clone()));
            return;
        }
        l.unsignalled += 1;
        if l.unsignalled >= self.batch {
            l.notify(&self.ctx);
        }
        self.pushes += 1;
        if self.pushes.is_multiple_of(EVICT_EVERY) {
            // Keep the queue as small as what is still needed (a small
            // working set stays in cache), not as large as allowed.
            if self.pushes.is_multiple_of(EVICT_EVERY * 16) {
                l.group.note_queue_bytes();
            }
            let q = l.queue();
            q.set_covered(l.group.covered(l.lane));
            q.evict();
        }
    }
}

impl<T: Codec + Clone + 'static> Collector<T> for BqSender<T> {
    #[inline]
    fn collect(&mut self, rec: Record<T>) {
        encode(&mut self.buf, &rec);
        match self.route.pick(&rec.value, self.lanes.len()) {
            Some(lane) => self.send_bytes(lane, rec.id.0),
            None => {
                for lane in 0..self.lanes.len() {
                    self.send_bytes(lane, rec.id.0);
                }
            }
        }
    }

    fn flush(&mut self) {
        for l in &mut self.lanes {
            if !l.overflow.is_empty() {
                while let Some((id, b)) = l.overflow.pop_front() {
                    if !l.push(id, &b) {
                        l.overflow.push_front((id, b));
                        break;
                    }
                    l.unsignalled += 1;
                }
                if l.overflow.is_empty() {
                    self.ctx.blocked.set(self.ctx.blocked.get() - 1);
                }
            }
            if l.unsignalled > 0 {
                l.notify(&self.ctx);
            }
        }
    }

    fn end(&mut self) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        self.buf.clear();
        self.buf.push(KIND_END);
        for lane in 0..self.lanes.len() {
            self.send_bytes(lane, END_ID);
        }
        for l in &self.lanes {
            l.group.note_queue_bytes();
        }
        self.flush();
    }

    fn barrier(&mut self, _id: u64) {
        // Checkpoints and standbys are not combined (refused at start).
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Standby,
    Claimed { epoch: u64, at: Nanos },
    Primary { epoch: u64 },
    Over,
}

/// The port of one incarnation of a standby group (see
/// [`super::group`]): a standby until it claims an epoch, then the
/// primary.
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
    pos: Vec<u64>,
    ended: Vec<bool>,
    live: usize,
    replay: Vec<Replay>,
    backlog: Vec<u64>,
    takeover: Option<usize>,
    /// The takeover sinks watch for, and when it was claimed.
    watch: Option<(usize, Nanos)>,
    caught_up: bool,
    next_snapshot: Nanos,
    next_beat: Nanos,
    pending: Option<(Vec<u64>, crate::checkpoint::SnapshotBytes)>,
    attached: bool,
    buf: Vec<Record<T>>,
    rr: usize,
}

impl<T: crate::Data + Codec> Incarnation<T> {
    fn new(
        group: Arc<Group>,
        inc: u64,
        primary: bool,
        build: ChainBuild,
        ctx: &Rc<TaskCtx>,
    ) -> Self {
        let lanes = group.lanes();
        let mut me = Incarnation {
            slot: (inc % super::bq::MAX_READERS as u64) as usize,
            ctx: Rc::clone(ctx),
            build,
            chain: None,
            phase: Phase::Standby,
            backs: 0,
            pos: vec![0; lanes],
            ended: vec![false; lanes],
            live: lanes,
            replay: vec![Replay { start: 0, upto: 0 }; lanes],
            backlog: vec![0; lanes],
            takeover: None,
            watch: None,
            caught_up: true,
            next_snapshot: 0,
            next_beat: 0,
            pending: None,
            attached: false,
            buf: Vec::with_capacity(CHUNK),
            rr: 0,
            inc,
            group,
        };
        if primary {
            // The first primary: epoch 1, from the start of every queue.
            me.build_chain(None);
            let mut chain = me.chain.take().expect("just built");
            let stateless = me.chain_snapshot(&mut chain).is_none();
            me.chain = Some(chain);
            me.group.stateless.store(stateless, Ordering::Release);
            me.attach();
            me.phase = Phase::Primary { epoch: 1 };
            me.ctx.epoch.set(1);
        } else {
            me.backs = me.group.live.current();
            me.ctx.muted.set(true);
        }
        me
    }

    fn build_chain(&mut self, state: Option<Vec<u8>>) -> &mut BoxCollector<T> {
        // Restoring a large state takes a while: not a stall.
        let ctx = Rc::clone(&self.ctx);
        let c = ctx.long(|| (self.build)(state));
        self.chain = Some(downcast::<BoxCollector<T>>(c, "standby chain"));
        self.chain.as_mut().expect("just built")
    }

    /// The chain's state now (`None`: stateless), reporting a failure.
    fn chain_snapshot(
        &self,
        chain: &mut BoxCollector<T>,
    ) -> Option<crate::checkpoint::SnapshotBytes> {
        match chain.snapshot() {
            Ok(s) => s,
            Err(e) => {
                self.ctx.fail(JobError::Io {
                    operator: self.group.name.to_string(),
                    instance: self.group.instance,
                    context: format!("standby snapshot: {e}"),
                    path: None,
                    source: std::io::Error::other(e.to_string()),
                });
                None
            }
        }
    }

    fn attach(&mut self) -> bool {
        for (l, q) in self.group.queues.iter().enumerate() {
            if !q.attach(self.slot, self.pos[l]) {
                for q in &self.group.queues[..l] {
                    q.release(self.slot);
                }
                return false;
            }
        }
        self.attached = true;
        true
    }

    /// Lanes whose end-of-input entry lies before the read position: a
    /// replay that starts after it (everything up to it was delivered)
    /// must still know the lane has ended.
    fn sync_ended(&mut self) {
        for l in 0..self.pos.len() {
            if !self.ended[l] && self.group.end_pos[l].load(Ordering::Acquire) < self.pos[l] {
                self.ended[l] = true;
                self.live -= 1;
            }
        }
    }

    fn fail(&self, what: String) {
        self.ctx.fail(JobError::Io {
            operator: self.group.name.to_string(),
            instance: self.group.instance,
            context: what,
            path: None,
            source: std::io::Error::other("standby"),
        });
    }

    fn over(&mut self) -> Poll {
        self.phase = Phase::Over;
        Poll::Done
    }

    fn poll_standby(&mut self, now: Nanos, budget: usize) -> Poll {
        let g = Arc::clone(&self.group);
        if g.finished.load(Ordering::Acquire) || g.live.current() != self.backs {
            return self.over();
        }
        let pw = g.reader_workers[0].load(Ordering::Acquire);
        let released = self
            .ctx
            .shared
            .released_at
            .get(pw)
            .map_or(0, |r| r.load(Ordering::Acquire));
        // While the primary's worker is in a long synchronous step (a
        // snapshot, a restore), its silence is not a stall.
        let beat = g
            .live
            .last_beat()
            .max(if released == u64::MAX { now } else { released });
        let stale = !super::decide::epoch_live(self.backs, self.backs, beat, now, g.timeout_ns);
        let failed = g.live.failed();
        if failed || stale {
            return self.claim(now, failed, beat);
        }
        let mut moved = false;
        if g.mode == StandbyMode::Hot && !g.stateless.load(Ordering::Acquire) {
            if self.chain.is_none() && !self.start_hot() {
                return Poll::Idle {
                    wake_at: Some(now + 1_000_000),
                };
            }
            moved = self.process(budget, true) > 0;
            // A hot standby that falls half a queue behind would soon hold
            // its primary back (the queue cannot evict past it): it lets go
            // of its state and cursor and starts again from a newer
            // snapshot — warm until then.
            let behind = g
                .queues
                .iter()
                .zip(&self.pos)
                .any(|(q, &p)| q.tail().saturating_sub(p) > q.config().slots / 2);
            if behind {
                for q in &g.queues {
                    q.release(self.slot);
                }
                self.attached = false;
                // Dropping a large state takes a while: not a stall.
                let chain = self.chain.take();
                self.ctx.long(move || drop(chain));
            }
        }
        if moved {
            Poll::Progress
        } else {
            Poll::Idle {
                wake_at: Some(beat + g.timeout_ns + 1),
            }
        }
    }

    /// A hot standby gets its state: empty from the start for the first
    /// one, else the primary's newest snapshot.
    fn start_hot(&mut self) -> bool {
        if self.inc == 1 {
            self.pos.fill(0);
            if self.attach() {
                self.build_chain(None);
                return true;
            }
        }
        let Some((pos, state)) = self.group.latest_snapshot() else {
            return false;
        };
        self.pos = pos;
        if !self.attach() {
            return false;
        }
        self.sync_ended();
        self.build_chain(Some(state));
        true
    }

    fn claim(&mut self, now: Nanos, failed: bool, beat: Nanos) -> Poll {
        let group = Arc::clone(&self.group);
        let shared = Arc::clone(&self.ctx.shared);
        let mut g = group.lock();
        if g.standby.map(|s| s.0) != Some(self.inc) {
            drop(g);
            return self.over();
        }
        let Ok(epoch) = group.live.claim(self.backs, now) else {
            drop(g);
            return self.over();
        };
        let fault = match g.fault.take().filter(|_| failed) {
            Some(f) => f,
            None => {
                let note = shared
                    .stall_note()
                    .filter(|n| n.op == group.node && n.instance == group.instance);
                Fault {
                    at: beat,
                    cause: format!(
                        "operator `{}` instance {} stalled: no heartbeat for {} ms",
                        group.name,
                        group.instance,
                        group.timeout_ns / 1_000_000
                    ),
                    tuple: note.map(|n| n.tuple),
                }
            }
        };
        let worker = self.ctx.worker();
        g.primary = self.inc;
        g.primary_epoch = epoch;
        g.primary_worker = worker;
        g.standby = None;
        group.reader_workers[0].store(worker, Ordering::Release);
        group.reader_workers[1].store(NONE, Ordering::Release);
        group.primary_slot.store(self.slot, Ordering::Release);
        let log = &shared.standby.as_ref().expect("standby run").log;
        let k = log.open(Takeover {
            record: RecoveryRecord {
                operator: group.name.to_string(),
                instance: group.instance,
                cause: fault.cause,
                tuple_id: fault.tuple,
                detect_us: now.saturating_sub(fault.at) / 1000,
                ..Default::default()
            },
            fault_at: fault.at,
            ..Default::default()
        });
        g.takeover = Some(k);
        drop(g);
        self.takeover = Some(k);
        self.watch = Some((k, now));
        for c in &group.consumers {
            shared.signals[c.worker].wake();
        }
        self.phase = Phase::Claimed { epoch, at: now };
        Poll::Progress
    }

    fn poll_claimed(&mut self, epoch: u64, at: Nanos, now: Nanos) -> Poll {
        let group = Arc::clone(&self.group);
        let cuts = {
            let g = group.lock();
            let mut cuts = Vec::with_capacity(group.consumers.len());
            for (ci, c) in group.consumers.iter().enumerate() {
                if c.ended.load(Ordering::Acquire) {
                    continue;
                }
                match g.cuts.get(&ci) {
                    Some((e, cut)) if *e == epoch => cuts.push(cut.clone()),
                    _ => {
                        return Poll::Idle {
                            wake_at: Some(now + 20_000),
                        }
                    }
                }
            }
            cuts
        };
        let _ = self.group.live.beat(epoch, now);
        let stateless = group.stateless.load(Ordering::Acquire);
        let lanes = group.lanes();
        let from = if stateless {
            None
        } else if self.chain.is_some() {
            Some(self.pos.clone())
        } else {
            match self.ctx.long(|| group.latest_snapshot()) {
                Some((pos, state)) => {
                    self.build_chain(Some(state));
                    Some(pos)
                }
                None => {
                    self.build_chain(None);
                    Some(vec![0; lanes])
                }
            }
        };
        if self.chain.is_none() {
            self.build_chain(None);
        }
        let refs: Vec<_> = cuts.iter().collect();
        self.replay = plan_replay(&refs, lanes, from.as_deref());
        for (l, r) in self.replay.iter().enumerate() {
            self.pos[l] = r.start;
        }
        self.sync_ended();
        if self.attached {
            for q in &group.queues {
                q.release(self.slot);
            }
        }
        if !self.attach() {
            self.fail(format!(
                "standby of `{}` instance {}: the buffer queue no longer holds the replay's start {:?}",
                group.name, group.instance, self.pos
            ));
            return Poll::Idle { wake_at: None };
        }
        self.ctx.muted.set(false);
        self.backlog = group.queues.iter().map(|q| q.tail()).collect();
        self.caught_up = false;
        // Inputs read again from the queues: from where the replay starts
        // to what they held at the takeover.
        let replayed: u64 = self
            .replay
            .iter()
            .zip(&self.backlog)
            .map(|(r, &b)| b.saturating_sub(r.start))
            .sum();
        if let Some(k) = self.takeover {
            if let Some(t) = self
                .ctx
                .shared
                .standby
                .as_ref()
                .expect("standby run")
                .log
                .lock()
                .get_mut(k)
            {
                t.record.restore_us = Some(now.saturating_sub(at) / 1000);
                t.record.replayed_tuples = replayed;
            }
        }
        {
            let mut g = group.lock();
            if g.standby.is_none() && !group.finished.load(Ordering::Acquire) {
                let (inc, w) = group.next_standby(&mut g);
                drop(g);
                self.ctx
                    .shared
                    .request_standby(w, group.node, group.instance, inc);
            }
        }
        self.phase = Phase::Primary { epoch };
        self.ctx.epoch.set(epoch);
        Poll::Progress
    }

    /// Moves up to `budget` inputs from the queues into the chain; as a hot
    /// standby only up to what every consumer acknowledged.
    fn process(&mut self, budget: usize, standby: bool) -> usize {
        let lanes = self.group.lanes();
        let mut moved = 0;
        let mut idle = 0;
        while moved < budget && idle < lanes && self.ctx.blocked.get() == 0 {
            let l = self.rr;
            self.rr = (l + 1) % lanes;
            let q = &self.group.queues[l];
            let mut limit = q.tail();
            if standby {
                limit = limit.min(self.group.acked_min(l));
            }
            if self.ended[l] || self.pos[l] >= limit {
                idle += 1;
                continue;
            }
            let first = self.pos[l];
            let n = if first < self.replay[l].upto {
                1
            } else {
                (limit - first)
                    .min(CHUNK as u64)
                    .min((budget - moved) as u64)
            };
            self.buf.clear();
            let mut end = false;
            for p in first..first + n {
                let Some(e) = q.get(p) else { break };
                match decode::<T>(e.tuple_id, e.bytes) {
                    Ok(Entry::Data(r)) => self.buf.push(r),
                    Ok(Entry::End) => {
                        end = self.buf.is_empty();
                        break;
                    }
                    Err(why) => {
                        self.fail(format!(
                            "buffer queue {} position {p}: {why}",
                            q.path().display()
                        ));
                        return moved;
                    }
                }
            }
            let chain = self
                .chain
                .as_mut()
                .expect("a reading incarnation has its chain");
            if end {
                self.pos[l] = first + 1;
                q.advance(self.slot, first + 1);
                self.ended[l] = true;
                self.live -= 1;
                if standby {
                    continue;
                }
                chain.mark(l as u32, first, first);
                if self.live == 0 {
                    chain.end();
                }
                moved += 1;
                continue;
            }
            if self.buf.is_empty() {
                idle += 1;
                continue;
            }
            let k = self.buf.len();
            let last = first + k as u64 - 1;
            chain.mark(l as u32, first, last);
            for r in self.buf.drain(..) {
                chain.collect(r);
                if self.ctx.has_failure() {
                    // A cut input: nothing after the record it cut is
                    // processed, so what was emitted is a prefix of the
                    // chunk's outputs (the consumers' cut counts on it).
                    return moved;
                }
            }
            self.pos[l] = last + 1;
            q.advance(self.slot, last + 1);
            moved += k;
            idle = 0;
        }
        moved
    }

    fn poll_primary(&mut self, epoch: u64, now: Nanos, budget: usize) -> Poll {
        // The heartbeat is written every 1/16 of the timeout, not every
        // poll: the standby (and the consumers) read that cache line at
        // every poll of theirs, and a line written at every poll would
        // bounce between the cores.
        if now >= self.next_beat {
            self.next_beat = now + (self.group.timeout_ns / 16).max(10_000);
            if self.group.live.beat(epoch, now).is_err() {
                // Fenced: a standby took over while this one was stalled.
                self.ctx.fenced.set(true);
                return self.over();
            }
        }
        if !self.group.stateless.load(Ordering::Acquire) {
            self.snapshot(now, epoch);
            if self.ctx.fenced.get() {
                return self.over();
            }
        }
        let moved = self.process(budget, false);
        if !self.caught_up
            && self
                .pos
                .iter()
                .zip(&self.backlog)
                .zip(&self.ended)
                .all(|((p, b), e)| p >= b || *e)
        {
            self.caught_up = true;
            if let Some(k) = self.takeover {
                let log = &self.ctx.shared.standby.as_ref().expect("standby run").log;
                if let Some(t) = log.lock().get_mut(k) {
                    t.caught_up_at = Some(now);
                }
            }
        }
        if let Some((k, at)) = self.watch {
            // Nothing of the new primary's first outputs reached a sink
            // within 200 ms (all filtered out downstream): stop looking.
            if now > at + 200_000_000 {
                self.ctx
                    .shared
                    .standby
                    .as_ref()
                    .expect("standby run")
                    .log
                    .unwatch(k);
                self.watch = None;
            }
        }
        if self.live == 0 {
            self.group.finish(&self.ctx.shared);
            return self.over();
        }
        if moved > 0 {
            Poll::Progress
        } else {
            Poll::Idle { wake_at: None }
        }
    }

    /// Warm state for the standby: taken every interval, published once
    /// every consumer has all outputs of the inputs it covers (so a
    /// takeover never needs state older than a consumer's cut).
    fn snapshot(&mut self, now: Nanos, epoch: u64) {
        let wanted = self.group.snapshot_wanted.load(Ordering::Acquire);
        if (now >= self.next_snapshot || wanted) && self.pending.is_none() {
            self.group.snapshot_wanted.store(false, Ordering::Release);
            self.next_snapshot = now + self.group.snapshot_every.as_nanos() as u64;
            // Synchronous (milliseconds for a large keyed state): not a
            // stall.
            let mut chain = self.chain.take().expect("a primary has its chain");
            let ctx = Rc::clone(&self.ctx);
            let s = ctx.long(|| self.chain_snapshot(&mut chain));
            self.chain = Some(chain);
            let _ = self.group.live.beat(epoch, self.ctx.clock.now());
            if let Some(s) = s {
                self.pending = Some((self.pos.clone(), s));
            }
        }
        if let Some((pos, _)) = &self.pending {
            let ready = pos
                .iter()
                .enumerate()
                .all(|(l, &p)| self.group.acked_min(l) >= p);
            if ready {
                let (pos, bytes) = self.pending.take().expect("checked");
                let published = self.ctx.long(|| self.group.publish(&pos, bytes.payload()));
                if let Err(e) = published {
                    self.fail(format!("publishing the standby snapshot: {e}"));
                }
            }
        }
    }
}

impl<T> Drop for Incarnation<T> {
    fn drop(&mut self) {
        if self.attached {
            for q in &self.group.queues {
                q.release(self.slot);
            }
        }
    }
}

impl<T: crate::Data + Codec> Port for Incarnation<T> {
    fn poll(&mut self, budget: usize) -> Poll {
        let now = self.ctx.clock.now();
        match self.phase {
            Phase::Standby => self.poll_standby(now, budget),
            Phase::Claimed { epoch, at } => self.poll_claimed(epoch, at, now),
            Phase::Primary { epoch } => self.poll_primary(epoch, now, budget),
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
            "incarnation {} of {}[{}]: {:?} pos {:?} ended {:?} replay {:?} blocked {} queues {:?}",
            self.inc,
            self.group.name,
            self.group.instance,
            self.phase,
            self.pos,
            self.ended,
            self.replay,
            self.ctx.blocked.get(),
            self.group
                .queues
                .iter()
                .map(|q| (
                    q.head(),
                    q.tail(),
                    q.covered(),
                    (0..4)
                        .map(|r| q.reader_cursor(r) as i64)
                        .collect::<Vec<_>>()
                ))
                .collect::<Vec<_>>()
        )
    }
}

struct Source<U> {
    group: Arc<Group>,
    ci: usize,
    epoch: u64,
    ring: Option<Consumer<Msg<U>>>,
    tracker: Tracker,
    ended: bool,
    takeover: Option<usize>,
    watch: usize,
}

/// A consumer's input from standby groups (one per upstream instance): reads
/// the ring of each group's current primary, follows its marks, and after
/// a takeover posts its cut and drops what the new primary replays of what
/// it already has.
pub(crate) struct FencedInput<U> {
    srcs: Vec<Source<U>>,
    live: usize,
    next: usize,
    target: BoxCollector<U>,
    gate: Option<Rc<Gate>>,
    ctx: Rc<TaskCtx>,
}

impl<U: 'static> FencedInput<U> {
    pub(crate) fn new(
        groups: Vec<(Arc<Group>, usize)>,
        target: AnyBox,
        gate: Option<Rc<Gate>>,
        ctx: &Rc<TaskCtx>,
    ) -> Self {
        let srcs: Vec<Source<U>> = groups
            .into_iter()
            .map(|(group, ci)| Source {
                tracker: Tracker::new(group.lanes()),
                group,
                ci,
                epoch: 0,
                ring: None,
                ended: false,
                takeover: None,
                watch: 0,
            })
            .collect();
        FencedInput {
            live: srcs.len(),
            srcs,
            next: 0,
            target: downcast::<BoxCollector<U>>(target, "fenced input target"),
            gate,
            ctx: Rc::clone(ctx),
        }
    }

    /// Follows the group's epoch: posts the cut of the old one and takes
    /// the new primary's ring once it exists.
    fn follow(s: &mut Source<U>, ctx: &TaskCtx) {
        let cur = s.group.live.current();
        if cur == s.epoch && s.ring.is_some() {
            return;
        }
        let mut g = s.group.lock();
        if cur != s.epoch {
            if g.primary_epoch != cur {
                return;
            }
            let cut = s.tracker.take_cut();
            g.cuts.insert(s.ci, (cur, cut));
            s.epoch = cur;
            s.ring = None;
            s.takeover = if cur > 1 { g.takeover } else { None };
            s.watch = WATCH_IDS;
            let w = g.primary_worker;
            drop(g);
            ctx.shared.signals[w].wake();
            g = s.group.lock();
        }
        if g.primary_epoch == s.epoch {
            let key = (s.ci, g.primary);
            if let Some(r) = g.rings.remove(&key) {
                s.ring = Some(crate::job::graph::downcast_send::<Consumer<Msg<U>>>(
                    r,
                    "standby ring",
                ));
            }
        }
    }
}

impl<U: 'static> Port for FencedInput<U> {
    fn poll(&mut self, budget: usize) -> Poll {
        if self.live == 0 {
            return Poll::Done;
        }
        for s in &mut self.srcs {
            if !s.ended {
                Self::follow(s, &self.ctx);
            }
        }
        let n = self.srcs.len();
        let mut moved = 0usize;
        let mut idle_rounds = 0;
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
            let s = &mut self.srcs[i];
            let Some(ring) = s.ring.as_mut().filter(|_| !s.ended) else {
                idle_rounds += 1;
                continue;
            };
            let target = &mut self.target;
            let tracker = &mut s.tracker;
            let consumer = &s.group.consumers[s.ci];
            let mut got_end = false;
            let mut accepted: Option<TupleId> = None;
            let watching = s.watch > 0 && s.takeover.is_some();
            let take = CHUNK.min(budget - moved);
            let k = ring.pop_batch_until(take, |m| match m {
                Msg::Data(r) => {
                    if tracker.on_data() {
                        if watching && accepted.is_none() {
                            accepted = Some(r.id);
                        }
                        target.collect(r);
                    }
                    true
                }
                Msg::Chunk { lane, first, last } => {
                    if let Some((l, next)) = tracker.on_chunk(lane as usize, first, last) {
                        consumer.acked[l].store(next, Ordering::Release);
                    }
                    true
                }
                Msg::End => {
                    got_end = true;
                    false
                }
                Msg::Barrier(_) => true,
            });
            moved += k;
            if k > 0 {
                let w = s.group.reader_workers[0].load(Ordering::Acquire);
                if w != NONE {
                    self.ctx.shared.signals[w].notify();
                }
            }
            if let (Some(id), Some(t)) = (accepted, s.takeover) {
                s.watch -= 1;
                let log = &self.ctx.shared.standby.as_ref().expect("standby run").log;
                log.accepted(t, id, self.ctx.clock.now());
            }
            if got_end {
                if let Some((l, next)) = s.tracker.on_end() {
                    consumer.acked[l].store(next, Ordering::Release);
                }
                consumer.ended.store(true, Ordering::Release);
                s.ended = true;
                self.live -= 1;
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

    fn debug(&self) -> String {
        let v: Vec<String> = self
            .srcs
            .iter()
            .map(|s| {
                format!(
                    "{}[{}] epoch {} ring {} ended {} tracker {:?}",
                    s.group.name,
                    s.group.instance,
                    s.epoch,
                    s.ring.is_some(),
                    s.ended,
                    s.tracker
                )
            })
            .collect();
        format!(
            "fenced input (blocked {}): {}",
            self.ctx.blocked.get(),
            v.join("; ")
        )
    }
}
