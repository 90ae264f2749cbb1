//! Checkpoints on a disk-backed directory while another process writes
//! heavily to the same disk: every checkpoint started is accounted for —
//! completed (on time or counted late, with its duration), failed, or
//! pending at the end — none silently missing, and the committed output is
//! exactly the job's.
//!
//! The heavy writer is this test binary itself, re-run in a child process
//! on the ignored test `heavy_writer_child`: 4 MiB buffered writes with an
//! fdatasync every 64 MiB, so the disk always has writeback queued.

mod common;

use common::*;
use std::io::{Seek, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tandem::{CheckpointConfig, IterSource, JobBuilder, RuntimeConfig};

const WRITER_DIR: &str = "TANDEM_TEST_HEAVY_WRITER_DIR";
const N: u64 = 100_000;
const INTERVAL: Duration = Duration::from_millis(200);

/// The child process's work (does nothing unless started by the test below).
#[test]
#[ignore = "run by checkpoints_beside_a_heavy_writer_are_each_accounted_for in a child process"]
fn heavy_writer_child() {
    let Ok(dir) = std::env::var(WRITER_DIR) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let ballast = dir.join("ballast");
    let stop = dir.join("stop");
    let buf = vec![0x5au8; 4 << 20];
    let mut f = std::fs::File::create(&ballast).unwrap();
    let started = Instant::now();
    let mut written = 0u64;
    while !stop.exists() && started.elapsed() < Duration::from_secs(60) {
        f.write_all(&buf).unwrap();
        written += buf.len() as u64;
        if written.is_multiple_of(64 << 20) {
            f.sync_data().unwrap();
        }
        if written >= 1 << 30 {
            f.set_len(0).unwrap();
            f.rewind().unwrap();
            written = 0;
        }
    }
    drop(f);
    let _ = std::fs::remove_file(&ballast);
}

/// A directory on a disk, not in memory: `/var/tmp` where there is one
/// (the temp dir may be a tmpfs).
fn disk_dir(tag: &str) -> PathBuf {
    let var_tmp = Path::new("/var/tmp");
    let base = if var_tmp.is_dir() {
        var_tmp.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let d = base.join(format!("tandem-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn expected_lines() -> Vec<String> {
    let mut sums = std::collections::BTreeMap::<u32, (u64, u64)>::new();
    let mut v: Vec<String> = (0..N)
        .map(|n| {
            let k = (n % 97) as u32;
            let s = sums.entry(k).or_default();
            s.0 += 1;
            s.1 += n;
            format!("r {k} {n}")
        })
        .collect();
    v.extend(sums.iter().map(|(k, (c, s))| format!("s {k} {c} {s}")));
    v.sort();
    v
}

#[test]
fn checkpoints_beside_a_heavy_writer_are_each_accounted_for() {
    let dir = disk_dir("heavy-writer");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "heavy_writer_child",
            "--ignored",
            "--test-threads=1",
        ])
        .env(WRITER_DIR, &dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    while !dir.join("ballast").exists() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }

    let out = dir.join("out");
    let job = JobBuilder::new("heavy-writer");
    job.default_parallelism(2);
    let o = out.clone();
    job.source("source", |i| {
        let (inst, par) = (i.instance, i.parallelism);
        IterSource(
            (0..N)
                .filter(move |n| (*n as usize) % par == inst)
                .map(|n| (n, n)),
        )
    })
    // 5 s of input: about 25 checkpoints.
    .rate_limit(N as f64 / 5.0)
    .map("map", |n: u64| ((n % 97) as u32, n))
    .key_by(|p: &(u32, u64)| p.0)
    .process("keyed", |_| PerKey)
    .sink("sink", move |info| LineSink::new(&o, info, true));
    let mut cp = CheckpointConfig::every(INTERVAL);
    cp.dir = Some(dir.join("checkpoints"));
    let report = job
        .build()
        .unwrap()
        .run(&RuntimeConfig::default().cores(cores()).checkpoint(cp));

    std::fs::write(dir.join("stop"), b"").unwrap();
    let status = child.wait().unwrap();
    let report = report.unwrap();
    let c = &report.checkpoints;
    eprintln!(
        "checkpoints: {} started, {} completed ({} late), {} failed, {} pending; durations (µs) {:?}; \
         last failure {:?}; writer {status}",
        c.started, c.completed, c.late, c.failed, c.pending, c.durations_us, c.last_failure
    );
    assert!(c.started > 0, "no checkpoint was started");
    assert_eq!(c.started, c.completed + c.failed + c.pending, "{c:?}");
    assert_eq!(c.durations_us.len() as u64, c.completed, "{c:?}");
    let interval_us = INTERVAL.as_micros() as u64;
    let over = c.durations_us.iter().filter(|&&d| d > interval_us).count() as u64;
    let at_least = c.durations_us.iter().filter(|&&d| d >= interval_us).count() as u64;
    assert!(
        over <= c.late && c.late <= at_least,
        "late {} but {over} durations over the interval: {c:?}",
        c.late
    );
    if c.failed > 0 {
        assert!(
            c.last_failure.is_some(),
            "a failure without a reason: {c:?}"
        );
    }
    assert_same(&expected_lines(), &committed_lines(&out));
    std::fs::remove_dir_all(&dir).unwrap();
}
