//! The chain hop of a keyed process function in event time
//! ([`crate::time::TimedProcess`]): a [`Hop`] of the event-time core
//! (`event_time.rs`: records taken in release order, each timer fired
//! before any record released at or after it, in the order (time, key
//! number)), with per-key state and timers, and processing-time timers.
//!
//! The keys' timers are in their keyed state ([`Timed`]); the indexes by
//! time (the core's for event time, `ptimers` here for processing time)
//! are rebuilt from it on restore.

use super::event_time::{keyed_by, Emit, EventClock, EventTimeOp, Hop, HopKey, Keys, SideCodec};
use super::keyed::StateCodec;
use super::merge::Timers;
use crate::operator::{Collector, Output};
use crate::record::{Record, TupleId};
use crate::runtime::graph::BuildCx;
use crate::runtime::task::TaskCtx;
use crate::time::process::{Added, Timed, TimedProcess, TimerContext, CLEANED_PER_RECORD};
use crate::time::window::Waiting;
use std::sync::Arc;

/// A keyed process function in event time: what its records and timers
/// mean.
pub(crate) struct TimedOp<K, T, O, P: TimedProcess<K, T, O>> {
    op: P,
    key: Arc<dyn Fn(&T) -> K + Send + Sync>,
    keys: Keys<K, Timed<P::State>>,
    /// Processing-time timers by time, and the processing time.
    ptimers: Timers,
    ptime: u64,
    added: Added,
    /// The next key the clean-up of TTL state visits (by insertion
    /// number). Not in snapshots: the clean-up drops only what no read
    /// would return, so where it stands changes nothing a function sees.
    clean_at: u32,
    /// Where the earliest processing-time timer is published.
    ctx: std::rc::Rc<TaskCtx>,
    _o: std::marker::PhantomData<fn() -> O>,
}

impl<K: HopKey, T: Clone + 'static, O: 'static, P: TimedProcess<K, T, O>> TimedOp<K, T, O, P> {
    /// The timed hop in the chain before `down`.
    pub(crate) fn new(
        op: P,
        key: Arc<dyn Fn(&T) -> K + Send + Sync>,
        codec: StateCodec<K, Timed<P::State>>,
        side_codec: SideCodec<T>,
        down: Box<dyn Collector<O>>,
        cx: BuildCx,
    ) -> EventTimeOp<T, Self> {
        // Its ports tell it the processing time.
        cx.ctx.ptimers.set(true);
        let hop = TimedOp {
            op,
            key,
            keys: Keys::new(codec),
            ptimers: Timers::default(),
            ptime: 0,
            added: Added::default(),
            clean_at: 0,
            ctx: std::rc::Rc::clone(&cx.ctx),
            _o: std::marker::PhantomData,
        };
        EventTimeOp::new(hop, side_codec, down, cx)
    }

    /// Publishes the earliest processing-time timer to the task's ports.
    fn publish_ptimer(&self) {
        self.ctx
            .next_ptimer
            .set(self.ptimers.first().unwrap_or(u64::MAX));
    }

    /// Indexes the timers the last call registered for key number `seq`.
    fn index(&mut self, timers: &mut Timers, seq: u32) {
        for at in self.added.event.drain(..) {
            timers.add(at, seq);
        }
        if !self.added.processing.is_empty() {
            for at in self.added.processing.drain(..) {
                self.ptimers.add(at, seq);
            }
            self.publish_ptimer();
        }
    }

    /// Fires timer `at` of key number `seq`: an event-time one, or
    /// (`processing`) a processing-time one.
    fn fire(
        &mut self,
        clock: &mut EventClock<T>,
        at: u64,
        seq: u32,
        processing: bool,
        out: &mut Emit<'_, O>,
    ) {
        let TimedOp {
            op,
            keys,
            added,
            ptime,
            ..
        } = self;
        let (now, wm_out) = (clock.now, clock.wm_out);
        let Emit {
            down,
            ctx,
            op: node,
            emitted,
        } = out;
        let empty = keys.state.with_key_at(seq, |key, s| {
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
            let lane_wm = ctx.lane_wm.replace(wm_out);
            let prev = ctx.enter(*node);
            ctx.record.set(None);
            let mut out = Output::new(&mut ***down, emitted, *ctx, *node);
            // An event-time timer's outputs are just before its time; a
            // processing-time timer's at the event time the operator is at.
            out.event_time = if processing {
                now
            } else {
                at.saturating_sub(1)
            };
            let mut cx = TimerContext {
                now: if processing { now } else { at },
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
            let now = cx.now;
            s.timers.is_empty() && s.ptimers.is_empty() && op.is_empty_at(&s.user, now)
        });
        self.index(&mut clock.timers, seq);
        if empty == Some(true) {
            self.drop_key(seq);
        }
    }

    /// Removes key number `seq`, whose state holds nothing and which has no
    /// timers (see [`TimedProcess::is_empty`]).
    fn drop_key(&mut self, seq: u32) {
        self.keys.remove_at(seq);
    }

    /// The incremental clean-up of TTL state: the next
    /// [`CLEANED_PER_RECORD`] keys' expired entries dropped at `now`.
    fn clean_up(&mut self, now: u64) {
        for _ in 0..CLEANED_PER_RECORD.min(self.keys.state.len() as u32) {
            if self.clean_at as usize >= self.keys.state.places() {
                self.clean_at = 0;
            }
            let seq = self.clean_at;
            self.clean_at += 1;
            let op = &self.op;
            let emptied = self.keys.state.update_at_if(
                seq,
                |s| op.has_expired(&s.user, now),
                |s| {
                    op.expire(&mut s.user, now);
                    s.timers.is_empty() && s.ptimers.is_empty() && op.is_empty_at(&s.user, now)
                },
            );
            if emptied == Some(true) {
                self.drop_key(seq);
            }
        }
    }
}

impl<K: HopKey, T: Clone + 'static, O: 'static, P: TimedProcess<K, T, O>> Hop<T>
    for TimedOp<K, T, O, P>
{
    type Out = O;
    keyed_by!(K, Timed<P::State>);

    fn key_of(&self, v: &T) -> K {
        (self.key)(v)
    }

    fn take(&mut self, clock: &mut EventClock<T>, w: Waiting<T>, v: u64, out: &mut Emit<'_, O>) {
        let key = (self.key)(&w.value);
        let TimedOp {
            op,
            keys,
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
        let ctx = out.ctx;
        ctx.record.set(Some(rec.id));
        let lane_wm = ctx.lane_wm.replace(clock.wm_out);
        let (seq, empty) = {
            let (seq, mut guard) = keys.state.get_or_default_numbered(&key);
            let s = &mut *guard;
            let mut o = Output::new(&mut **out.down, out.emitted, ctx, out.op).with_envelope(&rec);
            let mut cx = TimerContext {
                now: v,
                ptime: *ptime,
                timers: &mut s.timers,
                ptimers: &mut s.ptimers,
                added,
            };
            op.process(&key, &mut s.user, rec, &mut cx, &mut o);
            let empty = s.timers.is_empty() && s.ptimers.is_empty() && op.is_empty_at(&s.user, v);
            (seq, empty)
        };
        ctx.lane_wm.set(lane_wm);
        self.index(&mut clock.timers, seq);
        if empty {
            self.drop_key(seq);
        }
        if P::EXPIRES {
            self.clean_up(v);
        }
    }

    fn on_timer(&mut self, clock: &mut EventClock<T>, at: u64, seq: u32, out: &mut Emit<'_, O>) {
        self.fire(clock, at, seq, false, out);
    }

    /// Compacts the state once removed keys are half its places, and
    /// renumbers the timers' keys.
    fn compact(&mut self, clock: &mut EventClock<T>) {
        if let Some(renumber) = self.keys.compact() {
            clock.timers.remap(&renumber);
            self.ptimers.remap(&renumber);
            self.clean_at = 0;
        }
    }

    /// Indexes every key's timers by time anew, event-time and
    /// processing-time ones.
    fn reindex(&mut self, ptime: u64, clock: &mut EventClock<T>) {
        self.ptime = ptime;
        let (timers, ptimers) = (&mut clock.timers, &mut self.ptimers);
        timers.clear();
        ptimers.clear();
        self.keys.state.for_each_numbered(|seq, s| {
            for &at in &s.timers {
                timers.add(at, seq);
            }
            for &at in &s.ptimers {
                ptimers.add(at, seq);
            }
        });
        self.publish_ptimer();
        self.clean_at = 0;
    }

    fn ptime(&self) -> u64 {
        self.ptime
    }

    /// Processing time reached `now`: the processing-time timers due fire,
    /// in the order (time, key number).
    fn processing_time(&mut self, now: u64, clock: &mut EventClock<T>, out: &mut Emit<'_, O>) {
        if now <= self.ptime {
            return;
        }
        self.ptime = now;
        let prev = out.ctx.enter(out.op);
        while let Some((at, seqs)) = self.ptimers.take_first(now) {
            for seq in seqs {
                self.fire(clock, at, seq, true, out);
                out.ctx.tick();
            }
        }
        out.ctx.leave(prev);
        self.publish_ptimer();
    }

    fn end_of_input(&mut self, out: &mut Emit<'_, O>) {
        let TimedOp { op, keys, .. } = self;
        let ctx = out.ctx;
        let mut o = Output::new(&mut **out.down, out.emitted, ctx, out.op);
        keys.state.for_each_mut(|k, s| {
            op.on_end(k, &mut s.user, &mut o);
            ctx.tick();
        });
    }
}
