//! The messages between the driver and an incarnation's child: one byte of
//! kind, then its fields, little-endian. Requests go to the child, replies
//! come back; a chain call that passes through (a record, a mark, the end)
//! has the same kind both ways.

use crate::operator::ChunkId;
use crate::record::{Record, TupleId};
use crate::runtime::probe::Death;
use crate::standby::codec::Codec;
use std::time::Duration;

/// A piece of the state to build from (appended to those before).
pub(crate) const R_BUILD_PART: u8 = 1;
/// Build the chain: `has_state` (the pieces sent since the last build).
pub(crate) const R_BUILD: u8 = 2;
/// A record: tuple ID, event time, ingest stamp, value.
pub(crate) const R_RECORD: u8 = 3;
pub(crate) const R_FLUSH: u8 = 4;
pub(crate) const R_END: u8 = 5;
/// A checkpoint barrier: its id.
pub(crate) const R_BARRIER: u8 = 6;
pub(crate) const R_WATERMARK: u8 = 7;
pub(crate) const R_IDLE: u8 = 8;
/// Processing time reached: nanoseconds on the job's clock.
pub(crate) const R_PTIME: u8 = 9;
/// A chunk opens: seq, first, n, lane.
pub(crate) const R_OPEN: u8 = 10;
pub(crate) const R_CLOSE: u8 = 11;
/// Send the chain's states, captured as the body says
/// ([`encode_capture`]: whole, or a delta over a point).
pub(crate) const R_SNAPSHOT: u8 = 12;
/// Answer `A_SYNCED` with this number once everything before is done.
pub(crate) const R_SYNC: u8 = 13;
/// A fault to carry out before the next record (see [`Fault`]).
pub(crate) const R_FAULT: u8 = 14;
/// End the process.
pub(crate) const R_STOP: u8 = 15;

/// A part of a state: node, present (0/1), the point it is a delta over
/// (0: whole), then the bytes (a state longer than one message comes in
/// several parts of the same node).
pub(crate) const A_SNAP_PART: u8 = 16;
pub(crate) const A_SNAP_DONE: u8 = 17;
pub(crate) const A_SYNCED: u8 = 18;
/// The chain failed (an operator panicked or reported an error): the
/// message. The child then waits to be stopped.
pub(crate) const A_FAILED: u8 = 19;
/// The child runs the job and waits for its chain's build.
pub(crate) const A_READY: u8 = 20;

/// A piece of a recovery point's state to follow: node, then the bytes
/// (appended to the node's pieces sent before).
pub(crate) const R_FOLLOW_PART: u8 = 21;
/// Bring the chain's states forward by the pieces sent since the last
/// `R_FOLLOW` ([`crate::operator::Collector::follow_point`]); answered
/// with `A_FOLLOWED`.
pub(crate) const R_FOLLOW: u8 = 22;
/// The followed chain goes live
/// ([`crate::operator::Collector::install_followed`]).
pub(crate) const R_INSTALL: u8 = 23;
/// How an `R_FOLLOW` went: 1 followed, 0 an operator cannot follow, 2 the
/// point did not apply (then the error's words).
pub(crate) const A_FOLLOWED: u8 = 24;

/// `R_SNAPSHOT`'s body: how the chain's states are captured (the point
/// taken, the point a delta is over, the chain's bounds).
pub(crate) fn encode_capture(buf: &mut Vec<u8>, how: &crate::state::delta::CaptureFor) {
    buf.extend_from_slice(&how.checkpoint.to_le_bytes());
    buf.extend_from_slice(&how.base.unwrap_or(0).to_le_bytes());
    buf.extend_from_slice(&how.policy.max_deltas.to_le_bytes());
    buf.extend_from_slice(&how.policy.max_delta_ratio.to_bits().to_le_bytes());
}

pub(crate) fn decode_capture(body: &[u8]) -> Result<crate::state::delta::CaptureFor, String> {
    if body.len() != 28 {
        return Err(format!("a capture of {} bytes", body.len()));
    }
    let base = u64_at(body, 8)?;
    Ok(crate::state::delta::CaptureFor {
        checkpoint: u64_at(body, 0)?,
        base: (base != 0).then_some(base),
        policy: crate::state::delta::Incremental {
            max_deltas: u32::from_le_bytes(body[16..20].try_into().expect("4 bytes")),
            max_delta_ratio: f64::from_bits(u64_at(body, 20)?),
        },
    })
}

pub(crate) fn u64_at(b: &[u8], at: usize) -> Result<u64, String> {
    b.get(at..at + 8)
        .map(|s| u64::from_le_bytes(s.try_into().expect("8 bytes")))
        .ok_or_else(|| format!("a message of {} bytes cut short", b.len()))
}

/// `R_RECORD`, the record's fields and value.
pub(crate) fn encode_record<T: Codec>(buf: &mut Vec<u8>, rec: &Record<T>) {
    encode_record_with(buf, rec, T::encode);
}

pub(crate) fn encode_record_with<T>(
    buf: &mut Vec<u8>,
    rec: &Record<T>,
    encode: fn(&T, &mut Vec<u8>),
) {
    buf.push(R_RECORD);
    buf.extend_from_slice(&rec.id.0.to_le_bytes());
    buf.extend_from_slice(&rec.event_time.to_le_bytes());
    buf.extend_from_slice(&rec.ingest.to_le_bytes());
    encode(&rec.value, buf);
}

/// A record's fields (after the kind byte).
pub(crate) fn decode_record<T>(
    body: &[u8],
    decode: crate::runtime::standby::entry::DecodeFn<T>,
) -> Result<Record<T>, String> {
    let (value, rest) = decode(body.get(24..).ok_or("a short record")?).map_err(|e| e.0)?;
    if !rest.is_empty() {
        return Err(format!("{} bytes after a record's value", rest.len()));
    }
    Ok(Record {
        id: TupleId(u64_at(body, 0)?),
        event_time: u64_at(body, 8)?,
        ingest: u64_at(body, 16)?,
        value,
    })
}

pub(crate) fn encode_chunk(buf: &mut Vec<u8>, tag: u8, id: ChunkId) {
    buf.push(tag);
    buf.extend_from_slice(&id.seq.to_le_bytes());
    buf.extend_from_slice(&id.first.to_le_bytes());
    buf.extend_from_slice(&id.n.to_le_bytes());
    buf.extend_from_slice(&id.lane.to_le_bytes());
}

pub(crate) fn decode_chunk(body: &[u8]) -> Result<ChunkId, String> {
    if body.len() != 22 {
        return Err(format!("a chunk of {} bytes", body.len()));
    }
    Ok(ChunkId {
        seq: u64_at(body, 0)?,
        first: u64_at(body, 8)?,
        n: u32::from_le_bytes(body[16..20].try_into().expect("4 bytes")),
        lane: u16::from_le_bytes(body[20..22].try_into().expect("2 bytes")),
    })
}

/// What a probe asks the child to do before a record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    Panic(String),
    Stall(Duration),
    StallForever,
    Delay(Duration),
    Die(Death, String),
}

impl Fault {
    /// `R_FAULT`, the record, a kind, a number, a message.
    pub(crate) fn encode(&self, id: TupleId, buf: &mut Vec<u8>) {
        let (k, n, m): (u8, u64, &str) = match self {
            Fault::Panic(m) => (0, 0, m),
            Fault::Stall(d) => (1, d.as_nanos() as u64, ""),
            Fault::StallForever => (2, 0, ""),
            Fault::Delay(d) => (3, d.as_nanos() as u64, ""),
            Fault::Die(Death::Kill, m) => (4, 0, m),
            Fault::Die(Death::Abort, m) => (5, 0, m),
            Fault::Die(Death::Segv, m) => (6, 0, m),
        };
        buf.push(R_FAULT);
        buf.extend_from_slice(&id.0.to_le_bytes());
        buf.push(k);
        buf.extend_from_slice(&n.to_le_bytes());
        buf.extend_from_slice(m.as_bytes());
    }

    pub(crate) fn decode(body: &[u8]) -> Result<(TupleId, Fault), String> {
        let id = TupleId(u64_at(body, 0)?);
        let k = *body.get(8).ok_or("a short fault")?;
        let n = u64_at(body, 9)?;
        let m = String::from_utf8_lossy(&body[17..]).into_owned();
        let f = match k {
            0 => Fault::Panic(m),
            1 => Fault::Stall(Duration::from_nanos(n)),
            2 => Fault::StallForever,
            3 => Fault::Delay(Duration::from_nanos(n)),
            4 => Fault::Die(Death::Kill, m),
            5 => Fault::Die(Death::Abort, m),
            6 => Fault::Die(Death::Segv, m),
            k => return Err(format!("fault kind {k}")),
        };
        Ok((id, f))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_chunks_and_faults_decode_to_what_was_encoded() {
        let rec = Record {
            id: TupleId(7 << 40 | 3),
            event_time: 11,
            ingest: 13,
            value: "héllo".to_string(),
        };
        let mut b = Vec::new();
        encode_record(&mut b, &rec);
        assert_eq!(b[0], R_RECORD);
        let back = decode_record::<String>(&b[1..], String::decode).unwrap();
        assert_eq!(
            (back.id, back.event_time, back.ingest, back.value),
            (rec.id, 11, 13, rec.value.clone())
        );
        assert!(decode_record::<String>(&b[1..20], String::decode).is_err());

        let id = ChunkId {
            seq: 5,
            first: 64,
            n: 17,
            lane: 2,
        };
        b.clear();
        encode_chunk(&mut b, R_OPEN, id);
        assert_eq!(decode_chunk(&b[1..]).unwrap(), id);

        for f in [
            Fault::Panic("boom".into()),
            Fault::Stall(Duration::from_millis(3)),
            Fault::StallForever,
            Fault::Delay(Duration::from_micros(9)),
            Fault::Die(Death::Kill, "k".into()),
            Fault::Die(Death::Abort, "a".into()),
            Fault::Die(Death::Segv, "s".into()),
        ] {
            b.clear();
            f.encode(TupleId(42), &mut b);
            assert_eq!(Fault::decode(&b[1..]).unwrap(), (TupleId(42), f));
        }

        use crate::state::delta::{CaptureFor, Incremental};
        for how in [
            CaptureFor::whole(),
            CaptureFor {
                checkpoint: 1 << 63 | 9,
                base: Some(1 << 63 | 8),
                policy: Incremental {
                    max_deltas: u32::MAX,
                    max_delta_ratio: f64::INFINITY,
                },
            },
        ] {
            b.clear();
            encode_capture(&mut b, &how);
            let back = decode_capture(&b).unwrap();
            assert_eq!((back.checkpoint, back.base), (how.checkpoint, how.base));
            assert_eq!(back.policy.max_deltas, how.policy.max_deltas);
            assert_eq!(back.policy.max_delta_ratio, how.policy.max_delta_ratio);
        }
        assert!(decode_capture(&b[1..]).is_err());
    }
}
