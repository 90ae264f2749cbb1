//! Exhaustive interleaving checks of the SPSC ring with loom.
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test -p tandem --test loom_spsc --release
//! ```
//!
//! Besides the assertions below, loom reports any access to a slot's
//! `UnsafeCell` that is not ordered after the conflicting access by the
//! ring's Acquire/Release protocol (a data race), and any item whose drop
//! runs twice or never (through the drop counters).
#![cfg(loom)]

use loom::{
    model::Builder,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    thread,
};
use tandem::queue::spsc;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    builder.check(f);
}

/// Spins (yielding to loom's scheduler) until `f` returns `Some`.
fn spin<R>(mut f: impl FnMut() -> Option<R>) -> R {
    loop {
        if let Some(r) = f() {
            return r;
        }
        thread::yield_now();
    }
}

#[test]
fn push_pop_is_fifo_without_loss_or_duplicates() {
    model(|| {
        let (mut tx, mut rx) = spsc::channel::<usize>(2);
        let producer = thread::spawn(move || {
            for i in 0..4 {
                spin(|| tx.push(i).ok());
            }
        });
        for i in 0..4 {
            assert_eq!(spin(|| rx.pop()), i);
        }
        assert_eq!(rx.pop(), None);
        producer.join().unwrap();
    });
}

#[test]
fn staged_batches_and_pop_batch_are_fifo_without_loss_or_duplicates() {
    model(|| {
        let (mut tx, mut rx) = spsc::channel::<usize>(4);
        let producer = thread::spawn(move || {
            // Batch 1: three items, one publish.
            for i in 0..3 {
                tx.stage(i).unwrap(); // capacity 4: cannot be full yet
            }
            assert_eq!(tx.commit(), 3);
            // Batch 2: two items through push_iter, possibly needing room.
            let mut it = 3..5;
            while !it.is_empty() {
                if tx.push_iter(&mut it) == 0 {
                    thread::yield_now();
                }
            }
        });
        let mut got = Vec::new();
        while got.len() < 5 {
            if rx.pop_batch(2, |v| got.push(v)) == 0 {
                thread::yield_now();
            }
        }
        assert_eq!(got, [0, 1, 2, 3, 4]);
        producer.join().unwrap();
        assert!(rx.is_empty());
    });
}

#[test]
fn staged_items_are_invisible_until_commit() {
    model(|| {
        let (mut tx, mut rx) = spsc::channel::<usize>(2);
        let flag = Arc::new(AtomicUsize::new(0));
        let flag2 = flag.clone();
        let producer = thread::spawn(move || {
            tx.stage(1).unwrap();
            flag2.store(1, Ordering::Release);
            tx.stage(2).unwrap();
            tx.commit();
            tx // keep it alive so its drop does not commit anything
        });
        if flag.load(Ordering::Acquire) == 1 {
            // Staged, possibly committed by now: all or nothing.
            match rx.len() {
                0 => {}
                2 => assert_eq!(rx.pop(), Some(1)),
                n => panic!("saw {n} items of a 2-item commit"),
            }
        }
        let _tx = producer.join().unwrap();
    });
}

/// Counts its drops into a shared counter.
struct Counted(Arc<AtomicUsize>);
impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn items_left_when_both_handles_drop_are_dropped_exactly_once() {
    model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let (mut tx, mut rx) = spsc::channel::<Counted>(2);
        let d = drops.clone();
        let producer = thread::spawn(move || {
            tx.push(Counted(d.clone())).ok().unwrap();
            // Room for one more: staged, then committed by the producer's drop.
            tx.stage(Counted(d.clone())).ok().unwrap();
            // Fits only if the consumer already popped; otherwise it is
            // handed back in `Full` and dropped here.
            let _ = tx.stage(Counted(d));
        });
        let consumer = thread::spawn(move || {
            drop(rx.pop());
        });
        producer.join().unwrap();
        consumer.join().unwrap();
        assert_eq!(drops.load(Ordering::Relaxed), 3);
    });
}

#[test]
fn abandoned_producer_has_published_everything() {
    model(|| {
        let (mut tx, mut rx) = spsc::channel::<usize>(4);
        let producer = thread::spawn(move || {
            tx.push(0).unwrap();
            tx.stage(1).unwrap();
            tx.stage(2).unwrap();
            // Dropped with two staged items: drop must commit them before
            // flagging abandonment.
        });
        let mut got = Vec::new();
        loop {
            let abandoned = rx.is_abandoned();
            match rx.pop() {
                Some(v) => got.push(v),
                None if abandoned => break,
                None => thread::yield_now(),
            }
        }
        assert_eq!(got, [0, 1, 2]);
        producer.join().unwrap();
    });
}

#[test]
fn producer_sees_consumer_abandonment() {
    model(|| {
        let (mut tx, rx) = spsc::channel::<usize>(2);
        let consumer = thread::spawn(move || drop(rx));
        loop {
            if tx.is_abandoned() {
                break;
            }
            let _ = tx.push(1);
            thread::yield_now();
        }
        consumer.join().unwrap();
    });
}
