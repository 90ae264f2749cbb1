//! Independent pipelines under region failover: a fault in one restarts
//! its region alone, and the others go on writing — exact output either
//! way.
//!
//! `--parallelism` partitions (default 2) of sensor readings, each its own
//! forward pipeline: source `readings` → `calibrate` (a map) → `valid` (a
//! filter) → `smooth` (a per-sensor moving average, the operator's own
//! checkpointed state) → sink `out`. No record crosses from one partition
//! to another, so each partition is a failover region of its own
//! ([`tandem::Job::regions`]); with `--chaining never` every operator is a
//! task of its own.
//!
//! ```sh
//! cargo run --release -p tandem --example pipelines -- \
//!     [--records 1000000] [--seed 1] [--parallelism 2] [--rate 100000] \
//!     [--strategy none|restart-all|region|bqbs] [--chaining auto|never] \
//!     [--fault-schedule 'panic@smooth:0/50000,panic@smooth:0/100000'] \
//!     [--output readings.txt]
//! ```
//!
//! `P/S` in a fault schedule names sequence `S` of partition `P`; input
//! record `N` (`panic@smooth:~10`) is sequence `N / P` of partition
//! `N % P`. Each partition is paced to `--rate` readings a second (0: as
//! fast as it goes), so that a recovery happens while every partition runs.
//!
//! For every recovery the run prints what restarted and what kept running,
//! and how far each partition's output reached during the recovery (fault
//! → the restarted tasks' first output; readings past the highest it had
//! written, so a replay's repeats do not count) beside its rate over the
//! whole run: under
//! `--strategy region` a partition the fault did not touch writes on at
//! its usual rate; under `restart-all` every partition stops. The output (`PARTITION SEQ SENSOR
//! AVERAGE` per reading, sorted) is identical with and without faults.

mod common;

use clap::Parser;
use common::{mix, say, Strategy};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};
use tandem::checkpoint::SnapshotBytes;
use tandem::sinks::transactional::TransactionalFile;
use tandem::{
    Chaining, CheckpointError, JobBuilder, Output, Process, Record, SeekError, Source, SourcePoll,
    TupleId,
};
use tandem::{Committer, Sink};

#[derive(Parser, Debug)]
#[command(about = "Independent pipelines: a fault restarts its region alone, exactly")]
struct Args {
    /// Readings in all (spread over the partitions).
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// Seed of the readings.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Partitions: independent pipelines.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=64))]
    parallelism: u64,
    /// Readings a second per partition (0: unpaced).
    #[arg(long, default_value_t = 100_000)]
    rate: u64,
    /// What recovers from a failure.
    #[arg(long, value_enum, default_value_t = Strategy::Region)]
    strategy: Strategy,
    /// Operator chaining: auto (each pipeline one task) or never (a task
    /// per operator).
    #[arg(long, default_value = "auto", value_parser = parse_chaining)]
    chaining: Chaining,
    /// Faults to inject (the fault language; operators `readings`,
    /// `calibrate`, `valid`, `smooth`, `out`).
    #[arg(long)]
    fault_schedule: Option<String>,
    /// Where the sorted output goes (default: counted, not kept).
    #[arg(long)]
    output: Option<PathBuf>,
    /// Worker cores (default: up to 2).
    #[arg(long)]
    cores: Option<usize>,
}

fn parse_chaining(s: &str) -> Result<Chaining, String> {
    match s {
        "auto" => Ok(Chaining::Auto),
        "never" => Ok(Chaining::Never),
        _ => Err(format!("`{s}`: expected auto or never")),
    }
}

const SENSORS: u64 = 64;

/// A reading: `(partition << 40 | seq, sensor, raw value)`.
type Reading = (u64, u32, u32);

/// When every partition's pacing starts: the first poll of any.
static START: OnceLock<Instant> = OnceLock::new();

/// `--parallelism`, for the fault schedule's resolver.
static PARTITIONS: AtomicU64 = AtomicU64::new(1);

/// Per partition: one past the highest sequence number its sink wrote —
/// how far its output reached (a replay after a restart writes again
/// what was written before, and moves it no further until it passes it).
static REACH: [AtomicU64; 64] = [const { AtomicU64::new(0) }; 64];

/// Per partition: its reach over time, `(µs on the engine clock,
/// reach)`, noted by its sink every [`EVERY`] records.
static TIMELINE: [Mutex<Vec<(u64, u64)>>; 64] = [const { Mutex::new(Vec::new()) }; 64];
const EVERY: u64 = 16;

/// The engine clock's origin (set as the job starts): recovery records'
/// times are on it.
static ORIGIN: OnceLock<Instant> = OnceLock::new();

/// The output lines, with each partition's reach noted as they are
/// written.
struct Reach(TransactionalFile, u64);

impl Sink<String> for Reach {
    fn write(&mut self, r: Record<String>) -> std::io::Result<()> {
        let mut f = r.value.split(' ');
        if let (Some(Ok(p)), Some(Ok(s))) = (
            f.next().map(str::parse::<usize>),
            f.next().map(str::parse::<u64>),
        ) {
            if let Some(reach) = REACH.get(p) {
                let now = reach.fetch_max(s + 1, Ordering::Relaxed).max(s + 1);
                self.1 += 1;
                if self.1.is_multiple_of(EVERY) {
                    if let Some(o) = ORIGIN.get() {
                        let at = o.elapsed().as_micros() as u64;
                        TIMELINE[p].lock().unwrap().push((at, now));
                    }
                }
            }
        }
        Sink::<String>::write(&mut self.0, r)
    }
    fn pre_commit(&mut self, checkpoint: u64) -> std::io::Result<()> {
        Sink::<String>::pre_commit(&mut self.0, checkpoint)
    }
    fn committer(&self) -> Option<Box<dyn Committer>> {
        Sink::<String>::committer(&self.0)
    }
}

/// Partition `p`'s readings, sequence `next` on, paced to `rate` a second
/// from [`START`] (a restarted partition catches up, then keeps pace).
struct Readings {
    p: u64,
    next: u64,
    len: u64,
    seed: u64,
    rate: u64,
}

impl Source<Reading> for Readings {
    fn poll_next(&mut self) -> SourcePoll<Reading> {
        if self.next >= self.len {
            return SourcePoll::End;
        }
        if let Some(due_ns) = (self.next * 1_000_000_000).checked_div(self.rate) {
            if START.get_or_init(Instant::now).elapsed() < Duration::from_nanos(due_ns) {
                return SourcePoll::Pending;
            }
        }
        let s = self.next;
        self.next += 1;
        let h = mix(self.seed, (self.p << 40) | s);
        let reading = (
            (self.p << 40) | s,
            (h % SENSORS) as u32,
            ((h >> 16) % 10_000) as u32,
        );
        SourcePoll::Ready {
            value: reading,
            event_time: s,
        }
    }

    /// The readings are drawn from their numbers: a restored partition
    /// starts at its position at once.
    fn seek(&mut self, next_seq: u64) -> Result<(), SeekError> {
        self.next = next_seq;
        Ok(())
    }

    fn seeks_directly(&self) -> bool {
        true
    }
}

/// Per sensor, an exponential moving average (7/8 old, 1/8 new) of the
/// calibrated values, in the operator's checkpointed state.
#[derive(Default)]
struct Smooth {
    avg: HashMap<u32, u64>,
}

impl Process<Reading, String> for Smooth {
    fn process(&mut self, r: Record<Reading>, out: &mut Output<'_, String>) {
        let (id, sensor, v) = r.value;
        let a = self.avg.entry(sensor).or_insert(u64::from(v) << 8);
        *a = (*a * 7 + (u64::from(v) << 8)) / 8;
        out.emit(format!(
            "{} {:09} {sensor} {}",
            id >> 40,
            id & ((1 << 40) - 1),
            *a
        ));
    }

    fn snapshot_state(&mut self) -> Result<Option<SnapshotBytes>, CheckpointError> {
        let mut v: Vec<(u32, u64)> = self.avg.iter().map(|(k, a)| (*k, *a)).collect();
        v.sort_unstable();
        tandem::checkpoint::serialize(&v, 64 + 16 * v.len()).map(Some)
    }

    fn restore_state(&mut self, payload: &[u8]) -> Result<(), CheckpointError> {
        let v = tandem::checkpoint::access::<Vec<(u32, u64)>>(payload)?;
        self.avg = v
            .iter()
            .map(|e| (e.0.to_native(), e.1.to_native()))
            .collect();
        Ok(())
    }
}

fn main() -> Result<(), common::Failed> {
    let args = Args::parse();
    common::in_workdir("pipelines", |work| run(&args, work))
}

fn run(args: &Args, work: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let p = args.parallelism;
    let job = JobBuilder::new("pipelines");
    job.default_parallelism(p as usize);
    let (records, seed, rate) = (args.records, args.seed, args.rate);
    let readings = job.source("readings", move |i| {
        let me = i.instance as u64;
        Readings {
            p: me,
            next: 0,
            // Partition `me` holds input records me, me + P, me + 2P, ….
            len: records / p + u64::from(me < records % p),
            seed,
            rate,
        }
    });
    let readings = if args.strategy == Strategy::Bqbs {
        readings.standby()
    } else {
        readings
    };
    let out_dir = work.join("out");
    std::fs::create_dir_all(&out_dir)?;
    let dir = out_dir.clone();
    readings
        .map("calibrate", |r: Reading| (r.0, r.1, r.2 * 3 / 2 + 7))
        .filter("valid", |r: &Reading| !r.2.is_multiple_of(97))
        .process("smooth", |_| Smooth::default())
        .sink("out", move |i| {
            Reach(
                TransactionalFile::for_instance(&dir, i).expect("the output directory"),
                0,
            )
        });
    let job = job.build()?;
    say!(
        "{} partitions, {} failover regions; {} readings at {} a second per partition",
        p,
        job.regions().len(),
        records,
        if rate == 0 {
            "any rate".to_string()
        } else {
            rate.to_string()
        }
    );

    let mut config = common::config(args.strategy, args.cores, work, Duration::from_millis(100))
        .chaining(args.chaining);
    PARTITIONS.store(p, Ordering::Relaxed);
    let injector = common::injector(
        args.fault_schedule.as_deref(),
        records,
        &["readings", "calibrate", "valid", "smooth", "out"],
        |n| {
            let p = PARTITIONS.load(Ordering::Relaxed);
            TupleId::new((n % p) as u32, n / p)
        },
        &mut config,
    )?;

    // Each partition's output over time, sampled while the job runs.
    let handle = job.start(&config)?;
    let _ = ORIGIN.set(Instant::now() - handle.watch().elapsed());
    let report = handle.join()?;
    let elapsed_us = report.elapsed.as_micros().max(1) as u64;

    // What each recovery restarted, and what the others wrote meanwhile.
    let timelines: Vec<Vec<(u64, u64)>> = TIMELINE[..p as usize]
        .iter()
        .map(|t| std::mem::take(&mut *t.lock().unwrap()))
        .collect();
    // A partition's reach at `t` µs: the newest noted at or before it.
    let count_at = |t: u64, part: usize| -> u64 {
        let s = &timelines[part];
        let i = s.partition_point(|e| e.0 <= t);
        i.checked_sub(1).map_or(0, |i| s[i].1)
    };
    let total: Vec<u64> = (0..p as usize)
        .map(|part| REACH[part].load(Ordering::Relaxed))
        .collect();
    for (k, r) in report.recovery.iter().enumerate() {
        if r.kind == tandem::RecoveryKind::Takeover {
            continue;
        }
        // The recovery's outage: fault → the restarted tasks' first output.
        let until = r
            .first_output_us
            .unwrap_or(r.detect_us + r.restore_us.unwrap_or(0));
        let (from, to) = (r.fault_at_us, r.fault_at_us + until.max(1));
        say!(
            "recovery {}: {} of {}[{}]: restarted {} task(s) [{}], {} kept running",
            k + 1,
            r.kind.name(),
            r.operator,
            r.instance,
            r.restarted.len(),
            r.restarted.join(", "),
            r.kept_running.len()
        );
        for (part, total) in total.iter().enumerate() {
            let during = count_at(to, part).saturating_sub(count_at(from, part));
            say!(
                "  partition {part}: output reached {during} readings further in the {:.1} ms from fault to first output ({:.0}/s; {:.0}/s over the run)",
                (to - from) as f64 / 1e3,
                during as f64 * 1e6 / (to - from) as f64,
                *total as f64 * 1e6 / elapsed_us as f64
            );
        }
    }

    let mut lines = common::committed(&out_dir)?;
    lines.sort_unstable();
    say!(
        "{} lines out in {:.2} s ({} restarts)",
        lines.len(),
        report.elapsed.as_secs_f64(),
        report.restarts
    );
    common::finish(&report, injector.as_ref(), &lines, args.output.as_deref())
}
