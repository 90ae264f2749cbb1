//! The chain hop of a keyed window operator (the semantics are in
//! [`crate::time::window`]): a [`Hop`] of the event-time core
//! (`event_time.rs`, which says in what order records and timers are
//! taken).
//!
//! Per key (the engine's [`KeyedState`]): its open windows. Timers are not
//! stored: they follow from the open windows and are rebuilt on restore.

use super::event_time::{keyed_by, Emit, EventClock, EventTimeOp, Hop, HopKey, Keys, SideCodec};
use super::keyed::StateCodec;
use crate::operator::Collector;
use crate::record::{Record, TupleId};
use crate::runtime::graph::BuildCx;
use crate::time::window::{
    EarlyFiring, Evictor, KeyWindows, Trigger, TriggerAction, Waiting, WinOut, Window,
    WindowAssigner, WindowFn, WindowTrigger, Windows,
};
use std::sync::Arc;

/// How the operator is configured.
pub(crate) struct WindowSpec<T> {
    pub(crate) windows: Windows,
    pub(crate) lateness: u64,
    /// Firings before a window's end (time windows, not sessions).
    pub(crate) early: Option<EarlyFiring>,
    /// A firing clears the window's accumulator: each result covers the
    /// records since the one before.
    pub(crate) purging: bool,
    /// An evictor: what a window keeps of its records.
    pub(crate) evictor: Option<Evictor<T>>,
    /// A custom early-firing rule.
    pub(crate) trigger: Option<Arc<dyn WindowTrigger<T>>>,
}

impl<T> WindowSpec<T> {
    /// The event-time step of continuous early firing, if any.
    fn every(&self) -> Option<u64> {
        match self.early {
            Some(EarlyFiring::Every(d)) => Some(crate::time::of_duration(d).max(1)),
            _ => None,
        }
    }
}

/// The first multiple of `step` after `start` that is past `after` and
/// before `end`: a window's next continuous early firing.
fn next_boundary(start: u64, end: u64, step: u64, after: u64) -> Option<u64> {
    let k = after.saturating_sub(start) / step + 1;
    let at = start.saturating_add(k.saturating_mul(step));
    (at < end).then_some(at)
}

/// A keyed window operator: what its records and timers mean.
pub(crate) struct WindowOp<K, T, O, F: WindowFn<K, T, O>> {
    f: F,
    spec: WindowSpec<T>,
    key: Arc<dyn Fn(&T) -> K + Send + Sync>,
    keys: Keys<K, KeyWindows<F::Acc>>,
    scratch: Vec<Window>,
    _o: std::marker::PhantomData<fn() -> O>,
}

impl<K: HopKey, T: Clone + 'static, O: 'static, F: WindowFn<K, T, O>> WindowOp<K, T, O, F> {
    /// The window hop in the chain before `down`.
    pub(crate) fn new(
        f: F,
        spec: WindowSpec<T>,
        key: Arc<dyn Fn(&T) -> K + Send + Sync>,
        codec: StateCodec<K, KeyWindows<F::Acc>>,
        side_codec: SideCodec<T>,
        down: Box<dyn Collector<WinOut<O, T>>>,
        cx: BuildCx,
    ) -> EventTimeOp<T, Self> {
        let hop = WindowOp {
            f,
            spec,
            key,
            keys: Keys::new(codec),
            scratch: Vec::new(),
            _o: std::marker::PhantomData,
        };
        EventTimeOp::new(hop, side_codec, down, cx)
    }
}

impl<K: HopKey, T: Clone + 'static, O: 'static, F: WindowFn<K, T, O>> Hop<T>
    for WindowOp<K, T, O, F>
{
    type Out = WinOut<O, T>;
    keyed_by!(K, KeyWindows<F::Acc>);

    fn key_of(&self, v: &T) -> K {
        (self.key)(v)
    }

    /// Indexes the timers anew from the open windows (after a restore: key
    /// numbers changed).
    fn reindex(&mut self, _ptime: u64, clock: &mut EventClock<T>) {
        let timers = &mut clock.timers;
        let lateness = self.spec.lateness;
        let count = self.spec.windows.trigger() != Trigger::EventTime;
        let every = self.spec.every();
        let wm = clock.wm_out;
        timers.clear();
        self.keys.state.for_each_numbered(|seq, kw| {
            if count {
                return;
            }
            for o in &kw.open {
                let at = if o.fired {
                    o.window.end.saturating_add(lateness)
                } else {
                    o.window.end
                };
                timers.add(at, seq);
                if let Some(b) = every
                    .filter(|_| !o.fired)
                    .and_then(|i| next_boundary(o.window.start, o.window.end, i, wm))
                {
                    timers.add(b, seq);
                }
            }
        });
    }

    /// An on-time record of an order-insensitive aggregate joins its
    /// windows now: none of them has fired (each ends past the record,
    /// hence past the watermark), and the order in which their records are
    /// added does not change their results.
    fn takes_on_time_at_once(&self) -> bool {
        // Early firings see the records taken so far: in event-time
        // order, never as they happen to arrive.
        F::COMMUTATIVE
            && self.spec.windows.trigger() == Trigger::EventTime
            && self.spec.early.is_none()
    }

    fn take(
        &mut self,
        clock: &mut EventClock<T>,
        w: Waiting<T>,
        v: u64,
        out: &mut Emit<'_, WinOut<O, T>>,
    ) {
        let t = w.event_time;
        let key = (self.key)(&w.value);
        let lateness = self.spec.lateness;
        let windows = self.spec.windows;
        let (early, purging, every) = (self.spec.early, self.spec.purging, self.spec.every());
        let WindowOp {
            f,
            keys,
            scratch,
            spec,
            ..
        } = self;
        let trigger = spec.trigger.as_deref();
        let evictor = spec.evictor.as_ref();
        let (timers, wm_out) = (&mut clock.timers, clock.wm_out);
        let (seq, mut kw) = keys.state.get_or_default_numbered(&key);
        let (wid, wingest) = (w.id, w.ingest);
        let late_rec = move |value: T, out: &mut Emit<'_, WinOut<O, T>>| {
            *out.emitted += 1;
            // Judged downstream by the operator's watermark (the input
            // lane's is put back: the port may go on with its records).
            let lane_wm = out.ctx.lane_wm.replace(wm_out);
            out.down.collect(Record {
                id: TupleId(wid),
                event_time: t,
                ingest: wingest,
                value: WinOut::Late(value),
            });
            out.ctx.lane_wm.set(lane_wm);
        };
        match windows.trigger() {
            Trigger::Count(size) => {
                let n = kw.count;
                kw.count += 1;
                let start = n - n % size;
                let (o, _) = kw.slot(Window {
                    start,
                    end: start + size,
                });
                f.add(&mut o.acc, &w.value);
                if let Some(e) = evictor {
                    f.evict(&mut o.acc, o.window, e);
                }
                o.note(w.id, w.ingest);
                if n + 1 == start + size {
                    o.fired = true;
                    emit(f, &key, o, out, wm_out);
                    kw.open.retain(|o| !o.fired);
                }
            }
            Trigger::EventTime if windows.merging() => {
                windows.assign(t, scratch);
                let mine = scratch[0];
                // The end of the session it would join, before joining it.
                let mut hi = mine.end;
                for o in &kw.open {
                    if o.window.start < mine.end && mine.start < o.window.end {
                        hi = hi.max(o.window.end);
                    }
                }
                if hi.saturating_add(lateness) <= v {
                    let empty = kw.open.is_empty();
                    drop(kw);
                    late_rec(w.value, out);
                    if empty {
                        keys.remove_at(seq);
                    }
                    return;
                }
                let i = kw.merge_session(mine, |a, b| f.merge(a, b));
                let o = &mut kw.open[i];
                f.add(&mut o.acc, &w.value);
                if let Some(e) = evictor {
                    f.evict(&mut o.acc, o.window, e);
                }
                o.note(w.id, w.ingest);
                if o.window.end <= v {
                    // Late, within the allowed lateness: fires again.
                    o.fired = true;
                    emit(f, &key, o, out, wm_out);
                    timers.add(o.window.end.saturating_add(lateness), seq);
                } else {
                    timers.add(o.window.end, seq);
                }
            }
            Trigger::EventTime => {
                windows.assign(t, scratch);
                let mut kept = false;
                for &win in scratch.iter() {
                    if win.end.saturating_add(lateness) <= v {
                        continue;
                    }
                    kept = true;
                    let (o, created) = kw.slot(win);
                    f.add(&mut o.acc, &w.value);
                    if let Some(e) = evictor {
                        f.evict(&mut o.acc, o.window, e);
                    }
                    o.note(w.id, w.ingest);
                    o.since += 1;
                    if win.end <= v {
                        // Late, within the allowed lateness: fires (again);
                        // its clean-up is due at the end plus the lateness.
                        let first = !o.fired;
                        o.fired = true;
                        fire(f, &key, o, out, wm_out, purging);
                        if first {
                            timers.add(win.end.saturating_add(lateness), seq);
                        }
                    } else {
                        if created {
                            timers.add(win.end, seq);
                            if let Some(b) =
                                every.and_then(|i| next_boundary(win.start, win.end, i, v))
                            {
                                timers.add(b, seq);
                            }
                        }
                        if matches!(early, Some(EarlyFiring::Count(n)) if o.since >= n) {
                            fire(f, &key, o, out, wm_out, purging);
                        } else if let Some(tr) = trigger {
                            match tr.on_record(&w.value, t, win, o.since) {
                                TriggerAction::Continue => {}
                                TriggerAction::Fire => fire(f, &key, o, out, wm_out, purging),
                                TriggerAction::FireAndPurge => {
                                    fire(f, &key, o, out, wm_out, true);
                                    o.purge_mark();
                                }
                            }
                        }
                    }
                }
                if !kept {
                    let empty = kw.open.is_empty();
                    drop(kw);
                    late_rec(w.value, out);
                    if empty {
                        keys.remove_at(seq);
                    }
                }
            }
        }
    }

    /// Timer `at` of key number `seq`: fires its windows that end at or
    /// before `at` and have not fired, drops those past their lateness.
    fn on_timer(
        &mut self,
        clock: &mut EventClock<T>,
        at: u64,
        seq: u32,
        out: &mut Emit<'_, WinOut<O, T>>,
    ) {
        let WindowOp { f, spec, keys, .. } = self;
        let (timers, wm_out) = (&mut clock.timers, clock.wm_out);
        let (lateness, purging, every) = (spec.lateness, spec.purging, spec.every());
        let empty = keys.state.with_key_at(seq, |key, kw| {
            kw.open.retain_mut(|o| {
                if !o.fired && o.window.end <= at {
                    o.fired = true;
                    // Purging: nothing new since the last early firing,
                    // nothing to say.
                    if !((purging || o.purged()) && o.since == 0) {
                        fire(f, key, o, out, wm_out, purging);
                    }
                    if lateness > 0 {
                        timers.add(o.window.end.saturating_add(lateness), seq);
                    }
                } else if let Some(i) = every.filter(|_| !o.fired) {
                    let w = o.window;
                    if w.start < at && at < w.end && (at - w.start).is_multiple_of(i) {
                        if !((purging || o.purged()) && o.since == 0) {
                            fire(f, key, o, out, wm_out, purging);
                        }
                        if let Some(b) = next_boundary(w.start, w.end, i, at) {
                            timers.add(b, seq);
                        }
                    }
                }
                !(o.fired && o.window.end.saturating_add(lateness) <= at)
            });
            kw.open.is_empty()
        });
        if empty == Some(true) {
            // No window left: the key goes (a time window's key keeps
            // nothing else; a count window's key never gets here).
            keys.remove_at(seq);
        }
    }

    fn compact(&mut self, clock: &mut EventClock<T>) {
        if let Some(renumber) = self.keys.compact() {
            clock.timers.remap(&renumber);
        }
    }
}

/// Fires window `o`: emits its results, restarts its count of records
/// since a firing, and — `purging` — clears its accumulator.
fn fire<K, T, O, F: WindowFn<K, T, O>>(
    f: &F,
    key: &K,
    o: &mut crate::time::window::Open<F::Acc>,
    out: &mut Emit<'_, WinOut<O, T>>,
    wm_out: u64,
    purging: bool,
) {
    emit(f, key, o, out, wm_out);
    o.since = 0;
    if purging {
        o.acc = F::Acc::default();
    }
}

/// Emits window `o`'s results for `key`, in the envelope of the record
/// added to it last, at event time `end - 1`.
fn emit<K, T, O, F: WindowFn<K, T, O>>(
    f: &F,
    key: &K,
    o: &crate::time::window::Open<F::Acc>,
    out: &mut Emit<'_, WinOut<O, T>>,
    wm_out: u64,
) {
    let Emit {
        down,
        ctx,
        op,
        emitted,
    } = out;
    let id = TupleId(o.last_id);
    ctx.record.set(Some(id));
    let prev = ctx.enter(*op);
    // Downstream in the chain judges these by the operator's own
    // watermark, as a consumer across a ring will (the input lane's is put
    // back after: the port may go on with its records).
    let lane_wm = ctx.lane_wm.replace(wm_out);
    let event_time = o.window.max_timestamp();
    f.fire(key, o.window, &o.acc, &mut |value| {
        **emitted += 1;
        down.collect(Record {
            id,
            event_time,
            ingest: o.ingest,
            value: WinOut::Result(value),
        });
    });
    ctx.lane_wm.set(lane_wm);
    ctx.leave(prev);
}
