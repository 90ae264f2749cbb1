//! Property: whatever the placement — cores, parallelism per operator,
//! chaining, ring size, batch size — a job computes the same result as a
//! plain sequential fold over its input, and loses and duplicates nothing.

use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tandem::{Chaining, IterSource, JobBuilder, KeyedProcess, Output, Record, RuntimeConfig};

/// Per key: count and sum of values, emitted once at end of stream.
struct Totals;
impl KeyedProcess<u16, (u16, u64), (u16, u64, u64)> for Totals {
    type State = (u64, u64);
    fn process(
        &mut self,
        _k: &u16,
        s: &mut (u64, u64),
        r: Record<(u16, u64)>,
        _o: &mut Output<'_, (u16, u64, u64)>,
    ) {
        s.0 += 1;
        s.1 += r.value.1;
    }
    fn on_end(&mut self, k: &u16, s: &mut (u64, u64), out: &mut Output<'_, (u16, u64, u64)>) {
        out.emit((*k, s.0, s.1));
    }
}

fn value(i: u64) -> (u16, u64) {
    let h = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    ((h >> 57) as u16, h >> 40)
}

/// What the job must produce: records are split in two by `x % 3`, the
/// first part doubled, recombined (a union through `connect`), filtered,
/// then totalled per key.
fn expected(n: u64) -> BTreeMap<u16, (u64, u64)> {
    let mut m = BTreeMap::new();
    for i in 0..n {
        let (k, v) = value(i);
        let v = if v % 3 == 0 { v * 2 } else { v };
        if v % 7 != 0 {
            let e = m.entry(k).or_insert((0, 0));
            e.0 += 1;
            e.1 += v;
        }
    }
    m
}

struct Union;
impl tandem::CoProcess<(u16, u64), (u16, u64), (u16, u64)> for Union {
    fn process_first(&mut self, r: Record<(u16, u64)>, out: &mut Output<'_, (u16, u64)>) {
        out.emit(r.value);
    }
    fn process_second(&mut self, r: Record<(u16, u64)>, out: &mut Output<'_, (u16, u64)>) {
        out.emit(r.value);
    }
}

#[allow(clippy::too_many_arguments)]
fn run(
    n: u64,
    p_src: usize,
    p_mid: usize,
    p_key: usize,
    cores: usize,
    chaining: Chaining,
    ring: usize,
    batch: usize,
) -> BTreeMap<u16, (u64, u64)> {
    let out = Arc::new(Mutex::new(BTreeMap::new()));
    let o = Arc::clone(&out);
    let job = JobBuilder::new("props");
    // The keyed end at the job's default; the rest at their own.
    job.default_parallelism(p_key);
    let src = job
        .source("src", move |i| {
            let (me, all) = (i.instance as u64, i.parallelism as u64);
            IterSource((0..n).filter(move |x| x % all == me).map(|x| (value(x), x)))
        })
        .parallelism(p_src);
    let tripled = src
        .filter("thirds", |r: &(u16, u64)| r.1.is_multiple_of(3))
        .parallelism(p_mid)
        .map("double", |(k, v)| (k, v * 2))
        .parallelism(p_mid);
    let rest = src
        .filter("rest", |r: &(u16, u64)| !r.1.is_multiple_of(3))
        .parallelism(p_mid);
    let merged = tripled
        .connect(&rest.rebalance())
        .process("union", |_| Union)
        .parallelism(p_mid)
        .filter("sevens", |r: &(u16, u64)| !r.1.is_multiple_of(7))
        .parallelism(p_mid);
    merged
        .key_by(|r: &(u16, u64)| r.0)
        .process("totals", |_| Totals)
        .for_each("collect", move |r| {
            let (k, c, s) = r.value;
            assert!(
                o.lock().unwrap().insert(k, (c, s)).is_none(),
                "key {k} twice"
            );
        });
    let cfg = RuntimeConfig::default()
        .cores(cores)
        .chaining(chaining)
        .ring_capacity(ring)
        .batch(batch);
    job.build().unwrap().run(&cfg).unwrap();
    let m = out.lock().unwrap().clone();
    m
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_placement_computes_the_sequential_result(
        n in 0u64..4000,
        p_src in 1usize..4,
        p_mid in 1usize..4,
        p_key in 1usize..4,
        two_cores in any::<bool>(),
        chaining in prop::sample::select(vec![Chaining::Auto, Chaining::Always, Chaining::Never]),
        ring in prop::sample::select(vec![2usize, 4, 64, 1024]),
        batch in prop::sample::select(vec![1usize, 7, 64]),
    ) {
        let cores = if two_cores {
            tandem::sys::affinity::available_cores().len().min(2)
        } else {
            1
        };
        let got = run(n, p_src, p_mid, p_key, cores, chaining, ring, batch);
        prop_assert_eq!(got, expected(n));
    }
}
