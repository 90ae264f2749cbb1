//! What a task publishes to the job's metrics, outside its data path:
//! each operator instance's counts and watermark ([`OpSlot`]), and the
//! task's busy and backpressured time and barrier alignments
//! ([`TaskCtx::account`], [`TaskCtx::aligned`]).

use super::{Nanos, TaskCtx};
use crate::runtime::JobShared;
use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Where one operator instance publishes its counters.
#[derive(Clone)]
pub(crate) struct OpSlot {
    pub(crate) op: usize,
    pub(crate) instance: usize,
    pub(crate) shared: Arc<JobShared>,
    /// The counts published last.
    published: Cell<(u64, u64)>,
    /// The task's `muted` flag: a standby's computation is not counted.
    muted: Rc<Cell<bool>>,
}

impl OpSlot {
    pub(crate) fn new(op: usize, instance: usize, ctx: &TaskCtx) -> Self {
        ctx.member(op);
        OpSlot {
            op,
            instance,
            shared: Arc::clone(&ctx.shared),
            published: Cell::new((0, 0)),
            muted: Rc::clone(&ctx.muted),
        }
    }

    /// Publishes an operator instance's counts (records seen, emitted) so
    /// far. What it adds to the job's counters is what it did since its
    /// last publication, so the counters go on across restarts and
    /// takeovers (a new instance starts its own counts at zero): they count
    /// the work done, a replayed record again.
    #[inline]
    pub(crate) fn publish(&self, records: u64, emitted: u64) {
        let c = &self.shared.metrics.counters[self.op][self.instance];
        let (r0, e0) = self.published.get();
        if self.muted.get() {
            // A hot standby's work: not the job's (yet).
            self.published.set((records.max(r0), emitted.max(e0)));
            return;
        }
        if records > r0 {
            c.records.fetch_add(records - r0, Ordering::Relaxed);
        }
        if emitted > e0 {
            c.emitted.fetch_add(emitted - e0, Ordering::Relaxed);
        }
        self.published.set((records.max(r0), emitted.max(e0)));
    }

    /// Publishes the instance's input watermark (a source's: its own).
    #[inline]
    pub(crate) fn watermark(&self, wm: u64) {
        if !self.muted.get() {
            let c = &self.shared.metrics.counters[self.op][self.instance];
            c.watermark.store(wm, Ordering::Relaxed);
        }
    }

    /// Publishes a source partition's position: records produced, each
    /// counted once (a restored partition resumes from its checkpoint).
    #[inline]
    pub(crate) fn publish_position(&self, position: u64) {
        let c = &self.shared.metrics.counters[self.op][self.instance];
        c.records.store(position, Ordering::Relaxed);
        c.emitted.store(position, Ordering::Relaxed);
    }
}

/// A task's time since it last published it ([`TaskCtx::account`]).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct TaskTime {
    busy: u64,
    backpressured: u64,
    /// When its output blocked (engine ns; 0: not blocked).
    blocked_since: u64,
    published_at: u64,
}

/// How often a task publishes its busy and backpressured time (the
/// counters a live reader takes rates of).
const TIME_PUBLISH_NS: u64 = 10_000_000;

impl TaskCtx {
    fn member(&self, op: usize) {
        let mut m = self.members.borrow_mut();
        if !m.contains(&op) {
            m.push(op);
        }
    }

    /// A poll from `started` to `now` (engine ns) ended; `worked`: it did
    /// something. Busy time is the polls that worked; backpressured time
    /// the gaps between polls that began with the output blocked (from
    /// the end of the poll that left it blocked to the start of the next)
    /// — the two never overlap. Published to the chain's operators every
    /// [`TIME_PUBLISH_NS`] (a standby's own work is not theirs).
    pub(crate) fn account(&self, started: Nanos, now: Nanos, worked: bool) {
        let mut t = self.time.get();
        if t.blocked_since != 0 {
            t.backpressured += started.saturating_sub(t.blocked_since);
            t.blocked_since = 0;
        }
        if worked {
            t.busy += now.saturating_sub(started);
        }
        if self.blocked.get() > 0 {
            t.blocked_since = now.max(1);
        }
        if now.saturating_sub(t.published_at) >= TIME_PUBLISH_NS {
            if !self.muted.get() && (t.busy | t.backpressured) != 0 {
                for &op in self.members.borrow().iter() {
                    let c = &self.shared.metrics.counters[op][self.instance];
                    c.busy_ns.fetch_add(t.busy, Ordering::Relaxed);
                    c.backpressured_ns
                        .fetch_add(t.backpressured, Ordering::Relaxed);
                }
            }
            t.busy = 0;
            t.backpressured = 0;
            t.published_at = now;
        }
        self.time.set(t);
    }

    /// The task's input aligned a checkpoint barrier in `ns` nanoseconds
    /// (published as its head's).
    pub(crate) fn aligned(&self, ns: u64) {
        if self.muted.get() {
            return;
        }
        let c = &self.shared.metrics.counters[self.head][self.instance];
        c.alignments.fetch_add(1, Ordering::Relaxed);
        c.alignment_ns.fetch_add(ns, Ordering::Relaxed);
        c.alignment_last_ns.store(ns, Ordering::Relaxed);
    }
}
