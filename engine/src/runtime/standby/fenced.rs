//! A consumer's input from standby groups: reads the ring of each group's
//! current primary, follows its marks with a [`Tracker`], and after a
//! takeover drops what the new primary replays of what it already has —
//! checking that the replay repeats it exactly.
//!
//! Checkpoint barriers are aligned over the groups as over rings
//! ([`crate::runtime::align`]). A new primary repeats the barriers of the
//! chunks it replays; the alignment takes a repeated barrier as stale, so
//! barriers need no deduplication of their own.

use super::group::{Group, NONE};
use super::run::WATCH_IDS;
use crate::error::JobError;
use crate::operator::Collector;
use crate::queue::spsc::Consumer;
use crate::record::TupleId;
use crate::runtime::align::{AlignTimer, Alignment};
use crate::runtime::channel::{forward_time, Msg};
use crate::runtime::graph::{downcast, AnyBox};
use crate::runtime::lanes::LaneClock;
use crate::runtime::task::{Gate, Poll, Port, TaskCtx};
use crate::standby::decide::{Closing, Diverged, Tracker};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;

type BoxCollector<T> = Box<dyn Collector<T>>;

/// Messages taken from a ring per step.
const CHUNK: usize = 64;

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

/// What one read of a source's ring found.
struct Read {
    /// Messages taken.
    k: usize,
    got_end: bool,
    barrier: Option<u64>,
    /// A takeover's first record passed on.
    accepted: Option<TupleId>,
    err: Option<Diverged>,
}

/// A consumer's input from standby groups (one per upstream instance).
pub(crate) struct FencedInput<U> {
    srcs: Vec<Source<U>>,
    live: usize,
    align: Alignment,
    timer: AlignTimer,
    /// Event time over the groups (a new primary's replay repeats
    /// watermarks; a lane's watermark never goes back).
    clock: LaneClock,
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
            align: Alignment::new(srcs.len()),
            timer: AlignTimer::default(),
            clock: LaneClock::new(srcs.len()),
            srcs,
            next: 0,
            target: downcast::<BoxCollector<U>>(target, "fenced input target"),
            gate,
            ctx: Rc::clone(ctx),
        }
    }

    /// Follows the group's epoch: once the new primary is ready, stops
    /// reading the old one's ring (keeping its cut) and takes the new one's.
    fn follow(s: &mut Source<U>) {
        let cur = s.group.live.current();
        if cur == s.epoch && s.ring.is_some() {
            return;
        }
        let mut g = s.group.lock();
        if cur != s.epoch {
            if g.primary_epoch != cur || !g.ready {
                // Meanwhile the old ring is read on: what it still holds
                // need not be replayed.
                return;
            }
            s.tracker.take_cut();
            s.epoch = cur;
            s.ring = None;
            s.takeover = if cur > 1 { g.takeover } else { None };
            s.watch = WATCH_IDS;
        }
        if s.ring.is_none() && g.primary_epoch == s.epoch && g.ready {
            let key = (s.ci, g.primary);
            if let Some(r) = g.rings.remove(&key) {
                s.ring = Some(crate::runtime::graph::downcast_send::<Consumer<Msg<U>>>(
                    r,
                    "standby ring",
                ));
            }
        }
    }

    /// Takes up to `take` messages from source `i`'s ring into the chain
    /// (`None`: it has no ring now, or ended).
    fn read(&mut self, i: usize, take: usize) -> Option<Read> {
        let s = &mut self.srcs[i];
        let ring = s.ring.as_mut().filter(|_| !s.ended)?;
        let target = &mut self.target;
        let clock = &mut self.clock;
        let ctx = &self.ctx;
        ctx.lane.set(i as u32);
        ctx.lane_wm.set(clock.lane(i));
        let tracker = &mut s.tracker;
        let consumer = &s.group.consumers[s.ci];
        let mut got_end = false;
        let mut barrier = None;
        let mut accepted: Option<TupleId> = None;
        let mut err: Option<Diverged> = None;
        let watching = s.watch > 0 && s.takeover.is_some();
        let k = ring.pop_batch_until(take, |m| {
            let r = match m {
                Msg::Watermark(wm) => {
                    let f = clock.on_watermark(i, wm);
                    ctx.lane_wm.set(clock.lane(i));
                    forward_time(f, &mut **target);
                    Ok(())
                }
                Msg::Idle => {
                    let f = clock.on_idle(i);
                    forward_time(f, &mut **target);
                    Ok(())
                }
                Msg::Data(r) => tracker.on_data().map(|pass| {
                    // A replayed record is the lane speaking too.
                    clock.on_data(i);
                    if pass {
                        if watching && accepted.is_none() {
                            accepted = Some(r.id);
                        }
                        target.collect(r);
                    }
                }),
                Msg::Resume(seq) => tracker.on_resume(seq),
                Msg::Chunk(m) => tracker
                    .on_closing(Closing {
                        seq: m.id.seq,
                        lane: m.id.lane as usize,
                        first: m.id.first,
                        n: m.id.n as u64,
                        count: m.count as u64,
                    })
                    .map(|closed| {
                        if let Some(c) = closed {
                            consumer.acked[c.lane].store(c.acked, Ordering::Release);
                            consumer.acked_seq.store(c.next_seq, Ordering::Release);
                        }
                    }),
                Msg::End => {
                    got_end = true;
                    return false;
                }
                Msg::Barrier(id) => {
                    barrier = Some(id);
                    return false;
                }
            };
            match r {
                Ok(()) => true,
                Err(d) => {
                    err = Some(d);
                    false
                }
            }
        });
        if k > 0 {
            wake_primary(&s.group, &self.ctx);
        }
        Some(Read {
            k,
            got_end,
            barrier,
            accepted,
            err,
        })
    }

    /// What source `i`'s read leaves to do: a takeover's first records
    /// noted, the source's end, a barrier's alignment; `Err`: the stream
    /// diverged.
    fn settle(&mut self, i: usize, read: Read) -> Result<(), Diverged> {
        let Read {
            got_end,
            barrier,
            accepted,
            mut err,
            ..
        } = read;
        let s = &mut self.srcs[i];
        let consumer = &s.group.consumers[s.ci];
        if let (Some(id), Some(t)) = (accepted, s.takeover) {
            s.watch -= 1;
            let log = &self.ctx.shared.standby.as_ref().expect("standby run").log;
            log.accepted(t, id, self.ctx.clock.now());
        }
        if got_end {
            if let Err(d) = s.tracker.on_end() {
                err = Some(d);
            } else {
                consumer.ended.store(true, Ordering::Release);
                // A new primary's sender may be held on this consumer's
                // ring: it lets go of it now.
                wake_primary(&s.group, &self.ctx);
                s.ended = true;
                self.live -= 1;
                if self.live > 0 {
                    let f = self.clock.on_end(i);
                    forward_time(f, &mut *self.target);
                }
            }
        }
        if barrier.is_some() || got_end {
            let ended: Vec<bool> = self.srcs.iter().map(|s| s.ended).collect();
            let forward = match barrier {
                Some(id) => {
                    self.timer.on_barrier(&self.align, id, self.ctx.clock.now());
                    self.align.on_barrier(i, id, &ended)
                }
                None => self.align.try_complete(&ended),
            };
            if let Some(id) = forward {
                if let Some(ns) = self.timer.forwarded(id, self.ctx.clock.now()) {
                    self.ctx.aligned(ns);
                }
                self.target.barrier(id);
            }
        }
        match err {
            Some(d) => Err(d),
            None => Ok(()),
        }
    }

    fn diverged(&self, s: usize, d: Diverged) {
        let s = &self.srcs[s];
        self.ctx.fail(JobError::StandbyDiverged {
            operator: s.group.name.to_string(),
            instance: s.group.instance,
            consumer: format!(
                "{}[{}]",
                self.ctx.shared.names[self.ctx.current_op()],
                self.ctx.instance
            ),
            reason: d.to_string(),
        });
    }
}

impl<U: 'static> Port for FencedInput<U> {
    fn processing_time(&mut self, now: crate::record::Nanos) {
        if self.live > 0 {
            self.target.processing_time(now);
        }
    }

    fn poll(&mut self, budget: usize) -> Poll {
        if self.live == 0 {
            return Poll::Done;
        }
        for s in &mut self.srcs {
            if !s.ended {
                Self::follow(s);
                s.tracker
                    .trim(s.group.floor_seq(s.epoch, s.tracker.streaming()));
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
            if self.ctx.exactly_once() && self.align.holds(i) {
                idle_rounds += 1;
                continue;
            }
            let Some(read) = self.read(i, CHUNK.min(budget - moved)) else {
                idle_rounds += 1;
                continue;
            };
            let k = read.k;
            moved += k;
            if let Err(d) = self.settle(i, read) {
                self.diverged(i, d);
                return Poll::Progress;
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
            "fenced input (blocked {}, gate {:?}, holds {:?}): {}",
            self.ctx.blocked.get(),
            self.gate.as_ref().map(|g| g.is_open()),
            self.align,
            v.join("; ")
        )
    }
}

/// Wakes the worker of `group`'s primary (its output may wait for ring
/// space, or for this consumer to end).
fn wake_primary(group: &Group, ctx: &TaskCtx) {
    let w = group.reader_workers[0].load(Ordering::Acquire);
    if w != NONE {
        ctx.shared.signals[w].notify();
    }
}
