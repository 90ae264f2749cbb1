//! CEP on a keyed stream: the operator finds what the matcher finds on
//! each key's events in event-time order; its matches, timeouts and late
//! events are the same under restart-all and after standby takeovers
//! (warm and hot) as in a clean run; a pattern that cannot be matched is
//! refused at build.

mod common;

use common::{committed_lines, cores, quiet_injected_panics, tempdir, Faults, Line, LineSink};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tandem::cep::nfa::Matcher;
use tandem::cep::{Match, Pattern};
use tandem::runtime::probe::ProbeAction;
use tandem::standby::{StandbyConfig, StandbyMode};
use tandem::time::Watermarks;
use tandem::{CheckpointConfig, IterSource, JobBuilder, RestartStrategy, RuntimeConfig, TupleId};

/// `(symbol, number, kind)`.
type Ev = (u32, u64, u8);

const N: u64 = 6_000;
const SYMBOLS: u64 = 7;
const US: u64 = 1_000;

fn mix(i: u64) -> u64 {
    let mut h = (i ^ 0x5851_f42d_4c95_7f2d).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 31;
    h.wrapping_mul(0x94d0_49bb_1331_11eb)
}

/// Event `n`: a symbol, a kind of 0–3, at `n` µs; `jitter`: up to 30 µs
/// out of order, and one in fifty 200 µs late.
fn event(n: u64, jitter: bool) -> (Ev, u64) {
    let h = mix(n);
    let mut t = 1_000 * US + n * US;
    if jitter {
        t += (h >> 40) % (30 * US);
        if (h >> 20).is_multiple_of(50) {
            t -= 200 * US;
        }
    }
    (((h % SYMBOLS) as u32, n, ((h >> 8) % 4) as u8), t)
}

/// A 0, then strictly next a 1, then one to three 2s (relaxed), then a
/// 3, within 40 µs; no two matches overlap.
fn pattern() -> Pattern<Ev> {
    Pattern::begin("a")
        .when(|e: &Ev| e.2 == 0)
        .next("b")
        .when(|e: &Ev| e.2 == 1)
        .followed_by("c")
        .when(|e: &Ev| e.2 == 2)
        .times_range(1, 3)
        .followed_by_any("d")
        .when(|e: &Ev| e.2 == 3)
        .within(Duration::from_micros(40))
        .skip(tandem::cep::AfterMatchSkip::PastLastEvent)
}

/// A match as a line: its symbol, first event and a digest of its events
/// and stages (`timeout` marks a timed-out one).
fn line(m: &Match<Ev>, timeout: bool) -> Line {
    let d = m.events.iter().fold(timeout as u64, |h, t| {
        mix(h ^ (t.event.1 << 8) ^ u64::from(t.stage))
    });
    Line::Summary(m.events[0].event.0, m.events[0].event.1, d)
}

fn build(jitter: bool, standby: bool, dir: &std::path::Path) -> tandem::Job {
    let job = JobBuilder::new("cep");
    job.default_parallelism(2);
    let src = job
        .source("events", move |i| {
            let (me, p) = (i.instance as u64, i.parallelism as u64);
            IterSource((me..N).step_by(p as usize).map(move |n| event(n, jitter)))
        })
        .watermarks(Watermarks::bounded(Duration::from_micros(30)).every(16));
    let src = if standby { src.standby() } else { src };
    let found = src.key_by(|e: &Ev| e.0).cep("cep", pattern());
    for (tag, s) in [
        (
            "matches",
            found.matches().map("m-line", |m| line(&m, false)),
        ),
        (
            "timeouts",
            found.timed_out().map("t-line", |m| line(&m, true)),
        ),
        (
            "late",
            found.late().map("l-line", |e: Ev| Line::Rec(e.1, 0)),
        ),
    ] {
        let d = dir.join(tag);
        std::fs::create_dir_all(&d).unwrap();
        s.sink(&format!("{tag}-sink"), move |i| LineSink::new(&d, i, true));
    }
    job.build().unwrap()
}

fn lines(dir: &std::path::Path) -> Vec<String> {
    let mut v = Vec::new();
    for tag in ["matches", "timeouts", "late"] {
        v.extend(committed_lines(&dir.join(tag)));
    }
    v.sort();
    v
}

fn run(jitter: bool, standby: bool, cfg: &RuntimeConfig) -> (Vec<String>, tandem::JobReport) {
    let dir = tempdir("cep");
    let report = build(jitter, standby, &dir).run(cfg).unwrap();
    let v = lines(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    (v, report)
}

fn as_text(l: Line) -> String {
    match l {
        Line::Rec(k, v) => format!("r {k} {v}"),
        Line::Summary(k, c, s) => format!("s {k} {c} {s}"),
    }
}

#[test]
fn the_operator_finds_what_the_matcher_finds_on_each_keys_events_in_event_time_order() {
    // Without jitter: each key's events in number order, none late.
    let (got, report) = run(false, false, &RuntimeConfig::default().cores(cores()));
    let p = pattern();
    let mut per_key: BTreeMap<u32, Vec<(Ev, u64)>> = BTreeMap::new();
    for n in 0..N {
        let (e, t) = event(n, false);
        per_key.entry(e.0).or_default().push((e, t));
    }
    let mut want = Vec::new();
    for evs in per_key.values() {
        let mut m = Matcher::default();
        for (e, t) in evs {
            let s = m.step(&p, e, *t);
            want.extend(s.timed_out.iter().map(|x| as_text(line(x, true))));
            want.extend(s.matches.iter().map(|x| as_text(line(x, false))));
        }
        // The end of the input: every partial match left times out.
        want.extend(
            m.advance(&p, u64::MAX)
                .iter()
                .map(|x| as_text(line(x, true))),
        );
    }
    want.sort();
    let matches = report.operator("cep.matches").unwrap().records;
    assert!(matches > 20, "the input makes matches: {matches}");
    assert!(report.operator("cep.timed-out").unwrap().records > 20);
    assert_eq!(got.len(), want.len());
    assert!(
        got == want,
        "the operator's output differs from the matcher's"
    );
}

fn cep_panics() -> Faults {
    Faults::new(
        [(0, 500), (1, 900), (0, 1_700), (1, 2_300)]
            .into_iter()
            .map(|(p, s)| {
                (
                    "cep",
                    TupleId::new(p, s),
                    ProbeAction::Panic("injected".into()),
                )
            })
            .collect(),
    )
}

#[test]
fn matches_timeouts_and_late_events_are_exact_under_restart_all_and_takeovers() {
    quiet_injected_panics();
    let (clean, report) = run(true, false, &RuntimeConfig::default().cores(cores()));
    assert!(
        report.operator("cep.late").unwrap().records > 10,
        "late events"
    );
    assert!(report.operator("cep.matches").unwrap().records > 20);

    let dir = tempdir("cep-ckpt");
    let mut ck = CheckpointConfig::every(Duration::from_millis(5));
    ck.dir = Some(dir.join("ckpt"));
    let faults = cep_panics();
    let cfg = RuntimeConfig::default()
        .cores(cores())
        .checkpoint(ck)
        .restart(RestartStrategy::FixedDelay {
            attempts: 10,
            delay: Duration::ZERO,
        })
        .probes(Arc::new(faults.clone()));
    let (got, report) = run(true, false, &cfg);
    assert!(faults.all_fired() && !report.recovery.is_empty());
    assert!(
        got == clean,
        "restart-all: output differs from the clean run"
    );
    let _ = std::fs::remove_dir_all(&dir);

    for mode in [StandbyMode::Warm, StandbyMode::Hot] {
        let faults = cep_panics();
        let cfg = RuntimeConfig::default()
            .cores(cores())
            .standby(StandbyConfig {
                mode,
                snapshot_interval: Duration::from_millis(2),
                ..StandbyConfig::default()
            })
            .probes(Arc::new(faults.clone()));
        let (got, report) = run(true, true, &cfg);
        assert!(faults.all_fired(), "{mode:?}: every fault fired");
        assert!(report.recovery.iter().any(|r| r.operator == "cep"));
        assert!(got == clean, "{mode:?}: output differs from the clean run");
    }
}

#[test]
fn a_pattern_that_cannot_be_matched_is_refused_at_build_naming_the_operator() {
    let job = JobBuilder::new("bad");
    job.source("events", |_| {
        IterSource((0..10u64).map(|n| ((0u32, n, 0u8), n)))
    })
    .watermarks(Watermarks::bounded(Duration::ZERO))
    .key_by(|e: &Ev| e.0)
    .cep("alerts", Pattern::begin("a").followed_by("a"))
    .matches()
    .for_each("drop", |_| {});
    let e = job.build().err().expect("refused").to_string();
    assert!(e.contains("alerts") && e.contains("used twice"), "{e}");
}
