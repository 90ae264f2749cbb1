//! The Nexmark queries q0–q8 (but q6) as nexmark-flink's SQL defines
//! them, as Tandem jobs over the generator.
//!
//! | query | what | operators (by role) |
//! | --- | --- | --- |
//! | q0 | every bid, passed through | `bids` |
//! | q1 | bids in euros (`price × 0.908`) | `map` |
//! | q2 | bids on auctions `auction % 123 == 0` | `filter` |
//! | q3 | persons in OR, ID or CA ⋈ their auctions in category 10 | `join` |
//! | q4 | average closing price per category | `join`, `aggregate` |
//! | q5 | hot items: the most bid auctions of each 10 s window sliding every 2 s | `window`, `max` |
//! | q7 | the highest bids of each 10 s tumbling window | `window` |
//! | q8 | persons who opened an auction in the 10 s tumbling window they registered in | `window`, `join` |
//!
//! Event time is the events' `date_time`; windows align to multiples of
//! their size (or slide) from the epoch. Where the SQL's result is a
//! changing table (q3, q4), each change is a row: q3 appends a row per
//! match; q4 a category's new average each time one of its auctions
//! closes — auctions close in (expiry, id) order, so the rows are the same
//! whatever the parallelism or interleaving.

use super::gen::{GenConfig, Kind, Tables};
use super::model::{Auction, Bid, Event, Person};
pub use super::ops::Closed;
use super::ops::{Count, Highest, Most, Opened, Q3Join, Q4Aggregate, Q4Join, Q8Join};
pub use super::rows::{
    event_json, AuctionPrice, CategoryAvg, Euro, HighestBid, HotItem, NewUser, Row, Suggestion,
};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tandem::sinks::transactional::TransactionalFile;
use tandem::time::{Watermarks, Windows};
use tandem::{Committer, Data, IterSource, JobBuilder, Output, Record, Sink, Stream, TupleId};

/// Nanoseconds per millisecond: event times are `date_time` in ns.
pub const MS: u64 = 1_000_000;
/// The 10 s windows of q5, q7 and q8.
pub const WINDOW_MS: u64 = 10_000;
/// q5's slide.
pub const SLIDE_MS: u64 = 2_000;

/// A query.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Query {
    /// Pass-through.
    Q0,
    /// Currency conversion.
    Q1,
    /// Selection.
    Q2,
    /// Local item suggestion.
    Q3,
    /// Average closing price per category.
    Q4,
    /// Hot items.
    Q5,
    /// Highest bid.
    Q7,
    /// Monitor new users.
    Q8,
}

impl Query {
    /// Every query.
    pub const ALL: [Query; 8] = [
        Query::Q0,
        Query::Q1,
        Query::Q2,
        Query::Q3,
        Query::Q4,
        Query::Q5,
        Query::Q7,
        Query::Q8,
    ];

    /// `q0` …
    pub fn name(self) -> &'static str {
        match self {
            Query::Q0 => "q0",
            Query::Q1 => "q1",
            Query::Q2 => "q2",
            Query::Q3 => "q3",
            Query::Q4 => "q4",
            Query::Q5 => "q5",
            Query::Q7 => "q7",
            Query::Q8 => "q8",
        }
    }

    /// The query's operators that `--standby` and the fault language name,
    /// each with the kind of event whose tuple IDs reach it (record `i` of
    /// a fault schedule aimed at it is that kind's `i`-th event); `None`:
    /// its inputs are results of an operator before it, which record
    /// numbers do not name (it can have a standby, and faults of the kinds
    /// that need no record).
    pub fn operators(self) -> &'static [(&'static str, Option<Kind>)] {
        match self {
            Query::Q0 => &[("bids", Some(Kind::Bid))],
            Query::Q1 => &[("map", Some(Kind::Bid))],
            Query::Q2 => &[("filter", Some(Kind::Bid))],
            Query::Q3 => &[("join", Some(Kind::Person))],
            Query::Q4 => &[("join", Some(Kind::Bid)), ("aggregate", None)],
            Query::Q5 => &[("window", Some(Kind::Bid)), ("max", None)],
            Query::Q7 => &[("window", Some(Kind::Bid))],
            Query::Q8 => &[
                ("window", Some(Kind::Auction)),
                ("join", Some(Kind::Person)),
            ],
        }
    }
}

/// How a query's job is built.
#[derive(Clone, Debug)]
pub struct Options {
    /// The generator.
    pub gen: GenConfig,
    /// Events in all.
    pub events: u64,
    /// Source partitions (and the parallelism of every operator).
    pub partitions: usize,
    /// Paces the sources to the generator's rate.
    pub paced: bool,
    /// The operator that gets an active standby.
    pub standby: Option<String>,
    /// A directory for the output, one JSON object per line, committed
    /// exactly once (none: results are counted only).
    pub output: Option<PathBuf>,
}

/// What the sinks saw.
#[derive(Debug, Default)]
pub struct Counts {
    /// Results.
    pub records_out: AtomicU64,
    /// Records a window dropped as late.
    pub late_records: AtomicU64,
}

/// Event `n` of `partitions` is record `n / partitions` of partition
/// `n % partitions`.
pub fn tuple_of(partitions: usize, n: u64) -> TupleId {
    let p = partitions as u64;
    TupleId::new((n % p) as u32, n / p)
}

/// `q0`'s job (and the others'), its results counted in the returned
/// [`Counts`] and written as JSONL to `opts.output` if set.
pub fn build(
    query: Query,
    opts: &Options,
    tables: Arc<Tables>,
) -> anyhow::Result<(tandem::Job, Arc<Counts>)> {
    if let Some(op) = &opts.standby {
        anyhow::ensure!(
            query.operators().iter().any(|(o, _)| o == op),
            "{} has no operator `{op}` to give a standby (it has: {})",
            query.name(),
            query
                .operators()
                .iter()
                .map(|(o, _)| format!("`{o}`"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let job = JobBuilder::new(format!("nexmark-{}", query.name()));
    job.default_parallelism(opts.partitions);
    let counts = Arc::new(Counts::default());
    let q = Q {
        events: source(&job, opts, Arc::clone(&tables)),
        standby: opts.standby.clone(),
        counts: Arc::clone(&counts),
        output: opts.output.clone(),
    };
    match query {
        Query::Q0 => q0(&q),
        Query::Q1 => q1(&q),
        Query::Q2 => q2(&q),
        Query::Q3 => q3(&q),
        Query::Q4 => q4(&q),
        Query::Q5 => q5(&q),
        Query::Q7 => q7(&q),
        Query::Q8 => q8(&q),
    }
    Ok((job.build()?, counts))
}

/// The generator as `opts.partitions` source partitions: partition `p`
/// generates events `p, p + P, …`.
fn source(job: &JobBuilder, opts: &Options, tables: Arc<Tables>) -> Stream<Event> {
    let (gen, events) = (opts.gen, opts.events);
    let s = job
        .source("events", move |info| {
            let (p, n) = (info.instance as u64, info.parallelism as u64);
            let tables = Arc::clone(&tables);
            IterSource((p..events).step_by(n as usize).map(move |i| {
                let e = gen.event(i, &tables);
                let t = e.date_time() * MS;
                (e, t)
            }))
        })
        .watermarks(Watermarks::bounded(Duration::ZERO).every(256));
    if opts.paced {
        // The total rate: the engine splits it over the partitions.
        s.rate_limit(gen.rate)
    } else {
        s
    }
}

struct Q {
    events: Stream<Event>,
    standby: Option<String>,
    counts: Arc<Counts>,
    output: Option<PathBuf>,
}

impl Q {
    fn backed(&self, op: &str) -> bool {
        self.standby.as_deref() == Some(op)
    }

    /// `s`, with a standby on the operator it feeds if that is `op`.
    fn feed<T: Data + tandem::standby::codec::Codec + Sync>(
        &self,
        s: Stream<T>,
        op: &str,
    ) -> Stream<T> {
        if self.backed(op) {
            s.standby()
        } else {
            s
        }
    }

    /// The bids, every column.
    fn bids(&self) -> Stream<Bid> {
        self.bids_reading(Cols::All)
    }

    /// The bids with only the strings `cols` names: the others are
    /// dropped on the source's core, before the bids cross to another —
    /// as Flink's planner projects away the columns a query does not read
    /// before a shuffle.
    fn bids_reading(&self, cols: Cols) -> Stream<Bid> {
        self.events
            .flat_map("bid-events", move |e: Event, out: &mut Output<'_, Bid>| {
                if let Event::Bid(mut b) = e {
                    if cols != Cols::All {
                        b.channel = String::new();
                        b.url = String::new();
                    }
                    if cols == Cols::Numbers {
                        b.extra = String::new();
                    }
                    out.emit(b)
                }
            })
    }

    /// The persons with their name, city and state (what q3 and q8 read;
    /// see [`Q::bids_reading`]).
    fn persons(&self) -> Stream<Person> {
        self.events
            .flat_map("person-events", |e: Event, out: &mut Output<'_, Person>| {
                if let Event::Person(p) = e {
                    out.emit(person_cols(*p))
                }
            })
    }

    /// The auctions without their strings (q3, q4 and q8 read none; see
    /// [`Q::bids_reading`]).
    fn auctions(&self) -> Stream<Auction> {
        self.events.flat_map(
            "auction-events",
            |e: Event, out: &mut Output<'_, Auction>| {
                if let Event::Auction(mut a) = e {
                    a.item_name = String::new();
                    a.description = String::new();
                    a.extra = String::new();
                    out.emit(*a)
                }
            },
        )
    }

    /// The sink: counts the rows, and writes them if asked to.
    fn sink<R: Row>(&self, rows: Stream<R>) {
        let counts = Arc::clone(&self.counts);
        let dir = self.output.clone();
        rows.sink("sink", move |info| RowSink {
            counts: Arc::clone(&counts),
            file: dir.as_ref().map(|d| {
                TransactionalFile::open(d, info.instance, info.attempt, info.restored.clone())
                    .unwrap_or_else(|e| panic!("opening the output in {}: {e}", d.display()))
            }),
            line: String::new(),
        });
    }

    /// Late records of window `op` are counted.
    fn count_late<T: Data>(&self, op: &str, late: Stream<T>) {
        let counts = Arc::clone(&self.counts);
        late.for_each(&format!("{op}.late-count"), move |_| {
            counts.late_records.fetch_add(1, Ordering::Relaxed);
        });
    }
}

/// Which of a bid's strings a query reads ([`Q::bids_reading`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cols {
    /// Every column.
    All,
    /// The numbers and `extra` (q7).
    Extra,
    /// The numbers only (q4, q5).
    Numbers,
}

/// A person with the strings q3 and q8 read: name, city and state.
fn person_cols(mut p: Person) -> Person {
    p.email_address = String::new();
    p.credit_card = String::new();
    p.extra = String::new();
    p
}

/// Counts rows; writes them, exactly once, when the run has an output.
struct RowSink {
    counts: Arc<Counts>,
    file: Option<TransactionalFile>,
    line: String,
}

impl<R: Row> Sink<R> for RowSink {
    fn write(&mut self, r: Record<R>) -> std::io::Result<()> {
        self.counts.records_out.fetch_add(1, Ordering::Relaxed);
        if let Some(f) = &mut self.file {
            self.line.clear();
            r.value.json(&mut self.line);
            self.line.push('\n');
            f.write(self.line.as_bytes())?;
        }
        Ok(())
    }
    fn pre_commit(&mut self, checkpoint: u64) -> std::io::Result<()> {
        match &mut self.file {
            Some(f) => f.pre_commit(checkpoint),
            None => Ok(()),
        }
    }
    fn committer(&self) -> Option<Box<dyn Committer>> {
        self.file
            .as_ref()
            .map(|f| Box::new(f.committer()) as Box<dyn Committer>)
    }
}

// ------------------------------------------------------------- queries

fn q0(q: &Q) {
    let bids = q.feed(q.events.clone(), "bids");
    let rows = bids.flat_map("bids", |e: Event, out: &mut Output<'_, Bid>| {
        if let Event::Bid(b) = e {
            out.emit(b)
        }
    });
    q.sink(rows);
}

fn q1(q: &Q) {
    let bids = q.feed(q.bids(), "map");
    let rows = bids.map("map", |b: Bid| Euro {
        auction: b.auction,
        bidder: b.bidder,
        price_milli: b.price * 908,
        date_time: b.date_time,
        extra: b.extra,
    });
    q.sink(rows);
}

fn q2(q: &Q) {
    let bids = q.feed(q.bids(), "filter");
    let rows = bids.flat_map("filter", |b: Bid, out: &mut Output<'_, AuctionPrice>| {
        if b.auction.is_multiple_of(123) {
            out.emit(AuctionPrice {
                auction: b.auction,
                price: b.price,
            })
        }
    });
    q.sink(rows);
}

fn q3(q: &Q) {
    let persons = q.persons().key_by(|p: &Person| p.id);
    let auctions = q
        .auctions()
        .filter("category-10", |a: &Auction| a.category == 10)
        .key_by(|a: &Auction| a.seller);
    let joined = persons.connect(&auctions);
    let rows = if q.backed("join") {
        joined.standby().process_timed("join", |_| Q3Join)
    } else {
        joined.process_timed("join", |_| Q3Join)
    };
    q.sink(rows);
}

fn q4(q: &Q) {
    let auctions = q.auctions().key_by(|a: &Auction| a.id);
    let bids = q.bids_reading(Cols::Numbers).key_by(|b: &Bid| b.auction);
    let joined = auctions.connect(&bids);
    let closed = if q.backed("join") {
        joined.standby().process_timed("join", |_| Q4Join)
    } else {
        joined.process_timed("join", |_| Q4Join)
    };
    let rows = q
        .feed(closed, "aggregate")
        .key_by(|c: &Closed| c.category)
        .process_timed("aggregate", |_| Q4Aggregate);
    q.sink(rows);
}

fn q5(q: &Q) {
    let bids = q.feed(q.bids_reading(Cols::Numbers), "window");
    let counts = bids
        .key_by(|b: &Bid| b.auction)
        .window(Windows::sliding(
            Duration::from_millis(WINDOW_MS),
            Duration::from_millis(SLIDE_MS),
        ))
        .aggregate("window", Count);
    q.count_late("window", counts.late());
    // A window's counts carry its last instant: the 2 s tumbling window
    // that ends with it holds them all, and nothing else.
    let top = q
        .feed(counts.results(), "max")
        .key_by(|h: &HotItem| h.window_end)
        .window(Windows::tumbling(Duration::from_millis(SLIDE_MS)))
        .aggregate("max", Most);
    q.count_late("max", top.late());
    q.sink(ties(top.results()));
}

/// A window's tied results, one row each.
fn ties<R: Row>(windows: Stream<Vec<R>>) -> Stream<R> {
    windows.flat_map("ties", |v: Vec<R>, out: &mut Output<'_, R>| {
        for r in v {
            out.emit(r)
        }
    })
}

fn q7(q: &Q) {
    let bids = q.feed(q.bids_reading(Cols::Extra), "window");
    let top = bids
        .window_all(Windows::tumbling(Duration::from_millis(WINDOW_MS)))
        .aggregate("window", Highest);
    q.count_late("window", top.late());
    q.sink(ties(top.results()));
}

fn q8(q: &Q) {
    let auctions = q.feed(q.auctions(), "window");
    let opened = auctions
        .key_by(|a: &Auction| a.seller)
        .window(Windows::tumbling(Duration::from_millis(WINDOW_MS)))
        .aggregate("window", Opened);
    q.count_late("window", opened.late());
    // The join may not take one input from an operator with a standby and
    // the other from one without: with `window` backed up, so is the
    // extraction of the persons.
    let persons = if q.backed("window") {
        q.events
            .standby()
            .flat_map("person-events", |e: Event, out: &mut Output<'_, Person>| {
                if let Event::Person(p) = e {
                    out.emit(person_cols(*p))
                }
            })
    } else {
        q.persons()
    };
    let persons = persons.key_by(|p: &Person| p.id);
    let sellers = opened.results().key_by(|o: &(u64, u64)| o.0);
    let joined = persons.connect(&sellers);
    let rows = if q.backed("join") {
        joined.standby().process_timed("join", |_| Q8Join)
    } else {
        joined.process_timed("join", |_| Q8Join)
    };
    q.sink(rows);
}

/// Where a run's committed output lines are, given its output directory.
pub fn committed_lines(dir: &std::path::Path) -> std::io::Result<Vec<String>> {
    let mut v = Vec::new();
    if !dir.exists() {
        return Ok(v);
    }
    for p in TransactionalFile::committed_files(dir)? {
        v.extend(std::fs::read_to_string(p)?.lines().map(str::to_string));
    }
    Ok(v)
}
