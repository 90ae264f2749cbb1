use super::*;

fn injector(s: &str) -> FaultInjector {
    FaultInjector::builder(&s.parse().unwrap())
        .records(1_000)
        .resolver(|n| TupleId::new((n % 2) as u32, n / 2))
        .build()
        .unwrap()
}

#[test]
fn a_fault_fires_once_on_its_tuple_and_only_in_its_operator() {
    let inj = injector("panic@map:7,stall@map:9:5,cut@sink:3");
    assert!(inj.probe("filter", 0).is_none());
    let mut map = inj.probe("map", 0).unwrap();
    let mut other = inj.probe("map", 1).unwrap();
    assert_eq!(map.before(TupleId::new(0, 7)), ProbeAction::Continue);
    assert!(matches!(
        map.before(TupleId::new(1, 3)),
        ProbeAction::Panic(_)
    ));
    // Fired once, for every instance and every later probe (a restart).
    assert_eq!(other.before(TupleId::new(1, 3)), ProbeAction::Continue);
    assert_eq!(
        inj.probe("map", 0).unwrap().before(TupleId::new(1, 3)),
        ProbeAction::Continue
    );
    assert_eq!(
        map.before(TupleId::new(1, 4)),
        ProbeAction::Stall(Duration::from_millis(5))
    );
    assert_eq!(
        inj.probe("sink", 2).unwrap().before(TupleId::new(1, 1)),
        ProbeAction::CutInput
    );
    assert_eq!(inj.fired(), 3);
    let log = inj.log();
    assert_eq!(log.len(), 3);
    // What a fault fired on prints as a tuple ID, not a raw number.
    assert_eq!(log[0].on, FiredOn::Record(TupleId::new(1, 3)));
    assert_eq!(log[0].on.to_string(), "record 1:3");
    let line = log[0].to_string();
    assert!(line.contains(" on record 1:3 at "), "{line}");
}

#[test]
fn a_burst_fails_successive_records_never_the_same_one_twice() {
    let inj = injector("panic@map:10*3");
    let mut p = inj.probe("map", 0).unwrap();
    let ten = TupleId::new(0, 5);
    assert!(matches!(p.before(ten), ProbeAction::Panic(_)));
    // The replay sees record 10 again: not the burst's second failure.
    assert_eq!(p.before(ten), ProbeAction::Continue);
    assert!(matches!(
        p.before(TupleId::new(0, 3)),
        ProbeAction::Panic(_)
    ));
    assert_eq!(p.before(TupleId::new(0, 3)), ProbeAction::Continue);
    assert!(matches!(
        p.before(TupleId::new(1, 9)),
        ProbeAction::Panic(_)
    ));
    assert_eq!(p.before(TupleId::new(1, 10)), ProbeAction::Continue);
    assert_eq!(inj.fired(), 3);
}

#[test]
fn every_and_spread_expand_over_the_input_and_slow_delays_its_records() {
    let inj = injector("panic@map:%250");
    assert_eq!(inj.armed(), 3); // 250, 500, 750
    let inj = injector("cut@map:~4");
    assert_eq!(inj.armed(), 4); // 200, 400, 600, 800
    let mut p = inj.probe("map", 0).unwrap();
    assert_eq!(p.before(TupleId::new(0, 100)), ProbeAction::CutInput);
    let inj = injector("slow@map:4:50x3");
    let mut p = inj.probe("map", 0).unwrap();
    let d = ProbeAction::Delay(Duration::from_micros(50));
    assert_eq!(p.before(TupleId::new(0, 2)), d);
    assert_eq!(p.before(TupleId::new(0, 3)), d);
    assert_eq!(p.before(TupleId::new(1, 3)), d);
    assert_eq!(p.before(TupleId::new(0, 4)), ProbeAction::Continue);
    assert!(matches!(
        FaultInjector::new(&["panic@map:%5".parse().unwrap()], |n| TupleId::new(0, n)),
        Err(InjectError::NeedsRecords(_))
    ));
    let past = FaultInjector::builder(&"panic@map:1000".parse().unwrap())
        .records(1000)
        .build();
    assert!(matches!(past, Err(InjectError::PastEnd { .. })));
}

#[test]
fn a_faulty_standby_fails_at_its_phase_once() {
    let inj = injector("standby@flatmap:4:during");
    let mut p = inj.probe("flatmap", 1).unwrap();
    assert!(matches!(
        p.before(TupleId::new(0, 2)),
        ProbeAction::Panic(_)
    ));
    assert_eq!(
        inj.takeover("flatmap", 1, TakeoverStage::Claiming),
        ProbeAction::Continue
    );
    assert!(matches!(
        inj.takeover("flatmap", 1, TakeoverStage::Replaying),
        ProbeAction::Panic(_)
    ));
    assert_eq!(
        inj.takeover("flatmap", 1, TakeoverStage::Replaying),
        ProbeAction::Continue
    );
}

#[test]
fn checkpoint_faults_fire_at_their_checkpoint() {
    let inj = injector(
        "ioerror@checkpoint:2:enospc-fsync,crash@checkpoint:3,commit@sink:%2,ioerror@checkpoint:4:eio",
    );
    let s = inj.storage().unwrap();
    let p = Path::new("x");
    assert!(s.write(2, p).is_none());
    assert_eq!(s.fsync(2, p).unwrap().raw_os_error(), Some(28));
    assert!(s.fsync(2, p).is_none());
    assert_eq!(s.before_publish(2), StorageAction::Continue);
    assert_eq!(s.before_publish(3), StorageAction::Crash);
    assert_eq!(s.write(4, p).unwrap().raw_os_error(), Some(5));
    assert!(inj.commit("sink", 0, 1).is_ok());
    assert!(inj.commit("sink", 0, 2).is_err());
    assert!(inj.commit("sink", 1, 2).is_ok(), "once per checkpoint");
    assert!(inj.commit("other", 0, 4).is_ok());
    assert!(inj.commit("sink", 0, 4).is_err());
    let on: Vec<String> = inj.log().iter().map(|f| f.on.to_string()).collect();
    assert_eq!(on[0], "checkpoint 2");
}

#[test]
fn a_schedule_arms_at_most_ten_thousand_faults_in_all() {
    let specs = |n: usize| -> Schedule {
        Schedule {
            faults: (0..n)
                .map(|i| format!("panic@map:{i}").parse().unwrap())
                .collect(),
        }
    };
    assert!(FaultInjector::builder(&specs(10_000)).build().is_ok());
    let e = FaultInjector::builder(&specs(10_001)).build().unwrap_err();
    assert!(
        matches!(e, InjectError::TooManyInAll { specs: 10_001, .. }),
        "{e}"
    );
    // Two specs of 10,000 each: refused without arming the second whole.
    let two = Schedule {
        faults: vec![
            "panic@map:%1".parse().unwrap(),
            "panic@map:%1".parse().unwrap(),
        ],
    };
    let e = FaultInjector::builder(&two)
        .records(10_001)
        .build()
        .unwrap_err();
    assert!(matches!(e, InjectError::TooManyInAll { .. }), "{e}");
}

#[test]
fn commit_fires_at_final_only_at_the_final_commit() {
    use tandem::runtime::probe::ProbeFactory;
    let i = injector("commit@sink:final");
    assert!(i.commit("sink", 0, 1).is_ok());
    assert!(i.commit("sink", 0, 3).is_ok());
    assert!(i.commit("other", 0, tandem::FINAL_EPOCH).is_ok());
    assert!(i.commit("sink", 0, tandem::FINAL_EPOCH).is_err());
    assert!(i.commit("sink", 1, tandem::FINAL_EPOCH).is_ok(), "once");
    // `%K` and `+DUR` name checkpoint ids, never the final commit.
    let every = injector("commit@sink:%3");
    assert!(every.commit("sink", 0, tandem::FINAL_EPOCH).is_ok());
    assert!("panic@map:final".parse::<crate::FaultSpec>().is_err());
}
