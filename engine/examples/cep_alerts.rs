//! Alerts from a pattern over trades (complex event processing) — exact
//! under injected faults.
//!
//! Two source partitions of trades over 200 symbols, event times up to
//! 2 ms out of order, one in five hundred 50 ms late. Per symbol, operator
//! `cep` matches the seeds' pattern: a trade with id 42, then (strictly
//! next) one with a volume above 10, then (later) one named `end`, all
//! within 20 ms of event time. Each match is an alert; partial matches
//! that time out and late trades go to their side outputs.
//!
//! ```sh
//! cargo run --release -p tandem --example cep_alerts -- \
//!     [--records 200000] [--seed 1] [--strategy none|restart-all|bqbs] \
//!     [--fault-schedule 'panic@cep:~10'] [--output alerts.jsonl]
//! ```
//!
//! The output is JSONL, sorted: `{"alert":SYMBOL,"start":I,"middle":J,"end":K}`
//! per match (trade numbers), `{"timeout":SYMBOL,"trades":[I,…]}` per
//! timed-out partial match and `{"late":I}` per late trade. Run it once
//! without faults and once with, and compare the files: they are
//! identical.

mod common;

use clap::Parser;
use common::{mix, say, Strategy, MS, US};
use rkyv::{Archive, Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;
use tandem::cep::{Match, Pattern};
use tandem::sinks::transactional::TransactionalFile;
use tandem::standby::codec::Codec;
use tandem::time::Watermarks;
use tandem::{IterSource, JobBuilder, Output, TupleId};

#[derive(Parser, Debug)]
#[command(about = "Alerts from a pattern over trades, exact under injected faults")]
struct Args {
    /// Trades in all (over two source partitions).
    #[arg(long, default_value_t = 200_000)]
    records: u64,
    /// Seed of the trades.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// What recovers from a failure.
    #[arg(long, value_enum, default_value_t = Strategy::Bqbs)]
    strategy: Strategy,
    /// Faults to inject (the fault language; operator `cep`), e.g.
    /// `panic@cep:~10` or `random:7:5`.
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
const SYMBOLS: u64 = 200;

/// A trade.
#[derive(Clone, Debug, PartialEq, Archive, Serialize, Deserialize, Codec)]
struct Trade {
    /// Its number in the input.
    n: u64,
    symbol: u32,
    id: u32,
    /// Volume, in tenths.
    volume: u32,
    /// `end` or another name.
    end: bool,
}

/// Trade `i`: a symbol at random, an id of 0–49, a volume of 0–20.0, one
/// in twelve named `end`; times advance 10 µs a trade, jittered up to
/// 2 ms; one in five hundred is 50 ms late.
fn trade(seed: u64, i: u64) -> (Trade, u64) {
    let h = mix(seed, i);
    let t = Trade {
        n: i,
        symbol: (h % SYMBOLS) as u32,
        id: ((h >> 12) % 50) as u32,
        volume: ((h >> 20) % 201) as u32,
        end: (h >> 30).is_multiple_of(12),
    };
    let mut at = 100 * MS + i * 10 * US + (h >> 40) % (2 * MS);
    if (h >> 52).is_multiple_of(500) {
        at -= 50 * MS;
    }
    (t, at)
}

fn main() -> Result<(), common::Failed> {
    let args = Args::parse();
    if args.records == 0 {
        return Err("--records must be at least 1".into());
    }
    common::in_workdir("cep_alerts", |work| run(&args, work))
}

fn numbers<'a>(m: &'a Match<Trade>, stage: &'a str) -> impl Iterator<Item = u64> + 'a {
    m.get(stage).map(|t| t.n)
}

fn run(args: &Args, work: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let (records, seed) = (args.records, args.seed);
    let job = JobBuilder::new("cep_alerts");
    job.default_parallelism(PARTITIONS as usize);
    let trades = job
        .source("trades", move |info| {
            let (me, n) = (info.instance as u64, info.parallelism as u64);
            IterSource(
                (0..records)
                    .filter(move |i| i % n == me)
                    .map(move |i| trade(seed, i)),
            )
        })
        .watermarks(
            Watermarks::bounded(Duration::from_millis(2))
                .every(32)
                .max_drift(Duration::from_millis(100)),
        );
    let trades = if args.strategy == Strategy::Bqbs {
        trades.standby()
    } else {
        trades
    };
    let pattern = Pattern::begin("start")
        .when(|t: &Trade| t.id == 42)
        .next("middle")
        .when(|t: &Trade| t.volume > 100)
        .followed_by("end")
        .when(|t: &Trade| t.end)
        .within(Duration::from_millis(20));
    let found = trades.key_by(|t: &Trade| t.symbol).cep("cep", pattern);

    let out = work.join("out");
    let o = out.clone();
    found
        .matches()
        .map("alert-line", |m: Match<Trade>| {
            let one = |s| numbers(&m, s).next().unwrap_or(u64::MAX);
            format!(
                "{{\"alert\":{},\"start\":{},\"middle\":{},\"end\":{}}}",
                m.events[0].event.symbol,
                one("start"),
                one("middle"),
                one("end")
            )
        })
        .sink("alerts", move |info| {
            TransactionalFile::for_instance(&o, info).expect("the output directory")
        });
    let timeouts = work.join("timeouts");
    let o = timeouts.clone();
    found
        .timed_out()
        .map("timeout-line", |m: Match<Trade>| {
            let n: Vec<String> = m.events.iter().map(|t| t.event.n.to_string()).collect();
            format!(
                "{{\"timeout\":{},\"trades\":[{}]}}",
                m.events[0].event.symbol,
                n.join(",")
            )
        })
        .sink("timeouts", move |info| {
            TransactionalFile::for_instance(&o, info).expect("the output directory")
        });
    let late = work.join("late");
    let o = late.clone();
    found
        .late()
        .flat_map("late-line", |t: Trade, out: &mut Output<'_, String>| {
            out.emit(format!("{{\"late\":{}}}", t.n))
        })
        .sink("late-trades", move |info| {
            TransactionalFile::for_instance(&o, info).expect("the output directory")
        });

    let mut config = common::config(args.strategy, args.cores, work, Duration::from_millis(100));
    // Trade i is the (i / 2)-th record of partition i % 2.
    let injector = common::injector(
        args.fault_schedule.as_deref(),
        records,
        &["cep"],
        |i| TupleId::new((i % PARTITIONS) as u32, i / PARTITIONS),
        &mut config,
    )?;

    let report = job.build()?.run(&config)?;
    let mut lines = common::committed(&out)?;
    let alerts = lines.len();
    let t = common::committed(&timeouts)?;
    let timed_out = t.len();
    lines.extend(t);
    let l = common::committed(&late)?;
    let late_n = l.len();
    lines.extend(l);
    lines.sort();
    say!(
        "{records} trades, {alerts} alerts, {timed_out} timed-out partial matches, {late_n} late trades, {:.0} trades/s",
        report.throughput()
    );
    common::finish(&report, injector.as_ref(), &lines, args.output.as_deref())
}
