//! Exhaustive interleaving checks of the buffer queue's writer/reader
//! protocol (`engine/src/standby/bq.rs`).
//!
//! The queue keeps its atomics and entries in a memory map, which loom
//! cannot see; this model keeps the same protocol — the same loads, stores
//! and orderings, in the same order — over loom's atomics and cells, so a
//! write to a slot a reader may still read is reported as a data race.
//! Positions are written as the entry's value: a reader that reads anything
//! else read a reused slot.
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test -p tandem --test loom_bq --release
//! ```
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::model::Builder;
use loom::sync::atomic::{fence, AtomicU64, Ordering::*};
use loom::sync::Arc;
use loom::thread;

const SLOTS: u64 = 2;
const RELEASED: u64 = u64::MAX;

struct Q {
    tail: AtomicU64,
    head: AtomicU64,
    covered: AtomicU64,
    cursor: AtomicU64,
    slots: [UnsafeCell<u64>; SLOTS as usize],
}

impl Q {
    fn new(covered: u64, cursor: u64) -> Self {
        Q {
            tail: AtomicU64::new(0),
            head: AtomicU64::new(0),
            covered: AtomicU64::new(covered),
            cursor: AtomicU64::new(cursor),
            slots: [UnsafeCell::new(u64::MAX), UnsafeCell::new(u64::MAX)],
        }
    }

    /// `BufferQueue::evict`: up to min(covered, cursors, tail); after the
    /// store, look at the cursors again and move back for a reader that
    /// attached meanwhile.
    fn evict(&self) -> u64 {
        let tail = self.tail.load(Relaxed);
        let head = self
            .covered
            .load(Acquire)
            .min(self.cursor.load(SeqCst))
            .min(tail);
        let old = self.head.load(Relaxed);
        if head <= old {
            return old;
        }
        self.head.store(head, SeqCst);
        fence(SeqCst);
        let again = self.cursor.load(SeqCst).max(old);
        if again < head {
            self.head.store(again, SeqCst);
            return again;
        }
        head
    }

    /// `BufferQueue::push` (index slots only: the arena follows the same
    /// rule).
    fn push(&self) -> bool {
        let p = self.tail.load(Relaxed);
        let mut head = self.head.load(Relaxed);
        if p - head >= SLOTS {
            head = self.evict();
            if p - head >= SLOTS {
                return false;
            }
        }
        self.slots[(p % SLOTS) as usize].with_mut(|s| unsafe { *s = p });
        self.tail.store(p + 1, Release);
        true
    }

    /// `BufferQueue::get`.
    fn get(&self, pos: u64) -> Option<u64> {
        let tail = self.tail.load(Acquire);
        if pos >= tail || pos < self.head.load(Acquire) {
            return None;
        }
        Some(self.slots[(pos % SLOTS) as usize].with(|s| unsafe { *s }))
    }

    /// `BufferQueue::attach`.
    fn attach(&self, pos: u64) -> bool {
        self.cursor.store(pos, SeqCst);
        fence(SeqCst);
        if self.head.load(SeqCst) > pos {
            self.cursor.store(RELEASED, SeqCst);
            return false;
        }
        true
    }

    /// `BufferQueue::advance`.
    fn advance(&self, pos: u64) {
        self.cursor.fetch_max(pos, AcqRel);
    }
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(3);
    }
    b.check(f);
}

/// A reader that keeps its cursor at what it has not read yet sees every
/// entry, in order, intact, while the writer wraps around the slots.
#[test]
fn a_reader_sees_every_entry_intact_while_the_writer_wraps() {
    model(|| {
        let q = Arc::new(Q::new(u64::MAX, 0));
        let w = {
            let q = Arc::clone(&q);
            thread::spawn(move || {
                for _ in 0..3 {
                    while !q.push() {
                        thread::yield_now();
                    }
                }
            })
        };
        let mut next = 0;
        while next < 3 {
            match q.get(next) {
                Some(v) => {
                    assert_eq!(v, next, "read a reused slot");
                    next += 1;
                    q.advance(next);
                }
                None => thread::yield_now(),
            }
        }
        w.join().unwrap();
    });
}

/// Nothing is evicted that a snapshot does not cover, whatever the
/// readers: with `covered` at 1, position 0 may go, position 1 survives a
/// full queue while a reader looks at it.
#[test]
fn an_uncovered_entry_is_never_evicted() {
    model(|| {
        let q = Arc::new(Q::new(1, RELEASED));
        let w = {
            let q = Arc::clone(&q);
            thread::spawn(move || (0..4).map(|_| q.push()).collect::<Vec<_>>())
        };
        let mut seen = None;
        for _ in 0..3 {
            seen = q.get(1);
            if seen.is_some() {
                break;
            }
            thread::yield_now();
        }
        if let Some(v) = seen {
            assert_eq!(v, 1);
        }
        let pushed = w.join().unwrap();
        assert_eq!(
            pushed,
            vec![true, true, true, false],
            "the fourth push backpressures"
        );
        assert_eq!(q.get(1), Some(1));
    });
}

/// A standby attaching while the writer evicts: either the attach fails
/// (the entry was gone), or the entry stays intact for as long as the
/// reader holds it — the writer never overwrites it.
#[test]
fn an_attach_racing_an_eviction_never_reads_a_reused_slot() {
    model(|| {
        let q = Arc::new(Q::new(u64::MAX, RELEASED));
        assert!(q.push());
        assert!(q.push());
        let w = {
            let q = Arc::clone(&q);
            thread::spawn(move || {
                // Evicts 0 (and 1, unless the reader holds it), reusing
                // slot 1 for position 3 only if 1 was evicted.
                let a = q.push();
                let b = q.push();
                (a, b)
            })
        };
        if q.attach(1) {
            let mut got = None;
            for _ in 0..3 {
                got = q.get(1);
                if got.is_some() {
                    break;
                }
                thread::yield_now();
            }
            if let Some(v) = got {
                assert_eq!(v, 1, "read a reused slot");
            }
        }
        w.join().unwrap();
    });
}

/// `BufferQueue::enter` / `try_reclaim`: a successor that claimed the
/// epoch releases a fenced reader's cursor (after which the writer may
/// overwrite what it held) only while that reader is not copying entries
/// out — so the reader never reads an entry being overwritten.
#[test]
fn a_reclaimed_cursor_is_never_read_through() {
    model(|| {
        let epoch = Arc::new(AtomicU64::new(1));
        let reading = Arc::new(AtomicU64::new(0));
        let cursor = Arc::new(AtomicU64::new(0));
        let slot = Arc::new(UnsafeCell::new(7u64));
        let reader = {
            let (epoch, reading, slot) =
                (Arc::clone(&epoch), Arc::clone(&reading), Arc::clone(&slot));
            thread::spawn(move || {
                // `enter`, then the epoch check, copy, `leave`.
                reading.store(1, SeqCst);
                fence(SeqCst);
                if epoch.load(Acquire) == 1 {
                    let v = slot.with(|p| unsafe { *p });
                    assert_eq!(v, 7, "read an overwritten entry");
                }
                reading.store(0, Release);
            })
        };
        // The successor claims, then reclaims; once released, the writer
        // (here: the successor itself) overwrites the entry.
        assert!(epoch.compare_exchange(1, 2, SeqCst, Acquire).is_ok());
        let mut released = false;
        for _ in 0..2 {
            fence(SeqCst);
            if reading.load(SeqCst) == 0 {
                cursor.store(RELEASED, SeqCst);
                released = true;
                break;
            }
            thread::yield_now();
        }
        if released {
            slot.with_mut(|p| unsafe { *p = 9 });
        }
        reader.join().unwrap();
    });
}
