//! The queries' stateful operators: q3's and q4's joins, q4's running
//! average, q5's counts and ties, q7's highest bids, q8's window and join.

use super::model::{Auction, Bid, Person};
use super::queries::{MS, WINDOW_MS};
use super::rows::{CategoryAvg, HighestBid, HotItem, NewUser, Suggestion};
use rkyv::{Archive, Deserialize, Serialize};
use tandem::time::{TimedCoProcess, TimedProcess, TimerContext, Window, WindowAggregate};
use tandem::{Output, Record};

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

pub(super) struct Q3Join;

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

pub(super) struct Q4Join;

/// A closed auction's final price (what q4's join emits).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Archive, Serialize, Deserialize, tandem::standby::Codec,
)]
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

pub(super) struct Q4Aggregate;

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

/// Bids per auction and window.
pub(super) struct Count;

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
pub(super) struct Most;

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

/// The highest bids of a window (all of those tied).
pub(super) struct Highest;

impl WindowAggregate<(), Bid, Vec<HighestBid>> for Highest {
    const COMMUTATIVE: bool = true;
    type Acc = Vec<Bid>;
    #[inline]
    fn add(&self, top: &mut Vec<Bid>, b: &Bid) {
        match top.first().map(|t| t.price) {
            Some(p) if p > b.price => {}
            Some(p) if p == b.price => top.push(b.clone()),
            _ => {
                top.clear();
                top.push(b.clone())
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
                extra: b.extra.clone(),
                window_end: w.end / MS,
            })
            .collect();
        v.sort_unstable_by(|a, b| {
            let key = |h: &HighestBid| (h.date_time, h.auction, h.bidder, h.extra.clone());
            key(a).cmp(&key(b))
        });
        v
    }
}

/// That a seller opened an auction in a window.
pub(super) struct Opened;

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

pub(super) struct Q8Join;

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
