//! What the queries emit, and its JSON: one object per line, Nexmark's
//! fields in snake_case, times in milliseconds since the epoch.

use super::model::{Bid, Event};
use rkyv::{Archive, Deserialize, Serialize};
use std::fmt::Write as _;
use tandem::Data;

/// A result row.
pub trait Row: Data {
    /// The row as one JSON object (no newline).
    fn json(&self, out: &mut String);
}

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
    fn json(&self, out: &mut String) {
        let _ = write!(
            out,
            "{{\"auction\":{},\"bidder\":{},\"price\":{},\"channel\":",
            self.auction, self.bidder, self.price
        );
        json_str(out, &self.channel);
        out.push_str(",\"url\":");
        json_str(out, &self.url);
        let _ = write!(out, ",\"date_time\":{},\"extra\":", self.date_time);
        json_str(out, &self.extra);
        out.push('}');
    }
}

/// A q1 row: the price in euros, in thousandths (exact: `price × 908`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Euro {
    /// The auction.
    pub auction: u64,
    /// The bidder.
    pub bidder: u64,
    /// `price × 0.908`, in thousandths.
    pub price_milli: u64,
    /// The bid's time, ms.
    pub date_time: u64,
    /// The bid's padding.
    pub extra: String,
}

impl Row for Euro {
    fn json(&self, out: &mut String) {
        let _ = write!(
            out,
            "{{\"auction\":{},\"bidder\":{},\"price\":{}.{:03},\"date_time\":{},\"extra\":",
            self.auction,
            self.bidder,
            self.price_milli / 1000,
            self.price_milli % 1000,
            self.date_time
        );
        json_str(out, &self.extra);
        out.push('}');
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
    fn json(&self, out: &mut String) {
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
    fn json(&self, out: &mut String) {
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
    fn json(&self, out: &mut String) {
        let _ = write!(
            out,
            "{{\"category\":{},\"avg\":{}}}",
            self.category, self.avg
        );
    }
}

/// A q5 row.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Archive, Serialize, Deserialize, tandem::standby::Codec,
)]
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
    fn json(&self, out: &mut String) {
        let _ = write!(
            out,
            "{{\"auction\":{},\"num\":{},\"window_start\":{},\"window_end\":{}}}",
            self.auction, self.num, self.window_start, self.window_end
        );
    }
}

/// A q7 row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HighestBid {
    /// The auction.
    pub auction: u64,
    /// The price.
    pub price: u64,
    /// The bidder.
    pub bidder: u64,
    /// The bid's time, ms.
    pub date_time: u64,
    /// The bid's padding.
    pub extra: String,
    /// The window's end, ms.
    pub window_end: u64,
}

impl Row for HighestBid {
    fn json(&self, out: &mut String) {
        let _ = write!(
            out,
            "{{\"auction\":{},\"price\":{},\"bidder\":{},\"date_time\":{},\"extra\":",
            self.auction, self.price, self.bidder, self.date_time
        );
        json_str(out, &self.extra);
        let _ = write!(out, ",\"window_end\":{}}}", self.window_end);
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
    fn json(&self, out: &mut String) {
        let _ = write!(out, "{{\"id\":{},\"name\":", self.id);
        json_str(out, &self.name);
        let _ = write!(out, ",\"window_start\":{}}}", self.window_start);
    }
}

/// The JSON object of event `e` for `--dump-input`.
pub fn event_json(e: &Event, out: &mut String) {
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
            json_str(out, &p.extra);
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
            json_str(out, &a.extra);
            out.push('}');
        }
        Event::Bid(b) => {
            out.push_str("{\"kind\":\"bid\",");
            let mut inner = String::new();
            b.json(&mut inner);
            out.push_str(&inner[1..]);
        }
    }
}
