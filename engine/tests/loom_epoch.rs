//! Exhaustive interleaving checks of the primary/standby liveness cell.
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test -p tandem --test loom_epoch --release
//! ```
#![cfg(loom)]

use loom::{model::Builder, sync::Arc, thread};
use std::time::Duration;
use tandem::standby::epoch::{Fenced, Liveness, Wake};

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    builder.check(f);
}

#[test]
fn exactly_one_of_two_racing_claims_wins() {
    model(|| {
        let l = Arc::new(Liveness::new(0));
        let a = {
            let l = Arc::clone(&l);
            thread::spawn(move || l.claim(1, 5))
        };
        let b = l.claim(1, 7);
        let a = a.join().unwrap();
        assert!(a.is_ok() != b.is_ok(), "{a:?} {b:?}");
        assert_eq!(l.current(), 2);
    });
}

#[test]
fn after_a_claim_the_old_primary_is_fenced() {
    model(|| {
        let l = Arc::new(Liveness::new(0));
        let primary = {
            let l = Arc::clone(&l);
            thread::spawn(move || {
                let first = l.beat(1, 1);
                let second = l.beat(1, 2);
                (first, second)
            })
        };
        assert_eq!(l.claim(1, 3), Ok(2));
        let (first, second) = primary.join().unwrap();
        // Once fenced, fenced for good: an Ok never follows a Fenced.
        assert!(!(first.is_err() && second.is_ok()));
        assert_eq!(l.beat(1, 4), Err(Fenced { current: 2 }));
        assert!(l.beat(2, 4).is_ok());
    });
}

#[test]
fn a_failure_reported_while_the_standby_waits_is_seen_and_claimed_once() {
    model(|| {
        let l = Arc::new(Liveness::new(0));
        let standby = {
            let l = Arc::clone(&l);
            thread::spawn(move || {
                let w = l.wait_for_failure(1, Duration::from_secs(3600), || 0);
                (w, l.claim(1, 1))
            })
        };
        let reported = l.report_failure(1);
        let (w, claimed) = standby.join().unwrap();
        assert!(reported);
        assert_eq!(w, Wake::Failed);
        assert_eq!(claimed, Ok(2));
        assert!(!l.failed(), "the new epoch starts healthy");
    });
}

#[test]
fn a_failure_report_racing_a_claim_never_marks_the_new_epoch() {
    model(|| {
        let l = Arc::new(Liveness::new(0));
        let primary = {
            let l = Arc::clone(&l);
            thread::spawn(move || l.report_failure(1))
        };
        let claimed = l.claim(1, 9);
        let reported = primary.join().unwrap();
        assert_eq!(claimed, Ok(2));
        assert_eq!(l.current(), 2);
        assert!(!l.failed(), "reported: {reported}");
    });
}
