//! A keyed running count with an active standby, checked against the
//! fault-free run: the operator whose outputs depend on how its two input
//! lanes interleave (each word's count goes up by one per occurrence, and
//! the occurrences come from two source partitions).
//!
//! Runs the job once without a standby or fault, then `--runs` times with
//! a standby and a panic in the count (at a different record each run),
//! and compares each faulted run's output with the fault-free one as a
//! multiset of `(word, count)` pairs. A replay that took the lanes in
//! another order than the failed primary would give some occurrences
//! other counts: some pairs twice, some never.
//!
//! ```sh
//! cargo run --release -p tandem --example running_count -- \
//!     [--words 2000000] [--runs 50] [--mode warm|hot] [--heartbeat-ms 5]
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tandem::runtime::probe::{ProbeAction, ProbeFactory, RecordProbe};
use tandem::{IterSource, JobBuilder, RuntimeConfig, StandbyConfig, StandbyMode, TupleId};

struct PanicOnce(TupleId, Arc<AtomicBool>);

impl RecordProbe for PanicOnce {
    fn before(&mut self, id: TupleId) -> ProbeAction {
        if id == self.0 && !self.1.swap(true, Ordering::SeqCst) {
            ProbeAction::Panic("injected: one panic in the count".into())
        } else {
            ProbeAction::Continue
        }
    }
}

struct Faults(TupleId, Arc<AtomicBool>);

impl ProbeFactory for Faults {
    fn probe(&self, operator: &str, _instance: usize) -> Option<Box<dyn RecordProbe>> {
        (operator == "count")
            .then(|| Box::new(PanicOnce(self.0, Arc::clone(&self.1))) as Box<dyn RecordProbe>)
    }
}

/// The `n`-th word of the input: 5,000 distinct words, a few very common.
fn word(n: u64) -> u32 {
    let h = n.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40;
    (if h.is_multiple_of(4) {
        h % 16
    } else {
        h % 5_000
    }) as u32
}

/// Runs the job; returns the sorted `(word, count)` pairs and the report.
fn run(
    words: u64,
    cfg: &RuntimeConfig,
) -> Result<(Vec<(u32, u64)>, tandem::JobReport), tandem::JobError> {
    // The count is marked for a standby only when the run has one (the
    // fault-free reference has none).
    let backed = cfg.standby.is_some();
    let job = JobBuilder::new("running-count");
    job.default_parallelism(2);
    let out = Arc::new(Mutex::new(Vec::with_capacity(words as usize)));
    let o2 = Arc::clone(&out);
    let words_stream = job.source("words", move |i| {
        let (p, me) = (i.parallelism as u64, i.instance as u64);
        IterSource(
            (0..words)
                .filter(move |n| n % p == me)
                .map(|n| (word(n), n)),
        )
    });
    let words_stream = if backed {
        words_stream.standby()
    } else {
        words_stream
    };
    words_stream
        .key_by(|w: &u32| *w)
        .aggregate("count", |n: &mut u64, w: &u32| {
            *n += 1;
            (*w, *n)
        })
        .for_each("sink", move |r| o2.lock().unwrap().push(r.value));
    let report = job.build()?.run(cfg)?;
    let mut v = std::mem::take(&mut *out.lock().unwrap());
    v.sort_unstable();
    Ok((v, report))
}

const USAGE: &str =
    "usage: running_count [--words N (default 2000000)] [--runs N (50)] [--mode warm|hot] [--heartbeat-ms MS (5)]";

/// The command line: `--help` prints the usage; a bad flag is one `error:`
/// line and exit status 2, never a panic.
fn args() -> (u64, u64, StandbyMode, u64) {
    fn fail(why: String) -> ! {
        eprintln!("error: {why}\n{USAGE}");
        std::process::exit(2)
    }
    let number = |flag: &str, v: Option<String>| -> u64 {
        let v = v.unwrap_or_else(|| fail(format!("{flag} needs a value")));
        match v.parse::<u64>() {
            Ok(n) if n > 0 => n,
            _ => fail(format!("{flag}: expected a positive integer, not `{v}`")),
        }
    };
    let (mut words, mut runs, mut mode, mut heartbeat) = (2_000_000, 50, StandbyMode::Warm, 5);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0)
            }
            "--words" => words = number("--words", args.next()),
            "--runs" => runs = number("--runs", args.next()),
            "--heartbeat-ms" => heartbeat = number("--heartbeat-ms", args.next()),
            "--mode" => {
                mode = match args.next().as_deref() {
                    Some("warm") => StandbyMode::Warm,
                    Some("hot") => StandbyMode::Hot,
                    m => fail(format!("--mode warm|hot, not {}", m.unwrap_or("nothing"))),
                }
            }
            other => fail(format!("unknown argument `{other}`")),
        }
    }
    (words, runs, mode, heartbeat)
}

fn main() -> Result<(), tandem::JobError> {
    let (words, runs, mode, heartbeat) = args();
    // Injected panics print nothing (the engine's own hook, installed at
    // the first job start, still hears of each one first).
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let injected = info
            .payload()
            .downcast_ref::<String>()
            .is_some_and(|m| m.starts_with("injected"));
        if !injected {
            previous(info);
        }
    }));
    let cores = tandem::sys::affinity::available_cores().len().min(2);
    let plain = RuntimeConfig::default().cores(cores);
    let t = Instant::now();
    let (clean, _) = run(words, &plain)?;
    println!(
        "fault-free: {} outputs in {:.2} s",
        clean.len(),
        t.elapsed().as_secs_f64()
    );
    let mut exact = 0;
    for k in 0..runs {
        // A panic at a different record of a different partition each run.
        let at = TupleId::new((k % 2) as u32, (words / 2) * (k + 1) / (runs + 2));
        let cfg = plain
            .clone()
            .standby(StandbyConfig {
                mode,
                heartbeat_timeout: Duration::from_millis(heartbeat),
                ..StandbyConfig::default()
            })
            .probes(Arc::new(Faults(at, Arc::new(AtomicBool::new(false)))));
        let t = Instant::now();
        let (got, report) = run(words, &cfg)?;
        let takeovers = report.standby.map_or(0, |s| s.takeovers);
        let same = got == clean;
        exact += same as u64;
        println!(
            "run {k:3}: panic at record {at}: {} in {:.2} s, {takeovers} takeover(s)",
            if same {
                "exact".to_string()
            } else {
                let missing = clean
                    .iter()
                    .filter(|p| got.binary_search(p).is_err())
                    .count();
                format!(
                    "DIFFERENT ({} outputs, {missing} fault-free pairs missing)",
                    got.len()
                )
            },
            t.elapsed().as_secs_f64()
        );
    }
    println!("{runs} runs with a panic: {exact} equal to the fault-free output");
    if exact != runs {
        std::process::exit(1);
    }
    Ok(())
}
