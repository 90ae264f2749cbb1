//! The typed entry points of a standby group, captured where the operator's
//! input type is known: the builders of the upstream sender and of an
//! incarnation's port ([`StandbyKit`]) over the queue entry format
//! ([`super::entry`]); and what
//! the standby builds of any stream's type — a consumer's fenced input, the
//! ends of a process-isolated chain ([`StreamRoles`]). The job builder puts
//! both in the plan's nodes as opaque [`RoleKit`]s; [`of_node`] and
//! [`of_stream`] open them.

use super::entry::{ChainBuild, CodecFns};
use super::group::Group;
use super::incarnation::source_lane::SourceSpec;
use crate::runtime::graph::{AnyBox, Codecs, Node, RoleKit};
use crate::runtime::task::{Gate, Port, TaskCtx};
use crate::standby::codec::Codec;
use std::rc::Rc;
use std::sync::Arc;

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

/// Process isolation, in the child: builds the chain `role.members` names,
/// from `state` (a recovery point's archive) if given, ending in the reply
/// pipe ([`super::remote::child::ChildChain`]).
pub(crate) fn child_chain(
    graph: &crate::runtime::graph::Graph,
    role: &super::remote::child::Role,
    ctx: &Rc<TaskCtx>,
    state: Option<Vec<u8>>,
    replies: Rc<std::cell::RefCell<super::remote::child::Replies>>,
) -> Result<Box<dyn super::remote::RequestHead>, String> {
    use crate::operator::OperatorInfo;
    use crate::runtime::graph::{BuildCx, NodeKind};
    use crate::runtime::task::OpSlot;
    let from_point = state.is_some();
    let mut states = match state {
        Some(a) => crate::runtime::chain::frame::split(a, &role.members)?,
        None => Default::default(),
    };
    let last = *role.members.last().ok_or("an empty chain")?;
    let node = &graph.nodes[last];
    let kit = of_stream(node).ok_or("a chain that ends in a sink")?;
    let mut down: AnyBox = kit
        .reply_collector(&graph.codecs, replies)
        .ok_or_else(|| format!("`{}`'s output type has no codec", node.name))?;
    for &m in role.members.iter().rev() {
        let n = &graph.nodes[m];
        let NodeKind::Unary(b) = &n.kind else {
            return Err(format!("`{}` is not a one-input operator", n.name));
        };
        ctx.enter(m);
        let cx = BuildCx {
            ctx: Rc::clone(ctx),
            slot: OpSlot::new(m, role.instance, ctx),
            info: OperatorInfo {
                name: Arc::clone(&n.name),
                instance: role.instance,
                parallelism: n.parallelism,
                attempt: role.attempt,
                restored: None,
            },
            probe: None,
            restore: None,
            standby_state: states.remove(&m),
            from_point,
        };
        down = b(cx, down);
    }
    ctx.enter(role.node);
    let skit = of_node(&graph.nodes[role.node]).ok_or("the chain's head has no standby kit")?;
    Ok(skit.child_head(down))
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
