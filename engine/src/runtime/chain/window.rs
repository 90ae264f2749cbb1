//! The chain hop of a keyed window operator (the semantics are in
//! [`crate::time::window`]).
//!
//! ## The order it works in
//!
//! Every record gets a *release time*: its event time, or — for a late
//! record — the watermark of the lane it came on (`TaskCtx::lane_wm`), a
//! function of that lane's stream alone. Records wait in a heap until the
//! operator's watermark passes their release time and are then taken in
//! the order `(release time, tuple ID, lane, arrival)`; before a record
//! released at `v` is taken, every timer at or below `v` fires (timers
//! fire in the order `(time, key number)`). No future record can be
//! released below the operator's watermark, so the sequence of records and
//! firings is the same whatever the lanes' interleaving: what the operator
//! emits depends on its input streams only.
//!
//! ## State
//!
//! Per key (the engine's [`KeyedState`], frozen in O(1) at a barrier and
//! archived between polls): its open windows. Beside it (archived at the
//! barrier; small — the records within the watermark's lag): the waiting
//! records, the input and output watermarks, the virtual time. Timers are
//! not stored: they follow from the open windows and are rebuilt on
//! restore. The two are framed as one state (`chain::frame`).

use super::frame;
use super::keyed::StateCodec;
use super::merge::{Pending, Timers};
use crate::checkpoint::{CheckpointError, SnapshotBytes, StateCapture};
use crate::operator::{ChainParts, ChunkId, Collector};
use crate::record::{Record, TupleId};
use crate::runtime::graph::{BuildCx, Probe};
use crate::runtime::probe::run_probe;
use crate::runtime::task::{OpSlot, TaskCtx};
use crate::state::{KeyedState, StateSnapshot};
use crate::time::window::{KeyWindows, Waiting, WinOut, Window, WindowFn, WindowSide, Windows};
use std::hash::Hash;
use std::rc::Rc;
use std::sync::Arc;

/// How the side state goes to and comes from a snapshot.
pub(crate) struct SideCodec<T> {
    snapshot: fn(&WindowSide<T>) -> Result<SnapshotBytes, CheckpointError>,
    restore: fn(&[u8]) -> Result<WindowSide<T>, CheckpointError>,
}

impl<T> SideCodec<T>
where
    WindowSide<T>: StateSnapshot,
{
    pub(crate) fn of() -> Self {
        SideCodec {
            snapshot: <WindowSide<T> as StateSnapshot>::snapshot,
            restore: <WindowSide<T> as StateSnapshot>::restore,
        }
    }
}

/// The frame's part numbers: keyed state, side state.
const KEYED: usize = 0;
const SIDE: usize = 1;

/// How the operator is configured.
pub(crate) struct WindowSpec {
    pub(crate) windows: Windows,
    pub(crate) lateness: u64,
}

pub(crate) struct WindowOp<K, T, O, F: WindowFn<K, T, O>> {
    f: F,
    spec: WindowSpec,
    key: Arc<dyn Fn(&T) -> K + Send + Sync>,
    state: KeyedState<K, KeyWindows<F::Acc>>,
    codec: StateCodec<K, KeyWindows<F::Acc>>,
    side_codec: SideCodec<T>,
    waiting: Pending<T>,
    /// Timers `(time, key number)`.
    timers: Timers,
    wm_in: u64,
    wm_out: u64,
    /// Virtual time: every timer at or below it has fired.
    now: u64,
    arrivals: u64,
    down: Box<dyn Collector<WinOut<O, T>>>,
    ctx: Rc<TaskCtx>,
    slot: OpSlot,
    probe: Probe,
    seen: u64,
    emitted: u64,
    finished: bool,
    scratch: Vec<Window>,
    /// A key was removed since the last look at compacting the state.
    removed: bool,
}

impl<K, T, O, F> WindowOp<K, T, O, F>
where
    K: Hash + Eq + Clone + 'static,
    T: Clone + 'static,
    O: 'static,
    F: WindowFn<K, T, O>,
{
    pub(crate) fn new(
        f: F,
        spec: WindowSpec,
        key: Arc<dyn Fn(&T) -> K + Send + Sync>,
        codec: StateCodec<K, KeyWindows<F::Acc>>,
        side_codec: SideCodec<T>,
        down: Box<dyn Collector<WinOut<O, T>>>,
        cx: BuildCx,
    ) -> Self {
        let mut restored = None;
        let finished = cx.restore_state(|payload| {
            restored = Some(decode_framed(payload, &codec, &side_codec)?);
            Ok(())
        });
        let mut op = WindowOp {
            f,
            spec,
            key,
            state: KeyedState::default(),
            codec,
            side_codec,
            waiting: Pending::new(),
            timers: Timers::default(),
            wm_in: 0,
            wm_out: 0,
            now: 0,
            arrivals: 0,
            down,
            ctx: Rc::clone(&cx.ctx),
            slot: cx.slot,
            probe: cx.probe,
            seen: 0,
            emitted: 0,
            finished,
            scratch: Vec::new(),
            removed: false,
        };
        let was_restored = restored.is_some();
        if let Some((keyed, side)) = restored {
            op.apply(keyed, side);
        }
        if was_restored && op.wm_out > 0 && !op.finished {
            // Downstream learns the watermark again before any output.
            op.ctx.lane_wm.set(op.wm_out);
            op.down.watermark(op.wm_out);
        }
        op
    }

    /// Takes a restored state; the timers follow from its open windows.
    fn apply(&mut self, keyed: KeyedState<K, KeyWindows<F::Acc>>, side: WindowSide<T>) {
        self.state = keyed;
        self.waiting = Pending::new();
        for w in side.waiting {
            self.waiting.push(w);
        }
        self.wm_in = side.wm_in;
        self.wm_out = side.wm_out;
        self.now = side.now;
        self.arrivals = side.arrivals;
        self.reindex();
    }

    /// Indexes the timers anew from the open windows (after a restore: key
    /// numbers changed).
    fn reindex(&mut self) {
        let lateness = self.spec.lateness;
        let count = matches!(self.spec.windows, Windows::Count { .. });
        let timers = &mut self.timers;
        timers.clear();
        self.state.for_each_numbered(|seq, kw| {
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
            }
        });
    }

    /// The operator's state as one capture: its keyed state frozen (archived
    /// later, in steps), its side state archived now.
    fn capture(&self) -> Result<StateCapture, CheckpointError> {
        capture_framed(
            (self.codec.capture)(&self.state)?,
            WindowSide {
                waiting: self.waiting.sorted(),
                wm_in: self.wm_in,
                wm_out: self.wm_out,
                now: self.now,
                arrivals: self.arrivals,
                ptime: 0,
            },
            &self.side_codec,
        )
    }

    /// Takes every waiting record released below `upto`, then fires the
    /// timers at or below it.
    fn advance(&mut self, upto: u64) {
        while self.waiting.first_release().is_some_and(|r| r < upto) {
            let w = self.waiting.pop().expect("peeked");
            self.take(w);
            self.ctx.tick();
        }
        self.fire_until(upto);
    }

    /// Fires every timer at or below `t` and moves the virtual time there.
    fn fire_until(&mut self, t: u64) {
        while let Some((at, seqs)) = self.timers.take_first(t) {
            self.now = self.now.max(at);
            for seq in seqs {
                self.on_timer(at, seq);
                // Firing many windows takes a while: each is progress.
                self.ctx.tick();
            }
        }
        self.now = self.now.max(t);
    }

    /// Timer `at` of key number `seq`: fires its windows that end at or
    /// before `at` and have not fired, drops those past their lateness.
    fn on_timer(&mut self, at: u64, seq: u32) {
        let WindowOp {
            f,
            spec,
            state,
            timers,
            down,
            ctx,
            slot,
            emitted,
            wm_out,
            removed,
            ..
        } = self;
        let lateness = spec.lateness;
        let empty = state.with_key_at(seq, |key, kw| {
            kw.open.retain_mut(|o| {
                if !o.fired && o.window.end <= at {
                    o.fired = true;
                    emit(f, key, o, down, ctx, slot.op, emitted, *wm_out);
                    if lateness > 0 {
                        timers.add(o.window.end.saturating_add(lateness), seq);
                    }
                }
                !(o.fired && o.window.end.saturating_add(lateness) <= at)
            });
            kw.open.is_empty()
        });
        if empty == Some(true) {
            // No window left: the key goes (a time window's key keeps
            // nothing else; a count window's key never gets here).
            *removed |= state.remove_at(seq);
        }
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
        }
    }

    /// Takes one released record (see the module docs).
    fn take(&mut self, w: Waiting<T>) {
        let v = w.release;
        self.fire_until(v);
        self.take_at(w, v);
    }

    /// Takes record `w` at virtual time `v` (timers up to `v` have fired).
    fn take_at(&mut self, w: Waiting<T>, v: u64) {
        let t = w.event_time;
        let key = (self.key)(&w.value);
        let lateness = self.spec.lateness;
        let windows = self.spec.windows;
        let WindowOp {
            f,
            state,
            timers,
            down,
            ctx,
            slot,
            emitted,
            wm_out,
            scratch,
            removed,
            ..
        } = self;
        let (seq, mut kw) = state.get_or_default_numbered(&key);
        let (wid, wingest, wm) = (w.id, w.ingest, *wm_out);
        let late_rec = move |value: T,
                             down: &mut Box<dyn Collector<WinOut<O, T>>>,
                             ctx: &TaskCtx,
                             e: &mut u64| {
            *e += 1;
            // Judged downstream by the operator's watermark (the input
            // lane's is put back: the port may go on with its records).
            let lane_wm = ctx.lane_wm.replace(wm);
            down.collect(Record {
                id: TupleId(wid),
                event_time: t,
                ingest: wingest,
                value: WinOut::Late(value),
            });
            ctx.lane_wm.set(lane_wm);
        };
        match windows {
            Windows::Count { size } => {
                let n = kw.count;
                kw.count += 1;
                let start = n - n % size;
                let (o, _) = kw.slot(Window {
                    start,
                    end: start + size,
                });
                f.add(&mut o.acc, &w.value);
                o.note(w.id, w.ingest);
                if n + 1 == start + size {
                    o.fired = true;
                    emit(f, &key, o, down, ctx, slot.op, emitted, *wm_out);
                    kw.open.retain(|o| !o.fired);
                }
            }
            Windows::Session { gap } => {
                let mine = Window {
                    start: t,
                    end: t.saturating_add(gap),
                };
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
                    late_rec(w.value, down, ctx, emitted);
                    if empty {
                        *removed |= state.remove_at(seq);
                    }
                    return;
                }
                let i = kw.merge_session(mine, |a, b| f.merge(a, b));
                let o = &mut kw.open[i];
                f.add(&mut o.acc, &w.value);
                o.note(w.id, w.ingest);
                if o.window.end <= v {
                    // Late, within the allowed lateness: fires again.
                    o.fired = true;
                    emit(f, &key, o, down, ctx, slot.op, emitted, *wm_out);
                    timers.add(o.window.end.saturating_add(lateness), seq);
                } else {
                    timers.add(o.window.end, seq);
                }
            }
            Windows::Tumbling { .. } | Windows::Sliding { .. } => {
                windows.assign(t, scratch);
                let mut kept = false;
                for &win in scratch.iter() {
                    if win.end.saturating_add(lateness) <= v {
                        continue;
                    }
                    kept = true;
                    let (o, created) = kw.slot(win);
                    f.add(&mut o.acc, &w.value);
                    o.note(w.id, w.ingest);
                    if win.end <= v {
                        // Late, within the allowed lateness: fires (again);
                        // its clean-up is due at the end plus the lateness.
                        let first = !o.fired;
                        o.fired = true;
                        emit(f, &key, o, down, ctx, slot.op, emitted, *wm_out);
                        if first {
                            timers.add(win.end.saturating_add(lateness), seq);
                        }
                    } else if created {
                        timers.add(win.end, seq);
                    }
                }
                if !kept {
                    let empty = kw.open.is_empty();
                    drop(kw);
                    late_rec(w.value, down, ctx, emitted);
                    if empty {
                        *removed |= state.remove_at(seq);
                    }
                }
            }
        }
    }

    /// Forwards the operator's watermark after an advance.
    fn forward(&mut self, wm: u64) {
        if wm > self.wm_out {
            self.wm_out = wm;
            self.down.watermark(wm);
        }
    }
}

/// An event-time operator's state as one capture: its keyed state (frozen,
/// archived later in steps) and its side state (archived now), framed.
pub(crate) fn capture_framed<T>(
    keyed: StateCapture,
    side: WindowSide<T>,
    side_codec: &SideCodec<T>,
) -> Result<StateCapture, CheckpointError> {
    let side = (side_codec.snapshot)(&side)?;
    Ok(frame::capture(
        vec![
            (KEYED, Some(keyed)),
            (SIDE, Some(StateCapture::Bytes(side))),
        ],
        2,
        true,
    )
    .expect("a framed capture"))
}

/// An event-time operator's archive: its keyed state and its side state.
#[allow(clippy::type_complexity)]
pub(crate) fn decode_framed<K, S, T>(
    payload: &[u8],
    codec: &StateCodec<K, S>,
    side_codec: &SideCodec<T>,
) -> Result<(KeyedState<K, S>, WindowSide<T>), CheckpointError> {
    let bad = CheckpointError::ChainFrame;
    let parts = frame::split(payload.to_vec(), &[KEYED, SIDE]).map_err(bad)?;
    let keyed = parts
        .get(&KEYED)
        .ok_or_else(|| bad("an event-time operator's state without its keyed part".into()))?;
    let side = parts
        .get(&SIDE)
        .ok_or_else(|| bad("an event-time operator's state without its waiting records".into()))?;
    Ok(((codec.restore)(keyed)?, (side_codec.restore)(side)?))
}

/// Emits window `o`'s results for `key`, in the envelope of the record
/// added to it last, at event time `end - 1`.
#[allow(clippy::too_many_arguments)]
fn emit<K, T, O, F: WindowFn<K, T, O>>(
    f: &F,
    key: &K,
    o: &crate::time::window::Open<F::Acc>,
    down: &mut Box<dyn Collector<WinOut<O, T>>>,
    ctx: &TaskCtx,
    op: usize,
    emitted: &mut u64,
    wm_out: u64,
) {
    let id = TupleId(o.last_id);
    ctx.record.set(Some(id));
    let prev = ctx.enter(op);
    // Downstream in the chain judges these by the operator's own
    // watermark, as a consumer across a ring will (the input lane's is put
    // back after: the port may go on with its records).
    let lane_wm = ctx.lane_wm.replace(wm_out);
    let event_time = o.window.max_timestamp();
    f.fire(key, o.window, &o.acc, &mut |value| {
        *emitted += 1;
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

impl<K, T, O, F> Collector<T> for WindowOp<K, T, O, F>
where
    K: Hash + Eq + Clone + 'static,
    T: Clone + 'static,
    O: 'static,
    F: WindowFn<K, T, O>,
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
        let rec_on_time = rec.event_time >= lane_wm;
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
        if F::COMMUTATIVE && rec_on_time && !matches!(self.spec.windows, Windows::Count { .. }) {
            // An on-time record of an order-insensitive aggregate joins its
            // windows now: none of them has fired (each ends past the
            // record, hence past the watermark), and the order in which
            // their records are added does not change their results.
            let now = self.now;
            self.take_at(w, now);
            self.compact();
        } else if release < self.wm_in {
            // Below the operator's watermark only from a lane that was
            // idle while the others moved on: taken at once, at the
            // operator's time.
            let w = Waiting {
                release: self.now,
                ..w
            };
            self.take(w);
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

    fn end(&mut self) {
        self.ctx.record.set(None);
        if !self.finished {
            // The end of every input: a watermark past every event time.
            self.wm_in = u64::MAX;
            let prev = self.ctx.enter(self.slot.op);
            self.advance(u64::MAX);
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
