//! The tuple envelope: what travels on every edge of a job.
//!
//! Every record that enters a job gets a [`TupleId`] at its source, monotonic
//! per source partition, and an event time. Records derived from it (by
//! `map`, `flat_map`, a keyed stage, …) inherit both, so a tuple ID names the
//! input record an output descends from. Tuple IDs are what later layers key
//! on: the buffer queue of the active standby is indexed by them, the
//! downstream operator deduplicates by them and a standby resumes from them.
//!
//! The envelope also carries `ingest`, the engine's clock at the moment the
//! source released the record (for a rate-limited source: the moment it was
//! *scheduled*, so a stalled pipeline cannot hide its own delay — no
//! coordinated omission). Sinks measure end-to-end latency from it. It is
//! measurement metadata, never part of a record's value: outputs must not
//! depend on it.

use std::fmt;

/// Identity of a record: its source partition in the top 24 bits, the
/// per-partition sequence number in the low 40 bits.
///
/// Partitions are numbered across the job's sources, in the order the
/// sources were added: with a source `orders` of parallelism 2 added first
/// and `payments` of parallelism 1 after it, `orders` has partitions 0 and
/// 1 and `payments` partition 2 — two sources' records never share an ID.
///
/// ```text
///  63            40 39                                    0
/// +----------------+---------------------------------------+
/// | source partition |        sequence within partition    |
/// +----------------+---------------------------------------+
/// ```
///
/// IDs of one partition are dense and increasing, so `id - base` is a slot
/// index; IDs of different partitions never collide.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct TupleId(pub u64);

impl TupleId {
    /// Bits of the sequence number.
    pub const SEQ_BITS: u32 = 40;
    /// The largest sequence number a partition can assign.
    pub const MAX_SEQ: u64 = (1 << Self::SEQ_BITS) - 1;
    /// The ID carried by records that descend from no single input, such as
    /// the per-key summaries a keyed operator emits at end of stream.
    pub const NONE: TupleId = TupleId(u64::MAX);

    /// The ID of the `seq`-th record of source partition `partition`.
    #[inline]
    pub const fn new(partition: u32, seq: u64) -> Self {
        TupleId(((partition as u64) << Self::SEQ_BITS) | (seq & Self::MAX_SEQ))
    }

    /// The source partition that assigned this ID.
    #[inline]
    pub const fn partition(self) -> u32 {
        (self.0 >> Self::SEQ_BITS) as u32
    }

    /// The sequence number within its partition.
    #[inline]
    pub const fn seq(self) -> u64 {
        self.0 & Self::MAX_SEQ
    }
}

impl fmt::Debug for TupleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Self::NONE {
            f.write_str("TupleId(NONE)")
        } else {
            write!(f, "TupleId({}:{})", self.partition(), self.seq())
        }
    }
}

/// `P/S` (source partition, sequence), as the fault language writes a
/// tuple ID (`panic@op:0/25000`); `none` for [`TupleId::NONE`].
impl fmt::Display for TupleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Self::NONE {
            f.write_str("none")
        } else {
            write!(f, "{}/{}", self.partition(), self.seq())
        }
    }
}

/// Nanoseconds on the engine clock (since the job started), used for
/// `ingest`. [`Record::NO_INGEST`] marks records that carry no latency
/// sample.
pub type Nanos = u64;

/// A record and its envelope.
#[derive(Clone, Debug, PartialEq)]
pub struct Record<T> {
    /// Identity assigned at the source (inherited by derived records).
    pub id: TupleId,
    /// Event time in nanoseconds, as the source gave it.
    pub event_time: u64,
    /// Engine clock when the source released the record; measurement only.
    pub ingest: Nanos,
    /// The payload.
    pub value: T,
}

impl<T> Record<T> {
    /// `ingest` of records that carry no latency sample (end-of-stream
    /// summaries, for instance). Sinks do not record latency for them.
    pub const NO_INGEST: Nanos = u64::MAX;

    /// A record with the given identity and event time and no latency sample.
    pub fn new(id: TupleId, event_time: u64, value: T) -> Self {
        Record {
            id,
            event_time,
            ingest: Self::NO_INGEST,
            value,
        }
    }

    /// The same envelope around another value.
    #[inline]
    pub fn with_value<U>(&self, value: U) -> Record<U> {
        Record {
            id: self.id,
            event_time: self.event_time,
            ingest: self.ingest,
            value,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tuple_id_prints_as_the_fault_language_writes_it() {
        assert_eq!(TupleId::new(0, 25_000).to_string(), "0/25000");
        assert_eq!(TupleId::NONE.to_string(), "none");
        assert_eq!(format!("{:?}", TupleId::new(3, 9)), "TupleId(3:9)");
    }

    #[test]
    fn tuple_id_round_trips_partition_and_sequence() {
        let id = TupleId::new(7, 123_456_789);
        assert_eq!(id.partition(), 7);
        assert_eq!(id.seq(), 123_456_789);
        assert!(TupleId::new(7, 1) < TupleId::new(7, 2));
        assert!(TupleId::new(6, TupleId::MAX_SEQ) < TupleId::new(7, 0));
    }
}
