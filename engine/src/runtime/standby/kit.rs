//! The typed entry points of a standby group, captured where the operator's
//! input type is known: the queue entry format, and the builders of the
//! upstream sender and of an incarnation's port ([`StandbyKit`]); and what
//! the standby builds of any stream's type — a consumer's fenced input, the
//! ends of a process-isolated chain ([`StreamRoles`]). The job builder puts
//! both in the plan's nodes as opaque [`RoleKit`]s; [`of_node`] and
//! [`of_stream`] open them.

use super::group::Group;
use super::incarnation::source_lane::SourceSpec;
use crate::record::Record;
use crate::runtime::graph::{AnyBox, Codecs, Node, RoleKit};
use crate::runtime::task::{Gate, Port, TaskCtx};
use crate::standby::codec::Codec;
use std::any::Any;
use std::rc::Rc;
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

/// The type-erased builders for the input side of an operator with a
/// standby.
pub(crate) trait StandbyKit: Send + Sync {
    /// Upstream's collector into the queues `lanes` (group, lane index).
    fn sender(
        &self,
        lanes: Vec<(Arc<Group>, usize)>,
        partitioning: &crate::runtime::graph::Partitioning,
        ctx: &Rc<TaskCtx>,
        batch: usize,
        window: usize,
    ) -> AnyBox;
    /// The port of incarnation `inc` of `group` (whose lane is the source
    /// `source` describes, if the group replays one).
    fn incarnation(
        &self,
        group: Arc<Group>,
        inc: u64,
        primary: bool,
        build: ChainBuild,
        ctx: &Rc<TaskCtx>,
        source: Option<SourceSpec>,
    ) -> Box<dyn Port>;
    /// Process isolation, in the driver: the chain of an incarnation whose
    /// operators run in the child `link` talks to.
    fn remote_chain(
        &self,
        link: Rc<std::cell::RefCell<super::remote::Link>>,
        ctx: &Rc<TaskCtx>,
        probe: crate::runtime::graph::Probe,
        head: usize,
    ) -> AnyBox;
    /// Process isolation, in the child: the head of its chain (`chain`, a
    /// collector of the input type), fed the driver's requests.
    fn child_head(&self, chain: AnyBox) -> Box<dyn super::remote::RequestHead>;
}

/// Builds an incarnation's operator chain, restoring the given state.
pub(crate) type ChainBuild = Box<dyn FnMut(Option<Vec<u8>>) -> AnyBox>;

pub(crate) struct SKit<T>(std::marker::PhantomData<fn() -> T>);

impl<T: crate::Data + Codec + Sync> SKit<T> {
    /// The kit, as the plan's node carries it ([`Node::standby`]).
    pub(crate) fn arc() -> RoleKit {
        Arc::new(Arc::new(SKit::<T>(std::marker::PhantomData)) as Arc<dyn StandbyKit>)
    }
}

/// The standby kit of a node built with one (`Stream::standby`).
pub(crate) fn of_node(node: &Node) -> Option<&Arc<dyn StandbyKit>> {
    node.standby.as_ref().map(|k| {
        k.downcast_ref::<Arc<dyn StandbyKit>>()
            .expect("engine bug: a node's standby kit of another kind")
    })
}

/// The standby's builders for the node's output type (`None`: a sink).
pub(crate) fn of_stream(node: &Node) -> Option<&Arc<dyn StreamRoles>> {
    node.out_role.as_ref().map(|k| {
        k.downcast_ref::<Arc<dyn StreamRoles>>()
            .expect("engine bug: a node's stream kit of another kind")
    })
}

/// A type's [`Codec`], as plain functions: what carries a stream's records
/// between processes (process isolation's chain ends).
pub(crate) struct CodecFns<T> {
    pub(crate) encode: fn(&T, &mut Vec<u8>),
    pub(crate) decode: DecodeFn<T>,
}

/// A [`Codec`]'s decode, as a plain function.
pub(crate) type DecodeFn<T> = fn(&[u8]) -> Result<(T, &[u8]), crate::standby::codec::CodecError>;

impl<T: Codec + 'static> CodecFns<T> {
    /// The entry of the plan's [`Codecs`] for `T`.
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

fn codec_of<T: 'static>(codecs: &Codecs) -> Option<Arc<CodecFns<T>>> {
    codecs
        .get(&std::any::TypeId::of::<T>())
        .and_then(|c| Arc::clone(c).downcast::<CodecFns<T>>().ok())
}

/// What the standby builds of a stream's element type.
pub(crate) trait StreamRoles: Send + Sync {
    /// A consumer's input from standby groups `(group, consumer index)`.
    fn fenced_input(
        &self,
        groups: Vec<(Arc<Group>, usize)>,
        target: AnyBox,
        gate: Option<Rc<Gate>>,
        ctx: &Rc<TaskCtx>,
    ) -> Box<dyn Port>;
    /// The stream's type has a codec in `codecs`.
    fn has_codec(&self, codecs: &Codecs) -> bool;
    /// Process isolation, in the driver: the end of a chain (`tail`, a
    /// collector of this type) fed the child's replies; `None` without a
    /// codec.
    fn remote_tail(
        &self,
        codecs: &Codecs,
        tail: AnyBox,
    ) -> Option<Box<dyn super::remote::ReplyTail>>;
    /// Process isolation, in the child: the end of its chain, writing what
    /// reaches it into the reply pipe; `None` without a codec.
    fn reply_collector(
        &self,
        codecs: &Codecs,
        out: Rc<std::cell::RefCell<super::remote::child::Replies>>,
    ) -> Option<AnyBox>;
}

struct Roles<T>(std::marker::PhantomData<fn() -> T>);

/// The standby's builders for a stream of `T`, as the plan's node carries
/// them ([`Node::out_role`]).
pub(crate) fn stream_roles<T: crate::Data>() -> RoleKit {
    Arc::new(Arc::new(Roles::<T>(std::marker::PhantomData)) as Arc<dyn StreamRoles>)
}

type BoxCollector<T> = Box<dyn crate::operator::Collector<T>>;

impl<T: crate::Data> StreamRoles for Roles<T> {
    fn fenced_input(
        &self,
        groups: Vec<(Arc<Group>, usize)>,
        target: AnyBox,
        gate: Option<Rc<Gate>>,
        ctx: &Rc<TaskCtx>,
    ) -> Box<dyn Port> {
        Box::new(super::fenced::FencedInput::<T>::new(
            groups, target, gate, ctx,
        ))
    }

    fn has_codec(&self, codecs: &Codecs) -> bool {
        codec_of::<T>(codecs).is_some()
    }

    fn remote_tail(
        &self,
        codecs: &Codecs,
        tail: AnyBox,
    ) -> Option<Box<dyn super::remote::ReplyTail>> {
        let c = codec_of::<T>(codecs)?;
        Some(super::remote::deliver_to::<T>(tail, c))
    }

    fn reply_collector(
        &self,
        codecs: &Codecs,
        out: Rc<std::cell::RefCell<super::remote::child::Replies>>,
    ) -> Option<AnyBox> {
        let c = codec_of::<T>(codecs)?;
        Some(Box::new(
            Box::new(super::remote::child::ReplyCollector::<T>::new(out, c)) as BoxCollector<T>,
        ))
    }
}

impl<T: crate::Data + Codec + Sync> StandbyKit for SKit<T> {
    fn sender(
        &self,
        lanes: Vec<(Arc<Group>, usize)>,
        partitioning: &crate::runtime::graph::Partitioning,
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
        source: Option<SourceSpec>,
    ) -> Box<dyn Port> {
        Box::new(super::incarnation::Incarnation::<T>::new(
            group, inc, primary, build, ctx, source,
        ))
    }

    fn remote_chain(
        &self,
        link: Rc<std::cell::RefCell<super::remote::Link>>,
        ctx: &Rc<TaskCtx>,
        probe: crate::runtime::graph::Probe,
        head: usize,
    ) -> AnyBox {
        Box::new(Box::new(super::remote::RemoteChain::<T>::new(
            link,
            Rc::clone(ctx),
            probe,
            head,
        )) as Box<dyn crate::operator::Collector<T>>)
    }

    fn child_head(&self, chain: AnyBox) -> Box<dyn super::remote::RequestHead> {
        Box::new(super::remote::child::ChildHead::<T> {
            chain: crate::runtime::graph::downcast::<Box<dyn crate::operator::Collector<T>>>(
                chain,
                "child chain",
            ),
        })
    }
}
