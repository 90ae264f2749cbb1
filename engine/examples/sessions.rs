//! Sessionized clicks: a click count per user and session, from clicks that
//! arrive out of order and some late — exact under injected faults.
//!
//! Two source partitions of clicks `(user, page)` with event times up to
//! 5 ms out of order; one click in a hundred arrives 100 ms late. Each
//! user's clicks are cut into sessions (a gap of 30 ms closes one; 10 ms
//! of allowed lateness), counted per session by operator `window`; late
//! clicks go to the window's side output and are counted.
//!
//! ```sh
//! cargo run --release -p tandem --example sessions -- \
//!     [--records 200000] [--seed 1] [--strategy none|restart-all|bqbs] \
//!     [--fault-schedule 'panic@window:~10'] [--output sessions.jsonl]
//! ```
//!
//! The output is JSONL, sorted: `{"user":U,"start":NS,"end":NS,"clicks":N}`
//! per session firing and `{"late":U,"page":P,"t":NS}` per late click. Run
//! it once without faults and once with, and compare the files (`tandem
//! check`, or `cmp`): they are identical.

mod common;

use clap::Parser;
use common::{say, Strategy, MS, US};
use std::path::PathBuf;
use std::time::Duration;
use tandem::sinks::transactional::TransactionalFile;
use tandem::time::{Watermarks, Window, WindowAggregate, Windows};
use tandem::{IterSource, JobBuilder, Output, TupleId};

#[derive(Parser, Debug)]
#[command(about = "A click count per user session, exact under injected faults")]
struct Args {
    /// Clicks in all (over two source partitions).
    #[arg(long, default_value_t = 200_000)]
    records: u64,
    /// Seed of the clicks.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// What recovers from a failure.
    #[arg(long, value_enum, default_value_t = Strategy::Bqbs)]
    strategy: Strategy,
    /// Faults to inject (the fault language; operator `window`), e.g.
    /// `panic@window:~10` or `random:7:5`.
    #[arg(long)]
    fault_schedule: Option<String>,
    /// Where the sorted JSONL output goes (default: counted, not kept).
    #[arg(long)]
    output: Option<PathBuf>,
    /// Worker cores (default: up to 2).
    #[arg(long)]
    cores: Option<usize>,
}

const PARTITIONS: u64 = 2;

/// Click `i` of the whole input: `((user, page), event time)`. Users click
/// in turn at random; times advance 20 µs a click, jittered up to 5 ms;
/// one in a hundred is 100 ms late.
fn click(seed: u64, i: u64) -> ((u32, u64), u64) {
    let mut h = (i ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 31;
    let user = (h % 1_500) as u32;
    let jitter = (h >> 20) % (5 * MS);
    let mut t = 200 * MS + i * 20 * US + jitter;
    if (h >> 50).is_multiple_of(100) {
        t -= 100 * MS;
    }
    ((user, i), t)
}

/// Clicks per session.
struct Count;

impl WindowAggregate<u32, (u32, u64), String> for Count {
    const COMMUTATIVE: bool = true;
    type Acc = u64;
    fn add(&self, n: &mut u64, _c: &(u32, u64)) {
        *n += 1;
    }
    fn merge(&self, n: &mut u64, other: u64) {
        *n += other;
    }
    fn result(&self, user: &u32, w: Window, n: &u64) -> String {
        format!(
            "{{\"user\":{user},\"start\":{},\"end\":{},\"clicks\":{n}}}",
            w.start, w.end
        )
    }
}

fn main() -> Result<(), common::Failed> {
    let args = Args::parse();
    if args.records == 0 {
        return Err("--records must be at least 1".into());
    }
    common::in_workdir("sessions", |work| run(&args, work))
}

fn run(args: &Args, work: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let (records, seed) = (args.records, args.seed);
    let job = JobBuilder::new("sessions");
    job.default_parallelism(PARTITIONS as usize);
    let clicks = job
        .source("clicks", move |info| {
            let (me, n) = (info.instance as u64, info.parallelism as u64);
            IterSource(
                (0..records)
                    .filter(move |i| i % n == me)
                    .map(move |i| click(seed, i)),
            )
        })
        .watermarks(
            // Partitions within 200 ms of event time of each other: the
            // windows hold what is ahead until the slowest catches up.
            Watermarks::bounded(Duration::from_millis(5))
                .every(32)
                .max_drift(Duration::from_millis(200)),
        );
    let clicks = if args.strategy == Strategy::Bqbs {
        clicks.standby()
    } else {
        clicks
    };
    let sessions = clicks
        .key_by(|c: &(u32, u64)| c.0)
        .window(Windows::session(Duration::from_millis(30)))
        .allowed_lateness(Duration::from_millis(10))
        .aggregate("window", Count);
    let out = work.join("out");
    let late = work.join("late");
    let o = out.clone();
    sessions.results().sink("sessions", move |info| {
        TransactionalFile::for_instance(&o, info).expect("the output directory")
    });
    let l = late.clone();
    sessions
        .late()
        .flat_map(
            "late-line",
            |c: (u32, u64), out: &mut Output<'_, String>| {
                let t = out.event_time();
                out.emit(format!("{{\"late\":{},\"page\":{},\"t\":{t}}}", c.0, c.1))
            },
        )
        .sink("late-clicks", move |info| {
            TransactionalFile::for_instance(&l, info).expect("the output directory")
        });

    let mut config = common::config(args.strategy, args.cores, work, Duration::from_millis(100));
    // Click i is the (i / 2)-th record of partition i % 2.
    let injector = common::injector(
        args.fault_schedule.as_deref(),
        records,
        &["window"],
        |i| TupleId::new((i % PARTITIONS) as u32, i / PARTITIONS),
        &mut config,
    )?;

    let report = job.build()?.run(&config)?;
    let mut lines = common::committed(&out)?;
    let sessions_n = lines.len();
    let late_lines = common::committed(&late)?;
    let late_n = late_lines.len();
    lines.extend(late_lines);
    lines.sort();
    say!(
        "{records} clicks, {sessions_n} session results, {late_n} late clicks (side output), {:.0} clicks/s",
        report.throughput()
    );
    common::finish(&report, injector.as_ref(), &lines, args.output.as_deref())
}
