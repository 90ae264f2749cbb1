//! Two-input operators as a new user writes them: what the records of the
//! second input are called, whether faults reach them, and tuple IDs that
//! name their source.

mod common;

use common::{cores, quiet_injected_panics};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tandem::runtime::probe::{ProbeAction, ProbeFactory, RecordProbe};
use tandem::{
    CoProcess, IterSource, JobBuilder, Output, Record, RestartStrategy, RuntimeConfig, TupleId,
};

/// Passes both inputs on, noting each record's ID and what
/// `current_record()` said while it was processed.
struct Both(Arc<Mutex<Vec<(u8, TupleId, Option<TupleId>)>>>);

impl CoProcess<u64, u64, u64> for Both {
    fn process_first(&mut self, rec: Record<u64>, out: &mut Output<'_, u64>) {
        let now = tandem::operator::current_record();
        self.0.lock().unwrap().push((1, rec.id, now));
        out.emit(rec.value);
    }
    fn process_second(&mut self, rec: Record<u64>, out: &mut Output<'_, u64>) {
        let now = tandem::operator::current_record();
        self.0.lock().unwrap().push((2, rec.id, now));
        out.emit(rec.value);
    }
}

type Seen = Arc<Mutex<Vec<(u8, TupleId, Option<TupleId>)>>>;

fn orders_and_payments(seen: &Seen) -> JobBuilder {
    let job = JobBuilder::new("two-inputs");
    job.default_parallelism(2);
    let orders = job.source("orders", |i| {
        let me = i.instance as u64;
        IterSource((0..1000u64).filter(move |n| n % 2 == me).map(|n| (n, n)))
    });
    let payments = job
        .source("payments", |_| IterSource((0..500u64).map(|n| (n, n))))
        .parallelism(1);
    let s = Arc::clone(seen);
    orders
        .key_by(|n: &u64| *n)
        .connect(&payments.key_by(|n: &u64| *n * 2))
        .process("join", move |_| Both(Arc::clone(&s)))
        .for_each("sink", |_| {});
    job
}

#[test]
fn two_sources_never_share_a_tuple_id() {
    let seen = Seen::default();
    let job = orders_and_payments(&seen);
    job.build()
        .unwrap()
        .run(&RuntimeConfig::default().cores(cores()))
        .unwrap();
    let seen = seen.lock().unwrap();
    let firsts: BTreeSet<TupleId> = seen.iter().filter(|s| s.0 == 1).map(|s| s.1).collect();
    let seconds: BTreeSet<TupleId> = seen.iter().filter(|s| s.0 == 2).map(|s| s.1).collect();
    assert_eq!(firsts.len(), 1000);
    assert_eq!(seconds.len(), 500);
    assert!(
        firsts.is_disjoint(&seconds),
        "order and payment IDs coincide"
    );
    // The payments' one partition comes after the orders' two.
    assert!(seconds.iter().all(|t| t.partition() == 2), "{seconds:?}");
    assert!(firsts.iter().all(|t| t.partition() < 2));
}

#[test]
fn the_second_inputs_record_is_the_current_record() {
    let seen = Seen::default();
    let job = orders_and_payments(&seen);
    job.build()
        .unwrap()
        .run(&RuntimeConfig::default().cores(cores()))
        .unwrap();
    let seen = seen.lock().unwrap();
    let wrong: Vec<_> = seen.iter().filter(|s| s.2 != Some(s.1)).take(5).collect();
    assert!(
        wrong.is_empty(),
        "current_record() named another record: {wrong:?}"
    );
}

/// Counts the records the probe of `join` is asked about, and panics
/// once at `panic_at`.
#[derive(Clone)]
struct Probes {
    asked: Arc<Mutex<Vec<TupleId>>>,
    panic_at: TupleId,
    fired: Arc<std::sync::atomic::AtomicBool>,
}

struct Probe(Probes);

impl RecordProbe for Probe {
    fn before(&mut self, id: TupleId) -> ProbeAction {
        self.0.asked.lock().unwrap().push(id);
        if id == self.0.panic_at && !self.0.fired.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return ProbeAction::Panic("injected at a payment".into());
        }
        ProbeAction::Continue
    }
}

impl ProbeFactory for Probes {
    fn probe(&self, operator: &str, _instance: usize) -> Option<Box<dyn RecordProbe>> {
        (operator == "join").then(|| Box::new(Probe(self.clone())) as Box<dyn RecordProbe>)
    }
}

#[test]
fn faults_reach_the_second_input_and_are_reported_against_its_record() {
    quiet_injected_panics();
    let seen = Seen::default();
    let job = orders_and_payments(&seen);
    // Payment 123: the payments source's partition is 2.
    let payment = TupleId::new(2, 123);
    let probes = Probes {
        asked: Arc::default(),
        panic_at: payment,
        fired: Arc::default(),
    };
    let cfg = RuntimeConfig::default()
        .cores(cores())
        .restart(RestartStrategy::FixedDelay {
            attempts: 3,
            delay: Duration::ZERO,
        })
        .probes(Arc::new(probes.clone()));
    let report = job.build().unwrap().run(&cfg).unwrap();
    let asked: BTreeSet<TupleId> = probes.asked.lock().unwrap().iter().copied().collect();
    assert_eq!(
        asked.len(),
        1500,
        "the probe is asked about every record of both inputs"
    );
    assert_eq!(report.recovery.len(), 1);
    let r = &report.recovery[0];
    assert_eq!(r.operator, "join");
    assert_eq!(
        r.tuple_id,
        Some(payment),
        "the failure names the payment it happened on"
    );
}
