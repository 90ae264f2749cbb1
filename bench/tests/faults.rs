//! Faults injected into the paper pipeline through the engine's probe seam.
//! Without recovery a stall leaves the output unchanged and a panic or a cut
//! channel ends the job with an error naming the operator and instance;
//! with restart-all every fault kind, alone or four in a row, ends with
//! exactly the fault-free output.

use std::sync::Arc;
use tandem::{JobError, RuntimeConfig};
use tandem_bench::paper::{self, Input, PaperOptions};
use tandem_fault_inject::{FaultInjector, FaultSpec};

const RECORDS: u64 = 20_000;
const P: usize = 2;

fn run(
    input: &Arc<Input>,
    faults: &[&str],
    out: Option<std::path::PathBuf>,
) -> Result<(), JobError> {
    let specs: Vec<FaultSpec> = faults.iter().map(|f| f.parse().unwrap()).collect();
    let opts = PaperOptions {
        parallelism: P,
        rate: None,
        output: out.clone(),
        output_mode: paper::OutputMode::Direct,
        standby: Vec::new(),
    };
    let (job, _) = paper::build_job(Arc::clone(input), &opts).unwrap();
    let injector = FaultInjector::new(&specs, |n| paper::tuple_of(P, n)).unwrap();
    let cores = tandem::sys::affinity::available_cores().len().min(2);
    let cfg = RuntimeConfig::default()
        .cores(cores)
        .probes(Arc::new(injector.clone()));
    let result = job.run(&cfg).map(|_| ());
    if let Some(o) = &out {
        if result.is_ok() {
            paper::merge_output(o, P, paper::OutputMode::Direct).unwrap();
        }
    }
    assert!(
        injector.status().iter().all(|(_, fired)| *fired > 0),
        "every fault fired: {:?}",
        injector.status()
    );
    result
}

fn sorted_lines(path: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    v.sort_unstable();
    v
}

#[test]
fn a_stalled_operator_delays_but_does_not_change_the_output() {
    let dir = std::env::temp_dir().join(format!("tandem-faults-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = Arc::new(Input::generate(RECORDS, 4, 0, 1));
    run(&input, &[], Some(dir.join("clean.jsonl"))).unwrap();
    run(
        &input,
        &["stall@flatmap:15000:30", "stall@keyed:3:10"],
        Some(dir.join("stalled.jsonl")),
    )
    .unwrap();
    assert_eq!(
        sorted_lines(&dir.join("clean.jsonl")),
        sorted_lines(&dir.join("stalled.jsonl"))
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn an_injected_panic_ends_the_job_naming_operator_and_instance() {
    let input = Arc::new(Input::generate(RECORDS, 4, 0, 1));
    // Record 15001 lives in partition 1 (odd records).
    match run(&input, &["panic@flatmap:15001"], None) {
        Err(JobError::OperatorPanicked {
            operator, instance, ..
        }) => {
            assert_eq!(operator, "flatmap");
            assert_eq!(instance, 1);
        }
        other => panic!("expected a panic error, got {other:?}"),
    }
}

#[test]
fn a_cut_input_channel_ends_the_job_naming_the_operator() {
    let input = Arc::new(Input::generate(RECORDS, 4, 0, 1));
    match run(&input, &["cut@map:42"], None) {
        Err(JobError::ChannelCut { operator, instance }) => {
            assert_eq!(operator, "map");
            assert_eq!(instance, 0);
        }
        other => panic!("expected a cut channel, got {other:?}"),
    }
}

/// Runs the paper job with restart-all recovery, 10 ms checkpoints and
/// transactional output; returns the sorted output lines and the report.
fn run_recovering(
    input: &Arc<Input>,
    faults: &[&str],
    dir: &std::path::Path,
) -> (Vec<String>, tandem::JobReport) {
    let (lines, report, _) = run_recovering_counted(input, faults, dir, true);
    (lines, report)
}

/// As [`run_recovering`], writing the output (`write`) or only counting
/// it; also the sinks' counts of record and summary lines.
fn run_recovering_counted(
    input: &Arc<Input>,
    faults: &[&str],
    dir: &std::path::Path,
    write: bool,
) -> (Vec<String>, tandem::JobReport, (u64, u64)) {
    use std::sync::atomic::Ordering;
    use std::time::Duration;
    let specs: Vec<FaultSpec> = faults.iter().map(|f| f.parse().unwrap()).collect();
    let out = dir.join("out.jsonl");
    let opts = PaperOptions {
        parallelism: P,
        rate: Some(100_000.0),
        output: write.then(|| out.clone()),
        output_mode: paper::OutputMode::Transactional,
        standby: Vec::new(),
    };
    let (job, counts) = paper::build_job(Arc::clone(input), &opts).unwrap();
    let injector = FaultInjector::new(&specs, |n| paper::tuple_of(P, n)).unwrap();
    let cores = tandem::sys::affinity::available_cores().len().min(2);
    let mut cp = tandem::CheckpointConfig::every(Duration::from_millis(10));
    cp.dir = Some(dir.join("checkpoints"));
    let cfg = RuntimeConfig::default()
        .cores(cores)
        .pin(false)
        .checkpoint(cp)
        .restart(tandem::RestartStrategy::FixedDelay {
            attempts: 5,
            delay: Duration::ZERO,
        })
        .heartbeat_timeout(Duration::from_millis(100))
        .probes(Arc::new(injector.clone()));
    let report = job.run(&cfg).unwrap();
    assert!(injector.status().iter().all(|(_, fired)| *fired > 0));
    let counted = (
        counts.records.load(Ordering::Relaxed),
        counts.summaries.load(Ordering::Relaxed),
    );
    if !write {
        return (Vec::new(), report, counted);
    }
    paper::merge_output(&out, P, paper::OutputMode::Transactional).unwrap();
    (sorted_lines(&out), report, counted)
}

#[test]
fn the_lines_counted_are_the_committed_output_with_or_without_an_output_file() {
    let dir = std::env::temp_dir().join(format!("tandem-counted-{}", std::process::id()));
    let input = Arc::new(Input::generate(RECORDS, 9, 0, 1));
    let _ = std::fs::remove_dir_all(&dir);
    let faults = ["panic@keyed:9001", "panic@flatmap:15000"];
    let mut seen = Vec::new();
    for (tag, faults, write) in [
        ("clean", &[][..], true),
        ("written", &faults[..], true),
        ("counted", &faults[..], false),
    ] {
        let d = dir.join(tag);
        std::fs::create_dir_all(&d).unwrap();
        let (lines, report, counted) = run_recovering_counted(&input, faults, &d, write);
        assert!(report.restarts as usize >= faults.len(), "{tag}");
        if write {
            let records = lines
                .iter()
                .filter(|l| l.starts_with("{\"type\":\"record\""))
                .count() as u64;
            assert_eq!(
                counted,
                (records, lines.len() as u64 - records),
                "{tag}: the counts are the file's lines"
            );
        }
        seen.push(counted);
    }
    // What an attempt wrote after its last completed checkpoint is not
    // output: it is never counted, file or no file.
    assert!(seen.iter().all(|&c| c == seen[0]), "{seen:?}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn restart_all_recovers_every_fault_kind_to_the_clean_output() {
    let dir = std::env::temp_dir().join(format!("tandem-restart-all-{}", std::process::id()));
    let input = Arc::new(Input::generate(RECORDS, 7, 0, 1));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("clean")).unwrap();
    let (clean, _) = run_recovering(&input, &[], &dir.join("clean"));
    let cases: [&[&str]; 4] = [
        &["panic@flatmap:12001"],
        &["stall@map:9000:400"],
        &["cut@keyed:14000"],
        &[
            "panic@flatmap:3000",
            "panic@keyed:7001",
            "cut@filter:11000",
            "panic@sink:15001",
        ],
    ];
    for (i, faults) in cases.iter().enumerate() {
        let d = dir.join(format!("case-{i}"));
        std::fs::create_dir_all(&d).unwrap();
        let (lines, report) = run_recovering(&input, faults, &d);
        // One restart per fault; a heavily loaded machine may add one for
        // a worker it starved past the heartbeat (recovered all the same).
        assert!(report.restarts as usize >= faults.len(), "{faults:?}");
        assert_eq!(report.recovery.len(), report.restarts as usize);
        assert_eq!(report.duplicates_emitted, 0);
        assert_eq!(lines.len(), clean.len(), "{faults:?}: line count");
        assert!(
            lines == clean,
            "{faults:?}: output differs from the clean run"
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// Runs the paper job with standbys for `standby` (BQBS) at `rate`
/// (`None`: full rate); returns the sorted output lines and the report.
fn run_standby(
    input: &Arc<Input>,
    standby: &[&str],
    mode: tandem::StandbyMode,
    heartbeat_ms: u64,
    rate: Option<f64>,
    faults: &[&str],
    out: &std::path::Path,
) -> (Vec<String>, tandem::JobReport) {
    let specs: Vec<FaultSpec> = faults.iter().map(|f| f.parse().unwrap()).collect();
    let opts = PaperOptions {
        parallelism: P,
        rate,
        output: Some(out.to_path_buf()),
        output_mode: paper::OutputMode::Direct,
        standby: standby.iter().map(|s| s.to_string()).collect(),
    };
    let (job, _) = paper::build_job(Arc::clone(input), &opts).unwrap();
    let injector = FaultInjector::new(&specs, |n| paper::tuple_of(P, n)).unwrap();
    let cores = tandem::sys::affinity::available_cores().len().min(2);
    let cfg = RuntimeConfig::default()
        .cores(cores)
        .probes(Arc::new(injector.clone()))
        .standby(tandem::StandbyConfig {
            mode,
            heartbeat_timeout: std::time::Duration::from_millis(heartbeat_ms),
            snapshot_interval: std::time::Duration::from_millis(10),
            queue_memory: 4 << 20,
            replay_sources: true,
            encoded_queues: false,
            ..Default::default()
        });
    let report = job
        .run(&cfg)
        .unwrap_or_else(|e| panic!("{standby:?} {mode:?} {heartbeat_ms} ms {faults:?}: {e}"));
    paper::merge_output(out, P, paper::OutputMode::Direct).unwrap();
    assert!(
        injector.status().iter().all(|(_, fired)| *fired > 0),
        "every fault fired: {:?}",
        injector.status()
    );
    (sorted_lines(out), report)
}

fn clean_standby_run(input: &Arc<Input>, dir: &std::path::Path) -> Vec<String> {
    run_standby(
        input,
        &[],
        tandem::StandbyMode::Warm,
        5,
        None,
        &[],
        &dir.join("clean.jsonl"),
    )
    .0
}

#[test]
fn bqbs_takes_over_every_fault_kind_with_exactly_the_clean_output() {
    tandem_fault_inject::quiet_injected_panics();
    let dir = std::env::temp_dir().join(format!("tandem-bqbs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = Arc::new(Input::generate(RECORDS, 6, 0, 1));
    let clean = clean_standby_run(&input, &dir);
    let cases: [(&[&str], tandem::StandbyMode, &[&str]); 5] = [
        (
            &["flatmap"],
            tandem::StandbyMode::Warm,
            &["panic@flatmap:9000"],
        ),
        (
            &["flatmap"],
            tandem::StandbyMode::Hot,
            &["cut@flatmap:9001"],
        ),
        (
            &["flatmap", "keyed"],
            tandem::StandbyMode::Warm,
            &["stall@keyed:8000:100", "panic@flatmap:12000"],
        ),
        (
            &["keyed"],
            tandem::StandbyMode::Hot,
            &["panic@keyed:7000", "cut@keyed:11000"],
        ),
        (
            &["flatmap"],
            tandem::StandbyMode::Warm,
            &[
                "panic@flatmap:4000",
                "panic@flatmap:8000",
                "panic@flatmap:12000",
                "panic@flatmap:16000",
            ],
        ),
    ];
    for (i, (standby, mode, faults)) in cases.iter().enumerate() {
        let out = dir.join(format!("bqbs-{i}.jsonl"));
        let (got, rep) = run_standby(&input, standby, *mode, 20, Some(200_000.0), faults, &out);
        assert_eq!(got.len(), clean.len(), "case {i} {faults:?}: line count");
        assert!(
            got == clean,
            "case {i} {faults:?}: output differs from the clean run"
        );
        assert_eq!(rep.restarts, 0, "case {i}: a takeover is not a restart");
        // Each injected fault yields exactly one recovery record, naming
        // its record.
        let attributed = rep.recovery.iter().filter(|r| r.tuple_id.is_some()).count();
        assert_eq!(attributed, faults.len(), "case {i}: {:?}", rep.recovery);
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// The paper pipeline at full rate, for every standby set the `paper`
/// binary offers, warm and hot, at a 1 ms and a 5 ms heartbeat, without
/// and with a panic, a stall and a cut: always exactly the clean output.
#[test]
fn bqbs_at_full_rate_matches_the_clean_run_for_every_standby_set_mode_and_heartbeat() {
    tandem_fault_inject::quiet_injected_panics();
    let dir = std::env::temp_dir().join(format!("tandem-bqbs-full-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = Arc::new(Input::generate(RECORDS, 8, 0, 1));
    let clean = clean_standby_run(&input, &dir);
    let sets: [&[&str]; 4] = [&["flatmap"], &["keyed"], &["filter"], &["flatmap", "keyed"]];
    for standby in sets {
        for mode in [tandem::StandbyMode::Warm, tandem::StandbyMode::Hot] {
            for hb in [1, 5] {
                let first = standby[0];
                let last = standby[standby.len() - 1];
                let faults = [
                    format!("panic@{first}:5000"),
                    format!("stall@{last}:10000:{}", 10 * hb),
                    format!("cut@{first}:15000"),
                ];
                let faults: Vec<&str> = faults.iter().map(String::as_str).collect();
                for f in [&[][..], &faults[..]] {
                    let out = dir.join("full.jsonl");
                    let (got, rep) = run_standby(&input, standby, mode, hb, None, f, &out);
                    assert!(
                        got == clean,
                        "{standby:?} {mode:?} {hb} ms {f:?}: {} lines, clean {}",
                        got.len(),
                        clean.len()
                    );
                    assert_eq!(rep.restarts, 0);
                }
            }
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}
