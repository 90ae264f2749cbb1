use super::*;
use crate::plan::{Config, Kind, Spec};
use crate::report::{bars, markdown};
use crate::runs::{Done, Run};

/// A run of `kind` whose report holds `recoveries` (fault ms, recovery ms).
fn done(kind: Kind, recoveries: &[(f64, f64)]) -> (Spec, Done) {
    let rec: Vec<serde_json::Value> = recoveries
        .iter()
        .map(|(at, ms)| {
            serde_json::json!({
                "tuple_id": 7, "fault_at_ms": at, "detect_us": 10, "first_output_us": (ms * 500.0) as u64,
                "caught_up_us": (ms * 1000.0) as u64, "unprovoked": false
            })
        })
        .collect();
    let report = serde_json::from_value(serde_json::json!({
        "records_in": 100, "records_out": 90, "elapsed_s": 1.0, "throughput_rps": 100.0,
        "latency_ns": {"p50": 1000, "p99": 2000, "mean": 1200},
        "cpu_seconds": 1.0, "peak_rss_bytes": 1 << 20, "engine_memory_bytes": 1 << 19,
        "cores": 2, "faults_fired": recoveries.len(), "recovery": rec, "restarts": 0,
        "checkpoints_completed": 0, "standby": null
    }))
    .unwrap();
    let run = Run {
        name: "t".into(),
        flags: Vec::new(),
        estimate_s: 1.0,
        timeline: false,
    };
    (
        Spec { kind, run },
        Done {
            report,
            hlog: None,
            timeline: None,
            wall_s: 1.0,
        },
    )
}

fn crit(op: &str) -> Kind {
    Kind::Criticality {
        operator: op.into(),
    }
}

fn fail(key: &str) -> Kind {
    Kind::Failures {
        config: Config {
            key: key.into(),
            flags: Vec::new(),
        },
    }
}

#[test]
fn the_most_critical_operator_a_standby_can_back_up_is_backed_up() {
    let runs = vec![
        done(crit("flatmap"), &[(1.0, 50.0), (2.0, 70.0)]),
        done(crit("map"), &[(1.0, 90.0), (2.0, 110.0)]),
        done(crit("keyed"), &[(1.0, 10.0)]),
    ];
    let c = criticality(&runs);
    assert_eq!(c.ranking, ["map", "flatmap", "keyed"]);
    // `map` has no standby in `paper`: the next one is backed up.
    assert_eq!(c.backed_up, "flatmap");
    let fm = c.rows.iter().find(|r| r.operator == "flatmap").unwrap();
    assert_eq!((fm.mean_ms, fm.p99_ms), (Some(60.0), Some(70.0)));
    assert_eq!(fm.first_output_mean_ms, Some(30.0));
}

#[test]
fn successive_failures_are_taken_in_fault_order_and_compared_per_failure() {
    // Reported out of order: the table orders by fault time.
    let runs = vec![
        done(
            fail("restart-all-30s"),
            &[(3.0, 300.0), (1.0, 100.0), (2.0, 200.0), (4.0, 400.0)],
        ),
        done(
            fail("bqbs-hot"),
            &[(1.0, 1.0), (2.0, 2.0), (3.0, 1.0), (4.0, 2.0)],
        ),
    ];
    let f = failures(&runs);
    let ra = &f.rows[0];
    assert_eq!(
        ra.per_failure_ms,
        [Some(100.0), Some(200.0), Some(300.0), Some(400.0)]
    );
    assert_eq!(ra.cumulative_ms.last().copied().flatten(), Some(1000.0));
    let v = &f.versus_restart_all[0];
    assert_eq!(v.config, "bqbs-hot");
    assert_eq!(v.speedup_min, 100.0, "failure 1: 100 ms over 1 ms");
    assert!((v.speedup_total - 1000.0 / 6.0).abs() < 1e-9);
    assert_eq!(v.growth, 1.0, "failures 3-4 over 1-2: (1 + 2) / (1 + 2)");
    assert!(flat(v));
    // Growth that is neither within 2× nor within a millisecond is not flat.
    let grows = Versus {
        config: "x".into(),
        speedup_total: 1.0,
        speedup_min: 1.0,
        growth: 5.0,
        growth_ms: 40.0,
    };
    assert!(!flat(&grows));
    assert!(
        flat(&Versus {
            growth_ms: 0.07,
            ..grows
        }),
        "3× of 35 µs is noise"
    );
    // A bar is judged on the figure it names.
    let results = Results {
        profile: "t".into(),
        machine: Machine::describe(None),
        took_s: 0.0,
        criticality: criticality(&[]),
        latency: LatencyTable {
            rate: 1.0,
            repetitions: 1,
            rows: Vec::new(),
            overheads: Vec::new(),
        },
        failures: f,
        resources: Resources {
            rows: Vec::new(),
            window_ms: WINDOW,
        },
        state_sizes: state_sizes(&state_done()),
        runs: Vec::new(),
    };
    let b = bars(&results);
    assert!(b[0].met, "100× at the closest failure meets ≥ 100×");
    assert!(b[1].met, "flat");
    let md = markdown(&results, &[]);
    assert!(md.contains("| failure 4 |"));
    // The state-size axis: each cell's median, and the runs' range.
    assert!(
        md.contains("| 100 MB | bqbs-warm-follow | 3 | 0.50 ms | 0.40 ms–9.00 ms |"),
        "{md}"
    );
}

/// `restore` reports of three runs for each size and strategy of the
/// quick profile (first outputs 0.4, 0.5 and 9 ms).
fn state_done() -> Vec<(plan::StateSpec, crate::runs::RestoreReport)> {
    plan::state_sizes(&plan::Profile::named("quick"))
        .into_iter()
        .map(|s| {
            let runs: Vec<serde_json::Value> = [0.4, 0.5, 9.0]
                .iter()
                .map(|f| {
                    serde_json::json!({"first_output_ms": f, "restore_ms": 0.01,
                        "caught_up_ms": f, "replayed": 100, "insert_s": 1.0, "run_s": 3.0})
                })
                .collect();
            let r = serde_json::json!({"state_mb": s.mb, "keys": s.mb * 1_000_000 / 24,
                "runs": 3, "first_output_ms": 0.5, "restore_ms": 0.01, "detect_ms": 0.1,
                "caught_up_ms": 0.5, "state_bytes": null, "per_run": runs});
            (s, serde_json::from_value(r).unwrap())
        })
        .collect()
}

#[test]
fn medians_and_nearest_rank_quantiles() {
    assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
    assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
    assert_eq!(median(vec![f64::NAN]), None);
    assert_eq!(quantile(vec![1.0, 2.0, 3.0, 4.0], 0.99), Some(4.0));
    assert_eq!(quantile(vec![1.0, 2.0, 3.0, 4.0], 0.5), Some(2.0));
}
