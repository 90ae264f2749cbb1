//! Keyed joins and process functions in event time: an interval join and
//! a window join against the pairs computed by brute force, exact under restart-all and
//! under a standby on the join; timers in event and processing time; a
//! keyed two-input process function against a model of its merge; aligned
//! sources. (Keyed state with TTL: `ttl.rs`.)

mod common;

use common::{cores, exact_under_faults, quiet_injected_panics, Faults};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tandem::runtime::probe::ProbeAction;
use tandem::time::{TimedCoProcess, TimedProcess, TimerContext, Watermarks, Windows};
use tandem::{
    IterSource, JobBuilder, Output, Record, RuntimeConfig, StandbyConfig, StandbyMode, TupleId,
};

const MS: u64 = 1_000_000;

/// Side `s` record `i`: `(key, i)` at about `i` ms, jittered within 3 ms.
fn rec(s: u64, i: u64) -> ((u32, u64), u64) {
    let h = (i ^ (s << 32)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (
        ((h >> 40) as u32 % 50, i),
        100 * MS + i * MS + (h >> 8) % (3 * MS),
    )
}

type Pair = (u32, u64, u64);

#[derive(Clone, Copy, Debug)]
enum Kind {
    Interval,
    /// Tumbling windows of 10 ms.
    Window,
}

/// The two keyed inputs of `n` records each drawn by `rec`: side 0 in two
/// partitions, side 1 in one, with watermarks 3 ms behind.
type Side = tandem::KeyedStream<u32, (u32, u64)>;

fn sides(job: &JobBuilder, n: u64, rec: fn(u64, u64) -> ((u32, u64), u64)) -> (Side, Side) {
    let left = job
        .source("left", move |i| {
            let me = i.instance as u64;
            IterSource((0..n).filter(move |k| k % 2 == me).map(move |k| rec(0, k)))
        })
        .watermarks(Watermarks::bounded(Duration::from_millis(3)).every(8));
    let right = job
        .source("right", move |_| IterSource((0..n).map(move |k| rec(1, k))))
        .parallelism(1)
        .watermarks(Watermarks::bounded(Duration::from_millis(3)).every(8));
    (
        left.key_by(|r: &(u32, u64)| r.0),
        right.key_by(|r: &(u32, u64)| r.0),
    )
}

fn join_job(kind: Kind, n: u64, standby: bool, out: Arc<Mutex<Vec<Pair>>>) -> tandem::Job {
    let job = JobBuilder::new("interval");
    job.default_parallelism(2);
    let (left, right) = sides(&job, n, rec);
    let pairs = match kind {
        Kind::Interval => {
            let j =
                left.interval_join(&right, Duration::from_millis(20), Duration::from_millis(30));
            let j = if standby { j.standby() } else { j };
            let out = j.process("join", |k: &u32, a: &(u32, u64), b: &(u32, u64)| {
                (*k, a.1, b.1)
            });
            out.late()
                .for_each("late", |r| panic!("late: {:?}", r.value));
            out.results()
        }
        Kind::Window => {
            let j = left.window_join(&right, Windows::tumbling(Duration::from_millis(10)));
            let j = if standby { j.standby() } else { j };
            let out = j.apply("join", |k: &u32, _w, a: &(u32, u64), b: &(u32, u64)| {
                (*k, a.1, b.1)
            });
            out.late()
                .for_each("late", |r| panic!("late: {:?}", r.value));
            out.results()
        }
    };
    pairs.for_each("sink", move |r| out.lock().unwrap().push(r.value));
    job.build().unwrap()
}

fn run(kind: Kind, n: u64, standby: bool, cfg: &RuntimeConfig) -> (Vec<Pair>, tandem::JobReport) {
    let out = Arc::new(Mutex::new(Vec::new()));
    let report = join_job(kind, n, standby, Arc::clone(&out))
        .run(cfg)
        .unwrap();
    let mut v = std::mem::take(&mut *out.lock().unwrap());
    v.sort();
    (v, report)
}

/// The join of `kind` emits exactly the pairs of equal keys whose event
/// times `pairs` (computed by brute force), on 1 core and on all.
fn emits_exactly(kind: Kind, pairs: impl Fn(u64, u64) -> bool) {
    let n = 3000;
    let mut want = Vec::new();
    for i in 0..n {
        let ((ka, _), ta) = rec(0, i);
        for j in 0..n {
            let ((kb, _), tb) = rec(1, j);
            if ka == kb && pairs(ta, tb) {
                want.push((ka, i, j));
            }
        }
    }
    want.sort();
    assert!(want.len() > 1000, "{} pairs", want.len());
    for cfg in [
        RuntimeConfig::default().cores(1),
        RuntimeConfig::default().cores(cores()),
    ] {
        let (got, _) = run(kind, n, false, &cfg);
        assert_eq!(got.len(), want.len());
        assert!(got == want, "the pairs differ");
    }
}

#[test]
fn an_interval_join_emits_exactly_the_pairs_within_the_interval() {
    emits_exactly(Kind::Interval, |ta, tb| {
        ta <= tb + 20 * MS && tb <= ta + 30 * MS
    });
}

#[test]
fn a_window_join_emits_exactly_the_pairs_in_each_window() {
    emits_exactly(Kind::Window, |ta, tb| ta / (10 * MS) == tb / (10 * MS));
}

fn panics() -> Faults {
    Faults::new(
        [
            TupleId::new(0, 400),
            TupleId::new(2, 900),
            TupleId::new(1, 1300),
            TupleId::new(2, 2200),
        ]
        .into_iter()
        .map(|t| ("join", t, ProbeAction::Panic("injected".into())))
        .collect(),
    )
}

#[test]
fn an_interval_join_is_exact_after_takeovers_and_after_restarts() {
    exact_after_takeovers_and_restarts(Kind::Interval);
}

#[test]
fn a_window_join_is_exact_after_takeovers_and_after_restarts() {
    exact_after_takeovers_and_restarts(Kind::Window);
}

fn exact_after_takeovers_and_restarts(kind: Kind) {
    let n = 5000;
    let (clean, _) = run(kind, n, false, &RuntimeConfig::default().cores(cores()));
    exact_under_faults(&clean, panics, 4, |standby, cfg| run(kind, n, standby, cfg));
}

/// Emits `(key, records, time)` once a key has been quiet for 10 ms of
/// event time.
struct Quiet;

impl TimedProcess<u32, (u32, u64), (u32, u64, u64)> for Quiet {
    type State = (u64, u64);
    fn process(
        &mut self,
        _k: &u32,
        s: &mut (u64, u64),
        r: Record<(u32, u64)>,
        cx: &mut TimerContext<'_>,
        _out: &mut Output<'_, (u32, u64, u64)>,
    ) {
        s.0 += 1;
        cx.delete(s.1);
        s.1 = r.event_time + 10 * MS;
        cx.register(s.1);
    }
    fn on_timer(
        &mut self,
        k: &u32,
        s: &mut (u64, u64),
        at: u64,
        cx: &mut TimerContext<'_>,
        out: &mut Output<'_, (u32, u64, u64)>,
    ) {
        assert_eq!(cx.now(), at);
        out.emit((*k, s.0, at));
        s.0 = 0;
    }
}

#[test]
fn timers_fire_once_the_watermark_passes_them_in_event_time_order() {
    // Key k's records come in bursts; a quiet spell of 10 ms ends a burst.
    let recs: Vec<((u32, u64), u64)> = (0..2000u64)
        .map(|i| {
            let k = (i % 4) as u32;
            // Every 50 records a 30 ms pause.
            let t = 100 * MS + i * MS / 4 + (i / 50) * 30 * MS;
            ((k, i), t)
        })
        .collect();
    let mut want = Vec::new();
    for k in 0..4u32 {
        let times: Vec<u64> = recs.iter().filter(|r| r.0 .0 == k).map(|r| r.1).collect();
        let mut count = 0;
        for (i, &t) in times.iter().enumerate() {
            count += 1;
            let next = times.get(i + 1).copied();
            if next.is_none_or(|n| n >= t + 10 * MS) {
                want.push((k, count, t + 10 * MS));
                count = 0;
            }
        }
    }
    want.sort();
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = Arc::clone(&got);
    let job = JobBuilder::new("quiet");
    let r2 = recs.clone();
    job.source("events", move |_| IterSource(r2.clone().into_iter()))
        .watermarks(Watermarks::ascending().every(4))
        .key_by(|r: &(u32, u64)| r.0)
        .process_timed("quiet", |_| Quiet)
        .for_each("sink", move |r| g.lock().unwrap().push(r.value));
    job.build()
        .unwrap()
        .run(&RuntimeConfig::default().cores(cores()))
        .unwrap();
    let mut got = std::mem::take(&mut *got.lock().unwrap());
    got.sort();
    assert_eq!(got, want);
}

/// Counts each key's records; 3 ms of processing time after a key's
/// first uncounted record, emits `(key, count, time)`.
struct Every3ms;

impl TimedProcess<u32, (u32, u64), (u32, u64, u64)> for Every3ms {
    type State = (u64, u64); // (count, the timer pending, 0: none)
    fn process(
        &mut self,
        _k: &u32,
        s: &mut (u64, u64),
        _r: Record<(u32, u64)>,
        cx: &mut TimerContext<'_>,
        _out: &mut Output<'_, (u32, u64, u64)>,
    ) {
        s.0 += 1;
        if s.1 == 0 {
            s.1 = cx.processing_time() + 3 * MS;
            cx.register_processing_time(s.1);
        }
    }
    fn on_timer(
        &mut self,
        _: &u32,
        _: &mut (u64, u64),
        _: u64,
        _: &mut TimerContext<'_>,
        _: &mut Output<'_, (u32, u64, u64)>,
    ) {
    }
    fn on_processing_timer(
        &mut self,
        k: &u32,
        s: &mut (u64, u64),
        at: u64,
        cx: &mut TimerContext<'_>,
        out: &mut Output<'_, (u32, u64, u64)>,
    ) {
        assert_eq!(at, s.1, "the timer registered");
        assert!(cx.processing_time() >= at, "fired before its time");
        s.1 = 0;
        out.emit((*k, s.0, at));
    }
    fn on_end(&mut self, k: &u32, s: &mut (u64, u64), out: &mut Output<'_, (u32, u64, u64)>) {
        out.emit((*k, s.0, u64::MAX));
    }
}

/// What `Every3ms` emitted, checked: per key, the counts strictly grow
/// (no firing twice, none at another place in the input than it had),
/// each firing's time is later than the last, and the end has them all.
fn check_every3ms(lines: &[(u32, u64, u64)], keys: u32, per_key: u64) -> usize {
    let mut fired = 0;
    for k in 0..keys {
        let mine: Vec<_> = lines.iter().filter(|l| l.0 == k).collect();
        let (last, firings) = mine.split_last().expect("an end line");
        assert_eq!((last.1, last.2), (per_key, u64::MAX), "key {k}: {mine:?}");
        for w in firings.windows(2) {
            assert!(w[0].1 < w[1].1 && w[0].2 < w[1].2, "key {k}: {w:?}");
        }
        fired += firings.len();
    }
    fired
}

fn every3ms_job(n: u64, standby: bool, out: Arc<Mutex<Vec<(u32, u64, u64)>>>) -> tandem::Job {
    let job = JobBuilder::new("ptime");
    job.default_parallelism(2);
    let src = job
        .source("events", move |_| {
            IterSource((0..n).map(|i| (((i % 5) as u32, i), 100 * MS + i)))
        })
        .parallelism(1)
        .rate_limit(30_000.0)
        .watermarks(Watermarks::ascending());
    let src = if standby { src.standby() } else { src };
    src.key_by(|r: &(u32, u64)| r.0)
        .process_timed("every", |_| Every3ms)
        .for_each("sink", move |r| out.lock().unwrap().push(r.value));
    job.build().unwrap()
}

#[test]
fn processing_time_timers_fire_as_the_clock_passes_them() {
    let n = 3000;
    let out = Arc::new(Mutex::new(Vec::new()));
    every3ms_job(n, false, Arc::clone(&out))
        .run(&RuntimeConfig::default().cores(cores()))
        .unwrap();
    let lines = std::mem::take(&mut *out.lock().unwrap());
    // 100 ms of input: a firing per key every 3 ms or so.
    let fired = check_every3ms(&lines, 5, n / 5);
    assert!(fired >= 5 * 10, "{fired} firings");
}

#[test]
fn processing_time_timers_fire_where_the_log_says_after_takeovers() {
    quiet_injected_panics();
    let n = 3000;
    for mode in [StandbyMode::Warm, StandbyMode::Hot] {
        let f = Faults::new(
            [400u64, 1300, 2200]
                .into_iter()
                .map(|i| {
                    (
                        "every",
                        TupleId::new(0, i),
                        ProbeAction::Panic("injected".into()),
                    )
                })
                .collect(),
        );
        let cfg = RuntimeConfig::default()
            .cores(cores())
            .standby(StandbyConfig {
                mode,
                snapshot_interval: Duration::from_millis(5),
                ..StandbyConfig::default()
            })
            .probes(Arc::new(f.clone()));
        let out = Arc::new(Mutex::new(Vec::new()));
        let report = every3ms_job(n, true, Arc::clone(&out)).run(&cfg).unwrap();
        assert!(f.all_fired(), "{mode:?}");
        assert!(
            report.recovery.len() >= 3,
            "{mode:?}: {:?}",
            report.recovery
        );
        let lines = std::mem::take(&mut *out.lock().unwrap());
        let fired = check_every3ms(&lines, 5, n / 5);
        assert!(fired >= 5 * 10, "{mode:?}: {fired} firings");
    }
}

/// For each record, how many of the other input's records of its key came
/// before it: `(key, side * 10^9 + number, others)` — an output that
/// depends on how the inputs interleave.
struct Before;

impl TimedCoProcess<u32, (u32, u64), (u32, u64), Pair> for Before {
    type State = (u64, u64);
    fn process_first(
        &mut self,
        k: &u32,
        s: &mut (u64, u64),
        r: Record<(u32, u64)>,
        _cx: &mut TimerContext<'_>,
        out: &mut Output<'_, Pair>,
    ) {
        s.0 += 1;
        out.emit((*k, r.value.1, s.1));
    }
    fn process_second(
        &mut self,
        k: &u32,
        s: &mut (u64, u64),
        r: Record<(u32, u64)>,
        _cx: &mut TimerContext<'_>,
        out: &mut Output<'_, Pair>,
    ) {
        s.1 += 1;
        out.emit((*k, 1_000_000_000 + r.value.1, s.0));
    }
}

/// `Before`'s lines from the inputs alone: every record in the order
/// (event time, tuple ID).
fn before_model(n: u64) -> Vec<Pair> {
    let mut all: Vec<(u64, u64, u64, u32, u64)> = Vec::new();
    for i in 0..n {
        let ((k, v), t) = rec(0, i);
        all.push((t, TupleId::new((i % 2) as u32, i / 2).0, 0, k, v));
        let ((k, v), t) = rec(1, i);
        all.push((t, TupleId::new(2, i).0, 1, k, v));
    }
    all.sort();
    let mut counts: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    let mut out: Vec<Pair> = all
        .into_iter()
        .map(|(_, _, side, k, v)| {
            let c = counts.entry(k).or_default();
            if side == 0 {
                c.0 += 1;
                (k, v, c.1)
            } else {
                c.1 += 1;
                (k, 1_000_000_000 + v, c.0)
            }
        })
        .collect();
    out.sort();
    out
}

/// The sources of the merge tests, aligned (so restarts and takeovers
/// of aligned sources are covered too).
fn aligned_sources(job: &JobBuilder, n: u64, drift: Duration) -> [tandem::Stream<(u32, u64)>; 2] {
    let wm = Watermarks::bounded(Duration::from_millis(3))
        .every(8)
        .max_drift(drift);
    let left = job
        .source("left", move |i| {
            let me = i.instance as u64;
            IterSource((0..n).filter(move |k| k % 2 == me).map(|k| rec(0, k)))
        })
        .watermarks(wm);
    let right = job
        .source("right", move |_| IterSource((0..n).map(|k| rec(1, k))))
        .parallelism(1)
        .watermarks(wm);
    [left, right]
}

fn before_job(n: u64, standby: bool, out: Arc<Mutex<Vec<Pair>>>) -> tandem::Job {
    let job = JobBuilder::new("before");
    job.default_parallelism(2);
    let [left, right] = aligned_sources(&job, n, Duration::from_millis(5));
    let c = left
        .key_by(|r: &(u32, u64)| r.0)
        .connect(&right.key_by(|r: &(u32, u64)| r.0));
    let lines = if standby {
        c.standby().process_timed("before", |_| Before)
    } else {
        c.process_timed("before", |_| Before)
    };
    lines.for_each("sink", move |r| out.lock().unwrap().push(r.value));
    job.build().unwrap()
}

fn run_before(n: u64, standby: bool, cfg: &RuntimeConfig) -> (Vec<Pair>, tandem::JobReport) {
    let out = Arc::new(Mutex::new(Vec::new()));
    let report = before_job(n, standby, Arc::clone(&out)).run(cfg).unwrap();
    let mut v = std::mem::take(&mut *out.lock().unwrap());
    v.sort();
    (v, report)
}

#[test]
fn a_timed_co_process_takes_both_inputs_in_event_time_then_tuple_id_order() {
    let n = 3000;
    let want = before_model(n);
    for cfg in [
        RuntimeConfig::default().cores(1),
        RuntimeConfig::default().cores(cores()),
    ] {
        let (got, _) = run_before(n, false, &cfg);
        assert!(got == want, "the lines differ from the model");
    }
}

#[test]
fn a_timed_co_process_is_exact_after_takeovers_and_after_restarts() {
    let n = 5000;
    let panics = || {
        Faults::new(
            [
                TupleId::new(0, 400),
                TupleId::new(2, 900),
                TupleId::new(1, 1300),
                TupleId::new(2, 2200),
            ]
            .into_iter()
            .map(|t| ("before", t, ProbeAction::Panic("injected".into())))
            .collect(),
        )
    };
    exact_under_faults(&before_model(n), panics, 4, |standby, cfg| {
        run_before(n, standby, cfg)
    });
}

#[test]
fn aligned_sources_stay_within_their_drift_of_each_other() {
    // What each source partition has read, in the order read: no record
    // is read while another aligned partition (not ended) is more than
    // the drift, plus what its watermark lags its records, behind it.
    let n = 20_000;
    let drift = Duration::from_millis(5);
    for cores_ in [1, cores()] {
        let job = JobBuilder::new("aligned");
        job.default_parallelism(2);
        let [left, right] = aligned_sources(&job, n, drift);
        let read = Arc::new(Mutex::new(Vec::new()));
        let (r1, r2) = (Arc::clone(&read), Arc::clone(&read));
        left.map("read-left", move |v: (u32, u64)| {
            r1.lock().unwrap().push((v.1 % 2, v.1));
            v
        })
        .for_each("l", |_| {});
        right
            .map("read-right", move |v: (u32, u64)| {
                r2.lock().unwrap().push((2, v.1));
                v
            })
            // Chained to its source: recorded as read.
            .parallelism(1)
            .for_each("r", |_| {});
        job.build()
            .unwrap()
            .run(&RuntimeConfig::default().cores(cores_))
            .unwrap();
        let read = std::mem::take(&mut *read.lock().unwrap());
        assert_eq!(read.len() as u64, 2 * n);
        // Per partition: the newest record number read so far (about its
        // event time in ms), and how many it has left.
        let mut newest = [0u64; 3];
        let mut left = [n / 2, n / 2, n];
        for (p, i) in read {
            let p = p as usize;
            newest[p] = newest[p].max(i);
            left[p] -= 1;
            for q in 0..3 {
                if q != p && left[q] > 0 {
                    // Record numbers are ms of event time; a partition's
                    // watermark lags its newest record by the bound, the
                    // jitter and up to 8 records (16 ms on a left one).
                    assert!(
                        i <= newest[q] + 5 + 3 + 3 + 16 + 2,
                        "{cores_} cores: partition {p} read {i} while {q} was at {}",
                        newest[q]
                    );
                }
            }
        }
    }
}

/// Side `s` record `i` as [`rec`], but one in 40 of the left side 60 ms
/// late (far behind its lane's watermark, which lags 3 ms).
fn rec_late(s: u64, i: u64) -> ((u32, u64), u64) {
    let (v, t) = rec(s, i);
    if s == 0 && i % 40 == 17 {
        (v, t - 60 * MS)
    } else {
        (v, t)
    }
}

/// A pair, or a late record of a side.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Joined {
    Pair(u32, u64, u64),
    Late(u8, u64),
}

fn late_join(n: u64, standby: bool, cfg: &RuntimeConfig) -> (Vec<Joined>, tandem::JobReport) {
    let out = Arc::new(Mutex::new(Vec::new()));
    let job = JobBuilder::new("late-interval");
    job.default_parallelism(2);
    let (left, right) = sides(&job, n, rec_late);
    let j = left.interval_join(&right, Duration::from_millis(20), Duration::from_millis(30));
    let j = if standby { j.standby() } else { j };
    let joined = j.process("join", |k: &u32, a: &(u32, u64), b: &(u32, u64)| {
        Joined::Pair(*k, a.1, b.1)
    });
    let late = joined.late().map("late-line", |t| match t {
        tandem::Two::First(a) => Joined::Late(0, a.1),
        tandem::Two::Second(b) => Joined::Late(1, b.1),
    });
    let o = Arc::clone(&out);
    joined
        .results()
        .for_each("pairs", move |r| o.lock().unwrap().push(r.value));
    let o = Arc::clone(&out);
    late.for_each("late-sink", move |r| o.lock().unwrap().push(r.value));
    let report = job.build().unwrap().run(cfg).unwrap();
    let mut v = std::mem::take(&mut *out.lock().unwrap());
    v.sort();
    (v, report)
}

/// A record behind its lane's watermark joins nothing and goes to the
/// late side output; every other record joins exactly the partners the
/// brute force finds among the records that were not late — none half
/// joined — and all of it is the same after takeovers and restarts.
#[test]
fn an_interval_joins_late_records_go_to_its_side_output_and_the_rest_join_whole() {
    let n = 4000;
    let (clean, report) = late_join(n, false, &RuntimeConfig::default().cores(cores()));
    let late: std::collections::BTreeSet<(u8, u64)> = clean
        .iter()
        .filter_map(|l| match l {
            Joined::Late(s, i) => Some((*s, *i)),
            Joined::Pair(..) => None,
        })
        .collect();
    // Every deliberately late record is late; no record of the right side is.
    let planted = (0..n).filter(|i| i % 40 == 17).count();
    assert_eq!(late.len(), planted, "{late:?}");
    assert!(late.iter().all(|&(s, i)| s == 0 && i % 40 == 17));
    assert_eq!(
        report.operator("join.late").unwrap().emitted,
        planted as u64,
        "the late records are counted"
    );
    let mut want = Vec::new();
    for i in (0..n).filter(|i| !late.contains(&(0, *i))) {
        let ((ka, _), ta) = rec_late(0, i);
        for j in 0..n {
            let ((kb, _), tb) = rec_late(1, j);
            if ka == kb && ta <= tb + 20 * MS && tb <= ta + 30 * MS {
                want.push(Joined::Pair(ka, i, j));
            }
        }
    }
    want.extend(late.iter().map(|&(s, i)| Joined::Late(s, i)));
    want.sort();
    assert!(want.len() > 1000);
    assert!(clean == want, "the pairs differ from the brute force's");
    exact_under_faults(&clean, panics, 4, |standby, cfg| late_join(n, standby, cfg));
}
