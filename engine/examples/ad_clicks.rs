//! Ad clicks counted in tumbling windows, joined with their conversions,
//! and each ad's conversions reported per 250 ms of event time by a timed
//! process function — windows, an interval join and event-time timers in
//! one job, exact under injected faults.
//!
//! Clicks come from two source partitions (one every 40 µs of event time,
//! jittered up to 3 ms); conversions from one (a third of the clicks,
//! 1–200 ms after them). Operator `window` counts each user's clicks per
//! 100 ms (tumbling, 20 ms of allowed lateness); `join` is an interval join
//! of a click with its conversion within 500 ms; `trend` keeps, per ad, the
//! conversions of each 250 ms bucket and reports a bucket when the
//! watermark passes its end (an event-time timer), with the ad's running
//! total. Every result depends on event time alone, so the output is the
//! same in every run.
//!
//! ```sh
//! cargo run --release -p tandem --example ad_clicks -- \
//!     [--records 400000] [--seed 1] [--strategy none|restart-all|bqbs] \
//!     [--checkpoint-interval-ms 100] \
//!     [--fault-schedule 'random:7:5:panic:window+join'] [--output out.jsonl]
//! ```
//!
//! The output is JSONL, sorted: `{"user":U,"start":S,"clicks":N}` per user
//! and window, `{"ad":A,"bucket_end":T,"conversions":N,"total":M}` per ad
//! and bucket, and `{"late":…}` for a record that came after its window or
//! bucket was reported (none, with these sources: their disorder stays
//! within the watermarks' bound).

mod common;

use clap::Parser;
use common::{mix, say, Strategy, MS, US};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use tandem::sinks::transactional::TransactionalFile;
use tandem::time::{TimedProcess, TimerContext, Watermarks, Window, WindowAggregate, Windows};
use tandem::{IterSource, JobBuilder, Output, Record, TupleId};

#[derive(Parser, Debug)]
#[command(about = "Ad clicks in windows, joined with conversions, reported by timers")]
struct Args {
    /// Clicks in all (over two source partitions).
    #[arg(long, default_value_t = 400_000)]
    records: u64,
    /// Seed of the clicks and conversions.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// What recovers from a failure.
    #[arg(long, value_enum, default_value_t = Strategy::RestartAll)]
    strategy: Strategy,
    /// Checkpoint interval for `--strategy restart-all`.
    #[arg(long, default_value_t = 100)]
    checkpoint_interval_ms: u64,
    /// Faults to inject (the fault language; operators `window` and
    /// `join`), e.g. `random:7:5:panic:window+join`. Input record `i` is
    /// click `i` (partition `i % 2`, sequence `i / 2`); conversions are
    /// partition 2.
    #[arg(long)]
    fault_schedule: Option<String>,
    /// Where the sorted JSONL output goes (default: counted, not kept).
    #[arg(long)]
    output: Option<PathBuf>,
    /// Worker cores (default: up to 2).
    #[arg(long)]
    cores: Option<usize>,
}

/// The span of one of `trend`'s buckets.
const BUCKET: u64 = 250 * MS;

/// Click `i`: `((click, user, ad), event time)`.
fn click(seed: u64, i: u64) -> ((u64, u32, u32), u64) {
    let h = mix(seed, i);
    let t = 1_000 * MS + i * 40 * US + (h >> 8) % (3 * MS);
    ((i, (h % 800) as u32, ((h >> 24) % 50) as u32), t)
}

/// The conversions, in event-time order: a third of the clicks, 1–200 ms
/// after them.
fn conversions(seed: u64, n: u64) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = (0..n)
        .filter(|i| mix(seed ^ 0x5eed, *i).is_multiple_of(3))
        .map(|i| {
            (
                i,
                click(seed, i).1 + MS + mix(seed ^ 0xc0de, i) % (199 * MS),
            )
        })
        .collect();
    v.sort_by_key(|c| (c.1, c.0));
    v
}

/// Clicks per user and window.
struct Count;

impl WindowAggregate<u32, (u64, u32, u32), String> for Count {
    const COMMUTATIVE: bool = true;
    type Acc = u64;
    fn add(&self, n: &mut u64, _c: &(u64, u32, u32)) {
        *n += 1;
    }
    fn merge(&self, n: &mut u64, other: u64) {
        *n += other;
    }
    fn result(&self, user: &u32, w: Window, n: &u64) -> String {
        format!("{{\"user\":{user},\"start\":{},\"clicks\":{n}}}", w.start)
    }
}

/// Per ad: conversions per bucket (by its end), reported by a timer at the
/// bucket's end, and the total reported so far.
struct Trend;

#[derive(Clone, Default, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct AdState {
    buckets: BTreeMap<u64, u64>,
    total: u64,
}

impl TimedProcess<u32, (u64, u32, u32), String> for Trend {
    type State = AdState;
    fn process(
        &mut self,
        ad: &u32,
        s: &mut AdState,
        r: Record<(u64, u32, u32)>,
        cx: &mut TimerContext<'_>,
        out: &mut Output<'_, String>,
    ) {
        let end = (r.event_time / BUCKET + 1) * BUCKET;
        if end <= cx.now() {
            // Its bucket was reported already.
            out.emit(format!("{{\"late\":{},\"ad\":{ad}}}", r.value.0));
            return;
        }
        *s.buckets.entry(end).or_default() += 1;
        cx.register(end);
    }
    fn on_timer(
        &mut self,
        ad: &u32,
        s: &mut AdState,
        at: u64,
        _cx: &mut TimerContext<'_>,
        out: &mut Output<'_, String>,
    ) {
        let n = s.buckets.remove(&at).unwrap_or(0);
        s.total += n;
        out.emit(format!(
            "{{\"ad\":{ad},\"bucket_end\":{at},\"conversions\":{n},\"total\":{}}}",
            s.total
        ));
    }
}

fn main() -> Result<(), common::Failed> {
    let args = Args::parse();
    if args.records == 0 {
        return Err("--records must be at least 1".into());
    }
    if args.checkpoint_interval_ms == 0 {
        return Err("--checkpoint-interval-ms must be at least 1".into());
    }
    common::in_workdir("ad-clicks", |work| run(&args, work))
}

fn run(args: &Args, work: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let (n, seed) = (args.records, args.seed);
    let job = JobBuilder::new("ad-clicks");
    job.default_parallelism(2);
    let bound = Watermarks::bounded(Duration::from_millis(3)).every(32);
    let clicks = job
        .source("clicks", move |info| {
            let (me, p) = (info.instance as u64, info.parallelism as u64);
            IterSource(
                (0..n)
                    .filter(move |i| i % p == me)
                    .map(move |i| click(seed, i)),
            )
        })
        .watermarks(bound.max_drift(Duration::from_millis(100)));
    let converted = job
        .source("conversions", move |_| {
            IterSource(conversions(seed, n).into_iter())
        })
        .parallelism(1)
        .watermarks(
            Watermarks::ascending()
                .every(32)
                .max_drift(Duration::from_millis(100)),
        );

    let windows = clicks
        .key_by(|c: &(u64, u32, u32)| c.1)
        .window(Windows::tumbling(Duration::from_millis(100)))
        .allowed_lateness(Duration::from_millis(20))
        .aggregate("window", Count);
    let join = clicks.key_by(|c: &(u64, u32, u32)| c.0).interval_join(
        &converted.key_by(|c: &u64| *c),
        Duration::ZERO,
        Duration::from_millis(500),
    );
    let join = if args.strategy == Strategy::Bqbs {
        join.standby()
    } else {
        join
    };
    let trend = join
        .process("join", |_click: &u64, c: &(u64, u32, u32), _conv: &u64| *c)
        .results()
        .key_by(|c: &(u64, u32, u32)| c.2)
        .process_timed("trend", |_| Trend);

    let dirs = [work.join("windows"), work.join("late"), work.join("trend")];
    let d = dirs.clone();
    windows.results().sink("windows", move |info| {
        TransactionalFile::for_instance(&d[0], info).expect("the output directory")
    });
    let d = dirs.clone();
    windows
        .late()
        .flat_map(
            "late-line",
            |c: (u64, u32, u32), out: &mut Output<'_, String>| {
                out.emit(format!("{{\"late\":{},\"user\":{}}}", c.0, c.1))
            },
        )
        .sink("late", move |info| {
            TransactionalFile::for_instance(&d[1], info).expect("the output directory")
        });
    let d = dirs.clone();
    trend.sink("reports", move |info| {
        TransactionalFile::for_instance(&d[2], info).expect("the output directory")
    });

    let every = Duration::from_millis(args.checkpoint_interval_ms);
    let mut config = common::config(args.strategy, args.cores, work, every);
    // Click i is the (i / 2)-th record of partition i % 2.
    let injector = common::injector(
        args.fault_schedule.as_deref(),
        n,
        &["window", "join"],
        |i| TupleId::new((i % 2) as u32, i / 2),
        &mut config,
    )?;

    let report = job.build()?.run(&config)?;
    let mut lines = Vec::new();
    let mut counts = Vec::new();
    for d in &dirs {
        let got = common::committed(d)?;
        counts.push(got.len());
        lines.extend(got);
    }
    lines.sort();
    say!(
        "{n} clicks, {} conversions: {} window results, {} late, {} trend lines, {:.0} records/s",
        conversions(seed, n).len(),
        counts[0],
        counts[1],
        counts[2],
        report.throughput()
    );
    common::finish(&report, injector.as_ref(), &lines, args.output.as_deref())
}
