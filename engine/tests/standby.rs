//! Active standby (BQBS), end to end: whatever fails, and whenever, the
//! job's output equals the fault-free output as a multiset — nothing lost,
//! nothing duplicated — without a restart.
//!
//! The job: a two-partition source (rate-limited or at full rate) → the
//! operator under test with a standby → a sink that collects every line.
//! Operators: a stateless `map`; a keyed operator with per-key state and
//! end-of-stream summaries; a keyed running count (`aggregate`), whose
//! outputs depend on the order in which its two input lanes interleave.
//! Runs where timing matters are repeated.

mod common;

use common::cores;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tandem::runtime::probe::{ProbeAction, ProbeFactory, RecordProbe};
use tandem::standby::{StandbyConfig, StandbyMode};
use tandem::{
    IterSource, JobBuilder, JobReport, KeyedProcess, Output, Process, Record, RuntimeConfig,
    TupleId,
};

/// Standby runs are timed by heartbeats: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    common::quiet_injected_panics();
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

const KEYS: u64 = 97;

#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
enum Kind {
    /// `map`: no state.
    Stateless,
    /// Per-key state, one line per record and a summary per key at the end.
    Keyed,
    /// A running count per key: its outputs depend on the lane order.
    Count,
}

const KINDS: [Kind; 3] = [Kind::Stateless, Kind::Keyed, Kind::Count];

struct PerKey;
impl KeyedProcess<u32, (u32, u64), String> for PerKey {
    type State = (u64, u64);
    fn process(
        &mut self,
        _k: &u32,
        s: &mut (u64, u64),
        r: Record<(u32, u64)>,
        out: &mut Output<'_, String>,
    ) {
        s.0 += 1;
        s.1 += r.value.1;
        out.emit(format!("r {} {}", r.value.0, r.value.1));
    }
    fn on_end(&mut self, k: &u32, s: &mut (u64, u64), out: &mut Output<'_, String>) {
        if END_PANICS.swap(false, Ordering::SeqCst) {
            panic!("injected in on_end");
        }
        out.emit(format!("s {k} {} {}", s.0, s.1));
    }
}

/// Set: the next end-of-stream hook of `PerKey` panics (once).
static END_PANICS: AtomicBool = AtomicBool::new(false);

#[derive(Clone)]
struct Probe(Vec<(TupleId, ProbeAction, Arc<AtomicBool>)>);

impl RecordProbe for Probe {
    fn before(&mut self, id: TupleId) -> ProbeAction {
        for (t, a, fired) in &self.0 {
            if *t == id && !fired.swap(true, Ordering::SeqCst) {
                return a.clone();
            }
        }
        ProbeAction::Continue
    }
}

/// Fires each `(tuple, action)` once, in the operator under test.
struct Faults(Probe);

impl ProbeFactory for Faults {
    fn probe(&self, operator: &str, _instance: usize) -> Option<Box<dyn RecordProbe>> {
        (operator == "op").then(|| Box::new(self.0.clone()) as Box<dyn RecordProbe>)
    }
}

fn faults(list: &[(TupleId, ProbeAction)]) -> Arc<Faults> {
    Arc::new(Faults(Probe(
        list.iter()
            .map(|(t, a)| (*t, a.clone(), Arc::new(AtomicBool::new(false))))
            .collect(),
    )))
}

fn panic_at(partition: u32, seq: u64) -> (TupleId, ProbeAction) {
    (
        TupleId::new(partition, seq),
        ProbeAction::Panic(format!("injected at {seq}")),
    )
}

fn stall_at(partition: u32, seq: u64, ms: u64) -> (TupleId, ProbeAction) {
    (
        TupleId::new(partition, seq),
        ProbeAction::Stall(Duration::from_millis(ms)),
    )
}

fn cut_at(partition: u32, seq: u64) -> (TupleId, ProbeAction) {
    (TupleId::new(partition, seq), ProbeAction::CutInput)
}

/// One run of the test job.
#[derive(Clone)]
struct Spec {
    kind: Kind,
    records: u64,
    /// Records per second over both partitions (`None`: full rate).
    rate: Option<f64>,
    standby: Option<StandbyConfig>,
    ring: usize,
    faults: Vec<(TupleId, ProbeAction)>,
}

impl Spec {
    fn new(kind: Kind, records: u64) -> Self {
        Spec {
            kind,
            records,
            rate: None,
            standby: None,
            ring: 1024,
            faults: Vec::new(),
        }
    }

    fn standby(mut self, mode: StandbyMode, heartbeat_ms: u64) -> Self {
        self.standby = Some(StandbyConfig {
            mode,
            heartbeat_timeout: Duration::from_millis(heartbeat_ms),
            snapshot_interval: Duration::from_millis(10),
            queue_memory: 4 << 20,
            replay_sources: true,
            encoded_queues: false,
            ..Default::default()
        });
        self
    }

    fn faults(mut self, f: Vec<(TupleId, ProbeAction)>) -> Self {
        self.faults = f;
        self
    }

    /// Runs the job; returns its sorted output lines and report.
    fn run(&self) -> (Vec<String>, JobReport) {
        eprintln!("RUN {}", self.describe());
        let job = JobBuilder::new("standby-test");
        job.default_parallelism(2);
        let records = self.records;
        let mut src = job.source("src", move |i| {
            let (p, n) = (i.parallelism as u64, i.instance as u64);
            IterSource(
                (0..records)
                    .filter(move |s| s % p == n)
                    .map(|s| (((s * 7919) % KEYS) as u32, s))
                    .map(|v| (v, 0)),
            )
        });
        if let Some(r) = self.rate {
            src = src.rate_limit(r);
        }
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l2 = Arc::clone(&lines);
        let out = match self.kind {
            Kind::Stateless => src
                .standby()
                .map("op", |(k, v): (u32, u64)| format!("m {k} {}", v * 3)),
            Kind::Keyed => src
                .standby()
                .key_by(|p: &(u32, u64)| p.0)
                .process("op", |_| PerKey),
            Kind::Count => src.standby().key_by(|p: &(u32, u64)| p.0).aggregate(
                "op",
                |n: &mut u64, p: &(u32, u64)| {
                    *n += 1;
                    format!("c {} {}", p.0, *n)
                },
            ),
        };
        out.for_each("sink", move |r| l2.lock().unwrap().push(r.value));
        let mut cfg = RuntimeConfig::default()
            .cores(cores())
            .ring_capacity(self.ring);
        if let Some(s) = &self.standby {
            cfg = cfg.standby(s.clone());
        }
        if !self.faults.is_empty() {
            cfg = cfg.probes(faults(&self.faults));
        }
        let report = job
            .build()
            .unwrap()
            .run(&cfg)
            .unwrap_or_else(|e| panic!("{}: {e}", self.describe()));
        let mut v = std::mem::take(&mut *lines.lock().unwrap());
        v.sort();
        (v, report)
    }

    fn describe(&self) -> String {
        format!(
            "{:?}, {} records at {}, {:?}, ring {}, faults {:?}",
            self.kind,
            self.records,
            self.rate.map_or("full rate".into(), |r| format!("{r}/s")),
            self.standby.as_ref().map(|s| (
                s.mode,
                s.heartbeat_timeout,
                s.queue_memory,
                s.replay_sources,
                s.encoded_queues
            )),
            self.ring,
            self.faults
                .iter()
                .map(|f| (f.0.seq(), &f.1))
                .collect::<Vec<_>>()
        )
    }

    /// Runs it and checks the output against the fault-free run without a
    /// standby; returns the report.
    fn check(&self) -> JobReport {
        let (got, rep) = self.run();
        assert_exact(self, &got);
        assert_eq!(
            rep.restarts,
            0,
            "{}: a takeover is not a restart",
            self.describe()
        );
        rep
    }
}

/// The fault-free output of `kind` over `records` (cached).
fn clean(kind: Kind, records: u64) -> Vec<String> {
    type Cache = Vec<((Kind, u64), Vec<String>)>;
    static CLEAN: Mutex<Cache> = Mutex::new(Vec::new());
    if let Some((_, v)) = CLEAN
        .lock()
        .unwrap()
        .iter()
        .find(|(k, _)| *k == (kind, records))
    {
        return v.clone();
    }
    let (v, _) = Spec::new(kind, records).run();
    CLEAN.lock().unwrap().push(((kind, records), v.clone()));
    v
}

fn assert_exact(spec: &Spec, got: &[String]) {
    let want = clean(spec.kind, spec.records);
    if got == want.as_slice() {
        return;
    }
    let mut count: HashMap<&String, i64> = HashMap::new();
    for l in &want {
        *count.entry(l).or_default() += 1;
    }
    for l in got {
        *count.entry(l).or_default() -= 1;
    }
    let missing: Vec<_> = count.iter().filter(|(_, &c)| c > 0).take(5).collect();
    let extra: Vec<_> = count.iter().filter(|(_, &c)| c < 0).take(5).collect();
    panic!(
        "{}: {} lines, clean run {}; missing e.g. {missing:?}, duplicated or unexpected e.g. {extra:?}",
        spec.describe(),
        got.len(),
        want.len()
    );
}

/// Faults spread over a run of `records` (partition 1's sequence numbers
/// are the odd records): a panic, a stall past the heartbeat, a cut.
fn three_faults(records: u64, stall_ms: u64) -> Vec<(TupleId, ProbeAction)> {
    let q = records / 2 / 4;
    vec![
        panic_at(1, q),
        stall_at(0, 2 * q, stall_ms),
        cut_at(1, 3 * q),
    ]
}

#[test]
fn every_operator_mode_and_heartbeat_at_full_rate_matches_the_clean_run() {
    let _g = serial();
    for round in 0..2 {
        for kind in KINDS {
            for mode in [StandbyMode::Warm, StandbyMode::Hot] {
                for hb in [1, 5] {
                    let mut s = Spec::new(kind, 40_000).standby(mode, hb);
                    // The second round with the queues' records encoded.
                    if let Some(c) = &mut s.standby {
                        c.encoded_queues = round == 1;
                    }
                    let rep = s.check();
                    eprintln!(
                        "round {round} {}: {} takeovers",
                        s.describe(),
                        rep.standby.map_or(0, |s| s.takeovers)
                    );
                }
            }
        }
    }
}

#[test]
fn every_operator_mode_and_heartbeat_at_full_rate_survives_each_fault_kind() {
    let _g = serial();
    for round in 0..2 {
        for kind in KINDS {
            for mode in [StandbyMode::Warm, StandbyMode::Hot] {
                for hb in [1, 5] {
                    let mut s = Spec::new(kind, 40_000)
                        .standby(mode, hb)
                        .faults(three_faults(40_000, 10 * hb));
                    if let Some(c) = &mut s.standby {
                        c.encoded_queues = round == 1;
                    }
                    let rep = s.check();
                    let sb = rep.standby.expect("standby stats");
                    assert!(sb.takeovers >= 3, "{}: {:?}", s.describe(), rep.recovery);
                    eprintln!("round {round} {}: {} takeovers", s.describe(), sb.takeovers);
                }
            }
        }
    }
}

#[test]
fn throttled_runs_survive_each_fault_kind_and_measure_each_takeover() {
    let _g = serial();
    for kind in KINDS {
        for mode in [StandbyMode::Warm, StandbyMode::Hot] {
            let mut s = Spec::new(kind, 30_000)
                .standby(mode, 5)
                .faults(three_faults(30_000, 100));
            s.rate = Some(150_000.0);
            let rep = s.check();
            let injected: Vec<_> = rep
                .recovery
                .iter()
                .filter(|r| r.tuple_id.is_some())
                .collect();
            assert_eq!(injected.len(), 3, "{}: {:?}", s.describe(), rep.recovery);
            for r in injected {
                assert_eq!(r.operator, "op");
                assert!(!r.unprovoked, "{r:?}");
                assert!(
                    r.first_output_us.is_some() && r.caught_up_us.is_some(),
                    "{r:?}"
                );
            }
        }
    }
}

/// The last inputs, the end entries and the end-of-stream summaries are
/// replayed like everything else: a takeover at the very end (and one in
/// the end-of-stream hook itself) still delivers everything owed.
#[test]
fn a_takeover_at_the_last_records_delivers_everything_owed() {
    let _g = serial();
    let n = 20_000u64;
    let last = n / 2 - 1;
    for round in 0..3 {
        for kind in KINDS {
            for mode in [StandbyMode::Warm, StandbyMode::Hot] {
                for f in [
                    vec![panic_at(0, last), panic_at(1, last)],
                    vec![cut_at(1, last - 1), stall_at(0, last, 20)],
                    vec![panic_at(0, last - 2), cut_at(0, last)],
                ] {
                    let s = Spec::new(kind, n).standby(mode, 5).faults(f);
                    s.check();
                }
            }
            // The end-of-stream hook itself fails once.
            END_PANICS.store(kind == Kind::Keyed, Ordering::SeqCst);
            let s = Spec::new(kind, n).standby(StandbyMode::Warm, 5);
            let rep = s.check();
            assert!(!END_PANICS.load(Ordering::SeqCst), "the hook ran");
            if kind == Kind::Keyed {
                assert!(
                    rep.recovery.iter().any(|r| r.cause.contains("on_end")),
                    "round {round}: {:?}",
                    rep.recovery
                );
            }
        }
    }
}

/// The smallest buffer queues and rings at full rate: every wait of the
/// standby machinery (queue space, a recovery point waiting for
/// acknowledgements, eviction behind it, a hot standby falling behind)
/// must end without more input arriving.
#[test]
fn the_smallest_queues_at_full_rate_neither_hang_nor_lose() {
    let _g = serial();
    for kind in KINDS {
        for mode in [StandbyMode::Warm, StandbyMode::Hot] {
            // `map` right after the source replays it (its log, sized like
            // one queue, fills instead), or reads its records from a queue;
            // queues hold records in typed slots, or encoded.
            for (replay, encoded) in [(true, false), (false, false), (false, true)] {
                for f in [Vec::new(), three_faults(60_000, 10)] {
                    let mut s = Spec::new(kind, 60_000).standby(mode, 5).faults(f);
                    if let Some(c) = &mut s.standby {
                        c.queue_memory = 64 << 10;
                        c.snapshot_interval = Duration::from_millis(200);
                        c.replay_sources = replay;
                        c.encoded_queues = encoded;
                    }
                    s.ring = 2;
                    s.check();
                }
            }
        }
    }
}

/// The defect a determinant log fixes: a running count fed by two
/// partitions. A replay that took the lanes in another order than the
/// failed primary would give some records other counts (some counts twice,
/// some never).
#[test]
fn a_keyed_running_count_over_two_partitions_is_exact_after_takeovers() {
    let _g = serial();
    let n = 60_000u64;
    for round in 0..6u64 {
        for mode in [StandbyMode::Warm, StandbyMode::Hot] {
            let at = 2_000 + round * 4_000;
            let s = Spec::new(Kind::Count, n).standby(mode, 5).faults(vec![
                panic_at(round as u32 % 2, at),
                panic_at(1 - round as u32 % 2, at + 7_000),
            ]);
            let rep = s.check();
            assert!(
                rep.standby.map_or(0, |s| s.takeovers) >= 2,
                "{}",
                s.describe()
            );
        }
    }
}

#[test]
fn four_successive_failures_of_the_same_operator_are_each_taken_over() {
    let _g = serial();
    for kind in KINDS {
        let list: Vec<_> = [3_000u64, 6_000, 9_000, 12_000]
            .iter()
            .map(|&s| {
                (
                    TupleId::new(0, s),
                    ProbeAction::Panic(format!("injected fault at {s}")),
                )
            })
            .collect();
        let mut s = Spec::new(kind, 30_000)
            .standby(StandbyMode::Warm, 20)
            .faults(list);
        s.rate = Some(150_000.0);
        let rep = s.check();
        let causes: Vec<_> = rep
            .recovery
            .iter()
            .filter(|r| r.cause.contains("fault at"))
            .collect();
        assert_eq!(causes.len(), 4, "{kind:?}: {:?}", rep.recovery);
        for r in causes {
            assert!(r.first_output_us.is_some(), "{r:?}");
        }
    }
}

/// A record that fails two primaries in a row is not a fault a standby can
/// mask: the job ends with an error naming the operator.
#[test]
fn a_record_that_fails_every_primary_fails_the_job() {
    let _g = serial();
    struct Always;
    impl RecordProbe for Always {
        fn before(&mut self, id: TupleId) -> ProbeAction {
            if id == TupleId::new(0, 1_000) {
                ProbeAction::Panic("injected poison".into())
            } else {
                ProbeAction::Continue
            }
        }
    }
    struct F;
    impl ProbeFactory for F {
        fn probe(&self, operator: &str, _i: usize) -> Option<Box<dyn RecordProbe>> {
            (operator == "op").then(|| Box::new(Always) as Box<dyn RecordProbe>)
        }
    }
    let job = JobBuilder::new("poison");
    job.default_parallelism(2);
    job.source("src", |i| {
        let (p, n) = (i.parallelism as u64, i.instance as u64);
        IterSource((0..10_000u64).filter(move |s| s % p == n).map(|s| (s, 0)))
    })
    .standby()
    .map("op", |v: u64| v)
    .for_each("sink", |_| {});
    let cfg = RuntimeConfig::default()
        .cores(cores())
        .standby(StandbyConfig::default())
        .probes(Arc::new(F));
    let e = job.build().unwrap().run(&cfg).unwrap_err().to_string();
    assert!(e.contains("op") && e.contains("poison"), "{e}");
}

#[test]
fn without_a_standby_config_the_marked_operator_runs_plainly() {
    let _g = serial();
    let (got, rep) = Spec::new(Kind::Keyed, 30_000).run();
    assert_eq!(got, clean(Kind::Keyed, 30_000));
    assert!(rep.standby.is_none());
}

#[test]
fn a_standby_on_a_sink_is_a_build_error() {
    let job = JobBuilder::new("bad");
    job.source("src", |_| IterSource((0..10u64).map(|v| (v, 0))))
        .standby()
        .for_each("sink", |_| {});
    let e = job.build().err().expect("error").to_string();
    assert!(e.contains("sink") && e.contains("standby"), "{e}");
}

/// A hot standby that fails (its operator cannot even be built) is
/// replaced while the primary runs on, and the replacement still takes
/// over a later failure of the primary exactly.
#[test]
fn a_failed_standby_is_replaced_and_its_replacement_takes_over() {
    let _g = serial();
    let builds = Arc::new(AtomicUsize::new(0));
    let job = JobBuilder::new("standby-fails");
    job.default_parallelism(1);
    let lines = Arc::new(Mutex::new(Vec::new()));
    let l2 = Arc::clone(&lines);
    let b2 = Arc::clone(&builds);
    let n = 30_000u64;
    job.source("src", move |_| {
        IterSource(
            (0..n)
                .map(|s| (((s * 7919) % KEYS) as u32, s))
                .map(|v| (v, 0)),
        )
    })
    .rate_limit(150_000.0)
    .standby()
    .key_by(|p: &(u32, u64)| p.0)
    .process("op", move |_| {
        // Build 0: the primary; build 1: the first standby.
        if b2.fetch_add(1, Ordering::SeqCst) == 1 {
            panic!("injected: the standby's operator cannot be built");
        }
        PerKey
    })
    .for_each("sink", move |r| l2.lock().unwrap().push(r.value));
    let cfg = RuntimeConfig::default()
        .cores(cores())
        .standby(StandbyConfig {
            mode: StandbyMode::Hot,
            heartbeat_timeout: Duration::from_millis(20),
            snapshot_interval: Duration::from_millis(10),
            queue_memory: 4 << 20,
            replay_sources: true,
            encoded_queues: false,
            ..Default::default()
        })
        .probes(faults(&[(
            TupleId::new(0, 20_000),
            ProbeAction::Panic("injected".into()),
        )]));
    let rep = job.build().unwrap().run(&cfg).unwrap();
    let mut got = std::mem::take(&mut *lines.lock().unwrap());
    got.sort();
    // The same job at parallelism 1 computes the same lines as at 2.
    assert_eq!(got, clean(Kind::Keyed, n));
    let sb = rep.standby.expect("standby stats");
    assert!(sb.standby_failures >= 1, "{sb:?}");
    assert!(
        rep.recovery.iter().any(|r| r.cause.contains("injected")),
        "{:?}",
        rep.recovery
    );
    assert!(builds.load(Ordering::SeqCst) >= 3);
}

/// Passes its records on; at the end of its input it holds its worker
/// (past the heartbeat), then fails — once.
struct EndFailsOnce;

/// Set: the next `EndFailsOnce` end hook sleeps, then panics.
static END_FAILS: AtomicBool = AtomicBool::new(false);

impl Process<String, String> for EndFailsOnce {
    fn process(&mut self, rec: Record<String>, out: &mut Output<'_, String>) {
        out.emit(rec.value);
    }
    fn on_end(&mut self, out: &mut Output<'_, String>) {
        if END_FAILS.swap(false, Ordering::SeqCst) {
            // The other consumer (on the other worker) reads its end.
            let t = std::time::Instant::now();
            while !B_ENDED.load(Ordering::SeqCst) && t.elapsed() < Duration::from_secs(5) {
                std::thread::yield_now();
            }
            panic!("injected in the end hook, after a consumer's end");
        }
        out.emit("end".into());
    }
}

/// A consumer that already received the end of a backed-up chain's output
/// reads no more. When the chain's primary fails after that (here in an
/// end hook further down the chain), its successor replays from the last
/// recovery point: every chunk's mark goes to that consumer's ring too,
/// and once the ring is full the replay must go on without it — it has
/// every output. Before, the new primary waited on that ring forever.
#[test]
fn a_consumer_that_ended_before_a_takeover_does_not_hold_up_the_replay() {
    let _g = serial();
    let n = 100_000u64;
    for mode in [StandbyMode::Warm, StandbyMode::Hot] {
        let job = JobBuilder::new("ended-consumer");
        job.default_parallelism(1);
        let (a, b) = (
            Arc::new(Mutex::new(Vec::new())),
            Arc::new(Mutex::new(Vec::new())),
        );
        let (a2, b2) = (Arc::clone(&a), Arc::clone(&b));
        let out = job
            .source("src", move |_| IterSource((0..n).map(|s| (s, 0))))
            .standby()
            .key_by(|s: &u64| s % 7)
            .process("op", |_| Numbered);
        // First out of the chain: its end goes out before the hook below
        // runs.
        out.clone()
            .rebalance()
            .process("b", |_| Pass(Some(&B_ENDED)))
            .parallelism(2)
            .for_each("b-sink", move |r| b2.lock().unwrap().push(r.value));
        out.process("hook", |_| EndFailsOnce)
            .rebalance()
            .process("a", |_| Pass(None))
            .parallelism(2)
            .for_each("a-sink", move |r| a2.lock().unwrap().push(r.value));
        let cfg = RuntimeConfig::default()
            .cores(cores())
            // Fewer slots than the replay has chunks.
            .ring_capacity(64)
            .standby(StandbyConfig {
                mode,
                heartbeat_timeout: Duration::from_millis(20),
                // No recovery point in the run: the replay is all of it.
                snapshot_interval: Duration::from_secs(3600),
                queue_memory: 64 << 20,
                replay_sources: true,
                encoded_queues: false,
                ..Default::default()
            });
        END_FAILS.store(true, Ordering::SeqCst);
        B_ENDED.store(false, Ordering::SeqCst);
        let plan = job.build().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(plan.run(&cfg).map_err(|e| e.to_string()));
        });
        let rep = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("{mode:?}: the job hung (60 s)"))
            .unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        assert!(!END_FAILS.load(Ordering::SeqCst), "the hook ran");
        assert!(
            rep.recovery
                .iter()
                .any(|r| r.kind == tandem::RecoveryKind::Takeover),
            "{mode:?}: no takeover: {:?}",
            rep.recovery
        );
        let want: Vec<String> = {
            let mut v: Vec<String> = (0..n).map(|s| format!("m {s}")).collect();
            v.sort();
            v
        };
        let mut got_b = std::mem::take(&mut *b.lock().unwrap());
        got_b.sort();
        assert!(
            got_b == want,
            "{mode:?}: b got {} lines of {n}",
            got_b.len()
        );
        let mut got_a = std::mem::take(&mut *a.lock().unwrap());
        got_a.sort();
        let mut want_a = want;
        want_a.push("end".into());
        want_a.sort();
        assert!(
            got_a == want_a,
            "{mode:?}: a got {} lines of {}",
            got_a.len(),
            n + 1
        );
    }
}

/// Numbers its records per key: a chain with state, whose recovery
/// points follow the configured interval.
struct Numbered;
impl KeyedProcess<u64, u64, String> for Numbered {
    type State = u64;
    fn process(&mut self, _k: &u64, n: &mut u64, r: Record<u64>, out: &mut Output<'_, String>) {
        *n += 1;
        out.emit(format!("m {}", r.value));
    }
}

/// Passes its records on (an operator after an exchange); `ended`: set
/// at the end of its input.
struct Pass(Option<&'static AtomicBool>);
impl Process<String, String> for Pass {
    fn process(&mut self, rec: Record<String>, out: &mut Output<'_, String>) {
        out.emit(rec.value);
    }
    fn on_end(&mut self, _out: &mut Output<'_, String>) {
        if let Some(e) = self.0 {
            e.store(true, Ordering::SeqCst);
        }
    }
}

/// Set when consumer `b` of the test above has received its end.
static B_ENDED: AtomicBool = AtomicBool::new(false);

/// A warm standby follows its primary's recovery points
/// ([`tandem::state::delta`]): after the first whole point it is sent
/// deltas over the point its copy is at, applies them as they come, and
/// takes over from its copy — the output still exactly the clean run's.
#[test]
fn a_warm_standby_follows_the_points_by_their_deltas_and_takes_over_from_its_copy() {
    let _g = serial();
    for kind in [Kind::Keyed, Kind::Count] {
        let mut s = Spec::new(kind, 40_000)
            .standby(StandbyMode::Warm, 20)
            .faults(vec![panic_at(0, 8_000), panic_at(1, 14_000)]);
        s.rate = Some(100_000.0);
        s.standby.as_mut().expect("a standby").follow = true;
        let rep = s.check();
        let sb = rep.standby.expect("standby stats");
        assert!(sb.takeovers >= 2, "{kind:?}: {sb:?}");
        assert!(
            sb.delta_snapshots_published > 0,
            "{kind:?}: no point was a delta: {sb:?}"
        );
        assert!(
            sb.points_followed > sb.points_followed_whole,
            "{kind:?}: the standbys applied no delta: {sb:?}"
        );
        assert!(
            sb.delta_snapshots_published <= sb.snapshots_published,
            "{sb:?}"
        );
    }
}
