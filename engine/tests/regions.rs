//! Failover regions: instances joined only by forward edges form a region
//! per instance; an all-to-all exchange joins every instance on both
//! sides; a forward edge between different parallelisms is all-to-all.

use tandem::{IterSource, JobBuilder};

fn numbers(job: &JobBuilder, name: &str) -> tandem::Stream<u64> {
    job.source(name, |_| IterSource((0..10u64).map(|n| (n, n))))
}

#[test]
fn forward_pipelines_are_a_region_per_instance_holding_every_operators_instance() {
    let job = JobBuilder::new("pipelines");
    job.default_parallelism(3);
    numbers(&job, "src")
        .map("double", |n: u64| n * 2)
        .filter("even", |n: &u64| n.is_multiple_of(2))
        .for_each("sink", |_| {});
    let regions = job.build().unwrap().regions();
    assert_eq!(regions.len(), 3);
    for (i, r) in regions.iter().enumerate() {
        let want: Vec<(String, usize)> = ["src", "double", "even", "sink"]
            .iter()
            .map(|o| (o.to_string(), i))
            .collect();
        assert_eq!(r, &want);
    }
}

#[test]
fn an_all_to_all_exchange_joins_every_instance_and_disjoint_pipelines_stay_apart() {
    // Two independent sub-jobs: one keyed (one region), one forward (two).
    let job = JobBuilder::new("mixed");
    job.default_parallelism(2);
    numbers(&job, "a")
        .key_by(|n: &u64| *n)
        .reduce("sum", |x: &u64, y: &u64| x + y)
        .for_each("a-sink", |_| {});
    numbers(&job, "b")
        .map("b-map", |n: u64| n)
        .for_each("b-sink", |_| {});
    let regions = job.build().unwrap().regions();
    assert_eq!(regions.len(), 3, "{regions:?}");
    assert_eq!(regions[0].len(), 6, "a, sum and a-sink, both instances");
    assert!(regions[0]
        .iter()
        .all(|(o, _)| o.starts_with('a') || o == "sum"));
    assert_eq!(
        regions[1],
        [("b".into(), 0), ("b-map".into(), 0), ("b-sink".into(), 0)]
    );
    assert_eq!(
        regions[2],
        [("b".into(), 1), ("b-map".into(), 1), ("b-sink".into(), 1)]
    );
}

#[test]
fn a_broadcast_side_input_or_a_change_of_parallelism_joins_the_pipelines() {
    let job = JobBuilder::new("broadcast");
    job.default_parallelism(2);
    let side = numbers(&job, "side").parallelism(1).broadcast();
    numbers(&job, "main")
        .connect(&side)
        .process("join", |_| Pass)
        .for_each("sink", |_| {});
    assert_eq!(job.build().unwrap().regions().len(), 1);

    let job = JobBuilder::new("narrowing");
    job.default_parallelism(2);
    numbers(&job, "src")
        .map("one", |n: u64| n)
        .parallelism(1)
        .for_each("sink", |_| {});
    assert_eq!(job.build().unwrap().regions().len(), 1);
}

struct Pass;

impl tandem::CoProcess<u64, u64, u64> for Pass {
    fn process_first(&mut self, r: tandem::Record<u64>, out: &mut tandem::Output<'_, u64>) {
        out.emit(r.value)
    }
    fn process_second(&mut self, _r: tandem::Record<u64>, _out: &mut tandem::Output<'_, u64>) {}
}

// ---- Region failover: a region restarts alone, exactly ----

mod common;
use common::{committed_lines, cores, quiet_injected_panics, tempdir, Faults, Line, LineSink};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tandem::runtime::probe::ProbeAction;
use tandem::{
    CheckpointConfig, Failover, RecoveryKind, RestartStrategy, RuntimeConfig, Source, SourcePoll,
    TupleId,
};

const PER: u64 = 4_000;

/// Partition `p`'s numbers; partition 1 holds back its second half until
/// `gate` opens, so that it is still running while partition 0 recovers.
struct Gated {
    p: u64,
    next: u64,
    gate: Arc<AtomicBool>,
}

impl Source<u64> for Gated {
    fn poll_next(&mut self) -> SourcePoll<u64> {
        if self.next == PER {
            return SourcePoll::End;
        }
        if self.p == 1 && self.next == PER / 2 && !self.gate.load(Ordering::SeqCst) {
            return SourcePoll::Pending;
        }
        let n = self.p * 1_000_000 + self.next;
        self.next += 1;
        SourcePoll::Ready {
            value: n,
            event_time: n,
        }
    }
}

/// Two forward pipelines, `src → work → out`, parallelism 2: two regions.
/// Counts each sink instance's openings in `opened`.
fn pipelines(
    dir: &std::path::Path,
    gate: &Arc<AtomicBool>,
    opened: &Arc<[AtomicUsize; 2]>,
    standby: bool,
) -> tandem::Job {
    let job = JobBuilder::new("pipelines");
    job.default_parallelism(2);
    let g = Arc::clone(gate);
    let src = job.source("src", move |i| Gated {
        p: i.instance as u64,
        next: 0,
        gate: Arc::clone(&g),
    });
    let src = if standby { src.standby() } else { src };
    let d = dir.to_path_buf();
    let opened = Arc::clone(opened);
    src.map("work", |n: u64| {
        Line::Rec(n, n.wrapping_mul(0x9e37_79b9) >> 7)
    })
    .sink("out", move |i| {
        opened[i.instance].fetch_add(1, Ordering::SeqCst);
        LineSink::new(&d, i, true)
    });
    job.build().unwrap()
}

fn region_config(faults: &Faults, dir: &std::path::Path) -> RuntimeConfig {
    let mut ck = CheckpointConfig::every(Duration::from_millis(3));
    ck.dir = Some(dir.join("ckpt"));

    RuntimeConfig::default()
        .cores(cores())
        .checkpoint(ck)
        .restart(RestartStrategy::FixedDelay {
            attempts: 20,
            delay: Duration::ZERO,
        })
        .failover(Failover::Region)
        .probes(Arc::new(faults.clone()))
}

/// Opens the gate once every fault fired, from a thread of its own.
fn open_gate_after(faults: &Faults, gate: &Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    let (faults, gate) = (faults.clone(), Arc::clone(gate));
    std::thread::spawn(move || {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !faults.all_fired() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        // The last restart begins after its fault fired: let it start
        // before partition 1 may end.
        std::thread::sleep(Duration::from_millis(20));
        gate.store(true, Ordering::SeqCst);
    })
}

fn clean_pipelines() -> Vec<String> {
    let dir = tempdir("regions-clean");
    let gate = Arc::new(AtomicBool::new(true));
    let opened = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    pipelines(&dir, &gate, &opened, false)
        .run(&RuntimeConfig::default().cores(cores()))
        .unwrap();
    let v = committed_lines(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(v.len(), 2 * PER as usize);
    v
}

#[test]
fn a_panic_in_one_pipeline_restarts_its_region_alone_and_the_output_is_exact() {
    quiet_injected_panics();
    let clean = clean_pipelines();
    let faults = Faults::new(
        [300, 900, 1_500, 2_100, 2_700]
            .into_iter()
            .map(|s| {
                (
                    "work",
                    TupleId::new(0, s),
                    ProbeAction::Panic("injected".into()),
                )
            })
            .collect(),
    );
    let dir = tempdir("regions-fault");
    let gate = Arc::new(AtomicBool::new(false));
    let opened = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let opener = open_gate_after(&faults, &gate);
    let report = pipelines(&dir, &gate, &opened, false)
        .run(&region_config(&faults, &dir))
        .unwrap();
    opener.join().unwrap();
    assert!(faults.all_fired());
    let got = committed_lines(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(got == clean, "output differs from the clean run");
    assert_eq!(report.recovery.len(), 5, "{:?}", report.recovery);
    for r in &report.recovery {
        assert_eq!(r.kind, RecoveryKind::Region);
        assert_eq!((r.operator.as_str(), r.instance), ("work", 0));
        assert!(
            !r.restarted.is_empty() && r.restarted.iter().all(|t| t.ends_with("#0")),
            "{:?}",
            r.restarted
        );
        assert!(
            !r.kept_running.is_empty() && r.kept_running.iter().all(|t| t.ends_with("#1")),
            "{:?}",
            r.kept_running
        );
    }
    assert_eq!(report.restarts, 5);
    // Pipeline 1's sink opened once: it never restarted.
    assert_eq!(opened[1].load(Ordering::SeqCst), 1);
    assert_eq!(opened[0].load(Ordering::SeqCst), 6);
}

#[test]
fn a_region_restart_composes_with_a_standby_that_covers_its_operator() {
    quiet_injected_panics();
    let clean = clean_pipelines();
    // `work` runs with a standby (a takeover); `out` has none (a restart
    // of its region).
    let specs = vec![
        (
            "work",
            TupleId::new(0, 500),
            ProbeAction::Panic("injected".into()),
        ),
        (
            "out",
            TupleId::new(0, 1_400),
            ProbeAction::Panic("injected".into()),
        ),
        (
            "work",
            TupleId::new(1, 1_000),
            ProbeAction::Panic("injected".into()),
        ),
    ];
    let faults = Faults::new(specs);
    let dir = tempdir("regions-standby");
    let gate = Arc::new(AtomicBool::new(false));
    let opened = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let opener = open_gate_after(&faults, &gate);
    let cfg = region_config(&faults, &dir).standby(tandem::StandbyConfig {
        snapshot_interval: Duration::from_millis(2),
        ..Default::default()
    });
    let report = pipelines(&dir, &gate, &opened, true).run(&cfg).unwrap();
    opener.join().unwrap();
    assert!(faults.all_fired());
    let got = committed_lines(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(got == clean, "output differs from the clean run");
    let kinds: Vec<_> = report
        .recovery
        .iter()
        .filter(|r| !r.unprovoked)
        .map(|r| (r.kind, r.operator.as_str(), r.instance))
        .collect();
    assert!(
        kinds.contains(&(RecoveryKind::Region, "out", 0)),
        "{kinds:?}"
    );
    assert_eq!(
        kinds
            .iter()
            .filter(|k| k.0 == RecoveryKind::Takeover && k.1 == "work")
            .count(),
        2,
        "{kinds:?}"
    );
    assert!(kinds.iter().all(|k| k.0 != RecoveryKind::RestartAll));
    assert_eq!(
        opened[1].load(Ordering::SeqCst),
        1,
        "pipeline 1 never restarted"
    );
}

#[test]
fn region_failover_on_a_job_of_one_region_restarts_every_task_exactly() {
    quiet_injected_panics();
    let build = |dir: &std::path::Path| {
        let job = JobBuilder::new("keyed");
        job.default_parallelism(2);
        let d = dir.to_path_buf();
        numbers_of(&job, 3_000)
            .key_by(|e: &(u32, u64)| e.0)
            .process("sum", |_| common::PerKey)
            .sink("out", move |i| LineSink::new(&d, i, true));
        job.build().unwrap()
    };
    let dir = tempdir("regions-one-clean");
    build(&dir)
        .run(&RuntimeConfig::default().cores(cores()))
        .unwrap();
    let clean = committed_lines(&dir);
    let _ = std::fs::remove_dir_all(&dir);

    let faults = Faults::new(
        [(0, 400), (1, 1_100), (0, 2_000)]
            .into_iter()
            .map(|(p, s)| {
                (
                    "sum",
                    TupleId::new(p, s),
                    ProbeAction::Panic("injected".into()),
                )
            })
            .collect(),
    );
    let dir = tempdir("regions-one");
    let job = build(&dir);
    let tasks = job.regions()[0].len();
    assert_eq!(job.regions().len(), 1);
    let report = job.run(&region_config(&faults, &dir)).unwrap();
    let got = committed_lines(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(faults.all_fired());
    assert!(got == clean, "output differs from the clean run");
    assert!(!report.recovery.is_empty());
    for r in report.recovery.iter().filter(|r| !r.unprovoked) {
        assert_eq!(r.kind, RecoveryKind::Region);
        assert!(r.kept_running.is_empty(), "{:?}", r.kept_running);
        assert!(!r.restarted.is_empty() && r.restarted.len() <= tasks);
    }
}

fn numbers_of(job: &JobBuilder, per: u64) -> tandem::Stream<(u32, u64)> {
    job.source("src", move |i| {
        let me = i.instance as u64;
        IterSource(
            (0..per)
                .map(move |n| (((n * 7 + me) % 13) as u32, me * 1_000_000 + n))
                .map(|e| (e, e.1)),
        )
    })
}

/// A crash around a checkpoint's publication stops every region — one
/// failure of the job, counted once against the restart strategy: a
/// budget of one restart is enough for both regions (it was spent twice,
/// and the job gave up), and the output is exact.
#[test]
fn a_crash_that_stops_every_region_is_one_failure_of_the_restart_budget() {
    quiet_injected_panics();
    let clean = clean_pipelines();
    let dir = tempdir("regions-crash");
    let records = 2 * PER;
    let spec: tandem_fault_inject::ScheduleSpec = "crash@checkpoint:3".parse().unwrap();
    let schedule = spec
        .expand(&tandem_fault_inject::Space::new(records))
        .unwrap();
    let injector = tandem_fault_inject::FaultInjector::builder(&schedule)
        .records(records)
        .build()
        .unwrap();
    let mut ck = CheckpointConfig::every(Duration::from_millis(3));
    ck.dir = Some(dir.join("ckpt"));
    let cfg = RuntimeConfig::default()
        .cores(cores())
        .checkpoint(ck)
        .restart(RestartStrategy::FixedDelay {
            attempts: 1,
            delay: Duration::ZERO,
        })
        .failover(Failover::Region)
        .probes(Arc::new(injector.clone()));
    // Partition 1 holds back until the crash has fired.
    let gate = Arc::new(AtomicBool::new(false));
    let opener = {
        let (injector, gate) = (injector.clone(), Arc::clone(&gate));
        std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            while injector.fired() == 0 && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_millis(20));
            gate.store(true, Ordering::SeqCst);
        })
    };
    let opened = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let report = pipelines(&dir, &gate, &opened, false).run(&cfg);
    opener.join().unwrap();
    let report = report.unwrap();
    assert_eq!(injector.fired(), 1);
    assert_eq!(report.restarts, 2, "{:?}", report.recovery);
    let got = committed_lines(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(got == clean, "output differs from the clean run");
}
