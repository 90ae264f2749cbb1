//! `#[derive(Codec)]`: a record struct of six fields (an enum among them)
//! round-trips, refuses every truncation of its bytes, and crosses a
//! standby's buffer queue — encoded — through a takeover, the output the
//! same as a clean run's.

mod common;

use common::{cores, quiet_injected_panics, Faults};
use std::sync::{Arc, Mutex};
use tandem::runtime::probe::ProbeAction;
use tandem::standby::codec::Codec;
use tandem::{IterSource, JobBuilder, RecoveryKind, RuntimeConfig, StandbyConfig, TupleId};

#[derive(Clone, Debug, PartialEq, Codec)]
struct Order {
    id: u64,
    customer: String,
    items: u32,
    cents: i64,
    shipping: Shipping,
    note: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Codec)]
enum Shipping {
    Pickup,
    Parcel(u8),
    Freight { pallets: u16, express: bool },
}

/// A tuple struct and a generic one derive too.
#[derive(Clone, Debug, PartialEq, Codec)]
struct Pair<T>(
    T,
    (u8, u16, u32, u64, i8, i16, i32, i64, f32, f64, bool, char),
);

fn order(n: u64) -> Order {
    Order {
        id: n,
        customer: format!("c{}", n % 37),
        items: (n % 5) as u32 + 1,
        cents: (n as i64 * 7919) % 100_000 - 5_000,
        shipping: match n % 3 {
            0 => Shipping::Pickup,
            1 => Shipping::Parcel((n % 250) as u8),
            _ => Shipping::Freight {
                pallets: (n % 9) as u16,
                express: n.is_multiple_of(2),
            },
        },
        note: n.is_multiple_of(4).then(|| format!("note ✓ {n}")),
    }
}

#[test]
fn a_derived_codec_round_trips_and_refuses_every_truncation() {
    for n in 0..200 {
        let o = order(n);
        let mut b = Vec::new();
        o.encode(&mut b);
        b.push(0xAB);
        let (back, rest) = Order::decode(&b).unwrap();
        assert_eq!(back, o);
        assert_eq!(rest, [0xAB]);
        for cut in 0..b.len() - 1 {
            assert!(Order::decode(&b[..cut]).is_err(), "order {n} cut at {cut}");
        }
    }
    let p = Pair(
        order(3),
        (1, 2, 3, 4, -5, -6, -7, -8, 9.5, -10.25, true, 'é'),
    );
    let mut b = Vec::new();
    p.encode(&mut b);
    assert_eq!(Pair::<Order>::decode(&b).unwrap().0, p);
    // A tag that names no variant is an error naming the type.
    let e = Shipping::decode(&[7]).unwrap_err().to_string();
    assert!(e.contains("7 is not a variant of Shipping"), "{e}");
}

fn run(cfg: &RuntimeConfig) -> (Vec<String>, tandem::JobReport) {
    let out = Arc::new(Mutex::new(Vec::new()));
    let job = JobBuilder::new("derived");
    job.default_parallelism(2);
    let o = Arc::clone(&out);
    job.source("numbers", |i| {
        let me = i.instance as u64;
        IterSource((0..3_000u64).map(move |n| (n * 2 + me, n)))
    })
    .map("order", order)
    .standby()
    .map("price", |o: Order| {
        let ship = match o.shipping {
            Shipping::Pickup => 0,
            Shipping::Parcel(w) => i64::from(w) * 10,
            Shipping::Freight { pallets, express } => {
                i64::from(pallets) * 1000 + if express { 500 } else { 0 }
            }
        };
        format!(
            "{} {} {} {} {:?}",
            o.id,
            o.customer,
            o.items,
            o.cents + ship,
            o.note
        )
    })
    .for_each("collect", move |r| o.lock().unwrap().push(r.value));
    let report = job.build().unwrap().run(cfg).unwrap();
    let mut v = std::mem::take(&mut *out.lock().unwrap());
    v.sort();
    (v, report)
}

#[test]
fn a_six_field_record_with_a_derived_codec_crosses_a_standbys_queue_through_a_takeover() {
    quiet_injected_panics();
    let (clean, _) = run(&RuntimeConfig::default().cores(cores()));
    assert_eq!(clean.len(), 6_000);
    let faults = Faults::new(vec![
        (
            "price",
            TupleId::new(0, 700),
            ProbeAction::Panic("injected".into()),
        ),
        (
            "price",
            TupleId::new(1, 1_900),
            ProbeAction::Panic("injected".into()),
        ),
    ]);
    let cfg = RuntimeConfig::default()
        .cores(cores())
        .standby(StandbyConfig {
            // The records cross the queue encoded, by the derived codec.
            encoded_queues: true,
            replay_sources: false,
            ..StandbyConfig::default()
        })
        .probes(Arc::new(faults.clone()));
    let (got, report) = run(&cfg);
    assert!(faults.all_fired());
    let takeovers = report
        .recovery
        .iter()
        .filter(|r| r.kind == RecoveryKind::Takeover && r.operator == "price" && !r.unprovoked)
        .count();
    assert_eq!(takeovers, 2, "{:?}", report.recovery);
    assert!(got == clean, "the output differs from the clean run's");
}
