//! Standbys beside checkpoints, end to end: a failure of a backed-up
//! operator is a takeover, every other failure restart-all from the last
//! complete checkpoint — and whatever the mix, the two-phase-commit sink's
//! committed output equals the fault-free run's, sorted, with no line
//! twice.
//!
//! The job: a rate-limited two-partition source → `fm` (a map with a
//! standby) → `mid` (a map without one) → key_by → `keyed` (per-key state
//! and end-of-stream summaries, with a standby) → a transactional file
//! sink. Checkpoints every few milliseconds, so barriers keep flowing
//! through the standbys' buffer queues while they take over.

mod common;

use common::*;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tandem::runtime::probe::{ProbeAction, ProbeFactory, RecordProbe};
use tandem::standby::{StandbyConfig, StandbyMode};
use tandem::{
    CheckpointConfig, IterSource, JobBuilder, JobReport, OperatorInfo, RecoveryKind,
    RestartStrategy, RuntimeConfig, TupleId,
};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    quiet_injected_panics();
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

const N: u64 = 40_000;

/// Warm and hot, with `fm`'s groups replaying the source and reading it
/// from buffer queues, the queues' records in typed slots and encoded.
const BOTH_WAYS: [(StandbyMode, bool, bool); 4] = [
    (StandbyMode::Warm, true, false),
    (StandbyMode::Hot, true, true),
    (StandbyMode::Warm, false, true),
    (StandbyMode::Hot, false, false),
];

/// The job; `keyed` instances are built by `factory`.
fn build(
    out: &Path,
    factory: impl Fn(&OperatorInfo) -> PerKey + Send + Sync + 'static,
) -> tandem::Job {
    let job = JobBuilder::new("composition");
    job.default_parallelism(2);
    let out = out.to_path_buf();
    job.source("src", |i| {
        let (inst, par) = (i.instance as u64, i.parallelism as u64);
        IterSource((0..N).filter(move |n| n % par == inst).map(|n| (n, n)))
    })
    .rate_limit(300_000.0)
    .standby()
    .map("fm", |n: u64| ((n % 97) as u32, n))
    .map("mid", |p: (u32, u64)| p)
    .standby()
    .key_by(|p: &(u32, u64)| p.0)
    .process("keyed", factory)
    .sink("sink", move |info| LineSink::new(&out, info, true));
    job.build().unwrap()
}

/// `replay`: the groups of `fm` replay the source (no queue) rather than
/// read its records from buffer queues; `encoded`: the queues hold records
/// encoded rather than in typed slots.
fn config(
    dir: &Path,
    (mode, replay, encoded): (StandbyMode, bool, bool),
    every: Duration,
) -> RuntimeConfig {
    let mut cp = CheckpointConfig::every(every);
    cp.dir = Some(dir.join("checkpoints"));
    RuntimeConfig::default()
        .cores(cores())
        .checkpoint(cp)
        .restart(RestartStrategy::FixedDelay {
            attempts: 10,
            delay: Duration::ZERO,
        })
        .heartbeat_timeout(Duration::from_millis(200))
        .standby(StandbyConfig {
            mode,
            heartbeat_timeout: Duration::from_millis(20),
            snapshot_interval: Duration::from_millis(10),
            queue_memory: 4 << 20,
            replay_sources: replay,
            encoded_queues: encoded,
            ..Default::default()
        })
}

/// The committed output of one run with `probes`, and its report.
fn run(
    tag: &str,
    how: (StandbyMode, bool, bool),
    every: Duration,
    probes: Option<Arc<dyn ProbeFactory>>,
    factory: impl Fn(&OperatorInfo) -> PerKey + Send + Sync + 'static,
) -> (Vec<String>, JobReport) {
    run_in(tag, how, every, |_| probes, factory)
}

/// As [`run`], with probes that may look at the run's checkpoint
/// directory.
fn run_in(
    tag: &str,
    how: (StandbyMode, bool, bool),
    every: Duration,
    probes: impl FnOnce(&Path) -> Option<Arc<dyn ProbeFactory>>,
    factory: impl Fn(&OperatorInfo) -> PerKey + Send + Sync + 'static,
) -> (Vec<String>, JobReport) {
    let dir = tempdir(tag);
    let out = dir.join("out");
    let mut cfg = config(&dir, how, every);
    if let Some(p) = probes(&dir.join("checkpoints")) {
        cfg = cfg.probes(p);
    }
    let report = build(&out, factory)
        .run(&cfg)
        .unwrap_or_else(|e| panic!("{tag} ({how:?}): {e}"));
    let lines = committed_lines(&out);
    std::fs::remove_dir_all(dir).unwrap();
    (lines, report)
}

/// The fault-free output (cached): every record once, one summary per key.
fn clean() -> Vec<String> {
    static CLEAN: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut c = CLEAN.lock().unwrap();
    if c.is_empty() {
        let (lines, _) = run(
            "clean",
            (StandbyMode::Warm, true, false),
            Duration::from_millis(10),
            None,
            |_| PerKey,
        );
        assert_eq!(
            lines.iter().filter(|l| l.starts_with("r ")).count() as u64,
            N
        );
        assert_eq!(lines.iter().filter(|l| l.starts_with("s ")).count(), 97);
        *c = lines;
    }
    c.clone()
}

fn panic_in(op: &'static str, partition: u32, seq: u64) -> FaultSpec<'static> {
    (
        op,
        TupleId::new(partition, seq),
        ProbeAction::Panic(format!("injected in {op} at {seq}")),
    )
}

/// The recoveries of `report` of `kind` on `operator` that answer a
/// failure (a takeover the standby made for a silence of the host's, on a
/// loaded machine, is marked unprovoked and not counted).
fn count(report: &JobReport, kind: RecoveryKind, operator: &str) -> usize {
    report
        .recovery
        .iter()
        .filter(|r| r.kind == kind && r.operator == operator && !r.unprovoked)
        .count()
}

/// Every checkpoint started is accounted for (how many complete is the
/// machine's business: on a loaded one every checkpoint of a short run may
/// overlap a takeover and be declined).
fn assert_checkpoints_accounted(report: &JobReport, what: &str) {
    let c = &report.checkpoints;
    eprintln!(
        "{what}: checkpoints {} started, {} completed, {} failed ({:?}), {} pending; recoveries {:?}",
        c.started,
        c.completed,
        c.failed,
        c.last_failure,
        c.pending,
        report
            .recovery
            .iter()
            .map(|r| (r.kind.name(), r.operator.as_str(), r.restored_checkpoint))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        c.started,
        c.completed + c.failed + c.pending,
        "{what}: {c:?}"
    );
}

#[test]
fn takeover_then_restart_all_then_takeover_commit_exactly_the_clean_output() {
    let _g = serial();
    let clean = clean();
    for mode in BOTH_WAYS {
        let faults = Faults::new(vec![panic_in("fm", 0, 4_000), panic_in("keyed", 0, 14_000)]);
        let mid = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (f2, m2) = (faults.clone(), Arc::clone(&mid));
        let (got, report) = run_in(
            "mix",
            mode,
            Duration::from_millis(10),
            move |dir| {
                // `mid` fails once a checkpoint is complete, so that the
                // restart restores one.
                Some(Arc::new(PanicAfterCheckpoints {
                    faults: f2,
                    operator: "mid",
                    from: TupleId::new(1, 9_000),
                    checkpoints: 1,
                    dir: dir.to_path_buf(),
                    fired: m2,
                }) as Arc<dyn ProbeFactory>)
            },
            |_| PerKey,
        );
        let what = format!("{mode:?}");
        assert!(
            faults.all_fired() && mid.load(Ordering::SeqCst),
            "{what}: every fault fired: {:?}, mid {}; checkpoints {:?}; recovery {:?}",
            faults
                .0
                .iter()
                .map(|f| (&f.0, f.3.load(Ordering::SeqCst)))
                .collect::<Vec<_>>(),
            mid.load(Ordering::SeqCst),
            report.checkpoints,
            report.recovery
        );
        assert_same(&clean, &got);
        assert_eq!(
            count(&report, RecoveryKind::Takeover, "fm"),
            1,
            "{what}: {:?}",
            report.recovery
        );
        assert_eq!(
            count(&report, RecoveryKind::Takeover, "keyed"),
            1,
            "{what}: {:?}",
            report.recovery
        );
        assert!(
            count(&report, RecoveryKind::RestartAll, "mid") >= 1,
            "{what}: {:?}",
            report.recovery
        );
        // The restart restored a checkpoint (`mid` failed only once one was
        // complete): the groups were rebuilt from it.
        assert!(
            report
                .recovery
                .iter()
                .filter(|r| r.kind == RecoveryKind::RestartAll)
                .all(|r| r.restored_checkpoint.is_some()),
            "{what}: {:?}",
            report.recovery
        );
        assert_checkpoints_accounted(&report, &what);
    }
}

/// Checkpoints back to back (1 ms apart): every takeover happens while a
/// barrier is somewhere between the sources and the sink.
#[test]
fn takeovers_while_checkpoints_align_end_with_the_clean_output() {
    let _g = serial();
    let clean = clean();
    for mode in BOTH_WAYS {
        let faults = Faults::new(vec![
            panic_in("fm", 1, 3_000),
            panic_in("keyed", 0, 6_000),
            panic_in("fm", 0, 9_000),
            panic_in("keyed", 1, 12_000),
            ("fm", TupleId::new(1, 15_000), ProbeAction::CutInput),
        ]);
        let (got, report) = run(
            "aligning",
            mode,
            Duration::from_millis(1),
            Some(Arc::new(faults.clone())),
            |_| PerKey,
        );
        let what = format!("{mode:?}");
        assert!(faults.all_fired(), "{what}: every fault fired");
        assert_same(&clean, &got);
        let takeovers = report
            .recovery
            .iter()
            .filter(|r| r.kind == RecoveryKind::Takeover && !r.unprovoked)
            .count();
        assert_eq!(takeovers, 5, "{what}: {:?}", report.recovery);
        assert_checkpoints_accounted(&report, &what);
    }
}

/// `mid` fails on the very record whose failure in `fm` is being taken
/// over: the restart stops a takeover in progress.
#[test]
fn a_restart_during_a_takeover_ends_with_the_clean_output() {
    let _g = serial();
    let clean = clean();
    for mode in [StandbyMode::Warm, StandbyMode::Hot] {
        let faults = Faults::new(vec![panic_in("fm", 0, 8_000), panic_in("mid", 0, 8_000)]);
        let (got, report) = run(
            "during",
            (mode, true, false),
            Duration::from_millis(10),
            Some(Arc::new(faults.clone())),
            |_| PerKey,
        );
        let what = format!("{mode:?}");
        assert!(faults.all_fired(), "{what}: every fault fired");
        assert_same(&clean, &got);
        assert_eq!(
            count(&report, RecoveryKind::Takeover, "fm"),
            1,
            "{what}: {:?}",
            report.recovery
        );
        assert!(
            count(&report, RecoveryKind::RestartAll, "mid") >= 1,
            "{what}: {:?}",
            report.recovery
        );
        assert_checkpoints_accounted(&report, &what);
    }
}

/// The standbys of `keyed` cannot even be built in the first attempt (its
/// standbys fail, three times, and the group gives up on them); then its
/// primary fails too: restart-all, and the restarted attempt's groups have
/// standbys again.
#[test]
fn when_primary_and_standbys_of_a_group_fail_it_falls_back_to_restart_all() {
    let _g = serial();
    let clean = clean();
    let builds: Arc<[AtomicUsize; 2]> = Arc::new(Default::default());
    let b2 = Arc::clone(&builds);
    let faults = Faults::new(vec![panic_in("keyed", 1, 12_000)]);
    // Hot: a standby builds its operator once the primary has (so the
    // first build of each instance is its primary's).
    let (got, report) = run(
        "gone",
        (StandbyMode::Hot, true, false),
        Duration::from_millis(10),
        Some(Arc::new(faults.clone())),
        move |info| {
            let k = b2[info.instance].fetch_add(1, Ordering::SeqCst);
            if info.attempt == 0 && k >= 1 {
                panic!("injected: the standby's operator cannot be built");
            }
            PerKey
        },
    );
    assert!(faults.all_fired());
    assert_same(&clean, &got);
    let sb = report.standby.as_ref().expect("standby stats");
    assert!(sb.standby_failures >= 3, "{sb:?}");
    assert!(
        count(&report, RecoveryKind::RestartAll, "keyed") >= 1,
        "{:?}",
        report.recovery
    );
    assert_eq!(
        count(&report, RecoveryKind::Takeover, "keyed"),
        0,
        "{:?}",
        report.recovery
    );
    assert_checkpoints_accounted(&report, "gone");
}

/// A record that fails `keyed`'s primary and then the standby that took
/// over (twice in a row) is restart-all; the restarted attempt gets past
/// it (the fault fires twice only).
#[test]
fn a_record_that_fails_two_primaries_in_a_row_is_restart_all() {
    let _g = serial();
    let clean = clean();
    struct Twice(Arc<AtomicUsize>);
    impl RecordProbe for Twice {
        fn before(&mut self, id: TupleId) -> ProbeAction {
            if id == TupleId::new(1, 10_001) && self.0.fetch_add(1, Ordering::SeqCst) < 2 {
                ProbeAction::Panic("injected poison".into())
            } else {
                ProbeAction::Continue
            }
        }
    }
    struct F(Arc<AtomicUsize>);
    impl ProbeFactory for F {
        fn probe(&self, operator: &str, _i: usize) -> Option<Box<dyn RecordProbe>> {
            (operator == "keyed")
                .then(|| Box::new(Twice(Arc::clone(&self.0))) as Box<dyn RecordProbe>)
        }
    }
    let fired = Arc::new(AtomicUsize::new(0));
    let (got, report) = run(
        "poison",
        (StandbyMode::Warm, true, false),
        Duration::from_millis(10),
        Some(Arc::new(F(Arc::clone(&fired)))),
        |_| PerKey,
    );
    assert!(
        fired.load(Ordering::SeqCst) >= 3,
        "the restarted attempt saw the record"
    );
    assert_same(&clean, &got);
    assert_eq!(
        count(&report, RecoveryKind::Takeover, "keyed"),
        1,
        "{:?}",
        report.recovery
    );
    assert!(
        count(&report, RecoveryKind::RestartAll, "keyed") >= 1,
        "{:?}",
        report.recovery
    );
    assert_checkpoints_accounted(&report, "poison");
}
