//! A standby group's incarnation as a task's role ([`TaskRole`],
//! [`RoleWatch`], declared by the core in `runtime::task`): the primary's
//! heartbeat between polls, the fencing of a superseded primary, a
//! process-isolated incarnation's child watched and its replies handed on,
//! and a failure answered by the group (a takeover) instead of the attempt.

use super::group::Group;
use super::remote::Link;
use crate::error::JobError;
use crate::record::Nanos;
use crate::runtime::task::Blame;
use crate::runtime::task::{RoleWatch, TaskCtx, TaskRole};
use crate::standby::decide::{base_timeout, Detector, Watched};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Bits of the progress word that count steps (the epoch's low 24 bits
/// are above them).
const STEP_BITS: u32 = 40;

impl Group {
    /// The progress word of the primary of `epoch` at step `steps`.
    fn progress_word(epoch: u64, steps: u64) -> u64 {
        (epoch & 0xff_ffff) << STEP_BITS | (steps & ((1 << STEP_BITS) - 1))
    }

    /// The current primary's progress as the standby of `epoch` reads it:
    /// 0 unless the word is that epoch's (a zombie's counting is no sign
    /// of the current primary's life).
    pub(crate) fn progress_of(&self, epoch: u64) -> u64 {
        let p = self.progress.load(Ordering::Acquire);
        if p >> STEP_BITS == epoch & 0xff_ffff {
            p
        } else {
            0
        }
    }
}

impl RoleWatch for Group {
    #[inline]
    fn progress(&self, epoch: u64, steps: u64) {
        self.progress
            .store(Self::progress_word(epoch, steps), Ordering::Relaxed);
    }

    fn over(&self, epoch: u64) -> bool {
        self.live.current() != epoch
    }

    fn primary_panicked(
        &self,
        shared: &crate::runtime::JobShared,
        epoch: u64,
        e: JobError,
        blame: Blame,
        now: Nanos,
    ) {
        self.primary_failed(shared, epoch, e, blame, now, false);
    }
}

/// Incarnation `inc` of a standby group, as its task's role.
pub(crate) struct Incarnation {
    group: Arc<Group>,
    inc: u64,
    /// A primary's next heartbeat (engine nanoseconds).
    next_beat: u64,
    /// Process isolation: the incarnation's child, looked at between
    /// polls (a child can die while nothing is asked of it), and when.
    child: Option<Rc<RefCell<Link>>>,
    next_child_check: u64,
    /// The watch of the child's silence (the engine's one stall rule).
    child_watch: Detector,
}

impl Incarnation {
    pub(crate) fn new(group: Arc<Group>, inc: u64, child: Option<Rc<RefCell<Link>>>) -> Self {
        Incarnation {
            inc,
            next_beat: 0,
            child_watch: Detector::new(base_timeout(Watched::Child, group.timeout_ns)),
            group,
            child,
            next_child_check: 0,
        }
    }

    /// Process isolation: a child that died fails its incarnation here, as
    /// a panic of the operator would (a standby's is replaced, a primary's
    /// taken over); a standby's child that became the primary's says so
    /// in its status file. Once a millisecond.
    #[cold]
    fn watch_child(&mut self, ctx: &TaskCtx, now: Nanos) {
        self.next_child_check = now + 1_000_000;
        let Some(link) = &self.child else { return };
        let Ok(mut l) = link.try_borrow_mut() else {
            return;
        };
        if ctx.epoch.get() != 0 {
            l.now_primary();
        }
        let watch = &mut self.child_watch;
        if let Err(e) = l.check_alive().and_then(|()| l.kill_if_stuck(ctx, watch)) {
            drop(l);
            super::remote::fail(e);
        }
    }

    /// Process isolation: hands on what the child answered since the last
    /// poll (its failure fails the incarnation).
    fn take_replies(&mut self, ctx: &TaskCtx) {
        let Some(link) = &self.child else { return };
        let Ok(mut l) = link.try_borrow_mut() else {
            return;
        };
        if !l.outstanding() {
            return;
        }
        if let Err(e) = l.post(ctx) {
            drop(l);
            super::remote::fail(e);
        }
    }

    /// The incarnation's child shows progress (see `Link::responsive`).
    fn child_responsive(&self, now: Nanos, timeout_ns: u64) -> bool {
        self.child.as_ref().is_none_or(|l| {
            l.try_borrow()
                .map_or(true, |l| l.responsive(now, timeout_ns))
        })
    }
}

impl TaskRole for Incarnation {
    fn before_poll(&mut self, ctx: &TaskCtx, now: Nanos) -> bool {
        let g = &self.group;
        let e = ctx.epoch.get();
        if e != 0 {
            if g.live.current() != e {
                return false;
            }
            if now >= self.next_beat
                && ctx.shared.beating(ctx.worker(), now)
                && self.child_responsive(now, g.timeout_ns)
            {
                // Every poll is a sign of life — also a poll that finds
                // the output blocked by a slow consumer. Written every
                // 1/16 of the timeout, not every poll: the standby reads
                // this cache line at every poll of its own.
                self.next_beat = now + (g.timeout_ns / 16).max(10_000);
                let _ = g.live.beat(e, now);
            }
        }
        if ctx.fenced.get() {
            return true;
        }
        if now >= self.next_child_check {
            self.watch_child(ctx, now);
        }
        self.take_replies(ctx);
        true
    }

    /// Process isolation: while the child has not answered, look again
    /// soon (the worker runs its other tasks, or sleeps, meanwhile); while
    /// it lives, at the next look at the child at the latest — a child that
    /// dies while nothing is asked of it (an idle primary, a standby between
    /// points) must fail its incarnation all the same, or a job whose every
    /// task waits would wait for ever for a process that is gone.
    fn look_again(&self, now: Nanos) -> Option<Nanos> {
        let l = self.child.as_ref()?.try_borrow().ok()?;
        if l.outstanding() {
            Some(now + 20_000)
        } else if l.alive() {
            Some(self.next_child_check.max(now + 1))
        } else {
            None
        }
    }

    fn failed(&self, ctx: &TaskCtx, e: JobError, blame: Blame, now: Nanos) {
        let epoch = ctx.epoch.get();
        self.group
            .incarnation_failed(&ctx.shared, self.inc, epoch, e, blame, now);
    }

    /// A group's primary that finished — the first one or a standby that
    /// took over — ends the plan's task of its instance; a standby that
    /// never took over and a fenced primary end nothing.
    fn ends(&self, ctx: &TaskCtx) -> Option<(usize, usize)> {
        (ctx.epoch.get() != 0 && !ctx.fenced.get())
            .then_some((self.group.node, self.group.instance))
    }
}
