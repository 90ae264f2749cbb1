//! The Nexmark generator, after the reference (Apache Beam's Nexmark
//! generator as nexmark-flink carries it: `GeneratorConfig`,
//! `PersonGenerator`, `AuctionGenerator`, `BidGenerator`,
//! `StringsGenerator`, `PriceGenerator`).
//!
//! - Event `n` (from 0) is, by `n mod 50`: a person (0), an auction (1–3)
//!   or a bid (4–49). Person and auction ids count from 1000, categories
//!   from 10 (5 of them).
//! - Half the bids go to the hot auction (the first of the last hundred
//!   auctions), three quarters are by the hot bidder (the second of the
//!   last hundred people), three quarters of auctions are by the hot
//!   seller (the first of the last hundred people); the others pick among
//!   the 1000 active people (or the 100 auctions in flight) plus 10 ids
//!   ahead of the last one.
//! - Prices are `round(10^(6u) · 100)` cents, `u` uniform in `[0, 1)`.
//! - `extra` pads persons, auctions and bids to 200, 500 and 100 bytes on
//!   average (by the reference's own size accounting): random lowercase
//!   letters drawn for each event (`nextExactString`). A bid's channel and
//!   URL are one of the four hot channels or of 10,000 others, made once
//!   per run ([`Tables`]) and copied into each bid.
//! - Event `n`'s time is `base + ⌊⌊n · (10⁶ / rate)⌋ / 1000⌋` ms: the
//!   product in floating point, as nexmark-flink computes it (Beam's
//!   integer delay rounds to 0 above 2 M events/s). The rate is the event
//!   rate the times describe, whether or not a run is paced to it.
//!
//! Deterministic: each event draws from a random generator seeded by the
//! run's seed and its own number (the reference seeds one per event too),
//! so any partition can generate any event, and a replay generates the
//! same one again. The values are not the Java generator's bit for bit
//! (its random generator is not reproduced); the definitions are.
//!
//! One deliberate difference from nexmark-flink: its `BidGenerator` adds
//! the first person id to the bidder twice (bidders from 2000); Beam's
//! adds it once, as here.

use super::model::{Auction, Bid, Event, Person, US_CITIES, US_STATES};

/// Of every 50 events: 1 person, 3 auctions, 46 bids.
pub const PERSON_PROPORTION: u64 = 1;
/// See [`PERSON_PROPORTION`].
pub const AUCTION_PROPORTION: u64 = 3;
/// See [`PERSON_PROPORTION`].
pub const BID_PROPORTION: u64 = 46;
/// Their sum.
pub const TOTAL_PROPORTION: u64 = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION;
/// The first person id.
pub const FIRST_PERSON_ID: u64 = 1000;
/// The first auction id.
pub const FIRST_AUCTION_ID: u64 = 1000;
/// The first category id.
pub const FIRST_CATEGORY_ID: u64 = 10;
/// Categories.
pub const NUM_CATEGORIES: u64 = 5;
/// One bid in this many is not for the hot auction.
pub const HOT_AUCTION_RATIO: u64 = 2;
/// One bid in this many is not by the hot bidder.
pub const HOT_BIDDERS_RATIO: u64 = 4;
/// One auction in this many is not by the hot seller.
pub const HOT_SELLERS_RATIO: u64 = 4;
/// Hot auctions, bidders and sellers are the first of batches this large.
pub const HOT_BATCH: u64 = 100;
/// Auctions bids may be for (besides leads).
pub const NUM_IN_FLIGHT_AUCTIONS: u64 = 100;
/// People bids and auctions may be by (besides leads).
pub const NUM_ACTIVE_PEOPLE: u64 = 1000;
/// Ids past the last one a bid or auction may name.
pub const ID_LEAD: u64 = 10;
/// Average sizes, by the reference's accounting.
pub const AVG_PERSON_BYTES: u64 = 200;
/// See [`AVG_PERSON_BYTES`].
pub const AVG_AUCTION_BYTES: u64 = 500;
/// See [`AVG_PERSON_BYTES`].
pub const AVG_BID_BYTES: u64 = 100;
/// Channels besides the four hot ones.
pub const CHANNELS: usize = 10_000;
/// The hot channels.
pub const HOT_CHANNELS: [&str; 4] = ["Google", "Facebook", "Baidu", "Apple"];
/// The suite's standard event rate.
pub const DEFAULT_RATE: f64 = 10_000_000.0;
/// The default base time, ms since the epoch.
pub const DEFAULT_BASE_TIME_MS: u64 = 1_700_000_000_000;

const FIRST_NAMES: [&str; 11] = [
    "Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter",
];
const LAST_NAMES: [&str; 9] = [
    "Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris",
];

/// SplitMix64's finalizer: a bijection of 64 bits that scatters nearby
/// inputs.
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A small, fast generator (SplitMix64), seeded per event.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// The generator of event `n` of a run seeded `seed`: its stream
    /// starts at a hash of both, so that nearby events (and nearby seeds)
    /// share no draws. (A start at `seed ^ n·γ` put event n + 1's first
    /// draw at event n's second — γ is SplitMix64's own increment — and
    /// made consecutive events' prices and picks depend on each other.)
    pub fn for_event(seed: u64, n: u64) -> Self {
        Rng(mix64(mix64(seed ^ 0x243f_6a88_85a3_08d3).wrapping_add(n)))
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, n)` (`n ≥ 1`).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Uniform in `[0, 1)`.
    #[inline]
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// What every bid of a run draws on: the channels' names and URLs, made
/// once from the seed (the reference keeps them in a cache).
#[derive(Debug)]
pub struct Tables {
    /// `(channel, url)`: the four hot ones, then `channel-0` …
    channels: Vec<(String, String)>,
}

impl Tables {
    /// The tables of a run seeded `seed`.
    pub fn new(seed: u64) -> Self {
        let mut r = Rng::for_event(seed ^ 0x6e65_786d_6172_6b21, u64::MAX);
        let mut channels = Vec::with_capacity(HOT_CHANNELS.len() + CHANNELS);
        for name in HOT_CHANNELS {
            channels.push((name.to_string(), base_url(&mut r)));
        }
        for i in 0..CHANNELS {
            let mut url = base_url(&mut r);
            if r.below(10) > 0 {
                url.push_str(&format!(
                    "&channel_id={}",
                    (i as i32).reverse_bits().unsigned_abs()
                ));
            }
            channels.push((format!("channel-{i}"), url));
        }
        Tables { channels }
    }

    /// Channel `i`'s name and URL.
    pub fn channel(&self, i: usize) -> (&str, &str) {
        let (c, u) = &self.channels[i];
        (c, u)
    }

    /// How many channels there are.
    pub fn channels(&self) -> usize {
        self.channels.len()
    }
}

fn base_url(r: &mut Rng) -> String {
    format!(
        "https://www.nexmark.com/{}/{}/{}/item.htm?query=1",
        next_string(r, 5, '_'),
        next_string(r, 5, '_'),
        next_string(r, 5, '_')
    )
}

/// A random string of 3 to `max_len - 1` characters, one in 13 of them
/// `special`, the rest lowercase letters, trimmed of spaces.
fn next_string(r: &mut Rng, max_len: u64, special: char) -> String {
    let len = 3 + r.below(max_len - 3);
    let mut s = String::with_capacity(len as usize);
    for _ in 0..len {
        if r.below(13) == 0 {
            s.push(special);
        } else {
            s.push((b'a' + r.below(26) as u8) as char);
        }
    }
    s.trim().to_string()
}

/// Padding that brings `current` bytes to `average` on average: ±20 %.
fn next_extra(r: &mut Rng, current: u64, average: u64) -> String {
    if current > average {
        return String::new();
    }
    let desired = average - current;
    let delta = (desired as f64 * 0.2).round() as u64;
    let len = desired - delta + if delta == 0 { 0 } else { r.below(2 * delta) };
    next_exact_string(r, len as usize)
}

/// `len` random lowercase letters, thirteen from each draw (26¹³ < 2⁶⁴;
/// the reference takes six from each 32-bit draw).
fn next_exact_string(r: &mut Rng, len: usize) -> String {
    let mut s = String::with_capacity(len);
    let (mut bits, mut left) = (0u64, 0);
    for _ in 0..len {
        if left == 0 {
            bits = r.next_u64();
            left = 13;
        }
        s.push((b'a' + (bits % 26) as u8) as char);
        bits /= 26;
        left -= 1;
    }
    s
}

fn next_price(r: &mut Rng) -> u64 {
    (10f64.powf(r.unit() * 6.0) * 100.0).round() as u64
}

/// How a run's events are generated.
#[derive(Clone, Copy, Debug)]
pub struct GenConfig {
    /// Seeds every event.
    pub seed: u64,
    /// Events per second of event time.
    pub rate: f64,
    /// Event 0's time, ms since the epoch.
    pub base_time_ms: u64,
}

impl Default for GenConfig {
    fn default() -> Self {
        GenConfig {
            seed: 1,
            rate: DEFAULT_RATE,
            base_time_ms: DEFAULT_BASE_TIME_MS,
        }
    }
}

impl GenConfig {
    /// Event `n`'s time, ms since the epoch.
    #[inline]
    pub fn timestamp_ms(&self, n: u64) -> u64 {
        let delay_us = 1_000_000.0 / self.rate;
        self.base_time_ms + ((n as f64 * delay_us) as u64) / 1000
    }

    /// Event `n`, its bid's channel from `t` ([`Tables::new`] of the
    /// same seed).
    pub fn event(&self, n: u64, tables: &Tables) -> Event {
        let mut r = Rng::for_event(self.seed, n);
        let t = self.timestamp_ms(n);
        let rem = n % TOTAL_PROPORTION;
        if rem < PERSON_PROPORTION {
            Event::Person(Box::new(self.person(n, &mut r, t)))
        } else if rem < PERSON_PROPORTION + AUCTION_PROPORTION {
            Event::Auction(Box::new(self.auction(n, &mut r, t)))
        } else {
            Event::Bid(self.bid(n, &mut r, t, tables))
        }
    }

    fn person(&self, n: u64, r: &mut Rng, t: u64) -> Person {
        let id = last_base0_person_id(n) + FIRST_PERSON_ID;
        let name = format!(
            "{} {}",
            FIRST_NAMES[r.below(FIRST_NAMES.len() as u64) as usize],
            LAST_NAMES[r.below(LAST_NAMES.len() as u64) as usize]
        );
        let email_address = format!("{}@{}.com", next_string(r, 7, ' '), next_string(r, 5, ' '));
        let credit_card = format!(
            "{:04} {:04} {:04} {:04}",
            r.below(10_000),
            r.below(10_000),
            r.below(10_000),
            r.below(10_000)
        );
        let city = r.below(US_CITIES.len() as u64) as u8;
        let state = r.below(US_STATES.len() as u64) as u8;
        let size = 8
            + name.len()
            + email_address.len()
            + credit_card.len()
            + US_CITIES[city as usize].len()
            + US_STATES[state as usize].len();
        let extra = next_extra(r, size as u64, AVG_PERSON_BYTES);
        Person {
            id,
            name,
            email_address,
            credit_card,
            city,
            state,
            date_time: t,
            extra,
        }
    }

    fn auction(&self, n: u64, r: &mut Rng, t: u64) -> Auction {
        let id = last_base0_auction_id(n) as u64 + FIRST_AUCTION_ID;
        let seller = if r.below(HOT_SELLERS_RATIO) > 0 {
            (last_base0_person_id(n) / HOT_BATCH) * HOT_BATCH
        } else {
            next_base0_person_id(n, r)
        } + FIRST_PERSON_ID;
        let category = FIRST_CATEGORY_ID + r.below(NUM_CATEGORIES);
        let initial_bid = next_price(r);
        let expires = t + self.auction_length_ms(n, r, t);
        let item_name = next_string(r, 20, ' ');
        let description = next_string(r, 100, ' ');
        let reserve = initial_bid + next_price(r);
        let size = 8 + item_name.len() + description.len() + 40;
        let extra = next_extra(r, size as u64, AVG_AUCTION_BYTES);
        Auction {
            id,
            item_name,
            description,
            initial_bid,
            reserve,
            date_time: t,
            expires,
            seller,
            category,
            extra,
        }
    }

    /// An auction's length: on average until the auction 100 auctions
    /// ahead opens.
    fn auction_length_ms(&self, n: u64, r: &mut Rng, t: u64) -> u64 {
        let events_for_auctions = NUM_IN_FLIGHT_AUCTIONS * TOTAL_PROPORTION / AUCTION_PROPORTION;
        let horizon = self.timestamp_ms(n + events_for_auctions) - t;
        1 + r.below((horizon * 2).max(1))
    }

    fn bid(&self, n: u64, r: &mut Rng, t: u64, tables: &Tables) -> Bid {
        let auction = if r.below(HOT_AUCTION_RATIO) > 0 {
            (last_base0_auction_id(n) as u64 / HOT_BATCH) * HOT_BATCH
        } else {
            next_base0_auction_id(n, r)
        } + FIRST_AUCTION_ID;
        let bidder = if r.below(HOT_BIDDERS_RATIO) > 0 {
            (last_base0_person_id(n) / HOT_BATCH) * HOT_BATCH + 1
        } else {
            next_base0_person_id(n, r)
        } + FIRST_PERSON_ID;
        let price = next_price(r);
        let (channel, url) = tables.channel(if r.below(2) > 0 {
            r.below(HOT_CHANNELS.len() as u64) as usize
        } else {
            HOT_CHANNELS.len() + r.below(CHANNELS as u64) as usize
        });
        let (channel, url) = (channel.to_string(), url.to_string());
        let extra = next_extra(r, 32, AVG_BID_BYTES);
        Bid {
            auction,
            bidder,
            price,
            channel,
            url,
            date_time: t,
            extra,
        }
    }
}

/// The last person id (base 0) as of event `n`: `n`'s own if it is one.
pub fn last_base0_person_id(n: u64) -> u64 {
    let epoch = n / TOTAL_PROPORTION;
    let mut offset = n % TOTAL_PROPORTION;
    if offset >= PERSON_PROPORTION {
        // An auction or a bid: the epoch's last person.
        offset = PERSON_PROPORTION - 1;
    }
    epoch * PERSON_PROPORTION + offset
}

/// The last auction id (base 0) as of event `n`: `n`'s own if it is one;
/// -1 before the first.
pub fn last_base0_auction_id(n: u64) -> i64 {
    let mut epoch = (n / TOTAL_PROPORTION) as i64;
    let mut offset = (n % TOTAL_PROPORTION) as i64;
    let (p, a) = (PERSON_PROPORTION as i64, AUCTION_PROPORTION as i64);
    if offset < p {
        epoch -= 1;
        offset = a - 1;
    } else if offset >= p + a {
        offset = a - 1;
    } else {
        offset -= p;
    }
    epoch * a + offset
}

/// A random person among the active ones, plus leads.
fn next_base0_person_id(n: u64, r: &mut Rng) -> u64 {
    let people = last_base0_person_id(n) + 1;
    let active = people.min(NUM_ACTIVE_PEOPLE);
    people - active + r.below(active + ID_LEAD)
}

/// A random auction among those in flight, plus leads.
fn next_base0_auction_id(n: u64, r: &mut Rng) -> u64 {
    let last = last_base0_auction_id(n).max(0) as u64;
    let min = last.saturating_sub(NUM_IN_FLIGHT_AUCTIONS);
    min + r.below(last - min + 1 + ID_LEAD)
}

/// Which kind event `n` is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A person.
    Person,
    /// An auction.
    Auction,
    /// A bid.
    Bid,
}

impl Kind {
    /// Event `n`'s kind.
    pub fn of(n: u64) -> Kind {
        match n % TOTAL_PROPORTION {
            r if r < PERSON_PROPORTION => Kind::Person,
            r if r < PERSON_PROPORTION + AUCTION_PROPORTION => Kind::Auction,
            _ => Kind::Bid,
        }
    }

    /// How many of every [`TOTAL_PROPORTION`] events are of this kind.
    pub fn proportion(self) -> u64 {
        match self {
            Kind::Person => PERSON_PROPORTION,
            Kind::Auction => AUCTION_PROPORTION,
            Kind::Bid => BID_PROPORTION,
        }
    }

    /// The event number of this kind's `i`-th event.
    pub fn event(self, i: u64) -> u64 {
        let first = match self {
            Kind::Person => 0,
            Kind::Auction => PERSON_PROPORTION,
            Kind::Bid => PERSON_PROPORTION + AUCTION_PROPORTION,
        };
        (i / self.proportion()) * TOTAL_PROPORTION + first + i % self.proportion()
    }

    /// How many of the first `events` events are of this kind.
    pub fn count(self, events: u64) -> u64 {
        (0..TOTAL_PROPORTION)
            .filter(|&r| Kind::of(r) == self)
            .map(|r| events / TOTAL_PROPORTION + u64::from(events % TOTAL_PROPORTION > r))
            .sum()
    }
}

#[cfg(test)]
mod tests;
