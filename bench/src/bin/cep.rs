//! What complex event processing costs: the matcher's time per event for a
//! pattern of 3 steps and one of 10, and a whole CEP job's events/s.
//!
//! - *Matcher*: the events of `--keys` keys fed to one matcher per key, no
//!   engine around it; the pattern of 3 steps is the seeds' (`id == 42`,
//!   strictly next `volume > 10`, later `end`, within 20 ms), the one of
//!   10 a kind-0 event followed by nine relaxed steps alternating odd and
//!   even kinds, within 100 ms.
//! - *Job*: the trades of the `cep_alerts` example (200 symbols, 2 ms out
//!   of order) through the engine — source, key by symbol, the 3-step
//!   pattern, a counting sink — on `--cores` cores: events/s per core over
//!   the wall time and per CPU-second of the process.
//!
//! Each figure is the median of `--runs` runs.
//!
//! ```text
//! cargo run -p tandem-bench --release --bin cep -- --events 10000000 --runs 5
//! ```

use anyhow::{ensure, Result};
use clap::Parser;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tandem::cep::nfa::Matcher;
use tandem::cep::Pattern;
use tandem::time::Watermarks;
use tandem::{IterSource, JobBuilder, RuntimeConfig};
use tandem_bench::outln;
use tandem_bench::report::median;

#[derive(Parser, Debug)]
#[command(about = "CEP: the matcher's ns per event (3 and 10 steps) and a CEP job's events/s")]
struct Args {
    /// Events per run (1,000 to 1,000,000,000).
    #[arg(long, default_value_t = 10_000_000)]
    events: u64,
    /// Runs of each measurement (1 to 100); medians are printed.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Worker cores of the job (default: up to 2).
    #[arg(long)]
    cores: Option<usize>,
    /// Keys of the matcher measurement (1 to 1,000,000).
    #[arg(long, default_value_t = 200)]
    keys: u64,
}

/// An event: `(key, id, volume in tenths, end, kind)`.
type Ev = (u32, u32, u32, bool, u8);

fn mix(i: u64) -> u64 {
    let mut h = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x243f_6a88_85a3_08d3;
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// Event `i` of `keys` keys at ~`i` × 10 µs, up to 2 ms out of order.
fn event(keys: u64, i: u64) -> (Ev, u64) {
    let h = mix(i);
    let e = (
        (h % keys) as u32,
        ((h >> 12) % 50) as u32,
        ((h >> 20) % 201) as u32,
        (h >> 30).is_multiple_of(12),
        ((h >> 36) % 10) as u8,
    );
    (e, 100_000_000 + i * 10_000 + (h >> 44) % 2_000_000)
}

fn three() -> Pattern<Ev> {
    Pattern::begin("start")
        .when(|e: &Ev| e.1 == 42)
        .next("middle")
        .when(|e: &Ev| e.2 > 100)
        .followed_by("end")
        .when(|e: &Ev| e.3)
        .within(Duration::from_millis(20))
}

fn ten() -> Pattern<Ev> {
    let mut p = Pattern::begin("s0").when(|e: &Ev| e.4 == 0);
    for k in 1..10u8 {
        p = p
            .followed_by(&format!("s{k}"))
            .when(move |e: &Ev| e.4 % 2 == k % 2);
    }
    p.within(Duration::from_millis(100))
}

/// The matcher alone: ns per event, and the matches (an error when a
/// signal interrupts the run).
fn matcher(p: &Pattern<Ev>, args: &Args) -> Result<(f64, u64)> {
    // Each key's events in time order, as the operator gives them.
    let mut per_key: Vec<Vec<(Ev, u64)>> = vec![Vec::new(); args.keys as usize];
    for i in 0..args.events {
        if i % 65_536 == 0 {
            tandem_bench::cli::check_interrupted()?;
        }
        let (e, t) = event(args.keys, i);
        per_key[e.0 as usize].push((e, t));
    }
    for v in &mut per_key {
        v.sort_by_key(|x| x.1);
    }
    let started = Instant::now();
    let mut found = 0u64;
    for evs in &per_key {
        // A check a key: its events take microseconds to milliseconds.
        tandem_bench::cli::check_interrupted()?;
        let mut m = Matcher::default();
        for (e, t) in evs {
            found += m.step(p, e, *t).matches.len() as u64;
        }
    }
    Ok((
        started.elapsed().as_nanos() as f64 / args.events as f64,
        found,
    ))
}

/// The job: events/s per core (wall), per CPU-second, and the matches.
fn job(cores: usize, args: &Args) -> Result<(f64, f64, u64)> {
    let events = args.events;
    let job = JobBuilder::new("cep");
    job.default_parallelism(cores);
    let found = Arc::new(AtomicU64::new(0));
    let f2 = Arc::clone(&found);
    job.source("trades", move |info| {
        let (me, n) = (info.instance as u64, info.parallelism as u64);
        IterSource((me..events).step_by(n as usize).map(|i| event(200, i)))
    })
    .watermarks(Watermarks::bounded(Duration::from_millis(2)).every(64))
    .key_by(|e: &Ev| e.0)
    .cep("cep", three())
    .matches()
    .for_each("alerts", move |_| {
        f2.fetch_add(1, Ordering::Relaxed);
    });
    let cpu0 = tandem::sys::rusage::process_cpu_time();
    let report = tandem_bench::cli::run_job(job.build()?, &RuntimeConfig::default().cores(cores))?;
    let cpu = (tandem::sys::rusage::process_cpu_time() - cpu0).as_secs_f64();
    let wall = report.elapsed.as_secs_f64();
    Ok((
        events as f64 / wall / cores as f64,
        events as f64 / cpu.max(1e-9),
        found.load(Ordering::Relaxed),
    ))
}

fn main() -> ExitCode {
    tandem_bench::cli::main(1, || {
        let args: Args = tandem_bench::cli::parse();
        ensure!(
            (1_000..=1_000_000_000).contains(&args.events),
            "--events must be between 1,000 and 1,000,000,000"
        );
        ensure!(
            (1..=100).contains(&args.runs),
            "--runs must be between 1 and 100"
        );
        ensure!(
            (1..=1_000_000).contains(&args.keys),
            "--keys must be between 1 and 1,000,000"
        );
        let available = tandem::sys::affinity::available_cores().len();
        let cores = args.cores.unwrap_or(available.clamp(1, 2));
        ensure!(
            (1..=available).contains(&cores),
            "--cores must be between 1 and {available} (the cores this process may use)"
        );
        let (p3, p10) = (three(), ten());
        let (mut m3, mut m10, mut wall, mut cpu) = (vec![], vec![], vec![], vec![]);
        let (mut f3, mut f10, mut fj) = (0, 0, 0);
        for r in 0..args.runs {
            let (a, fa) = matcher(&p3, &args)?;
            let (b, fb) = matcher(&p10, &args)?;
            let (w, c, f) = job(cores, &args)?;
            outln!(
                "run {}: matcher {a:.1} ns/event (3 steps), {b:.1} ns/event (10 steps); job {w:.0} events/s per core, {c:.0} per CPU-second",
                r + 1
            )?;
            (f3, f10, fj) = (fa, fb, f);
            m3.push(a);
            m10.push(b);
            wall.push(w);
            cpu.push(c);
        }
        outln!(
            "median of {}: matcher {:.1} ns/event with a pattern of 3 steps ({f3} matches), {:.1} ns/event with 10 ({f10} matches), {} events over {} keys",
            args.runs,
            median(m3),
            median(m10),
            args.events,
            args.keys
        )?;
        outln!(
            "median of {}: the CEP job (3 steps, 200 keys) {:.0} events/s per core on {cores} cores, {:.0} per CPU-second ({fj} matches)",
            args.runs,
            median(wall),
            median(cpu)
        )?;
        Ok(ExitCode::SUCCESS)
    })
}
