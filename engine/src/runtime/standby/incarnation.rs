//! The port of one incarnation of a standby group: a standby until it
//! claims an epoch, then the primary (the protocol is in [`super::group`]).
//!
//! Both read the group's buffer queues through the incarnation's own reader
//! slot, one determinant-log entry (one chunk) at a time: the primary
//! appends entries when it reaches the log's end, a new primary and a hot
//! standby follow the entries already there.
//!
//! This module has the incarnation's state, its phases and the primary's
//! poll and end; [`chunks`] the chunk loop; [`next`] what comes next (the
//! logged entry, or the chunk or tick a primary chooses and logs);
//! [`point`] the primary's recovery points; [`standby`] the standby's side
//! and the takeover; [`hot_backoff`] how long a hot standby that fell
//! behind waits.

use super::entry::ChainBuild;
use super::group::{Doing, Group, NONE};
use crate::checkpoint::StateCapture;
use crate::error::JobError;
use crate::operator::Collector;
use crate::record::{Nanos, Record};
use crate::runtime::align::{AlignTimer, Alignment};
use crate::runtime::graph::downcast;
use crate::runtime::lanes::LaneClock;
use crate::runtime::task::{Poll, Port, TaskCtx};
use crate::standby::codec::Codec;
use crate::standby::decide::Detector;
use crate::standby::detlog::Det;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;

mod chunks;
mod hot_backoff;
mod next;
mod point;
pub(crate) mod source_lane;
mod standby;

use hot_backoff::HotBackoff;
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
    /// Its state is a delta over this point's (the capture's id, see
    /// `crate::state::delta::POINT`); `None`: whole.
    base: Option<u64>,
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
    /// How long the primary's alignments take.
    align_timer: AlignTimer,
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
    /// A takeover from a followed copy: the new primary's first point
    /// (whole) waits until the replay is done (see `take_over_followed`).
    point_after_replay: bool,
    detector: Detector,
    /// A warm standby's chain follows the recovery points: built from a
    /// whole one, brought to each newer one by its delta (see
    /// [`crate::state::delta`]), at the point `seq` names.
    followed: bool,
    /// The chain cannot follow (an operator's state restores only whole):
    /// the standby restores at the takeover, as without following.
    unfollowable: bool,
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
            align_timer: AlignTimer::default(),
            clock: LaneClock::new(lanes),
            barrier: 0,
            attached: false,
            rr: 0,
            buf: Vec::with_capacity(CHUNK as usize),
            reclaim: None,
            pending: None,
            next_point: 0,
            takeover: None,
            followed: false,
            unfollowable: false,
            watch: None,
            backlog: vec![0; lanes],
            caught_up: true,
            point_after_replay: false,
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
        if std::mem::take(&mut self.followed) {
            // The primary's next point is whole again.
            let _g = self.group.lock();
            self.group.applied.store(0, Ordering::Release);
        }
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
