//! Keyed state larger than memory: a keyed count over `--keys` distinct
//! keys (20 M by default, ~2.6 GB of archived state) on the disk state
//! backend, under a memory limit (`--memory-limit-mb`, a cgroup the
//! benchmark makes), with `--panics` injected panics under restart-all,
//! against the same job on the in-memory backend without a limit and
//! without faults.
//!
//! Each run is a child process (the limit applies to the disk run's
//! process only). The job: `--cores` source partitions, partition `p`
//! the records whose key is `p` modulo their number (so that what each
//! output says is a function of the input); record `r` is key `r / 2` (a
//! new key) when `r` is even, else
//! a key placed at most `--recent` keys before it (keys are visited again
//! while they are recent, as sessions are); `key_by` key; a keyed count
//! whose state is the count, the sum of the records' numbers and
//! `--payload-bytes` bytes (what a real state carries beside a count);
//! one output line per record, `key count sum`, into a two-phase-commit
//! file sink. Checkpoints every `--checkpoint-interval-ms`, incremental.
//!
//! Both children run with `MALLOC_ARENA_MAX=2` unless the environment sets
//! it (see the README: what the disk backend asks of the allocator).
//!
//! It prints, per run, the records per second (the job's records over its
//! elapsed time, restarts and restores included), the peak memory of the
//! process (the cgroup's peak for the limited run), the checkpoints'
//! bytes, and whether the two runs' committed output is identical (line
//! count and an order-independent digest of the lines).
//!
//! ```text
//! cargo run -p tandem-bench --release --bin disk_state -- --keys 20000000
//! ```

use anyhow::{bail, ensure, Context, Result};
use clap::Parser;
use serde::{Deserialize, Serialize};
use std::hash::{Hash, Hasher};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tandem::sinks::transactional::TransactionalFile;
use tandem::state::{DiskBackend, StateBackend};
use tandem::{
    CheckpointConfig, IterSource, JobBuilder, KeyedProcess, Output, Record, RestartStrategy,
    RuntimeConfig, TupleId,
};
use tandem_bench::outln;
use tandem_fault_inject::{FaultInjector, Schedule};

#[derive(Parser, Debug, Clone, Serialize, Deserialize)]
#[command(
    about = "A keyed count over more state than memory: the disk backend under a memory limit \
             with injected panics, against the in-memory backend"
)]
struct Args {
    /// Distinct keys (1,000 to 1,000,000,000); the job reads twice as many
    /// records.
    #[arg(long, default_value_t = 20_000_000)]
    keys: u64,
    /// Bytes each key's state carries beside its count and sum (0 to 4096).
    #[arg(long, default_value_t = 96)]
    payload_bytes: usize,
    /// How far back (in keys) a revisit may reach (1 to 10,000,000).
    #[arg(long, default_value_t = 50_000)]
    recent: u64,
    /// Memory limit of the disk run's process, in MiB (0: none; at least
    /// 128). A cgroup (v2, else v1's memory controller) made for the run.
    #[arg(long, default_value_t = 512)]
    memory_limit_mb: u64,
    /// Each keyed instance's cache of the disk backend, in MiB (1 to 65536;
    /// see `DiskBackend::cache_bytes`). The default leaves room, under the
    /// default limit, for the stores' write buffers and filters and for
    /// the page cache they read through.
    #[arg(long, default_value_t = 32)]
    cache_mb: usize,
    /// Panics injected into the keyed operator of the disk run, spread
    /// evenly over the input (0 to 100), under restart-all.
    #[arg(long, default_value_t = 3)]
    panics: u32,
    /// Time between two checkpoints' starts, in ms (10 to 600000).
    #[arg(long, default_value_t = 5_000)]
    checkpoint_interval_ms: u64,
    /// Worker cores and source partitions (1 to 64).
    #[arg(long, default_value_t = 2)]
    cores: usize,
    /// Directory for the runs' state, checkpoints and output (default: the
    /// system temp dir), in a fresh subdirectory removed at the end.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Skip the in-memory run (nothing to compare the output with).
    #[arg(long)]
    no_memory_run: bool,
    /// Write the results as JSON to this file.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Internal: run one job in this process ("memory" or "disk").
    #[arg(long, hide = true)]
    child: Option<String>,
    /// Internal: the child's run directory.
    #[arg(long, hide = true)]
    child_dir: Option<PathBuf>,
}

/// What a child run measured.
#[derive(Debug, Default, Serialize, Deserialize)]
struct RunResult {
    backend: String,
    records: u64,
    seconds: f64,
    records_per_sec: f64,
    restarts: usize,
    /// Each recovery: the operator, its cause, and the restore and first
    /// output times (ms).
    recoveries: Vec<String>,
    panics_fired: u64,
    /// Peak resident memory of the process (VmHWM), bytes.
    peak_rss: u64,
    /// Peak memory of the run's cgroup (page cache included), bytes.
    cgroup_peak: Option<u64>,
    checkpoints: u64,
    checkpoint_bytes_first: u64,
    checkpoint_bytes_after_first: u64,
    state_bytes_final: u64,
    /// What a restore of the newest checkpoint reads: its last whole
    /// archives and the deltas after them.
    restore_bytes_final: u64,
    /// The disk run's stores on disk at their largest (compressed), bytes.
    store_peak: u64,
    /// Committed output lines, and their order-independent digest.
    lines: u64,
    digest: String,
}

/// The key of record `r`.
fn key_of(r: u64, recent: u64) -> u64 {
    let newest = r / 2;
    if r.is_multiple_of(2) {
        return newest;
    }
    let h = r.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (r >> 29);
    newest - (h >> 17) % recent.min(newest + 1)
}

/// The keyed count.
struct Count {
    payload: usize,
}

impl KeyedProcess<u64, (u64, u64), Line> for Count {
    type State = (u64, u64, Vec<u8>);
    fn process(
        &mut self,
        key: &u64,
        s: &mut (u64, u64, Vec<u8>),
        r: Record<(u64, u64)>,
        out: &mut Output<'_, Line>,
    ) {
        if s.0 == 0 {
            // What the key carries: bytes of its own.
            let seed = key.wrapping_mul(0x2545_F491_4F6C_DD1D);
            s.2 = (0..self.payload)
                .map(|i| (seed >> ((i % 8) * 8)) as u8 ^ i as u8)
                .collect();
        }
        s.0 += 1;
        s.1 = s.1.wrapping_add(r.value.0);
        let check = s.2.iter().fold(0u8, |a, b| a ^ b);
        out.emit(Line(*key, s.0, s.1, check));
    }
}

/// One output line: key, count, sum, and a check byte of the payload.
#[derive(Clone, Debug)]
struct Line(u64, u64, u64, u8);

impl std::fmt::Display for Line {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} {} {}", self.0, self.1, self.2, self.3)
    }
}

fn child(args: &Args, which: &str, dir: &Path) -> Result<RunResult> {
    let disk = which == "disk";
    let records = args.keys * 2;
    let parts = args.cores as u64;
    let recent = args.recent;
    let job = JobBuilder::new("disk_state");
    job.default_parallelism(args.cores);
    let payload = args.payload_bytes;
    let out = dir.join("out");
    job.source("src", move |i| {
        let p = i.instance as u64;
        // A key's records all come from one partition: what each output
        // says (the key's count so far) is then a function of the input.
        IterSource(
            (0..records)
                .map(move |r| (r, key_of(r, recent)))
                .filter(move |&(_, k)| k % parts == p)
                .map(|(r, k)| ((r, k), r)),
        )
    })
    .key_by(|x: &(u64, u64)| x.1)
    .process("keyed", move |_| Count { payload })
    .sink("sink", move |info| {
        TransactionalFile::for_instance(&out, info).expect("the output directory")
    });
    let job = job.build()?;
    let mut cp = CheckpointConfig::every(Duration::from_millis(args.checkpoint_interval_ms));
    cp.dir = Some(dir.join("checkpoints"));
    let mut cfg = RuntimeConfig::default()
        .cores(args.cores)
        .checkpoint(cp)
        .restart(RestartStrategy::FixedDelay {
            attempts: args.panics + 5,
            delay: Duration::ZERO,
        })
        // A restore loads the state before the operator starts, and a
        // store's compaction can hold a worker: no stall within 10 s.
        .heartbeat_timeout(Duration::from_secs(10));
    cfg.run_dir = Some(dir.join("run"));
    let mut injector = None;
    if disk {
        cfg = cfg.state_backend(StateBackend::Disk(DiskBackend {
            cache_bytes: args.cache_mb << 20,
            dir: Some(dir.join("state")),
        }));
        if args.panics > 0 {
            let schedule: Schedule = format!("panic@keyed:~{}", args.panics).parse()?;
            let i = Arc::new(
                FaultInjector::builder(&schedule)
                    .records(records)
                    // Record n, by its position in its partition: about
                    // the n-th of the input.
                    .resolver(move |n| TupleId::new((n % parts) as u32, n / parts))
                    .build()?,
            );
            cfg = cfg.probes(Arc::clone(&i) as Arc<dyn tandem::runtime::probe::ProbeFactory>);
            injector = Some(i);
        }
    }
    tandem_fault_inject::quiet_injected_panics();
    // The stores' size on disk, sampled every second.
    let peak = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (peak, stop, state) = (Arc::clone(&peak), Arc::clone(&stop), dir.join("state"));
        std::thread::spawn(move || {
            let mut next = std::time::Instant::now();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if std::time::Instant::now() >= next {
                    peak.fetch_max(dir_bytes(&state), std::sync::atomic::Ordering::Relaxed);
                    next += Duration::from_secs(1);
                }
                // Short naps: the run's end (or a signal's) is not held up.
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let report = tandem_bench::cli::run_job(job, &cfg);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = sampler.join();
    let report = report?;
    let secs = report.elapsed.as_secs_f64();
    let (lines, digest) = digest(&dir.join("out"))?;
    let cp = &report.checkpoints;
    Ok(RunResult {
        backend: which.to_string(),
        records,
        seconds: secs,
        records_per_sec: records as f64 / secs,
        restarts: report.recovery.len(),
        recoveries: report
            .recovery
            .iter()
            .map(|r| {
                format!(
                    "{}[{}]: {}{}; restore {:.1} ms, first output {:.1} ms",
                    r.operator,
                    r.instance,
                    r.cause,
                    if r.unprovoked { " (unprovoked)" } else { "" },
                    r.restore_us.unwrap_or(0) as f64 / 1e3,
                    r.first_output_us.unwrap_or(0) as f64 / 1e3
                )
            })
            .collect(),
        panics_fired: injector.map_or(0, |i| i.fired()),
        peak_rss: peak_rss(),
        cgroup_peak: None,
        checkpoints: cp.completed,
        checkpoint_bytes_first: cp.first_bytes,
        checkpoint_bytes_after_first: cp.bytes_after_first,
        state_bytes_final: cp.state_bytes_final,
        restore_bytes_final: cp.restore_bytes_final,
        store_peak: peak.load(std::sync::atomic::Ordering::Relaxed),
        lines,
        digest,
    })
}

/// The committed lines' count and order-independent digest (sums and a xor
/// of two hashes of each line).
fn digest(out: &Path) -> Result<(u64, String)> {
    let (mut n, mut sum, mut x) = (0u64, 0u64, 0u64);
    for f in TransactionalFile::committed_files(out)? {
        let r = std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(&f)?);
        for line in r.split(b'\n') {
            let line = line?;
            let mut h = std::collections::hash_map::DefaultHasher::new();
            line.hash(&mut h);
            let a = h.finish();
            (n, sum, x) = (
                n + 1,
                sum.wrapping_add(a),
                x ^ a.rotate_left(17).wrapping_mul(3),
            );
        }
    }
    Ok((n, format!("{sum:016x}{x:016x}")))
}

/// Bytes of the files under `dir` (0 if it is gone).
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

fn peak_rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// A memory cgroup made for one run, removed when dropped.
struct Cgroup {
    dir: PathBuf,
    v2: bool,
}

impl Cgroup {
    fn new(limit: u64) -> Result<Self> {
        let name = format!("tandem-disk-state-{}", std::process::id());
        let v2_root = Path::new("/sys/fs/cgroup");
        let v2 = std::fs::read_to_string(v2_root.join("cgroup.controllers"))
            .is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"));
        let dir = if v2 {
            v2_root.join(&name)
        } else {
            Path::new("/sys/fs/cgroup/memory").join(&name)
        };
        std::fs::create_dir(&dir).with_context(|| {
            format!(
                "creating the memory cgroup {} (--memory-limit-mb needs root and a memory \
                 controller; 0 runs without a limit)",
                dir.display()
            )
        })?;
        let cg = Cgroup { dir, v2 };
        let set = |file: &str, v: &str| {
            std::fs::write(cg.dir.join(file), v)
                .with_context(|| format!("writing {v} to {}", cg.dir.join(file).display()))
        };
        if v2 {
            set("memory.max", &limit.to_string())?;
            let _ = set("memory.swap.max", "0");
        } else {
            set("memory.limit_in_bytes", &limit.to_string())?;
            let _ = set("memory.swappiness", "0");
        }
        Ok(cg)
    }

    fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    fn peak(&self) -> Option<u64> {
        let f = if self.v2 {
            "memory.peak"
        } else {
            "memory.max_usage_in_bytes"
        };
        std::fs::read_to_string(self.dir.join(f))
            .ok()?
            .trim()
            .parse()
            .ok()
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Runs one job in a child process (in `cgroup` if given).
fn spawn(args: &Args, which: &str, dir: &Path, cgroup: Option<&Cgroup>) -> Result<RunResult> {
    std::fs::create_dir_all(dir)?;
    let exe = std::env::current_exe()?;
    let mut cmd = Command::new(exe);
    cmd.args(std::env::args_os().skip(1))
        .arg("--child")
        .arg(which)
        .arg("--child-dir")
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // glibc gives each thread an arena of its own; the store's
        // threads and each attempt's workers then keep freed memory in
        // arenas of their own (the disk run's anonymous memory reached
        // 494 MiB at 6 M keys and 3 restarts, against ~230 MiB with two
        // arenas). Both runs get the same allocator settings.
        cmd.env("MALLOC_ARENA_MAX", "2");
    }
    if let Some(cg) = cgroup {
        let procs = std::ffi::CString::new(cg.procs().as_os_str().as_encoded_bytes())?;
        // SAFETY: the hook runs in the forked child before exec and calls
        // only async-signal-safe functions (open, write, close) on memory
        // prepared before the fork.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // "0": the writing process itself.
                let n = libc::write(fd, b"0".as_ptr().cast(), 1);
                libc::close(fd);
                if n != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let mut child = cmd.spawn()?;
    let mut pipe = child.stdout.take().context("the child's standard output")?;
    let reading = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut pipe, &mut v).map(|_| v)
    });
    // A signal to this process stops the child too.
    let tandem_bench::cli::Waited::Exited(status) =
        tandem_bench::cli::wait_child(&mut child, None)?
    else {
        unreachable!("no timeout was given")
    };
    let stdout = reading
        .join()
        .map_err(|_| anyhow::anyhow!("reading the child's output panicked"))??;
    let out = std::process::Output {
        status,
        stdout,
        stderr: Vec::new(),
    };
    if !out.status.success() {
        use std::os::unix::process::ExitStatusExt;
        if out.status.signal() == Some(libc::SIGKILL) && cgroup.is_some() {
            bail!(
                "the {which} run was killed (SIGKILL): most likely by the OOM killer at the \
                 {} MiB limit",
                args.memory_limit_mb
            );
        }
        bail!("the {which} run failed ({})", out.status);
    }
    let line = String::from_utf8_lossy(&out.stdout);
    let json = line
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .context("the child printed no result")?;
    let mut r: RunResult = serde_json::from_str(json)?;
    r.cgroup_peak = cgroup.and_then(Cgroup::peak);
    Ok(r)
}

fn check(args: &Args) -> Result<()> {
    ensure!(
        (1_000..=1_000_000_000).contains(&args.keys),
        "--keys must be between 1,000 and 1,000,000,000"
    );
    ensure!(
        args.payload_bytes <= 4096,
        "--payload-bytes must be at most 4096"
    );
    ensure!(
        (1..=10_000_000).contains(&args.recent),
        "--recent must be between 1 and 10,000,000"
    );
    ensure!(
        args.memory_limit_mb == 0 || args.memory_limit_mb >= 128,
        "--memory-limit-mb must be 0 (no limit) or at least 128"
    );
    ensure!(
        (1..=65_536).contains(&args.cache_mb),
        "--cache-mb must be between 1 and 65536"
    );
    ensure!(args.panics <= 100, "--panics must be at most 100");
    ensure!(
        (10..=600_000).contains(&args.checkpoint_interval_ms),
        "--checkpoint-interval-ms must be between 10 and 600000"
    );
    ensure!(
        (1..=64).contains(&args.cores),
        "--cores must be between 1 and 64"
    );
    Ok(())
}

fn mib(b: u64) -> String {
    format!("{:.0} MiB", b as f64 / f64::from(1 << 20))
}

fn main() -> ExitCode {
    tandem_bench::cli::main(1, || {
        let args: Args = tandem_bench::cli::parse();
        check(&args)?;
        if let (Some(which), Some(dir)) = (&args.child, &args.child_dir) {
            let r = child(&args, which, dir)?;
            let mut o = std::io::stdout().lock();
            writeln!(o, "{}", serde_json::to_string(&r)?)?;
            return Ok(ExitCode::SUCCESS);
        }
        if let Some(r) = &args.report {
            tandem_bench::paths::output_file("--report", r)?;
        }
        let cores = tandem::sys::affinity::available_cores().len();
        ensure!(
            args.cores <= cores,
            "--cores {}: this process may use {cores}",
            args.cores
        );
        let parent = args.dir.clone().unwrap_or_else(std::env::temp_dir);
        tandem_bench::paths::writable_dir("--dir", &parent)?;
        // Each key: its archived entry (~60 bytes beside the payload) in
        // the store and in up to three checkpoint chains, and ~30 bytes of
        // output a record; the in-memory run holds the state in memory
        // (~120 bytes beside the payload).
        let entry = args.payload_bytes as u64 + 60;
        tandem_bench::paths::check_free(
            "--keys",
            args.keys.saturating_mul(entry * 4 + 2 * 2 * 30),
            &parent,
            args.dir.is_some(),
        )?;
        if !args.no_memory_run {
            if let Some(free) = tandem::sys::limits::available_memory() {
                let need = args.keys.saturating_mul(args.payload_bytes as u64 + 120);
                ensure!(
                    need <= free,
                    "--keys {}: the in-memory run needs about {} of memory and {} is available \
                     (fewer --keys, a smaller --payload-bytes, or --no-memory-run)",
                    args.keys,
                    tandem::sys::fs::human_bytes(need),
                    tandem::sys::fs::human_bytes(free)
                );
            }
        }
        let base = parent.join(format!("tandem-disk-state-{}", std::process::id()));
        std::fs::create_dir_all(&base)?;
        tandem_bench::cleanup::add(base.clone());
        let mut runs = Vec::new();
        if !args.no_memory_run {
            outln!(
                "in-memory backend, no limit, no faults: {} keys ...",
                args.keys
            )?;
            let r = spawn(&args, "memory", &base.join("memory"), None)?;
            let _ = std::fs::remove_dir_all(base.join("memory"));
            runs.push(r);
        }
        let cgroup = match args.memory_limit_mb {
            0 => None,
            mb => Some(Cgroup::new(mb << 20)?),
        };
        outln!(
            "disk backend, {}, {} panics under restart-all ...",
            match args.memory_limit_mb {
                0 => "no memory limit".to_string(),
                mb => format!("{mb} MiB memory limit"),
            },
            args.panics
        )?;
        let disk = spawn(&args, "disk", &base.join("disk"), cgroup.as_ref());
        drop(cgroup);
        let _ = std::fs::remove_dir_all(&base);
        runs.push(disk?);
        for r in &runs {
            outln!(
                "{:>6}: {:.0} records/s ({} records in {:.1} s, {} restarts, {} panics fired), \
                 peak RSS {}{}, {} checkpoints: first {}, after it {}, final state {} \
                 (a restore reads {}){}",
                r.backend,
                r.records_per_sec,
                r.records,
                r.seconds,
                r.restarts,
                r.panics_fired,
                mib(r.peak_rss),
                r.cgroup_peak
                    .map(|p| format!(", cgroup peak {}", mib(p)))
                    .unwrap_or_default(),
                r.checkpoints,
                mib(r.checkpoint_bytes_first),
                mib(r.checkpoint_bytes_after_first),
                mib(r.state_bytes_final),
                mib(r.restore_bytes_final),
                if r.store_peak > 0 {
                    format!(", stores on disk at most {}", mib(r.store_peak))
                } else {
                    String::new()
                },
            )?;
            for (i, c) in r.recoveries.iter().enumerate() {
                outln!("        restart {}: {c}", i + 1)?;
            }
        }
        let mut identical = None;
        if let [m, d] = runs.as_slice() {
            let same = m.lines == d.lines && m.digest == d.digest;
            identical = Some(same);
            outln!(
                "output: {} ({} and {} lines, digests {} and {}); disk / memory throughput {:.2}",
                if same { "identical" } else { "DIFFERENT" },
                m.lines,
                d.lines,
                m.digest,
                d.digest,
                d.records_per_sec / m.records_per_sec
            )?;
        }
        if let Some(p) = &args.report {
            #[derive(Serialize)]
            struct Report<'a> {
                args: &'a Args,
                runs: &'a [RunResult],
                identical: Option<bool>,
            }
            tandem_bench::report::write_json(
                "--report",
                p,
                &Report {
                    args: &args,
                    runs: &runs,
                    identical,
                },
            )?;
        }
        tandem_bench::cleanup::succeeded();
        if identical == Some(false) {
            return Ok(ExitCode::from(1));
        }
        Ok(ExitCode::SUCCESS)
    })
}
