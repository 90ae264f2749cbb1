use std::{
    collections::VecDeque,
    panic::{catch_unwind, AssertUnwindSafe},
    sync::atomic::{AtomicUsize, Ordering},
};

use proptest::prelude::*;

use super::*;

#[test]
fn capacity_is_rounded_up_to_a_power_of_two_at_least_two() {
    for (requested, expected) in [(0, 2), (1, 2), (2, 2), (3, 4), (4, 4), (5, 8), (1000, 1024)] {
        assert_eq!(
            channel::<u8>(requested).0.capacity(),
            expected,
            "{requested}"
        );
    }
}

#[test]
#[should_panic(expected = "exceeds isize::MAX / 2")]
fn capacity_above_isize_max_half_panics() {
    let _ = channel::<u8>(isize::MAX as usize / 2 + 1);
}

#[test]
fn full_hands_back_the_exact_value() {
    let (mut tx, _rx) = channel::<Box<u32>>(2);
    tx.push(Box::new(1)).unwrap();
    tx.stage(Box::new(2)).unwrap();
    let value = Box::new(3);
    let addr: *const u32 = &*value;
    let Full(back) = tx.push(value).unwrap_err();
    assert_eq!(*back, 3);
    assert!(
        std::ptr::eq(addr, &*back),
        "push must return the same allocation"
    );
    let Full(back) = tx.stage(back).unwrap_err();
    assert!(
        std::ptr::eq(addr, &*back),
        "stage must return the same allocation"
    );
    assert_eq!(tx.staged(), 1, "a failed push leaves staged items staged");
    assert_eq!(format!("{:?}", Full(())), "Full(..)");
}

/// Counts drops of `Counted` values into a shared counter.
struct Counted<'a>(&'a AtomicUsize);
impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn items_left_in_a_dropped_ring_are_dropped_exactly_once() {
    for producer_first in [true, false] {
        let drops = AtomicUsize::new(0);
        let (mut tx, mut rx) = channel(4);
        for _ in 0..3 {
            tx.push(Counted(&drops)).unwrap();
        }
        drop(rx.pop()); // 1 dropped by us
        tx.stage(Counted(&drops)).unwrap(); // committed by the producer's drop
        tx.stage(Counted(&drops)).unwrap();
        assert_eq!(drops.load(Ordering::Relaxed), 1);
        if producer_first {
            drop(tx);
            assert!(rx.is_abandoned());
            assert_eq!(rx.len(), 4, "dropping the producer commits staged items");
            drop(rx);
        } else {
            drop(rx);
            assert!(tx.is_abandoned());
            drop(tx);
        }
        assert_eq!(drops.load(Ordering::Relaxed), 5);
    }
}

#[test]
fn pop_batch_releases_taken_items_when_the_callback_panics() {
    let (mut tx, mut rx) = channel::<u32>(8);
    assert_eq!(tx.push_iter(&mut (0..8)), 8);
    let mut seen = Vec::new();
    let result = catch_unwind(AssertUnwindSafe(|| {
        rx.pop_batch(8, |v| {
            seen.push(v);
            assert_ne!(v, 2, "boom");
        })
    }));
    assert!(result.is_err());
    assert_eq!(seen, [0, 1, 2]);
    assert_eq!(tx.free_slots(), 3, "the three taken slots are released");
    assert_eq!(rx.pop(), Some(3));
}

#[test]
fn push_iter_takes_only_what_fits_and_publishes_staged_items_too() {
    let (mut tx, mut rx) = channel::<u32>(4);
    tx.stage(100).unwrap();
    let mut it = 0..10;
    assert_eq!(tx.push_iter(&mut it), 3);
    assert_eq!(it.next(), Some(3), "no item taken beyond the free slots");
    assert_eq!(tx.staged(), 0);
    let mut got = Vec::new();
    assert_eq!(rx.pop_batch(usize::MAX, |v| got.push(v)), 4);
    assert_eq!(got, [100, 0, 1, 2]);
}

#[test]
fn peek_returns_the_next_item_without_taking_it() {
    let (mut tx, mut rx) = channel::<String>(2);
    assert_eq!(rx.peek(), None);
    tx.push("a".into()).unwrap();
    assert_eq!(rx.peek().map(String::as_str), Some("a"));
    assert_eq!(rx.pop().as_deref(), Some("a"));
    assert!(rx.is_empty());
}

#[derive(Clone, Debug)]
enum Op {
    Push,
    Stage,
    Commit,
    Pop,
    PopBatch(usize),
    PushIter(usize),
    Peek,
    FreeSlots,
    Len,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Push),
        4 => Just(Op::Stage),
        2 => Just(Op::Commit),
        4 => Just(Op::Pop),
        3 => (0usize..80).prop_map(Op::PopBatch),
        2 => (0usize..80).prop_map(Op::PushIter),
        1 => Just(Op::Peek),
        1 => Just(Op::FreeSlots),
        1 => Just(Op::Len),
    ]
}

/// Start indices: zero, just below `usize::MAX` (so the free-running
/// counters overflow during the run), or anywhere.
fn start() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(0),
        (0usize..200).prop_map(|d| usize::MAX - d),
        any::<usize>()
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Single-threaded, the ring behaves exactly like a bounded
    /// `VecDeque` of published items plus a list of staged ones, across
    /// many wrap-arounds of the slot array and of the `usize` indices.
    #[test]
    fn ring_matches_a_bounded_vecdeque_model(
        requested in 1usize..64,
        start in start(),
        ops in proptest::collection::vec(op(), 1..400),
    ) {
        let (mut tx, mut rx) = channel_at::<Box<u64>>(requested, start);
        let cap = requested.max(2).next_power_of_two();
        prop_assert_eq!(tx.capacity(), cap);
        prop_assert_eq!(rx.capacity(), cap);
        let mut published: VecDeque<u64> = VecDeque::new();
        let mut staged: Vec<u64> = Vec::new();
        let mut next = 0u64;

        for op in ops {
            let used = published.len() + staged.len();
            match op {
                Op::Push | Op::Stage => {
                    let v = next;
                    next += 1;
                    let r = if matches!(op, Op::Push) { tx.push(Box::new(v)) } else { tx.stage(Box::new(v)) };
                    if used == cap {
                        prop_assert_eq!(r.map_err(|Full(b)| *b), Err(v));
                    } else {
                        prop_assert!(r.is_ok());
                        staged.push(v);
                        if matches!(op, Op::Push) {
                            published.extend(staged.drain(..));
                        }
                    }
                }
                Op::Commit => {
                    prop_assert_eq!(tx.commit(), staged.len());
                    published.extend(staged.drain(..));
                }
                Op::Pop => {
                    prop_assert_eq!(rx.pop().map(|b| *b), published.pop_front());
                }
                Op::PopBatch(k) => {
                    let mut got = Vec::new();
                    let n = rx.pop_batch(k, |b| got.push(*b));
                    let expected: Vec<u64> = published.drain(..k.min(published.len())).collect();
                    prop_assert_eq!(n, expected.len());
                    prop_assert_eq!(got, expected);
                }
                Op::PushIter(n) => {
                    let first = next;
                    let mut it = (first..first + n as u64).map(Box::new);
                    let pushed = tx.push_iter(&mut it);
                    prop_assert_eq!(pushed, n.min(cap - used));
                    prop_assert_eq!(it.next().map(|b| *b), (pushed < n).then_some(first + pushed as u64));
                    next = first + n as u64;
                    staged.extend(first..first + pushed as u64);
                    published.extend(staged.drain(..));
                }
                Op::Peek => {
                    prop_assert_eq!(rx.peek().map(|b| **b), published.front().copied());
                }
                Op::FreeSlots => prop_assert_eq!(tx.free_slots(), cap - used),
                Op::Len => prop_assert_eq!(rx.len(), published.len()),
            }
            prop_assert_eq!(tx.staged(), staged.len());
            prop_assert_eq!(rx.is_empty(), published.is_empty());
        }
        // Drain: everything committed (including by the producer's drop)
        // comes out in order, nothing else.
        drop(tx);
        published.extend(staged.drain(..));
        let mut rest = Vec::new();
        while let Some(b) = rx.pop() {
            rest.push(*b);
        }
        prop_assert_eq!(rest, Vec::from(published));
    }
}
