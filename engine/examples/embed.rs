//! Embedding Tandem: a keyed click counter in a few lines.
use tandem::{IterSource, JobBuilder, RuntimeConfig};

fn main() -> Result<(), tandem::JobError> {
    let job = JobBuilder::new("clicks");
    job.default_parallelism(2);
    job.source("clicks", |info| {
        // Partition `info.instance` of `info.parallelism`: (user, event time).
        let me = info.instance as u64;
        let mine = (0..10_000u64).filter(move |n| n % 2 == me);
        IterSource(mine.map(|n| ((n % 100) as u32, n)))
    })
    .filter("no-bots", |user: &u32| *user != 0)
    .key_by(|user: &u32| *user)
    .aggregate("per-user", |count: &mut u64, user: &u32| {
        *count += 1;
        (*user, *count)
    })
    .for_each("print", |r| {
        if r.value.1 == 100 {
            println!("user {} reached 100 clicks", r.value.0);
        }
    });
    let cores = tandem::sys::affinity::available_cores().len().min(2);
    let report = job.build()?.run(&RuntimeConfig::default().cores(cores))?;
    println!("p99 latency {} ns", report.latency.quantile(0.99));
    Ok(())
}
