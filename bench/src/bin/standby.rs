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
//! Every flag is checked before any work starts (an error names the flag):
//! counts have maxima a real measurement never needs to pass (see each
//! flag's help), the queue must fit the memory this process may still
//! take and, with the log, the free space of the directory it goes to.
//! The queue and log files go to a fresh directory under `--dir` (or the
//! system temp dir, `TMPDIR`), removed at the end — after an error, a
//! panic or a signal too (`SIGINT`/`SIGTERM` stop every measurement within
//! milliseconds; the exit status is 128 + the signal). A directory that a
//! killed run left there is swept by the next run (`tandem::sys::scratch`).
//!
//! ```text
//! cargo run -p tandem-bench --release --bin standby -- --report standby.json
//! ```

use anyhow::{bail, ensure, Context, Result};
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
use tandem::sys::fs::human_bytes;
use tandem::sys::scratch::ScratchDir;
use tandem_bench::cli::interrupted;
use tandem_bench::cli::RaiseOnDrop;
use tandem_bench::report::{fmt_ns, write_json};
use tandem_bench::{cleanup, errln, outln};

/// The most tuples, ring messages or log entries one measurement moves:
/// at tens of millions a second, an hour or more.
const MAX_COUNT: u64 = 100_000_000_000;
/// The largest buffer queue: 64 GiB (the engine's default is 64 MiB).
const MAX_BQ_MEMORY: u64 = 64 << 30;
/// The most failure reports and stalls timed: each takes 2 ms and the
/// timeout; a hundred thousand give a p99 of a thousand samples.
const MAX_SAMPLES: usize = 100_000;
/// The longest heartbeat timeout: what is measured is the detection past
/// it, which a longer one does not change.
const MAX_TIMEOUT_MS: u64 = 1000;
/// Entries of the determinant log, and its file's size (a 4 KiB header
/// and 8 bytes an entry).
const LOG_CAPACITY: u64 = 1 << 16;
const LOG_FILE_BYTES: u64 = 4096 + 8 * LOG_CAPACITY;
/// The measured loops look for a signal between chunks of this many
/// steps (about a millisecond's worth), outside the timed step itself.
const CHUNK: u64 = 1 << 16;

/// Buffer-queue throughput, the cost of a waiting standby, failure detection.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Tuples through the buffer queue, 1 to 10^11.
    #[arg(long, default_value_t = 5_000_000)]
    tuples: u64,
    /// Bytes per tuple, 1 to a quarter of the queue's arena (the largest
    /// entry a queue of --bq-memory takes).
    #[arg(long, default_value_t = 64)]
    tuple_bytes: usize,
    /// Buffer queue memory bound in bytes: enough for a 4 KiB arena and
    /// two tuples, at most 64 GiB and the memory this process may still
    /// take (it is a mapped file in --dir, which must have room for it).
    #[arg(long, default_value_t = 8 << 20)]
    bq_memory: u64,
    /// Messages through the ring per overhead measurement, 1 to 10^11.
    #[arg(long, default_value_t = 50_000_000)]
    messages: u64,
    /// Failure reports / stalls timed, 1 to 100000.
    #[arg(long, default_value_t = 200)]
    samples: usize,
    /// Heartbeat timeout for the stall measurement, 1 to 1000 ms.
    #[arg(long, default_value_t = 5)]
    timeout_ms: u64,
    /// Determinant-log entries appended per measurement, 1 to 10^11.
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
/// Returns the directory to work in.
fn check_args(args: &Args) -> Result<PathBuf> {
    for (flag, v) in [
        ("--tuples", args.tuples),
        ("--messages", args.messages),
        ("--log-entries", args.log_entries),
    ] {
        ensure!((1..=MAX_COUNT).contains(&v), "{flag} {v}: 1 to {MAX_COUNT}");
    }
    ensure!(
        (1..=MAX_SAMPLES).contains(&args.samples),
        "--samples {}: 1 to {MAX_SAMPLES}",
        args.samples
    );
    ensure!(
        (1..=MAX_TIMEOUT_MS).contains(&args.timeout_ms),
        "--timeout-ms {}: 1 to {MAX_TIMEOUT_MS} (what is measured is the detection past the timeout)",
        args.timeout_ms
    );
    ensure!(args.tuple_bytes >= 1, "--tuple-bytes must be at least 1");
    ensure!(
        args.bq_memory <= MAX_BQ_MEMORY,
        "--bq-memory {}: at most {MAX_BQ_MEMORY} (64 GiB)",
        args.bq_memory
    );
    let cfg = bq_config(args)?;
    if let Some(free) = tandem::sys::limits::available_memory() {
        // The queue's mapping, and the writer's tuple.
        let need = cfg.file_len() + args.tuple_bytes as u64;
        ensure!(
            need <= free,
            "--bq-memory {}: the queue (and a tuple of --tuple-bytes {}) takes {}, more than the {} this process may still take",
            args.bq_memory,
            args.tuple_bytes,
            human_bytes(need),
            human_bytes(free)
        );
    }
    let base = tandem_bench::paths::work_dir("--dir", args.dir.as_deref())?;
    let need = cfg.file_len() + LOG_FILE_BYTES;
    tandem_bench::paths::check_free(
        &format!("--bq-memory {} (the queue and its log)", args.bq_memory),
        need,
        &base,
        args.dir.is_some(),
    )?;
    if let Some(r) = &args.report {
        tandem_bench::paths::output_file("--report", r)?;
    }
    Ok(base)
}

/// Whether a thread waiting on another should stop: it ended early, or a
/// signal came.
fn gone(stop: &AtomicBool) -> bool {
    stop.load(Ordering::Acquire) || interrupted()
}

/// Tuples/s through the buffer queue, and how often the writer found it
/// full.
fn bq_throughput(args: &Args, dir: &Path) -> Result<(f64, u64)> {
    let path = dir.join("queue.bq");
    let cfg = bq_config(args)?;
    let q = Arc::new(BufferQueue::create(&path, cfg)?);
    let n = args.tuples;
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let q = Arc::clone(&q);
            let stop = Arc::clone(&stop);
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
                        None if gone(&stop) => break,
                        None => {
                            // Caught up: release what was read, or a queue
                            // that holds fewer than 64 tuples never frees.
                            q.advance(r, pos);
                            if r == 1 {
                                q.set_covered(pos);
                            }
                            std::thread::yield_now()
                        }
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
    let written = {
        let mut raised = RaiseOnDrop::armed(&stop);
        let mut i = 0;
        'all: while i < n {
            if interrupted() {
                break;
            }
            for i in i..n.min(i + CHUNK) {
                while q.push(i, &bytes) == Err(Full) {
                    if interrupted() {
                        break 'all;
                    }
                    full += 1;
                    std::thread::yield_now();
                }
            }
            i = n.min(i + CHUNK);
        }
        if i == n {
            raised.disarm();
        }
        i == n
    };
    for r in readers {
        std::hint::black_box(
            r.join()
                .map_err(|_| anyhow::anyhow!("a queue reader panicked"))?,
        );
    }
    let rate = n as f64 / t.elapsed().as_secs_f64();
    drop(q);
    std::fs::remove_file(&path)?;
    ensure!(written, "interrupted");
    Ok((rate, full))
}

/// Ring throughput with an optional third thread watching a liveness cell
/// the producer beats every batch.
fn ring(args: &Args, standby: Option<bool>) -> Result<f64> {
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
    let stop = Arc::new(AtomicBool::new(false));
    let consumer = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            pin(1);
            let mut got = 0u64;
            let mut sum = 0u64;
            while got < n {
                let k = rx.pop_batch(256, |m| sum = sum.wrapping_add(m[7]));
                if k == 0 {
                    if gone(&stop) {
                        break;
                    }
                    spin_loop();
                }
                got += k as u64;
            }
            sum
        })
    };
    pin(0);
    let t = Instant::now();
    let mut i = 0u64;
    let mut raised = RaiseOnDrop::armed(&stop);
    'all: while i < n {
        while i < n && tx.stage([i, 0, 0, 0, 0, 0, 0, i]).is_ok() {
            i += 1;
            if i.is_multiple_of(256) {
                tx.commit();
                let _ = live.beat(1, i);
                if i.is_multiple_of(CHUNK) && interrupted() {
                    break 'all;
                }
            }
        }
        tx.commit();
        if interrupted() {
            break;
        }
        spin_loop();
    }
    if i == n {
        raised.disarm();
    }
    drop(raised);
    let produced = t.elapsed();
    let consumed = consumer.join();
    let rate = n as f64 / t.elapsed().as_secs_f64();
    if std::env::var_os("STANDBY_DEBUG").is_some() {
        errln!("produced in {produced:?}, consumed in {:?}", t.elapsed());
    }
    done.store(true, Ordering::Relaxed);
    live.stop_waiting();
    if let Some(w) = watcher {
        w.join()
            .map_err(|_| anyhow::anyhow!("the standby thread panicked"))?;
    }
    std::hint::black_box(consumed.map_err(|_| anyhow::anyhow!("the ring's consumer panicked"))?);
    ensure!(i == n, "interrupted");
    Ok(rate)
}

fn quantile(v: &mut [u64], q: f64) -> u64 {
    v.sort_unstable();
    v[((v.len() - 1) as f64 * q) as usize]
}

/// Report → standby awake, and silent primary → stall declared past the
/// timeout, `--samples` times each (nanoseconds).
fn detection(args: &Args) -> Result<(Vec<u64>, Vec<u64>)> {
    let origin = Instant::now();
    let now = move || origin.elapsed().as_nanos() as u64;
    let mut wake = Vec::with_capacity(args.samples);
    let mut stall = Vec::with_capacity(args.samples);
    let timeout = Duration::from_millis(args.timeout_ms);
    for _ in 0..args.samples {
        ensure!(!interrupted(), "interrupted");
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
        let (w, t1) = standby
            .join()
            .map_err(|_| anyhow::anyhow!("the standby thread panicked"))?;
        ensure!(
            w == Wake::Failed,
            "a reported failure woke the standby as {w:?}"
        );
        wake.push(t1.saturating_sub(t0));
        // A primary that goes silent.
        let live = Liveness::new(now());
        match live.wait_for_failure(1, timeout, now) {
            Wake::Stalled { since } => {
                stall.push(now().saturating_sub(since + timeout.as_nanos() as u64))
            }
            w => bail!("a silent primary woke the standby as {w:?}"),
        }
    }
    Ok((wake, stall))
}

/// Nanoseconds per determinant-log append by a primary (its epoch checked
/// after each), optionally with a follower reading every entry behind it
/// on another core, as a hot standby does.
fn detlog(args: &Args, dir: &Path, follow: bool) -> Result<f64> {
    let path = dir.join("determinants.log");
    let log = Arc::new(DetLog::create(&path, 2, LOG_CAPACITY)?);
    let live = Arc::new(Liveness::new(0));
    let n = args.log_entries;
    let cap = log.capacity();
    let read = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let follower = follow.then(|| {
        let (log, read, stop) = (Arc::clone(&log), Arc::clone(&read), Arc::clone(&stop));
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
                    None if gone(&stop) => break,
                    None => spin_loop(),
                }
            }
            sum
        })
    });
    pin(0);
    let words = log.words();
    let t = Instant::now();
    let mut raised = RaiseOnDrop::armed(&stop);
    let mut start = 0;
    'all: while start < n {
        if interrupted() {
            break;
        }
        let end = n.min(start + CHUNK);
        for seq in start..end {
            // Entries stay needed until the follower read them (a recovery
            // point would cover them).
            let floor = if follow {
                let mut f = read.load(Ordering::Acquire);
                while seq >= f + cap {
                    if gone(&stop) {
                        break 'all;
                    }
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
                other => bail!("append {seq}: {other:?}"),
            }
        }
        start = end;
    }
    let ns = t.elapsed().as_nanos() as f64 / n as f64;
    if start == n {
        raised.disarm();
    }
    drop(raised);
    if let Some(f) = follower {
        std::hint::black_box(
            f.join()
                .map_err(|_| anyhow::anyhow!("the log follower panicked"))?,
        );
    }
    drop(log);
    std::fs::remove_file(&path)?;
    ensure!(start == n, "interrupted");
    Ok(ns)
}

fn main() -> ExitCode {
    tandem_bench::cli::main(1, || {
        let args: Args = tandem_bench::cli::parse();
        let base = check_args(&args)?;
        run(&args, &base)?;
        Ok(ExitCode::SUCCESS)
    })
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

/// The measurements, in a scratch directory of this run's under `base`.
fn run(args: &Args, base: &Path) -> Result<()> {
    // Directories of killed runs (their lock free) go first.
    tandem::sys::scratch::sweep(base);
    let scratch = ScratchDir::unique(base, "standby_bench")
        .with_context(|| format!("creating a directory in {}", base.display()))?;
    let dir = scratch.path();
    cleanup::add(dir);
    pin(0);
    let (bq, full) = bq_throughput(args, dir)?;
    outln!(
        "buffer queue: {:.2} M tuples/s ({}-byte tuples, 1 writer + 2 readers, {} bound; writer backpressured {full} times)",
        bq / 1e6,
        args.tuple_bytes,
        bytes(args.bq_memory)
    )?;
    let alone = ring(args, None)?;
    let parked = ring(args, Some(false))?;
    let spinning = ring(args, Some(true))?;
    outln!("ring alone:                    {:.1} M msg/s", alone / 1e6)?;
    outln!(
        "ring + parked standby:         {:.1} M msg/s ({:.2}x)",
        parked / 1e6,
        parked / alone
    )?;
    outln!(
        "ring + spinning standby:       {:.1} M msg/s ({:.2}x)",
        spinning / 1e6,
        spinning / alone
    )?;
    let (mut wake, mut stall) = detection(args)?;
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
    outln!(
        "failure report → standby awake: p50 {}  p99 {}  ({} samples)",
        fmt_ns(r.wake_after_report_p50_ns),
        fmt_ns(r.wake_after_report_p99_ns),
        args.samples
    )?;
    outln!(
        "silent primary → stall declared: timeout {} ms + p50 {}  p99 {}",
        args.timeout_ms,
        fmt_ns(r.stall_detected_past_timeout_p50_ns),
        fmt_ns(r.stall_detected_past_timeout_p99_ns)
    )?;
    outln!(
        "determinant log append:        {log_alone:.1} ns per chunk alone, {log_followed:.1} ns with a follower on another core ({:.2} / {:.2} ns per input at 64 inputs a chunk)",
        log_alone / 64.0,
        log_followed / 64.0
    )?;
    scratch.remove()?;
    if let Some(p) = &args.report {
        write_json("--report", p, &r)?;
    }
    Ok(())
}
