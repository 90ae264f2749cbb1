//! What an embedding program sees of faults and measurement: a panic in its
//! own closure names the record it happened on, closures can ask for the
//! record they handle, and the report carries throughput and counts that
//! go on across a restart.

mod common;

use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tandem::{CheckpointConfig, IterSource, JobBuilder, RestartStrategy, RuntimeConfig, TupleId};

const N: u64 = 20_000;

fn restarting(dir: &std::path::Path) -> RuntimeConfig {
    let mut cp = CheckpointConfig::every(Duration::from_millis(5));
    cp.dir = Some(dir.join("checkpoints"));
    RuntimeConfig::default()
        .cores(cores())
        .pin(false)
        .checkpoint(cp)
        .restart(RestartStrategy::FixedDelay {
            attempts: 5,
            delay: Duration::ZERO,
        })
}

#[test]
fn a_panic_in_a_users_aggregate_names_its_record_and_counts_go_on_after_the_restart() {
    let dir = tempdir("embedding-panic");
    let fired = Arc::new(AtomicBool::new(false));
    let f = Arc::clone(&fired);
    let job = JobBuilder::new("embedding");
    job.default_parallelism(1);
    job.source("numbers", |_| IterSource((0..N).map(|n| (n, n))))
        .rate_limit(400_000.0)
        .key_by(|n: &u64| n % 7)
        .aggregate("sum", move |s: &mut u64, n: &u64| {
            if *n == 12_345 && !f.swap(true, Ordering::SeqCst) {
                panic!("the user's own bug");
            }
            *s += n;
            *s
        })
        .for_each("drop", |_| {});
    let report = job.build().unwrap().run(&restarting(&dir)).unwrap();
    assert!(fired.load(Ordering::SeqCst));
    assert_eq!(report.recovery.len(), 1, "{:?}", report.recovery);
    let r = &report.recovery[0];
    assert_eq!(r.operator, "sum");
    assert_eq!(
        r.tuple_id,
        Some(TupleId::new(0, 12_345)),
        "the record the closure panicked on"
    );
    // Sources count each input record once; the operators count the work
    // they did, a replayed record again — never less than the input.
    assert_eq!(report.source_records(), N);
    assert!(report.throughput() > 0.0);
    let sum = report.operator("sum").unwrap();
    assert!(
        sum.records >= N,
        "counts go on across the restart: {} of {N}",
        sum.records
    );
    assert!(!sum.source && report.operator("numbers").unwrap().source);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn closures_without_an_output_can_ask_for_the_record_they_handle() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    let job = JobBuilder::new("ids");
    job.default_parallelism(2);
    job.source("numbers", |i| {
        let (me, par) = (i.instance as u64, i.parallelism as u64);
        IterSource((0..1000u64).filter(move |n| n % par == me).map(|n| (n, n)))
    })
    .filter("all", |_| tandem::operator::current_record().is_some())
    .key_by(|n: &u64| n % 3)
    .aggregate("ids", |_: &mut (), n: &u64| {
        (*n, tandem::operator::current_record())
    })
    .for_each("collect", move |r| {
        s.lock().unwrap().push((r.id, r.value.0, r.value.1));
    });
    job.build()
        .unwrap()
        .run(&RuntimeConfig::default().cores(cores()).pin(false))
        .unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1000);
    for (id, n, asked) in seen.iter() {
        assert_eq!(*asked, Some(*id), "record {n}");
        assert_eq!(id.seq() * 2 + id.partition() as u64, *n);
    }
    assert_eq!(tandem::operator::current_record(), None, "outside a job");
}

/// An encoded buffer queue takes entries up to a quarter of its arena: a
/// larger record is a dead letter and the rest arrive. A queue of typed
/// slots, or a chain that replays its source, has no such limit.
#[test]
fn a_record_too_large_for_a_standbys_buffer_queue_is_a_dead_letter_and_the_rest_arrive() {
    for (replay, encoded) in [(false, true), (false, false), (true, false)] {
        let dir = tempdir("embedding-large");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = Arc::clone(&seen);
        let job = JobBuilder::new("large");
        job.default_parallelism(1);
        // Every 100th record is 20 KiB: a 64 KiB queue takes entries of 8 KiB.
        job.source("text", |_| {
            IterSource((0..2_000u64).map(|n| {
                let len = if n % 100 == 50 { 20 << 10 } else { 16 };
                ("x".repeat(len), n)
            }))
        })
        .standby()
        .map("len", |t: String| t.len())
        .for_each("collect", move |r| s.lock().unwrap().push(r.value));
        let report = job
            .build()
            .unwrap()
            .run(
                &RuntimeConfig::default()
                    .cores(cores())
                    .pin(false)
                    .run_dir(&dir)
                    .standby(tandem::StandbyConfig {
                        queue_memory: 64 << 10,
                        replay_sources: replay,
                        encoded_queues: encoded,
                        ..Default::default()
                    }),
            )
            .unwrap();
        let seen = seen.lock().unwrap();
        if !encoded {
            assert_eq!(report.dead_letters, 0, "replay {replay}");
            assert_eq!(seen.len(), 2_000, "replay {replay}");
            std::fs::remove_dir_all(dir).unwrap();
            continue;
        }
        assert_eq!(report.dead_letters, 20);
        assert_eq!(seen.len(), 1_980);
        assert!(seen.iter().all(|&l| l == 16));
        let letters = std::fs::read_to_string(report.dead_letter_path.unwrap()).unwrap();
        assert_eq!(letters.lines().count(), 20);
        assert!(
            letters.contains("does not fit the standby's buffer queue"),
            "{letters}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}

/// `TransactionalFile` is a `Sink` as it is: a job writing through it,
/// restarted from a checkpoint after a panic, commits every line exactly
/// once.
#[test]
fn a_transactional_file_is_a_sink_and_its_output_is_exactly_once_across_a_restart() {
    use tandem::sinks::transactional::TransactionalFile;
    let dir = tempdir("embedding-txn-sink");
    let out = dir.join("out");
    let fired = Arc::new(AtomicBool::new(false));
    let f = Arc::clone(&fired);
    let o = out.clone();
    let job = JobBuilder::new("txn-sink");
    job.default_parallelism(2);
    job.source("numbers", |i| {
        let me = i.instance as u64;
        IterSource((0..N).filter(move |n| n % 2 == me).map(|n| (n, n)))
    })
    .rate_limit(400_000.0)
    .map("label", move |n: u64| {
        if n == N / 2 && !f.swap(true, Ordering::SeqCst) {
            panic!("the user's own bug");
        }
        format!("n={n}")
    })
    .sink("out", move |info| {
        TransactionalFile::for_instance(&o, info).expect("opening the output")
    });
    let report = job.build().unwrap().run(&restarting(&dir)).unwrap();
    assert!(fired.load(Ordering::SeqCst));
    assert_eq!(report.recovery.len(), 1, "{:?}", report.recovery);
    let mut got = committed_lines(&out);
    got.sort();
    let mut want: Vec<String> = (0..N).map(|n| format!("n={n}")).collect();
    want.sort();
    assert_eq!(got.len(), want.len(), "every line once");
    assert_eq!(got, want);
    std::fs::remove_dir_all(dir).unwrap();
}

/// A job whose operators are marked for a standby, run without a
/// `StandbyConfig`, runs without standbys, and `Job::start` warns (the
/// warning is what `standby_warning` returns).
#[test]
fn a_standby_mark_without_a_standby_config_warns_and_runs_without_one() {
    let job = JobBuilder::new("unbacked");
    job.default_parallelism(1);
    job.source("numbers", |_| IterSource((0..1_000u64).map(|n| (n, n))))
        .standby()
        .map("double", |n: u64| n * 2)
        .for_each("drop", |_| {});
    let job = job.build().unwrap();
    assert_eq!(job.standby_operators(), vec!["double".to_string()]);
    let plain = RuntimeConfig::default().cores(1).pin(false);
    let warning = job.standby_warning(&plain).expect("a warning");
    assert!(
        warning.starts_with("warning:")
            && warning.contains("`double`")
            && warning.contains("StandbyConfig"),
        "{warning}"
    );
    let backed = plain.clone().standby(tandem::StandbyConfig::default());
    assert_eq!(job.standby_warning(&backed), None);
    let report = job.run(&plain).unwrap();
    assert!(report.standby.is_none());
    assert_eq!(report.source_records(), 1_000);
}

/// The job's default parallelism is every operator's and sink's that has
/// none of its own, whenever it is set (it used to reach only those added
/// after it); a sink's own is set on the handle `sink` returns (it
/// returned nothing: a sink's parallelism came from call order alone);
/// and a sink's name is one of the job's names, unique across sources,
/// operators and sinks, as the error says.
#[test]
fn the_default_parallelism_reaches_every_operator_and_a_sink_sets_its_own() {
    let job = JobBuilder::new("parallelism");
    let src = job.source("numbers", |_| IterSource((0..1000u64).map(|n| (n, n))));
    let doubled = src.map("double", |n: u64| n * 2);
    doubled.for_each("one", |_| {}).parallelism(1);
    doubled.for_each("all", |_| {});
    job.default_parallelism(2);
    let report = job
        .build()
        .unwrap()
        .run(&RuntimeConfig::default().cores(cores()))
        .unwrap();
    let par = |op: &str| report.operator(op).unwrap().parallelism;
    assert_eq!(
        (par("numbers"), par("double"), par("one"), par("all")),
        (2, 2, 1, 2)
    );
    // Each of the two source instances reads all 1,000: one sink instance
    // takes them all.
    assert_eq!(report.operator("one").unwrap().records, 2000);

    let job = JobBuilder::new("names");
    let src = job.source("numbers", |_| IterSource((0..10u64).map(|n| (n, n))));
    src.map("x", |n: u64| n).for_each("out", |_| {});
    src.for_each("x", |_| {});
    let e = job
        .build()
        .err()
        .expect("a sink named as an operator")
        .to_string();
    assert!(
        e.contains("`x`") && e.contains("sinks share one name space"),
        "{e}"
    );
    let job = JobBuilder::new("zero");
    job.source("numbers", |_| IterSource((0..10u64).map(|n| (n, n))))
        .for_each("out", |_| {})
        .parallelism(0);
    let e = job.build().err().expect("a zero parallelism").to_string();
    assert!(e.contains("`out`"), "{e}");
}
