//! Stop with a savepoint (Flink's stop-with-savepoint): the job stops once
//! the savepoint is durable, its output committed up to the savepoint's
//! barrier and no end-of-input summary emitted; a job started from the
//! savepoint writes the rest — together exactly one clean run's output.

mod common;

use common::{committed_lines, cores, tempdir, LineSink, PerKey};
use std::time::{Duration, Instant};
use tandem::{CheckpointConfig, JobBuilder, RuntimeConfig, Source, SourcePoll};

const PER: u64 = 40_000;

/// Partition `p`'s `(key, value)` records, one every 20 µs from its
/// first poll (a restored partition catches up, then keeps pace).
struct Paced {
    p: u64,
    next: u64,
    start: Option<Instant>,
}

impl Source<(u32, u64)> for Paced {
    fn poll_next(&mut self) -> SourcePoll<(u32, u64)> {
        if self.next == PER {
            return SourcePoll::End;
        }
        let start = *self.start.get_or_insert_with(Instant::now);
        if start.elapsed() < Duration::from_micros(20 * self.next) {
            return SourcePoll::Pending;
        }
        let n = self.next;
        self.next += 1;
        let v = self.p * 1_000_000 + n;
        SourcePoll::Ready {
            value: ((v % 97) as u32, v),
            event_time: n,
        }
    }

    fn seek(&mut self, next_seq: u64) -> Result<(), tandem::SeekError> {
        self.next = next_seq;
        self.start = Some(Instant::now() - Duration::from_micros(20 * next_seq));
        Ok(())
    }

    fn seeks_directly(&self) -> bool {
        true
    }
}

fn job(out: &std::path::Path) -> tandem::Job {
    job_at(out, 2)
}

fn job_at(out: &std::path::Path, parallelism: usize) -> tandem::Job {
    let job = JobBuilder::new("stoppable");
    job.default_parallelism(parallelism);
    let o = out.to_path_buf();
    job.source("src", |i| Paced {
        p: i.instance as u64,
        next: 0,
        start: None,
    })
    .key_by(|r: &(u32, u64)| r.0)
    .process("per-key", |_| PerKey)
    .sink("out", move |i| LineSink::new(&o, i, true));
    job.build().unwrap()
}

fn config(dir: &std::path::Path) -> RuntimeConfig {
    let mut ck = CheckpointConfig::every(Duration::from_millis(20));
    ck.dir = Some(dir.join("ckpt"));
    RuntimeConfig::default().cores(cores()).checkpoint(ck)
}

#[test]
fn a_job_stopped_with_a_savepoint_and_resumed_from_it_writes_one_clean_runs_output() {
    let dir = tempdir("stop-savepoint");
    let (clean_out, a_out, b_out) = (dir.join("clean"), dir.join("a"), dir.join("b"));
    for d in [&clean_out, &a_out, &b_out] {
        std::fs::create_dir_all(d).unwrap();
    }
    job(&clean_out).run(&config(&dir.join("c"))).unwrap();
    let clean = committed_lines(&clean_out);
    assert!(clean.len() as u64 > 2 * PER);

    let handle = job(&a_out).start(&config(&dir.join("a-ck"))).unwrap();
    std::thread::sleep(Duration::from_millis(150));
    let sp = handle.stop_with_savepoint().unwrap();
    let report = handle.join().unwrap();
    assert_eq!(report.stopped_at.as_deref(), Some(sp.as_path()));
    assert!(sp.join("manifest.json").exists(), "{}", sp.display());
    let a = committed_lines(&a_out);
    assert!(
        !a.is_empty() && (a.len() as u64) < 2 * PER,
        "{} lines",
        a.len()
    );
    assert!(
        a.iter().all(|l| l.starts_with("r ")),
        "no end-of-input summary before the stop"
    );

    // At the savepoint's parallelism, fewer instances and more: the keyed
    // state is redistributed by key, the source keeps its 2 partitions.
    for p in [2, 1, 3] {
        let b_out = b_out.join(p.to_string());
        std::fs::create_dir_all(&b_out).unwrap();
        let report = job_at(&b_out, p)
            .run(&config(&dir.join(format!("b-ck-{p}"))).restore_from(&sp))
            .unwrap();
        assert!(report.stopped_at.is_none() && report.restored_from.is_some());
        let keyed = report.operator("per-key").unwrap();
        assert_eq!(keyed.parallelism, p);
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
}

#[test]
fn stopping_with_a_savepoint_needs_a_directory_that_outlives_the_job() {
    let dir = tempdir("stop-no-dir");
    let handle = job(&dir)
        .start(
            &RuntimeConfig::default()
                .cores(cores())
                .checkpoint(CheckpointConfig::every(Duration::from_millis(20))),
        )
        .unwrap();
    let e = handle.stop_with_savepoint().unwrap_err().to_string();
    assert!(e.contains("outlives the job"), "{e}");
    handle.cancel();
    let _ = handle.join();
    let _ = std::fs::remove_dir_all(&dir);
}
