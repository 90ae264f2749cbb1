//! Nexmark's three event kinds with the reference's columns, every string
//! a string of its own (a bid's channel, URL and padding included, about
//! 100 bytes by the reference's accounting): what the reference's events
//! carry is allocated, copied and dropped here too. Only a person's city
//! and state, drawn from ten and six names, are indices.

use rkyv::{Archive, Deserialize, Serialize};
use tandem::standby::codec::{Codec, CodecError};

/// A person who registers (every 50th event).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Archive, Serialize, Deserialize)]
pub struct Person {
    /// From 1000 up, one per person event.
    pub id: u64,
    /// First and last name.
    pub name: String,
    /// `xxxx@yyy.com`.
    pub email_address: String,
    /// Four groups of four digits.
    pub credit_card: String,
    /// Index into the reference's ten cities.
    pub city: u8,
    /// Index into the reference's six states.
    pub state: u8,
    /// Milliseconds since the epoch.
    pub date_time: u64,
    /// Padding: random lowercase letters.
    pub extra: String,
}

/// An auction that opens (3 events in 50).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Archive, Serialize, Deserialize, Codec)]
pub struct Auction {
    /// From 1000 up, one per auction event.
    pub id: u64,
    /// Random words.
    pub item_name: String,
    /// Random words.
    pub description: String,
    /// Cents.
    pub initial_bid: u64,
    /// Cents, above `initial_bid`.
    pub reserve: u64,
    /// Milliseconds since the epoch.
    pub date_time: u64,
    /// When the auction closes, milliseconds since the epoch.
    pub expires: u64,
    /// A person's id.
    pub seller: u64,
    /// 10 to 14.
    pub category: u64,
    /// Padding: random lowercase letters.
    pub extra: String,
}

/// A bid (46 events in 50).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Archive, Serialize, Deserialize, Codec)]
pub struct Bid {
    /// An auction's id.
    pub auction: u64,
    /// A person's id.
    pub bidder: u64,
    /// Cents.
    pub price: u64,
    /// One of the four hot channels or of the 10,000 others.
    pub channel: String,
    /// The channel's URL.
    pub url: String,
    /// Milliseconds since the epoch.
    pub date_time: u64,
    /// Padding: random lowercase letters.
    pub extra: String,
}

/// One generated event.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Archive, Serialize, Deserialize, Codec)]
pub enum Event {
    /// A new person.
    Person(Box<Person>),
    /// A new auction.
    Auction(Box<Auction>),
    /// A bid.
    Bid(Bid),
}

impl Event {
    /// The event's time, milliseconds since the epoch.
    pub fn date_time(&self) -> u64 {
        match self {
            Event::Person(p) => p.date_time,
            Event::Auction(a) => a.date_time,
            Event::Bid(b) => b.date_time,
        }
    }
}

/// The reference's cities and states.
pub const US_CITIES: [&str; 10] = [
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
];
/// See [`US_CITIES`].
pub const US_STATES: [&str; 6] = ["AZ", "CA", "ID", "OR", "WA", "WY"];

impl Person {
    /// The city's name.
    pub fn city(&self) -> &'static str {
        US_CITIES[self.city as usize]
    }
    /// The state's code.
    pub fn state(&self) -> &'static str {
        US_STATES[self.state as usize]
    }
}

// Buffer-queue codecs: what a standby's queues hold of these streams.
// Bids, auctions and events derive theirs; a person's checks its city
// and state indices, which `Person::city` and `state` index with.

impl Codec for Person {
    fn encode(&self, out: &mut Vec<u8>) {
        self.id.encode(out);
        self.name.encode(out);
        self.email_address.encode(out);
        self.credit_card.encode(out);
        self.city.encode(out);
        self.state.encode(out);
        self.date_time.encode(out);
        self.extra.encode(out);
    }
    fn decode(bytes: &[u8]) -> Result<(Self, &[u8]), CodecError> {
        let (id, rest) = u64::decode(bytes)?;
        let (name, rest) = String::decode(rest)?;
        let (email_address, rest) = String::decode(rest)?;
        let (credit_card, rest) = String::decode(rest)?;
        let (city, rest) = u8::decode(rest)?;
        let (state, rest) = u8::decode(rest)?;
        let (date_time, rest) = u64::decode(rest)?;
        let (extra, rest) = String::decode(rest)?;
        if city as usize >= US_CITIES.len() || state as usize >= US_STATES.len() {
            return Err(CodecError(format!(
                "person {id}: no city {city} or state {state}"
            )));
        }
        let p = Person {
            id,
            name,
            email_address,
            credit_card,
            city,
            state,
            date_time,
            extra,
        };
        Ok((p, rest))
    }
}
