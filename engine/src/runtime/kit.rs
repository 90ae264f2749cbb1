//! The core's [`StreamKit`] for a stream of `T`: rings of `Msg<T>`, their
//! senders and inputs, fan-outs — what the type-erased plan
//! ([`super::graph`]) asks of a stream's element type.

use crate::operator::{Collector, Null, Tee};
use crate::queue::spsc::{self, Consumer, Producer};
use crate::runtime::channel::{Msg, RingInput, RingSender, Route};
use crate::runtime::graph::{
    downcast, downcast_send, AnyBox, AnySend, Fencing, Partitioning, StreamKit,
};
use crate::runtime::signal::WorkerSignal;
use crate::runtime::task::{Gate, Port, TaskCtx};
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::Arc;

pub(crate) struct Kit<T>(PhantomData<fn() -> T>);

impl<T> Kit<T> {
    pub(crate) fn arc() -> Arc<dyn StreamKit>
    where
        T: crate::Data,
    {
        Arc::new(Kit::<T>(PhantomData))
    }
}

type BoxCollector<T> = Box<dyn Collector<T>>;

impl<T: crate::Data> StreamKit for Kit<T> {
    fn tee(&self, outs: Vec<AnyBox>) -> AnyBox {
        let outs = outs
            .into_iter()
            .map(|o| downcast::<BoxCollector<T>>(o, "tee"))
            .collect();
        Box::new(Box::new(Tee { outs }) as BoxCollector<T>)
    }

    fn null(&self) -> AnyBox {
        Box::new(Box::new(Null) as BoxCollector<T>)
    }

    fn ring(&self, capacity: usize) -> (AnySend, AnySend) {
        let (tx, rx) = spsc::channel::<Msg<T>>(capacity);
        (Box::new(tx), Box::new(rx))
    }

    fn ring_bytes(&self, capacity: usize) -> u64 {
        (capacity.max(2).next_power_of_two() as u64)
            .saturating_mul(std::mem::size_of::<Msg<T>>() as u64)
    }

    fn sender(
        &self,
        lanes: Vec<(AnySend, Arc<WorkerSignal>)>,
        partitioning: &Partitioning,
        ctx: &Rc<TaskCtx>,
        batch: usize,
        fencing: Option<Fencing>,
    ) -> AnyBox {
        let lanes = lanes
            .into_iter()
            .map(|(p, s)| (downcast_send::<Producer<Msg<T>>>(p, "sender"), s))
            .collect::<Vec<_>>();
        let route = Route::of(partitioning, ctx.instance, lanes.len());
        let mut s = RingSender::new(lanes, route, Rc::clone(ctx), batch);
        if let Some(f) = fencing {
            s = s.fenced(f);
        }
        Box::new(Box::new(s) as BoxCollector<T>)
    }

    fn input(
        &self,
        rings: Vec<(AnySend, Arc<WorkerSignal>)>,
        target: AnyBox,
        gate: Option<Rc<Gate>>,
        ctx: &Rc<TaskCtx>,
    ) -> Box<dyn Port> {
        let rings = rings
            .into_iter()
            .map(|(r, s)| (downcast_send::<Consumer<Msg<T>>>(r, "input"), s))
            .collect();
        let target = downcast::<BoxCollector<T>>(target, "input target");
        Box::new(RingInput::new(rings, target, gate, Rc::clone(ctx)))
    }
}
