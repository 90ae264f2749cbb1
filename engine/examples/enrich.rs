//! Orders enriched by a call to a service (asynchronous I/O) — exact under
//! injected faults.
//!
//! The example starts a lookup service on a loopback TCP port: each line
//! `CUSTOMER` is answered, after `--service-delay-us`, with the customer's
//! tier (or `unknown`). Two source partitions of orders go through
//! `async_map("enrich", AsyncIo::ordered|unordered(capacity, timeout), …)`,
//! which keeps up to `--capacity` requests in flight per instance on helper
//! threads; orders of unknown customers go to a side output, the rest are
//! summed per tier. Requests in flight are drained before every barrier and
//! standby chunk, so a restart or takeover asks the service again for
//! exactly the orders it replays.
//!
//! ```sh
//! cargo run --release -p tandem --example enrich -- \
//!     [--records 200000] [--capacity 16] [--mode ordered|unordered] \
//!     [--service-delay-us 200] [--strategy none|restart-all|region|bqbs] \
//!     [--fault-schedule 'panic@enrich:~10'] [--output enriched.txt]
//! ```
//!
//! The output is sorted lines: `ORDER CUSTOMER TIER AMOUNT` per enriched
//! order, `unknown ORDER CUSTOMER` per order of an unknown customer, and
//! `tier TIER ORDERS AMOUNT` per tier at the end. Run it once without
//! faults and once with, and compare the files: they are identical.

mod common;

use clap::{Parser, ValueEnum};
use common::{mix, say, Strategy};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tandem::sinks::transactional::TransactionalFile;
use tandem::{AsyncIo, IterSource, JobBuilder, Output, OutputTag, Sided, TupleId};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// Results leave in the orders' order.
    Ordered,
    /// Results leave as the service answers.
    Unordered,
}

#[derive(Parser, Debug)]
#[command(about = "Orders enriched by a loopback service (async I/O), exact under injected faults")]
struct Args {
    /// Orders in all (over two source partitions).
    #[arg(long, default_value_t = 200_000)]
    records: u64,
    /// Requests in flight per instance of `enrich`.
    #[arg(long, default_value_t = 16)]
    capacity: usize,
    /// Ordered or unordered results.
    #[arg(long, value_enum, default_value_t = Mode::Ordered)]
    mode: Mode,
    /// How long the service takes to answer a request, in µs.
    #[arg(long, default_value_t = 200)]
    service_delay_us: u64,
    /// What recovers from a failure.
    #[arg(long, value_enum, default_value_t = Strategy::Bqbs)]
    strategy: Strategy,
    /// Faults to inject (the fault language; operator `enrich`), e.g.
    /// `panic@enrich:~10`.
    #[arg(long)]
    fault_schedule: Option<String>,
    /// Where the sorted output goes (default: counted, not kept).
    #[arg(long)]
    output: Option<PathBuf>,
    /// Worker cores (default: up to 2).
    #[arg(long)]
    cores: Option<usize>,
}

const PARTITIONS: u64 = 2;
const CUSTOMERS: u64 = 10_000;
const UNKNOWN: OutputTag<(u64, u64)> = OutputTag::new("unknown");

/// Order `i`: a customer and an amount in cents.
fn order(i: u64) -> (u64, u64, u64) {
    let h = mix(7, i);
    (i, h % CUSTOMERS, 100 + (h >> 20) % 10_000)
}

/// The tier the service gives `customer`: one in fifty is unknown.
fn tier_of(customer: u64) -> Option<u8> {
    let h = mix(11, customer);
    (!h.is_multiple_of(50)).then_some((h >> 8) as u8 % 4)
}

/// Starts the lookup service; its port and the requests it answered.
fn serve(delay: Duration) -> std::io::Result<(u16, Arc<AtomicU64>)> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let port = l.local_addr()?.port();
    let served = Arc::new(AtomicU64::new(0));
    let s = Arc::clone(&served);
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { return };
            let s = Arc::clone(&s);
            std::thread::spawn(move || {
                let _ = c.set_nodelay(true);
                let Ok(mut w) = c.try_clone() else { return };
                for line in BufReader::new(c).lines() {
                    let Ok(line) = line else { return };
                    let customer: u64 = line.trim().parse().unwrap_or(u64::MAX);
                    std::thread::sleep(delay);
                    let answer = match tier_of(customer) {
                        Some(t) => format!("{t}\n"),
                        None => "unknown\n".to_string(),
                    };
                    s.fetch_add(1, Ordering::Relaxed);
                    if w.write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    Ok((port, served))
}

thread_local! {
    /// Each helper thread's connection to the service.
    static CONN: std::cell::RefCell<Option<(BufReader<TcpStream>, TcpStream)>> =
        const { std::cell::RefCell::new(None) };
}

/// Asks the service on `port` for `customer`'s tier. A broken connection
/// panics: the operator fails, naming the record, and recovers.
fn lookup(port: u16, customer: u64) -> Option<u8> {
    CONN.with(|c| {
        let mut c = c.borrow_mut();
        let (r, w) = c.get_or_insert_with(|| {
            let s = TcpStream::connect(("127.0.0.1", port)).expect("connecting to the service");
            let _ = s.set_nodelay(true);
            (BufReader::new(s.try_clone().expect("a second handle")), s)
        });
        writeln!(w, "{customer}").expect("asking the service");
        let mut line = String::new();
        r.read_line(&mut line)
            .expect("reading the service's answer");
        line.trim().parse().ok()
    })
}

fn main() -> Result<(), common::Failed> {
    let args = Args::parse();
    if args.records == 0 || args.capacity == 0 {
        return Err("--records and --capacity must be at least 1".into());
    }
    common::in_workdir("enrich", |work| run(&args, work))
}

fn run(args: &Args, work: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let records = args.records;
    let (port, served) = serve(Duration::from_micros(args.service_delay_us))?;
    let job = JobBuilder::new("enrich");
    job.default_parallelism(PARTITIONS as usize);
    let orders = job.source("orders", move |info| {
        let (me, n) = (info.instance as u64, info.parallelism as u64);
        IterSource(
            (0..records)
                .filter(move |i| i % n == me)
                .map(move |i| (order(i), i)),
        )
    });
    let orders = if args.strategy == Strategy::Bqbs {
        orders.standby()
    } else {
        orders
    };
    let io = match args.mode {
        Mode::Ordered => AsyncIo::ordered(args.capacity, Duration::from_secs(10)),
        Mode::Unordered => AsyncIo::unordered(args.capacity, Duration::from_secs(10)),
    };
    let enriched = orders
        .async_map(
            "enrich",
            io,
            move |(i, customer, amount): (u64, u64, u64)| {
                (i, customer, amount, lookup(port, customer))
            },
        )
        .flat_map(
            "route",
            |(i, customer, amount, tier): (u64, u64, u64, Option<u8>),
             out: &mut Output<'_, Sided<(u64, u64, u8, u64)>>| match tier {
                Some(t) => out.main((i, customer, t, amount)),
                None => out.side(&UNKNOWN, (i, customer)),
            },
        );

    let dirs = ["enriched", "unknown", "tiers"].map(|d| work.join(d));
    let o = dirs[0].clone();
    enriched
        .main()
        .map("enriched-line", |(i, c, t, a): (u64, u64, u8, u64)| {
            format!("{i} {c} {t} {a}")
        })
        .sink("enriched-out", move |info| {
            TransactionalFile::for_instance(&o, info).expect("the output directory")
        });
    let o = dirs[1].clone();
    enriched
        .side_output(&UNKNOWN)
        .map("unknown-line", |(i, c): (u64, u64)| {
            format!("unknown {i} {c}")
        })
        .sink("unknown-out", move |info| {
            TransactionalFile::for_instance(&o, info).expect("the output directory")
        });
    let o = dirs[2].clone();
    enriched
        .main()
        .key_by(|r: &(u64, u64, u8, u64)| r.2)
        .process("per-tier", |_| PerTier)
        .sink("tiers-out", move |info| {
            TransactionalFile::for_instance(&o, info).expect("the output directory")
        });

    let mut config = common::config(args.strategy, args.cores, work, Duration::from_millis(100));
    let injector = common::injector(
        args.fault_schedule.as_deref(),
        records,
        &["enrich"],
        |i| TupleId::new((i % PARTITIONS) as u32, i / PARTITIONS),
        &mut config,
    )?;
    let report = job.build()?.run(&config)?;
    let mut lines = Vec::new();
    let mut counts = Vec::new();
    for d in &dirs {
        let l = common::committed(d)?;
        counts.push(l.len());
        lines.extend(l);
    }
    lines.sort();
    let asked = served.load(Ordering::Relaxed);
    say!(
        "{records} orders: {} enriched, {} of unknown customers, {} tiers; {:.0} orders/s; \
         the service answered {asked} requests ({} again after recoveries)",
        counts[0],
        counts[1],
        counts[2],
        report.throughput(),
        asked.saturating_sub(records)
    );
    common::finish(&report, injector.as_ref(), &lines, args.output.as_deref())
}

/// Per tier: its orders and their amount, said at the end.
struct PerTier;

impl tandem::KeyedProcess<u8, (u64, u64, u8, u64), String> for PerTier {
    type State = (u64, u64);
    fn process(
        &mut self,
        _tier: &u8,
        s: &mut (u64, u64),
        r: tandem::Record<(u64, u64, u8, u64)>,
        _out: &mut Output<'_, String>,
    ) {
        s.0 += 1;
        s.1 += r.value.3;
    }
    fn on_end(&mut self, tier: &u8, s: &mut (u64, u64), out: &mut Output<'_, String>) {
        out.emit(format!("tier {tier} {} {}", s.0, s.1));
    }
}
