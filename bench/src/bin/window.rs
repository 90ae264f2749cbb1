//! What a window operator costs per record, against the paper pipeline's
//! keyed aggregate, in one sitting.
//!
//! Both jobs read the same records — `(user, likes)` with event times 10 µs
//! apart, jittered within the watermarks' 1 ms bound — from one source
//! partition, key them by user (`--users`, 10,000 by default) and end in a counting sink,
//! on the same cores:
//!
//! - `keyed`: the paper's keyed stage (count and likes sum per user, every
//!   record passed on, a summary per user at the end);
//! - `window`: a tumbling window count per user (1 s windows, watermarks
//!   every 64 records), the results passed on.
//!
//! Each runs `--runs` times, alternating; the figures are medians, in
//! records per second per core (the job's records over its elapsed time,
//! over its cores).
//!
//! ```text
//! cargo run -p tandem-bench --release --bin window -- --records 5000000 --runs 5
//! ```

use anyhow::{ensure, Result};
use clap::Parser;
use std::process::ExitCode;
use std::time::Duration;
use tandem::time::{Watermarks, Window, WindowAggregate, Windows};
use tandem::{IterSource, JobBuilder, KeyedProcess, Output, Record, RuntimeConfig};
use tandem_bench::outln;
use tandem_bench::report::median;

#[derive(Parser, Debug)]
#[command(
    about = "A tumbling window count against the paper's keyed aggregate, records/s per core"
)]
struct Args {
    /// Records per run (1,000 to 1,000,000,000).
    #[arg(long, default_value_t = 5_000_000)]
    records: u64,
    /// Runs of each job (1 to 100); medians are printed.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Worker cores (default 1).
    #[arg(long, default_value_t = 1)]
    cores: usize,
    /// Distinct users (keys), 1 to 10,000,000.
    #[arg(long, default_value_t = 10_000)]
    users: u64,
}

/// Record `i`: `(user, likes)` at event time ~`i` × 10 µs.
fn record(users: u64, i: u64) -> ((u32, u32), u64) {
    let h = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let user = ((h >> 32) % users) as u32;
    let jitter = (h >> 12) % 1_000_000;
    ((user, (h % 100) as u32), 1_000_000 + i * 10_000 + jitter)
}

/// The paper's keyed stage, on these records.
struct PerUser;

impl KeyedProcess<u32, (u32, u32), (u32, u32)> for PerUser {
    type State = (u64, u64);
    #[inline]
    fn process(
        &mut self,
        _user: &u32,
        s: &mut (u64, u64),
        rec: Record<(u32, u32)>,
        out: &mut Output<'_, (u32, u32)>,
    ) {
        s.0 += 1;
        s.1 += rec.value.1 as u64;
        out.emit(rec.value);
    }
    fn on_end(&mut self, user: &u32, s: &mut (u64, u64), out: &mut Output<'_, (u32, u32)>) {
        out.emit((*user, s.0 as u32));
    }
}

struct Count;

impl WindowAggregate<u32, (u32, u32), (u32, u32)> for Count {
    const COMMUTATIVE: bool = true;
    type Acc = u64;
    #[inline]
    fn add(&self, n: &mut u64, _r: &(u32, u32)) {
        *n += 1;
    }
    fn merge(&self, n: &mut u64, other: u64) {
        *n += other;
    }
    fn result(&self, user: &u32, _w: Window, n: &u64) -> (u32, u32) {
        (*user, *n as u32)
    }
}

/// One run of a job; its records per second per core, and what its sink
/// received.
fn run(windowed: bool, args: &Args) -> Result<(f64, u64)> {
    let (records, users) = (args.records, args.users);
    let job = JobBuilder::new(if windowed { "window" } else { "keyed" });
    job.default_parallelism(args.cores);
    let sink = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let s2 = std::sync::Arc::clone(&sink);
    let src = job
        .source("source", move |_| {
            IterSource((0..records).map(move |i| record(users, i)))
        })
        .watermarks(Watermarks::bounded(Duration::from_millis(1)).every(64));
    let keyed = src.key_by(|r: &(u32, u32)| r.0);
    let out = if windowed {
        keyed
            .window(Windows::tumbling(Duration::from_secs(1)))
            .aggregate("window", Count)
            .results()
    } else {
        keyed.process("keyed", |_| PerUser)
    };
    out.for_each("sink", move |_| {
        s2.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    });
    let report =
        tandem_bench::cli::run_job(job.build()?, &RuntimeConfig::default().cores(args.cores))?;
    let secs = report.elapsed.as_secs_f64();
    Ok((
        records as f64 / secs / args.cores as f64,
        sink.load(std::sync::atomic::Ordering::Relaxed),
    ))
}

fn main() -> ExitCode {
    tandem_bench::cli::main(1, || {
        let args: Args = tandem_bench::cli::parse();
        ensure!(
            (1_000..=1_000_000_000).contains(&args.records),
            "--records must be between 1,000 and 1,000,000,000"
        );
        ensure!(
            (1..=100).contains(&args.runs),
            "--runs must be between 1 and 100"
        );
        let available = tandem::sys::affinity::available_cores().len();
        ensure!(
            (1..=available).contains(&args.cores),
            "--cores {}: must be between 1 and {available} (the cores this process may use)",
            args.cores
        );
        ensure!(
            (1..=10_000_000).contains(&args.users),
            "--users must be between 1 and 10,000,000"
        );
        let (mut keyed, mut window) = (Vec::new(), Vec::new());
        let (mut keyed_out, mut window_out) = (0, 0);
        for r in 0..args.runs {
            let (k, ko) = run(false, &args)?;
            let (w, wo) = run(true, &args)?;
            outln!(
                "run {}: keyed aggregate {:.0} records/s/core, tumbling window count {:.0} records/s/core",
                r + 1,
                k,
                w
            )?;
            keyed.push(k);
            window.push(w);
            (keyed_out, window_out) = (ko, wo);
        }
        let (k, w) = (median(keyed), median(window));
        outln!(
            "median of {}: keyed aggregate {k:.0} records/s/core ({keyed_out} outputs), \
             tumbling window count {w:.0} records/s/core ({window_out} results); \
             window / keyed {:.2}",
            args.runs,
            w / k
        )?;
        Ok(ExitCode::SUCCESS)
    })
}
