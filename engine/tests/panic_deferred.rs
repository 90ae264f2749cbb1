//! `PanicOutput::Deferred`: a panic in an operator is printed by the
//! engine — its line at once, its backtrace resolved on a thread of its
//! own — and the hook installed before the engine's is not called for it,
//! so a standby sharing the panicking worker (one core) takes over without
//! waiting for a slow hook. With the default (`Chained`) that hook is
//! called. This file is a binary of its own: its hook must be installed
//! before the engine's.

mod common;

use common::Faults;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tandem::runtime::probe::ProbeAction;
use tandem::{
    IterSource, JobBuilder, PanicOutput, RecoveryKind, RuntimeConfig, StandbyConfig, TupleId,
};

const N: u64 = 20_000;
const MESSAGE: &str = "injected panic, deferred output";

/// Panics of this test the previous hook saw.
static SEEN: AtomicUsize = AtomicUsize::new(0);

fn run(output: PanicOutput) -> (Vec<u64>, tandem::JobReport) {
    let job = JobBuilder::new("deferred-panic");
    job.default_parallelism(1);
    let src = job
        .source("src", |_| IterSource((0..N).map(|s| (s, 0))))
        .standby();
    let got = Arc::new(Mutex::new(Vec::new()));
    let g2 = Arc::clone(&got);
    src.map("op", |v: u64| v * 2)
        .for_each("sink", move |r| g2.lock().unwrap().push(r.value));
    let cfg = RuntimeConfig::default()
        .cores(1)
        .standby(StandbyConfig::default())
        .panic_output(output)
        .probes(Arc::new(Faults::new(vec![(
            "op",
            TupleId::new(0, N / 3),
            ProbeAction::Panic(MESSAGE.into()),
        )])));
    let rep = job.build().unwrap().run(&cfg).unwrap();
    let mut v = std::mem::take(&mut *got.lock().unwrap());
    v.sort_unstable();
    (v, rep)
}

#[test]
fn a_deferred_panic_bypasses_the_previous_hook_and_is_taken_over_exactly() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let ours = info
            .payload()
            .downcast_ref::<String>()
            .is_some_and(|m| m.starts_with(MESSAGE));
        if ours {
            SEEN.fetch_add(1, Ordering::SeqCst);
            // What symbolizing a backtrace does on a slow machine.
            std::thread::sleep(Duration::from_millis(200));
        } else {
            default(info);
        }
    }));
    let want: Vec<u64> = (0..N).map(|v| v * 2).collect();
    for (output, hooked) in [(PanicOutput::Deferred, 0), (PanicOutput::Chained, 1)] {
        SEEN.store(0, Ordering::SeqCst);
        let (got, rep) = run(output);
        assert_eq!(
            SEEN.load(Ordering::SeqCst),
            hooked,
            "{output:?}: calls of the previous hook"
        );
        let takeovers = rep
            .recovery
            .iter()
            .filter(|r| r.kind == RecoveryKind::Takeover && r.tuple_id.is_some())
            .count();
        assert_eq!(takeovers, 1, "{output:?}: {:?}", rep.recovery);
        // For the reader (never asserted): fault → the standby's claim.
        eprintln!("{output:?}: detected in {} µs", rep.recovery[0].detect_us);
        assert_eq!(rep.restarts, 0, "{output:?}");
        assert!(got == want, "{output:?}: the output differs");
    }
}
