//! What crosses a standby group's buffer queue and a process boundary,
//! below everything that builds the standby: the queue entry format (a
//! record, a watermark, an idle mark, a barrier, the end), a type's codec
//! as plain functions, and what builds an incarnation's chain. The
//! sender, the incarnations and process isolation's ends use these;
//! [`super::kit`], which builds them all, uses them too.

use crate::record::Record;
use crate::runtime::graph::AnyBox;
use crate::standby::codec::Codec;
use std::any::Any;
use std::sync::Arc;

pub(crate) const KIND_DATA: u8 = 0;
pub(crate) const KIND_END: u8 = 1;
pub(crate) const KIND_BARRIER: u8 = 2;
/// A record held in the queue's typed slot (`slots.rs`), not in its entry.
pub(crate) const KIND_TYPED: u8 = 3;
/// A watermark: part of a chunk like a record (its place among the
/// records is the lane's), consumed by the incarnation's lane clock.
pub(crate) const KIND_WATERMARK: u8 = 4;
/// The producer went idle (as a watermark, part of a chunk).
pub(crate) const KIND_IDLE: u8 = 5;
/// The tuple ID of a watermark entry.
pub(crate) const WATERMARK_ID: u64 = u64::MAX - 2;
/// The tuple ID of an idle entry.
pub(crate) const IDLE_ID: u64 = u64::MAX - 3;
/// The tuple ID of an end-of-input entry.
pub(crate) const END_ID: u64 = u64::MAX;
/// The tuple ID of a checkpoint barrier entry.
pub(crate) const BARRIER_ID: u64 = u64::MAX - 1;

/// A queue entry's bytes: kind, event time, ingest stamp, the value.
pub(crate) fn encode<T: Codec>(buf: &mut Vec<u8>, rec: &Record<T>) {
    buf.clear();
    buf.push(KIND_DATA);
    buf.extend_from_slice(&rec.event_time.to_le_bytes());
    buf.extend_from_slice(&rec.ingest.to_le_bytes());
    rec.value.encode(buf);
}

/// A checkpoint barrier entry's bytes: kind, checkpoint id.
pub(crate) fn encode_barrier(buf: &mut Vec<u8>, id: u64) {
    buf.clear();
    buf.push(KIND_BARRIER);
    buf.extend_from_slice(&id.to_le_bytes());
}

/// A watermark entry's bytes: kind, watermark.
pub(crate) fn encode_watermark(buf: &mut Vec<u8>, wm: u64) {
    buf.clear();
    buf.push(KIND_WATERMARK);
    buf.extend_from_slice(&wm.to_le_bytes());
}

/// A decoded queue entry.
pub(crate) enum Entry<T> {
    Data(Record<T>),
    /// The lane's watermark.
    Watermark(u64),
    /// The lane's producer went idle.
    Idle,
    End,
    /// Checkpoint barrier `id`: every input of the lane before it belongs
    /// to checkpoint `id`, none after it.
    Barrier(u64),
}

/// What a queue entry is, by its first byte: `None` for a record, else
/// the log entry that takes it alone (its lane filled in by the caller).
pub(crate) fn control_kind(bytes: &[u8]) -> Option<u8> {
    match bytes.first() {
        Some(&k) if k == KIND_END || k == KIND_BARRIER => Some(k),
        _ => None,
    }
}

pub(crate) fn decode<T: Codec>(id: u64, bytes: &[u8]) -> Result<Entry<T>, String> {
    match bytes.first() {
        Some(&KIND_END) => Ok(Entry::End),
        Some(&KIND_BARRIER) if bytes.len() == 9 => Ok(Entry::Barrier(u64::from_le_bytes(
            bytes[1..9].try_into().expect("8 bytes"),
        ))),
        Some(&KIND_WATERMARK) if bytes.len() == 9 => Ok(Entry::Watermark(u64::from_le_bytes(
            bytes[1..9].try_into().expect("8 bytes"),
        ))),
        Some(&KIND_IDLE) if bytes.len() == 1 => Ok(Entry::Idle),
        Some(&KIND_DATA) if bytes.len() >= 17 => {
            let u = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().expect("8 bytes"));
            let (value, rest) = T::decode(&bytes[17..]).map_err(|e| e.to_string())?;
            if !rest.is_empty() {
                return Err(format!("{} bytes after the value", rest.len()));
            }
            Ok(Entry::Data(Record {
                id: crate::record::TupleId(id),
                event_time: u(1),
                ingest: u(9),
                value,
            }))
        }
        Some(k) => Err(format!("entry kind {k} of {} bytes", bytes.len())),
        None => Err("empty entry".into()),
    }
}

/// Builds an incarnation's operator chain, restoring the given state.
pub(crate) type ChainBuild = Box<dyn FnMut(Option<Vec<u8>>) -> AnyBox>;

/// A type's [`Codec`], as plain functions: what carries a stream's records
/// between processes (process isolation's chain ends).
pub(crate) struct CodecFns<T> {
    pub(crate) encode: fn(&T, &mut Vec<u8>),
    pub(crate) decode: DecodeFn<T>,
}

/// A [`Codec`]'s decode, as a plain function.
pub(crate) type DecodeFn<T> = fn(&[u8]) -> Result<(T, &[u8]), crate::standby::codec::CodecError>;

impl<T: Codec + 'static> CodecFns<T> {
    /// The entry of the plan's [`Codecs`](crate::runtime::graph::Codecs) for `T`.
    pub(crate) fn entry() -> (std::any::TypeId, Arc<dyn Any + Send + Sync>) {
        (
            std::any::TypeId::of::<T>(),
            Arc::new(CodecFns::<T> {
                encode: T::encode,
                decode: T::decode,
            }),
        )
    }
}
