//! Snapshot write and restore: the engine's checkpoint path against raw
//! io_uring `O_DIRECT` writes of the same bytes, in one run on one disk.
//!
//! For each size S (`--sizes-mb`), a `KeyedState<u64, (u64, u64)>` whose
//! archive is about S MB (24 bytes per key) is built once. Each run then
//! measures, alternating which goes first:
//!
//! - **engine**: `to_snapshot_bytes` (rkyv, timed separately as
//!   serialization), then `SnapshotStore::submit(..).wait()`: payload and
//!   header written through the store's io_uring thread, file and directory
//!   fsynced, manifest written, fsynced, renamed, directory fsynced. Rate =
//!   payload bytes / (submit → published).
//! - **raw**: the same number of bytes (rounded up to 4096) from one
//!   4096-aligned buffer into a fresh `O_DIRECT` file with a minimal io_uring
//!   loop (1 MiB writes, 16 in flight, the engine's settings), then
//!   `IORING_OP_FSYNC`. Rate = bytes / (open → fsync done).
//!
//! Last, `--small-sets` checkpoint sets of `--small-files` 1 KB snapshots
//! each (a small job's checkpoints) are published 200 ms apart and their
//! publish times reported (p50/p99/max).
//!
//! The median of `--runs` per size is reported. Then the largest snapshot
//! (the 500 MB one by default) is restored: `SnapshotFile::open` (map with
//! populate, header and length checks, XXH3 of the payload) plus rkyv's
//! checked access — first right after the write, when `O_DIRECT` has left
//! nothing in the page cache (cold), then again (warm).
//!
//! Every flag is checked before any work starts (an error names the flag):
//! counts have maxima a real measurement never needs to pass (see each
//! flag's help), and the largest size must fit the memory this process may
//! still take (about 8 times the size: the state, its archive, the raw
//! buffer, the restore's mapping) and the free space of `--dir` (3 times:
//! the retained snapshot, the new one, the raw file). Everything is written
//! in a fresh directory, `tandem-snapshot_bench-<pid>-…` under `--dir` (or
//! the system temp dir), removed at the end — after an error, a panic or a
//! signal too (`SIGINT`/`SIGTERM` stop the run between its steps; the exit
//! status is 128 + the signal) — so that `--dir` holds nothing new
//! afterwards. A directory that a killed run left there is swept by the
//! next run (`tandem::sys::scratch`).
//!
//! ```text
//! cargo run -p tandem-bench --release --bin snapshot -- --report snapshot.json
//! ```

use std::{
    fs::{self, File, OpenOptions},
    os::{fd::AsRawFd, unix::fs::OpenOptionsExt},
    path::{Path, PathBuf},
    process::ExitCode,
    time::{Duration, Instant},
};
use tandem_bench::report::median;

use anyhow::{bail, ensure, Context, Result};
use clap::Parser;
use io_uring::{opcode, types, IoUring};
use serde::Serialize;
use tandem::{
    checkpoint::{OperatorSnapshot, Position, SnapshotStore},
    state::KeyedState,
    sys::{
        fs::human_bytes,
        scratch::ScratchDir,
        uring::{AlignedBuf, BLOCK},
    },
};
use tandem_bench::cli::interrupted;
use tandem_bench::{cleanup, errln, outln};

/// The largest snapshot size, in MB: 100 GB.
const MAX_SIZE_MB: u64 = 100_000;
/// The most sizes one run measures.
const MAX_SIZES: usize = 100;
/// The most runs per size: each syncs the disk and pauses twice.
const MAX_RUNS: usize = 100;
/// The most small checkpoint sets: 200 ms apart, some four minutes.
const MAX_SMALL_SETS: usize = 1000;
/// The most snapshots per small set: a job of a thousand operator
/// instances (each set is one checkpoint's publish, which a signal does
/// not cut short: ten thousand fsynced files take seconds).
const MAX_SMALL_FILES: u32 = 1000;
/// Memory the largest size takes, as a multiple of its bytes: the keyed
/// state (a hash table, up to twice its entries' bytes and more), its
/// archive, the raw baseline's buffer and the restore's mapping.
const MEMORY_PER_BYTE: u64 = 8;
/// Disk the largest size takes, as a multiple of its bytes: the retained
/// snapshot, the one being written and the raw baseline's file.
const DISK_PER_BYTE: u64 = 3;

/// Snapshot write rate (engine vs raw io_uring) and restore time.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Snapshot sizes in MB (10^6 bytes) of keyed state: 1 to 100 sizes,
    /// each 1 to 100000, the largest within the memory this process may
    /// still take (about 8 times the size) and the free space of --dir
    /// (3 times).
    #[arg(long, value_delimiter = ',', default_values_t = [100, 500])]
    sizes_mb: Vec<u64>,
    /// Directory to write in (default: the system temp dir): in a fresh
    /// subdirectory, removed with everything written at the end.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Runs per size and path, 1 to 100; the median is reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Write the results as JSON to this file.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Then publish this many checkpoint sets of small snapshots, 200 ms
    /// apart, and report their publish times (0: skip; at most 1000).
    #[arg(long, default_value_t = 25)]
    small_sets: usize,
    /// Snapshots per small set (1 KB each; a job's operator instances),
    /// 1 to 1000.
    #[arg(long, default_value_t = 12)]
    small_files: u32,
}

type State = KeyedState<u64, (u64, u64)>;
const ENTRY_BYTES: u64 = 24;
const CHUNK: usize = 1 << 20;
const DEPTH: usize = 16;
/// Keys inserted between looks for a signal.
const CHUNK_KEYS: usize = 1 << 16;

#[derive(Serialize)]
struct SizeResult {
    size_mb: u64,
    payload_bytes: u64,
    serialize_ms: f64,
    engine_mbps: f64,
    raw_mbps: f64,
    ratio: f64,
    engine_runs_mbps: Vec<f64>,
    raw_runs_mbps: Vec<f64>,
}

#[derive(Serialize)]
struct Report {
    filesystem: String,
    dir: String,
    backend: String,
    /// Figures of the largest size.
    engine_mbps: f64,
    raw_mbps: f64,
    ratio: f64,
    restore_500mb_ms: f64,
    restore_size_mb: u64,
    restore_cold_ms: f64,
    restore_open_cold_ms: f64,
    restore_validate_cold_ms: f64,
    restore_warm_ms: f64,
    sizes: Vec<SizeResult>,
    /// Small sets: snapshots per set and publish time percentiles (ms).
    small_files: u32,
    small_sets: usize,
    small_publish_p50_ms: f64,
    small_publish_p99_ms: f64,
    small_publish_max_ms: f64,
}

fn main() -> ExitCode {
    tandem_bench::cli::main(1, || {
        let args: Args = tandem_bench::cli::parse();
        let base = check_args(&args)?;
        real_main(&args, &base)?;
        Ok(ExitCode::SUCCESS)
    })
}

fn real_main(args: &Args, base: &Path) -> Result<()> {
    // Directories of killed runs (their lock free) go first.
    tandem::sys::scratch::sweep(base);
    let report = {
        let scratch = ScratchDir::unique(base, "snapshot_bench")
            .with_context(|| format!("creating a directory in {}", base.display()))?;
        cleanup::add(scratch.path());
        check_o_direct(scratch.path())?;
        let report = run(args, scratch.path(), base)?;
        scratch.remove()?;
        report
    };
    if let Some(path) = &args.report {
        tandem_bench::report::write_json("--report", path, &report)?;
    }
    Ok(())
}

/// Checks every flag before any work starts (the error names the flag);
/// returns the directory to work under.
fn check_args(args: &Args) -> Result<PathBuf> {
    ensure!(
        !args.sizes_mb.is_empty(),
        "--sizes-mb needs at least one size"
    );
    ensure!(
        args.sizes_mb.len() <= MAX_SIZES,
        "--sizes-mb: {} sizes, at most {MAX_SIZES}",
        args.sizes_mb.len()
    );
    if let Some(&bad) = args
        .sizes_mb
        .iter()
        .find(|&&mb| !(1..=MAX_SIZE_MB).contains(&mb))
    {
        bail!("--sizes-mb: every size must be 1 to {MAX_SIZE_MB} MB (got {bad})");
    }
    ensure!(
        (1..=MAX_RUNS).contains(&args.runs),
        "--runs {}: 1 to {MAX_RUNS}",
        args.runs
    );
    ensure!(
        args.small_sets <= MAX_SMALL_SETS,
        "--small-sets {}: 0 to {MAX_SMALL_SETS}",
        args.small_sets
    );
    if args.small_sets > 0 && args.small_files == 0 {
        bail!(
            "--small-files must be at least 1 with --small-sets {} (--small-sets 0 skips them)",
            args.small_sets
        );
    }
    ensure!(
        args.small_files <= MAX_SMALL_FILES,
        "--small-files {}: 1 to {MAX_SMALL_FILES}",
        args.small_files
    );
    let base = tandem_bench::paths::work_dir("--dir", args.dir.as_deref())?;
    // The largest size bounds both (at most 10^11 bytes: no overflow).
    let largest = *args.sizes_mb.iter().max().expect("not empty");
    let bytes = largest * 1_000_000;
    if let Some(free) = tandem::sys::limits::available_memory() {
        ensure!(
            bytes * MEMORY_PER_BYTE <= free,
            "--sizes-mb {largest}: a snapshot of {largest} MB takes about {} of memory, more than the {} this process may still take",
            human_bytes(bytes * MEMORY_PER_BYTE),
            human_bytes(free)
        );
    }
    tandem_bench::paths::check_free(
        &format!("--sizes-mb {largest}"),
        bytes * DISK_PER_BYTE + u64::from(args.small_files) * 8192,
        &base,
        args.dir.is_some(),
    )?;
    if let Some(r) = &args.report {
        tandem_bench::paths::output_file("--report", r)?;
    }
    Ok(base)
}

/// The raw baseline writes with `O_DIRECT`: a file system without it
/// (tmpfs) is refused before anything is measured.
fn check_o_direct(dir: &Path) -> Result<()> {
    let probe = dir.join("o_direct.probe");
    let r = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_DIRECT)
        .open(&probe);
    let _ = fs::remove_file(&probe);
    r.map(drop).with_context(|| {
        format!(
            "--dir {}: {} does not take O_DIRECT writes, which the raw baseline needs",
            dir.parent().unwrap_or(dir).display(),
            filesystem_of(dir)
        )
    })
}

/// The measurements, written in `dir` (a fresh directory under `base`).
fn run(args: &Args, dir: &Path, base: &Path) -> Result<Report> {
    let fs_name = filesystem_of(dir);
    outln!("dir {} ({fs_name})", dir.display())?;
    let store = SnapshotStore::open(dir.join("store"), 1)?;
    if let Some(note) = store.backend_note() {
        outln!("note: {note}")?;
    }
    let max_bytes = args.sizes_mb.iter().max().unwrap() * 1_000_000 + 2 * BLOCK as u64;
    let raw_src: &'static AlignedBuf = Box::leak(Box::new(raw_buffer(max_bytes as usize)?));
    let mut sizes = Vec::new();
    let mut backend = String::new();
    let mut id = 0;
    let mut largest: Option<(u64, tandem::checkpoint::Manifest)> = None;
    for &mb in &args.sizes_mb {
        let keys = mb * 1_000_000 / ENTRY_BYTES;
        let mut state = State::default();
        for chunk in (0..keys).step_by(CHUNK_KEYS) {
            ensure!(!interrupted(), "interrupted");
            for k in chunk..keys.min(chunk + CHUNK_KEYS as u64) {
                *state.get_or_default(&k) = (k.wrapping_mul(0x9E37_79B9_7F4A_7C15), k);
            }
        }
        let (mut engine, mut raw, mut ser) = (Vec::new(), Vec::new(), Vec::new());
        let mut payload_bytes = 0;
        for r in 0..args.runs {
            let mut measure_engine = || -> Result<()> {
                let t = Instant::now();
                let bytes = state.to_snapshot_bytes()?;
                ser.push(t.elapsed());
                payload_bytes = bytes.len() as u64;
                id += 1;
                let snap = OperatorSnapshot {
                    operator: "state".into(),
                    instance: 0,
                    positions: vec![Position {
                        partition: 0,
                        next_seq: keys,
                    }],
                    bytes,
                };
                let t = Instant::now();
                let published = store.submit(id, vec![snap]).wait()?;
                let total = t.elapsed();
                engine.push(mbps(payload_bytes, published.publish_time));
                errln!(
                    "  engine {mb} MB: files written+fsynced {:.1} ms, published {:.1} ms, returned (after retention) {:.1} ms",
                    ms(published.write_time),
                    ms(published.publish_time),
                    ms(total)
                );
                backend = published.backend.to_string();
                largest = Some((mb, published.manifest));
                Ok(())
            };
            let mut measure_raw = || -> Result<()> {
                let n = state.len() as u64 * ENTRY_BYTES + 8;
                let path = dir.join("raw.bin");
                let d = raw_write(&path, raw_src, n as usize)?;
                fs::remove_file(&path)?;
                raw.push(mbps(n, d));
                Ok(())
            };
            // Deletions are discarded (TRIM) in the background on `discard`
            // mounts; settle before each measurement so neither path pays
            // for the other's (or its own previous run's) deletes.
            ensure!(!interrupted(), "interrupted");
            if r % 2 == 0 {
                settle();
                measure_engine()?;
                settle();
                measure_raw()?;
            } else {
                settle();
                measure_raw()?;
                settle();
                measure_engine()?;
            }
        }
        let res = SizeResult {
            size_mb: mb,
            payload_bytes,
            serialize_ms: median(ser.iter().map(|d| d.as_secs_f64() * 1e3).collect()),
            engine_mbps: median(engine.clone()),
            raw_mbps: median(raw.clone()),
            ratio: median(engine.clone()) / median(raw.clone()),
            engine_runs_mbps: engine,
            raw_runs_mbps: raw,
        };
        outln!(
            "{mb:>5} MB  serialize {:>7.1} ms  engine {:>7.0} MB/s  raw io_uring {:>7.0} MB/s  ratio {:.3}   runs engine {:?} raw {:?}",
            res.serialize_ms,
            res.engine_mbps,
            res.raw_mbps,
            res.ratio,
            res.engine_runs_mbps.iter().map(|x| x.round()).collect::<Vec<_>>(),
            res.raw_runs_mbps.iter().map(|x| x.round()).collect::<Vec<_>>(),
        )?;
        sizes.push(res);
    }

    // Restore of the last written snapshot of the largest size (cold: its
    // pages were written with O_DIRECT and are not cached).
    let (restore_mb, manifest) = largest.context("nothing written")?;
    let entry = &manifest.files[0];
    let restore = |label: &str| -> Result<(f64, f64, f64)> {
        ensure!(!interrupted(), "interrupted");
        let t = Instant::now();
        let file = store.restore(&manifest, entry)?;
        let open = t.elapsed();
        let archived = file.access::<State>()?;
        let total = t.elapsed();
        let keys = archived.len();
        outln!(
            "restore {restore_mb} MB ({label}): {:.1} ms = map+verify {:.1} ms + rkyv checked access {:.1} ms ({keys} keys)",
            ms(total),
            ms(open),
            ms(total - open)
        )?;
        Ok((ms(total), ms(open), ms(total - open)))
    };
    let (cold, open_cold, validate_cold) = restore("cold")?;
    let (warm, _, _) = restore("warm")?;
    let small = small_sets(&store, id, args.small_sets, args.small_files)?;
    let last = sizes.last().unwrap();
    Ok(Report {
        filesystem: fs_name,
        dir: base.display().to_string(),
        backend,
        engine_mbps: last.engine_mbps,
        raw_mbps: last.raw_mbps,
        ratio: last.ratio,
        restore_500mb_ms: cold,
        restore_size_mb: restore_mb,
        restore_cold_ms: cold,
        restore_open_cold_ms: open_cold,
        restore_validate_cold_ms: validate_cold,
        restore_warm_ms: warm,
        sizes,
        small_files: args.small_files,
        small_sets: args.small_sets,
        small_publish_p50_ms: small[0],
        small_publish_p99_ms: small[1],
        small_publish_max_ms: small[2],
    })
}

/// Publishes `sets` checkpoints of `files` 1 KB snapshots each, 200 ms
/// apart (a small job's checkpoints), after checkpoint `after`; returns the
/// publish time p50, p99 and max in ms (submit → durable manifest).
fn small_sets(store: &SnapshotStore, after: u64, sets: usize, files: u32) -> Result<[f64; 3]> {
    if sets == 0 {
        return Ok([0.0; 3]);
    }
    let mut took = Vec::with_capacity(sets);
    for k in 0..sets as u64 {
        ensure!(!interrupted(), "interrupted");
        let id = after + 1 + k;
        let snaps = (0..files)
            .map(|i| OperatorSnapshot {
                operator: format!("op{i}"),
                instance: 0,
                positions: vec![Position {
                    partition: 0,
                    next_seq: id,
                }],
                bytes: tandem::checkpoint::SnapshotBytes::from_payload(&[id as u8; 1000]),
            })
            .collect();
        let published = store.submit(id, snaps).wait()?;
        took.push(ms(published.publish_time));
        std::thread::sleep(Duration::from_millis(200));
    }
    took.sort_by(f64::total_cmp);
    let q = |p: f64| took[((took.len() - 1) as f64 * p).round() as usize];
    let r = [q(0.5), q(0.99), took[took.len() - 1]];
    outln!(
        "small sets: {sets} × {files} snapshots of 1 KB, 200 ms apart: publish p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms",
        r[0], r[1], r[2]
    )?;
    Ok(r)
}

/// The raw baseline's source: `len` bytes, 0xA5 every 64th and zero
/// between, filled a chunk at a time so that a signal is seen within one.
fn raw_buffer(len: usize) -> Result<AlignedBuf> {
    let mut pattern = vec![0u8; CHUNK];
    pattern.iter_mut().step_by(64).for_each(|x| *x = 0xA5);
    let mut b = AlignedBuf::with_capacity(len);
    while b.len() < len {
        ensure!(!interrupted(), "interrupted");
        b.extend_from_slice(&pattern[..CHUNK.min(len - b.len())]);
    }
    Ok(b)
}

/// The baseline: `len` bytes (rounded up to 4096) to a new `O_DIRECT` file
/// with plain io_uring writes, then fsync; time from open to fsync done.
///
/// `src` is `'static` (leaked once) so that no early return can free memory
/// the kernel is still reading; the kernel holds its own reference to the
/// file for each in-flight write, so dropping `File` is harmless.
fn raw_write(path: &Path, src: &'static AlignedBuf, len: usize) -> Result<Duration> {
    let buf = &src[..len.div_ceil(BLOCK) * BLOCK];
    let mut ring = IoUring::new(2 * DEPTH as u32)?;
    let t = Instant::now();
    let file: File = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .with_context(|| format!("open {} O_DIRECT", path.display()))?;
    let fd = types::Fd(file.as_raw_fd());
    let (mut next, mut inflight) = (0usize, 0usize);
    loop {
        // After a signal, no new write: those in flight are waited for.
        while next < buf.len() && inflight < DEPTH && !interrupted() {
            let n = CHUNK.min(buf.len() - next);
            let sqe = opcode::Write::new(fd, buf[next..].as_ptr(), n as u32)
                .offset(next as u64)
                .build()
                .user_data(n as u64);
            // SAFETY: `buf` borrows a leaked ('static) allocation, so it is
            // valid for as long as the kernel may read it.
            unsafe { ring.submission().push(&sqe) }.map_err(|_| anyhow::anyhow!("sq full"))?;
            next += n;
            inflight += 1;
        }
        if inflight == 0 {
            break;
        }
        ring.submit_and_wait(1)?;
        let done: Vec<(u64, i32)> = ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        for (want, res) in done {
            inflight -= 1;
            if res < 0 || res as u64 != want {
                bail!("raw write: result {res} for {want} bytes");
            }
        }
    }
    ensure!(next == buf.len(), "interrupted");
    let sqe = opcode::Fsync::new(fd).build();
    // SAFETY: FSYNC references no memory; `file` outlives the wait.
    unsafe { ring.submission().push(&sqe) }.map_err(|_| anyhow::anyhow!("sq full"))?;
    ring.submit_and_wait(1)?;
    let res = ring.completion().next().map(|c| c.result()).unwrap_or(-1);
    if res < 0 {
        bail!("raw fsync: {res}");
    }
    Ok(t.elapsed())
}

/// File system type of `dir`, from the longest matching mount point.
fn filesystem_of(dir: &Path) -> String {
    let dir = fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (dev, at, ty) = (f.next()?, f.next()?, f.next()?);
            dir.starts_with(at)
                .then(|| (at.len(), format!("{ty} on {dev}")))
        })
        .max_by_key(|(n, _)| *n)
        .map_or_else(|| "unknown".into(), |(_, s)| s)
}

/// `sync(2)`, then a short pause for the device to finish background work.
fn settle() {
    // SAFETY: `sync` takes no arguments and cannot fail.
    unsafe { libc::sync() };
    std::thread::sleep(Duration::from_millis(300));
}

fn mbps(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
