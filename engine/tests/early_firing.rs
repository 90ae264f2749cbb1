//! Early firing and purging of time windows: a purging window that fires
//! every 25 ms of event time emits, per key and window, the count of each
//! 25 ms segment that had records — what the brute force counts — and the
//! same under standbys' takeovers and restart-all; a window that fires
//! every 10 records without purging emits running counts; early firing on
//! a session window is refused at build; an evictor keeps a window's last
//! records (and is refused on an aggregate).

mod common;

use common::{cores, exact_under_faults, Faults};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tandem::time::window::EarlyFiring;
use tandem::time::{Watermarks, Windows};
use tandem::{IterSource, JobBuilder, RuntimeConfig, TupleId};

const MS: u64 = 1_000_000;
const N: u64 = 6_000;
const KEYS: u64 = 5;

/// Record `i`: key `i % 5`, at about `i / 2` ms, up to 2 ms out of order
/// (within the watermarks' 3 ms: none late).
fn rec(i: u64) -> (u64, u64) {
    let h = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 30;
    (i % KEYS, 50 * MS + i * MS / 2 + (h % 2_000) * 1_000)
}

/// The records `(key, event time)` in two partitions, at their event
/// times, with watermarks 3 ms behind (and a standby on what reads them).
fn records(job: &JobBuilder, standby: bool) -> tandem::Stream<(u64, u64)> {
    job.default_parallelism(2);
    let src = job
        .source("recs", |i| {
            let me = i.instance as u64;
            IterSource(
                (0..N)
                    .filter(move |k| k % 2 == me)
                    .map(|k| (rec(k), rec(k).1)),
            )
        })
        .watermarks(Watermarks::bounded(Duration::from_millis(3)).every(8));
    if standby {
        src.standby()
    } else {
        src
    }
}

/// `(key, window start, count)` per firing.
type Fired = (u64, u64, u64);

fn run(
    early: EarlyFiring,
    purging: bool,
    standby: bool,
    cfg: &RuntimeConfig,
) -> (Vec<Fired>, tandem::JobReport) {
    let out = Arc::new(Mutex::new(Vec::new()));
    let job = JobBuilder::new("early");
    let w = records(&job, standby)
        .key_by(|r: &(u64, u64)| r.0)
        .window(Windows::tumbling(Duration::from_millis(100)))
        .early_firing(early);
    let w = if purging { w.purging() } else { w };
    let o = Arc::clone(&out);
    w.process("count", |k: &u64, win, recs: &[(u64, u64)], out| {
        out((*k, win.start, recs.len() as u64))
    })
    .results()
    .for_each("out", move |r| o.lock().unwrap().push(r.value));
    let report = job.build().unwrap().run(cfg).unwrap();
    let mut v = std::mem::take(&mut *out.lock().unwrap());
    v.sort();
    (v, report)
}

#[test]
fn a_purging_window_firing_every_interval_counts_each_segment_and_is_exact_under_faults() {
    let every = EarlyFiring::Every(Duration::from_millis(25));
    let (clean, _) = run(every, true, false, &RuntimeConfig::default().cores(cores()));
    // The brute force: per key, window and 25 ms segment, its records.
    let mut segs: BTreeMap<(u64, u64, u64), u64> = BTreeMap::new();
    for i in 0..N {
        let (k, t) = rec(i);
        let start = t - t % (100 * MS);
        *segs.entry((k, start, (t - start) / (25 * MS))).or_default() += 1;
    }
    let mut want: Vec<Fired> = segs.iter().map(|(&(k, s, _), &n)| (k, s, n)).collect();
    want.sort();
    assert!(want.len() > 100);
    assert!(
        clean == want,
        "the segments' counts differ from the brute force's"
    );
    let faults = || Faults::panics("count", &[(0, 600), (1, 1_300), (0, 2_100), (1, 2_700)]);
    exact_under_faults(&clean, faults, 4, |standby, cfg| {
        run(every, true, standby, cfg)
    });
}

#[test]
fn a_window_firing_every_ten_records_emits_running_counts_then_its_total() {
    let (got, _) = run(
        EarlyFiring::Count(10),
        false,
        false,
        &RuntimeConfig::default().cores(cores()),
    );
    let mut totals: BTreeMap<(u64, u64), u64> = BTreeMap::new();
    for i in 0..N {
        let (k, t) = rec(i);
        *totals.entry((k, t - t % (100 * MS))).or_default() += 1;
    }
    let mut want = Vec::new();
    for (&(k, s), &n) in &totals {
        want.extend((1..=n / 10).map(|j| (k, s, j * 10)));
        want.push((k, s, n));
    }
    want.sort();
    assert!(got == want, "running counts differ");
}

#[test]
fn early_firing_or_purging_on_a_session_window_is_refused_at_build() {
    let job = JobBuilder::new("sessions");
    job.source("recs", |_| IterSource((0..10u64).map(|n| (n, n))))
        .watermarks(Watermarks::bounded(Duration::ZERO))
        .key_by(|k: &u64| *k % 2)
        .window(Windows::session(Duration::from_millis(5)))
        .early_firing(EarlyFiring::Count(3))
        .process("s", |_k: &u64, _w, r: &[u64], out| out(r.len()))
        .results()
        .for_each("out", |_| {});
    let e = job.build().err().expect("refused").to_string();
    assert!(e.contains("tumbling and sliding"), "{e}");
}

/// `(key, window start, the window's last three records' times)`.
type Kept = (u64, u64, Vec<u64>);

/// The windowed stream an evictor is set on.
type Evicting = tandem::job::WindowedStream<u64, (u64, u64)>;

/// Per key and window, the times of the records evictor `evict` leaves
/// operator `op`.
fn run_kept(
    op: &str,
    evict: fn(Evicting) -> Evicting,
    standby: bool,
    cfg: &RuntimeConfig,
) -> (Vec<Kept>, tandem::JobReport) {
    let out = Arc::new(Mutex::new(Vec::new()));
    let job = JobBuilder::new("evict");
    let src = records(&job, standby);
    let o = Arc::clone(&out);
    evict(
        src.key_by(|r: &(u64, u64)| r.0)
            .window(Windows::tumbling(Duration::from_millis(100))),
    )
    .process(op, |k: &u64, win, recs: &[(u64, u64)], out| {
        out((
            *k,
            win.start,
            recs.iter().map(|r| r.1).collect::<Vec<u64>>(),
        ))
    })
    .results()
    .for_each("out", move |r| o.lock().unwrap().push(r.value));
    let report = job.build().unwrap().run(cfg).unwrap();
    let mut v = std::mem::take(&mut *out.lock().unwrap());
    v.sort();
    (v, report)
}

fn run_evicting(standby: bool, cfg: &RuntimeConfig) -> (Vec<Kept>, tandem::JobReport) {
    run_kept("last", |w| w.evict_keep_last(3), standby, cfg)
}

/// An evictor keeping the last three records: each window's function sees
/// the three latest of its records in event-time order, under faults too.
#[test]
fn an_evicting_window_sees_its_last_three_records_in_event_time_order() {
    let (clean, _) = run_evicting(false, &RuntimeConfig::default().cores(cores()));
    let mut per: BTreeMap<(u64, u64), Vec<u64>> = BTreeMap::new();
    for i in 0..N {
        let (k, t) = rec(i);
        per.entry((k, t - t % (100 * MS))).or_default().push(t);
    }
    let mut want: Vec<Kept> = per
        .into_iter()
        .map(|((k, s), mut ts)| {
            ts.sort();
            let from = ts.len().saturating_sub(3);
            (k, s, ts[from..].to_vec())
        })
        .collect();
    want.sort();
    assert!(clean == want, "the kept records differ");
    let faults = || Faults::panics("last", &[(0, 900), (1, 1_700)]);
    exact_under_faults(&clean, faults, 2, run_evicting);
}

#[test]
fn an_evictor_on_an_aggregate_is_refused_at_build() {
    let job = JobBuilder::new("evict-agg");
    job.source("recs", |_| IterSource((0..10u64).map(|n| (n, n))))
        .watermarks(Watermarks::bounded(Duration::ZERO))
        .key_by(|k: &u64| *k % 2)
        .window(Windows::tumbling(Duration::from_millis(5)))
        .evict_keep_last(2)
        .reduce("sum", |a: &u64, b: &u64| a + b)
        .results()
        .for_each("out", |_| {});
    let e = job.build().err().expect("refused").to_string();
    assert!(e.contains("evictor"), "{e}");
}

/// Whether record `(k, t)` ends its window's segment (a custom trigger
/// fires and purges at it).
fn marks(t: u64) -> bool {
    (t / 1_000).is_multiple_of(29)
}

/// The counts of the segments a fire-and-purge trigger cuts each window
/// into.
fn run_triggered(standby: bool, cfg: &RuntimeConfig) -> (Vec<Fired>, tandem::JobReport) {
    use tandem::time::TriggerAction;
    let out = Arc::new(Mutex::new(Vec::new()));
    let job = JobBuilder::new("triggered");
    let o = Arc::clone(&out);
    records(&job, standby)
        .key_by(|r: &(u64, u64)| r.0)
        .window(Windows::tumbling(Duration::from_millis(100)))
        .trigger(|r: &(u64, u64), _t, _w, _since| {
            if marks(r.1) {
                TriggerAction::FireAndPurge
            } else {
                TriggerAction::Continue
            }
        })
        .process("count", |k: &u64, win, recs: &[(u64, u64)], out| {
            out((*k, win.start, recs.len() as u64))
        })
        .results()
        .for_each("out", move |r| o.lock().unwrap().push(r.value));
    let report = job.build().unwrap().run(cfg).unwrap();
    let mut v = std::mem::take(&mut *out.lock().unwrap());
    v.sort();
    (v, report)
}

#[test]
fn a_custom_trigger_fires_and_purges_at_the_records_it_names_and_is_exact_under_faults() {
    let (clean, _) = run_triggered(false, &RuntimeConfig::default().cores(cores()));
    // The brute force: per key and window, its records in the order the
    // window takes them (event time, then tuple ID), cut after each marked
    // one; a last segment only if it has records.
    let mut per: BTreeMap<(u64, u64), Vec<(u64, u64)>> = BTreeMap::new();
    for i in 0..N {
        let (k, t) = rec(i);
        let id = TupleId::new((i % 2) as u32, i / 2).0;
        per.entry((k, t - t % (100 * MS)))
            .or_default()
            .push((t, id));
    }
    let mut want = Vec::new();
    for ((k, s), mut recs) in per {
        recs.sort();
        let mut n = 0;
        for (t, _) in recs {
            n += 1;
            if marks(t) {
                want.push((k, s, n));
                n = 0;
            }
        }
        if n > 0 {
            want.push((k, s, n));
        }
    }
    want.sort();
    assert!(want.len() > 200, "{} segments", want.len());
    assert!(clean == want, "the segments differ from the brute force's");
    let faults = || Faults::panics("count", &[(0, 700), (1, 1_500), (0, 2_300)]);
    exact_under_faults(&clean, faults, 3, run_triggered);
}

#[test]
fn a_custom_trigger_on_a_session_window_is_refused_at_build() {
    use tandem::time::TriggerAction;
    let job = JobBuilder::new("refused");
    job.source("s", |_| IterSource((0..10u64).map(|i| (i, i))))
        .watermarks(Watermarks::bounded(Duration::ZERO))
        .key_by(|r: &u64| *r)
        .window(Windows::session(Duration::from_millis(5)))
        .trigger(|_: &u64, _, _, _| TriggerAction::Fire)
        .process("w", |_: &u64, _, recs: &[u64], out| out(recs.len()))
        .results()
        .for_each("out", |_| {});
    let e = job.build().err().expect("refused").to_string();
    assert!(e.contains("tumbling and sliding"), "{e}");
}

/// A custom evictor: each window keeps the records of its last 20 ms.
fn run_time_evicting(standby: bool, cfg: &RuntimeConfig) -> (Vec<Kept>, tandem::JobReport) {
    let recent = |w: Evicting| {
        w.evictor(|_w, recs: &mut Vec<(u64, u64)>| {
            let newest = recs.iter().map(|r| r.1).max().unwrap_or(0);
            recs.retain(|r| r.1 + 20 * MS > newest);
        })
    };
    run_kept("recent", recent, standby, cfg)
}

#[test]
fn a_custom_evictor_leaves_each_window_its_last_twenty_milliseconds_under_faults_too() {
    let (clean, _) = run_time_evicting(false, &RuntimeConfig::default().cores(cores()));
    let mut per: BTreeMap<(u64, u64), Vec<u64>> = BTreeMap::new();
    for i in 0..N {
        let (k, t) = rec(i);
        per.entry((k, t - t % (100 * MS))).or_default().push(t);
    }
    let mut want: Vec<Kept> = per
        .into_iter()
        .map(|((k, s), mut ts)| {
            ts.sort();
            let newest = *ts.last().unwrap();
            (
                k,
                s,
                ts.into_iter().filter(|t| t + 20 * MS > newest).collect(),
            )
        })
        .collect();
    want.sort();
    assert!(want.iter().any(|w| w.2.len() > 3));
    assert!(clean == want, "the kept records differ");
    let faults = || Faults::panics("recent", &[(0, 800), (1, 1_900)]);
    exact_under_faults(&clean, faults, 2, run_time_evicting);
}
