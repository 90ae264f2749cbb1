//! End-to-end properties of the runtime: placement-independent results,
//! backpressure without loss, end-of-stream, panics, dead letters, connect.

mod common;

use common::tempdir;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tandem::{
    Chaining, CoProcess, IterSource, JobBuilder, JobError, KeyedProcess, Output, Record,
    RuntimeConfig, Sink, Source, SourcePoll,
};

fn cores() -> usize {
    tandem::sys::affinity::available_cores().len().min(2)
}

/// Deterministic pseudo-random (key, value) pairs for a partition.
fn pairs(partition: usize, parallelism: usize, n: u64) -> impl Iterator<Item = ((u32, u64), u64)> {
    (0..n)
        .filter(move |i| (*i as usize) % parallelism == partition)
        .map(|i| {
            let k = (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54) as u32; // 1024 keys
            ((k, i), i)
        })
}

/// Sum per key at end of stream; returns key → (count, sum).
struct SumPerKey;
impl KeyedProcess<u32, (u32, u64), (u32, u64, u64)> for SumPerKey {
    type State = (u64, u64);
    fn process(
        &mut self,
        _k: &u32,
        s: &mut (u64, u64),
        r: Record<(u32, u64)>,
        _o: &mut Output<'_, (u32, u64, u64)>,
    ) {
        s.0 += 1;
        s.1 += r.value.1;
    }
    fn on_end(&mut self, k: &u32, s: &mut (u64, u64), out: &mut Output<'_, (u32, u64, u64)>) {
        out.emit((*k, s.0, s.1));
    }
}

fn keyed_sums(cfg: &RuntimeConfig, parallelism: usize, n: u64) -> BTreeMap<u32, (u64, u64)> {
    let out = Arc::new(Mutex::new(BTreeMap::new()));
    let o = Arc::clone(&out);
    let job = JobBuilder::new("sums");
    job.default_parallelism(parallelism);
    job.source("src", move |i| {
        IterSource(pairs(i.instance, i.parallelism, n))
    })
    .map("double", |(k, v): (u32, u64)| (k, v * 2))
    .key_by(|p: &(u32, u64)| p.0)
    .process("sum", |_| SumPerKey)
    .for_each("collect", move |r| {
        let (k, c, s) = r.value;
        assert!(
            o.lock().unwrap().insert(k, (c, s)).is_none(),
            "key {k} summarised twice"
        );
    });
    job.build().unwrap().run(cfg).unwrap();
    let m = out.lock().unwrap().clone();
    m
}

#[test]
fn keyed_results_do_not_depend_on_cores_parallelism_or_chaining() {
    let n = 50_000;
    let reference = keyed_sums(&RuntimeConfig::default().cores(1), 1, n);
    assert_eq!(reference.values().map(|v| v.0).sum::<u64>(), n);
    for (c, p, chaining) in [
        (1, 2, Chaining::Auto),
        (cores(), 2, Chaining::Auto),
        (cores(), 3, Chaining::Never),
        (cores(), 4, Chaining::Always),
    ] {
        let cfg = RuntimeConfig::default().cores(c).chaining(chaining);
        assert_eq!(
            keyed_sums(&cfg, p, n),
            reference,
            "cores {c} parallelism {p} {chaining:?}"
        );
    }
}

/// A sink that is slow now and then and checks per-partition order.
struct CheckingSink {
    last: BTreeMap<u32, u64>,
    n: u64,
    total: Arc<AtomicU64>,
}
impl Sink<u64> for CheckingSink {
    fn write(&mut self, r: Record<u64>) -> std::io::Result<()> {
        let p = r.id.partition();
        if let Some(prev) = self.last.insert(p, r.id.seq()) {
            // flat_map outputs share their input's ID: IDs never go back.
            assert!(r.id.seq() >= prev, "partition {p} reordered");
        }
        self.n += 1;
        if self.n.is_multiple_of(5000) {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        Ok(())
    }
    fn finish(&mut self) -> std::io::Result<()> {
        self.total.fetch_add(self.n, Ordering::Relaxed);
        Ok(())
    }
}

#[test]
fn tiny_rings_and_a_slow_sink_lose_nothing_and_keep_partition_order() {
    let n = 60_000u64;
    let total = Arc::new(AtomicU64::new(0));
    let t = Arc::clone(&total);
    let job = JobBuilder::new("backpressure");
    job.default_parallelism(2);
    job.source("src", move |i| {
        let p = i.instance as u64;
        IterSource((0..n).filter(move |x| x % 2 == p).map(|x| (x, x)))
    })
    .flat_map("triple", |x: u64, out: &mut Output<'_, u64>| {
        for k in 0..3 {
            out.emit(x * 3 + k);
        }
    })
    .sink("check", move |_| CheckingSink {
        last: BTreeMap::new(),
        n: 0,
        total: Arc::clone(&t),
    });
    let cfg = RuntimeConfig::default()
        .cores(cores())
        .chaining(Chaining::Never)
        .ring_capacity(2)
        .batch(1);
    let report = job.build().unwrap().run(&cfg).unwrap();
    assert_eq!(total.load(Ordering::Relaxed), 3 * n);
    assert_eq!(report.operator("src").unwrap().records, n);
    assert_eq!(report.operator("check").unwrap().records, 3 * n);
}

#[test]
fn an_operator_panic_ends_the_job_with_its_name_and_instance() {
    for chaining in [Chaining::Always, Chaining::Never] {
        let job = JobBuilder::new("panics");
        job.default_parallelism(2);
        job.source("src", |i| {
            let p = i.instance as u64;
            IterSource((0..10_000u64).filter(move |x| x % 2 == p).map(|x| (x, x)))
        })
        .map("fine", |x: u64| x + 1)
        .map("boom", |x: u64| {
            if x == 5_001 {
                panic!("bad record {x}");
            }
            x
        })
        .for_each("sink", |_| {});
        let err = job
            .build()
            .unwrap()
            .run(&RuntimeConfig::default().cores(cores()).chaining(chaining))
            .unwrap_err();
        match err {
            JobError::OperatorPanicked {
                operator,
                instance,
                message,
            } => {
                assert_eq!(operator, "boom", "{chaining:?}");
                assert_eq!(instance, 0, "5000 is in partition 0");
                assert!(message.contains("bad record 5001"), "{message}");
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[test]
fn dead_letters_are_counted_written_and_the_job_completes() {
    let dir = tempdir("dead");
    let job = JobBuilder::new("dl");
    let out = Arc::new(AtomicU64::new(0));
    let o = Arc::clone(&out);
    job.source("src", |_| IterSource((0..1000u64).map(|x| (x, x))))
        .flat_map("parse", |x: u64, out: &mut Output<'_, u64>| {
            if x % 10 == 3 {
                out.dead_letter(format!("{x} is unlucky"), x.to_string().as_bytes());
            } else {
                out.emit(x);
            }
        })
        .for_each("sink", move |_| {
            o.fetch_add(1, Ordering::Relaxed);
        });
    let report = job
        .build()
        .unwrap()
        .run(&RuntimeConfig::default().cores(1).run_dir(&dir))
        .unwrap();
    assert_eq!(report.dead_letters, 100);
    assert_eq!(out.load(Ordering::Relaxed), 900);
    let path = report.dead_letter_path.unwrap();
    assert!(path.starts_with(&dir));
    let text = std::fs::read_to_string(path).unwrap();
    assert_eq!(text.lines().count(), 100);
    assert!(text
        .lines()
        .next()
        .unwrap()
        .contains("\"reason\":\"3 is unlucky\""));
    std::fs::remove_dir_all(dir).unwrap();
}

/// Side source that makes the main stream wait: pending for its first
/// `polls` polls and its first `ms` milliseconds, then one offset.
struct LateSide {
    polls: u32,
    ms: u64,
    start: Option<std::time::Instant>,
    sent: bool,
}
impl LateSide {
    fn new(polls: u32, ms: u64) -> Self {
        LateSide {
            polls,
            ms,
            start: None,
            sent: false,
        }
    }
}
impl Source<u64> for LateSide {
    fn poll_next(&mut self) -> SourcePoll<u64> {
        let start = *self.start.get_or_insert_with(std::time::Instant::now);
        if self.polls > 0 || start.elapsed() < std::time::Duration::from_millis(self.ms) {
            self.polls = self.polls.saturating_sub(1);
            SourcePoll::Pending
        } else if !self.sent {
            self.sent = true;
            SourcePoll::Ready {
                value: 1000,
                event_time: 0,
            }
        } else {
            SourcePoll::End
        }
    }
}

struct AddOffset(Option<u64>);
impl CoProcess<u64, u64, u64> for AddOffset {
    fn process_first(&mut self, r: Record<u64>, out: &mut Output<'_, u64>) {
        let off = self
            .0
            .expect("first input read before the side stream was ready");
        out.emit(r.value + off);
    }
    fn process_second(&mut self, r: Record<u64>, _out: &mut Output<'_, u64>) {
        self.0 = Some(r.value);
    }
    fn first_ready(&self) -> bool {
        self.0.is_some()
    }
}

#[test]
fn connect_holds_the_first_input_until_the_broadcast_side_is_ready() {
    // Chained: the co-operator rides in the main source's task and gates
    // it; never chained: it heads its own task and gates its ring input.
    for chaining in [Chaining::Always, Chaining::Never, Chaining::Auto] {
        connect_gating(chaining);
    }
}

/// Runs main (0..20 000 over two partitions) connected with a broadcast
/// `side` source through `AddOffset`, and checks every record came out
/// with the side's offset (1000) added.
fn run_connect<S: Source<u64> + 'static>(
    side: impl Fn() -> S + Send + Sync + 'static,
    cfg: &RuntimeConfig,
) -> tandem::JobReport {
    let sum = Arc::new(AtomicU64::new(0));
    let s = Arc::clone(&sum);
    let job = JobBuilder::new("connect");
    job.default_parallelism(2);
    let main = job.source("main", |i| {
        let p = i.instance as u64;
        IterSource((0..20_000u64).filter(move |x| x % 2 == p).map(|x| (x, x)))
    });
    let side = job.source("side", move |_| side()).parallelism(1);
    main.connect(&side.broadcast())
        .process("offset", |_| AddOffset(None))
        .for_each("sink", move |r| {
            s.fetch_add(r.value, Ordering::Relaxed);
        });
    let report = job.build().unwrap().run(cfg).unwrap();
    assert_eq!(report.operator("sink").unwrap().records, 20_000);
    assert_eq!(
        sum.load(Ordering::Relaxed),
        (0..20_000u64).sum::<u64>() + 20_000 * 1000
    );
    report
}

fn connect_gating(chaining: Chaining) {
    let cfg = RuntimeConfig::default()
        .cores(cores())
        .chaining(chaining)
        .ring_capacity(16);
    run_connect(|| LateSide::new(200, 0), &cfg);
}

#[test]
fn connect_waiting_for_its_side_input_does_not_stall_exactly_once_checkpoints() {
    // Checkpoints are triggered while the side source is still pending, so
    // its barrier reaches the co-operator before the offset it needs. When
    // the first input comes over a ring, its records ahead of its own
    // barrier wait for that offset: the side input must not be held at the
    // barrier (that was a deadlock, each checkpoint timing out). It is read
    // on, and that checkpoint declined; every one started is accounted for.
    for chaining in [Chaining::Never, Chaining::Always, Chaining::Auto] {
        let dir = tempdir("connect-checkpoints");
        let mut cp = tandem::CheckpointConfig::every(std::time::Duration::from_millis(2));
        cp.dir = Some(dir.join("checkpoints"));
        let cfg = RuntimeConfig::default()
            .cores(cores())
            .chaining(chaining)
            .ring_capacity(16)
            .checkpoint(cp);
        let report = run_connect(|| LateSide::new(0, 40), &cfg);
        let c = &report.checkpoints;
        assert!(c.started > 0, "{chaining:?}: no checkpoint was triggered");
        assert_eq!(c.started, c.completed + c.failed + c.pending, "{c:?}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}

#[test]
fn broadcast_delivers_every_record_to_every_instance() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    let job = JobBuilder::new("bcast");
    let src = job
        .source("src", |_| IterSource((0..100u64).map(|x| (x, x))))
        .parallelism(1);
    job.default_parallelism(3);
    src.broadcast()
        .map("tag", |x: u64| x)
        .sink("sink", move |info| Collect(info.instance, Arc::clone(&s)));
    job.build()
        .unwrap()
        .run(&RuntimeConfig::default().cores(cores()))
        .unwrap();
    let mut v = seen.lock().unwrap().clone();
    v.sort_unstable();
    let expect: Vec<(usize, u64)> = (0..3).flat_map(|i| (0..100).map(move |x| (i, x))).collect();
    // The sink instance i receives from map instance i (forward edge).
    assert_eq!(v, expect);
}

struct Collect(usize, Arc<Mutex<Vec<(usize, u64)>>>);
impl Sink<u64> for Collect {
    fn write(&mut self, r: Record<u64>) -> std::io::Result<()> {
        self.1.lock().unwrap().push((self.0, r.value));
        Ok(())
    }
}

struct FailingSink;
impl Sink<u64> for FailingSink {
    fn write(&mut self, r: Record<u64>) -> std::io::Result<()> {
        if r.value == 77 {
            Err(std::io::Error::other("disk full"))
        } else {
            Ok(())
        }
    }
}

#[test]
fn a_sink_io_error_ends_the_job_naming_the_sink() {
    let job = JobBuilder::new("io");
    job.source("src", |_| IterSource((0..1000u64).map(|x| (x, x))))
        .sink("out", |_| FailingSink);
    let err = job
        .build()
        .unwrap()
        .run(&RuntimeConfig::default().cores(1))
        .unwrap_err();
    assert_eq!(err.operator(), Some("out"));
    assert!(err.to_string().contains("disk full"), "{err}");
}

#[test]
fn asking_for_more_cores_than_the_machine_has_is_an_error_not_a_panic() {
    let job = JobBuilder::new("big");
    job.source("src", |_| IterSource((0..10u64).map(|x| (x, x))))
        .for_each("sink", |_| {});
    let err = job
        .build()
        .unwrap()
        .run(&RuntimeConfig::default().cores(100_000))
        .unwrap_err();
    assert!(matches!(
        err,
        JobError::Runtime(tandem::RuntimeError::InsufficientCpus {
            required: 100_000,
            ..
        })
    ));
}

#[test]
fn duplicate_operator_names_are_rejected_at_build() {
    let job = JobBuilder::new("dup");
    let s = job.source("x", |_| IterSource((0..10u64).map(|x| (x, x))));
    s.map("x", |v: u64| v).for_each("sink", |_| {});
    assert!(matches!(
        job.build(),
        Err(tandem::BuildError::DuplicateName { .. })
    ));
}

#[test]
fn a_rate_limited_source_is_not_faster_than_its_rate() {
    let job = JobBuilder::new("paced");
    job.source("src", |_| IterSource((0..2000u64).map(|x| (x, x))))
        .rate_limit(20_000.0)
        .for_each("sink", |_| {});
    let report = job
        .build()
        .unwrap()
        .run(&RuntimeConfig::default().cores(1))
        .unwrap();
    // 2000 records at 20k/s: the last is released ~100 ms after the first.
    assert!(
        report.elapsed >= std::time::Duration::from_millis(99),
        "{:?}",
        report.elapsed
    );
    assert_eq!(report.latency.len(), 2000);
}

/// A worker stuck in an operator's code (no probe saying so) is declared
/// stalled naming that operator — not the chain it is part of.
#[test]
fn a_stall_names_the_operator_whose_code_holds_the_worker_not_its_chain() {
    let job = JobBuilder::new("stuck");
    job.source("src", |_| IterSource((0..100u64).map(|n| (n, n))))
        .map("before", |n: u64| n + 1)
        .map("slow", |n: u64| {
            if n == 50 {
                std::thread::sleep(Duration::from_secs(3));
            }
            n
        })
        .for_each("sink", |_| {});
    let cfg = RuntimeConfig::default()
        .cores(1)
        .heartbeat_timeout(Duration::from_millis(50))
        .restart(tandem::RestartStrategy::FixedDelay {
            attempts: 0,
            delay: Duration::ZERO,
        });
    let e = job.build().unwrap().run(&cfg).unwrap_err().to_string();
    assert!(e.contains("operator `slow` (instance 0) stalled"), "{e}");
}
