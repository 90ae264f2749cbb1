//! Bounded, lock-free single-producer single-consumer ring.
//!
//! # Algorithm
//!
//! Lamport's SPSC queue with cached indices, as in [rtrb] and Rigtorp's
//! [SPSCQueue]. The ring has a power-of-two number of slots and two
//! free-running `usize` indices: `tail` (next slot to publish, written only by
//! the producer) and `head` (next slot to read, written only by the
//! consumer). Slot `i` is `slots[i & (capacity - 1)]`; the ring holds
//! `tail - head` items (wrapping arithmetic, so the counters may overflow).
//!
//! * The producer writes a value into slot `tail` and publishes it with a
//!   `Release` store of `tail + 1`; the consumer's `Acquire` load of `tail`
//!   therefore sees the value.
//! * The consumer moves the value out of slot `head` and releases the slot
//!   with a `Release` store of `head + 1`; the producer's `Acquire` load of
//!   `head` orders its next write of that slot after the read.
//!
//! Each handle keeps a private copy of the *other* side's index
//! (`cached_head` in the producer, `cached_tail` in the consumer) and reloads
//! the shared one only when the cached value makes the ring look full
//! (producer) or empty (consumer). In the steady state each side therefore
//! touches the other side's cache line once per wrap-around rather than once
//! per item. There is no `SeqCst` anywhere and no read-modify-write on the
//! hot path.
//!
//! The producer can also [stage](Producer::stage) items, writing slots without
//! publishing them, and [commit](Producer::commit) them all with one store;
//! the consumer's [`pop_batch`](Consumer::pop_batch) likewise releases a
//! whole batch with one store. That turns two cache-line transfers per item
//! into two per batch.
//!
//! # Memory layout
//!
//! The shared part is a [`Header`] (`head`, `tail` and the two "abandoned"
//! flags, each on its own `CachePadded` line, so producer and consumer never
//! write the same line) plus the slot array, provided by a [`Storage`]:
//! [`Heap`] for any `T: Send` (the default), or [`Mapped`] for [`Pod`] items
//! in a memory mapping that another process can share (see [`Mapped`] for the
//! byte layout). The handles are not shared: each lives with its thread and
//! holds the indices it owns, its cached copy of the other index, the slot
//! pointer and the mask, so the hot path reads no shared memory except the
//! slot itself.
//!
//! [rtrb]: https://docs.rs/rtrb
//! [SPSCQueue]: https://github.com/rigtorp/SPSCQueue

use core::{
    fmt,
    marker::PhantomData,
    mem::{ManuallyDrop, MaybeUninit},
    ptr::NonNull,
};

#[cfg(not(loom))]
use std::path::Path;

use crate::sync::Ordering::{Acquire, Release};

use super::storage::round_capacity;
pub use super::storage::{Header, Heap, Pod, Side, Slot, Storage};
#[cfg(not(loom))]
pub use super::storage::{MapError, Mapped};

/// Creates a heap-allocated ring of at least `capacity` slots.
///
/// The capacity is rounded up to a power of two, at least 2.
///
/// # Panics
///
/// If `capacity > isize::MAX / 2`. Like `Vec::with_capacity`, it also
/// panics (or aborts) if the slots cannot be allocated.
///
/// # Examples
///
/// ```
/// let (mut tx, mut rx) = tandem::queue::spsc::channel(3);
/// assert_eq!(tx.capacity(), 4);
/// tx.push(1).unwrap();
/// tx.stage(2).unwrap();
/// assert_eq!(rx.pop(), Some(1));
/// assert_eq!(rx.pop(), None); // 2 is staged, not yet published
/// assert_eq!(tx.commit(), 1);
/// assert_eq!(rx.pop(), Some(2));
/// ```
pub fn channel<T: Send>(capacity: usize) -> (Producer<T>, Consumer<T>) {
    channel_at(capacity, 0)
}

/// [`channel`] with both indices starting at `start` (tests exercise the
/// wrap-around of the `usize` counters with this).
pub(crate) fn channel_at<T: Send>(capacity: usize, start: usize) -> (Producer<T>, Consumer<T>) {
    let capacity = round_capacity(capacity)
        .unwrap_or_else(|| panic!("SPSC ring capacity {capacity} exceeds isize::MAX / 2"));
    let (p, c) = Heap::pair(capacity, start);
    (Producer::new(p), Consumer::new(c))
}

/// A producer of a ring in a memory mapping.
#[cfg(not(loom))]
pub type MappedProducer<T> = Producer<T, Mapped<T>>;
/// A consumer of a ring in a memory mapping.
#[cfg(not(loom))]
pub type MappedConsumer<T> = Consumer<T, Mapped<T>>;

/// Creates a ring of [`Pod`] items in an anonymous memory mapping (the
/// capacity rounded as in [`channel`]).
///
/// # Errors
///
/// If the mapping fails, or [`MapError::BadCapacity`] if `capacity` exceeds
/// `isize::MAX / 2` or the mapping size overflows.
#[cfg(not(loom))]
pub fn mapped_channel<T: Pod>(
    capacity: usize,
) -> Result<(MappedProducer<T>, MappedConsumer<T>), MapError> {
    let (p, c) = Mapped::anonymous(capacity)?;
    Ok((Producer::new(p), Consumer::new(c)))
}

/// The value given back by [`Producer::push`] and [`Producer::stage`] when
/// the ring is full.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Full<T>(pub T);

impl<T> Full<T> {
    /// The value that did not fit.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> fmt::Debug for Full<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Full(..)")
    }
}

impl<T> fmt::Display for Full<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SPSC ring is full")
    }
}

impl<T> std::error::Error for Full<T> {}

/// The writing end of a ring. Not `Clone`: there is exactly one.
///
/// Dropping it commits any staged items (they stay readable) and marks the
/// ring abandoned for the [`Consumer`].
pub struct Producer<T, S: Storage<T> = Heap<T>> {
    /// Published tail. Equal to `header.tail`: the producer is its only
    /// writer, so it never needs to load it.
    tail: usize,
    /// Items written after `tail` but not yet published.
    staged: usize,
    /// Last value of `header.head` seen; `head` only grows, so this is a
    /// lower bound and `capacity - (tail + staged - cached_head)` a lower
    /// bound on the free slots.
    cached_head: usize,
    mask: usize,
    slots: NonNull<Slot<T>>,
    /// Dropped by moving it out first (see `Drop`), so the handle's own
    /// address never escapes into the storage's destructor (`Arc::drop_slow`
    /// takes `&mut Arc`). That lets LLVM split a local handle into scalars
    /// and keep `staged` etc. in registers across a loop of `stage` calls,
    /// instead of storing them after every slot write (measured: about 20%
    /// of batched throughput with 64-byte items).
    storage: ManuallyDrop<S>,
}

/// The reading end of a ring. Not `Clone`: there is exactly one.
///
/// Dropping it marks the ring abandoned for the [`Producer`]; the items still
/// in a heap ring are dropped when the producer is gone too.
pub struct Consumer<T, S: Storage<T> = Heap<T>> {
    /// Next slot to read. Equal to `header.head` (we are its only writer)
    /// except inside `pop_batch`, which publishes it once at the end.
    head: usize,
    /// Last value of `header.tail` seen; a lower bound of it.
    cached_tail: usize,
    mask: usize,
    slots: NonNull<Slot<T>>,
    /// Dropped by moving it out first, as in [`Producer`].
    storage: ManuallyDrop<S>,
    _marker: PhantomData<T>,
}

// SAFETY: the producer moves `T`s to the consumer's thread (hence
// `T: Send`); `slots` points into memory owned by `storage` (hence
// `S: Send`), and only this handle writes unpublished slots.
unsafe impl<T: Send, S: Storage<T> + Send> Send for Producer<T, S> {}
// SAFETY: as for `Producer`: the consumer receives `T`s from another thread,
// and only this handle reads published slots.
unsafe impl<T: Send, S: Storage<T> + Send> Send for Consumer<T, S> {}

#[cfg(not(loom))]
impl<T: Pod> Producer<T, Mapped<T>> {
    /// Creates a ring file at `path` (mode 0600; fails if the file exists)
    /// with at least `capacity` slots, and returns its producer. Another
    /// process (or thread) attaches the consumer with [`Consumer::open`].
    ///
    /// # Errors
    ///
    /// I/O errors (including `AlreadyExists`), [`MapError::BadCapacity`].
    /// On error, the file is removed if it was created.
    pub fn create(path: impl AsRef<Path>, capacity: usize) -> Result<Self, MapError> {
        Mapped::create(path.as_ref(), capacity, Side::Producer).map(Self::new)
    }

    /// Attaches the producer of the ring file at `path`, made by
    /// [`Consumer::create`].
    ///
    /// # Errors
    ///
    /// I/O errors; a header that does not describe a ring of `T`s (bad
    /// magic, version, element size, capacity, file length);
    /// [`MapError::SideTaken`] if a producer is or was attached.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, MapError> {
        Mapped::open(path.as_ref(), Side::Producer).map(Self::new)
    }
}

#[cfg(not(loom))]
impl<T: Pod> Consumer<T, Mapped<T>> {
    /// Creates a ring file at `path` (mode 0600; fails if the file exists)
    /// with at least `capacity` slots, and returns its consumer. The producer
    /// attaches with [`Producer::open`].
    ///
    /// # Errors
    ///
    /// As [`Producer::create`].
    pub fn create(path: impl AsRef<Path>, capacity: usize) -> Result<Self, MapError> {
        Mapped::create(path.as_ref(), capacity, Side::Consumer).map(Self::new)
    }

    /// Attaches the consumer of the ring file at `path`, made by
    /// [`Producer::create`].
    ///
    /// # Errors
    ///
    /// As [`Producer::open`].
    pub fn open(path: impl AsRef<Path>) -> Result<Self, MapError> {
        Mapped::open(path.as_ref(), Side::Consumer).map(Self::new)
    }
}

impl<T, S: Storage<T>> Producer<T, S> {
    fn new(storage: S) -> Self {
        let header = storage.header();
        let tail = header.tail.load(Acquire);
        let cached_head = header.head.load(Acquire);
        Self {
            tail,
            staged: 0,
            cached_head,
            mask: storage.capacity() - 1,
            slots: storage.slots(),
            storage: ManuallyDrop::new(storage),
        }
    }

    /// Writes `value` into the next free slot and publishes it, together
    /// with any staged items.
    ///
    /// # Errors
    ///
    /// If the ring is full, the value is handed back in [`Full`] (and staged
    /// items stay staged).
    #[inline]
    pub fn push(&mut self, value: T) -> Result<(), Full<T>> {
        self.stage(value)?;
        self.commit();
        Ok(())
    }

    /// Writes `value` into the next free slot *without* publishing it: the
    /// consumer sees it after the next [`commit`](Self::commit) (or
    /// [`push`](Self::push), or drop of the producer).
    ///
    /// # Errors
    ///
    /// If the ring is full (staged items count as occupying their slots),
    /// the value is handed back in [`Full`].
    #[inline]
    pub fn stage(&mut self, value: T) -> Result<(), Full<T>> {
        let pos = self.tail.wrapping_add(self.staged);
        if pos.wrapping_sub(self.cached_head) > self.mask && self.refresh_head(pos) == 0 {
            return Err(Full(value));
        }
        // SAFETY: `pos - head < capacity`, so slot `pos` is free: the consumer
        // released it with a Release store of `head` that we acquired (or it
        // was never used), and it is not published, so the consumer does not
        // access it until we store a `tail` beyond it.
        unsafe {
            self.slot(pos)
                .with_mut(|slot| slot.write(MaybeUninit::new(value)))
        };
        self.staged += 1;
        Ok(())
    }

    /// Publishes all staged items with one Release store; returns how many.
    #[inline]
    pub fn commit(&mut self) -> usize {
        let n = self.staged;
        if n != 0 {
            self.tail = self.tail.wrapping_add(n);
            self.staged = 0;
            self.storage.header().tail.store(self.tail, Release);
        }
        n
    }

    /// Number of staged (written, unpublished) items.
    #[inline]
    pub fn staged(&self) -> usize {
        self.staged
    }

    /// Number of slots that can be written now, not counting staged items.
    /// Reloads the consumer's index.
    #[inline]
    pub fn free_slots(&mut self) -> usize {
        self.refresh_head(self.tail.wrapping_add(self.staged))
    }

    /// Number of slots (a power of two).
    #[inline]
    pub fn capacity(&self) -> usize {
        self.mask + 1
    }

    /// Whether the consumer has been dropped (items pushed now will never be
    /// read).
    #[inline]
    pub fn is_abandoned(&self) -> bool {
        self.storage.header().is_abandoned(Side::Consumer)
    }

    /// Pushes items from `iter` while there is room, then publishes them
    /// (and any staged items) with one store. Returns how many items were
    /// taken from `iter`; `iter` is not advanced past the last one that fit.
    ///
    /// If `iter` panics, the items taken so far stay staged (and are
    /// published by the next commit, push, or drop of the producer).
    #[inline]
    pub fn push_iter<I: Iterator<Item = T>>(&mut self, iter: &mut I) -> usize {
        let mut pushed = 0;
        loop {
            let pos = self.tail.wrapping_add(self.staged);
            let mut free = self.capacity() - pos.wrapping_sub(self.cached_head);
            if free == 0 {
                free = self.refresh_head(pos);
                if free == 0 {
                    break;
                }
            }
            for i in 0..free {
                let Some(value) = iter.next() else {
                    self.commit();
                    return pushed;
                };
                let pos = pos.wrapping_add(i);
                // SAFETY: `pos < tail + staged + free <= cached_head + capacity`,
                // so the slot is free (see `stage`).
                unsafe {
                    self.slot(pos)
                        .with_mut(|slot| slot.write(MaybeUninit::new(value)))
                };
                self.staged += 1;
                pushed += 1;
            }
        }
        self.commit();
        pushed
    }

    /// Reloads `head` and returns the free slots for a write position `pos`.
    #[inline]
    fn refresh_head(&mut self, pos: usize) -> usize {
        self.cached_head = self.storage.header().head.load(Acquire);
        // `pos - head <= capacity` always holds; `saturating_sub` only
        // keeps a corrupt (mapped) header from making us overwrite items.
        self.capacity()
            .saturating_sub(pos.wrapping_sub(self.cached_head))
    }

    #[inline(always)]
    fn slot(&self, pos: usize) -> &Slot<T> {
        // SAFETY: `pos & mask < capacity` and `slots` points to `capacity`
        // slots that live as long as `self.storage`.
        unsafe { self.slots.add(pos & self.mask).as_ref() }
    }
}

impl<T, S: Storage<T>> Drop for Producer<T, S> {
    #[inline]
    fn drop(&mut self) {
        self.commit();
        self.storage.header().abandon(Side::Producer);
        // SAFETY: `storage` is not used again after this.
        drop(unsafe { ManuallyDrop::take(&mut self.storage) });
    }
}

impl<T, S: Storage<T>> fmt::Debug for Producer<T, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Producer")
            .field("capacity", &self.capacity())
            .field("tail", &self.tail)
            .field("staged", &self.staged)
            .field("cached_head", &self.cached_head)
            .finish_non_exhaustive()
    }
}

impl<T, S: Storage<T>> Consumer<T, S> {
    fn new(storage: S) -> Self {
        let header = storage.header();
        let head = header.head.load(Acquire);
        let cached_tail = header.tail.load(Acquire);
        Self {
            head,
            cached_tail,
            mask: storage.capacity() - 1,
            slots: storage.slots(),
            storage: ManuallyDrop::new(storage),
            _marker: PhantomData,
        }
    }

    /// Takes the oldest item, if any is published.
    #[inline]
    pub fn pop(&mut self) -> Option<T> {
        let head = self.head;
        if head == self.cached_tail && self.refresh_tail() == 0 {
            return None;
        }
        // SAFETY: `head != tail`: slot `head` holds a published item (the
        // producer's Release store of `tail` that we acquired follows its
        // write), which the producer will not touch until we store a `head`
        // beyond it; we move it out exactly once, then release the slot.
        let value = unsafe { self.slot(head).with(|slot| slot.read().assume_init()) };
        self.head = head.wrapping_add(1);
        self.storage.header().head.store(self.head, Release);
        Some(value)
    }

    /// Takes up to `max` published items, calling `f` on each in FIFO order,
    /// and releases their slots to the producer with one store at the end.
    /// Returns the number of items taken.
    ///
    /// If `f` panics, the items taken so far (including the one `f` was
    /// given) are released before unwinding; the rest stay in the ring.
    #[inline]
    pub fn pop_batch<F: FnMut(T)>(&mut self, max: usize, mut f: F) -> usize {
        self.pop_batch_until(max, |v| {
            f(v);
            true
        })
    }

    /// As [`pop_batch`](Self::pop_batch), but stops right after the item on
    /// which `f` returns `false` (that item is taken; the rest stay in the
    /// ring). Returns the number of items taken.
    #[inline]
    pub fn pop_batch_until<F: FnMut(T) -> bool>(&mut self, max: usize, mut f: F) -> usize {
        let mut available = self.cached_tail.wrapping_sub(self.head);
        if available < max {
            available = self.refresh_tail();
        }
        let n = available.min(max);
        if n == 0 {
            return 0;
        }

        /// Publishes `head` when dropped, also while unwinding out of `f`.
        struct PublishOnDrop<'a, T, S: Storage<T>>(&'a mut Consumer<T, S>);
        impl<T, S: Storage<T>> Drop for PublishOnDrop<'_, T, S> {
            #[inline]
            fn drop(&mut self) {
                let c = &*self.0;
                c.storage.header().head.store(c.head, Release);
            }
        }

        let start = self.head;
        let guard = PublishOnDrop(self);
        for _ in 0..n {
            let head = guard.0.head;
            // SAFETY: `head` is in `[head, head + n)`, `n <= tail - head`:
            // a published item we own until we release `head` (see `pop`);
            // we advance `head` before `f` runs, so it is moved out once.
            let value = unsafe { guard.0.slot(head).with(|slot| slot.read().assume_init()) };
            guard.0.head = head.wrapping_add(1);
            if !f(value) {
                let taken = guard.0.head.wrapping_sub(start);
                drop(guard);
                return taken;
            }
        }
        drop(guard);
        n
    }

    /// A reference to the oldest published item, without taking it.
    #[inline]
    pub fn peek(&mut self) -> Option<&T> {
        let head = self.head;
        if head == self.cached_tail && self.refresh_tail() == 0 {
            return None;
        }
        // SAFETY: as in `pop`, slot `head` holds a published item; it stays
        // there, untouched by the producer, until `head` advances, which needs
        // `&mut self`, which the returned borrow prevents.
        Some(unsafe { self.slot(head).with(|slot| (*slot).assume_init_ref()) })
    }

    /// Number of published items. Reloads the producer's index.
    #[inline]
    pub fn len(&mut self) -> usize {
        self.refresh_tail()
    }

    /// Whether no item is published (reloads the producer's index only if
    /// the cached one says empty).
    #[inline]
    pub fn is_empty(&mut self) -> bool {
        self.head == self.cached_tail && self.refresh_tail() == 0
    }

    /// Number of slots (a power of two).
    #[inline]
    pub fn capacity(&self) -> usize {
        self.mask + 1
    }

    /// Whether the producer has been dropped. Its staged items were committed
    /// first, so once this returns `true`, the items that are (or become)
    /// visible through [`pop`](Self::pop) are all there will ever be: check
    /// `is_abandoned()` *before* finding the ring empty to conclude the
    /// stream ended.
    #[inline]
    pub fn is_abandoned(&self) -> bool {
        self.storage.header().is_abandoned(Side::Producer)
    }

    /// Reloads `tail`; returns the number of published items.
    #[inline]
    fn refresh_tail(&mut self) -> usize {
        self.cached_tail = self.storage.header().tail.load(Acquire);
        // `min`: never trust a (corrupt, mapped) header to claim more items
        // than there are slots.
        self.cached_tail
            .wrapping_sub(self.head)
            .min(self.capacity())
    }

    #[inline(always)]
    fn slot(&self, pos: usize) -> &Slot<T> {
        // SAFETY: `pos & mask < capacity` and `slots` points to `capacity`
        // slots that live as long as `self.storage`.
        unsafe { self.slots.add(pos & self.mask).as_ref() }
    }
}

impl<T, S: Storage<T>> Drop for Consumer<T, S> {
    #[inline]
    fn drop(&mut self) {
        self.storage.header().abandon(Side::Consumer);
        // SAFETY: `storage` is not used again after this.
        drop(unsafe { ManuallyDrop::take(&mut self.storage) });
    }
}

impl<T, S: Storage<T>> fmt::Debug for Consumer<T, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("capacity", &self.capacity())
            .field("head", &self.head)
            .field("cached_tail", &self.cached_tail)
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
