//! The typed entry points of a standby group, captured where the operator's
//! input type is known: the queue entry format, and the builders of the
//! upstream sender and of an incarnation's port.

use super::codec::Codec;
use super::group::Group;
use crate::job::graph::AnyBox;
use crate::record::Record;
use crate::runtime::task::{Port, TaskCtx};
use std::rc::Rc;
use std::sync::Arc;

pub(crate) const KIND_DATA: u8 = 0;
pub(crate) const KIND_END: u8 = 1;
/// The tuple ID of an end-of-input entry.
pub(crate) const END_ID: u64 = u64::MAX;

/// A queue entry's bytes: kind, event time, ingest stamp, the value.
pub(crate) fn encode<T: Codec>(buf: &mut Vec<u8>, rec: &Record<T>) {
    buf.clear();
    buf.push(KIND_DATA);
    buf.extend_from_slice(&rec.event_time.to_le_bytes());
    buf.extend_from_slice(&rec.ingest.to_le_bytes());
    rec.value.encode(buf);
}

/// A decoded queue entry.
pub(crate) enum Entry<T> {
    Data(Record<T>),
    End,
}

/// Whether an entry's bytes are an end-of-input entry.
pub(crate) fn is_end(bytes: &[u8]) -> bool {
    bytes.first() == Some(&KIND_END)
}

pub(crate) fn decode<T: Codec>(id: u64, bytes: &[u8]) -> Result<Entry<T>, String> {
    match bytes.first() {
        Some(&KIND_END) => Ok(Entry::End),
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

/// The type-erased builders for the input side of an operator with a
/// standby.
pub(crate) trait StandbyKit: Send + Sync {
    /// Upstream's collector into the queues `lanes` (group, lane index).
    fn sender(
        &self,
        lanes: Vec<(Arc<Group>, usize)>,
        partitioning: &crate::job::graph::Partitioning,
        ctx: &Rc<TaskCtx>,
        batch: usize,
        window: usize,
    ) -> AnyBox;
    /// The port of incarnation `inc` of `group`.
    fn incarnation(
        &self,
        group: Arc<Group>,
        inc: u64,
        primary: bool,
        build: ChainBuild,
        ctx: &Rc<TaskCtx>,
    ) -> Box<dyn Port>;
}

/// Builds an incarnation's operator chain, restoring the given state.
pub(crate) type ChainBuild = Box<dyn FnMut(Option<Vec<u8>>) -> AnyBox>;

pub(crate) struct SKit<T>(std::marker::PhantomData<fn() -> T>);

impl<T: crate::Data + Codec> SKit<T> {
    pub(crate) fn arc() -> Arc<dyn StandbyKit> {
        Arc::new(SKit::<T>(std::marker::PhantomData))
    }
}

impl<T: crate::Data + Codec> StandbyKit for SKit<T> {
    fn sender(
        &self,
        lanes: Vec<(Arc<Group>, usize)>,
        partitioning: &crate::job::graph::Partitioning,
        ctx: &Rc<TaskCtx>,
        batch: usize,
        window: usize,
    ) -> AnyBox {
        super::sender::BqSender::<T>::boxed(lanes, partitioning, ctx, batch, window)
    }

    fn incarnation(
        &self,
        group: Arc<Group>,
        inc: u64,
        primary: bool,
        build: ChainBuild,
        ctx: &Rc<TaskCtx>,
    ) -> Box<dyn Port> {
        Box::new(super::incarnation::Incarnation::<T>::new(
            group, inc, primary, build, ctx,
        ))
    }
}
