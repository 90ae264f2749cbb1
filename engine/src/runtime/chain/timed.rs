//! The chain hop of a keyed process function in event time
//! ([`crate::time::TimedProcess`]): per-key state and timers, records taken
//! in the deterministic order of `window.rs` (release time, tuple ID, lane,
//! arrival), each timer fired before any record released at or after it,
//! in the order (time, key number).
//!
//! The keys' timers are in their keyed state ([`Timed`]); the index by
//! time (`merge::Timers`) is rebuilt from it on restore. The records
//! waiting for the watermark and the clocks are the side state, framed
//! with the keyed state as a window operator's are.

use super::keyed::StateCodec;
use super::merge::{Pending, Timers};
use super::window::{capture_framed, decode_framed, SideCodec};
use crate::checkpoint::{CheckpointError, StateCapture};
use crate::operator::{ChainParts, ChunkId, Collector, Output};
use crate::record::{Record, TupleId};
use crate::runtime::graph::{BuildCx, Probe};
use crate::runtime::probe::run_probe;
use crate::runtime::task::{OpSlot, TaskCtx};
use crate::state::KeyedState;
use crate::time::process::{Added, Timed, TimedProcess, TimerContext, CLEANED_PER_RECORD};
use crate::time::window::{Waiting, WindowSide};
use std::hash::Hash;
use std::rc::Rc;
use std::sync::Arc;

pub(crate) struct TimedOp<K, T, O, P: TimedProcess<K, T, O>> {
    op: P,
    key: Arc<dyn Fn(&T) -> K + Send + Sync>,
    state: KeyedState<K, Timed<P::State>>,
    codec: StateCodec<K, Timed<P::State>>,
    side_codec: SideCodec<T>,
    waiting: Pending<T>,
    timers: Timers,
    /// Processing-time timers by time, and the processing time.
    ptimers: Timers,
    ptime: u64,
    wm_in: u64,
    wm_out: u64,
    now: u64,
    arrivals: u64,
    added: Added,
    /// The next key the clean-up of TTL state visits (by insertion
    /// number). Not in snapshots: the clean-up drops only what no read
    /// would return, so where it stands changes nothing a function sees.
    clean_at: u32,
    /// A key was removed since the last look at compacting the state.
    removed: bool,
    down: Box<dyn Collector<O>>,
    ctx: Rc<TaskCtx>,
    slot: OpSlot,
    probe: Probe,
    seen: u64,
    emitted: u64,
    finished: bool,
}

impl<K, T, O, P> TimedOp<K, T, O, P>
where
    K: Hash + Eq + Clone + 'static,
    T: Clone + 'static,
    O: 'static,
    P: TimedProcess<K, T, O>,
{
    pub(crate) fn new(
        op: P,
        key: Arc<dyn Fn(&T) -> K + Send + Sync>,
        codec: StateCodec<K, Timed<P::State>>,
        side_codec: SideCodec<T>,
        down: Box<dyn Collector<O>>,
        cx: BuildCx,
    ) -> Self {
        let mut restored = None;
        let finished = cx.restore_state(|payload| {
            restored = Some(decode_framed(payload, &codec, &side_codec)?);
            Ok(())
        });
        let mut me = TimedOp {
            op,
            key,
            state: KeyedState::default(),
            codec,
            side_codec,
            waiting: Pending::new(),
            timers: Timers::default(),
            ptimers: Timers::default(),
            ptime: 0,
            wm_in: 0,
            wm_out: 0,
            now: 0,
            arrivals: 0,
            added: Added::default(),
            clean_at: 0,
            removed: false,
            down,
            ctx: Rc::clone(&cx.ctx),
            slot: cx.slot,
            probe: cx.probe,
            seen: 0,
            emitted: 0,
            finished,
        };
        // Its ports tell it the processing time.
        me.ctx.ptimers.set(true);
        if let Some((keyed, side)) = restored {
            me.apply(keyed, side);
            if me.wm_out > 0 && !me.finished {
                me.ctx.lane_wm.set(me.wm_out);
                me.down.watermark(me.wm_out);
            }
        }
        me
    }

    fn apply(&mut self, keyed: KeyedState<K, Timed<P::State>>, side: WindowSide<T>) {
        self.state = keyed;
        self.waiting = Pending::new();
        for w in side.waiting {
            self.waiting.push(w);
        }
        self.wm_in = side.wm_in;
        self.wm_out = side.wm_out;
        self.now = side.now;
        self.arrivals = side.arrivals;
        self.ptime = side.ptime;
        self.reindex();
    }

    fn capture(&self) -> Result<StateCapture, CheckpointError> {
        capture_framed(
            (self.codec.capture)(&self.state)?,
            WindowSide {
                waiting: self.waiting.sorted(),
                wm_in: self.wm_in,
                wm_out: self.wm_out,
                now: self.now,
                arrivals: self.arrivals,
                ptime: self.ptime,
            },
            &self.side_codec,
        )
    }

    fn advance(&mut self, upto: u64) {
        while self.waiting.first_release().is_some_and(|r| r < upto) {
            let w = self.waiting.pop().expect("peeked");
            self.take(w);
            self.ctx.tick();
        }
        self.fire_until(upto);
    }

    fn fire_until(&mut self, t: u64) {
        while let Some((at, seqs)) = self.timers.take_first(t) {
            self.now = self.now.max(at);
            for seq in seqs {
                self.on_timer(at, seq);
                self.ctx.tick();
            }
        }
        self.now = self.now.max(t);
    }

    /// Indexes the timers the last call registered for key number `seq`.
    fn index(&mut self, seq: u32) {
        for at in self.added.event.drain(..) {
            self.timers.add(at, seq);
        }
        if !self.added.processing.is_empty() {
            for at in self.added.processing.drain(..) {
                self.ptimers.add(at, seq);
            }
            self.ctx
                .next_ptimer
                .set(self.ptimers.first().unwrap_or(u64::MAX));
        }
    }

    fn on_timer(&mut self, at: u64, seq: u32) {
        self.fire(at, seq, false);
    }

    /// Fires timer `at` of key number `seq`: an event-time one, or
    /// (`processing`) a processing-time one.
    fn fire(&mut self, at: u64, seq: u32, processing: bool) {
        let TimedOp {
            op,
            state,
            down,
            ctx,
            slot,
            emitted,
            wm_out,
            added,
            now,
            ptime,
            ..
        } = self;
        let empty = state.with_key_at(seq, |key, s| {
            // A deleted timer is still indexed: it does nothing.
            let mine = if processing {
                &mut s.ptimers[..]
            } else {
                &mut s.timers[..]
            };
            let Some(i) = mine.iter().position(|t| *t == at) else {
                return false;
            };
            if processing {
                s.ptimers.swap_remove(i);
            } else {
                s.timers.swap_remove(i);
            }
            let lane_wm = ctx.lane_wm.replace(*wm_out);
            let prev = ctx.enter(slot.op);
            ctx.record.set(None);
            let mut out = Output::new(&mut **down, emitted, &**ctx, slot.op);
            // An event-time timer's outputs are just before its time; a
            // processing-time timer's at the event time the operator is at.
            out.event_time = if processing {
                *now
            } else {
                at.saturating_sub(1)
            };
            let mut cx = TimerContext {
                now: if processing { *now } else { at },
                ptime: *ptime,
                timers: &mut s.timers,
                ptimers: &mut s.ptimers,
                added,
            };
            if processing {
                op.on_processing_timer(key, &mut s.user, at, &mut cx, &mut out);
            } else {
                op.on_timer(key, &mut s.user, at, &mut cx, &mut out);
            }
            ctx.leave(prev);
            ctx.lane_wm.set(lane_wm);
            s.timers.is_empty() && s.ptimers.is_empty() && op.is_empty(&s.user)
        });
        self.index(seq);
        if empty == Some(true) {
            self.drop_key(seq);
        }
    }

    /// Removes key number `seq`, whose state holds nothing and which has no
    /// timers (see [`TimedProcess::is_empty`]).
    fn drop_key(&mut self, seq: u32) {
        self.removed |= self.state.remove_at(seq);
    }

    /// Compacts the state once removed keys are half its places, and
    /// renumbers the timers' keys. Only between the hop's calls: a batch of timers being
    /// fired holds key numbers.
    fn compact(&mut self) {
        // Looked at only after a removal: not a cost per record.
        if !std::mem::take(&mut self.removed) {
            return;
        }
        if let Some(renumber) = self.state.compact() {
            self.timers.remap(&renumber);
            self.ptimers.remap(&renumber);
            self.clean_at = 0;
        }
    }

    /// Indexes every key's timers by time anew (after a restore: key
    /// numbers changed).
    fn reindex(&mut self) {
        let (timers, ptimers) = (&mut self.timers, &mut self.ptimers);
        timers.clear();
        ptimers.clear();
        self.state.for_each_numbered(|seq, s| {
            for &at in &s.timers {
                timers.add(at, seq);
            }
            for &at in &s.ptimers {
                ptimers.add(at, seq);
            }
        });
        self.ctx
            .next_ptimer
            .set(self.ptimers.first().unwrap_or(u64::MAX));
        self.clean_at = 0;
    }

    /// Processing time reached `now`: the processing-time timers due fire,
    /// in the order (time, key number).
    fn on_processing_time(&mut self, now: u64) {
        if now <= self.ptime || self.finished {
            return;
        }
        self.ptime = now;
        let prev = self.ctx.enter(self.slot.op);
        while let Some((at, seqs)) = self.ptimers.take_first(now) {
            for seq in seqs {
                self.fire(at, seq, true);
                self.ctx.tick();
            }
        }
        self.ctx.leave(prev);
        self.ctx
            .next_ptimer
            .set(self.ptimers.first().unwrap_or(u64::MAX));
    }

    fn take(&mut self, w: Waiting<T>) {
        let v = w.release;
        self.fire_until(v);
        let key = (self.key)(&w.value);
        let TimedOp {
            op,
            state,
            down,
            ctx,
            slot,
            emitted,
            wm_out,
            added,
            ptime,
            ..
        } = self;
        let rec = Record {
            id: TupleId(w.id),
            event_time: w.event_time,
            ingest: w.ingest,
            value: w.value,
        };
        ctx.record.set(Some(rec.id));
        let lane_wm = ctx.lane_wm.replace(*wm_out);
        let (seq, empty) = {
            let (seq, mut guard) = state.get_or_default_numbered(&key);
            let s = &mut *guard;
            let mut out = Output::new(&mut **down, emitted, &**ctx, slot.op).with_envelope(&rec);
            let mut cx = TimerContext {
                now: v,
                ptime: *ptime,
                timers: &mut s.timers,
                ptimers: &mut s.ptimers,
                added,
            };
            op.process(&key, &mut s.user, rec, &mut cx, &mut out);
            let empty = s.timers.is_empty() && s.ptimers.is_empty() && op.is_empty(&s.user);
            (seq, empty)
        };
        ctx.lane_wm.set(lane_wm);
        self.index(seq);
        if empty {
            self.drop_key(seq);
        }
        if P::EXPIRES {
            self.clean_up(v);
        }
    }

    /// The incremental clean-up of TTL state: the next
    /// [`CLEANED_PER_RECORD`] keys' expired entries dropped at `now`.
    fn clean_up(&mut self, now: u64) {
        for _ in 0..CLEANED_PER_RECORD.min(self.state.len() as u32) {
            if self.clean_at as usize >= self.state.places() {
                self.clean_at = 0;
            }
            let seq = self.clean_at;
            self.clean_at += 1;
            let op = &self.op;
            let emptied = self.state.update_at_if(
                seq,
                |s| op.has_expired(&s.user, now),
                |s| {
                    op.expire(&mut s.user, now);
                    s.timers.is_empty() && s.ptimers.is_empty() && op.is_empty(&s.user)
                },
            );
            if emptied == Some(true) {
                self.drop_key(seq);
            }
        }
    }

    fn forward(&mut self, wm: u64) {
        if wm > self.wm_out {
            self.wm_out = wm;
            self.down.watermark(wm);
        }
    }
}

impl<K, T, O, P> Collector<T> for TimedOp<K, T, O, P>
where
    K: Hash + Eq + Clone + 'static,
    T: Clone + 'static,
    O: 'static,
    P: TimedProcess<K, T, O>,
{
    fn collect(&mut self, rec: Record<T>) {
        self.seen += 1;
        let lane_wm = self.ctx.lane_wm.get();
        let lane = self.ctx.lane.get();
        let prev = self.ctx.enter(self.slot.op);
        if !run_probe(&mut self.probe, rec.id, &self.ctx, self.slot.op) {
            self.ctx.leave(prev);
            return;
        }
        let release = rec.event_time.max(lane_wm);
        self.arrivals += 1;
        let w = Waiting {
            release,
            id: rec.id.0,
            lane,
            arrival: self.arrivals,
            event_time: rec.event_time,
            ingest: rec.ingest,
            value: rec.value,
        };
        if release < self.wm_in {
            // From a lane that was idle while the others moved on: taken
            // at once, at the operator's time.
            let now = self.now;
            self.take(Waiting { release: now, ..w });
            self.compact();
        } else {
            self.waiting.push(w);
        }
        self.ctx.leave(prev);
    }

    fn flush(&mut self) {
        self.slot.publish(self.seen, self.emitted);
        self.down.flush();
    }

    fn watermark(&mut self, wm: u64) {
        if wm <= self.wm_in {
            return;
        }
        self.wm_in = wm;
        let prev = self.ctx.enter(self.slot.op);
        self.advance(wm);
        self.compact();
        self.ctx.leave(prev);
        self.forward(wm);
    }

    fn idle(&mut self) {
        self.down.idle();
    }

    fn processing_time(&mut self, now: u64) {
        self.on_processing_time(now);
        self.compact();
    }

    fn end(&mut self) {
        self.ctx.record.set(None);
        if !self.finished {
            self.wm_in = u64::MAX;
            let prev = self.ctx.enter(self.slot.op);
            self.advance(u64::MAX);
            let TimedOp {
                op,
                state,
                down,
                ctx,
                slot,
                emitted,
                ..
            } = self;
            let mut out = Output::new(&mut **down, emitted, &**ctx, slot.op);
            state.for_each_mut(|k, s| {
                op.on_end(k, &mut s.user, &mut out);
                ctx.tick();
            });
            self.ctx.leave(prev);
            self.forward(u64::MAX);
        }
        self.slot.publish(self.seen, self.emitted);
        self.down.end();
    }

    fn open_chunk(&mut self, id: ChunkId) {
        self.down.open_chunk(id);
    }

    fn close_chunk(&mut self) {
        self.down.close_chunk();
    }

    fn snapshot_chain(&mut self, parts: &mut ChainParts) -> Result<(), CheckpointError> {
        parts.push((self.slot.op, Some(self.capture()?)));
        self.down.snapshot_chain(parts)
    }

    fn barrier(&mut self, id: u64) {
        if !self.ctx.wants_snapshot(id) {
            self.down.barrier(id);
            return;
        }
        match self.capture() {
            Ok(state) => self.ctx.ack(self.slot.op, id, Some(state), None, None),
            Err(e) => self.ctx.decline(self.slot.op, id, e.to_string()),
        }
        self.down.barrier(id);
    }
}
