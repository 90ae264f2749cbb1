//! Windows of every kind against results computed independently from the
//! input, with out-of-order and late records; the same windows under
//! restart-all with checkpoints and under a standby, compared with the
//! clean run; watermarks with an idle partition.

mod common;

use common::{committed_lines, cores, quiet_injected_panics, tempdir, Faults, Line, LineSink};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tandem::runtime::probe::ProbeAction;
use tandem::standby::{StandbyConfig, StandbyMode};
use tandem::time::{Watermarks, Window, WindowAggregate, Windows};
use tandem::{
    CheckpointConfig, IterSource, JobBuilder, RestartStrategy, RuntimeConfig, Source, SourcePoll,
    TupleId,
};

const MS: u64 = 1_000_000;
const PARTITIONS: u64 = 2;
/// Out-of-orderness the watermarks allow, and records between them.
const BOUND: u64 = 2 * MS;
const EVERY: u64 = 4;

/// A click: (user, value).
type Click = (u32, u64);

/// Partition `p`'s records: about a millisecond apart over the two
/// partitions, jittered within the bound, every 37th one 40 ms late.
fn clicks(p: u64, n: u64, users: u32) -> Vec<(Click, u64)> {
    (0..n)
        .filter(|i| i % PARTITIONS == p)
        .map(|i| {
            let jitter = (i.wrapping_mul(2_654_435_761) >> 7) % BOUND;
            let mut t = 100 * MS + i * MS + jitter;
            if i % 37 == 36 {
                t -= 40 * MS;
            }
            let user = ((i * 7919) % users as u64) as u32;
            ((user, i), t)
        })
        .collect()
}

/// Each record of partition `p` with the watermark of its partition's
/// stream in front of it, as the source generates it.
fn with_watermarks(recs: &[(Click, u64)]) -> Vec<(Click, u64, u64)> {
    let (mut max_end, mut sent) = (0u64, 0u64);
    let mut out = Vec::new();
    for (i, &(c, t)) in recs.iter().enumerate() {
        out.push((c, t, sent));
        max_end = max_end.max(t + 1);
        if (i as u64 + 1).is_multiple_of(EVERY) {
            let wm = (max_end - 1).saturating_sub(BOUND);
            sent = sent.max(wm);
        }
    }
    out
}

fn all_inputs(n: u64, users: u32) -> Vec<(Click, u64, u64)> {
    (0..PARTITIONS)
        .flat_map(|p| with_watermarks(&clicks(p, n, users)))
        .collect()
}

/// Windows of `w` (not count) holding `t`.
fn windows_of(w: Windows, t: u64) -> Vec<(u64, u64)> {
    match w {
        Windows::Tumbling { size, .. } => vec![(t - t % size, t - t % size + size)],
        Windows::Sliding { size, slide } => (0..=t / slide)
            .map(|k| k * slide)
            .filter(|&s| s <= t && t < s + size)
            .map(|s| (s, s + size))
            .collect(),
        _ => unreachable!(),
    }
}

struct CountAgg;
impl WindowAggregate<u32, Click, Line> for CountAgg {
    const COMMUTATIVE: bool = true;
    type Acc = u64;
    fn add(&self, n: &mut u64, _c: &Click) {
        *n += 1;
    }
    fn merge(&self, n: &mut u64, other: u64) {
        *n += other;
    }
    fn result(&self, user: &u32, w: Window, n: &u64) -> Line {
        // (user, window start, count); the end is the kind's.
        Line::Summary(*user, w.start * 1000 + (w.end - w.start) / MS, *n)
    }
}

#[derive(Clone, Copy)]
enum How {
    Aggregate,
    Process,
}

/// The job: clicks → watermarks → key by user → windows → lines; late
/// records as `r user t`.
fn build(
    windows: Windows,
    lateness: u64,
    how: How,
    n: u64,
    users: u32,
    standby: bool,
    sink: impl Fn(&tandem::OperatorInfo, &str) -> LineSink + Send + Sync + 'static,
) -> tandem::Job {
    let job = JobBuilder::new("windows");
    job.default_parallelism(2);
    let src = job
        .source("clicks", move |i| {
            IterSource(clicks(i.instance as u64, n, users).into_iter())
        })
        .watermarks(Watermarks::bounded(Duration::from_nanos(BOUND)).every(EVERY));
    let src = if standby { src.standby() } else { src };
    let w = src
        .key_by(|c: &Click| c.0)
        .window(windows)
        .allowed_lateness(Duration::from_nanos(lateness));
    let out = match how {
        How::Aggregate => w.aggregate("window", CountAgg),
        How::Process => w.process("window", |user: &u32, win, clicks: &[Click], out| {
            // Records come in event-time order: their values say so.
            out(Line::Summary(
                *user,
                win.start * 1000 + (win.end - win.start) / MS,
                clicks.len() as u64,
            ))
        }),
    };
    let lines = out.results();
    let late = out
        .late()
        .map("late-line", |c: Click| Line::Rec(c.0 as u64, c.1));
    let sink = Arc::new(sink);
    let s2 = Arc::clone(&sink);
    lines.sink("sink", move |i| s2(i, "results"));
    late.sink("late-sink", move |i| sink(i, "late"));
    job.build().unwrap()
}

fn run_lines(
    windows: Windows,
    lateness: u64,
    how: How,
    n: u64,
    users: u32,
    cfg: &RuntimeConfig,
    standby: bool,
) -> Vec<String> {
    let dir = tempdir("windows");
    let d2 = dir.clone();
    let job = build(windows, lateness, how, n, users, standby, move |i, tag| {
        line_sink(&d2, i, tag)
    });
    job.run(cfg).unwrap();
    let lines = both(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    lines
}

/// The sink of one of the two outputs, in a directory of its own.
fn line_sink(dir: &std::path::Path, i: &tandem::OperatorInfo, tag: &str) -> LineSink {
    let d = dir.join(tag);
    std::fs::create_dir_all(&d).unwrap();
    LineSink::new(&d, i, true)
}

/// What both outputs committed, sorted.
fn both(dir: &std::path::Path) -> Vec<String> {
    let mut v = committed_lines(&dir.join("results"));
    v.extend(committed_lines(&dir.join("late")));
    v.sort();
    v
}

/// The two outputs are the same lines; else says which differ.
fn assert_same(want: &[String], got: &[String]) {
    if want == got {
        return;
    }
    fn count(v: &[String]) -> BTreeMap<&String, i64> {
        v.iter().fold(BTreeMap::new(), |mut m, l| {
            *m.entry(l).or_default() += 1;
            m
        })
    }
    let (w, g) = (count(want), count(got));
    let missing: Vec<_> = w
        .iter()
        .filter(|(l, n)| g.get(*l).copied().unwrap_or(0) < **n)
        .take(8)
        .collect();
    let extra: Vec<_> = g
        .iter()
        .filter(|(l, n)| w.get(*l).copied().unwrap_or(0) < **n)
        .take(8)
        .collect();
    panic!(
        "{} lines expected, {} got; missing {missing:?}; extra {extra:?}",
        want.len(),
        got.len()
    );
}

fn line_of(l: &Line) -> String {
    match l {
        Line::Rec(k, v) => format!("r {k} {v}"),
        Line::Summary(k, c, s) => format!("s {k} {c} {s}"),
    }
}

/// The expected lines of a time window, computed from the input alone: a
/// record joins each of its windows whose end plus the lateness is past
/// the watermark in front of it, and is late if it joins none; a window
/// fires once with what was before its end, then once per record added
/// after it.
fn expected_time_windows(windows: Windows, lateness: u64, n: u64, users: u32) -> Vec<String> {
    let mut added: BTreeMap<(u32, u64, u64), (u64, u64)> = BTreeMap::new();
    let mut out = Vec::new();
    for (c, t, wm) in all_inputs(n, users) {
        let release = t.max(wm);
        let mut joined = false;
        for (s, e) in windows_of(windows, t) {
            if e + lateness <= wm {
                continue;
            }
            joined = true;
            let a = added.entry((c.0, s, e)).or_default();
            a.0 += 1;
            if release >= e {
                a.1 += 1; // a late firing
            }
        }
        if !joined {
            out.push(line_of(&Line::Rec(c.0 as u64, c.1)));
        }
    }
    // Each firing's count: the on-time part first (if any), then one more
    // per late addition, in an order the counts alone fix.
    for ((user, s, e), (total, late)) in added {
        let first = total - late;
        let tag = s * 1000 + (e - s) / MS;
        let from = if first > 0 { first } else { 1 };
        if first > 0 {
            out.push(line_of(&Line::Summary(user, tag, first)));
        }
        for k in from + u64::from(first > 0)..=total {
            out.push(line_of(&Line::Summary(user, tag, k)));
        }
    }
    out.sort();
    out
}

fn one_core() -> RuntimeConfig {
    RuntimeConfig::default().cores(1)
}

#[test]
fn tumbling_windows_count_what_the_input_says_and_late_records_go_to_the_side_output() {
    let w = Windows::tumbling(Duration::from_millis(10));
    let want = expected_time_windows(w, 0, 2000, 5);
    assert!(
        want.iter().any(|l| l.starts_with("r ")),
        "the input has late records"
    );
    for how in [How::Aggregate, How::Process] {
        for cfg in [one_core(), RuntimeConfig::default().cores(cores())] {
            let got = run_lines(w, 0, how, 2000, 5, &cfg, false);
            assert_same(&want, &got);
        }
    }
}

#[test]
fn sliding_windows_with_allowed_lateness_fire_again_for_late_records() {
    let w = Windows::sliding(Duration::from_millis(20), Duration::from_millis(5));
    let lateness = 25 * MS;
    let want = expected_time_windows(w, lateness, 1500, 4);
    let got = run_lines(w, lateness, How::Aggregate, 1500, 4, &one_core(), false);
    assert_same(&want, &got);
    let tumbling = Windows::tumbling(Duration::from_millis(10));
    let want = expected_time_windows(tumbling, 45 * MS, 1500, 4);
    assert!(
        !want.iter().any(|l| l.starts_with("r ")),
        "45 ms of lateness admits every record"
    );
    let got = run_lines(tumbling, 45 * MS, How::Process, 1500, 4, &one_core(), false);
    assert_same(&want, &got);
}

/// Sessions, simulated plainly: every record in the order of its release
/// time (its event time, or the watermark in front of it if later), then
/// tuple ID; sessions that end at or before a record's release time have
/// closed; a record whose session — with the open sessions it overlaps —
/// would end by then is late.
fn expected_sessions(gap: u64, n: u64, users: u32) -> Vec<String> {
    let mut recs = Vec::new();
    for p in 0..PARTITIONS {
        for (c, t, wm) in with_watermarks(&clicks(p, n, users)) {
            let id = TupleId::new(p as u32, c.1 / PARTITIONS).0;
            recs.push((t.max(wm), id, c, t));
        }
    }
    recs.sort();
    let mut open: BTreeMap<u32, Vec<(u64, u64, u64)>> = BTreeMap::new();
    let mut out = Vec::new();
    let close = |user: u32, s: (u64, u64, u64), out: &mut Vec<String>| {
        out.push(line_of(&Line::Summary(
            user,
            s.0 * 1000 + (s.1 - s.0) / MS,
            s.2,
        )));
    };
    for (v, _, c, t) in recs {
        for (&user, sessions) in open.iter_mut() {
            sessions.retain(|&s| {
                if s.1 <= v {
                    close(user, s, &mut out);
                }
                s.1 > v
            });
        }
        let sessions = open.entry(c.0).or_default();
        let (mut lo, mut hi, mut count) = (t, t + gap, 1);
        sessions.retain(|&(s, e, k)| {
            let overlaps = s < t + gap && t < e;
            if overlaps {
                lo = lo.min(s);
                hi = hi.max(e);
                count += k;
            }
            !overlaps
        });
        if hi <= v {
            assert_eq!(count, 1, "a late record overlapping only closed sessions");
            out.push(line_of(&Line::Rec(c.0 as u64, c.1)));
        } else {
            sessions.push((lo, hi, count));
        }
    }
    for (user, sessions) in open {
        for s in sessions {
            close(user, s, &mut out);
        }
    }
    out.sort();
    out
}

#[test]
fn session_windows_are_the_gaps_in_each_users_clicks() {
    // Users far apart: each user's clicks come every ~40 ms; a gap of 30
    // ms cuts where the jitter and the late clicks leave a hole.
    let gap = 30 * MS;
    for users in [40, 80] {
        let want = expected_sessions(gap, 3000, users);
        for how in [How::Aggregate, How::Process] {
            let got = run_lines(
                Windows::session(Duration::from_nanos(gap)),
                0,
                how,
                3000,
                users,
                &one_core(),
                false,
            );
            assert_same(&want, &got);
        }
    }
}

#[test]
fn count_windows_take_each_users_records_in_event_time_order() {
    let size = 5;
    let mut per: BTreeMap<u32, Vec<(u64, u64, u64)>> = BTreeMap::new();
    for p in 0..PARTITIONS {
        for (c, t, wm) in with_watermarks(&clicks(p, 1000, 3)) {
            let id = TupleId::new(p as u32, c.1 / PARTITIONS).0;
            per.entry(c.0).or_default().push((t.max(wm), id, c.1));
        }
    }
    let mut want = Vec::new();
    for (user, mut recs) in per {
        recs.sort();
        for (k, chunk) in recs.chunks_exact(size).enumerate() {
            let sum: u64 = chunk.iter().map(|r| r.2).sum();
            want.push(format!("s {user} {} {sum}", k as u64 * size as u64));
        }
    }
    want.sort();
    let job = JobBuilder::new("counts");
    job.default_parallelism(2);
    let got = Arc::new(Mutex::new(Vec::new()));
    let g2 = Arc::clone(&got);
    job.source("clicks", |i| {
        IterSource(clicks(i.instance as u64, 1000, 3).into_iter())
    })
    .watermarks(Watermarks::bounded(Duration::from_nanos(BOUND)).every(EVERY))
    .key_by(|c: &Click| c.0)
    .window(Windows::count(size as u64))
    .process("window", |user: &u32, w, recs: &[Click], out| {
        out(format!(
            "s {user} {} {}",
            w.start,
            recs.iter().map(|r| r.1).sum::<u64>()
        ))
    })
    .results()
    .for_each("sink", move |r| g2.lock().unwrap().push(r.value));
    job.build()
        .unwrap()
        .run(&RuntimeConfig::default().cores(cores()))
        .unwrap();
    let mut got = std::mem::take(&mut *got.lock().unwrap());
    got.sort();
    assert_eq!(want, got);
}

#[test]
fn a_window_over_the_whole_stream_counts_every_users_records_in_one_instance() {
    // Five users' clicks, windowed as one stream: the same counts as one
    // user's (the late lines name no user either).
    let w = Windows::tumbling(Duration::from_millis(10));
    let want = expected_time_windows(w, 0, 2000, 1);
    for cfg in [one_core(), RuntimeConfig::default().cores(cores())] {
        let job = JobBuilder::new("all");
        job.default_parallelism(2);
        let got = Arc::new(Mutex::new(Vec::new()));
        let (g2, g3) = (Arc::clone(&got), Arc::clone(&got));
        let out = job
            .source("clicks", |i| {
                IterSource(clicks(i.instance as u64, 2000, 5).into_iter())
            })
            .watermarks(Watermarks::bounded(Duration::from_nanos(BOUND)).every(EVERY))
            .window_all(w)
            .process("window", move |_: &(), win, recs: &[Click], out| {
                out(line_of(&Line::Summary(
                    0,
                    win.start * 1000 + (win.end - win.start) / MS,
                    recs.len() as u64,
                )))
            });
        out.results()
            .for_each("sink", move |r| g2.lock().unwrap().push(r.value));
        out.late().for_each("late-sink", move |r| {
            g3.lock().unwrap().push(line_of(&Line::Rec(0, r.value.1)))
        });
        let report = job.build().unwrap().run(&cfg).unwrap();
        let mut got = std::mem::take(&mut *got.lock().unwrap());
        got.sort();
        assert_same(&want, &got);
        let window = report.operators.iter().find(|o| o.name == "window");
        assert_eq!(
            window.map(|o| o.parallelism),
            Some(1),
            "one window instance"
        );
    }
}

#[test]
fn a_window_without_watermarks_upstream_is_a_build_error() {
    let job = JobBuilder::new("no-time");
    job.source("clicks", |_| {
        IterSource(vec![((1u32, 1u64), 0u64)].into_iter())
    })
    .key_by(|c: &Click| c.0)
    .window(Windows::tumbling(Duration::from_secs(1)))
    .aggregate("window", CountAgg)
    .results()
    .for_each("sink", |_| {});
    let err = job.build().err().expect("refused").to_string();
    assert!(err.contains("`clicks` has no watermarks"), "{err}");
    let job = JobBuilder::new("bad");
    job.source("clicks", |_| {
        IterSource(vec![((1u32, 1u64), 0u64)].into_iter())
    })
    .watermarks(Watermarks::ascending())
    .key_by(|c: &Click| c.0)
    .window(Windows::sliding(Duration::from_secs(1), Duration::ZERO))
    .aggregate("window", CountAgg)
    .results()
    .for_each("sink", |_| {});
    assert!(job.build().is_err(), "a zero slide is refused");
}

/// Panics in the window operator at these records (of both partitions).
fn window_panics() -> Faults {
    Faults::new(
        [(0, 300), (1, 500), (0, 800), (1, 1100)]
            .into_iter()
            .map(|(p, s)| {
                (
                    "window",
                    TupleId::new(p, s),
                    ProbeAction::Panic("injected".into()),
                )
            })
            .collect(),
    )
}

fn kinds() -> Vec<(Windows, u64, u32)> {
    vec![
        (Windows::tumbling(Duration::from_millis(10)), 0, 5),
        (
            Windows::sliding(Duration::from_millis(20), Duration::from_millis(5)),
            15 * MS,
            4,
        ),
        (Windows::session(Duration::from_millis(30)), 0, 60),
        (Windows::count(5), 0, 3),
    ]
}

#[test]
fn every_window_kind_is_exact_under_restart_all_from_checkpoints() {
    quiet_injected_panics();
    for (w, lateness, users) in kinds() {
        let clean = run_lines(w, lateness, How::Process, 3000, users, &one_core(), false);
        let dir = tempdir("windows-ckpt");
        let mut ck = CheckpointConfig::every(Duration::from_millis(5));
        ck.dir = Some(dir.join("ckpt"));
        let faults = window_panics();
        let cfg = RuntimeConfig::default()
            .cores(cores())
            .checkpoint(ck)
            .restart(RestartStrategy::FixedDelay {
                attempts: 10,
                delay: Duration::ZERO,
            })
            .probes(Arc::new(faults.clone()));
        let out = dir.join("out");
        std::fs::create_dir_all(&out).unwrap();
        let o2 = out.clone();
        let job = build(
            w,
            lateness,
            How::Process,
            3000,
            users,
            false,
            move |i, tag| line_sink(&o2, i, tag),
        );
        let report = job.run(&cfg).unwrap();
        assert!(faults.all_fired(), "{w:?}: every fault fired");
        assert!(!report.recovery.is_empty());
        assert_same(&clean, &both(&out));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn every_window_kind_is_exact_after_standby_takeovers() {
    quiet_injected_panics();
    for mode in [StandbyMode::Warm, StandbyMode::Hot] {
        for (w, lateness, users) in kinds() {
            let clean = run_lines(w, lateness, How::Aggregate, 3000, users, &one_core(), false);
            let faults = window_panics();
            let cfg = RuntimeConfig::default()
                .cores(cores())
                .standby(StandbyConfig {
                    mode,
                    snapshot_interval: Duration::from_millis(2),
                    ..StandbyConfig::default()
                })
                .probes(Arc::new(faults.clone()));
            let got = run_lines(w, lateness, How::Aggregate, 3000, users, &cfg, true);
            assert!(faults.all_fired(), "{w:?} {mode:?}: every fault fired");
            assert_same(&clean, &got);
        }
    }
}

/// A source whose partition 1 has a few records and then nothing for a
/// while (not the end): idle.
struct Quiet {
    recs: std::vec::IntoIter<(Click, u64)>,
    quiet_until: Option<std::time::Instant>,
}

impl Source<Click> for Quiet {
    fn poll_next(&mut self) -> SourcePoll<Click> {
        match self.recs.next() {
            Some((value, event_time)) => SourcePoll::Ready { value, event_time },
            None => match self.quiet_until {
                Some(t) if std::time::Instant::now() < t => SourcePoll::Pending,
                _ => SourcePoll::End,
            },
        }
    }
}

#[test]
fn an_idle_partition_does_not_hold_the_watermark_back() {
    // Partition 0 runs on; partition 1 sends a few records and then goes
    // quiet for 2 s without ending. Windows fire meanwhile only because
    // partition 1 is declared idle after 50 ms.
    let job = JobBuilder::new("idle");
    job.default_parallelism(2);
    let fired = Arc::new(Mutex::new(Vec::new()));
    let f2 = Arc::clone(&fired);
    let start = std::time::Instant::now();
    job.source("clicks", |i| {
        let n = if i.instance == 0 { 4000 } else { 10 };
        let recs: Vec<_> = (0..n).map(|k| ((1u32, k), k * MS)).collect();
        Quiet {
            recs: recs.into_iter(),
            quiet_until: (i.instance == 1)
                .then(|| std::time::Instant::now() + Duration::from_secs(2)),
        }
    })
    .watermarks(
        Watermarks::bounded(Duration::ZERO)
            .every(1)
            .idle_after(Duration::from_millis(50)),
    )
    .key_by(|c: &Click| c.0)
    .window(Windows::tumbling(Duration::from_millis(100)))
    .aggregate("window", CountAgg)
    .results()
    .for_each("sink", move |_| f2.lock().unwrap().push(start.elapsed()));
    job.build()
        .unwrap()
        .run(&RuntimeConfig::default().cores(cores()))
        .unwrap();
    let fired = fired.lock().unwrap();
    assert!(fired.len() >= 40, "{} windows", fired.len());
    let early = fired
        .iter()
        .filter(|d| **d < Duration::from_millis(1500))
        .count();
    assert!(
        early >= 30,
        "windows fired while partition 1 was quiet: {early} of {} before it ended",
        fired.len()
    );
}

#[test]
fn firing_a_million_windows_at_the_end_is_work_not_a_stall() {
    // Every key's only window closes at the end of the stream, all in one
    // poll (a second or more): restart-all's heartbeat watch (100 ms) must
    // take the firing for progress. Taken for a stall, the job restarts —
    // from the start, with no checkpoint — reaches the end, and stalls
    // again, without end (bounded here by the attempts).
    const KEYS: u32 = 1_000_000;
    let job = JobBuilder::new("many-windows");
    job.default_parallelism(1);
    let fired = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let f2 = Arc::clone(&fired);
    let out = job
        .source("clicks", |_| {
            IterSource((0..KEYS).map(|u| ((u, u64::from(u)), 0u64)))
        })
        .watermarks(Watermarks::ascending())
        .key_by(|c: &Click| c.0)
        .window(Windows::tumbling(Duration::from_secs(1)))
        .aggregate("window", CountAgg);
    out.results().for_each("sink", move |_| {
        f2.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    });
    let cfg = RuntimeConfig::default()
        .cores(cores())
        .restart(RestartStrategy::FixedDelay {
            attempts: 3,
            delay: Duration::ZERO,
        });
    let report = job.build().unwrap().run(&cfg).unwrap();
    assert_eq!(report.restarts, 0, "restarted: {:?}", report.recovery);
    assert_eq!(
        fired.load(std::sync::atomic::Ordering::Relaxed),
        u64::from(KEYS)
    );
}
