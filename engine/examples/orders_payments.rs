//! Orders joined with payments by order ID, then a running count of paid
//! orders per customer — exact under injected faults.
//!
//! Orders come from two source partitions, payments from one (up to 30 ms
//! after their order, four orders in five paid); both have watermarks.
//! Operator `join` is an interval join in event time (a payment counts
//! within 1 s of its order); `count` is a keyed process function in event
//! time numbering each customer's paid orders. Both take their records in
//! event-time order, so the output is the same in every run.
//!
//! ```sh
//! cargo run --release -p tandem --example orders_payments -- \
//!     [--records 200000] [--seed 1] [--strategy none|restart-all|bqbs] \
//!     [--fault-schedule 'panic@join:~10'] [--output paid.jsonl]
//! ```
//!
//! The output is JSONL, sorted: `{"customer":C,"paid":N,"order":O,"amount":A}`
//! per paid order — the customer's `N`-th. `--strategy bqbs` puts an active
//! standby on `join` (a two-input operator: both inputs in its buffer
//! queues); `restart-all` takes checkpoints every 100 ms.

mod common;

use clap::Parser;
use common::{mix, say, Strategy, MS, US};
use std::path::PathBuf;
use std::time::Duration;
use tandem::sinks::transactional::TransactionalFile;
use tandem::time::{TimedProcess, TimerContext, Watermarks};
use tandem::{IterSource, JobBuilder, Output, Record, TupleId};

#[derive(Parser, Debug)]
#[command(about = "Orders joined with payments, then paid orders counted per customer")]
struct Args {
    /// Orders in all (over two source partitions).
    #[arg(long, default_value_t = 200_000)]
    records: u64,
    /// Seed of the orders and payments.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// What recovers from a failure.
    #[arg(long, value_enum, default_value_t = Strategy::Bqbs)]
    strategy: Strategy,
    /// Faults to inject (the fault language; operator `join`), e.g.
    /// `panic@join:~10` or `random:7:5`. Input record `i` is order `i`
    /// (partition `i % 2`, sequence `i / 2`); payments are partition 2.
    /// (`count` sees each pair in the envelope of its payment, which no
    /// input record number names.)
    #[arg(long)]
    fault_schedule: Option<String>,
    /// Where the sorted JSONL output goes (default: counted, not kept).
    #[arg(long)]
    output: Option<PathBuf>,
    /// Worker cores (default: up to 2).
    #[arg(long)]
    cores: Option<usize>,
}

/// Order `i`: `((order, customer, amount), event time)`, 50 µs apart,
/// jittered up to 2 ms.
fn order(seed: u64, i: u64) -> ((u64, u32, u32), u64) {
    let h = mix(seed, i);
    let t = 1_000 * MS + i * 50 * US + (h >> 8) % (2 * MS);
    ((i, (h % 500) as u32, ((h >> 20) % 10_000) as u32), t)
}

/// The payments, in the order they are paid: order `i` (four in five) up
/// to 30 ms after it was placed.
fn payments(seed: u64, n: u64) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = (0..n)
        .filter(|i| mix(seed, *i) % 5 != 4)
        .map(|i| {
            let delay = MS + (mix(seed ^ 0xabcd, i) % (29 * MS));
            (i, order(seed, i).1 + delay)
        })
        .collect();
    v.sort_by_key(|p| (p.1, p.0));
    v
}

/// The two sources kept within 100 ms of event time of each other: the
/// join holds the faster one's records until the slower's watermark passes
/// them, so without alignment what it holds (and every recovery point
/// carries) grows with the drift.
fn aligned(w: Watermarks) -> Watermarks {
    w.max_drift(Duration::from_millis(100))
}

/// Numbers each customer's paid orders, in event-time order.
struct CountPaid;

impl TimedProcess<u32, (u64, u32, u32), String> for CountPaid {
    type State = u64;
    fn process(
        &mut self,
        customer: &u32,
        n: &mut u64,
        r: Record<(u64, u32, u32)>,
        _cx: &mut TimerContext<'_>,
        out: &mut Output<'_, String>,
    ) {
        *n += 1;
        let (order, _, amount) = r.value;
        out.emit(format!(
            "{{\"customer\":{customer},\"paid\":{n},\"order\":{order},\"amount\":{amount}}}"
        ));
    }
    fn on_timer(
        &mut self,
        _c: &u32,
        _n: &mut u64,
        _at: u64,
        _cx: &mut TimerContext<'_>,
        _out: &mut Output<'_, String>,
    ) {
    }
}

fn main() -> Result<(), common::Failed> {
    let args = Args::parse();
    if args.records == 0 {
        return Err("--records must be at least 1".into());
    }
    common::in_workdir("orders", |work| run(&args, work))
}

fn run(args: &Args, work: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let (n, seed) = (args.records, args.seed);
    let job = JobBuilder::new("orders-payments");
    job.default_parallelism(2);
    let orders = job
        .source("orders", move |info| {
            let (me, p) = (info.instance as u64, info.parallelism as u64);
            IterSource(
                (0..n)
                    .filter(move |i| i % p == me)
                    .map(move |i| order(seed, i)),
            )
        })
        .watermarks(aligned(
            Watermarks::bounded(Duration::from_millis(2)).every(32),
        ));
    let paid = job
        .source("payments", move |_| {
            IterSource(payments(seed, n).into_iter())
        })
        .parallelism(1)
        .watermarks(aligned(Watermarks::ascending().every(32)));
    let join = orders.key_by(|o: &(u64, u32, u32)| o.0).interval_join(
        &paid.key_by(|p: &u64| *p),
        Duration::ZERO,
        Duration::from_secs(1),
    );
    let join = if args.strategy == Strategy::Bqbs {
        join.standby()
    } else {
        join
    };
    let out = work.join("out");
    let o = out.clone();
    join.process("join", |_order: &u64, o: &(u64, u32, u32), _p: &u64| *o)
        .results()
        .key_by(|o: &(u64, u32, u32)| o.1)
        .process_timed("count", |_| CountPaid)
        .sink("paid", move |info| {
            TransactionalFile::for_instance(&o, info).expect("the output directory")
        });

    let mut config = common::config(args.strategy, args.cores, work, Duration::from_millis(100));
    // Order i is the (i / 2)-th record of partition i % 2.
    let injector = common::injector(
        args.fault_schedule.as_deref(),
        n,
        &["join"],
        |i| TupleId::new((i % 2) as u32, i / 2),
        &mut config,
    )?;

    let report = job.build()?.run(&config)?;
    let mut got = common::committed(&out)?;
    got.sort();
    say!(
        "{n} orders, {} payments, {} paid orders counted, {:.0} records/s",
        payments(seed, n).len(),
        got.len(),
        report.throughput()
    );
    common::finish(&report, injector.as_ref(), &got, args.output.as_deref())
}
