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

/// Copies the directory tree `from` to `to` (a stopped run's output, for
/// each resume to continue on its own copy).
fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let t = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &t);
        } else {
            std::fs::copy(e.path(), &t).unwrap();
        }
    }
}

/// A job stopped with a savepoint into a checkpoint directory that also
/// holds its older checkpoints is resumed three ways — by the directory,
/// by the savepoint and by the newest checkpoint before it — each into
/// its own copy of the stopped run's output: each ends with exactly one
/// clean run's output. The directory resumes from the savepoint, the
/// newest point (it used to take the newest *checkpoint*, older than the
/// savepoint, and commit the output between them twice); the older
/// checkpoint retracts what the stopped run committed after it.
#[test]
fn a_resume_by_directory_takes_the_savepoint_and_every_resume_is_exact() {
    use tandem::checkpoint::SnapshotKind;
    use tandem::RestoreKind;
    let dir = tempdir("resume-by-dir");
    let (clean_out, a_out) = (dir.join("clean"), dir.join("a"));
    for d in [&clean_out, &a_out] {
        std::fs::create_dir_all(d).unwrap();
    }
    job(&clean_out).run(&config(&dir.join("c"))).unwrap();
    let clean = committed_lines(&clean_out);

    let ck = dir.join("a-ck");
    let handle = job(&a_out).start(&config(&ck)).unwrap();
    // Past the first checkpoints, so that some precede the savepoint.
    let t = Instant::now();
    while handle.status().checkpoints_completed < 2 && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let sp = handle.stop_with_savepoint().unwrap();
    handle.join().unwrap();
    let store = ck.join("ckpt");
    let listed = tandem::checkpoint::list(&store).unwrap();
    let sp_id = listed
        .iter()
        .find(|l| l.kind == SnapshotKind::Savepoint)
        .unwrap()
        .id;
    let older = listed
        .iter()
        .filter(|l| l.kind == SnapshotKind::Checkpoint && l.id < sp_id)
        .map(|l| l.id)
        .max()
        .expect("a checkpoint before the savepoint");

    let ways: [(&str, std::path::PathBuf, RestoreKind, u64); 3] = [
        ("directory", store.clone(), RestoreKind::Savepoint, sp_id),
        ("savepoint", sp.clone(), RestoreKind::Savepoint, sp_id),
        (
            "older checkpoint",
            store.join(format!("manifest-{older}.json")),
            RestoreKind::Checkpoint,
            older,
        ),
    ];
    for (way, from, kind, id) in ways {
        let out = dir.join(format!("b-{}", way.replace(' ', "-")));
        copy_tree(&a_out, &out);
        let report = job(&out)
            .run(&config(&dir.join(format!("b-ck-{}", way.replace(' ', "-")))).restore_from(&from))
            .unwrap();
        let r = report.restored_from.expect("restored");
        assert_eq!((r.kind, r.id), (kind, id), "resumed by the {way}");
        let got = committed_lines(&out);
        assert_eq!(got.len(), clean.len(), "resumed by the {way}: line count");
        assert!(
            got == clean,
            "resumed by the {way}: the output differs from one clean run's"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A savepoint newer than every checkpoint beside it that does not verify
/// is never passed over for the older checkpoint: the resume by the
/// directory is refused before any work, naming both.
#[test]
fn a_damaged_newest_savepoint_refuses_a_resume_by_directory() {
    let dir = tempdir("resume-damaged-sp");
    let out = dir.join("a");
    std::fs::create_dir_all(&out).unwrap();
    let ck = dir.join("a-ck");
    let handle = job(&out).start(&config(&ck)).unwrap();
    let t = Instant::now();
    while handle.status().checkpoints_completed < 2 && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let sp = handle.stop_with_savepoint().unwrap();
    handle.join().unwrap();
    // Truncate the savepoint's largest file.
    let victim = std::fs::read_dir(&sp)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name() != "manifest.json" && e.path().is_file())
        .max_by_key(|e| e.metadata().unwrap().len())
        .unwrap()
        .path();
    let len = std::fs::metadata(&victim).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&victim)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let e = job(&out)
        .run(&config(&dir.join("b-ck")).restore_from(ck.join("ckpt")))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("savepoint") && e.contains("does not verify") && e.contains("checkpoint"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
