//! The buffer queue under contention: one writer and two readers on their
//! own threads, eviction running as the readers and a "snapshot" release
//! entries. Every tuple arrives at both readers intact and in order; the
//! writer is backpressured, never loses a tuple.

use std::sync::Arc;
use tandem::standby::bq::{BqConfig, BufferQueue, Full};

fn payload(id: u64) -> Vec<u8> {
    let len = (id.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 57) as usize + 1; // 1..=128
    (0..len).map(|i| (id as usize ^ i) as u8).collect()
}

#[test]
fn two_readers_see_every_tuple_intact_while_the_writer_evicts() {
    const N: u64 = 300_000;
    let path = std::env::temp_dir().join(format!("tandem-bq-stress-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let q = Arc::new(
        BufferQueue::create(
            &path,
            BqConfig {
                slots: 256,
                arena: 8192,
                readers: 2,
            },
        )
        .unwrap(),
    );
    let readers: Vec<_> = (0..2usize)
        .map(|r| {
            let q = Arc::clone(&q);
            std::thread::spawn(move || {
                let mut pos = 0u64;
                while pos < N {
                    match q.get(pos) {
                        Some(e) => {
                            assert_eq!(e.tuple_id, pos * 3, "reader {r}");
                            assert_eq!(e.bytes, &payload(pos * 3)[..], "reader {r} at {pos}");
                            pos += 1;
                            if pos.is_multiple_of(7) || pos == N {
                                q.advance(r, pos);
                                if r == 1 {
                                    // The standby's snapshot covers what it read.
                                    q.set_covered(pos);
                                }
                            }
                        }
                        None => std::thread::yield_now(),
                    }
                }
            })
        })
        .collect();
    let mut full = 0u64;
    for i in 0..N {
        let bytes = payload(i * 3);
        loop {
            match q.push(i * 3, &bytes) {
                Ok(p) => {
                    assert_eq!(p, i);
                    break;
                }
                Err(Full) => {
                    full += 1;
                    std::thread::yield_now();
                }
            }
        }
    }
    for r in readers {
        r.join().unwrap();
    }
    assert!(full > 0, "the small ring did backpressure the writer");
    q.validate().unwrap();
    drop(q);
    std::fs::remove_file(path).unwrap();
}
