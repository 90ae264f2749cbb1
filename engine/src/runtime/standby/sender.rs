//! Upstream's output into the buffer queues of standby groups (dual
//! dispatch: each record is written once; the primary and a hot standby
//! both read it) — moved into the queue's typed slots (`slots.rs`), or
//! encoded into the queue where the group keeps records encoded.

use super::entry::{
    encode, encode_barrier, encode_watermark, BARRIER_ID, END_ID, IDLE_ID, KIND_END, KIND_IDLE,
    KIND_TYPED, WATERMARK_ID,
};
use super::group::{Group, NONE};
use super::slots::TypedSlots;
use crate::operator::Collector;
use crate::operator::DeadLetters;
use crate::record::Record;
use crate::runtime::channel::Route;
use crate::runtime::graph::AnyBox;
use crate::runtime::task::TaskCtx;
use crate::standby::codec::Codec;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;

type BoxCollector<T> = Box<dyn Collector<T>>;

/// Pushes between evictions.
const EVICT_EVERY: u64 = 256;

/// An entry that did not fit its queue yet.
enum Held<T> {
    Bytes(u64, Vec<u8>),
    Typed(Record<T>),
}

struct QLane<T> {
    group: Arc<Group>,
    lane: usize,
    /// The queue's typed slots (`None`: records are encoded).
    slots: Option<Arc<TypedSlots<T>>>,
    overflow: VecDeque<Held<T>>,
    unsignalled: usize,
    /// The primary's cursor, as last read.
    read: u64,
    window: u64,
}

impl<T: crate::Data + Sync> QLane<T> {
    fn queue(&self) -> &crate::standby::bq::BufferQueue {
        &self.group.queues[self.lane]
    }

    fn push(&mut self, id: u64, bytes: &[u8]) -> bool {
        self.push_with(id, |q| q.push(id, bytes).is_ok())
    }

    /// Pushes an entry that waited in the overflow; gives it back if it
    /// still does not fit.
    fn push_held(&mut self, held: Held<T>) -> Result<(), Held<T>> {
        match held {
            Held::Bytes(id, b) => {
                if self.push(id, &b) {
                    Ok(())
                } else {
                    Err(Held::Bytes(id, b))
                }
            }
            Held::Typed(rec) => self.push_typed(rec).map_err(Held::Typed),
        }
    }

    /// Moves `rec` into the queue's typed slots.
    fn push_typed(&mut self, rec: Record<T>) -> Result<(), Record<T>> {
        // Held aside for the push (no reference count touched per record).
        let slots = self.slots.take().expect("a typed lane");
        let id = rec.id.0;
        let mut rec = Some(rec);
        let pushed = self.push_with(id, |q| {
            match slots.push(q, rec.take().expect("given back"), &[KIND_TYPED]) {
                Ok(()) => true,
                Err(back) => {
                    rec = Some(back);
                    false
                }
            }
        });
        self.slots = Some(slots);
        match rec {
            Some(r) if !pushed => Err(r),
            _ => Ok(()),
        }
    }

    /// Pushes with `try_push`, evicting what the newest recovery point and
    /// the readers allow first if the queue is full. Refuses
    /// (backpressure) while the primary is `window` entries behind, as a
    /// ring of that size would: the queue holds what replay needs, not a
    /// backlog.
    fn push_with(
        &mut self,
        id: u64,
        mut try_push: impl FnMut(&crate::standby::bq::BufferQueue) -> bool,
    ) -> bool {
        let q = &self.group.queues[self.lane];
        let tail = q.tail();
        if tail.saturating_sub(self.read) >= self.window {
            let slot = self.group.primary_slot.load(Ordering::Acquire);
            self.read = q.reader_cursor(slot);
            if tail.saturating_sub(self.read) >= self.window {
                return false;
            }
        }
        let pushed = try_push(q) || {
            q.set_covered(self.group.covered(self.lane));
            q.evict();
            let ok = try_push(q);
            if !ok {
                // Full of what no recovery point covers yet: ask the
                // primary for one now rather than at its interval.
                self.group.point_wanted.store(true, Ordering::Release);
            }
            ok
        };
        if pushed && id == END_ID {
            self.group.end_pos[self.lane].store(tail, Ordering::Release);
        }
        pushed
    }

    fn notify(&mut self, ctx: &TaskCtx) {
        self.unsignalled = 0;
        for w in &self.group.reader_workers {
            let w = w.load(Ordering::Acquire);
            if w != NONE {
                ctx.shared.signals[w].notify();
            }
        }
    }
}

/// Upstream's output into the buffer queues of one or more standby groups
/// (one lane per downstream instance), routed like a ring sender. A full
/// queue keeps the entry in a per-lane overflow and raises the task's
/// `blocked`, exactly as a full ring does.
pub(crate) struct BqSender<T> {
    lanes: Vec<QLane<T>>,
    /// The largest entry every lane's queue takes (bytes).
    max_entry: usize,
    route: Route<T>,
    ctx: Rc<TaskCtx>,
    batch: usize,
    buf: Vec<u8>,
    ended: bool,
    pushes: u64,
}

impl<T: crate::Data + Codec + Sync> BqSender<T> {
    pub(crate) fn boxed(
        lanes: Vec<(Arc<Group>, usize)>,
        partitioning: &crate::runtime::graph::Partitioning,
        ctx: &Rc<TaskCtx>,
        batch: usize,
        window: usize,
    ) -> AnyBox {
        let route = Route::of(partitioning, ctx.instance, lanes.len());
        let max_entry = lanes
            .iter()
            .map(|(g, l)| g.queues[*l].config().max_entry())
            .min()
            .unwrap_or(u64::MAX) as usize;
        Box::new(Box::new(BqSender {
            max_entry,
            lanes: lanes
                .into_iter()
                .map(|(group, lane)| QLane {
                    slots: group.typed_slots::<T>(lane),
                    group,
                    lane,
                    overflow: VecDeque::new(),
                    unsignalled: 0,
                    read: 0,
                    window: window.max(2) as u64,
                })
                .collect(),
            route,
            ctx: Rc::clone(ctx),
            batch: batch.max(1),
            buf: Vec::with_capacity(256),
            ended: false,
            pushes: 0,
        }) as BoxCollector<T>)
    }
}

impl<T: crate::Data + Codec + Sync> BqSender<T> {
    fn send_bytes(&mut self, lane: usize, id: u64) {
        let l = &mut self.lanes[lane];
        if !l.overflow.is_empty() || !l.push(id, &self.buf) {
            if l.overflow.is_empty() {
                self.ctx.blocked.set(self.ctx.blocked.get() + 1);
            }
            l.overflow.push_back(Held::Bytes(id, self.buf.clone()));
            return;
        }
        self.pushed(lane);
    }

    fn send_typed(&mut self, lane: usize, rec: Record<T>) {
        let l = &mut self.lanes[lane];
        let rec = if l.overflow.is_empty() {
            match l.push_typed(rec) {
                Ok(()) => return self.pushed(lane),
                Err(r) => r,
            }
        } else {
            rec
        };
        if l.overflow.is_empty() {
            self.ctx.blocked.set(self.ctx.blocked.get() + 1);
        }
        l.overflow.push_back(Held::Typed(rec));
    }

    /// Lane `lane` took an entry: its readers' wake-up, the eviction.
    fn pushed(&mut self, lane: usize) {
        let l = &mut self.lanes[lane];
        l.unsignalled += 1;
        if l.unsignalled >= self.batch {
            l.notify(&self.ctx);
        }
        self.pushes += 1;
        if self.pushes.is_multiple_of(EVICT_EVERY) {
            // Keep the queue as small as what is still needed (a small
            // working set stays in cache), not as large as allowed.
            if self.pushes.is_multiple_of(EVICT_EVERY * 16) {
                l.group.note_queue_bytes();
            }
            let q = l.queue();
            q.set_covered(l.group.covered(l.lane));
            q.evict();
        }
    }
}

impl<T: crate::Data + Codec + Sync> Collector<T> for BqSender<T> {
    #[inline]
    fn collect(&mut self, rec: Record<T>) {
        if self.lanes.first().is_some_and(|l| l.slots.is_some()) {
            // One write: the record itself, into its lane's slot.
            match self.route.pick(&rec.value, self.lanes.len()) {
                Some(lane) => self.send_typed(lane, rec),
                None => {
                    let last = self.lanes.len() - 1;
                    for lane in 0..last {
                        self.send_typed(lane, rec.clone());
                    }
                    self.send_typed(last, rec);
                }
            }
            return;
        }
        encode(&mut self.buf, &rec);
        if self.buf.len() > self.max_entry {
            // Kept, with the reason, rather than a queue it cannot enter
            // (nothing downstream ever sees it: primary and standby agree).
            let op = self.ctx.current_op();
            self.ctx.dead_letter(
                op,
                rec.id,
                &format!(
                    "a record of {} bytes does not fit the standby's buffer queue (entries up to {} bytes: a quarter of its arena; raise the queue's memory)",
                    self.buf.len(),
                    self.max_entry
                ),
                &self.buf,
            );
            return;
        }
        match self.route.pick(&rec.value, self.lanes.len()) {
            Some(lane) => self.send_bytes(lane, rec.id.0),
            None => {
                for lane in 0..self.lanes.len() {
                    self.send_bytes(lane, rec.id.0);
                }
            }
        }
    }

    fn flush(&mut self) {
        for l in &mut self.lanes {
            if !l.overflow.is_empty() {
                while let Some(h) = l.overflow.pop_front() {
                    if let Err(h) = l.push_held(h) {
                        l.overflow.push_front(h);
                        break;
                    }
                    l.unsignalled += 1;
                }
                if l.overflow.is_empty() {
                    self.ctx.blocked.set(self.ctx.blocked.get() - 1);
                }
            }
            if l.unsignalled > 0 {
                l.notify(&self.ctx);
            }
        }
    }

    fn end(&mut self) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        self.buf.clear();
        self.buf.push(KIND_END);
        for lane in 0..self.lanes.len() {
            self.send_bytes(lane, END_ID);
        }
        for l in &self.lanes {
            l.group.note_queue_bytes();
        }
        self.flush();
    }

    fn watermark(&mut self, wm: u64) {
        if self.ended {
            return;
        }
        // In order with the records, on every lane: the group's primary
        // reads it as part of a chunk, into its lane's clock.
        encode_watermark(&mut self.buf, wm);
        for lane in 0..self.lanes.len() {
            self.send_bytes(lane, WATERMARK_ID);
        }
    }

    fn idle(&mut self) {
        if self.ended {
            return;
        }
        self.buf.clear();
        self.buf.push(KIND_IDLE);
        for lane in 0..self.lanes.len() {
            self.send_bytes(lane, IDLE_ID);
        }
        self.flush();
    }

    fn barrier(&mut self, id: u64) {
        if self.ended {
            return;
        }
        // In order with the records, on every lane (the group's primary
        // aligns them, and logs each as a chunk of its own), published at
        // once so that alignment does not wait for a batch to fill.
        encode_barrier(&mut self.buf, id);
        for lane in 0..self.lanes.len() {
            self.send_bytes(lane, BARRIER_ID);
        }
        self.flush();
    }
}
