use super::*;
use crate::plan::{Config, Kind, Spec};
use crate::report::{bars, markdown};
use crate::runs::{Done, Run};

/// A run of `kind` whose report holds `recoveries` (fault ms, recovery ms).
fn done(kind: Kind, recoveries: &[(f64, f64)]) -> (Spec, Done) {
    done_with(kind, recoveries, &[])
}

/// As [`done`], with recoveries no fault explains too (fault ms, first
/// output ms).
fn done_with(kind: Kind, recoveries: &[(f64, f64)], unprovoked: &[(f64, f64)]) -> (Spec, Done) {
    let mut rec: Vec<serde_json::Value> = recoveries
        .iter()
        .map(|(at, ms)| {
            serde_json::json!({
                "tuple_id": 7, "fault_at_ms": at, "detect_us": 10, "first_output_us": (ms * 500.0) as u64,
                "caught_up_us": (ms * 1000.0) as u64, "unprovoked": false, "reason": "injected"
            })
        })
        .collect();
    rec.extend(unprovoked.iter().map(|(at, ms)| {
        serde_json::json!({
            "tuple_id": null, "fault_at_ms": at, "detect_us": 10, "first_output_us": (ms * 1000.0) as u64,
            "caught_up_us": null, "unprovoked": true, "reason": "stall"
        })
    }));
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
            host: Default::default(),
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

/// `n` recoveries around `ms` (±1 ms), a second apart.
fn around(ms: f64, n: usize) -> Vec<(f64, f64)> {
    (0..n)
        .map(|i| (i as f64 * 1000.0, ms + if i % 2 == 0 { 1.0 } else { -1.0 }))
        .collect()
}

#[test]
fn the_clearly_most_critical_operator_a_standby_can_back_up_is_backed_up() {
    let runs = vec![
        done(crit("flatmap"), &around(50.0, 10)),
        done(crit("map"), &around(200.0, 10)),
        done(crit("keyed"), &around(120.0, 10)),
        done(crit("filter"), &around(20.0, 10)),
    ];
    let c = criticality(&runs);
    assert_eq!(c.ranking, ["map", "keyed", "flatmap", "filter"]);
    // `map` has no standby in `paper`: of those that have one, keyed's
    // interval lies above the others'.
    assert!(c.clear, "{}", c.why);
    assert_eq!(c.backed_up, "keyed");
}

#[test]
fn overlapping_intervals_back_up_the_papers_choice_and_say_so() {
    // keyed's mean is the highest, but 3 faults spread this wide say
    // nothing: the paper's choice, named.
    let runs = vec![
        done(crit("flatmap"), &[(1.0, 50.0), (2.0, 400.0), (3.0, 900.0)]),
        done(crit("keyed"), &[(1.0, 100.0), (2.0, 500.0), (3.0, 950.0)]),
        done(crit("filter"), &[(1.0, 30.0), (2.0, 600.0), (3.0, 700.0)]),
    ];
    let c = criticality(&runs);
    assert_eq!(c.ranking[0], "keyed");
    assert!(!c.clear);
    assert_eq!(c.backed_up, PAPER_CHOICE);
    assert!(
        c.why.contains("No operator is clearly most critical"),
        "{}",
        c.why
    );
}

#[test]
fn criticality_averages_injected_recoveries_only_and_counts_the_others() {
    let runs = vec![done_with(
        crit("flatmap"),
        &[(1.0, 50.0), (2.0, 70.0)],
        // Slow recoveries no fault explains: not in the figures.
        &[(5.0, 900.0), (6.0, 800.0)],
    )];
    let c = criticality(&runs);
    let fm = &c.rows[0];
    assert_eq!((fm.recoveries, fm.unprovoked), (2, 2));
    assert_eq!((fm.mean_ms, fm.max_ms), (Some(60.0), Some(70.0)));
    assert_eq!(fm.first_output_mean_ms, Some(30.0), "injected ones only");
}

#[test]
fn a_figure_within_its_noise_band_of_the_bar_is_within_noise() {
    let under = |runs: &[f64], noise: f64| Verdict::judge(runs, 8.0, false, false, noise);
    assert_eq!(under(&[3.0, 4.0, 5.0], 0.0), Verdict::Met);
    assert_eq!(under(&[13.0, 14.0, 15.0], 0.0), Verdict::NotMet);
    // Above the bar, but by less than the runs' own range.
    assert_eq!(under(&[9.0, 11.0, 13.0], 0.0), Verdict::WithinNoise);
    // ... or than the baseline's: its runs were 4 points apart.
    assert_eq!(under(&[10.5, 11.0, 11.5], 4.0), Verdict::WithinNoise);
    assert_eq!(under(&[10.5, 11.0, 11.5], 0.0), Verdict::NotMet);
    // At least a quarter of the bar: 9 is within 2 of 8.
    assert_eq!(under(&[9.0], 0.0).met(), None);
    assert_eq!(under(&[], 0.0), Verdict::NotMet);
    // Ratios on a log scale: 150× against ≥ 100× is met, 110× is not
    // clear.
    let ratio = |runs: &[f64]| Verdict::judge(runs, 100.0, true, true, 0.0);
    assert_eq!(ratio(&[150.0, 160.0, 170.0]), Verdict::Met);
    assert_eq!(ratio(&[105.0, 110.0, 115.0]), Verdict::WithinNoise);
    assert_eq!(Verdict::Met.either(Verdict::NotMet), Verdict::Met);
    assert_eq!(
        Verdict::NotMet.either(Verdict::WithinNoise),
        Verdict::WithinNoise
    );
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
    assert_eq!(v.speedup_min_runs, [100.0], "one run of each");
    // A bar is judged on the figure it names.
    let mut results = Results {
        profile: "t".into(),
        machine: Machine::describe(None),
        took_s: 0.0,
        backed_up: "flatmap".into(),
        verdicts: Vec::new(),
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
    assert_eq!(
        b[0].verdict,
        Verdict::WithinNoise,
        "100× at the closest failure is at the bar ≥ 100×: within noise"
    );
    assert_eq!(b[1].verdict, Verdict::Met, "flat");
    results.verdicts = b;
    let json = serde_json::to_value(&results).unwrap();
    assert_eq!(json["backed_up"], "flatmap");
    assert_eq!(json["verdicts"][0]["met"], serde_json::Value::Null);
    assert_eq!(json["verdicts"][1]["met"], true);
    assert_eq!(json["verdicts"][0]["value"], 100.0);
    assert!(json["verdicts"][0]["name"]
        .as_str()
        .unwrap()
        .contains("restart-all"));
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
