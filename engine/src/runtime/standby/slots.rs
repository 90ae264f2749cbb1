//! Typed slots beside a buffer queue: one write, read in place.
//!
//! A standby in the same process as its primary does not need a record's
//! encoded form: upstream moves the record itself into the slot of its
//! queue position, the queue entry holds only the kind byte
//! ([`super::entry::KIND_TYPED`]) and the tuple ID — positions, cursors,
//! eviction, fencing and the entry's checksum stay the queue's — and each
//! reader clones the record out of the slot. No encode, no decode, no copy
//! through the arena. (A standby in another process will need the encoded
//! form: `StandbyConfig::encoded_queues`.)
//!
//! Slot `p mod slots` holds the record of position `p`, for the queue's
//! `slots` index slots. The protocol is the queue's (`standby/bq.rs`):
//!
//! - The writer (the lane's one upstream instance) fills slot `p` only
//!   while position `p − slots` is evicted (`p − head < slots`), before the
//!   push that publishes `p` with a release store of the queue's tail.
//! - A reader reads slot `p` only after acquiring a tail past `p`, at or
//!   above its own cursor — which the writer never evicts past — and, for
//!   a primary, inside its copying mark, which a successor's reclaim of
//!   its cursor waits for.
//!
//! So a slot is never written while a reader may read it, nor read before
//! it is written.

use crate::record::Record;
use crate::standby::bq::BufferQueue;
use std::cell::UnsafeCell;

/// The typed slots of one buffer queue (see the module docs).
pub(crate) struct TypedSlots<T> {
    slots: Box<[UnsafeCell<Option<Record<T>>>]>,
    mask: u64,
}

// SAFETY: a slot is written only by the queue's one writer while no reader
// may read it, and read only after the release/acquire pair on the queue's
// tail that publishes it (module docs); the records move between threads
// (written on upstream's, cloned on the readers'), hence `T: Send`.
unsafe impl<T: Send> Send for TypedSlots<T> {}
// SAFETY: as above: through `&TypedSlots` a slot is written only by the
// one writer while no reader may read it; readers only clone out of it,
// possibly at once (a primary and a hot standby), hence `T: Sync`.
unsafe impl<T: Send + Sync> Sync for TypedSlots<T> {}

impl<T: Clone> TypedSlots<T> {
    /// Slots for a queue of `slots` index slots (a power of two).
    pub(crate) fn new(slots: u64) -> Self {
        debug_assert!(slots.is_power_of_two());
        TypedSlots {
            slots: (0..slots).map(|_| UnsafeCell::new(None)).collect(),
            mask: slots - 1,
        }
    }

    /// Writer: moves `rec` into the slot of the queue's next position and
    /// pushes its entry (`entry`: the kind byte); gives the record back if
    /// the queue is full (after evicting what it may).
    ///
    /// Only the queue's one writer may call this (the lane's upstream
    /// instance: one `BqSender` lane per queue).
    pub(crate) fn push(
        &self,
        q: &BufferQueue,
        rec: Record<T>,
        entry: &[u8],
    ) -> Result<(), Record<T>> {
        let slots = self.mask + 1;
        let p = q.tail();
        if p - q.head() >= slots && p - q.evict() >= slots {
            return Err(rec);
        }
        let id = rec.id.0;
        let cell = self.slots[(p & self.mask) as usize].get();
        // SAFETY: position `p − slots` (this slot's last) is evicted — no
        // reader reads it any more (module docs) — and `p` is not published
        // yet; the writer is the only one writing slots.
        unsafe {
            *cell = Some(rec);
        }
        if q.push(id, entry).is_ok() {
            return Ok(());
        }
        // SAFETY: as above: `p` was not published.
        Err(unsafe { (*cell).take() }.expect("just written"))
    }

    /// Reader: a clone of the record at `position` (`None`: the slot holds
    /// none — only a damaged queue could say a typed entry is there).
    ///
    /// The caller has read the queue's entry at `position` (so it acquired
    /// a tail past it) and holds it by its cursor — inside its copying mark
    /// if it is a primary that may be fenced.
    pub(crate) fn get(&self, position: u64) -> Option<Record<T>> {
        let cell = self.slots[(position & self.mask) as usize].get();
        // SAFETY: the entry at `position` is published (the caller read it
        // after acquiring the tail) and held (its cursor, or its copying
        // mark), so the writer does not write this slot meanwhile (module
        // docs); other readers only read it.
        unsafe { (*cell).clone() }
    }
}
