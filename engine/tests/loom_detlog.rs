//! Exhaustive interleaving checks of the determinant log's fencing
//! (`engine/src/standby/detlog.rs`), on the log's own code
//! (`Words::append`, `fenced_append`) over loom's atomics.
//!
//! The property: an old primary that acts on a log entry (gets `Go`) and
//! a new primary that claimed the epoch act on the *same* entry — the new
//! primary never decides an entry the old one already acted on
//! differently, whatever the interleaving of the old primary's append and
//! the new one's claim.
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test -p tandem --test loom_detlog --release
//! ```
#![cfg(loom)]

use loom::sync::atomic::{fence, AtomicU64, Ordering::*};
use loom::sync::Arc;
use loom::thread;
use tandem::standby::detlog::{fenced_append, Appended, Det, Words};

struct Shared {
    /// The liveness cell's epoch.
    epoch: AtomicU64,
    words: Vec<AtomicU64>,
}

fn shared() -> Arc<Shared> {
    Arc::new(Shared {
        epoch: AtomicU64::new(1),
        words: (0..2).map(|_| AtomicU64::new(0)).collect(),
    })
}

const OLD: Det = Det::Chunk { lane: 0, n: 1 };
const NEW: Det = Det::Chunk { lane: 1, n: 3 };

#[test]
fn the_old_and_the_new_primary_never_act_on_different_entries() {
    loom::model(|| {
        let s = shared();
        let old = {
            let s = Arc::clone(&s);
            thread::spawn(move || {
                let w = Words::new(&s.words);
                fenced_append(&w, 0, 0, OLD, 1, || s.epoch.load(Acquire))
            })
        };
        // The standby claims epoch 2 (the liveness cell's CAS), fences,
        // and walks the log from entry 0.
        assert!(s.epoch.compare_exchange(1, 2, SeqCst, Acquire).is_ok());
        fence(SeqCst);
        let w = Words::new(&s.words);
        let new = fenced_append(&w, 0, 0, NEW, 2, || s.epoch.load(Acquire));
        let Appended::Go(acted_new) = new else {
            panic!("the new primary is never fenced here: {new:?}")
        };
        match old.join().unwrap() {
            Appended::Go(acted_old) => assert_eq!(acted_old, acted_new),
            Appended::Fenced => {}
            Appended::Full => panic!("not full"),
        }
        assert_eq!(w.get(0), Some(acted_new), "the log holds what was acted on");
    });
}

#[test]
fn a_fenced_primary_appending_after_the_claim_is_replayed_not_lost() {
    loom::model(|| {
        let s = shared();
        // The new primary first reads the log's end (entry 0 empty), then
        // appends; the old primary appends concurrently.
        let old = {
            let s = Arc::clone(&s);
            thread::spawn(move || {
                let w = Words::new(&s.words);
                fenced_append(&w, 0, 0, OLD, 1, || s.epoch.load(Acquire))
            })
        };
        assert!(s.epoch.compare_exchange(1, 2, SeqCst, Acquire).is_ok());
        fence(SeqCst);
        let w = Words::new(&s.words);
        let seen = w.get(0);
        let new = fenced_append(&w, 0, 0, NEW, 2, || s.epoch.load(Acquire));
        let old = old.join().unwrap();
        if let Some(d) = seen {
            assert_eq!(new, Appended::Go(d), "an entry seen is the entry replayed");
        }
        if let Appended::Go(d) = old {
            assert_eq!(new, Appended::Go(d));
            if d == OLD {
                // It appended before the claim (its epoch held after the
                // append): the claimer, reading after its fence, sees it.
                assert_eq!(seen, Some(OLD));
            }
        }
    });
}
