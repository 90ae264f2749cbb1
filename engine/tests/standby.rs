//! Active standby (BQBS), end to end: with a fault in an operator that has
//! a standby, the job's output equals the fault-free output as a multiset —
//! nothing lost, nothing duplicated — without a restart.
//!
//! The job: a rate-limited two-partition source → the operator under test
//! (stateless `map`, or a keyed operator with per-key state and end-of-
//! stream summaries) with a standby → a sink that collects every line.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tandem::runtime::probe::{ProbeAction, ProbeFactory, RecordProbe};
use tandem::standby::{StandbyConfig, StandbyMode};
use tandem::{
    IterSource, JobBuilder, JobReport, KeyedProcess, Output, Record, RuntimeConfig, TupleId,
};

/// Standby runs are timed by heartbeats: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    // Injected panics print one line: the default hook (with
    // RUST_BACKTRACE set) symbolizes for tens of milliseconds first.
    static QUIET: std::sync::Once = std::sync::Once::new();
    QUIET.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let p = info.payload();
            let m = p
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| p.downcast_ref::<&str>().copied());
            match m {
                Some(m) if m.starts_with("injected") => eprintln!("{m}"),
                _ => previous(info),
            }
        }));
    });
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn cores() -> usize {
    tandem::sys::affinity::available_cores().len().min(2)
}

const RECORDS: u64 = 30_000;
const KEYS: u64 = 97;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Stateless,
    Keyed,
}

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
        out.emit(format!("s {k} {} {}", s.0, s.1));
    }
}

/// Fires each `(tuple, action)` once, in the operator under test.
struct Faults(Vec<(TupleId, ProbeAction, Arc<AtomicBool>)>);

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

impl ProbeFactory for Faults {
    fn probe(&self, operator: &str, _instance: usize) -> Option<Box<dyn RecordProbe>> {
        (operator == "op").then(|| Box::new(Probe(self.0.clone())) as Box<dyn RecordProbe>)
    }
}

fn faults(list: &[(TupleId, ProbeAction)]) -> Arc<Faults> {
    Arc::new(Faults(
        list.iter()
            .map(|(t, a)| (*t, a.clone(), Arc::new(AtomicBool::new(false))))
            .collect(),
    ))
}

/// Runs the job; returns its sorted output lines and report.
fn run(
    kind: Kind,
    standby: Option<StandbyConfig>,
    probes: Option<Arc<Faults>>,
) -> (Vec<String>, JobReport) {
    let job = JobBuilder::new("standby-test");
    job.default_parallelism(2);
    let src = job
        .source("src", |i| {
            let (p, n) = (i.parallelism as u64, i.instance as u64);
            IterSource(
                (0..RECORDS)
                    .filter(move |s| s % p == n)
                    .map(|s| (((s * 7919) % KEYS) as u32, s))
                    .map(|v| (v, 0)),
            )
        })
        .rate_limit(150_000.0);
    let lines = Arc::new(Mutex::new(Vec::new()));
    let l2 = Arc::clone(&lines);
    let out = match kind {
        Kind::Stateless => src
            .standby()
            .map("op", |(k, v): (u32, u64)| format!("m {k} {}", v * 3)),
        Kind::Keyed => src
            .standby()
            .key_by(|p: &(u32, u64)| p.0)
            .process("op", |_| PerKey),
    };
    out.for_each("sink", move |r| l2.lock().unwrap().push(r.value));
    let mut cfg = RuntimeConfig::default().cores(cores());
    if let Some(s) = standby {
        cfg = cfg.standby(s);
    }
    if let Some(p) = probes {
        cfg = cfg.probes(p);
    }
    let report = job.build().unwrap().run(&cfg).unwrap();
    let mut v = std::mem::take(&mut *lines.lock().unwrap());
    v.sort();
    (v, report)
}

fn clean(kind: Kind) -> Vec<String> {
    static CLEAN: Mutex<Vec<(Kind, Vec<String>)>> = Mutex::new(Vec::new());
    let mut c = CLEAN.lock().unwrap();
    if let Some((_, v)) = c.iter().find(|(k, _)| *k == kind) {
        return v.clone();
    }
    let (v, _) = run(kind, None, None);
    c.push((kind, v.clone()));
    v
}

fn cfg(mode: StandbyMode) -> StandbyConfig {
    StandbyConfig {
        mode,
        heartbeat_timeout: Duration::from_millis(20),
        snapshot_interval: Duration::from_millis(10),
        queue_memory: 4 << 20,
    }
}

fn assert_exact(kind: Kind, got: &[String]) {
    let want = clean(kind);
    if got != want.as_slice() {
        let (g, w): (HashSet<_>, HashSet<_>) = (got.iter().collect(), want.iter().collect());
        let missing: Vec<_> = w.difference(&g).take(5).collect();
        let extra: Vec<_> = g.difference(&w).take(5).collect();
        panic!(
            "{kind:?}: {} lines, clean run {}; missing e.g. {missing:?}, unexpected e.g. {extra:?}",
            got.len(),
            want.len()
        );
    }
    let mut d = got.to_vec();
    d.dedup();
    assert_eq!(d.len(), got.len(), "{kind:?}: duplicate lines");
}

fn check(kind: Kind, mode: StandbyMode, action: ProbeAction) {
    let _g = serial();
    let probes = faults(&[(TupleId::new(1, 6_000), action.clone())]);
    let (got, rep) = run(kind, Some(cfg(mode)), Some(probes));
    assert_exact(kind, &got);
    assert_eq!(rep.restarts, 0, "no restart");
    let sb = rep.standby.expect("standby stats");
    assert!(
        sb.takeovers >= 1,
        "{kind:?} {mode:?} {action:?}: no takeover"
    );
    eprintln!("{kind:?} {mode:?} {action:?}: {:?} {:?}", rep.recovery, sb);
    let r = &rep.recovery[0];
    assert_eq!(r.operator, "op");
    assert!(
        r.first_output_us.is_some() && r.caught_up_us.is_some(),
        "{r:?}"
    );
}

fn stall() -> ProbeAction {
    ProbeAction::Stall(Duration::from_millis(150))
}

#[test]
fn panic_in_a_stateless_operator_loses_and_duplicates_nothing_warm() {
    check(
        Kind::Stateless,
        StandbyMode::Warm,
        ProbeAction::Panic("injected".into()),
    );
}

#[test]
fn panic_in_a_stateless_operator_loses_and_duplicates_nothing_hot() {
    check(
        Kind::Stateless,
        StandbyMode::Hot,
        ProbeAction::Panic("injected".into()),
    );
}

#[test]
fn panic_in_a_keyed_operator_keeps_its_state_warm() {
    check(
        Kind::Keyed,
        StandbyMode::Warm,
        ProbeAction::Panic("injected".into()),
    );
}

#[test]
fn panic_in_a_keyed_operator_keeps_its_state_hot() {
    check(
        Kind::Keyed,
        StandbyMode::Hot,
        ProbeAction::Panic("injected".into()),
    );
}

#[test]
fn cut_input_is_taken_over_stateless_warm() {
    check(Kind::Stateless, StandbyMode::Warm, ProbeAction::CutInput);
}

#[test]
fn cut_input_is_taken_over_stateless_hot() {
    check(Kind::Stateless, StandbyMode::Hot, ProbeAction::CutInput);
}

#[test]
fn cut_input_is_taken_over_keyed_warm() {
    check(Kind::Keyed, StandbyMode::Warm, ProbeAction::CutInput);
}

#[test]
fn cut_input_is_taken_over_keyed_hot() {
    check(Kind::Keyed, StandbyMode::Hot, ProbeAction::CutInput);
}

/// The stalled primary wakes after the takeover and finishes the record it
/// stalled on: fenced, it emits nothing that reaches the sink.
#[test]
fn stalled_stateless_primary_is_fenced_warm() {
    check(Kind::Stateless, StandbyMode::Warm, stall());
}

#[test]
fn stalled_stateless_primary_is_fenced_hot() {
    check(Kind::Stateless, StandbyMode::Hot, stall());
}

#[test]
fn stalled_keyed_primary_is_fenced_warm() {
    check(Kind::Keyed, StandbyMode::Warm, stall());
}

#[test]
fn stalled_keyed_primary_is_fenced_hot() {
    check(Kind::Keyed, StandbyMode::Hot, stall());
}

#[test]
fn four_successive_failures_of_the_same_operator_are_each_taken_over() {
    let _g = serial();
    for kind in [Kind::Stateless, Kind::Keyed] {
        let list: Vec<_> = [3_000u64, 6_000, 9_000, 12_000]
            .iter()
            .map(|&s| {
                (
                    TupleId::new(0, s),
                    ProbeAction::Panic(format!("injected fault at {s}")),
                )
            })
            .collect();
        let (got, rep) = run(kind, Some(cfg(StandbyMode::Warm)), Some(faults(&list)));
        assert_exact(kind, &got);
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

#[test]
fn without_a_standby_config_the_marked_operator_runs_plainly() {
    let _g = serial();
    let (got, rep) = run(Kind::Keyed, None, None);
    assert_eq!(got, clean(Kind::Keyed));
    assert!(rep.standby.is_none());
}

#[test]
fn standby_and_checkpoints_together_are_refused_with_a_clear_error() {
    let job = JobBuilder::new("refused");
    job.source("src", |_| IterSource((0..10u64).map(|v| (v, 0))))
        .standby()
        .map("op", |v: u64| v)
        .for_each("sink", |_| {});
    let cfg = RuntimeConfig::default()
        .cores(1)
        .standby(StandbyConfig::default())
        .checkpoint(tandem::CheckpointConfig::every(Duration::from_millis(10)));
    let e = job.build().unwrap().run(&cfg).unwrap_err().to_string();
    assert!(e.contains("op") && e.contains("checkpoints"), "{e}");
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
    let builds = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let job = JobBuilder::new("standby-fails");
    job.default_parallelism(1);
    let lines = Arc::new(Mutex::new(Vec::new()));
    let l2 = Arc::clone(&lines);
    let b2 = Arc::clone(&builds);
    job.source("src", |_| {
        IterSource(
            (0..RECORDS)
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
        .standby(cfg(StandbyMode::Hot))
        .probes(faults(&[(
            TupleId::new(0, 20_000),
            ProbeAction::Panic("injected".into()),
        )]));
    let rep = job.build().unwrap().run(&cfg).unwrap();
    let mut got = std::mem::take(&mut *lines.lock().unwrap());
    got.sort();
    // The same job at parallelism 1 computes the same lines as at 2.
    assert_exact(Kind::Keyed, &got);
    let sb = rep.standby.expect("standby stats");
    assert!(sb.standby_failures >= 1, "{sb:?}");
    assert!(
        rep.recovery.iter().any(|r| r.cause.contains("injected")),
        "{:?}",
        rep.recovery
    );
    assert!(builds.load(Ordering::SeqCst) >= 3);
}
