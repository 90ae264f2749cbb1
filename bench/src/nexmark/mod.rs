//! Nexmark, the stream processing benchmark: the generator
//! ([`gen`]), its events ([`model`]), the queries ([`queries`]) and their
//! fault schedules ([`injector`]).

pub mod gen;
pub mod model;
mod ops;
pub mod queries;
pub mod rows;

use anyhow::{bail, ensure};
use gen::Kind;
use queries::Query;
use tandem_fault_inject::{FaultInjector, Schedule, ScheduleSpec, Space};

/// The fault schedule `spec`, aimed at operators of `query` that read one
/// kind of event: record `i` is that kind's `i`-th event.
pub fn injector(
    query: Query,
    spec: &str,
    events: u64,
    partitions: usize,
) -> anyhow::Result<(FaultInjector, Schedule)> {
    let spec: ScheduleSpec = spec.parse()?;
    let ops = query.operators();
    let named: Vec<&str> = ops.iter().map(|(o, _)| *o).collect();
    // The kind the schedule's records are numbered in: the one of its
    // targets (all alike), or of the query's first operator.
    let listed = match &spec {
        ScheduleSpec::List(faults) => faults.iter().map(|f| f.target.clone()).collect(),
        ScheduleSpec::Random { .. } => Vec::new(),
    };
    let mut kind = None;
    for t in &listed {
        match ops.iter().find(|(o, _)| o == t) {
            None => bail!(
                "{} has no operator `{t}` (it has: {})",
                query.name(),
                named.join(", ")
            ),
            Some((_, None)) => bail!(
                "the records `{t}` reads are results of an operator before it; faults at a record go to {}",
                ops.iter()
                    .filter(|(_, k)| k.is_some())
                    .map(|(o, _)| *o)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Some((_, Some(k))) => match kind {
                Some(prev) if prev != *k => bail!(
                    "in {} `{}` and `{t}` read different events; aim one schedule at one of them",
                    query.name(),
                    listed[0]
                ),
                _ => kind = Some(*k),
            },
        }
    }
    let kind = kind.or(ops[0].1).unwrap_or(Kind::Bid);
    let records = kind.count(events);
    ensure!(records > 0, "{events} events hold no {kind:?}");
    let mut space = Space::new(records);
    for (op, k) in ops {
        if *k == Some(kind) {
            space = space.allow("panic", op).allow("stall", op).allow("cut", op);
        }
    }
    let schedule = spec.expand(&space)?;
    for f in &schedule.faults {
        ensure!(
            !f.kind.ends_process(),
            "{} ends the process that runs `{}`, and nexmark runs the whole job in one \
             process: neither a standby nor a restart would survive it (process isolation is \
             `paper --strategy bqbs --standby OPERATOR --isolation process`'s)",
            f.kind.name(),
            f.target
        );
    }
    let injector = FaultInjector::builder(&schedule)
        .records(records)
        .resolver(move |i| queries::tuple_of(partitions, kind.event(i)))
        .build()?;
    Ok((injector, schedule))
}
