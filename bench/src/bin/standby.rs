//! Costs of the standby's building blocks, measured on this machine:
//!
//! 1. the buffer queue: tuples/s through one writer and two readers (the
//!    primary and the standby), with eviction behind a "snapshot";
//! 2. what a waiting standby costs a busy pipeline: SPSC ring throughput
//!    alone, with a standby parked on the shared epoch (futex), and with a
//!    standby spinning on it instead;
//! 3. failure detection: report → parked standby awake, and a silent
//!    primary → standby declares the stall (beyond the timeout);
//! 4. the determinant log: what logging one chunk costs the primary
//!    (`fenced_append`: a compare-and-swap, a fence, an epoch load), alone
//!    and with a hot standby following the log on another core.
//!
//! Every flag is checked before any work starts (an error names the flag).
//! The queue and log files go to a fresh directory under `--dir` (or the
//! system temp dir, `TMPDIR`), removed at the end — after an error or a
//! panic too.
//!
//! ```text
//! cargo run -p tandem-bench --release --bin standby -- --report standby.json
//! ```

use anyhow::{bail, Context, Result};
use clap::Parser;
use serde::Serialize;
use std::hint::spin_loop;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tandem::queue::spsc;
use tandem::standby::bq::{BqConfig, BufferQueue, Full};
use tandem::standby::detlog::{fenced_append, Appended, Det, DetLog};
use tandem::standby::epoch::{Liveness, Wake};
use tandem_bench::report::{fmt_ns, write_json};

/// Buffer-queue throughput, the cost of a waiting standby, failure detection.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Tuples through the buffer queue.
    #[arg(long, default_value_t = 5_000_000)]
    tuples: u64,
    /// Bytes per tuple.
    #[arg(long, default_value_t = 64)]
    tuple_bytes: usize,
    /// Buffer queue memory bound.
    #[arg(long, default_value_t = 8 << 20)]
    bq_memory: u64,
    /// Messages through the ring per overhead measurement.
    #[arg(long, default_value_t = 50_000_000)]
    messages: u64,
    /// Failure reports / stalls timed.
    #[arg(long, default_value_t = 200)]
    samples: usize,
    /// Heartbeat timeout for the stall measurement.
    #[arg(long, default_value_t = 5)]
    timeout_ms: u64,
    /// Determinant-log entries appended per measurement.
    #[arg(long, default_value_t = 20_000_000)]
    log_entries: u64,
    /// Directory for the buffer-queue and log files (default: the temp
    /// dir); they go to a fresh subdirectory, removed at the end.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Write the figures as JSON here.
    #[arg(long)]
    report: Option<PathBuf>,
}

#[derive(Serialize)]
struct Report {
    bq_tuples_per_sec: f64,
    bq_writer_full_waits: u64,
    ring_alone_msgs_per_sec: f64,
    ring_with_parked_standby_msgs_per_sec: f64,
    ring_with_spinning_standby_msgs_per_sec: f64,
    wake_after_report_p50_ns: u64,
    wake_after_report_p99_ns: u64,
    stall_detected_past_timeout_p50_ns: u64,
    stall_detected_past_timeout_p99_ns: u64,
    timeout_ms: u64,
    detlog_append_ns: f64,
    detlog_append_followed_ns: f64,
}

/// The cores the process may use, read once before any thread is pinned
/// (a pinned thread's own mask would list only its core).
static CORES: std::sync::OnceLock<Vec<core_affinity::CoreId>> = std::sync::OnceLock::new();

fn pin(i: usize) {
    let cores = CORES.get_or_init(|| core_affinity::get_core_ids().unwrap_or_default());
    if let Some(c) = cores.get(i % cores.len().max(1)) {
        core_affinity::set_for_current(*c);
    }
}

/// The buffer queue's sizes for `--bq-memory` and `--tuple-bytes`.
fn bq_config(args: &Args) -> Result<BqConfig> {
    let cfg =
        BqConfig::for_memory(args.bq_memory, args.tuple_bytes as u64, 2).with_context(|| {
            format!(
                "--bq-memory {} cannot hold tuples of --tuple-bytes {}",
                args.bq_memory, args.tuple_bytes
            )
        })?;
    if args.tuple_bytes as u64 > cfg.max_entry() {
        bail!(
            "--tuple-bytes {} does not fit a queue of --bq-memory {}: at most {} bytes a tuple",
            args.tuple_bytes,
            args.bq_memory,
            cfg.max_entry()
        );
    }
    Ok(cfg)
}

/// Checks every flag before any work starts; the error names the flag.
fn check_args(args: &Args) -> Result<()> {
    let at_least_1 = [
        ("--tuples", args.tuples),
        ("--tuple-bytes", args.tuple_bytes as u64),
        ("--messages", args.messages),
        ("--samples", args.samples as u64),
        ("--timeout-ms", args.timeout_ms),
        ("--log-entries", args.log_entries),
    ];
    for (flag, v) in at_least_1 {
        if v == 0 {
            bail!("{flag} must be at least 1");
        }
    }
    if args.timeout_ms > 60_000 {
        bail!(
            "--timeout-ms {} is more than a minute (at most 60000)",
            args.timeout_ms
        );
    }
    bq_config(args)?;
    if let Some(d) = &args.dir {
        if !d.is_dir() {
            bail!("--dir {}: not a directory", d.display());
        }
    }
    if let Some(r) = &args.report {
        check_report_path(r)?;
    }
    Ok(())
}

/// `--report PATH` can be written: its directory exists, it is no directory.
fn check_report_path(r: &Path) -> Result<()> {
    if r.is_dir() {
        bail!("--report {}: is a directory", r.display());
    }
    let parent = r.parent().filter(|p| !p.as_os_str().is_empty());
    if let Some(p) = parent.filter(|p| !p.is_dir()) {
        bail!("--report {}: no directory {}", r.display(), p.display());
    }
    Ok(())
}

/// A directory this run made, removed with everything in it when the
/// guard is dropped: at the end, on an error, or while a panic unwinds.
struct Scratch(PathBuf);

impl Scratch {
    /// Creates `tandem-standby-bench-<pid>` in `base` (never over an
    /// existing one).
    fn create(base: &Path) -> Result<Self> {
        let dir = base.join(format!("tandem-standby-bench-{}", std::process::id()));
        std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            if e.kind() != std::io::ErrorKind::NotFound {
                eprintln!("warning: removing {}: {e}", self.0.display());
            }
        }
    }
}

fn bq_throughput(args: &Args, dir: &Path) -> Result<(f64, u64)> {
    let path = dir.join("queue.bq");
    let cfg = bq_config(args)?;
    let q = Arc::new(BufferQueue::create(&path, cfg)?);
    let n = args.tuples;
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let q = Arc::clone(&q);
            std::thread::spawn(move || {
                pin(1);
                let mut pos = 0;
                let mut sum = 0u64;
                while pos < n {
                    match q.get(pos) {
                        Some(e) => {
                            sum = sum.wrapping_add(e.bytes[0] as u64 + e.tuple_id);
                            pos += 1;
                            if pos % 64 == 0 || pos == n {
                                q.advance(r, pos);
                                if r == 1 {
                                    q.set_covered(pos);
                                }
                            }
                        }
                        None => std::thread::yield_now(),
                    }
                }
                sum
            })
        })
        .collect();
    pin(0);
    let bytes = vec![7u8; args.tuple_bytes];
    let t = Instant::now();
    let mut full = 0;
    for i in 0..n {
        while q.push(i, &bytes) == Err(Full) {
            full += 1;
            std::thread::yield_now();
        }
    }
    for r in readers {
        std::hint::black_box(r.join().expect("reader"));
    }
    let rate = n as f64 / t.elapsed().as_secs_f64();
    drop(q);
    std::fs::remove_file(&path)?;
    Ok((rate, full))
}

/// Ring throughput with an optional third thread watching a liveness cell
/// the producer beats every batch.
fn ring(args: &Args, standby: Option<bool>) -> f64 {
    let (mut tx, mut rx) = spsc::channel::<[u64; 8]>(4096);
    let live = Arc::new(Liveness::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let watcher = standby.map(|spin| {
        let live = Arc::clone(&live);
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            pin(1);
            if spin {
                while !done.load(Ordering::Relaxed) && !live.failed() {
                    spin_loop();
                }
            } else {
                let _ = live.wait_for_failure(1, Duration::from_secs(3600), || 0);
            }
        })
    });
    let n = args.messages;
    let consumer = std::thread::spawn(move || {
        pin(1);
        let mut got = 0u64;
        let mut sum = 0u64;
        while got < n {
            let k = rx.pop_batch(256, |m| sum = sum.wrapping_add(m[7]));
            if k == 0 {
                spin_loop();
            }
            got += k as u64;
        }
        sum
    });
    pin(0);
    let t = Instant::now();
    let mut i = 0u64;
    while i < n {
        while i < n && tx.stage([i, 0, 0, 0, 0, 0, 0, i]).is_ok() {
            i += 1;
            if i.is_multiple_of(256) {
                tx.commit();
                let _ = live.beat(1, i);
            }
        }
        tx.commit();
        spin_loop();
    }
    let produced = t.elapsed();
    std::hint::black_box(consumer.join().expect("consumer"));
    let rate = n as f64 / t.elapsed().as_secs_f64();
    if std::env::var_os("STANDBY_DEBUG").is_some() {
        eprintln!("produced in {produced:?}, consumed in {:?}", t.elapsed());
    }
    done.store(true, Ordering::Relaxed);
    live.stop_waiting();
    if let Some(w) = watcher {
        w.join().expect("watcher");
    }
    rate
}

fn quantile(v: &mut [u64], q: f64) -> u64 {
    v.sort_unstable();
    v[((v.len() - 1) as f64 * q) as usize]
}

fn detection(args: &Args) -> (Vec<u64>, Vec<u64>) {
    let origin = Instant::now();
    let now = move || origin.elapsed().as_nanos() as u64;
    let mut wake = Vec::new();
    let mut stall = Vec::new();
    let timeout = Duration::from_millis(args.timeout_ms);
    for _ in 0..args.samples {
        // A reported failure.
        let live = Arc::new(Liveness::new(now()));
        let l2 = Arc::clone(&live);
        let standby = std::thread::spawn(move || {
            pin(1);
            let w = l2.wait_for_failure(1, Duration::from_secs(3600), now);
            (w, now())
        });
        std::thread::sleep(Duration::from_millis(2));
        let t0 = now();
        live.report_failure(1);
        let (w, t1) = standby.join().expect("standby");
        assert_eq!(w, Wake::Failed);
        wake.push(t1.saturating_sub(t0));
        // A primary that goes silent.
        let live = Liveness::new(now());
        match live.wait_for_failure(1, timeout, now) {
            Wake::Stalled { since } => {
                stall.push(now().saturating_sub(since + timeout.as_nanos() as u64))
            }
            w => panic!("unexpected {w:?}"),
        }
    }
    (wake, stall)
}

/// Nanoseconds per determinant-log append by a primary (its epoch checked
/// after each), optionally with a follower reading every entry behind it
/// on another core, as a hot standby does.
fn detlog(args: &Args, dir: &Path, follow: bool) -> Result<f64> {
    let path = dir.join("determinants.log");
    let log = Arc::new(DetLog::create(&path, 2, 1 << 16)?);
    let live = Arc::new(Liveness::new(0));
    let n = args.log_entries;
    let cap = log.capacity();
    let read = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let follower = follow.then(|| {
        let (log, read) = (Arc::clone(&log), Arc::clone(&read));
        std::thread::spawn(move || {
            pin(1);
            let mut sum = 0u64;
            let mut seq = 0;
            while seq < n {
                match log.get(seq) {
                    Some(d) => {
                        sum += d.len();
                        seq += 1;
                        read.store(seq, Ordering::Release);
                    }
                    None => spin_loop(),
                }
            }
            sum
        })
    });
    pin(0);
    let words = log.words();
    let t = Instant::now();
    for seq in 0..n {
        // Entries stay needed until the follower read them (a recovery
        // point would cover them).
        let floor = if follow {
            let mut f = read.load(Ordering::Acquire);
            while seq >= f + cap {
                spin_loop();
                f = read.load(Ordering::Acquire);
            }
            f
        } else {
            seq.saturating_sub(cap / 2)
        };
        let d = Det::Chunk {
            lane: (seq & 1) as u32,
            n: 64,
        };
        match fenced_append(&words, seq, floor, d, 1, || live.current()) {
            Appended::Go(_) => {}
            other => anyhow::bail!("append {seq}: {other:?}"),
        }
    }
    let ns = t.elapsed().as_nanos() as f64 / n as f64;
    if let Some(f) = follower {
        std::hint::black_box(f.join().expect("follower"));
    }
    drop(log);
    std::fs::remove_file(&path)?;
    Ok(ns)
}

fn main() -> ExitCode {
    let args = Args::parse();
    match check_args(&args).and_then(|()| run(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", tandem::error::report(&*e));
            ExitCode::FAILURE
        }
    }
}

/// `n` bytes in the largest binary unit that keeps it whole or above 1.
fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / f64::from(1 << 20)),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} bytes"),
    }
}

fn run(args: &Args) -> Result<()> {
    let scratch = Scratch::create(&args.dir.clone().unwrap_or_else(std::env::temp_dir))?;
    let dir = scratch.0.as_path();
    pin(0);
    let (bq, full) = bq_throughput(args, dir)?;
    println!(
        "buffer queue: {:.2} M tuples/s ({}-byte tuples, 1 writer + 2 readers, {} bound; writer backpressured {full} times)",
        bq / 1e6,
        args.tuple_bytes,
        bytes(args.bq_memory)
    );
    let alone = ring(args, None);
    let parked = ring(args, Some(false));
    let spinning = ring(args, Some(true));
    println!("ring alone:                    {:.1} M msg/s", alone / 1e6);
    println!(
        "ring + parked standby:         {:.1} M msg/s ({:.2}x)",
        parked / 1e6,
        parked / alone
    );
    println!(
        "ring + spinning standby:       {:.1} M msg/s ({:.2}x)",
        spinning / 1e6,
        spinning / alone
    );
    let (mut wake, mut stall) = detection(args);
    let log_alone = detlog(args, dir, false)?;
    let log_followed = detlog(args, dir, true)?;
    let r = Report {
        bq_tuples_per_sec: bq,
        bq_writer_full_waits: full,
        ring_alone_msgs_per_sec: alone,
        ring_with_parked_standby_msgs_per_sec: parked,
        ring_with_spinning_standby_msgs_per_sec: spinning,
        wake_after_report_p50_ns: quantile(&mut wake, 0.5),
        wake_after_report_p99_ns: quantile(&mut wake, 0.99),
        stall_detected_past_timeout_p50_ns: quantile(&mut stall, 0.5),
        stall_detected_past_timeout_p99_ns: quantile(&mut stall, 0.99),
        timeout_ms: args.timeout_ms,
        detlog_append_ns: log_alone,
        detlog_append_followed_ns: log_followed,
    };
    println!(
        "failure report → standby awake: p50 {}  p99 {}  ({} samples)",
        fmt_ns(r.wake_after_report_p50_ns),
        fmt_ns(r.wake_after_report_p99_ns),
        args.samples
    );
    println!(
        "silent primary → stall declared: timeout {} ms + p50 {}  p99 {}",
        args.timeout_ms,
        fmt_ns(r.stall_detected_past_timeout_p50_ns),
        fmt_ns(r.stall_detected_past_timeout_p99_ns)
    );
    println!(
        "determinant log append:        {log_alone:.1} ns per chunk alone, {log_followed:.1} ns with a follower on another core ({:.2} / {:.2} ns per input at 64 inputs a chunk)",
        log_alone / 64.0,
        log_followed / 64.0
    );
    if let Some(p) = &args.report {
        write_json(p, &r)?;
    }
    Ok(())
}
