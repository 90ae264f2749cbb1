//! Two-thread stress tests of the SPSC ring: millions of sequence numbers
//! through a small ring, with the producer mixing `push`, `stage`/`commit`
//! and `push_iter` and the consumer mixing `pop` and `pop_batch`, checking
//! strict FIFO order and exact count.
#![cfg(not(loom))]

use std::thread;

use crossbeam_utils::Backoff;
use tandem::queue::spsc::{self, Consumer, Producer, Storage};

const ITEMS: u64 = 10_000_000;

/// Tiny xorshift so both threads pick pseudo-random operation mixes.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn produce<S: Storage<u64>>(mut tx: Producer<u64, S>, items: u64) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let backoff = Backoff::new();
    let mut next = 0u64;
    while next < items {
        let progressed = match rng.next() % 3 {
            0 => match tx.push(next) {
                Ok(()) => {
                    next += 1;
                    true
                }
                Err(spsc::Full(v)) => {
                    assert_eq!(v, next);
                    false
                }
            },
            1 => {
                let k = 1 + rng.next() % 64;
                let mut staged = 0;
                while staged < k && next < items && tx.stage(next).is_ok() {
                    next += 1;
                    staged += 1;
                }
                assert_eq!(tx.commit() as u64, staged);
                staged > 0
            }
            _ => {
                let k = 1 + rng.next() % 300;
                let mut it = next..(next + k).min(items);
                let n = tx.push_iter(&mut it) as u64;
                next += n;
                n > 0
            }
        };
        if progressed {
            backoff.reset();
        } else {
            backoff.snooze();
        }
    }
    // Dropping `tx` marks the ring abandoned.
}

fn consume<S: Storage<u64>>(mut rx: Consumer<u64, S>, items: u64) {
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    let backoff = Backoff::new();
    let mut expected = 0u64;
    loop {
        let abandoned = rx.is_abandoned();
        let taken = if rng.next().is_multiple_of(2) {
            match rx.pop() {
                Some(v) => {
                    assert_eq!(v, expected, "out of order");
                    expected += 1;
                    1
                }
                None => 0,
            }
        } else {
            let max = 1 + (rng.next() % 512) as usize;
            let n = rx.pop_batch(max, |v| {
                assert_eq!(v, expected, "out of order");
                expected += 1;
            });
            assert!(n <= max);
            n
        };
        if taken > 0 {
            backoff.reset();
        } else if abandoned {
            break;
        } else {
            backoff.snooze();
        }
    }
    assert_eq!(expected, items, "lost or extra items");
    assert!(rx.is_empty());
}

fn run<S: Storage<u64> + Send + 'static>(tx: Producer<u64, S>, rx: Consumer<u64, S>, items: u64) {
    let producer = thread::spawn(move || produce(tx, items));
    let consumer = thread::spawn(move || consume(rx, items));
    producer.join().unwrap();
    consumer.join().unwrap();
}

#[test]
fn heap_ring_delivers_ten_million_items_in_order_with_mixed_ops() {
    let (tx, rx) = spsc::channel::<u64>(1024);
    run(tx, rx, ITEMS);
}

#[test]
fn tiny_heap_ring_delivers_items_in_order_with_mixed_ops() {
    let (tx, rx) = spsc::channel::<u64>(2);
    run(tx, rx, 1_000_000);
}

#[test]
fn mapped_ring_delivers_ten_million_items_in_order_with_mixed_ops() {
    let (tx, rx) = spsc::mapped_channel::<u64>(1024).unwrap();
    run(tx, rx, ITEMS);
}
