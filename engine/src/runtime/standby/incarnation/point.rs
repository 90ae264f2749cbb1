//! A primary's recovery points: taken at the interval (or when a queue
//! asks), built a slice per poll, published once every consumer has
//! acknowledged the chunks before them.
//!
//! Building a point of a stateful chain means archiving its state and
//! copying the archive into the group's snapshot exchange — milliseconds
//! for a large keyed state. None of it may stop the primary's core for
//! long: the state is frozen at the point (a count and an epoch),
//! then archived ([`ArchiveSteps`]) and copied ([`Staging`]) in slices of
//! about [`SLICE`] of the primary's polls, with its records in between.
//! The point stands for the chain as it was at the freeze, whatever the
//! primary processes meanwhile.
//!
//! Every wait here ends without more input: a point under way makes the
//! primary's poll report progress, so its worker keeps polling it (never
//! parks), and each poll does one more slice; acknowledgements come from
//! consumers' polls of outputs already sent.

use super::{Incarnation, Pending};
use crate::checkpoint::{ArchiveSteps, SnapshotBytes, StateCapture};
use crate::record::Nanos;
use crate::runtime::standby::group::{Doing, Point};
use crate::runtime::task::TaskCtx;
use crate::standby::codec::Codec;
use crate::standby::exchange::{Staged, Staging};
use crate::state::delta::{CaptureFor, Incremental, POINT};
use std::rc::Rc;
use std::sync::atomic::Ordering;

/// How long one poll may spend building a point. Every record that arrives
/// meanwhile waits for the slice: measured on the 2-core reference VM with
/// a warm standby on the paper's keyed stage (50 k keys an instance, a
/// point every 200 ms) at 200 k records/s, 20 µs slices gave a p99 of
/// 35–39 µs, 5 µs slices 15–20 µs (one sitting; points every 2 s: 12–19
/// µs), at the same CPU time.
pub(super) const SLICE: Nanos = 5_000;
/// Entries archived in the first step of a point; each later step takes as
/// many as fit about a third of [`SLICE`], by the time the last one took
/// (every step has a fixed cost of about half a microsecond: steps of 64
/// entries archived the paper's 50 k keys in 1.7 ms, one step of all of
/// them in 0.9 ms).
const STEP_ENTRIES: usize = 64;
/// Bytes copied between two looks at the clock (1–3 µs).
const STEP_BYTES: usize = 16 << 10;

/// A point's state on its way into the exchange.
pub(super) enum Build {
    /// A stateless chain: nothing to build.
    Stateless,
    /// The frozen state, being archived, and the entries of the next step.
    Archiving(Box<dyn ArchiveSteps>, usize),
    /// The archive, being copied into a reserved slot of the exchange.
    Copying(Box<(SnapshotBytes, Staging)>),
    /// In its slot, to be published with the point.
    Ready(Staged),
}

impl Build {
    fn ready(&self) -> bool {
        matches!(self, Build::Stateless | Build::Ready(_))
    }
}

/// What one slice of building came to.
enum Slice {
    /// Go on at the next poll (or: built).
    Going,
    /// Every slot of the exchange is busy: the point is skipped.
    Skip,
    /// A failure, said in words.
    Failed(String),
}

impl<T: crate::Data + Codec + Sync> Incarnation<T> {
    /// Takes, builds and publishes recovery points (see the module docs).
    pub(super) fn points(&mut self, now: Nanos, epoch: u64) {
        if self.live == 0 {
            // Never a point at or past the end: the end-of-stream outputs
            // must stay replayable.
            return;
        }
        if self.pending.is_none() && !self.take_point(now) {
            return;
        }
        if self.building() {
            self.doing(Doing::Snapshot);
            let p = self.pending.as_mut().expect("building");
            // One step of a slice may grow or finish a large archive
            // (milliseconds on a busy host): a long step, not a stall.
            let ctx = &self.ctx;
            match ctx.long(|| build_slice(&self.group, &mut p.build, &mut p.base, p.seq, ctx)) {
                Slice::Going => {}
                Slice::Skip => {
                    self.pending = None;
                    self.group.base_in_flight.store(0, Ordering::Release);
                    return;
                }
                Slice::Failed(e) => {
                    self.pending = None;
                    self.group.base_in_flight.store(0, Ordering::Release);
                    self.fail(e);
                    return;
                }
            }
        }
        let Some(p) = &self.pending else {
            return;
        };
        if p.build.ready() && self.group.acked_min_seq() >= p.seq {
            self.doing(Doing::Publishing);
            let p = self.pending.take().expect("checked");
            let state = match p.build {
                Build::Ready(staged) => Some(staged),
                _ => None,
            };
            let point = Point {
                seq: p.seq,
                base: p.base.map_or(0, |b| b & !POINT),
                pos: p.pos,
                xseq: 0,
                align: p.align,
                clock: p.clock,
            };
            let published = self.group.publish_point(epoch, point, state);
            if let Err(e) = published {
                self.fail(format!("publishing a recovery point: {e}"));
            }
        }
    }

    /// Whether a point is under way (its poll is progress).
    pub(super) fn building(&self) -> bool {
        self.pending.as_ref().is_some_and(|p| !p.build.ready())
    }

    /// Takes a point now if one is due: freezes the chain's state at entry
    /// `seq`. `false` if none was taken.
    fn take_point(&mut self, now: Nanos) -> bool {
        if self.point_after_replay {
            if !self.caught_up {
                return false;
            }
            self.point_after_replay = false;
        }
        let wanted = self.group.point_wanted.load(Ordering::Acquire);
        if !((now >= self.next_point || wanted)
            && self.seq > self.group.point_seq.load(Ordering::Acquire))
        {
            return false;
        }
        let stateless = self.group.stateless.load(Ordering::Acquire);
        if !wanted && !stateless && self.group.following_to.load(Ordering::Acquire) != 0 {
            // The standby is bringing its copy to the newest point: the
            // next one after it, a delta over it.
            return false;
        }
        self.group.point_wanted.store(false, Ordering::Release);
        let every = if stateless {
            self.group
                .point_every
                .min(std::time::Duration::from_millis(1))
        } else if self.group.follows && self.group.applied.load(Ordering::Acquire) != 0 {
            // The standby follows: the next point is a delta.
            self.group.delta_every.min(self.group.point_every)
        } else {
            self.group.point_every
        };
        self.next_point = now + every.as_nanos() as u64;
        let mut base = None;
        let build = if stateless {
            Build::Stateless
        } else {
            // A freeze for a keyed state (a count and an epoch); an
            // operator's own `snapshot_state` archives at once,
            // which may be long: not a stall.
            self.doing(Doing::Snapshot);
            let mut chain = self.chain.take().expect("a primary has its chain");
            let ctx = Rc::clone(&self.ctx);
            // A delta over the newest point, when the standby's copy of
            // the state is at it (see `crate::state::delta`).
            // The point the standby's copy is at, or is being brought to,
            // under the lock that standby moves under: while this point is
            // built, it stays there.
            // Without a following standby the point is whole, and the
            // state keeps no journal for it.
            if self.group.follows {
                let over = {
                    let _g = self.group.lock();
                    let g = &self.group;
                    let at = match g.following_to.load(Ordering::Acquire) {
                        0 => g.applied.load(Ordering::Acquire),
                        to => to,
                    };
                    g.base_in_flight.store(at, Ordering::Release);
                    at
                };
                ctx.point_capture.set(CaptureFor {
                    checkpoint: POINT | self.seq,
                    base: (over != 0).then_some(POINT | over),
                    policy: Incremental {
                        max_deltas: u32::MAX,
                        max_delta_ratio: f64::INFINITY,
                    },
                });
            }
            let s = ctx.long(|| self.chain_snapshot(&mut chain));
            ctx.point_capture.set(CaptureFor::whole());
            self.chain = Some(chain);
            match s {
                Some(StateCapture::Steps(steps)) => Build::Archiving(steps, STEP_ENTRIES),
                Some(StateCapture::Bytes(bytes)) => {
                    match stage(&self.group, bytes, &mut base, &ctx) {
                        Ok(Some(b)) => b,
                        Ok(None) => return false,
                        Err(e) => {
                            self.fail(e);
                            return false;
                        }
                    }
                }
                None => return false,
            }
        };
        self.pending = Some(Pending {
            base,
            seq: self.seq,
            pos: self.pos.clone(),
            align: self.align.clone(),
            clock: self.clock.clone(),
            build,
        });
        true
    }
}

/// The archive, with a slot of its size reserved (`None`: every slot is
/// busy). A long step: an archive larger than the exchange's slots makes a
/// new exchange, every block of it reserved (tens of milliseconds for a
/// large state).
fn stage(
    group: &crate::runtime::standby::group::Group,
    bytes: SnapshotBytes,
    base: &mut Option<u64>,
    ctx: &TaskCtx,
) -> Result<Option<Build>, String> {
    *base = bytes.delta_over();
    match ctx.long(|| group.stage_state(bytes.len())) {
        Ok(Some(staging)) => Ok(Some(Build::Copying(Box::new((bytes, staging))))),
        Ok(None) => Ok(None),
        Err(e) => Err(format!("reserving the snapshot exchange: {e}")),
    }
}

/// One slice of building `build` (see the module docs).
fn build_slice(
    group: &crate::runtime::standby::group::Group,
    build: &mut Build,
    base: &mut Option<u64>,
    seq: u64,
    ctx: &TaskCtx,
) -> Slice {
    let clock = &ctx.clock;
    let until = clock.now() + SLICE;
    loop {
        match build {
            Build::Stateless | Build::Ready(_) => return Slice::Going,
            Build::Archiving(steps, entries) => match timed(clock, || steps.step(*entries)) {
                (Ok(None), took) => *entries = next_step(*entries, took),
                (Ok(Some(bytes)), _) => match stage(group, bytes, base, ctx) {
                    Ok(Some(b)) => *build = b,
                    Ok(None) => return Slice::Skip,
                    Err(e) => return Slice::Failed(e),
                },
                (Err(e), _) => return Slice::Failed(format!("standby snapshot: {e}")),
            },
            Build::Copying(c) => {
                let (bytes, staging) = &mut **c;
                let at = bytes.len() - staging.remaining();
                let end = (at + STEP_BYTES).min(bytes.len());
                staging.write(&bytes.payload()[at..end]);
                if staging.remaining() == 0 {
                    let Build::Copying(c) = std::mem::replace(build, Build::Stateless) else {
                        unreachable!("matched above")
                    };
                    match c.1.finish(seq) {
                        Some(staged) => *build = Build::Ready(staged),
                        None => return Slice::Failed("standby snapshot: a short copy".into()),
                    }
                }
            }
        }
        if clock.now() >= until {
            return Slice::Going;
        }
    }
}

/// Runs `f`, and says how long it took.
fn timed<R>(clock: &crate::runtime::task::Clock, f: impl FnOnce() -> R) -> (R, Nanos) {
    let t = clock.now();
    let r = f();
    (r, clock.now().saturating_sub(t))
}

/// The entries of the next archive step, after one of `entries` took
/// `took`: about a third of a slice's worth (see [`STEP_ENTRIES`]).
fn next_step(entries: usize, took: Nanos) -> usize {
    let target = SLICE / 3;
    if took < target / 2 {
        (entries * 2).min(1 << 16)
    } else if took > target * 2 {
        (entries / 2).max(1)
    } else {
        entries
    }
}
