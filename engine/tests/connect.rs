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
struct Both(Seen);

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

#[test]
fn a_union_passes_every_record_of_every_input_once() {
    let job = JobBuilder::new("union");
    job.default_parallelism(2);
    let a = job.source("a", |i| {
        let me = i.instance as u64;
        IterSource((0..1000u64).filter(move |n| n % 2 == me).map(|n| (n, n)))
    });
    let b = job
        .source("b", |_| IterSource((1000..1500u64).map(|n| (n, n))))
        .parallelism(1);
    let c = job
        .source("c", |_| IterSource((1500..1600u64).map(|n| (n, n))))
        .parallelism(1);
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = Arc::clone(&got);
    a.union("all", &[&b.rebalance(), &c])
        .for_each("sink", move |r| g.lock().unwrap().push(r.value));
    job.build()
        .unwrap()
        .run(&RuntimeConfig::default().cores(cores()))
        .unwrap();
    let mut got = std::mem::take(&mut *got.lock().unwrap());
    got.sort();
    assert_eq!(got, (0..1600).collect::<Vec<u64>>());
}

/// Orders joined with payments by order ID, state kept by hand (and
/// snapshotted): emits `order amount` once both have arrived.
#[derive(Default)]
struct Join {
    orders: std::collections::BTreeMap<u64, u64>,
    paid: BTreeSet<u64>,
}

impl CoProcess<(u64, u64), u64, String> for Join {
    fn process_first(&mut self, r: Record<(u64, u64)>, out: &mut Output<'_, String>) {
        let (order, amount) = r.value;
        if self.paid.remove(&order) {
            out.emit(format!("{order} {amount}"));
        } else {
            self.orders.insert(order, amount);
        }
    }
    fn process_second(&mut self, r: Record<u64>, out: &mut Output<'_, String>) {
        match self.orders.remove(&r.value) {
            Some(amount) => out.emit(format!("{} {amount}", r.value)),
            None => {
                self.paid.insert(r.value);
            }
        }
    }
    fn on_end(&mut self, out: &mut Output<'_, String>) {
        for (o, a) in std::mem::take(&mut self.orders) {
            out.emit(format!("{o} {a} unpaid"));
        }
    }
    fn snapshot_state(
        &mut self,
    ) -> Result<Option<tandem::checkpoint::SnapshotBytes>, tandem::CheckpointError> {
        let orders: Vec<(u64, u64)> = self.orders.iter().map(|(k, v)| (*k, *v)).collect();
        let paid: Vec<u64> = self.paid.iter().copied().collect();
        tandem::checkpoint::serialize(&(orders, paid), 1024).map(Some)
    }
    fn restore_state(&mut self, payload: &[u8]) -> Result<(), tandem::CheckpointError> {
        let a = tandem::checkpoint::access::<(Vec<(u64, u64)>, Vec<u64>)>(payload)?;
        self.orders =
            a.0.iter()
                .map(|p| (p.0.to_native(), p.1.to_native()))
                .collect();
        self.paid = a.1.iter().map(|p| p.to_native()).collect();
        Ok(())
    }
}

fn join_run(n: u64, cfg: &RuntimeConfig) -> (Vec<String>, tandem::JobReport) {
    let job = JobBuilder::new("orders-payments");
    job.default_parallelism(2);
    let orders = job.source("orders", move |i| {
        let me = i.instance as u64;
        IterSource(
            (0..n)
                .filter(move |k| k % 2 == me)
                .map(|k| ((k, k * 3 % 101), k)),
        )
    });
    // Payments for three orders in four, late by ~50 orders.
    let payments = job
        .source("payments", move |_| {
            IterSource((0..n).filter(|k| k % 4 != 3).map(|k| (k, k + 50)))
        })
        .parallelism(1);
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = Arc::clone(&got);
    orders
        .key_by(|o: &(u64, u64)| o.0)
        .connect(&payments.key_by(|p: &u64| *p))
        .standby()
        .process("join", |_| Join::default())
        .for_each("sink", move |r| g.lock().unwrap().push(r.value));
    let report = job.build().unwrap().run(cfg).unwrap();
    let mut got = std::mem::take(&mut *got.lock().unwrap());
    got.sort();
    (got, report)
}

#[test]
fn a_two_input_operator_with_a_standby_is_exact_after_takeovers() {
    quiet_injected_panics();
    let n = 20_000;
    let (clean, _) = join_run(n, &RuntimeConfig::default().cores(cores()));
    assert_eq!(clean.len() as u64, n, "every order once, paid or not");
    for mode in [tandem::StandbyMode::Warm, tandem::StandbyMode::Hot] {
        // Panics on orders and on payments (the payments' partition is 2).
        let faults = common::Faults::new(
            [
                TupleId::new(0, 2000),
                TupleId::new(2, 4000),
                TupleId::new(1, 7000),
                TupleId::new(2, 12000),
            ]
            .into_iter()
            .map(|t| ("join", t, ProbeAction::Panic("injected".into())))
            .collect(),
        );
        let cfg = RuntimeConfig::default()
            .cores(cores())
            .standby(tandem::StandbyConfig {
                mode,
                snapshot_interval: Duration::from_millis(2),
                ..tandem::StandbyConfig::default()
            })
            .probes(Arc::new(faults.clone()));
        let (got, report) = join_run(n, &cfg);
        assert!(faults.all_fired(), "{mode:?}: every fault fired");
        assert!(
            report
                .recovery
                .iter()
                .all(|r| r.kind == tandem::RecoveryKind::Takeover),
            "{mode:?}: {:?}",
            report.recovery
        );
        assert!(report.recovery.len() >= 4);
        assert_eq!(clean, got, "{mode:?}");
    }
}

#[test]
fn marking_an_input_of_a_two_input_operator_says_how_to_give_it_a_standby() {
    let job = JobBuilder::new("refused");
    let a = job.source("a", |_| IterSource((0..10u64).map(|n| (n, n))));
    let b = job.source("b", |_| IterSource((0..10u64).map(|n| (n, n))));
    a.standby()
        .connect(&b)
        .process("both", |_| Both(Arc::default()))
        .for_each("sink", |_| {});
    let err = job.build().err().expect("refused").to_string();
    assert!(err.contains("connect(&b).standby()"), "{err}");
}
