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
use rkyv::{Archive, Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tandem::sinks::transactional::TransactionalFile;
use tandem::time::{
    TimedCoProcess, TimedProcess, TimerContext, Watermarks, Window, WindowAggregate, Windows,
};
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

/// A result row.
pub trait Row: Data {
    /// The row as one JSON object (no newline).
    fn json(&self, t: &Tables, out: &mut String);
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
        events: source(&job, opts),
        standby: opts.standby.clone(),
        counts: Arc::clone(&counts),
        tables,
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
fn source(job: &JobBuilder, opts: &Options) -> Stream<Event> {
    let (gen, events) = (opts.gen, opts.events);
    let s = job
        .source("events", move |info| {
            let (p, n) = (info.instance as u64, info.parallelism as u64);
            IterSource((p..events).step_by(n as usize).map(move |i| {
                let e = gen.event(i);
                let t = e.date_time() * MS;
                (e, t)
            }))
        })
        .watermarks(Watermarks::bounded(Duration::ZERO).every(256));
    if opts.paced {
        s.rate_limit(gen.rate / opts.partitions as f64)
    } else {
        s
    }
}

struct Q {
    events: Stream<Event>,
    standby: Option<String>,
    counts: Arc<Counts>,
    tables: Arc<Tables>,
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

    fn bids(&self) -> Stream<Bid> {
        self.events
            .flat_map("bid-events", |e: Event, out: &mut Output<'_, Bid>| {
                if let Event::Bid(b) = e {
                    out.emit(b)
                }
            })
    }

    fn persons(&self) -> Stream<Person> {
        self.events
            .flat_map("person-events", |e: Event, out: &mut Output<'_, Person>| {
                if let Event::Person(p) = e {
                    out.emit(*p)
                }
            })
    }

    fn auctions(&self) -> Stream<Auction> {
        self.events.flat_map(
            "auction-events",
            |e: Event, out: &mut Output<'_, Auction>| {
                if let Event::Auction(a) = e {
                    out.emit(*a)
                }
            },
        )
    }

    /// The sink: counts the rows, and writes them if asked to.
    fn sink<R: Row>(&self, rows: Stream<R>) {
        let counts = Arc::clone(&self.counts);
        let tables = Arc::clone(&self.tables);
        let dir = self.output.clone();
        rows.sink("sink", move |info| RowSink {
            counts: Arc::clone(&counts),
            tables: Arc::clone(&tables),
            file: dir.as_ref().map(|d| {
                TransactionalFile::open(d, info.instance, info.attempt, info.restored)
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

/// Counts rows; writes them, exactly once, when the run has an output.
struct RowSink {
    counts: Arc<Counts>,
    tables: Arc<Tables>,
    file: Option<TransactionalFile>,
    line: String,
}

impl<R: Row> Sink<R> for RowSink {
    fn write(&mut self, r: Record<R>) -> std::io::Result<()> {
        self.counts.records_out.fetch_add(1, Ordering::Relaxed);
        if let Some(f) = &mut self.file {
            self.line.clear();
            r.value.json(&self.tables, &mut self.line);
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

// ---------------------------------------------------------------- rows

fn json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

impl Row for Bid {
    fn json(&self, t: &Tables, out: &mut String) {
        let (channel, url) = t.channel(self.channel);
        let _ = write!(
            out,
            "{{\"auction\":{},\"bidder\":{},\"price\":{},\"channel\":",
            self.auction, self.bidder, self.price
        );
        json_str(out, channel);
        out.push_str(",\"url\":");
        json_str(out, url);
        let _ = write!(out, ",\"date_time\":{},\"extra\":", self.date_time);
        json_str(out, t.extra(self.extra));
        out.push('}');
    }
}

/// A q1 row: the price in euros, in thousandths (exact: `price × 908`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Euro {
    /// The auction.
    pub auction: u64,
    /// The bidder.
    pub bidder: u64,
    /// `price × 0.908`, in thousandths.
    pub price_milli: u64,
    /// The bid's time, ms.
    pub date_time: u64,
}

impl Row for Euro {
    fn json(&self, _: &Tables, out: &mut String) {
        let _ = write!(
            out,
            "{{\"auction\":{},\"bidder\":{},\"price\":{}.{:03},\"date_time\":{}}}",
            self.auction,
            self.bidder,
            self.price_milli / 1000,
            self.price_milli % 1000,
            self.date_time
        );
    }
}

/// A q2 row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuctionPrice {
    /// The auction.
    pub auction: u64,
    /// The bid's price.
    pub price: u64,
}

impl Row for AuctionPrice {
    fn json(&self, _: &Tables, out: &mut String) {
        let _ = write!(
            out,
            "{{\"auction\":{},\"price\":{}}}",
            self.auction, self.price
        );
    }
}

/// A q3 row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Suggestion {
    /// The seller's name.
    pub name: String,
    /// The seller's city.
    pub city: &'static str,
    /// The seller's state.
    pub state: &'static str,
    /// The auction.
    pub id: u64,
}

impl Row for Suggestion {
    fn json(&self, _: &Tables, out: &mut String) {
        out.push_str("{\"name\":");
        json_str(out, &self.name);
        out.push_str(",\"city\":");
        json_str(out, self.city);
        out.push_str(",\"state\":");
        json_str(out, self.state);
        let _ = write!(out, ",\"id\":{}}}", self.id);
    }
}

/// A q4 row: a category's average closing price (integer division, as
/// Flink's `AVG` of a `BIGINT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CategoryAvg {
    /// The category.
    pub category: u64,
    /// The average.
    pub avg: u64,
}

impl Row for CategoryAvg {
    fn json(&self, _: &Tables, out: &mut String) {
        let _ = write!(
            out,
            "{{\"category\":{},\"avg\":{}}}",
            self.category, self.avg
        );
    }
}

/// A q5 row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct HotItem {
    /// The auction.
    pub auction: u64,
    /// Its bids in the window.
    pub num: u64,
    /// The window, ms.
    pub window_start: u64,
    /// See `window_start`.
    pub window_end: u64,
}

impl Row for HotItem {
    fn json(&self, _: &Tables, out: &mut String) {
        let _ = write!(
            out,
            "{{\"auction\":{},\"num\":{},\"window_start\":{},\"window_end\":{}}}",
            self.auction, self.num, self.window_start, self.window_end
        );
    }
}

/// A q7 row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HighestBid {
    /// The auction.
    pub auction: u64,
    /// The price.
    pub price: u64,
    /// The bidder.
    pub bidder: u64,
    /// The bid's time, ms.
    pub date_time: u64,
    /// The window's end, ms.
    pub window_end: u64,
}

impl Row for HighestBid {
    fn json(&self, _: &Tables, out: &mut String) {
        let _ = write!(
            out,
            "{{\"auction\":{},\"price\":{},\"bidder\":{},\"date_time\":{},\"window_end\":{}}}",
            self.auction, self.price, self.bidder, self.date_time, self.window_end
        );
    }
}

/// A q8 row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewUser {
    /// The person.
    pub id: u64,
    /// Their name.
    pub name: String,
    /// The window, ms.
    pub window_start: u64,
}

impl Row for NewUser {
    fn json(&self, _: &Tables, out: &mut String) {
        let _ = write!(out, "{{\"id\":{},\"name\":", self.id);
        json_str(out, &self.name);
        let _ = write!(out, ",\"window_start\":{}}}", self.window_start);
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

/// q3's join: a seller's person record once it came (or that it did not
/// qualify), and the category-10 auctions that came before it.
#[derive(Clone, Debug, Default, Archive, Serialize, Deserialize)]
pub struct Seller {
    /// `Some(Some(..))`: a person in OR, ID or CA; `Some(None)`: one
    /// elsewhere; `None`: not seen yet.
    person: Option<Option<(String, u8, u8)>>,
    /// Auctions waiting for their seller.
    waiting: Vec<u64>,
}

struct Q3Join;

const Q3_STATES: [&str; 3] = ["OR", "ID", "CA"];

impl TimedCoProcess<u64, Person, Auction, Suggestion> for Q3Join {
    type State = Seller;
    fn process_first(
        &mut self,
        _: &u64,
        s: &mut Seller,
        rec: Record<Person>,
        _: &mut TimerContext<'_>,
        out: &mut Output<'_, Suggestion>,
    ) {
        let p = rec.value;
        if !Q3_STATES.contains(&p.state()) {
            s.person = Some(None);
            s.waiting = Vec::new();
            return;
        }
        for id in s.waiting.drain(..) {
            out.emit(Suggestion {
                name: p.name.clone(),
                city: p.city(),
                state: p.state(),
                id,
            });
        }
        s.person = Some(Some((p.name, p.city, p.state)));
    }
    fn process_second(
        &mut self,
        _: &u64,
        s: &mut Seller,
        rec: Record<Auction>,
        _: &mut TimerContext<'_>,
        out: &mut Output<'_, Suggestion>,
    ) {
        match &s.person {
            Some(Some((name, city, state))) => out.emit(Suggestion {
                name: name.clone(),
                city: super::model::US_CITIES[*city as usize],
                state: super::model::US_STATES[*state as usize],
                id: rec.value.id,
            }),
            Some(None) => {}
            None => s.waiting.push(rec.value.id),
        }
    }
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

/// q4's join, per auction: the auction once it came, the highest price
/// of its bids between its opening and its expiry (both included), and the
/// highest bid of the latest time before it came (a bid at the very
/// millisecond the auction opens counts).
#[derive(Clone, Debug, Default, Archive, Serialize, Deserialize)]
pub struct Closing {
    /// `(date_time, expires, category)`.
    auction: Option<(u64, u64, u64)>,
    /// The highest price so far.
    max: Option<u64>,
    /// `(date_time, price)`: the highest of the bids at the latest time
    /// seen before the auction came.
    early: Option<(u64, u64)>,
}

struct Q4Join;

/// A closed auction's final price (what q4's join emits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct Closed {
    /// The auction.
    pub auction: u64,
    /// Its category.
    pub category: u64,
    /// Its expiry, ms.
    pub expires: u64,
    /// The highest bid in it.
    pub price: u64,
}

impl TimedCoProcess<u64, Auction, Bid, Closed> for Q4Join {
    type State = Closing;
    fn process_first(
        &mut self,
        _: &u64,
        s: &mut Closing,
        rec: Record<Auction>,
        cx: &mut TimerContext<'_>,
        _: &mut Output<'_, Closed>,
    ) {
        let a = rec.value;
        if let Some((t, price)) = s.early.take() {
            cx.delete((t + 1) * MS);
            if t >= a.date_time && t <= a.expires {
                s.max = Some(price);
            }
        }
        s.auction = Some((a.date_time, a.expires, a.category));
        cx.register((a.expires + 1) * MS);
    }
    fn process_second(
        &mut self,
        _: &u64,
        s: &mut Closing,
        rec: Record<Bid>,
        cx: &mut TimerContext<'_>,
        _: &mut Output<'_, Closed>,
    ) {
        let b = rec.value;
        match s.auction {
            Some((from, to, _)) => {
                if b.date_time >= from && b.date_time <= to {
                    s.max = Some(s.max.map_or(b.price, |m| m.max(b.price)));
                }
            }
            None => match s.early {
                Some((t, p)) if t == b.date_time => s.early = Some((t, p.max(b.price))),
                Some((t, _)) if t > b.date_time => {}
                prev => {
                    if let Some((t, _)) = prev {
                        cx.delete((t + 1) * MS);
                    }
                    s.early = Some((b.date_time, b.price));
                    cx.register((b.date_time + 1) * MS);
                }
            },
        }
    }
    fn on_timer(
        &mut self,
        key: &u64,
        s: &mut Closing,
        _at: u64,
        _: &mut TimerContext<'_>,
        out: &mut Output<'_, Closed>,
    ) {
        match s.auction {
            // The auction closed.
            Some((_, expires, category)) => {
                if let Some(price) = s.max {
                    out.emit(Closed {
                        auction: *key,
                        category,
                        expires,
                        price,
                    });
                }
                *s = Closing::default();
            }
            // No auction opened at the early bids' time.
            None => s.early = None,
        }
    }
    fn is_empty(&self, s: &Closing) -> bool {
        s.auction.is_none() && s.early.is_none()
    }
}

/// q4's aggregate, per category: the closings not yet folded in, and the
/// running sum and count.
#[derive(Clone, Debug, Default, Archive, Serialize, Deserialize)]
pub struct Average {
    pending: Vec<(u64, u64, u64)>,
    sum: u64,
    count: u64,
}

struct Q4Aggregate;

impl TimedProcess<u64, Closed, CategoryAvg> for Q4Aggregate {
    type State = Average;
    fn process(
        &mut self,
        _: &u64,
        s: &mut Average,
        rec: Record<Closed>,
        cx: &mut TimerContext<'_>,
        _: &mut Output<'_, CategoryAvg>,
    ) {
        let c = rec.value;
        s.pending.push((c.expires, c.auction, c.price));
        cx.register(rec.event_time + 1);
    }
    fn on_timer(
        &mut self,
        category: &u64,
        s: &mut Average,
        at: u64,
        _: &mut TimerContext<'_>,
        out: &mut Output<'_, CategoryAvg>,
    ) {
        // Closings in (expiry, auction) order, whichever join instance
        // sent them first.
        s.pending.sort_unstable();
        let due = s.pending.partition_point(|&(e, _, _)| (e + 1) * MS <= at);
        for (_, _, price) in s.pending.drain(..due) {
            s.sum += price;
            s.count += 1;
            out.emit(CategoryAvg {
                category: *category,
                avg: s.sum / s.count,
            });
        }
    }
}

fn q4(q: &Q) {
    let auctions = q.auctions().key_by(|a: &Auction| a.id);
    let bids = q.bids().key_by(|b: &Bid| b.auction);
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

/// Bids per auction and window.
struct Count;

impl WindowAggregate<u64, Bid, HotItem> for Count {
    const COMMUTATIVE: bool = true;
    type Acc = u64;
    #[inline]
    fn add(&self, n: &mut u64, _: &Bid) {
        *n += 1;
    }
    fn merge(&self, n: &mut u64, other: u64) {
        *n += other;
    }
    fn result(&self, auction: &u64, w: Window, n: &u64) -> HotItem {
        HotItem {
            auction: *auction,
            num: *n,
            window_start: w.start / MS,
            window_end: w.end / MS,
        }
    }
}

/// The auctions tied for the most bids in a window.
struct Most;

impl WindowAggregate<u64, HotItem, Vec<HotItem>> for Most {
    const COMMUTATIVE: bool = true;
    type Acc = Vec<HotItem>;
    fn add(&self, top: &mut Vec<HotItem>, h: &HotItem) {
        match top.first().map(|t| t.num) {
            Some(n) if n > h.num => {}
            Some(n) if n == h.num => top.push(*h),
            _ => {
                top.clear();
                top.push(*h)
            }
        }
    }
    fn merge(&self, top: &mut Vec<HotItem>, other: Vec<HotItem>) {
        for h in &other {
            self.add(top, h);
        }
    }
    fn result(&self, _: &u64, _: Window, top: &Vec<HotItem>) -> Vec<HotItem> {
        let mut v = top.clone();
        v.sort_unstable_by_key(|h| h.auction);
        v
    }
}

fn q5(q: &Q) {
    let bids = q.feed(q.bids(), "window");
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
    let rows = top
        .results()
        .flat_map("ties", |v: Vec<HotItem>, out: &mut Output<'_, HotItem>| {
            for h in v {
                out.emit(h)
            }
        });
    q.sink(rows);
}

/// The highest bids of a window (all of those tied).
struct Highest;

impl WindowAggregate<(), Bid, Vec<HighestBid>> for Highest {
    const COMMUTATIVE: bool = true;
    type Acc = Vec<Bid>;
    #[inline]
    fn add(&self, top: &mut Vec<Bid>, b: &Bid) {
        match top.first().map(|t| t.price) {
            Some(p) if p > b.price => {}
            Some(p) if p == b.price => top.push(*b),
            _ => {
                top.clear();
                top.push(*b)
            }
        }
    }
    fn merge(&self, top: &mut Vec<Bid>, other: Vec<Bid>) {
        for b in &other {
            self.add(top, b);
        }
    }
    fn result(&self, _: &(), w: Window, top: &Vec<Bid>) -> Vec<HighestBid> {
        let mut v: Vec<HighestBid> = top
            .iter()
            .map(|b| HighestBid {
                auction: b.auction,
                price: b.price,
                bidder: b.bidder,
                date_time: b.date_time,
                window_end: w.end / MS,
            })
            .collect();
        v.sort_unstable_by_key(|h| (h.date_time, h.auction, h.bidder));
        v
    }
}

fn q7(q: &Q) {
    let bids = q.feed(q.bids(), "window");
    let top = bids
        .window_all(Windows::tumbling(Duration::from_millis(WINDOW_MS)))
        .aggregate("window", Highest);
    q.count_late("window", top.late());
    let rows = top.results().flat_map(
        "ties",
        |v: Vec<HighestBid>, out: &mut Output<'_, HighestBid>| {
            for h in v {
                out.emit(h)
            }
        },
    );
    q.sink(rows);
}

/// That a seller opened an auction in a window.
struct Opened;

impl WindowAggregate<u64, Auction, (u64, u64)> for Opened {
    const COMMUTATIVE: bool = true;
    type Acc = ();
    #[inline]
    fn add(&self, _: &mut (), _: &Auction) {}
    fn merge(&self, _: &mut (), _: ()) {}
    fn result(&self, seller: &u64, w: Window, _: &()) -> (u64, u64) {
        (*seller, w.start / MS)
    }
}

/// q8's join, per person id: the person's name and window once they came,
/// and the windows its auctions were opened in, until those end.
#[derive(Clone, Debug, Default, Archive, Serialize, Deserialize)]
pub struct Registered {
    /// `(name, window_start)`.
    person: Option<(String, u64)>,
    /// Window starts with an auction of this seller.
    sold_in: Vec<u64>,
}

struct Q8Join;

impl TimedCoProcess<u64, Person, (u64, u64), NewUser> for Q8Join {
    type State = Registered;
    fn process_first(
        &mut self,
        id: &u64,
        s: &mut Registered,
        rec: Record<Person>,
        cx: &mut TimerContext<'_>,
        out: &mut Output<'_, NewUser>,
    ) {
        let p = rec.value;
        let start = p.date_time / WINDOW_MS * WINDOW_MS;
        if s.sold_in.contains(&start) {
            out.emit(NewUser {
                id: *id,
                name: p.name.clone(),
                window_start: start,
            });
        }
        s.person = Some((p.name, start));
        cx.register((start + WINDOW_MS) * MS);
    }
    fn process_second(
        &mut self,
        id: &u64,
        s: &mut Registered,
        rec: Record<(u64, u64)>,
        cx: &mut TimerContext<'_>,
        out: &mut Output<'_, NewUser>,
    ) {
        let start = rec.value.1;
        match &s.person {
            Some((name, w)) if *w == start => out.emit(NewUser {
                id: *id,
                name: name.clone(),
                window_start: start,
            }),
            _ => {
                s.sold_in.push(start);
                cx.register((start + WINDOW_MS) * MS);
            }
        }
    }
    fn on_timer(
        &mut self,
        _: &u64,
        s: &mut Registered,
        at: u64,
        _: &mut TimerContext<'_>,
        _: &mut Output<'_, NewUser>,
    ) {
        // Windows that ended by `at` can match nothing more.
        let ended = |start: u64| (start + WINDOW_MS) * MS <= at;
        s.sold_in.retain(|&w| !ended(w));
        if s.person.as_ref().is_some_and(|(_, w)| ended(*w)) {
            s.person = None;
        }
    }
    fn is_empty(&self, s: &Registered) -> bool {
        s.person.is_none() && s.sold_in.is_empty()
    }
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
                    out.emit(*p)
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

/// The JSON object of event `e` for `--dump-input`.
pub fn event_json(e: &Event, t: &Tables, out: &mut String) {
    match e {
        Event::Person(p) => {
            let _ = write!(out, "{{\"kind\":\"person\",\"id\":{},\"name\":", p.id);
            json_str(out, &p.name);
            out.push_str(",\"email_address\":");
            json_str(out, &p.email_address);
            out.push_str(",\"credit_card\":");
            json_str(out, &p.credit_card);
            out.push_str(",\"city\":");
            json_str(out, p.city());
            out.push_str(",\"state\":");
            json_str(out, p.state());
            let _ = write!(out, ",\"date_time\":{},\"extra\":", p.date_time);
            json_str(out, t.extra(p.extra));
            out.push('}');
        }
        Event::Auction(a) => {
            let _ = write!(out, "{{\"kind\":\"auction\",\"id\":{},\"item_name\":", a.id);
            json_str(out, &a.item_name);
            out.push_str(",\"description\":");
            json_str(out, &a.description);
            let _ = write!(
                out,
                ",\"initial_bid\":{},\"reserve\":{},\"date_time\":{},\"expires\":{},\"seller\":{},\"category\":{},\"extra\":",
                a.initial_bid, a.reserve, a.date_time, a.expires, a.seller, a.category
            );
            json_str(out, t.extra(a.extra));
            out.push('}');
        }
        Event::Bid(b) => {
            out.push_str("{\"kind\":\"bid\",");
            let mut inner = String::new();
            b.json(t, &mut inner);
            out.push_str(&inner[1..]);
        }
    }
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

impl tandem::standby::codec::Codec for Closed {
    fn encode(&self, out: &mut Vec<u8>) {
        (self.auction, self.category).encode(out);
        (self.expires, self.price).encode(out);
    }
    fn decode(bytes: &[u8]) -> Result<(Self, &[u8]), tandem::standby::codec::CodecError> {
        let ((auction, category), rest) = <(u64, u64)>::decode(bytes)?;
        let ((expires, price), rest) = <(u64, u64)>::decode(rest)?;
        let c = Closed {
            auction,
            category,
            expires,
            price,
        };
        Ok((c, rest))
    }
}

impl tandem::standby::codec::Codec for HotItem {
    fn encode(&self, out: &mut Vec<u8>) {
        (self.auction, self.num).encode(out);
        (self.window_start, self.window_end).encode(out);
    }
    fn decode(bytes: &[u8]) -> Result<(Self, &[u8]), tandem::standby::codec::CodecError> {
        let ((auction, num), rest) = <(u64, u64)>::decode(bytes)?;
        let ((window_start, window_end), rest) = <(u64, u64)>::decode(rest)?;
        let h = HotItem {
            auction,
            num,
            window_start,
            window_end,
        };
        Ok((h, rest))
    }
}
