//! The buffer queue: a file-backed, memory-mapped ring of tuples between an
//! operator's dispatcher (one writer) and its primary and standby (readers),
//! indexed by position, holding each tuple's ID and bytes.
//!
//! ## File layout (all integers little-endian)
//!
//! ```text
//! 0      header block (4096 bytes)
//!          0  magic "TNDMBQ\0\x01"          8  format version (u32) = 1
//!         12  readers (u32, 1..=8)          16  slots (u64, power of two)
//!         24  arena bytes (u64, power of two, multiple of 4096)
//!         32  file length (u64, as created)
//!         64  tail     (atomic u64)  next position to publish
//!        128  head     (atomic u64)  oldest position still held
//!        192  covered  (atomic u64)  positions below it are in a snapshot
//!                                    the standby can use
//!        256  arena_tail (atomic u64) arena offset after the newest entry
//!        320  cursor[r] (atomic u64, one cache line each): reader r is done
//!                                    with every position below it
//!        328  reading[r] (atomic u64, beside cursor[r]): non-zero while
//!                                    reader r copies entries out
//! 4096   index: `slots` entries of 32 bytes
//!          0 position (u64)  8 tuple ID (u64)  16 arena offset (u64)
//!         24 length (u32)   28 checksum (u32): the low half of the
//!            XXH3-64 of the bytes seeded with the tuple ID
//! 4096 + 32·slots   arena: `arena` bytes; entries 8-byte aligned and never
//!                   split: one that would cross the end starts at 0
//! ```
//!
//! Positions are dense (0, 1, 2, … in push order), so entry `p` lives in
//! index slot `p mod slots` — O(1) insert and lookup; arena offsets grow
//! monotonically and are taken modulo the arena size. Tuple IDs are stored
//! beside (they need not be dense); [`BufferQueue::position_of`] finds one
//! by binary search, as IDs from one upstream partition increase.
//!
//! ## Protocol (one writer, up to four readers)
//!
//! - The writer copies the bytes into the arena, fills the index slot, then
//!   publishes `tail = p + 1` with a release store; a reader acquires `tail`
//!   and reads positions below it.
//! - Reader `r` stores `cursor[r] = q` (release) once it will never read a
//!   position below `q` again.
//! - Only the writer evicts: `head` moves to `min(covered, cursor[..])` —
//!   FIFO, and only over entries every reader is done with *and* a snapshot
//!   covers. When that frees nothing and the ring is full, `push` returns
//!   [`Full`]: the producer is backpressured; nothing is ever dropped.
//!
//! A reader therefore never sees an entry change under it: it reads only
//! positions at or above its own cursor, which the writer never evicts.
//!
//! **Reclaiming a reader that was fenced.** A primary that stalled and was
//! taken over keeps its cursor, which would hold the queue back for as
//! long as it stalls. Its successor releases that cursor instead, once it
//! is sure the old reader is not copying entries out: a reader marks
//! `reading[r]` before it checks that its epoch still holds and copies,
//! and clears it after (SeqCst store, fence, epoch load); the successor
//! claims the epoch and then (after a fence) releases cursor `r` only when
//! `reading[r]` is clear ([`BufferQueue::try_reclaim`]). Either the old
//! reader's check sees the new epoch and it copies nothing, or the
//! successor sees the mark and tries again at its next poll.
//!
//! The file is created with mode 0600 (`bq/file.rs`: creating, opening,
//! mapping or copying it). Unsafe code is confined to this module and that
//! one: the map and its raw pointers, each use with a `SAFETY` note.

use memmap2::MmapMut;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// File magic.
pub const MAGIC: [u8; 8] = *b"TNDMBQ\0\x01";
/// Format version this build reads and writes.
pub const VERSION: u32 = 1;
/// Readers a queue may have.
pub const MAX_READERS: usize = 8;

const HEADER: usize = 4096;
const SLOT: usize = 32;
const OFF_TAIL: usize = 64;
const OFF_HEAD: usize = 128;
const OFF_COVERED: usize = 192;
const OFF_ARENA_TAIL: usize = 256;
const OFF_CURSORS: usize = 320;

/// Errors of creating, opening or validating a buffer queue.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BqError {
    /// A file operation failed.
    #[error("{path}: {op}: {source}", path = path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The file's blocks could not be reserved: its filesystem is full
    /// (a sparse mapping would have died of `SIGBUS` at its first write
    /// past the space, see [`crate::sys::fs`]).
    #[error(
        "{path}: no space for this file of {}: {} free on its filesystem",
        crate::sys::fs::human_bytes(*needed),
        crate::sys::fs::human_bytes(*free),
        path = path.display()
    )]
    NoSpace {
        /// The file (removed again).
        path: PathBuf,
        /// Its length.
        needed: u64,
        /// Bytes free on its filesystem when it was refused.
        free: u64,
    },
    /// The sizes asked for cannot make a queue.
    #[error("invalid buffer queue configuration: {0}")]
    Config(String),
    /// The file is not a buffer queue of this format, or is damaged.
    #[error("{path}: {reason}", path = path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

/// The ring is full and nothing may be evicted yet: back off and retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

/// Sizes of a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BqConfig {
    /// Index slots (entries held at most); rounded up to a power of two.
    pub slots: u64,
    /// Arena bytes (tuple bytes held at most); rounded up to a power of two
    /// of at least 4096.
    pub arena: u64,
    /// Readers (the primary and the standby: 2).
    pub readers: u32,
}

impl BqConfig {
    /// Splits `max_memory` bytes between the index and the arena for tuples
    /// of about `avg_tuple` bytes (the file never exceeds `max_memory`
    /// beyond the 4 KiB header and power-of-two rounding down).
    pub fn for_memory(max_memory: u64, avg_tuple: u64, readers: u32) -> Result<Self, BqError> {
        let per = SLOT as u64 + avg_tuple.max(1).next_multiple_of(8);
        let slots = prev_pow2(max_memory / per);
        let arena = prev_pow2(max_memory.saturating_sub(slots * SLOT as u64));
        let c = BqConfig {
            slots,
            arena,
            readers,
        };
        c.check()?;
        Ok(c)
    }

    /// The largest entry the queue takes: a quarter of its arena (so that
    /// it always holds several). The upstream sender sends a larger tuple
    /// to the dead-letter file instead.
    pub fn max_entry(&self) -> u64 {
        self.arena / 4
    }

    fn check(&self) -> Result<(), BqError> {
        if self.slots < 2 || !self.slots.is_power_of_two() {
            return Err(BqError::Config(format!(
                "slots must be a power of two ≥ 2, got {}",
                self.slots
            )));
        }
        if self.arena < 4096 || !self.arena.is_power_of_two() {
            return Err(BqError::Config(format!(
                "the arena must be a power of two ≥ 4096 bytes, got {}",
                self.arena
            )));
        }
        if self.readers == 0 || self.readers as usize > MAX_READERS {
            return Err(BqError::Config(format!(
                "1..={MAX_READERS} readers, got {}",
                self.readers
            )));
        }
        if self.checked_file_len().is_none() {
            return Err(BqError::Config(format!(
                "{} slots and a {}-byte arena need a file of more than 2^64 bytes",
                self.slots, self.arena
            )));
        }
        Ok(())
    }

    /// The file length these sizes need, or `None` when it does not fit a
    /// `u64` (sizes from a damaged or foreign header: computed unchecked,
    /// they would wrap to a small length that a short file matches, and
    /// the index and arena offsets derived from them would point past the
    /// map).
    fn checked_file_len(&self) -> Option<u64> {
        self.slots
            .checked_mul(SLOT as u64)?
            .checked_next_multiple_of(4096)?
            .checked_add(HEADER as u64)?
            .checked_add(self.arena)
    }

    /// The file length of these sizes (`u64::MAX` for sizes whose length
    /// overflows, which every constructor refuses).
    pub fn file_len(&self) -> u64 {
        self.checked_file_len().unwrap_or(u64::MAX)
    }

    fn arena_start(&self) -> usize {
        HEADER + (self.slots as usize * SLOT).next_multiple_of(4096)
    }
}

fn prev_pow2(n: u64) -> u64 {
    if n == 0 {
        0
    } else {
        1 << (63 - n.leading_zeros())
    }
}

/// One held entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry<'a> {
    /// Its position in the queue.
    pub position: u64,
    /// The tuple's ID.
    pub tuple_id: u64,
    /// The tuple's bytes.
    pub bytes: &'a [u8],
    /// The checksum its index slot holds (see [`Entry::verify`]).
    pub checksum: u32,
}

/// The checksum of an entry: the low half of the XXH3-64 of its bytes,
/// seeded with its tuple ID.
#[inline]
pub fn entry_checksum(tuple_id: u64, bytes: &[u8]) -> u32 {
    xxhash_rust::xxh3::xxh3_64_with_seed(bytes, tuple_id) as u32
}

impl Entry<'_> {
    /// Checks the entry's bytes against its slot's checksum: a damaged
    /// entry (bytes flipped, its length or offset changed) is an error,
    /// never a tuple.
    pub fn verify(&self) -> Result<(), String> {
        let computed = entry_checksum(self.tuple_id, self.bytes);
        if computed == self.checksum {
            Ok(())
        } else {
            Err(format!(
                "entry {} (tuple {:#x}, {} bytes) is damaged: checksum {:#010x}, computed {computed:#010x}",
                self.position,
                self.tuple_id,
                self.bytes.len(),
                self.checksum
            ))
        }
    }
}

/// Positions of a queue found held at once ([`BufferQueue::run`]); they
/// stay held while the reader's cursor is at or below the first.
pub struct Run<'a> {
    q: &'a BufferQueue,
    first: u64,
    end: u64,
}

impl<'a> Run<'a> {
    /// The entry at `position` (`None`: outside the run, or its slot holds
    /// another position).
    pub fn get(&self, position: u64) -> Option<Entry<'a>> {
        (self.first..self.end)
            .contains(&position)
            .then(|| self.q.held(position))
            .flatten()
    }
}

/// A buffer queue over its mapped file.
///
/// Sharing: the writer methods (`push`, `evict`) must be called from one
/// thread at a time, the reader methods of reader `r` from one thread at a
/// time; [`BufferQueue`] is `Sync` so that the writer and the readers can
/// hold it in an `Arc` on different cores.
pub struct BufferQueue {
    map: MmapMut,
    path: PathBuf,
    cfg: BqConfig,
    base: *mut u8,
}

// SAFETY: all shared mutation goes through the header's atomics; the index
// and arena bytes follow the single-writer protocol of the module docs
// (written only by the writer before a release store of `tail`, read only by
// readers after the matching acquire, never rewritten while a reader may
// read them), so handing the queue to other threads is sound.
unsafe impl Send for BufferQueue {}
// SAFETY: as above: `&BufferQueue` exposes no unsynchronised mutation.
unsafe impl Sync for BufferQueue {}

impl std::fmt::Debug for BufferQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufferQueue")
            .field("path", &self.path)
            .field("cfg", &self.cfg)
            .finish()
    }
}

impl BufferQueue {
    /// The queue's sizes.
    pub fn config(&self) -> BqConfig {
        self.cfg
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn atomic(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off.is_multiple_of(8) && off + 8 <= HEADER);
        // SAFETY: `off` is an 8-aligned offset inside the header block of a
        // page-aligned map that lives as long as `self`; those 8 bytes are
        // only ever accessed atomically.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }

    fn cursor(&self, r: usize) -> &AtomicU64 {
        assert!(r < self.cfg.readers as usize, "no reader {r}");
        self.atomic(OFF_CURSORS + 64 * r)
    }

    /// Oldest position held.
    pub fn head(&self) -> u64 {
        self.atomic(OFF_HEAD).load(Ordering::Acquire)
    }

    /// Next position to be published.
    pub fn tail(&self) -> u64 {
        self.atomic(OFF_TAIL).load(Ordering::Acquire)
    }

    /// Positions below this are covered by a usable snapshot.
    pub fn covered(&self) -> u64 {
        self.atomic(OFF_COVERED).load(Ordering::Acquire)
    }

    /// Reader `r`'s cursor.
    pub fn reader_cursor(&self, r: usize) -> u64 {
        self.cursor(r).load(Ordering::Acquire)
    }

    /// Arena bytes in use (from the oldest held entry to the newest).
    pub fn arena_used(&self) -> u64 {
        let tail_off = self.atomic(OFF_ARENA_TAIL).load(Ordering::Acquire);
        let (head, tail) = (self.head(), self.tail());
        if head == tail {
            0
        } else {
            tail_off - self.slot(head).2
        }
    }

    /// Index slot of position `p`: (position, tuple ID, offset, length);
    /// its checksum is [`slot_checksum`](Self::slot_checksum).
    fn slot(&self, p: u64) -> (u64, u64, u64, u32) {
        let at = HEADER + (p & (self.cfg.slots - 1)) as usize * SLOT;
        // SAFETY: `at..at + 32` is inside the index; callers read a slot
        // only for a position in `[head, tail)` after acquiring `tail`,
        // whose writes happened before the release store of `tail`, and
        // the writer does not rewrite it before the position is evicted.
        let b = unsafe { std::slice::from_raw_parts(self.base.add(at), SLOT) };
        let u = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        (
            u(0),
            u(8),
            u(16),
            u32::from_le_bytes(b[24..28].try_into().expect("4 bytes")),
        )
    }

    /// The checksum in position `p`'s index slot.
    fn slot_checksum(&self, p: u64) -> u32 {
        let at = HEADER + (p & (self.cfg.slots - 1)) as usize * SLOT + 28;
        // SAFETY: as in `slot`: four bytes inside the index slot of a
        // published position, not rewritten before it is evicted.
        let b = unsafe { std::slice::from_raw_parts(self.base.add(at), 4) };
        u32::from_le_bytes(b.try_into().expect("4 bytes"))
    }

    /// Writer: marks positions below `position` as covered by a snapshot the
    /// standby can use (they may be evicted once every reader is done).
    pub fn set_covered(&self, position: u64) {
        self.atomic(OFF_COVERED)
            .fetch_max(position.min(self.tail()), Ordering::AcqRel);
    }

    /// Writer: evicts what may be evicted; returns the new head.
    pub fn evict(&self) -> u64 {
        let tail = self.atomic(OFF_TAIL).load(Ordering::Relaxed);
        let min_cursor = || {
            (0..self.cfg.readers as usize)
                .map(|r| self.cursor(r).load(Ordering::SeqCst))
                .min()
                .unwrap_or(u64::MAX)
        };
        let head = evictable_head(self.covered(), std::iter::once(min_cursor()), tail);
        let old = self.atomic(OFF_HEAD).load(Ordering::Relaxed);
        if head <= old {
            return old;
        }
        self.atomic(OFF_HEAD).store(head, Ordering::SeqCst);
        // A reader may have attached below `head` after the cursors were
        // read (see `attach`): look again, after the store. Nothing between
        // `old` and `head` has been overwritten yet (only `push` does that,
        // after this returns), so moving back is safe.
        std::sync::atomic::fence(Ordering::SeqCst);
        let again = min_cursor().max(old);
        if again < head {
            self.atomic(OFF_HEAD).store(again, Ordering::SeqCst);
            return again;
        }
        head
    }

    /// Writer: appends a tuple; returns its position, or [`Full`] when the
    /// ring is full and nothing may be evicted yet.
    ///
    /// # Panics
    ///
    /// If one tuple is larger than the arena (a configuration error).
    pub fn push(&self, tuple_id: u64, bytes: &[u8]) -> Result<u64, Full> {
        let arena = self.cfg.arena;
        let need = (bytes.len() as u64).next_multiple_of(8).max(8);
        assert!(
            need <= arena,
            "a {}-byte tuple does not fit a {arena}-byte buffer queue arena",
            bytes.len()
        );
        let p = self.atomic(OFF_TAIL).load(Ordering::Relaxed);
        let tail_off = self.atomic(OFF_ARENA_TAIL).load(Ordering::Relaxed);
        let mut off = tail_off;
        let phys = off & (arena - 1);
        if phys + need > arena {
            off += arena - phys; // never split an entry: start over at 0
        }
        let fits = |head: u64| {
            let head_off = if head == p { off } else { self.slot(head).2 };
            p - head < self.cfg.slots && off + need - head_off <= arena
        };
        let mut head = self.atomic(OFF_HEAD).load(Ordering::Relaxed);
        if !fits(head) {
            head = self.evict();
            if !fits(head) {
                return Err(Full);
            }
        }
        let start = self.cfg.arena_start() + (off & (arena - 1)) as usize;
        // SAFETY: `start..start + len` is inside the arena (`phys + need <=
        // arena` after the wrap above); those bytes belong to no held entry
        // (`fits`: they lie past the newest entry and before the oldest
        // one's offset plus the arena size), so no reader reads them until
        // the release store of `tail` below publishes them.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.base.add(start), bytes.len());
        }
        let at = HEADER + (p & (self.cfg.slots - 1)) as usize * SLOT;
        let mut s = [0u8; SLOT];
        s[0..8].copy_from_slice(&p.to_le_bytes());
        s[8..16].copy_from_slice(&tuple_id.to_le_bytes());
        s[16..24].copy_from_slice(&off.to_le_bytes());
        s[24..28].copy_from_slice(&(bytes.len() as u32).to_le_bytes());
        s[28..32].copy_from_slice(&entry_checksum(tuple_id, bytes).to_le_bytes());
        // SAFETY: slot `p mod slots` is free (`p - head < slots`: its
        // previous position was evicted, so no reader reads it); it is
        // inside the index.
        unsafe {
            std::ptr::copy_nonoverlapping(s.as_ptr(), self.base.add(at), SLOT);
        }
        self.atomic(OFF_ARENA_TAIL)
            .store(off + need, Ordering::Release);
        self.atomic(OFF_TAIL).store(p + 1, Ordering::Release);
        Ok(p)
    }

    /// Reader: the entry at `position`, if it is held (in `[head, tail)`).
    ///
    /// The returned bytes stay valid while the calling reader's cursor is at
    /// or below `position`: the writer never evicts past a cursor.
    pub fn get(&self, position: u64) -> Option<Entry<'_>> {
        let tail = self.tail();
        if position >= tail || position < self.head() {
            return None;
        }
        self.held(position)
    }

    /// Reader: positions `first..first + n`, if all of them are held (in
    /// `[head, tail)`), looked at once: a chunk's worth of entries costs
    /// one load of the line the writer stores at every push, not one each.
    pub fn run(&self, first: u64, n: u64) -> Option<Run<'_>> {
        (first + n <= self.tail() && first >= self.head()).then_some(Run {
            q: self,
            first,
            end: first + n,
        })
    }

    /// The entry at `position`, known to be in `[head, tail)` (`None`: its
    /// slot holds another position — only a damaged queue does that).
    fn held(&self, position: u64) -> Option<Entry<'_>> {
        let (p, tuple_id, off, len) = self.slot(position);
        if p != position {
            return None; // evicted and reused meanwhile
        }
        let checksum = self.slot_checksum(position);
        let phys = off & (self.cfg.arena - 1);
        if phys + len as u64 > self.cfg.arena {
            // A slot damaged in the file (another process wrote it): its
            // bytes would lie outside the arena. An entry without bytes
            // whose checksum cannot hold says so.
            return Some(Entry {
                position,
                tuple_id,
                bytes: &[],
                checksum: !entry_checksum(tuple_id, &[]),
            });
        }
        let start = self.cfg.arena_start() + phys as usize;
        // SAFETY: the entry was published before the acquire load of `tail`
        // above, lies inside the arena (checked just above; written so by
        // `push`), and is not rewritten while a reader's cursor keeps it
        // (see the docs).
        let bytes = unsafe { std::slice::from_raw_parts(self.base.add(start), len as usize) };
        Some(Entry {
            position,
            tuple_id,
            bytes,
            checksum,
        })
    }

    /// Reader slot `r` is unused: it holds nothing back.
    pub fn release(&self, r: usize) {
        self.cursor(r).store(u64::MAX, Ordering::SeqCst);
    }

    /// Reader slot `r` starts reading at `position`. Returns `false` (and
    /// leaves the slot released) when entries from `position` on are no
    /// longer all held — the caller's coverage rules were broken.
    pub fn attach(&self, r: usize, position: u64) -> bool {
        self.cursor(r).store(position, Ordering::SeqCst);
        // Dekker with `evict` (a SeqCst fence between store and load on both
        // sides): either its second look at the cursors sees this one, or
        // this load sees the head it moved.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.atomic(OFF_HEAD).load(Ordering::SeqCst) > position {
            self.release(r);
            return false;
        }
        true
    }

    /// Reader `r` starts copying entries out (see the module docs); it must
    /// check that it may still read (its epoch) after this.
    pub fn enter(&self, r: usize) {
        self.reading(r).store(1, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
    }

    /// Reader `r` has copied what it needed.
    pub fn leave(&self, r: usize) {
        self.reading(r).store(0, Ordering::Release);
    }

    /// A successor releases the cursor of fenced reader `r` unless `r` is
    /// copying entries out right now; returns whether it did. Call it only
    /// after the epoch that fences `r` was claimed.
    pub fn try_reclaim(&self, r: usize) -> bool {
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.reading(r).load(Ordering::SeqCst) != 0 {
            return false;
        }
        self.release(r);
        true
    }

    fn reading(&self, r: usize) -> &AtomicU64 {
        assert!(r < self.cfg.readers as usize, "no reader {r}");
        self.atomic(OFF_CURSORS + 64 * r + 8)
    }

    /// Reader `r`: done with every position below `position`.
    pub fn advance(&self, r: usize, position: u64) {
        self.cursor(r).fetch_max(position, Ordering::AcqRel);
    }

    /// The position of the held entry with tuple ID `id` (IDs increasing
    /// with position), by binary search. Call it from a reader whose cursor
    /// is at or below the positions it may land on (nothing it reads can be
    /// evicted meanwhile), or while the writer is idle.
    pub fn position_of(&self, id: u64) -> Option<u64> {
        let (mut lo, mut hi) = (self.head(), self.tail());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let t = self.get(mid)?.tuple_id;
            match t.cmp(&id) {
                std::cmp::Ordering::Equal => return Some(mid),
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
            }
        }
        None
    }

    /// Checks the held entries against the layout's invariants: each slot
    /// names its position, offsets increase and stay within one arena
    /// length, tuple IDs increase. Returns the number of entries checked.
    pub fn validate(&self) -> Result<u64, BqError> {
        let (head, tail) = (self.head(), self.tail());
        let bad = |reason: String| BqError::Invalid {
            path: self.path.clone(),
            reason,
        };
        if head > tail {
            return Err(bad(format!("head {head} is past tail {tail}")));
        }
        if tail - head > self.cfg.slots {
            return Err(bad(format!(
                "{} entries held in {} slots",
                tail - head,
                self.cfg.slots
            )));
        }
        let arena_tail = self.atomic(OFF_ARENA_TAIL).load(Ordering::Acquire);
        let (mut last_off, mut last_id) = (None::<u64>, None::<u64>);
        for p in head..tail {
            let (pos, id, off, len) = self.slot(p);
            if pos != p {
                return Err(bad(format!("slot of position {p} names position {pos}")));
            }
            let phys = off & (self.cfg.arena - 1);
            if phys + len as u64 > self.cfg.arena {
                return Err(bad(format!("entry {p} crosses the arena's end")));
            }
            // Offsets come from the file: an end past `u64::MAX` is out of
            // order too, not an overflow.
            let end = off.checked_add(len as u64);
            if last_off.is_some_and(|l| off < l) || end.is_none_or(|end| end > arena_tail) {
                return Err(bad(format!("entry {p} is out of arena order")));
            }
            if last_id.is_some_and(|l| id <= l) {
                return Err(bad(format!("tuple IDs do not increase at position {p}")));
            }
            if let Some(e) = self.get(p) {
                e.verify().map_err(bad)?;
            }
            (last_off, last_id) = (Some(off), Some(id));
        }
        if let Some(first) = (head < tail).then(|| self.slot(head).2) {
            if arena_tail
                .checked_sub(first)
                .is_none_or(|span| span > self.cfg.arena)
            {
                return Err(bad("entries span more than the arena".into()));
            }
        }
        Ok(tail - head)
    }
}

/// Where the head may move: below every reader's cursor and below what a
/// usable snapshot covers, never past the tail. (Pure: the eviction rule.)
pub fn evictable_head(covered: u64, cursors: impl Iterator<Item = u64>, tail: u64) -> u64 {
    cursors.fold(covered, u64::min).min(tail)
}

/// Whether the entry at `position` may be evicted. (Pure: the eviction rule
/// for one entry.)
pub fn may_evict(position: u64, covered: u64, cursors: &[u64]) -> bool {
    position < covered && cursors.iter().all(|&c| position < c)
}

mod file;
#[cfg(test)]
mod tests;

pub(crate) use file::{create_mapped, open_mapped};
