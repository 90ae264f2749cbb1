//! The chain as the unit of backup: a standby backs up its operator and the
//! one-input operators chained after it, keeps all their states in its
//! recovery points, and takes the whole chain over — whichever of its
//! operators fails. Two adjacent operators marked for a standby share one
//! chain; one that cannot join its upstream's chain is refused.
//!
//! Every faulted run's output is compared with a fault-free run.

mod common;

use common::{cores, quiet_injected_panics, Faults};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tandem::runtime::probe::ProbeAction;
use tandem::standby::{StandbyConfig, StandbyMode};
use tandem::Chaining;
use tandem::{IterSource, JobBuilder, JobReport, RecoveryKind, RuntimeConfig, TupleId};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    quiet_injected_panics();
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

const KEYS: u64 = 61;

/// The job's shape.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Shape {
    /// Two partitions: src → op (marked) → map `f` → filter `g` → sink.
    Stateless { both_marked: bool },
    /// One partition: src → op (marked) → key_by → running count `count`
    /// (chained: parallelism 1) → sink. The count's keyed state lives in
    /// a member of the chain, not its head.
    Count { both_marked: bool },
}

struct Run {
    shape: Shape,
    records: u64,
    mode: Option<StandbyMode>,
    faults: Vec<(&'static str, TupleId, ProbeAction)>,
    /// The chain replays `src` (no queue) rather than reading its records
    /// from a buffer queue.
    replay: bool,
    /// The queue holds records encoded rather than in typed slots.
    encoded: bool,
}

impl Run {
    fn go(&self) -> (Vec<String>, JobReport) {
        let job = JobBuilder::new("standby-chain");
        let records = self.records;
        let p = match self.shape {
            Shape::Stateless { .. } => 2,
            Shape::Count { .. } => 1,
        };
        job.default_parallelism(p);
        let src = job
            .source("src", move |i| {
                let (p, n) = (i.parallelism as u64, i.instance as u64);
                IterSource((0..records).filter(move |s| s % p == n).map(|s| (s, s)))
            })
            .standby();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l2 = Arc::clone(&lines);
        let out = match self.shape {
            Shape::Stateless { both_marked } => {
                let m = src.map("op", |s: u64| ((s * 7919) % KEYS, s));
                let m = if both_marked { m.standby() } else { m };
                m.map("f", |(k, s): (u64, u64)| (k, s * 3))
                    .filter("g", |&(k, _): &(u64, u64)| k % 5 != 0)
                    .map("fmt", |(k, v): (u64, u64)| format!("m {k} {v}"))
            }
            Shape::Count { both_marked } => {
                let m = src.map("op", |s: u64| ((s * 7919) % KEYS, s));
                let m = if both_marked { m.standby() } else { m };
                m.key_by(|p: &(u64, u64)| p.0)
                    .aggregate("count", |n: &mut u64, p: &(u64, u64)| {
                        *n += 1;
                        format!("c {} {} {}", p.0, p.1, *n)
                    })
            }
        };
        out.for_each("sink", move |r| l2.lock().unwrap().push(r.value));
        let mut cfg = RuntimeConfig::default()
            .cores(cores())
            .chaining(Chaining::Always)
            .ring_capacity(256);
        if let Some(mode) = self.mode {
            cfg = cfg.standby(StandbyConfig {
                mode,
                heartbeat_timeout: Duration::from_millis(30),
                snapshot_interval: Duration::from_millis(5),
                queue_memory: 2 << 20,
                replay_sources: self.replay,
                encoded_queues: self.encoded,
                ..Default::default()
            });
        }
        if !self.faults.is_empty() {
            cfg = cfg.probes(Arc::new(Faults::new(self.faults.clone())));
        }
        let report = job
            .build()
            .unwrap()
            .run(&cfg)
            .unwrap_or_else(|e| panic!("{:?} {:?}: {e}", self.shape, self.mode));
        let mut v = std::mem::take(&mut *lines.lock().unwrap());
        v.sort();
        (v, report)
    }
}

fn panic_in(op: &'static str, partition: u32, seq: u64) -> (&'static str, TupleId, ProbeAction) {
    (
        op,
        TupleId::new(partition, seq),
        ProbeAction::Panic(format!("injected in {op} at {seq}")),
    )
}

fn cut_in(op: &'static str, partition: u32, seq: u64) -> (&'static str, TupleId, ProbeAction) {
    (op, TupleId::new(partition, seq), ProbeAction::CutInput)
}

/// A stall well past the heartbeat: the standby must find it, and the
/// takeover must be attributed to it (not be unprovoked).
fn stall_in(op: &'static str, partition: u32, seq: u64) -> (&'static str, TupleId, ProbeAction) {
    (
        op,
        TupleId::new(partition, seq),
        ProbeAction::Stall(Duration::from_millis(150)),
    )
}

/// The fault-free output of `shape` over `records`, without a standby.
fn clean(shape: Shape, records: u64) -> Vec<String> {
    let lines = Run {
        shape,
        records,
        mode: None,
        faults: vec![],
        replay: false,
        encoded: false,
    }
    .go()
    .0;
    assert!(!lines.is_empty());
    lines
}

/// Runs `shape` clean and then faulted in both modes; the outputs must be
/// the same, each fault answered by a takeover of the chain, none by a
/// restart.
fn exact_under_faults(
    shape: Shape,
    records: u64,
    chain: &[&str],
    faults: Vec<(&'static str, TupleId, ProbeAction)>,
) {
    let clean = clean(shape, records);
    for (mode, replay, encoded) in [
        (StandbyMode::Warm, true, false),
        (StandbyMode::Hot, true, false),
        (StandbyMode::Warm, false, false),
        (StandbyMode::Hot, false, true),
    ] {
        let (got, rep) = Run {
            shape,
            records,
            mode: Some(mode),
            faults: faults.clone(),
            replay,
            encoded,
        }
        .go();
        let what =
            format!("{shape:?} {mode:?} replaying the source: {replay}, encoded queue: {encoded}");
        let stats = rep.standby.as_ref().expect("a standby run");
        // A chain that replays its source runs it too.
        let want: Vec<String> = replay
            .then_some("src")
            .iter()
            .chain(chain)
            .map(|s| s.to_string())
            .collect();
        assert_eq!(stats.chains, vec![want], "{what}: the backed-up chain");
        assert_eq!(rep.restarts, 0, "{what}: a takeover is not a restart");
        // One takeover a fault, each naming the operator that failed.
        let mut named: Vec<&str> = rep
            .recovery
            .iter()
            .filter(|r| r.kind == RecoveryKind::Takeover && !r.unprovoked)
            .map(|r| r.operator.as_str())
            .collect();
        named.sort_unstable();
        let mut failed: Vec<&str> = faults.iter().map(|f| f.0).collect();
        failed.sort_unstable();
        assert_eq!(named, failed, "{what}: {:?}", rep.recovery);
        assert_eq!(got.len(), clean.len(), "{what}: line count");
        assert!(
            got == clean,
            "{what}: the output differs from the clean run"
        );
    }
}

#[test]
fn a_standby_takes_over_its_whole_chain_whichever_operator_of_it_fails() {
    let _g = serial();
    exact_under_faults(
        Shape::Stateless { both_marked: false },
        60_000,
        &["op", "f", "g", "fmt"],
        vec![
            panic_in("op", 0, 4_000),
            panic_in("g", 1, 11_000),
            stall_in("g", 0, 14_000),
            cut_in("f", 0, 18_000),
            panic_in("fmt", 1, 25_000),
        ],
    );
}

#[test]
fn a_keyed_state_inside_the_chain_is_restored_by_the_takeover() {
    let _g = serial();
    // The running count's outputs name each record's count: one lost or
    // repeated update of the member's state changes every later line.
    exact_under_faults(
        Shape::Count { both_marked: false },
        60_000,
        &["op", "count"],
        vec![
            panic_in("count", 0, 9_000),
            panic_in("op", 0, 30_000),
            cut_in("count", 0, 47_000),
        ],
    );
}

#[test]
fn two_adjacent_marked_operators_share_one_backed_up_chain() {
    let _g = serial();
    exact_under_faults(
        Shape::Count { both_marked: true },
        40_000,
        &["op", "count"],
        vec![panic_in("count", 0, 12_000), panic_in("op", 0, 27_000)],
    );
    exact_under_faults(
        Shape::Stateless { both_marked: true },
        40_000,
        &["op", "f", "g", "fmt"],
        vec![panic_in("f", 0, 7_000)],
    );
}

/// A chain that replays its source runs the source's code too: a panic,
/// a stall or a cut in the source is one takeover of the chain (with a
/// queue, the source is outside every group and its failure restart-all).
#[test]
fn a_chain_that_replays_its_source_takes_over_faults_in_the_source() {
    let _g = serial();
    let shape = Shape::Stateless { both_marked: false };
    let records = 60_000;
    let clean = clean(shape, records);
    let faults = vec![
        panic_in("src", 0, 3_000),
        stall_in("src", 1, 11_000),
        cut_in("src", 0, 20_000),
        panic_in("src", 1, 27_000),
    ];
    for mode in [StandbyMode::Warm, StandbyMode::Hot] {
        let (got, rep) = Run {
            shape,
            records,
            mode: Some(mode),
            faults: faults.clone(),
            replay: true,
            encoded: false,
        }
        .go();
        assert_eq!(rep.restarts, 0, "{mode:?}: a takeover is not a restart");
        let takeovers: Vec<_> = rep
            .recovery
            .iter()
            .filter(|r| r.kind == RecoveryKind::Takeover && !r.unprovoked)
            .collect();
        assert_eq!(takeovers.len(), faults.len(), "{mode:?}: {takeovers:?}");
        assert!(
            takeovers.iter().all(|r| r.operator == "src"),
            "{mode:?}: each names the source: {takeovers:?}"
        );
        assert!(
            got == clean,
            "{mode:?}: the output differs from the clean run"
        );
    }
}

/// Partition `instance` of `0..end`, with a seek that reads (as the
/// trait's default does) and counts the records it reads.
struct CountedSeek {
    next: u64,
    end: u64,
    step: u64,
    read_in_seek: Arc<AtomicU64>,
}

impl tandem::Source<u64> for CountedSeek {
    fn poll_next(&mut self) -> tandem::SourcePoll<u64> {
        if self.next >= self.end {
            return tandem::SourcePoll::End;
        }
        self.next += self.step;
        tandem::SourcePoll::Ready {
            value: self.next - self.step,
            event_time: 0,
        }
    }

    fn seek(&mut self, next_seq: u64) -> Result<(), tandem::SeekError> {
        self.read_in_seek.fetch_add(next_seq, Ordering::SeqCst);
        self.next += next_seq * self.step;
        Ok(())
    }
}

/// A source that cannot jump is not read again from its start by a
/// takeover (a restart in disguise): the warm standby keeps an instance of
/// its own near the newest recovery point, and the takeover reads on from
/// there.
#[test]
fn a_takeover_reads_a_source_that_cannot_jump_from_near_the_point_not_from_its_start() {
    let _g = serial();
    let n = 40_000u64;
    let read_in_seek = Arc::new(AtomicU64::new(0));
    let job = JobBuilder::new("keep-up");
    job.default_parallelism(2);
    let lines = Arc::new(Mutex::new(Vec::new()));
    let (l2, r2) = (Arc::clone(&lines), Arc::clone(&read_in_seek));
    job.source("src", move |i| CountedSeek {
        next: i.instance as u64,
        end: n,
        step: i.parallelism as u64,
        read_in_seek: Arc::clone(&r2),
    })
    // ~100 ms a partition: the standby has long kept up by the faults.
    .rate_limit(200_000.0)
    .standby()
    .map("op", |s: u64| format!("m {s}"))
    .for_each("sink", move |r| l2.lock().unwrap().push(r.value));
    let cfg = RuntimeConfig::default()
        .cores(cores())
        .standby(StandbyConfig {
            mode: StandbyMode::Warm,
            heartbeat_timeout: Duration::from_millis(30),
            snapshot_interval: Duration::from_millis(5),
            queue_memory: 2 << 20,
            replay_sources: true,
            encoded_queues: false,
            ..Default::default()
        })
        .probes(Arc::new(Faults::new(vec![
            panic_in("op", 0, 15_000),
            panic_in("op", 1, 18_000),
        ])));
    let rep = job.build().unwrap().run(&cfg).unwrap();
    let mut got = std::mem::take(&mut *lines.lock().unwrap());
    got.sort();
    let mut want: Vec<String> = (0..n).map(|s| format!("m {s}")).collect();
    want.sort();
    assert!(got == want, "{} lines, {} expected", got.len(), want.len());
    let takeovers = rep
        .recovery
        .iter()
        .filter(|r| r.kind == RecoveryKind::Takeover && !r.unprovoked)
        .count();
    assert_eq!(takeovers, 2, "{:?}", rep.recovery);
    // Reading from the start would have sought 15 000 + 18 000 records.
    let sought = read_in_seek.load(Ordering::SeqCst);
    assert!(sought < 5_000, "takeovers sought {sought} records");
}

#[test]
fn a_marked_operator_that_cannot_join_its_upstreams_chain_is_refused() {
    let _g = serial();
    let job = JobBuilder::new("refused");
    job.default_parallelism(2);
    job.source("src", |i| {
        let n = i.instance as u64;
        IterSource((0..100u64).filter(move |s| s % 2 == n).map(|s| (s, s)))
    })
    .standby()
    .map("op", |s: u64| (s % 7, s))
    .standby()
    .key_by(|p: &(u64, u64)| p.0)
    .aggregate("count", |n: &mut u64, _: &(u64, u64)| {
        *n += 1;
        *n
    })
    .for_each("sink", |_| {});
    // Refused when the job is built, before any configuration is given.
    let err = match job.build() {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a marked operator behind a repartition of a backed-up chain was built"),
    };
    assert!(
        err.contains("`count`") && err.contains("repartitioned"),
        "the error names the operator and why: {err}"
    );
}

/// Sums the values below `FIRST` (the input's first ones), emits the sum
/// with the last of them, and from then on keeps no state: its snapshot is
/// `None`, and a fresh instance behaves as it does (it only counts values
/// below `FIRST`).
#[derive(Default)]
struct SumFirst {
    sum: u64,
    seen: u64,
}

const FIRST: u64 = 5_000;

impl tandem::Process<(u64, u64), String> for SumFirst {
    fn process(&mut self, r: tandem::Record<(u64, u64)>, out: &mut tandem::Output<'_, String>) {
        if r.value.1 < FIRST {
            self.sum += r.value.1;
            self.seen += 1;
            if self.seen == FIRST {
                out.emit(format!("sum {}", self.sum));
            }
        }
        out.emit(format!("r {}", r.value.1));
    }

    fn snapshot_state(
        &mut self,
    ) -> Result<Option<tandem::checkpoint::SnapshotBytes>, tandem::CheckpointError> {
        if self.seen >= FIRST {
            return Ok(None);
        }
        tandem::checkpoint::serialize(&(self.sum, self.seen), 64).map(Some)
    }

    fn restore_state(&mut self, payload: &[u8]) -> Result<(), tandem::CheckpointError> {
        let s = tandem::checkpoint::access::<(u64, u64)>(payload)?;
        (self.sum, self.seen) = (s.0.to_native(), s.1.to_native());
        Ok(())
    }
}

/// A member whose state ends (its snapshot turns `None`) neither stops
/// the recovery points — the queue, which only a point empties, would
/// fill and hold the job — nor restores an older state after a takeover.
#[test]
fn a_member_whose_state_ends_keeps_the_points_going_and_restores_none() {
    let _g = serial();
    let run = |mode: Option<StandbyMode>,
               replay: bool,
               faults: Vec<(&'static str, TupleId, ProbeAction)>| {
        let job = JobBuilder::new("state-ends");
        job.default_parallelism(1);
        let n = 60_000u64;
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l2 = Arc::clone(&lines);
        job.source("src", move |_| IterSource((0..n).map(|s| (s, s))))
            .standby()
            .map("op", |s: u64| (s % 7, s))
            .process("sum", |_| SumFirst::default())
            .for_each("sink", move |r| l2.lock().unwrap().push(r.value));
        let mut cfg = RuntimeConfig::default()
            .cores(cores())
            .chaining(Chaining::Always)
            .ring_capacity(256);
        if let Some(mode) = mode {
            cfg = cfg.standby(StandbyConfig {
                mode,
                heartbeat_timeout: Duration::from_millis(30),
                snapshot_interval: Duration::from_millis(2),
                // Far less than the input: only points let it through.
                queue_memory: 256 << 10,
                replay_sources: replay,
                encoded_queues: !replay && mode == StandbyMode::Hot,
                ..Default::default()
            });
        }
        if !faults.is_empty() {
            cfg = cfg.probes(Arc::new(Faults::new(faults)));
        }
        let rep = job.build().unwrap().run(&cfg).unwrap();
        let mut v = std::mem::take(&mut *lines.lock().unwrap());
        v.sort();
        (v, rep)
    };
    let (clean, _) = run(None, false, vec![]);
    for (mode, replay) in [
        (StandbyMode::Warm, true),
        (StandbyMode::Hot, true),
        (StandbyMode::Warm, false),
        (StandbyMode::Hot, false),
    ] {
        let faults = vec![
            panic_in("sum", 0, 2_000),
            panic_in("sum", 0, 30_000),
            panic_in("op", 0, 50_000),
        ];
        let (got, rep) = run(Some(mode), replay, faults);
        let stats = rep.standby.as_ref().unwrap();
        let mut want = vec!["op".to_string(), "sum".to_string()];
        if replay {
            want.insert(0, "src".into());
        }
        assert_eq!(stats.chains, vec![want], "{mode:?} replay {replay}");
        assert!(
            stats.snapshots_published > 3,
            "{mode:?} replay {replay}: points went on"
        );
        assert_eq!(rep.restarts, 0);
        assert!(
            got == clean,
            "{mode:?} replay {replay}: the output differs from the clean run"
        );
    }
}

/// A union with one input from a backed-up chain and one from an operator
/// without a standby is refused when the job is built (it was first
/// refused at `run()`), naming both; a join marked on one input instead
/// of on the pair (the mark was dropped) is refused, saying where the
/// mark goes.
#[test]
fn a_union_or_join_of_backed_and_plain_inputs_is_refused_at_build_naming_both() {
    let job = JobBuilder::new("mixed-union");
    let a = job
        .source("a", |_| IterSource((0..10u64).map(|s| (s, s))))
        .standby()
        .map("backed", |s: u64| s);
    let b = job.source("b", |_| IterSource((0..10u64).map(|s| (s, s))));
    a.union("merged", &[&b]).for_each("sink", |_| {});
    let err = job.build().err().expect("refused").to_string();
    assert!(
        err.contains("`merged`") && err.contains("`backed`") && err.contains("`b`"),
        "{err}"
    );

    let job = JobBuilder::new("mixed-join");
    let w = tandem::time::Watermarks::bounded(Duration::ZERO);
    // Marked on one input, not on the pair: the mark would fall on the
    // input's tagging map, leaving the join half backed up.
    let a = job
        .source("a", |_| IterSource((0..10u64).map(|s| (s, s))))
        .watermarks(w)
        .standby();
    let b = job
        .source("b", |_| IterSource((0..10u64).map(|s| (s, s))))
        .watermarks(w);
    a.key_by(|s: &u64| *s)
        .interval_join(&b.key_by(|s: &u64| *s), Duration::ZERO, Duration::ZERO)
        .process("join", |_k: &u64, x: &u64, y: &u64| x + y)
        .results()
        .for_each("sink", |_| {});
    let err = job.build().err().expect("refused").to_string();
    assert!(
        err.contains("`join`") && err.contains("interval_join(&b.key_by(..), ..).standby()"),
        "{err}"
    );
}
