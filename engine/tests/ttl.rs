//! Keyed state with TTL in a keyed process function: against a model of
//! its expiry, with and without its incremental clean-up, and exact under
//! takeovers and restarts.

mod common;

use common::{cores, exact_under_faults, Faults};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tandem::runtime::probe::ProbeAction;
use tandem::state::ttl::{Expire, MapState, TtlPolicy, UpdateOn, ValueState};
use tandem::time::{TimedProcess, TimerContext, Watermarks};
use tandem::{IterSource, JobBuilder, Output, Record, RuntimeConfig, TupleId};

const MS: u64 = 1_000_000;

/// TTL state's event-time clock.
struct PagesTtl;
impl TtlPolicy for PagesTtl {
    const TTL_NANOS: u64 = 20 * MS;
}
struct LastTtl;
impl TtlPolicy for LastTtl {
    const TTL_NANOS: u64 = 3 * MS;
    const UPDATE: UpdateOn = UpdateOn::ReadAndWrite;
}

/// A click: (user, number, page).
type Visit = (u32, u64, u32);
type Pages = (MapState<u32, u64, PagesTtl>, ValueState<u64, LastTtl>);

/// For each visit: whether the user visited the page in the last 20 ms of
/// event time, and whether a visit it remembers (written every third
/// visit, remembered 3 ms since it was last written or read) is still
/// there: `(user, number, 2 * seen + remembered)`. At the end, each
/// user's stored page entries, expired or not: `(user, MAX, entries)`.
struct Recent<const CLEAN: bool>;

impl<const CLEAN: bool> TimedProcess<u32, Visit, (u32, u64, u64)> for Recent<CLEAN> {
    type State = Pages;
    const EXPIRES: bool = CLEAN;
    fn process(
        &mut self,
        user: &u32,
        s: &mut Pages,
        r: Record<Visit>,
        cx: &mut TimerContext<'_>,
        out: &mut Output<'_, (u32, u64, u64)>,
    ) {
        let now = cx.now();
        let (_, n, page) = r.value;
        let seen = s.0.get(&page, now).is_some();
        let remembered = s.1.value(now).is_some();
        if n % 3 == 0 {
            s.1.update(n, now);
        }
        s.0.put(page, n, now);
        out.emit((*user, n, 2 * u64::from(seen) + u64::from(remembered)));
    }
    fn on_timer(
        &mut self,
        _: &u32,
        _: &mut Pages,
        _: u64,
        _: &mut TimerContext<'_>,
        _: &mut Output<'_, (u32, u64, u64)>,
    ) {
    }
    fn has_expired(&self, s: &Pages, now: u64) -> bool {
        s.has_expired(now)
    }
    fn expire(&self, s: &mut Pages, now: u64) {
        s.expire(now)
    }
    fn on_end(&mut self, user: &u32, s: &mut Pages, out: &mut Output<'_, (u32, u64, u64)>) {
        // Every entry was written at an event time > 0: live at 0.
        out.emit((*user, u64::MAX, s.0.len_at(0) as u64));
    }
}

const USERS: u64 = 7;

fn visit(i: u64) -> (Visit, u64) {
    let jitter = (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) % MS;
    let user = (i % USERS) as u32;
    // Half the visits to one of 6 pages (seen again soon), half to one of
    // 100 (seen again much later).
    let page = if i.is_multiple_of(2) {
        jitter % 6
    } else {
        10 + (i * 31) % 100
    };
    ((user, i, page as u32), 100 * MS + i * MS / 2 + jitter)
}

/// The lines `Recent` must emit, from the visits alone: each user's visits
/// in event-time order, then number; TTLs as the state's docs say.
fn recent_model(n: u64) -> Vec<(u32, u64, u64)> {
    let mut visits: Vec<(u64, u64, Visit)> = (0..n).map(|i| (visit(i).1, i, visit(i).0)).collect();
    visits.sort();
    let mut pages: BTreeMap<u32, BTreeMap<u32, u64>> = BTreeMap::new();
    let mut last: BTreeMap<u32, u64> = BTreeMap::new();
    let mut out = Vec::new();
    for (t, _, (user, i, page)) in visits {
        let p = pages.entry(user).or_default();
        let seen = p.get(&page).is_some_and(|&at| t < at + 20 * MS);
        let remembered = match last.get_mut(&user) {
            Some(at) if t < *at + 3 * MS => {
                *at = t; // read and write: the read restarts it
                true
            }
            _ => false,
        };
        if i % 3 == 0 {
            last.insert(user, t);
        }
        p.insert(page, t);
        out.push((user, i, 2 * u64::from(seen) + u64::from(remembered)));
    }
    out.sort();
    out
}

fn recent_job<const CLEAN: bool>(
    n: u64,
    standby: bool,
    out: Arc<Mutex<Vec<(u32, u64, u64)>>>,
) -> tandem::Job {
    let job = JobBuilder::new("recent");
    job.default_parallelism(2);
    let src = job
        .source("visits", move |_| IterSource((0..n).map(visit)))
        .parallelism(1)
        .watermarks(Watermarks::bounded(Duration::from_millis(1)).every(4));
    let src = if standby { src.standby() } else { src };
    src.key_by(|v: &Visit| v.0)
        .process_timed("recent", |_| Recent::<CLEAN>)
        .for_each("sink", move |r| out.lock().unwrap().push(r.value));
    job.build().unwrap()
}

fn run_recent<const CLEAN: bool>(
    n: u64,
    standby: bool,
    cfg: &RuntimeConfig,
) -> (Vec<(u32, u64, u64)>, u64, tandem::JobReport) {
    let out = Arc::new(Mutex::new(Vec::new()));
    let report = recent_job::<CLEAN>(n, standby, Arc::clone(&out))
        .run(cfg)
        .unwrap();
    let mut v = std::mem::take(&mut *out.lock().unwrap());
    v.sort();
    let stored = v.iter().filter(|l| l.1 == u64::MAX).map(|l| l.2).sum();
    v.retain(|l| l.1 != u64::MAX);
    (v, stored, report)
}

#[test]
fn ttl_state_never_returns_what_expired_and_the_clean_up_drops_it() {
    let n = 4000;
    let want = recent_model(n);
    for bit in [1, 2] {
        let with = want.iter().filter(|l| l.2 & bit != 0).count();
        assert!(with > 100 && with < want.len() - 100, "bit {bit}: {with}");
    }
    let mut stored = Vec::new();
    for cfg in [
        RuntimeConfig::default().cores(1),
        RuntimeConfig::default().cores(cores()),
    ] {
        let (got, kept, _) = run_recent::<false>(n, false, &cfg);
        assert!(
            got == want,
            "without clean-up: the lines differ from the model"
        );
        let (got, cleaned, _) = run_recent::<true>(n, false, &cfg);
        assert!(
            got == want,
            "with clean-up: the lines differ from the model"
        );
        stored.push((kept, cleaned));
    }
    let pairs: std::collections::BTreeSet<(u32, u32)> =
        (0..n).map(|i| (visit(i).0 .0, visit(i).0 .2)).collect();
    for (kept, cleaned) in stored {
        // Without clean-up, what a read did not drop stays: nearly every
        // page a user ever visited. With it, about the pages of each
        // user's last 20 ms.
        assert!(
            kept > pairs.len() as u64 / 2,
            "{kept} of {} kept",
            pairs.len()
        );
        assert!(
            cleaned < kept / 4,
            "the clean-up left {cleaned} of {kept} entries"
        );
    }
}

#[test]
fn ttl_state_is_exact_after_takeovers_and_after_restarts() {
    let n = 5000;
    let panics = || {
        Faults::new(
            [700, 1900, 2600, 4100]
                .into_iter()
                .map(|i| {
                    (
                        "recent",
                        TupleId::new(0, i),
                        ProbeAction::Panic("injected".into()),
                    )
                })
                .collect(),
        )
    };
    exact_under_faults(&recent_model(n), panics, 4, |standby, cfg| {
        let (lines, _, report) = run_recent::<true>(n, standby, cfg);
        (lines, report)
    });
}

/// A TTL state that says it is empty at the operator's event time
/// (`TimedProcess::is_empty_at` with `MapState::is_empty_at`): once the
/// entries of a key that stopped coming have expired, the clean-up drops
/// the key — its `on_end` never comes — while the keys still coming stay.
/// (A TTL map could not say it was empty without a time:
/// `TimedProcess::is_empty` gets none, and `MapState` had only `len_at`.)
#[test]
fn a_key_whose_ttl_state_expired_is_dropped_once_it_says_it_is_empty() {
    struct Short;
    impl TtlPolicy for Short {
        const TTL_NANOS: u64 = 5 * MS;
    }
    struct Seen;
    impl TimedProcess<u32, (u32, u64), (u32, u64)> for Seen {
        type State = MapState<u64, (), Short>;
        const EXPIRES: bool = true;
        fn process(
            &mut self,
            _: &u32,
            s: &mut Self::State,
            r: Record<(u32, u64)>,
            cx: &mut TimerContext<'_>,
            _: &mut Output<'_, (u32, u64)>,
        ) {
            s.put(r.value.1, (), cx.now());
        }
        fn has_expired(&self, s: &Self::State, now: u64) -> bool {
            s.has_expired(now)
        }
        fn expire(&self, s: &mut Self::State, now: u64) {
            s.expire(now)
        }
        fn is_empty_at(&self, s: &Self::State, now: u64) -> bool {
            s.is_empty_at(now)
        }
        fn on_end(&mut self, key: &u32, s: &mut Self::State, out: &mut Output<'_, (u32, u64)>) {
            out.emit((*key, s.len_at(0) as u64));
        }
    }
    // Keys 100..200 come in the first 10 ms of event time only; keys 0..10
    // come until the end, a second later.
    let early = (0..1_000u64).map(|i| ((100 + (i % 100) as u32, i), i * MS / 100));
    let late = (0..10_000u64).map(|i| (((i % 10) as u32, i), 10 * MS + i * MS / 10));
    let records: Vec<((u32, u64), u64)> = early.chain(late).collect();
    let ended = Arc::new(Mutex::new(Vec::new()));
    let e = Arc::clone(&ended);
    let job = JobBuilder::new("expiring");
    job.default_parallelism(2);
    job.source("events", move |_| IterSource(records.clone().into_iter()))
        .parallelism(1)
        .watermarks(Watermarks::bounded(Duration::from_millis(1)).every(4))
        .key_by(|r: &(u32, u64)| r.0)
        .process_timed("seen", |_| Seen)
        .for_each("ends", move |r| e.lock().unwrap().push(r.value.0));
    job.build()
        .unwrap()
        .run(&RuntimeConfig::default().cores(cores()))
        .unwrap();
    let mut ended = std::mem::take(&mut *ended.lock().unwrap());
    ended.sort_unstable();
    assert_eq!(
        ended,
        (0..10).collect::<Vec<u32>>(),
        "only the keys still coming end"
    );
}
