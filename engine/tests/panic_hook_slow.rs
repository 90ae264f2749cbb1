//! A panic answered by a standby is answered once, however long the
//! process's panic hook takes to print it.
//!
//! A user's job (source → standby → map that panics once → sink, with
//! checkpoints and a restart strategy) ran with `RUST_BACKTRACE=1`: the
//! standby took over, and then restart-all restarted the whole job for
//! `stalled: no heartbeat for 100 ms` — the worker was still inside the
//! default hook, symbolizing the backtrace, and its heartbeat had stopped.
//! Here the hook the engine chains to is made slow on purpose (it sleeps
//! well past the heartbeat timeout before printing), which is what a
//! symbolization does on a slow machine, only reproducibly. This file is a
//! binary of its own: the slow hook must be in place before the first job
//! installs the engine's.

mod common;

use common::Faults;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tandem::runtime::probe::ProbeAction;
use tandem::{
    CheckpointConfig, IterSource, JobBuilder, RecoveryKind, RestartStrategy, RuntimeConfig,
    StandbyConfig, TupleId,
};

const N: u64 = 20_000;
const HEARTBEAT: Duration = Duration::from_millis(100);
/// How long the hook takes: well past the heartbeat timeout.
const HOOK: Duration = Duration::from_millis(500);
const MESSAGE: &str = "injected panic, slow hook";

#[test]
fn a_panic_taken_over_by_a_standby_is_not_also_a_stall_while_the_hook_runs() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let injected = info
            .payload()
            .downcast_ref::<String>()
            .is_some_and(|m| m.starts_with(MESSAGE));
        if injected {
            std::thread::sleep(HOOK);
        } else {
            default(info);
        }
    }));
    let at = TupleId::new(1, N / 4);
    for round in 0..2 {
        let job = JobBuilder::new("slow-hook");
        job.default_parallelism(2);
        let src = job
            .source("src", |i| {
                let (p, n) = (i.parallelism as u64, i.instance as u64);
                IterSource((0..N).filter(move |s| s % p == n).map(|s| (s, 0)))
            })
            .rate_limit(100_000.0)
            .standby();
        let got = Arc::new(Mutex::new(Vec::new()));
        let g2 = Arc::clone(&got);
        src.map("op", |v: u64| v * 2)
            .for_each("sink", move |r| g2.lock().unwrap().push(r.value));
        let cores = tandem::sys::affinity::available_cores().len().min(2);
        let cfg = RuntimeConfig::default()
            .cores(cores)
            .standby(StandbyConfig::default())
            .checkpoint(CheckpointConfig::every(Duration::from_millis(50)))
            .restart(RestartStrategy::FixedDelay {
                attempts: 5,
                delay: Duration::ZERO,
            })
            .heartbeat_timeout(HEARTBEAT)
            .probes(Arc::new(Faults::new(vec![(
                "op",
                at,
                ProbeAction::Panic(MESSAGE.into()),
            )])));
        let rep = job.build().unwrap().run(&cfg).unwrap();
        // No restart-all for a worker that was printing the panic (the
        // sink is not transactional: one would also repeat records).
        assert!(
            rep.recovery
                .iter()
                .all(|r| r.kind != RecoveryKind::RestartAll),
            "round {round}: a restart-all for the hook's time: {:?}",
            rep.recovery
        );
        // One answer, the standby's, to the panic of its record. (A 5 ms
        // standby heartbeat on a shared VM may also see a primary silent
        // for the host's reasons: such a takeover is marked unprovoked
        // with its evidence, never blamed on the panic.)
        let answered: Vec<_> = rep
            .recovery
            .iter()
            .filter(|r| r.tuple_id == Some(at))
            .collect();
        assert!(
            answered.len() == 1
                && answered[0].kind == RecoveryKind::Takeover
                && answered[0].cause.contains("panicked"),
            "round {round}: {:?}",
            rep.recovery
        );
        assert!(
            rep.recovery
                .iter()
                .filter(|r| r.tuple_id != Some(at))
                .all(|r| r.unprovoked && r.evidence.is_some()),
            "round {round}: {:?}",
            rep.recovery
        );
        let mut got = std::mem::take(&mut *got.lock().unwrap());
        got.sort_unstable();
        let want: Vec<u64> = (0..N).map(|v| v * 2).collect();
        assert_eq!(got, want, "round {round}: the output");
    }
}
