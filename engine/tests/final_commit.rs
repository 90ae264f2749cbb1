//! A sink's output is settled, or the job fails: a commit that fails at
//! the end of the input — the final epoch's, injected as the commit's own
//! error, or one that a sink performs on a thread of its own and reports
//! only when the supervisor waits for it (as the NATS sink does) — never
//! lets the job report success with output missing. Without restarts the
//! job fails naming the sink; with a restart strategy it restarts from
//! its last checkpoint and ends with exactly one clean run's output.

mod common;

use common::{committed_lines, cores, tempdir, LineSink, PerKey};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tandem::runtime::probe::{ProbeFactory, RecordProbe};
use tandem::{
    CheckpointConfig, Committer, IterSource, JobBuilder, OperatorInfo, Record, RestartStrategy,
    RuntimeConfig, Sink, FINAL_EPOCH,
};

const N: u64 = 20_000;

/// What the sink's committer does.
#[derive(Clone, Copy, PartialEq)]
enum Committing {
    /// As the transactional file sink does: at once.
    Now,
    /// Later: each commit is queued and done at the next `prepared` or
    /// `settle`, where its failure is reported (a sink that publishes on
    /// a thread of its own); the first `settle` fails once.
    Deferred,
}

struct Deferred {
    inner: Box<dyn Committer>,
    queued: Vec<u64>,
    fail_once: Arc<AtomicBool>,
}

impl Deferred {
    fn drain(&mut self) -> std::io::Result<()> {
        for id in std::mem::take(&mut self.queued) {
            if id == FINAL_EPOCH {
                self.inner.commit_final()?;
            } else {
                self.inner.commit(id)?;
            }
        }
        Ok(())
    }
}

impl Committer for Deferred {
    fn prepared(&mut self, checkpoint: u64) -> std::io::Result<bool> {
        self.drain()?;
        self.inner.prepared(checkpoint)
    }
    fn commit(&mut self, checkpoint: u64) -> std::io::Result<()> {
        self.queued.push(checkpoint);
        Ok(())
    }
    fn commit_final(&mut self) -> std::io::Result<()> {
        self.queued.push(FINAL_EPOCH);
        Ok(())
    }
    fn settle(&mut self) -> std::io::Result<()> {
        if !self.queued.is_empty() && self.fail_once.swap(false, Ordering::SeqCst) {
            // The background work failed: nothing queued got out.
            self.queued.clear();
            return Err(std::io::Error::other("injected: the publish failed"));
        }
        self.drain()?;
        self.inner.settle()
    }
}

struct Out {
    lines: LineSink,
    committing: Committing,
    fail_once: Arc<AtomicBool>,
}

impl Sink<common::Line> for Out {
    fn write(&mut self, r: Record<common::Line>) -> std::io::Result<()> {
        self.lines.write(r)
    }
    fn pre_commit(&mut self, checkpoint: u64) -> std::io::Result<()> {
        self.lines.pre_commit(checkpoint)
    }
    fn committer(&self) -> Option<Box<dyn Committer>> {
        let inner = self.lines.committer()?;
        Some(match self.committing {
            Committing::Now => inner,
            Committing::Deferred => Box::new(Deferred {
                inner,
                queued: Vec::new(),
                fail_once: Arc::clone(&self.fail_once),
            }),
        })
    }
}

fn job(out: &Path, committing: Committing, fail_once: &Arc<AtomicBool>) -> tandem::Job {
    let job = JobBuilder::new("final-commit");
    job.default_parallelism(2);
    let (out, fail_once) = (out.to_path_buf(), Arc::clone(fail_once));
    job.source("src", |i: &OperatorInfo| {
        let (me, par) = (i.instance as u64, i.parallelism as u64);
        IterSource((0..N).filter(move |n| n % par == me).map(|n| (n, n)))
    })
    .rate_limit(400_000.0)
    .map("map", |n: u64| ((n % 61) as u32, n))
    .key_by(|p: &(u32, u64)| p.0)
    .process("keyed", |_| PerKey)
    .sink("out", move |info| Out {
        lines: LineSink::new(&out, info, true),
        committing,
        fail_once: Arc::clone(&fail_once),
    });
    job.build().unwrap()
}

/// Fails the commit of instance 0's final epoch of sink `out`, the
/// first time (`finals`: how often it was asked to commit that epoch).
#[derive(Default)]
struct FinalCommitFault {
    finals: AtomicU32,
}

impl ProbeFactory for FinalCommitFault {
    fn probe(&self, _operator: &str, _instance: usize) -> Option<Box<dyn RecordProbe>> {
        None
    }
    fn commit(&self, operator: &str, instance: usize, checkpoint: u64) -> std::io::Result<()> {
        if operator == "out"
            && instance == 0
            && checkpoint == FINAL_EPOCH
            && self.finals.fetch_add(1, Ordering::SeqCst) == 0
        {
            return Err(std::io::Error::other(
                "injected commit fault at the final epoch",
            ));
        }
        Ok(())
    }
}

fn config(dir: &Path, restarts: bool) -> RuntimeConfig {
    let mut ck = CheckpointConfig::every(Duration::from_millis(10));
    ck.dir = Some(dir.join("checkpoints"));
    let c = RuntimeConfig::default()
        .cores(cores())
        .pin(false)
        .checkpoint(ck);
    if restarts {
        c.restart(RestartStrategy::FixedDelay {
            attempts: 3,
            delay: Duration::ZERO,
        })
    } else {
        c
    }
}

fn clean(dir: &Path) -> Vec<String> {
    let out = dir.join("clean");
    std::fs::create_dir_all(&out).unwrap();
    job(&out, Committing::Now, &Arc::new(AtomicBool::new(false)))
        .run(&config(&dir.join("clean-ck"), false))
        .unwrap();
    committed_lines(&out)
}

#[test]
fn a_failed_final_commit_fails_the_job_or_restarts_it_to_the_clean_output() {
    let dir = tempdir("final-commit");
    let want = clean(&dir);
    assert!(want.len() as u64 > N, "{} lines", want.len());
    let never = Arc::new(AtomicBool::new(false));

    // No restart strategy: the job fails, naming the sink and the commit.
    let out = dir.join("none");
    std::fs::create_dir_all(&out).unwrap();
    let probe = Arc::new(FinalCommitFault::default());
    let e = job(&out, Committing::Now, &never)
        .run(&config(&dir.join("none-ck"), false).probes(probe.clone()))
        .expect_err("a job whose final output did not commit reports no success");
    let msg = tandem::error::report(&e);
    assert!(
        msg.contains("`out`") && msg.contains("final output") && msg.contains("injected"),
        "{msg}"
    );
    assert_eq!(probe.finals.load(Ordering::SeqCst), 1);

    // With restarts: the attempt restarts from its last checkpoint, and
    // the output is one clean run's.
    let out = dir.join("restarted");
    std::fs::create_dir_all(&out).unwrap();
    let probe = Arc::new(FinalCommitFault::default());
    let report = job(&out, Committing::Now, &never)
        .run(&config(&dir.join("restarted-ck"), true).probes(probe.clone()))
        .unwrap();
    // Failed, then committed by the restarted attempt.
    assert_eq!(probe.finals.load(Ordering::SeqCst), 2);
    assert!(report.restarts >= 1, "{} restarts", report.restarts);
    common::assert_same(&want, &committed_lines(&out));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_commit_that_fails_only_when_waited_for_fails_the_job_or_restarts_it() {
    let dir = tempdir("deferred-commit");
    let want = clean(&dir);

    // The last checkpoint's commit and the final epoch are queued when the
    // input ends, and the wait for them fails: no success.
    let out = dir.join("none");
    std::fs::create_dir_all(&out).unwrap();
    let fail = Arc::new(AtomicBool::new(true));
    let e = job(&out, Committing::Deferred, &fail)
        .run(&config(&dir.join("none-ck"), false))
        .expect_err("a job whose output did not settle reports no success");
    let msg = tandem::error::report(&e);
    assert!(msg.contains("`out`") && msg.contains("injected"), "{msg}");
    assert!(!fail.load(Ordering::SeqCst), "the failure was provoked");
    assert!(
        committed_lines(&out).len() < want.len(),
        "the failed run's output is incomplete (what the test provokes)"
    );

    let out = dir.join("restarted");
    std::fs::create_dir_all(&out).unwrap();
    let fail = Arc::new(AtomicBool::new(true));
    let report = job(&out, Committing::Deferred, &fail)
        .run(&config(&dir.join("restarted-ck"), true))
        .unwrap();
    assert!(!fail.load(Ordering::SeqCst), "the failure was provoked");
    assert!(report.restarts >= 1, "{} restarts", report.restarts);
    common::assert_same(&want, &committed_lines(&out));
    let _ = std::fs::remove_dir_all(&dir);
}
