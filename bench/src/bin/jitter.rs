//! The host's own latency floor: how often, and for how long, a thread
//! spinning alone on its core is kept from running.
//!
//! One thread per core (pinned) reads the clock in a tight loop for
//! `--seconds` and counts the gaps between consecutive reads over 100 µs,
//! 0.5 ms and 1 ms, their sum, and the longest. Nothing else of this
//! program runs meanwhile, so a gap is time the core was taken away: by
//! the host (a virtual CPU descheduled — `/proc/stat`'s *steal*, printed
//! beside it), an interrupt, or another thread of the machine. No engine
//! can have a tail below this floor on the same cores: a record in flight
//! on a core waits as long as the core is gone. Run it beside `paper`'s
//! latency figures (docs/benchmarks.md, *Latency and the host*).
//!
//! ```text
//! cargo run -p tandem-bench --release --bin jitter -- --seconds 10
//! ```

use anyhow::{ensure, Result};
use clap::Parser;
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tandem::sys::affinity::{available_cores, pin_current_thread};
use tandem::sys::thread::cpus_steal_ns;
use tandem_bench::cli::interrupted;
use tandem_bench::outln;
use tandem_bench::report::{fmt_ns, write_json};

/// The longest measurement: an hour.
const MAX_SECONDS: u64 = 3600;

#[derive(Parser, Debug)]
#[command(about = "How often the host keeps a spinning thread from running, per core")]
struct Args {
    /// How long to spin on each core, in seconds (1 to 3600).
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Spin on the first N available cores (default: all).
    #[arg(long)]
    cores: Option<usize>,
    /// Write a JSON report here.
    #[arg(long)]
    report: Option<PathBuf>,
}

/// What one core saw.
#[derive(Serialize, Debug, Default)]
struct Core {
    core: usize,
    /// Gaps between consecutive clock reads over 100 µs, 0.5 ms and 1 ms.
    over_100us: u64,
    over_500us: u64,
    over_1ms: u64,
    /// The sum of the gaps over 100 µs, and the longest gap.
    gaps_ns: u64,
    max_ns: u64,
    /// The host's steal on this core over the run (10 ms steps; `None`:
    /// not reported).
    steal_ns: Option<u64>,
}

#[derive(Serialize, Debug)]
struct Report {
    seconds: u64,
    cores: Vec<Core>,
}

fn spin(core: usize, until: Instant) -> Core {
    let pinned = pin_current_thread(core);
    let steal0 = cpus_steal_ns(&[core]);
    let mut c = Core {
        core,
        ..Core::default()
    };
    let mut last = Instant::now();
    let mut reads = 0u32;
    while last < until {
        let now = Instant::now();
        let gap = (now - last).as_nanos() as u64;
        if gap > 100_000 {
            c.over_100us += 1;
            c.gaps_ns += gap;
            c.over_500us += u64::from(gap > 500_000);
            c.over_1ms += u64::from(gap > 1_000_000);
            c.max_ns = c.max_ns.max(gap);
        }
        // A signal is looked for every 64 k reads (a few ms), a quiet
        // host or not.
        reads = reads.wrapping_add(1);
        if reads.is_multiple_of(65_536) && interrupted() {
            break;
        }
        last = now;
    }
    c.steal_ns = match (pinned, steal0, cpus_steal_ns(&[core])) {
        (true, Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => None,
    };
    c
}

fn run(args: &Args) -> Result<()> {
    ensure!(
        (1..=MAX_SECONDS).contains(&args.seconds),
        "--seconds {}: must be 1 to {MAX_SECONDS}",
        args.seconds
    );
    let all = available_cores();
    let n = args.cores.unwrap_or(all.len());
    ensure!(
        (1..=all.len()).contains(&n),
        "--cores {n}: this process may use 1 to {} cores",
        all.len()
    );
    if let Some(r) = &args.report {
        tandem_bench::paths::output_file("--report", r)?;
    }
    let until = Instant::now() + Duration::from_secs(args.seconds);
    let threads: Vec<_> = all[..n]
        .iter()
        .map(|&core| std::thread::spawn(move || spin(core, until)))
        .collect();
    let cores: Vec<Core> = threads
        .into_iter()
        .map(|t| {
            t.join()
                .map_err(|_| anyhow::anyhow!("a spinning thread panicked"))
        })
        .collect::<Result<_>>()?;
    ensure!(!interrupted(), "interrupted");
    outln!(
        "{} s spinning on each of {n} cores: gaps between clock reads",
        args.seconds
    )?;
    for c in &cores {
        outln!(
            "  core {:>3}: >100 µs {:>6}  >0.5 ms {:>5}  >1 ms {:>5}  sum {:>9}  max {:>9}  host steal {}",
            c.core,
            c.over_100us,
            c.over_500us,
            c.over_1ms,
            fmt_ns(c.gaps_ns),
            fmt_ns(c.max_ns),
            c.steal_ns.map_or("unknown".into(), fmt_ns)
        )?;
    }
    if let Some(p) = &args.report {
        write_json(
            "--report",
            p,
            &Report {
                seconds: args.seconds,
                cores,
            },
        )?;
    }
    Ok(())
}

fn main() -> ExitCode {
    tandem_bench::cli::main(1, || {
        let args: Args = tandem_bench::cli::parse();
        run(&args)?;
        Ok(ExitCode::SUCCESS)
    })
}
