//! Fault injection from an embedding program: a keyed running count with a
//! standby, run once clean and once under a fault schedule, the two outputs
//! compared by the checker.
//!
//! ```sh
//! cargo run --release -p tandem-fault-inject --example inject
//! cargo run --release -p tandem-fault-inject --example inject -- 'random:7:3'
//! ```

use std::sync::{Arc, Mutex};
use tandem::{IterSource, JobBuilder, RuntimeConfig, StandbyConfig, TupleId};
use tandem_fault_inject::{Checker, FaultInjector, ScheduleSpec, Space};

const RECORDS: u64 = 200_000;
const PARTITIONS: usize = 2;

/// Runs the job; returns its output lines and report.
fn run(probes: Option<FaultInjector>) -> Result<(String, tandem::JobReport), tandem::JobError> {
    let lines = Arc::new(Mutex::new(String::new()));
    let out = Arc::clone(&lines);
    let job = JobBuilder::new("counts");
    job.default_parallelism(PARTITIONS);
    job.source("words", |info| {
        // Partition p yields records p, p + 2, p + 4 …: its k-th record
        // gets tuple ID (p, k).
        let (me, n) = (info.instance as u64, info.parallelism as u64);
        let words = (0..RECORDS).filter(move |i| i % n == me);
        IterSource(words.map(|i| ((i * 7919 % 1000) as u32, i)))
    })
    .rate_limit(400_000.0)
    .standby()
    .key_by(|w: &u32| *w)
    .aggregate("per-word", |count: &mut u64, w: &u32| {
        *count += 1;
        (*w, *count)
    })
    .for_each("collect", move |r| {
        let mut o = out.lock().unwrap();
        o.push_str(&format!(
            "{{\"word\":{},\"count\":{}}}\n",
            r.value.0, r.value.1
        ));
    });
    let mut config = RuntimeConfig::default().standby(StandbyConfig::default());
    if let Some(p) = probes {
        config = config.probes(Arc::new(p));
    }
    let cores = tandem::sys::affinity::available_cores().len().min(2);
    let report = job.build()?.run(&config.cores(cores))?;
    let text = std::mem::take(&mut *lines.lock().unwrap());
    Ok((text, report))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Injected panics print one line each instead of a backtrace.
    tandem_fault_inject::quiet_injected_panics();
    let spec: ScheduleSpec = std::env::args()
        .nth(1)
        .unwrap_or_else(|| {
            "panic@per-word:50000,stall@per-word:120000:30,panic@per-word:150000*2".into()
        })
        .parse()?;
    // What a random schedule may draw: faults a standby masks.
    let space = Space::new(RECORDS)
        .allow("panic", "per-word")
        .allow("stall", "per-word")
        .allow("cut", "per-word")
        .allow("slow", "per-word");
    let schedule = spec.expand(&space)?;
    println!("schedule: {schedule}");
    let injector = FaultInjector::builder(&schedule)
        .records(RECORDS)
        // Input record i is the (i / 2)-th record of partition i % 2.
        .resolver(|i| TupleId::new((i % PARTITIONS as u64) as u32, i / PARTITIONS as u64))
        .build()?;
    let (clean, _) = run(None)?;
    let (faulted, report) = run(Some(injector.clone()))?;
    println!(
        "{} faults fired, {} recoveries, {:.0} records/s",
        injector.fired(),
        report.recovery.len(),
        report.throughput()
    );
    for r in &report.recovery {
        println!(
            "  {:?} of {}[{}] at {:?}: first output after {:?} µs",
            r.kind, r.operator, r.instance, r.tuple_id, r.first_output_us
        );
    }
    let checker = Checker {
        keys: vec!["word".into()],
        ..Checker::default()
    };
    let outcome = checker.compare(clean.as_bytes(), faulted.as_bytes())?;
    println!(
        "checker: {} lost, {} duplicated, {} changed",
        outcome.lost,
        outcome.duplicated,
        outcome.changed + outcome.unexpected
    );
    if !outcome.identical() {
        return Err("the faulted output differs from the clean one".into());
    }
    Ok(())
}
