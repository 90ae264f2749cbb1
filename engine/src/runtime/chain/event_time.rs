//! The event-time core of a chain hop, shared by keyed windows
//! (`window.rs`) and keyed process functions in event time (`timed.rs`).
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
//! ## What is whose
//!
//! [`EventTimeOp`] is the hop: it keeps the waiting records, the timers by
//! time, the watermarks in and out and the virtual time ([`EventClock`]),
//! and does what every event-time hop does — the release order, firing,
//! forwarding the watermark, the end of input, barriers and snapshots. What
//! a record and a timer *mean* is its [`Hop`]'s: a window assigns and
//! fires windows, a timed process function calls the user's code. A hop
//! keeps its keyed state (the engine's [`crate::state::KeyedState`], frozen
//! in O(1) at a barrier and archived between polls); the core's side state
//! (archived at the barrier; small — the records within the watermark's
//! lag) is framed with it as one state (`chain::frame`). Timers are
//! rebuilt from the keyed state on restore.

use super::frame;
use crate::checkpoint::{CheckpointError, SnapshotBytes, StateCapture};
use crate::operator::{ChainParts, ChunkId, Collector};
use crate::record::Record;
use crate::runtime::chain::keyed::StateCodec;
use crate::runtime::chain::merge::{Pending, Timers};
use crate::runtime::graph::{BuildCx, Probe};
use crate::runtime::probe::run_probe;
use crate::runtime::task::{OpSlot, TaskCtx};
use crate::state::{KeyedState, StateSnapshot};
use crate::time::window::{Waiting, WindowSide};
use std::hash::Hash;
use std::rc::Rc;

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

/// An event-time hop's clocks and what waits on them.
pub(crate) struct EventClock<T> {
    pub(crate) waiting: Pending<T>,
    /// Timers `(time, key number)`.
    pub(crate) timers: Timers,
    pub(crate) wm_in: u64,
    pub(crate) wm_out: u64,
    /// Virtual time: every timer at or below it has fired.
    pub(crate) now: u64,
    arrivals: u64,
}

/// Where a hop's outputs go: the chain below, the task's context, the
/// operator's number, its count of outputs.
pub(crate) struct Emit<'a, O> {
    pub(crate) down: &'a mut Box<dyn Collector<O>>,
    pub(crate) ctx: &'a TaskCtx,
    pub(crate) op: usize,
    pub(crate) emitted: &'a mut u64,
}

/// What keys an event-time hop's state.
pub(crate) trait HopKey: Hash + Eq + Clone + 'static {}

impl<K: Hash + Eq + Clone + 'static> HopKey for K {}

/// A hop's keyed state, how it is snapshotted, and whether a key was
/// removed since the state was last compacted.
pub(crate) struct Keys<K, S> {
    pub(crate) state: KeyedState<K, S>,
    codec: StateCodec<K, S>,
    removed: bool,
}

impl<K, S> Keys<K, S> {
    pub(crate) fn new(codec: StateCodec<K, S>) -> Self {
        Keys {
            state: KeyedState::default(),
            codec,
            removed: false,
        }
    }
}

impl<K: HopKey, S: Clone + Default> Keys<K, S> {
    /// Removes key number `seq` (its state holds nothing).
    pub(crate) fn remove_at(&mut self, seq: u32) {
        self.removed |= self.state.remove_at(seq);
    }

    /// After a removal, compacts the state once removed keys are half its
    /// places: the renumbering of the keys, when it did. Looked at only
    /// after a removal: not a cost per record.
    pub(crate) fn compact(&mut self) -> Option<Vec<u32>> {
        if !std::mem::take(&mut self.removed) {
            return None;
        }
        self.state.compact()
    }
}

/// A [`Hop`]'s key and state types and its accessors, for a hop whose
/// keyed state is its field `keys`.
macro_rules! keyed_by {
    ($k:ty, $s:ty) => {
        type Key = $k;
        type State = $s;
        fn keys(&self) -> &Keys<$k, $s> {
            &self.keys
        }
        fn keys_mut(&mut self) -> &mut Keys<$k, $s> {
            &mut self.keys
        }
    };
}
pub(crate) use keyed_by;

/// What an event-time hop does with what its core releases.
pub(crate) trait Hop<T>: 'static {
    /// The hop's output type.
    type Out: 'static;
    /// What keys its state, and what a key keeps.
    type Key: HopKey;
    type State: Default + Clone;
    /// The key of a record (what its state is kept under).
    fn key_of(&self, v: &T) -> Self::Key;
    /// Its keyed state.
    fn keys(&self) -> &Keys<Self::Key, Self::State>;
    fn keys_mut(&mut self) -> &mut Keys<Self::Key, Self::State>;
    /// Takes record `w` at virtual time `v` (every timer at or below `v`
    /// has fired).
    fn take(
        &mut self,
        clock: &mut EventClock<T>,
        w: Waiting<T>,
        v: u64,
        out: &mut Emit<'_, Self::Out>,
    );
    /// Timer `at` of key number `seq` fires.
    fn on_timer(
        &mut self,
        clock: &mut EventClock<T>,
        at: u64,
        seq: u32,
        out: &mut Emit<'_, Self::Out>,
    );
    /// Whether a record on time is taken at once, not in release order
    /// (an order-insensitive aggregate whose windows cannot have fired).
    fn takes_on_time_at_once(&self) -> bool {
        false
    }
    /// Compacts the keyed state if keys were removed, renumbering the
    /// timers' keys. Only between the hop's calls: a batch of timers
    /// being fired holds key numbers.
    fn compact(&mut self, clock: &mut EventClock<T>);
    /// The keyed state was restored (and the processing time, `ptime`):
    /// indexes its timers in `clock` anew (key numbers changed).
    fn reindex(&mut self, ptime: u64, clock: &mut EventClock<T>);
    /// The hop's processing time, for its side state (0: none).
    fn ptime(&self) -> u64 {
        0
    }
    /// Processing time reached `now`.
    fn processing_time(
        &mut self,
        _now: u64,
        _clock: &mut EventClock<T>,
        _out: &mut Emit<'_, Self::Out>,
    ) {
    }
    /// Every input ended and every timer fired: the keys' last word.
    fn end_of_input(&mut self, _out: &mut Emit<'_, Self::Out>) {}
}

/// An event-time chain hop: the core around a [`Hop`].
pub(crate) struct EventTimeOp<T, H: Hop<T>> {
    clock: EventClock<T>,
    hop: H,
    side_codec: SideCodec<T>,
    down: Box<dyn Collector<H::Out>>,
    ctx: Rc<TaskCtx>,
    slot: OpSlot,
    probe: Probe,
    seen: u64,
    emitted: u64,
    finished: bool,
    /// A standby that follows recovery points: the newest point's side
    /// state, installed when it goes live (with the timers).
    followed_side: Option<Vec<u8>>,
}

/// `$me`'s hop, its clock and an [`Emit`] over its outputs, borrowed
/// apart.
macro_rules! parts {
    ($me:expr) => {{
        let EventTimeOp {
            clock,
            hop,
            down,
            ctx,
            slot,
            emitted,
            ..
        } = $me;
        (
            hop,
            clock,
            Emit {
                down,
                ctx: &**ctx,
                op: slot.op,
                emitted,
            },
        )
    }};
}

impl<T: Clone + 'static, H: Hop<T>> EventTimeOp<T, H> {
    /// The hop `hop` in the chain before `down`, restored from `cx`'s
    /// state if it has one.
    pub(crate) fn new(
        hop: H,
        side_codec: SideCodec<T>,
        down: Box<dyn Collector<H::Out>>,
        cx: BuildCx,
    ) -> Self {
        let mut restored = None;
        let (me, of) = (cx.info.instance, cx.info.parallelism);
        let rescaled = cx.restore_parts(|links| {
            // An old instance's state: the keys this instance owns now.
            let (keyed, side) = decode_framed(links, None, &hop, &side_codec)?;
            let (state, merged) = restored.get_or_insert_with(|| {
                (
                    KeyedState::default(),
                    WindowSide {
                        waiting: Vec::new(),
                        wm_in: u64::MAX,
                        wm_out: u64::MAX,
                        now: u64::MAX,
                        arrivals: 0,
                        ptime: 0,
                    },
                )
            });
            state.take_keys(keyed, |k| {
                crate::runtime::channel::key_instance(k, of) == me
            });
            merge_side(merged, side, |v| {
                crate::runtime::channel::key_instance(&hop.key_of(v), of) == me
            });
            Ok(())
        });
        let finished = match rescaled {
            Some(finished) => finished,
            None => cx.restore_chain(|links, from| {
                restored = Some(decode_framed(links, from, &hop, &side_codec)?);
                Ok(())
            }),
        };
        let mut me = EventTimeOp {
            clock: EventClock {
                waiting: Pending::new(),
                timers: Timers::default(),
                wm_in: 0,
                wm_out: 0,
                now: 0,
                arrivals: 0,
            },
            hop,
            side_codec,
            down,
            ctx: Rc::clone(&cx.ctx),
            slot: cx.slot,
            probe: cx.probe,
            seen: 0,
            emitted: 0,
            finished,
            followed_side: None,
        };
        if let Some((keyed, side)) = restored {
            me.hop.keys_mut().state = keyed;
            me.install(side);
        }
        me
    }

    /// Installs a restored side state over the keyed state in place: the
    /// waiting records, the watermarks, the timers indexed anew.
    fn install(&mut self, side: WindowSide<T>) {
        self.clock = EventClock {
            waiting: Pending::new(),
            timers: Timers::default(),
            wm_in: side.wm_in,
            wm_out: side.wm_out,
            now: side.now,
            arrivals: side.arrivals,
        };
        for w in side.waiting {
            self.clock.waiting.push(w);
        }
        self.hop.reindex(side.ptime, &mut self.clock);
        if self.clock.wm_out > 0 && !self.finished {
            // Downstream learns the watermark again before any output.
            self.ctx.lane_wm.set(self.clock.wm_out);
            self.down.watermark(self.clock.wm_out);
        }
    }

    /// Takes every waiting record released below `upto`, then fires the
    /// timers at or below it.
    fn advance(&mut self, upto: u64) {
        while self.clock.waiting.first_release().is_some_and(|r| r < upto) {
            let w = self.clock.waiting.pop().expect("peeked");
            self.take(w);
            self.ctx.tick();
        }
        self.fire_until(upto);
    }

    /// Fires every timer at or below `t` and moves the virtual time there.
    fn fire_until(&mut self, t: u64) {
        let (hop, clock, mut out) = parts!(self);
        while let Some((at, seqs)) = clock.timers.take_first(t) {
            clock.now = clock.now.max(at);
            for seq in seqs {
                hop.on_timer(clock, at, seq, &mut out);
                // Firing many timers takes a while: each is progress.
                out.ctx.tick();
            }
        }
        clock.now = clock.now.max(t);
    }

    /// Takes one released record (see the module docs).
    fn take(&mut self, w: Waiting<T>) {
        let v = w.release;
        self.fire_until(v);
        let (hop, clock, mut out) = parts!(self);
        hop.take(clock, w, v, &mut out);
    }

    /// Forwards the operator's watermark after an advance.
    fn forward(&mut self, wm: u64) {
        if wm > self.clock.wm_out {
            self.clock.wm_out = wm;
            self.down.watermark(wm);
        }
    }
}

/// An event-time hop's state as one capture: its keyed state frozen
/// (archived later, in steps), its side state archived now.
fn capture<T: Clone, H: Hop<T>>(
    c: &EventClock<T>,
    hop: &H,
    side_codec: &SideCodec<T>,
    how: crate::state::delta::CaptureFor,
) -> Result<StateCapture, CheckpointError> {
    let side = WindowSide {
        waiting: c.waiting.sorted(),
        wm_in: c.wm_in,
        wm_out: c.wm_out,
        now: c.now,
        arrivals: c.arrivals,
        ptime: hop.ptime(),
    };
    let side = (side_codec.snapshot)(&side)?;
    let keys = hop.keys();
    Ok(frame::capture(
        vec![
            (KEYED, Some((keys.codec.capture_for)(&keys.state, how)?)),
            (SIDE, Some(StateCapture::Bytes(side))),
        ],
        2,
        true,
    )
    .expect("a framed capture"))
}

/// Merges an old instance's side state into `into`, for an instance
/// restored at another parallelism: the waiting records it now owns
/// (`mine`), and the watermarks and virtual time of the slowest old
/// instance — none of its timers or records is then released early; a key
/// of a faster one finds its timers up to that one's watermark already
/// fired, and takes again only what is released after.
fn merge_side<T>(into: &mut WindowSide<T>, side: WindowSide<T>, mine: impl Fn(&T) -> bool) {
    into.waiting
        .extend(side.waiting.into_iter().filter(|w| mine(&w.value)));
    into.wm_in = into.wm_in.min(side.wm_in);
    into.wm_out = into.wm_out.min(side.wm_out);
    into.now = into.now.min(side.now);
    into.arrivals = into.arrivals.max(side.arrivals);
    into.ptime = into.ptime.max(side.ptime);
}

/// An event-time operator's state as a checkpoint holds it: the keyed part
/// and the side (waiting records, watermarks, clocks).
type Decoded<K, S, T> = (KeyedState<K, S>, WindowSide<T>);

/// An event-time operator's archive: its keyed state and its side state.
///
/// From a chain ([`crate::state::delta`]): each link frames its keyed part
/// (the last whole one, then deltas) and its side state (whole in every
/// link: the newest is the one restored).
fn decode_framed<T, H: Hop<T>>(
    links: &[&[u8]],
    from: Option<u64>,
    hop: &H,
    side_codec: &SideCodec<T>,
) -> Result<Decoded<H::Key, H::State, T>, CheckpointError> {
    let bad = CheckpointError::ChainFrame;
    let mut keyed = Vec::with_capacity(links.len());
    let mut side = None;
    for payload in links {
        let mut parts = frame::split(payload.to_vec(), &[KEYED, SIDE]).map_err(bad)?;
        keyed.push(
            parts.remove(&KEYED).ok_or_else(|| {
                bad("an event-time operator's state without its keyed part".into())
            })?,
        );
        side = Some(parts.remove(&SIDE).ok_or_else(|| {
            bad("an event-time operator's state without its waiting records".into())
        })?);
    }
    let side = side.ok_or_else(|| bad("an empty chain".into()))?;
    let keyed: Vec<&[u8]> = keyed.iter().map(Vec::as_slice).collect();
    Ok((
        (hop.keys().codec.restore_chain)(&keyed, from)?,
        (side_codec.restore)(&side)?,
    ))
}

impl<T: Clone + 'static, H: Hop<T>> Collector<T> for EventTimeOp<T, H> {
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
        let on_time = rec.event_time >= lane_wm;
        self.clock.arrivals += 1;
        let w = Waiting {
            release,
            id: rec.id.0,
            lane,
            arrival: self.clock.arrivals,
            event_time: rec.event_time,
            ingest: rec.ingest,
            value: rec.value,
        };
        if on_time && self.hop.takes_on_time_at_once() {
            // Taken now, at the operator's time (see the hop).
            let now = self.clock.now;
            let (hop, clock, mut out) = parts!(self);
            hop.take(clock, w, now, &mut out);
            self.hop.compact(&mut self.clock);
        } else if release < self.clock.wm_in {
            // Below the operator's watermark only from a lane that was
            // idle while the others moved on: taken at once, at the
            // operator's time.
            let now = self.clock.now;
            self.take(Waiting { release: now, ..w });
            self.hop.compact(&mut self.clock);
        } else {
            self.clock.waiting.push(w);
        }
        self.ctx.leave(prev);
    }

    fn flush(&mut self) {
        self.slot.publish(self.seen, self.emitted);
        self.down.flush();
    }

    fn watermark(&mut self, wm: u64) {
        if wm <= self.clock.wm_in {
            return;
        }
        self.clock.wm_in = wm;
        self.slot.watermark(wm);
        let prev = self.ctx.enter(self.slot.op);
        self.advance(wm);
        self.hop.compact(&mut self.clock);
        self.ctx.leave(prev);
        self.forward(wm);
    }

    fn idle(&mut self) {
        self.down.idle();
    }

    fn processing_time(&mut self, now: u64) {
        if !self.finished {
            let (hop, clock, mut out) = parts!(self);
            hop.processing_time(now, clock, &mut out);
        }
        self.hop.compact(&mut self.clock);
    }

    fn end(&mut self) {
        self.ctx.record.set(None);
        if !self.finished {
            // The end of every input: a watermark past every event time.
            self.clock.wm_in = u64::MAX;
            let prev = self.ctx.enter(self.slot.op);
            self.advance(u64::MAX);
            let (hop, _, mut out) = parts!(self);
            hop.end_of_input(&mut out);
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
        let how = self.ctx.point_capture.get();
        let state = capture(&self.clock, &self.hop, &self.side_codec, how)?;
        parts.push((self.slot.op, Some(state)));
        self.down.snapshot_chain(parts)
    }

    fn follow_point(
        &mut self,
        parts: &mut crate::operator::FollowParts,
    ) -> Result<bool, CheckpointError> {
        if let Some(payload) = parts.remove(&self.slot.op) {
            let bad = CheckpointError::ChainFrame;
            let mut p = frame::split(payload, &[KEYED, SIDE]).map_err(bad)?;
            let keyed = p.remove(&KEYED).ok_or_else(|| {
                bad("an event-time operator's state without its keyed part".into())
            })?;
            let side = p.remove(&SIDE).ok_or_else(|| {
                bad("an event-time operator's state without its waiting records".into())
            })?;
            let keys = self.hop.keys_mut();
            (keys.codec.follow)(&mut keys.state, &keyed)?;
            self.followed_side = Some(side);
        }
        self.down.follow_point(parts)
    }

    fn install_followed(&mut self) {
        if let Some(side) = self.followed_side.take() {
            match (self.side_codec.restore)(&side) {
                Ok(side) => self.install(side),
                Err(source) => self.ctx.fail(crate::error::JobError::Restore {
                    operator: self.ctx.shared.names[self.slot.op].to_string(),
                    instance: self.ctx.instance,
                    source,
                }),
            }
        }
        self.down.install_followed();
    }

    fn barrier(&mut self, id: u64) {
        let EventTimeOp {
            clock,
            hop,
            side_codec,
            ctx,
            slot,
            down,
            ..
        } = self;
        let how = ctx.capture_for(id);
        let capture = || capture(clock, &*hop, side_codec, how).map(Some);
        super::pass_barrier(ctx, slot.op, id, capture, &mut **down);
    }
}
