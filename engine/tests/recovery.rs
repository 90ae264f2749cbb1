//! Checkpoints and restart-all recovery, end to end: a faulted run's
//! committed output equals the fault-free run's, whatever the fault.
//!
//! The job: a rate-limited two-partition source → map → key_by → keyed
//! (per-record line + per-key summary at the end, from restored state) → a
//! two-phase-commit file sink. Checkpoints every few milliseconds, so the
//! faults land between checkpoints and recovery has to restore state,
//! rewind sources and discard uncommitted output.

mod common;

use common::*;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tandem::runtime::probe::ProbeAction;
use tandem::{
    CheckpointConfig, CheckpointMode, IterSource, JobBuilder, JobError, RestartStrategy,
    RuntimeConfig, TupleId,
};

/// Recovery runs are timed by heartbeats: run them one at a time, so that
/// tests competing for two cores do not starve each other's workers.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

const N: u64 = 30_000;

/// Source instance `i` of `par`: the records `n < N` with `n % par == i`.
fn partition(i: &tandem::OperatorInfo) -> IterSource<impl Iterator<Item = (u64, u64)>> {
    let (inst, par) = (i.instance, i.parallelism);
    IterSource(
        (0..N)
            .filter(move |n| (*n as usize) % par == inst)
            .map(|n| (n, n)),
    )
}

fn build(out: &Path, transactional: bool) -> tandem::Job {
    let job = JobBuilder::new("recovery");
    job.default_parallelism(2);
    let out = out.to_path_buf();
    job.source("src", partition)
        .rate_limit(300_000.0)
        .map("map", |n: u64| ((n % 97) as u32, n))
        .key_by(|p: &(u32, u64)| p.0)
        .process("keyed", |_| PerKey)
        .sink("sink", move |info| LineSink::new(&out, info, transactional));
    job.build().unwrap()
}

fn config(dir: &Path, mode: CheckpointMode) -> RuntimeConfig {
    let mut cp = CheckpointConfig::every(Duration::from_millis(10));
    cp.mode = mode;
    cp.dir = Some(dir.join("checkpoints"));
    RuntimeConfig::default()
        .cores(cores())
        .pin(false)
        .checkpoint(cp)
        .restart(RestartStrategy::FixedDelay {
            attempts: 10,
            delay: Duration::ZERO,
        })
        .heartbeat_timeout(Duration::from_millis(100))
}

fn clean_output() -> Vec<String> {
    let dir = tempdir("clean");
    let out = dir.join("out");
    build(&out, true)
        .run(&config(&dir, CheckpointMode::ExactlyOnce))
        .unwrap();
    let lines = committed_lines(&out);
    std::fs::remove_dir_all(dir).unwrap();
    // Sanity: every record once, one summary per key.
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("r ")).count() as u64,
        N
    );
    assert_eq!(lines.iter().filter(|l| l.starts_with("s ")).count(), 97);
    lines
}

/// What [`Witness`] saw of one fault as it fired.
#[derive(Clone, Copy, Debug)]
struct Fired {
    tuple: TupleId,
    /// A checkpoint was surely complete.
    after_checkpoint: bool,
    /// The attempt it fired in (how many times its operator instance's
    /// probe was built before).
    attempt: u32,
}

/// `faults`, noting what each one saw as it fired.
struct Witness {
    faults: Faults,
    dir: std::path::PathBuf,
    fired: Arc<std::sync::Mutex<Vec<Fired>>>,
    builds: std::sync::Mutex<std::collections::HashMap<(String, usize), u32>>,
}

impl tandem::runtime::probe::ProbeFactory for Witness {
    fn probe(
        &self,
        operator: &str,
        instance: usize,
    ) -> Option<Box<dyn tandem::runtime::probe::RecordProbe>> {
        let mut builds = self.builds.lock().unwrap();
        let n = builds.entry((operator.to_string(), instance)).or_default();
        let attempt = *n;
        *n += 1;
        Some(Box::new(WitnessProbe {
            inner: self.faults.probe(operator, instance)?,
            dir: self.dir.clone(),
            fired: Arc::clone(&self.fired),
            attempt,
        }))
    }
}

struct WitnessProbe {
    inner: Box<dyn tandem::runtime::probe::RecordProbe>,
    dir: std::path::PathBuf,
    fired: Arc<std::sync::Mutex<Vec<Fired>>>,
    attempt: u32,
}

impl tandem::runtime::probe::RecordProbe for WitnessProbe {
    fn before(&mut self, id: TupleId) -> ProbeAction {
        let a = self.inner.before(id);
        if !matches!(a, ProbeAction::Continue) {
            // Two published: the supervisor has seen the first complete
            // (one is in flight at a time), so a restart now restores one.
            let after_checkpoint = tandem::checkpoint::list(&self.dir).is_ok_and(|l| l.len() >= 2);
            self.fired.lock().unwrap().push(Fired {
                tuple: id,
                after_checkpoint,
                attempt: self.attempt,
            });
        }
        a
    }
}

/// A faulted run's committed output, its report, and what each fault saw
/// as it fired.
type Faulted = (Vec<String>, tandem::JobReport, Vec<Fired>);

fn faulted_output(faults: Faults, mode: CheckpointMode) -> Faulted {
    let dir = tempdir("faulted");
    let out = dir.join("out");
    let witness = Witness {
        faults: faults.clone(),
        dir: dir.join("checkpoints"),
        fired: Arc::default(),
        builds: Default::default(),
    };
    let seen = Arc::clone(&witness.fired);
    let cfg = config(&dir, mode).probes(Arc::new(witness));
    let report = build(&out, true).run(&cfg).unwrap();
    assert!(faults.all_fired(), "every fault fired");
    let lines = committed_lines(&out);
    std::fs::remove_dir_all(dir).unwrap();
    let seen = seen.lock().unwrap().clone();
    (lines, report, seen)
}

#[test]
fn each_fault_kind_recovers_to_exactly_the_clean_output() {
    let _serial = serial();
    let clean = clean_output();
    let cases: Vec<(&str, Vec<FaultSpec>)> = vec![
        (
            "panic in a stateless operator",
            vec![(
                "map",
                TupleId::new(1, 9_000),
                ProbeAction::Panic("boom".into()),
            )],
        ),
        (
            "panic in the keyed operator",
            vec![(
                "keyed",
                TupleId::new(0, 7_000),
                ProbeAction::Panic("boom".into()),
            )],
        ),
        (
            "cut input of the keyed operator",
            vec![("keyed", TupleId::new(1, 11_000), ProbeAction::CutInput)],
        ),
        (
            "stall past the heartbeat timeout",
            vec![(
                "map",
                TupleId::new(0, 8_000),
                ProbeAction::Stall(Duration::from_millis(500)),
            )],
        ),
        (
            "four successive failures",
            vec![
                (
                    "map",
                    TupleId::new(0, 2_000),
                    ProbeAction::Panic("1".into()),
                ),
                (
                    "keyed",
                    TupleId::new(1, 5_000),
                    ProbeAction::Panic("2".into()),
                ),
                ("sink", TupleId::new(0, 9_000), ProbeAction::CutInput),
                (
                    "map",
                    TupleId::new(1, 13_000),
                    ProbeAction::Panic("4".into()),
                ),
            ],
        ),
    ];
    for (what, specs) in cases {
        let n = specs.len();
        let (faulted, report, fired) =
            faulted_output(Faults::new(specs), CheckpointMode::ExactlyOnce);
        assert_eq!(fired.len(), n, "{what}: {fired:?}");
        // Every attempt a fault fired in failed and was restarted. (Two
        // faults may fire in one attempt, in workers the stop had not
        // reached yet; a heavily loaded machine may add a restart for a
        // worker it starved past the heartbeat, recovered all the same.)
        let attempts: std::collections::BTreeSet<u32> = fired.iter().map(|f| f.attempt).collect();
        assert!(
            report.restarts as usize >= attempts.len(),
            "{what}: {} restarts, faults fired in attempts {attempts:?}",
            report.restarts
        );
        assert_eq!(report.recovery.len(), report.restarts as usize, "{what}");
        assert!(report.checkpoints.completed > 0, "{what}: no checkpoint");
        assert_same(&clean, &faulted);
        // The last restart produced output. (An earlier one may have met
        // the next fault first.)
        let last = report.recovery.last().expect("a restart");
        assert!(last.first_output_us.is_some(), "{what}: {last:?}");
        // A fault after a completed checkpoint restores it rather than
        // starting over. (Most faults here come ≥ 45 ms into the run, with
        // 10 ms checkpoints; on a machine loaded enough that none had
        // completed yet, starting over is right, and equally exact.)
        for r in &report.recovery {
            let after = fired
                .iter()
                .any(|f| f.after_checkpoint && r.tuple_id == Some(f.tuple));
            assert!(
                !after || r.restored_checkpoint.is_some(),
                "{what}: a fault after a complete checkpoint restored none: {r:?}"
            );
        }
    }
}

#[test]
fn at_least_once_mode_loses_nothing() {
    let _serial = serial();
    let clean = clean_output();
    let faults = Faults::new(vec![(
        "keyed",
        TupleId::new(0, 6_000),
        ProbeAction::Panic("boom".into()),
    )]);
    let (faulted, report, _) = faulted_output(faults, CheckpointMode::AtLeastOnce);
    assert!(report.restarts >= 1);
    // Records: every one at least once. (Summaries may differ: at-least-once
    // state can count a record twice.)
    let recs = |v: &[String]| -> std::collections::BTreeSet<String> {
        v.iter().filter(|l| l.starts_with("r ")).cloned().collect()
    };
    assert_eq!(recs(&clean), recs(&faulted));
}

#[test]
fn a_direct_sink_counts_the_duplicates_it_writes_after_a_restart() {
    let _serial = serial();
    let dir = tempdir("direct");
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let faults = Faults::new(vec![(
        "keyed",
        TupleId::new(1, 10_000),
        ProbeAction::Panic("boom".into()),
    )]);
    let cfg = config(&dir, CheckpointMode::ExactlyOnce).probes(Arc::new(faults));
    let report = build(&out, false).run(&cfg).unwrap();
    let mut lines = Vec::new();
    for i in 0..2 {
        let p = out.join(format!("direct-{i}.txt"));
        if let Ok(s) = std::fs::read_to_string(p) {
            lines.extend(s.lines().map(str::to_string));
        }
    }
    let unique: std::collections::BTreeSet<&String> = lines.iter().collect();
    assert!(report.restarts >= 1);
    assert_eq!(
        report.duplicates_emitted as usize,
        lines.len() - unique.len(),
        "duplicates counted = duplicates in the file"
    );
    assert_eq!(
        unique.iter().filter(|l| l.starts_with("r ")).count() as u64,
        N
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn when_the_strategy_gives_up_the_error_names_the_operator() {
    let _serial = serial();
    let dir = tempdir("giveup");
    let faults = Faults::new(vec![
        (
            "map",
            TupleId::new(0, 1_000),
            ProbeAction::Panic("one".into()),
        ),
        (
            "map",
            TupleId::new(0, 3_000),
            ProbeAction::Panic("two".into()),
        ),
    ]);
    let cfg = config(&dir, CheckpointMode::ExactlyOnce)
        .probes(Arc::new(faults))
        .restart(RestartStrategy::FixedDelay {
            attempts: 1,
            delay: Duration::ZERO,
        });
    let err = build(&dir.join("out"), true).run(&cfg).unwrap_err();
    assert!(matches!(err, JobError::GaveUp { .. }), "{err}");
    assert_eq!(err.operator(), Some("map"));
    assert!(err.to_string().contains("two"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_job_starts_from_a_savepoint_and_finishes_with_the_clean_output() {
    let _serial = serial();
    let clean = clean_output();
    let dir = tempdir("savepoint");
    let out = dir.join("out");
    // Run 1: take a savepoint, then fail for good (strategy none).
    let faults = Faults::new(vec![(
        "keyed",
        TupleId::new(0, 14_500),
        ProbeAction::Panic("stop".into()),
    )]);
    let mut cfg = config(&dir, CheckpointMode::ExactlyOnce)
        .probes(Arc::new(faults))
        .restart(RestartStrategy::None);
    // No periodic checkpoint: the savepoint is the only one, so nothing
    // after it is committed before the failure.
    cfg.checkpoint.as_mut().unwrap().interval = Duration::from_secs(3600);
    let handle = build(&out, true).start(&cfg).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    let sp = handle.savepoint().unwrap();
    assert!(handle.join().is_err(), "the first run fails");
    // Run 2: a new job (another process, in practice) from the savepoint.
    let cfg = config(&dir, CheckpointMode::ExactlyOnce).restore_from(&sp);
    let report = build(&out, true).run(&cfg).unwrap();
    let id: u64 = sp.file_name().unwrap().to_str().unwrap()["sp-".len()..]
        .parse()
        .unwrap();
    assert_eq!(report.restored_from.map(|r| r.id), Some(id));
    let lines = committed_lines(&out);
    assert_same(&clean, &lines);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_savepoint_of_another_job_is_refused_with_a_clear_error() {
    let _serial = serial();
    let dir = tempdir("incompatible");
    let job = JobBuilder::new("other");
    job.source("numbers", |_| IterSource((0..100_000u64).map(|n| (n, n))))
        .rate_limit(100_000.0)
        .key_by(|n: &u64| *n)
        .aggregate("count", |c: &mut u64, _n: &u64| {
            *c += 1;
            *c
        })
        .for_each("drop", |_| {});
    let mut cp = CheckpointConfig::every(Duration::from_millis(1));
    cp.dir = Some(dir.join("cp"));
    let handle = job
        .build()
        .unwrap()
        .start(&RuntimeConfig::default().cores(1).pin(false).checkpoint(cp))
        .unwrap();
    let sp = handle.savepoint().unwrap();
    handle.cancel();
    assert!(matches!(handle.join(), Err(JobError::Cancelled)));
    let err = match build(&dir.join("out"), true).start(
        &RuntimeConfig::default()
            .cores(1)
            .pin(false)
            .restore_from(&sp),
    ) {
        Err(e) => e,
        Ok(_) => panic!("a foreign savepoint was accepted"),
    };
    assert!(err.to_string().contains("numbers"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_corrupted_newest_checkpoint_is_reported_and_the_previous_one_used() {
    let _serial = serial();
    let dir = tempdir("corrupt");
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let cp_dir = dir.join("checkpoints");
    // Run 1 keeps several checkpoints, then fails for good.
    let fired = Arc::new(AtomicBool::new(false));
    let faults = PanicAfterCheckpoints {
        faults: Faults::new(vec![]),
        operator: "keyed",
        from: TupleId::new(1, 13_000),
        checkpoints: 2,
        dir: cp_dir.clone(),
        fired: Arc::clone(&fired),
    };
    let cfg = config(&dir, CheckpointMode::ExactlyOnce)
        .probes(Arc::new(faults))
        .restart(RestartStrategy::None);
    assert!(build(&out, false).run(&cfg).is_err());
    assert!(fired.load(Ordering::SeqCst), "run 1 failed as planned");
    let mut ids: Vec<u64> = tandem::checkpoint::list(&cp_dir)
        .unwrap()
        .iter()
        .map(|l| l.id)
        .collect();
    ids.sort();
    assert!(
        ids.len() >= 2,
        "run 1 kept at least two checkpoints: {ids:?}"
    );
    let (newest, previous) = (ids[ids.len() - 1], ids[ids.len() - 2]);
    // Flip one payload byte of a state file of the newest checkpoint.
    let m = tandem::checkpoint::Manifest::load(&cp_dir.join(format!("manifest-{newest}.json")))
        .unwrap();
    let f = m
        .files
        .iter()
        .find(|f| f.operator == "keyed" && f.payload_len > 0)
        .unwrap();
    let path = m.file_path(f);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[4096 + 3] ^= 0x40;
    std::fs::write(&path, bytes).unwrap();
    // Run 2 starts from the directory: the damaged one is skipped, said why.
    let report = build(&out, false)
        .run(&config(&dir, CheckpointMode::ExactlyOnce).restore_from(&cp_dir))
        .unwrap();
    assert_eq!(report.restored_from.map(|r| r.id), Some(previous));
    assert_eq!(
        report.restore_skipped.len(),
        1,
        "{:?}",
        report.restore_skipped
    );
    assert!(
        report.restore_skipped[0].contains("checksum"),
        "{:?}",
        report.restore_skipped
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn every_checkpoint_started_under_disk_pressure_is_reported_completed_failed_or_pending() {
    let _serial = serial();
    let clean = clean_output();
    // The checkpoints go to the temp dir (a disk here) while another
    // writer keeps that disk busy with large fsynced writes.
    let dir = tempdir("pressure");
    let out = dir.join("out");
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = Arc::clone(&stop);
        let path = dir.join("pressure.bin");
        std::thread::spawn(move || {
            use std::io::{Seek, Write};
            let mut f = std::fs::File::create(&path).unwrap();
            let chunk = vec![0x5au8; 4 << 20];
            let mut rounds = 0;
            while !stop.load(Ordering::Relaxed) && rounds < 200 {
                if rounds % 8 == 0 {
                    f.rewind().unwrap();
                }
                f.write_all(&chunk).unwrap();
                f.sync_data().unwrap();
                rounds += 1;
            }
        })
    };
    let faults = Faults::new(vec![(
        "keyed",
        TupleId::new(1, 9_001),
        ProbeAction::Panic("injected".into()),
    )]);
    let cfg = config(&dir, CheckpointMode::ExactlyOnce).probes(Arc::new(faults.clone()));
    let report = build(&out, true).run(&cfg).unwrap();
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    assert!(faults.all_fired(), "the fault fired");
    let c = &report.checkpoints;
    assert!(c.started >= 1, "{c:?}");
    assert_eq!(
        c.started,
        c.completed + c.failed + c.pending,
        "every checkpoint started is accounted for: {c:?}"
    );
    assert_eq!(c.durations_us.len() as u64, c.completed, "{c:?}");
    assert!(c.late <= c.completed, "{c:?}");
    assert_same(&clean, &committed_lines(&out));
    std::fs::remove_dir_all(dir).unwrap();
}

/// A worker slow to build its operators when its attempt fails cannot be
/// joined (it is abandoned); its sink factory must still never run beside
/// the next attempt's — the two-phase-commit sink's open settles the
/// output directory, deleting what it takes for a dead attempt's staged
/// epochs — nor after the job has returned.
#[test]
fn a_stopped_attempts_slow_sink_factory_never_runs_beside_its_successor() {
    use std::sync::Mutex;
    use std::time::Instant;
    let _serial = serial();
    let dir = tempdir("slow-factory");
    let out = dir.join("out");
    // (attempt, instance, started, ended) of every sink factory call.
    type Call = (u32, usize, Instant, Instant);
    let calls: Arc<Mutex<Vec<Call>>> = Arc::default();
    let job = JobBuilder::new("slow-factory");
    job.default_parallelism(2);
    let (o, log) = (out.clone(), Arc::clone(&calls));
    job.source("src", partition)
        .rate_limit(100_000.0)
        .map("map", |n: u64| Line::Rec(n, n))
        .sink("sink", move |info| {
            let started = Instant::now();
            if info.attempt == 0 && info.instance == 1 {
                // Still in here when map[0]'s panic stops attempt 0.
                std::thread::sleep(Duration::from_millis(400));
            }
            let s = LineSink::new(&o, info, true);
            let ended = Instant::now();
            log.lock()
                .unwrap()
                .push((info.attempt, info.instance, started, ended));
            s
        });
    let faults = Faults::new(vec![(
        "map",
        TupleId::new(0, 5),
        ProbeAction::Panic("boom".into()),
    )]);
    let cfg = config(&dir, CheckpointMode::ExactlyOnce).probes(Arc::new(faults.clone()));
    let report = job.build().unwrap().run(&cfg).unwrap();
    assert!(faults.all_fired());
    assert!(!report.recovery.is_empty(), "the panic caused a restart");
    let at_return = calls.lock().unwrap().len();
    std::thread::sleep(Duration::from_millis(600));
    let calls = calls.lock().unwrap().clone();
    assert_eq!(
        calls.len(),
        at_return,
        "a sink factory ran after the job returned"
    );
    for a in &calls {
        for b in calls.iter().filter(|b| b.0 > a.0) {
            assert!(
                a.3 <= b.2,
                "attempt {}'s factory of sink[{}] ended after attempt {}'s of sink[{}] began",
                a.0,
                a.1,
                b.0,
                b.1
            );
        }
    }
    let lines = committed_lines(&out);
    let mut expected: Vec<String> = (0..N).map(|n| format!("r {n} {n}")).collect();
    expected.sort();
    assert_same(&expected, &lines);
    std::fs::remove_dir_all(dir).unwrap();
}

/// Incremental checkpoints ([`tandem::state::delta`]): with chains of up to
/// 20 deltas allowed, every restart restores a chain (a whole archive and
/// the deltas after it), and the output is still exactly the clean run's.
#[test]
fn restarts_from_chains_of_incremental_checkpoints_recover_to_exactly_the_clean_output() {
    let _serial = serial();
    let clean = clean_output();
    let specs = vec![
        (
            "keyed",
            TupleId::new(1, 6_000),
            ProbeAction::Panic("1".into()),
        ),
        (
            "map",
            TupleId::new(0, 10_000),
            ProbeAction::Panic("2".into()),
        ),
        (
            "keyed",
            TupleId::new(0, 13_500),
            ProbeAction::Panic("3".into()),
        ),
    ];
    let dir = tempdir("incremental");
    let out = dir.join("out");
    let faults = Faults::new(specs);
    let mut cfg = config(&dir, CheckpointMode::ExactlyOnce).probes(Arc::new(faults.clone()));
    let cp = cfg.checkpoint.as_mut().expect("checkpoints");
    cp.incremental = Some(tandem::state::delta::Incremental {
        max_deltas: 20,
        max_delta_ratio: 50.0,
    });
    let report = build(&out, true).run(&cfg).unwrap();
    assert!(faults.all_fired(), "every fault fired");
    assert_same(&clean, &committed_lines(&out));
    let cp = &report.checkpoints;
    assert!(cp.incremental > 0, "no checkpoint wrote a delta: {cp:?}");
    assert!(
        cp.restore_bytes_final >= cp.state_bytes_final,
        "a restore reads at least the whole archive: {cp:?}"
    );
    // Each completed checkpoint's size, in order: the first whole, the
    // deltas counted, the bytes adding up to what was written.
    assert_eq!(cp.sizes.len() as u64, cp.completed, "{cp:?}");
    assert!(!cp.sizes[0].delta, "the first checkpoint is whole: {cp:?}");
    assert_eq!(cp.sizes[0].bytes, cp.first_bytes);
    assert_eq!(
        cp.sizes.iter().filter(|s| s.delta).count() as u64,
        cp.incremental
    );
    assert_eq!(cp.sizes.iter().map(|s| s.bytes).sum::<u64>(), cp.bytes);
    assert!(cp.sizes.windows(2).all(|w| w[0].id < w[1].id), "{cp:?}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// Damages, at the fault, every whole keyed archive the store holds, then
/// panics (after a pause in which any checkpoint under way publishes; the
/// keyed operator, held here, lets no newer one complete).
struct DamageThenPanic {
    from: TupleId,
    dir: std::path::PathBuf,
    fired: Arc<AtomicBool>,
}

impl tandem::runtime::probe::RecordProbe for DamageThenPanic {
    fn before(&mut self, id: TupleId) -> ProbeAction {
        let due = id.partition() == self.from.partition() && id.seq() >= self.from.seq();
        if !due || self.fired.load(Ordering::SeqCst) {
            return ProbeAction::Continue;
        }
        if tandem::checkpoint::list(&self.dir).map_or(0, |l| l.len()) < 2 {
            // Slowed until two checkpoints are published: on a busy
            // machine the partition would otherwise end first, the fault
            // unfired.
            return ProbeAction::Delay(Duration::from_micros(200));
        }
        if self.fired.swap(true, Ordering::SeqCst) {
            return ProbeAction::Continue;
        }
        std::thread::sleep(Duration::from_millis(20));
        for l in tandem::checkpoint::list(&self.dir).unwrap() {
            let m = l.load().unwrap();
            for f in m
                .files
                .iter()
                .filter(|f| f.operator == "keyed" && f.payload_len > 0)
            {
                if f.delta {
                    continue;
                }
                let path = m.file_path(f);
                let Ok(mut bytes) = std::fs::read(&path) else {
                    continue;
                };
                // The first byte of the payload: its block is the one a
                // lazy restore reads first.
                bytes[4096] ^= 0x40;
                std::fs::write(&path, bytes).unwrap();
            }
        }
        ProbeAction::Panic("injected after damaging the keyed archives".into())
    }
}

struct DamageFactory(DamageThenPanic);

impl tandem::runtime::probe::ProbeFactory for DamageFactory {
    fn probe(
        &self,
        operator: &str,
        _instance: usize,
    ) -> Option<Box<dyn tandem::runtime::probe::RecordProbe>> {
        (operator == "keyed").then(|| {
            Box::new(DamageThenPanic {
                from: self.0.from,
                dir: self.0.dir.clone(),
                fired: Arc::clone(&self.0.fired),
            }) as Box<dyn tandem::runtime::probe::RecordProbe>
        })
    }
}

/// A restart restores a keyed state lazily (its checkpoint's whole
/// archive is mapped, each block verified as it is first read): a damaged
/// archive is found as it is read, the attempt fails naming the file, the
/// checkpoint is passed over from then on, and the job still ends with
/// exactly the clean output, from an older checkpoint (or the start).
#[test]
fn a_keyed_archive_damaged_on_disk_is_found_by_the_lazy_restore_and_passed_over() {
    let _serial = serial();
    let clean = clean_output();
    let dir = tempdir("lazy-damage");
    let out = dir.join("out");
    let fired = Arc::new(AtomicBool::new(false));
    let probe = DamageFactory(DamageThenPanic {
        from: TupleId::new(1, 9_000),
        dir: dir.join("checkpoints"),
        fired: Arc::clone(&fired),
    });
    let mut cfg = config(&dir, CheckpointMode::ExactlyOnce).probes(Arc::new(probe));
    // Whole archives only: each checkpoint's keyed file is read lazily.
    cfg.checkpoint.as_mut().expect("checkpoints").incremental = None;
    let report = build(&out, true).run(&cfg).unwrap();
    assert!(fired.load(Ordering::SeqCst), "the fault fired");
    assert_same(&clean, &committed_lines(&out));
    let skipped: Vec<&String> = report
        .recovery
        .iter()
        .flat_map(|r| &r.skipped_checkpoints)
        .collect();
    assert!(
        skipped
            .iter()
            .any(|s| s.contains("checksum mismatch") && s.contains("keyed-")),
        "the damage was found and named: {skipped:?} {:?}",
        report.recovery
    );
    std::fs::remove_dir_all(dir).unwrap();
}
