//! What the end-to-end recovery tests share: a keyed operator with
//! end-of-stream summaries, a line sink (two-phase-commit or direct), its
//! committed output, one-shot injected faults, and the comparison with a
//! clean run.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tandem::runtime::probe::{ProbeAction, ProbeFactory, RecordProbe};
use tandem::sinks::transactional::TransactionalFile;
use tandem::{Committer, KeyedProcess, OperatorInfo, Output, Record, Sink, TupleId};

/// Injected panics print one line, not a backtrace (the default hook with
/// `RUST_BACKTRACE` set symbolizes for tens of milliseconds first).
pub fn quiet_injected_panics() {
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
                Some(m) if m.starts_with("injected") => {}
                _ => previous(info),
            }
        }));
    });
}

pub fn cores() -> usize {
    tandem::sys::affinity::available_cores().len().min(2)
}

pub fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "tandem-recovery-{tag}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[derive(Clone, Debug, PartialEq)]
pub enum Line {
    Rec(u64, u64),
    Summary(u32, u64, u64),
}

pub struct PerKey;
impl KeyedProcess<u32, (u32, u64), Line> for PerKey {
    type State = (u64, u64);
    fn process(
        &mut self,
        _k: &u32,
        s: &mut (u64, u64),
        r: Record<(u32, u64)>,
        out: &mut Output<'_, Line>,
    ) {
        s.0 += 1;
        s.1 += r.value.1;
        out.emit(Line::Rec(r.value.0 as u64, r.value.1));
    }
    fn on_end(&mut self, k: &u32, s: &mut (u64, u64), out: &mut Output<'_, Line>) {
        out.emit(Line::Summary(*k, s.0, s.1));
    }
}

/// Writes one text line per record: transactionally, or straight to a file.
pub struct LineSink {
    tx: Option<TransactionalFile>,
    direct: Option<std::fs::File>,
}

impl LineSink {
    pub fn new(dir: &Path, info: &OperatorInfo, transactional: bool) -> Self {
        if transactional {
            LineSink {
                tx: Some(
                    TransactionalFile::open(
                        dir,
                        info.instance,
                        info.attempt,
                        info.restored.clone(),
                    )
                    .unwrap(),
                ),
                direct: None,
            }
        } else {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join(format!("direct-{}.txt", info.instance)))
                .unwrap();
            LineSink {
                tx: None,
                direct: Some(f),
            }
        }
    }
}

impl Sink<Line> for LineSink {
    fn write(&mut self, r: Record<Line>) -> std::io::Result<()> {
        let line = match r.value {
            Line::Rec(k, v) => format!("r {k} {v}\n"),
            Line::Summary(k, c, s) => format!("s {k} {c} {s}\n"),
        };
        match (&mut self.tx, &mut self.direct) {
            (Some(t), _) => t.write(line.as_bytes()),
            (_, Some(f)) => std::io::Write::write_all(f, line.as_bytes()),
            _ => Ok(()),
        }
    }
    fn pre_commit(&mut self, checkpoint: u64) -> std::io::Result<()> {
        match &mut self.tx {
            Some(t) => t.pre_commit(checkpoint),
            None => Ok(()),
        }
    }
    fn committer(&self) -> Option<Box<dyn Committer>> {
        self.tx
            .as_ref()
            .map(|t| Box::new(t.committer()) as Box<dyn Committer>)
    }
}

/// One fault: `(operator, tuple, action)`.
pub type FaultSpec<'a> = (&'a str, TupleId, ProbeAction);

/// One-shot faults: `(operator, tuple, action)`.
#[derive(Clone)]
pub struct Faults(pub Arc<Vec<(String, TupleId, ProbeAction, AtomicBool)>>);

impl Faults {
    pub fn new(specs: Vec<FaultSpec>) -> Self {
        Faults(Arc::new(
            specs
                .into_iter()
                .map(|(o, t, a)| (o.to_string(), t, a, AtomicBool::new(false)))
                .collect(),
        ))
    }
    /// An injected panic in `op` at each `(partition, seq)`.
    pub fn panics(op: &str, at: &[(u32, u64)]) -> Self {
        Self::new(
            at.iter()
                .map(|&(p, s)| {
                    (
                        op,
                        TupleId::new(p, s),
                        ProbeAction::Panic("injected".into()),
                    )
                })
                .collect(),
        )
    }
    pub fn all_fired(&self) -> bool {
        self.0.iter().all(|f| f.3.load(Ordering::SeqCst))
    }
}

pub struct FaultProbe(Faults, String);
impl RecordProbe for FaultProbe {
    fn before(&mut self, id: TupleId) -> ProbeAction {
        for (op, t, a, fired) in self.0 .0.iter() {
            if *op == self.1 && *t == id && !fired.swap(true, Ordering::SeqCst) {
                return a.clone();
            }
        }
        ProbeAction::Continue
    }
}

impl ProbeFactory for Faults {
    fn probe(&self, operator: &str, _instance: usize) -> Option<Box<dyn RecordProbe>> {
        Some(Box::new(FaultProbe(self.clone(), operator.to_string())))
    }
}

/// `faults` in every operator, and one panic in `operator` on the first
/// record of `from`'s partition at or past `from` by which `checkpoints`
/// checkpoints are published in `dir` — so that the restart restores one
/// however slow the machine. Until then each of those records takes
/// 200 µs more, so a run slow to complete checkpoints still gets them
/// before the partition ends, instead of ending with the fault unfired.
pub struct PanicAfterCheckpoints {
    pub faults: Faults,
    pub operator: &'static str,
    pub from: TupleId,
    pub checkpoints: usize,
    pub dir: PathBuf,
    pub fired: Arc<AtomicBool>,
}

struct AfterCheckpointsProbe {
    from: TupleId,
    checkpoints: usize,
    dir: PathBuf,
    fired: Arc<AtomicBool>,
}

impl RecordProbe for AfterCheckpointsProbe {
    fn before(&mut self, id: TupleId) -> ProbeAction {
        let due = id.partition() == self.from.partition() && id.seq() >= self.from.seq();
        if !due || self.fired.load(Ordering::SeqCst) {
            return ProbeAction::Continue;
        }
        let listed = tandem::checkpoint::list(&self.dir).map_or(0, |l| l.len());
        if listed < self.checkpoints {
            return ProbeAction::Delay(std::time::Duration::from_micros(200));
        }
        if !self.fired.swap(true, Ordering::SeqCst) {
            return ProbeAction::Panic(format!("injected after {listed} checkpoints"));
        }
        ProbeAction::Continue
    }
}

impl ProbeFactory for PanicAfterCheckpoints {
    fn probe(&self, operator: &str, instance: usize) -> Option<Box<dyn RecordProbe>> {
        if operator == self.operator {
            return Some(Box::new(AfterCheckpointsProbe {
                from: self.from,
                checkpoints: self.checkpoints,
                dir: self.dir.clone(),
                fired: Arc::clone(&self.fired),
            }));
        }
        self.faults.probe(operator, instance)
    }
}

pub fn committed_lines(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = TransactionalFile::committed_files(dir)
        .unwrap()
        .iter()
        .flat_map(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    v.sort();
    v
}

pub fn assert_same(clean: &[String], faulted: &[String]) {
    let dupes: BTreeMap<&String, usize> = faulted.iter().fold(BTreeMap::new(), |mut m, l| {
        *m.entry(l).or_default() += 1;
        m
    });
    let repeated: Vec<_> = dupes.iter().filter(|(_, &c)| c > 1).take(5).collect();
    assert!(repeated.is_empty(), "duplicated lines: {repeated:?}");
    assert_eq!(clean.len(), faulted.len(), "line count");
    assert!(clean == faulted, "the outputs differ");
}

/// Runs a job (`run(standby, config)`, its lines sorted) with the panics
/// `faults()` makes: under a warm and a hot standby it must emit exactly
/// `want`, with at least `recoveries` takeovers; under restart-all from
/// checkpoints, into a sink that is not transactional (what came after the
/// restored checkpoint arrives again), every line of `want` and no other.
pub fn exact_under_faults<L: Ord + Clone + std::fmt::Debug>(
    want: &[L],
    faults: impl Fn() -> Faults,
    recoveries: usize,
    run: impl Fn(bool, &tandem::RuntimeConfig) -> (Vec<L>, tandem::JobReport),
) {
    quiet_injected_panics();
    for mode in [tandem::StandbyMode::Warm, tandem::StandbyMode::Hot] {
        let f = faults();
        let cfg = tandem::RuntimeConfig::default()
            .cores(cores())
            .standby(tandem::StandbyConfig {
                mode,
                snapshot_interval: std::time::Duration::from_millis(2),
                ..tandem::StandbyConfig::default()
            })
            .probes(Arc::new(f.clone()));
        let (got, report) = run(true, &cfg);
        assert!(f.all_fired(), "{mode:?}");
        assert!(
            report.recovery.len() >= recoveries,
            "{mode:?}: {:?}",
            report.recovery
        );
        assert!(got == want, "{mode:?}: the lines differ");
    }
    let dir = tempdir("faults");
    let mut ck = tandem::CheckpointConfig::every(std::time::Duration::from_millis(3));
    ck.dir = Some(dir.clone());
    let f = faults();
    let cfg = tandem::RuntimeConfig::default()
        .cores(cores())
        .checkpoint(ck)
        .restart(tandem::RestartStrategy::FixedDelay {
            attempts: 10,
            delay: std::time::Duration::ZERO,
        })
        .probes(Arc::new(f.clone()));
    let (got, report) = run(false, &cfg);
    assert!(f.all_fired());
    assert!(!report.recovery.is_empty());
    let got: std::collections::BTreeSet<L> = got.into_iter().collect();
    let want: std::collections::BTreeSet<L> = want.iter().cloned().collect();
    assert!(got == want, "restart-all: the lines differ");
    let _ = std::fs::remove_dir_all(&dir);
}
