//! Rescaling through savepoints and checkpoints: a job stopped with a
//! savepoint at one parallelism and resumed at another writes, with the
//! first run, exactly one clean run's output — keyed state redistributed by
//! key, a broadcast state copied to every new instance, the sources' partitions
//! kept, windows' and timers' state by key with the slowest old
//! instance's watermark — and an operator whose own state the engine
//! cannot split is refused, naming it.

mod common;

use common::{committed_lines, cores, tempdir, Line, LineSink, PerKey};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tandem::operator::broadcast::{BroadcastProcess, BroadcastState};
use tandem::time::{Watermarks, Windows};
use tandem::{
    CheckpointConfig, JobBuilder, Output, Process, Record, RuntimeConfig, Source, SourcePoll,
};

/// Records per partition.
const PER: u64 = 6_000;
/// The first run stops after this many records of each partition.
const HALF: u64 = 2_500;

/// Partition `p`'s `(key, value)` records; while `hold` is set it offers
/// nothing past `HALF` (the first run is stopped there).
struct Gated {
    p: u64,
    next: u64,
    hold: Arc<AtomicBool>,
}

impl Source<(u32, u64)> for Gated {
    fn poll_next(&mut self) -> SourcePoll<(u32, u64)> {
        if self.next == PER {
            return SourcePoll::End;
        }
        if self.next >= HALF && self.hold.load(Ordering::Relaxed) {
            return SourcePoll::Pending;
        }
        let n = self.next;
        self.next += 1;
        let v = self.p * 1_000_000 + n;
        SourcePoll::Ready {
            value: ((v.wrapping_mul(0x9e37_79b9) % 101) as u32, v),
            event_time: n * 1_000_000,
        }
    }

    fn seek(&mut self, next_seq: u64) -> Result<(), tandem::SeekError> {
        self.next = next_seq;
        Ok(())
    }

    fn seeks_directly(&self) -> bool {
        true
    }
}

/// What the jobs under test read: two partitions (whatever the job's
/// parallelism, the savepoint keeps them).
fn source(job: &JobBuilder, hold: &Arc<AtomicBool>) -> tandem::Stream<(u32, u64)> {
    let hold = Arc::clone(hold);
    job.source("src", move |i| Gated {
        p: i.instance as u64,
        next: 0,
        hold: Arc::clone(&hold),
    })
    .parallelism(2)
}

fn config(dir: &Path) -> RuntimeConfig {
    let mut ck = CheckpointConfig::every(Duration::from_millis(20));
    ck.dir = Some(dir.to_path_buf());
    RuntimeConfig::default().cores(cores()).checkpoint(ck)
}

/// Runs `job(hold)` until each source partition has offered `HALF`
/// records, then stops it with a savepoint: its path.
fn stop_half_way(job: impl Fn(&Arc<AtomicBool>) -> tandem::Job, dir: &Path) -> PathBuf {
    let hold = Arc::new(AtomicBool::new(true));
    let handle = job(&hold).start(&config(dir)).unwrap();
    let t = std::time::Instant::now();
    while handle
        .progress()
        .operators
        .iter()
        .find(|o| o.name == "src")
        .is_none_or(|o| o.records < 2 * HALF)
    {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the source never got half way"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let sp = handle.stop_with_savepoint().unwrap();
    let report = handle.join().unwrap();
    assert_eq!(report.stopped_at.as_deref(), Some(sp.as_path()));
    sp
}

/// Drops the values a rule names; the rules come on the broadcast input.
struct DropNamed;

impl BroadcastProcess<(u32, u64), u32, (u32, u64)> for DropNamed {
    type State = Vec<u32>;
    fn process_element(
        &mut self,
        rules: &Vec<u32>,
        r: Record<(u32, u64)>,
        out: &mut Output<'_, (u32, u64)>,
    ) {
        if !rules.contains(&r.value.0) {
            out.emit(r.value);
        }
    }
    fn process_broadcast(
        &mut self,
        rules: &mut Vec<u32>,
        r: Record<u32>,
        _: &mut Output<'_, (u32, u64)>,
    ) {
        rules.push(r.value);
    }
    fn ready(&self, rules: &Vec<u32>) -> bool {
        rules.len() == 3
    }
}

/// Source → broadcast-rules filter → per-key counts (with end-of-input
/// summaries) → a two-phase-commit sink, at `parallelism`.
fn keyed_job(out: &Path, parallelism: usize, hold: &Arc<AtomicBool>) -> tandem::Job {
    let job = JobBuilder::new("rescaled");
    job.default_parallelism(parallelism);
    let rules = job
        .source("rules", |_| {
            tandem::IterSource([7u32, 13, 42].into_iter().map(|n| (n, 0)))
        })
        .parallelism(1)
        .broadcast();
    let o = out.to_path_buf();
    source(&job, hold)
        .connect(&rules)
        .process("drop", |_| BroadcastState::new(DropNamed))
        .key_by(|r: &(u32, u64)| r.0)
        .process("per-key", |_| PerKey)
        .sink("out", move |i| LineSink::new(&o, i, true));
    job.build().unwrap()
}

/// Runs `job` (writing to a directory, at a parallelism) clean at 2, then
/// stopped half way at 2 and resumed from its savepoint at each of
/// `resume_at`: the two runs' committed output must be the clean run's,
/// with operator `op` at the new parallelism and the source at its 2
/// partitions. Returns the clean output.
fn resumes_exactly(
    tag: &str,
    job: impl Fn(&Path, usize, &Arc<AtomicBool>) -> tandem::Job,
    op: &str,
    resume_at: &[usize],
) -> Vec<String> {
    let dir = tempdir(tag);
    let clean_out = dir.join("clean");
    std::fs::create_dir_all(&clean_out).unwrap();
    let free = Arc::new(AtomicBool::new(false));
    job(&clean_out, 2, &free)
        .run(&config(&dir.join("c-ck")))
        .unwrap();
    let clean = committed_lines(&clean_out);

    let a_out = dir.join("a");
    std::fs::create_dir_all(&a_out).unwrap();
    let sp = stop_half_way(|h| job(&a_out, 2, h), &dir.join("a-ck"));
    let a = committed_lines(&a_out);
    assert!(!a.is_empty() && a.len() < clean.len(), "{} lines", a.len());
    for &p in resume_at {
        let b_out = dir.join(format!("b{p}"));
        std::fs::create_dir_all(&b_out).unwrap();
        let report = job(&b_out, p, &free)
            .run(&config(&dir.join(format!("b{p}-ck"))).restore_from(&sp))
            .unwrap();
        assert_eq!(report.operator(op).unwrap().parallelism, p);
        assert_eq!(report.operator("src").unwrap().parallelism, 2);
        let mut both = a.clone();
        both.extend(committed_lines(&b_out));
        both.sort();
        assert_eq!(both.len(), clean.len(), "at parallelism {p}");
        assert!(
            both == clean,
            "at parallelism {p}, the two runs' output differs from one clean run's"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    clean
}

#[test]
fn keyed_and_broadcast_state_resume_at_fewer_and_more_instances_exactly() {
    let clean = resumes_exactly("rescale", keyed_job, "per-key", &[1, 3, 4]);
    assert!(clean.iter().any(|l| l.starts_with("s ")));
}

/// Counts its records in a state of its own.
struct Counter(u64);

impl Process<(u32, u64), (u32, u64)> for Counter {
    fn process(&mut self, r: Record<(u32, u64)>, out: &mut Output<'_, (u32, u64)>) {
        self.0 += 1;
        out.emit(r.value);
    }
    fn snapshot_state(
        &mut self,
    ) -> Result<Option<tandem::checkpoint::SnapshotBytes>, tandem::checkpoint::CheckpointError>
    {
        tandem::checkpoint::serialize(&self.0, 16).map(Some)
    }
    fn restore_state(&mut self, payload: &[u8]) -> Result<(), tandem::checkpoint::CheckpointError> {
        self.0 = tandem::checkpoint::access::<u64>(payload)?.to_native();
        Ok(())
    }
}

#[test]
fn a_state_the_engine_cannot_split_is_refused_at_another_parallelism_naming_the_operator() {
    let dir = tempdir("rescale-refused");
    let own = |p: usize, h: &Arc<AtomicBool>| {
        let job = JobBuilder::new("own");
        job.default_parallelism(p);
        source(&job, h)
            .process("counter", |_| Counter(0))
            .for_each("out", |_| {});
        job.build().unwrap()
    };
    let sp = stop_half_way(|h| own(2, h), &dir.join("own"));
    let free = Arc::new(AtomicBool::new(false));
    let e = own(3, &free)
        .run(&config(&dir.join("own-3")).restore_from(&sp))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`counter`") && e.contains("snapshot_state"),
        "{e}"
    );
    own(2, &free)
        .run(&config(&dir.join("own-2")).restore_from(&sp))
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Per key, 100 ms tumbling windows (of the records' event time) summed
/// and counted, into a two-phase-commit sink, at `parallelism`.
fn windowed_job(out: &Path, parallelism: usize, hold: &Arc<AtomicBool>) -> tandem::Job {
    let job = JobBuilder::new("windowed");
    job.default_parallelism(parallelism);
    let o = out.to_path_buf();
    source(&job, hold)
        .watermarks(Watermarks::bounded(Duration::from_millis(2)).every(16))
        .key_by(|r: &(u32, u64)| r.0)
        .window(Windows::sliding(
            Duration::from_millis(300),
            Duration::from_millis(100),
        ))
        .process("win", |k: &u32, w, recs: &[(u32, u64)], out| {
            let sum: u64 = recs.iter().map(|r| r.1).sum();
            out(Line::Summary(*k, w.start, sum + recs.len() as u64))
        })
        .results()
        .sink("out", move |i| LineSink::new(&o, i, true));
    job.build().unwrap()
}

#[test]
fn windows_resume_at_fewer_and_more_instances_exactly() {
    let clean = resumes_exactly("rescale-windows", windowed_job, "win", &[1, 3]);
    assert!(clean.len() > 1_000);
}

/// `PerKey`, panicking at value `at` while `armed` (the first run).
struct FailingPerKey {
    at: u64,
    armed: Arc<AtomicBool>,
}

impl tandem::KeyedProcess<u32, (u32, u64), Line> for FailingPerKey {
    type State = (u64, u64);
    fn process(
        &mut self,
        k: &u32,
        s: &mut (u64, u64),
        r: Record<(u32, u64)>,
        out: &mut Output<'_, Line>,
    ) {
        if r.value.1 == self.at && self.armed.load(Ordering::Relaxed) {
            panic!("injected at {}", self.at);
        }
        tandem::KeyedProcess::process(&mut PerKey, k, s, r, out);
    }
    fn on_end(&mut self, k: &u32, s: &mut (u64, u64), out: &mut Output<'_, Line>) {
        tandem::KeyedProcess::on_end(&mut PerKey, k, s, out);
    }
}

/// A job that failed at parallelism 3 restores its last checkpoint at 2
/// into the same output directory: the sinks' committed output is one
/// clean run's. (A failed job commits its completed checkpoints' output
/// before it returns; what a crashed process left staged is settled by the
/// instance that adopts the old one — the transactional sink's unit test.)
#[test]
fn a_failed_jobs_checkpoint_restores_at_fewer_instances_into_the_same_output_exactly() {
    common::quiet_injected_panics();
    let dir = tempdir("rescale-failed");
    let free = Arc::new(AtomicBool::new(false));
    let job = |p: usize, out: &Path, armed: &Arc<AtomicBool>, hold: &Arc<AtomicBool>| {
        let job = JobBuilder::new("failing");
        job.default_parallelism(p);
        let o = out.to_path_buf();
        let armed = Arc::clone(armed);
        source(&job, hold)
            .key_by(|r: &(u32, u64)| r.0)
            .process("per-key", move |_| FailingPerKey {
                at: 1_000_000 + 5_000,
                armed: Arc::clone(&armed),
            })
            .sink("out", move |i| LineSink::new(&o, i, true));
        job.build().unwrap()
    };
    let clean_out = dir.join("clean");
    std::fs::create_dir_all(&clean_out).unwrap();
    job(2, &clean_out, &free, &free)
        .run(&RuntimeConfig::default().cores(cores()))
        .unwrap();
    let clean = committed_lines(&clean_out);

    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let armed = Arc::new(AtomicBool::new(true));
    let mut ck = CheckpointConfig::every(Duration::from_millis(2));
    ck.dir = Some(dir.join("ck"));
    // Held half way until checkpoints complete, then it fails further on.
    let hold = Arc::new(AtomicBool::new(true));
    let handle = job(3, &out, &armed, &hold)
        .start(
            &RuntimeConfig::default()
                .cores(cores())
                .checkpoint(ck)
                .restart(tandem::RestartStrategy::None),
        )
        .unwrap();
    let t = std::time::Instant::now();
    while handle.status().checkpoints_completed < 2 {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "no checkpoint completed"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    hold.store(false, Ordering::Relaxed);
    let e = handle.join().unwrap_err().to_string();
    assert!(e.contains("injected"), "{e}");
    armed.store(false, Ordering::Relaxed);
    let report = job(2, &out, &armed, &free)
        .run(&config(&dir.join("ck2")).restore_from(dir.join("ck")))
        .unwrap();
    assert!(report.restored_from.is_some());
    let mut got = committed_lines(&out);
    got.sort();
    assert_eq!(got.len(), clean.len());
    assert!(got == clean, "the output differs from one clean run's");
    let _ = std::fs::remove_dir_all(&dir);
}
