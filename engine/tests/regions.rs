//! Failover regions: instances joined only by forward edges form a region
//! per instance; an all-to-all exchange joins every instance on both
//! sides; a forward edge between different parallelisms is all-to-all.

use tandem::{IterSource, JobBuilder};

fn numbers(job: &JobBuilder, name: &str) -> tandem::Stream<u64> {
    job.source(name, |_| IterSource((0..10u64).map(|n| (n, n))))
}

#[test]
fn forward_pipelines_are_a_region_per_instance_holding_every_operators_instance() {
    let job = JobBuilder::new("pipelines");
    job.default_parallelism(3);
    numbers(&job, "src")
        .map("double", |n: u64| n * 2)
        .filter("even", |n: &u64| n.is_multiple_of(2))
        .for_each("sink", |_| {});
    let regions = job.build().unwrap().regions();
    assert_eq!(regions.len(), 3);
    for (i, r) in regions.iter().enumerate() {
        let want: Vec<(String, usize)> = ["src", "double", "even", "sink"]
            .iter()
            .map(|o| (o.to_string(), i))
            .collect();
        assert_eq!(r, &want);
    }
}

#[test]
fn an_all_to_all_exchange_joins_every_instance_and_disjoint_pipelines_stay_apart() {
    // Two independent sub-jobs: one keyed (one region), one forward (two).
    let job = JobBuilder::new("mixed");
    job.default_parallelism(2);
    numbers(&job, "a")
        .key_by(|n: &u64| *n)
        .reduce("sum", |x: &u64, y: &u64| x + y)
        .for_each("a-sink", |_| {});
    numbers(&job, "b")
        .map("b-map", |n: u64| n)
        .for_each("b-sink", |_| {});
    let regions = job.build().unwrap().regions();
    assert_eq!(regions.len(), 3, "{regions:?}");
    assert_eq!(regions[0].len(), 6, "a, sum and a-sink, both instances");
    assert!(regions[0]
        .iter()
        .all(|(o, _)| o.starts_with('a') || o == "sum"));
    assert_eq!(
        regions[1],
        [("b".into(), 0), ("b-map".into(), 0), ("b-sink".into(), 0)]
    );
    assert_eq!(
        regions[2],
        [("b".into(), 1), ("b-map".into(), 1), ("b-sink".into(), 1)]
    );
}

#[test]
fn a_broadcast_side_input_or_a_change_of_parallelism_joins_the_pipelines() {
    let job = JobBuilder::new("broadcast");
    job.default_parallelism(2);
    let side = numbers(&job, "side").parallelism(1).broadcast();
    numbers(&job, "main")
        .connect(&side)
        .process("join", |_| Pass)
        .for_each("sink", |_| {});
    assert_eq!(job.build().unwrap().regions().len(), 1);

    let job = JobBuilder::new("narrowing");
    job.default_parallelism(2);
    numbers(&job, "src")
        .map("one", |n: u64| n)
        .parallelism(1)
        .for_each("sink", |_| {});
    assert_eq!(job.build().unwrap().regions().len(), 1);
}

struct Pass;

impl tandem::CoProcess<u64, u64, u64> for Pass {
    fn process_first(&mut self, r: tandem::Record<u64>, out: &mut tandem::Output<'_, u64>) {
        out.emit(r.value)
    }
    fn process_second(&mut self, _r: tandem::Record<u64>, _out: &mut tandem::Output<'_, u64>) {}
}
